// fp32 -> bf16 conversion, round to nearest even like bf16_from_float() in kernels/bf16.h
// (NaN stays NaN, though CUDA's canonical NaN payload differs from the CPU's).
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/cuda/ktime.cuh"
#include "kernels/cuda/cuda_check.h"

#include <cuda_bf16.h>

namespace {

const int THREADS = 256;
const long MAX_BLOCKS = 4096; // grid-stride beyond this: enough to fill an H200

// Four bf16, stored with one 8-byte write.
struct alignas(8) bf16x4 {
    __nv_bfloat162 lo, hi;
};

// Vector body (4 elements per step, 16-byte loads) when vec is set, then the scalar tail.
// Unaligned pointers take vec = false and do everything in the tail loop.
__global__ void float_to_bf16_kernel(__nv_bfloat16 *out, const float *in, long n, bool vec) {
    long stride = (long)gridDim.x * blockDim.x, id = (long)blockIdx.x * blockDim.x + threadIdx.x;
    long n4 = vec ? n / 4 : 0;
    for (long i = id; i < n4; i += stride) {
        float4 v = reinterpret_cast<const float4 *>(in)[i];
        bf16x4 o = {__floats2bfloat162_rn(v.x, v.y), __floats2bfloat162_rn(v.z, v.w)};
        reinterpret_cast<bf16x4 *>(out)[i] = o;
    }
    for (long i = 4 * n4 + id; i < n; i += stride) out[i] = __float2bfloat16(in[i]);
}

// x = bf16(x), widened back: gradients rounded where they stay, as the host's slots would hold
// them (the same round to nearest even as float_to_bf16_kernel).
__global__ void round_bf16_kernel(float *x, long n) {
    long stride = (long)gridDim.x * blockDim.x;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        x[i] = __bfloat162float(__float2bfloat16(x[i]));
}

long blocks_for(long work) {
    long b = (work + THREADS - 1) / THREADS;
    return b < 1 ? 1 : (b > MAX_BLOCKS ? MAX_BLOCKS : b);
}

} // namespace

extern "C" void cuda_float_to_bf16(bf16 *out, const float *in, long n, cudaStream_t stream) {
    KtScope kt(stream, KT_ELEMENTWISE);
    if (n <= 0) return;
    bool vec = ((uintptr_t)in % 16 == 0) && ((uintptr_t)out % 8 == 0);
    long work = vec ? n / 4 + 4 : n;
    float_to_bf16_kernel<<<(unsigned)blocks_for(work), THREADS, 0, stream>>>(
        reinterpret_cast<__nv_bfloat16 *>(out), in, n, vec);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_round_bf16(float *x, long n, cudaStream_t stream) {
    KtScope kt(stream, KT_ELEMENTWISE);
    if (n <= 0) return;
    round_bf16_kernel<<<(unsigned)blocks_for(n), THREADS, 0, stream>>>(x, n);
    CUDA_CHECK_LAUNCH();
}

// bf16 -> fp32, exact: the qk-norms' backward takes its incoming gradient in fp32.
__global__ void bf16_to_float_kernel(float *out, const __nv_bfloat16 *in, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x)
        out[i] = __bfloat162float(in[i]);
}

extern "C" void cuda_bf16_to_float(float *out, const bf16 *in, long n, cudaStream_t stream) {
    if (n <= 0) return;
    int blocks = (int)((n + 255) / 256 < 65535 * 8 ? (n + 255) / 256 : 65535 * 8);
    bf16_to_float_kernel<<<blocks, 256, 0, stream>>>(out, (const __nv_bfloat16 *)in, n);
    CUDA_CHECK(cudaGetLastError());
}
