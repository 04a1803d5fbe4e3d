// Causal flash attention, forward and backward, in TFLOP/s on the GPU: each kernel path
// (MT_ATTENTION=mma, wgmma) at the head dims of the bench models and sequence lengths from
// 2k to 512k. bench/attention_torch.py times PyTorch's scaled_dot_product_attention on the
// same shapes; bench/device_run.sh `attn` runs both in one call.
//
// FLOPs are causal-counted: a forward is 2 GEMMs of 2*T*T*hd per (b, h), halved by the mask,
// and a backward counts as 2.5 forwards (5 GEMMs), whatever a kernel actually recomputes. With
// --docs N (packed documents of N tokens, data.pack "documents") the count is the documents'
// own: T/N causal blocks of N, so that the rate compares with N-token calls. With --window W (a
// sliding window of W keys) it is the window's pairs, T W - W^2 / 2 a block (attn_score_pairs),
// and each line gives the forward + backward time per token: a window's cost is linear in T
// (window 128: compare T 2048 and 32768).
//
//   usage: attention_bench [--T 2048,8192,...] [--hd 64,100,128] [--H heads] [--KV kv heads]
//                          [--B rows] [--docs N] [--window W] [--paths mma,wgmma,wgmma-plain]
//
// Heads past 128 (192, 256) run on mma.sync whatever --paths says (simple times the simple
// path): e.g. Qwen3.5-27B's gated attention, --hd 256 --H 24 --KV 4 --B 1 --T 2048.
#include "kernels/bf16.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels_cuda.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int B, T, H, KV, hd, docs; // docs: packed documents' length (0: none)
    int window;                // sliding window (0: none)
} shape;

typedef struct {
    bf16 *q, *k, *v, *out, *dout, *dq, *dk, *dv;
    float *lse;
    int32_t *ds; // document starts [B, T] with packed documents, else NULL
    void *scratch;
} buffers;

// The bench models' heads: 1.1B (32 heads of 64, 4 kv heads), 3.4B (32 of 100), 7B (32 of
// 128). 16k tokens a call up to T = 16k (8 x 2048 at 2k, as the training bench); past 32k one
// sequence, with 8 heads from 128k on so that a 512k backward stays within seconds. heads > 0
// overrides the head count (--H: how the kernels fare with fewer or more heads at one length),
// kv_heads > 0 the kv heads (a divisor of the heads; without, 1/8 of them at hd 64, all of them
// otherwise), rows > 0 the batch rows.
static shape shape_for(int T, int hd, int heads, int kv_heads, int rows, int docs) {
    shape s = {.B = T >= 16384 ? 1 : 16384 / T, .T = T, .H = T >= 131072 ? 8 : 32, .hd = hd};
    if (heads > 0) s.H = heads;
    if (rows > 0) s.B = rows;
    s.docs = docs <= 0 ? 0 : docs < T ? docs : T; // docs >= T: one document a row, packed
    if (kv_heads > 0 && s.H % kv_heads != 0) {
        fprintf(stderr, "attention_bench: --KV %d does not divide the %d heads\n", kv_heads, s.H);
        exit(2);
    }
    s.KV = kv_heads > 0 ? kv_heads : hd == 64 ? s.H / 8 : s.H;
    return s;
}

static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
}

// Uniform bf16 in [-1, 1) from an xorshift stream started at `seed`: the same inputs on every
// run, and another stream for each buffer.
static void fill_random(bf16 *dst, long n, uint64_t seed) {
    const long chunk = 1l << 22;
    bf16 *tmp = malloc(sizeof(bf16) * chunk);
    if (!tmp) {
        fprintf(stderr, "attention_bench: out of memory\n");
        exit(1);
    }
    uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
    for (long i = 0; i < n; i += chunk) {
        long m = n - i < chunk ? n - i : chunk;
        for (long j = 0; j < m; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            tmp[j] = bf16_from_float((float)((x >> 40) * 0x1.0p-24) * 2.0f - 1.0f);
        }
        CUDA_CHECK(cudaMemcpy(dst + i, tmp, sizeof(bf16) * m, cudaMemcpyHostToDevice));
    }
    free(tmp);
}

// Documents of s->docs tokens from each row's start (the last one shorter where T is not a
// multiple), as data.c's dataset_pack_documents gives them.
static int32_t *doc_starts(const shape *s) {
    if (!s->docs) return NULL;
    const long n = (long)s->B * s->T;
    int32_t *h = malloc(sizeof(int32_t) * n), *d = dev_alloc(sizeof(int32_t) * n);
    if (!h) {
        fprintf(stderr, "attention_bench: out of memory\n");
        exit(1);
    }
    for (long i = 0; i < n; i++) h[i] = (int32_t)(i % s->T / s->docs * s->docs);
    CUDA_CHECK(cudaMemcpy(d, h, sizeof(int32_t) * n, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static void buffers_init(buffers *b, const shape *s) {
    long nq = (long)s->B * s->T * s->H * s->hd, nkv = (long)s->B * s->T * s->KV * s->hd;
    bf16 **qs[] = {&b->q, &b->out, &b->dout, &b->dq}, **kvs[] = {&b->k, &b->v, &b->dk, &b->dv};
    for (int i = 0; i < 4; i++) *qs[i] = dev_alloc(sizeof(bf16) * nq);
    for (int i = 0; i < 4; i++) *kvs[i] = dev_alloc(sizeof(bf16) * nkv);
    b->lse = dev_alloc(sizeof(float) * s->B * s->H * s->T);
    b->scratch = dev_alloc(cuda_attention_scratch_bytes(s->B, s->T, s->H, s->KV, s->hd));
    fill_random(b->q, nq, 1);
    fill_random(b->k, nkv, 2);
    fill_random(b->v, nkv, 3);
    fill_random(b->dout, nq, 4);
    b->ds = doc_starts(s);
}

static void buffers_free(buffers *b) {
    void *p[] = {b->q, b->out, b->dout, b->dq, b->k, b->v, b->dk, b->dv, b->lse, b->scratch};
    for (int i = 0; i < 10; i++) CUDA_CHECK(cudaFree(p[i]));
    CUDA_CHECK(cudaFree(b->ds));
}

static void call(const buffers *b, const shape *s, int backward) {
    const attn_args a = {.B = s->B,
                         .T = s->T,
                         .H = s->H,
                         .KV = s->KV,
                         .hd = s->hd,
                         .doc_start = b->ds,
                         .window = s->window};
    const cuda_attn_tensors t = {.q = b->q,
                                 .k = b->k,
                                 .v = b->v,
                                 .out = b->out,
                                 .lse = b->lse,
                                 .dout = b->dout,
                                 .dq = b->dq,
                                 .dk = b->dk,
                                 .dv = b->dv};
    if (!backward)
        cuda_attention_forward(&a, &t, b->scratch, 0);
    else
        cuda_attention_backward(&a, &t, b->scratch, 0);
}

// Milliseconds per call: one warm-up, then repeats until 0.3 s have run (at least 2).
static double time_ms(const buffers *b, const shape *s, int backward) {
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    call(b, s, backward);
    CUDA_CHECK(cudaDeviceSynchronize());
    double total = 0.0;
    int n = 0;
    while (n < 2 || total < 300.0) {
        CUDA_CHECK(cudaEventRecord(e0, 0));
        call(b, s, backward);
        CUDA_CHECK(cudaEventRecord(e1, 0));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        total += ms, n++;
    }
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    return total / n;
}

static int parse_list(const char *arg, int *out, int max) {
    int n = 0;
    for (const char *p = arg; *p && n < max;) {
        out[n++] = atoi(p);
        const char *c = strchr(p, ',');
        if (!c) break;
        p = c + 1;
    }
    return n;
}

int main(int argc, char **argv) {
    int Ts[16] = {2048, 8192, 32768, 131072, 524288}, nT = 5;
    int hds[8] = {64, 100, 128}, nhd = 3;
    const char *paths = "mma,wgmma";
    int heads = 0, kv_heads = 0, rows = 0, docs = 0, window = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--T") == 0)
            nT = parse_list(argv[i + 1], Ts, 16);
        else if (strcmp(argv[i], "--hd") == 0)
            nhd = parse_list(argv[i + 1], hds, 8);
        else if (strcmp(argv[i], "--H") == 0 && atoi(argv[i + 1]) % 8 == 0)
            heads = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--KV") == 0 && atoi(argv[i + 1]) > 0)
            kv_heads = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--B") == 0 && atoi(argv[i + 1]) > 0)
            rows = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--docs") == 0 && atoi(argv[i + 1]) >= 0)
            docs = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--window") == 0 && atoi(argv[i + 1]) >= 0)
            window = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--paths") == 0)
            paths = argv[i + 1];
        else {
            fprintf(stderr,
                    "usage: %s [--T 2048,...] [--hd 64,100,128] [--H heads, a multiple of 8]\n"
                    "       [--KV kv heads, dividing the heads] [--B rows]\n"
                    "       [--docs N, packed documents of N tokens]\n"
                    "       [--window W, a sliding window of W keys]\n"
                    "       [--paths mma,wgmma,wgmma-plain]\n",
                    argv[0]);
            return 2;
        }
    }
    int has_wgmma = cuda_attention_has_wgmma();
    printf("# causal attention, TFLOP/s causal-counted; wgmma %s\n",
           has_wgmma ? "available" : "not available (mma runs instead)");
    for (int h = 0; h < nhd; h++) {
        for (int t = 0; t < nT; t++) {
            shape s = shape_for(Ts[t], hds[h], heads, kv_heads, rows, docs);
            s.window = window;
            buffers b;
            buffers_init(&b, &s);
            // Causal blocks: the row's, or each whole document's plus the last one's remainder;
            // their (query, key) pairs within the window.
            const int n = s.docs ? s.docs : s.T, whole = s.T / n, rest = s.T - whole * n;
            const double pairs = whole * attn_score_pairs(n, s.window) +
                                 (rest ? attn_score_pairs(rest, s.window) : 0.0);
            double fwd_flops = 4.0 * s.B * s.H * pairs * s.hd;
            char list[64];
            snprintf(list, sizeof list, "%s", paths);
            for (char *path = strtok(list, ","); path; path = strtok(NULL, ",")) {
                // wgmma-plain: the Hopper kernels without TMA (attention_wgmma.cu alone).
                const int plain = strcmp(path, "wgmma-plain") == 0;
                setenv("MT_ATTENTION", plain ? "wgmma" : path, 1);
                setenv("MT_ATTENTION_TMA", plain ? "0" : "1", 1);
                double f = time_ms(&b, &s, 0), g = time_ms(&b, &s, 1);
                printf("ATTN path=%-11s hd=%3d T=%6d B=%2d H=%2d KV=%2d docs=%6d window=%5d  "
                       "forward %9.3f ms %6.1f TFLOP/s  backward %9.3f ms %6.1f TFLOP/s  "
                       "fwd+bwd %.3f ns/token\n",
                       path, s.hd, s.T, s.B, s.H, s.KV, s.docs, s.window, f,
                       fwd_flops / (f * 1e-3) / 1e12, g, 2.5 * fwd_flops / (g * 1e-3) / 1e12,
                       (f + g) * 1e6 / ((double)s.B * s.T));
                fflush(stdout);
            }
            buffers_free(&b);
        }
    }
    return 0;
}
