// Kernel timing for the CUDA tests: an event on the default stream before the timed calls,
// and the milliseconds from it to the end of the work queued since.
#ifndef MT_TESTS_CUDA_TIMER_H
#define MT_TESTS_CUDA_TIMER_H

#include "kernels/cuda/cuda_check.h"

static inline cudaEvent_t timer_start(void) {
    cudaEvent_t t0;
    CUDA_CHECK(cudaEventCreate(&t0));
    CUDA_CHECK(cudaEventRecord(t0, 0));
    return t0;
}

// Waits for the queued work; destroys t0.
static inline float timer_stop_ms(cudaEvent_t t0) {
    cudaEvent_t t1;
    CUDA_CHECK(cudaEventCreate(&t1));
    CUDA_CHECK(cudaEventRecord(t1, 0));
    CUDA_CHECK(cudaEventSynchronize(t1));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
    CUDA_CHECK(cudaEventDestroy(t0));
    CUDA_CHECK(cudaEventDestroy(t1));
    return ms;
}

#endif
