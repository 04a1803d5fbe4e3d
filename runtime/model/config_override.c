// key=value settings from the command line (mtrun ... CONFIG optimizer.lr=1e-4), applied over
// train.cfg's with the same schema: the same "did you mean", types, ranges, and the rules between
// fields afterwards. A message names the override: "<file>: override <k=v>: <key>: <problem>".
#include "runtime/base/base.h"
#include "runtime/model/config_source.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define schema config_schema

// The value text of an override as libconfig reads it: a string field's value may come without
// quotes (backend=cpu), and an integer too wide for an int gets libconfig's L, so that it is
// never wrapped (the file's pre-scan does that job there).
static void value_text(const field_t *f, const char *v, char *out, size_t n) {
    if ((f->kind == K_STRING || f->kind == K_ENUM) && v[0] != '"') {
        size_t used = (size_t)snprintf(out, n, "v = \"");
        for (const char *p = v; *p && used + 3 < n; p++) {
            if (*p == '"' || *p == '\\') out[used++] = '\\';
            out[used++] = *p;
        }
        snprintf(out + used, n - used, "\";");
        return;
    }
    char *end;
    errno = 0;
    long long i = strtoll(v, &end, 0);
    int wide = *v && !*end && !strpbrk(v, ".eE") && (errno == ERANGE || i > INT_MAX || i < INT_MIN);
    snprintf(out, n, "v = %s%s;", v, wide && errno != ERANGE ? "L" : "");
}

// The settings that name files and folders: from the command line, a relative one is relative
// to the folder mtrun runs in, as a shell user means it (in the file, to the file's folder).
static int is_path_field(const field_t *f) {
    size_t o = f->off;
    return o == offsetof(mt_config, data_path) || o == offsetof(mt_config, val_path) ||
           o == offsetof(mt_config, checkpoint_dir) || o == offsetof(mt_config, model_dir) ||
           o == offsetof(mt_config, export_dir);
}

static const char *kind_text(const field_t *f) {
    switch (f->kind) {
    case K_INT:
    case K_INT64:
        return "an integer";
    case K_FLOAT:
        return "a number";
    case K_BOOL:
        return "true or false";
    case K_RANGE:
        return "two steps [first, last]";
    default:
        return "a string";
    }
}

// Why the value text v of an override is not one value, or NULL when it is. libconfig would read
// "1e-3;steps=2" or "1e-3 # note" as a file and keep the rest as more settings or a comment, so
// outside quoted strings the characters that end or join settings are refused, and so is a
// second string after the first ("a" "b" joins them in libconfig).
static const char *not_one_value(const char *v) {
    if (strpbrk(v, "\n\r")) return "more than one line";
    for (const char *p = v; *p; p++) {
        if (*p == '"') {
            for (p++; *p && *p != '"'; p++)
                if (*p == '\\' && p[1]) p++;
            if (!*p) return NULL; // unterminated: libconfig's parse error says so
            if (p[1 + strspn(p + 1, " \t")]) return "more than one value after the string";
            return NULL;
        }
        if (strchr(";:=#{}()", *p) || (*p == '/' && (p[1] == '/' || p[1] == '*')))
            return "more than one value (only one value may follow '=')";
    }
    return NULL;
}

// Override k, "group.key=value": the schema's key, type and range checks, as for the file.
static int apply_override(ctx_t *x, mt_config *cfg, int k) {
    const char *arg = x->overrides[k], *eq = strchr(arg, '=');
    char key[128];
    x->now = arg, x->file = NULL;
    if (!eq || eq == arg || (size_t)(eq - arg) >= sizeof key)
        return source_fail(x, 0, NULL, "expected group.key=value");
    snprintf(key, sizeof key, "%.*s", (int)(eq - arg), arg);
    const field_t *f = find_field(key);
    if (!f && is_group(key))
        return source_fail(x, 0, key, "a group of settings: give one of them, as %s.name=value",
                           key);
    if (!f) {
        const char *hint = suggest(key);
        if (hint) return source_fail(x, 0, key, "unknown key (did you mean %s?)", hint);
        return source_fail(x, 0, key, "unknown key");
    }
    char text[2 * MT_PATH_MAX + 16], value[MT_PATH_MAX], cwd[MT_PATH_MAX];
    snprintf(value, sizeof value, "%s", eq + 1);
    if (is_path_field(f) && value[0] && value[0] != '/' && value[0] != '"' &&
        getcwd(cwd, sizeof cwd) && config_join_path(value, sizeof value, cwd, eq + 1) < 0)
        return source_fail(x, 0, key, "path too long");
    const char *why = NULL;
    if (strpbrk(value, "\n\r") || (f->kind != K_STRING && f->kind != K_ENUM) || value[0] == '"')
        why = not_one_value(value);
    if (why) return source_fail(x, 0, key, "%s", why);
    value_text(f, value, text, sizeof text);
    config_t one;
    config_init(&one);
    int rc;
    if (!config_read_string(&one, text))
        rc = source_fail(x, 0, key, "expected %s, got '%s'", kind_text(f), eq + 1);
    else if (config_setting_length(config_root_setting(&one)) != 1)
        rc = source_fail(x, 0, key, "more than one value (only one value may follow '=')");
    else
        rc = source_store(x, cfg, f, config_lookup(&one, "v"));
    config_destroy(&one);
    if (rc < 0) return -1;
    x->line[f - schema] = -(k + 1), x->file_of[f - schema] = NULL;
    snprintf(cfg->overrides[cfg->n_overrides++], MT_OVERRIDE_MAX, "%s", arg);
    return 0;
}

int config_apply_overrides(ctx_t *x, mt_config *cfg, int n) {
    if (n > MT_MAX_OVERRIDES)
        return source_fail(x, 0, NULL, "%d overrides on the command line, at most %d", n,
                           MT_MAX_OVERRIDES);
    for (int k = 0; k < n; k++) {
        if (strlen(x->overrides[k]) >= MT_OVERRIDE_MAX) {
            x->now = x->overrides[k];
            return source_fail(x, 0, NULL, "longer than %d bytes", MT_OVERRIDE_MAX - 1);
        }
        if (apply_override(x, cfg, k) < 0) return -1;
    }
    x->now = NULL;
    return 0;
}
