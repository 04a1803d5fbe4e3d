// The model options the layer templates do not compute yet, refused at a backend's start with
// one line (exit 2), so that no job trains a model other than the one its config describes.
// The CUDA backend asks it: the model description and the CPU templates have them, its parts are
// on the way.
#include "runtime/engine/backend.h"
#include "shm/syscheck.h"

void backend_refuse_pending(const mt_config *c, const char *where) {
    for (int l = 0; l < c->layers; l++)
        if (mt_layer_kind_of(c, l)->attention == ATTN_GDN)
            mt_refuse("model.layer_types: layer %d is linear_attention (Gated DeltaNet): %s", l,
                      where);
    if (c->attn_output_gate) mt_refuse("model.attn_output_gate: %s", where);
    if (c->norm_zero_centered) mt_refuse("model.norm_zero_centered: %s", where);
}
