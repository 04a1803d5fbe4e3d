// Hugging Face config.json (Llama family) read into the model fields of an mt_config: the
// model description in Hugging Face's words. Weights (safetensors) are io/'s.
#include "runtime/model/model.h"
#include "runtime/base/base.h"
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CONFIG_MAX (16u << 20)

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
    if (cJSON_IsNumber(v) && !isfinite(d))
        return failf(j->err, j->errlen, "%s: %s is not a finite number", j->path, key);
    if (d < 1 || d != floor(d))
        return failf(j->err, j->errlen, "%s: %s must be a positive integer", j->path, key);
    if (d > INT_MAX)
        return failf(j->err, j->errlen, "%s: %s = %.17g is out of range: at most %d", j->path, key,
                     d, INT_MAX);
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
    if (d < 0 || d != floor(d)) // no cast before the range check: (int)1e300 is undefined
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
    if (head_dim && (int64_t)head_dim * m->heads != m->dim) // both up to INT_MAX: no overflow
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
    char why[256];
    cJSON *root = json_parse_strict(text, strlen(text), why, sizeof why);
    free(text);
    json_ctx j = {path, root, err, errlen};
    int rc = -1, arch = ARCH_LLAMA;
    if (!root)
        failf(err, errlen, "%s: %s", path, why);
    else if (!cJSON_IsObject(root))
        failf(err, errlen, "%s: not a JSON object", path);
    else if (check_architecture(&j, seq_len, &arch) == 0 && check_unsupported(&j, arch) == 0 &&
             read_shape(&j, arch, model) == 0)
        rc = read_rope(&j, model) == 0 ? read_special(&j, model) : -1; // rope after rope_theta
    cJSON_Delete(root);
    return rc;
}
