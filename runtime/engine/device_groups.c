#include "runtime/engine/device_groups.h"
#include "runtime/base/base.h"
#include <stdlib.h>

static float **slot(device_groups *d, int g, int which) {
    return &d->state[g * 3 + which];
}

// Host room for one piece of state in motion (job_piece), only while state moves (at start,
// saves and exports): the optimizer ranks send and take it a piece at a time.
static void staging_new(device_groups *d) {
    d->staging = job_piece_buffer();
}

static void staging_free(device_groups *d) {
    free(d->staging);
    d->staging = NULL;
}

// Shard k's slice of array `which` of group g, a piece at a time, from (to) its optimizer rank.
static void move_slice(device_groups *d, int g, int which, int k, int sending) {
    const shard_layout *lay = &d->job->layouts[k];
    float *array = *slot(d, g, which) + lay->lo[g];
    for (uint64_t at = 0, n; at < lay->len[g]; at += n) {
        n = job_piece_len(lay->len[g], at);
        if (sending) {
            d->ops->download(d->be, d->staging, array + at, n * sizeof(float));
            job_send_floats(d->staging, n, k + 1);
        } else {
            job_recv_floats(d->staging, n, k + 1);
            d->ops->upload(d->be, array + at, d->staging, n * sizeof(float));
        }
    }
}

void device_groups_init(device_groups *d, mt_job *job, const backend_ops *ops, backend *be,
                        int groups) {
    memset(d, 0, sizeof *d);
    d->job = job, d->ops = ops, d->be = be;
    d->groups = groups;
    if (!groups) return;
    d->state = calloc((size_t)groups * 3, sizeof *d->state);
    if (!d->state) mt_die("out of memory");
    staging_new(d);
    for (int g = 0; g < groups; g++)
        for (int which = 0; which < 3; which++) {
            *slot(d, g, which) = ops->alloc(be, job->group_numel[g] * sizeof(float));
            for (int k = 0; k < job->n_shards; k++) move_slice(d, g, which, k, 0);
        }
    staging_free(d);
}

void device_groups_free(device_groups *d) {
    for (int i = 0; i < d->groups * 3; i++) d->ops->release(d->be, d->state[i]);
    free(d->state);
}

void device_groups_weights(device_groups *d, int g, void *w) {
    d->ops->weights_of(d->be, w, *slot(d, g, 0), d->job->group_numel[g]);
}

// AdamW around the group's frozen tensors (model_frozen_spans), whose state stays as it is and
// whose weights are their master's, as a fetch brings them.
void device_groups_update(device_groups *d, int g, const adamw_params *hp, const float *grads,
                          void *w) {
    uint64_t lo[MODEL_MAX_FROZEN], hi[MODEL_MAX_FROZEN], n = d->job->group_numel[g];
    int spans = model_frozen_spans(&d->job->cfg.model, g, lo, hi), frozen;
    float *p = *slot(d, g, 0), *m = *slot(d, g, 1), *v = *slot(d, g, 2);
    char *wb = w;
    size_t es = (size_t)d->ops->weight_bytes;
    for (uint64_t a = 0, b; a < n; a = b) {
        b = model_frozen_run(lo, hi, spans, a, n, &frozen);
        if (frozen)
            d->ops->weights_of(d->be, wb + a * es, p + a, b - a);
        else
            d->ops->adamw(d->be, p + a, m + a, v + a, wb + a * es, grads + a, b - a, hp);
    }
}

void device_groups_send_back(device_groups *d, int arrays) {
    staging_new(d);
    for (int g = 0; g < d->groups; g++)
        for (int which = 0; which < arrays; which++)
            for (int k = 0; k < d->job->n_shards; k++) move_slice(d, g, which, k, 1);
    staging_free(d);
}
