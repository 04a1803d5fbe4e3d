// Hugging Face weights matched to the model (io.h's hf_index_check, hf_read_group_slice,
// hf_check_finite): each tensor the model's groups list is found in the folder with its shape,
// and read into the groups' flat layout: plain tensors by safetensors.c, block-scaled FP8 ones
// by fp8_read.c, gpt-oss's fused and MXFP4 expert tensors by safetensors_hub.c.
#include "runtime/base/base.h"
#include "runtime/io/hf_index.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

// ---- matching the model ----

static int check_one(const hf_index *ix, const mt_model *m, const tensor_info *ti, const char *name,
                     char *used, char *err, size_t errlen) {
    if (ti->hub_layout != HUB_PLAIN) return hf_hub_check(ix, m, ti, name, used, err, errlen);
    int64_t want[2] = {ti->rows, ti->cols};
    if (hf_check_shape(ix, name, want, ti->cols ? 2 : 1, 0, used, err, errlen) < 0) return -1;
    const hf_tensor *t = hf_tensor_named(ix, name);
    return t->dtype == DT_F8 ? fp8_check_scale(ix, t, used, err, errlen) : 0;
}

// Leftovers that do not change the math: old checkpoints' RoPE tables, and lm_head.weight
// saved beside tied embeddings (transformers ties it to the embedding on load, too).
static int ignorable(const char *name, const mt_model *m) {
    size_t n = strlen(name), k = strlen("rotary_emb.inv_freq");
    if (n >= k && strcmp(name + n - k, "rotary_emb.inv_freq") == 0) return 1;
    return m->tied_embeddings && strcmp(name, "lm_head.weight") == 0;
}

// A Qwen3.5 text class (Gated DeltaNet, not Qwen3-Next's fused projections) whose tensors are
// nested as a VLM's: the embedding found there and not at the top.
static int lm_nested(const hf_index *ix, const mt_model *m) {
    if (m->hub_vlm) return 1;
    if (m->linear_k_heads <= 0 || m->hub_gdn_fused) return 0;
    return !hf_tensor_named(ix, "model.embed_tokens.weight") &&
           hf_tensor_named(ix, "model.language_model.embed_tokens.weight");
}

void hf_index_layout(const hf_index *ix, mt_model *m) {
    m->hub_lm_nested = lm_nested(ix, m);
    m->hub_experts_fused = 0;
    if (m->experts <= 0 || m->moe_names != MOE_NAMES_MLP) return;
    int l = 0;
    while (l < m->layers && !mt_layer_is_moe(m, l)) l++;
    if (l == m->layers) return;
    tensor_info ti[MODEL_MAX_TENSORS];
    uint64_t numel;
    char name[256];
    m->hub_experts_fused = 1; // its names, to look for
    int n = model_group_tensors(m, model_layer_group(l), ti, &numel);
    for (int k = 0; k < n; k++)
        if (ti[k].role == T_EXP_GATE) {
            model_tensor_name(name, sizeof name, &ti[k], l);
            m->hub_experts_fused = hf_tensor_named(ix, name) != NULL;
            return;
        }
    m->hub_experts_fused = 0;
}

int hf_index_check(const hf_index *ix, const mt_model *m, char *err, size_t errlen) {
    int n_tensors = hf_index_count(ix);
    char *used = calloc(n_tensors ? n_tensors : 1, 1), name[256];
    if (!used) mt_die("out of memory");
    int rc = 0;
    for (int g = 0; g < model_group_count(m) && rc == 0; g++) {
        tensor_info ti[MODEL_MAX_TENSORS];
        uint64_t numel;
        int n = model_group_tensors(m, g, ti, &numel);
        for (int k = 0; k < n && rc == 0; k++) {
            model_tensor_name(name, sizeof name, &ti[k], g - 1);
            rc = check_one(ix, m, &ti[k], name, used, err, errlen);
        }
    }
    for (int i = 0; i < n_tensors && rc == 0; i++) {
        const hf_tensor *t = hf_tensor_at(ix, i);
        // a carried FP8 weight goes out dequantized (export_carry.c): its scales checked now,
        // not at the export after the training
        if (!used[i] && hf_carried(m, t->name) && t->dtype == DT_F8) {
            rc = fp8_check_scale(ix, t, NULL, err, errlen);
            continue;
        }
        if (used[i] || ignorable(t->name, m) || hf_carried(m, t->name)) continue;
        // transformers saves Qwen2-MoE's shared expert of width 0 as empty tensors and a gate
        const char *name = t->name;
        int no_shared = m->shared_ffn_dim == 0 && m->experts > 0 &&
                        (strstr(name, ".shared_expert.") || strstr(name, ".shared_expert_gate."));
        rc = failf(err, errlen, "%s: unexpected tensor %s (%s)", hf_tensor_file(ix, t), name,
                   no_shared ? "a shared expert of width 0, config.json's "
                               "shared_expert_intermediate_size, is not supported"
                             : "config.json's model has none");
    }
    free(used);
    return rc;
}

// ---- reading ----

int hf_read_group_slice(const hf_index *ix, const mt_model *m, int g, uint64_t lo, uint64_t len,
                        float *out, char *err, size_t errlen) {
    tensor_info ti[MODEL_MAX_TENSORS];
    uint64_t numel;
    char name[256];
    int n = model_group_tensors(m, g, ti, &numel);
    for (int k = 0; k < n; k++) {
        uint64_t a = ti[k].offset > lo ? ti[k].offset : lo;
        uint64_t b = ti[k].offset + ti[k].numel < lo + len ? ti[k].offset + ti[k].numel : lo + len;
        if (a >= b) continue;
        model_tensor_name(name, sizeof name, &ti[k], g - 1);
        const hf_tensor *t = hf_tensor_named(ix, name);
        int fp8 = ti[k].hub_layout == HUB_PLAIN && t && t->dtype == DT_F8;
        int rc = fp8 ? fp8_read_range(ix, t, a - ti[k].offset, b - a, out + (a - lo), err, errlen)
                 : ti[k].hub_layout == HUB_PLAIN
                     ? hf_read_range(ix, name, a - ti[k].offset, b - a, out + (a - lo), err, errlen)
                     : hf_hub_read(ix, m, &ti[k], name, a - ti[k].offset, b - a, out + (a - lo),
                                   err, errlen);
        if (rc < 0) return -1;
    }
    return 0;
}

int hf_check_finite(const mt_config *cfg, int g, uint64_t lo, uint64_t len, const float *data,
                    char *err, size_t errlen) {
    uint64_t i = 0;
    while (i < len && isfinite(data[i])) i++;
    if (i == len) return 0;
    tensor_info ti[MODEL_MAX_TENSORS];
    uint64_t numel, at = lo + i;
    char name[256] = "?";
    int n = model_group_tensors(&cfg->model, g, ti, &numel), k = 0;
    while (k < n - 1 && at >= ti[k].offset + ti[k].numel) k++;
    model_tensor_name(name, sizeof name, &ti[k], g - 1);
    return failf(err, errlen, "%s: tensor %s: element %llu is %s: non-finite weights are refused",
                 cfg->model_dir, name, (unsigned long long)(at - ti[k].offset),
                 isnan(data[i]) ? "NaN" : "infinite");
}
