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

#include "kernels/attention_args.h"
#include "kernels/moe_args.h"

#include <stddef.h>
#include <stdint.h>

// embedding.c: out[t] = table[tokens[t]]
void embedding_forward(float *out, const int32_t *tokens, const float *table, int n, int dim);
void embedding_backward(float *dtable, const float *dout, const int32_t *tokens, int n, int dim);

// rmsnorm.c: out = x / sqrt(mean(x^2) + eps) * weight; rstd[t] is kept for the backward.
void rmsnorm_forward(float *out, float *rstd, const float *x, const float *weight, int n, int dim,
                     float eps);
void rmsnorm_backward(float *dx, float *dweight, const float *dout, const float *x,
                      const float *weight, const float *rstd, int n, int dim);
// The same with the weight applied as (offset + weight): offset 1 for zero-centred weights
// (Qwen3.5's Qwen3_5RMSNorm, model.norm_zero_centered), 0 for the plain ones above.
void rmsnorm_offset_forward(float *out, float *rstd, const float *x, const float *weight,
                            float offset, int n, int dim, float eps);
void rmsnorm_offset_backward(float *dx, float *dweight, const float *dout, const float *x,
                             const float *weight, float offset, const float *rstd, int n, int dim);

// rope.c: rotary embedding, Hugging Face "rotate_half" convention (pairs i and i + hd/2),
// applied in place to x[B, T, heads, head_dim]; the position of row (b, t) is t, or with packed
// documents t - doc_start[b * T + t] (doc_start NULL: t).
// inv_freq[head_dim/2] comes from rope_inv_freq(), rescaled in place by rope_llama3_scale() for
// Llama 3.1's rope_scaling (runtime/model/model.c's model_rope_inv_freq() picks).
void rope_inv_freq(float *inv_freq, int head_dim, float theta);
void rope_llama3_scale(float *inv_freq, int head_dim, double factor, double low_freq_factor,
                       double high_freq_factor, double orig_ctx);
// rope_yarn_inv_freq() fills the table of YaRN's rope_scaling instead (transformers'
// _compute_yarn_parameters) and returns the attention factor that transformers multiplies cos and
// sin by (so q and k are each scaled by it). Zero fields take transformers' defaults.
typedef struct {
    double factor;                 // rope_scaling.factor (gpt-oss: 32)
    double orig_ctx;               // original_max_position_embeddings (gpt-oss: 4096)
    double beta_fast, beta_slow;   // 0: 32 and 1
    double attention_factor;       // 0: 0.1 ln(factor) + 1, or from mscale / mscale_all_dim
    double mscale, mscale_all_dim; // 0: absent
    int truncate; // floor / ceil the correction range; config.json without it: 1 (gpt-oss: 0)
} rope_yarn;
double rope_yarn_inv_freq(float *inv_freq, int head_dim, float theta, const rope_yarn *yarn);
// YaRN's mscale (transformers' yarn_get_mscale): 0.1 mscale ln(factor) + 1, 1 for factor <= 1.
double rope_yarn_mscale(double factor, double mscale);
// In place on x [B, T, heads, hd]: the rotation r describes (kernels/attention_args.h).
void rope_forward(float *x, int heads, const rope_args *r);
void rope_backward(float *dx, int heads, const rope_args *r);

// attention.c: causal grouped-query flash attention, the shape and each query's visible keys
// in args (kernels/attention_args.h), the tensors in t. Memory is O(T) per row: no T x T matrix
// is stored. The forward reads q, k, v and writes out and lse ([B, H, T] log-sum-exp of each
// softmax row, kept for the backward); the backward reads q, k, v, out, lse and dout and
// accumulates dq, dk, dv. Attention sinks (gpt-oss): a learned logit per query head that joins
// every softmax's denominator and carries no value, so a row's weights sum to less than 1; its
// gradient accumulates into dsinks. The CUDA kernels have them too.
typedef struct {
    const float *q, *k, *v; // [B, T, H, hd], [B, T, KV, hd], [B, T, KV, hd]
    float *out, *lse;       // [B, T, H, hd], [B, H, T]
    const float *dout;      // [B, T, H, hd]
    float *dq, *dk, *dv;
    const float *sinks; // [H], or NULL: no sinks
    float *dsinks;      // [H], with sinks in a backward
} attn_tensors;
void attention_forward(const attn_args *args, const attn_tensors *t);
void attention_backward(const attn_args *args, const attn_tensors *t);

// swiglu.c: out = silu(gate) * up, elementwise over n elements.
void swiglu_forward(float *out, const float *gate, const float *up, long n);
void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                     const float *up, long n);

// swiglu_clamped.c: gpt-oss's experts' activation (kernels/moe_args.h's swiglu_clamp) on n
// elements. Backward as torch's clamp: no gradient through a clamped input; one exactly at a
// bound passes.
void swiglu_clamped_forward(float *out, const float *gate, const float *up, long n, swiglu_clamp c);
void swiglu_clamped_backward(float *dgate, float *dup, const float *dout, const float *gate,
                             const float *up, long n, swiglu_clamp c);

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

// moe.c: Mixture-of-Experts routing around the experts' GEMMs (linear_* and swiglu_* on each
// expert's rows). n tokens, E experts (at most kernels/moe_args.h's MOE_MAX_EXPERTS), k chosen
// per token.
// - route: probs[n, E] = softmax(logits) in fp32 (the load-balancing loss's, whatever the
//   weights); expert[n, k] the k largest (largest first, ties to the lower index) and weight[n, k]
//   as `weights` says (MOE_WEIGHTS_*). Backward: d_logits += the gradient of d_weight[n, k]
//   through those weights (weight: the forward's), plus aux_g[E] (NULL: none) as every token's
//   gradient on its probabilities.
// - dispatch: counts[E], offsets[E + 1], and for each (token, slot) pair i = t * k + j its row
//   row_of[i] in expert-sorted order, stable (an expert's rows in token order); token_of[row].
// - gather: xp[r] = x[token_of[r]]; combine: out[t] += sum_j weight[t, j] * yp[row_of[t, j]],
//   j in order; its backward: d_yp[row] += weight * dout[t], d_weight[t, j] += dout[t] . yp[row];
//   scatter_add: dx[t] += sum_j d_xp[row_of[t, j]], j in order (the gather's backward).
// - prob_sums: psum[e] = sum over tokens of probs[t, e] (the load-balancing loss's input).
// - aux_loss: transformers' load_balancing_loss_func over `layers` MoE layers of n tokens each,
//   from their counts[layers, E] and psum[layers, E]: E * sum_e (c_e / (L n)) (P_e / (L n)),
//   c and P summed over the layers. aux_g[e] (NULL: not wanted) gets scale times its gradient
//   with respect to each token's probability of e, E * c_e / (L n)^2, the same in every layer.
void moe_route_forward(float *probs, int32_t *expert, float *weight, const float *logits, int n,
                       int E, int k, int weights);
void moe_route_backward(float *d_logits, const float *d_weight, const float *probs,
                        const int32_t *expert, const float *weight, const float *aux_g, int n,
                        int E, int k, int weights);
// moe_sigmoid.c: DeepSeek-V3's router (kernels/moe_router.h): scores[n, E] the sigmoids,
// expert[n, k] and weight[n, k]; backward: d_logits += the weights' gradient through them.
void moe_route_sigmoid_forward(float *scores, int32_t *expert, float *weight, const float *logits,
                               int n, int E, int k, const moe_sigmoid_route *r);
void moe_route_sigmoid_backward(float *d_logits, const float *d_weight, const float *scores,
                                const int32_t *expert, int n, int E, int k,
                                const moe_sigmoid_route *r);
void moe_dispatch(int32_t *counts, int32_t *offsets, int32_t *row_of, int32_t *token_of,
                  const int32_t *expert, int n, int E, int k);
void moe_gather(float *xp, const float *x, const int32_t *token_of, int rows, int D);
void moe_combine(float *out, const float *yp, const int32_t *row_of, const float *weight, int n,
                 int k, int D);
void moe_combine_backward(float *d_yp, float *d_weight, const float *dout, const float *yp,
                          const int32_t *row_of, const float *weight, int n, int k, int D);
void moe_scatter_add(float *dx, const float *d_xp, const int32_t *row_of, int n, int k, int D);
void moe_prob_sums(float *psum, const float *probs, int n, int E);
double moe_aux_loss(float *aux_g, const int32_t *counts, const float *psum, int layers, int n,
                    int E, float scale);
// load[i] += counts[m * per + i] over `passes` rows of `per` counts (a step's micro-batches).
void moe_sum_load(int64_t *load, const int32_t *counts, int passes, size_t per);
// A shared expert's gate (Qwen2-MoE): out[t] += sigmoid(gate_logit[t]) * y[t]; backward: dy and
// d_gate_logit accumulate.
void moe_gate_scale_forward(float *out, const float *y, const float *gate_logit, int n, int D);
void moe_gate_scale_backward(float *dy, float *d_gate_logit, const float *dout, const float *y,
                             const float *gate_logit, int n, int D);

#endif
