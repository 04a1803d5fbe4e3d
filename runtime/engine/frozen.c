#include "runtime/engine/frozen.h"
#include "runtime/base/base.h"
#include <stdlib.h>

// Span [lo, lo + n) of group g into out: from the master the compute rank keeps (a group it
// updates), else each shard's share as its optimizer rank sends it (in layer order, as here).
static void span_values(mt_job *job, const device_groups *dev, int g, uint64_t lo, uint64_t n,
                        float *out) {
    if (g < dev->groups) {
        dev->ops->download(dev->be, out, dev->state[g * 3] + lo, n * sizeof(float));
        return;
    }
    for (int k = 0; k < job->n_shards; k++) {
        uint64_t at, len = job_slice_overlap(job, k, g, lo, lo + n, &at);
        if (len) job_recv_floats(out + (at - lo), len, k + 1);
    }
}

void frozen_receive(mt_job *job, const device_groups *dev) {
    const mt_model *m = &job->cfg.model;
    for (int l = 0; l < m->layers; l++) {
        uint64_t n = model_frozen_numel(m, l), lo[MODEL_MAX_FROZEN], hi[MODEL_MAX_FROZEN];
        if (n == 0) continue;
        float *image = malloc(n * sizeof(float));
        if (!image) mt_die("out of memory");
        int g = model_layer_group(l), spans = model_frozen_spans(m, g, lo, hi);
        uint64_t at = 0;
        for (int i = 0; i < spans; at += hi[i] - lo[i], i++)
            span_values(job, dev, g, lo[i], hi[i] - lo[i], image + at);
        dev->ops->set_frozen(dev->be, l, image);
        free(image);
    }
}
