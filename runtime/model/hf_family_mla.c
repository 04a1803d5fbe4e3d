// The config.json keys of DeepSeek-V3's kin (DeepseekV3ForCausalLM, which Kimi K2 ships as,
// Glm4MoeForCausalLM: GLM-4.5, 4.6 and 4.7, Glm4MoeLiteForCausalLM: GLM-4.7-Flash), read as
// transformers 5's DeepseekV3Config, Glm4MoeConfig and Glm4MoeLiteConfig read them, and written
// back: the ungated shared experts, the dense layers first, the sigmoid router with its
// correction bias, groups and scale, multi-head latent attention's widths, GLM's q/k/v biases,
// qk-norm and partial RoPE.
#include "runtime/base/base.h"
#include "runtime/model/hf_rows.h"
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

// An integer >= 0 (get_int's are positive): absent or null is def.
static int get_count(const json_ctx *j, const char *key, int def, int *out) {
    const cJSON *v = item(j, key);
    *out = def;
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || (v->type & JSON_FLOAT_TEXT) || v->valuedouble < 0 ||
        v->valuedouble > INT_MAX || v->valuedouble != (double)(int)v->valuedouble)
        return failf(j->err, j->errlen, "%s: %s must be an integer >= 0", j->path, key);
    *out = (int)v->valuedouble;
    return 0;
}

// A key transformers ignores but whose other values mean another model than it computes.
static int require_string(const json_ctx *j, const char *key, const char *only, const char *why) {
    const cJSON *v = item(j, key);
    if (v && !(cJSON_IsString(v) && strcmp(v->valuestring, only) == 0))
        return failf(j->err, j->errlen, "%s: %s not supported (only \"%s\": %s)", j->path, key,
                     only, why);
    return 0;
}

static int add_dense(const json_ctx *j, mt_model *model, int layer, size_t *used) {
    int n = snprintf(model->dense_layers + *used, sizeof model->dense_layers - *used, "%s%d",
                     *used ? "," : "", layer);
    if (n < 0 || (size_t)n >= sizeof model->dense_layers - *used)
        return failf(j->err, j->errlen, "%s: too many dense layers to list", j->path);
    *used += (size_t)n;
    return 0;
}

// GLM-4.7-Flash's mlp_layer_types ("dense" or "sparse" per layer; default: the first dense).
// A first_k_dense_replace beside it (the hub's config.json has one; transformers 5 reads only
// the list) must say the same, or the file means two models.
static int read_layer_types(const json_ctx *j, mt_model *model, int *first_dense) {
    const cJSON *list = item(j, "mlp_layer_types");
    if (list && (!cJSON_IsArray(list) || cJSON_GetArraySize(list) != model->layers))
        return failf(j->err, j->errlen,
                     "%s: mlp_layer_types must list num_hidden_layers = %d entries", j->path,
                     model->layers);
    size_t used = 0;
    int prefix = 0, only_prefix = 1;
    for (int l = 0; l < model->layers; l++) {
        const cJSON *e = list ? cJSON_GetArrayItem(list, l) : NULL;
        const char *type = list ? (cJSON_IsString(e) ? e->valuestring : "")
                           : l  ? "sparse"
                                : "dense";
        if (strcmp(type, "dense") && strcmp(type, "sparse"))
            return failf(j->err, j->errlen, "%s: mlp_layer_types[%d] must be dense or sparse",
                         j->path, l);
        if (strcmp(type, "dense")) continue;
        if (add_dense(j, model, l, &used) < 0) return -1;
        only_prefix &= l == prefix++;
    }
    if (item(j, "first_k_dense_replace") && (!only_prefix || *first_dense != prefix))
        return failf(j->err, j->errlen,
                     "%s: first_k_dense_replace %d disagrees with mlp_layer_types", j->path,
                     *first_dense);
    return 0;
}

// The dense layers: the first first_k_dense_replace (DeepSeek-V3, GLM-4.5), or mlp_layer_types.
static int read_dense(const json_ctx *j, const family *f, mt_model *model) {
    int k;
    size_t used = 0;
    memset(model->dense_layers, 0, sizeof model->dense_layers);
    if (get_count(j, "first_k_dense_replace", f->dense_first_default, &k) < 0) return -1;
    if (f->dense_list) return read_layer_types(j, model, &k);
    for (int l = 0; l < k && l < model->layers; l++)
        if (add_dense(j, model, l, &used) < 0) return -1;
    return 0;
}

// DeepseekV3TopkRouter: sigmoid scores, e_score_correction_bias for the choice, n_group groups
// of which topk_group are kept, routed_scaling_factor; n_shared_experts ungated shared experts
// of moe_intermediate_size each. These classes compute no load-balancing loss.
static int read_router(const json_ctx *j, const family *f, mt_model *model) {
    int shared, every;
    if (get_int(j, "n_group", f->groups_default, &model->router_groups) < 0 ||
        get_int(j, "topk_group", f->topk_groups_default, &model->router_topk_groups) < 0 ||
        get_num(j, "routed_scaling_factor", f->scale_default, &model->router_scale) < 0 ||
        get_count(j, "n_shared_experts", 1, &shared) < 0 ||
        get_int(j, "moe_layer_freq", 1, &every) < 0)
        return -1;
    if (shared == 0 || shared > 64)
        return failf(j->err, j->errlen, "%s: n_shared_experts %d not supported (1 to 64)", j->path,
                     shared);
    if (every != 1)
        return failf(j->err, j->errlen, "%s: moe_layer_freq %d not supported (transformers: 1)",
                     j->path, every);
    if (require_string(j, "scoring_func", "sigmoid", "transformers' router scores by sigmoid") <
            0 ||
        require_string(j, "topk_method", "noaux_tc", "transformers' router is noaux_tc") < 0)
        return -1;
    model->router_score = ROUTER_SCORE_SIGMOID, model->router_correction = 1;
    model->shared_ffn_dim = shared * model->moe_ffn_dim, model->shared_gate = 0;
    model->router_aux = 0;
    return read_dense(j, f, model);
}

// A width: absent is def, null too where the class allows None and then fails (v_head_dim).
static int read_width(const json_ctx *j, const char *key, int def, int most, int *out) {
    if (get_int(j, key, def, out) < 0) return -1;
    if (*out > most)
        return failf(j->err, j->errlen, "%s: %s %d is out of range: at most %d", j->path, key, *out,
                     most);
    return 0;
}

// DeepseekV3Attention: q_lora_rank (null: q_proj, no low-rank query path), kv_lora_rank, the
// heads' widths, rope_interleave. MLA has no kv heads (num_key_value_heads is not read) and its
// head_dim is qk_rope_head_dim (DeepseekV3Config sets it so; Glm4MoeLiteConfig maps head_dim to
// it, so a head_dim given there is the rotated width, whatever qk_rope_head_dim says).
static int read_mla(const json_ctx *j, const family *f, mt_model *model) {
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(j->root, "q_lora_rank");
    // Glm4MoeLiteConfig's attribute_map sets qk_rope_head_dim from head_dim after its own key
    int rope_key = f->dense_list && item(j, "head_dim");
    model->mla_q_rank = 0;
    if (!cJSON_IsNull(q) &&
        read_width(j, "q_lora_rank", f->q_rank_default, 1 << 16, &model->mla_q_rank))
        return -1;
    if (read_width(j, "kv_lora_rank", 512, 1 << 16, &model->mla_kv_rank) < 0 ||
        read_width(j, "qk_nope_head_dim", f->nope_default, 1024, &model->mla_nope_dim) < 0 ||
        read_width(j, rope_key ? "head_dim" : "qk_rope_head_dim", 64, 1024, &model->mla_rope_dim) <
            0 ||
        read_width(j, "v_head_dim", f->v_default, 1024, &model->mla_v_dim) < 0 ||
        get_bool(j, "rope_interleave", 1, &model->rope_interleave) < 0)
        return -1;
    const cJSON *rp = item(j, "rope_parameters"), *partial = item(j, "partial_rotary_factor");
    if (cJSON_IsObject(rp) && cJSON_GetObjectItemCaseSensitive(rp, "partial_rotary_factor"))
        partial = cJSON_GetObjectItemCaseSensitive(rp, "partial_rotary_factor");
    if (partial && !(cJSON_IsNumber(partial) && partial->valuedouble == 1))
        return failf(j->err, j->errlen,
                     "%s: partial_rotary_factor not supported with MLA (only 1: RoPE turns the "
                     "whole qk_rope_head_dim)",
                     j->path);
    model->kv_heads = model->heads, model->head_dim = 0, model->partial_rotary_factor = 1;
    return 0;
}

static void reset(mt_model *model) {
    model->router_score = ROUTER_SCORE_SOFTMAX, model->router_correction = 0;
    model->router_groups = model->router_topk_groups = 0, model->router_scale = 1,
    model->shared_gate = 1;
    model->mla_q_rank = model->mla_kv_rank = model->mla_nope_dim = model->mla_rope_dim =
        model->mla_v_dim = 0;
    model->rope_interleave = 0;
}

int sigmoid_moe_read(const json_ctx *j, const family *f, mt_model *model) {
    reset(model);
    if (f->qk_norm_key) {
        int qk = 0;
        if (get_bool(j, "use_qk_norm", 0, &qk) < 0 || hf_read_partial_rotary(j, 0.5, model) < 0)
            return -1;
        model->qk_norm = qk ? QK_HEAD : QK_NONE;
    }
    if (f->mla && read_mla(j, f, model) < 0) return -1;
    return f->sigmoid_router ? read_router(j, f, model) : 0;
}

// How many layers lead densely, -1 when the dense layers are not 0..k-1.
static int dense_prefix(const mt_model *m) {
    int k = 0;
    while (k < m->layers && !mt_layer_is_moe(m, k)) k++;
    for (int l = k; l < m->layers; l++)
        if (!mt_layer_is_moe(m, l)) return -1;
    return k;
}

int sigmoid_moe_matches(const family *f, const mt_model *m) {
    int sigmoid = m->moe_names == MOE_NAMES_DEEPSEEK && m->router_score == ROUTER_SCORE_SIGMOID &&
                  m->router_correction && !m->shared_gate && m->shared_ffn_dim > 0 &&
                  m->shared_ffn_dim % m->moe_ffn_dim == 0 && m->moe_every == 1;
    int none = m->moe_names != MOE_NAMES_DEEPSEEK && m->router_score == ROUTER_SCORE_SOFTMAX &&
               !m->router_correction && m->router_groups <= 1 && m->router_scale == 1 &&
               m->shared_gate;
    if (!f->sigmoid_router) return none && m->mla_kv_rank <= 0 && !m->rope_interleave;
    if (!sigmoid || f->mla != (m->mla_kv_rank > 0) || (!f->mla && m->rope_interleave)) return 0;
    if (!f->qk_norm_key && m->partial_rotary_factor != 1) return 0;
    return f->dense_list || dense_prefix(m) >= 0;
}

static void write_layer_types(cJSON *r, const mt_model *m) {
    cJSON *list = cJSON_AddArrayToObject(r, "mlp_layer_types");
    for (int l = 0; l < m->layers; l++)
        cJSON_AddItemToArray(list, cJSON_CreateString(mt_layer_is_moe(m, l) ? "sparse" : "dense"));
}

static void write_mla(cJSON *r, const mt_model *m) {
    if (m->mla_q_rank > 0)
        cJSON_AddNumberToObject(r, "q_lora_rank", m->mla_q_rank);
    else
        cJSON_AddNullToObject(r, "q_lora_rank");
    cJSON_AddNumberToObject(r, "kv_lora_rank", m->mla_kv_rank);
    cJSON_AddNumberToObject(r, "qk_nope_head_dim", m->mla_nope_dim);
    cJSON_AddNumberToObject(r, "qk_rope_head_dim", m->mla_rope_dim);
    cJSON_AddNumberToObject(r, "v_head_dim", m->mla_v_dim);
    cJSON_AddNumberToObject(r, "head_dim", m->mla_rope_dim); // what both classes make of it
    cJSON_AddBoolToObject(r, "rope_interleave", m->rope_interleave);
}

void sigmoid_moe_write(cJSON *r, const family *f, const mt_model *m) {
    if (f->qk_norm_key) {
        cJSON_AddBoolToObject(r, "use_qk_norm", m->qk_norm == QK_HEAD);
        hf_add_float(r, "partial_rotary_factor", m->partial_rotary_factor);
    }
    if (f->mla) write_mla(r, m);
    if (!f->sigmoid_router) return;
    cJSON_AddNumberToObject(r, "n_shared_experts", m->shared_ffn_dim / m->moe_ffn_dim);
    if (f->dense_list) write_layer_types(r, m);
    // GLM-4.7-Flash's class reads mlp_layer_types alone, but the hub's config.json has both,
    // and engines built on DeepSeek's layers (vLLM's) count the dense ones by this key
    if (!f->dense_list || dense_prefix(m) >= 0)
        cJSON_AddNumberToObject(r, "first_k_dense_replace", dense_prefix(m));
    cJSON_AddNumberToObject(r, "n_group", m->router_groups > 1 ? m->router_groups : 1);
    cJSON_AddNumberToObject(r, "topk_group", m->router_groups > 1 ? m->router_topk_groups : 1);
    hf_add_float(r, "routed_scaling_factor", m->router_scale);
    cJSON_AddStringToObject(r, "scoring_func", "sigmoid");
    cJSON_AddStringToObject(r, "topk_method", "noaux_tc");
}

int hf_source_arch(const char *model_dir, char *arch, size_t cap) {
    char path[MT_PATH_MAX + 16], err[MT_PATH_MAX + 256];
    if (!model_dir || !model_dir[0]) return 0;
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    char *text = read_text(path, 16u << 20, err, sizeof err);
    cJSON *root = text ? json_parse_strict(text, strlen(text), err, sizeof err) : NULL;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const cJSON *first = cJSON_GetArrayItem(a, 0);
    int found = cJSON_IsArray(a) && cJSON_GetArraySize(a) == 1 && cJSON_IsString(first);
    if (found) snprintf(arch, cap, "%s", first->valuestring);
    cJSON_Delete(root);
    free(text);
    return found;
}
