// The experts' linear products, each expert on its own rows of the expert-sorted activations.
//
// Default: one cuda_linear_* call per expert that has rows (cuBLASLt through cuda_gemm, its
// plan cache and workspace). The row counts come from the host, copied down once per layer
// chunk, because launching a GEMM needs its shape on the host.
//
// MT_EXPERT_GEMM=grouped: one cublasGemmGroupedBatchedEx call, each expert its own group of one
// problem (their row counts differ). cuBLAS takes the A, B and C pointers as device arrays, so
// they go down through a device buffer owned here; the copy is ordered on the stream before the
// call, so a later call on the same stream cannot overwrite what an earlier one still reads, but
// two streams at once could (the same rule as cuda_gemm's workspace). cuBLAS 13.1 runs it for
// bf16 inputs with bf16 outputs and fp32 compute, and refuses fp32 outputs (NOT_SUPPORTED, seen
// on the H200): the fp32 products (the weight gradients) run the loop instead, said once on
// stderr. cuBLASLt 13.1 has no grouped matmul (only same-shape batches).
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/cuda/ktime.cuh"
#include "kernels/cuda/cuda_check.h"

#include <cublas_v2.h>
#include <stdlib.h>
#include <string.h>

namespace {

struct grouped_state {
    int mode = -1; // -1 not read yet; 0 the per-expert loop; 1 grouped
    cublasHandle_t handle = nullptr;
    void **dptr = nullptr; // device: A, B and C pointer arrays, `cap` of each
    int cap = 0;
    bool refused[2] = {false, false}; // cuBLAS refused bf16 (0) or fp32 (1) outputs
};
grouped_state gs;

bool grouped_on() {
    if (gs.mode < 0) {
        const char *e = getenv("MT_EXPERT_GEMM");
        gs.mode = e && strcmp(e, "grouped") == 0;
    }
    return gs.mode == 1;
}

// One product in cuBLAS (column-major) terms: C[m, n] = op(A)[m, k] . op(B)[k, n] + beta C.
struct product {
    const void *a, *b;
    void *c;
    int m, n, k, lda, ldb, ldc;
};

// The products as one grouped call; false where cuBLAS refuses (the caller loops instead).
bool grouped_run(cublasOperation_t ta, cublasOperation_t tb, const product *p, int G, int c_f32,
                 float beta, cudaStream_t stream) {
    if (gs.refused[c_f32]) return false;
    if (!gs.handle) CUBLAS_CHECK(cublasCreate(&gs.handle));
    if (G > gs.cap) {
        if (gs.dptr) CUDA_CHECK(cudaFree(gs.dptr)); // waits for the calls still reading it
        CUDA_CHECK(cudaMalloc(&gs.dptr, 3 * sizeof(void *) * G));
        gs.cap = G;
    }
    // Host arrays: pageable, so cudaMemcpyAsync has taken their contents when it returns.
    size_t n = G;
    void **hp = (void **)malloc(3 * sizeof(void *) * n);
    cublasOperation_t *ops = (cublasOperation_t *)malloc(2 * sizeof(cublasOperation_t) * n);
    int *dims = (int *)malloc(7 * sizeof(int) * n); // m, n, k, lda, ldb, ldc, group size
    float *scal = (float *)malloc(2 * sizeof(float) * n);
    if (!hp || !ops || !dims || !scal) {
        fprintf(stderr, "megatrain: cuda_experts: out of host memory\n");
        exit(1);
    }
    for (int i = 0; i < G; i++) {
        hp[i] = (void *)p[i].a, hp[n + i] = (void *)p[i].b, hp[2 * n + i] = p[i].c;
        ops[i] = ta, ops[n + i] = tb;
        dims[i] = p[i].m, dims[n + i] = p[i].n, dims[2 * n + i] = p[i].k;
        dims[3 * n + i] = p[i].lda, dims[4 * n + i] = p[i].ldb, dims[5 * n + i] = p[i].ldc;
        dims[6 * n + i] = 1;
        scal[i] = 1.0f, scal[n + i] = beta;
    }
    CUDA_CHECK(
        cudaMemcpyAsync(gs.dptr, hp, 3 * sizeof(void *) * n, cudaMemcpyHostToDevice, stream));
    CUBLAS_CHECK(cublasSetStream(gs.handle, stream));
    cublasStatus_t rc = cublasGemmGroupedBatchedEx(
        gs.handle, ops, ops + n, dims, dims + n, dims + 2 * n, scal, (const void *const *)gs.dptr,
        CUDA_R_16BF, dims + 3 * n, (const void *const *)(gs.dptr + n), CUDA_R_16BF, dims + 4 * n,
        scal + n, gs.dptr + 2 * n, c_f32 ? CUDA_R_32F : CUDA_R_16BF, dims + 5 * n, G, dims + 6 * n,
        CUBLAS_COMPUTE_32F);
    free(hp), free(ops), free(dims), free(scal);
    if (rc == CUBLAS_STATUS_SUCCESS) return true;
    // A refusal is checked before any work is queued: the loop can still run the products.
    if (rc != CUBLAS_STATUS_NOT_SUPPORTED && rc != CUBLAS_STATUS_INVALID_VALUE) CUBLAS_CHECK(rc);
    fprintf(stderr,
            "megatrain: MT_EXPERT_GEMM=grouped: cuBLAS refuses bf16 inputs with %s output "
            "(status %d); those products run one per expert\n",
            c_f32 ? "fp32" : "bf16", (int)rc);
    gs.refused[c_f32] = true;
    return false;
}

int experts_with_rows(int E, const int32_t *counts) {
    int G = 0;
    for (int e = 0; e < E; e++) G += counts[e] > 0;
    return G;
}

product *products_alloc(int G) {
    product *p = (product *)malloc(sizeof(product) * (G ? G : 1));
    if (!p) {
        fprintf(stderr, "megatrain: cuda_experts: out of host memory\n");
        exit(1);
    }
    return p;
}

long total_rows(int E, const int32_t *counts) {
    long r = 0;
    for (int e = 0; e < E; e++) r += counts[e] > 0 ? counts[e] : 0;
    return r;
}

} // namespace

// The profile: one shape per call (the experts' row counts vary from step to step); in the loop
// the per-expert GEMMs count the flops, in the grouped call this does.
extern "C" void cuda_experts_forward(cuda_gemm *g, void *out, int out_f32, float beta,
                                     const bf16 *in, const bf16 *w, int E,
                                     const int32_t *counts_host, const int32_t *offsets_host,
                                     int ic, int oc, cudaStream_t stream) {
    KtScope kt(stream, KT_GEMM);
    const size_t es = out_f32 ? sizeof(float) : sizeof(bf16);
    const bool grouped = grouped_on() && !gs.refused[out_f32 ? 1 : 0];
    kt_work(stream, KT_GEMM, grouped ? 2.0 * total_rows(E, counts_host) * ic * oc : 0, 0,
            "experts forward E %d ic %d oc %d -> %s", E, ic, oc, out_f32 ? "fp32" : "bf16");
    if (grouped) {
        // out_e^T[oc, rows] = w_e^T(op T)[oc, ic] . in_e^T[ic, rows]  (gemm.cu's "TN")
        int G = 0;
        product *p = products_alloc(experts_with_rows(E, counts_host));
        for (int e = 0; e < E; e++)
            if (counts_host[e] > 0)
                p[G++] = {w + (size_t)e * oc * ic,
                          in + (size_t)offsets_host[e] * ic,
                          (char *)out + (size_t)offsets_host[e] * oc * es,
                          oc,
                          counts_host[e],
                          ic,
                          ic,
                          ic,
                          oc};
        bool done =
            G == 0 || grouped_run(CUBLAS_OP_T, CUBLAS_OP_N, p, G, out_f32 ? 1 : 0, beta, stream);
        free(p);
        if (done) return;
    }
    cuda_gemm_bucket_rows(g, 1);
    for (int e = 0; e < E; e++)
        if (counts_host[e] > 0)
            cuda_linear_forward(g, (char *)out + (size_t)offsets_host[e] * oc * es, out_f32, beta,
                                in + (size_t)offsets_host[e] * ic, w + (size_t)e * oc * ic,
                                counts_host[e], ic, oc, stream);
    cuda_gemm_bucket_rows(g, 0);
}

extern "C" void cuda_experts_backward_input(cuda_gemm *g, void *din, int din_f32, float beta,
                                            const bf16 *dout, const bf16 *w, int E,
                                            const int32_t *counts_host, const int32_t *offsets_host,
                                            int ic, int oc, cudaStream_t stream) {
    KtScope kt(stream, KT_GEMM);
    const size_t es = din_f32 ? sizeof(float) : sizeof(bf16);
    const bool grouped = grouped_on() && !gs.refused[din_f32 ? 1 : 0];
    kt_work(stream, KT_GEMM, grouped ? 2.0 * total_rows(E, counts_host) * ic * oc : 0, 0,
            "experts backward input E %d ic %d oc %d -> %s", E, ic, oc, din_f32 ? "fp32" : "bf16");
    if (grouped) {
        // din_e^T[ic, rows] = w_e^T[ic, oc] . dout_e^T[oc, rows]  ("NN")
        int G = 0;
        product *p = products_alloc(experts_with_rows(E, counts_host));
        for (int e = 0; e < E; e++)
            if (counts_host[e] > 0)
                p[G++] = {w + (size_t)e * oc * ic,
                          dout + (size_t)offsets_host[e] * oc,
                          (char *)din + (size_t)offsets_host[e] * ic * es,
                          ic,
                          counts_host[e],
                          oc,
                          ic,
                          oc,
                          ic};
        bool done =
            G == 0 || grouped_run(CUBLAS_OP_N, CUBLAS_OP_N, p, G, din_f32 ? 1 : 0, beta, stream);
        free(p);
        if (done) return;
    }
    cuda_gemm_bucket_rows(g, 1);
    for (int e = 0; e < E; e++)
        if (counts_host[e] > 0)
            cuda_linear_backward_input(g, (char *)din + (size_t)offsets_host[e] * ic * es, din_f32,
                                       beta, dout + (size_t)offsets_host[e] * oc,
                                       w + (size_t)e * oc * ic, counts_host[e], ic, oc, stream);
    cuda_gemm_bucket_rows(g, 0);
}

extern "C" void cuda_experts_backward_weight(cuda_gemm *g, float *dw, const bf16 *dout,
                                             const bf16 *in, int E, const int32_t *counts_host,
                                             const int32_t *offsets_host, int ic, int oc,
                                             cudaStream_t stream) {
    KtScope kt(stream, KT_GEMM);
    const bool grouped = grouped_on() && !gs.refused[1];
    kt_work(stream, KT_GEMM, grouped ? 2.0 * total_rows(E, counts_host) * ic * oc : 0, 0,
            "experts backward weight E %d ic %d oc %d", E, ic, oc);
    if (grouped) {
        // dw_e^T[ic, oc] += in_e^T[ic, rows] . dout_e(op T)[rows, oc]  ("NT")
        int G = 0;
        product *p = products_alloc(experts_with_rows(E, counts_host));
        for (int e = 0; e < E; e++)
            if (counts_host[e] > 0)
                p[G++] = {in + (size_t)offsets_host[e] * ic,
                          dout + (size_t)offsets_host[e] * oc,
                          dw + (size_t)e * oc * ic,
                          ic,
                          oc,
                          counts_host[e],
                          ic,
                          oc,
                          ic};
        bool done = G == 0 || grouped_run(CUBLAS_OP_N, CUBLAS_OP_T, p, G, 1, 1.0f, stream);
        free(p);
        if (done) return;
    }
    cuda_gemm_bucket_rows(g, 1);
    for (int e = 0; e < E; e++)
        if (counts_host[e] > 0)
            cuda_linear_backward_weight(
                g, dw + (size_t)e * oc * ic, dout + (size_t)offsets_host[e] * oc,
                in + (size_t)offsets_host[e] * ic, counts_host[e], ic, oc, stream);
    cuda_gemm_bucket_rows(g, 0);
}
