// config.json's value readers (hf_json.h): each key's value checked and read, or one line naming
// the file and the key.
#include "runtime/model/hf_json.h"
#include "runtime/base/base.h"
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const cJSON *item(const json_ctx *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j->root, key);
    return cJSON_IsNull(v) ? NULL : v; // null means "the default", as in transformers
}

// A positive integer; def < 0 makes the key required.
int get_int(const json_ctx *j, const char *key, int def, int *out) {
    const cJSON *v = item(j, key);
    if (!v && def >= 0) return *out = def, 0;
    if (!v) return failf(j->err, j->errlen, "%s: %s missing", j->path, key);
    double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
    if (cJSON_IsNumber(v) && !isfinite(d))
        return failf(j->err, j->errlen, "%s: %s is not a finite number", j->path, key);
    if (d < 1 || d != floor(d))
        return failf(j->err, j->errlen, "%s: %s must be a positive integer", j->path, key);
    if (v->type & JSON_FLOAT_TEXT) // transformers' strict config refuses 4.0 for an int
        return failf(j->err, j->errlen, "%s: %s must be an integer, not the float %.17g", j->path,
                     key, d);
    if (d > INT_MAX)
        return failf(j->err, j->errlen, "%s: %s = %.17g is out of range: at most %d", j->path, key,
                     d, INT_MAX);
    *out = (int)d;
    return 0;
}

int get_num(const json_ctx *j, const char *key, double def, double *out) {
    const cJSON *v = item(j, key);
    if (!v) return *out = def, 0;
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0))
        return failf(j->err, j->errlen, "%s: %s must be a positive number", j->path, key);
    *out = v->valuedouble;
    return 0;
}

int get_bool(const json_ctx *j, const char *key, int def, int *out) {
    const cJSON *v = item(j, key);
    if (!v) return *out = def, 0;
    if (!cJSON_IsBool(v))
        return failf(j->err, j->errlen, "%s: %s must be true or false", j->path, key);
    *out = cJSON_IsTrue(v);
    return 0;
}

// Shortest text that reads back to the same bits, with ".0" where it would read as an int
// ("8.0", not "8"; transformers 5 refuses router_aux_loss_coef 0 as an int).
void hf_add_float(cJSON *obj, const char *key, double v) {
    char text[40];
    snprintf(text, sizeof text, "%.15g", v);
    if (strtod(text, NULL) != v) snprintf(text, sizeof text, "%.17g", v);
    if (!strpbrk(text, ".e")) strcat(text, ".0");
    cJSON_AddItemToObject(obj, key, cJSON_CreateRaw(text));
}
