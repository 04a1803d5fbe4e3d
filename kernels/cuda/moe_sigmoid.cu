// DeepSeek-V3's sigmoid router on the GPU: kernels/moe_router.h's per-token routine, one thread
// per token, as kernels/cpu/moe_sigmoid.c runs it per token on the CPU. Each token's outputs
// have one owner and its sums run in slot order, so a rerun gives the same bits and the choices
// are the CPU's but for fp32 near-ties (the device's expf). A token's work is O(E k): small
// beside the experts' GEMMs.
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/cuda/ktime.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/moe_router.h"

#include <cuda_bf16.h>

namespace {

const int THREADS = 128;

__global__ void route_sigmoid_forward_kernel(float *scores, int32_t *expert, float *weight,
                                             const float *logits, int n, int E, int k,
                                             moe_sigmoid_route r) {
    long t = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    moe_sigmoid_route_token(scores + t * E, expert + t * k, weight + t * k, logits + t * E, E, k,
                            &r);
}

__global__ void route_sigmoid_backward_kernel(__nv_bfloat16 *d_logits, const float *d_weight,
                                              const float *scores, const int32_t *expert, int n,
                                              int E, int k, moe_sigmoid_route r) {
    long t = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    float dz[MOE_MAX_EXPERTS];
    for (int e = 0; e < E; e++) dz[e] = 0.0f;
    moe_sigmoid_route_token_backward(dz, d_weight + t * k, scores + t * E, expert + t * k, k, &r);
    for (int e = 0; e < E; e++) d_logits[t * E + e] = __float2bfloat16(dz[e]);
}

unsigned blocks_for(int n) {
    return (unsigned)((n + THREADS - 1) / THREADS);
}

} // namespace

extern "C" void cuda_moe_route_sigmoid_forward(float *scores, int32_t *expert, float *weight,
                                               const float *logits, int n, int E, int k,
                                               const moe_sigmoid_route *r, cudaStream_t stream) {
    KtScope kt(stream, KT_MOE);
    if (n <= 0) return;
    kt_work(stream, KT_MOE, 0, 12.0 * n * E + 4.0 * n * E * k, "moe sigmoid route E %d k %d", E, k);
    route_sigmoid_forward_kernel<<<blocks_for(n), THREADS, 0, stream>>>(scores, expert, weight,
                                                                        logits, n, E, k, *r);
    CUDA_CHECK_LAUNCH();
}

extern "C" void cuda_moe_route_sigmoid_backward(bf16 *d_logits, const float *d_weight,
                                                const float *scores, const int32_t *expert, int n,
                                                int E, int k, const moe_sigmoid_route *r,
                                                cudaStream_t stream) {
    KtScope kt(stream, KT_MOE);
    if (n <= 0) return;
    kt_work(stream, KT_MOE, 0, 6.0 * n * E + 8.0 * n * k, "moe sigmoid route backward E %d k %d", E,
            k);
    route_sigmoid_backward_kernel<<<blocks_for(n), THREADS, 0, stream>>>(
        (__nv_bfloat16 *)d_logits, d_weight, scores, expert, n, E, k, *r);
    CUDA_CHECK_LAUNCH();
}
