// Multi-head latent attention's layouts on the GPU (runtime/engine/attn_mla_cuda.c), the twins
// of attn_mla_cpu.c's copies: kv_b_proj's output [rows, H, nope + v] into k's nope part and v
// (zero past v_dim: the attention kernels take one head width P, q's and k's), the shared
// rotated key part into every head of k, and back; and attention's output between its padded
// [rows x H, P] and o_proj's compact [rows x H, v] layouts. One thread an element; the rotated
// part's gradient sums the heads in head order: the same bits on every run.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/cuda/ktime.cuh"

#include <cuda_bf16.h>

namespace {

typedef __nv_bfloat16 bf;

const int THREADS = 256;
const long MAX_BLOCKS = 8192;

unsigned blocks(long n) {
    long b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < MAX_BLOCKS ? (b > 0 ? b : 1) : MAX_BLOCKS);
}

#define GRID_STRIDE(i, n)                                                                          \
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                            \
         i += (long)gridDim.x * blockDim.x)

__global__ void split_kernel(bf *k, bf *v, const bf *kvb, mla_layout L) {
    const int kv = L.dn + L.dv;
    GRID_STRIDE(i, L.rows * L.H * L.P) {
        const long th = i / L.P; // (token, head)
        const int e = (int)(i % L.P);
        const bf *src = kvb + th * kv;
        if (e < L.dn) k[i] = src[e]; // the rotated part: rope_broadcast
        v[i] = e < L.dv ? src[L.dn + e] : __float2bfloat16(0.0f);
    }
}

__global__ void join_kernel(bf *dkvb, const bf *dk, const bf *dv, mla_layout L) {
    const int kv = L.dn + L.dv;
    GRID_STRIDE(i, L.rows * L.H * kv) {
        const long th = i / kv;
        const int e = (int)(i % kv);
        dkvb[i] = e < L.dn ? dk[th * L.P + e] : dv[th * L.P + e - L.dn];
    }
}

__global__ void broadcast_kernel(bf *k, const bf *krot, mla_layout L) {
    GRID_STRIDE(i, L.rows * L.H * L.dr) {
        const long th = i / L.dr;
        const int e = (int)(i % L.dr);
        k[th * L.P + L.dn + e] = krot[th / L.H * L.dr + e];
    }
}

__global__ void reduce_kernel(float *dkrot, const bf *dk, mla_layout L) {
    GRID_STRIDE(i, L.rows * L.dr) {
        const long t = i / L.dr;
        const int e = (int)(i % L.dr);
        float sum = 0.0f;
        for (int h = 0; h < L.H; h++) sum += __bfloat162float(dk[(t * L.H + h) * L.P + L.dn + e]);
        dkrot[i] = sum;
    }
}

// rows x H head rows between widths: pad (dst P wide, zero past w) or compact (dst w wide).
__global__ void pitch_kernel(bf *dst, const bf *src, long head_rows, int w, int P, int pad) {
    const int dw = pad ? P : w;
    GRID_STRIDE(i, head_rows * dw) {
        const long r = i / dw;
        const int e = (int)(i % dw);
        if (pad)
            dst[i] = e < w ? src[r * w + e] : __float2bfloat16(0.0f);
        else
            dst[i] = src[r * P + e];
    }
}

} // namespace

extern "C" void cuda_mla_split(bf16 *k, bf16 *v, const bf16 *kvb, const mla_layout *L,
                               cudaStream_t s) {
    KtScope kt(s, KT_COPY);
    split_kernel<<<blocks(L->rows * L->H * L->P), THREADS, 0, s>>>((bf *)k, (bf *)v,
                                                                   (const bf *)kvb, *L);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_mla_join(bf16 *dkvb, const bf16 *dk, const bf16 *dv, const mla_layout *L,
                              cudaStream_t s) {
    KtScope kt(s, KT_COPY);
    join_kernel<<<blocks(L->rows * L->H * (L->dn + L->dv)), THREADS, 0, s>>>(
        (bf *)dkvb, (const bf *)dk, (const bf *)dv, *L);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_mla_rope_broadcast(bf16 *k, const bf16 *krot, const mla_layout *L,
                                        cudaStream_t s) {
    KtScope kt(s, KT_COPY);
    broadcast_kernel<<<blocks(L->rows * L->H * L->dr), THREADS, 0, s>>>((bf *)k, (const bf *)krot,
                                                                        *L);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_mla_rope_reduce(float *dkrot, const bf16 *dk, const mla_layout *L,
                                     cudaStream_t s) {
    KtScope kt(s, KT_ELEMENTWISE);
    reduce_kernel<<<blocks(L->rows * L->dr), THREADS, 0, s>>>(dkrot, (const bf *)dk, *L);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_mla_pad(bf16 *dst, const bf16 *src, const mla_layout *L, cudaStream_t s) {
    KtScope kt(s, KT_COPY);
    pitch_kernel<<<blocks(L->rows * L->H * L->P), THREADS, 0, s>>>((bf *)dst, (const bf *)src,
                                                                   L->rows * L->H, L->dv, L->P, 1);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_mla_compact(bf16 *dst, const bf16 *src, const mla_layout *L, cudaStream_t s) {
    KtScope kt(s, KT_COPY);
    pitch_kernel<<<blocks(L->rows * L->H * L->dv), THREADS, 0, s>>>((bf *)dst, (const bf *)src,
                                                                    L->rows * L->H, L->dv, L->P, 0);
    CUDA_CHECK_LAUNCH();
}
