// The hub's fused tensors, as positions (runtime/io/hub_layout.h).
#include "runtime/io/hub_layout.h"
#include <string.h>

static int row_mapped(int layout) {
    return layout >= HUB_QKVZ_QKV && layout <= HUB_BA_A;
}

// Rows of our tensor of a row-mapped layout: in_proj_qkv's q, k and v, in_proj_z's and in_proj_b's
// and in_proj_a's value heads.
static uint64_t mapped_rows(const mt_model *m, int layout) {
    uint64_t kh = (uint64_t)m->linear_k_heads, vh = (uint64_t)m->linear_v_heads;
    uint64_t dk = (uint64_t)m->linear_k_dim, dv = (uint64_t)m->linear_v_dim;
    switch (layout) {
    case HUB_QKVZ_QKV:
        return 2 * kh * dk + vh * dv;
    case HUB_QKVZ_Z:
        return vh * dv;
    }
    return vh; // HUB_BA_B, HUB_BA_A
}

uint64_t hub_row(const mt_model *m, int layout, uint64_t r) {
    uint64_t kh = (uint64_t)m->linear_k_heads, vh = (uint64_t)m->linear_v_heads;
    uint64_t dk = (uint64_t)m->linear_k_dim, dv = (uint64_t)m->linear_v_dim, per = vh / kh;
    uint64_t group = 2 * dk + 2 * per * dv; // in_proj_qkvz's rows of one key head
    switch (layout) {
    case HUB_QKVZ_QKV:
        if (r < kh * dk) return r / dk * group + r % dk;                      // q
        if (r < 2 * kh * dk) return (r - kh * dk) / dk * group + dk + r % dk; // k
        r -= 2 * kh * dk; // v: key head r / (per x dv) serves it
        return r / (per * dv) * group + 2 * dk + r % (per * dv);
    case HUB_QKVZ_Z:
        return r / (per * dv) * group + 2 * dk + per * dv + r % (per * dv);
    case HUB_BA_B:
        return r / per * 2 * per + r % per;
    case HUB_BA_A:
        return r / per * 2 * per + per + r % per;
    }
    return r;
}

// A row-mapped tensor's place: the fused tensor holds two of ours, the even one (in_proj_qkv,
// in_proj_b) staged first, the odd one after it.
static hub_place mapped_place(const mt_model *m, const tensor_info *t) {
    int even = t->hub_layout == HUB_QKVZ_QKV || t->hub_layout == HUB_BA_B;
    int first = even ? t->hub_layout : t->hub_layout - 1;
    uint64_t cols = (uint64_t)t->cols;
    uint64_t rows = mapped_rows(m, first) + mapped_rows(m, first + 1);
    return (hub_place){.ndim = 2,
                       .dims = {(int64_t)rows, t->cols},
                       .numel = rows * cols,
                       .row_step = cols,
                       .col_step = 1,
                       .slab = rows * cols,
                       .staged = even ? 0 : mapped_rows(m, first) * cols};
}

hub_place hub_place_of(const mt_model *m, const tensor_info *t) {
    uint64_t E = (uint64_t)m->experts, rows = (uint64_t)t->rows;
    uint64_t cols = t->cols ? (uint64_t)t->cols : 1, e = t->expert > 0 ? (uint64_t)t->expert : 0;
    int odd = t->hub_layout == HUB_GATE_UP_ODD || t->hub_layout == HUB_BIAS_ODD;
    hub_place p = {.row_step = cols, .col_step = 1, .slab = t->numel};
    switch (t->hub_layout) {
    case HUB_GATE_UP_EVEN: // [E, d, 2f]: our gate [f, d]'s (r, c) is [e, c, 2r]
    case HUB_GATE_UP_ODD:
        p = (hub_place){.ndim = 3,
                        .dims = {(int64_t)E, t->cols, 2 * (int64_t)rows},
                        .row_step = 2,
                        .col_step = 2 * rows,
                        .slab = 2 * t->numel};
        break;
    case HUB_EXPERTS_T: // [E, f, d]: our down [d, f]'s (r, c) is [e, c, r]
        p = (hub_place){.ndim = 3,
                        .dims = {(int64_t)E, t->cols, t->rows},
                        .row_step = 1,
                        .col_step = rows,
                        .slab = t->numel};
        break;
    case HUB_BIAS_EVEN: // [E, 2f]: our gate bias [f]'s r is [e, 2r]
    case HUB_BIAS_ODD:
        p = (hub_place){
            .ndim = 2, .dims = {(int64_t)E, 2 * (int64_t)rows}, .row_step = 2, .slab = 2 * rows};
        break;
    case HUB_STACKED: // [E, d]: our down bias [d] is row e
        p = (hub_place){.ndim = 2, .dims = {(int64_t)E, t->rows}, .row_step = 1, .slab = rows};
        break;
    case HUB_FUSED_GATE: // [E, 2f, d]: our gate [f, d] is [e, :f], our up [e, f:]
    case HUB_FUSED_UP:
        p = (hub_place){.ndim = 3,
                        .dims = {(int64_t)E, 2 * (int64_t)rows, t->cols},
                        .row_step = cols,
                        .col_step = 1,
                        .slab = 2 * t->numel};
        p.numel = E * p.slab;
        p.base = p.staged = e * p.slab + (t->hub_layout == HUB_FUSED_UP ? t->numel : 0);
        return p;
    case HUB_FUSED_DOWN: // [E, d, f]: our down [d, f] is [e]
        p = (hub_place){.ndim = 3,
                        .dims = {(int64_t)E, t->rows, t->cols},
                        .row_step = cols,
                        .col_step = 1,
                        .slab = t->numel};
        p.numel = E * p.slab;
        p.base = p.staged = e * p.slab;
        return p;
    case HUB_CONV1D: // [channels, 1, taps]: the same elements
        p.ndim = 3;
        p.dims[0] = t->rows, p.dims[1] = 1, p.dims[2] = t->cols;
        p.numel = t->numel;
        return p;
    case HUB_QKVZ_QKV:
    case HUB_QKVZ_Z:
    case HUB_BA_B:
    case HUB_BA_A:
        return mapped_place(m, t);
    default: // HUB_PLAIN
        p.ndim = t->cols ? 2 : 1;
        p.dims[0] = t->rows, p.dims[1] = t->cols;
        p.numel = t->numel;
        return p;
    }
    p.numel = E * p.slab;
    p.base = e * p.slab + (uint64_t)odd;
    p.staged = e * p.slab + (odd ? t->numel : 0);
    return p;
}

int hub_first(const tensor_info *t) {
    return t->hub_layout == HUB_PLAIN ||
           (t->expert <= 0 && t->hub_layout != HUB_GATE_UP_ODD && t->hub_layout != HUB_BIAS_ODD &&
            t->hub_layout != HUB_QKVZ_Z && t->hub_layout != HUB_BA_A &&
            t->hub_layout != HUB_FUSED_UP);
}

int hub_permuted(const tensor_info *t) {
    return t->hub_layout != HUB_PLAIN && t->hub_layout != HUB_STACKED &&
           t->hub_layout != HUB_CONV1D && t->hub_layout != HUB_FUSED_GATE &&
           t->hub_layout != HUB_FUSED_UP && t->hub_layout != HUB_FUSED_DOWN;
}

int hub_row_mapped(const tensor_info *t) {
    return row_mapped(t->hub_layout);
}

int hub_slabs(const mt_model *m, const tensor_info *t) {
    return row_mapped(t->hub_layout) ? 1 : m->experts;
}

// A fused projection, staged (the even tensor's rows, then the odd one's) -> the hub's row order.
static void permute_rows(const mt_model *m, const tensor_info *even, const unsigned char *staged,
                         unsigned char *hub, int es) {
    size_t row = (size_t)even->cols * es;
    for (int layout = even->hub_layout; layout <= even->hub_layout + 1; layout++) {
        for (uint64_t r = 0; r < mapped_rows(m, layout); r++, staged += row)
            memcpy(hub + hub_row(m, layout, r) * row, staged, row);
    }
}

void hub_permute_slab(const mt_model *m, const tensor_info *even, const unsigned char *staged,
                      unsigned char *hub, int es) {
    if (row_mapped(even->hub_layout)) {
        permute_rows(m, even, staged, hub, es);
        return;
    }
    tensor_info t = *even;
    t.expert = 0;
    int pairs = even->hub_layout == HUB_GATE_UP_EVEN || even->hub_layout == HUB_BIAS_EVEN;
    uint64_t cols = t.cols ? (uint64_t)t.cols : 1;
    for (int odd = 0; odd <= pairs; odd++) {
        if (odd) t.hub_layout++; // HUB_*_EVEN + 1 is its HUB_*_ODD
        hub_place p = hub_place_of(m, &t);
        const unsigned char *src = staged + (size_t)p.staged * es;
        for (uint64_t r = 0; r < (uint64_t)t.rows; r++)
            for (uint64_t k = 0; k < cols; k++)
                memcpy(hub + (size_t)(p.base + r * p.row_step + k * p.col_step) * es,
                       src + (size_t)(r * cols + k) * es, (size_t)es);
    }
}
