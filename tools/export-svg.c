/* tools/export-svg.c - `fleetprof export --format svg`: a flame graph of a profile in one
 * self-contained SVG file (see export-svg.h).
 *
 * The fleet's stacks are merged by path into one tree: the whole file at the bottom, then a
 * process ("name (pid)"), a thread, and its frames from the root up. Each node is a box as
 * wide as its weight (CPU time, or samples), children sorted by weight, heaviest first. Boxes
 * narrower than MIN_PX are not drawn (their weight stays in their parent's box). The page's
 * script, inline like its style, zooms on a click and highlights a search; without scripts
 * the graph still reads (labels are cut to fit when written).
 */
#include "tools/export-svg.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "common/hash.h"
#include "json/reader.h"
#include "tools/idmap.h"
#include "tools/profile-stacks.h"

#define WIDTH_PX  1200.0
#define PAD_PX    10.0
#define ROW_PX    16.0
#define TOP_PX    40.0 /* the title, search and reset buttons */
#define MIN_PX    0.1
#define CHAR_PX   7.2 /* 12 px monospace */
#define ROOT_FUNC UINT32_MAX

struct svg_node {
    uint32_t func;   /* pstack function id; ROOT_FUNC for the root */
    uint32_t parent; /* node index; 0 for the root itself */
    uint32_t depth;
    uint64_t self, total;
    uint32_t first_child, next_sibling; /* node index + 1; 0: none */
    double x;                           /* in weight units, from the root's left edge */
};

struct svg_builder {
    const struct json_doc *doc;
    bool by_samples;
    struct pstack_funcs funcs;
    struct svg_node *nodes;
    size_t n_nodes, cap_nodes;
    struct idmap ids;     /* (parent node, function) -> node */
    uint32_t *stack_node; /* a thread's stack -> node */
    size_t cap_stack_node;
    size_t processes;
};

/* The node for function func under parent, made if new; UINT32_MAX when out of memory. */
static uint32_t child(struct svg_builder *b, uint32_t parent, uint32_t func)
{
    uint32_t k = idmap_get(&b->ids, parent, func, (uint32_t)b->n_nodes);

    if (k == UINT32_MAX || k < b->n_nodes)
        return k;
    if (FLEETPROF_GROW(b->nodes, b->cap_nodes, b->n_nodes + 1) < 0)
        return UINT32_MAX;
    b->nodes[k] =
            (struct svg_node){.func = func, .parent = parent, .depth = b->nodes[parent].depth + 1};
    b->n_nodes++;
    return k;
}

static uint32_t labelled_child(struct svg_builder *b, uint32_t parent, const char *label)
{
    uint32_t func = pstack_func_intern(&b->funcs, label, strlen(label), NULL, 0);

    return func == PSTACK_NONE ? UINT32_MAX : child(b, parent, func);
}

static int add_thread(const struct pstack_process *proc, const struct pstack_thread *t,
                      void *userdata)
{
    struct svg_builder *b = userdata;
    char label[512];
    uint32_t pnode, tnode;

    (void)snprintf(label, sizeof(label), "%s (%lld)", proc->info.name ? proc->info.name : "?",
                   (long long)proc->info.pid);
    pnode = labelled_child(b, 0, label);
    if (pnode == UINT32_MAX)
        return -ENOMEM;
    tnode = labelled_child(b, pnode, t->name ? t->name : "thread");
    if (tnode == UINT32_MAX ||
        FLEETPROF_GROW(b->stack_node, b->cap_stack_node, t->n_stacks + 1) < 0)
        return -ENOMEM;
    for (size_t s = 0; s < t->n_stacks; s++) {
        uint32_t parent = t->prefix[s] == PSTACK_NONE ? tnode : b->stack_node[t->prefix[s]];
        uint32_t k;

        if (t->func[s] == PSTACK_NONE || parent == UINT32_MAX) {
            b->stack_node[s] = UINT32_MAX; /* invalid, and so is every stack above it */
            continue;
        }
        k = child(b, parent, t->func[s]);
        if (k == UINT32_MAX)
            return -ENOMEM;
        b->stack_node[s] = k;
        b->nodes[k].self += b->by_samples ? t->samples[s] : t->cpu_ns[s];
    }
    if (b->by_samples ? t->no_stack_samples : t->no_stack_cpu_ns) {
        uint32_t k = labelled_child(b, tnode, "(no stack)");

        if (k == UINT32_MAX)
            return -ENOMEM;
        b->nodes[k].self += b->by_samples ? t->no_stack_samples : t->no_stack_cpu_ns;
    }
    return 0;
}

static int add_process(const struct pstack_process *proc, void *userdata)
{
    struct svg_builder *b = userdata;

    if (!b->by_samples && !proc->cpu_known)
        return -EPROTO;
    b->processes++;
    return pstack_each_thread(&b->funcs, b->doc, proc, add_thread, b);
}

/* Adds up the totals, and links each node's children, heaviest first. */
static void link_children(struct svg_builder *b)
{
    /* Totals: a node is made after its parent, so one backward pass adds them up. */
    for (size_t i = b->n_nodes; i-- > 0;) {
        b->nodes[i].total += b->nodes[i].self;
        if (i > 0)
            b->nodes[b->nodes[i].parent].total += b->nodes[i].total;
    }
    /* Each into its parent's list, kept heaviest first (the last made first among equals). */
    for (size_t i = b->n_nodes; i-- > 1;) {
        struct svg_node *node = &b->nodes[i];
        uint32_t *link = &b->nodes[node->parent].first_child;

        while (*link && b->nodes[*link - 1].total > node->total)
            link = &b->nodes[*link - 1].next_sibling;
        node->next_sibling = *link;
        *link = (uint32_t)i + 1;
    }
}

/* x of every node: each child starts where its elder siblings end. */
static void place(struct svg_builder *b)
{
    for (size_t i = 0; i < b->n_nodes; i++) {
        double x = b->nodes[i].x;

        for (uint32_t c = b->nodes[i].first_child; c; c = b->nodes[c - 1].next_sibling) {
            b->nodes[c - 1].x = x;
            x += (double)b->nodes[c - 1].total;
        }
    }
}

/* s as XML character data or an attribute value; control characters become spaces. */
static void put_xml(FILE *out, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];

        switch (c) {
        case '&':
            (void)fputs("&amp;", out);
            break;
        case '<':
            (void)fputs("&lt;", out);
            break;
        case '>':
            (void)fputs("&gt;", out);
            break;
        case '"':
            (void)fputs("&quot;", out);
            break;
        default:
            (void)fputc(c < 0x20 || c == 0x7f ? ' ' : c, out);
        }
    }
}

/* The label of node i: its function as "name (in lib)" reads in a flame graph, "lib!name". */
static void node_label(const struct svg_builder *b, uint32_t i, char *buf, size_t size)
{
    const struct pstack_func *f;

    if (b->nodes[i].func == ROOT_FUNC) {
        (void)snprintf(buf, size, "all");
        return;
    }
    f = &b->funcs.v[b->nodes[i].func];
    /* Code no symbol names is "lib+0x1a00" already: no "lib!" before it. */
    if (f->lib && !(f->name_len > f->lib_len + 3 && !strncmp(f->name, f->lib, f->lib_len) &&
                    !strncmp(f->name + f->lib_len, "+0x", 3)))
        (void)snprintf(buf, size, "%.*s!%.*s", (int)f->lib_len, f->lib, (int)f->name_len, f->name);
    else
        (void)snprintf(buf, size, "%.*s", (int)f->name_len, f->name);
}

/* A warm colour from the function's name, the same in every graph. */
static void node_colour(const char *label, unsigned rgb[3])
{
    uint64_t h = fleetprof_fnv1a64(label, strlen(label), FLEETPROF_FNV64_SEED);

    rgb[0] = 205 + (unsigned)(h % 50);
    rgb[1] = 80 + (unsigned)((h >> 8) % 150);
    rgb[2] = 30 + (unsigned)((h >> 16) % 50);
}

/* The page's script: zoom on click, search, reset. No library, no network. */
static const char SCRIPT[] =
        "var W = 1200, PAD = 10, frames = [], zoomed = false;\n"
        "function fit(g, x, w) {\n"
        "  var r = g.getElementsByTagName('rect')[0], t = g.getElementsByTagName('text')[0];\n"
        "  var n = g.getAttribute('data-n'), max = Math.floor((w - 6) / 7.2);\n"
        "  r.setAttribute('x', x); r.setAttribute('width', w); t.setAttribute('x', x + 3);\n"
        "  t.textContent = max < 3 ? '' : n.length <= max ? n : n.slice(0, max - 2) + '..';\n"
        "}\n"
        "function zoom(g) {\n"
        "  var x0 = g.x0, w0 = g.w0, d0 = +g.getAttribute('data-d'), s = (W - 2 * PAD) / w0;\n"
        "  frames.forEach(function (f) {\n"
        "    var d = +f.getAttribute('data-d'), e = 1e-6;\n"
        "    var below = d < d0 && f.x0 <= x0 + e && f.x0 + f.w0 >= x0 + w0 - e;\n"
        "    var inside = d >= d0 && f.x0 >= x0 - e && f.x0 + f.w0 <= x0 + w0 + e;\n"
        "    f.style.display = below || inside ? '' : 'none';\n"
        "    if (below) fit(f, PAD, W - 2 * PAD);\n"
        "    else if (inside) fit(f, PAD + (f.x0 - x0) * s, f.w0 * s);\n"
        "  });\n"
        "  zoomed = true;\n"
        "  document.getElementById('reset').style.display = '';\n"
        "}\n"
        "function reset() {\n"
        "  frames.forEach(function (f) { f.style.display = ''; fit(f, f.x0, f.w0); });\n"
        "  document.getElementById('reset').style.display = 'none';\n"
        "}\n"
        "function search() {\n"
        "  var term = prompt('Search: a regular expression', '');\n"
        "  if (term !== null) highlight(term);\n"
        "}\n"
        "function highlight(term) {\n"
        "  var re, spans = [], sum = 0;\n"
        "  try { re = new RegExp(term); } catch (e) { alert(e); return; }\n"
        "  frames.forEach(function (f) {\n"
        "    var r = f.getElementsByTagName('rect')[0], hit = term !== '' &&\n"
        "        re.test(f.getAttribute('data-n'));\n"
        "    r.setAttribute('fill', hit ? 'rgb(230,0,230)' : f.getAttribute('data-c'));\n"
        "    if (hit) spans.push([f.x0, f.x0 + f.w0]);\n"
        "  });\n"
        "  spans.sort(function (a, b) { return a[0] - b[0]; });\n"
        "  for (var i = 0, end = -1; i < spans.length; i++) {\n"
        "    if (spans[i][0] >= end) { sum += spans[i][1] - spans[i][0]; end = spans[i][1]; }\n"
        "    else if (spans[i][1] > end) { sum += spans[i][1] - end; end = spans[i][1]; }\n"
        "  }\n"
        "  document.getElementById('matched').textContent = term === '' ? '' :\n"
        "      'Matched: ' + (100 * sum / (W - 2 * PAD)).toFixed(1) + '%';\n"
        "}\n"
        "function init() {\n"
        "  var gs = document.getElementsByTagName('g');\n"
        "  for (var i = 0; i < gs.length; i++) if (gs[i].getAttribute('class') === 'f') {\n"
        "    var g = gs[i], r = g.getElementsByTagName('rect')[0];\n"
        "    g.x0 = +r.getAttribute('x'); g.w0 = +r.getAttribute('width');\n"
        "    g.addEventListener('click', zoom.bind(null, g));\n"
        "    frames.push(g);\n"
        "  }\n"
        "  document.getElementById('search').addEventListener('click', search);\n"
        "  document.getElementById('reset').addEventListener('click', reset);\n"
        "  fromLink();\n"
        "  document.documentElement.setAttribute('data-ready', String(frames.length));\n"
        "}\n"
        "// A link can open the graph searched or zoomed: file.svg#search=RE&zoom=NAME (the\n"
        "// widest box of that name).\n"
        "function fromLink() {\n"
        "  location.hash.slice(1).split('&').forEach(function (kv) {\n"
        "    var i = kv.indexOf('='), k = kv.slice(0, i), v;\n"
        "    try { v = decodeURIComponent(kv.slice(i + 1)); } catch (e) { return; }\n"
        "    if (i < 0) return;\n"
        "    if (k === 'search') highlight(v);\n"
        "    if (k === 'zoom') {\n"
        "      var best = null;\n"
        "      frames.forEach(function (f) {\n"
        "        if (f.getAttribute('data-n') === v && (!best || f.w0 > best.w0)) best = f;\n"
        "      });\n"
        "      if (best) zoom(best);\n"
        "    }\n"
        "  });\n"
        "}\n"
        "window.addEventListener('load', init);\n";

static void write_svg(const struct svg_builder *b, FILE *out, const char *title)
{
    double scale = b->nodes[0].total ? (WIDTH_PX - 2 * PAD_PX) / (double)b->nodes[0].total : 0;
    uint32_t depth = 0;
    double height;
    char label[1024];

    for (size_t i = 0; i < b->n_nodes; i++)
        if ((double)b->nodes[i].total * scale >= MIN_PX && b->nodes[i].depth > depth)
            depth = b->nodes[i].depth;
    height = TOP_PX + (depth + 1) * ROW_PX + PAD_PX;
    (void)fprintf(out,
                  "<?xml version=\"1.0\" standalone=\"no\"?>\n"
                  "<svg version=\"1.1\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
                  "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\">\n"
                  "<style>text { font-family: monospace; font-size: 12px; fill: #000; }\n"
                  "g.f { cursor: pointer; } g.f:hover rect { stroke: #000; stroke-width: 0.5; }\n"
                  "#search, #reset { cursor: pointer; }</style>\n"
                  "<script><![CDATA[\n%s]]></script>\n"
                  "<rect x=\"0\" y=\"0\" width=\"100%%\" height=\"100%%\" fill=\"#f6f6f2\"/>\n"
                  "<text x=\"%.0f\" y=\"22\" text-anchor=\"middle\" style=\"font-size:14px\">",
                  WIDTH_PX, height, WIDTH_PX, height, SCRIPT, WIDTH_PX / 2);
    put_xml(out, title, strlen(title));
    (void)fprintf(
            out,
            "</text>\n"
            "<text id=\"reset\" x=\"%.0f\" y=\"22\" style=\"display:none\">Reset zoom</text>\n"
            "<text id=\"search\" x=\"%.0f\" y=\"22\" text-anchor=\"end\">Search</text>\n"
            "<text id=\"matched\" x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\"></text>\n",
            PAD_PX, WIDTH_PX - PAD_PX, WIDTH_PX - PAD_PX, height - 1);
    for (size_t i = 0; i < b->n_nodes; i++) {
        const struct svg_node *n = &b->nodes[i];
        double w = (double)n->total * scale, x = PAD_PX + n->x * scale;
        double y = height - PAD_PX - (n->depth + 1) * ROW_PX;
        size_t len, max = w > 6 ? (size_t)((w - 6) / CHAR_PX) : 0;
        unsigned rgb[3];

        if (w < MIN_PX)
            continue;
        node_label(b, (uint32_t)i, label, sizeof(label));
        len = strlen(label);
        node_colour(label, rgb);
        (void)fprintf(out,
                      "<g class=\"f\" data-d=\"%" PRIu32 "\" data-c=\"rgb(%u,%u,%u)\" data-n=\"",
                      n->depth, rgb[0], rgb[1], rgb[2]);
        put_xml(out, label, len);
        (void)fputs("\"><title>", out);
        put_xml(out, label, len);
        if (b->by_samples)
            (void)fprintf(out, " (%" PRIu64 " samples, %.2f%%)", n->total,
                          100.0 * (double)n->total / (double)b->nodes[0].total);
        else
            (void)fprintf(out, " (%.3f ms, %.2f%%)", (double)n->total / 1e6,
                          100.0 * (double)n->total / (double)b->nodes[0].total);
        (void)fprintf(out,
                      "</title><rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" "
                      "rx=\"2\" fill=\"rgb(%u,%u,%u)\"/><text x=\"%.2f\" y=\"%.1f\">",
                      x, y, w, ROW_PX - 1, rgb[0], rgb[1], rgb[2], x + 3, y + ROW_PX - 4);
        if (max >= 3)
            put_xml(out, label, len <= max ? len : max - 2);
        if (max >= 3 && len > max)
            (void)fputs("..", out);
        (void)fputs("</text></g>\n", out);
    }
    (void)fputs("</svg>\n", out);
}

int svg_export(const struct json_doc *doc, const char *name, bool by_samples, FILE *out, char *why,
               size_t why_size)
{
    struct svg_builder b = {.doc = doc, .by_samples = by_samples};
    char title[512];
    int r;

    *why = '\0';
    if (FLEETPROF_GROW(b.nodes, b.cap_nodes, 1) < 0)
        return -ENOMEM;
    b.nodes[0] = (struct svg_node){.func = ROOT_FUNC};
    b.n_nodes = 1;
    r = pstack_each_process(doc, add_process, &b);
    if (r == -EPROTO)
        (void)snprintf(why, why_size,
                       "a process has no CPU times in the profile (threadCPUDelta in ns or us): "
                       "use --weight samples");
    if (r == 0) {
        link_children(&b);
        place(&b);
        if (by_samples)
            (void)snprintf(title, sizeof(title), "%s: %zu process%s, %" PRIu64 " samples", name,
                           b.processes, b.processes == 1 ? "" : "es", b.nodes[0].total);
        else
            (void)snprintf(title, sizeof(title), "%s: %zu process%s, %.1f ms of CPU", name,
                           b.processes, b.processes == 1 ? "" : "es",
                           (double)b.nodes[0].total / 1e6);
        write_svg(&b, out, title);
    }
    if (r == -ENOMEM)
        (void)snprintf(why, why_size, "out of memory");
    free(b.nodes);
    free(b.stack_node);
    idmap_done(&b.ids);
    pstack_funcs_done(&b.funcs);
    return r;
}
