// Drives the Hugging Face reader and writer (model/hf_config.c, io/safetensors.c, io/export.c)
// without MPI.
//   test_hf check DIR            validate config.json + weights; the error line and exit 2, or "ok"
//   test_hf roundtrip SRC OUT MAX
//       load SRC as 3 shards would (and whole), check both agree bitwise; export it as 4 writers
//       would (in reverse order, shards of at most MAX bytes) into OUT; load OUT as 2 shards and
//       check it is bitwise what SRC gave (with a 5th argument "bfloat16": the export is BF16,
//       and what comes back is bitwise SRC rounded to bf16 as torch rounds).
//   test_hf rope DIR             RoPE's inv_freq for DIR's config.json (rope_scaling included),
//                                one float a line as its bits in hex (hf_family_parity.py
//                                compares them with transformers' inv_freq buffer)
#include "runtime/io/io.h"
#include "kernels/bf16.h"
#include "runtime/model/model.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hf_index *open_checked(const char *dir, mt_config *c) {
    char err[8192];
    memset(c, 0, sizeof *c);
    c->seq_len = 32;
    hf_index *ix = NULL;
    if (hf_read_config(dir, c->seq_len, &c->model, err, sizeof err) < 0 ||
        !(ix = hf_index_open(dir, err, sizeof err)) ||
        (hf_index_layout(ix, &c->model), hf_index_check(ix, &c->model, err, sizeof err) < 0)) {
        fprintf(stderr, "%s\n", err);
        exit(2);
    }
    return ix;
}

// Group g read as n_shards ranks would read it, each its own contiguous slice.
static float *load_group(hf_index *ix, const mt_model *m, int g, int n_shards) {
    uint64_t numel = model_group_numel(m, g);
    float *out = malloc(numel * sizeof *out + 1);
    char err[8192];
    for (int k = 0; k < n_shards; k++) {
        uint64_t lo = numel * k / n_shards, hi = numel * (k + 1) / n_shards;
        if (hf_read_group_slice(ix, m, g, lo, hi - lo, out + lo, err, sizeof err) < 0) {
            fprintf(stderr, "%s\n", err);
            exit(2); // bad input, as the optimizer ranks exit
        }
    }
    return out;
}

static int same(const float *a, const float *b, uint64_t n, const char *what, int g) {
    if (memcmp(a, b, n * sizeof *a) == 0) return 1;
    fprintf(stderr, "FAIL: group %d: %s differ\n", g, what);
    return 0;
}

// What an export in c's dtype holds for group g's values x: bf16 ones rounded, but the tensors
// the export keeps in fp32 (hf_export_fp32).
static void as_exported(const mt_config *c, int g, float *x) {
    tensor_info ti[MODEL_MAX_TENSORS];
    uint64_t numel;
    int n = model_group_tensors(&c->model, g, ti, &numel);
    for (int k = 0; k < n && c->export_dtype == EXPORT_BFLOAT16; k++)
        for (uint64_t i = ti[k].offset; i < ti[k].offset + ti[k].numel; i++)
            if (!hf_export_fp32(&c->model, &ti[k])) x[i] = bf16_to_float(bf16_from_float(x[i]));
}

// Whether an export's config.json read back describes the model that was exported: every
// field config.json carries (not hub_lm_nested: a text class's nested names go out as model.*).
static int same_model(const mt_model *a, const mt_model *b) {
#define SAME(f) (a->f == b->f)
#define SAME_STR(f) (!strcmp(a->f, b->f))
    return SAME(dim) && SAME(layers) && SAME(heads) && SAME(kv_heads) && SAME(ffn_dim) &&
           SAME(vocab) && SAME(rope_theta) && SAME(norm_eps) && SAME(tied_embeddings) &&
           SAME(qkv_bias) && SAME(o_bias) && SAME(head_dim) && SAME(qk_norm) && SAME(rope_type) &&
           SAME(rope_factor) && SAME(rope_low_freq_factor) && SAME(rope_high_freq_factor) &&
           SAME(rope_original_max_pos) && SAME(rope_beta_fast) && SAME(rope_beta_slow) &&
           SAME(rope_truncate) && SAME(rope_attention_factor) && SAME(rope_mscale) &&
           SAME(rope_mscale_all_dim) && SAME(rope_interleave) && SAME(sliding_window) &&
           SAME_STR(layer_types) && SAME(attn_sinks) && SAME(experts) && SAME(top_k) &&
           SAME(moe_ffn_dim) && SAME(moe_names) && SAME(shared_ffn_dim) && SAME(shared_gate) &&
           SAME(norm_topk_prob) && SAME(moe_every) && SAME_STR(dense_layers) &&
           SAME(router_softmax) && SAME(router_bias) && SAME(expert_bias) && SAME(swiglu_limit) &&
           SAME(router_score) && SAME(router_groups) && SAME(router_topk_groups) &&
           SAME(router_correction) && SAME(router_scale) && SAME(mla_q_rank) && SAME(mla_kv_rank) &&
           SAME(mla_nope_dim) && SAME(mla_rope_dim) && SAME(mla_v_dim) && SAME(linear_k_heads) &&
           SAME(linear_v_heads) && SAME(linear_k_dim) && SAME(linear_v_dim) && SAME(linear_conv) &&
           SAME(attn_output_gate) && SAME(norm_zero_centered) && SAME(partial_rotary_factor) &&
           SAME(hub_vlm) && SAME(hub_gdn_fused) && SAME(hub_experts_fused) && SAME(bos_id) &&
           SAME(eos_id);
#undef SAME
#undef SAME_STR
}

static int roundtrip(const char *src, const char *out, uint64_t max, const char *dtype) {
    mt_config c, c2;
    hf_index *ix = open_checked(src, &c);
    snprintf(c.model_dir, sizeof c.model_dir, "%s", src); // the export carries its other tensors
    c.export_dtype = mt_choice_index(EXPORT_DTYPE_NAMES, dtype);
    int ng = model_group_count(&c.model), ok = 1;
    float **ref = calloc(ng, sizeof *ref);
    for (int g = 0; g < ng; g++) {
        ref[g] = load_group(ix, &c.model, g, 3);
        float *whole = load_group(ix, &c.model, g, 1);
        ok &= same(ref[g], whole, model_group_numel(&c.model, g), "3-way and 1-way loads", g);
        free(whole);
    }
    char tmp[MT_PATH_MAX + 32], err[8192];
    if (hf_export_dir_check(out, err, sizeof err) < 0) return fprintf(stderr, "%s\n", err), 1;
    hf_export_tmp_path(out, tmp, sizeof tmp);
    hf_export_prepare(&c, tmp, max);
    for (int k = 3; k >= 0; k--) // writers finish in any order
        for (int g = 0; g < ng; g++) {
            uint64_t n = model_group_numel(&c.model, g), lo = n * k / 4, hi = n * (k + 1) / 4;
            hf_export_write_slice(&c, tmp, max, g, lo, hi - lo, ref[g] + lo);
        }
    for (int k = 0; k < 4; k++) hf_export_assemble(&c, tmp, max, k, 4);
    hf_export_publish(tmp, out);
    if (hf_export_dir_check(out, err, sizeof err) == 0)
        return fprintf(stderr, "FAIL: %s empty\n", out), 1;
    hf_index *ix2 = open_checked(out, &c2);
    ok &= same_model(&c2.model, &c.model);
    if (!ok) fprintf(stderr, "FAIL: config.json does not round-trip\n");
    for (int g = 0; g < ng; g++) {
        float *back = load_group(ix2, &c2.model, g, 2);
        as_exported(&c, g, ref[g]);
        ok &= same(ref[g], back, model_group_numel(&c.model, g), "load and load-export-load", g);
        free(back);
        free(ref[g]);
    }
    free(ref);
    hf_index_close(ix);
    hf_index_close(ix2);
    if (ok)
        printf("ok: %d groups, %llu parameters bitwise through export\n", ng,
               (unsigned long long)model_param_count(&c.model));
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "check") == 0) {
        mt_config c;
        hf_index_close(open_checked(argv[2], &c));
        printf("ok\n");
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "rope") == 0) {
        mt_config c;
        hf_index_close(open_checked(argv[2], &c));
        int half = mt_rope_dim(&c.model) / 2;
        float *inv = malloc(sizeof(float) * half);
        model_rope_inv_freq(&c.model, inv);
        for (int i = 0; i < half; i++) {
            uint32_t bits;
            memcpy(&bits, &inv[i], 4);
            printf("%08x\n", bits);
        }
        free(inv);
        return 0;
    }
    if ((argc == 5 || argc == 6) && strcmp(argv[1], "roundtrip") == 0)
        return roundtrip(argv[2], argv[3], strtoull(argv[4], NULL, 10),
                         argc == 6 ? argv[5] : "float32");
    fprintf(stderr, "usage: test_hf check DIR | test_hf rope DIR | "
                    "test_hf roundtrip SRC OUT MAX_SHARD_BYTES [DTYPE]\n");
    return 2;
}
