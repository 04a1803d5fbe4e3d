// RMSNorm (Llama): out = x * rstd * weight with rstd = 1 / sqrt(mean(x^2) + eps), all in fp32
// like Hugging Face's LlamaRMSNorm; the _offset forms apply the weight as (offset + weight), the
// zero-centred weights of Qwen3.5's Qwen3_5RMSNorm with offset 1.
#include "kernels/cpu/kernels_cpu.h"

#include <math.h>

void rmsnorm_offset_forward(float *out, float *rstd, const float *x, const float *weight,
                            float offset, int n, int dim, float eps) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        const float *xt = x + (long)t * dim;
        float *ot = out + (long)t * dim;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int i = 0; i < dim; i++) ss += xt[i] * xt[i];
        float r = 1.0f / sqrtf(ss / (float)dim + eps);
        for (int i = 0; i < dim; i++) ot[i] = (xt[i] * r) * (offset + weight[i]);
        rstd[t] = r;
    }
}

// dx_i = r * w_i * g_i - r^3 / dim * x_i * sum_j(g_j * w_j * x_j), one row per thread, with
// w = offset + weight.
static void rmsnorm_dx(float *dx, const float *dout, const float *x, const float *weight,
                       float offset, const float *rstd, int n, int dim) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        const float *xt = x + (long)t * dim, *gt = dout + (long)t * dim;
        float *dxt = dx + (long)t * dim;
        float r = rstd[t], c = 0.0f;
#pragma omp simd reduction(+ : c)
        for (int i = 0; i < dim; i++) c += gt[i] * (offset + weight[i]) * xt[i];
        float k = r * r * r * c / (float)dim;
        for (int i = 0; i < dim; i++) dxt[i] += r * (offset + weight[i]) * gt[i] - k * xt[i];
    }
}

// dweight_i += sum_t g[t,i] * x[t,i] * r[t] (whatever the offset): parallel over column blocks,
// tokens in order.
static void rmsnorm_dweight(float *dweight, const float *dout, const float *x, const float *rstd,
                            int n, int dim) {
    enum { COLS = 64 };
    int nb = (dim + COLS - 1) / COLS;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nb; blk++) {
        int c0 = blk * COLS, w = dim - c0 < COLS ? dim - c0 : COLS;
        float acc[COLS] = {0};
        for (int t = 0; t < n; t++) {
            const float *xt = x + (long)t * dim + c0, *gt = dout + (long)t * dim + c0;
            for (int j = 0; j < w; j++) acc[j] += gt[j] * (xt[j] * rstd[t]);
        }
        for (int j = 0; j < w; j++) dweight[c0 + j] += acc[j];
    }
}

void rmsnorm_offset_backward(float *dx, float *dweight, const float *dout, const float *x,
                             const float *weight, float offset, const float *rstd, int n, int dim) {
    rmsnorm_dx(dx, dout, x, weight, offset, rstd, n, dim);
    rmsnorm_dweight(dweight, dout, x, rstd, n, dim);
}

void rmsnorm_forward(float *out, float *rstd, const float *x, const float *weight, int n, int dim,
                     float eps) {
    rmsnorm_offset_forward(out, rstd, x, weight, 0.0f, n, dim, eps);
}

void rmsnorm_backward(float *dx, float *dweight, const float *dout, const float *x,
                      const float *weight, const float *rstd, int n, int dim) {
    rmsnorm_offset_backward(dx, dweight, dout, x, weight, 0.0f, rstd, n, dim);
}
