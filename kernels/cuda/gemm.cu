// bf16 tensor-core GEMMs through cuBLASLt: A and B bf16, fp32 compute and scale, C = D fp32 or
// bf16 (C is D, so beta = 1 accumulates in place).
//
// Row-major on a column-major library: a row-major [r, c] matrix with row stride ld is, byte
// for byte, the column-major [c, r] matrix with leading dimension ld, i.e. its transpose. So the
// row-major product C = op(A) . op(B) is run as the column-major product
// C^T = op(B)^T . op(A)^T: pass B as cuBLAS's A and A as cuBLAS's B, keep each one's transpose
// flag, and swap M and N. For the three linear products (cuBLAS m, n, k; op of its A, B):
//   forward       out[n,oc] = in . w^T    ->  out^T = op_T(w) . in^T     m=oc n=n  k=ic  "TN"
//   input grad    din[n,ic] = dout . w    ->  din^T = w^T . dout^T       m=ic n=n  k=oc  "NN"
//   weight grad   dw[oc,ic] = dout^T . in ->  dw^T = in^T . op_T(dout)   m=ic n=oc k=n   "NT"
// where each "w^T", "in^T", "dout^T" is just the row-major buffer read as column-major.
//
// The engine calls the same few shapes thousands of times, and cublasLtMatmulAlgoGetHeuristic
// costs far more than a small matmul, so descriptors, layouts and the chosen algorithm are
// cached per shape in a small table. Pointer alignment is part of the key: cuBLASLt algorithms
// may need aligned operands (the heuristic assumes 256 bytes unless told otherwise), and
// chunked callers (the classifier) pass offset pointers.
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/cuda/ktime.cuh"
#include "kernels/cuda/cuda_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace {

// Plans live in an open-addressed table hashed on the key: the experts' products add a few
// shapes for each power-of-two row bucket, and a linear scan of a full table on every call would
// cost the host more than a small matmul. Full (3/4), it is emptied and refilled.
const int PLANS = 1024;
const int CANDIDATES = 16; // the heuristic's algorithms asked for: its best, and (benchmarks) more

// One matmul, in cuBLAS (column-major) terms.
struct gemm_key {
    int ta, tb, m, n, k, c_f32;
    long lda, ldb, ldc;
    unsigned align_a, align_b, align_c;
};

struct gemm_plan {
    gemm_key key;
    int valid;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    int candidates; // how many algorithms the heuristic offered
};

bool key_equal(const gemm_key &a, const gemm_key &b) {
    return a.ta == b.ta && a.tb == b.tb && a.m == b.m && a.n == b.n && a.k == b.k &&
           a.c_f32 == b.c_f32 && a.lda == b.lda && a.ldb == b.ldb && a.ldc == b.ldc &&
           a.align_a == b.align_a && a.align_b == b.align_b && a.align_c == b.align_c;
}

// Largest power of two (up to 256) that divides the address.
unsigned ptr_align(const void *p) {
    uintptr_t u = (uintptr_t)p;
    unsigned a = 256;
    while (a > 1 && (u & (a - 1))) a /= 2;
    return a;
}

[[noreturn]] void gemm_die(const char *what, const gemm_key &k) {
    fprintf(stderr,
            "megatrain: cuda_gemm: %s (cuBLAS m=%d n=%d k=%d op=%c%c lda=%ld ldb=%ld ldc=%ld "
            "out=%s align=%u/%u/%u)\n",
            what, k.m, k.n, k.k, k.ta ? 'T' : 'N', k.tb ? 'T' : 'N', k.lda, k.ldb, k.ldc,
            k.c_f32 ? "fp32" : "bf16", k.align_a, k.align_b, k.align_c);
    exit(1);
}

// A stored column-major matrix that op() turns into [rows_op, cols_op].
cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int trans, int rows_op, int cols_op,
                                   long ld) {
    cublasLtMatrixLayout_t l;
    uint64_t rows = trans ? cols_op : rows_op, cols = trans ? rows_op : cols_op;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld));
    return l;
}

void set_pref_u32(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                  uint32_t v) {
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof v));
}

} // namespace

struct cuda_gemm {
    cublasLtHandle_t lt;
    void *workspace;
    size_t workspace_bytes;
    gemm_plan plans[PLANS];
    int used;              // valid plans in the table
    int rank;              // which of the heuristic's algorithms to use: 0, its best
    const gemm_plan *last; // the plan of the last matmul
    int bucketed;          // cuda_gemm_bucket_rows
};

namespace {

// Fill p for key k: descriptors, layouts and the heuristic's best algorithm (g->rank-th).
void plan_build(cuda_gemm *g, gemm_plan *p, const gemm_key &k) {
    cublasOperation_t opa = k.ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                      opb = k.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    p->la = make_layout(CUDA_R_16BF, k.ta, k.m, k.k, k.lda);
    p->lb = make_layout(CUDA_R_16BF, k.tb, k.k, k.n, k.ldb);
    p->lc = make_layout(k.c_f32 ? CUDA_R_32F : CUDA_R_16BF, 0, k.m, k.n, k.ldc);

    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = g->workspace_bytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    set_pref_u32(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, k.align_a);
    set_pref_u32(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, k.align_b);
    set_pref_u32(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, k.align_c);
    set_pref_u32(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, k.align_c);

    cublasLtMatmulHeuristicResult_t results[CANDIDATES];
    memset(results, 0, sizeof results);
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(g->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref,
                                                g->rank ? CANDIDATES : 1, results, &found));
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    const int r = g->rank < found ? g->rank : 0;
    if (found < 1 || results[r].state != CUBLAS_STATUS_SUCCESS)
        gemm_die("cuBLASLt has no algorithm for this matmul", k);
    p->algo = results[r].algo;
    p->candidates = found;
    p->key = k;
    p->valid = 1;
}

void plan_release(gemm_plan *p) {
    if (!p->valid) return;
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->la));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->lb));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->lc));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
    p->valid = 0;
}

// The cached plan for k, built on first use. Host-side descriptors can be destroyed once
// cublasLtMatmul has returned (the enqueued work holds no reference to them), so emptying the
// table while earlier matmuls are still running is safe.
unsigned key_hash(const gemm_key &k) {
    const long v[] = {k.ta,
                      k.tb,
                      k.m,
                      k.n,
                      k.k,
                      k.c_f32,
                      k.lda,
                      k.ldb,
                      k.ldc,
                      (long)k.align_a,
                      (long)k.align_b,
                      (long)k.align_c};
    unsigned long h = 1469598103934665603ul; // FNV-1a over the fields
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        h = (h ^ (unsigned long)v[i]) * 1099511628211ul;
    return (unsigned)(h ^ h >> 32);
}

const gemm_plan *plan_get(cuda_gemm *g, const gemm_key &k) {
    unsigned i = key_hash(k) % PLANS;
    for (; g->plans[i].valid; i = (i + 1) % PLANS)
        if (key_equal(g->plans[i].key, k)) return &g->plans[i];
    if (g->used >= PLANS * 3 / 4) { // start over: the new key's slot is then free
        for (int j = 0; j < PLANS; j++) plan_release(&g->plans[j]);
        g->used = 0;
        i = key_hash(k) % PLANS;
    }
    plan_build(g, &g->plans[i], k);
    g->used++;
    return &g->plans[i];
}

// C = beta * C when K == 0 (an empty sum); cuBLASLt is not asked about k = 0.
void empty_product(void *c, int c_f32, long ldc, float beta, int M, int N, cudaStream_t stream) {
    if (beta == 1.0f) return;
    if (beta != 0.0f) {
        fprintf(stderr, "megatrain: cuda_gemm: K = 0 with beta = %g is not supported\n", beta);
        exit(1);
    }
    size_t es = c_f32 ? 4 : 2;
    CUDA_CHECK(cudaMemset2DAsync(c, ldc * es, 0, N * es, M, stream));
}

} // namespace

extern "C" cuda_gemm *cuda_gemm_new(size_t workspace_bytes) {
    cuda_gemm *g = (cuda_gemm *)calloc(1, sizeof(cuda_gemm));
    if (!g) {
        fprintf(stderr, "megatrain: cuda_gemm_new: out of host memory\n");
        exit(1);
    }
    CUBLAS_CHECK(cublasLtCreate(&g->lt));
    g->workspace_bytes = workspace_bytes;
    if (workspace_bytes) CUDA_CHECK(cudaMalloc(&g->workspace, workspace_bytes));
    return g;
}

extern "C" void cuda_gemm_bucket_rows(cuda_gemm *g, int on) {
    g->bucketed = on;
}

extern "C" void cuda_gemm_use_rank(cuda_gemm *g, int rank) {
    for (int i = 0; i < PLANS; i++) plan_release(&g->plans[i]);
    g->used = 0;
    g->rank = rank < 0 ? 0 : rank >= CANDIDATES ? CANDIDATES - 1 : rank;
    g->last = NULL;
}

// The algorithm's tile, stages, split-K and reduction scheme (cublasLtAlgoConfigAttributes_t).
static uint32_t algo_attr(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t at) {
    uint32_t v = 0;
    size_t got = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(a, at, &v, sizeof v, &got));
    return v;
}

extern "C" int cuda_gemm_last_algo(const cuda_gemm *g, char *desc, size_t n) {
    if (!g->last) return 0;
    const cublasLtMatmulAlgo_t *a = &g->last->algo;
    snprintf(desc, n, "algo %u tile %u stages %u split-k %u reduction %u",
             algo_attr(a, CUBLASLT_ALGO_CONFIG_ID), algo_attr(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME));
    return g->last->candidates;
}

extern "C" void cuda_gemm_free(cuda_gemm *g) {
    if (!g) return;
    for (int i = 0; i < PLANS; i++) plan_release(&g->plans[i]);
    // cudaFree waits for the work in flight that may still use the workspace.
    if (g->workspace) CUDA_CHECK(cudaFree(g->workspace));
    CUBLAS_CHECK(cublasLtDestroy(g->lt));
    free(g);
}

// Rows counted in tokens (the experts' products): the plan of the token count rounded up to a
// power of two, whatever the first count seen (so a resumed run picks the same algorithms),
// run on layouts of the exact sizes. The token count is row-major M (cuBLAS n) for the forward
// and input products, K for the weight product (trans_a).
static unsigned bucket_of(int v) {
    unsigned b = 1;
    while (b < (unsigned)v) b <<= 1;
    return b;
}

static void bucketed_matmul(cuda_gemm *g, const gemm_key &exact, int trans_a, const bf16 *a,
                            const bf16 *b, void *c, float beta, cudaStream_t stream) {
    gemm_key k = exact;
    if (trans_a)
        k.k = (int)bucket_of(exact.k);
    else
        k.n = (int)bucket_of(exact.n);
    const gemm_plan *p = g->last = plan_get(g, k);
    cublasLtMatrixLayout_t la = make_layout(CUDA_R_16BF, exact.ta, exact.m, exact.k, exact.lda);
    cublasLtMatrixLayout_t lb = make_layout(CUDA_R_16BF, exact.tb, exact.k, exact.n, exact.ldb);
    cublasLtMatrixLayout_t lc =
        make_layout(exact.c_f32 ? CUDA_R_32F : CUDA_R_16BF, 0, exact.m, exact.n, exact.ldc);
    float alpha = 1.0f;
    CUBLAS_CHECK(cublasLtMatmul(g->lt, p->desc, &alpha, b, la, a, lb, &beta, c, lc, c, lc, &p->algo,
                                g->workspace, g->workspace_bytes, stream));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(la));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lb));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lc));
}

extern "C" void cuda_gemm_rowmajor(cuda_gemm *g, void *c, int c_f32, long ldc, float beta,
                                   const bf16 *a, long lda, int trans_a, const bf16 *b, long ldb,
                                   int trans_b, int M, int N, int K, cudaStream_t stream) {
    KtScope kt(stream, KT_GEMM);
    if (M <= 0 || N <= 0) return;
    if (K <= 0) return empty_product(c, c_f32, ldc, beta, M, N, stream);
    // Column-major view: C^T[N, M] = op(B)^T . op(A)^T (see the top of the file).
    gemm_key k;
    memset(&k, 0, sizeof k);
    k.ta = trans_b, k.tb = trans_a, k.m = N, k.n = M, k.k = K, k.c_f32 = c_f32;
    k.lda = ldb, k.ldb = lda, k.ldc = ldc;
    k.align_a = ptr_align(b), k.align_b = ptr_align(a), k.align_c = ptr_align(c);
    // Stored rows must hold what op() reads, or cuBLASLt would read past them.
    if (lda < (trans_a ? M : K) || ldb < (trans_b ? K : N) || ldc < N)
        gemm_die("leading dimension smaller than a row", k);
    kt_work(stream, KT_GEMM, 2.0 * M * N * K, 0, "gemm %c%c M %d N %d K %d -> %s%s",
            trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, c_f32 ? "fp32" : "bf16",
            beta != 0.0f ? " +=" : "");
    float alpha = 1.0f;
    if (g->bucketed) return bucketed_matmul(g, k, trans_a, a, b, c, beta, stream);
    const gemm_plan *p = g->last = plan_get(g, k);
    CUBLAS_CHECK(cublasLtMatmul(g->lt, p->desc, &alpha, b, p->la, a, p->lb, &beta, c, p->lc, c,
                                p->lc, &p->algo, g->workspace, g->workspace_bytes, stream));
}

extern "C" void cuda_linear_forward(cuda_gemm *g, void *out, int out_f32, float beta,
                                    const bf16 *in, const bf16 *w, int n, int ic, int oc,
                                    cudaStream_t stream) {
    KtScope kt(stream, KT_GEMM);
    // out[n, oc] = in[n, ic] . (w[oc, ic])^T
    cuda_gemm_rowmajor(g, out, out_f32, oc, beta, in, ic, 0, w, ic, 1, n, oc, ic, stream);
}

extern "C" void cuda_linear_backward_input(cuda_gemm *g, void *din, int din_f32, float beta,
                                           const bf16 *dout, const bf16 *w, int n, int ic, int oc,
                                           cudaStream_t stream) {
    KtScope kt(stream, KT_GEMM);
    // din[n, ic] = dout[n, oc] . w[oc, ic]
    cuda_gemm_rowmajor(g, din, din_f32, ic, beta, dout, oc, 0, w, ic, 0, n, ic, oc, stream);
}

extern "C" void cuda_linear_backward_weight(cuda_gemm *g, float *dw, const bf16 *dout,
                                            const bf16 *in, int n, int ic, int oc,
                                            cudaStream_t stream) {
    KtScope kt(stream, KT_GEMM);
    // dw[oc, ic] += (dout[n, oc])^T . in[n, ic]
    cuda_gemm_rowmajor(g, dw, 1, ic, 1.0f, dout, oc, 1, in, ic, 0, oc, ic, n, stream);
}
