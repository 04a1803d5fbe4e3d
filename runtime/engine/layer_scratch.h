// The CPU backend's working set of one decoder layer (layer.c's template and its parts).
#ifndef MT_LAYER_SCRATCH_H
#define MT_LAYER_SCRATCH_H

#include "runtime/engine/moe_mlp.h"
#include "runtime/model/model.h"

// A Gated DeltaNet layer's internals and their gradients (MT_CPU_GDN: buffers.h), all NULL in a
// model without such layers.
typedef struct {
    float *mixed, *conv, *z, *b, *a, *q, *k, *v, *qn, *kn, *rq, *rk, *g, *beta, *rstd, *y;
    float *d_y, *d_z, *d_qn, *d_kn, *d_q, *d_k, *d_v, *d_g, *d_beta, *d_a, *d_b, *d_conv, *d_mixed;
} gdn_scratch;

// A multi-head latent attention layer's internals and their gradients (MT_CPU_MLA: buffers.h),
// all NULL in a model without such layers; its q, k, v and their gradients are the layer's.
typedef struct {
    float *qa, *qan, *rstd_qa, *kva, *lat, *krot, *kvn, *rstd_kv, *kvb;
    float *d_qan, *d_qa, *d_kvn, *d_lat, *d_krot;
} mla_scratch;

// Working set of one layer over one micro-batch (n = B*T tokens): allocated once, reused by
// every layer and every micro-batch.
typedef struct {
    int B, T;
    float *n1, *rstd1, *q, *k, *v, *att, *lse, *h, *n2, *rstd2, *gate, *up, *act;
    float *d_act, *d_gate, *d_up, *d_n2, *d_h, *d_att, *d_q, *d_k, *d_v, *d_n1;
    float *inv_freq;  // RoPE frequencies, model_rope_inv_freq(c): plain, or rope_scaling's
    float rope_scale; // and the factor on cos and sin (YaRN's attention factor; 1: none)
    // The micro-batch's packed documents (data.pack): each token's document start in its row,
    // for RoPE's positions and attention's mask; NULL: one document a row. Set per call.
    const int32_t *doc_start;
    // qk_norm: q and k before their norms, and the norms' statistics
    float *q_raw, *k_raw, *rstd_q, *rstd_k;
    // the gated attention (attn_output_gate): q_proj's output [n, 2Q] (its gradient in the
    // backward), the gates' logits, att * sigmoid(gate) (o_proj's input) and its gradient
    float *qg, *gate_q, *att_g, *d_att_g;
    gdn_scratch la;
    mla_scratch mla;
    // MoE layers: their internals, and where the pass records its routing (set per call; NULL:
    // nowhere, and no load-balancing gradient)
    moe_scratch *moe;
    moe_route_io *route;
    size_t bytes; // its buffers' (MT_CPU_LAYER, MT_CPU_GDN, MT_CPU_MLA, MT_CPU_MOE: buffers.h)
} layer_scratch;

// The scratch computes c's RoPE frequencies itself, so no caller can pass an unscaled table.
layer_scratch *layer_scratch_new(const mt_config *c, int B, int T);
void layer_scratch_free(layer_scratch *s);

#endif
