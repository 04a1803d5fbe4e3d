// Fused classifier + cross-entropy. Tokens are processed in chunks of CHUNK rows, so only a
// CHUNK x vocab block of logits exists at a time; the logits products reuse the linear
// kernels (logits = x . w^T, a linear layer without bias).
//
// A negative target (e.g. Hugging Face's ignore index -100) contributes no loss and no
// gradient; the caller divides the sum by the number of counted tokens.
#include "kernels/cpu/kernels_cpu.h"

#include <math.h>
#include <stdlib.h>

enum { CHUNK = 64 };

static float *logits_scratch(int vocab) {
    float *p = malloc(sizeof(float) * (size_t)CHUNK * vocab);
    if (!p) abort();
    return p;
}

// Numerically stable log-sum-exp of one row of logits.
static float row_lse(const float *z, int vocab) {
    float m = -INFINITY, s = 0.0f;
    for (int v = 0; v < vocab; v++) m = z[v] > m ? z[v] : m;
    for (int v = 0; v < vocab; v++) s += expf(z[v] - m);
    return m + logf(s);
}

double classifier_forward(const float *x, const float *w, const int32_t *targets, int n, int dim,
                          int vocab) {
    float *logits = logits_scratch(vocab), loss[CHUNK];
    double sum = 0.0;
    for (int t0 = 0; t0 < n; t0 += CHUNK) {
        int cn = n - t0 < CHUNK ? n - t0 : CHUNK;
        linear_forward(logits, x + (long)t0 * dim, w, NULL, cn, dim, vocab);
#pragma omp parallel for schedule(static)
        for (int i = 0; i < cn; i++) {
            const float *z = logits + (long)i * vocab;
            int y = targets[t0 + i];
            loss[i] = y < 0 ? 0.0f : row_lse(z, vocab) - z[y];
        }
        for (int i = 0; i < cn; i++) sum += loss[i]; // token order, whatever the threads
    }
    free(logits);
    return sum;
}

// dlogits = (softmax - onehot(target)) * dloss, in place over the row.
static void row_dlogits(float *z, int y, int vocab, float dloss) {
    if (y < 0) {
        for (int v = 0; v < vocab; v++) z[v] = 0.0f;
        return;
    }
    float lse = row_lse(z, vocab);
    for (int v = 0; v < vocab; v++) z[v] = expf(z[v] - lse) * dloss;
    z[y] -= dloss;
}

// Per chunk: recompute the logits, turn them into dlogits, then let the linear backward
// accumulate dx = dlogits . w and dw += dlogits^T . x. Chunks run in token order, so each dw
// element is summed in a fixed order.
void classifier_backward(float *dx, float *dw, const float *x, const float *w,
                         const int32_t *targets, int n, int dim, int vocab, float dloss) {
    float *logits = logits_scratch(vocab);
    for (int t0 = 0; t0 < n; t0 += CHUNK) {
        int cn = n - t0 < CHUNK ? n - t0 : CHUNK;
        const float *xc = x + (long)t0 * dim;
        linear_forward(logits, xc, w, NULL, cn, dim, vocab);
#pragma omp parallel for schedule(static)
        for (int i = 0; i < cn; i++)
            row_dlogits(logits + (long)i * vocab, targets[t0 + i], vocab, dloss);
        linear_backward(dx + (long)t0 * dim, dw, NULL, logits, xc, w, cn, dim, vocab);
    }
    free(logits);
}
