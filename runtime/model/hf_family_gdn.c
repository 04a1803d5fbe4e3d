// The config.json keys of the Gated DeltaNet families (Qwen3.5, Qwen3.5-MoE, Qwen3-Next and
// Qwen3.5's ConditionalGeneration checkpoints), read as transformers 5's Qwen3_5TextConfig,
// Qwen3_5MoeTextConfig and Qwen3NextConfig read them, and written back (hf_json.h): the linear
// attention's heads and conv, layer_types, the gated attention and zero-centred norms every layer
// of these families has, RoPE's partial rotary factor, and a VLM's text_config.
#include "runtime/base/base.h"
#include "runtime/model/hf_json.h"
#include <stdio.h>
#include <string.h>

int gdn_enter_text_config(json_ctx *j, int *tied) {
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(j->root, "text_config");
    if (!cJSON_IsObject(text))
        return failf(j->err, j->errlen, "%s: text_config must be an object (the language model)",
                     j->path);
    if (get_bool(j, "tie_word_embeddings", 0, tied) < 0) return -1;
    snprintf(j->text_path, sizeof j->text_path, "%s: text_config", j->path);
    j->path = j->text_path;
    j->root = text;
    return 0;
}

int gdn_settle_tie(const json_ctx *j, int tied, mt_model *model) {
    if (item(j, "tie_word_embeddings") && model->tied_embeddings != tied)
        return failf(j->err, j->errlen,
                     "%s: tie_word_embeddings %s disagrees with the top level's %s (which "
                     "transformers ties lm_head by)",
                     j->path, model->tied_embeddings ? "true" : "false", tied ? "true" : "false");
    model->tied_embeddings = tied;
    return 0;
}

// layer_types: config.json's list of linear_attention and full_attention, or by default
// transformers' pattern, every full_attention_interval-th layer full (4 when left out).
static int read_types(const json_ctx *j, mt_model *model) {
    const cJSON *list = item(j, "layer_types");
    int every = 4;
    size_t used = 0;
    if (!list && get_int(j, "full_attention_interval", 4, &every) < 0) return -1;
    if (list && (!cJSON_IsArray(list) || cJSON_GetArraySize(list) != model->layers))
        return failf(j->err, j->errlen, "%s: layer_types must list num_hidden_layers = %d entries",
                     j->path, model->layers);
    memset(model->layer_types, 0, sizeof model->layer_types);
    for (int l = 0; l < model->layers; l++) {
        const char *type = (l + 1) % every ? "linear_attention" : "full_attention";
        if (list) {
            const cJSON *e = cJSON_GetArrayItem(list, l);
            if (!cJSON_IsString(e))
                return failf(j->err, j->errlen, "%s: layer_types[%d] is not a string", j->path, l);
            type = e->valuestring;
        }
        if (strcmp(type, "linear_attention") && strcmp(type, "full_attention"))
            return failf(j->err, j->errlen,
                         "%s: layer_types[%d] \"%s\" not supported (linear_attention or "
                         "full_attention)",
                         j->path, l, type);
        int wrote = snprintf(model->layer_types + used, sizeof model->layer_types - used, "%s%s",
                             l ? "," : "", type);
        if (wrote < 0 || used + (size_t)wrote + 1 >= sizeof model->layer_types)
            return failf(j->err, j->errlen, "%s: layer_types: too many layers to list", j->path);
        used += (size_t)wrote;
    }
    return 0;
}

// partial_rotary_factor: rope_parameters' (transformers 5 moves it there), else the top level's
// (older config.json files), else def, the class's default. At most 1, and RoPE must turn an
// even number of each head's elements.
int hf_read_partial_rotary(const json_ctx *j, double def, mt_model *model) {
    const cJSON *rp = item(j, "rope_parameters");
    const cJSON *v =
        cJSON_IsObject(rp) ? cJSON_GetObjectItemCaseSensitive(rp, "partial_rotary_factor") : NULL;
    if (!v) v = item(j, "partial_rotary_factor");
    model->partial_rotary_factor = v ? (cJSON_IsNumber(v) ? v->valuedouble : -1) : def;
    if (!(model->partial_rotary_factor > 0 && model->partial_rotary_factor <= 1))
        return failf(j->err, j->errlen, "%s: partial_rotary_factor must be a number in (0, 1]",
                     j->path);
    if (mt_rope_dim(model) % 2 || mt_rope_dim(model) < 2)
        return failf(j->err, j->errlen,
                     "%s: partial_rotary_factor %g turns %d of head_dim %d's elements: not an "
                     "even number",
                     j->path, model->partial_rotary_factor, mt_rope_dim(model), mt_head_dim(model));
    return 0;
}

int gdn_read(const json_ctx *j, int gdn, int fused, mt_model *model) {
    model->attn_output_gate = model->norm_zero_centered = gdn;
    model->hub_gdn_fused = gdn && fused;
    model->linear_k_heads = model->linear_v_heads = model->linear_k_dim = model->linear_v_dim = 0;
    model->linear_conv = 4;
    if (!gdn) return 0;
    if (get_int(j, "linear_num_key_heads", 16, &model->linear_k_heads) < 0 ||
        get_int(j, "linear_num_value_heads", 32, &model->linear_v_heads) < 0 ||
        get_int(j, "linear_key_head_dim", 128, &model->linear_k_dim) < 0 ||
        get_int(j, "linear_value_head_dim", 128, &model->linear_v_dim) < 0 ||
        get_int(j, "linear_conv_kernel_dim", 4, &model->linear_conv) < 0)
        return -1;
    if (model->linear_v_heads % model->linear_k_heads)
        return failf(j->err, j->errlen,
                     "%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d "
                     "(each key head serves as many value heads)",
                     j->path, model->linear_v_heads, model->linear_k_heads);
    if (model->linear_k_heads > 1024 || model->linear_v_heads > 1024 ||
        model->linear_k_dim > 1024 || model->linear_v_dim > 1024 || model->linear_conv > 64)
        return failf(j->err, j->errlen,
                     "%s: linear attention's heads and head dims are at most 1024, "
                     "linear_conv_kernel_dim at most 64",
                     j->path);
    return read_types(j, model) < 0 ? -1 : hf_read_partial_rotary(j, 0.25, model);
}

void gdn_write(cJSON *r, const mt_model *m) {
    cJSON_AddNumberToObject(r, "linear_num_key_heads", m->linear_k_heads);
    cJSON_AddNumberToObject(r, "linear_num_value_heads", m->linear_v_heads);
    cJSON_AddNumberToObject(r, "linear_key_head_dim", m->linear_k_dim);
    cJSON_AddNumberToObject(r, "linear_value_head_dim", m->linear_v_dim);
    cJSON_AddNumberToObject(r, "linear_conv_kernel_dim", m->linear_conv);
    cJSON *list = cJSON_AddArrayToObject(r, "layer_types");
    for (int l = 0; l < m->layers; l++)
        cJSON_AddItemToArray(list, cJSON_CreateString(mt_layer_kind_of(m, l)->attention == ATTN_GDN
                                                          ? "linear_attention"
                                                          : "full_attention"));
    // transformers 5's rope_parameters (export.c writes no rope_scaling beside it)
    cJSON *rp = cJSON_AddObjectToObject(r, "rope_parameters");
    cJSON_AddStringToObject(rp, "rope_type", "default");
    hf_add_float(rp, "rope_theta", m->rope_theta);
    hf_add_float(rp, "partial_rotary_factor", m->partial_rotary_factor);
}
