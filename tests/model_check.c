// model_check: the whole model's summed cross-entropy and every parameter's gradient on the CPU
// templates (the embedding, each layer's template by its kinds, the final norm, the tied
// classifier, as backend_cpu.c composes them), for tests/model_parity.py to hold against
// transformers' Qwen3_5ForCausalLM.
//   model_check IN OUT
// IN:  int32 dim, layers, heads, kv_heads, head_dim, ffn, vocab, B, T, k_heads, v_heads, k_dim,
//      v_dim, conv; float32 eps, theta, partial_rotary; char layer_types[256]; the groups'
//      weights (our flat layout, fp32, group 0 to the head); tokens, targets int32 [B*T].
// OUT: float64 loss (the sum over tokens); every group's gradient, fp32, in the same order.
// Qwen3.5's options are on: zero-centred norms, qk-norm per head, the gated attention.
#include "kernels/cpu/kernels_cpu.h"
#include "runtime/engine/layer.h"
#include "runtime/model/model.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *read_exact(FILE *f, size_t bytes, const char *what) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p || fread(p, 1, bytes, f) != bytes) {
        fprintf(stderr, "model_check: short read of %s\n", what);
        exit(2);
    }
    return p;
}

static float *zeros(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    if (!p) exit(1);
    return p;
}

// The config of the header's fields.
static int read_config(FILE *in, mt_config *c) {
    int32_t h[14];
    float f[3];
    if (fread(h, 4, 14, in) != 14 || fread(f, 4, 3, in) != 3 ||
        fread(c->model.layer_types, 1, 256, in) != 256)
        return -1;
    c->model.dim = h[0], c->model.layers = h[1], c->model.heads = h[2], c->model.kv_heads = h[3],
    c->model.head_dim = h[4];
    c->model.ffn_dim = h[5], c->model.vocab = h[6], c->micro_batch = h[7], c->seq_len = h[8];
    c->model.linear_k_heads = h[9], c->model.linear_v_heads = h[10], c->model.linear_k_dim = h[11];
    c->model.linear_v_dim = h[12], c->model.linear_conv = h[13], c->micro_batches = 1;
    c->model.norm_eps = f[0], c->model.rope_theta = f[1], c->model.partial_rotary_factor = f[2];
    c->model.tied_embeddings = 1, c->model.norm_zero_centered = 1, c->model.qk_norm = QK_HEAD;
    c->model.attn_output_gate = 1;
    model_describe_layers(&c->model);
    return 0;
}

// The loss over the n tokens, and with grads every group's gradient.
static double run(const mt_config *c, float **params, float **grads, const int32_t *tokens,
                  const int32_t *targets) {
    int n = c->micro_batch * c->seq_len, D = c->model.dim, L = c->model.layers,
        H = model_head_group(&c->model);
    layer_scratch *s = layer_scratch_new(c, c->micro_batch, c->seq_len);
    float *acts = zeros((size_t)(L + 1) * n * D), *xf = zeros((size_t)n * D), *rstd = zeros(n);
    float *dres = zeros((size_t)n * D), *dxf = zeros((size_t)n * D), *tmp = zeros((size_t)n * D);
    embedding_forward(acts, tokens, params[0], n, D);
    for (int l = 0; l < L; l++) {
        layer_params p;
        layer_params_bind(&p, &c->model, l, params[model_layer_group(l)]);
        layer_forward(c, l, &p, s, acts + (size_t)l * n * D, acts + (size_t)(l + 1) * n * D, 0);
    }
    head_params hp, hg;
    head_params_bind(&hp, &c->model, params[H]);
    head_params_bind(&hg, &c->model, grads[H]);
    const float *last = acts + (size_t)L * n * D;
    float off = mt_norm_offset(&c->model);
    rmsnorm_offset_forward(xf, rstd, last, hp.final_norm, off, n, D, (float)c->model.norm_eps);
    double loss = classifier_forward(xf, params[0], targets, n, D, c->model.vocab);
    classifier_backward(dxf, grads[0], xf, params[0], targets, n, D, c->model.vocab, 1.0f);
    rmsnorm_offset_backward(dres, hg.final_norm, dxf, last, hp.final_norm, off, rstd, n, D);
    for (int l = L - 1; l >= 0; l--) {
        layer_params p, dp;
        layer_params_bind(&p, &c->model, l, params[model_layer_group(l)]);
        layer_params_bind(&dp, &c->model, l, grads[model_layer_group(l)]);
        layer_forward(c, l, &p, s, acts + (size_t)l * n * D, tmp, 0);
        layer_backward(c, l, &p, &dp, s, acts + (size_t)l * n * D, dres, tmp);
        memcpy(dres, tmp, sizeof(float) * n * D);
    }
    embedding_backward(grads[0], dres, tokens, n, D);
    layer_scratch_free(s);
    free(acts), free(xf), free(rstd), free(dres), free(dxf), free(tmp);
    return loss;
}

int main(int argc, char **argv) {
    if (argc != 3) return fprintf(stderr, "usage: model_check IN OUT\n"), 2;
    FILE *in = fopen(argv[1], "rb");
    if (!in) return perror(argv[1]), 2;
    mt_config c = {0};
    if (read_config(in, &c) < 0) return fprintf(stderr, "model_check: bad header\n"), 2;
    int G = model_group_count(&c.model), n = c.micro_batch * c.seq_len;
    float **params = calloc(G, sizeof *params), **grads = calloc(G, sizeof *grads);
    for (int g = 0; g < G; g++) {
        uint64_t numel = model_group_numel(&c.model, g);
        params[g] = read_exact(in, numel * 4, "weights"), grads[g] = zeros(numel);
    }
    int32_t *tokens = read_exact(in, (size_t)n * 4, "tokens");
    int32_t *targets = read_exact(in, (size_t)n * 4, "targets");
    fclose(in);
    double loss = run(&c, params, grads, tokens, targets);
    FILE *o = fopen(argv[2], "wb");
    if (!o || fwrite(&loss, 8, 1, o) != 1) return perror(argv[2]), 2;
    for (int g = 0; g < G; g++) {
        size_t numel = model_group_numel(&c.model, g);
        if (fwrite(grads[g], 4, numel, o) != numel) return perror(argv[2]), 2;
    }
    if (fclose(o) != 0) return perror(argv[2]), 2;
    return 0;
}
