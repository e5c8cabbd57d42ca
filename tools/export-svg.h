/* tools/export-svg.h - a profile as a flame graph in one self-contained, interactive SVG file
 * (`fleetprof export --format svg`): any browser opens it offline, with no script, style or
 * font from elsewhere. The fleet's stacks, merged by path under each process and thread, are
 * boxes as wide as their CPU time (or samples); a click zooms on a box, "Search" highlights
 * the functions a regular expression matches and says their share. Each box's tooltip gives
 * its function, its weight and its share; a function reads "lib!name".
 */
#ifndef FLEETPROF_TOOLS_EXPORT_SVG_H
#define FLEETPROF_TOOLS_EXPORT_SVG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct json_doc;

/* Writes doc's flame graph to out, titled with name (the input's), weighted by samples or
 * by CPU time. Returns 0; or -ENOMEM, or -EPROTO when a process has no CPU times and
 * by_samples is false, with one line in why. Nothing is written on failure. */
int svg_export(const struct json_doc *doc, const char *name, bool by_samples, FILE *out, char *why,
               size_t why_size);

#endif /* FLEETPROF_TOOLS_EXPORT_SVG_H */
