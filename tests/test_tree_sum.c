// job_allreduce_tree on real MPI processes (any -np): every rank must end with the same bits,
// and they must be those of the fixed rank tree, recomputed here in one process from every
// rank's inputs (which each rank can regenerate: they are a function of rank and index). The
// values span many magnitudes, so that the order of the additions shows in the bits: for 4 or
// more ranks the test also checks that a plain left-to-right sum differs somewhere, i.e. that
// it would catch a tree summed in another order.
#include "runtime/base/base.h"
#include "runtime/job/job.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 1000003 }; // odd, and not a multiple of anything the reduction might tile by

static float value(int rank, size_t i) {
    uint64_t z = (uint64_t)rank * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull + 1;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    float u = (float)((z >> 40) * 0x1.0p-24) * 2.0f - 1.0f; // [-1, 1)
    return ldexpf(u, (int)(z % 40) - 20);                   // magnitudes 2^-20 .. 2^20
}

static float *xmalloc_floats(size_t n) {
    float *p = malloc(sizeof(float) * n);
    if (!p) {
        fprintf(stderr, "test_tree_sum: out of memory\n");
        exit(1);
    }
    return p;
}

static void fill(float *x, int rank) {
    for (size_t i = 0; i < N; i++) x[i] = value(rank, i);
}

// The tree of job.h, level by level in one process: vals[r] += vals[r + s] for r = 0, 2s, ...
static void tree_reference(float *out, int size) {
    float **vals = calloc((size_t)size, sizeof(float *));
    if (!vals) exit(1);
    for (int r = 0; r < size; r++) {
        vals[r] = xmalloc_floats(N);
        fill(vals[r], r);
    }
    for (int s = 1; s < size; s *= 2)
        for (int r = 0; r + s < size; r += 2 * s)
            for (size_t i = 0; i < N; i++) vals[r][i] += vals[r + s][i];
    memcpy(out, vals[0], sizeof(float) * N);
    for (int r = 0; r < size; r++) free(vals[r]);
    free(vals);
}

static long left_fold_differences(const float *tree, int size) {
    float *acc = xmalloc_floats(N), *x = xmalloc_floats(N);
    fill(acc, 0);
    for (int r = 1; r < size; r++) {
        fill(x, r);
        for (size_t i = 0; i < N; i++) acc[i] += x[i];
    }
    long diff = 0;
    for (size_t i = 0; i < N; i++) diff += memcmp(&acc[i], &tree[i], sizeof(float)) != 0;
    free(acc), free(x);
    return diff;
}

int main(int argc, char **argv) {
    MPI_CHECK(MPI_Init(&argc, &argv));
    int rank, size;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    float *x = xmalloc_floats(N), *scratch = xmalloc_floats(N), *want = xmalloc_floats(N);
    fill(x, rank);
    job_allreduce_tree(x, N, scratch, MPI_COMM_WORLD);
    tree_reference(want, size);
    long wrong = 0;
    for (size_t i = 0; i < N; i++) wrong += memcmp(&x[i], &want[i], sizeof(float)) != 0;
    // Every rank's bits against rank 0's (the broadcast), independently of the reference.
    float *first = xmalloc_floats(N);
    memcpy(first, x, sizeof(float) * N);
    MPI_CHECK(MPI_Bcast(first, N, MPI_FLOAT, 0, MPI_COMM_WORLD));
    long unlike = 0;
    for (size_t i = 0; i < N; i++) unlike += memcmp(&x[i], &first[i], sizeof(float)) != 0;
    long fold = size >= 4 ? left_fold_differences(want, size) : 1;
    int ok = wrong == 0 && unlike == 0 && fold > 0, all_ok = 0;
    MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD));
    if (!ok)
        fprintf(stderr,
                "FAIL rank %d of %d: %ld elements differ from the tree, %ld from rank 0%s\n", rank,
                size, wrong, unlike, fold ? "" : "; a left-to-right sum matches too (weak data)");
    if (rank == 0 && all_ok)
        printf("PASS %d ranks: %d elements, the same bits on every rank as the reference tree%s\n",
               size, N,
               size >= 4 ? " (a left-to-right sum differs in some: the order is checked)" : "");
    free(x), free(scratch), free(want), free(first);
    MPI_CHECK(MPI_Finalize());
    return all_ok ? 0 : 1;
}
