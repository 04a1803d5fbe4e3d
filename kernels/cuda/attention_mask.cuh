// The keys each query row of an attention call sees, on the device, for every kernel of the
// family (attention.cuh): row t sees keys first_key .. t, and key j is seen by the queries from j
// up to key_end. The first key is the later of the row's document start (packed documents,
// Dims.ds) and its sliding window's (Dims.window, attn_window_first); both are non-decreasing
// along a row, so a query tile's keys and a key tile's queries are contiguous ranges and whole
// tiles outside them are skipped. attention.cuh includes it after Dims and Mask.
#ifndef MT_ATTENTION_MASK_CUH
#define MT_ATTENTION_MASK_CUH

#include "kernels/cuda/attention.cuh"

namespace {

// Where row t's document starts (rows past T: the last row's).
__device__ __forceinline__ int doc_first(const Dims &d, int b, int t) {
    return d.ds ? d.ds[(long)b * d.T + min(t, d.T - 1)] : 0;
}

// The end (exclusive) of the document that holds key t: the first query after t whose document
// starts after t. Keys are attended only up to there, so a key tile's query loop stops there.
__device__ __forceinline__ int doc_end(const Dims &d, int b, int t) {
    if (!d.ds) return d.T;
    const int32_t *row = d.ds + (long)b * d.T;
    if (row[d.T - 1] <= t) return d.T; // the row's last document: no search
    int lo = t + 1, hi = d.T;
    while (lo < hi) { // ds is non-decreasing: binary search for the first start past t
        const int mid = (lo + hi) >> 1;
        if (row[mid] > t)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

// The first key row t sees (rows past T: the last row's): its document's start, and with WIN
// (MASK_WINDOW: d.window > 0) no earlier than its window's. Non-decreasing in t, as doc_first.
// (The window's t - W + 1 may be negative here: f >= 0 wins, as attn_window_first's 0 would.)
template <bool WIN> __device__ __forceinline__ int first_key(const Dims &d, int b, int t) {
    const int f = doc_first(d, b, t);
    return WIN ? max(f, min(t, d.T - 1) - d.window + 1) : f;
}

// The end (exclusive) of the queries that see key t: its document's end, and with WIN no later
// than t + window (make_dims keeps window < T, so no overflow). Non-decreasing in t.
template <bool WIN> __device__ __forceinline__ int key_end(const Dims &d, int b, int t) {
    const int e = doc_end(d, b, t);
    return WIN ? min(e, t + d.window) : e;
}

// The same where the choice is made at run time (the simple path, setup kernels).
__device__ __forceinline__ int visible_first(const Dims &d, int b, int t) {
    return d.window ? first_key<true>(d, b, t) : doc_first(d, b, t);
}
__device__ __forceinline__ int visible_end(const Dims &d, int b, int t) {
    return d.window ? key_end<true>(d, b, t) : doc_end(d, b, t);
}

} // namespace

#endif
