// SwiGLU of the Llama MLP, elementwise like kernels/cpu/swiglu.c:
//   forward   out = silu(g) * up, silu(g) = g / (1 + exp(-g))
//   backward  dgate = dout * up * s * (1 + g * (1 - s)), dup = dout * silu(g), s = sigmoid(g)
// Unlike the CPU reference, the backward WRITES dgate and dup (bf16 GEMM operands). Below them,
// gpt-oss's clamped SwiGLU (kernels/cpu/swiglu_clamped.c), the same way.
// expf, not __expf: these kernels are memory-bound, so the accurate version is free.
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/cuda/ktime.cuh"
#include "kernels/cuda/cuda_check.h"

#include <cuda_bf16.h>

namespace {

const int THREADS = 256;
const long MAX_BLOCKS = 4096;
const int VEC = 8; // elements per vector step: 16 bytes of bf16

struct alignas(16) bf16x8 {
    __nv_bfloat16 v[VEC];
};

__device__ __nv_bfloat16 swiglu_fwd(__nv_bfloat16 g, __nv_bfloat16 u) {
    float gf = __bfloat162float(g);
    return __float2bfloat16(gf / (1.0f + expf(-gf)) * __bfloat162float(u));
}

__device__ void swiglu_bwd(__nv_bfloat16 *dg, __nv_bfloat16 *du, float d, __nv_bfloat16 g,
                           __nv_bfloat16 u) {
    float gf = __bfloat162float(g), den = 1.0f + expf(-gf);
    float s = 1.0f / den, silu = gf / den;
    *dg = __float2bfloat16(d * __bfloat162float(u) * (s * (1.0f + gf * (1.0f - s))));
    *du = __float2bfloat16(d * silu);
}

// Vector body (when vec) then the scalar tail; unaligned inputs do everything in the tail.
__global__ void swiglu_forward_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *gate,
                                      const __nv_bfloat16 *up, long n, bool vec) {
    long stride = (long)gridDim.x * blockDim.x, id = (long)blockIdx.x * blockDim.x + threadIdx.x;
    long nv = vec ? n / VEC : 0;
    for (long i = id; i < nv; i += stride) {
        bf16x8 g = reinterpret_cast<const bf16x8 *>(gate)[i];
        bf16x8 u = reinterpret_cast<const bf16x8 *>(up)[i], o;
#pragma unroll
        for (int j = 0; j < VEC; j++) o.v[j] = swiglu_fwd(g.v[j], u.v[j]);
        reinterpret_cast<bf16x8 *>(out)[i] = o;
    }
    for (long i = VEC * nv + id; i < n; i += stride) out[i] = swiglu_fwd(gate[i], up[i]);
}

__global__ void swiglu_backward_kernel(__nv_bfloat16 *dgate, __nv_bfloat16 *dup, const float *dout,
                                       const __nv_bfloat16 *gate, const __nv_bfloat16 *up, long n,
                                       bool vec) {
    long stride = (long)gridDim.x * blockDim.x, id = (long)blockIdx.x * blockDim.x + threadIdx.x;
    long nv = vec ? n / VEC : 0;
    for (long i = id; i < nv; i += stride) {
        bf16x8 g = reinterpret_cast<const bf16x8 *>(gate)[i];
        bf16x8 u = reinterpret_cast<const bf16x8 *>(up)[i], dg, du;
        float4 d0 = reinterpret_cast<const float4 *>(dout)[2 * i];
        float4 d1 = reinterpret_cast<const float4 *>(dout)[2 * i + 1];
        float d[VEC] = {d0.x, d0.y, d0.z, d0.w, d1.x, d1.y, d1.z, d1.w};
#pragma unroll
        for (int j = 0; j < VEC; j++) swiglu_bwd(&dg.v[j], &du.v[j], d[j], g.v[j], u.v[j]);
        reinterpret_cast<bf16x8 *>(dgate)[i] = dg;
        reinterpret_cast<bf16x8 *>(dup)[i] = du;
    }
    for (long i = VEC * nv + id; i < n; i += stride)
        swiglu_bwd(&dgate[i], &dup[i], dout[i], gate[i], up[i]);
}

// gpt-oss's clamped SwiGLU, as kernels/cpu/swiglu_clamped.c: the comparisons let a NaN through
// as torch.clamp does, and the gradient passes at a bound itself, not beyond it.
__device__ float clamp_max(float x, float hi) {
    return x > hi ? hi : x;
}

__global__ void swiglu_clamped_forward_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *gate,
                                              const __nv_bfloat16 *up, long n, swiglu_clamp c) {
    long stride = (long)gridDim.x * blockDim.x;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float gi = __bfloat162float(gate[i]), ui = __bfloat162float(up[i]);
        float g = clamp_max(gi, c.limit), u = ui < -c.limit ? -c.limit : clamp_max(ui, c.limit);
        float s = 1.0f / (1.0f + expf(-(g * c.alpha)));
        out[i] = __float2bfloat16((u + 1.0f) * (g * s));
    }
}

__global__ void swiglu_clamped_backward_kernel(__nv_bfloat16 *dgate, __nv_bfloat16 *dup,
                                               const float *dout, const __nv_bfloat16 *gate,
                                               const __nv_bfloat16 *up, long n, swiglu_clamp c) {
    long stride = (long)gridDim.x * blockDim.x;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float gi = __bfloat162float(gate[i]), ui = __bfloat162float(up[i]);
        float g = clamp_max(gi, c.limit), u = ui < -c.limit ? -c.limit : clamp_max(ui, c.limit);
        float s = 1.0f / (1.0f + expf(-(g * c.alpha)));
        float dg =
            gi <= c.limit ? dout[i] * (u + 1.0f) * (s * (1.0f + g * c.alpha * (1.0f - s))) : 0.0f;
        float du = ui >= -c.limit && ui <= c.limit ? dout[i] * (g * s) : 0.0f;
        dgate[i] = __float2bfloat16(dg), dup[i] = __float2bfloat16(du);
    }
}

bool aligned16(const void *p) {
    return (uintptr_t)p % 16 == 0;
}

unsigned blocks_for(long n, bool vec) {
    long work = vec ? n / VEC + VEC : n, b = (work + THREADS - 1) / THREADS;
    return (unsigned)(b > MAX_BLOCKS ? MAX_BLOCKS : b);
}

} // namespace

extern "C" void cuda_swiglu_forward(bf16 *out, const bf16 *gate, const bf16 *up, long n,
                                    cudaStream_t stream) {
    KtScope kt(stream, KT_SWIGLU);
    if (n <= 0) return;
    kt_work(stream, KT_SWIGLU, 0, 6.0 * n, "swiglu forward"); // gate, up in; out (bf16)
    bool vec = aligned16(out) && aligned16(gate) && aligned16(up);
    swiglu_forward_kernel<<<blocks_for(n, vec), THREADS, 0, stream>>>(
        reinterpret_cast<__nv_bfloat16 *>(out), reinterpret_cast<const __nv_bfloat16 *>(gate),
        reinterpret_cast<const __nv_bfloat16 *>(up), n, vec);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_swiglu_backward(bf16 *dgate, bf16 *dup, const float *dout, const bf16 *gate,
                                     const bf16 *up, long n, cudaStream_t stream) {
    KtScope kt(stream, KT_SWIGLU);
    if (n <= 0) return;
    // dout (fp32), gate, up in; dgate, dup out (bf16)
    kt_work(stream, KT_SWIGLU, 0, 12.0 * n, "swiglu backward");
    bool vec =
        aligned16(dgate) && aligned16(dup) && aligned16(dout) && aligned16(gate) && aligned16(up);
    swiglu_backward_kernel<<<blocks_for(n, vec), THREADS, 0, stream>>>(
        reinterpret_cast<__nv_bfloat16 *>(dgate), reinterpret_cast<__nv_bfloat16 *>(dup), dout,
        reinterpret_cast<const __nv_bfloat16 *>(gate), reinterpret_cast<const __nv_bfloat16 *>(up),
        n, vec);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_swiglu_clamped_forward(bf16 *out, const bf16 *gate, const bf16 *up, long n,
                                            swiglu_clamp c, cudaStream_t stream) {
    KtScope kt(stream, KT_SWIGLU);
    if (n <= 0) return;
    kt_work(stream, KT_SWIGLU, 0, 6.0 * n, "swiglu clamped forward");
    swiglu_clamped_forward_kernel<<<blocks_for(n, false), THREADS, 0, stream>>>(
        reinterpret_cast<__nv_bfloat16 *>(out), reinterpret_cast<const __nv_bfloat16 *>(gate),
        reinterpret_cast<const __nv_bfloat16 *>(up), n, c);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_swiglu_clamped_backward(bf16 *dgate, bf16 *dup, const float *dout,
                                             const bf16 *gate, const bf16 *up, long n,
                                             swiglu_clamp c, cudaStream_t stream) {
    KtScope kt(stream, KT_SWIGLU);
    if (n <= 0) return;
    kt_work(stream, KT_SWIGLU, 0, 12.0 * n, "swiglu clamped backward");
    swiglu_clamped_backward_kernel<<<blocks_for(n, false), THREADS, 0, stream>>>(
        reinterpret_cast<__nv_bfloat16 *>(dgate), reinterpret_cast<__nv_bfloat16 *>(dup), dout,
        reinterpret_cast<const __nv_bfloat16 *>(gate), reinterpret_cast<const __nv_bfloat16 *>(up),
        n, c);
    CUDA_CHECK_LAUNCH();
}
