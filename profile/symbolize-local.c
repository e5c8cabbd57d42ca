/* profile/symbolize-local.c - see symbolize-local.h. */
#include "profile/symbolize-local.h"

#include "profile/libs.h"
#include "profile/symbols.h"

static int resolve_local(void *userdata, const struct prof_frame_request *requests, size_t count,
                         struct prof_frame_result *results)
{
    struct prof_symbols *symbols = userdata;

    for (size_t i = 0; i < count; i++) {
        const struct prof_lib *lib = requests[i].lib;
        struct prof_symbol sym;

        results[i] = (struct prof_frame_result){0};
        /* A module that cannot be read leaves its frames without a function: the profile
         * writer names them "<module>+0x<offset>" (gecko.h). The vdso has no file: its
         * names come from memory. */
        if (!lib)
            continue;
        if (!lib->path) {
            results[i].function = prof_vdso_function(requests[i].vaddr);
            continue;
        }
        if (prof_symbols_resolve(symbols, lib->path, lib->build_id, lib->build_id_len,
                                 requests[i].vaddr, &sym) == 0) {
            results[i].function = sym.function;
            results[i].file = sym.file;
            results[i].line = sym.line;
        }
    }
    return 0;
}

struct prof_symbolizer prof_symbolizer_local(struct prof_symbols *symbols)
{
    return (struct prof_symbolizer){resolve_local, symbols};
}
