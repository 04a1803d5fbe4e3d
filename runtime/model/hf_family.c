// The Hugging Face architectures we train, as data: what each one's config.json means (its keys'
// names and transformers' defaults for the keys it leaves out), read into the model fields of
// an mt_config. The engine never asks for a family: it asks the fields (qk_norm, experts, ...).
#include "runtime/base/base.h"
#include "runtime/model/hf_window.h"
#include "runtime/model/hf_json.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Named fields: a column a row leaves out is zero or NULL, so a new column defaults to off.
static const family families[] = {
    {.arch = "LlamaForCausalLM",
     .model_type = "llama",
     .attention_bias = 1,
     .eps_default = 1e-6,
     .theta_default = 1e4,
     .window = WINDOW_NONE,
     .qk_norm = QK_NONE},
    {.arch = "MistralForCausalLM",
     .model_type = "mistral",
     .kv_default = 8,
     .eps_default = 1e-6,
     .theta_default = 1e4,
     .window = WINDOW_MISTRAL,
     .qk_norm = QK_NONE},
    {.arch = "Qwen2ForCausalLM",
     .model_type = "qwen2",
     .kv_default = 32,
     .eps_default = 1e-6,
     .theta_default = 1e4,
     .window = WINDOW_FLAG,
     .qkv_bias = 1,
     .qk_norm = QK_NONE},
    {.arch = "Qwen3ForCausalLM",
     .model_type = "qwen3",
     .kv_default = 32,
     .head_dim_default = 128,
     .eps_default = 1e-6,
     .theta_default = 1e4,
     .window = WINDOW_FLAG,
     .qk_norm = QK_HEAD},
    {.arch = "MixtralForCausalLM",
     .model_type = "mixtral",
     .kv_default = 8,
     .eps_default = 1e-5,
     .theta_default = 1e6,
     .window = WINDOW_PLAIN,
     .qk_norm = QK_NONE,
     .experts_key = "num_local_experts",
     .experts_alias = "num_experts",
     .expert_ffn_key = "intermediate_size",
     .always_renorm = 1,
     .moe_names = MOE_NAMES_BLOCK_SPARSE,
     .aux_coef_default = 0.001},
    {.arch = "Qwen2MoeForCausalLM",
     .model_type = "qwen2_moe",
     .kv_default = 16,
     .eps_default = 1e-6,
     .theta_default = 1e4,
     .window = WINDOW_FLAG,
     .qkv_bias = 2,
     .qk_norm = QK_NONE,
     .experts_key = "num_experts",
     .expert_ffn_key = "moe_intermediate_size",
     .shared = 1,
     .shared_default = 5632,
     .sparse_steps = 1,
     .moe_names = MOE_NAMES_MLP,
     .aux_coef_default = 0.001},
    {.arch = "Qwen3MoeForCausalLM",
     .model_type = "qwen3_moe",
     .kv_default = 4,
     .eps_default = 1e-6,
     .theta_default = 1e4,
     .window = WINDOW_FLAG,
     .qk_norm = QK_HEAD,
     .experts_key = "num_experts",
     .experts_alias = "num_local_experts",
     .expert_ffn_key = "moe_intermediate_size",
     .sparse_steps = 1,
     .moe_names = MOE_NAMES_MLP,
     .aux_coef_default = 0.001},
    {.arch = "OlmoeForCausalLM",
     .model_type = "olmoe",
     .eps_default = 1e-5,
     .theta_default = 1e4,
     .window = WINDOW_NONE,
     .qk_norm = QK_ALL,
     .experts_key = "num_experts",
     .experts_alias = "num_local_experts",
     .expert_ffn_key = "intermediate_size",
     .moe_names = MOE_NAMES_MLP,
     .aux_coef_default = 0.01},
    {.arch = "GptOssForCausalLM",
     .model_type = "gpt_oss",
     .kv_default = 8,
     .head_dim_default = 64,
     .eps_default = 1e-5,
     .theta_default = 150000,
     .window = WINDOW_OSS,
     .attention_bias = 1,
     .bias_default = 1,
     .qk_norm = QK_NONE,
     .experts_key = "num_local_experts",
     .experts_alias = "num_experts",
     .expert_ffn_key = "intermediate_size",
     .always_renorm = 1,
     .moe_names = MOE_NAMES_GPT_OSS,
     .aux_coef_default = 0.001,
     .oss = 1},
#define QWEN35_TEXT                                                                                \
    .kv_default = 4, .head_dim_default = 256, .eps_default = 1e-6, .theta_default = 1e4,           \
    .window = WINDOW_NONE, .qk_norm = QK_HEAD, .gdn = 1
#define QWEN35_MOE                                                                                 \
    .kv_default = 2, .head_dim_default = 256, .eps_default = 1e-6, .theta_default = 1e4,           \
    .window = WINDOW_NONE, .qk_norm = QK_HEAD, .gdn = 1, .experts_key = "num_experts",             \
    .expert_ffn_key = "moe_intermediate_size", .always_renorm = 1, .shared = 1,                    \
    .shared_default = 512, .no_ffn_key = 1, .moe_names = MOE_NAMES_MLP, .aux_coef_default = 0.001
    {.arch = "Qwen3_5ForCausalLM", .model_type = "qwen3_5_text", QWEN35_TEXT},
    {.arch = "Qwen3_5ForConditionalGeneration",
     .model_type = "qwen3_5_text",
     QWEN35_TEXT,
     .vlm = 1},
    {.arch = "Qwen3_5MoeForCausalLM", .model_type = "qwen3_5_moe_text", QWEN35_MOE},
    {.arch = "Qwen3_5MoeForConditionalGeneration",
     .model_type = "qwen3_5_moe_text",
     QWEN35_MOE,
     .vlm = 1},
#undef QWEN35_TEXT
#undef QWEN35_MOE
    {.arch = "Qwen3NextForCausalLM",
     .model_type = "qwen3_next",
     .kv_default = 2,
     .head_dim_default = 256,
     .eps_default = 1e-6,
     .theta_default = 1e4,
     .window = WINDOW_NONE,
     .qk_norm = QK_HEAD,
     .experts_key = "num_experts",
     .expert_ffn_key = "moe_intermediate_size",
     .shared = 1,
     .shared_default = 512,
     .sparse_steps = 1,
     .renorm_default = 1,
     .moe_names = MOE_NAMES_MLP,
     .aux_coef_default = 0.001,
     .gdn = 1,
     .gdn_fused = 1},
#define DEEPSEEK_MOE                                                                               \
    .theta_default = 1e4, .window = WINDOW_NONE, .qk_norm = QK_NONE,                               \
    .experts_key = "n_routed_experts", .experts_alias = "num_local_experts",                       \
    .expert_ffn_key = "moe_intermediate_size", .renorm_default = 1,                                \
    .moe_names = MOE_NAMES_DEEPSEEK, .sigmoid_router = 1
    {.arch = "DeepseekV3ForCausalLM",
     .model_type = "deepseek_v3",
     DEEPSEEK_MOE,
     .eps_default = 1e-6,
     .mla = 1,
     .dense_first_default = 3,
     .groups_default = 8,
     .topk_groups_default = 4,
     .scale_default = 2.5,
     .q_rank_default = 1536,
     .nope_default = 128,
     .v_default = 128},
    {.arch = "Glm4MoeForCausalLM",
     .model_type = "glm4_moe",
     DEEPSEEK_MOE,
     .kv_default = 8,
     .eps_default = 1e-5,
     .qkv_bias = 3,
     .qk_norm_key = 1,
     .dense_first_default = 1,
     .groups_default = 1,
     .topk_groups_default = 1,
     .scale_default = 1},
    {.arch = "Glm4MoeLiteForCausalLM",
     .model_type = "glm4_moe_lite",
     DEEPSEEK_MOE,
     .eps_default = 1e-5,
     .mla = 1,
     .dense_list = 1,
     .groups_default = 1,
     .topk_groups_default = 1,
     .scale_default = 1.8,
     .q_rank_default = 768,
     .nope_default = 192,
     .v_default = 256},
#undef DEEPSEEK_MOE
};
enum { N_FAMILIES = sizeof families / sizeof *families };

// Architectures users bring that we do not train, with what would change the math.
static const char *const refused[][2] = {
    {"Llama4ForCausalLM", "chunked attention and interleaved MoE layers"},
    {"Llama4ForConditionalGeneration", "chunked attention and interleaved MoE layers"},
    {"DeepseekV2ForCausalLM", "multi-head latent attention (MLA) and group-limited routing"},
    {"DeepseekV32ForCausalLM", "DeepSeek Sparse Attention: a lightning indexer picks each "
                               "query's keys (index_topk)"},
    {"GlmMoeDsaForCausalLM", "GLM-5's sparse attention: a lightning indexer picks each query's "
                             "keys (index_topk)"},
    {"DeepseekV4ForCausalLM", "compressed sparse attention and hyper-connections (compress_ratios, "
                              "hc_mult)"},
    {"SwitchTransformersForConditionalGeneration", "expert capacity factors that drop tokens"},
};

static const family *find_family(const json_ctx *j) {
    const cJSON *a = item(j, "architectures"), *first = cJSON_GetArrayItem(a, 0);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 1 || !cJSON_IsString(first)) {
        failf(j->err, j->errlen, "%s: architectures must list exactly one class", j->path);
        return NULL;
    }
    const char *name = first->valuestring;
    for (int i = 0; i < N_FAMILIES; i++)
        if (strcmp(name, families[i].arch) == 0) return &families[i];
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        if (strcmp(name, refused[i][0]) == 0) {
            failf(j->err, j->errlen, "%s: architecture %s not supported (%s)", j->path, name,
                  refused[i][1]);
            return NULL;
        }
    char list[512] = "";
    for (int i = 0; i < N_FAMILIES; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                 families[i].arch);
    failf(j->err, j->errlen, "%s: architecture %s not supported (%s)", j->path, name, list);
    return NULL;
}

// A key that must be absent, null or the value that changes nothing.
static int require_zero(const json_ctx *j, const char *key, const char *why) {
    const cJSON *v = item(j, key);
    if (v && !(cJSON_IsNumber(v) && v->valuedouble == 0) && !cJSON_IsFalse(v))
        return failf(j->err, j->errlen, "%s: %s not supported (%s)", j->path, key, why);
    return 0;
}

// FP8 with 128 x 128 blocks (DeepSeek-V3's, Kimi K2's), the block io/'s fp8.h dequantizes.
static int check_fp8(const json_ctx *j, const cJSON *q) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(q, "weight_block_size");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(q, "fmt");
    int square = cJSON_IsArray(b) && cJSON_GetArraySize(b) == 2;
    for (int i = 0; square && i < 2; i++)
        square = cJSON_IsNumber(cJSON_GetArrayItem(b, i)) &&
                 cJSON_GetArrayItem(b, i)->valuedouble == 128;
    if (b && !square)
        return failf(j->err, j->errlen,
                     "%s: quantization_config.weight_block_size not supported (only [128, 128])",
                     j->path);
    if (fmt && !(cJSON_IsString(fmt) && strcmp(fmt->valuestring, "e4m3") == 0))
        return failf(j->err, j->errlen, "%s: quantization_config.fmt not supported (only e4m3)",
                     j->path);
    return 0;
}

// quantization_config: gpt-oss's MXFP4 experts, or block-scaled FP8 weights, which io/
// dequantizes on load as transformers does.
static int check_quantization(const json_ctx *j, const family *f) {
    const cJSON *q = item(j, "quantization_config");
    if (!q) return 0;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
    const char *method = cJSON_IsString(m) ? m->valuestring : "(none)";
    if (strcmp(method, "fp8") == 0) return check_fp8(j, q);
    if (!f->oss || strcmp(method, "mxfp4") != 0)
        return failf(j->err, j->errlen,
                     "%s: quantization_config quant_method %s not supported (only gpt-oss's "
                     "mxfp4 experts and fp8 128 x 128 blocks, dequantized on load)",
                     j->path, method);
    return 0;
}

// Fields that would change the math and that we do not implement are errors, not ignored.
static int check_unsupported(const json_ctx *j, const family *f) {
    if (check_quantization(j, f) < 0) return -1;
    const cJSON *act = item(j, "hidden_act");
    if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu")))
        return failf(j->err, j->errlen, "%s: hidden_act %s not supported (only silu)", j->path,
                     cJSON_IsString(act) ? act->valuestring : "(not a string)");
    int b = 0;
    // Qwen2's biases are fixed by its architecture (q, k, v); its config has no such keys.
    // Llama's attention_bias is read with the shape (read_shape).
    if (!f->qkv_bias && !f->attention_bias && get_bool(j, "attention_bias", 0, &b) < 0) return -1;
    if (b && f->mla)
        return failf(j->err, j->errlen,
                     "%s: attention_bias = true not supported (MLA's biases on q_a_proj, "
                     "kv_a_proj_with_mqa and o_proj)",
                     j->path);
    if (b)
        return failf(j->err, j->errlen,
                     "%s: attention_bias = true (biases on q, k, v and o_proj) not supported yet; "
                     "only Qwen2's q/k/v biases are",
                     j->path);
    if (get_bool(j, "mlp_bias", 0, &b) < 0) return -1;
    if (b) return failf(j->err, j->errlen, "%s: mlp_bias = true not supported yet", j->path);
    const cJSON *drop = item(j, "attention_dropout");
    if (drop && (!cJSON_IsNumber(drop) || drop->valuedouble != 0))
        return failf(j->err, j->errlen, "%s: attention_dropout must be 0 (dropout not supported)",
                     j->path);
    // A class we train with a later model's keys (a converted or hand-edited folder) would
    // otherwise train without what those keys add.
    return require_zero(j, "clip_qkv", "clipping q, k and v") < 0 ||
                   require_zero(j, "index_topk",
                                "sparse attention: a lightning indexer picks each query's keys, "
                                "as DeepSeek-V3.2 and GLM-5 do") < 0 ||
                   require_zero(j, "hc_mult",
                                "hyper-connections: DeepSeek-V4's copies of the "
                                "residual stream") < 0 ||
                   require_zero(j, "compress_ratios", "DeepSeek-V4's compressed attention") < 0 ||
                   require_zero(j, "router_jitter_noise", "noise on the router's inputs") < 0 ||
                   require_zero(j, "capacity_factor", "we are dropless: no token is dropped") < 0
               ? -1
               : 0;
}

static int read_shape(const json_ctx *j, const family *f, mt_model *model) {
    int head_dim = 0;
    if (get_int(j, "hidden_size", -1, &model->dim) < 0 ||
        (!f->no_ffn_key && get_int(j, "intermediate_size", -1, &model->ffn_dim) < 0) ||
        get_int(j, "num_hidden_layers", -1, &model->layers) < 0 ||
        get_int(j, "num_attention_heads", -1, &model->heads) < 0 ||
        get_int(j, "vocab_size", -1, &model->vocab) < 0 ||
        get_int(j, "num_key_value_heads", f->kv_default ? f->kv_default : model->heads,
                &model->kv_heads) < 0 ||
        get_int(j, "head_dim", f->head_dim_default, &head_dim) < 0)
        return -1;
    if (head_dim > 1024)
        return failf(j->err, j->errlen, "%s: head_dim %d is out of range: at most 1024", j->path,
                     head_dim);
    // An explicit head_dim equal to hidden / heads is the plain shape: stored as 0, so that a
    // train.cfg without model.head_dim agrees with the folder.
    model->head_dim = head_dim && (int64_t)head_dim * model->heads != model->dim ? head_dim : 0;
    if (get_num(j, "rope_theta", f->theta_default, &model->rope_theta) < 0 ||
        get_num(j, "rms_norm_eps", f->eps_default, &model->norm_eps) < 0 ||
        get_bool(j, "tie_word_embeddings", 0, &model->tied_embeddings) < 0)
        return -1;
    model->qkv_bias = f->qkv_bias == 1, model->o_bias = 0;
    if (f->qkv_bias == 2 && get_bool(j, "qkv_bias", 1, &model->qkv_bias) < 0) return -1;
    if (f->qkv_bias == 3 && get_bool(j, "attention_bias", 0, &model->qkv_bias) < 0) return -1;
    if (f->attention_bias && get_bool(j, "attention_bias", f->bias_default, &model->o_bias) < 0)
        return -1;
    if (f->attention_bias) model->qkv_bias = model->o_bias; // q, k, v and o_proj alike
    model->qk_norm = f->qk_norm;
    return 0;
}

static int listed_earlier(const cJSON *list, const cJSON *v) {
    for (const cJSON *u = list->child; u != v; u = u->next)
        if (u->valuedouble == v->valuedouble) return 1;
    return 0;
}

// mlp_only_layers: a list of layer indices, written as model.dense_layers ("0,5"). A layer
// listed twice is one dense layer, as transformers reads the list (`in`), so it is written once.
static int read_dense_layers(const json_ctx *j, mt_model *model) {
    const cJSON *list = item(j, "mlp_only_layers"), *v;
    memset(model->dense_layers, 0, sizeof model->dense_layers);
    if (!list) return 0;
    if (!cJSON_IsArray(list))
        return failf(j->err, j->errlen, "%s: mlp_only_layers must be a list of layer indices",
                     j->path);
    size_t used = 0;
    cJSON_ArrayForEach(v, list) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= model->layers ||
            v->valuedouble != (double)(int)v->valuedouble || (v->type & JSON_FLOAT_TEXT))
            return failf(j->err, j->errlen,
                         "%s: mlp_only_layers must list layer indices below num_hidden_layers %d",
                         j->path, model->layers);
        if (listed_earlier(list, v)) continue;
        int n = snprintf(model->dense_layers + used, sizeof model->dense_layers - used, "%s%d",
                         used ? "," : "", (int)v->valuedouble);
        if (n < 0 || (size_t)n >= sizeof model->dense_layers - used)
            return failf(j->err, j->errlen, "%s: mlp_only_layers lists too many layers", j->path);
        used += (size_t)n;
    }
    return 0;
}

// The number of experts as transformers reads it: the class sets its own field first and the
// attribute_map's other name after it (it is a leftover keyword, set through the map), so the
// other name wins when both are given, whatever their order in the file. A family without the
// other name ignores it (Qwen2MoeConfig), and its own key is required.
static const char *experts_key(const json_ctx *j, const family *f) {
    if (f->experts_alias && item(j, f->experts_alias)) return f->experts_alias;
    if (!f->experts_alias && !item(j, f->experts_key) && item(j, "num_local_experts")) {
        failf(j->err, j->errlen, "%s: %s missing (%s reads no num_local_experts)", j->path,
              f->experts_key, f->arch);
        return NULL;
    }
    return f->experts_key;
}

static int read_experts(const json_ctx *j, const family *f, mt_model *model) {
    const char *key = experts_key(j, f);
    if (!key || get_int(j, key, -1, &model->experts) < 0 ||
        get_int(j, "num_experts_per_tok", -1, &model->top_k) < 0)
        return -1;
    if (model->experts > MOE_MAX_EXPERTS)
        return failf(j->err, j->errlen, "%s: %s %d is out of range: at most %d", j->path, key,
                     model->experts, MOE_MAX_EXPERTS);
    if (model->top_k > model->experts)
        return failf(j->err, j->errlen, "%s: num_experts_per_tok %d is more than %s %d", j->path,
                     model->top_k, key, model->experts);
    return get_int(j, f->expert_ffn_key, -1, &model->moe_ffn_dim);
}

// gpt-oss's attention sinks, router and experts (all of them on; every other family's off).
// swiglu_alpha, the clamped SwiGLU's sigmoid gain, is a key of transformers 5.25 (fixed at 1.702
// before): only that value is supported.
static int read_oss(const json_ctx *j, const family *f, mt_model *model) {
    model->attn_sinks = model->router_bias = model->expert_bias = f->oss;
    model->router_softmax = f->oss ? ROUTER_SOFTMAX_TOP_K : ROUTER_SOFTMAX_ALL;
    model->swiglu_limit = 0;
    if (!f->oss) return 0;
    const cJSON *alpha = item(j, "swiglu_alpha");
    if (alpha && !(cJSON_IsNumber(alpha) && alpha->valuedouble == 1.702))
        return failf(j->err, j->errlen, "%s: swiglu_alpha not supported (only 1.702)", j->path);
    return get_num(j, "swiglu_limit", 7.0, &model->swiglu_limit);
}

// The MoE fields; a dense family has none (experts 0).
static int read_moe(const json_ctx *j, const family *f, mt_model *model) {
    if (read_oss(j, f, model) < 0) return -1;
    model->experts = 0, model->top_k = 2, model->moe_ffn_dim = model->ffn_dim,
    model->norm_topk_prob = 1;
    model->shared_ffn_dim = 0, model->moe_every = 1, model->router_aux = 0,
    model->router_aux_coef = 0.001;
    model->shared_gate = 1; // Qwen2-MoE's shared expert has its gate
    memset(model->dense_layers, 0, sizeof model->dense_layers);
    model->moe_names = MOE_NAMES_MLP;
    if (!f->experts_key) return 0;
    model->moe_names = f->moe_names;
    if (read_experts(j, f, model) < 0) return -1;
    if (!f->always_renorm &&
        get_bool(j, "norm_topk_prob", f->renorm_default, &model->norm_topk_prob) < 0)
        return -1;
    if (f->shared) { // absent: the config class's default, as transformers builds it
        const cJSON *s = item(j, "shared_expert_intermediate_size");
        if (!(s && cJSON_IsNumber(s) && s->valuedouble == 0) &&
            get_int(j, "shared_expert_intermediate_size", f->shared_default,
                    &model->shared_ffn_dim) < 0)
            return -1;
    }
    if (f->no_ffn_key) model->ffn_dim = model->moe_ffn_dim;
    if (f->sparse_steps && (get_int(j, "decoder_sparse_step", 1, &model->moe_every) < 0 ||
                            read_dense_layers(j, model) < 0))
        return -1;
    if (model->moe_every > 4096)
        return failf(j->err, j->errlen, "%s: decoder_sparse_step %d is out of range", j->path,
                     model->moe_every);
    const cJSON *coef = item(j, "router_aux_loss_coef");
    model->router_aux_coef = f->aux_coef_default;
    if (coef && (!cJSON_IsNumber(coef) || !(coef->valuedouble >= 0) || coef->valuedouble > 1e6))
        return failf(j->err, j->errlen, "%s: router_aux_loss_coef must be a number >= 0", j->path);
    if (coef) model->router_aux_coef = coef->valuedouble;
    return get_bool(j, "output_router_logits", 0, &model->router_aux);
}

// The RoPE of a config.json without rope_scaling: gpt-oss's YaRN (GptOssConfig's), else plain.
// hf_config.c's read_rope replaces it with config.json's.
static void default_rope(const family *f, mt_model *model) {
    model->rope_type = f->oss ? ROPE_YARN : ROPE_PLAIN;
    model->rope_mscale = model->rope_mscale_all_dim = 0;
    if (!f->oss) return;
    model->rope_factor = 32, model->rope_original_max_pos = 4096;
    model->rope_beta_fast = 32, model->rope_beta_slow = 1, model->rope_truncate = 0;
    model->rope_attention_factor = 0;
}

int hf_read_family(json_ctx *j, int seq_len, mt_model *model) {
    const family *f = find_family(j);
    int tied = 0;
    // a VLM's quantization_config is at the top level, beside text_config
    if (!f || (f->vlm && (check_quantization(j, f) < 0 || gdn_enter_text_config(j, &tied) < 0)))
        return -1;
    if (check_unsupported(j, f) < 0 || read_shape(j, f, model) < 0 ||
        (f->vlm && gdn_settle_tie(j, tied, model) < 0) ||
        hf_read_window(j, f, seq_len, model) < 0 || gdn_read(j, f->gdn, f->gdn_fused, model) < 0)
        return -1;
    model->hub_vlm = model->hub_lm_nested = f->vlm; // io's hf_index_layout may nest a text class
    default_rope(f, model);
    return read_moe(j, f, model) < 0 ? -1 : sigmoid_moe_read(j, f, model);
}

// Whether family f has m's biases: Llama's attention_bias on q, k, v and o_proj alike, Qwen2's
// on q, k and v (Qwen2-MoE's as its qkv_bias says), the others none.
static int carries_biases(const family *f, const mt_model *m) {
    if (f->qkv_bias == 3) return !m->o_bias;
    if (f->attention_bias) return !!m->qkv_bias == !!m->o_bias;
    return !m->o_bias && (f->qkv_bias == 2 || (f->qkv_bias == 1) == !!m->qkv_bias);
}

// gpt-oss's options come all together, in gpt-oss only.
static int matches_oss(const family *f, const mt_model *m) {
    int oss = m->attn_sinks && m->router_softmax == ROUTER_SOFTMAX_TOP_K && m->swiglu_limit > 0;
    int none = !m->attn_sinks && m->router_softmax == ROUTER_SOFTMAX_ALL && m->swiglu_limit == 0;
    return f->oss ? oss : none;
}

// Qwen3.5's and Qwen3-Next's options come all together, in those families only, and the
// folder's layout (a VLM's nesting, Qwen3-Next's fused projections) picks among them.
static int matches_gdn(const family *f, const mt_model *m) {
    int gdn = m->linear_k_heads > 0 && m->attn_output_gate && m->norm_zero_centered;
    int none = m->linear_k_heads <= 0 && !m->attn_output_gate && !m->norm_zero_centered;
    if (!f->gdn) return none && !m->hub_vlm && !m->hub_gdn_fused;
    return gdn && f->vlm == !!m->hub_vlm && f->gdn_fused == !!m->hub_gdn_fused;
}

// The family an export writes: the first whose fields match m's (named arch, when not NULL),
// NULL when none does.
static const family *family_named(const mt_model *m, const char *arch) {
    for (int i = 0; i < N_FAMILIES; i++) {
        const family *f = &families[i];
        int moe = f->experts_key != NULL;
        int qk = f->qk_norm == m->qk_norm || (f->qk_norm_key && m->qk_norm == QK_HEAD);
        if (arch && strcmp(arch, f->arch)) continue;
        if (moe != (m->experts > 0) || !qk || !matches_gdn(f, m) || !sigmoid_moe_matches(f, m))
            continue;
        if (!carries_biases(f, m)) continue;
        if (!hf_writes_window(f, m) || !matches_oss(f, m)) continue;
        if (!moe) return f;
        if (f->moe_names != m->moe_names || (f->always_renorm && !m->norm_topk_prob) ||
            (!f->shared && !f->sigmoid_router && m->shared_ffn_dim > 0) ||
            (!f->sparse_steps && !f->sigmoid_router && (m->moe_every != 1 || m->dense_layers[0])))
            continue;
        return f;
    }
    return NULL;
}

// model_dir's class when it has m's fields (DeepSeek-V3's and GLM-4.7-Flash's are the same
// fields), else the first that has them.
static const family *family_of(const mt_model *m, const char *model_dir) {
    char arch[128];
    const family *f = hf_source_arch(model_dir, arch, sizeof arch) ? family_named(m, arch) : NULL;
    return f ? f : family_named(m, NULL);
}

static void add_dense_layers(cJSON *r, const mt_model *m) {
    cJSON *list = cJSON_AddArrayToObject(r, "mlp_only_layers");
    for (const char *p = m->dense_layers; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        cJSON_AddItemToArray(list, cJSON_CreateNumber((double)v));
        p = *end == ',' ? end + 1 : end;
    }
}

static void write_moe(cJSON *r, const family *f, const mt_model *m) {
    cJSON_AddNumberToObject(r, f->experts_key, m->experts);
    cJSON_AddNumberToObject(r, "num_experts_per_tok", m->top_k);
    if (strcmp(f->expert_ffn_key, "intermediate_size") != 0)
        cJSON_AddNumberToObject(r, f->expert_ffn_key, m->moe_ffn_dim);
    if (!f->always_renorm) cJSON_AddBoolToObject(r, "norm_topk_prob", m->norm_topk_prob);
    if (f->shared) cJSON_AddNumberToObject(r, "shared_expert_intermediate_size", m->shared_ffn_dim);
    if (f->sparse_steps) {
        cJSON_AddNumberToObject(r, "decoder_sparse_step", m->moe_every);
        add_dense_layers(r, m);
    }
    if (!f->sigmoid_router) hf_add_float(r, "router_aux_loss_coef", m->router_aux_coef);
    cJSON_AddBoolToObject(r, "output_router_logits", m->router_aux);
    if (f->oss) hf_add_float(r, "swiglu_limit", m->swiglu_limit);
}

int hf_write_family(cJSON *r, const mt_model *m, const char *model_dir) {
    const family *f = family_of(m, model_dir);
    if (!f) return -1;
    cJSON *arch = cJSON_AddArrayToObject(r, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(f->arch));
    cJSON_AddStringToObject(r, "model_type", f->model_type);
    // The MoE families with Mixtral's and OLMoE's naming read intermediate_size as the experts'.
    int ffn = f->experts_key && !strcmp(f->expert_ffn_key, "intermediate_size") ? m->moe_ffn_dim
                                                                                : m->ffn_dim;
    if (!f->no_ffn_key) cJSON_AddNumberToObject(r, "intermediate_size", ffn);
    if (f->gdn) gdn_write(r, m);
    if (f->window == WINDOW_FLAG || f->window == WINDOW_OSS)
        hf_write_layer_types(r, f, m);
    else if (f->window == WINDOW_PLAIN) {
        cJSON_AddNullToObject(r, "sliding_window");
    } else if (f->window == WINDOW_MISTRAL) {
        cJSON_AddNumberToObject(r, "sliding_window", m->sliding_window);
    }
    if (f->qkv_bias == 2) cJSON_AddBoolToObject(r, "qkv_bias", m->qkv_bias);
    if (!f->qkv_bias) cJSON_AddBoolToObject(r, "attention_bias", f->attention_bias && m->o_bias);
    if (f->qkv_bias == 3) cJSON_AddBoolToObject(r, "attention_bias", m->qkv_bias);
    if (!f->experts_key && !f->qkv_bias) cJSON_AddBoolToObject(r, "mlp_bias", 0);
    if (f->experts_key) write_moe(r, f, m);
    sigmoid_moe_write(r, f, m);
    // gpt-oss without rope_scaling is YaRN: plain RoPE must be said (io/export.c adds the rest)
    if (f->oss && m->rope_type == ROPE_PLAIN)
        cJSON_AddStringToObject(cJSON_AddObjectToObject(r, "rope_scaling"), "rope_type", "default");
    return 0;
}
