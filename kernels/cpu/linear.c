// Linear layer: out = in . w^T (+ bias), the hot path of the CPU backend.
//
// Two register-tiled micro-kernels cover the three products, none of which copies or
// transposes an operand:
// - forward out[t,o] = in[t,:] . w[o,:]: "dot" tiles. Both operands are rows, so each output
//   is a dot product over ic, vectorized with an omp simd reduction.
// - din[t,i] += sum_o dout[t,o] * w[o,i] and dw[o,i] += sum_t dout[t,o] * in[t,i]:
//   "broadcast" tiles. A scalar of A times a contiguous row of B, accumulated in registers.
// Every output element belongs to one fixed tile, and the tiling never depends on the thread
// count, so the results are bitwise identical for any number of OpenMP threads.
#include "kernels/cpu/kernels_cpu.h"

#include <stddef.h>

// Forward dot tile: DOT_MR token rows x DOT_NR output rows = 12 accumulators, which with their
// operands still fit the 16 SSE/AVX registers of a plain x86-64 build.
enum { DOT_MR = 4, DOT_NR = 3 };

// Broadcast tile: BC_MR rows x BC_NR contiguous columns of C, over BC_KC steps of the
// reduction at a time (the fastest of the shapes tried on a plain x86-64 -O3 build).
enum { BC_MR = 4, BC_NR = 16, BC_KC = 256 };

static float dot(const float *a, const float *b, int k) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int p = 0; p < k; p++) s += a[p] * b[p];
    return s;
}

// c[r*ldc + j] = a[r] . b[j] for a full DOT_MR x DOT_NR tile; a and b rows have length k.
static void dot_tile(float *c, long ldc, const float *a, const float *b, int k) {
    const float *a0 = a, *a1 = a + k, *a2 = a + 2L * k, *a3 = a + 3L * k;
    const float *b0 = b, *b1 = b + k, *b2 = b + 2L * k;
    float s00 = 0, s01 = 0, s02 = 0, s10 = 0, s11 = 0, s12 = 0;
    float s20 = 0, s21 = 0, s22 = 0, s30 = 0, s31 = 0, s32 = 0;
#pragma omp simd reduction(+ : s00, s01, s02, s10, s11, s12, s20, s21, s22, s30, s31, s32)
    for (int p = 0; p < k; p++) {
        s00 += a0[p] * b0[p], s01 += a0[p] * b1[p], s02 += a0[p] * b2[p];
        s10 += a1[p] * b0[p], s11 += a1[p] * b1[p], s12 += a1[p] * b2[p];
        s20 += a2[p] * b0[p], s21 += a2[p] * b1[p], s22 += a2[p] * b2[p];
        s30 += a3[p] * b0[p], s31 += a3[p] * b1[p], s32 += a3[p] * b2[p];
    }
    float *c0 = c, *c1 = c + ldc, *c2 = c + 2 * ldc, *c3 = c + 3 * ldc;
    c0[0] = s00, c0[1] = s01, c0[2] = s02;
    c1[0] = s10, c1[1] = s11, c1[2] = s12;
    c2[0] = s20, c2[1] = s21, c2[2] = s22;
    c3[0] = s30, c3[1] = s31, c3[2] = s32;
}

// Partial tile at the edges: plain dot products.
static void dot_edge(float *c, long ldc, const float *a, const float *b, int k, int mr, int nr) {
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nr; j++) c[r * ldc + j] = dot(a + (long)r * k, b + (long)j * k, k);
}

// c[m, n] = a[m, k] . b[n, k]^T, parallel over tiles of c.
static void gemm_nt(float *c, const float *a, const float *b, int m, int n, int k) {
    int mt = (m + DOT_MR - 1) / DOT_MR, nt = (n + DOT_NR - 1) / DOT_NR;
#pragma omp parallel for collapse(2) schedule(static)
    for (int ti = 0; ti < mt; ti++) {
        for (int tj = 0; tj < nt; tj++) {
            int i = ti * DOT_MR, j = tj * DOT_NR;
            int mr = m - i < DOT_MR ? m - i : DOT_MR, nr = n - j < DOT_NR ? n - j : DOT_NR;
            float *ct = c + (long)i * n + j;
            const float *at = a + (long)i * k, *bt = b + (long)j * k;
            if (mr == DOT_MR && nr == DOT_NR)
                dot_tile(ct, n, at, bt, k);
            else
                dot_edge(ct, n, at, bt, k, mr, nr);
        }
    }
}

// Strided view of the A operand: element (r, p) is at a[r * rs + p * ps]. This lets the same
// tile read dout as [n, oc] (for din) or as its transpose (for dw) without copying it.
typedef struct {
    const float *a;
    long rs, ps;
} strided;

// c[r, j] += sum_p A(r, p) * b[p, j] for a full BC_MR x BC_NR tile. Each element is summed
// in p order from zero, then added to c, exactly like bc_edge, so edge and interior elements
// round the same way.
static void bc_tile(float *c, long ldc, strided A, const float *b, long ldb, int k) {
    float acc[BC_MR][BC_NR] = {{0}};
    for (int p = 0; p < k; p++) {
        const float *bp = b + p * ldb;
        for (int r = 0; r < BC_MR; r++) {
            float ar = A.a[r * A.rs + p * A.ps];
            // Without this pragma GCC vectorizes over p (with gathers) and runs 4x slower.
#pragma omp simd
            for (int j = 0; j < BC_NR; j++) acc[r][j] += ar * bp[j];
        }
    }
    for (int r = 0; r < BC_MR; r++)
        for (int j = 0; j < BC_NR; j++) c[r * ldc + j] += acc[r][j];
}

static void bc_edge(float *c, long ldc, strided A, const float *b, long ldb, int k, int mr,
                    int nr) {
    for (int r = 0; r < mr; r++) {
        for (int j = 0; j < nr; j++) {
            float acc = 0.0f;
            for (int p = 0; p < k; p++) acc += A.a[r * A.rs + p * A.ps] * b[p * ldb + j];
            c[r * ldc + j] += acc;
        }
    }
}

// c[m, n] += A[m, k] . b[k, n] with b row-major (leading dimension n), parallel over tiles.
// The k range is cut into BC_KC blocks so that a block of b stays in L2 while every row tile
// sweeps it; each element of c is then c + S(block 0) + S(block 1) + ..., a fixed order.
static void gemm_acc(float *c, strided A, const float *b, int m, int n, int k) {
    int mt = (m + BC_MR - 1) / BC_MR, nt = (n + BC_NR - 1) / BC_NR;
#pragma omp parallel
    for (int k0 = 0; k0 < k; k0 += BC_KC) {
        int kc = k - k0 < BC_KC ? k - k0 : BC_KC;
#pragma omp for collapse(2) schedule(static)
        for (int ti = 0; ti < mt; ti++) {
            for (int tj = 0; tj < nt; tj++) {
                int i = ti * BC_MR, j = tj * BC_NR;
                int mr = m - i < BC_MR ? m - i : BC_MR, nr = n - j < BC_NR ? n - j : BC_NR;
                strided At = {A.a + i * A.rs + k0 * A.ps, A.rs, A.ps};
                const float *bt = b + (long)k0 * n + j;
                float *ct = c + (long)i * n + j;
                if (mr == BC_MR && nr == BC_NR)
                    bc_tile(ct, n, At, bt, n, kc);
                else
                    bc_edge(ct, n, At, bt, n, kc, mr, nr);
            }
        }
    }
}

void linear_forward(float *out, const float *in, const float *w, const float *bias, int n, int ic,
                    int oc) {
    gemm_nt(out, in, w, n, oc, ic);
    if (!bias) return;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++)
        for (int o = 0; o < oc; o++) out[(long)t * oc + o] += bias[o];
}

// dbias[o] += sum_t dout[t, o], in token order; parallel over blocks of columns.
static void bias_backward(float *dbias, const float *dout, int n, int oc) {
    enum { COLS = 64 };
    int nb = (oc + COLS - 1) / COLS;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nb; blk++) {
        int o0 = blk * COLS, w = oc - o0 < COLS ? oc - o0 : COLS;
        float acc[COLS] = {0};
        for (int t = 0; t < n; t++)
            for (int j = 0; j < w; j++) acc[j] += dout[(long)t * oc + o0 + j];
        for (int j = 0; j < w; j++) dbias[o0 + j] += acc[j];
    }
}

void linear_backward(float *din, float *dw, float *dbias, const float *dout, const float *in,
                     const float *w, int n, int ic, int oc) {
    if (din) gemm_acc(din, (strided){dout, oc, 1}, w, n, ic, oc); // din = dout . w
    gemm_acc(dw, (strided){dout, 1, oc}, in, oc, ic, n);          // dw = dout^T . in
    if (dbias) bias_backward(dbias, dout, n, oc);
}
