// DeepSeek-V3's sigmoid router on the CPU: kernels/moe_router.h's per-token routine over the
// tokens. Each token has one owner, so the results do not depend on the thread count.
#include "kernels/cpu/kernels_cpu.h"
#include "kernels/moe_router.h"

void moe_route_sigmoid_forward(float *scores, int32_t *expert, float *weight, const float *logits,
                               int n, int E, int k, const moe_sigmoid_route *r) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++)
        moe_sigmoid_route_token(scores + (size_t)t * E, expert + (size_t)t * k,
                                weight + (size_t)t * k, logits + (size_t)t * E, E, k, r);
}

void moe_route_sigmoid_backward(float *d_logits, const float *d_weight, const float *scores,
                                const int32_t *expert, int n, int E, int k,
                                const moe_sigmoid_route *r) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++)
        moe_sigmoid_route_token_backward(d_logits + (size_t)t * E, d_weight + (size_t)t * k,
                                         scores + (size_t)t * E, expert + (size_t)t * k, k, r);
}
