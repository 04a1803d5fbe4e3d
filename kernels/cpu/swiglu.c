// SwiGLU activation of the Llama MLP: out = silu(gate) * up, elementwise.
#include "kernels/cpu/kernels_cpu.h"

#include <math.h>

void swiglu_forward(float *out, const float *gate, const float *up, long n) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

// d silu(g)/dg = s * (1 + g * (1 - s)) with s = sigmoid(g) = 1 / (1 + exp(-g)).
void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                     const float *up, long n) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
        float g = gate[i], den = 1.0f + expf(-g);
        float s = 1.0f / den, silu = g / den; // silu rounded exactly as in the forward
        dgate[i] += dout[i] * up[i] * (s * (1.0f + g * (1.0f - s)));
        dup[i] += dout[i] * silu;
    }
}
