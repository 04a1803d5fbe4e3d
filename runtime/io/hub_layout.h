// Where the hub's fused tensors (moe_names "gpt_oss", Qwen3-Next's in_proj_qkvz and in_proj_ba,
// roles.h's HUB_* layouts) hold each of our tensors, private to io/: the reader (safetensors_hub.c)
// and the export (export.c) both take the positions from here.
//
// Our tensor t is [rows, cols] (a vector: [rows]); its element (r, c) is element
//   base + r * row_step + c * col_step
// of the hub's flat tensor (a row-mapped layout: element c of hub row hub_row(r) instead). The
// export first writes each expert's tensors into its slab of the hub tensor in our layout
// ("staged": the even one, then the odd one), then permutes each slab into the hub's order.
#ifndef MT_HUB_LAYOUT_H
#define MT_HUB_LAYOUT_H

#include "runtime/model/model.h"
#include <stdint.h>

typedef struct {
    int ndim;
    int64_t dims[3];   // the hub tensor's shape
    uint64_t numel;    // its elements
    uint64_t base;     // where t's element (0, 0) is
    uint64_t row_step; // t's next row
    uint64_t col_step; // t's next column
    uint64_t slab;     // one expert's elements of the hub tensor (numel for HUB_PLAIN)
    uint64_t staged;   // where the export stages t: its slab, then after the even tensor
} hub_place;

// t's place in its hub tensor (c gives the number of experts).
hub_place hub_place_of(const mt_model *m, const tensor_info *t);
// Whether t is the first of the tensors its hub tensor holds (the export plans a hub tensor once).
int hub_first(const tensor_info *t);
// Whether the hub's order differs from the staged one (the export permutes those slabs).
int hub_permuted(const tensor_info *t);
// Qwen3-Next's fused projections (HUB_QKVZ_*, HUB_BA_*) map each of our rows, whole, to a row of
// the hub tensor: whether t's layout does, and the hub row of our row r under layout.
int hub_row_mapped(const tensor_info *t);
uint64_t hub_row(const mt_model *m, int layout, uint64_t r);
// The slabs the export permutes in t's hub tensor: one an expert, or the whole fused projection.
int hub_slabs(const mt_model *m, const tensor_info *t);
// One expert's slab (or a fused projection), staged (its tensors one after the other, in our
// layout) -> the hub's order, elements of es bytes. even is the even (or only) tensor: every tensor
// of the slab has its shape.
void hub_permute_slab(const mt_model *m, const tensor_info *even, const unsigned char *staged,
                      unsigned char *hub, int es);

#endif
