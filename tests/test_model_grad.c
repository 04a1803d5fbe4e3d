// Whole-model gradient check on a tiny Llama: the analytic gradient of every tensor (through
// the layer template, the head and the embedding, exactly as the engine composes them)
// against central finite differences of the summed cross-entropy loss.
#include "kernels/cpu/kernels_cpu.h"
#include "runtime/layer.h"
#include "runtime/model.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 8 };
static int passed, failed;

typedef struct {
    mt_config c;
    float *params[8], *grads[8];
    int32_t in[B * T], tgt[B * T];
    float inv_freq[64];
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
        layer_params_bind(&p, c, m->params[model_layer_group(l)]);
        layer_forward(c, &p, m->s, acts + (size_t)l * n * D, acts + (size_t)(l + 1) * n * D);
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
            layer_params_bind(&p, c, m->params[model_layer_group(l)]);
            layer_params_bind(&dp, c, m->grads[model_layer_group(l)]);
            layer_forward(c, &p, m->s, acts + (size_t)l * n * D, tmp); // the engine's recompute
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
        float saved = m->params[g][i], eps = 1e-2f;
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
    snprintf(name, sizeof name, t->name, g - 1);
    printf("%s: %-48s worst relative error %.2e (max |grad| %.3g)\n", bad ? "FAIL" : "PASS", name,
           worst, max_grad);
    bad ? failed++ : passed++;
}

static void gradcheck(int tied) {
    model m = {0};
    mt_config *c = &m.c;
    c->dim = 32, c->layers = 2, c->heads = 4, c->kv_heads = 2, c->ffn_dim = 48, c->vocab = 37;
    c->rope_theta = 10000, c->norm_eps = 1e-5, c->tied_embeddings = tied, c->seed = 5;
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
    for (int i = 0; i < B * T; i++)
        m.in[i] = rand_r(&seed) % c->vocab, m.tgt[i] = rand_r(&seed) % c->vocab;
    rope_inv_freq(m.inv_freq, mt_head_dim(c), (float)c->rope_theta);
    m.s = layer_scratch_new(c, B, T, m.inv_freq);
    printf("-- %s embeddings, loss %.6f\n", tied ? "tied" : "untied", run(&m, 1));
    for (int g = 0; g < model_group_count(c); g++) {
        tensor_info t[MODEL_MAX_TENSORS];
        uint64_t numel;
        int nt = model_group_tensors(c, g, t, &numel);
        for (int k = 0; k < nt; k++) check_tensor(&m, g, &t[k], &seed);
    }
    layer_scratch_free(m.s);
    for (int g = 0; g < model_group_count(c); g++) free(m.params[g]), free(m.grads[g]);
}

int main(void) {
    gradcheck(1);
    gradcheck(0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
