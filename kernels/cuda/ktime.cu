// Kernel-time breakdown of one stream (MT_KERNEL_TIMES=1): every kernel entry point marks the
// class of the work it queues with an event on entry and an end event on exit; the time from
// each event to the next is summed under the first one's class. What lies between an end and
// the next entry is the stream's gaps: waits for streamed weights or for the optimizer, and
// launch latency. Entry points that call others (the classifier's GEMMs) count as the outer
// class. Events are read back in batches, so the profiled run syncs now and then; off, the
// marks cost one branch.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels_cuda.h"

#include <stdio.h>
#include <stdlib.h>

namespace {

constexpr int BATCH = 8192;

struct KtState {
    cudaStream_t stream = nullptr;
    bool on = false;
    int depth = 0, n = 0;
    cudaEvent_t ev[BATCH];
    int cls[BATCH];
    double ms[KT_CLASSES] = {};
};
KtState kt;

// Sums the intervals of the recorded events; the last stays as the next batch's first.
void ktime_flush() {
    if (kt.n < 2) return;
    CUDA_CHECK(cudaEventSynchronize(kt.ev[kt.n - 1]));
    for (int i = 0; i + 1 < kt.n; i++) {
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, kt.ev[i], kt.ev[i + 1]));
        kt.ms[kt.cls[i]] += ms;
    }
    cudaEvent_t last = kt.ev[kt.n - 1];
    kt.ev[kt.n - 1] = kt.ev[0];
    kt.ev[0] = last;
    kt.cls[0] = kt.cls[kt.n - 1];
    kt.n = 1;
}

void ktime_record(int cls) {
    if (kt.n == BATCH) ktime_flush();
    CUDA_CHECK(cudaEventRecord(kt.ev[kt.n], kt.stream));
    kt.cls[kt.n++] = cls;
}

} // namespace

extern "C" void cuda_ktime_enable(cudaStream_t stream) {
    const char *e = getenv("MT_KERNEL_TIMES");
    if (!e || e[0] != '1' || kt.on) return;
    for (int i = 0; i < BATCH; i++) CUDA_CHECK(cudaEventCreate(&kt.ev[i]));
    kt.stream = stream;
    kt.on = true;
}

// Ends the profile (after the report): events freed, the state reset for another stream.
extern "C" void cuda_ktime_disable(void) {
    if (!kt.on) return;
    for (int i = 0; i < BATCH; i++) CUDA_CHECK(cudaEventDestroy(kt.ev[i]));
    kt = KtState{};
}

extern "C" void cuda_ktime_enter(cudaStream_t stream, int cls) {
    if (!kt.on || stream != kt.stream) return;
    if (kt.depth++ == 0) ktime_record(cls);
}

extern "C" void cuda_ktime_leave(cudaStream_t stream) {
    if (!kt.on || stream != kt.stream) return;
    if (--kt.depth == 0) ktime_record(KT_GAP);
}

extern "C" void cuda_ktime_report(FILE *f) {
    if (!kt.on) return;
    ktime_flush();
    static const char *names[KT_CLASSES] = {"gaps (waits, launches)",
                                            "GEMMs (cuBLASLt)",
                                            "attention",
                                            "RMSNorm",
                                            "RoPE",
                                            "SwiGLU",
                                            "bias, casts",
                                            "classifier and loss",
                                            "embedding",
                                            "copies, zeroing"};
    double total = 0.0;
    for (int c = 0; c < KT_CLASSES; c++) total += kt.ms[c];
    fprintf(f, "kernel times (MT_KERNEL_TIMES), compute stream, %.1f s in all:\n", total / 1e3);
    for (int c = 0; c < KT_CLASSES; c++)
        if (kt.ms[c] > 0)
            fprintf(f, "  KTIME %-24s %10.1f ms %5.1f%%\n", names[c], kt.ms[c],
                    100.0 * kt.ms[c] / total);
}
