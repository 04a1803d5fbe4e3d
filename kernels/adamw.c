#include "kernels/adamw.h"
#include <math.h>

// torch computes bias corrections in Python floats (double) and the per-element math in the
// tensor dtype; the same split here keeps us within an ulp of it.
void adamw_update(float *p, float *m, float *v, bf16 *wire, const float *g, size_t n,
                  const adamw_params *hp) {
    double bc1 = 1.0 - pow(hp->beta1, hp->step);
    double bc2 = 1.0 - pow(hp->beta2, hp->step);
    float step_size = (float)(hp->lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    float decay = (float)(1.0 - (double)hp->lr * hp->weight_decay);
    float one_minus_b1 = 1.0f - hp->beta1, one_minus_b2 = 1.0f - hp->beta2;
    float b2 = hp->beta2, eps = hp->eps, scale = hp->grad_scale;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float grad = g[i] * scale;
        float param = p[i] * decay;
        float mi = m[i] + one_minus_b1 * (grad - m[i]); // lerp, as torch's exp_avg.lerp_
        float vi = v[i] * b2 + one_minus_b2 * grad * grad;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        param = param - step_size * (mi / denom);
        p[i] = param;
        m[i] = mi;
        v[i] = vi;
        wire[i] = bf16_from_float(param);
    }
}

float clip_coefficient(double total_norm, double max_norm) {
    double coef = max_norm / (total_norm + 1e-6);
    return (float)(coef < 1.0 ? coef : 1.0);
}

double sum_of_squares(const float *x, size_t n) {
    double acc = 0.0;
    for (size_t i = 0; i < n; i++) acc += (double)x[i] * x[i];
    return acc;
}
