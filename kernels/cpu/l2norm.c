// L2 normalization of q and k over the head dim before the gated delta rule (transformers'
// l2norm, which the rule applies with use_qk_l2norm_in_kernel): out = x * rsqrt(sum(x^2) + eps).
#include "kernels/cpu/kernels_gdn.h"

#include <math.h>

void l2norm_forward(float *out, float *rnorm, const float *x, long rows, int dim, float eps) {
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        const float *xr = x + r * dim;
        float ss = 0.0f;
        for (int i = 0; i < dim; i++) ss += xr[i] * xr[i];
        float inv = 1.0f / sqrtf(ss + eps);
        for (int i = 0; i < dim; i++) out[r * dim + i] = xr[i] * inv;
        rnorm[r] = inv;
    }
}

// With r = (sum x^2 + eps)^(-1/2), dr/dx_i = -r^3 x_i: dx = r dout - r^3 x (x . dout).
void l2norm_backward(float *dx, const float *dout, const float *x, const float *rnorm, long rows,
                     int dim) {
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        const float *xr = x + r * dim, *gr = dout + r * dim;
        float inv = rnorm[r], xg = 0.0f;
        for (int i = 0; i < dim; i++) xg += xr[i] * gr[i];
        float k = inv * inv * inv * xg;
        for (int i = 0; i < dim; i++) dx[r * dim + i] += inv * gr[i] - k * xr[i];
    }
}
