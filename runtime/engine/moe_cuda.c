// A Mixture-of-Experts MLP on the GPU (runtime/engine/moe_mlp.c is its CPU reference): the
// router's GEMM, softmax and top-k, the tokens permuted by expert (histogram, scan, permute:
// kernels/cuda/moe.cu), each expert's SwiGLU on its rows (cuBLASLt), and the un-permute with
// the routing weights summed in fp32; the shared expert beside it. The backward recomputes the
// routing and the experts' internals from the MLP's input, as the dense layer recomputes its
// own: they are too large to keep (top_k rows a token).
#include "runtime/engine/moe_cuda.h"
#include "runtime/engine/alloc_cuda.h"
#include "runtime/engine/moe_mlp.h"
#include "shm/syscheck.h"
#include <stdlib.h>
#include <string.h>

// The device buffers are MT_CUDA_MOE's (buffers.h); the host ones (MT_CUDA_PINNED,
// MT_CUDA_HOST) are there already. The backend frees them all.
void cu_moe_alloc(backend *b) {
    const mt_config *c = b->c;
    moe_set *s = &b->moe;
    if (c->model.experts <= 0) return;
    mt_buffer_list l;
    mt_buffers_cuda_moe(&l, &b->shape);
    void **slots[] = {MT_CUDA_MOE(MT_BUFFER_SLOT, s, _)};
    cu_carve(b, &l, CU_SLOTS(slots));
    s->layers = mt_moe_layers(&c->model);
    for (int l = 0, i = 0; l < c->model.layers; l++)
        s->moe_index[l] = mt_layer_is_moe(&c->model, l) ? i++ : -1;
    s->chunks = (int)b->shape.chunks;
    CUDA_CHECK(cudaMemset(s->aux_g, 0, (size_t)c->micro_batches * c->model.experts * 4));
}

// Where micro-batch m's chunk at token t0 of MoE layer l keeps its counts (then offsets).
static int32_t *routed_of(backend *b, int l, int m, int t0) {
    moe_set *s = &b->moe;
    size_t i = ((size_t)s->moe_index[l] * b->c->micro_batches + m) * s->chunks + t0 / b->seq_chunk;
    return s->routed + i * (2 * b->c->model.experts + 1);
}

// Layer l's correction bias in fp32: from its frozen image (engine/frozen.h), or, where that
// never came (a backend driven without a job), the fetched bf16 widened into s->correction.
static const float *correction_of(backend *b, int l, const layer_w *w) {
    const mt_model *m = &b->c->model;
    moe_set *s = &b->moe;
    if (!w->router_corr) return NULL;
    if (s->frozen_corr && s->frozen_corr[l] > 0) return s->frozen + s->frozen_corr[l] - 1;
    cuda_bf16_to_float(s->correction, w->router_corr, m->experts, b->s);
    return s->correction;
}

// DeepSeek's router for layer l.
static moe_sigmoid_route sigmoid_route(backend *b, int l, const layer_w *w) {
    return moe_sigmoid_route_of(&b->c->model, correction_of(b, l, w));
}

void cu_moe_set_frozen(backend *b, int l, const float *image) {
    const mt_model *m = &b->c->model;
    moe_set *s = &b->moe;
    uint64_t base = model_frozen_base(m, l);
    CUDA_CHECK(cudaMemcpy(s->frozen + base, image, model_frozen_numel(m, l) * sizeof(float),
                          cudaMemcpyHostToDevice));
    int64_t at = model_frozen_at(m, l, T_ROUTER_CORR);
    s->frozen_corr[l] = at < 0 ? 0 : 1 + (int64_t)base + at; // looked up per chunk: once here
}

// The routing of one chunk on the device: logits, probabilities, top-k and the dispatch.
static void route_kernels(backend *b, int l, const layer_w *w, const bf16 *n2, int rows) {
    const mt_model *m = &b->c->model;
    moe_set *s = &b->moe;
    int E = m->experts, k = m->top_k;
    cuda_linear_forward(b->gemm, s->logits, 1, 0, n2, w->router, rows, m->dim, E, b->s);
    if (w->router_b) cuda_bias_forward_f32(s->logits, w->router_b, rows, E, b->s);
    if (m->router_score == ROUTER_SCORE_SIGMOID) {
        moe_sigmoid_route r = sigmoid_route(b, l, w);
        cuda_moe_route_sigmoid_forward(s->probs, s->expert, s->weight, s->logits, rows, E, k, &r,
                                       b->s);
    } else {
        cuda_moe_route_forward(s->probs, s->expert, s->weight, s->logits, rows, E, k,
                               moe_weights_of(m), b->s);
    }
    cuda_moe_dispatch(s->counts, s->offsets, s->row_of, s->token_of, s->expert, rows, E, k,
                      s->dispatch_scratch, b->s);
}

// The forward's routing of one chunk, and its counts on the host (the experts' GEMMs are sized
// there: the host waits for the router here), kept for the chunk's backward.
static void route(backend *b, int l, int m, int t0, const layer_w *w, const bf16 *n2, int rows) {
    moe_set *s = &b->moe;
    int E = b->c->model.experts;
    route_kernels(b, l, w, n2, rows);
    CUDA_CHECK(cudaMemcpyAsync(s->counts_host, s->counts, E * 4, cudaMemcpyDeviceToHost, b->s));
    CUDA_CHECK(
        cudaMemcpyAsync(s->offsets_host, s->offsets, (E + 1) * 4, cudaMemcpyDeviceToHost, b->s));
    CUDA_CHECK(cudaStreamSynchronize(b->s));
    int32_t *kept = routed_of(b, l, m, t0);
    memcpy(kept, s->counts_host, (size_t)E * 4);
    memcpy(kept + E, s->offsets_host, (size_t)(E + 1) * 4);
    s->cnt = s->counts_host, s->off = s->offsets_host;
}

// The backward's: the same kernels on the same input give the forward's routing, whose counts
// the host kept, so the host queues the chunk's backward without waiting for the device.
static void route_again(backend *b, int l, int m, int t0, const layer_w *w, const bf16 *n2,
                        int rows) {
    moe_set *s = &b->moe;
    route_kernels(b, l, w, n2, rows);
    const int32_t *kept = routed_of(b, l, m, t0);
    s->cnt = kept, s->off = kept + b->c->model.experts;
}

// Each expert's bias (expert_bias: bias + e * cols) on its rows of x [P, cols], and back: the
// column sums of each expert's rows of dx into its gradient. One call per expert with rows (the
// GEMMs are per expert too), each a fixed-order sum.
static void experts_bias_forward(backend *b, bf16 *x, const bf16 *bias, int cols) {
    moe_set *s = &b->moe;
    for (int e = 0; e < b->c->model.experts; e++)
        if (s->cnt[e] > 0)
            cuda_bias_forward(x + (size_t)s->off[e] * cols, bias + (size_t)e * cols, s->cnt[e],
                              cols, b->s);
}

static void experts_bias_backward(backend *b, float *dbias, const bf16 *dx, int cols) {
    moe_set *s = &b->moe;
    for (int e = 0; e < b->c->model.experts; e++)
        if (s->cnt[e] > 0)
            cuda_bias_backward(dbias + (size_t)e * cols, dx + (size_t)s->off[e] * cols, s->cnt[e],
                               cols, b->bias_scratch, b->s);
}

// Each expert's SwiGLU on its rows: yp = down(act(gate(xp), up(xp))), the activation gpt-oss's
// clamped SwiGLU with swiglu_limit, with each projection's bias with expert_bias (the down
// projection's inside the routing weight, as in transformers).
static void experts_forward(backend *b, const layer_w *w, int rows) {
    const mt_model *m = &b->c->model;
    moe_set *s = &b->moe;
    int E = m->experts, D = m->dim, F = m->moe_ffn_dim;
    long P = (long)rows * m->top_k;
    cuda_moe_gather(s->xp, b->n2, s->token_of, (int)P, D, b->s);
    cuda_experts_forward(b->gemm, s->gate, 0, 0, s->xp, w->exp_gate, E, s->cnt, s->off, D, F, b->s);
    cuda_experts_forward(b->gemm, s->up, 0, 0, s->xp, w->exp_up, E, s->cnt, s->off, D, F, b->s);
    if (w->exp_gate_b) {
        experts_bias_forward(b, s->gate, w->exp_gate_b, F);
        experts_bias_forward(b, s->up, w->exp_up_b, F);
    }
    if (m->swiglu_limit > 0)
        cuda_swiglu_clamped_forward(s->act, s->gate, s->up, P * F, moe_clamp_of(m), b->s);
    else
        cuda_swiglu_forward(s->act, s->gate, s->up, P * F, b->s);
    cuda_experts_forward(b->gemm, s->yp, 0, 0, s->act, w->exp_down, E, s->cnt, s->off, F, D, b->s);
    if (w->exp_down_b) experts_bias_forward(b, s->yp, w->exp_down_b, D);
}

static void shared_forward(backend *b, const layer_w *w, int rows) {
    const mt_model *m = &b->c->model;
    moe_set *s = &b->moe;
    int D = m->dim, S = m->shared_ffn_dim;
    cuda_linear_forward(b->gemm, s->sh_gate, 0, 0, b->n2, w->sh_gate, rows, D, S, b->s);
    cuda_linear_forward(b->gemm, s->sh_up, 0, 0, b->n2, w->sh_up, rows, D, S, b->s);
    cuda_swiglu_forward(s->sh_act, s->sh_gate, s->sh_up, (long)rows * S, b->s);
    cuda_linear_forward(b->gemm, s->sh_y, 0, 0, s->sh_act, w->sh_down, rows, S, D, b->s);
    if (w->sh_route) // Qwen2-MoE's gate; DeepSeek's shared experts have none
        cuda_linear_forward(b->gemm, s->sh_logit, 1, 0, b->n2, w->sh_route, rows, D, 1, b->s);
}

// Micro-batch m's routing statistics in MoE layer l: tokens per expert (host) and probability
// sums (device), summed over its chunks in order.
static void record(backend *b, int l, int m, int t0, int rows) {
    const mt_model *model = &b->c->model;
    moe_set *s = &b->moe;
    int E = model->experts;
    size_t at = ((size_t)m * s->layers + s->moe_index[l]) * E;
    if (t0 == 0) memset(s->counts_all + at, 0, sizeof(int32_t) * E);
    for (int e = 0; e < E; e++) s->counts_all[at + e] += s->counts_host[e];
    if (model->router_score == ROUTER_SCORE_SIGMOID) { // no load-balancing loss: its sums stay 0
        if (t0 == 0) CUDA_CHECK(cudaMemsetAsync(s->psum_all + at, 0, sizeof(float) * E, b->s));
        return;
    }
    cuda_moe_prob_sums(s->psum_all + at, s->probs, rows, E, t0 > 0, b->s);
}

void cu_moe_forward(backend *b, int l, int m, const layer_w *w, float *out, int t0, int rows) {
    const mt_model *model = &b->c->model;
    moe_set *s = &b->moe;
    route(b, l, m, t0, w, b->n2, rows);
    record(b, l, m, t0, rows);
    experts_forward(b, w, rows);
    cuda_moe_combine(out, s->yp, s->row_of, s->weight, rows, model->top_k, model->dim, b->s);
    if (!w->sh_gate) return;
    shared_forward(b, w, rows);
    cuda_moe_gate_scale_forward(out, s->sh_y, w->sh_route ? s->sh_logit : NULL, rows, model->dim,
                                b->s);
}

static void experts_backward(backend *b, const layer_w *w, const layer_g *g, int rows) {
    const mt_model *m = &b->c->model;
    moe_set *s = &b->moe;
    int E = m->experts, D = m->dim, F = m->moe_ffn_dim;
    const int32_t *cnt = s->cnt, *off = s->off;
    long P = (long)rows * m->top_k;
    cuda_experts_backward_input(b->gemm, s->d_act, 1, 0, s->d_yp, w->exp_down, E, cnt, off, F, D,
                                b->s);
    cuda_experts_backward_weight(b->gemm, g->exp_down, s->d_yp, s->act, E, cnt, off, F, D, b->s);
    if (m->swiglu_limit > 0)
        cuda_swiglu_clamped_backward(s->d_gate, s->d_up, s->d_act, s->gate, s->up, P * F,
                                     moe_clamp_of(m), b->s);
    else
        cuda_swiglu_backward(s->d_gate, s->d_up, s->d_act, s->gate, s->up, P * F, b->s);
    if (g->exp_gate_b) {
        experts_bias_backward(b, g->exp_down_b, s->d_yp, D);
        experts_bias_backward(b, g->exp_gate_b, s->d_gate, F);
        experts_bias_backward(b, g->exp_up_b, s->d_up, F);
    }
    cuda_experts_backward_input(b->gemm, s->d_xp, 0, 0, s->d_gate, w->exp_gate, E, cnt, off, D, F,
                                b->s);
    cuda_experts_backward_input(b->gemm, s->d_xp, 0, 1.0f, s->d_up, w->exp_up, E, cnt, off, D, F,
                                b->s);
    cuda_experts_backward_weight(b->gemm, g->exp_gate, s->d_gate, s->xp, E, cnt, off, D, F, b->s);
    cuda_experts_backward_weight(b->gemm, g->exp_up, s->d_up, s->xp, E, cnt, off, D, F, b->s);
}

static void shared_backward(backend *b, const layer_w *w, const layer_g *g, const float *dy,
                            float *d_n2, int rows) {
    const mt_model *m = &b->c->model;
    moe_set *s = &b->moe;
    int D = m->dim, S = m->shared_ffn_dim;
    cudaStream_t st = b->s;
    cuda_gemm *gm = b->gemm;
    shared_forward(b, w, rows);
    const float *logit = w->sh_route ? s->sh_logit : NULL; // NULL: ungated (DeepSeek)
    cuda_moe_gate_scale_backward(s->d_sh_y, logit ? s->d_sh_logit : NULL, dy, s->sh_y, logit, rows,
                                 D, st);
    cuda_linear_backward_input(gm, s->sh_dact, 1, 0, s->d_sh_y, w->sh_down, rows, S, D, st);
    cuda_linear_backward_weight(gm, g->sh_down, s->d_sh_y, s->sh_act, rows, S, D, st);
    cuda_swiglu_backward(s->d_sh_gate, s->d_sh_up, s->sh_dact, s->sh_gate, s->sh_up, (long)rows * S,
                         st);
    cuda_linear_backward_input(gm, d_n2, 1, 1.0f, s->d_sh_gate, w->sh_gate, rows, D, S, st);
    cuda_linear_backward_input(gm, d_n2, 1, 1.0f, s->d_sh_up, w->sh_up, rows, D, S, st);
    cuda_linear_backward_weight(gm, g->sh_gate, s->d_sh_gate, b->n2, rows, D, S, st);
    cuda_linear_backward_weight(gm, g->sh_up, s->d_sh_up, b->n2, rows, D, S, st);
    if (!logit) return;
    cuda_linear_backward_input(gm, d_n2, 1, 1.0f, s->d_sh_logit, w->sh_route, rows, D, 1, st);
    cuda_linear_backward_weight(gm, g->sh_route, s->d_sh_logit, b->n2, rows, D, 1, st);
}

void cu_moe_backward(backend *b, int l, int m, const layer_w *w, const layer_g *g, const float *dy,
                     float *d_n2, int t0, int rows) {
    const mt_model *model = &b->c->model;
    moe_set *s = &b->moe;
    int E = model->experts, k = model->top_k, D = model->dim;
    route_again(b, l, m, t0, w, b->n2, rows);
    experts_forward(b, w, rows);
    cuda_moe_combine_backward(s->d_yp, s->d_weight, dy, s->yp, s->row_of, s->weight, rows, k, D,
                              b->s);
    experts_backward(b, w, g, rows);
    cu_zero(b, d_n2, sizeof(float) * rows * D);
    cuda_moe_scatter_add(d_n2, s->d_xp, s->row_of, rows, k, D, b->s);
    const float *aux_g = model->router_aux ? s->aux_g + (size_t)m * E : NULL;
    if (model->router_score == ROUTER_SCORE_SIGMOID) {
        moe_sigmoid_route r = sigmoid_route(b, l, w);
        cuda_moe_route_sigmoid_backward(s->d_logits, s->d_weight, s->probs, s->expert, rows, E, k,
                                        &r, b->s);
    } else {
        cuda_moe_route_backward(s->d_logits, s->d_weight, s->probs, s->expert, s->weight, aux_g,
                                rows, E, k, moe_weights_of(model), b->s);
    }
    if (g->router_b) cuda_bias_backward(g->router_b, s->d_logits, rows, E, b->bias_scratch, b->s);
    cuda_linear_backward_input(b->gemm, d_n2, 1, 1.0f, s->d_logits, w->router, rows, D, E, b->s);
    cuda_linear_backward_weight(b->gemm, g->router, s->d_logits, b->n2, rows, D, E, b->s);
    if (w->sh_gate) shared_backward(b, w, g, dy, d_n2, rows);
}

// Micro-batch m's load-balancing loss from its MoE layers' statistics (on the host: they are
// E numbers a layer), and its gradient for the layers' backwards.
void cu_moe_head(backend *b, int m, float daux) {
    const mt_model *model = &b->c->model;
    moe_set *s = &b->moe;
    if (!s->layers) return;
    int E = model->experts;
    size_t per = (size_t)s->layers * E, at = (size_t)m * per;
    CUDA_CHECK(cudaMemcpyAsync(s->psum_host + at, s->psum_all + at, per * 4, cudaMemcpyDeviceToHost,
                               b->s));
    CUDA_CHECK(cudaStreamSynchronize(b->s));
    s->aux += moe_aux_loss(s->aux_g_host, s->counts_all + at, s->psum_host + at, s->layers,
                           tokens(b), E, daux);
    CUDA_CHECK(cudaMemcpyAsync(s->aux_g + (size_t)m * E, s->aux_g_host, E * 4,
                               cudaMemcpyHostToDevice, b->s));
    CUDA_CHECK(cudaStreamSynchronize(b->s)); // aux_g_host is reused by the next micro-batch
    if (m + 1 > s->aux_micro) s->aux_micro = m + 1;
}

double cu_moe_take_aux(backend *b, int64_t *load) {
    moe_set *s = &b->moe;
    if (load)
        moe_sum_load(load, s->counts_all, s->aux_micro, (size_t)s->layers * b->c->model.experts);
    double aux = s->aux;
    s->aux = 0, s->aux_micro = 0;
    return aux;
}
