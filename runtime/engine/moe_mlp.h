// A Mixture-of-Experts MLP on the CPU backend: router, top-k, the experts' SwiGLUs on their
// rows, the weighted sum, and the shared expert; forward and backward side by side. It is the
// work of the MLP kind MLP_MOE (mlp_cpu.c's row, layer_parts.h).
#ifndef MT_MOE_MLP_H
#define MT_MOE_MLP_H

#include "kernels/moe_args.h"
#include "runtime/model/model.h"

// The router's weights and the experts' activation as the config asks, for both backends.
static inline int moe_weights_of(const mt_model *m) {
    return m->router_softmax == ROUTER_SOFTMAX_TOP_K ? MOE_WEIGHTS_TOP_K
           : m->norm_topk_prob                       ? MOE_WEIGHTS_RENORM
                                                     : MOE_WEIGHTS_PROBS;
}
// DeepSeek-V3's router (router_score "sigmoid") as the config asks, with the layer's correction
// bias (NULL: none; an fp32 vector on both backends).
static inline moe_sigmoid_route moe_sigmoid_route_of(const mt_model *m, const float *correction) {
    return (moe_sigmoid_route){.correction = correction,
                               .groups = m->router_groups > 1 ? m->router_groups : 1,
                               .topk_groups = m->router_groups > 1 ? m->router_topk_groups : 1,
                               .renorm = m->norm_topk_prob,
                               .scale = (float)m->router_scale};
}
// swiglu_limit > 0: gpt-oss's clamped SwiGLU, whose sigmoid gain transformers fixes at 1.702
// (5.17's GptOssExperts; later versions read config.json's swiglu_alpha, 1.702 in every release).
static inline swiglu_clamp moe_clamp_of(const mt_model *m) {
    return (swiglu_clamp){.alpha = 1.702f, .limit = (float)m->swiglu_limit};
}

// The internals of one layer over n tokens, kept from the forward for the backward; chunk by
// chunk (the dispatch's rows are a chunk's own).
typedef struct moe_scratch moe_scratch;

// Where a pass records its routing (the load-balancing loss's inputs and the expert load):
// counts[E] tokens routed to each expert and psum[E] the probabilities' sums, over the pass's
// tokens; and the gradient every token's probabilities get from that loss (NULL: none).
typedef struct {
    int32_t *counts;
    float *psum;
    const float *aux_g;
} moe_route_io;

moe_scratch *moe_scratch_new(const mt_config *c, int n);
void moe_scratch_free(moe_scratch *s);
size_t moe_scratch_bytes(const moe_scratch *s); // its buffers' bytes, as allocated
// The last forward's expert choices: [n * top_k] (token, slot) pairs, for tests that must
// know whether a perturbation moved the routing.
const int32_t *moe_scratch_experts(const moe_scratch *s);

// out[rows, D] = the MoE MLP of n2[rows, D], for the chunk of `rows` tokens at token t0 (a
// chunk at t0 = 0 starts the pass's counts afresh).
void moe_mlp_forward(const mt_config *c, const layer_params *w, moe_scratch *s, moe_route_io *io,
                     const float *n2, float *out, int t0, int rows);
// d_n2[rows, D] += its gradient from dout[rows, D]; the weight gradients accumulate into dw.
void moe_mlp_backward(const mt_config *c, const layer_params *w, const layer_params *dw,
                      moe_scratch *s, const moe_route_io *io, const float *n2, const float *dout,
                      float *d_n2, int t0, int rows);

#endif
