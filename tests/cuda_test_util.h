// The CUDA kernel tests' host side (test_kernels_cuda.c, test_moe_cuda.c): allocations that
// one release_all() frees, and the random values both sides of a comparison are fed. Each test
// defines TEST_RNG_SEED before including it, so each keeps its own inputs.
#ifndef MT_CUDA_TEST_UTIL_H
#define MT_CUDA_TEST_UTIL_H

#include "kernels/bf16.h"
#include "kernels/cuda/cuda_check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- allocation: everything a case allocates is released by release_all() -----------------

enum { MAX_ALLOCS = 512 };
static void *host_allocs[MAX_ALLOCS], *dev_allocs[MAX_ALLOCS];
static int n_host, n_dev;

static void *hmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p || n_host == MAX_ALLOCS) {
        fprintf(stderr, "test: out of host memory or allocation slots\n");
        exit(1);
    }
    return host_allocs[n_host++] = p;
}

static void *dmalloc(size_t bytes) {
    void *p = NULL;
    if (n_dev == MAX_ALLOCS) {
        fprintf(stderr, "test: out of device allocation slots\n");
        exit(1);
    }
    CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1));
    return dev_allocs[n_dev++] = p;
}

static void release_all(void) {
    CUDA_CHECK(cudaDeviceSynchronize());
    while (n_host) free(host_allocs[--n_host]);
    while (n_dev) CUDA_CHECK(cudaFree(dev_allocs[--n_dev]));
}

// ---- random values -------------------------------------------------------------------------

static uint64_t rng_state = TEST_RNG_SEED;
static uint64_t rng_next(void) { // splitmix64
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float rng_uniform(void) { // [-1, 1)
    return (float)((rng_next() >> 40) * 0x1.0p-24) * 2.0f - 1.0f;
}
static int rng_int(int n) {
    return (int)(rng_next() % (uint64_t)n);
}

static float *rand_vec(long n, float scale) {
    float *p = hmalloc(sizeof(float) * n);
    for (long i = 0; i < n; i++) p[i] = scale * rng_uniform();
    return p;
}
// Random values that are exactly representable in bf16 (the CUDA side's inputs).
static float *rand_bf16_vec(long n, float scale) {
    float *p = rand_vec(n, scale);
    for (long i = 0; i < n; i++) p[i] = bf16_to_float(bf16_from_float(p[i]));
    return p;
}
static float *copy_vec(const float *src, long n) {
    float *p = hmalloc(sizeof(float) * n);
    memcpy(p, src, sizeof(float) * n);
    return p;
}
static float *zero_vec(long n) {
    float *p = hmalloc(sizeof(float) * n);
    memset(p, 0, sizeof(float) * n);
    return p;
}

#endif
