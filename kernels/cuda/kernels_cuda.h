// The CUDA kernels: bf16 tensor-core GEMMs through cuBLASLt and our own fused kernels, each
// checked against kernels/cpu. Callable from C; every call is asynchronous on `stream`.
//
// Precision: weights and GEMM operands are bf16; the residual stream, norms' statistics,
// softmax statistics and all weight gradients are fp32. n is the number of tokens (B*T),
// activations are row-major [n, width]. Backward functions ACCUMULATE (+=) into fp32 weight
// gradients; activation gradients are written unless a comment says otherwise.
#ifndef MT_KERNELS_CUDA_H
#define MT_KERNELS_CUDA_H

#include "kernels/adamw.h"
#include "kernels/attention_args.h"
#include "kernels/bf16.h"
#include "kernels/moe_args.h"
#include "kernels/scratch.h" // the scratch sizes: plain C, which the plan reads too
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

// mla.cu: multi-head latent attention's layouts (runtime/engine/attn_mla_cuda.c). rows tokens of
// H heads; q and k heads of P = dn + dr elements (k: its nope part dn, then the rotated part dr
// that every head shares, krot [rows, dr]); v and attention's output padded to P, their first dv
// meaningful (dv <= P); kv_b_proj's output kvb [rows, H, dn + dv].
typedef struct {
    long rows;
    int H, dn, dr, dv, P;
} mla_layout;
// k's nope parts and v (zero past dv) from kvb; k's rotated parts from krot.
void cuda_mla_split(bf16 *k, bf16 *v, const bf16 *kvb, const mla_layout *L, cudaStream_t stream);
void cuda_mla_rope_broadcast(bf16 *k, const bf16 *krot, const mla_layout *L, cudaStream_t stream);
// Their backward: dkvb from dk's nope parts and dv's first dv; dkrot (fp32) = the sum over the
// heads of dk's rotated parts, in head order.
void cuda_mla_join(bf16 *dkvb, const bf16 *dk, const bf16 *dv, const mla_layout *L,
                   cudaStream_t stream);
void cuda_mla_rope_reduce(float *dkrot, const bf16 *dk, const mla_layout *L, cudaStream_t stream);
// Attention's output (or its gradient) [rows x H, dv] to [rows x H, P], zero past dv, and back.
void cuda_mla_pad(bf16 *dst, const bf16 *src, const mla_layout *L, cudaStream_t stream);
void cuda_mla_compact(bf16 *dst, const bf16 *src, const mla_layout *L, cudaStream_t stream);

// reduce.cu: *out = sum of x[i]^2 in double, in a fixed order (deterministic).
void cuda_sum_squares(double *out, const float *x, long n, void *scratch, cudaStream_t stream);
size_t cuda_sum_squares_scratch_bytes(void);

// adamw.cu: adamw_kernel_scalar (kernels/adamw.c) on the GPU, same bits; k is a host pointer.
void cuda_adamw(float *p, float *m, float *v, bf16 *out, const float *g, long n,
                const adamw_consts *k, cudaStream_t stream);

// Conversions, round to nearest even: the residual stream's gradient feeding GEMMs, streamed
// fp32 master weights, gradients leaving for bf16 slots; cuda_round_bf16 rounds in place.
void cuda_float_to_bf16(bf16 *out, const float *in, long n, cudaStream_t stream);
void cuda_round_bf16(float *x, long n, cudaStream_t stream);
void cuda_bf16_to_float(float *out, const bf16 *in, long n, cudaStream_t stream); // exact

// embedding.cu: out[t] = table[tokens[t]] (fp32 out); backward: dtable[tokens[t]] += dout[t].
void cuda_embedding_forward(float *out, const int32_t *tokens, const bf16 *table, int n, int dim,
                            cudaStream_t stream);
void cuda_embedding_backward(float *dtable, const float *dout, const int32_t *tokens, int n,
                             int dim, cudaStream_t stream);

// rmsnorm.cu: out = x * rstd * w (bf16 out, a GEMM operand); rstd[n] kept for the backward.
// Backward: dx += (d/dx)(dout), dw += sum over tokens; scratch holds ceil(n/256)*dim floats.
void cuda_rmsnorm_forward(bf16 *out, float *rstd, const float *x, const bf16 *w, int n, int dim,
                          float eps, cudaStream_t stream);
void cuda_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const bf16 *w,
                           const float *rstd, int n, int dim, float *scratch, cudaStream_t stream);
// The same with the weight applied as (off + w): off 1 for zero-centred weights
// (model.norm_zero_centered, mt_norm_offset), as kernels/cpu/rmsnorm.c's rmsnorm_offset_*.
void cuda_rmsnorm_offset_forward(bf16 *out, float *rstd, const float *x, const bf16 *w, float off,
                                 int n, int dim, float eps, cudaStream_t stream);
void cuda_rmsnorm_offset_backward(float *dx, float *dw, const float *dout, const float *x,
                                  const bf16 *w, float off, const float *rstd, int n, int dim,
                                  float *scratch, cudaStream_t stream);

// rope.cu: Hugging Face rotate_half RoPE in place on x[B, T, heads, hd] (bf16), as r describes
// (kernels/attention_args.h).
void cuda_rope_forward(bf16 *x, int heads, const rope_args *r, cudaStream_t stream);
void cuda_rope_backward(bf16 *dx, int heads, const rope_args *r, cudaStream_t stream);

// output_gate.cu: the gated attention (attn_output_gate). split: q_proj's fp32 [rows, heads,
// 2, hd] into q (fp32 when q_f32, else bf16) and the gates' logits (fp32); join: their
// gradients back into q_proj's (bf16). forward: out = att * sigmoid(gate) over n values;
// backward: datt and dgate from dout (in place allowed: datt == dout, dgate == gate).
void cuda_output_gate_split(void *q, int q_f32, float *gate, const float *qg, long rows, int heads,
                            int hd, cudaStream_t stream);
void cuda_output_gate_join(bf16 *dqg, const bf16 *dq, const float *dgate, long rows, int heads,
                           int hd, cudaStream_t stream);
void cuda_output_gate_forward(bf16 *out, const bf16 *att, const float *gate, long n,
                              cudaStream_t stream);
void cuda_output_gate_backward(bf16 *datt, float *dgate, const bf16 *dout, const bf16 *att,
                               const float *gate, long n, cudaStream_t stream);

// bias.cu: x[rows, cols] += bias (bf16, in place); dbias += column sums of dx (fp32,
// deterministic; scratch holds cuda_bias_scratch_floats(cols) floats). The _f32 pair is the
// same on an fp32 x and dx (the residual stream: o_proj's bias; the router's logits).
void cuda_bias_forward(bf16 *x, const bf16 *bias, long rows, int cols, cudaStream_t stream);
void cuda_bias_backward(float *dbias, const bf16 *dx, long rows, int cols, float *scratch,
                        cudaStream_t stream);
void cuda_bias_forward_f32(float *x, const bf16 *bias, long rows, int cols, cudaStream_t stream);
void cuda_bias_backward_f32(float *dbias, const float *dx, long rows, int cols, float *scratch,
                            cudaStream_t stream);

// swiglu.cu: out = silu(gate) * up. Backward writes dgate and dup (bf16, GEMM operands).
void cuda_swiglu_forward(bf16 *out, const bf16 *gate, const bf16 *up, long n, cudaStream_t stream);
void cuda_swiglu_backward(bf16 *dgate, bf16 *dup, const float *dout, const bf16 *gate,
                          const bf16 *up, long n, cudaStream_t stream);
// gpt-oss's clamped SwiGLU (kernels/moe_args.h), as kernels/cpu/swiglu_clamped.c; the same
// bf16 inputs and outputs as the plain one.
void cuda_swiglu_clamped_forward(bf16 *out, const bf16 *gate, const bf16 *up, long n,
                                 swiglu_clamp c, cudaStream_t stream);
void cuda_swiglu_clamped_backward(bf16 *dgate, bf16 *dup, const float *dout, const bf16 *gate,
                                  const bf16 *up, long n, swiglu_clamp c, cudaStream_t stream);

// moe.cu: Mixture-of-Experts routing, as kernels/cpu/moe.c (its header says what each computes),
// deterministic (one owner per output, fixed-order sums: a rerun gives the same bits). n tokens,
// E experts (1 <= k <= E <= MOE_MAX_EXPERTS), k chosen per token; all pointers device memory.
// Where the CPU accumulates, these WRITE the outputs that feed GEMMs (bf16: d_logits, d_yp, dy,
// d_gate_logit) and d_weight; out and dx (fp32) accumulate.
// - route_forward: probs, expert (equal to the CPU's but for fp32 near-ties), weight from fp32
//   router logits as `weights` says (MOE_WEIGHTS_*). route_backward: d_logits (bf16) from
//   d_weight, the forward's weight and aux_g (NULL: none).
// - dispatch: counts[E], offsets[E + 1] (offsets[E] = n * k), row_of[n * k], token_of[n * k],
//   exactly the CPU's; scratch holds cuda_moe_dispatch_scratch_bytes(n, E, k).
// - gather: xp[r] = x[token_of[r]]; combine: out[t] += sum_j weight[t, j] yp[row_of[t, j]];
//   combine_backward: d_yp[row_of[t, j]] = weight[t, j] dout[t], d_weight[t, j] = dout[t] . yp;
//   scatter_add: dx[t] += sum_j d_xp[row_of[t, j]] (the gather's backward).
// - prob_sums: psum[e] = (accumulate: psum[e] +) sum over tokens of probs[t, e], in double.
// - aux_loss: *loss (one float) and aux_g[E] (NULL: not wanted) from counts[layers, E] and
//   psum[layers, E], as moe_aux_loss.
// - gate_scale (a shared expert's gate): out[t] += sigmoid(g[t]) y[t]; backward writes
//   dy = sigmoid(g) dout and d_gate_logit[t] = (dout[t] . y[t]) s (1 - s). gate_logit NULL:
//   ungated (s = 1, DeepSeek's shared experts), and no d_gate_logit.
// moe_sigmoid.cu: DeepSeek-V3's router (kernels/moe_router.h), one thread per token, as
// kernels/cpu/moe_sigmoid.c: scores[n, E], expert[n, k], weight[n, k]; r->correction is device
// memory (fp32). Backward WRITES d_logits[n, E] (bf16; 0 but for the chosen experts).
void cuda_moe_route_sigmoid_forward(float *scores, int32_t *expert, float *weight,
                                    const float *logits, int n, int E, int k,
                                    const moe_sigmoid_route *r, cudaStream_t stream);
void cuda_moe_route_sigmoid_backward(bf16 *d_logits, const float *d_weight, const float *scores,
                                     const int32_t *expert, int n, int E, int k,
                                     const moe_sigmoid_route *r, cudaStream_t stream);
void cuda_moe_route_forward(float *probs, int32_t *expert, float *weight, const float *logits,
                            int n, int E, int k, int weights, cudaStream_t stream);
void cuda_moe_route_backward(bf16 *d_logits, const float *d_weight, const float *probs,
                             const int32_t *expert, const float *weight, const float *aux_g, int n,
                             int E, int k, int weights, cudaStream_t stream);
void cuda_moe_dispatch(int32_t *counts, int32_t *offsets, int32_t *row_of, int32_t *token_of,
                       const int32_t *expert, int n, int E, int k, void *scratch,
                       cudaStream_t stream);
void cuda_moe_gather(bf16 *xp, const bf16 *x, const int32_t *token_of, int rows, int D,
                     cudaStream_t stream);
void cuda_moe_combine(float *out, const bf16 *yp, const int32_t *row_of, const float *weight, int n,
                      int k, int D, cudaStream_t stream);
void cuda_moe_combine_backward(bf16 *d_yp, float *d_weight, const float *dout, const bf16 *yp,
                               const int32_t *row_of, const float *weight, int n, int k, int D,
                               cudaStream_t stream);
void cuda_moe_scatter_add(float *dx, const bf16 *d_xp, const int32_t *row_of, int n, int k, int D,
                          cudaStream_t stream);
void cuda_moe_prob_sums(float *psum, const float *probs, int n, int E, int accumulate,
                        cudaStream_t stream);
void cuda_moe_aux_loss(float *aux_g, float *loss, const int32_t *counts, const float *psum,
                       int layers, int n, int E, float scale, cudaStream_t stream);
void cuda_moe_gate_scale_forward(float *out, const bf16 *y, const float *gate_logit, int n, int D,
                                 cudaStream_t stream);
void cuda_moe_gate_scale_backward(bf16 *dy, bf16 *d_gate_logit, const float *dout, const bf16 *y,
                                  const float *gate_logit, int n, int D, cudaStream_t stream);

// attention_forward.cu, attention_backward.cu, attention_wgmma.cu, attention_tma.cu,
// attention_bwd_tma.cu (attention.cuh): causal GQA flash attention, head_dim 64 or 128 (and any
// even hd <= 128 for tests), scale 1/sqrt(hd). The shape and each query's visible keys (packed
// documents: args->doc_start, device memory) are args (kernels/attention_args.h), as the CPU
// reference's; the tensors t. No T x T matrix is ever stored. The forward reads q, k, v and
// writes out and lse; the backward reads q, k, v, out, lse and dout and writes dq, dk, dv.
// Attention sinks (gpt-oss), as the CPU reference's: sinks[h] joins each softmax row of query
// head h as one more logit with no value (lse includes it); the backward adds its gradient,
// -sum over the head's rows of exp(sinks[h] - lse) * D, to dsinks (fixed order: reproducible).
// scratch, for both, is cuda_attention_scratch_bytes() (D = rowsum(dout * out), the fused
// Hopper backward's fp32 dq accumulator and its turn counters, and for head dims of 8k + 4
// padded copies of q, k, v and dout, for a run of heads each). dq may be q (in place: at long
// context a whole-sequence buffer less). Every path skips the key tiles outside a query tile's
// visible keys and masks the tiles that cross their bounds.
typedef struct {
    const bf16 *q, *k, *v; // [B, T, H, hd], [B, T, KV, hd], [B, T, KV, hd]
    bf16 *out;             // [B, T, H, hd]
    float *lse;            // [B, H, T]
    const bf16 *dout;      // [B, T, H, hd]
    bf16 *dq, *dk, *dv;
    const bf16 *sinks; // [H], or NULL: no sinks
    float *dsinks;     // [H], accumulated, with sinks in a backward
} cuda_attn_tensors;
void cuda_attention_forward(const attn_args *args, const cuda_attn_tensors *t, void *scratch,
                            cudaStream_t stream);
void cuda_attention_backward(const attn_args *args, const cuda_attn_tensors *t, void *scratch,
                             cudaStream_t stream);
// 1 where the Hopper (wgmma) attention path runs: an sm_90a build on a compute 9.0 device.
int cuda_attention_has_wgmma(void);

// gemm.cu: cuBLASLt, bf16 operands, fp32 accumulation. out is fp32 (out_f32 = 1) or bf16.
// A cuda_gemm owns one cuBLASLt workspace (32 MiB is a good size on Hopper) and a cache of
// per-shape plans: use it from one host thread, and from one stream at a time (calls on two
// streams at once would share the workspace).
typedef struct cuda_gemm cuda_gemm;
cuda_gemm *cuda_gemm_new(size_t workspace_bytes);
void cuda_gemm_free(cuda_gemm *g);
// Benchmarks (bench/gemm_bench.c): later matmuls use the heuristic's rank-th algorithm (0, the
// default, is its best); and the last matmul's algorithm, described into desc, with the number
// of algorithms the heuristic offered for it.
void cuda_gemm_use_rank(cuda_gemm *g, int rank);
// With on, the products' token counts (rows that vary call to call: the experts') share the
// plan of their power-of-two bucket instead of asking cuBLASLt's heuristic for each new count.
void cuda_gemm_bucket_rows(cuda_gemm *g, int on);
int cuda_gemm_last_algo(const cuda_gemm *g, char *desc, size_t n);
// The general row-major product behind the linear calls, for callers with padded rows:
// c[M, N] (row stride ldc) = op(a)[M, K] . op(b)[K, N] + beta * c, with op(x) = x^T when
// trans_x is set; lda and ldb are the row strides of a and b as stored (before op).
void cuda_gemm_rowmajor(cuda_gemm *g, void *c, int c_f32, long ldc, float beta, const bf16 *a,
                        long lda, int trans_a, const bf16 *b, long ldb, int trans_b, int M, int N,
                        int K, cudaStream_t stream);
// out[n, oc] = in[n, ic] . w[oc, ic]^T + beta * out
void cuda_linear_forward(cuda_gemm *g, void *out, int out_f32, float beta, const bf16 *in,
                         const bf16 *w, int n, int ic, int oc, cudaStream_t stream);
// din[n, ic] = dout[n, oc] . w[oc, ic] + beta * din
void cuda_linear_backward_input(cuda_gemm *g, void *din, int din_f32, float beta, const bf16 *dout,
                                const bf16 *w, int n, int ic, int oc, cudaStream_t stream);
// dw[oc, ic] += dout[n, oc]^T . in[n, ic]   (fp32)
void cuda_linear_backward_weight(cuda_gemm *g, float *dw, const bf16 *dout, const bf16 *in, int n,
                                 int ic, int oc, cudaStream_t stream);
// moe_gemm.cu: the experts' linear products on their expert-sorted rows. counts_host[E] and
// offsets_host[E] are HOST copies of the dispatch's: expert e owns rows [offsets[e], offsets[e] +
// counts[e]) of in, out, dout and din, and its weight is w + e * oc * ic ([oc, ic]). Each is the
// cuda_linear_* call of that name per expert with rows, in expert order; an expert with no rows
// is skipped (its dw gets nothing added: its gradient stays zero). MT_EXPERT_GEMM=grouped runs
// the bf16-output products as one cublasGemmGroupedBatchedEx call instead (cuBLAS 13.1 refuses
// fp32 outputs: those stay the loop); its pointer arrays live in one device buffer, so like
// cuda_gemm, one stream at a time.
void cuda_experts_forward(cuda_gemm *g, void *out, int out_f32, float beta, const bf16 *in,
                          const bf16 *w, int E, const int32_t *counts_host,
                          const int32_t *offsets_host, int ic, int oc, cudaStream_t stream);
void cuda_experts_backward_input(cuda_gemm *g, void *din, int din_f32, float beta, const bf16 *dout,
                                 const bf16 *w, int E, const int32_t *counts_host,
                                 const int32_t *offsets_host, int ic, int oc, cudaStream_t stream);
void cuda_experts_backward_weight(cuda_gemm *g, float *dw, const bf16 *dout, const bf16 *in, int E,
                                  const int32_t *counts_host, const int32_t *offsets_host, int ic,
                                  int oc, cudaStream_t stream);

// classifier.cu: fused classifier + cross-entropy over chunks of `chunk` tokens; the full
// [n, vocab] logits never exist. losses[t] = lse_t - logit_t[target_t] (fp32, per token).
// With dx != NULL it also runs the backward for loss = dloss * sum(losses):
// dx (fp32) += dlogits . w, dw (fp32) += dlogits^T . x. scratch: cuda_classifier_scratch_bytes.
void cuda_classifier(cuda_gemm *g, float *losses, float *dx, float *dw, const bf16 *x,
                     const bf16 *w, const int32_t *targets, int n, int dim, int vocab, float dloss,
                     void *scratch, int chunk, cudaStream_t stream);

// ktime.cu: where the compute stream's time goes (MT_KERNEL_TIMES=1). cuda_ktime_enable names
// the stream (a no-op unless the variable is set); each kernel entry point brackets its work
// with enter/leave; the report sums the time per class, gaps included, and per shape where an
// entry point names one. One host thread.
enum {
    KT_GAP,
    KT_GEMM,
    KT_ATTENTION,
    KT_NORM,
    KT_ROPE,
    KT_SWIGLU,
    KT_ELEMENTWISE,
    KT_CLASSIFIER,
    KT_EMBEDDING,
    KT_COPY,
    KT_MOE,
    KT_CLASSES
};
void cuda_ktime_enable(cudaStream_t stream);
void cuda_ktime_enter(cudaStream_t stream, int cls);
void cuda_ktime_leave(cudaStream_t stream);
// The work of the current call, for the report's rates (TFLOP/s where flops > 0, else TB/s of
// the bytes it must move): counted under the outermost scope's class, and under `what` (a
// shape, NULL for none) where that class is cls.
void cuda_ktime_work(cudaStream_t stream, int cls, const char *what, double flops, double bytes);
int cuda_ktime_on(void);
void cuda_ktime_report(FILE *f);
void cuda_ktime_disable(void);

#ifdef __cplusplus
}
#endif

#endif
