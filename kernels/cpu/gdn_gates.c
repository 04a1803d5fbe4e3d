// Gated DeltaNet's per-(token, value head) gates, as Qwen3_5GatedDeltaNet.forward computes them
// in fp32: the log-decay g = -exp(A_log) * softplus(a + dt_bias) (<= 0, so the state shrinks)
// and the write strength beta = sigmoid(b).
#include "kernels/cpu/kernels_gdn.h"

#include <math.h>

enum { SOFTPLUS_THRESHOLD = 20 }; // torch's F.softplus default: x itself above it

static inline float softplus(float x) {
    return x > SOFTPLUS_THRESHOLD ? x : log1pf(expf(x));
}

// torch's softplus_backward: 1 above the threshold, else exp(x) / (exp(x) + 1).
static inline float softplus_grad(float x) {
    if (x > SOFTPLUS_THRESHOLD) return 1.0f;
    float z = expf(x);
    return z / (z + 1.0f);
}

static inline float sigmoidf(float x) {
    return 1.0f / (1.0f + expf(-x));
}

void gdn_gates_forward(const gdn_gate_tensors *t, long n, int H) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n * H; i++) {
        int h = (int)(i % H);
        t->g[i] = -expf(t->A_log[h]) * softplus(t->a[i] + t->dt_bias[h]);
        t->beta[i] = sigmoidf(t->b[i]);
    }
}

// One thread per head, so that dA_log[h] and ddt_bias[h] sum the tokens in order.
// dg/dA_log = g; dg/da = dg/ddt_bias = -exp(A_log) softplus'(a + dt_bias).
void gdn_gates_backward(const gdn_gate_tensors *t, long n, int H) {
#pragma omp parallel for schedule(static)
    for (int h = 0; h < H; h++) {
        float A = expf(t->A_log[h]), dA = 0.0f, dbias = 0.0f;
        for (long r = 0; r < n; r++) {
            long i = r * H + h;
            float x = t->a[i] + t->dt_bias[h], dx = -A * softplus_grad(x) * t->dg[i];
            dA += t->dg[i] * (-A * softplus(x));
            dbias += dx;
            t->da[i] += dx;
            float s = sigmoidf(t->b[i]);
            t->db[i] += t->dbeta[i] * s * (1.0f - s);
        }
        t->dA_log[h] += dA;
        t->ddt_bias[h] += dbias;
    }
}
