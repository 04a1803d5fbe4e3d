// A step's gradients arriving on an optimizer rank, and with the gradient ring (optimizer.clip
// = 0) the updates they start.
//
// The ring's order of work. Gradients land in the backward's order (the head, the last layer,
// ..., the first layer, the embedding); the next forward needs the groups in the opposite one.
// Updated whole as they land, the groups the forward starts with are updated last: where AdamW
// on the host is slower than the backward (an MoE layer's 0.6 B parameters take about 150 ms,
// its backward about 100 ms), the backlog at the step's end is those very layers, and the GPU
// waits for all of it before its first streamed layer. So a rank that may reorder (o->reorder)
// updates the landed groups a piece at a time, each piece of the group the next forward needs
// first, except that the group holding the slot the next gradients will land in goes first (the
// backward would wait for it). The backlog left at the step's end is then the last layers, which
// are updated while the forward runs the first ones. AdamW is element-wise: the same bits in
// any order.
//
// Kept whole and in arrival order (model_ring_by_urgency): the state split across nodes (each
// group's update gathers its master parts over the nodes, collectives that must pair up in one
// order on every node) and the NVMe tier (its windows read the moments ahead in arrival order);
// MT_RING_ORDER=arrival keeps it everywhere, for benchmarks that compare the two.
#include "runtime/optimizer/optimizer_parts.h"
#include "runtime/base/base.h"
#include "runtime/observe/observe.h"
#include <math.h>
#include <stdio.h>

// The ring: group g's gradients are in; it is updated now, which frees its slot for the
// gradients the compute rank has waiting. No clipping (optimizer.clip = 0), so nothing else is
// needed, and the bits are what update_step makes. From a group whose norm is not finite on,
// nothing more of the step is updated (the groups before it were: the job ends unsaved, and
// job_note_step says so); the groups are still published, for the compute rank waits on them.
static void update_as_it_lands(optimizer *o, int g, int step) {
    mt_job *job = o->job;
    if (!isfinite(o->sumsq[g])) o->ring_bad = 1;
    if (o->ring_bad) {
        opt_publish_weights(o, g, step + 1);
        return;
    }
    adamw_params hp = adamw_params_at_step(&job->cfg, step, job->skipped_steps, 1.0f);
    opt_update_group(o, g, step, &hp);
}

// The ring over nodes with the state split: each group's update gathers its master parts from
// the other nodes (gather_master_parts), and these collectives pair up across nodes in the order
// the gradients land, so that order must be the backward's on every node. The compute rank
// announces in it (transfer.c); were it ever to stray, two layers' gathers of the same size would
// pair up without a word, so this says so instead.
static void check_arrival(const optimizer *o, int g, int step, int k) {
    if (!o->job->ring_depth || !job_moments_split(o->job) || g == o->arrival[k]) return;
    mt_die("optimizer %d: group %d's gradients of step %d came as number %d of the step, where "
           "the backward has group %d",
           o->shard, g, step + 1, k + 1, o->arrival[k]);
}

// One control message of the step: the group whose gradients it says landed, or -1 for a stop
// request (Ctrl-C: this step is the last).
static int landed_group(optimizer *o, const control_msg *msg, int step, int missing) {
    mt_job *job = o->job;
    if (msg->kind == CONTROL_STOP && msg->step == step) {
        job_stop_after(job, step);
        return -1;
    }
    int g = msg->group;
    if (msg->kind != CONTROL_GRADS_READY || msg->step != step || g < 0 || g >= job->n_groups ||
        o->grads_step[g] == step)
        mt_die("optimizer %d: unexpected control message kind %d group %d step %lld", o->shard,
               msg->kind, g, (long long)msg->step);
    check_arrival(o, g, step, job->n_groups - missing);
    o->grads_step[g] = step;
    o->sumsq[g] = msg->value;
    return g;
}

// The next message, waited for.
static void wait_message(optimizer *o, control_msg *msg, int step) {
    mt_job *job = o->job;
    char what[48];
    snprintf(what, sizeof what, "the gradients of step %d", step + 1);
    job_recv(job, msg, step == job->start_step ? NULL : what, 0); // the start: unwatched
}

// The trace's "wait grads" span from t0 to now.
static void record_wait(double t0) {
    trace_record(TRACE_OPTIMIZER, trace_tag_of("wait grads", TRACE_ARG_NONE, 0), t0,
                 trace_now_us());
}

// ---- the ring, reordered ----

typedef struct {
    int pending; // landed groups not yet fully updated
    int current; // the group the open "adamw" span is of (-1: none)
    double t0;   // when that span opened
    adamw_params hp;
} reorder_run;

// The host-updated group whose gradients land next this step, -1 when all have.
static int next_landing(const optimizer *o, int step) {
    const mt_job *job = o->job;
    for (int k = 0; k < job->n_groups; k++) {
        int g = o->arrival[k];
        if (g >= job->device_groups && o->grads_step[g] != step) return g;
    }
    return -1;
}

// The landed group to update a piece of now (see the top of the file).
static int most_urgent(const optimizer *o, int step) {
    const mt_job *job = o->job;
    int next = next_landing(o, step);
    int holder = next >= 0 ? job->layouts[0].ring_prev[next] : -1;
    if (holder >= 0 && o->left[holder] > 0) return holder;
    for (int g = job->device_groups; g < job->n_groups; g++)
        if (o->left[g] > 0) return g;
    return -1;
}

static void close_span(optimizer *o, reorder_run *r) {
    if (r->current >= 0)
        trace_record(TRACE_OPTIMIZER, trace_tag_of("adamw", TRACE_ARG_GROUP, r->current), r->t0,
                     trace_now_us());
    r->current = -1;
}

// A landed group joins the pending ones. A non-finite norm ends the step's updates: every
// group not yet updated in full is published as it is (the job ends unsaved, as above).
static void join(optimizer *o, reorder_run *r, int g, int step) {
    if (!isfinite(o->sumsq[g]) && !o->ring_bad) {
        o->ring_bad = 1;
        close_span(o, r);
        for (int h = 0; h < o->job->n_groups; h++)
            if (o->left[h] > 0) o->left[h] = 0, opt_publish_weights(o, h, step + 1);
        r->pending = 0;
    }
    if (o->ring_bad)
        opt_publish_weights(o, g, step + 1);
    else if (o->part_n[g] == 0) // nothing of it on this rank
        opt_finish_group(o, g, step, -1);
    else
        o->left[g] = o->part_n[g], r->pending++;
}

// One piece of the most urgent pending group; its announcement when that was its last.
static void update_one_piece(optimizer *o, reorder_run *r, int step) {
    int g = most_urgent(o, step);
    if (g != r->current) close_span(o, r), r->current = g, r->t0 = trace_now_us();
    uint64_t n = o->left[g] < o->piece ? o->left[g] : o->piece;
    opt_update_span(o, g, o->part_n[g] - o->left[g], n, step, &r->hp);
    o->left[g] -= n;
    if (o->left[g] > 0) return;
    opt_finish_group(o, g, step, r->t0);
    r->current = -1, r->pending--;
}

// The gradients as they land, and between landings a piece of work at a time.
static void receive_reordered(optimizer *o, int step, int missing) {
    mt_job *job = o->job;
    reorder_run r = {.current = -1};
    r.hp = adamw_params_at_step(&job->cfg, step, job->skipped_steps, 1.0f);
    while (missing > 0 || r.pending > 0) {
        control_msg msg;
        if (r.pending == 0) { // nothing to do: a "wait grads" span
            double t0 = trace_now_us();
            wait_message(o, &msg, step);
            record_wait(t0);
        } else if (control_try_recv(job->ctl, &msg) < 0) {
            update_one_piece(o, &r, step);
            continue;
        }
        int g = landed_group(o, &msg, step, missing);
        if (g < 0) continue;
        missing--;
        if (g >= job->device_groups) join(o, &r, g, step);
    }
}

void opt_receive_step(optimizer *o, int step) {
    mt_job *job = o->job;
    int missing = 0;
    o->ring_bad = 0;
    storage_begin_moments(o->tier, o->order, o->n_order); // their reads overlap the backward
    for (int g = 0; g < job->n_groups; g++) missing += o->grads_step[g] != step;
    if (o->reorder) { // model_ring_by_urgency: with the ring only
        receive_reordered(o, step, missing);
        storage_end(o->tier);
        return;
    }
    // The trace's "wait grads": one span with a slot per group, one before each group's update
    // with the ring.
    double t0 = trace_now_us();
    while (missing > 0) {
        control_msg msg;
        wait_message(o, &msg, step);
        int g = landed_group(o, &msg, step, missing);
        if (g < 0) continue;
        missing--;
        if (g < job->device_groups || !job->ring_depth) continue;
        record_wait(t0);
        update_as_it_lands(o, g, step);
        t0 = trace_now_us();
    }
    record_wait(t0);
    if (job->ring_depth) storage_end(o->tier);
}
