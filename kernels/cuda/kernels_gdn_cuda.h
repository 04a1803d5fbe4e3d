// The CUDA kernels of Gated DeltaNet (Qwen3.5's linear attention), each the GPU twin of a CPU
// reference op in kernels/cpu/kernels_gdn.h, with the same shapes (gdn_args, conv1d_args).
// Every call is asynchronous on `stream`, deterministic (no float atomics; fixed-order sums: a
// rerun gives the same bits), and all pointers are device memory unless a comment says host.
//
// Dtypes follow the engine's attention (runtime/engine/attn_cuda.c): activations that feed a
// GEMM or come out of one are bf16 (the projections' outputs x, a, b, z, the conv's output, q, k,
// v, the delta rule's output, the gated norm's output); the gates g, beta and every norm's
// statistics are fp32; gradients are fp32 where they flow on to another of these ops (the delta
// rule's dq, dk, dv, dg, dbeta; the gated norm's dx; the l2norm's dx) and bf16 where they feed a
// GEMM (the conv's dx, the gates' da and db, the gated norm's dz). Weights are bf16; weight
// gradients fp32, ACCUMULATED (+=). Activation gradients are WRITTEN (unlike the CPU ops, which
// accumulate).
#ifndef MT_KERNELS_GDN_CUDA_H
#define MT_KERNELS_GDN_CUDA_H

#include "kernels/bf16.h"
#include "kernels/cpu/kernels_gdn.h" // conv1d_args
#include "kernels/gated_delta_args.h"

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// gated_delta_tc.cu: the chunked gated delta rule (the WY/UT form of gated_delta_chunked.c) on
// tensor cores, dk and dv at most 128 (multiples of 16; other sizes run the _ref kernels).
// a->doc_start is a device pointer (or NULL). max_chunks bounds the chunks of any row
// (gdn_max_chunks: ceil(T / 64) without documents, more where documents start mid-chunk); a row
// with more stops the kernels with a device trap. The forward writes out; the backward reads q, k,
// v, g, beta and dout and writes dq, dk (summed over the value heads of a key head), dv, dg and
// dbeta, recomputing the chunk states from checkpoints: the fp32 state entering every segment of
// 32 chunks but the first (ckpt, cuda_gated_delta_ckpt_bytes: none where a row has 32 chunks or
// fewer). The forward writes them; the backward takes them as they are where ckpt_ready says
// the forward before it ran on the same inputs (as a layer's backward does after recomputing
// its forward), else sweeps the chunks again to write them. scratch:
// cuda_gated_delta_scratch_bytes (the chunk lists; one segment of 32 chunks' factors and
// states: at dk = dv = 128 about 220 B H dk dv floats, 480 MB at 32 heads). Every tensor starts
// 16-byte aligned (the kernels read and write them 8 or 16 bytes at a time): a buffer of its own
// from cudaMalloc is.
typedef struct {
    const bf16 *q, *k, *v; // [B, T, HK, dk], [B, T, HK, dk], [B, T, H, dv]
    const float *g, *beta; // [B, T, H]
    bf16 *out;             // [B, T, H, dv]
    const float *dout;     // [B, T, H, dv]
    float *dq, *dk, *dv;   // as q, k, v
    float *dg, *dbeta;     // as g, beta
    float *ckpt;           // the checkpoints, [B, H, segments - 1, dk, dv]
    int ckpt_ready;        // the backward: ckpt holds the forward's of these inputs
} cuda_gdn_tensors;
size_t cuda_gated_delta_ckpt_bytes(const gdn_args *a, int max_chunks);
size_t cuda_gated_delta_scratch_bytes(const gdn_args *a, int max_chunks, int backward);
void cuda_gated_delta_forward(const gdn_args *a, int max_chunks, const cuda_gdn_tensors *t,
                              void *scratch, cudaStream_t stream);
void cuda_gated_delta_backward(const gdn_args *a, int max_chunks, const cuda_gdn_tensors *t,
                               void *scratch, cudaStream_t stream);

// The CUDA-core kernels of the same math (gated_delta.cu, gated_delta_grad.cu): the reference
// test_gdn_cuda checks the tensor-core path against, and the path of dims not a multiple of 16.
size_t cuda_gated_delta_scratch_bytes_ref(const gdn_args *a, int max_chunks, int backward);
void cuda_gated_delta_forward_ref(const gdn_args *a, int max_chunks, const cuda_gdn_tensors *t,
                                  void *scratch, cudaStream_t stream);
void cuda_gated_delta_backward_ref(const gdn_args *a, int max_chunks, const cuda_gdn_tensors *t,
                                   void *scratch, cudaStream_t stream);

// For test_gdn_cuda, to tell a fault of the state passes from one of the gradients' kernels:
// while on, the tensor-core backward takes each chunk's gradients from the CUDA-core kernel
// (gated_delta_grad.cu) that the _ref path uses, which reads the kept states in fp32. Set before
// sizing the scratch: outside the exact mode those states take twice the bytes.
void cuda_gated_delta_ref_grads(int on);

// The tensor-core path's precision: off (the default), fp32 operands (the state, V', the chunk
// factors and their gradients) enter the bf16 products rounded once, as flash-linear-attention's
// kernels run; on, split in two bf16 halves, for fp32's precision at two to three times the
// tensor-core work and twice the factors' bytes (test_gdn_cuda's checks against the fp32
// reference). Set before sizing the scratch: the scratch bytes follow it.
void cuda_gated_delta_exact(int on);

// Warps a block of the tensor-core state passes (1, 2 or 4: 16 state columns each); 0, the
// default, takes the most whose tiles fit the GPU's shared memory. Every choice gives the same
// bits: for test_gdn_cuda, which checks that, and its --bench. 8, at dk 128: both passes split dk
// over pairs of warps (4 pairs a block; gated_delta_pass.cu, gated_delta_dpass.cu; the
// state-gradient pass only where its tiles fit, not in the exact mode), their sums in another
// order, so other bits (test_gdn_cuda checks them against the CPU).
void cuda_gated_delta_pass_warps(int warps);

// Warps a block of the tensor-core rows kernel in the default mode (8 or 16); 0, the default,
// takes 16. The exact mode's blocks run 8. Every choice gives the same bits: for test_gdn_cuda,
// which checks that, and its --bench.
void cuda_gated_delta_rows_warps(int warps);

// Whether the tensor-core path runs its state passes on side streams (gated_delta_tc.cuh's
// lanes) beside the per-chunk kernels on the caller's stream: on, the default; off, everything
// on the caller's stream in turn. Both give the same bits: for test_gdn_cuda, which checks that,
// and its --bench.
void cuda_gated_delta_lanes(int on);

// Per-kernel times of the tensor-core path, for test_gdn_cuda --bench: while on, each launch is
// bracketed by events; cuda_gated_delta_profile_ms waits for them, adds them up by phase into
// ms and forgets them.
enum {
    GDN_PHASE_PREP,  // the chunks' W, U (and P): parallel
    GDN_PHASE_PASS,  // the state pass over chunks, in order
    GDN_PHASE_OUT,   // the outputs: parallel
    GDN_PHASE_DPASS, // the backward's state-gradient pass, in reverse order
    GDN_PHASE_PAIRS, // the backward's per-chunk gradients, dR and the [L, L] terms: parallel
    GDN_PHASE_GRAD,  // the rest of them (the rows kernel): parallel
    GDN_PHASES
};
void cuda_gated_delta_profile(int on);
void cuda_gated_delta_profile_ms(float ms[GDN_PHASES]);

// The most chunks of any row (chunks start at each document's first token, GDN_CHUNK tokens
// apart within it), from a HOST copy of the document starts ([B, T], or NULL).
static inline int gdn_max_chunks(const int32_t *doc_start_host, int B, int T) {
    int most = 0;
    for (int b = 0; b < B; b++) {
        int n = 0;
        for (int t = 0; t < T; t++) {
            int first = doc_start_host ? doc_start_host[(long)b * T + t] : 0;
            n += t == 0 || (t - first) % GDN_CHUNK == 0;
        }
        most = n > most ? n : most;
    }
    return most;
}

// gdn_ops.cu, the small ops around the delta rule:
// - causal_conv1d_silu (causal_conv1d.c): x, out [B, T, C] bf16, w [C, K] bf16, K <= 8;
//   a->doc_start a device pointer. Backward: dx (bf16) written, dw (fp32) accumulated; scratch
//   holds cuda_conv1d_scratch_floats(a) floats.
// - l2norm (l2norm.c): rows of dim, x and out bf16, rnorm [rows] fp32; backward writes dx fp32.
// - gdn_gates (gdn_gates.c): a, b [n, H] bf16; A_log, dt_bias [H] bf16; g, beta fp32.
//   Backward: da, db (bf16) written; dA_log, ddt_bias (fp32) accumulated; scratch holds
//   cuda_gdn_gates_scratch_floats(n, H) floats.
// - rmsnorm_gated (rmsnorm_gated.c): x, z, out [n, dim] bf16, weight [dim] bf16, rstd [n] fp32.
//   Backward: dx (fp32) and dz (bf16) written, dweight (fp32) accumulated; scratch holds
//   cuda_rmsnorm_gated_scratch_floats(n, dim) floats.
void cuda_causal_conv1d_silu_forward(bf16 *out, const bf16 *x, const bf16 *w, const conv1d_args *a,
                                     cudaStream_t stream);
void cuda_causal_conv1d_silu_backward(bf16 *dx, float *dw, const float *dout, const bf16 *x,
                                      const bf16 *w, const conv1d_args *a, float *scratch,
                                      cudaStream_t stream);
size_t cuda_conv1d_scratch_floats(const conv1d_args *a);
void cuda_l2norm_forward(bf16 *out, float *rnorm, const bf16 *x, long rows, int dim, float eps,
                         cudaStream_t stream);
void cuda_l2norm_backward(float *dx, const float *dout, const bf16 *x, const float *rnorm,
                          long rows, int dim, cudaStream_t stream);
typedef struct {
    const bf16 *a, *b, *A_log, *dt_bias;
    float *g, *beta;          // forward outputs
    const float *dg, *dbeta;  // backward inputs
    bf16 *da, *db;            // backward outputs, written
    float *dA_log, *ddt_bias; // backward outputs, accumulated
} cuda_gdn_gate_tensors;
void cuda_gdn_gates_forward(const cuda_gdn_gate_tensors *t, long n, int H, cudaStream_t stream);
void cuda_gdn_gates_backward(const cuda_gdn_gate_tensors *t, long n, int H, float *scratch,
                             cudaStream_t stream);
size_t cuda_gdn_gates_scratch_floats(long n, int H);
void cuda_rmsnorm_gated_forward(bf16 *out, float *rstd, const bf16 *x, const bf16 *z,
                                const bf16 *weight, int n, int dim, float eps, cudaStream_t stream);
void cuda_rmsnorm_gated_backward(float *dx, bf16 *dz, float *dweight, const float *dout,
                                 const bf16 *x, const bf16 *z, const bf16 *weight,
                                 const float *rstd, int n, int dim, float *scratch,
                                 cudaStream_t stream);
size_t cuda_rmsnorm_gated_scratch_floats(int n, int dim);

#ifdef __cplusplus
}
#endif

#endif
