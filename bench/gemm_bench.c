// The bench models' GEMM shapes through the engine's cuda_gemm, once with each algorithm the
// cuBLASLt heuristic offers (up to 16): does its first choice, which the engine uses, leave
// speed on the table? The shapes are the 7B's and the 3.4B's at 16,384 tokens a micro-batch
// (bench/configs), as MT_KERNEL_TIMES names them, and a square 8192^3 for reference.
//
//   usage: gemm_bench [--shapes 7b|3b|qwen3moe|mixtral|all] [--ranks N]
#include "kernels/bf16.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels_cuda.h"
#include "tests/cuda_timer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *model, *what;
    char ta, tb; // 'N' or 'T': op of the row-major a and b
    int M, N, K, c_f32;
    float beta;
} shape;

// Row-major C[M, N] = op(a)[M, K] . op(b)[K, N]: NT forward, NN input gradient, TN weight
// gradient (kernels/cuda/gemm.cu).
static const shape SHAPES[] = {
    {"ref", "square", 'N', 'T', 8192, 8192, 8192, 0, 0.0f},
    {"7b", "gate, up", 'N', 'T', 16384, 11008, 4096, 0, 0.0f},
    {"7b", "dW gate, up", 'T', 'N', 11008, 4096, 16384, 1, 1.0f},
    {"7b", "q, k, v", 'N', 'T', 16384, 4096, 4096, 0, 0.0f},
    {"7b", "dW q, k, v, o", 'T', 'N', 4096, 4096, 16384, 1, 1.0f},
    {"7b", "dh (down's input)", 'N', 'N', 16384, 11008, 4096, 1, 0.0f},
    {"7b", "dx from gate", 'N', 'N', 16384, 4096, 11008, 1, 0.0f},
    {"7b", "down into the residual", 'N', 'T', 16384, 4096, 11008, 1, 1.0f},
    {"7b", "dx q, k, v (+=)", 'N', 'N', 16384, 4096, 4096, 1, 1.0f},
    {"7b", "o into the residual", 'N', 'T', 16384, 4096, 4096, 1, 1.0f},
    {"3b", "gate, up", 'N', 'T', 16384, 8640, 3200, 0, 0.0f},
    {"3b", "q, k, v", 'N', 'T', 16384, 3200, 3200, 0, 0.0f},
    {"3b", "o into the residual", 'N', 'T', 16384, 3200, 3200, 1, 1.0f},
    {"3b", "dW q, k, v, o", 'T', 'N', 3200, 3200, 16384, 1, 1.0f},
    {"3b", "dx q, k, v (+=)", 'N', 'N', 16384, 3200, 3200, 1, 1.0f},
    // One expert's products at the MoE benches' mean rows (bench/configs/moe-*.cfg): Qwen3-30B-
    // A3B's 16,384 tokens x top 8 / 128 experts = 1,024 rows, Mixtral-8x7B's x 2 / 8 = 4,096.
    {"qwen3moe", "expert gate, up", 'N', 'T', 1024, 768, 2048, 0, 0.0f},
    {"qwen3moe", "expert down", 'N', 'T', 1024, 2048, 768, 0, 0.0f},
    {"qwen3moe", "expert dW gate, up", 'T', 'N', 768, 2048, 1024, 1, 1.0f},
    {"qwen3moe", "expert dW down", 'T', 'N', 2048, 768, 1024, 1, 1.0f},
    {"qwen3moe", "expert dx from gate", 'N', 'N', 1024, 2048, 768, 0, 0.0f},
    {"mixtral", "expert gate, up", 'N', 'T', 4096, 14336, 4096, 0, 0.0f},
    {"mixtral", "expert down", 'N', 'T', 4096, 4096, 14336, 0, 0.0f},
    {"mixtral", "expert dW gate, up", 'T', 'N', 14336, 4096, 4096, 1, 1.0f},
    {"mixtral", "expert dx from gate", 'N', 'N', 4096, 4096, 14336, 0, 0.0f},
};

static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
}

// Uniform bf16 in [-1, 1) on the host, copied over: the same inputs on every run.
static bf16 *dev_random(long n, unsigned seed) {
    bf16 *h = malloc(sizeof(bf16) * n), *d = dev_alloc(sizeof(bf16) * n);
    if (!h) {
        fprintf(stderr, "gemm_bench: out of host memory\n");
        exit(1);
    }
    unsigned x = seed * 2654435761u + 1;
    for (long i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        h[i] = bf16_from_float((float)(x >> 8) * 0x1.0p-23f - 1.0f);
    }
    CUDA_CHECK(cudaMemcpy(d, h, sizeof(bf16) * n, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static void run(cuda_gemm *g, const shape *s, void *a, void *b, void *c) {
    const int ta = s->ta == 'T', tb = s->tb == 'T';
    cuda_gemm_rowmajor(g, c, s->c_f32, s->N, s->beta, a, ta ? s->M : s->K, ta, b, tb ? s->K : s->N,
                       tb, s->M, s->N, s->K, 0);
}

// TFLOP/s of the shape with the current algorithm: two warm-up calls, then ten timed.
static double tflops(cuda_gemm *g, const shape *s, void *a, void *b, void *c) {
    for (int i = 0; i < 2; i++) run(g, s, a, b, c);
    cudaEvent_t t0 = timer_start();
    for (int i = 0; i < 10; i++) run(g, s, a, b, c);
    const float ms = timer_stop_ms(t0);
    return 10 * 2.0 * s->M * s->N * (double)s->K / (ms * 1e-3) / 1e12;
}

static void bench_shape(cuda_gemm *g, const shape *s, int max_ranks) {
    bf16 *a = dev_random((long)s->M * s->K, 1), *b = dev_random((long)s->K * s->N, 2);
    void *c = dev_alloc((size_t)s->M * s->N * (s->c_f32 ? 4 : 2));
    CUDA_CHECK(cudaMemset(c, 0, (size_t)s->M * s->N * (s->c_f32 ? 4 : 2)));
    double first = 0.0, best = 0.0;
    int best_rank = 0;
    for (int r = 0; r < max_ranks; r++) {
        cuda_gemm_use_rank(g, r);
        char desc[128];
        run(g, s, a, b, c); // builds the plan
        const int offered = cuda_gemm_last_algo(g, desc, sizeof desc);
        if (r > 0 && r >= offered) break;
        const double t = tflops(g, s, a, b, c);
        printf("GEMM %-3s %-24s %c%c %5d x %5d x %5d -> %s%s  rank %2d  %6.1f TFLOP/s  %s\n",
               s->model, s->what, s->ta, s->tb, s->M, s->N, s->K, s->c_f32 ? "fp32" : "bf16",
               s->beta != 0.0f ? " +=" : "   ", r, t, desc);
        if (r == 0) first = t;
        if (t > best) best = t, best_rank = r;
    }
    printf("GEMM %-3s %-24s best rank %d: %.1f TFLOP/s, %.3fx the heuristic's first\n", s->model,
           s->what, best_rank, best, best / first);
    fflush(stdout);
    cuda_gemm_use_rank(g, 0);
    CUDA_CHECK(cudaFree(a));
    CUDA_CHECK(cudaFree(b));
    CUDA_CHECK(cudaFree(c));
}

int main(int argc, char **argv) {
    const char *which = "all";
    int ranks = 16;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--shapes") == 0)
            which = argv[i + 1];
        else if (strcmp(argv[i], "--ranks") == 0)
            ranks = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [--shapes 7b|3b|qwen3moe|mixtral|all] [--ranks N]\n", argv[0]);
            return 2;
        }
    }
    // The engine's workspace size (backend_cuda.c): the heuristic's choices depend on it.
    cuda_gemm *g = cuda_gemm_new(32u << 20);
    for (size_t i = 0; i < sizeof SHAPES / sizeof *SHAPES; i++)
        if (strcmp(which, "all") == 0 || strcmp(SHAPES[i].model, which) == 0 ||
            strcmp(SHAPES[i].model, "ref") == 0)
            bench_shape(g, &SHAPES[i], ranks);
    cuda_gemm_free(g);
    return 0;
}
