// Hugging Face folders: config.json (Llama family) and safetensors, in and out.
//
// A safetensors file is: 8 bytes little-endian header length N, N bytes of JSON
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the
// data; offsets are relative to the data. Every header is validated before anything is
// allocated, and weights are read with pread() over exactly the bytes a caller asks for, so
// each optimizer rank reads only its own slice and nothing holds a second full copy.
// Hosts are little-endian (x86-64, aarch64), as the files are.
#include "runtime/hf.h"
#include "kernels/bf16.h"
#include "runtime/fsutil.h"
#include "runtime/model.h"
#include "shm/syscheck.h"
#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEADER_MAX (100u << 20) // safetensors' own limit on the JSON header
#define CONFIG_MAX (16u << 20)

enum { DT_BF16, DT_F16, DT_F32 };
static const char *const dtype_names[] = {"BF16", "F16", "F32"};
static const int dtype_bytes[] = {2, 2, 4};

static int dtype_of(const char *name) {
    for (int d = 0; d < 3; d++)
        if (strcmp(name, dtype_names[d]) == 0) return d;
    return -1;
}

static int failf(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

// Reads a whole small file into a NUL-terminated buffer; NULL with err set on failure.
static char *read_text(const char *path, size_t max, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return failf(err, errlen, "%s: cannot open: %s", path, strerror(errno)), NULL;
    struct stat st;
    char *buf = NULL;
    if (fstat(fd, &st) != 0)
        failf(err, errlen, "%s: %s", path, strerror(errno));
    else if ((uint64_t)st.st_size > max)
        failf(err, errlen, "%s: too large for a JSON file", path);
    else if (!(buf = malloc((size_t)st.st_size + 1)))
        mt_die("out of memory");
    if (buf && pread(fd, buf, (size_t)st.st_size, 0) != st.st_size) {
        failf(err, errlen, "%s: short read", path);
        free(buf);
        buf = NULL;
    }
    if (buf) buf[st.st_size] = 0;
    SYS_CHECK(close(fd));
    return buf;
}

// ---- config.json ----

typedef struct {
    const char *path;
    const cJSON *root;
    char *err;
    size_t errlen;
} json_ctx;

static const cJSON *item(const json_ctx *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j->root, key);
    return cJSON_IsNull(v) ? NULL : v; // null means "the default", as in transformers
}

// A positive integer; def < 0 makes the key required.
static int get_int(const json_ctx *j, const char *key, int def, int *out) {
    const cJSON *v = item(j, key);
    if (!v && def >= 0) return *out = def, 0;
    if (!v) return failf(j->err, j->errlen, "%s: %s missing", j->path, key);
    double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
    if (d < 1 || d > INT_MAX || d != (double)(int)d)
        return failf(j->err, j->errlen, "%s: %s must be a positive integer", j->path, key);
    *out = (int)d;
    return 0;
}

static int get_num(const json_ctx *j, const char *key, double def, double *out) {
    const cJSON *v = item(j, key);
    if (!v) return *out = def, 0;
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0))
        return failf(j->err, j->errlen, "%s: %s must be a positive number", j->path, key);
    *out = v->valuedouble;
    return 0;
}

static int get_bool(const json_ctx *j, const char *key, int def, int *out) {
    const cJSON *v = item(j, key);
    if (!v) return *out = def, 0;
    if (!cJSON_IsBool(v))
        return failf(j->err, j->errlen, "%s: %s must be true or false", j->path, key);
    *out = cJSON_IsTrue(v);
    return 0;
}

// The architectures we train, and the defaults transformers' config classes give to what a
// config.json leaves out (num_key_value_heads differs between them).
enum { ARCH_LLAMA, ARCH_MISTRAL, ARCH_QWEN2 };
static const char *const arch_names[] = {"LlamaForCausalLM", "MistralForCausalLM",
                                         "Qwen2ForCausalLM"};

// The window as transformers reads it: Mistral's default is 4096 (null means none), Qwen2's
// counts only with use_sliding_window, Llama has none. Returns 0 when there is no window.
static int sliding_window(const json_ctx *j, int arch, double *window) {
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(j->root, "sliding_window");
    int use = 1;
    *window = 0;
    if (arch == ARCH_LLAMA) return 0;
    if (arch == ARCH_QWEN2 && get_bool(j, "use_sliding_window", 0, &use) < 0) return -1;
    if (!use) return 0;
    if (!w && arch == ARCH_MISTRAL) return *window = 4096, 0;
    if (!w || cJSON_IsNull(w)) return 0;
    if (!cJSON_IsNumber(w) || !(w->valuedouble > 0))
        return failf(j->err, j->errlen, "%s: sliding_window must be a positive integer or null",
                     j->path);
    *window = w->valuedouble;
    return 0;
}

// Llama; Mistral and Qwen2 are the same math (Qwen2 with q/k/v biases) while a window covers
// the whole sequence. Sets *arch.
static int check_architecture(const json_ctx *j, int seq_len, int *arch) {
    const cJSON *a = item(j, "architectures"), *first = cJSON_GetArrayItem(a, 0);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 1 || !cJSON_IsString(first))
        return failf(j->err, j->errlen, "%s: architectures must list exactly one class", j->path);
    const char *name = first->valuestring;
    *arch = -1;
    for (int i = 0; i < 3; i++)
        if (strcmp(name, arch_names[i]) == 0) *arch = i;
    if (*arch < 0)
        return failf(j->err, j->errlen,
                     "%s: architecture %s not supported (LlamaForCausalLM, MistralForCausalLM, "
                     "Qwen2ForCausalLM)",
                     j->path, name);
    double w;
    if (sliding_window(j, *arch, &w) < 0) return -1;
    if (w > 0 && w < seq_len)
        return failf(j->err, j->errlen,
                     "%s: sliding_window %g is shorter than batch.seq_len %d: not supported yet",
                     j->path, w, seq_len);
    return 0;
}

// Fields that would change the math and that we do not implement are errors, not ignored.
static int check_unsupported(const json_ctx *j, int arch) {
    const cJSON *act = item(j, "hidden_act");
    if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu")))
        return failf(j->err, j->errlen, "%s: hidden_act %s not supported (only silu)", j->path,
                     cJSON_IsString(act) ? act->valuestring : "(not a string)");
    int b = 0;
    // Qwen2's biases are fixed by its architecture (q, k, v); its config has no such keys.
    if (arch != ARCH_QWEN2 && get_bool(j, "attention_bias", 0, &b) < 0) return -1;
    if (b)
        return failf(j->err, j->errlen,
                     "%s: attention_bias = true (biases on q, k, v and o_proj) not supported yet; "
                     "only Qwen2's q/k/v biases are",
                     j->path);
    if (arch != ARCH_QWEN2 && get_bool(j, "mlp_bias", 0, &b) < 0) return -1;
    if (b) return failf(j->err, j->errlen, "%s: mlp_bias = true not supported yet", j->path);
    const cJSON *drop = item(j, "attention_dropout");
    if (drop && (!cJSON_IsNumber(drop) || drop->valuedouble != 0))
        return failf(j->err, j->errlen, "%s: attention_dropout must be 0 (dropout not supported)",
                     j->path);
    return 0;
}

// One of llama3's four numbers: positive, and an integer where transformers wants one.
static int rope_num(const json_ctx *j, const cJSON *rs, const char *obj, const char *key,
                    int integer, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(rs, key);
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) ||
        (integer && (v->valuedouble > INT_MAX || v->valuedouble != (double)(int)v->valuedouble)))
        return failf(j->err, j->errlen, "%s: %s.%s must be a positive %s (rope_type llama3)",
                     j->path, obj, key, integer ? "integer" : "number");
    *out = v->valuedouble;
    return 0;
}

// rope_scaling, or transformers 5's rope_parameters (which also carries rope_theta): absent,
// null, rope_type "default", or "llama3" with its four numbers. Any other type is an error.
static int read_rope(const json_ctx *j, mt_config *m) {
    const char *obj = "rope_scaling";
    const cJSON *rs = item(j, obj);
    if (!rs) rs = item(j, obj = "rope_parameters");
    memset(m->rope_type, 0, sizeof m->rope_type);
    snprintf(m->rope_type, sizeof m->rope_type, "none");
    if (!rs) return 0;
    if (!cJSON_IsObject(rs))
        return failf(j->err, j->errlen, "%s: %s must be an object or null", j->path, obj);
    const cJSON *theta = cJSON_GetObjectItemCaseSensitive(rs, "rope_theta");
    if (theta && (!cJSON_IsNumber(theta) || !(theta->valuedouble > 0)))
        return failf(j->err, j->errlen, "%s: %s.rope_theta must be a positive number", j->path,
                     obj);
    if (theta && item(j, "rope_theta") && theta->valuedouble != m->rope_theta)
        return failf(j->err, j->errlen, "%s: rope_theta %g disagrees with %s.rope_theta %g",
                     j->path, m->rope_theta, obj, theta->valuedouble);
    if (theta) m->rope_theta = theta->valuedouble;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    if (!t) t = cJSON_GetObjectItemCaseSensitive(rs, "type"); // its name before transformers 4.43
    if (!cJSON_IsString(t))
        return failf(j->err, j->errlen, "%s: %s has no rope_type", j->path, obj);
    if (strcmp(t->valuestring, "default") == 0) return 0;
    if (strcmp(t->valuestring, "llama3") != 0)
        return failf(j->err, j->errlen, "%s: rope_scaling type %s not supported (only llama3)",
                     j->path, t->valuestring);
    double orig = 0;
    if (rope_num(j, rs, obj, "factor", 0, &m->rope_factor) < 0 ||
        rope_num(j, rs, obj, "low_freq_factor", 0, &m->rope_low_freq_factor) < 0 ||
        rope_num(j, rs, obj, "high_freq_factor", 0, &m->rope_high_freq_factor) < 0 ||
        rope_num(j, rs, obj, "original_max_position_embeddings", 1, &orig) < 0)
        return -1;
    if (!(m->rope_high_freq_factor > m->rope_low_freq_factor))
        return failf(j->err, j->errlen,
                     "%s: %s.high_freq_factor %g must be greater than low_freq_factor %g", j->path,
                     obj, m->rope_high_freq_factor, m->rope_low_freq_factor);
    m->rope_original_max_pos = (int)orig;
    snprintf(m->rope_type, sizeof m->rope_type, "llama3");
    return 0;
}

// One special token id: absent or null is none (-1); present, it must name a token.
static int token_id(const json_ctx *j, const char *key, const cJSON *v, int vocab, int *out) {
    double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
    if (d < 0 || d != (double)(int)d)
        return failf(j->err, j->errlen, "%s: %s must be a token id (an integer >= 0)", j->path,
                     key);
    if (d >= vocab)
        return failf(j->err, j->errlen, "%s: %s %.0f is not below vocab_size %d", j->path, key, d,
                     vocab);
    *out = (int)d;
    return 0;
}

// bos_token_id, and eos_token_id: one id, or a list of them (Llama 3).
static int read_special(const json_ctx *j, mt_config *m) {
    const cJSON *bos = item(j, "bos_token_id"), *eos = item(j, "eos_token_id");
    int max_eos = 1 + (int)(sizeof m->eos_more / sizeof *m->eos_more);
    m->bos_id = m->eos_id = -1, m->n_eos_more = 0;
    if (bos && token_id(j, "bos_token_id", bos, m->vocab, &m->bos_id) < 0) return -1;
    if (!eos) return 0;
    if (!cJSON_IsArray(eos)) return token_id(j, "eos_token_id", eos, m->vocab, &m->eos_id);
    int n = cJSON_GetArraySize(eos);
    if (n < 1 || n > max_eos)
        return failf(j->err, j->errlen, "%s: eos_token_id lists %d ids (1 to %d supported)",
                     j->path, n, max_eos);
    for (int i = 0; i < n; i++) {
        int *dst = i == 0 ? &m->eos_id : &m->eos_more[i - 1];
        if (token_id(j, "eos_token_id", cJSON_GetArrayItem(eos, i), m->vocab, dst) < 0) return -1;
    }
    m->n_eos_more = n - 1;
    return 0;
}

static int read_shape(const json_ctx *j, int arch, mt_config *m) {
    int head_dim = 0;
    // transformers: Llama's num_key_value_heads defaults to the heads, Mistral's to 8, Qwen2's 32
    const int kv_default[] = {0, 8, 32};
    if (get_int(j, "hidden_size", -1, &m->dim) < 0 ||
        get_int(j, "intermediate_size", -1, &m->ffn_dim) < 0 ||
        get_int(j, "num_hidden_layers", -1, &m->layers) < 0 ||
        get_int(j, "num_attention_heads", -1, &m->heads) < 0 ||
        get_int(j, "vocab_size", -1, &m->vocab) < 0 ||
        get_int(j, "num_key_value_heads", kv_default[arch] ? kv_default[arch] : m->heads,
                &m->kv_heads) < 0 ||
        get_int(j, "head_dim", 0, &head_dim) < 0)
        return -1;
    if (head_dim && head_dim * m->heads != m->dim)
        return failf(j->err, j->errlen,
                     "%s: head_dim %d != hidden_size / num_attention_heads = %d: not supported",
                     j->path, head_dim, m->dim / m->heads);
    // The three config classes agree: rope_theta 10000, rms_norm_eps 1e-6, untied.
    if (get_num(j, "rope_theta", 10000, &m->rope_theta) < 0 ||
        get_num(j, "rms_norm_eps", 1e-6, &m->norm_eps) < 0 ||
        get_bool(j, "tie_word_embeddings", 0, &m->tied_embeddings) < 0)
        return -1;
    m->qkv_bias = arch == ARCH_QWEN2;
    return 0;
}

int hf_read_config(const char *dir, int seq_len, mt_config *model, char *err, size_t errlen) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = read_text(path, CONFIG_MAX, err, errlen);
    if (!text) return -1;
    cJSON *root = cJSON_Parse(text);
    free(text);
    json_ctx j = {path, root, err, errlen};
    int rc = -1, arch = ARCH_LLAMA;
    if (!cJSON_IsObject(root))
        failf(err, errlen, "%s: not a JSON object", path);
    else if (check_architecture(&j, seq_len, &arch) == 0 && check_unsupported(&j, arch) == 0 &&
             read_shape(&j, arch, model) == 0)
        rc = read_rope(&j, model) == 0 ? read_special(&j, model) : -1; // rope after rope_theta
    cJSON_Delete(root);
    return rc;
}

// ---- safetensors headers ----

typedef struct {
    char *name;
    int dtype, ndim, file;
    int64_t shape[8];
    uint64_t numel;
    uint64_t begin, end; // absolute byte offsets in the file
} hf_tensor;

struct hf_index {
    char index_path[PATH_MAX]; // the file that names the tensors (for "missing" messages)
    int n_files, n, cap;
    char **files;
    int *fds;
    hf_tensor *t;
};

static hf_tensor *find_tensor(const hf_index *ix, const char *name) {
    for (int i = 0; i < ix->n; i++)
        if (strcmp(ix->t[i].name, name) == 0) return &ix->t[i];
    return NULL;
}

static int parse_u64(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 0x1p53 ||
        v->valuedouble != (double)(uint64_t)v->valuedouble)
        return -1;
    *out = (uint64_t)v->valuedouble;
    return 0;
}

// One header entry; base is where the data starts, data the bytes after it.
static int parse_entry(hf_index *ix, int f, const cJSON *e, uint64_t base, uint64_t data, char *err,
                       size_t errlen) {
    const char *path = ix->files[f], *name = e->string;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    hf_tensor t = {.file = f, .numel = 1};
    if (!cJSON_IsString(dt) || !cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > 8 ||
        !cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        return failf(err, errlen, "%s: tensor %s: malformed header entry", path, name);
    if ((t.dtype = dtype_of(dt->valuestring)) < 0)
        return failf(err, errlen, "%s: tensor %s: dtype %s not supported (BF16, F16, F32)", path,
                     name, dt->valuestring);
    const cJSON *d;
    cJSON_ArrayForEach(d, shape) {
        uint64_t dim;
        if (parse_u64(d, &dim) < 0)
            return failf(err, errlen, "%s: tensor %s: bad shape", path, name);
        t.shape[t.ndim++] = (int64_t)dim;
        t.numel *= dim;
    }
    uint64_t b, en;
    if (parse_u64(cJSON_GetArrayItem(offs, 0), &b) < 0 ||
        parse_u64(cJSON_GetArrayItem(offs, 1), &en) < 0 || b > en || en > data)
        return failf(err, errlen,
                     "%s: tensor %s: data_offsets outside the file's %llu data bytes (truncated?)",
                     path, name, (unsigned long long)data);
    if (en - b != t.numel * (uint64_t)dtype_bytes[t.dtype])
        return failf(err, errlen, "%s: tensor %s: %llu bytes, but %llu elements of %s need %llu",
                     path, name, (unsigned long long)(en - b), (unsigned long long)t.numel,
                     dtype_names[t.dtype], (unsigned long long)(t.numel * dtype_bytes[t.dtype]));
    if (find_tensor(ix, name)) return failf(err, errlen, "%s: tensor %s appears twice", path, name);
    t.begin = base + b, t.end = base + en;
    if (!(t.name = strdup(name))) mt_die("out of memory");
    if (ix->n == ix->cap) {
        ix->cap = ix->cap ? 2 * ix->cap : 64;
        if (!(ix->t = realloc(ix->t, ix->cap * sizeof *ix->t))) mt_die("out of memory");
    }
    ix->t[ix->n++] = t;
    return 0;
}

static int by_begin(const void *a, const void *b) {
    const hf_tensor *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

// Two tensors sharing bytes is a corrupt file (the format forbids it; we would train on both).
static int check_overlaps(const hf_index *ix, int first, char *err, size_t errlen) {
    int n = ix->n - first;
    hf_tensor *s = malloc((n ? n : 1) * sizeof *s);
    if (!s) mt_die("out of memory");
    memcpy(s, ix->t + first, n * sizeof *s);
    qsort(s, n, sizeof *s, by_begin);
    int rc = 0;
    for (int i = 1; i < n && rc == 0; i++)
        if (s[i].begin < s[i - 1].end)
            rc = failf(err, errlen, "%s: tensors %s and %s overlap", ix->files[s[i].file],
                       s[i - 1].name, s[i].name);
    free(s);
    return rc;
}

static int parse_header_json(hf_index *ix, int f, const char *json, uint64_t hlen, uint64_t size,
                             char *err, size_t errlen) {
    cJSON *root = cJSON_ParseWithLength(json, hlen);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return failf(err, errlen, "%s: header is not a JSON object", ix->files[f]);
    }
    int first = ix->n, rc = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        if ((rc = parse_entry(ix, f, e, 8 + hlen, size - 8 - hlen, err, errlen)) < 0) break;
    }
    cJSON_Delete(root);
    return rc < 0 ? rc : check_overlaps(ix, first, err, errlen);
}

static int read_header(hf_index *ix, int f, int sharded, char *err, size_t errlen) {
    const char *path = ix->files[f];
    int fd = ix->fds[f] = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && sharded)
        return failf(err, errlen, "%s: missing shard (listed in %s)", path, ix->index_path);
    if (fd < 0) return failf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    SYS_CHECK(fstat(fd, &st));
    uint64_t size = (uint64_t)st.st_size, hlen = 0;
    unsigned char len8[8];
    if (size < 8 || pread(fd, len8, 8, 0) != 8)
        return failf(err, errlen, "%s: truncated (no 8-byte header length)", path);
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
    if (hlen > HEADER_MAX)
        return failf(err, errlen, "%s: header length %llu is over the 100 MB limit", path,
                     (unsigned long long)hlen);
    if (hlen > size - 8)
        return failf(err, errlen, "%s: truncated (header of %llu bytes, file of %llu)", path,
                     (unsigned long long)hlen, (unsigned long long)size);
    char *json = malloc(hlen + 1);
    if (!json) mt_die("out of memory");
    int rc = pread(fd, json, hlen, 8) == (ssize_t)hlen
                 ? parse_header_json(ix, f, json, hlen, size, err, errlen)
                 : failf(err, errlen, "%s: short read of the header", path);
    free(json);
    return rc;
}

static int add_file(hf_index *ix, const char *dir, const char *name) {
    for (int i = 0; i < ix->n_files; i++)
        if (strcmp(strrchr(ix->files[i], '/') + 1, name) == 0) return i;
    ix->files = realloc(ix->files, (ix->n_files + 1) * sizeof *ix->files);
    ix->fds = realloc(ix->fds, (ix->n_files + 1) * sizeof *ix->fds);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!ix->files || !ix->fds || !(ix->files[ix->n_files] = strdup(path))) mt_die("out of memory");
    ix->fds[ix->n_files] = -1;
    return ix->n_files++;
}

// The index's weight_map names the shards; each name must then be in the shard it names.
static int open_sharded(hf_index *ix, const char *dir, char *err, size_t errlen) {
    char *text = read_text(ix->index_path, CONFIG_MAX, err, errlen);
    if (!text) return -1;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map"), *e;
    int rc = cJSON_IsObject(map) ? 0 : failf(err, errlen, "%s: no weight_map", ix->index_path);
    if (rc < 0) map = NULL; // the loops below then do nothing
    cJSON_ArrayForEach(e, map) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || !e->valuestring[0]) {
            rc = failf(err, errlen, "%s: %s: not a file name", ix->index_path, e->string);
            break;
        }
        add_file(ix, dir, e->valuestring);
    }
    for (int f = 0; f < ix->n_files && rc == 0; f++) rc = read_header(ix, f, 1, err, errlen);
    cJSON_ArrayForEach(e, map) {
        if (rc < 0) break;
        const hf_tensor *t = find_tensor(ix, e->string);
        if (!t || strcmp(strrchr(ix->files[t->file], '/') + 1, e->valuestring)) {
            rc = failf(err, errlen,
                       "%s/%s: no tensor %s (model.safetensors.index.json maps it there)", dir,
                       e->valuestring, e->string);
            break;
        }
    }
    cJSON_Delete(root);
    return rc;
}

hf_index *hf_index_open(const char *dir, char *err, size_t errlen) {
    hf_index *ix = calloc(1, sizeof *ix);
    if (!ix) mt_die("out of memory");
    snprintf(ix->index_path, sizeof ix->index_path, "%s/model.safetensors.index.json", dir);
    int rc;
    if (access(ix->index_path, F_OK) == 0) {
        rc = open_sharded(ix, dir, err, errlen);
    } else {
        snprintf(ix->index_path, sizeof ix->index_path, "%s/model.safetensors", dir);
        rc = read_header(ix, add_file(ix, dir, "model.safetensors"), 0, err, errlen);
        if (rc < 0 && access(ix->index_path, F_OK) != 0)
            rc =
                failf(err, errlen, "%s: no model.safetensors or model.safetensors.index.json", dir);
    }
    if (rc == 0) return ix;
    hf_index_close(ix);
    return NULL;
}

void hf_index_close(hf_index *ix) {
    if (!ix) return;
    for (int f = 0; f < ix->n_files; f++) {
        if (ix->fds[f] >= 0) SYS_CHECK(close(ix->fds[f]));
        free(ix->files[f]);
    }
    for (int i = 0; i < ix->n; i++) free(ix->t[i].name);
    free(ix->files);
    free(ix->fds);
    free(ix->t);
    free(ix);
}

// ---- matching the model ----

// model.c's names carry "%d" for the layer; expanded by hand, not as a format string.
static void tensor_name(char *out, size_t cap, const char *pattern, int layer) {
    const char *p = strstr(pattern, "%d");
    if (!p)
        snprintf(out, cap, "%s", pattern);
    else
        snprintf(out, cap, "%.*s%d%s", (int)(p - pattern), pattern, layer, p + 2);
}

static int check_one(const hf_index *ix, const tensor_info *ti, const char *name, char *used,
                     char *err, size_t errlen) {
    const hf_tensor *t = find_tensor(ix, name);
    if (!t)
        return failf(err, errlen, "%s: no tensor %s (config.json needs it)", ix->index_path, name);
    used[t - ix->t] = 1;
    int ndim = ti->cols ? 2 : 1;
    if (t->ndim != ndim || t->shape[0] != ti->rows || (ndim == 2 && t->shape[1] != ti->cols)) {
        char got[64] = "[", want[32];
        for (int d = 0; d < t->ndim; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "",
                     (long long)t->shape[d]);
        if (ti->cols)
            snprintf(want, sizeof want, "[%d, %d]", ti->rows, ti->cols);
        else
            snprintf(want, sizeof want, "[%d]", ti->rows);
        return failf(err, errlen, "%s: tensor %s has shape %s], config.json needs %s",
                     ix->files[t->file], name, got, want);
    }
    return 0;
}

// Leftovers that do not change the math: old checkpoints' RoPE tables, and lm_head.weight
// saved beside tied embeddings (transformers ties it to the embedding on load, too).
static int ignorable(const char *name, const mt_config *cfg) {
    size_t n = strlen(name), k = strlen("rotary_emb.inv_freq");
    if (n >= k && strcmp(name + n - k, "rotary_emb.inv_freq") == 0) return 1;
    return cfg->tied_embeddings && strcmp(name, "lm_head.weight") == 0;
}

int hf_index_check(const hf_index *ix, const mt_config *cfg, char *err, size_t errlen) {
    char *used = calloc(ix->n ? ix->n : 1, 1), name[256];
    if (!used) mt_die("out of memory");
    int rc = 0;
    for (int g = 0; g < model_group_count(cfg) && rc == 0; g++) {
        tensor_info ti[MODEL_MAX_TENSORS];
        uint64_t numel;
        int n = model_group_tensors(cfg, g, ti, &numel);
        for (int k = 0; k < n && rc == 0; k++) {
            tensor_name(name, sizeof name, ti[k].name, g - 1);
            rc = check_one(ix, &ti[k], name, used, err, errlen);
        }
    }
    for (int i = 0; i < ix->n && rc == 0; i++)
        if (!used[i] && !ignorable(ix->t[i].name, cfg))
            rc = failf(err, errlen, "%s: unexpected tensor %s (not part of a %s model)",
                       ix->files[ix->t[i].file], ix->t[i].name, cfg->qkv_bias ? "Qwen2" : "Llama");
    free(used);
    return rc;
}

// ---- reading ----

// Exact half -> float, subnormals, infinities and NaN payloads included.
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | man << 13;
    } else if (exp) {
        bits = sign | (exp + 112) << 23 | man << 13;
    } else if (!man) {
        bits = sign;
    } else { // subnormal: man x 2^-24, renormalized
        uint32_t e = 113;
        while (!(man & 0x400u)) man <<= 1, e--;
        bits = sign | e << 23 | (man & 0x3ffu) << 13;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static void convert(int dtype, const unsigned char *src, size_t n, float *out) {
    if (dtype == DT_F32) {
        memcpy(out, src, n * 4);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint16_t h = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);
        if (dtype == DT_F16) {
            out[i] = f16_to_f32(h);
        } else {
            uint32_t bits = (uint32_t)h << 16;
            memcpy(&out[i], &bits, 4);
        }
    }
}

int hf_read_range(const hf_index *ix, const char *name, uint64_t off, uint64_t count, float *out,
                  char *err, size_t errlen) {
    const hf_tensor *t = find_tensor(ix, name);
    if (!t) return failf(err, errlen, "%s: no tensor %s", ix->index_path, name);
    if (off > t->numel || count > t->numel - off)
        return failf(err, errlen, "%s: tensor %s: elements past its end", ix->index_path, name);
    enum { CHUNK = 1 << 16 }; // elements per pread: bounded memory, whatever the slice
    static __thread unsigned char buf[CHUNK * 4];
    size_t es = (size_t)dtype_bytes[t->dtype];
    while (count > 0) {
        size_t n = count < CHUNK ? (size_t)count : CHUNK, want = n * es, got = 0;
        off_t at = (off_t)(t->begin + off * es);
        while (got < want) {
            ssize_t r = pread(ix->fds[t->file], buf + got, want - got, at + (off_t)got);
            if (r <= 0)
                return failf(err, errlen, "%s: tensor %s: read failed: %s", ix->files[t->file],
                             name, r < 0 ? strerror(errno) : "unexpected end of file");
            got += (size_t)r;
        }
        convert(t->dtype, buf, n, out);
        out += n, off += n, count -= n;
    }
    return 0;
}

int hf_read_group_slice(const hf_index *ix, const mt_config *cfg, int g, uint64_t lo, uint64_t len,
                        float *out, char *err, size_t errlen) {
    tensor_info ti[MODEL_MAX_TENSORS];
    uint64_t numel;
    char name[256];
    int n = model_group_tensors(cfg, g, ti, &numel);
    for (int k = 0; k < n; k++) {
        uint64_t a = ti[k].offset > lo ? ti[k].offset : lo;
        uint64_t b = ti[k].offset + ti[k].numel < lo + len ? ti[k].offset + ti[k].numel : lo + len;
        if (a >= b) continue;
        tensor_name(name, sizeof name, ti[k].name, g - 1);
        if (hf_read_range(ix, name, a - ti[k].offset, b - a, out + (a - lo), err, errlen) < 0)
            return -1;
    }
    return 0;
}

// ---- export ----

typedef struct {
    int g, k, shard;
    uint64_t rel; // byte offset in its shard's data
} plan_entry;

typedef struct {
    int n, n_shards;
    plan_entry *e;
    uint64_t *data_start, *data_bytes; // per shard
} export_plan;

// export_dtype "bfloat16" halves the files; the default keeps the fp32 master bits.
static int export_bf16(const mt_config *cfg) {
    return strcmp(cfg->export_dtype, "bfloat16") == 0;
}
static uint64_t export_size(const mt_config *cfg) {
    return export_bf16(cfg) ? 2 : 4;
}

static void shard_file(char *out, size_t cap, int s, int n) {
    snprintf(out, cap, "model-%05d-of-%05d.safetensors", s + 1, n);
}

// Groups in order, tensors in order; a shard closes when the next tensor would overflow it.
static void plan_tensors(const mt_config *cfg, uint64_t max, export_plan *p) {
    int cap = 0;
    uint64_t used = 0;
    memset(p, 0, sizeof *p);
    for (int g = 0; g < model_group_count(cfg); g++) {
        tensor_info ti[MODEL_MAX_TENSORS];
        uint64_t numel;
        int n = model_group_tensors(cfg, g, ti, &numel);
        for (int k = 0; k < n; k++) {
            uint64_t bytes = ti[k].numel * export_size(cfg);
            if (p->n == 0 || (used > 0 && used + bytes > max)) p->n_shards++, used = 0;
            if (p->n == cap && !(p->e = realloc(p->e, (cap = cap ? 2 * cap : 64) * sizeof *p->e)))
                mt_die("out of memory");
            p->e[p->n++] = (plan_entry){g, k, p->n_shards - 1, used};
            used += bytes;
        }
    }
}

static const tensor_info *entry_info(const mt_config *cfg, const plan_entry *e, tensor_info *ti,
                                     char *name, size_t cap) {
    uint64_t numel;
    model_group_tensors(cfg, e->g, ti, &numel);
    tensor_name(name, cap, ti[e->k].name, e->g - 1);
    return &ti[e->k];
}

// The JSON header of shard s, padded with spaces to a multiple of 8 (aligned data).
static char *shard_header(const mt_config *cfg, const export_plan *p, int s, uint64_t *len) {
    cJSON *root = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(root, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    for (int i = 0; i < p->n; i++) {
        if (p->e[i].shard != s) continue;
        tensor_info ti[MODEL_MAX_TENSORS];
        char name[256];
        const tensor_info *t = entry_info(cfg, &p->e[i], ti, name, sizeof name);
        cJSON *o = cJSON_AddObjectToObject(root, name);
        cJSON_AddStringToObject(o, "dtype", export_bf16(cfg) ? "BF16" : "F32");
        cJSON *shape = cJSON_AddArrayToObject(o, "shape"), *offs;
        cJSON_AddItemToArray(shape, cJSON_CreateNumber(t->rows));
        if (t->cols) cJSON_AddItemToArray(shape, cJSON_CreateNumber(t->cols));
        offs = cJSON_AddArrayToObject(o, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)p->e[i].rel));
        uint64_t end = p->e[i].rel + t->numel * export_size(cfg);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)end));
    }
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    size_t n = strlen(json), padded = (n + 7) & ~(size_t)7;
    char *out = malloc(padded + 1);
    if (!json || !out) mt_die("out of memory");
    memcpy(out, json, n);
    memset(out + n, ' ', padded - n);
    out[padded] = 0;
    free(json);
    *len = padded;
    return out;
}

static void make_plan(const mt_config *cfg, uint64_t max, export_plan *p) {
    plan_tensors(cfg, max, p);
    p->data_start = calloc(p->n_shards, sizeof *p->data_start);
    p->data_bytes = calloc(p->n_shards, sizeof *p->data_bytes);
    if (!p->data_start || !p->data_bytes) mt_die("out of memory");
    for (int s = 0; s < p->n_shards; s++) {
        uint64_t hlen;
        free(shard_header(cfg, p, s, &hlen));
        p->data_start[s] = 8 + hlen;
    }
    for (int i = 0; i < p->n; i++) {
        tensor_info ti[MODEL_MAX_TENSORS];
        char name[256];
        uint64_t numel = entry_info(cfg, &p->e[i], ti, name, sizeof name)->numel;
        uint64_t end = p->e[i].rel + numel * export_size(cfg);
        p->data_bytes[p->e[i].shard] = end;
    }
}

static void free_plan(export_plan *p) {
    free(p->e);
    free(p->data_start);
    free(p->data_bytes);
}

static void write_all(int fd, const void *buf, size_t n, off_t at, const char *path) {
    for (size_t done = 0; done < n;) {
        ssize_t w = pwrite(fd, (const char *)buf + done, n - done, at + (off_t)done);
        if (w < 0) mt_die("%s: write failed: %s", path, strerror(errno));
        done += (size_t)w;
    }
}

static void write_json(const char *dir, const char *file, cJSON *root) {
    char path[PATH_MAX], *text = cJSON_Print(root);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 || !text) mt_die("%s: %s", path, fd < 0 ? strerror(errno) : "out of memory");
    write_all(fd, text, strlen(text), 0, path);
    write_all(fd, "\n", 1, (off_t)strlen(text), path);
    SYS_CHECK(fsync(fd));
    SYS_CHECK(close(fd));
    free(text);
    cJSON_Delete(root);
}

// A double that JSON readers take back as a float, never an int ("8.0", not "8"): transformers
// warns about an int factor. Shortest text that reads back to the same bits.
static void add_float(cJSON *obj, const char *key, double v) {
    char text[40];
    snprintf(text, sizeof text, "%.15g", v);
    if (strtod(text, NULL) != v) snprintf(text, sizeof text, "%.17g", v);
    if (!strpbrk(text, ".e")) strcat(text, ".0");
    cJSON_AddItemToObject(obj, key, cJSON_CreateRaw(text));
}

// rope_scaling as transformers reads it back: null, or llama3's object.
static void add_rope_scaling(cJSON *r, const mt_config *c) {
    if (strcmp(c->rope_type, "llama3") != 0) {
        cJSON_AddNullToObject(r, "rope_scaling");
        return;
    }
    cJSON *rs = cJSON_AddObjectToObject(r, "rope_scaling");
    cJSON_AddStringToObject(rs, "rope_type", "llama3");
    add_float(rs, "factor", c->rope_factor);
    add_float(rs, "low_freq_factor", c->rope_low_freq_factor);
    add_float(rs, "high_freq_factor", c->rope_high_freq_factor);
    cJSON_AddNumberToObject(rs, "original_max_position_embeddings", c->rope_original_max_pos);
}

// Llama, or Qwen2 for q/k/v biases (a Llama with attention_bias would also bias o_proj). A
// Mistral input comes out as Llama: the same math within its window.
static void write_config(const mt_config *c, const char *dir) {
    cJSON *r = cJSON_CreateObject(), *arch = cJSON_AddArrayToObject(r, "architectures");
    cJSON_AddItemToArray(arch,
                         cJSON_CreateString(c->qkv_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM"));
    cJSON_AddStringToObject(r, "model_type", c->qkv_bias ? "qwen2" : "llama");
    cJSON_AddNumberToObject(r, "hidden_size", c->dim);
    cJSON_AddNumberToObject(r, "intermediate_size", c->ffn_dim);
    cJSON_AddNumberToObject(r, "num_hidden_layers", c->layers);
    cJSON_AddNumberToObject(r, "num_attention_heads", c->heads);
    cJSON_AddNumberToObject(r, "num_key_value_heads", c->kv_heads);
    cJSON_AddNumberToObject(r, "head_dim", mt_head_dim(c));
    cJSON_AddNumberToObject(r, "vocab_size", c->vocab);
    cJSON_AddNumberToObject(r, "rope_theta", c->rope_theta); // cJSON prints doubles round-trip
    add_rope_scaling(r, c);
    cJSON_AddNumberToObject(r, "rms_norm_eps", c->norm_eps);
    cJSON_AddBoolToObject(r, "tie_word_embeddings", c->tied_embeddings);
    if (c->bos_id >= 0) cJSON_AddNumberToObject(r, "bos_token_id", c->bos_id);
    if (c->eos_id >= 0 && c->n_eos_more == 0) cJSON_AddNumberToObject(r, "eos_token_id", c->eos_id);
    if (c->eos_id >= 0 && c->n_eos_more > 0) {
        cJSON *eos = cJSON_AddArrayToObject(r, "eos_token_id");
        cJSON_AddItemToArray(eos, cJSON_CreateNumber(c->eos_id));
        for (int i = 0; i < c->n_eos_more; i++)
            cJSON_AddItemToArray(eos, cJSON_CreateNumber(c->eos_more[i]));
    }
    if (c->qkv_bias) { // Qwen2's config class has no bias keys; its window must stay off
        cJSON_AddBoolToObject(r, "use_sliding_window", 0);
        cJSON_AddNullToObject(r, "sliding_window");
        cJSON_AddNumberToObject(r, "max_window_layers", c->layers);
    } else {
        cJSON_AddBoolToObject(r, "attention_bias", 0);
        cJSON_AddBoolToObject(r, "mlp_bias", 0);
    }
    cJSON_AddNumberToObject(r, "attention_dropout", 0);
    cJSON_AddStringToObject(r, "hidden_act", "silu");
    // llama3 scaling exists to reach past its original context: transformers expects more
    int ctx = c->seq_len;
    if (strcmp(c->rope_type, "llama3") == 0 && c->rope_factor * c->rope_original_max_pos > ctx)
        ctx = (int)fmin(c->rope_factor * c->rope_original_max_pos, INT_MAX);
    cJSON_AddNumberToObject(r, "max_position_embeddings", ctx);
    cJSON_AddNumberToObject(r, "initializer_range", 0.02);
    cJSON_AddNumberToObject(r, "pretraining_tp", 1);
    cJSON_AddBoolToObject(r, "use_cache", 1);
    cJSON_AddStringToObject(r, "torch_dtype", export_bf16(c) ? "bfloat16" : "float32");
    write_json(dir, "config.json", r);
}

static void write_index(const mt_config *cfg, const export_plan *p, const char *dir) {
    cJSON *r = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(r, "metadata");
    cJSON *map = cJSON_AddObjectToObject(r, "weight_map");
    double total = 0;
    for (int s = 0; s < p->n_shards; s++) total += (double)p->data_bytes[s];
    cJSON_AddNumberToObject(meta, "total_size", total);
    for (int i = 0; i < p->n; i++) {
        tensor_info ti[MODEL_MAX_TENSORS];
        char name[256], file[64];
        entry_info(cfg, &p->e[i], ti, name, sizeof name);
        shard_file(file, sizeof file, p->e[i].shard, p->n_shards);
        cJSON_AddStringToObject(map, name, file);
    }
    write_json(dir, "model.safetensors.index.json", r);
}

// A crashed earlier export leaves its temporary folder behind: it holds only our flat files.
static void remove_stale(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    char path[PATH_MAX];
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            SYS_CHECK(unlink(path));
        }
    SYS_CHECK(closedir(d));
    SYS_CHECK(rmdir(dir));
}

void hf_export_prepare(const mt_config *cfg, const char *tmp_dir, uint64_t max) {
    export_plan p;
    make_plan(cfg, max, &p);
    remove_stale(tmp_dir);
    make_dirs(tmp_dir);
    write_config(cfg, tmp_dir);
    write_index(cfg, &p, tmp_dir);
    for (int s = 0; s < p.n_shards; s++) {
        char file[64], path[PATH_MAX];
        shard_file(file, sizeof file, s, p.n_shards);
        snprintf(path, sizeof path, "%s/%s", tmp_dir, file);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) mt_die("%s: %s", path, strerror(errno));
        uint64_t hlen;
        char *h = shard_header(cfg, &p, s, &hlen);
        unsigned char len8[8];
        for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(hlen >> (8 * i));
        write_all(fd, len8, 8, 0, path);
        write_all(fd, h, hlen, 8, path);
        free(h);
        SYS_CHECK(ftruncate(fd, (off_t)(p.data_start[s] + p.data_bytes[s])));
        SYS_CHECK(fsync(fd));
        SYS_CHECK(close(fd));
    }
    free_plan(&p);
}

// fp32 as is, or rounded to bf16 (nearest even, as torch) a bounded chunk at a time.
static void write_values(const mt_config *cfg, int fd, const float *v, uint64_t n, off_t at,
                         const char *path) {
    if (!export_bf16(cfg)) {
        write_all(fd, v, n * 4, at, path);
        return;
    }
    enum { CHUNK = 1 << 16 };
    static __thread bf16 buf[CHUNK];
    for (uint64_t done = 0; done < n;) {
        size_t m = n - done < CHUNK ? (size_t)(n - done) : CHUNK;
        for (size_t i = 0; i < m; i++) buf[i] = bf16_from_float(v[done + i]);
        write_all(fd, buf, m * 2, at + (off_t)(done * 2), path);
        done += m;
    }
}

void hf_export_write_slice(const mt_config *cfg, const char *tmp_dir, uint64_t max, int g,
                           uint64_t lo, uint64_t len, const float *data) {
    export_plan p;
    make_plan(cfg, max, &p);
    for (int i = 0; i < p.n; i++) {
        if (p.e[i].g != g) continue;
        tensor_info ti[MODEL_MAX_TENSORS];
        char name[256], file[64], path[PATH_MAX];
        const tensor_info *t = entry_info(cfg, &p.e[i], ti, name, sizeof name);
        uint64_t a = t->offset > lo ? t->offset : lo;
        uint64_t b = t->offset + t->numel < lo + len ? t->offset + t->numel : lo + len;
        if (a >= b) continue;
        shard_file(file, sizeof file, p.e[i].shard, p.n_shards);
        snprintf(path, sizeof path, "%s/%s", tmp_dir, file);
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0) mt_die("%s: %s", path, strerror(errno));
        uint64_t es = export_size(cfg);
        off_t at = (off_t)(p.data_start[p.e[i].shard] + p.e[i].rel + (a - t->offset) * es);
        write_values(cfg, fd, data + (a - lo), b - a, at, path);
        SYS_CHECK(fsync(fd));
        SYS_CHECK(close(fd));
    }
    free_plan(&p);
}

static void fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) mt_die("%s: %s", dir, strerror(errno));
    SYS_CHECK(fsync(fd));
    SYS_CHECK(close(fd));
}

void hf_export_publish(const char *tmp_dir, const char *dir) {
    fsync_dir(tmp_dir);
    // rename() replaces an empty folder atomically; hf_export_dir_check refused a full one.
    if (rename(tmp_dir, dir) != 0) mt_die("rename %s -> %s: %s", tmp_dir, dir, strerror(errno));
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) *slash = 0;
    fsync_dir(slash ? parent : ".");
}

int hf_export_dir_check(const char *dir, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d && errno == ENOENT) return 0;
    if (!d) return failf(err, errlen, "%s: %s", dir, strerror(errno));
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    SYS_CHECK(closedir(d));
    if (n)
        return failf(err, errlen, "%s already exists and is not empty: refusing to overwrite it",
                     dir);
    return 0;
}

void hf_export_tmp_path(const char *dir, char *out, size_t cap) {
    snprintf(out, cap, "%s.export-tmp", dir);
}

uint64_t hf_export_max_shard_bytes(void) {
    const char *s = getenv("MT_HF_MAX_SHARD_BYTES");
    unsigned long long v = s ? strtoull(s, NULL, 10) : 0;
    return v > 0 ? (uint64_t)v : HF_MAX_SHARD_BYTES;
}
