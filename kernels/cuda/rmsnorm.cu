// RMSNorm (Llama), fp32 statistics like kernels/cpu/rmsnorm.c:
//   forward   out = bf16((x * rstd) * w), rstd = 1 / sqrt(mean(x^2) + eps)
//   backward  dx += rstd * w * g - rstd^3 / dim * x * sum_j(g_j * w_j * x_j)   (g = dout)
//             dw += sum_t g[t] * (x[t] * rstd[t])
// The dw reduction is deterministic: per-slab partial sums into scratch, then a fixed-order
// column sum, so no atomics anywhere.
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/cuda/ktime.cuh"
#include "kernels/cuda/cuda_check.h"

#include <cuda_bf16.h>

namespace {

const int ROW_WARPS = 8; // rows per block: one warp per row
const int SLAB = 256;    // tokens per partial dw sum
const int COL_THREADS = 256;

struct alignas(8) bf16x4 {
    __nv_bfloat162 lo, hi;
};

__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Four consecutive elements: fp32 from x-like arrays, bf16 from w-like arrays.
__device__ float4 load4(const float *p, int i) {
    return reinterpret_cast<const float4 *>(p)[i];
}
__device__ float4 load4(const __nv_bfloat16 *p, int i) {
    bf16x4 v = reinterpret_cast<const bf16x4 *>(p)[i];
    float2 a = __bfloat1622float2(v.lo), b = __bfloat1622float2(v.hi);
    return make_float4(a.x, a.y, b.x, b.y);
}

// One warp per row. VEC: dim % 4 == 0 and every row start 16-byte (fp32) / 8-byte (bf16)
// aligned, so each lane moves 4 columns per step.
template <bool VEC>
__global__ void rmsnorm_forward_kernel(__nv_bfloat16 *out, float *rstd, const float *x,
                                       const __nv_bfloat16 *w, int n, int dim, float eps) {
    int row = blockIdx.x * ROW_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= n) return; // the whole warp leaves together
    const float *xr = x + (long)row * dim;
    __nv_bfloat16 *orow = out + (long)row * dim;
    float ss = 0.0f;
    if (VEC) {
        for (int i = lane; i < dim / 4; i += 32) {
            float4 v = load4(xr, i);
            ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
    } else {
        for (int i = lane; i < dim; i += 32) ss += xr[i] * xr[i];
    }
    float r = 1.0f / sqrtf(warp_sum(ss) / (float)dim + eps);
    if (VEC) {
        for (int i = lane; i < dim / 4; i += 32) {
            float4 v = load4(xr, i), wv = load4(w, i);
            bf16x4 o = {__floats2bfloat162_rn((v.x * r) * wv.x, (v.y * r) * wv.y),
                        __floats2bfloat162_rn((v.z * r) * wv.z, (v.w * r) * wv.w)};
            reinterpret_cast<bf16x4 *>(orow)[i] = o;
        }
    } else {
        for (int i = lane; i < dim; i += 32)
            orow[i] = __float2bfloat16((xr[i] * r) * __bfloat162float(w[i]));
    }
    if (lane == 0) rstd[row] = r;
}

// dx, one warp per row (same VEC contract as the forward).
template <bool VEC>
__global__ void rmsnorm_dx_kernel(float *dx, const float *dout, const float *x,
                                  const __nv_bfloat16 *w, const float *rstd, int n, int dim) {
    int row = blockIdx.x * ROW_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= n) return;
    long off = (long)row * dim;
    const float *xr = x + off, *gr = dout + off;
    float *dxr = dx + off;
    float c = 0.0f;
    if (VEC) {
        for (int i = lane; i < dim / 4; i += 32) {
            float4 g = load4(gr, i), wv = load4(w, i), v = load4(xr, i);
            c += g.x * wv.x * v.x + g.y * wv.y * v.y + g.z * wv.z * v.z + g.w * wv.w * v.w;
        }
    } else {
        for (int i = lane; i < dim; i += 32) c += gr[i] * __bfloat162float(w[i]) * xr[i];
    }
    float r = rstd[row];
    float k = r * r * r * warp_sum(c) / (float)dim;
    if (VEC) {
        for (int i = lane; i < dim / 4; i += 32) {
            float4 g = load4(gr, i), wv = load4(w, i), v = load4(xr, i), d = load4(dxr, i);
            d.x += r * wv.x * g.x - k * v.x;
            d.y += r * wv.y * g.y - k * v.y;
            d.z += r * wv.z * g.z - k * v.z;
            d.w += r * wv.w * g.w - k * v.w;
            reinterpret_cast<float4 *>(dxr)[i] = d;
        }
    } else {
        for (int i = lane; i < dim; i += 32)
            dxr[i] += r * __bfloat162float(w[i]) * gr[i] - k * xr[i];
    }
}

// partial[s, c] = sum over the tokens of slab s of dout[t, c] * (x[t, c] * rstd[t]), in token
// order; one thread per (slab, column), rows read coalesced across the threads of a block.
__global__ void rmsnorm_dw_partial_kernel(float *partial, const float *dout, const float *x,
                                          const float *rstd, int n, int dim, int slabs) {
    int c = blockIdx.x * COL_THREADS + threadIdx.x;
    if (c >= dim) return;
    for (int s = blockIdx.y; s < slabs; s += gridDim.y) {
        int t1 = min(n, (s + 1) * SLAB);
        float acc = 0.0f;
#pragma unroll 8
        for (int t = s * SLAB; t < t1; t++) {
            long i = (long)t * dim + c;
            acc += dout[i] * (x[i] * rstd[t]);
        }
        partial[(long)s * dim + c] = acc;
    }
}

// dw[c] += partial[0, c] + partial[1, c] + ..., slabs in order.
__global__ void rmsnorm_dw_reduce_kernel(float *dw, const float *partial, int dim, int slabs) {
    int c = blockIdx.x * COL_THREADS + threadIdx.x;
    if (c >= dim) return;
    float acc = 0.0f;
    for (int s = 0; s < slabs; s++) acc += partial[(long)s * dim + c];
    dw[c] += acc;
}

bool vec_ok(int dim, const float *a, const float *b, const void *bf) {
    return dim % 4 == 0 && (uintptr_t)a % 16 == 0 && (uintptr_t)b % 16 == 0 &&
           (uintptr_t)bf % 8 == 0;
}

int row_blocks(int n) {
    return (n + ROW_WARPS - 1) / ROW_WARPS;
}

} // namespace

extern "C" size_t cuda_rmsnorm_scratch_floats(int n, int dim) {
    if (n <= 0 || dim <= 0) return 0;
    return (size_t)((n + SLAB - 1) / SLAB) * (size_t)dim;
}

extern "C" void cuda_rmsnorm_forward(bf16 *out, float *rstd, const float *x, const bf16 *w, int n,
                                     int dim, float eps, cudaStream_t stream) {
    KtScope kt(stream, KT_NORM);
    if (n <= 0 || dim <= 0) return;
    // x in (fp32), out (bf16); w and rstd are small.
    kt_work(stream, KT_NORM, 0, 6.0 * n * dim, "rmsnorm forward dim %d", dim);
    __nv_bfloat16 *o = reinterpret_cast<__nv_bfloat16 *>(out);
    const __nv_bfloat16 *wb = reinterpret_cast<const __nv_bfloat16 *>(w);
    // out is bf16, so its rows need 8-byte alignment like w's.
    bool vec = vec_ok(dim, x, x, w) && (uintptr_t)out % 8 == 0;
    if (vec)
        rmsnorm_forward_kernel<true>
            <<<row_blocks(n), ROW_WARPS * 32, 0, stream>>>(o, rstd, x, wb, n, dim, eps);
    else
        rmsnorm_forward_kernel<false>
            <<<row_blocks(n), ROW_WARPS * 32, 0, stream>>>(o, rstd, x, wb, n, dim, eps);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x,
                                      const bf16 *w, const float *rstd, int n, int dim,
                                      float *scratch, cudaStream_t stream) {
    KtScope kt(stream, KT_NORM);
    if (n <= 0 || dim <= 0) return;
    // dx: dout, x and dx in, dx out; dw: dout and x again (fp32 all).
    kt_work(stream, KT_NORM, 0, 24.0 * n * dim, "rmsnorm backward dim %d", dim);
    const __nv_bfloat16 *wb = reinterpret_cast<const __nv_bfloat16 *>(w);
    bool vec = vec_ok(dim, x, dout, w) && (uintptr_t)dx % 16 == 0;
    if (vec)
        rmsnorm_dx_kernel<true>
            <<<row_blocks(n), ROW_WARPS * 32, 0, stream>>>(dx, dout, x, wb, rstd, n, dim);
    else
        rmsnorm_dx_kernel<false>
            <<<row_blocks(n), ROW_WARPS * 32, 0, stream>>>(dx, dout, x, wb, rstd, n, dim);
    CUDA_CHECK_LAUNCH();

    int slabs = (n + SLAB - 1) / SLAB, col_blocks = (dim + COL_THREADS - 1) / COL_THREADS;
    dim3 grid(col_blocks, slabs < 65535 ? slabs : 65535); // grid.y is capped; the kernel strides
    rmsnorm_dw_partial_kernel<<<grid, COL_THREADS, 0, stream>>>(scratch, dout, x, rstd, n, dim,
                                                                slabs);
    CUDA_CHECK_LAUNCH();
    rmsnorm_dw_reduce_kernel<<<col_blocks, COL_THREADS, 0, stream>>>(dw, scratch, dim, slabs);
    CUDA_CHECK_LAUNCH();
}
