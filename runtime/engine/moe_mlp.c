#include "runtime/engine/moe_mlp.h"
#include "runtime/engine/host_buffers.h"
#include "kernels/cpu/kernels_cpu.h"
#include "shm/syscheck.h"
#include <stdlib.h>
#include <string.h>

// Token arrays span the pass's n tokens, pair arrays its n * k (token, slot) pairs; a chunk
// at token t0 owns rows t0 .. and pairs t0 * k .., and its own counts and offsets.
struct moe_scratch {
    int n, chunks;
    float *probs, *weight, *d_weight, *d_logits;
    int32_t *expert, *row_of, *token_of, *counts, *offsets;
    float *xp, *gate, *up, *act, *yp, *d_yp, *d_act, *d_gate, *d_up, *d_xp;
    // the shared expert (shared_ffn_dim > 0)
    float *sh_gate, *sh_up, *sh_act, *sh_y, *sh_logit, *d_sh_y, *d_sh_act, *d_sh_gate, *d_sh_up,
        *d_sh_logit;
    float psum[MOE_MAX_EXPERTS];
    size_t bytes; // the buffers' (MT_CPU_MOE)
};

// The buffers are MT_CPU_MOE's (buffers.h), for n tokens.
moe_scratch *moe_scratch_new(const mt_config *c, int n) {
    moe_scratch *s = calloc(1, sizeof *s);
    if (!s) mt_die("out of memory");
    mt_buffer_shape shape;
    mt_buffer_shape_of(&shape, c, 1, n); // one row of n: the MLP sees tokens, not rows
    mt_buffer_list l;
    mt_buffers_cpu_moe(&l, &shape);
    void **slots[] = {MT_CPU_MOE(MT_BUFFER_SLOT, s, _)};
    s->bytes = host_buffers_new(&l, HOST_SLOTS(slots), "a MoE layer's working set");
    s->n = n, s->chunks = (int)shape.chunks;
    return s;
}

void moe_scratch_free(moe_scratch *s) {
    if (!s) return;
    void **slots[] = {MT_CPU_MOE(MT_BUFFER_SLOT, s, _)};
    host_buffers_free(HOST_SLOTS(slots));
    free(s);
}

size_t moe_scratch_bytes(const moe_scratch *s) {
    return s->bytes;
}

const int32_t *moe_scratch_experts(const moe_scratch *s) {
    return s->expert;
}

// The chunk at token t0: its index into the per-chunk counts and offsets.
static int chunk_index(const mt_config *c, const moe_scratch *s, int t0) {
    return t0 / mt_chunk_of(c, s->n);
}

// Expert e's vector of `len` in a role's block (NULL: the model has none).
static float *expert_vec(float *v, int e, size_t len) {
    return v ? v + e * len : NULL;
}

// The experts' activation: gpt-oss's clamped SwiGLU with swiglu_limit, else the plain one.
static void act_forward(const mt_model *m, float *act, const float *gate, const float *up, long n) {
    if (m->swiglu_limit > 0)
        swiglu_clamped_forward(act, gate, up, n, moe_clamp_of(m));
    else
        swiglu_forward(act, gate, up, n);
}

static void act_backward(const mt_model *m, float *dgate, float *dup, const float *dact,
                         const float *gate, const float *up, long n) {
    if (m->swiglu_limit > 0)
        swiglu_clamped_backward(dgate, dup, dact, gate, up, n, moe_clamp_of(m));
    else
        swiglu_backward(dgate, dup, dact, gate, up, n);
}

// Each expert's SwiGLU on its rows [offsets[e], offsets[e + 1]) of the chunk's pairs, with its
// biases (expert_bias; the down projection's is inside the routing weight, as in transformers).
static void experts_forward(const mt_model *m, const layer_params *w, moe_scratch *s, size_t p0,
                            const int32_t *offsets) {
    size_t D = m->dim, F = m->moe_ffn_dim;
    for (int e = 0; e < m->experts; e++) {
        size_t r0 = p0 + offsets[e];
        int rows = offsets[e + 1] - offsets[e];
        if (!rows) continue;
        const float *x = s->xp + r0 * D;
        linear_forward(s->gate + r0 * F, x, w->exp_gate + e * F * D,
                       expert_vec(w->exp_gate_b, e, F), rows, D, F);
        linear_forward(s->up + r0 * F, x, w->exp_up + e * F * D, expert_vec(w->exp_up_b, e, F),
                       rows, D, F);
        act_forward(m, s->act + r0 * F, s->gate + r0 * F, s->up + r0 * F, (long)rows * F);
        linear_forward(s->yp + r0 * D, s->act + r0 * F, w->exp_down + e * D * F,
                       expert_vec(w->exp_down_b, e, D), rows, F, D);
    }
}

// The shared expert's SwiGLU and its gate's logit, then out += sigmoid(logit) * its output.
static void shared_forward(const mt_model *m, const layer_params *w, moe_scratch *s,
                           const float *n2, float *out, int t0, int rows) {
    size_t D = m->dim, S = m->shared_ffn_dim, t = t0;
    linear_forward(s->sh_gate + t * S, n2, w->sh_gate, NULL, rows, D, S);
    linear_forward(s->sh_up + t * S, n2, w->sh_up, NULL, rows, D, S);
    swiglu_forward(s->sh_act + t * S, s->sh_gate + t * S, s->sh_up + t * S, (long)rows * S);
    linear_forward(s->sh_y + t * D, s->sh_act + t * S, w->sh_down, NULL, rows, S, D);
    if (!w->sh_route) { // DeepSeek's shared experts: added as they are
        for (size_t i = 0; i < (size_t)rows * D; i++) out[i] += s->sh_y[t * D + i];
        return;
    }
    linear_forward(s->sh_logit + t, n2, w->sh_route, NULL, rows, D, 1);
    moe_gate_scale_forward(out, s->sh_y + t * D, s->sh_logit + t, rows, D);
}

// The chunk's logits (in d_logits, as scratch) to its scores, choices and weights: the softmax
// routers' probabilities, or DeepSeek's sigmoid scores (model.router_score).
static void route_forward(const mt_model *m, const layer_params *w, moe_scratch *s, float *probs,
                          size_t p0, int rows) {
    int E = m->experts, k = m->top_k;
    if (m->router_score == ROUTER_SCORE_SIGMOID) {
        moe_sigmoid_route r = moe_sigmoid_route_of(m, w->router_corr);
        moe_route_sigmoid_forward(probs, s->expert + p0, s->weight + p0, s->d_logits, rows, E, k,
                                  &r);
    } else {
        moe_route_forward(probs, s->expert + p0, s->weight + p0, s->d_logits, rows, E, k,
                          moe_weights_of(m));
    }
}

void moe_mlp_forward(const mt_config *c, const layer_params *w, moe_scratch *s, moe_route_io *io,
                     const float *n2, float *out, int t0, int rows) {
    int E = c->model.experts, k = c->model.top_k, D = c->model.dim, ci = chunk_index(c, s, t0);
    size_t p0 = (size_t)t0 * k;
    int32_t *counts = s->counts + (size_t)ci * (E + 1),
            *offsets = s->offsets + (size_t)ci * (E + 1);
    float *probs = s->probs + (size_t)t0 * E;
    linear_forward(s->d_logits, n2, w->router, w->router_b, rows, D, E); // the logits, in scratch
    route_forward(&c->model, w, s, probs, p0, rows);
    moe_dispatch(counts, offsets, s->row_of + p0, s->token_of + p0, s->expert + p0, rows, E, k);
    moe_gather(s->xp + p0 * D, n2, s->token_of + p0, rows * k, D);
    experts_forward(&c->model, w, s, p0, offsets);
    memset(out, 0, sizeof(float) * rows * D);
    moe_combine(out, s->yp + p0 * D, s->row_of + p0, s->weight + p0, rows, k, D);
    if (w->sh_gate) shared_forward(&c->model, w, s, n2, out, t0, rows);
    if (!io) return;
    // The load-balancing loss's probabilities are the softmax over every expert whatever the
    // weights: transformers gives load_balancing_loss_func the router's logits (gpt-oss's
    // OutputRecorder takes GptOssTopKRouter's output 0, the logits with their bias).
    // DeepSeek's sigmoid router has no such loss in transformers: its sums stay zero.
    if (t0 == 0) memset(io->counts, 0, sizeof(int32_t) * E), memset(io->psum, 0, sizeof(float) * E);
    for (int e = 0; e < E; e++) io->counts[e] += counts[e];
    if (c->model.router_score == ROUTER_SCORE_SIGMOID) return;
    moe_prob_sums(s->psum, probs, rows, E);
    for (int e = 0; e < E; e++) io->psum[e] += s->psum[e];
}

// The experts' backward from d_yp: their weight gradients, and d_xp for their inputs.
static void experts_backward(const mt_model *m, const layer_params *w, const layer_params *dw,
                             moe_scratch *s, size_t p0, const int32_t *offsets) {
    size_t D = m->dim, F = m->moe_ffn_dim;
    for (int e = 0; e < m->experts; e++) {
        size_t r0 = p0 + offsets[e];
        int rows = offsets[e + 1] - offsets[e];
        if (!rows) continue; // no tokens: the expert's gradient stays zero
        size_t rF = (size_t)rows * F;
        memset(s->d_act + r0 * F, 0, sizeof(float) * rF);
        linear_backward(s->d_act + r0 * F, dw->exp_down + e * D * F,
                        expert_vec(dw->exp_down_b, e, D), s->d_yp + r0 * D, s->act + r0 * F,
                        w->exp_down + e * D * F, rows, F, D);
        memset(s->d_gate + r0 * F, 0, sizeof(float) * rF);
        memset(s->d_up + r0 * F, 0, sizeof(float) * rF);
        act_backward(m, s->d_gate + r0 * F, s->d_up + r0 * F, s->d_act + r0 * F, s->gate + r0 * F,
                     s->up + r0 * F, (long)rF);
        memset(s->d_xp + r0 * D, 0, sizeof(float) * rows * D);
        linear_backward(s->d_xp + r0 * D, dw->exp_gate + e * F * D,
                        expert_vec(dw->exp_gate_b, e, F), s->d_gate + r0 * F, s->xp + r0 * D,
                        w->exp_gate + e * F * D, rows, D, F);
        linear_backward(s->d_xp + r0 * D, dw->exp_up + e * F * D, expert_vec(dw->exp_up_b, e, F),
                        s->d_up + r0 * F, s->xp + r0 * D, w->exp_up + e * F * D, rows, D, F);
    }
}

static void shared_backward(const mt_model *m, const layer_params *w, const layer_params *dw,
                            moe_scratch *s, const float *n2, const float *dout, float *d_n2, int t0,
                            int rows) {
    size_t D = m->dim, S = m->shared_ffn_dim, t = t0, rS = (size_t)rows * S;
    memset(s->d_sh_y, 0, sizeof(float) * rows * D);
    memset(s->d_sh_logit, 0, sizeof(float) * rows);
    if (w->sh_route)
        moe_gate_scale_backward(s->d_sh_y, s->d_sh_logit, dout, s->sh_y + t * D, s->sh_logit + t,
                                rows, D);
    else // ungated: its output's gradient is the MLP's
        memcpy(s->d_sh_y, dout, sizeof(float) * rows * D);
    memset(s->d_sh_act, 0, sizeof(float) * rS);
    linear_backward(s->d_sh_act, dw->sh_down, NULL, s->d_sh_y, s->sh_act + t * S, w->sh_down, rows,
                    S, D);
    memset(s->d_sh_gate, 0, sizeof(float) * rS);
    memset(s->d_sh_up, 0, sizeof(float) * rS);
    swiglu_backward(s->d_sh_gate, s->d_sh_up, s->d_sh_act, s->sh_gate + t * S, s->sh_up + t * S,
                    (long)rS);
    linear_backward(d_n2, dw->sh_gate, NULL, s->d_sh_gate, n2, w->sh_gate, rows, D, S);
    linear_backward(d_n2, dw->sh_up, NULL, s->d_sh_up, n2, w->sh_up, rows, D, S);
    if (w->sh_route)
        linear_backward(d_n2, dw->sh_route, NULL, s->d_sh_logit, n2, w->sh_route, rows, D, 1);
}

void moe_mlp_backward(const mt_config *c, const layer_params *w, const layer_params *dw,
                      moe_scratch *s, const moe_route_io *io, const float *n2, const float *dout,
                      float *d_n2, int t0, int rows) {
    int E = c->model.experts, k = c->model.top_k, D = c->model.dim, ci = chunk_index(c, s, t0);
    size_t p0 = (size_t)t0 * k;
    const int32_t *offsets = s->offsets + (size_t)ci * (E + 1);
    memset(s->d_yp + p0 * D, 0, sizeof(float) * rows * k * D);
    memset(s->d_weight + p0, 0, sizeof(float) * rows * k);
    moe_combine_backward(s->d_yp + p0 * D, s->d_weight + p0, dout, s->yp + p0 * D, s->row_of + p0,
                         s->weight + p0, rows, k, D);
    experts_backward(&c->model, w, dw, s, p0, offsets);
    moe_scatter_add(d_n2, s->d_xp + p0 * D, s->row_of + p0, rows, k, D);
    memset(s->d_logits, 0, sizeof(float) * rows * E);
    if (c->model.router_score == ROUTER_SCORE_SIGMOID) {
        moe_sigmoid_route r = moe_sigmoid_route_of(&c->model, w->router_corr);
        moe_route_sigmoid_backward(s->d_logits, s->d_weight + p0, s->probs + (size_t)t0 * E,
                                   s->expert + p0, rows, E, k, &r);
    } else {
        moe_route_backward(s->d_logits, s->d_weight + p0, s->probs + (size_t)t0 * E, s->expert + p0,
                           s->weight + p0, io ? io->aux_g : NULL, rows, E, k,
                           moe_weights_of(&c->model));
    }
    linear_backward(d_n2, dw->router, dw->router_b, s->d_logits, n2, w->router, rows, D, E);
    if (w->sh_gate) shared_backward(&c->model, w, dw, s, n2, dout, d_n2, t0, rows);
}
