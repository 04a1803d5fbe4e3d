// The fp32 CPU reference kernels of Gated DeltaNet, the linear attention of Qwen3.5 and
// Qwen3-Next (transformers' Qwen3_5GatedDeltaNet): the causal depthwise conv + SiLU over the
// q, k, v projections, l2norm of q and k, the gates g and beta, the gated delta rule itself
// (a per-token recurrence, the oracle, and its chunked form) and the gated RMSNorm of its output.
// Conventions as kernels_cpu.h: row-major, every backward ACCUMULATES (+=) into its outputs, and
// results are bitwise identical for any OpenMP thread count.
#ifndef MT_KERNELS_GDN_H
#define MT_KERNELS_GDN_H

#include "kernels/gated_delta_args.h"

#include <stdint.h>

// causal_conv1d.c: depthwise causal convolution over time then SiLU, as transformers'
// causal_conv1d_fn (nn.Conv1d with groups = C, left padding K - 1, no bias):
//   out[b, t, c] = silu(sum_j w[c, j] x[b, t - (K - 1) + j, c]),
// where a token before the row's start or before the first token of t's document counts as 0
// (doc_start as in attention_args.h: a token never sees the previous document).
typedef struct {
    int B, T, C, K;           // x, out [B, T, C]; w [C, K]
    const int32_t *doc_start; // [B, T], or NULL
} conv1d_args;
void causal_conv1d_silu_forward(float *out, const float *x, const float *w, const conv1d_args *a);
void causal_conv1d_silu_backward(float *dx, float *dw, const float *dout, const float *x,
                                 const float *w, const conv1d_args *a);

// l2norm.c: out = x / sqrt(sum(x^2) + eps) over each row of dim (transformers' l2norm, eps
// 1e-6 where the gated delta rule calls it); rnorm[row] is kept for the backward.
void l2norm_forward(float *out, float *rnorm, const float *x, long rows, int dim, float eps);
void l2norm_backward(float *dx, const float *dout, const float *x, const float *rnorm, long rows,
                     int dim);

// gdn_gates.c: the decay and the write strength of each (token, value head) from the
// projections a and b: g = -exp(A_log) * softplus(a + dt_bias) (torch's softplus, linear above
// 20), beta = sigmoid(b). a, b, g, beta [n, H]; A_log, dt_bias [H].
typedef struct {
    const float *a, *b, *A_log, *dt_bias;
    float *g, *beta;                    // forward outputs
    const float *dg, *dbeta;            // backward inputs
    float *da, *db, *dA_log, *ddt_bias; // backward outputs, accumulated
} gdn_gate_tensors;
void gdn_gates_forward(const gdn_gate_tensors *t, long n, int H);
void gdn_gates_backward(const gdn_gate_tensors *t, long n, int H);

// gated_delta.c and gated_delta_chunked.c: the gated delta rule of gated_delta_args.h.
// The recurrent form steps token by token (transformers' torch_recurrent_gated_delta_rule);
// the chunked form computes GDN_CHUNK tokens at a time through the WY/UT representation, a
// triangular solve per chunk (torch_chunk_gated_delta_rule). Both give the same results up to
// rounding. The backwards recompute the forward's states, keeping one per chunk.
typedef struct {
    const float *q, *k, *v, *g, *beta;
    float *out;
    const float *dout;
    float *dq, *dk, *dv, *dg, *dbeta;
} gdn_tensors;
void gated_delta_recurrent_forward(const gdn_args *a, const gdn_tensors *t);
void gated_delta_recurrent_backward(const gdn_args *a, const gdn_tensors *t);
void gated_delta_chunked_forward(const gdn_args *a, const gdn_tensors *t);
void gated_delta_chunked_backward(const gdn_args *a, const gdn_tensors *t);

// rmsnorm_gated.c: transformers' Qwen3_5RMSNormGated on rows of dim (one value head's output):
// out = (x / sqrt(mean(x^2) + eps)) * weight * silu(z); rstd[row] is kept for the backward.
void rmsnorm_gated_forward(float *out, float *rstd, const float *x, const float *z,
                           const float *weight, int n, int dim, float eps);
void rmsnorm_gated_backward(float *dx, float *dz, float *dweight, const float *dout, const float *x,
                            const float *z, const float *weight, const float *rstd, int n, int dim);

#endif
