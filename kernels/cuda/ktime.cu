// Kernel-time breakdown of one stream (MT_KERNEL_TIMES=1): every kernel entry point marks the
// class of the work it queues with an event on entry and an end event on exit; the time from
// each event to the next is summed under the first one's class. What lies between an end and
// the next entry is the stream's gaps: waits for streamed weights or for the optimizer, and
// launch latency. Entry points that call others (the classifier's GEMMs) count as the outer
// class. Entry points also say what work they queued (cuda_ktime_work), so the report gives each
// class's rate, TFLOP/s or TB/s, and the time and rate of each shape (the GEMMs' m x n x k):
// where a class sits below its roof, and which shapes make it. Events are read back in batches,
// so the profiled run syncs now and then; off, the marks cost one branch.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace {

constexpr int BATCH = 8192, SHAPES = 64;

struct KtWork {
    double ms = 0, flops = 0, bytes = 0;
};

struct KtShape {
    char what[80];
    int cls;
    long calls;
    KtWork work;
};

struct KtState {
    cudaStream_t stream = nullptr;
    bool on = false;
    int depth = 0, n = 0, outer = KT_GAP, nshapes = 0;
    cudaEvent_t ev[BATCH];
    int cls[BATCH], shape[BATCH]; // an event's class, and its shape or -1
    KtWork work[KT_CLASSES];
    KtShape shapes[SHAPES];
};
KtState kt;

// Sums the intervals of the recorded events; the last stays as the next batch's first.
void ktime_flush() {
    if (kt.n < 2) return;
    CUDA_CHECK(cudaEventSynchronize(kt.ev[kt.n - 1]));
    for (int i = 0; i + 1 < kt.n; i++) {
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, kt.ev[i], kt.ev[i + 1]));
        kt.work[kt.cls[i]].ms += ms;
        if (kt.shape[i] >= 0) kt.shapes[kt.shape[i]].work.ms += ms;
    }
    cudaEvent_t last = kt.ev[kt.n - 1];
    kt.ev[kt.n - 1] = kt.ev[0];
    kt.ev[0] = last;
    kt.cls[0] = kt.cls[kt.n - 1];
    kt.shape[0] = kt.shape[kt.n - 1];
    kt.n = 1;
}

void ktime_record(int cls) {
    if (kt.n == BATCH) ktime_flush();
    CUDA_CHECK(cudaEventRecord(kt.ev[kt.n], kt.stream));
    kt.shape[kt.n] = -1;
    kt.cls[kt.n++] = cls;
}

// The shape table's entry for `what` of class cls, added if new; -1 once the table is full.
int shape_index(int cls, const char *what) {
    for (int i = 0; i < kt.nshapes; i++)
        if (kt.shapes[i].cls == cls && strcmp(kt.shapes[i].what, what) == 0) return i;
    if (kt.nshapes == SHAPES) return -1;
    KtShape &sh = kt.shapes[kt.nshapes];
    snprintf(sh.what, sizeof sh.what, "%s", what);
    sh.cls = cls;
    return kt.nshapes++;
}

// " 655.2 TFLOP/s" or "   3.10 TB/s" for work done in w.ms, or nothing where none was counted.
void print_rate(FILE *f, const KtWork &w) {
    if (w.ms <= 0) return;
    if (w.flops > 0)
        fprintf(f, " %7.1f TFLOP/s", w.flops / (w.ms * 1e-3) / 1e12);
    else if (w.bytes > 0)
        fprintf(f, " %7.2f TB/s   ", w.bytes / (w.ms * 1e-3) / 1e12);
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
    if (kt.depth++ == 0) {
        ktime_record(cls);
        kt.outer = cls;
    }
}

extern "C" int cuda_ktime_on(void) {
    return kt.on;
}

extern "C" void cuda_ktime_work(cudaStream_t stream, int cls, const char *what, double flops,
                                double bytes) {
    if (!kt.on || stream != kt.stream || kt.depth == 0) return;
    kt.work[kt.outer].flops += flops;
    kt.work[kt.outer].bytes += bytes;
    // The scope's entry event is the last recorded: nested scopes record nothing.
    if (!what || cls != kt.outer || kt.shape[kt.n - 1] >= 0) return;
    const int i = shape_index(cls, what);
    if (i < 0) return;
    kt.shape[kt.n - 1] = i;
    kt.shapes[i].calls++;
    kt.shapes[i].work.flops += flops;
    kt.shapes[i].work.bytes += bytes;
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
                                            "copies, zeroing",
                                            "MoE routing, permutes"};
    double total = 0.0;
    for (int c = 0; c < KT_CLASSES; c++) total += kt.work[c].ms;
    fprintf(f, "kernel times (MT_KERNEL_TIMES), compute stream, %.1f s in all:\n", total / 1e3);
    for (int c = 0; c < KT_CLASSES; c++) {
        if (kt.work[c].ms <= 0) continue;
        fprintf(f, "  KTIME %-24s %10.1f ms %5.1f%%", names[c], kt.work[c].ms,
                100.0 * kt.work[c].ms / total);
        print_rate(f, kt.work[c]);
        fputc('\n', f);
    }
    // Shapes, longest first (a selection sort: the table is small).
    bool shown[SHAPES] = {};
    for (int r = 0; r < kt.nshapes; r++) {
        int best = -1;
        for (int i = 0; i < kt.nshapes; i++)
            if (!shown[i] && (best < 0 || kt.shapes[i].work.ms > kt.shapes[best].work.ms)) best = i;
        shown[best] = true;
        const KtShape &sh = kt.shapes[best];
        fprintf(f, "  KTIME   %-46s %8ld calls %10.1f ms %5.1f%%", sh.what, sh.calls, sh.work.ms,
                100.0 * sh.work.ms / total);
        print_rate(f, sh.work);
        fputc('\n', f);
    }
}
