// The CPU backend's working set of one layer over one micro-batch, allocated once and reused by
// every layer and micro-batch.
#include "runtime/engine/layer_scratch.h"
#include "kernels/cpu/kernels_cpu.h"
#include "shm/syscheck.h"
#include <stdlib.h>

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
    if (mt_qk_norm(c) != QK_NONE) {
        s->q_raw = alloc_floats(n * Q), s->k_raw = alloc_floats(n * KV);
        s->rstd_q = alloc_floats(n * c->heads), s->rstd_k = alloc_floats(n * c->kv_heads);
    }
    if (c->experts > 0) s->moe = moe_scratch_new(c, (int)n);
    return s;
}

void layer_scratch_free(layer_scratch *s) {
    if (!s) return;
    float *all[] = {s->n1,     s->rstd1, s->q,        s->k,     s->v,     s->att,    s->lse,
                    s->h,      s->n2,    s->rstd2,    s->gate,  s->up,    s->act,    s->d_act,
                    s->d_gate, s->d_up,  s->d_n2,     s->d_h,   s->d_att, s->d_q,    s->d_k,
                    s->d_v,    s->d_n1,  s->inv_freq, s->q_raw, s->k_raw, s->rstd_q, s->rstd_k};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
    moe_scratch_free(s->moe);
    free(s);
}
