// The MLP parts of a decoder layer on the CPU backend, one chunk of tokens at a time, forward
// and backward side by side: the kind MLP_DENSE, a SwiGLU out = down(silu(gate(n2)) * up(n2)),
// and the kind MLP_MOE's row, whose work is moe_mlp.c's.
#include "kernels/cpu/kernels_cpu.h"
#include "runtime/engine/layer_parts.h"
#include <string.h>

static void dense_forward(const layer_call *k, float *out, int t0, int rows) {
    const mt_model *m = &k->c->model;
    const layer_params *w = k->w;
    layer_scratch *s = k->s;
    int D = m->dim, F = m->ffn_dim;
    size_t d = (size_t)t0 * D, f = (size_t)t0 * F;
    linear_forward(s->gate + f, s->n2 + d, w->w_gate, NULL, rows, D, F);
    linear_forward(s->up + f, s->n2 + d, w->w_up, NULL, rows, D, F);
    swiglu_forward(s->act + f, s->gate + f, s->up + f, (long)rows * F);
    linear_forward(out + d, s->act + f, w->w_down, NULL, rows, F, D);
}

static void dense_backward(const layer_call *k, const float *dout, int t0, int rows) {
    const mt_model *m = &k->c->model;
    const layer_params *w = k->w, *dw = k->dw;
    layer_scratch *s = k->s;
    int D = m->dim, F = m->ffn_dim;
    size_t d = (size_t)t0 * D, f = (size_t)t0 * F, rF = (size_t)rows * F;
    memset(s->d_act + f, 0, sizeof(float) * rF);
    linear_backward(s->d_act + f, dw->w_down, NULL, dout + d, s->act + f, w->w_down, rows, F, D);
    memset(s->d_gate + f, 0, sizeof(float) * rF);
    memset(s->d_up + f, 0, sizeof(float) * rF);
    swiglu_backward(s->d_gate + f, s->d_up + f, s->d_act + f, s->gate + f, s->up + f, (long)rF);
    linear_backward(s->d_n2 + d, dw->w_gate, NULL, s->d_gate + f, s->n2 + d, w->w_gate, rows, D, F);
    linear_backward(s->d_n2 + d, dw->w_up, NULL, s->d_up + f, s->n2 + d, w->w_up, rows, D, F);
}

const mlp_part mlp_dense_cpu = {dense_forward, dense_backward};

// The MLP part's row of the kind MLP_MOE (layer_parts.h).
static void moe_part_forward(const layer_call *k, float *out, int t0, int rows) {
    size_t d = (size_t)t0 * k->c->model.dim;
    moe_mlp_forward(k->c, k->w, k->s->moe, k->s->route, k->s->n2 + d, out + d, t0, rows);
}

static void moe_part_backward(const layer_call *k, const float *dout, int t0, int rows) {
    size_t d = (size_t)t0 * k->c->model.dim;
    moe_mlp_backward(k->c, k->w, k->dw, k->s->moe, k->s->route, k->s->n2 + d, dout + d,
                     k->s->d_n2 + d, t0, rows);
}

const mlp_part mlp_moe_cpu = {moe_part_forward, moe_part_backward};
