// The fp32 OpenMP reference kernels: the oracle that the CUDA kernels are checked against.
//
// Conventions, shared by every kernel:
// - Row-major activations; n is the number of tokens (B*T), one row per token.
// - Every backward ACCUMULATES (+=) into its outputs (dx, dweight, ...), so that residual
//   branches and micro-batches add up for free. Callers zero what they need zeroed.
// - Results are bitwise identical for any OpenMP thread count: every output element is
//   owned by one thread and every reduction runs in a fixed order.
#ifndef MT_KERNELS_CPU_H
#define MT_KERNELS_CPU_H

#include <stdint.h>

// embedding.c: out[t] = table[tokens[t]]
void embedding_forward(float *out, const int32_t *tokens, const float *table, int n, int dim);
void embedding_backward(float *dtable, const float *dout, const int32_t *tokens, int n, int dim);

// rmsnorm.c: out = x / sqrt(mean(x^2) + eps) * weight; rstd[t] is kept for the backward.
void rmsnorm_forward(float *out, float *rstd, const float *x, const float *weight, int n, int dim,
                     float eps);
void rmsnorm_backward(float *dx, float *dweight, const float *dout, const float *x,
                      const float *weight, const float *rstd, int n, int dim);

// rope.c: rotary embedding, Hugging Face "rotate_half" convention (pairs i and i + hd/2),
// applied in place to x[B, T, heads, head_dim]; the position of row (b, t) is t, or with packed
// documents t - doc_start[b * T + t] (doc_start NULL: t).
// inv_freq[head_dim/2] comes from rope_inv_freq(), rescaled in place by rope_llama3_scale() for
// Llama 3.1's rope_scaling (runtime/model/model.c's model_rope_inv_freq() picks).
void rope_inv_freq(float *inv_freq, int head_dim, float theta);
void rope_llama3_scale(float *inv_freq, int head_dim, double factor, double low_freq_factor,
                       double high_freq_factor, double orig_ctx);
void rope_forward(float *x, const float *inv_freq, int B, int T, int heads, int head_dim,
                  const int32_t *doc_start);
void rope_backward(float *dx, const float *inv_freq, int B, int T, int heads, int head_dim,
                   const int32_t *doc_start);

// attention.c: causal grouped-query attention with scale 1/sqrt(head_dim).
// q, out: [B, T, H, hd]; k, v: [B, T, KV, hd]; lse: [B, H, T] log-sum-exp of each softmax row,
// kept for the backward. Memory is O(T) per row: no T x T matrix is stored. doc_start[B, T]
// (packed documents): query t attends to keys doc_start[b * T + t]..t only; NULL: 0..t.
void attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                       int B, int T, int H, int KV, int hd, const int32_t *doc_start);
void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *out,
                        const float *lse, const float *q, const float *k, const float *v, int B,
                        int T, int H, int KV, int hd, const int32_t *doc_start);

// swiglu.c: out = silu(gate) * up, elementwise over n elements.
void swiglu_forward(float *out, const float *gate, const float *up, long n);
void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                     const float *up, long n);

// linear.c: out[n, oc] = in[n, ic] . w[oc, ic]^T (+ bias[oc] when bias != NULL).
// Backward: din (may be NULL), dw, dbias (may be NULL) accumulate.
void linear_forward(float *out, const float *in, const float *w, const float *bias, int n, int ic,
                    int oc);
void linear_backward(float *din, float *dw, float *dbias, const float *dout, const float *in,
                     const float *w, int n, int ic, int oc);

// classifier.c: fused classifier + cross-entropy over chunks of tokens; the full [n, vocab]
// logits are never materialized. x: [n, dim], w: [vocab, dim], targets: [n].
// Forward returns the SUM of per-token losses (accumulated in double, in token order).
// Backward recomputes each chunk's logits and accumulates dx and dw for
// loss = dloss * sum(per-token losses).
double classifier_forward(const float *x, const float *w, const int32_t *targets, int n, int dim,
                          int vocab);
void classifier_backward(float *dx, float *dw, const float *x, const float *w,
                         const int32_t *targets, int n, int dim, int vocab, float dloss);

#endif
