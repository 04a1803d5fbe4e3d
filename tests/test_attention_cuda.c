// The CUDA flash attention (kernels/cuda/attention_*.cu) against the fp32 CPU reference
// (kernels/cpu/attention.c), on each of its paths (MT_ATTENTION=simple, mma, and wgmma where the
// device and the build have it).
//
// q, k, v and dout are rounded to bf16 first, so both sides see the same inputs; the backward
// of both sides gets the same bf16-rounded out and the reference lse, so that it is checked
// on its own. Every GPU output is poisoned (0xFF bytes: NaN) before each call, so an element
// that a kernel fails to write shows up as a failure. Then the backward is rerun and must
// give the same bits (no atomics). Packed documents (DOC_SHAPES) and sliding windows
// (WINDOW_SHAPES) are checked the same way against the CPU reference's masks, and attention
// sinks (SINK_SHAPES: gpt-oss's learned logit per head, forward and their gradient dsinks) with
// and without them. Timings are bench/attention_bench's.
//
// usage: test_attention_cuda [hd,hd,...]: with a list, only the shapes of those head dims (a
// short run, e.g. 192,256); without, every shape (ctest).
// Exit codes: 0 all passed, 1 a check failed, 2 a bad argument, 77 no CUDA device (ctest: skipped).
#include "kernels/bf16.h"
#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels_cuda.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// bf16 outputs carry ~3 significant digits; lse and the statistics behind it are fp32.
static const double TOL_BF16 = 2e-2, TOL_LSE = 1e-3;
static int passed, failed;

typedef struct {
    int B, T, H, KV, hd;
    const int *docs; // packed documents' lengths (doc_starts), 0-terminated; NULL: none
    int window;      // sliding window (attn_args); 0: none
    int sinks;       // 1: attention sinks, one bf16 logit per query head
} shape;

// Tails (T not a multiple of 64 or 128), T = 1, GQA groups of 1..4, and hd padded inside the
// tensor-core path (16, 24 -> 32; 40, 48 -> 64; 96 -> 128; 160 -> 192) besides the real 64, 128,
// 192 and 256.
static const shape SHAPES[] = {
    {2, 37, 4, 2, 16, NULL, 0, 0},
    {1, 130, 8, 8, 64, NULL, 0, 0},
    {2, 257, 8, 2, 128, NULL, 0, 0},
    {1, 1, 4, 1, 64, NULL, 0, 0},
    {1, 1, 8, 2, 128, NULL, 0, 0},
    {1, 64, 2, 1, 32, NULL, 0, 0},
    {1, 70, 6, 3, 24, NULL, 0, 0},
    {1, 200, 4, 4, 40, NULL, 0, 0},
    {1, 100, 4, 2, 96, NULL, 0, 0},
    {2, 130, 4, 2, 100, NULL, 0, 0},
    {1, 77, 3, 3, 100, NULL, 0, 0},
    // The fused backward's turn order over many key tiles (whole tiles, three batch rows, GQA),
    // and a head dim it pads inside one tile (72 -> 128).
    {3, 640, 6, 2, 128, NULL, 0, 0},
    {1, 300, 2, 2, 72, NULL, 0, 0},
    // The fused backward at hd 64 (the warpgroups take turns at dq): GQA, three batch rows,
    // T not a multiple of 128; and hd 48, which pads inside its 64 columns.
    {3, 1000, 8, 2, 64, NULL, 0, 0},
    {1, 333, 4, 4, 48, NULL, 0, 0},
    // Heads past the Hopper kernels' 128, which mma.sync takes on every path but simple
    // (wgmma's runs are mma.sync's): DeepSeek-V3's MLA at 192; Qwen3.5's gated attention and
    // GLM-4.7-Flash's MLA at 256, with GQA over many key tiles and a tail; 160 and 132 (8-byte
    // rows) padded inside 192 columns.
    {1, 70, 4, 4, 192, NULL, 0, 0},
    {2, 33, 2, 2, 256, NULL, 0, 0},
    {2, 333, 6, 2, 256, NULL, 0, 0},
    {1, 300, 4, 1, 192, NULL, 0, 0},
    {1, 130, 2, 2, 160, NULL, 0, 0},
    {1, 77, 3, 3, 132, NULL, 0, 0},
    // Long: over 32k tokens, T not a multiple of any tile (64, 128), GQA; hd 128, 100 and 64.
    {1, 32805, 2, 1, 128, NULL, 0, 0},
    {1, 32777, 2, 2, 100, NULL, 0, 0},
    {1, 32790, 4, 1, 64, NULL, 0, 0},
};

// Packed documents: boundaries on the 64- and 128-row tile edges and inside tiles, documents of
// 1 and 2 tokens, documents longer than a tile, and one document a row (the packed path with
// every start 0, which must still match the causal reference).
static const int EDGES[] = {64, 128, 1, 2, 63, 65, 127, 129, 200, 0};
static const int TINY[] = {1, 2, 1, 3, 0};
static const int MIXED[] = {300, 17, 1000, 2, 128, 0};
static const int ONE[] = {1 << 30, 0};
static const int LONG[] = {4096, 0};
static const shape DOC_SHAPES[] = {
    {2, 700, 4, 2, 128, EDGES, 0, 0},  {3, 1000, 8, 2, 64, EDGES, 0, 0},
    {2, 130, 4, 2, 100, EDGES, 0, 0},  {1, 200, 4, 2, 16, TINY, 0, 0},
    {1, 70, 6, 3, 24, TINY, 0, 0},     {1, 300, 2, 2, 72, MIXED, 0, 0},
    {3, 640, 6, 2, 128, MIXED, 0, 0},  {1, 4000, 4, 2, 64, MIXED, 0, 0},
    {2, 257, 8, 2, 128, ONE, 0, 0},    {1, 333, 4, 4, 48, EDGES, 0, 0},
    {1, 32768, 2, 1, 128, LONG, 0, 0}, {2, 700, 4, 2, 256, EDGES, 0, 0},
    {1, 300, 2, 2, 192, MIXED, 0, 0},
};

// Sliding windows: of a whole 128-key TMA tile (the gpt-oss window) and of sizes that are no
// multiple of any tile (32, 64, 128), so that windows start inside tiles; alone and with packed
// documents longer and shorter than the window; hd 64, 128, the padded 100 and the small ones
// the mma.sync and simple paths take, and the wide 192 and 256; T up to 4096 and one long
// sequence; a window of 1 (each query sees itself only) and one of T or more (no window: the same
// bits as without).
static const shape WINDOW_SHAPES[] = {
    {1, 4096, 4, 2, 128, NULL, 128, 0}, {2, 4096, 8, 2, 64, NULL, 128, 0},
    {1, 4000, 4, 4, 128, NULL, 100, 0}, {3, 1000, 8, 2, 64, NULL, 77, 0},
    {2, 700, 4, 2, 128, EDGES, 128, 0}, {1, 4000, 4, 2, 64, MIXED, 100, 0},
    {3, 640, 6, 2, 128, MIXED, 200, 0}, {2, 1030, 4, 2, 100, NULL, 128, 0},
    {2, 130, 4, 2, 100, EDGES, 33, 0},  {1, 200, 4, 2, 16, TINY, 5, 0},
    {2, 257, 8, 2, 24, NULL, 40, 0},    {1, 300, 2, 2, 72, NULL, 129, 0},
    {1, 200, 4, 2, 64, NULL, 1, 0},     {1, 300, 2, 2, 128, NULL, 300, 0},
    {1, 32790, 4, 1, 64, NULL, 128, 0}, {1, 32805, 2, 1, 128, LONG, 1000, 0},
    {1, 1000, 4, 2, 256, NULL, 100, 0}, {2, 700, 4, 2, 192, EDGES, 128, 0},
};

// Attention sinks (one learned logit per query head, gpt-oss): hd 64 and GQA with gpt-oss's
// window of 128 keys on a long row, and without it; alone and with packed documents, with and
// without a window; hd 128, the padded 100, the small head dims the mma.sync and simple paths
// take and the wide 256; T = 1, where a row's one key meets the sink; the plain wgmma forward's
// causal hd 128.
static const shape SINK_SHAPES[] = {
    {2, 257, 8, 2, 64, NULL, 0, 1},     {1, 4096, 8, 2, 64, NULL, 128, 1},
    {3, 1000, 8, 2, 64, EDGES, 0, 1},   {2, 700, 4, 2, 128, EDGES, 0, 1},
    {3, 640, 6, 2, 128, MIXED, 200, 1}, {2, 257, 8, 2, 128, NULL, 0, 1},
    {2, 130, 4, 2, 100, EDGES, 33, 1},  {2, 1030, 4, 2, 100, NULL, 128, 1},
    {2, 37, 4, 2, 16, NULL, 0, 1},      {1, 200, 4, 2, 16, TINY, 5, 1},
    {1, 70, 6, 3, 24, NULL, 40, 1},     {1, 1, 4, 1, 64, NULL, 0, 1},
    {2, 257, 4, 2, 256, NULL, 0, 1},    {1, 700, 4, 2, 256, EDGES, 77, 1},
};

// ---- helpers -----------------------------------------------------------------------------

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static float rng_uniform(void) { // splitmix64 -> [-1, 1)
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((z >> 40) * 0x1.0p-24) * 2.0f - 1.0f;
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

// Random values times amp, rounded to bf16: f gets the rounded floats, b their bf16 bits.
static void rand_bf16(float *f, bf16 *b, long n, float amp) {
    for (long i = 0; i < n; i++) {
        b[i] = bf16_from_float(rng_uniform() * amp);
        f[i] = bf16_to_float(b[i]);
    }
}

static void to_bf16(bf16 *b, float *f, long n) { // rounds f in place too
    for (long i = 0; i < n; i++) {
        b[i] = bf16_from_float(f[i]);
        f[i] = bf16_to_float(b[i]);
    }
}

static void from_bf16(float *f, const bf16 *b, long n) {
    for (long i = 0; i < n; i++) f[i] = bf16_to_float(b[i]);
}

// ||a - b|| / ||b||; infinite if a holds a NaN or Inf (an unwritten, poisoned element).
static double rel_err(const float *a, const float *b, long n) {
    double num = 0.0, den = 0.0;
    for (long i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        double diff = (double)a[i] - b[i];
        num += diff * diff;
        den += (double)b[i] * b[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

static void report(int ok, const char *path, const char *what, const shape *s, double err) {
    printf("%s %-6s %-6s B=%d T=%d H=%d KV=%d hd=%d%s window=%d%s  rel_err %.3g\n",
           ok ? "PASS" : "FAIL", path, what, s->B, s->T, s->H, s->KV, s->hd, s->docs ? " docs" : "",
           s->window, s->sinks ? " sinks" : "", err);
    if (ok)
        passed++;
    else
        failed++;
}

static void check_close(const char *path, const char *what, const shape *s, const float *got,
                        const float *ref, long n, double tol) {
    double err = rel_err(got, ref, n);
    report(err < tol, path, what, s, err);
}

static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 16));
    return p;
}
static void *dev_upload(const void *src, size_t bytes) {
    void *p = dev_alloc(bytes);
    CUDA_CHECK(cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice));
    return p;
}
static void poison(void *p, size_t bytes) {
    CUDA_CHECK(cudaMemset(p, 0xFF, bytes));
}

// Device bf16 -> host floats.
static void download_bf16(float *dst, const bf16 *src, long n) {
    bf16 *tmp = xmalloc(sizeof(bf16) * n);
    CUDA_CHECK(cudaMemcpy(tmp, src, sizeof(bf16) * n, cudaMemcpyDeviceToHost));
    from_bf16(dst, tmp, n);
    free(tmp);
}

// Each row's document starts from s->docs's lengths, cycled; row b starts b documents into the
// cycle, so that rows differ. NULL without documents.
static int32_t *doc_starts(const shape *s) {
    if (!s->docs) return NULL;
    int n = 0;
    while (s->docs[n]) n++;
    int32_t *ds = xmalloc(sizeof(int32_t) * s->B * s->T);
    for (int b = 0; b < s->B; b++) {
        int i = b % n, start = 0, left = s->docs[i];
        for (int t = 0; t < s->T; t++, left--) {
            if (left == 0) i = (i + 1) % n, left = s->docs[i], start = t;
            ds[(long)b * s->T + t] = start;
        }
    }
    return ds;
}

// ---- one shape on one path ---------------------------------------------------------------

// Shape s's attention arguments, with document starts ds (host or device memory, or NULL).
static attn_args args_of(const shape *s, const int32_t *ds) {
    return (attn_args){.B = s->B,
                       .T = s->T,
                       .H = s->H,
                       .KV = s->KV,
                       .hd = s->hd,
                       .doc_start = ds,
                       .window = s->window};
}

typedef struct {
    long nq, nkv, nl;
    float *q, *k, *v, *dout, *out, *lse, *dq, *dk, *dv; // host reference (floats)
    bf16 *qb, *kb, *vb, *doutb, *outb;
    int32_t *ds, *ds_dev;     // packed documents' starts, on the host and the device; or NULL
    float *sinks, *dsinks;    // [H] each, with sinks (host reference); else NULL
    bf16 *sinksb, *sinks_dev; // the sinks' bf16 bits, on the host and the device; or NULL
} host_case;

// Inputs and the CPU reference for shape s. q is scaled so that the scores' standard
// deviation is about 1: peaked enough that the softmax is not nearly uniform.
static void host_case_init(host_case *c, const shape *s) {
    c->nq = (long)s->B * s->T * s->H * s->hd;
    c->nkv = (long)s->B * s->T * s->KV * s->hd;
    c->nl = (long)s->B * s->H * s->T;
    float **fl[] = {&c->q, &c->dout, &c->out, &c->dq};
    for (int i = 0; i < 4; i++) *fl[i] = xmalloc(sizeof(float) * c->nq);
    float **fk[] = {&c->k, &c->v, &c->dk, &c->dv};
    for (int i = 0; i < 4; i++) *fk[i] = xmalloc(sizeof(float) * c->nkv);
    c->lse = xmalloc(sizeof(float) * c->nl);
    c->qb = xmalloc(sizeof(bf16) * c->nq);
    c->doutb = xmalloc(sizeof(bf16) * c->nq);
    c->outb = xmalloc(sizeof(bf16) * c->nq);
    c->kb = xmalloc(sizeof(bf16) * c->nkv);
    c->vb = xmalloc(sizeof(bf16) * c->nkv);

    rand_bf16(c->q, c->qb, c->nq, 3.0f);
    rand_bf16(c->k, c->kb, c->nkv, 1.0f);
    rand_bf16(c->v, c->vb, c->nkv, 1.0f);
    rand_bf16(c->dout, c->doutb, c->nq, 1.0f);
    c->sinks = c->dsinks = NULL, c->sinksb = c->sinks_dev = NULL;
    if (s->sinks) { // logits in [-2, 6): from below the rows' log-sum-exps to above most
        c->sinks = xmalloc(sizeof(float) * s->H), c->sinksb = xmalloc(sizeof(bf16) * s->H);
        c->dsinks = xmalloc(sizeof(float) * s->H);
        memset(c->dsinks, 0, sizeof(float) * s->H); // the backward accumulates
        for (int h = 0; h < s->H; h++) c->sinks[h] = 4.0f * rng_uniform() + 2.0f;
        to_bf16(c->sinksb, c->sinks, s->H);
        c->sinks_dev = dev_upload(c->sinksb, sizeof(bf16) * s->H);
    }
    c->ds = doc_starts(s);
    c->ds_dev = c->ds ? dev_upload(c->ds, sizeof(int32_t) * s->B * s->T) : NULL;
    const attn_args a = args_of(s, c->ds);
    attn_tensors t = {
        .q = c->q, .k = c->k, .v = c->v, .out = c->out, .lse = c->lse, .sinks = c->sinks};
    attention_forward(&a, &t);
    to_bf16(c->outb, c->out, c->nq); // the backward of both sides sees the bf16 out
    // The CPU backward accumulates: start from zero.
    memset(c->dq, 0, sizeof(float) * c->nq);
    memset(c->dk, 0, sizeof(float) * c->nkv);
    memset(c->dv, 0, sizeof(float) * c->nkv);
    t.dout = c->dout, t.dq = c->dq, t.dk = c->dk, t.dv = c->dv, t.dsinks = c->dsinks;
    attention_backward(&a, &t);
}

static void host_case_free(host_case *c) {
    void *p[] = {c->q,  c->k,  c->v,  c->dout, c->out, c->lse,   c->dq,
                 c->dk, c->dv, c->qb, c->kb,   c->vb,  c->doutb, c->outb};
    for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++) free(p[i]);
    free(c->ds);
    free(c->sinks);
    free(c->dsinks);
    free(c->sinksb);
    CUDA_CHECK(cudaFree(c->ds_dev));
    CUDA_CHECK(cudaFree(c->sinks_dev));
}

static void check_forward(const char *path, const shape *s, const host_case *c) {
    bf16 *q = dev_upload(c->qb, sizeof(bf16) * c->nq),
         *k = dev_upload(c->kb, sizeof(bf16) * c->nkv);
    bf16 *v = dev_upload(c->vb, sizeof(bf16) * c->nkv), *out = dev_alloc(sizeof(bf16) * c->nq);
    float *lse = dev_alloc(sizeof(float) * c->nl);
    poison(out, sizeof(bf16) * c->nq);
    poison(lse, sizeof(float) * c->nl);
    void *scratch = dev_alloc(cuda_attention_scratch_bytes(s->B, s->T, s->H, s->KV, s->hd));
    const attn_args a = args_of(s, c->ds_dev);
    const cuda_attn_tensors t = {
        .q = q, .k = k, .v = v, .out = out, .lse = lse, .sinks = c->sinks_dev};
    cuda_attention_forward(&a, &t, scratch, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaFree(scratch));

    float *got = xmalloc(sizeof(float) * c->nq);
    download_bf16(got, out, c->nq);
    check_close(path, "out", s, got, c->out, c->nq, TOL_BF16);
    CUDA_CHECK(cudaMemcpy(got, lse, sizeof(float) * c->nl, cudaMemcpyDeviceToHost));
    check_close(path, "lse", s, got, c->lse, c->nl, TOL_LSE);
    free(got);
    void *p[] = {q, k, v, out, lse};
    for (int i = 0; i < 5; i++) CUDA_CHECK(cudaFree(p[i]));
}

typedef struct {
    bf16 *dq, *dk, *dv;
    float *dsinks; // [H], with sinks
} grads;

static void run_backward(grads *g, const shape *s, const host_case *c, const int32_t *ds,
                         const bf16 *dout, bf16 *out, float *lse, const bf16 *q, const bf16 *k,
                         const bf16 *v, void *scratch, size_t scratch_bytes) {
    poison(g->dq, sizeof(bf16) * c->nq);
    poison(g->dk, sizeof(bf16) * c->nkv);
    poison(g->dv, sizeof(bf16) * c->nkv);
    poison(scratch, scratch_bytes);
    if (g->dsinks) CUDA_CHECK(cudaMemset(g->dsinks, 0, sizeof(float) * s->H)); // accumulated
    const attn_args a = args_of(s, ds);
    const cuda_attn_tensors t = {.q = q,
                                 .k = k,
                                 .v = v,
                                 .out = out,
                                 .lse = lse,
                                 .dout = dout,
                                 .dq = g->dq,
                                 .dk = g->dk,
                                 .dv = g->dv,
                                 .sinks = c->sinks_dev,
                                 .dsinks = g->dsinks};
    cuda_attention_backward(&a, &t, scratch, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
}

// Whether two device buffers of `bytes` bytes hold the same bits.
static int same_bits(const void *a, const void *b, size_t bytes) {
    void *ha = xmalloc(bytes), *hb = xmalloc(bytes);
    CUDA_CHECK(cudaMemcpy(ha, a, bytes, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(hb, b, bytes, cudaMemcpyDeviceToHost));
    int same = memcmp(ha, hb, bytes) == 0;
    free(ha);
    free(hb);
    return same;
}

static void check_backward(const char *path, const shape *s, const host_case *c) {
    bf16 *q = dev_upload(c->qb, sizeof(bf16) * c->nq),
         *k = dev_upload(c->kb, sizeof(bf16) * c->nkv);
    bf16 *v = dev_upload(c->vb, sizeof(bf16) * c->nkv);
    bf16 *dout = dev_upload(c->doutb, sizeof(bf16) * c->nq);
    bf16 *out = dev_upload(c->outb, sizeof(bf16) * c->nq);
    float *lse = dev_upload(c->lse, sizeof(float) * c->nl);
    size_t sb = cuda_attention_scratch_bytes(s->B, s->T, s->H, s->KV, s->hd);
    void *scratch = dev_alloc(sb);
    grads g[2];
    for (int r = 0; r < 2; r++) {
        g[r].dq = dev_alloc(sizeof(bf16) * c->nq);
        g[r].dk = dev_alloc(sizeof(bf16) * c->nkv);
        g[r].dv = dev_alloc(sizeof(bf16) * c->nkv);
        g[r].dsinks = s->sinks ? dev_alloc(sizeof(float) * s->H) : NULL;
        // One document a row (every start 0): the rerun goes without the starts, and must give
        // the same bits (the engine drops them where a micro-batch has no second document).
        const int32_t *ds = r == 1 && s->docs == ONE ? NULL : c->ds_dev;
        run_backward(&g[r], s, c, ds, dout, out, lse, q, k, v, scratch, sb);
    }

    float *got = xmalloc(sizeof(float) * (c->nq > c->nkv ? c->nq : c->nkv));
    download_bf16(got, g[0].dq, c->nq);
    check_close(path, "dq", s, got, c->dq, c->nq, TOL_BF16);
    download_bf16(got, g[0].dk, c->nkv);
    check_close(path, "dk", s, got, c->dk, c->nkv, TOL_BF16);
    download_bf16(got, g[0].dv, c->nkv);
    check_close(path, "dv", s, got, c->dv, c->nkv, TOL_BF16);
    if (s->sinks) {
        CUDA_CHECK(cudaMemcpy(got, g[0].dsinks, sizeof(float) * s->H, cudaMemcpyDeviceToHost));
        check_close(path, "dsinks", s, got, c->dsinks, s->H, TOL_LSE);
    }
    int same = same_bits(g[0].dq, g[1].dq, sizeof(bf16) * c->nq) &&
               same_bits(g[0].dk, g[1].dk, sizeof(bf16) * c->nkv) &&
               same_bits(g[0].dv, g[1].dv, sizeof(bf16) * c->nkv) &&
               (!s->sinks || same_bits(g[0].dsinks, g[1].dsinks, sizeof(float) * s->H));
    report(same, path, "rerun", s, same ? 0.0 : 1.0);
    free(got);

    void *p[] = {q, k, v, dout, out, lse, scratch};
    for (int i = 0; i < 7; i++) CUDA_CHECK(cudaFree(p[i]));
    for (int r = 0; r < 2; r++) {
        CUDA_CHECK(cudaFree(g[r].dq));
        CUDA_CHECK(cudaFree(g[r].dk));
        CUDA_CHECK(cudaFree(g[r].dv));
        CUDA_CHECK(cudaFree(g[r].dsinks));
    }
}

// Whether head dim hd is in the comma-separated list (NULL: every head dim is).
static int hd_selected(const char *list, int hd) {
    for (const char *p = list; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (atoi(p) == hd) return 1;
    return list == NULL;
}

int main(int argc, char **argv) {
    const char *hds = argc > 1 ? argv[1] : NULL;
    if (argc > 2 || (hds && atoi(hds) <= 0)) {
        fprintf(stderr, "usage: %s [hd,hd,...]: the head dims to check (default: all)\n", argv[0]);
        return 2;
    }
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("SKIPPED: no CUDA device\n");
        return 77;
    }
    const int nplain = (int)(sizeof(SHAPES) / sizeof(SHAPES[0]));
    const int ndocs = (int)(sizeof(DOC_SHAPES) / sizeof(DOC_SHAPES[0]));
    const int nwin = (int)(sizeof(WINDOW_SHAPES) / sizeof(WINDOW_SHAPES[0]));
    const int nshapes = nplain + ndocs + nwin + (int)(sizeof(SINK_SHAPES) / sizeof(SINK_SHAPES[0]));
    const char *paths[] = {"simple", "mma", "wgmma", "wgmma-plain", "wgmma-runs"};
    const int npaths = cuda_attention_has_wgmma() ? 5 : 2;
    printf("paths: simple, mma%s\n",
           npaths == 5 ? ", wgmma, wgmma-plain, wgmma-runs" : " (no wgmma on this device/build)");
    for (int i = 0; i < nshapes; i++) {
        const shape *s = i < nplain                  ? &SHAPES[i]
                         : i < nplain + ndocs        ? &DOC_SHAPES[i - nplain]
                         : i < nplain + ndocs + nwin ? &WINDOW_SHAPES[i - nplain - ndocs]
                                                     : &SINK_SHAPES[i - nplain - ndocs - nwin];
        if (!hd_selected(hds, s->hd)) continue;
        host_case c;
        host_case_init(&c, s);
        for (int p = 0; p < npaths; p++) {
            // attention_path (attention.cuh) reads the variables on every call. "wgmma-plain":
            // the wgmma kernels without TMA, which serve the head dims TMA cannot take;
            // "wgmma-runs": the fused backward one kv head at a time, as at long context when
            // its dq accumulator would pass its cap.
            setenv("MT_ATTENTION", strncmp(paths[p], "wgmma", 5) == 0 ? "wgmma" : paths[p], 1);
            setenv("MT_ATTENTION_TMA", strcmp(paths[p], "wgmma-plain") == 0 ? "0" : "1", 1);
            if (strcmp(paths[p], "wgmma-runs") == 0)
                setenv("MT_ATTN_DQ_CAP", "1", 1);
            else
                unsetenv("MT_ATTN_DQ_CAP");
            check_forward(paths[p], s, &c);
            check_backward(paths[p], s, &c);
        }
        host_case_free(&c);
    }
    unsetenv("MT_ATTENTION");
    unsetenv("MT_ATTENTION_TMA");
    unsetenv("MT_ATTN_DQ_CAP");

    printf("%d passed, %d failed\n", passed, failed);
    if (passed + failed == 0) {
        fprintf(stderr, "%s: no shape has a head dim in %s\n", argv[0], hds);
        return 2;
    }
    return failed ? 1 : 0;
}
