// Token embedding: a row gather (bf16 table -> fp32 residual stream) and a deterministic
// scatter-add backward.
//
// Token ids are not range-checked here (the API has no vocab size); the data loader owns that.
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/cuda/ktime.cuh"
#include "kernels/cuda/cuda_check.h"

#include <cuda_bf16.h>

namespace {

const int FWD_THREADS = 128;
const int BWD_THREADS = 256; // also the number of tokens scanned per step of the backward
const int BWD_WARPS = BWD_THREADS / 32;

// Eight bf16 = one 16-byte load.
struct alignas(16) bf16x8 {
    __nv_bfloat162 v[4];
};

// One block per token. The vector path moves 8 columns per step (dim % 8 == 0, aligned rows).
template <bool VEC>
__global__ void embedding_forward_kernel(float *out, const int32_t *tokens,
                                         const __nv_bfloat16 *table, int dim) {
    long t = blockIdx.x;
    const __nv_bfloat16 *src = table + (long)tokens[t] * dim;
    float *dst = out + t * dim;
    if (VEC) {
        for (int i = threadIdx.x; i < dim / 8; i += FWD_THREADS) {
            bf16x8 in = reinterpret_cast<const bf16x8 *>(src)[i];
            float2 a = __bfloat1622float2(in.v[0]), b = __bfloat1622float2(in.v[1]);
            float2 c = __bfloat1622float2(in.v[2]), d = __bfloat1622float2(in.v[3]);
            reinterpret_cast<float4 *>(dst)[2 * i] = make_float4(a.x, a.y, b.x, b.y);
            reinterpret_cast<float4 *>(dst)[2 * i + 1] = make_float4(c.x, c.y, d.x, d.y);
        }
    } else {
        for (int i = threadIdx.x; i < dim; i += FWD_THREADS) dst[i] = __bfloat162float(src[i]);
    }
}

// Deterministic backward without atomics or scratch. Block t handles token t, but only the
// FIRST occurrence of an id does any work: it gathers every later position with the same id
// (an order-preserving compaction, BWD_THREADS tokens at a time) and adds their dout rows to
// dtable in token order. Each dtable row therefore has exactly one writer and a fixed sum
// order, so reruns are bitwise identical. The price is an O(n^2 / BWD_THREADS) scan of the
// token ids, which is small next to a layer for the n of one micro-batch (tens of thousands).
__global__ void embedding_backward_kernel(float *dtable, const float *dout, const int32_t *tokens,
                                          int n, int dim) {
    __shared__ int list[BWD_THREADS];
    __shared__ int warp_count[BWD_WARPS];
    int t = blockIdx.x, tok = tokens[t];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

    int dup = 0;
    for (int i = threadIdx.x; i < t && !dup; i += BWD_THREADS) dup = tokens[i] == tok;
    if (__syncthreads_or(dup)) return; // an earlier position owns this row

    float *dst = dtable + (long)tok * dim;
    for (int base = t; base < n; base += BWD_THREADS) {
        int i = base + threadIdx.x;
        int match = i < n && tokens[i] == tok;
        unsigned ballot = __ballot_sync(0xffffffffu, match);
        if (lane == 0) warp_count[warp] = __popc(ballot);
        __syncthreads();
        int offset = 0, total = 0;
        for (int w = 0; w < BWD_WARPS; w++) {
            offset += w < warp ? warp_count[w] : 0;
            total += warp_count[w];
        }
        if (match) list[offset + __popc(ballot & ((1u << lane) - 1u))] = i;
        __syncthreads();
        for (int c = threadIdx.x; c < dim && total > 0; c += BWD_THREADS) {
            float acc = 0.0f;
#pragma unroll 4
            for (int j = 0; j < total; j++) acc += dout[(long)list[j] * dim + c];
            dst[c] += acc;
        }
        __syncthreads(); // list and warp_count are rewritten by the next step
    }
}

} // namespace

extern "C" void cuda_embedding_forward(float *out, const int32_t *tokens, const bf16 *table, int n,
                                       int dim, cudaStream_t stream) {
    KtScope kt(stream, KT_EMBEDDING);
    if (n <= 0 || dim <= 0) return;
    const __nv_bfloat16 *tab = reinterpret_cast<const __nv_bfloat16 *>(table);
    bool vec = dim % 8 == 0 && (uintptr_t)table % 16 == 0 && (uintptr_t)out % 16 == 0;
    if (vec)
        embedding_forward_kernel<true><<<n, FWD_THREADS, 0, stream>>>(out, tokens, tab, dim);
    else
        embedding_forward_kernel<false><<<n, FWD_THREADS, 0, stream>>>(out, tokens, tab, dim);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_embedding_backward(float *dtable, const float *dout, const int32_t *tokens,
                                        int n, int dim, cudaStream_t stream) {
    KtScope kt(stream, KT_EMBEDDING);
    if (n <= 0 || dim <= 0) return;
    embedding_backward_kernel<<<n, BWD_THREADS, 0, stream>>>(dtable, dout, tokens, n, dim);
    CUDA_CHECK_LAUNCH();
}
