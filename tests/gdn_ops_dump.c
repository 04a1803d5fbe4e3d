// Writes what our Gated DeltaNet kernels give on fixed inputs, for tests/gdn_ops_parity.py to
// hold against transformers (Qwen3_5GatedDeltaNet and the functions it calls):
//   gdn_ops_dump DIR
//   DIR/dims.i32        B, T, HK, H, dk, dv, K, D, then row 1's document starts (row 0: one);
//   DIR/<op>_in.f32     each op's inputs and dout, DIR/<op>_out.f32 its outputs and gradients,
//                       each the arrays one after the other in the order listed below;
//   ops: conv (the causal conv + SiLU), delta (l2norm of q and k then the chunked rule, and
//   delta_rec.f32 the same through the recurrent one), gates, norm (the gated RMSNorm), and
//   layer (the whole Qwen3_5GatedDeltaNet composed from these and linear.c).
#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cpu/kernels_gdn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 150, HK = 2, H = 4, DK = 16, DV = 8, K = 4, D = 32, DOCS = 3 };
enum { N = B * T, C = 2 * HK * DK + H * DV, NQK = N * HK * DK, NV = N * H * DV, NG = N * H };
static const int STARTS[DOCS] = {0, 30, 110};
static const float L2_EPS = 1e-6f, NORM_EPS = 1e-6f;
static int32_t doc_start[B * T];
static const char *dir;

static void fail(const char *path) {
    fprintf(stderr, "gdn_ops_dump: cannot write %s\n", path);
    exit(1);
}

// Writes arrays[i] (counts[i] elements of 4 bytes each) one after the other to DIR/name.
typedef struct {
    const void *data;
    long count;
} array;
static void write_arrays(const char *name, const array *arrays, int n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) fail(path);
    for (int i = 0; i < n; i++)
        if (fwrite(arrays[i].data, 4, arrays[i].count, f) != (size_t)arrays[i].count) fail(path);
    if (fclose(f) != 0) fail(path);
}
#define WRITE(name, ...)                                                                           \
    write_arrays(name, (const array[]){__VA_ARGS__},                                               \
                 sizeof((const array[]){__VA_ARGS__}) / sizeof(array))

static uint64_t rng_state = 0x13198A2E03707344ull;
static float *rand_vec(long n, float lo, float hi) { // splitmix64, 24 bits
    float *p = malloc(sizeof(float) * n);
    for (long i = 0; i < n; i++) {
        uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        p[i] = lo + (hi - lo) * (float)((z >> 40) * 0x1.0p-24);
    }
    return p;
}
static float *zeros(long n) {
    float *p = calloc(n, sizeof(float));
    if (!p) exit(1);
    return p;
}

static void dump_dims(void) {
    int32_t dims[] = {B, T, HK, H, DK, DV, K, D, STARTS[0], STARTS[1], STARTS[2]};
    WRITE("dims.i32", {dims, sizeof dims / sizeof *dims});
}

// conv_in: x [B, T, C], w [C, K], dout [B, T, C];  conv_out: out, dx, dw.
static void dump_conv(void) {
    conv1d_args a = {B, T, C, K, doc_start};
    float *x = rand_vec(N * C, -2, 2), *w = rand_vec(C * K, -1, 1), *dout = rand_vec(N * C, -1, 1);
    float *out = zeros(N * C), *dx = zeros(N * C), *dw = zeros(C * K);
    causal_conv1d_silu_forward(out, x, w, &a);
    causal_conv1d_silu_backward(dx, dw, dout, x, w, &a);
    WRITE("conv_in.f32", {x, N * C}, {w, C * K}, {dout, N * C});
    WRITE("conv_out.f32", {out, N * C}, {dx, N * C}, {dw, C * K});
    free(x), free(w), free(dout), free(out), free(dx), free(dw);
}

// The rule as the module calls it: q and k l2-normalized (eps 1e-6), q scaled by 1/sqrt(dk).
// grads: dq, dk, dv, dg, dbeta of the raw (not normalized) q and k.
static void delta_with_l2norm(const gdn_args *a, int chunked, const float *q, const float *k,
                              const float *v, const float *g, const float *beta, const float *dout,
                              float *out, float *grads) {
    float *qn = zeros(NQK), *kn = zeros(NQK), *rq = zeros(N * HK), *rk = zeros(N * HK);
    float *dqn = zeros(NQK), *dkn = zeros(NQK);
    l2norm_forward(qn, rq, q, N * HK, DK, L2_EPS);
    l2norm_forward(kn, rk, k, N * HK, DK, L2_EPS);
    gdn_tensors t = {qn,
                     kn,
                     v,
                     g,
                     beta,
                     out,
                     dout,
                     dqn,
                     dkn,
                     grads + 2 * NQK,
                     grads + 2 * NQK + NV,
                     grads + 2 * NQK + NV + NG};
    (chunked ? gated_delta_chunked_forward : gated_delta_recurrent_forward)(a, &t);
    (chunked ? gated_delta_chunked_backward : gated_delta_recurrent_backward)(a, &t);
    l2norm_backward(grads, dqn, q, rq, N * HK, DK);
    l2norm_backward(grads + NQK, dkn, k, rk, N * HK, DK);
    free(qn), free(kn), free(rq), free(rk), free(dqn), free(dkn);
}

// delta_in: q, k [B, T, HK, dk], v [B, T, H, dv], g, beta [B, T, H], dout [B, T, H, dv];
// delta_out (chunked) and delta_rec (recurrent): out, dq, dk, dv, dg, dbeta.
static void dump_delta(void) {
    gdn_args a = {B, T, H, HK, DK, DV, doc_start, 1.0f / sqrtf((float)DK)};
    float *q = rand_vec(NQK, -1, 1), *k = rand_vec(NQK, -1, 1), *v = rand_vec(NV, -1, 1);
    float *g = rand_vec(NG, -0.7f, -0.01f), *beta = rand_vec(NG, 0.05f, 0.95f);
    float *dout = rand_vec(NV, -1, 1), *out = zeros(NV), *grads = zeros(2 * NQK + NV + 2 * NG);
    WRITE("delta_in.f32", {q, NQK}, {k, NQK}, {v, NV}, {g, NG}, {beta, NG}, {dout, NV});
    for (int chunked = 1; chunked >= 0; chunked--) {
        memset(grads, 0, sizeof(float) * (2 * NQK + NV + 2 * NG));
        delta_with_l2norm(&a, chunked, q, k, v, g, beta, dout, out, grads);
        WRITE(chunked ? "delta_out.f32" : "delta_rec.f32", {out, NV},
              {grads, 2 * NQK + NV + 2 * NG});
    }
    free(q), free(k), free(v), free(g), free(beta), free(dout), free(out), free(grads);
}

// gates_in: a, b [B, T, H], A_log, dt_bias [H], dg, dbeta [B, T, H] (a + dt_bias over
// [-30, 30]: both sides of softplus's threshold);  gates_out: g, beta, da, db, dA_log, ddt_bias.
static void dump_gates(void) {
    float *A_log = rand_vec(H, -4, 2.7f), *dt_bias = rand_vec(H, -1, 1);
    gdn_gate_tensors t = {
        rand_vec(NG, -30, 30), rand_vec(NG, -6, 6), A_log,     dt_bias,   zeros(NG), zeros(NG),
        rand_vec(NG, -1, 1),   rand_vec(NG, -1, 1), zeros(NG), zeros(NG), zeros(H),  zeros(H)};
    gdn_gates_forward(&t, N, H);
    gdn_gates_backward(&t, N, H);
    WRITE("gates_in.f32", {t.a, NG}, {t.b, NG}, {A_log, H}, {dt_bias, H}, {t.dg, NG},
          {t.dbeta, NG});
    WRITE("gates_out.f32", {t.g, NG}, {t.beta, NG}, {t.da, NG}, {t.db, NG}, {t.dA_log, H},
          {t.ddt_bias, H});
    free((void *)t.a), free((void *)t.b), free(A_log), free(dt_bias), free(t.g), free(t.beta);
    free((void *)t.dg), free((void *)t.dbeta), free(t.da), free(t.db), free(t.dA_log),
        free(t.ddt_bias);
}

// norm_in: x, z [B * T * H, dv], weight [dv], dout;  norm_out: out, dx, dz, dweight.
static void dump_norm(void) {
    float *x = rand_vec(NV, -2, 2), *z = rand_vec(NV, -4, 4), *w = rand_vec(DV, 0.5f, 1.5f);
    float *dout = rand_vec(NV, -1, 1), *out = zeros(NV), *rstd = zeros(NG), *dx = zeros(NV),
          *dz = zeros(NV), *dw = zeros(DV);
    rmsnorm_gated_forward(out, rstd, x, z, w, NG, DV, NORM_EPS);
    rmsnorm_gated_backward(dx, dz, dw, dout, x, z, w, rstd, NG, DV);
    WRITE("norm_in.f32", {x, NV}, {z, NV}, {w, DV}, {dout, NV});
    WRITE("norm_out.f32", {out, NV}, {dx, NV}, {dz, NV}, {dw, DV});
    free(x), free(z), free(w), free(dout), free(out), free(rstd), free(dx), free(dz), free(dw);
}

// ---- the whole layer ---------------------------------------------------------------------

// Qwen3_5GatedDeltaNet's parameters, in the order of layer_in and of their gradients.
enum { P_QKV, P_Z, P_B, P_A, P_CONV, P_DT_BIAS, P_A_LOG, P_NORM, P_OUT, PARAMS };
static const long PARAM_SIZE[PARAMS] = {C * D, H *DV *D, H *D, H *D, C *K, H, H, DV, D *H *DV};
static const float PARAM_RANGE[PARAMS] = {0.3f, 0.3f, 0.3f, 0.3f, 0.5f, 1.0f, 1.0f, 0.5f, 0.3f};

typedef struct {
    float *hidden, *p[PARAMS];
    float *mixed, *z, *bp, *ap, *conv, *q, *k, *v, *qn, *kn, *rq, *rk, *g, *beta, *o, *y, *rstd,
        *out;
} layer_acts;

// Columns [c0, c0 + w) of x [N, C] into to [N, w] (add: to x's columns from [N, w], adding).
static void columns(float *to, const float *x, int c0, int w, int add) {
    for (long r = 0; r < N; r++)
        for (int c = 0; c < w; c++) {
            if (add)
                to[r * C + c0 + c] += x[r * w + c];
            else
                to[r * w + c] = x[r * C + c0 + c];
        }
}

// The module's forward: in projections, conv + SiLU, split into q, k, v, l2norm, gates, the
// chunked rule, gated RMSNorm, out projection.
static void layer_forward(layer_acts *l) {
    conv1d_args ca = {B, T, C, K, doc_start};
    gdn_args ga = {B, T, H, HK, DK, DV, doc_start, 1.0f / sqrtf((float)DK)};
    linear_forward(l->mixed, l->hidden, l->p[P_QKV], NULL, N, D, C);
    linear_forward(l->z, l->hidden, l->p[P_Z], NULL, N, D, H * DV);
    linear_forward(l->bp, l->hidden, l->p[P_B], NULL, N, D, H);
    linear_forward(l->ap, l->hidden, l->p[P_A], NULL, N, D, H);
    causal_conv1d_silu_forward(l->conv, l->mixed, l->p[P_CONV], &ca);
    columns(l->q, l->conv, 0, HK * DK, 0);
    columns(l->k, l->conv, HK * DK, HK * DK, 0);
    columns(l->v, l->conv, 2 * HK * DK, H * DV, 0);
    l2norm_forward(l->qn, l->rq, l->q, N * HK, DK, L2_EPS);
    l2norm_forward(l->kn, l->rk, l->k, N * HK, DK, L2_EPS);
    gdn_gate_tensors gt = {.a = l->ap,
                           .b = l->bp,
                           .A_log = l->p[P_A_LOG],
                           .dt_bias = l->p[P_DT_BIAS],
                           .g = l->g,
                           .beta = l->beta};
    gdn_gates_forward(&gt, N, H);
    gdn_tensors t = {.q = l->qn, .k = l->kn, .v = l->v, .g = l->g, .beta = l->beta, .out = l->o};
    gated_delta_chunked_forward(&ga, &t);
    rmsnorm_gated_forward(l->y, l->rstd, l->o, l->z, l->p[P_NORM], NG, DV, NORM_EPS);
    linear_forward(l->out, l->y, l->p[P_OUT], NULL, N, H * DV, D);
}

// Back through the same steps; dhidden and dp[] accumulate.
static void layer_backward(const layer_acts *l, const float *dout, float *dhidden, float **dp) {
    conv1d_args ca = {B, T, C, K, doc_start};
    gdn_args ga = {B, T, H, HK, DK, DV, doc_start, 1.0f / sqrtf((float)DK)};
    float *dy = zeros(NV), *dO = zeros(NV), *dz = zeros(NV), *dqn = zeros(NQK), *dkn = zeros(NQK);
    float *dq = zeros(NQK), *dk = zeros(NQK), *dv = zeros(NV), *dg = zeros(NG), *dbeta = zeros(NG);
    float *dap = zeros(NG), *dbp = zeros(NG), *dconv = zeros(N * C), *dmixed = zeros(N * C);
    linear_backward(dy, dp[P_OUT], NULL, dout, l->y, l->p[P_OUT], N, H * DV, D);
    rmsnorm_gated_backward(dO, dz, dp[P_NORM], dy, l->o, l->z, l->p[P_NORM], l->rstd, NG, DV);
    gdn_tensors t = {l->qn, l->kn, l->v, l->g, l->beta, NULL, dO, dqn, dkn, dv, dg, dbeta};
    gated_delta_chunked_backward(&ga, &t);
    l2norm_backward(dq, dqn, l->q, l->rq, N * HK, DK);
    l2norm_backward(dk, dkn, l->k, l->rk, N * HK, DK);
    gdn_gate_tensors gt = {l->ap, l->bp, l->p[P_A_LOG], l->p[P_DT_BIAS], NULL,         NULL, dg,
                           dbeta, dap,   dbp,           dp[P_A_LOG],     dp[P_DT_BIAS]};
    gdn_gates_backward(&gt, N, H);
    columns(dconv, dq, 0, HK * DK, 1);
    columns(dconv, dk, HK * DK, HK * DK, 1);
    columns(dconv, dv, 2 * HK * DK, H * DV, 1);
    causal_conv1d_silu_backward(dmixed, dp[P_CONV], dconv, l->mixed, l->p[P_CONV], &ca);
    linear_backward(dhidden, dp[P_QKV], NULL, dmixed, l->hidden, l->p[P_QKV], N, D, C);
    linear_backward(dhidden, dp[P_Z], NULL, dz, l->hidden, l->p[P_Z], N, D, H * DV);
    linear_backward(dhidden, dp[P_B], NULL, dbp, l->hidden, l->p[P_B], N, D, H);
    linear_backward(dhidden, dp[P_A], NULL, dap, l->hidden, l->p[P_A], N, D, H);
    float *temps[] = {dy, dO, dz, dqn, dkn, dq, dk, dv, dg, dbeta, dap, dbp, dconv, dmixed};
    for (size_t i = 0; i < sizeof temps / sizeof *temps; i++) free(temps[i]);
}

// layer_in: hidden [B, T, D], the parameters (PARAM_SIZE order), dout [B, T, D];
// layer_out: out, dhidden, the parameters' gradients.
static void dump_layer(void) {
    layer_acts l = {.hidden = rand_vec(N * D, -1, 1)};
    for (int i = 0; i < PARAMS; i++)
        l.p[i] = rand_vec(PARAM_SIZE[i], -PARAM_RANGE[i], PARAM_RANGE[i]);
    for (int i = 0; i < DV; i++) l.p[P_NORM][i] += 1.0f;
    float **acts[] = {&l.mixed, &l.z,  &l.bp, &l.ap, &l.conv, &l.q, &l.k, &l.v,    &l.qn,
                      &l.kn,    &l.rq, &l.rk, &l.g,  &l.beta, &l.o, &l.y, &l.rstd, &l.out};
    long sizes[] = {N * C, NV,     NG,     NG, N * C, NQK, NQK, NV, NQK,
                    NQK,   N * HK, N * HK, NG, NG,    NV,  NV,  NG, N * D};
    for (size_t i = 0; i < sizeof acts / sizeof *acts; i++) *acts[i] = zeros(sizes[i]);
    float *dout = rand_vec(N * D, -1, 1), *dhidden = zeros(N * D), *dp[PARAMS];
    for (int i = 0; i < PARAMS; i++) dp[i] = zeros(PARAM_SIZE[i]);
    layer_forward(&l);
    layer_backward(&l, dout, dhidden, dp);
    array in[PARAMS + 2] = {{l.hidden, N * D}},
                      out[PARAMS + 2] = {{l.out, N * D}, {dhidden, N * D}};
    for (int i = 0; i < PARAMS; i++) {
        in[i + 1] = (array){l.p[i], PARAM_SIZE[i]};
        out[i + 2] = (array){dp[i], PARAM_SIZE[i]};
    }
    in[PARAMS + 1] = (array){dout, N * D};
    write_arrays("layer_in.f32", in, PARAMS + 2);
    write_arrays("layer_out.f32", out, PARAMS + 2);
    for (size_t i = 0; i < sizeof acts / sizeof *acts; i++) free(*acts[i]);
    for (int i = 0; i < PARAMS; i++) free(l.p[i]), free(dp[i]);
    free(l.hidden), free(dout), free(dhidden);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: gdn_ops_dump DIR\n");
        return 2;
    }
    dir = argv[1];
    for (int t = 0; t < T; t++) { // row 0 one document, row 1 from STARTS
        doc_start[t] = 0;
        for (int d = 0; d < DOCS; d++)
            if (t >= STARTS[d]) doc_start[T + t] = STARTS[d];
    }
    dump_dims();
    dump_conv();
    dump_delta();
    dump_gates();
    dump_norm();
    dump_layer();
    return 0;
}
