#include "runtime/engine/engine.h"
#include "runtime/engine/step.h"
#include "runtime/engine/backend.h"
#include "runtime/io/io.h"
#include "runtime/base/base.h"
#include "runtime/engine/device_groups.h"
#include "runtime/engine/frozen.h"
#include "runtime/engine/sample.h"
#include "runtime/observe/observe.h"
#include "runtime/model/model.h"
#include "runtime/plan/plan.h"
#include "runtime/engine/transfer.h"
#include "shm/syscheck.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

// After the first step: the slots take what memory is left once every allocation is made,
// the CUDA runtime's and cuBLAS's lazy ones (kernels load on first use) included. Until then
// every layer recomputes, which gives the same bits.
// A run of one step reserves none, but still reports its device memory.
static void reserve_kept(engine *e, metrics *mx, int more_steps) {
    const mt_config *c = e->c;
    int pairs = c->model.layers * c->micro_batches, wanted = more_steps ? pairs : 0;
    const char *cap = getenv("MT_KEEP_MAX"); // at most this many (tests; leaving memory free)
    if (cap && atoi(cap) >= 0 && atoi(cap) < wanted) wanted = atoi(cap);
    e->kept = c->recompute == RECOMPUTE_ALWAYS || !wanted ? 0 : e->ops->keep_reserve(e->be, wanted);
    metrics_memory(mx, e->ops->device_bytes_in_use(e->be), e->kept, pairs);
}

static void *device_alloc(engine *e, size_t elems, size_t elem_bytes) {
    return e->ops->alloc(e->be, elems * elem_bytes);
}

static void pick_backend(engine *e) {
    int want = e->c->backend;
#ifdef MT_HAVE_CUDA
    if (want != BACKEND_CPU) {
        e->be = backend_cuda_new(e->c, e->job->gpu);
        if (e->be) {
            e->ops = backend_cuda_ops();
            return;
        }
        if (want == BACKEND_CUDA)
            mt_refuse("backend \"cuda\": no usable CUDA device"); // bad input: exit 2
    }
#else
    if (want == BACKEND_CUDA) mt_refuse("backend \"cuda\": this build has no CUDA backend");
#endif
    e->ops = backend_cpu_ops();
    e->be = backend_cpu_new(e->c);
}

// Decided in engine_new, with the plan's rule (plan_choose), so that mtrun --plan and the
// compute rank agree; said here.
static const char *ordinal_suffix(int k) {
    return k == 2 ? "nd" : k == 3 ? "rd" : "th";
}

static void choose_offload(engine *e) {
    const mt_model *m = &e->c->model;
    const char *where = e->ops->async ? "GPU" : "backend";
    int k = e->every, redo = plan_recomputed_layers(m->layers, k);
    double gib = layer_act_bytes(e) * e->offloaded / 1073741824.0;
    if (e->offload && k > 1)
        printf("compute rank: offloading every %d%s layer boundary (%d of %d, %.2f GiB) to pinned "
               "host memory, two on the %s with a segment's %d; the backward recomputes the %d "
               "between them\n",
               k, ordinal_suffix(k), e->offloaded, m->layers + 1, gib, where, k - 1, redo);
    else if (e->offload)
        printf("compute rank: offloading the boundary activations (%.2f GiB) to pinned host "
               "memory, two layers' worth on the %s\n",
               gib, where);
    else if (k > 1)
        printf("compute rank: keeping every %d%s layer boundary on the %s (%d of %d); the "
               "backward recomputes the %d between them\n",
               k, ordinal_suffix(k), where, m->layers / k + 1, m->layers + 1, redo);
}

// After the boundaries, as the plan counts them: the slots the plan chose, for the pairs in
// plan_attention_order's order.
static void keep_attention(engine *e) {
    const mt_config *c = e->c;
    int M = c->micro_batches, pairs = c->model.layers * M;
    e->att_of = malloc(sizeof(int) * (size_t)pairs);
    int *order = malloc(sizeof(int) * (size_t)c->model.layers);
    if (!e->att_of || !order) mt_die("out of memory");
    e->n_att = e->att_planned ? e->ops->attention_reserve(e->be, e->att_planned) : 0;
    plan_attention_order(c->model.layers, e->every, order);
    for (int i = 0; i < pairs; i++) e->att_of[i] = -1;
    for (int i = 0; i < e->n_att; i++) e->att_of[order[i / M] * M + i % M] = i;
    free(order);
    if (e->att_planned == 0) return;
    char bytes[24];
    plan_bytes_text(bytes, sizeof bytes,
                    (double)e->n_att * plan_attention_slot_bytes(c, e->ops->async));
    printf("compute rank: keeping the attention output of %d of %d layer passes (%s) for the "
           "backward, which then skips their attention forward%s\n",
           e->n_att, pairs, bytes,
           e->n_att < e->att_planned ? " (fewer than planned: the device had less memory)" : "");
}

// Before the activations: the own layers' buffers, and the groups' state, which the optimizer
// ranks send over.
static void own_groups(engine *e) {
    int cuda = strcmp(e->ops->name, "cuda") == 0;
    int groups = e->job->device_groups; // engine_new checked that they fit (plan_check_device)
    size_t wb = e->ops->weight_bytes;
    e->n_own = groups > 1 ? groups - 1 : 0;
    double state = 0; // fp32 master, m, v
    for (int g = 0; g < groups; g++) state += 12.0 * e->job->group_numel[g];
    e->own = calloc(e->n_own ? e->n_own : 1, sizeof *e->own);
    e->own_g = calloc(e->n_own ? e->n_own : 1, sizeof *e->own_g);
    if (!e->own || !e->own_g) mt_die("out of memory");
    for (int l = 0; l < e->n_own; l++) { // each its own layer's size, as the plan counts them
        size_t layer = e->job->group_numel[model_layer_group(l)];
        weight_buffer_init(&e->xfer, &e->own[l], device_alloc(e, layer, wb));
        grad_buffer_init(&e->xfer, &e->own_g[l], device_alloc(e, layer, 4));
        e->own_g[l].stays = 1;
    }
    e->emb_g.stays = groups > 0;
    device_groups_init(&e->dev, e->job, e->ops, e->be, groups);
    for (int g = 0; g < groups; g++) { // resident from now on: update_own_groups keeps them so
        weight_buffer *w = g == 0 ? &e->emb : &e->own[g - 1];
        device_groups_weights(&e->dev, g, w->dst);
        w->group = g, w->version = e->job->start_step, w->ticket = 0; // no copy to wait for
    }
    if (groups > 0) {
        char layers[48];
        plan_device_layers_text(groups, layers, sizeof layers);
        printf("compute rank: AdamW of the embedding%s runs here, on the %s (%.1f MiB of fp32 "
               "master weights and moments)\n",
               layers, cuda ? "GPU" : "CPU", state / 1048576.0);
    }
}

static void show_state_progress(const mt_job *job, int ready, double elapsed, int tty) {
    char eta[48] = "";
    if (ready > 0)
        snprintf(eta, sizeof eta, ", about %.0f s left", elapsed / ready * (job->n_groups - ready));
    printf("%scompute rank: optimizer state: %d of %d groups ready after %.0f s%s%s",
           tty ? "\r\033[K" : "", ready, job->n_groups, elapsed, eta, tty ? "" : "\n");
    fflush(stdout);
}

// The optimizer ranks first allocate, first-touch and initialize (or load) the fp32 state of
// every group, minutes on large models: once that has taken 2 s, say how far they are (on a
// terminal as a live line, else a line every 10 s) and when they are done.
static void wait_for_optimizer_state(engine *e) {
    mt_job *job = e->job;
    const char *tty_env = getenv("MT_TTY");
    int tty = tty_env && atoi(tty_env) != 0, shown = 0, ready;
    double t0 = now_seconds(), last = t0;
    while ((ready = transfer_groups_ready(&e->xfer, job->start_step)) < job->n_groups) {
        transfer_receive(&e->xfer, NULL, -1); // not watched: loading shows no progress
        double now = now_seconds();
        if (now - t0 >= 2 && now - last >= (tty || !shown ? 0.5 : 10)) {
            if (!shown)
                printf("compute rank: waiting for the optimizer ranks to %s the fp32 state of "
                       "%.2fB parameters\n",
                       job->resume_path[0] ? "load" : "initialize",
                       model_param_count(&job->cfg.model) / 1e9);
            show_state_progress(job, transfer_groups_ready(&e->xfer, job->start_step), now - t0,
                                tty);
            shown = 1, last = now;
        }
    }
    if (shown)
        printf("%scompute rank: optimizer state ready after %.1f s\n", tty ? "\r\033[K" : "",
               now_seconds() - t0);
}

// The device's free memory once the backend's fixed buffers are there; MT_DEVICE_FREE_BYTES
// stands in for it (tests: a small GPU, or a device-memory limit on the CPU backend).
static uint64_t device_free(engine *e, const char **where) {
    const char *knob = getenv("MT_DEVICE_FREE_BYTES");
    *where = knob ? "MT_DEVICE_FREE_BYTES" : "cudaMemGetInfo, less the fixed buffers";
    if (knob && *knob) return strtoull(knob, NULL, 10);
    size_t room = e->ops->device_bytes_free(e->be);
    return room == SIZE_MAX ? UINT64_MAX : (uint64_t)room;
}

// The CUDA backend over nodes: its fp32 sums go to pinned host memory whole, where the copy
// thread sums them over nodes, takes the norm and fills the slots (transfer.c). The groups the
// compute rank would update itself would need the sums back on the GPU: none over nodes.
static int cuda_over_nodes(engine *e, char *err, size_t errlen) {
    if (mt_config_check_cuda_nodes(e->c, e->job->nodes, err, errlen) < 0) return 0;
    e->job->cfg.device_groups = 0;
    return 1;
}

engine *engine_new(mt_job *job, char *err, size_t errlen) {
    engine *e = calloc(1, sizeof *e);
    if (!e) mt_die("out of memory");
    e->c = &job->cfg, e->job = job;
    pick_backend(e);
    if (job->nodes > 1 && e->ops->async && !cuda_over_nodes(e, err, errlen)) {
        e->ops->destroy(e->be);
        free(e);
        return NULL;
    }
    const char *where;
    uint64_t room = device_free(e, &where);
    plan_choices ch;
    plan_choose(&ch, e->c, strcmp(e->ops->name, "cuda") == 0,
                plan_leaving_bytes(job->grad_bytes, job->nodes), room);
    if (plan_check_device(e->c, &ch, room, where, err, errlen) < 0) {
        e->ops->destroy(e->be);
        free(e);
        return NULL;
    }
    job->device_groups = ch.device_groups;
    e->offload = ch.offload;
    e->ring_n = ch.layer_buffers;
    e->every = ch.boundary_every;
    e->slots = plan_boundary_slots(&e->c->model, &ch);
    e->offloaded = plan_offloaded_boundaries(&e->c->model, &ch);
    e->att_planned = ch.att_slots;
    return e;
}

// The CPU backend, the bitwise reference, sums micro-batch gradients in a tree (step.h), so
// that one node and several give the same bits; the GPU accumulates them in place. Over nodes
// each micro-batch's loss is taken on its own.
static void micro_sums_init(engine *e, size_t layer, size_t head, size_t emb) {
    int M = e->c->micro_batches;
    if (e->job->nodes > 1) {
        e->micro_loss = calloc((size_t)M, sizeof *e->micro_loss);
        if (!e->micro_loss) mt_die("out of memory");
    }
    if (e->ops->async || M == 1) return;
    size_t numel[3] = {[MICRO_LAYER] = layer, [MICRO_HEAD] = head, [MICRO_EMB] = emb};
    for (int k = 0; k < 3; k++) {
        e->micro[k] = calloc((size_t)M, sizeof(float *));
        if (!e->micro[k]) mt_die("out of memory");
        for (int m = 1; m < M; m++) e->micro[k][m] = device_alloc(e, numel[k], sizeof(float));
    }
}

static void micro_sums_free(engine *e) {
    for (int k = 0; k < 3; k++) {
        for (int m = 1; e->micro[k] && m < e->c->micro_batches; m++)
            e->ops->release(e->be, e->micro[k][m]);
        free(e->micro[k]);
    }
    free(e->micro_loss);
}

static void engine_init(engine *e) {
    mt_job *job = e->job;
    const mt_config *c = e->c;
    void *stream = NULL;
#ifdef MT_HAVE_CUDA
    if (e->ops == backend_cuda_ops()) stream = backend_cuda_compute_stream(e->be);
#endif
    transfer_init(&e->xfer, job, stream);
    dataset_open(&e->data, c);
    e->n = c->micro_batch * c->seq_len;
    size_t nD = (size_t)e->n * c->model.dim, M = c->micro_batches, wb = e->ops->weight_bytes;
    size_t layer = model_largest_layer(&c->model);
    size_t head = job->group_numel[model_head_group(&c->model)], emb = job->group_numel[0];
    weight_buffer_init(&e->xfer, &e->emb, device_alloc(e, emb, wb));
    weight_buffer_init(&e->xfer, &e->head, device_alloc(e, head, wb));
    grad_buffer_init(&e->xfer, &e->emb_g, device_alloc(e, emb, 4));
    grad_buffer_init(&e->xfer, &e->head_g, device_alloc(e, head, 4));
    for (int i = 0; i < e->ring_n; i++) {
        weight_buffer_init(&e->xfer, &e->ring[i], device_alloc(e, layer, wb));
        grad_buffer_init(&e->xfer, &e->ring_g[i], device_alloc(e, layer, 4));
    }
    own_groups(e); // their state comes first, as the optimizer ranks make or read it
    wait_for_optimizer_state(e);
    frozen_receive(job, &e->dev);
    choose_offload(e);
    e->acts = device_alloc(e, (size_t)e->slots * M * nD, 4);
    e->passes = calloc(2 * (size_t)c->model.layers, sizeof *e->passes);
    if (!e->passes) mt_die("out of memory");
    e->n_passes = backward_passes(c->model.layers, e->every, e->passes);
    if (e->offload) e->acts_host = e->ops->host_alloc(e->be, layer_act_bytes(e) * e->offloaded);
    e->dres = device_alloc(e, M * nD, 4);
    keep_attention(e);
    e->inputs = calloc(M * e->n, sizeof(int32_t));
    e->targets = calloc(M * e->n, sizeof(int32_t));
    if (mt_packs_documents(c)) e->doc_start = calloc(M * e->n, sizeof(int32_t));
    if (!e->inputs || !e->targets || (mt_packs_documents(c) && !e->doc_start))
        mt_die("out of memory");
    micro_sums_init(e, layer, head, emb);
    if (c->model.experts &&
        !(e->moe_load = calloc((size_t)mt_moe_layers(&c->model) * c->model.experts, 8)))
        mt_die("out of memory");
}

static void engine_free(engine *e) {
    weight_buffer w[] = {e->emb, e->head, e->ring[0], e->ring[1]};
    grad_buffer g[] = {e->emb_g, e->head_g, e->ring_g[0], e->ring_g[1]};
    int n = 2 + e->ring_n;
    buffers_free(&e->xfer, w, n, g, n);
    for (int i = 0; i < n; i++) e->ops->release(e->be, w[i].dst), e->ops->release(e->be, g[i].src);
    buffers_free(&e->xfer, e->own, e->n_own, e->own_g, e->n_own);
    for (int l = 0; l < e->n_own; l++)
        e->ops->release(e->be, e->own[l].dst), e->ops->release(e->be, e->own_g[l].src);
    free(e->own), free(e->own_g);
    device_groups_free(&e->dev);
    micro_sums_free(e);
    e->ops->release(e->be, e->acts);
    if (e->acts_host) e->ops->host_release(e->be, e->acts_host);
    e->ops->release(e->be, e->dres);
    transfer_free(&e->xfer);
    e->ops->destroy(e->be);
    dataset_close(&e->data);
    free(e->inputs);
    free(e->targets);
    free(e->doc_start);
    free(e->passes);
    free(e->att_of);
    free(e->moe_load);
}

// What the step cost besides its time. The step's own time ends before this waits for the
// device: it is the host's view, as the next step starts when the host is free.
static step_costs take_step_costs(engine *e, double opt_wait_at_start) {
    step_costs c = {.opt_wait_seconds = e->xfer.opt_wait_seconds - opt_wait_at_start,
                    .targets = e->step_targets,
                    .aux_loss = e->step_aux,
                    .moe_load = e->moe_load};
    c.transfers = transfer_take_stats(&e->xfer); // waits for the device
    // a step announces every group: the norm the optimizers clip with
    for (int g = 0; g < e->job->n_groups; g++) c.grad_sumsq += e->xfer.group_sumsq[g];
    return c;
}

// One training step; in a traced step, its span on the host track encloses everything the
// step records (take_step_costs synchronizes the device and converts its GPU spans).
static void run_step(engine *e, metrics *mx, int64_t step) {
    trace_set_step(step);
    transfer_trace_step(&e->xfer);
    trace_tag tag = trace_tag_of("step", TRACE_ARG_STEP, (int)step + 1);
    double t0 = trace_now_us(), start = now_seconds();
    transfer_take_stats(&e->xfer); // what ran since the last step (an evaluation) is not its
    metrics_step_begin(mx);
    double opt_wait_at_start = e->xfer.opt_wait_seconds;
    double loss = train_step(e, step);
    metrics_step_stop(mx);
    step_costs costs = take_step_costs(e, opt_wait_at_start);
    metrics_step_end(mx, step, loss, &costs);
    trace_record(TRACE_HOST, tag, t0, trace_now_us());
    trace_set_step(-1);                  // evaluation and sampling are never traced
    double took = now_seconds() - start; // the watchdog allows 3 of the longest step
    if (took > e->job->longest_step) e->job->longest_step = took;
}

void engine_run(engine *e) {
    engine_init(e);
    mt_job *job = e->job;
    const mt_config *c = &job->cfg;
    trace_open(c, job, job->start_step, job->end_step);
    metrics mx;
    int lead = job_writes(job); // the other nodes neither evaluate nor sample
    metrics_open(&mx, job, e->ops->name, e->dev.groups);
    e->mx = &mx;
    for (int64_t step = job->start_step; step < job->end_step; step++) {
        if (lead && c->eval_interval > 0 && step > job->start_step && step % c->eval_interval == 0)
            metrics_eval(&mx, step, eval_loss(e, step));
        run_step(e, &mx, step);
        if (e->dev.groups > 0 && checkpoint_saves_device_state(job, (int)step + 1))
            device_groups_send_back(&e->dev, 3);
        if (e->dev.groups > 0 && step + 1 == job->end_step && checkpoint_export_due(job))
            device_groups_send_back(&e->dev, 1);
        if (step == job->start_step) reserve_kept(e, &mx, step + 1 < job->end_step);
    }
    if (lead && c->eval_interval > 0) metrics_eval(&mx, job->end_step, eval_loss(e, job->end_step));
    if (lead && c->sample_tokens > 0) sample_text(e, &mx, job->end_step);
    e->mx = NULL;
    metrics_close(&mx);
    engine_free(e); // joins the copy streams: their spans are all in
    free(e);
    trace_finish();
}
