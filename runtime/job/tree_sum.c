// The fixed-order sums of job.h: job_allreduce_tree, a binomial tree up to rank 0, one partner
// per level, then a broadcast of the bits; job_sum_tree, the same tree over buffers of one rank.
#include "runtime/base/base.h"
#include "runtime/job/job.h"

#define TREE_TAG 0x5452

static void add_into(float *x, const float *y, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] += y[i]; // one rounding per element: any thread count
}

void job_allreduce_tree(float *x, size_t n, float *scratch, MPI_Comm comm) {
    int rank, size;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    MPI_CHECK(MPI_Comm_size(comm, &size));
    for (int s = 1; s < size; s *= 2) {
        if (rank % (2 * s) == s) { // this subtree is complete: hand it to the left partner
            job_send_floats_on(x, n, rank - s, TREE_TAG, comm);
            break;
        }
        if (rank + s < size) {
            job_recv_floats_on(scratch, n, rank + s, TREE_TAG, comm);
            add_into(x, scratch, n);
        }
    }
    job_bcast_floats_on(x, n, 0, comm);
}

void job_sum_tree(float *const *x, int count, size_t n) {
    for (int s = 1; s < count; s *= 2)
        for (int r = 0; r + s < count; r += 2 * s) add_into(x[r], x[r + s], n);
}
