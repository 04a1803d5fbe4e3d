// Projection biases (Qwen2's q, k and v; o_proj's on the fp32 residual stream; gpt-oss's router
// on its fp32 logits and experts), like kernels/cpu's linear bias:
//   forward   x[r, c] += bias[c] on the GEMM's bf16 output (or fp32 x), in place
//   backward  dbias[c] += sum over r of dx[r, c] (bf16 or fp32), accumulated in fp32
// The backward sums in a fixed order whatever the launch (a partial sum per slab of rows,
// then the partials in slab order), so the gradient is deterministic without atomics.
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/cuda/ktime.cuh"
#include "kernels/cuda/cuda_check.h"

#include <cuda_bf16.h>

namespace {

const int THREADS = 256;
const int SLABS = MT_BIAS_SLABS; // row slabs of the backward's first pass

__device__ __forceinline__ float to_f32(__nv_bfloat16 x) {
    return __bfloat162float(x);
}
__device__ __forceinline__ float to_f32(float x) {
    return x;
}
__device__ __forceinline__ void from_f32(__nv_bfloat16 *dst, float x) {
    *dst = __float2bfloat16(x);
}
__device__ __forceinline__ void from_f32(float *dst, float x) {
    *dst = x;
}

template <typename X>
__global__ void bias_forward_kernel(X *x, const __nv_bfloat16 *bias, long n, int cols) {
    long stride = (long)gridDim.x * blockDim.x;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        from_f32(&x[i], to_f32(x[i]) + __bfloat162float(bias[i % cols]));
}

// Block (column tile, slab): each thread sums its column over the slab's rows, in row order.
template <typename X>
__global__ void bias_partial_kernel(float *partial, const X *dx, long rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    long per = (rows + SLABS - 1) / SLABS, lo = blockIdx.y * per;
    long hi = lo + per < rows ? lo + per : rows;
    float sum = 0;
    for (long r = lo; r < hi; r++) sum += to_f32(dx[r * cols + c]);
    partial[(long)blockIdx.y * cols + c] = sum;
}

__global__ void bias_finish_kernel(float *dbias, const float *partial, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float sum = 0;
    for (int s = 0; s < SLABS; s++) sum += partial[(long)s * cols + c];
    dbias[c] += sum;
}

template <typename X>
void bias_forward(X *x, const __nv_bfloat16 *bias, long rows, int cols, cudaStream_t stream) {
    KtScope kt(stream, KT_ELEMENTWISE);
    long n = rows * cols, blocks = (n + THREADS - 1) / THREADS;
    if (n <= 0) return; // an expert no token chose
    int grid = (int)(blocks < 4096 ? blocks : 4096);
    bias_forward_kernel<X><<<grid, THREADS, 0, stream>>>(x, bias, n, cols);
    CUDA_CHECK(cudaGetLastError());
}

template <typename X>
void bias_backward(float *dbias, const X *dx, long rows, int cols, float *scratch,
                   cudaStream_t stream) {
    KtScope kt(stream, KT_ELEMENTWISE);
    dim3 grid((cols + THREADS - 1) / THREADS, SLABS);
    bias_partial_kernel<X><<<grid, THREADS, 0, stream>>>(scratch, dx, rows, cols);
    CUDA_CHECK(cudaGetLastError());
    bias_finish_kernel<<<(cols + THREADS - 1) / THREADS, THREADS, 0, stream>>>(dbias, scratch,
                                                                               cols);
    CUDA_CHECK(cudaGetLastError());
}

} // namespace

extern "C" void cuda_bias_forward(bf16 *x, const bf16 *bias, long rows, int cols,
                                  cudaStream_t stream) {
    bias_forward((__nv_bfloat16 *)x, (const __nv_bfloat16 *)bias, rows, cols, stream);
}

extern "C" void cuda_bias_backward(float *dbias, const bf16 *dx, long rows, int cols,
                                   float *scratch, cudaStream_t stream) {
    bias_backward(dbias, (const __nv_bfloat16 *)dx, rows, cols, scratch, stream);
}

extern "C" void cuda_bias_forward_f32(float *x, const bf16 *bias, long rows, int cols,
                                      cudaStream_t stream) {
    bias_forward(x, (const __nv_bfloat16 *)bias, rows, cols, stream);
}

extern "C" void cuda_bias_backward_f32(float *dbias, const float *dx, long rows, int cols,
                                       float *scratch, cudaStream_t stream) {
    bias_backward(dbias, dx, rows, cols, scratch, stream);
}
