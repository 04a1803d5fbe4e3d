// Deterministic reductions: the squared norm of a gradient group, summed in a fixed tree so
// the same gradients always give the same bits (the optimizers' clip coefficient depends on it).
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ktime.cuh"
#include "kernels/cuda/kernels_cuda.h"

#define REDUCE_THREADS 256
#define REDUCE_BLOCKS 1024

__device__ double block_sum(double v) {
    __shared__ double partial[REDUCE_THREADS];
    partial[threadIdx.x] = v;
    __syncthreads();
    for (int s = REDUCE_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    return partial[0];
}

// Each block owns a fixed grid-stride set of elements; per-thread sums in double.
__global__ void sumsq_partials(double *partials, const float *x, long n) {
    double acc = 0;
    for (long i = blockIdx.x * (long)REDUCE_THREADS + threadIdx.x; i < n;
         i += (long)REDUCE_BLOCKS * REDUCE_THREADS)
        acc += (double)x[i] * x[i];
    double s = block_sum(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void sum_partials(double *out, const double *partials) {
    double acc = 0;
    for (int i = threadIdx.x; i < REDUCE_BLOCKS; i += REDUCE_THREADS) acc += partials[i];
    double s = block_sum(acc);
    if (threadIdx.x == 0) *out = s;
}

extern "C" size_t cuda_sum_squares_scratch_bytes(void) {
    return REDUCE_BLOCKS * sizeof(double);
}

extern "C" void cuda_sum_squares(double *out, const float *x, long n, void *scratch,
                                 cudaStream_t stream) {
    KtScope kt(stream, KT_ELEMENTWISE);
    sumsq_partials<<<REDUCE_BLOCKS, REDUCE_THREADS, 0, stream>>>((double *)scratch, x, n);
    CUDA_CHECK_LAUNCH();
    sum_partials<<<1, REDUCE_THREADS, 0, stream>>>(out, (const double *)scratch);
    CUDA_CHECK_LAUNCH();
}
