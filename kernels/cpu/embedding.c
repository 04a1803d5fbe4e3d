// Token embedding: a row gather forward, a scatter-add backward.
#include "kernels/cpu/kernels_cpu.h"

#include <string.h>

void embedding_forward(float *out, const int32_t *tokens, const float *table, int n, int dim) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++)
        memcpy(out + (long)t * dim, table + (long)tokens[t] * dim, sizeof(float) * dim);
}

// Repeated token ids make rows of dtable collide, so the work is split by columns instead of
// tokens: each thread owns a block of columns of every row and walks the tokens in order,
// which keeps the sum order fixed without atomics or sorting.
void embedding_backward(float *dtable, const float *dout, const int32_t *tokens, int n, int dim) {
    enum { COLS = 64 };
    int nb = (dim + COLS - 1) / COLS;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nb; blk++) {
        int c0 = blk * COLS, w = dim - c0 < COLS ? dim - c0 : COLS;
        for (int t = 0; t < n; t++) {
            float *dst = dtable + (long)tokens[t] * dim + c0;
            const float *src = dout + (long)t * dim + c0;
            for (int j = 0; j < w; j++) dst[j] += src[j];
        }
    }
}
