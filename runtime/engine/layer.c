#include "runtime/engine/layer.h"
#include "kernels/cpu/kernels_cpu.h"
#include "shm/syscheck.h"
#include <stdlib.h>
#include <string.h>

static float *alloc_floats(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    if (!p) mt_die("out of memory allocating %zu floats for the layer working set", n);
    return p;
}

layer_scratch *layer_scratch_new(const mt_config *c, int B, int T) {
    layer_scratch *s = calloc(1, sizeof *s);
    if (!s) mt_die("out of memory");
    size_t n = (size_t)B * T, D = c->dim, hd = mt_head_dim(c);
    size_t Q = c->heads * hd, KV = c->kv_heads * hd, F = c->ffn_dim;
    s->B = B, s->T = T;
    s->inv_freq = alloc_floats(hd / 2);
    model_rope_inv_freq(c, s->inv_freq);
    float **nd[] = {&s->n1, &s->h, &s->n2, &s->d_n2, &s->d_h, &s->d_n1};
    for (size_t i = 0; i < sizeof nd / sizeof *nd; i++) *nd[i] = alloc_floats(n * D);
    float **nq[] = {&s->q, &s->att, &s->d_att, &s->d_q};
    for (size_t i = 0; i < sizeof nq / sizeof *nq; i++) *nq[i] = alloc_floats(n * Q);
    float **nkv[] = {&s->k, &s->v, &s->d_k, &s->d_v};
    for (size_t i = 0; i < sizeof nkv / sizeof *nkv; i++) *nkv[i] = alloc_floats(n * KV);
    float **nf[] = {&s->gate, &s->up, &s->act, &s->d_act, &s->d_gate, &s->d_up};
    for (size_t i = 0; i < sizeof nf / sizeof *nf; i++) *nf[i] = alloc_floats(n * F);
    s->rstd1 = alloc_floats(n);
    s->rstd2 = alloc_floats(n);
    s->lse = alloc_floats((size_t)B * c->heads * T);
    return s;
}

void layer_scratch_free(layer_scratch *s) {
    if (!s) return;
    float *all[] = {s->n1,   s->rstd1, s->q,     s->k,   s->v,   s->att,   s->lse,    s->h,
                    s->n2,   s->rstd2, s->gate,  s->up,  s->act, s->d_act, s->d_gate, s->d_up,
                    s->d_n2, s->d_h,   s->d_att, s->d_q, s->d_k, s->d_v,   s->d_n1,   s->inv_freq};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
    free(s);
}

static void add_into(float *dst, const float *a, const float *b, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] = a[i] + b[i];
}

void layer_forward(const mt_config *c, const layer_params *w, layer_scratch *s, const float *x,
                   float *out) {
    int B = s->B, T = s->T, n = B * T, D = c->dim, hd = mt_head_dim(c), F = c->ffn_dim;
    int Q = c->heads * hd, KV = c->kv_heads * hd;
    float eps = (float)c->norm_eps;
    // attention block
    rmsnorm_forward(s->n1, s->rstd1, x, w->attn_norm, n, D, eps);
    linear_forward(s->q, s->n1, w->wq, w->bq, n, D, Q); // biases (Qwen2) before RoPE, or NULL
    linear_forward(s->k, s->n1, w->wk, w->bk, n, D, KV);
    linear_forward(s->v, s->n1, w->wv, w->bv, n, D, KV);
    rope_forward(s->q, s->inv_freq, B, T, c->heads, hd);
    rope_forward(s->k, s->inv_freq, B, T, c->kv_heads, hd);
    attention_forward(s->att, s->lse, s->q, s->k, s->v, B, T, c->heads, c->kv_heads, hd);
    linear_forward(out, s->att, w->wo, NULL, n, Q, D);
    add_into(s->h, x, out, (size_t)n * D);
    // MLP block
    rmsnorm_forward(s->n2, s->rstd2, s->h, w->ffn_norm, n, D, eps);
    linear_forward(s->gate, s->n2, w->w_gate, NULL, n, D, F);
    linear_forward(s->up, s->n2, w->w_up, NULL, n, D, F);
    swiglu_forward(s->act, s->gate, s->up, (long)n * F);
    linear_forward(out, s->act, w->w_down, NULL, n, F, D);
    add_into(out, s->h, out, (size_t)n * D);
}

void layer_backward(const mt_config *c, const layer_params *w, const layer_params *dw,
                    layer_scratch *s, const float *x, const float *dout, float *dx) {
    int B = s->B, T = s->T, n = B * T, D = c->dim, hd = mt_head_dim(c), F = c->ffn_dim;
    int Q = c->heads * hd, KV = c->kv_heads * hd;
    size_t nD = (size_t)n * D;
    // MLP block: out = h + down(swiglu(gate(n2), up(n2)))
    memset(s->d_act, 0, sizeof(float) * n * F);
    linear_backward(s->d_act, dw->w_down, NULL, dout, s->act, w->w_down, n, F, D);
    memset(s->d_gate, 0, sizeof(float) * n * F);
    memset(s->d_up, 0, sizeof(float) * n * F);
    swiglu_backward(s->d_gate, s->d_up, s->d_act, s->gate, s->up, (long)n * F);
    memset(s->d_n2, 0, sizeof(float) * nD);
    linear_backward(s->d_n2, dw->w_gate, NULL, s->d_gate, s->n2, w->w_gate, n, D, F);
    linear_backward(s->d_n2, dw->w_up, NULL, s->d_up, s->n2, w->w_up, n, D, F);
    memcpy(s->d_h, dout, sizeof(float) * nD); // the residual path
    rmsnorm_backward(s->d_h, dw->ffn_norm, s->d_n2, s->h, w->ffn_norm, s->rstd2, n, D);
    // attention block: h = x + o(attention(rope(q(n1)), rope(k(n1)), v(n1)))
    memset(s->d_att, 0, sizeof(float) * n * Q);
    linear_backward(s->d_att, dw->wo, NULL, s->d_h, s->att, w->wo, n, Q, D);
    memset(s->d_q, 0, sizeof(float) * n * Q);
    memset(s->d_k, 0, sizeof(float) * n * KV);
    memset(s->d_v, 0, sizeof(float) * n * KV);
    attention_backward(s->d_q, s->d_k, s->d_v, s->d_att, s->att, s->lse, s->q, s->k, s->v, B, T,
                       c->heads, c->kv_heads, hd);
    rope_backward(s->d_q, s->inv_freq, B, T, c->heads, hd);
    rope_backward(s->d_k, s->inv_freq, B, T, c->kv_heads, hd);
    memset(s->d_n1, 0, sizeof(float) * nD);
    // d_q, d_k (RoPE undone) and d_v are the gradients of the projections' outputs; the bias
    // gradients are their column sums, in token order (the same bits for any thread count)
    linear_backward(s->d_n1, dw->wq, dw->bq, s->d_q, s->n1, w->wq, n, D, Q);
    linear_backward(s->d_n1, dw->wk, dw->bk, s->d_k, s->n1, w->wk, n, D, KV);
    linear_backward(s->d_n1, dw->wv, dw->bv, s->d_v, s->n1, w->wv, n, D, KV);
    memcpy(dx, s->d_h, sizeof(float) * nD);
    rmsnorm_backward(dx, dw->attn_norm, s->d_n1, x, w->attn_norm, s->rstd1, n, D);
}
