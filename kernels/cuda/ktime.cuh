// The kernel entry points' marks for ktime.cu: a scope that brackets one call's work.
#ifndef MT_KTIME_CUH
#define MT_KTIME_CUH

#include "kernels/cuda/kernels_cuda.h"

struct KtScope {
    cudaStream_t stream;
    KtScope(cudaStream_t s, int cls) : stream(s) { cuda_ktime_enter(s, cls); }
    ~KtScope() { cuda_ktime_leave(stream); }
};

#endif
