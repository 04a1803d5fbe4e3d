// The causal depthwise convolution + SiLU in front of Gated DeltaNet's delta rule (transformers'
// causal_conv1d_fn with activation "silu"): each channel mixes its own last K tokens.
#include "kernels/cpu/kernels_gdn.h"

#include <math.h>
#include <stdlib.h>

enum { CHANNELS = 64 }; // channels per backward work item

// The first token that token t of row b sees: its document's first, or 0.
static inline int conv_first(const conv1d_args *a, int b, int t) {
    return a->doc_start ? a->doc_start[(long)b * a->T + t] : 0;
}

// The pre-activation of (b, t, c): sum over the K taps that reach t's document.
static float conv_pre(const conv1d_args *a, const float *x, const float *w, int b, int t, int c) {
    int first = conv_first(a, b, t);
    float s = 0.0f;
    for (int j = 0; j < a->K; j++) {
        int src = t - (a->K - 1) + j;
        if (src >= first) s += w[(long)c * a->K + j] * x[((long)b * a->T + src) * a->C + c];
    }
    return s;
}

static inline float sigmoidf(float x) {
    return 1.0f / (1.0f + expf(-x));
}

void causal_conv1d_silu_forward(float *out, const float *x, const float *w, const conv1d_args *a) {
#pragma omp parallel for schedule(static)
    for (long row = 0; row < (long)a->B * a->T; row++) {
        int b = (int)(row / a->T), t = (int)(row % a->T);
        for (int c = 0; c < a->C; c++) {
            float p = conv_pre(a, x, w, b, t, c);
            out[row * a->C + c] = p * sigmoidf(p);
        }
    }
}

// d silu(p) / dp = s (1 + p (1 - s)), s = sigmoid(p), into dpre[T, cw] for row b's channels
// c0 .. c0 + cw - 1.
static void conv_dpre(float *dpre, const float *dout, const float *x, const float *w,
                      const conv1d_args *a, int b, int c0, int cw) {
    for (int t = 0; t < a->T; t++)
        for (int c = 0; c < cw; c++) {
            float p = conv_pre(a, x, w, b, t, c0 + c), s = sigmoidf(p);
            float d = dout[((long)b * a->T + t) * a->C + c0 + c];
            dpre[(long)t * cw + c] = d * (s * (1.0f + p * (1.0f - s)));
        }
}

// Each tap j of output t read x[t - (K - 1) + j] if it lies in t's document: the same pairs
// give dx (summed over t in order) and dw (summed over rows and t in order).
static void conv_block_backward(float *dx, float *dwacc, const float *dpre, const float *x,
                                const float *w, const conv1d_args *a, int b, int c0, int cw) {
    for (int t = 0; t < a->T; t++) {
        int first = conv_first(a, b, t);
        for (int j = 0; j < a->K; j++) {
            int src = t - (a->K - 1) + j;
            if (src < first) continue;
            long xrow = ((long)b * a->T + src) * a->C + c0;
            for (int c = 0; c < cw; c++) {
                float d = dpre[(long)t * cw + c];
                dx[xrow + c] += d * w[(long)(c0 + c) * a->K + j];
                dwacc[c * a->K + j] += d * x[xrow + c];
            }
        }
    }
}

void causal_conv1d_silu_backward(float *dx, float *dw, const float *dout, const float *x,
                                 const float *w, const conv1d_args *a) {
    int blocks = (a->C + CHANNELS - 1) / CHANNELS;
#pragma omp parallel for schedule(dynamic, 1)
    for (int blk = 0; blk < blocks; blk++) {
        int c0 = blk * CHANNELS, cw = a->C - c0 < CHANNELS ? a->C - c0 : CHANNELS;
        float *dpre = malloc(sizeof(float) * ((size_t)a->T * cw + (size_t)cw * a->K));
        if (!dpre) abort();
        float *dwacc = dpre + (size_t)a->T * cw;
        for (int i = 0; i < cw * a->K; i++) dwacc[i] = 0.0f;
        for (int b = 0; b < a->B; b++) {
            conv_dpre(dpre, dout, x, w, a, b, c0, cw);
            conv_block_backward(dx, dwacc, dpre, x, w, a, b, c0, cw);
        }
        for (int i = 0; i < cw * a->K; i++) dw[(long)c0 * a->K + i] += dwacc[i];
        free(dpre);
    }
}
