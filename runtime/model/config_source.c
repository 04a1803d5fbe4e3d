// Storing one setting of train.cfg or of the command line into mt_config, with its type and
// range checked, and the one-line messages that name where it was set: shared by config.c (the
// file) and config_override.c (the command line).
#include "runtime/model/config_source.h"
#include "runtime/base/base.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define schema config_schema

// s with its control characters written as escapes (\n, \x01), so that a message about an
// override that holds a newline stays one line.
static const char *one_line(const char *s, char *out, size_t n) {
    size_t used = 0;
    for (; *s && used + 5 < n; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\n')
            used += (size_t)snprintf(out + used, n - used, "\\n");
        else if (c < 0x20 || c == 0x7f)
            used += (size_t)snprintf(out + used, n - used, "\\x%02x", c);
        else
            out[used++] = (char)c;
    }
    out[used] = 0;
    return out;
}

int source_fail(ctx_t *x, int line, const char *key, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char where[MT_PATH_MAX + 4 * MT_OVERRIDE_MAX + 32], shown[4 * MT_OVERRIDE_MAX];
    const char *override = line < 0 ? x->overrides[-line - 1] : x->now;
    if (override)
        snprintf(where, sizeof where, "%s: override %s", x->path,
                 one_line(override, shown, sizeof shown));
    else if (line > 0)
        snprintf(where, sizeof where, "%s:%d", x->file ? x->file : x->path, line);
    else
        snprintf(where, sizeof where, "%s", x->file ? x->file : x->path);
    if (key)
        snprintf(x->err, x->errlen, "%s: %s: %s", where, key, msg);
    else
        snprintf(x->err, x->errlen, "%s: %s", where, msg);
    return -1;
}

static const big_literal *big_literal_of(const ctx_t *x, const config_setting_t *s) {
    for (int i = 0; i < x->nbig; i++)
        if (x->big[i].line == (int)config_setting_source_line(s) &&
            strcmp(x->big[i].name, config_setting_name(s)) == 0)
            return &x->big[i];
    return NULL;
}

// ---- storing one setting ----

static int out_of_range(ctx_t *x, int line, const field_t *f, const char *value) {
    char r[128];
    range_text(f, r, sizeof r);
    return source_fail(x, line, f->key, "%s is out of range: %s", value, r);
}

// An enum's value: one of its names, stored as the name's index (parsed once, here).
static int store_enum(ctx_t *x, int line, const field_t *f, const config_setting_t *s, char *dst) {
    int t = config_setting_type(s);
    if (t != CONFIG_TYPE_STRING)
        return source_fail(x, line, f->key, "expected a string, got %s", type_name(t));
    const char *v = config_setting_get_string(s);
    int i = mt_choice_index(f->names, v);
    if (i < 0) {
        char list[160] = ""; // "auto", "cpu", "cuda"
        for (int k = 0; f->names[k]; k++) {
            size_t used = strlen(list);
            snprintf(list + used, sizeof list - used, "%s\"%s\"", used ? ", " : "", f->names[k]);
        }
        return source_fail(x, line, f->key, "\"%s\" is not one of %s", v, list);
    }
    *(int *)dst = i;
    return 0;
}

// [a, b]: two integers in the field's range, a <= b (b <= steps is a cross-field rule).
static int store_range(ctx_t *x, mt_config *cfg, const field_t *f, const config_setting_t *s) {
    int line = (int)config_setting_source_line(s);
    int t = config_setting_type(s), *dst = (int *)((char *)cfg + f->off);
    if (t != CONFIG_TYPE_ARRAY)
        return source_fail(x, line, f->key, "expected an array of two steps [first, last], got %s",
                           type_name(t));
    if (config_setting_length(s) != 2)
        return source_fail(x, line, f->key, "expected two steps [first, last], got %d",
                           config_setting_length(s));
    for (int i = 0; i < 2; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        int et = config_setting_type(e);
        if (et != CONFIG_TYPE_INT && et != CONFIG_TYPE_INT64)
            return source_fail(x, line, f->key, "expected integers, got %s", type_name(et));
        long long v = config_setting_get_int64(e);
        if (!in_range(f, (double)v))
            return source_fail(x, line, f->key, "%lld is out of range: steps count from 1", v);
        dst[i] = (int)v;
    }
    if (dst[0] > dst[1])
        return source_fail(x, line, f->key, "[%d, %d]: the first step is after the last", dst[0],
                           dst[1]);
    return 0;
}

// An integer literal as typed ([+-] digits or 0x hex digits, an optional L or LL): its sign and
// magnitude. 1 when it is an integer too large for 64 bits, -1 when it is no integer literal.
static int int_literal(const char *text, int *neg, unsigned long long *mag) {
    const char *p = text + strspn(text, " \t");
    *neg = *p == '-';
    if (*p == '-' || *p == '+') p++;
    if (!isdigit((unsigned char)*p)) return -1;
    char *end;
    errno = 0;
    int hex = p[0] == '0' && (p[1] == 'x' || p[1] == 'X');
    *mag = strtoull(p, &end, hex ? 16 : 10); // a leading 0 is not octal, as in libconfig
    int too_big = errno == ERANGE;
    if (*end == 'L') end += end[1] == 'L' ? 2 : 1;
    if (end[strspn(end, " \t")]) return -1;
    return too_big;
}

// The typed text of integer setting s: the override's value, or the pre-scan's literal in the
// file, so that a value beyond 64 bits, which libconfig clamps or wraps, is read exactly.
static const char *int_text(const ctx_t *x, const config_setting_t *s, char *buf, size_t n) {
    if (x->now && strchr(x->now, '=')) return strchr(x->now, '=') + 1;
    const big_literal *big = !x->file ? big_literal_of(x, s) : NULL;
    if (big) return big->text;
    snprintf(buf, n, "%lld", config_setting_get_int64(s));
    return buf;
}

// An integer field: the exact value of the literal checked against the field's range and its
// C type (int, or uint64_t for the seed: every 64-bit seed is a different run); a message shows
// the value as the user typed it.
static int store_int(ctx_t *x, int line, const field_t *f, const config_setting_t *s, char *dst) {
    char buf[64];
    const char *text = int_text(x, s, buf, sizeof buf);
    int neg;
    unsigned long long mag;
    int rc = int_literal(text, &neg, &mag);
    if (rc < 0) { // a form libconfig reads but we do not (e.g. 0b101): libconfig's value, if exact
        snprintf(buf, sizeof buf, "%lld", config_setting_get_int64(s));
        text = buf, rc = int_literal(text, &neg, &mag);
    }
    double hi = f->kind == K_INT ? fmin(f->max, INT_MAX) : fmin(f->max, (double)UINT64_MAX);
    double v = neg ? -(double)mag : (double)mag; // exact below 2^53; beyond, only compared
    int ok = rc == 0 && !(neg && mag && f->kind == K_INT64) && v >= f->min && v <= hi &&
             in_range(f, v) && (f->kind == K_INT64 || mag <= (unsigned long long)INT_MAX + neg);
    if (!ok) return out_of_range(x, line, f, text + strspn(text, " \t"));
    if (f->kind == K_INT)
        *(int *)dst = neg ? -(int)(mag - 1) - 1 : (int)mag;
    else
        *(uint64_t *)dst = mag;
    return 0;
}

int source_store(ctx_t *x, mt_config *cfg, const field_t *f, const config_setting_t *s) {
    int line = (int)config_setting_source_line(s);
    int t = config_setting_type(s);
    char *dst = (char *)cfg + f->off;
    char buf[64];
    x->line[f - schema] = line;
    x->file_of[f - schema] = x->file;
    if (f->kind == K_RANGE) return store_range(x, cfg, f, s);

    if (f->kind == K_INT || f->kind == K_INT64) {
        if (t != CONFIG_TYPE_INT && t != CONFIG_TYPE_INT64)
            return source_fail(x, line, f->key, "expected an integer, got %s", type_name(t));
        return store_int(x, line, f, s, dst);
    } else if (f->kind == K_FLOAT) {
        // libconfig types 1e-3 as a float but 1 as an int: both are numbers here.
        if (t != CONFIG_TYPE_INT && t != CONFIG_TYPE_INT64 && t != CONFIG_TYPE_FLOAT)
            return source_fail(x, line, f->key, "expected a number, got %s", type_name(t));
        double v = (t == CONFIG_TYPE_FLOAT) ? config_setting_get_float(s)
                                            : (double)config_setting_get_int64(s);
        const big_literal *big =
            (t == CONFIG_TYPE_INT && !x->file && !x->now) ? big_literal_of(x, s) : NULL;
        if (big) v = strtod(big->text, NULL);
        snprintf(buf, sizeof buf, "%.10g", v);
        if (!in_range(f, v)) return out_of_range(x, line, f, buf);
        *(double *)dst = v;
    } else if (f->kind == K_BOOL) {
        if (t != CONFIG_TYPE_BOOL)
            return source_fail(x, line, f->key, "expected true or false, got %s", type_name(t));
        *(int *)dst = config_setting_get_bool(s);
    } else if (f->kind == K_ENUM) {
        return store_enum(x, line, f, s, dst);
    } else {
        if (t != CONFIG_TYPE_STRING)
            return source_fail(x, line, f->key, "expected a string, got %s", type_name(t));
        const char *v = config_setting_get_string(s);
        if (v[0] == 0) return source_fail(x, line, f->key, "must not be empty");
        if (strlen(v) >= f->size)
            return source_fail(x, line, f->key, "too long (at most %zu bytes)", f->size - 1);
        memcpy(dst, v, strlen(v) + 1);
    }
    return 0;
}

// ---- paths ----

// Joins base and rel (rel may be absolute) and removes ".", ".." and repeated slashes,
// lexically. Returns -1 when the result does not fit.
int config_join_path(char *out, size_t n, const char *base, const char *rel) {
    char tmp[2 * MT_PATH_MAX + 2];
    snprintf(tmp, sizeof tmp, "%s/%s", rel[0] == '/' ? "" : base, rel);
    const char *part[MT_PATH_MAX / 2];
    int np = 0;
    for (char *save = NULL, *p = strtok_r(tmp, "/", &save); p; p = strtok_r(NULL, "/", &save)) {
        if (strcmp(p, ".") == 0) continue;
        if (strcmp(p, "..") == 0) {
            if (np > 0) np--;
            continue;
        }
        if (np == (int)(sizeof part / sizeof part[0])) return -1;
        part[np++] = p;
    }
    size_t len = 0;
    out[0] = 0;
    for (int i = 0; i < np; i++) {
        int w = snprintf(out + len, n - len, "/%s", part[i]);
        if (w < 0 || (size_t)w >= n - len) return -1;
        len += (size_t)w;
    }
    if (np == 0) snprintf(out, n, "/");
    return 0;
}

int source_line(ctx_t *x, const char *key) {
    int i = (int)(find_field(key) - config_schema);
    x->file = x->file_of[i];
    return x->line[i];
}
