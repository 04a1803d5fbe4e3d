#include "runtime/engine/alloc_cuda.h"
#include "shm/syscheck.h"

void *cu_alloc(backend *b, size_t bytes) {
    void *p = NULL;
    cudaError_t rc = cudaMalloc(&p, bytes ? bytes : 1);
    if (rc != cudaSuccess)
        mt_die("GPU out of memory allocating %zu MiB (%s): fewer micro-batches or a shorter "
               "sequence would fit",
               bytes >> 20, cudaGetErrorString(rc));
    b->allocated += bytes;
    return p;
}

void cu_point_parts(const mt_buffer_list *l, char *base, void **const *slots) {
    for (int i = 0; i < l->n; i++) *slots[i] = base + mt_buffer_offset(l, i);
}

void cu_carve(backend *b, const mt_buffer_list *l, void **const *slots, size_t n_slots) {
    if ((size_t)l->n != n_slots) mt_die("a buffer list of %d has %zu fields", l->n, n_slots);
    if (b->n_owned + l->n > (int)(sizeof b->owned / sizeof *b->owned))
        mt_die("the CUDA backend's working sets have more than %zu buffers",
               sizeof b->owned / sizeof *b->owned);
    if (l->align) {
        void *base = b->owned[b->n_owned++] = cu_alloc(b, mt_buffer_list_bytes(l));
        cu_point_parts(l, base, slots);
        return;
    }
    for (int i = 0; i < l->n; i++)
        *slots[i] = l->bytes[i] ? b->owned[b->n_owned++] = cu_alloc(b, l->bytes[i]) : NULL;
}
