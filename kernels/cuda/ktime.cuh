// The kernel entry points' marks for ktime.cu: a scope that brackets one call's work.
#ifndef MT_KTIME_CUH
#define MT_KTIME_CUH

#include "kernels/cuda/kernels_cuda.h"

#include <stdarg.h>
#include <stdio.h>

struct KtScope {
    cudaStream_t stream;
    KtScope(cudaStream_t s, int cls) : stream(s) { cuda_ktime_enter(s, cls); }
    ~KtScope() { cuda_ktime_leave(stream); }
};

// cuda_ktime_work for the call in scope, its shape's name printf-formatted: only when profiling.
__attribute__((format(printf, 5, 6))) inline void kt_work(cudaStream_t s, int cls, double flops,
                                                          double bytes, const char *fmt, ...) {
    if (!cuda_ktime_on()) return;
    char what[80];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    cuda_ktime_work(s, cls, what, flops, bytes);
}

#endif
