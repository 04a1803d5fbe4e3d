// Projection biases (Qwen2's q, k and v, gpt-oss's router and experts), like kernels/cpu's
// linear bias:
//   forward   x[r, c] += bias[c] on the GEMM's bf16 output (or fp32: the router's logits), in
//             place
//   backward  dbias[c] += sum over r of dx[r, c], accumulated in fp32
// The backward sums in a fixed order whatever the launch (a partial sum per slab of rows,
// then the partials in slab order), so the gradient is deterministic without atomics.
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/cuda/ktime.cuh"
#include "kernels/cuda/cuda_check.h"

#include <cuda_bf16.h>

namespace {

const int THREADS = 256;
const int SLABS = MT_BIAS_SLABS; // row slabs of the backward's first pass

__global__ void bias_forward_kernel(__nv_bfloat16 *x, const __nv_bfloat16 *bias, long n, int cols) {
    long stride = (long)gridDim.x * blockDim.x;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        x[i] = __float2bfloat16(__bfloat162float(x[i]) + __bfloat162float(bias[i % cols]));
}

__global__ void bias_forward_f32_kernel(float *x, const __nv_bfloat16 *bias, long n, int cols) {
    long stride = (long)gridDim.x * blockDim.x;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        x[i] += __bfloat162float(bias[i % cols]);
}

// Block (column tile, slab): each thread sums its column over the slab's rows, in row order.
__global__ void bias_partial_kernel(float *partial, const __nv_bfloat16 *dx, long rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    long per = (rows + SLABS - 1) / SLABS, lo = blockIdx.y * per;
    long hi = lo + per < rows ? lo + per : rows;
    float sum = 0;
    for (long r = lo; r < hi; r++) sum += __bfloat162float(dx[r * cols + c]);
    partial[(long)blockIdx.y * cols + c] = sum;
}

__global__ void bias_finish_kernel(float *dbias, const float *partial, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float sum = 0;
    for (int s = 0; s < SLABS; s++) sum += partial[(long)s * cols + c];
    dbias[c] += sum;
}

} // namespace

extern "C" void cuda_bias_forward(bf16 *x, const bf16 *bias, long rows, int cols,
                                  cudaStream_t stream) {
    KtScope kt(stream, KT_ELEMENTWISE);
    long n = rows * cols, blocks = (n + THREADS - 1) / THREADS;
    int grid = (int)(blocks < 4096 ? blocks : 4096);
    bias_forward_kernel<<<grid, THREADS, 0, stream>>>((__nv_bfloat16 *)x,
                                                      (const __nv_bfloat16 *)bias, n, cols);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void cuda_bias_forward_f32(float *x, const bf16 *bias, long rows, int cols,
                                      cudaStream_t stream) {
    KtScope kt(stream, KT_ELEMENTWISE);
    long n = rows * cols, blocks = (n + THREADS - 1) / THREADS;
    if (n <= 0) return;
    int grid = (int)(blocks < 4096 ? blocks : 4096);
    bias_forward_f32_kernel<<<grid, THREADS, 0, stream>>>(x, (const __nv_bfloat16 *)bias, n, cols);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void cuda_bias_backward(float *dbias, const bf16 *dx, long rows, int cols,
                                   float *scratch, cudaStream_t stream) {
    KtScope kt(stream, KT_ELEMENTWISE);
    dim3 grid((cols + THREADS - 1) / THREADS, SLABS);
    bias_partial_kernel<<<grid, THREADS, 0, stream>>>(scratch, (const __nv_bfloat16 *)dx, rows,
                                                      cols);
    CUDA_CHECK(cudaGetLastError());
    bias_finish_kernel<<<(cols + THREADS - 1) / THREADS, THREADS, 0, stream>>>(dbias, scratch,
                                                                               cols);
    CUDA_CHECK(cudaGetLastError());
}
