// The CUDA backend's state, private to runtime/engine/: backend_cuda.c allocates it and
// implements the backend's operations; layer_cuda.c runs a decoder layer and the head on it.
#ifndef MT_CUDA_STATE_H
#define MT_CUDA_STATE_H

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels_cuda.h"
#include "runtime/engine/backend.h"
#include "runtime/model/model.h"
#include "runtime/plan/plan.h"

// One layer's weights inside a fetched bf16 buffer, and their fp32 gradients: one pointer per
// role of roles.h (NULL where the layer has none).
typedef struct {
#define MT_WEIGHT_FIELD(field, ...) const bf16 *field;
    MT_LAYER_ROLES(MT_WEIGHT_FIELD)
#undef MT_WEIGHT_FIELD
} layer_w;

typedef struct {
#define MT_GRAD_FIELD(field, ...) float *field;
    MT_LAYER_ROLES(MT_GRAD_FIELD)
#undef MT_GRAD_FIELD
} layer_g;

// A MoE MLP's working set for one chunk of tokens (moe_cuda.c): P = chunk x top_k pairs.
typedef struct {
    float *logits, *probs, *weight, *d_weight, *d_act, *sh_logit, *sh_dact;
    float *correction;    // the layer's correction bias widened to fp32 where no frozen image came
    float *frozen;        // the layers' frozen images (engine/frozen.h), fp32
    int64_t *frozen_corr; // host: 1 + where layer l's correction bias lies in frozen; 0: none came
    int32_t *expert, *row_of, *token_of, *counts, *offsets;
    int32_t *counts_host, *offsets_host; // pinned: the experts' GEMMs are launched from the host
    // every forward chunk's counts and offsets ([E] and [E + 1] per MoE layer, micro-batch and
    // chunk), which its backward's recomputed routing reproduces: the backward needs no wait
    int32_t *routed;
    int chunks;
    const int32_t *cnt, *off; // the chunk's counts and offsets the experts' GEMMs use
    bf16 *xp, *gate, *up, *act, *yp, *d_yp, *d_gate, *d_up, *d_xp, *d_logits;
    bf16 *sh_gate, *sh_up, *sh_act, *sh_y, *d_sh_y, *d_sh_gate, *d_sh_up, *d_sh_logit;
    unsigned char *dispatch_scratch;
    // the load-balancing loss: per micro-batch and MoE layer, tokens per expert (host, summed
    // over the chunks) and probability sums (device); per micro-batch its gradient (device)
    int *moe_index, layers, aux_micro;
    int32_t *counts_all;
    float *psum_all, *psum_host, *aux_g, *aux_g_host;
    double aux;
} moe_set;

// A Gated DeltaNet layer's internals over the micro-batch (attn_gdn_cuda.c; buffers.h's
// MT_CUDA_GDN lists them): recomputed from x before each backward, never kept.
typedef struct {
    bf16 *mixed, *conv, *z, *b, *a, *q, *k, *v, *qn, *kn, *y, *d_z, *d_a, *d_b, *d_mixed;
    float *rq, *rk, *g, *beta, *rstd, *d_y, *d_o, *d_qn, *d_kn, *d_v, *d_g, *d_beta, *d_q, *d_k;
    float *d_conv;
    unsigned char *scratch, *ckpt;
    int ckpt_ready; // ckpt holds the checkpoints of the rule's last forward, which prepare ran
} gdn_set;

// What a layer's backward needs from its forward beyond x and cannot cheaply redo: the
// normalized inputs (n1, n2) and the SwiGLU product are recomputed from x, h, gate and up.
// Attention's part (q, k, v, att, lse) spans the micro-batch; the rest (h, gate, up) spans
// a chunk of it, except in a kept slot (kept only when the chunk is the whole micro-batch).
typedef struct {
    bf16 *q, *k, *v, *att, *gate, *up;
    float *lse, *h;
} layer_saved;

// Multi-head latent attention's working set (MT_CUDA_MLA: buffers.h), NULL without it.
typedef struct {
    float *qa, *rstd_qa, *lat, *rstd_kv, *krot_f, *d_a, *d_x, *norm_scratch;
    bf16 *qan, *kvn, *kvb, *krot, *pad, *dpad, *d_b;
} mla_set;

struct backend {
    const mt_config *c;
    // A layer's token-wise work runs seq_chunk tokens at a time (batch.seq_chunk), so its
    // buffers are a chunk's; attention and RoPE see the whole micro-batch.
    int B, T, max_tokens, seq_chunk, chunk, loss_micro;
    uint64_t offsets[ATTN_KINDS][MLP_KINDS][T_ROLES]; // each role's offset in a layer of each kind
    moe_set moe;
    // qk_norm: q and k from their projections in fp32 (the norm's input), the norms' statistics
    float *q_raw, *k_raw, *rstd_q, *rstd_k, *qk_scratch, *norm_qk;
    // the gated attention (attn_output_gate): q_proj's chunk [r, 2Q], the gates' logits over the
    // micro-batch, a chunk's gated output
    float *qg, *gate_q;
    bf16 *att_g;
    gdn_set la;      // Gated DeltaNet's internals, with such layers
    int *gdn_chunks; // per micro-batch with packed documents: its delta rule's chunks a row
    mla_set mla;
    cudaStream_t s;
    cuda_gemm *gemm;
    float *inv_freq;  // RoPE's frequencies (device), model_rope_inv_freq's
    float rope_scale; // and its factor on cos and sin (YaRN's attention factor; 1: none)
    int32_t *inputs, *targets;
    int32_t *doc_start; // [M * n] with data.pack "documents" (attention, RoPE), else NULL
    // per micro-batch: whether any of its rows holds a second document (else its starts are all
    // 0, and the kernels run without them: the same bits, without the masks' reads)
    unsigned char *has_docs;
    // the layer's working set
    layer_saved work;
    layer_saved *kept; // kept activations, in one allocation
    void *kept_arena;
    int n_kept;
    // kept attention outputs (keep_attention): output and statistics per slot, one allocation
    bf16 **att;
    float **lse;
    void *att_arena;
    int n_att;
    bf16 *n1, *n2, *act;
    bf16 *dout_b, *d_gate, *d_up, *dh_b, *d_att, *dk, *dv; // dq goes to q's buffer
    float *rstd1, *rstd2, *d_act, *d_n2, *d_n1, *norm_scratch;
    unsigned char *attn_scratch;
    float *bias_scratch;
    // activation offload: its own copy streams, and per slot the event of its last copy
    cudaStream_t to_host_s, from_host_s;
    cudaEvent_t slot_done[2], queued;
    // the head
    bf16 *xf;
    float *rstd_f, *dxf, *losses, *losses_host, *logits;
    unsigned char *cls_scratch;
    // the buffers of the working sets' lists (buffers.h), for this shape; every device
    // allocation of the working sets (cu_carve), to free; the device bytes the backend's
    // allocator has requested since it started (kept and attention slots included)
    mt_buffer_shape shape;
    void *owned[4 * MT_BUFFERS_MAX];
    int n_owned;
    size_t allocated;
    size_t host_allocated; // and the host bytes of its host lists (pinned and plain)
};

static inline void cu_zero(backend *b, void *p, size_t bytes) {
    cuda_ktime_enter(b->s, KT_COPY);
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, b->s));
    cuda_ktime_leave(b->s);
}
static inline void cu_copy(backend *b, void *dst, const void *src, size_t bytes) {
    cuda_ktime_enter(b->s, KT_COPY);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, b->s));
    cuda_ktime_leave(b->s);
}

static inline int tokens(const backend *b) {
    return b->B * b->T;
}

// The model's RMSNorms (the layers' two, the final norm, q_norm and k_norm), their weights
// applied as (mt_norm_offset + w): zero-centred weights (Qwen3.5) or plain ones.
static inline void cu_norm_forward(backend *b, bf16 *out, float *rstd, const float *x,
                                   const bf16 *w, int rows, int dim) {
    const mt_model *m = &b->c->model;
    cuda_rmsnorm_offset_forward(out, rstd, x, w, mt_norm_offset(m), rows, dim, (float)m->norm_eps,
                                b->s);
}
static inline void cu_norm_backward(backend *b, float *dx, float *dw, const float *dout,
                                    const float *x, const bf16 *w, const float *rstd, int rows,
                                    int dim, float *scratch) {
    cuda_rmsnorm_offset_backward(dx, dw, dout, x, w, mt_norm_offset(&b->c->model), rstd, rows, dim,
                                 scratch, b->s);
}

#endif
