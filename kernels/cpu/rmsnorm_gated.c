// The gated RMSNorm on each value head's output of Gated DeltaNet (transformers'
// Qwen3_5RMSNormGated): the plain RMSNorm of rmsnorm.c, times silu(z) of the gate projection.
#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cpu/kernels_gdn.h"

#include <math.h>
#include <stdlib.h>

static inline float sigmoidf(float x) {
    return 1.0f / (1.0f + expf(-x));
}

void rmsnorm_gated_forward(float *out, float *rstd, const float *x, const float *z,
                           const float *weight, int n, int dim, float eps) {
    rmsnorm_forward(out, rstd, x, weight, n, dim, eps);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < (long)n * dim; i++) out[i] *= z[i] * sigmoidf(z[i]);
}

// out = y * silu(z) with y the RMSNorm: dy = dout * silu(z) goes through rmsnorm_backward;
// dz = dout * y * silu'(z), silu'(z) = s (1 + z (1 - s)).
void rmsnorm_gated_backward(float *dx, float *dz, float *dweight, const float *dout, const float *x,
                            const float *z, const float *weight, const float *rstd, int n,
                            int dim) {
    float *dy = malloc(sizeof(float) * (size_t)n * dim);
    if (!dy) abort();
#pragma omp parallel for schedule(static)
    for (long r = 0; r < n; r++)
        for (int i = 0; i < dim; i++) {
            long e = r * dim + i;
            float s = sigmoidf(z[e]), y = (x[e] * rstd[r]) * weight[i];
            dy[e] = dout[e] * (z[e] * s);
            dz[e] += dout[e] * y * (s * (1.0f + z[e] * (1.0f - s)));
        }
    rmsnorm_backward(dx, dweight, dy, x, weight, rstd, n, dim);
    free(dy);
}
