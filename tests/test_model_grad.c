// Whole-model gradient check on a tiny Llama: the analytic gradient of every tensor (through
// the layer template, the head and the embedding, exactly as the engine composes them)
// against central finite differences of the summed cross-entropy loss. Also as a Qwen2 (q/k/v
// biases) with Llama 3.1's rope_scaling, and the bias gradients' bits for 1 and 3 threads.
#include "kernels/cpu/kernels_cpu.h"
#include "runtime/engine/layer.h"
#include "runtime/model/model.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 8 };
static int passed, failed;

typedef struct {
    mt_config c;
    float *params[8], *grads[8];
    int32_t in[B * T], tgt[B * T];
    layer_scratch *s;
} model;

static float *zeros(size_t n) {
    return calloc(n, sizeof(float));
}

static const float *cls_weights(model *m) {
    head_params hp;
    head_params_bind(&hp, &m->c, m->params[model_head_group(&m->c)]);
    return m->c.tied_embeddings ? m->params[0] : hp.lm_head;
}

// Forward (and, with want_grads, backward) of the summed loss over B*T tokens.
static double run(model *m, int want_grads) {
    const mt_config *c = &m->c;
    int n = B * T, D = c->dim, L = c->layers;
    float *acts = zeros((size_t)(L + 1) * n * D), *xf = zeros(n * D), *rstd = zeros(n);
    float *dres = zeros(n * D), *dxf = zeros(n * D), *tmp = zeros(n * D);
    embedding_forward(acts, m->in, m->params[0], n, D);
    for (int l = 0; l < L; l++) {
        layer_params p;
        layer_params_bind(&p, c, l, m->params[model_layer_group(l)]);
        layer_forward(c, &p, m->s, acts + (size_t)l * n * D, acts + (size_t)(l + 1) * n * D, 0);
    }
    head_params hp, hg;
    int H = model_head_group(c);
    head_params_bind(&hp, c, m->params[H]);
    float *x_last = acts + (size_t)L * n * D;
    rmsnorm_forward(xf, rstd, x_last, hp.final_norm, n, D, (float)c->norm_eps);
    double loss = classifier_forward(xf, cls_weights(m), m->tgt, n, D, c->vocab);
    if (want_grads) {
        head_params_bind(&hg, c, m->grads[H]);
        classifier_backward(dxf, c->tied_embeddings ? m->grads[0] : hg.lm_head, xf, cls_weights(m),
                            m->tgt, n, D, c->vocab, 1.0f);
        rmsnorm_backward(dres, hg.final_norm, dxf, x_last, hp.final_norm, rstd, n, D);
        for (int l = L - 1; l >= 0; l--) {
            layer_params p, dp;
            layer_params_bind(&p, c, l, m->params[model_layer_group(l)]);
            layer_params_bind(&dp, c, l, m->grads[model_layer_group(l)]);
            layer_forward(c, &p, m->s, acts + (size_t)l * n * D, tmp, 0); // the engine's recompute
            layer_backward(c, &p, &dp, m->s, acts + (size_t)l * n * D, dres, tmp);
            memcpy(dres, tmp, sizeof(float) * n * D);
        }
        embedding_backward(m->grads[0], dres, m->in, n, D);
    }
    free(acts), free(xf), free(rstd), free(dres), free(dxf), free(tmp);
    return loss;
}

static void check_tensor(model *m, int g, const tensor_info *t, unsigned *seed) {
    double max_grad = 0;
    for (uint64_t i = 0; i < t->numel; i++)
        max_grad = fmax(max_grad, fabs(m->grads[g][t->offset + i]));
    int bad = 0;
    double worst = 0;
    for (int trial = 0; trial < 6; trial++) {
        uint64_t i = t->offset + (uint64_t)rand_r(seed) % t->numel;
        // A step of 2e-2: with 1e-2, the float rounding of the summed loss already shows in the
        // smallest gradients (a k bias's: q . b is nearly the same for every key).
        float saved = m->params[g][i], eps = 2e-2f;
        m->params[g][i] = saved + eps;
        double up = run(m, 0);
        m->params[g][i] = saved - eps;
        double down = run(m, 0);
        m->params[g][i] = saved;
        double fd = (up - down) / (2.0 * eps), an = m->grads[g][i];
        double err = fabs(fd - an) / (fmax(fabs(fd), fabs(an)) + 1e-2 * max_grad + 1e-6);
        worst = fmax(worst, err);
        bad += err > 2e-2;
    }
    char name[128];
    model_tensor_name(name, sizeof name, t, g - 1);
    printf("%s: %-48s worst relative error %.2e (max |grad| %.3g)\n", bad ? "FAIL" : "PASS", name,
           worst, max_grad);
    bad ? failed++ : passed++;
}

// Qwen2's biases, and llama3 frequencies whose blended band holds one of the four pairs
// (head dim 8: wavelengths 6.3, 63, 628, 6283 against 16 / 4 and 16 / 1).
static void make_qwen2(mt_config *c) {
    c->qkv_bias = 1;
    snprintf(c->rope_type, sizeof c->rope_type, "llama3");
    c->rope_factor = 4, c->rope_low_freq_factor = 1, c->rope_high_freq_factor = 4;
    c->rope_original_max_pos = 16;
}

// The layer gradients of one model as a run with `threads` OpenMP threads leaves them.
static float *layer_grads(model *m, int threads) {
    const mt_config *c = &m->c;
    int g = model_layer_group(1);
    uint64_t n = model_group_numel(c, g);
    memset(m->grads[g], 0, n * sizeof(float));
    omp_set_num_threads(threads);
    run(m, 1);
    omp_set_num_threads(1);
    float *out = malloc(n * sizeof(float));
    memcpy(out, m->grads[g], n * sizeof(float));
    return out;
}

static void gradcheck(int tied, int qwen2) {
    model m = {0};
    mt_config *c = &m.c;
    c->dim = 32, c->layers = 2, c->heads = 4, c->kv_heads = 2, c->ffn_dim = 48, c->vocab = 37;
    c->rope_theta = 10000, c->norm_eps = 1e-5, c->tied_embeddings = tied, c->seed = 5;
    if (qwen2) make_qwen2(c);
    unsigned seed = 11;
    for (int g = 0; g < model_group_count(c); g++) {
        uint64_t n = model_group_numel(c, g);
        m.params[g] = zeros(n), m.grads[g] = zeros(n);
        model_init_slice(c, g, 0, n, m.params[g]);
        // Scale up from the 0.02 init so the finite differences stand well above fp32 noise,
        // and move norm weights off 1 so their gradients are exercised in general position.
        for (uint64_t i = 0; i < n; i++)
            m.params[g][i] = m.params[g][i] == 1.0f ? 0.5f + (rand_r(&seed) % 1000) / 1000.0f
                                                    : m.params[g][i] * 10.0f;
    }
    for (int g = 1; g < model_head_group(c); g++) { // biases start at zero: move them off it
        tensor_info t[MODEL_MAX_TENSORS];
        uint64_t numel;
        int nt = model_group_tensors(c, g, t, &numel);
        for (int k = 0; k < nt; k++)
            if (t[k].init == TENSOR_ZEROS)
                for (uint64_t i = 0; i < t[k].numel; i++)
                m.params[g][t[k].offset + i] = (rand_r(&seed) % 1000) / 2500.0f - 0.2f;
    }
    for (int i = 0; i < B * T; i++)
        m.in[i] = rand_r(&seed) % c->vocab, m.tgt[i] = rand_r(&seed) % c->vocab;
    m.s = layer_scratch_new(c, B, T);
    printf("-- %s embeddings%s, loss %.6f\n", tied ? "tied" : "untied",
           qwen2 ? ", q/k/v biases, llama3 rope" : "", run(&m, 1));
    for (int g = 0; g < model_group_count(c); g++) {
        tensor_info t[MODEL_MAX_TENSORS];
        uint64_t numel;
        int nt = model_group_tensors(c, g, t, &numel);
        for (int k = 0; k < nt; k++) check_tensor(&m, g, &t[k], &seed);
    }
    if (qwen2) {
        uint64_t n = model_group_numel(c, model_layer_group(1));
        float *one = layer_grads(&m, 1), *three = layer_grads(&m, 3);
        int same = memcmp(one, three, n * sizeof(float)) == 0;
        printf("%s: layer 1 gradients (biases included) bitwise equal on 1 and 3 threads\n",
               same ? "PASS" : "FAIL");
        same ? passed++ : failed++;
        free(one), free(three);
    }
    layer_scratch_free(m.s);
    for (int g = 0; g < model_group_count(c); g++) free(m.params[g]), free(m.grads[g]);
}

int main(void) {
    omp_set_num_threads(1);
    gradcheck(1, 0);
    gradcheck(0, 0);
    gradcheck(0, 1);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
