#include "runtime/optimizer.h"
#include "kernels/adamw.h"
#include "runtime/checkpoint.h"
#include "runtime/model.h"
#include "runtime/schedule.h"
#include "shm/syscheck.h"
#include <math.h>
#include <numa.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    mt_job *job;
    int shard;
    group_state *state; // [n_groups]
    double *sumsq;      // [n_groups]: this step's squared gradient norm of each group
    int64_t *grads_step;
} optimizer;

// NUMA-local, and first touched by the threads that will update it (the same static schedule
// as adamw_update), so each page lands next to the core that streams it.
static float *alloc_local(size_t n) {
    size_t bytes = (n ? n : 1) * sizeof(float);
    float *p = numa_available() >= 0 ? numa_alloc_local(bytes) : aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p) mt_die("out of memory: optimizer state of %zu MiB", bytes >> 20);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) p[i] = 0.0f;
    return p;
}

static void free_local(float *p, size_t n) {
    if (numa_available() >= 0) numa_free(p, (n ? n : 1) * sizeof(float));
    else free(p);
}

static void publish_weights(optimizer *o, int g, int version) {
    mt_job *job = o->job;
    float *master = o->state[g].master;
    bf16 *wire = job_wire(job, o->shard, g);
    size_t n = job->layouts[o->shard].len[g];
    if (version == job->start_step) // at start: the wire copy is derived from master
        for (size_t i = 0; i < n; i++) wire[i] = bf16_from_float(master[i]);
    job_control_block(job, o->shard)->weights_version[g] = version;
    control_msg msg = {CONTROL_WEIGHTS_READY, g, version, 0};
    control_send(job->ctl, 0, &msg);
}

static void init_state(optimizer *o) {
    mt_job *job = o->job;
    const shard_layout *lay = &job->layouts[o->shard];
    for (int g = 0; g < job->n_groups; g++) {
        o->state[g].master = alloc_local(lay->len[g]);
        o->state[g].m = alloc_local(lay->len[g]);
        o->state[g].v = alloc_local(lay->len[g]);
        if (!job->resume_path[0])
            model_init_slice(&job->cfg, g, lay->lo[g], lay->len[g], o->state[g].master);
    }
    if (job->resume_path[0]) checkpoint_load(job, o->state);
}

// Gradients arrive in backward order; the update needs them all, for the global norm.
static void wait_for_gradients(optimizer *o, int step) {
    mt_job *job = o->job;
    int missing = 0;
    for (int g = 0; g < job->n_groups; g++) missing += o->grads_step[g] != step;
    while (missing > 0) {
        control_msg msg;
        control_recv(job->ctl, &msg);
        if (msg.kind != CONTROL_GRADS_READY || msg.step != step || msg.group < 0 ||
            msg.group >= job->n_groups || o->grads_step[msg.group] == step)
            mt_die("optimizer %d: unexpected control message kind %d group %d step %lld", o->shard,
                   msg.kind, msg.group, (long long)msg.step);
        o->grads_step[msg.group] = step;
        o->sumsq[msg.group] = msg.value;
        missing--;
    }
}

// The norm is summed over groups in a fixed order from per-group values computed once by the
// compute rank, so every optimizer rank, for any -np, gets the same bits.
static float clip_scale(const optimizer *o) {
    if (o->job->cfg.clip <= 0) return 1.0f;
    double total = 0;
    for (int g = 0; g < o->job->n_groups; g++) total += o->sumsq[g];
    return clip_coefficient(sqrt(total), o->job->cfg.clip);
}

static void fault_injection(const optimizer *o, int step) {
    const char *f = getenv("MT_FAULT_ABORT_AT_STEP"); // for tests: die like a crashed process
    if (f && o->shard == 0 && atoi(f) == step) {
        fprintf(stderr, "optimizer 0: MT_FAULT_ABORT_AT_STEP=%d: aborting\n", step);
        abort();
    }
}

static void update_step(optimizer *o, int step) {
    mt_job *job = o->job;
    const mt_config *c = &job->cfg;
    adamw_params hp = {(float)lr_at_step(c, step), (float)c->beta1, (float)c->beta2, (float)c->eps,
                       (float)c->weight_decay, step + 1, clip_scale(o)};
    for (int g = 0; g < job->n_groups; g++) {
        size_t n = job->layouts[o->shard].len[g];
        adamw_update(o->state[g].master, o->state[g].m, o->state[g].v, job_wire(job, o->shard, g),
                     job_grad_slot(job, o->shard, g), n, &hp);
        publish_weights(o, g, step + 1);
    }
}

static int checkpoint_due(const mt_job *job, int version) {
    int every = job->cfg.checkpoint_interval;
    return every > 0 && (version == job->end_step || version % every == 0);
}

void optimizer_run(mt_job *job) {
    optimizer o = {job, job_shard_of_rank(job->rank), NULL, NULL, NULL};
    o.state = calloc(job->n_groups, sizeof *o.state);
    o.sumsq = calloc(job->n_groups, sizeof *o.sumsq);
    o.grads_step = malloc(job->n_groups * sizeof *o.grads_step);
    for (int g = 0; g < job->n_groups; g++) o.grads_step[g] = -1;
    init_state(&o);
    for (int g = 0; g < job->n_groups; g++) publish_weights(&o, g, job->start_step);
    for (int step = job->start_step; step < job->end_step; step++) {
        wait_for_gradients(&o, step);
        fault_injection(&o, step);
        update_step(&o, step);
        if (checkpoint_due(job, step + 1)) checkpoint_save(job, step + 1, o.state);
    }
    for (int g = 0; g < job->n_groups; g++) {
        size_t n = job->layouts[o.shard].len[g];
        free_local(o.state[g].master, n);
        free_local(o.state[g].m, n);
        free_local(o.state[g].v, n);
    }
    free(o.state);
    free(o.sumsq);
    free(o.grads_step);
}
