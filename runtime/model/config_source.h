// config.c's parse state, private to model/: where each key of train.cfg was set, so that
// every message names the file and line, or the command line's override (config_override.c).
#ifndef MT_CONFIG_SOURCE_H
#define MT_CONFIG_SOURCE_H

#include "runtime/model/config_schema.h"
#include "runtime/model/model.h"
#include <libconfig.h>

enum { NFIELDS = CONFIG_FIELDS };

// libconfig 1.5 silently wraps integer literals that do not fit an int (3000000000 reads
// as -1294967296). A light pre-scan of the text remembers such literals by line, so that
// they are read as 64-bit values (seed) or reported as out of range, never wrapped.
enum { MAX_BIG = 16 };
typedef struct {
    int line;
    char name[64]; // the setting name just before it
    char text[64];
} big_literal;

// Where each key was set, kept from parsing to the last check so that every message can name
// the file and line: the public config_source.
typedef struct config_source {
    config_t lc;      // owns the file names that file_of points to
    const char *path; // as the user gave it
    const char *file; // file of the setting at hand when it came from an @include, or NULL
    char *err;
    size_t errlen;
    int line[NFIELDS]; // source line of each key found in the file, 0 if absent
    const char *file_of[NFIELDS];
    big_literal big[MAX_BIG];
    int nbig;
    // Overrides: key i set by override k has line[i] = -(k + 1); `now` is the one being stored.
    const char *const *overrides;
    const char *now;
} ctx_t;

// One line into x->err: "<file>:<line>: <key>: <msg>", "<file>: override <k=v>: <key>: <msg>"
// for a key an override set (line < 0) or is setting; returns -1.
int source_fail(ctx_t *x, int line, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
// Setting s stored into field f of cfg, checked for type and range.
int source_store(ctx_t *x, mt_config *cfg, const field_t *f, const config_setting_t *s);
// base/rel with ".", ".." and repeated slashes removed, lexically; -1 when it does not fit.
int config_join_path(char *out, size_t n, const char *base, const char *rel);
// The line of key k, 0 if it was not set; also points messages at the file that set it.
int source_line(ctx_t *x, const char *key);
#define LINE(k) source_line(x, k)
// config_moe.c: the Mixture-of-Experts fields' rules between them.
int config_check_moe(ctx_t *x, const mt_model *m);
// config_override.c: x->overrides[0 .. n-1] applied over the file's settings.
int config_apply_overrides(ctx_t *x, mt_config *cfg, int n);

#endif
