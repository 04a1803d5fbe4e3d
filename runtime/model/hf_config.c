// Hugging Face config.json read into the model fields of an mt_config: the model description in
// Hugging Face's words (the architectures themselves: hf_family.c). Weights (safetensors) are
// io/'s.
#include "runtime/model/hf_json.h"
#include "runtime/base/base.h"
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CONFIG_MAX (16u << 20)

// One of llama3's or yarn's numbers: positive, and an integer where transformers wants one.
static int rope_num(const json_ctx *j, const cJSON *rs, const char *obj, const char *key,
                    int integer, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(rs, key);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    if (!t) t = cJSON_GetObjectItemCaseSensitive(rs, "type");
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) ||
        (integer && (v->valuedouble > INT_MAX || v->valuedouble != (double)(int)v->valuedouble)))
        return failf(j->err, j->errlen, "%s: %s.%s must be a positive %s (rope_type %s)", j->path,
                     obj, key, integer ? "integer" : "number",
                     cJSON_IsString(t) ? t->valuestring : "llama3");
    *out = v->valuedouble;
    return 0;
}

// An optional yarn number: absent, null or 0 is def (transformers' `or`), else positive.
static int rope_opt(const json_ctx *j, const cJSON *rs, const char *obj, const char *key,
                    double def, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(rs, key);
    *out = def;
    if (!v || cJSON_IsNull(v) || (cJSON_IsNumber(v) && v->valuedouble == 0)) return 0;
    return rope_num(j, rs, obj, key, 0, out);
}

// transformers' yarn_get_mscale: the attention factor's part for a scale.
static double yarn_mscale(double scale, double mscale) {
    return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

// YaRN (transformers' _compute_yarn_parameters): factor; original_max_position_embeddings, which
// transformers takes from max_position_embeddings when left out; beta_fast 32 and beta_slow 1
// when left out; truncate, true when left out; attention_factor, else from mscale and
// mscale_all_dim when both are given (DeepSeek's), else 0 (0.1 ln(factor) + 1, model.h).
static int read_yarn(const json_ctx *j, const cJSON *rs, const char *obj, mt_model *model) {
    double orig = 0, mscale = 0, mscale_all = 0, af = 0;
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(rs, "original_max_position_embeddings");
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(rs, "truncate");
    if (rope_num(j, rs, obj, "factor", 0, &model->rope_factor) < 0) return -1;
    if (o || !item(j, "max_position_embeddings")) {
        if (rope_num(j, rs, obj, "original_max_position_embeddings", 1, &orig) < 0) return -1;
    } else if (get_int(j, "max_position_embeddings", -1, &model->rope_original_max_pos) < 0) {
        return -1;
    }
    if (orig > 0) model->rope_original_max_pos = (int)orig;
    if (rope_opt(j, rs, obj, "beta_fast", 32, &model->rope_beta_fast) < 0 ||
        rope_opt(j, rs, obj, "beta_slow", 1, &model->rope_beta_slow) < 0 ||
        rope_opt(j, rs, obj, "mscale", 0, &mscale) < 0 ||
        rope_opt(j, rs, obj, "mscale_all_dim", 0, &mscale_all) < 0)
        return -1;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(rs, "attention_factor"); // 0 is no default
    if (a && !cJSON_IsNull(a) && rope_num(j, rs, obj, "attention_factor", 0, &af) < 0) return -1;
    if (tr && !cJSON_IsNull(tr) && !cJSON_IsBool(tr))
        return failf(j->err, j->errlen, "%s: %s.truncate must be true or false", j->path, obj);
    model->rope_truncate = !tr || cJSON_IsNull(tr) || cJSON_IsTrue(tr);
    if (!af && mscale > 0 && mscale_all > 0)
        af = yarn_mscale(model->rope_factor, mscale) / yarn_mscale(model->rope_factor, mscale_all);
    model->rope_attention_factor = af;
    model->rope_mscale = mscale, model->rope_mscale_all_dim = mscale_all;
    model->rope_type = ROPE_YARN;
    return 0;
}

// rope_scaling, or transformers 5's rope_parameters (which also carries rope_theta): absent or
// null (the family's default, hf_family.c's), rope_type "default", "llama3" with its four
// numbers or "yarn" with its own. Any other type is an error.
static int read_rope(const json_ctx *j, mt_model *model) {
    const char *obj = "rope_scaling";
    const cJSON *rs = item(j, obj);
    if (!rs) rs = item(j, obj = "rope_parameters");
    if (!rs) return 0;
    if (!cJSON_IsObject(rs))
        return failf(j->err, j->errlen, "%s: %s must be an object or null", j->path, obj);
    const cJSON *theta = cJSON_GetObjectItemCaseSensitive(rs, "rope_theta");
    if (theta && (!cJSON_IsNumber(theta) || !(theta->valuedouble > 0)))
        return failf(j->err, j->errlen, "%s: %s.rope_theta must be a positive number", j->path,
                     obj);
    if (theta && item(j, "rope_theta") && theta->valuedouble != model->rope_theta)
        return failf(j->err, j->errlen, "%s: rope_theta %g disagrees with %s.rope_theta %g",
                     j->path, model->rope_theta, obj, theta->valuedouble);
    if (theta) model->rope_theta = theta->valuedouble;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    if (!t) t = cJSON_GetObjectItemCaseSensitive(rs, "type"); // its name before transformers 4.43
    if (t && !cJSON_IsString(t))
        return failf(j->err, j->errlen, "%s: %s.rope_type must be a string", j->path, obj);
    model->rope_type = ROPE_PLAIN; // no type: "default", as transformers takes it
    if (!t || strcmp(t->valuestring, "default") == 0) return 0;
    if (strcmp(t->valuestring, "yarn") == 0) return read_yarn(j, rs, obj, model);
    if (strcmp(t->valuestring, "llama3") != 0)
        return failf(j->err, j->errlen,
                     "%s: rope_scaling type %s not supported (only llama3 and yarn)", j->path,
                     t->valuestring);
    double orig = 0;
    if (rope_num(j, rs, obj, "factor", 0, &model->rope_factor) < 0 ||
        rope_num(j, rs, obj, "low_freq_factor", 0, &model->rope_low_freq_factor) < 0 ||
        rope_num(j, rs, obj, "high_freq_factor", 0, &model->rope_high_freq_factor) < 0 ||
        rope_num(j, rs, obj, "original_max_position_embeddings", 1, &orig) < 0)
        return -1;
    if (!(model->rope_high_freq_factor > model->rope_low_freq_factor))
        return failf(j->err, j->errlen,
                     "%s: %s.high_freq_factor %g must be greater than low_freq_factor %g", j->path,
                     obj, model->rope_high_freq_factor, model->rope_low_freq_factor);
    model->rope_original_max_pos = (int)orig;
    model->rope_type = ROPE_LLAMA3;
    return 0;
}

// The Gated DeltaNet families' RoPE: plain, over partial_rotary_factor of each head (an mRoPE's
// mrope_section and mrope_interleaved change nothing for text: its three position rows are the
// same). Their export writes rope_parameters of type default only.
static int gdn_plain_rope(const json_ctx *j, const mt_model *model) {
    if (model->linear_k_heads > 0 && model->rope_type != ROPE_PLAIN)
        return failf(j->err, j->errlen,
                     "%s: rope_type %s not supported for linear-attention models (only default)",
                     j->path, mt_choice_name(ROPE_TYPE_NAMES, model->rope_type));
    return 0;
}

// One special token id: absent or null is none (-1); present, it must name a token.
static int token_id(const json_ctx *j, const char *key, const cJSON *v, int vocab, int *out) {
    double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
    // No cast before the range check: (int)1e300 is undefined. 2.0 is a float to transformers.
    if (d < 0 || d != floor(d) || (v->type & JSON_FLOAT_TEXT))
        return failf(j->err, j->errlen, "%s: %s must be a token id (an integer >= 0)", j->path,
                     key);
    if (d >= vocab)
        return failf(j->err, j->errlen, "%s: %s %.0f is not below vocab_size %d", j->path, key, d,
                     vocab);
    *out = (int)d;
    return 0;
}

// bos_token_id, and eos_token_id: one id, or a list of them (Llama 3).
static int read_special(const json_ctx *j, mt_model *model) {
    const cJSON *bos = item(j, "bos_token_id"), *eos = item(j, "eos_token_id");
    int max_eos = 1 + (int)(sizeof model->eos_more / sizeof *model->eos_more);
    model->bos_id = model->eos_id = -1, model->n_eos_more = 0;
    if (bos && token_id(j, "bos_token_id", bos, model->vocab, &model->bos_id) < 0) return -1;
    if (!eos) return 0;
    if (!cJSON_IsArray(eos)) return token_id(j, "eos_token_id", eos, model->vocab, &model->eos_id);
    int n = cJSON_GetArraySize(eos);
    if (n < 1 || n > max_eos)
        return failf(j->err, j->errlen, "%s: eos_token_id lists %d ids (1 to %d supported)",
                     j->path, n, max_eos);
    for (int i = 0; i < n; i++) {
        int *dst = i == 0 ? &model->eos_id : &model->eos_more[i - 1];
        if (token_id(j, "eos_token_id", cJSON_GetArrayItem(eos, i), model->vocab, dst) < 0)
            return -1;
    }
    model->n_eos_more = n - 1;
    return 0;
}

int hf_read_config(const char *dir, int seq_len, mt_model *model, char *err, size_t errlen) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = read_text(path, CONFIG_MAX, err, errlen);
    if (!text) return -1;
    char why[256];
    cJSON *root = json_parse_strict(text, strlen(text), why, sizeof why);
    free(text);
    json_ctx j = {path, root, err, errlen, {0}};
    int rc = -1;
    if (!root)
        failf(err, errlen, "%s: %s", path, why);
    else if (!cJSON_IsObject(root))
        failf(err, errlen, "%s: not a JSON object", path);
    else if (hf_read_family(&j, seq_len, model) == 0)
        rc = read_rope(&j, model) == 0 && gdn_plain_rope(&j, model) == 0
                 ? read_special(&j, model)
                 : -1; // rope after rope_theta
    if (rc == 0) model_describe_layers(model);
    cJSON_Delete(root);
    return rc;
}
