// The clamped SwiGLU of gpt-oss's experts, as transformers' GptOssExperts._apply_gate computes
// it on the fused gate_up output once de-interleaved (gate = even columns, up = odd ones):
//   g = clamp(gate, max = limit), u = clamp(up, -limit, limit),
//   out = (u + 1) * g * sigmoid(alpha * g).
// The gate has no lower bound: a very negative gate is not clamped, sigmoid takes it to 0.
#include "kernels/cpu/kernels_cpu.h"

#include <math.h>

// torch.clamp keeps a NaN (it compares, so a NaN fails every test and passes through), unlike
// fminf/fmaxf, which would return the bound.
static inline float clamp_max(float x, float hi) {
    return x > hi ? hi : x;
}
static inline float clamp_both(float x, float lo, float hi) {
    return x < lo ? lo : clamp_max(x, hi);
}

void swiglu_clamped_forward(float *out, const float *gate, const float *up, long n,
                            swiglu_clamp c) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
        float g = clamp_max(gate[i], c.limit), u = clamp_both(up[i], -c.limit, c.limit);
        float s = 1.0f / (1.0f + expf(-(g * c.alpha)));
        out[i] = (u + 1.0f) * (g * s);
    }
}

// torch's clamp_backward passes the gradient where min <= x <= max and gives 0 elsewhere, so an
// input exactly at a bound still gets the gradient of the unclamped expression (and a NaN input
// gets 0). d(g * s)/dg = s + g * alpha * s * (1 - s) with s = sigmoid(alpha * g).
void swiglu_clamped_backward(float *dgate, float *dup, const float *dout, const float *gate,
                             const float *up, long n, swiglu_clamp c) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
        float g = clamp_max(gate[i], c.limit), u = clamp_both(up[i], -c.limit, c.limit);
        float s = 1.0f / (1.0f + expf(-(g * c.alpha)));
        if (gate[i] <= c.limit)
            dgate[i] += dout[i] * (u + 1.0f) * (s * (1.0f + g * c.alpha * (1.0f - s)));
        if (up[i] >= -c.limit && up[i] <= c.limit) dup[i] += dout[i] * (g * s);
    }
}
