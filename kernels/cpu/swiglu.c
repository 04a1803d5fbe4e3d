// SwiGLU activation of the Llama MLP: out = silu(gate) * up, elementwise.
#include "kernels/cpu/kernels_cpu.h"

#include <math.h>

static float sigmoid(float a) { return 1.0f / (1.0f + expf(-a)); }

void swiglu_forward(float *out, const float *gate, const float *up, long n) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

// d silu(g)/dg = s + g * s * (1 - s) with s = sigmoid(g).
void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                     const float *up, long n) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
        float g = gate[i], s = sigmoid(g);
        float silu = g / (1.0f + expf(-g));
        dgate[i] += dout[i] * up[i] * (s * (1.0f + g * (1.0f - s)));
        dup[i] += dout[i] * silu;
    }
}
