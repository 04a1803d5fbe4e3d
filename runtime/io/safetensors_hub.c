// The hub's fused and reshaped tensors in (runtime/io/hf_index.h): Qwen3.5's conv1d, Qwen3-Next's
// fused Gated DeltaNet projections, and gpt-oss's experts: each expert's gate, up and down
// projections and their biases, read out of the hub's [E, ...] tensors (hub_layout.h says
// where each element is), plain or, for the projections, as MXFP4 blocks and scales that are
// dequantized exactly as transformers dequantizes them (mxfp4.h). Reads go a window of whole
// hub rows at a time, never an element at a time, and hold at most a few MiB whatever the slice.
#include "runtime/base/base.h"
#include "runtime/io/hf_index.h"
#include "runtime/io/hub_layout.h"
#include "runtime/io/mxfp4.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WINDOW = 1 << 20 }; // elements (or MXFP4 bytes) a read holds at most, beyond one hub row

// The projections may come quantized; their biases never do.
static int quantizable(const tensor_info *t) {
    return t->hub_layout == HUB_GATE_UP_EVEN || t->hub_layout == HUB_GATE_UP_ODD ||
           t->hub_layout == HUB_EXPERTS_T;
}

// MXFP4's rows are the projection's outputs, untransposed: gate_up's 2f rows (gate and up
// interleaved) of d values, down's d rows of f values. t's row r is quantized row
// e * rows + r * step + phase.
typedef struct {
    int64_t rows, groups, step, first; // first: t's row 0
} mxfp4_rows;

static mxfp4_rows mxfp4_rows_of(const tensor_info *t) {
    int pair = t->hub_layout != HUB_EXPERTS_T;
    int64_t rows = pair ? 2 * (int64_t)t->rows : t->rows, e = t->expert > 0 ? t->expert : 0;
    return (mxfp4_rows){rows, t->cols / MXFP4_GROUP, pair ? 2 : 1,
                        e * rows + (t->hub_layout == HUB_GATE_UP_ODD)};
}

static void mxfp4_names(const char *name, char *blocks, char *scales, size_t cap) {
    snprintf(blocks, cap, "%s_blocks", name);
    snprintf(scales, cap, "%s_scales", name);
}

// blocks [E, rows, K/32, 16] and scales [E, rows, K/32], K the values of a row (t's cols).
static int check_mxfp4(const hf_index *ix, const mt_model *m, const tensor_info *t,
                       const char *name, char *used, char *err, size_t errlen) {
    char blocks[300], scales[300];
    mxfp4_names(name, blocks, scales, sizeof blocks);
    const hf_tensor *b = hf_tensor_named(ix, blocks);
    if (t->cols % MXFP4_GROUP)
        return failf(err, errlen,
                     "%s: tensor %s: a row of %d values is not whole MXFP4 groups of 32 "
                     "(config.json's sizes)",
                     hf_tensor_file(ix, b), blocks, t->cols);
    mxfp4_rows q = mxfp4_rows_of(t);
    int64_t want[4] = {m->experts, q.rows, q.groups, MXFP4_GROUP_BYTES};
    return hf_check_shape(ix, blocks, want, 4, 1, used, err, errlen) < 0 ||
                   hf_check_shape(ix, scales, want, 3, 1, used, err, errlen) < 0
               ? -1
               : 0;
}

int hf_hub_check(const hf_index *ix, const mt_model *m, const tensor_info *t, const char *name,
                 char *used, char *err, size_t errlen) {
    if (!hub_first(t)) return 0; // its hub tensor was checked with the first
    char blocks[300], scales[300];
    mxfp4_names(name, blocks, scales, sizeof blocks);
    if (quantizable(t) && !hf_tensor_named(ix, name) && hf_tensor_named(ix, blocks))
        return check_mxfp4(ix, m, t, name, used, err, errlen);
    hub_place p = hub_place_of(m, t);
    return hf_check_shape(ix, name, p.dims, p.ndim, 0, used, err, errlen);
}

// Rows [r0, r1] of t, columns [c0 of r0, c1 of r1] (t's elements [off, off + count)), from
// contiguous runs of quantized rows decoded whole.
static int read_mxfp4(const hf_index *ix, const tensor_info *t, const char *name, uint64_t off,
                      uint64_t count, float *out, char *err, size_t errlen) {
    char bn[300], sn[300];
    mxfp4_names(name, bn, sn, sizeof bn);
    const hf_tensor *bt = hf_tensor_named(ix, bn), *st = hf_tensor_named(ix, sn);
    mxfp4_rows q = mxfp4_rows_of(t);
    uint64_t K = (uint64_t)t->cols, r0 = off / K, r1 = (off + count - 1) / K;
    size_t row_bytes = (size_t)q.groups * MXFP4_GROUP_BYTES;
    size_t per_run = WINDOW / row_bytes > (size_t)q.step ? WINDOW / row_bytes : (size_t)q.step;
    uint8_t *blocks = malloc(per_run * row_bytes), *scales = malloc(per_run * q.groups);
    float *values = malloc(per_run * K * sizeof *values);
    if (!blocks || !scales || !values) mt_die("out of memory");
    int rc = 0;
    for (uint64_t r = r0; r <= r1 && rc == 0;) {
        uint64_t n = (r1 - r) + 1, first = (uint64_t)q.first + r * q.step; // t's rows this run
        if ((n - 1) * q.step + 1 > per_run) n = (per_run - 1) / q.step + 1;
        size_t span = (size_t)((n - 1) * q.step + 1); // quantized rows read
        rc = hf_read_bytes(ix, bt, first * row_bytes, span * row_bytes, blocks, err, errlen);
        if (rc == 0)
            rc = hf_read_bytes(ix, st, first * q.groups, span * q.groups, scales, err, errlen);
        if (rc < 0) break;
        int64_t suspect = mxfp4_dequantize_rows(values, blocks, scales, (int64_t)span, q.groups);
        if (suspect)
            rc = failf(err, errlen,
                       "%s: tensor %s: %lld values infinite or under scale 255 (E8M0's NaN) in "
                       "expert %lld's rows %lld-%lld: refused",
                       hf_tensor_file(ix, bt), bn, (long long)suspect, (long long)(first / q.rows),
                       (long long)(first % q.rows), (long long)((first + span - 1) % q.rows));
        for (uint64_t k = 0; k < n && rc == 0; k++) {
            uint64_t lo = (r + k) * K > off ? (r + k) * K : off;
            uint64_t hi = (r + k + 1) * K < off + count ? (r + k + 1) * K : off + count;
            memcpy(out + (lo - off), values + k * q.step * K + (lo - (r + k) * K),
                   (hi - lo) * sizeof *out);
        }
        r += n;
    }
    free(blocks);
    free(scales);
    free(values);
    return rc;
}

// t's elements [off, off + count) from its plain hub tensor: for each of t's columns c, the run
// of hub elements that holds rows r0..r1 (one hub row of a transposed tensor), many columns a
// read while they fit the window.
static int read_plain(const hf_index *ix, const mt_model *m, const tensor_info *t, const char *name,
                      uint64_t off, uint64_t count, float *out, char *err, size_t errlen) {
    hub_place p = hub_place_of(m, t);
    uint64_t cols = t->cols ? (uint64_t)t->cols : 1, end = off + count;
    uint64_t r0 = off / cols, r1 = (end - 1) / cols;
    uint64_t c_lo = r0 == r1 ? off % cols : 0, c_hi = r0 == r1 ? (end - 1) % cols : cols - 1;
    uint64_t span = (r1 - r0) * p.row_step + 1, cap = span > WINDOW ? span : WINDOW;
    float *buf = malloc(cap * sizeof *buf);
    if (!buf) mt_die("out of memory");
    int rc = 0;
    for (uint64_t c = c_lo; c <= c_hi && rc == 0;) {
        uint64_t n = p.col_step ? 1 + (cap - span) / p.col_step : 1;
        if (n > c_hi - c + 1) n = c_hi - c + 1;
        uint64_t first = p.base + c * p.col_step + r0 * p.row_step;
        rc = hf_read_range(ix, name, first, (n - 1) * p.col_step + span, buf, err, errlen);
        for (uint64_t k = 0; k < n && rc == 0; k++)
            for (uint64_t r = r0; r <= r1; r++) {
                uint64_t i = r * cols + c + k;
                if (i >= off && i < end) out[i - off] = buf[k * p.col_step + (r - r0) * p.row_step];
            }
        c += n;
    }
    free(buf);
    return rc;
}

// t's elements [off, off + count) from a fused projection whose rows are ours in another order
// (Qwen3-Next's in_proj_qkvz and in_proj_ba): each of our rows is one hub row, read whole.
static int read_rows(const hf_index *ix, const mt_model *m, const tensor_info *t, const char *name,
                     uint64_t off, uint64_t count, float *out, char *err, size_t errlen) {
    uint64_t cols = (uint64_t)t->cols, end = off + count;
    for (uint64_t r = off / cols; r * cols < end; r++) {
        uint64_t lo = r * cols > off ? r * cols : off,
                 hi = (r + 1) * cols < end ? (r + 1) * cols : end;
        uint64_t first = hub_row(m, t->hub_layout, r) * cols + (lo - r * cols);
        if (hf_read_range(ix, name, first, hi - lo, out + (lo - off), err, errlen) < 0) return -1;
    }
    return 0;
}

int hf_hub_read(const hf_index *ix, const mt_model *m, const tensor_info *t, const char *name,
                uint64_t off, uint64_t count, float *out, char *err, size_t errlen) {
    if (count == 0) return 0;
    if (hub_row_mapped(t)) return read_rows(ix, m, t, name, off, count, out, err, errlen);
    if (t->hub_layout == HUB_STACKED) // our layout, expert after expert
        return hf_read_range(ix, name, hub_place_of(m, t).base + off, count, out, err, errlen);
    if (quantizable(t) && !hf_tensor_named(ix, name))
        return read_mxfp4(ix, t, name, off, count, out, err, errlen);
    return read_plain(ix, m, t, name, off, count, out, err, errlen);
}
