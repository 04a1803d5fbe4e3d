// The hub's fused expert tensors, as positions (runtime/io/hub_layout.h).
#include "runtime/io/hub_layout.h"
#include <string.h>

hub_place hub_place_of(const mt_config *c, const tensor_info *t) {
    uint64_t E = (uint64_t)c->experts, rows = (uint64_t)t->rows;
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
           (t->expert <= 0 && t->hub_layout != HUB_GATE_UP_ODD && t->hub_layout != HUB_BIAS_ODD);
}

int hub_permuted(const tensor_info *t) {
    return t->hub_layout != HUB_PLAIN && t->hub_layout != HUB_STACKED;
}

void hub_permute_slab(const mt_config *c, const tensor_info *even, const unsigned char *staged,
                      unsigned char *hub, int es) {
    tensor_info t = *even;
    t.expert = 0;
    int pairs = even->hub_layout == HUB_GATE_UP_EVEN || even->hub_layout == HUB_BIAS_EVEN;
    uint64_t cols = t.cols ? (uint64_t)t.cols : 1;
    for (int odd = 0; odd <= pairs; odd++) {
        if (odd) t.hub_layout++; // HUB_*_EVEN + 1 is its HUB_*_ODD
        hub_place p = hub_place_of(c, &t);
        const unsigned char *src = staged + (size_t)p.staged * es;
        for (uint64_t r = 0; r < (uint64_t)t.rows; r++)
            for (uint64_t k = 0; k < cols; k++)
                memcpy(hub + (size_t)(p.base + r * p.row_step + k * p.col_step) * es,
                       src + (size_t)(r * cols + k) * es, (size_t)es);
    }
}
