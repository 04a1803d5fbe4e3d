// train.cfg: parsed with libconfig, then checked against one schema table.
//
// Order of checks, so that the first message is the most useful one:
//   1. the file opens and parses (libconfig syntax errors carry a line);
//   2. every setting in the file, in file order, is a known key of the right type and in
//      range (unknown keys get a "did you mean" when a known key is close);
//   3. required keys are present;
//   4. defaults that depend on other keys (kv_heads, min_lr, warmup, checkpoint.*);
//   5. cross-field rules (dim % heads, ...) and the data file itself.
// Every message is one line: "<file>:<line>: <key>: <problem>", or "<file>: ..." when no
// line applies (a missing key, a file that does not open).
#include "runtime/config.h"
#include "runtime/data.h"
#include "runtime/hf.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <libconfig.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef enum { K_INT, K_INT64, K_FLOAT, K_BOOL, K_STRING, K_RANGE } kind_t; // range: [a, b]

enum {
    REQUIRED = 1 << 0, // no default: the file must set it
    DERIVED = 1 << 1,  // default computed from other keys (see apply_derived)
    MIN_OPEN = 1 << 2, // range excludes min
    MAX_OPEN = 1 << 3, // range excludes max
};

typedef struct {
    const char *key; // "group.name" or "name"
    kind_t kind;
    double min, max; // numbers; for strings, max is ignored (the field's size bounds it)
    unsigned flags;
    double def;          // default of a number or bool
    const char *sdef;    // default of a string
    const char *choices; // allowed strings, "a|b|c", or NULL
    size_t off, size;    // where it lives in mt_config
} field_t;

#define NOLIMIT DBL_MAX
#define F_(k, kind, fld, lo, hi, fl, d, sd, ch)                                                    \
    { k, kind, lo, hi, fl, d, sd, ch, offsetof(mt_config, fld), sizeof(((mt_config *)0)->fld) }
#define INT(k, fld, lo, hi, fl, d) F_(k, K_INT, fld, lo, hi, fl, d, NULL, NULL)
#define FLT(k, fld, lo, hi, fl, d) F_(k, K_FLOAT, fld, lo, hi, fl, d, NULL, NULL)
#define BOOL(k, fld, d) F_(k, K_BOOL, fld, 0, 1, 0, d, NULL, NULL)
#define STR(k, fld, fl, sd, ch) F_(k, K_STRING, fld, 0, 0, fl, 0, sd, ch)

static const field_t schema[] = {
    INT("model.dim", dim, 1, 65536, REQUIRED, 0),
    INT("model.layers", layers, 1, 4096, REQUIRED, 0),
    INT("model.heads", heads, 1, 1024, REQUIRED, 0),
    INT("model.kv_heads", kv_heads, 1, 1024, DERIVED, 0), // default: heads (no GQA)
    INT("model.ffn_dim", ffn_dim, 1, 1 << 20, REQUIRED, 0),
    INT("model.vocab", vocab, 2, 1 << 24, 0, 256),
    FLT("model.rope_theta", rope_theta, 0, 1e12, MIN_OPEN, 10000),
    FLT("model.norm_eps", norm_eps, 0, 1, MIN_OPEN, 1e-5),
    BOOL("model.tied_embeddings", tied_embeddings, 1),
    BOOL("model.qkv_bias", qkv_bias, 0),                   // Qwen2: biases on q, k, v
    INT("model.bos_token_id", bos_id, -1, 1 << 24, 0, -1), // -1: none
    INT("model.eos_token_id", eos_id, -1, 1 << 24, 0, -1),
    // Llama 3.1's RoPE rescaling, transformers' names; the four numbers are required with llama3
    // (the defaults here are Llama 3.1's, kept only so that every field is in range)
    STR("model.rope_scaling.rope_type", rope_type, 0, "none", "none|llama3"),
    FLT("model.rope_scaling.factor", rope_factor, 1, 1e6, 0, 8),
    FLT("model.rope_scaling.low_freq_factor", rope_low_freq_factor, 0, 1e6, MIN_OPEN, 1),
    FLT("model.rope_scaling.high_freq_factor", rope_high_freq_factor, 0, 1e6, MIN_OPEN, 4),
    INT("model.rope_scaling.original_max_position_embeddings", rope_original_max_pos, 1, 1 << 30, 0,
        8192),
    // required unless data.format is "synthetic"; for "tokens", a glob(3) pattern or a folder
    STR("data.path", data_path, 0, "", NULL),
    STR("data.format", data_format, 0, "bytes", "bytes|tokens|synthetic"),
    FLT("data.val_fraction", val_fraction, 0, 1, MAX_OPEN, 0.1),
    // evaluation reads this file (glob, folder) in data.format instead of data.path's tail
    STR("data.val_path", val_path, 0, "", NULL),
    INT("batch.micro_batch", micro_batch, 1, 1 << 20, REQUIRED, 0),
    INT("batch.micro_batches", micro_batches, 1, 1 << 20, REQUIRED, 0),
    INT("batch.seq_len", seq_len, 1, 1 << 22, REQUIRED, 0),
    FLT("optimizer.lr", lr, 0, 10, REQUIRED | MIN_OPEN, 0),
    FLT("optimizer.min_lr", min_lr, 0, 10, DERIVED, 0), // default: lr / 10
    FLT("optimizer.beta1", beta1, 0, 1, MAX_OPEN, 0.9),
    FLT("optimizer.beta2", beta2, 0, 1, MAX_OPEN, 0.95),
    FLT("optimizer.eps", eps, 0, 1, MIN_OPEN, 1e-8),
    FLT("optimizer.weight_decay", weight_decay, 0, 10, 0, 0.1),
    FLT("optimizer.clip", clip, 0, NOLIMIT, 0, 1.0), // max global grad norm; 0: no clipping
    // the first N parameter groups (embedding, layer 0, 1, ...) are updated by the compute rank
    // on its device; -1: auto (on a GPU the embedding and ceil(layers / 8) layers that fit in
    // an eighth of its free memory; none on the CPU backend)
    INT("optimizer.device_groups", device_groups, -1, 1 << 20, 0, -1),
    INT("optimizer.warmup_steps", warmup_steps, 0, INT_MAX, DERIVED, 0), // default: steps / 10
    INT("steps", steps, 1, INT_MAX, REQUIRED, 0),
    F_("seed", K_INT64, seed, 0, (double)INT64_MAX, 0, 1337, NULL, NULL),
    STR("backend", backend, 0, "auto", "auto|cpu|cuda"),
    STR("recompute", recompute, 0, "auto", "auto|always"),
    STR("offload_activations", offload_activations, 0, "auto", "auto|never|always"),
    STR("checkpoint.dir", checkpoint_dir, DERIVED, NULL, NULL), // default: runs/<cfg name>
    // default: steps (one checkpoint, at the end); 0: never (benchmarks)
    INT("checkpoint.interval", checkpoint_interval, 0, INT_MAX, DERIVED, 0),
    INT("checkpoint.keep", checkpoint_keep, 0, INT_MAX, 0, 0), // newest K step folders; 0: all
    INT("eval.interval", eval_interval, 0, INT_MAX, 0, 0),     // 0: no evaluation
    INT("eval.batches", eval_batches, 1, 1 << 20, 0, 4),
    INT("sample_tokens", sample_tokens, 0, 1 << 20, 0, 0),
    F_("trace_steps", K_RANGE, trace_steps, 1, INT_MAX, 0, 0, NULL, NULL), // [a, b]; none
    STR("model_dir", model_dir, 0, "", NULL),   // a Hugging Face folder: sets model.*
    STR("export_dir", export_dir, 0, "", NULL), // write a Hugging Face folder at the end
    STR("export_dtype", export_dtype, 0, "float32", "float32|bfloat16"),
};
enum { NFIELDS = sizeof schema / sizeof schema[0] };

// libconfig 1.5 silently wraps integer literals that do not fit an int (3000000000 reads
// as -1294967296). A light pre-scan of the text remembers such literals by line, so that
// they are read as 64-bit values (seed) or reported as out of range, never wrapped.
enum { MAX_BIG = 16 };
typedef struct {
    int line;
    char name[64]; // the setting name just before it
    char text[64];
} big_literal;

typedef struct {
    const char *path; // as the user gave it
    const char *file; // file of the setting at hand when it came from an @include, or NULL
    char *err;
    size_t errlen;
    int line[NFIELDS]; // source line of each key found in the file, 0 if absent
    const char *file_of[NFIELDS];
    big_literal big[MAX_BIG];
    int nbig;
} ctx_t;

static int fail(ctx_t *x, int line, const char *key, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char where[MT_PATH_MAX + 32];
    if (line > 0)
        snprintf(where, sizeof where, "%s:%d", x->file ? x->file : x->path, line);
    else
        snprintf(where, sizeof where, "%s", x->file ? x->file : x->path);
    if (key)
        snprintf(x->err, x->errlen, "%s: %s: %s", where, key, msg);
    else
        snprintf(x->err, x->errlen, "%s: %s", where, msg);
    return -1;
}

// ---- the pre-scan for wide integer literals ----

static void scan_big_literals(ctx_t *x, FILE *f) {
    int line = 1, c;
    char name[64] = "";
    while ((c = getc(f)) != EOF) {
        if (c == '\n') {
            line++;
        } else if (c == '/' || c == '#') { // comments: # ..., // ..., /* ... */
            int next = (c == '/') ? getc(f) : '/';
            if (next == '/') {
                while ((c = getc(f)) != EOF && c != '\n') {
                }
                line++;
            } else if (next == '*') {
                for (int prev = 0; (c = getc(f)) != EOF && !(prev == '*' && c == '/'); prev = c)
                    if (c == '\n') line++;
            } else if (next != EOF) {
                ungetc(next, f);
            }
        } else if (c == '"') { // a string, with escapes
            while ((c = getc(f)) != EOF && c != '"') {
                if (c == '\\') c = getc(f);
                if (c == '\n') line++;
            }
        } else if (isalpha(c) || c == '_' || c == '*') { // a name: may hold digits
            size_t n = 0;
            name[n++] = (char)c;
            while ((c = getc(f)) != EOF && (isalnum(c) || strchr("_-*", c)))
                if (n < sizeof name - 1) name[n++] = (char)c;
            name[n] = 0;
            if (c != EOF) ungetc(c, f);
        } else if (isdigit(c) || c == '-' || c == '+') {
            char tok[64];
            size_t n = 0;
            tok[n++] = (char)c;
            while ((c = getc(f)) != EOF && (isalnum(c) || strchr(".+-", c)) && n < sizeof tok - 1)
                tok[n++] = (char)c;
            tok[n] = 0;
            if (c != EOF) ungetc(c, f);
            int hex = strstr(tok, "0x") || strstr(tok, "0X");
            if (!hex && strpbrk(tok, ".eE")) continue; // a float
            if (strchr(tok, 'L')) continue;            // already a 64-bit literal
            errno = 0;
            long long v = strtoll(tok, NULL, hex ? 16 : 10);
            if ((errno == ERANGE || v > INT_MAX || v < INT_MIN) && x->nbig < MAX_BIG) {
                x->big[x->nbig].line = line;
                snprintf(x->big[x->nbig].name, sizeof x->big[0].name, "%s", name);
                snprintf(x->big[x->nbig].text, sizeof x->big[0].text, "%s", tok);
                x->nbig++;
            }
        }
    }
}

static const big_literal *big_literal_of(const ctx_t *x, const config_setting_t *s) {
    for (int i = 0; i < x->nbig; i++)
        if (x->big[i].line == (int)config_setting_source_line(s) &&
            strcmp(x->big[i].name, config_setting_name(s)) == 0)
            return &x->big[i];
    return NULL;
}

// ---- schema lookups and suggestions ----

static const field_t *find_field(const char *key) {
    for (int i = 0; i < NFIELDS; i++)
        if (strcmp(schema[i].key, key) == 0) return &schema[i];
    return NULL;
}

static int is_group(const char *name) {
    size_t n = strlen(name);
    for (int i = 0; i < NFIELDS; i++)
        if (strncmp(schema[i].key, name, n) == 0 && schema[i].key[n] == '.') return 1;
    return 0;
}

static int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 99;
    int d[64];
    for (size_t j = 0; j <= lb; j++) d[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = d[0];
        d[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = d[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (d[j - 1] + 1 < best) best = d[j - 1] + 1;
            d[j] = best;
            diag = up;
        }
    }
    return d[lb];
}

static const char *leaf(const char *key) {
    const char *dot = strrchr(key, '.');
    return dot ? dot + 1 : key;
}

// The closest known key or group, or NULL. A known name in the wrong group ("lr" at the
// top level) is the likeliest slip, so an exact leaf match wins.
static const char *suggest(const char *key) {
    for (int i = 0; i < NFIELDS; i++)
        if (strcmp(leaf(schema[i].key), leaf(key)) == 0) return schema[i].key;
    size_t n = strlen(leaf(key)); // "warmup" -> "optimizer.warmup_steps"
    for (int i = 0; i < NFIELDS && n >= 4; i++)
        if (strncmp(leaf(schema[i].key), leaf(key), n) == 0) return schema[i].key;
    const char *best = NULL;
    int bestd = 3;
    for (int i = 0; i < NFIELDS; i++) {
        int d = edit_distance(key, schema[i].key);
        if (d < bestd) bestd = d, best = schema[i].key;
    }
    static char group[32];
    for (int i = 0; i < NFIELDS; i++) { // group names: "optimiser" -> "optimizer"
        const char *dot = strchr(schema[i].key, '.');
        if (!dot || (size_t)(dot - schema[i].key) >= sizeof group) continue;
        snprintf(group, sizeof group, "%.*s", (int)(dot - schema[i].key), schema[i].key);
        int d = edit_distance(key, group);
        if (d < bestd) return group;
    }
    return best;
}

static const char *type_name(int t) {
    switch (t) {
    case CONFIG_TYPE_GROUP:
        return "a group { ... }";
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64:
        return "an integer";
    case CONFIG_TYPE_FLOAT:
        return "a number";
    case CONFIG_TYPE_STRING:
        return "a string";
    case CONFIG_TYPE_BOOL:
        return "a boolean";
    case CONFIG_TYPE_ARRAY:
        return "an array [ ... ]";
    case CONFIG_TYPE_LIST:
        return "a list ( ... )";
    default:
        return "nothing";
    }
}

// "[1, 65536]", "(0, 1]", ">= 0".
static void range_text(const field_t *f, char *out, size_t n) {
    const char *fmt = (f->kind == K_FLOAT) ? "%.10g" : "%.0f";
    char lo[48], hi[48];
    snprintf(lo, sizeof lo, fmt, f->min);
    snprintf(hi, sizeof hi, fmt, f->max);
    int unbounded = f->max == NOLIMIT || (f->kind == K_INT && f->max >= INT_MAX) ||
                    (f->kind == K_INT64 && f->max >= (double)INT64_MAX);
    if (unbounded)
        snprintf(out, n, "must be %s %s", (f->flags & MIN_OPEN) ? ">" : ">=", lo);
    else
        snprintf(out, n, "must be in %c%s, %s%c", (f->flags & MIN_OPEN) ? '(' : '[', lo, hi,
                 (f->flags & MAX_OPEN) ? ')' : ']');
}

static int in_range(const field_t *f, double v) {
    if (v < f->min || ((f->flags & MIN_OPEN) && v == f->min)) return 0;
    if (v > f->max || ((f->flags & MAX_OPEN) && v == f->max)) return 0;
    return 1;
}

// ---- storing one setting ----

static int out_of_range(ctx_t *x, int line, const field_t *f, const char *value) {
    char r[128];
    range_text(f, r, sizeof r);
    return fail(x, line, f->key, "%s is out of range: %s", value, r);
}

// choices is "a|b|c".
static int choice_ok(const char *choices, const char *s) {
    for (const char *p = choices; *p;) {
        size_t len = strcspn(p, "|");
        if (len == strlen(s) && strncmp(p, s, len) == 0) return 1;
        p += len + (p[len] == '|');
    }
    return 0;
}

// [a, b]: two integers in the field's range, a <= b (b <= steps is a cross-field rule).
static int store_range(ctx_t *x, mt_config *cfg, const field_t *f, const config_setting_t *s) {
    int line = (int)config_setting_source_line(s);
    int t = config_setting_type(s), *dst = (int *)((char *)cfg + f->off);
    if (t != CONFIG_TYPE_ARRAY)
        return fail(x, line, f->key, "expected an array of two steps [first, last], got %s",
                    type_name(t));
    if (config_setting_length(s) != 2)
        return fail(x, line, f->key, "expected two steps [first, last], got %d",
                    config_setting_length(s));
    for (int i = 0; i < 2; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        int et = config_setting_type(e);
        if (et != CONFIG_TYPE_INT && et != CONFIG_TYPE_INT64)
            return fail(x, line, f->key, "expected integers, got %s", type_name(et));
        long long v = config_setting_get_int64(e);
        if (!in_range(f, (double)v))
            return fail(x, line, f->key, "%lld is out of range: steps count from 1", v);
        dst[i] = (int)v;
    }
    if (dst[0] > dst[1])
        return fail(x, line, f->key, "[%d, %d]: the first step is after the last", dst[0], dst[1]);
    return 0;
}

static int store(ctx_t *x, mt_config *cfg, const field_t *f, const config_setting_t *s) {
    int line = (int)config_setting_source_line(s);
    int t = config_setting_type(s);
    char *dst = (char *)cfg + f->off;
    char buf[64];
    x->line[f - schema] = line;
    x->file_of[f - schema] = x->file;
    if (f->kind == K_RANGE) return store_range(x, cfg, f, s);

    if (f->kind == K_INT || f->kind == K_INT64) {
        if (t != CONFIG_TYPE_INT && t != CONFIG_TYPE_INT64)
            return fail(x, line, f->key, "expected an integer, got %s", type_name(t));
        long long v = config_setting_get_int64(s);
        const big_literal *big = (t == CONFIG_TYPE_INT && !x->file) ? big_literal_of(x, s) : NULL;
        if (big) { // libconfig wrapped it: read the literal ourselves
            errno = 0;
            int hex = strstr(big->text, "0x") || strstr(big->text, "0X");
            v = strtoll(big->text, NULL, hex ? 16 : 10);
            if (errno == ERANGE) return out_of_range(x, line, f, big->text);
        }
        snprintf(buf, sizeof buf, "%lld", v);
        if (!in_range(f, (double)v)) return out_of_range(x, line, f, buf);
        if (f->kind == K_INT)
            *(int *)dst = (int)v;
        else
            *(uint64_t *)dst = (uint64_t)v;
    } else if (f->kind == K_FLOAT) {
        // libconfig types 1e-3 as a float but 1 as an int: both are numbers here.
        if (t != CONFIG_TYPE_INT && t != CONFIG_TYPE_INT64 && t != CONFIG_TYPE_FLOAT)
            return fail(x, line, f->key, "expected a number, got %s", type_name(t));
        double v = (t == CONFIG_TYPE_FLOAT) ? config_setting_get_float(s)
                                            : (double)config_setting_get_int64(s);
        const big_literal *big = (t == CONFIG_TYPE_INT && !x->file) ? big_literal_of(x, s) : NULL;
        if (big) v = strtod(big->text, NULL);
        snprintf(buf, sizeof buf, "%.10g", v);
        if (!in_range(f, v)) return out_of_range(x, line, f, buf);
        *(double *)dst = v;
    } else if (f->kind == K_BOOL) {
        if (t != CONFIG_TYPE_BOOL)
            return fail(x, line, f->key, "expected true or false, got %s", type_name(t));
        *(int *)dst = config_setting_get_bool(s);
    } else {
        if (t != CONFIG_TYPE_STRING)
            return fail(x, line, f->key, "expected a string, got %s", type_name(t));
        const char *v = config_setting_get_string(s);
        if (f->choices && !choice_ok(f->choices, v)) {
            char list[160] = ""; // "auto|cpu|cuda" -> "auto", "cpu", "cuda"
            for (const char *p = f->choices; *p;) {
                size_t len = strcspn(p, "|"), used = strlen(list);
                snprintf(list + used, sizeof list - used, "%s\"%.*s\"", used ? ", " : "", (int)len,
                         p);
                p += len + (p[len] == '|');
            }
            return fail(x, line, f->key, "\"%s\" is not one of %s", v, list);
        }
        if (v[0] == 0) return fail(x, line, f->key, "must not be empty");
        if (strlen(v) >= f->size)
            return fail(x, line, f->key, "too long (at most %zu bytes)", f->size - 1);
        memcpy(dst, v, strlen(v) + 1);
    }
    return 0;
}

// Walks one group of the file (the root, or a known group) in file order.
static int walk(ctx_t *x, mt_config *cfg, const config_setting_t *group, const char *prefix) {
    for (int i = 0; i < config_setting_length(group); i++) {
        const config_setting_t *s = config_setting_get_elem(group, (unsigned)i);
        int line = (int)config_setting_source_line(s);
        x->file = config_setting_source_file(s);
        char key[128];
        snprintf(key, sizeof key, "%s%s%s", prefix ? prefix : "", prefix ? "." : "",
                 config_setting_name(s));
        const field_t *f = find_field(key);
        int t = config_setting_type(s);
        if (f) {
            if (store(x, cfg, f, s) < 0) return -1;
        } else if (is_group(key)) { // model = { rope_scaling = { ... } } nests one deeper
            if (t != CONFIG_TYPE_GROUP)
                return fail(x, line, key, "expected a group { ... }, got %s", type_name(t));
            if (walk(x, cfg, s, key) < 0) return -1;
        } else {
            const char *hint = suggest(key);
            if (hint) return fail(x, line, key, "unknown key (did you mean %s?)", hint);
            return fail(x, line, key, "unknown key");
        }
    }
    return 0;
}

// ---- paths ----

// Joins base and rel (rel may be absolute) and removes ".", ".." and repeated slashes,
// lexically. Returns -1 when the result does not fit.
static int join_path(char *out, size_t n, const char *base, const char *rel) {
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

// The absolute folder that holds the config file.
static int config_dir(ctx_t *x, char *out, size_t n) {
    char dir[MT_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", x->path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = 0;
    else
        *slash = 0;
    char real[PATH_MAX];
    if (!realpath(dir, real))
        return fail(x, 0, NULL, "cannot resolve its folder: %s", strerror(errno));
    snprintf(out, n, "%s", real);
    return 0;
}

// ---- derived defaults and cross-field rules ----

// The line of key k, 0 if it was not set; also points messages at the file that set it.
static int line_of(ctx_t *x, const char *k) {
    int i = (int)(find_field(k) - schema);
    x->file = x->file_of[i];
    return x->line[i];
}
#define LINE(k) line_of(x, k)
#define SEEN(k) (x->line[find_field(k) - schema] > 0)

static int resolve_paths(ctx_t *x, mt_config *cfg) {
    char dir[MT_PATH_MAX], out[MT_PATH_MAX];
    if (config_dir(x, dir, sizeof dir) < 0) return -1;

    if (cfg->data_path[0] && join_path(out, sizeof out, dir, cfg->data_path) < 0)
        return fail(x, LINE("data.path"), "data.path", "path too long");
    snprintf(cfg->data_path, sizeof cfg->data_path, "%s", out);
    if (cfg->val_path[0] && join_path(out, sizeof out, dir, cfg->val_path) < 0)
        return fail(x, LINE("data.val_path"), "data.val_path", "path too long");
    if (cfg->val_path[0]) snprintf(cfg->val_path, sizeof cfg->val_path, "%s", out);

    if (SEEN("checkpoint.dir")) {
        if (join_path(out, sizeof out, dir, cfg->checkpoint_dir) < 0)
            return fail(x, LINE("checkpoint.dir"), "checkpoint.dir", "path too long");
    } else { // runs/<config name>, under the folder mtrun is started from (like --out)
        char cwd[MT_PATH_MAX], name[256];
        if (!getcwd(cwd, sizeof cwd))
            return fail(x, 0, "checkpoint.dir", "getcwd: %s", strerror(errno));
        const char *base = strrchr(x->path, '/') ? strrchr(x->path, '/') + 1 : x->path;
        snprintf(name, sizeof name, "runs/%s", base);
        size_t len = strlen(name);
        if (len > 4 && strcmp(name + len - 4, ".cfg") == 0) name[len - 4] = 0;
        if (join_path(out, sizeof out, cwd, name) < 0)
            return fail(x, 0, "checkpoint.dir", "path too long");
    }
    snprintf(cfg->checkpoint_dir, sizeof cfg->checkpoint_dir, "%s", out);
    return 0;
}

static void apply_derived(ctx_t *x, mt_config *cfg) {
    if (!SEEN("model.kv_heads")) cfg->kv_heads = cfg->heads;
    if (!SEEN("optimizer.min_lr")) cfg->min_lr = cfg->lr / 10;
    if (!SEEN("optimizer.warmup_steps")) cfg->warmup_steps = cfg->steps / 10;
    if (!SEEN("checkpoint.interval")) cfg->checkpoint_interval = cfg->steps;
    if (cfg->val_path[0]) cfg->val_fraction = 0; // all of data.path trains
}

// model_dir's config.json supplies every model.* field. A model.* key that the file also sets
// must agree with it: a silent override would train a model that neither file describes.
// bos/eos ids that config.json does not give (-1): train.cfg may set them.
static int unset_special_id(const field_t *f, const mt_config *hf) {
    int special = f->off == offsetof(mt_config, bos_id) || f->off == offsetof(mt_config, eos_id);
    return special && *(const int *)((const char *)hf + f->off) < 0;
}

static int apply_hf_dirs(ctx_t *x, mt_config *cfg) {
    char dir[MT_PATH_MAX], out[MT_PATH_MAX], err[MT_PATH_MAX + 512];
    if (config_dir(x, dir, sizeof dir) < 0) return -1;
    if (cfg->export_dir[0] && join_path(out, sizeof out, dir, cfg->export_dir) < 0)
        return fail(x, LINE("export_dir"), "export_dir", "path too long");
    if (cfg->export_dir[0]) snprintf(cfg->export_dir, sizeof cfg->export_dir, "%s", out);
    if (cfg->export_dir[0] && hf_export_dir_check(cfg->export_dir, err, sizeof err) < 0)
        return fail(x, LINE("export_dir"), "export_dir", "%s", err);
    if (!cfg->model_dir[0]) return 0;
    if (join_path(out, sizeof out, dir, cfg->model_dir) < 0)
        return fail(x, LINE("model_dir"), "model_dir", "path too long");
    snprintf(cfg->model_dir, sizeof cfg->model_dir, "%s", out);
    static mt_config hf; // large (paths): not on the stack
    hf = *cfg;
    if (hf_read_config(cfg->model_dir, cfg->seq_len, &hf, err, sizeof err) < 0)
        return fail(x, LINE("model_dir"), "model_dir", "%s", err);
    for (int i = 0; i < NFIELDS; i++) {
        const field_t *f = &schema[i];
        if (strncmp(f->key, "model.", 6) != 0) continue;
        if (unset_special_id(f, &hf)) continue; // config.json has none: train.cfg's stands
        if (x->line[i] && memcmp((char *)cfg + f->off, (char *)&hf + f->off, f->size) != 0)
            return fail(x, LINE(f->key), f->key,
                        "disagrees with %s/config.json (model_dir sets it)", cfg->model_dir);
        memcpy((char *)cfg + f->off, (char *)&hf + f->off, f->size);
        if (f->kind == K_STRING) continue; // hf.c writes only names it knows
        double v =
            f->kind == K_FLOAT ? *(double *)((char *)cfg + f->off) : *(int *)((char *)cfg + f->off);
        if (!in_range(f, v))
            return fail(x, LINE("model_dir"), f->key, "%s/config.json gives %g: out of range",
                        cfg->model_dir, v);
    }
    memcpy(cfg->eos_more, hf.eos_more, sizeof cfg->eos_more); // not a key: Llama 3's eos list
    cfg->n_eos_more = hf.n_eos_more;
    return 0;
}

// The weights' headers, once the shape is known to be sane: mtrun reports bad files before
// anything starts (the ranks check them again in job_setup).
static int check_hf_weights(ctx_t *x, const mt_config *cfg) {
    char err[MT_PATH_MAX + 512];
    if (!cfg->model_dir[0]) return 0;
    hf_index *ix = hf_index_open(cfg->model_dir, err, sizeof err);
    int rc = ix ? hf_index_check(ix, cfg, err, sizeof err) : -1;
    hf_index_close(ix);
    return rc < 0 ? fail(x, LINE("model_dir"), "model_dir", "%s", err) : 0;
}

// Enough tokens for one window in the training head and, when evaluating, in the validation
// tail; with data.val_path, one in each file.
static int check_data_size(ctx_t *x, const mt_config *cfg, long n, long n_val) {
    long need = cfg->seq_len + 1L;
    long val = (long)((double)n * cfg->val_fraction); // 0 with val_path
    long train = n - val;
    if (train < need)
        return fail(x, LINE("data.path"), "data.path",
                    "%s: %ld training tokens, fewer than batch.seq_len + 1 = %ld", cfg->data_path,
                    train, need);
    if (cfg->val_path[0] && n_val < need)
        return fail(x, LINE("data.val_path"), "data.val_path",
                    "%s: %ld tokens, fewer than batch.seq_len + 1 = %ld", cfg->val_path, n_val,
                    need);
    if (!cfg->val_path[0] && cfg->eval_interval > 0 && val < need)
        return fail(x, LINE("data.path"), "data.path",
                    "%s: %ld validation tokens (data.val_fraction %g), fewer than "
                    "batch.seq_len + 1 = %ld",
                    cfg->data_path, val, cfg->val_fraction, need);
    return 0;
}

// The token count of key's path (data.path or data.val_path) in data.format, known before any
// token is read: shards' headers only (the token scan is at load), a text file's size.
static int count_tokens(ctx_t *x, const mt_config *cfg, const char *key, const char *path,
                        long *n) {
    int line = LINE(key);
    if (strcmp(cfg->data_format, "tokens") == 0) {
        char msg[MT_PATH_MAX + 256];
        size_t count;
        if (dataset_check_shards(path, &count, msg, sizeof msg) < 0)
            return fail(x, line, key, "%s", msg);
        *n = (long)count;
        return 0;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fail(x, line, key, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    int rc = fstat(fd, &st);
    close(fd);
    if (rc < 0) return fail(x, line, key, "%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return fail(x, line, key, "%s: not a regular file", path);
    *n = (long)st.st_size; // bytes: one token per byte
    return 0;
}

static int check_data_file(ctx_t *x, const mt_config *cfg) {
    long n, n_val = 0;
    if (strcmp(cfg->data_format, "synthetic") == 0) return 0; // tokens from a hash: no file
    if (!cfg->data_path[0]) return fail(x, 0, "data.path", "missing (required)");
    if (count_tokens(x, cfg, "data.path", cfg->data_path, &n) < 0) return -1;
    if (cfg->val_path[0] && count_tokens(x, cfg, "data.val_path", cfg->val_path, &n_val) < 0)
        return -1;
    return check_data_size(x, cfg, n, n_val);
}

static int cross_check(ctx_t *x, const mt_config *c) {
    const char *ids[] = {"model.bos_token_id", "model.eos_token_id"};
    int values[] = {c->bos_id, c->eos_id};
    for (int i = 0; i < 2; i++)
        if (values[i] >= c->vocab)
            return fail(x, LINE(ids[i]), ids[i], "%d is not below model.vocab = %d", values[i],
                        c->vocab);
    if (c->dim % c->heads)
        return fail(x, LINE("model.dim"), "model.dim", "%d is not divisible by model.heads = %d",
                    c->dim, c->heads);
    if (c->heads % c->kv_heads)
        return fail(x, LINE("model.kv_heads"), "model.kv_heads",
                    "%d does not divide model.heads = %d", c->kv_heads, c->heads);
    if (mt_head_dim(c) % 2)
        return fail(x, LINE("model.dim"), "model.dim",
                    "head dim = dim / heads = %d must be even (RoPE rotates pairs)",
                    mt_head_dim(c));
    if (strcmp(c->data_format, "bytes") == 0 && c->vocab != 256)
        return fail(x, LINE("model.vocab"), "model.vocab",
                    "%d, but data.format \"bytes\" needs 256", c->vocab);
    if (c->min_lr > c->lr)
        return fail(x, LINE("optimizer.min_lr"), "optimizer.min_lr",
                    "%g is above optimizer.lr = %g", c->min_lr, c->lr);
    if (c->warmup_steps > c->steps)
        return fail(x, LINE("optimizer.warmup_steps"), "optimizer.warmup_steps",
                    "%d is more than steps = %d", c->warmup_steps, c->steps);
    if (c->val_path[0] && SEEN("data.val_fraction"))
        return fail(x, LINE("data.val_fraction"), "data.val_fraction",
                    "not used with data.val_path (evaluation reads that; all of data.path trains)");
    if (c->val_path[0] && strcmp(c->data_format, "synthetic") == 0)
        return fail(x, LINE("data.val_path"), "data.val_path",
                    "not used with data.format \"synthetic\"");
    if (c->eval_interval > 0 && c->val_fraction == 0 && !c->val_path[0])
        return fail(x, LINE("eval.interval"), "eval.interval",
                    "evaluation needs data.val_fraction > 0 or data.val_path");
    if (c->device_groups > c->layers + 1)
        return fail(x, LINE("optimizer.device_groups"), "optimizer.device_groups",
                    "%d is more than the embedding and model.layers = %d layers", c->device_groups,
                    c->layers);
    if (c->trace_steps[1] > c->steps)
        return fail(x, LINE("trace_steps"), "trace_steps", "[%d, %d] goes past steps = %d",
                    c->trace_steps[0], c->trace_steps[1], c->steps);
    return 0;
}

static const char *const rope_keys[] = {
    "model.rope_scaling.factor", "model.rope_scaling.low_freq_factor",
    "model.rope_scaling.high_freq_factor", "model.rope_scaling.original_max_position_embeddings"};

// The four numbers go with rope_type "llama3", all of them (transformers demands them too: a
// silent default would change the frequencies), and the blend between the two wavelengths
// divides by high_freq_factor - low_freq_factor.
static int check_rope_scaling(ctx_t *x, const mt_config *c) {
    int llama3 = strcmp(c->rope_type, "llama3") == 0;
    for (int i = 0; i < 4; i++) {
        if (!llama3 && SEEN(rope_keys[i]))
            return fail(x, LINE(rope_keys[i]), rope_keys[i],
                        "only used with model.rope_scaling.rope_type = \"llama3\"");
        if (llama3 && !c->model_dir[0] && !SEEN(rope_keys[i]))
            return fail(x, LINE("model.rope_scaling.rope_type"), rope_keys[i],
                        "missing (rope_type \"llama3\" needs it)");
    }
    if (llama3 && !(c->rope_high_freq_factor > c->rope_low_freq_factor))
        return fail(x, LINE("model.rope_scaling.high_freq_factor"),
                    "model.rope_scaling.high_freq_factor",
                    "%g must be greater than low_freq_factor = %g", c->rope_high_freq_factor,
                    c->rope_low_freq_factor);
    return 0;
}

// ---- entry point ----

static void set_defaults(mt_config *cfg) {
    for (int i = 0; i < NFIELDS; i++) {
        const field_t *f = &schema[i];
        char *dst = (char *)cfg + f->off;
        switch (f->kind) {
        case K_INT:
        case K_BOOL:
            *(int *)dst = (int)f->def;
            break;
        case K_INT64:
            *(uint64_t *)dst = (uint64_t)f->def;
            break;
        case K_FLOAT:
            *(double *)dst = f->def;
            break;
        case K_STRING:
            snprintf(dst, f->size, "%s", f->sdef ? f->sdef : "");
            break;
        case K_RANGE: // none
            memset(dst, 0, f->size);
            break;
        }
    }
}

static int load(ctx_t *x, mt_config *cfg, config_t *lc) {
    struct stat st;
    if (stat(x->path, &st) == 0 && S_ISDIR(st.st_mode))
        return fail(x, 0, NULL, "cannot open: %s", strerror(EISDIR));
    FILE *f = fopen(x->path, "r");
    if (!f) return fail(x, 0, NULL, "cannot open: %s", strerror(errno));
    scan_big_literals(x, f);
    rewind(f);
    char dir[MT_PATH_MAX];
    if (config_dir(x, dir, sizeof dir) < 0) {
        fclose(f);
        return -1;
    }
    config_set_include_dir(lc, dir); // @include "x.cfg" is relative to this file too
    int ok = config_read(lc, f);
    fclose(f);
    if (!ok) {
        const char *file = config_error_file(lc);
        if (file) { // inside an @include: name that file
            snprintf(x->err, x->errlen, "%s:%d: %s", file, config_error_line(lc),
                     config_error_text(lc));
            return -1;
        }
        const char *text = config_error_text(lc);
        const char *hint = strcmp(text, "syntax error") == 0
                               ? " (settings look like: name = value; strings need \"quotes\")"
                               : "";
        return fail(x, config_error_line(lc), NULL, "%s%s", text, hint);
    }

    memset(cfg, 0, sizeof *cfg);
    set_defaults(cfg);
    snprintf(cfg->source_path, sizeof cfg->source_path, "%s", x->path);
    if (walk(x, cfg, config_root_setting(lc), NULL) < 0) return -1;
    x->file = NULL;
    for (int i = 0; i < NFIELDS; i++)
        if ((schema[i].flags & REQUIRED) && !x->line[i] &&
            !(cfg->model_dir[0] && strncmp(schema[i].key, "model.", 6) == 0)) // model_dir sets them
            return fail(x, 0, schema[i].key, "missing (required)");
    apply_derived(x, cfg);
    if (apply_hf_dirs(x, cfg) < 0) return -1;
    if (cross_check(x, cfg) < 0 || check_rope_scaling(x, cfg) < 0) return -1;
    if (check_hf_weights(x, cfg) < 0) return -1;
    if (resolve_paths(x, cfg) < 0) return -1;
    return check_data_file(x, cfg);
}

int mt_config_load(mt_config *cfg, const char *path, char *err, size_t errlen) {
    ctx_t x = {.path = path, .err = err, .errlen = errlen};
    if (errlen) err[0] = 0;
    config_t lc;
    config_init(&lc);
    int rc = load(&x, cfg, &lc);
    config_destroy(&lc);
    return rc;
}
