// The CPU backend's working set of one layer over one micro-batch, allocated once and reused by
// every layer and micro-batch.
#include "runtime/engine/layer_scratch.h"
#include "runtime/engine/host_buffers.h"
#include "kernels/cpu/kernels_cpu.h"
#include "shm/syscheck.h"
#include <stdlib.h>

// The buffers are MT_CPU_LAYER's, MT_CPU_GDN's and MT_CPU_MLA's (buffers.h).
layer_scratch *layer_scratch_new(const mt_config *c, int B, int T) {
    layer_scratch *s = calloc(1, sizeof *s);
    if (!s) mt_die("out of memory");
    s->B = B, s->T = T;
    mt_buffer_shape shape;
    mt_buffer_shape_of(&shape, c, B, T);
    mt_buffer_list l;
    mt_buffers_cpu_layer(&l, &shape);
    void **slots[] = {MT_CPU_LAYER(MT_BUFFER_SLOT, s, _)};
    s->bytes = host_buffers_new(&l, HOST_SLOTS(slots), "the layer working set");
    mt_buffers_cpu_gdn(&l, &shape);
    void **gdn[] = {MT_CPU_GDN(MT_BUFFER_SLOT, s, _)};
    s->bytes += host_buffers_new(&l, HOST_SLOTS(gdn), "the Gated DeltaNet working set");
    mt_buffers_cpu_mla(&l, &shape);
    void **mla[] = {MT_CPU_MLA(MT_BUFFER_SLOT, s, _)};
    s->bytes += host_buffers_new(&l, HOST_SLOTS(mla), "the latent attention working set");
    s->rope_scale = model_rope_inv_freq(&c->model, s->inv_freq);
    if (c->model.experts > 0) {
        s->moe = moe_scratch_new(c, B * T);
        s->bytes += moe_scratch_bytes(s->moe);
    }
    return s;
}

void layer_scratch_free(layer_scratch *s) {
    if (!s) return;
    void **slots[] = {MT_CPU_LAYER(MT_BUFFER_SLOT, s, _)};
    host_buffers_free(HOST_SLOTS(slots));
    void **gdn[] = {MT_CPU_GDN(MT_BUFFER_SLOT, s, _)};
    host_buffers_free(HOST_SLOTS(gdn));
    void **mla[] = {MT_CPU_MLA(MT_BUFFER_SLOT, s, _)};
    host_buffers_free(HOST_SLOTS(mla));
    moe_scratch_free(s->moe);
    free(s);
}
