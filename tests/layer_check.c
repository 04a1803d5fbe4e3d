// mt-layer-check: runs one decoder layer (forward, then backward for a given output gradient)
// on a backend, on inputs from a file, and writes the results; tests/layer_parity.py compares
// them with transformers' LlamaDecoderLayer in fp32.
//   layer_check cpu|cuda IN OUT
// IN:  int32 dim, heads, kv_heads, ffn, B, T, qkv_bias; float32 theta, eps; int32 experts,
//      top_k, moe_ffn_dim, router (experts > 0: the MLP is MoE; router 1: gpt-oss's, with its
//      bias, softmax over the top k, expert biases and clamped SwiGLU of limit swiglu_limit; 2:
//      DeepSeek-V3's, below);
//      float32 swiglu_limit; int32 qwen35, linear, k_heads, v_heads, k_dim, v_dim, conv,
//      head_dim; float32 partial_rotary (qwen35: Qwen3.5's layer, zero-centred norms, qk-norm per
//      head, head_dim and partial rotary; the gated attention, or with linear a Gated DeltaNet
//      of those heads, dims and conv taps); int32 groups, topk_groups, norm_topk, shared_ffn;
//      float32 scale (router 2: sigmoid scores, a correction bias, groups, routed_scaling_factor,
//      ungated shared experts of shared_ffn); int32 mla, q_rank, kv_rank, nope, rope, v,
//      interleave; float32 yarn factor, original context, mscale, mscale_all_dim (mla: multi-head
//      latent attention of those widths, every head its own key head; factor 0: plain RoPE);
//      weights (our flat layer layout, fp32: roles.h's order, each expert's matrices in turn,
//      then the biases); x [B*T, dim]; dout [B*T, dim]
// OUT: out [B*T, dim]; dx [B*T, dim]; dweights (flat, fp32)
#include "kernels/bf16.h"
#include "runtime/engine/backend.h"
#include "runtime/model/model.h"
#include "runtime/plan/plan.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *read_exact(FILE *f, size_t bytes, const char *what) {
    void *p = malloc(bytes);
    if (!p || fread(p, 1, bytes, f) != bytes) {
        fprintf(stderr, "layer_check: short read of %s\n", what);
        exit(2);
    }
    return p;
}

// OUT's contents: out, dx and the weight gradients.
static int write_results(const char *path, const float *out, const float *dx, const float *g,
                         size_t nD, size_t numel) {
    FILE *o = fopen(path, "wb");
    if (!o || fwrite(out, 4, nD, o) != nD || fwrite(dx, 4, nD, o) != nD ||
        fwrite(g, 4, numel, o) != numel || fclose(o) != 0)
        return perror(path), 2;
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4) return fprintf(stderr, "usage: layer_check cpu|cuda IN OUT\n"), 2;
    FILE *in = fopen(argv[2], "rb");
    if (!in) return perror(argv[2]), 2;
    int32_t h[7], moe[4], q35[8], ds[4], mla[7];
    float hf[2], limit, rotary, scale, yarn[4];
    if (fread(h, 4, 7, in) != 7 || fread(hf, 4, 2, in) != 2 || fread(moe, 4, 4, in) != 4 ||
        fread(&limit, 4, 1, in) != 1 || fread(q35, 4, 8, in) != 8 ||
        fread(&rotary, 4, 1, in) != 1 || fread(ds, 4, 4, in) != 4 || fread(&scale, 4, 1, in) != 1 ||
        fread(mla, 4, 7, in) != 7 || fread(yarn, 4, 4, in) != 4)
        return fprintf(stderr, "bad header\n"), 2;
    mt_config c = {0};
    c.model.dim = h[0], c.model.heads = h[1], c.model.kv_heads = h[2], c.model.ffn_dim = h[3],
    c.model.layers = 1;
    c.micro_batch = h[4], c.seq_len = h[5], c.micro_batches = 1, c.model.vocab = 256;
    c.model.rope_theta = hf[0], c.model.norm_eps = hf[1], c.model.tied_embeddings = 1,
    c.model.qkv_bias = h[6];
    c.model.experts = moe[0], c.model.top_k = moe[1], c.model.moe_ffn_dim = moe[2];
    if (moe[3] == 2) {
        c.model.router_score = ROUTER_SCORE_SIGMOID, c.model.router_correction = 1,
        c.model.router_groups = ds[0];
        c.model.router_topk_groups = ds[1], c.model.norm_topk_prob = ds[2],
        c.model.shared_ffn_dim = ds[3];
        c.model.router_scale = scale, c.model.moe_names = MOE_NAMES_DEEPSEEK;
    } else if (moe[3]) {
        c.model.router_softmax = ROUTER_SOFTMAX_TOP_K,
        c.model.router_bias = c.model.expert_bias = 1;
        c.model.moe_names = MOE_NAMES_GPT_OSS, c.model.swiglu_limit = limit;
    }
    if (q35[0]) {
        c.model.norm_zero_centered = 1, c.model.qk_norm = QK_HEAD, c.model.head_dim = q35[7];
        c.model.partial_rotary_factor = rotary, c.model.attn_output_gate = !q35[1];
        strcpy(c.model.layer_types, q35[1] ? "linear_attention" : "full_attention");
        c.model.linear_k_heads = q35[2], c.model.linear_v_heads = q35[3],
        c.model.linear_k_dim = q35[4];
        c.model.linear_v_dim = q35[5], c.model.linear_conv = q35[6];
    }
    if (mla[0]) {
        c.model.mla_q_rank = mla[1], c.model.mla_kv_rank = mla[2], c.model.mla_nope_dim = mla[3];
        c.model.mla_rope_dim = mla[4], c.model.mla_v_dim = mla[5], c.model.rope_interleave = mla[6];
    }
    if (yarn[0] > 0) {
        c.model.rope_type = ROPE_YARN, c.model.rope_factor = yarn[0],
        c.model.rope_original_max_pos = (int)yarn[1];
        c.model.rope_mscale = yarn[2], c.model.rope_mscale_all_dim = yarn[3],
        c.model.rope_truncate = 1;
    }
    model_describe_layers(&c.model);
    size_t numel = model_group_numel(&c.model, model_layer_group(0)),
           nD = (size_t)h[4] * h[5] * c.model.dim;
    float *w = read_exact(in, numel * 4, "weights"), *x = read_exact(in, nD * 4, "x");
    float *dout = read_exact(in, nD * 4, "dout");
    fclose(in);
    const backend_ops *ops = backend_cpu_ops();
    backend *b = NULL;
#ifdef MT_HAVE_CUDA
    // Until backend_cuda.c adds the biases (it would skip them): skipped, not failed.
    if (strcmp(argv[1], "cuda") == 0) ops = backend_cuda_ops(), b = backend_cuda_new(&c, 0);
    if (strcmp(argv[1], "cuda") == 0 && !b) return fprintf(stderr, "no CUDA device\n"), 77;
#endif
    if (!b && strcmp(argv[1], "cpu") != 0)
        return fprintf(stderr, "backend %s not built\n", argv[1]), 77;
    if (!b) b = backend_cpu_new(&c);
    // The weights as the backend streams them: fp32 on the CPU, bf16 on the GPU.
    void *host_w = w;
    if (ops->weight_bytes == 2) {
        bf16 *wb = malloc(numel * 2);
        for (size_t i = 0; i < numel; i++) wb[i] = bf16_from_float(w[i]);
        host_w = wb;
    }
    void *dw_ = ops->alloc(b, numel * ops->weight_bytes);
    float *dg = ops->alloc(b, numel * 4), *dx_ = ops->alloc(b, nD * 4),
          *dout_ = ops->alloc(b, nD * 4);
    float *dxin = ops->alloc(b, nD * 4), *dres = ops->alloc(b, nD * 4);
    ops->upload(b, dw_, host_w, numel * ops->weight_bytes);
    ops->upload(b, dxin, x, nD * 4);
    ops->upload(b, dres, dout, nD * 4);
    // A slot reserved up front: the recomputing path must not depend on whether there are any.
    // The CUDA backend keeps no pass of some models (plan_cuda_keeps_passes: Qwen3.5's layers):
    // there the recomputing path alone is checked.
    int kept = ops->keep_reserve(b, 1);
    int keeps = strcmp(argv[1], "cuda") != 0 || plan_cuda_keeps_passes(&c.model);
    if (kept != keeps)
        return fprintf(stderr, "layer_check: %d kept slots, expected %d\n", kept, keeps), 1;
    ops->zero(b, dg, numel * 4);
    ops->layer_forward(b, 0, 0, dw_, dxin, dout_, -1, ATT_NONE);
    ops->layer_backward(b, 0, 0, dw_, dg, dxin, dres, dx_, -1, ATT_NONE);
    float *out = malloc(nD * 4), *dx = malloc(nD * 4), *g = malloc(numel * 4);
    ops->download(b, out, dout_, nD * 4);
    ops->download(b, dx, dx_, nD * 4);
    ops->download(b, g, dg, numel * 4);
    // The backward from kept internals must give the very bits of the recomputing one.
    if (!kept) return write_results(argv[3], out, dx, g, nD, numel);
    ops->zero(b, dg, numel * 4);
    ops->layer_forward(b, 0, 0, dw_, dxin, dout_, 0, ATT_NONE);
    ops->layer_backward(b, 0, 0, dw_, dg, dxin, dres, dx_, 0, ATT_NONE);
    float *out2 = malloc(nD * 4), *dx2 = malloc(nD * 4), *g2 = malloc(numel * 4);
    ops->download(b, out2, dout_, nD * 4);
    ops->download(b, dx2, dx_, nD * 4);
    ops->download(b, g2, dg, numel * 4);
    if (memcmp(out, out2, nD * 4) || memcmp(dx, dx2, nD * 4) || memcmp(g, g2, numel * 4))
        return fprintf(stderr, "FAIL: %s: kept internals differ from recomputed ones\n", argv[1]),
               1;
    printf("PASS: %s: backward from kept internals is bitwise the recomputing one\n", argv[1]);
    return write_results(argv[3], out, dx, g, nD, numel);
}
