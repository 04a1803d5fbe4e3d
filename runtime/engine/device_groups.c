#include "runtime/engine/device_groups.h"
#include "runtime/base/base.h"
#include <stdlib.h>

static float **slot(device_groups *d, int g, int which) {
    return &d->state[g * 3 + which];
}

// Host room for the largest group, only while state moves (at start and at saves), so that
// the steady state holds no host copy.
static void staging_new(device_groups *d) {
    size_t most = 0;
    for (int g = 0; g < d->groups; g++)
        most = d->job->group_numel[g] > most ? d->job->group_numel[g] : most;
    d->staging = malloc(most * sizeof(float));
    if (!d->staging)
        mt_die("out of memory: %zu MiB to move the device-updated groups' state", most >> 18);
}

static void staging_free(device_groups *d) {
    free(d->staging);
    d->staging = NULL;
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
            size_t n = job->group_numel[g];
            for (int k = 0; k < job->n_shards; k++)
                job_recv_floats(d->staging + job->layouts[k].lo[g], job->layouts[k].len[g], k + 1);
            *slot(d, g, which) = ops->alloc(be, n * sizeof(float));
            ops->upload(be, *slot(d, g, which), d->staging, n * sizeof(float));
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

void device_groups_update(device_groups *d, int g, const adamw_params *hp, const float *grads,
                          void *w) {
    d->ops->adamw(d->be, *slot(d, g, 0), *slot(d, g, 1), *slot(d, g, 2), w, grads,
                  d->job->group_numel[g], hp);
}

void device_groups_send_back(device_groups *d) {
    mt_job *job = d->job;
    staging_new(d);
    for (int g = 0; g < d->groups; g++)
        for (int which = 0; which < 3; which++) {
            d->ops->download(d->be, d->staging, *slot(d, g, which),
                             job->group_numel[g] * sizeof(float));
            for (int k = 0; k < job->n_shards; k++)
                job_send_floats(d->staging + job->layouts[k].lo[g], job->layouts[k].len[g], k + 1);
        }
    staging_free(d);
}
