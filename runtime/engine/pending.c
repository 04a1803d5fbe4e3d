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
    // multi-head latent attention: its values are padded to q's and k's head width, which the
    // attention kernels take up to 256 (attn_mla_cuda.c)
    if (c->mla_kv_rank > 0 && c->mla_v_dim > mt_mla_qk_dim(c))
        mt_refuse("model.mla_v_dim: values of %d, wider than q's and k's heads of %d: %s",
                  c->mla_v_dim, mt_mla_qk_dim(c), where);
    if (c->mla_kv_rank > 0 && mt_mla_qk_dim(c) > 256)
        mt_refuse("model.mla_nope_dim + model.mla_rope_dim: heads of %d, over 256: %s",
                  mt_mla_qk_dim(c), where);
}
