// The gated attention's CUDA ops (kernels/cuda/output_gate.cu) against their definition on the
// host, as runtime/engine/attn_cpu.c computes them: the split of q_proj's [rows, heads, 2, hd]
// into the query (fp32 and bf16) and the gates' logits, the join of their gradients, and
// att x sigmoid(gate) with its backward in place (datt over dout, dgate over the logits). bf16
// outputs within bf16's rounding, fp32 ones exact or within fp32's; odd sizes (a head of 24, 7
// rows). Exit 77 without a CUDA device.
#define TEST_RNG_SEED 0x3C6EF372FE94F82Bull
#include "kernels/cuda/kernels_cuda.h"
#include "tests/check.h"
#include "tests/cuda_test_util.h"
#include <math.h>

enum { ROWS = 7, HEADS = 3, HD = 24, N = ROWS * HEADS * HD };

static float *to_device(const float *h, long n) {
    float *d = dmalloc(sizeof(float) * n);
    CUDA_CHECK(cudaMemcpy(d, h, sizeof(float) * n, cudaMemcpyHostToDevice));
    return d;
}
static bf16 *to_device_bf16(const float *h, long n) {
    bf16 *tmp = hmalloc(sizeof(bf16) * n), *d = dmalloc(sizeof(bf16) * n);
    for (long i = 0; i < n; i++) tmp[i] = bf16_from_float(h[i]);
    CUDA_CHECK(cudaMemcpy(d, tmp, sizeof(bf16) * n, cudaMemcpyHostToDevice));
    return d;
}
static float *from_device(const float *d, long n) {
    float *h = hmalloc(sizeof(float) * n);
    CUDA_CHECK(cudaMemcpy(h, d, sizeof(float) * n, cudaMemcpyDeviceToHost));
    return h;
}
static float *from_device_bf16(const bf16 *d, long n) {
    bf16 *tmp = hmalloc(sizeof(bf16) * n);
    float *h = hmalloc(sizeof(float) * n);
    CUDA_CHECK(cudaMemcpy(tmp, d, sizeof(bf16) * n, cudaMemcpyDeviceToHost));
    for (long i = 0; i < n; i++) h[i] = bf16_to_float(tmp[i]);
    return h;
}

// The largest |got - want| / (|want| + floor) over n values.
static double worst(const float *got, const float *want, long n, double floor) {
    double w = 0;
    for (long i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / (fabs(want[i]) + floor);
        w = e > w ? e : w;
    }
    return w;
}

// Element i of [rows x heads, hd] at half (0 query, 1 gate) of q_proj's row.
static long qg_at(long i, int half) {
    return (2 * (i / HD) + half) * HD + i % HD;
}

static void split_and_join(void) {
    float *qg = rand_vec(2L * N, 2.0f), *q = dmalloc(sizeof(float) * N);
    float *gate = dmalloc(sizeof(float) * N), *dqg_in = to_device(qg, 2L * N);
    bf16 *qb = dmalloc(sizeof(bf16) * N);
    cuda_output_gate_split(q, 1, gate, dqg_in, ROWS, HEADS, HD, 0);
    cuda_output_gate_split(qb, 0, gate, dqg_in, ROWS, HEADS, HD, 0);
    float *hq = from_device(q, N), *hg = from_device(gate, N), *hqb = from_device_bf16(qb, N);
    int exact = 1;
    for (long i = 0; i < N; i++)
        exact &= hq[i] == qg[qg_at(i, 0)] && hg[i] == qg[qg_at(i, 1)] &&
                 hqb[i] == bf16_to_float(bf16_from_float(qg[qg_at(i, 0)]));
    check(exact, "split: the query (fp32 and bf16) and the gates' logits from q_proj's rows");
    float *dq = rand_bf16_vec(N, 1.0f), *dgate = rand_bf16_vec(N, 1.0f);
    bf16 *dqg = dmalloc(sizeof(bf16) * 2 * N);
    cuda_output_gate_join(dqg, to_device_bf16(dq, N), to_device(dgate, N), ROWS, HEADS, HD, 0);
    float *h = from_device_bf16(dqg, 2L * N);
    exact = 1;
    for (long i = 0; i < N; i++) exact &= h[qg_at(i, 0)] == dq[i] && h[qg_at(i, 1)] == dgate[i];
    check(exact, "join: the query's and the gates' gradients into q_proj's rows");
}

static void gate_forward_backward(void) {
    float *att = rand_bf16_vec(N, 1.0f), *logit = rand_vec(N, 4.0f), *d = rand_bf16_vec(N, 1.0f);
    float *out_ref = hmalloc(sizeof(float) * N), *datt_ref = hmalloc(sizeof(float) * N);
    float *dgate_ref = hmalloc(sizeof(float) * N);
    for (long i = 0; i < N; i++) {
        float s = 1.0f / (1.0f + expf(-logit[i]));
        out_ref[i] = att[i] * s, datt_ref[i] = d[i] * s;
        dgate_ref[i] = d[i] * att[i] * s * (1.0f - s);
    }
    bf16 *datt = to_device_bf16(att, N), *dout = dmalloc(sizeof(bf16) * N);
    float *dlogit = to_device(logit, N);
    cuda_output_gate_forward(dout, datt, dlogit, N, 0);
    double e = worst(from_device_bf16(dout, N), out_ref, N, 1e-3);
    check(e < 8e-3, "forward: att x sigmoid(gate) within bf16 rounding (%.2e)", e);
    bf16 *dd = to_device_bf16(d, N); // in place, as attn_cuda.c calls it
    cuda_output_gate_backward(dd, dlogit, dd, datt, dlogit, N, 0);
    e = worst(from_device_bf16(dd, N), datt_ref, N, 1e-3);
    check(e < 8e-3, "backward: datt = d x sigmoid(gate), in place over d (%.2e)", e);
    e = worst(from_device(dlogit, N), dgate_ref, N, 1e-6);
    check(e < 1e-5, "backward: dgate = d x att x s (1 - s), in place over the logits (%.2e)", e);
}

int main(void) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("SKIPPED: no CUDA device\n");
        return 77;
    }
    split_and_join();
    gate_forward_backward();
    release_all();
    return tests_summary();
}
