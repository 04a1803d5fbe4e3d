// The pieces of the chunked gated delta rule that gated_delta.cu (the passes over chunks) and
// gated_delta_grad.cu (the gradients a chunk at a time) share: the chunk's tiles, M and P, and
// the in-chunk triangular solves. The math is gated_delta.cu's header.
#ifndef MT_GATED_DELTA_CUH
#define MT_GATED_DELTA_CUH

#include "kernels/cuda/kernels_gdn_cuda.h"

#include <cuda_bf16.h>

namespace gdn {

const int L = GDN_CHUNK;
const int THREADS = 256;
const int COLS = 32;     // state columns a pass block owns
const int MAX_DIM = 128; // dk and dv: the grad kernel holds a chunk's L x dv rows in shared memory
const int LIST_THREADS = 1024;

typedef __nv_bfloat16 bf;

inline __device__ float f(bf x) {
    return __bfloat162float(x);
}

// Shared-memory row stride of a bf16 [L, dk] tile: odd in 4-byte words, so that threads reading
// one column of consecutive rows hit different banks.
inline __host__ __device__ int kstride(int dk) {
    return dk % 2 == 0 ? dk + 2 : dk + 1;
}

inline __device__ bool starts_document(const gdn_args &a, int b, int t) {
    return t == 0 || (a.doc_start && a.doc_start[(long)b * a.T + t] == t);
}

// The rows t0 .. t0 + Lc - 1 of one head of a [B, T, heads, width] bf16 tensor into a padded
// [L, kstride(width)] tile.
inline __device__ void load_rows(bf *dst, const bf *src, long row_stride, int Lc, int width) {
    int ks = kstride(width);
    for (int e = threadIdx.x; e < Lc * width; e += blockDim.x) {
        int i = e / width, m = e % width;
        dst[i * ks + m] = src[i * row_stride + m];
    }
}

// The chunk's gates for value head h (one thread): gamma (cumulative g), beta, exp(gamma) and
// w_j = exp(gamma_last - gamma_j).
inline __device__ void load_gates(float *gam, float *beta, float *eg, float *w, const float *g,
                                  const float *bt, long stride, int Lc) {
    float acc = 0.0f;
    for (int i = 0; i < Lc; i++) {
        gam[i] = acc += g[i * stride];
        beta[i] = bt[i * stride];
        eg[i] = expf(acc);
    }
    for (int i = 0; i < Lc; i++) w[i] = expf(acc - gam[i]);
}

// M (strictly lower) and P (lower, with the diagonal) of the header, [L, L], zero elsewhere.
inline __device__ void chunk_mats(float *M, float *P, const bf *K, const bf *Q, const float *gam,
                                  int Lc, int dk) {
    int ks = kstride(dk);
    for (int e = threadIdx.x; e < L * L; e += blockDim.x) {
        int i = e / L, j = e % L;
        float m = 0.0f, p = 0.0f;
        if (i < Lc && j <= i) {
            float kk = 0.0f, qk = 0.0f;
            for (int x = 0; x < dk; x++) {
                float kj = f(K[j * ks + x]);
                kk += f(K[i * ks + x]) * kj;
                qk += f(Q[i * ks + x]) * kj;
            }
            float D = expf(gam[i] - gam[j]);
            p = qk * D;
            m = j < i ? kk * D : 0.0f;
        }
        M[e] = m;
        P[e] = p;
    }
}

// Sum over the 8 lanes of a column group, in a fixed butterfly.
inline __device__ float group8_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 4);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v;
}

// X = (I + A)^-1 X in place on columns 0 .. ncols - 1 of X [Lc, xs], A_ij = beta_i M_ij:
// forward substitution, row by row. Eight lanes share a column and split the sum over j; a warp
// takes 4 columns at a time. Ends with a block barrier.
inline __device__ void solve_lower(float *X, int xs, int ncols, const float *M, const float *beta,
                                   int Lc) {
    int lane = threadIdx.x % 32, sub = lane % 8, warps = blockDim.x / 32;
    for (int c0 = threadIdx.x / 32 * 4; c0 < ncols; c0 += warps * 4) {
        int c = c0 + lane / 8;
        bool live = c < ncols;
        for (int i = 1; i < Lc; i++) {
            float s = 0.0f;
            if (live)
                for (int j = sub; j < i; j += 8) s += M[i * L + j] * X[j * xs + c];
            s = group8_sum(s);
            if (live && sub == 0) X[i * xs + c] -= beta[i] * s;
            __syncwarp();
        }
    }
    __syncthreads();
}

// X = (I + A)^-T X in place (back substitution, the solve's backward), as solve_lower.
inline __device__ void solve_upper(float *X, int xs, int ncols, const float *M, const float *beta,
                                   int Lc) {
    int lane = threadIdx.x % 32, sub = lane % 8, warps = blockDim.x / 32;
    for (int c0 = threadIdx.x / 32 * 4; c0 < ncols; c0 += warps * 4) {
        int c = c0 + lane / 8;
        bool live = c < ncols;
        for (int i = Lc - 2; i >= 0; i--) {
            float s = 0.0f;
            if (live)
                for (int j = i + 1 + sub; j < Lc; j += 8)
                    s += beta[j] * M[j * L + i] * X[j * xs + c];
            s = group8_sum(s);
            if (live && sub == 0) X[i * xs + c] -= s;
            __syncwarp();
        }
    }
    __syncthreads();
}

inline __device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The tensors of cuda_gdn_tensors, as the kernels take them.
struct Tensors {
    const bf *q, *k, *v;
    const float *g, *beta;
    bf *out;
    const float *dout;
    float *dq, *dk, *dv, *dg, *dbeta;
};

// A run of chunk indices [begin, end) of every row (each row's own chunks; a row with fewer has
// fewer in the span, or none).
struct Span {
    int begin, end;
};

// Chunk states in global memory, fp32: slot i of (b, h) at p + ((b H + h) slots + i) dk dv,
// [dk, dv] each. A pass that keeps states keeps those of every `every`-th chunk of its span.
struct StateBuf {
    float *p;
    int slots, every;
};

inline __device__ float *state_at(const StateBuf &s, const gdn_args &a, int b, int h, int slot) {
    return s.p + (((long)b * a.H + h) * s.slots + slot) * a.dk * a.dv;
}

// gated_delta.cu's host helpers, shared with the tensor-core path (gated_delta_tc.cu): the
// chunk lists at the start of scratch (their bytes; build_lists returns starts and counts), the
// shape check (exit 2), the kernels' view of the tensors, and the multiply-adds ktime reports.
size_t lists_bytes(const gdn_args *a, int max_chunks);
void build_lists(const gdn_args *a, int max_chunks, void *scratch, int32_t **starts,
                 int32_t **counts, cudaStream_t stream);
void check_shape(const gdn_args *a);
Tensors tensors_of(const cuda_gdn_tensors *t);
double forward_flops(const gdn_args *a);

// Whether the tensor-core path takes a shape: its tiles are 16 wide.
inline bool gdn_tc_shape(const gdn_args *a) {
    return a->dk % 16 == 0 && a->dv % 16 == 0 && a->dk <= MAX_DIM && a->dv <= MAX_DIM;
}

// gated_delta_tc_bwd.cu: the tensor-core backward's scratch bytes.
size_t tc_backward_bytes(const gdn_args *a, int max_chunks);

// gated_delta_grad.cu: every gradient of the chunks of span, from each chunk's entering state
// (states) and the gradient of its leaving state (dstates), both in slot c - span.begin.
void grad_launch(const gdn_args *a, const Tensors &t, const int32_t *starts, const int32_t *counts,
                 int max_chunks, Span span, const StateBuf &states, const StateBuf &dstates,
                 cudaStream_t stream);

} // namespace gdn

#endif
