// CUDA transfers: the shared regions are registered with CUDA so DMA reads the bf16 wire
// weights and writes the gradient slots in place, with no staging copy. The host thread only
// issues copies and records events; it blocks on the GPU only when a gradient buffer is
// reused or an offload must be announced.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels_cuda.h"
#include "runtime/transfer_cuda.h"
#include "shm/syscheck.h"
#include <stdlib.h>

struct transfer_cuda {
    cudaStream_t compute, h2d, d2h;
    void *reduce_scratch;
};

transfer_cuda *xfer_cuda_new(mt_job *job, void *compute_stream) {
    transfer_cuda *x = calloc(1, sizeof *x);
    if (!x) mt_die("out of memory");
    x->compute = (cudaStream_t)compute_stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&x->h2d, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&x->d2h, cudaStreamNonBlocking));
    CUDA_CHECK(cudaMalloc(&x->reduce_scratch, cuda_sum_squares_scratch_bytes()));
    for (int k = 0; k < job->n_shards; k++)
        CUDA_CHECK(cudaHostRegister(job->regions[k].base, job->regions[k].size,
                                    cudaHostRegisterDefault));
    return x;
}

void xfer_cuda_free(transfer_cuda *x, mt_job *job) {
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int k = 0; k < job->n_shards; k++) CUDA_CHECK(cudaHostUnregister(job->regions[k].base));
    CUDA_CHECK(cudaFree(x->reduce_scratch));
    CUDA_CHECK(cudaStreamDestroy(x->h2d));
    CUDA_CHECK(cudaStreamDestroy(x->d2h));
    free(x);
}

static void *new_event(void) {
    cudaEvent_t ev;
    CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    return ev;
}

void xfer_cuda_weight_init(weight_buffer *buf) {
    buf->ready = new_event();
    buf->free = new_event();
}

void xfer_cuda_grad_init(grad_buffer *buf) {
    buf->done = new_event();
    CUDA_CHECK(cudaMalloc((void **)&buf->sumsq_dev, sizeof(double)));
    CUDA_CHECK(cudaMallocHost((void **)&buf->sumsq_host, sizeof(double)));
}

void xfer_cuda_buffers_free(weight_buffer *w, int nw, grad_buffer *g, int ng) {
    for (int i = 0; i < nw; i++) {
        CUDA_CHECK(cudaEventDestroy((cudaEvent_t)w[i].ready));
        CUDA_CHECK(cudaEventDestroy((cudaEvent_t)w[i].free));
    }
    for (int i = 0; i < ng; i++) {
        CUDA_CHECK(cudaEventDestroy((cudaEvent_t)g[i].done));
        CUDA_CHECK(cudaFree(g[i].sumsq_dev));
        CUDA_CHECK(cudaFreeHost(g[i].sumsq_host));
    }
}

// The buffer may still be read by compute that was issued earlier: the copy waits for it.
void xfer_cuda_fetch(transfer *t, weight_buffer *buf) {
    transfer_cuda *x = t->cuda;
    mt_job *job = t->job;
    CUDA_CHECK(cudaStreamWaitEvent(x->h2d, (cudaEvent_t)buf->free, 0));
    for (int k = 0; k < job->n_shards; k++) {
        size_t n = job->layouts[k].len[buf->group];
        if (n == 0) continue;
        bf16 *dst = (bf16 *)buf->dst + job->layouts[k].lo[buf->group];
        CUDA_CHECK(cudaMemcpyAsync(dst, job_wire(job, k, buf->group), n * sizeof(bf16),
                                   cudaMemcpyHostToDevice, x->h2d));
    }
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)buf->ready, x->h2d));
}

void xfer_cuda_fetch_wait(weight_buffer *buf) {
    CUDA_CHECK(cudaStreamWaitEvent(buf->t->cuda->compute, (cudaEvent_t)buf->ready, 0));
}

void xfer_cuda_buffer_done(weight_buffer *buf) {
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)buf->free, buf->t->cuda->compute));
}

void xfer_cuda_offload(transfer *t, grad_buffer *buf) {
    transfer_cuda *x = t->cuda;
    mt_job *job = t->job;
    long numel = (long)job->group_numel[buf->group];
    cuda_sum_squares(buf->sumsq_dev, buf->src, numel, x->reduce_scratch, x->compute);
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)buf->done, x->compute));
    CUDA_CHECK(cudaStreamWaitEvent(x->d2h, (cudaEvent_t)buf->done, 0));
    for (int k = 0; k < job->n_shards; k++) {
        size_t n = job->layouts[k].len[buf->group];
        if (n == 0) continue;
        CUDA_CHECK(cudaMemcpyAsync(job_grad_slot(job, k, buf->group),
                                   buf->src + job->layouts[k].lo[buf->group], n * sizeof(float),
                                   cudaMemcpyDeviceToHost, x->d2h));
    }
    CUDA_CHECK(cudaMemcpyAsync(buf->sumsq_host, buf->sumsq_dev, sizeof(double),
                               cudaMemcpyDeviceToHost, x->d2h));
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)buf->done, x->d2h));
}

int xfer_cuda_offload_landed(grad_buffer *buf, int wait) {
    cudaEvent_t ev = (cudaEvent_t)buf->done;
    if (wait) CUDA_CHECK(cudaEventSynchronize(ev));
    else {
        cudaError_t rc = cudaEventQuery(ev);
        if (rc == cudaErrorNotReady) return 0;
        CUDA_CHECK(rc);
    }
    buf->sumsq = *buf->sumsq_host;
    return 1;
}
