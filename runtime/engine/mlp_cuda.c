// The MLP parts of a decoder layer on the GPU, one chunk of tokens at a time, forward and
// backward side by side: the kind MLP_DENSE, a SwiGLU, and the kind MLP_MOE's row, whose work is
// moe_cuda.c's.
#include "runtime/engine/layer_parts_cuda.h"
#include "runtime/engine/moe_cuda.h"

// gate and up from n2 into a's chunk buffers (whole in a kept slot, whose one chunk is the
// micro-batch), and their SwiGLU product into b->act.
static void dense_inputs(backend *b, const layer_w *w, const layer_saved *a, int rows) {
    const mt_model *m = &b->c->model;
    int D = m->dim, F = m->ffn_dim;
    cuda_linear_forward(b->gemm, a->gate, 0, 0, b->n2, w->w_gate, rows, D, F, b->s);
    cuda_linear_forward(b->gemm, a->up, 0, 0, b->n2, w->w_up, rows, D, F, b->s);
    cuda_swiglu_forward(b->act, a->gate, a->up, (long)rows * F, b->s);
}

static void dense_forward(const cu_layer_call *k, float *out, int t0, int rows) {
    backend *b = k->b;
    const mt_model *m = &b->c->model;
    int D = m->dim, F = m->ffn_dim;
    dense_inputs(b, k->w, k->a, rows);
    float *o = out + (size_t)t0 * D;
    cu_copy(b, o, k->a->h, sizeof(float) * rows * D);
    cuda_linear_forward(b->gemm, o, 1, 1.0f, b->act, k->w->w_down, rows, F, D, b->s);
}

static void dense_backward(const cu_layer_call *k, const float *dout, int t0, int rows) {
    backend *b = k->b;
    const mt_model *m = &b->c->model;
    const layer_w *w = k->w;
    const layer_g *g = k->g;
    const layer_saved *a = k->a;
    int D = m->dim, F = m->ffn_dim;
    cudaStream_t s = b->s;
    cuda_gemm *gm = b->gemm;
    if (k->keep >= 0) // gate and up are kept: only the SwiGLU product is redone
        cuda_swiglu_forward(b->act, a->gate, a->up, (long)rows * F, s);
    else
        dense_inputs(b, w, a, rows);
    const float *dy = dout + (size_t)t0 * D;
    cuda_float_to_bf16(b->dout_b, dy, (long)rows * D, s);
    cuda_linear_backward_input(gm, b->d_act, 1, 0, b->dout_b, w->w_down, rows, F, D, s);
    cuda_linear_backward_weight(gm, g->w_down, b->dout_b, b->act, rows, F, D, s);
    cuda_swiglu_backward(b->d_gate, b->d_up, b->d_act, a->gate, a->up, (long)rows * F, s);
    cuda_linear_backward_input(gm, b->d_n2, 1, 0, b->d_gate, w->w_gate, rows, D, F, s);
    cuda_linear_backward_input(gm, b->d_n2, 1, 1.0f, b->d_up, w->w_up, rows, D, F, s);
    cuda_linear_backward_weight(gm, g->w_gate, b->d_gate, b->n2, rows, D, F, s);
    cuda_linear_backward_weight(gm, g->w_up, b->d_up, b->n2, rows, D, F, s);
}

const cu_mlp_part mlp_dense_cuda = {dense_forward, dense_backward};

// The kind MLP_MOE: out = h + MoE(n2); its backward recomputes the routing and the experts'
// internals (moe_cuda.c).
static void moe_forward(const cu_layer_call *k, float *out, int t0, int rows) {
    backend *b = k->b;
    float *o = out + (size_t)t0 * b->c->model.dim;
    cu_copy(b, o, k->a->h, sizeof(float) * rows * b->c->model.dim);
    cu_moe_forward(b, k->l, k->m, k->w, o, t0, rows);
}

static void moe_backward(const cu_layer_call *k, const float *dout, int t0, int rows) {
    backend *b = k->b;
    cu_moe_backward(b, k->l, k->m, k->w, k->g, dout + (size_t)t0 * b->c->model.dim, b->d_n2, t0,
                    rows);
}

const cu_mlp_part mlp_moe_cuda = {moe_forward, moe_backward};
