#include "runtime/engine/engine.h"
#include "runtime/engine/backend.h"
#include "runtime/io/io.h"
#include "runtime/base/base.h"
#include "runtime/engine/device_groups.h"
#include "runtime/engine/sample.h"
#include "runtime/observe/observe.h"
#include "runtime/model/model.h"
#include "runtime/plan/plan.h"
#include "runtime/engine/transfer.h"
#include "shm/syscheck.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef MT_HAVE_CUDA
#include <nvtx3/nvToolsExt.h> // header-only: a no-op call unless a profiler is attached
#endif

struct engine {
    mt_job *job;
    const mt_config *c;
    const backend_ops *ops;
    backend *be;
    transfer xfer;
    dataset data;
    int n;                            // tokens per micro-batch
    weight_buffer emb, head, ring[2]; // layer l streams through ring[l % 2]
    grad_buffer emb_g, head_g, ring_g[2];
    // The groups the compute rank updates (the embedding and layers 0 .. n_own - 1): their
    // layers have buffers of their own, which stay put.
    device_groups dev;
    weight_buffer *own;
    grad_buffer *own_g;
    int n_own;
    // Layer-boundary activations of the step: [(L + 1) * M * n * D] in device memory, or when
    // offloaded two sets [2 * M * n * D] (boundary l in set l % 2) with boundaries 0..L-1 in
    // acts_host: each goes out after the forward makes it and comes back before its backward.
    float *acts, *acts_host;
    int offload;
    float *dres; // [M * n * D]: gradient flowing back through the residual stream
    float *tmp;
    int32_t *inputs, *targets; // host, [M * n]
    int kept;                  // (layer, micro-batch) pairs whose internals the backend keeps
};

static float *act(engine *e, int l, int m) {
    size_t set = e->offload ? (size_t)(l % 2) : (size_t)l;
    return e->acts + (set * e->c->micro_batches + m) * e->n * e->c->dim;
}
static float *act_host(engine *e, int l) {
    return e->acts_host + (size_t)l * e->c->micro_batches * e->n * e->c->dim;
}
static size_t layer_act_bytes(const engine *e) {
    return sizeof(float) * e->c->micro_batches * e->n * e->c->dim;
}

// Forward: boundary l (all micro-batches) goes out once the compute that makes it is done.
static void act_out(engine *e, int l) {
    if (e->offload && l < e->c->layers)
        e->ops->to_host(e->be, act_host(e, l), act(e, l, 0), layer_act_bytes(e), l % 2);
}
// Forward: the compute about to overwrite boundary l's set waits for its way out.
static void act_reuse(engine *e, int l) {
    if (e->offload) e->ops->slot_wait(e->be, l % 2);
}
// Backward: boundary l comes back into its set (once what used the set is done).
static void act_in(engine *e, int l) {
    if (e->offload && l >= 0 && l < e->c->layers - 1)
        e->ops->from_host(e->be, act(e, l, 0), act_host(e, l), layer_act_bytes(e), l % 2);
}
static float *dres(engine *e, int m) {
    return e->dres + (size_t)m * e->n * e->c->dim;
}

static weight_buffer *layer_weights(engine *e, int l) {
    return l < e->n_own ? &e->own[l] : &e->ring[l % 2];
}
static grad_buffer *layer_grads(engine *e, int l) {
    return l < e->n_own ? &e->own_g[l] : &e->ring_g[l % 2];
}

// The last layers' internals are kept first (any choice saves the same recompute); pairs
// past the reserved slots are recomputed in the backward.
static int keep_slot(const engine *e, int l, int m) {
    int slot = (e->c->layers - 1 - l) * e->c->micro_batches + m;
    return slot < e->kept ? slot : -1;
}

// After the first step: the slots take what memory is left once every allocation is made,
// the CUDA runtime's and cuBLAS's lazy ones (kernels load on first use) included. Until then
// every layer recomputes, which gives the same bits.
static void reserve_kept(engine *e, metrics *mx) {
    const mt_config *c = e->c;
    int pairs = c->layers * c->micro_batches, wanted = pairs;
    const char *cap = getenv("MT_KEEP_MAX"); // at most this many (tests; leaving memory free)
    if (cap && atoi(cap) >= 0 && atoi(cap) < pairs) wanted = atoi(cap);
    e->kept = strcmp(c->recompute, "always") == 0 ? 0 : e->ops->keep_reserve(e->be, wanted);
    metrics_memory(mx, e->ops->device_bytes_in_use(e->be), e->kept, pairs);
}

static void *device_alloc(engine *e, size_t elems, size_t elem_bytes) {
    return e->ops->alloc(e->be, elems * elem_bytes);
}

static void pick_backend(engine *e) {
    const char *want = e->c->backend;
#ifdef MT_HAVE_CUDA
    if (strcmp(want, "cpu") != 0) {
        e->be = backend_cuda_new(e->c);
        if (e->be) {
            e->ops = backend_cuda_ops();
            return;
        }
        if (strcmp(want, "cuda") == 0) mt_die("backend \"cuda\": no usable CUDA device");
    }
#else
    if (strcmp(want, "cuda") == 0) mt_die("backend \"cuda\": this build has no CUDA backend");
#endif
    e->ops = backend_cpu_ops();
    e->be = backend_cpu_new(e->c);
}

// Decided in engine_new, with the plan's rule (plan_choose), so that mtrun --plan and the
// compute rank agree; said here.
static void choose_offload(engine *e) {
    const mt_config *c = e->c;
    if (e->offload)
        printf("compute rank: offloading the boundary activations (%.2f GiB) to pinned host "
               "memory, two layers' worth on the %s\n",
               layer_act_bytes(e) * c->layers / 1073741824.0, e->ops->async ? "GPU" : "backend");
}

// Before the activations: the own layers' buffers, and the groups' state, which the optimizer
// ranks send over.
static void own_groups(engine *e) {
    int cuda = strcmp(e->ops->name, "cuda") == 0;
    int groups = e->job->device_groups; // engine_new checked that they fit (plan_check_device)
    size_t layer = e->job->group_numel[model_layer_group(0)], wb = e->ops->weight_bytes;
    e->n_own = groups > 1 ? groups - 1 : 0;
    double state = 0; // fp32 master, m, v
    for (int g = 0; g < groups; g++) state += 12.0 * e->job->group_numel[g];
    e->own = calloc(e->n_own ? e->n_own : 1, sizeof *e->own);
    e->own_g = calloc(e->n_own ? e->n_own : 1, sizeof *e->own_g);
    if (!e->own || !e->own_g) mt_die("out of memory");
    for (int l = 0; l < e->n_own; l++) {
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
                       model_param_count(&job->cfg) / 1e9);
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

engine *engine_new(mt_job *job, char *err, size_t errlen) {
    engine *e = calloc(1, sizeof *e);
    if (!e) mt_die("out of memory");
    e->c = &job->cfg, e->job = job;
    pick_backend(e);
    const char *where;
    uint64_t room = device_free(e, &where);
    plan_choices ch;
    plan_choose(&ch, e->c, strcmp(e->ops->name, "cuda") == 0, job->grad_bytes, room);
    if (plan_check_device(e->c, &ch, room, where, err, errlen) < 0) {
        e->ops->destroy(e->be);
        free(e);
        return NULL;
    }
    job->device_groups = ch.device_groups;
    e->offload = ch.offload;
    return e;
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
    size_t nD = (size_t)e->n * c->dim, M = c->micro_batches, wb = e->ops->weight_bytes;
    size_t layer = job->group_numel[model_layer_group(0)];
    size_t head = job->group_numel[model_head_group(c)], emb = job->group_numel[0];
    weight_buffer_init(&e->xfer, &e->emb, device_alloc(e, emb, wb));
    weight_buffer_init(&e->xfer, &e->head, device_alloc(e, head, wb));
    grad_buffer_init(&e->xfer, &e->emb_g, device_alloc(e, emb, 4));
    grad_buffer_init(&e->xfer, &e->head_g, device_alloc(e, head, 4));
    for (int i = 0; i < 2; i++) {
        weight_buffer_init(&e->xfer, &e->ring[i], device_alloc(e, layer, wb));
        grad_buffer_init(&e->xfer, &e->ring_g[i], device_alloc(e, layer, 4));
    }
    wait_for_optimizer_state(e);
    own_groups(e);
    choose_offload(e);
    e->acts = device_alloc(e, (e->offload ? 2 : c->layers + 1) * M * nD, 4);
    if (e->offload) e->acts_host = e->ops->host_alloc(e->be, layer_act_bytes(e) * c->layers);
    e->dres = device_alloc(e, M * nD, 4);
    e->tmp = device_alloc(e, nD, 4);
    e->inputs = calloc(M * e->n, sizeof(int32_t));
    e->targets = calloc(M * e->n, sizeof(int32_t));
    if (!e->inputs || !e->targets) mt_die("out of memory");
}

static void engine_free(engine *e) {
    weight_buffer w[] = {e->emb, e->head, e->ring[0], e->ring[1]};
    grad_buffer g[] = {e->emb_g, e->head_g, e->ring_g[0], e->ring_g[1]};
    buffers_free(&e->xfer, w, 4, g, 4);
    for (int i = 0; i < 4; i++) e->ops->release(e->be, w[i].dst), e->ops->release(e->be, g[i].src);
    buffers_free(&e->xfer, e->own, e->n_own, e->own_g, e->n_own);
    for (int l = 0; l < e->n_own; l++)
        e->ops->release(e->be, e->own[l].dst), e->ops->release(e->be, e->own_g[l].src);
    free(e->own), free(e->own_g);
    device_groups_free(&e->dev);
    e->ops->release(e->be, e->acts);
    if (e->acts_host) e->ops->host_release(e->be, e->acts_host);
    e->ops->release(e->be, e->dres);
    e->ops->release(e->be, e->tmp);
    transfer_free(&e->xfer);
    e->ops->destroy(e->be);
    dataset_close(&e->data);
    free(e->inputs);
    free(e->targets);
}

// A stretch of compute, named "fwd L3", "head", ... (layer < 0: no number): an NVTX range for
// Nsight on CUDA builds, always, and a span of the trace's compute track in traced steps.
static void span_begin(engine *e, const char *name, int layer) {
#ifdef MT_HAVE_CUDA
    char text[48];
    if (layer >= 0)
        snprintf(text, sizeof text, "%s L%d", name, layer);
    else
        snprintf(text, sizeof text, "%s", name);
    nvtxRangePushA(text);
#else
    (void)name, (void)layer;
#endif
    transfer_span_begin(&e->xfer);
}

static void span_end(engine *e, const char *name, int layer) {
#ifdef MT_HAVE_CUDA
    nvtxRangePop();
#endif
    int kind = layer >= 0 ? TRACE_ARG_LAYER : TRACE_ARG_NONE;
    transfer_span_end(&e->xfer, trace_tag_of(name, kind, layer));
}

static const void *classifier_weights(engine *e) {
    if (e->c->tied_embeddings) return e->emb.dst;
    return (const char *)e->head.dst + (size_t)e->c->dim * e->ops->weight_bytes;
}

static float *classifier_grads(engine *e) {
    return e->c->tied_embeddings ? e->emb_g.src : e->head_g.src + e->c->dim;
}

// In the forward, after layer l: layer l + 1, or the head.
static void fetch_next(engine *e, int l, int64_t version) {
    if (l + 1 < e->c->layers)
        fetch_async(&e->xfer, layer_weights(e, l + 1), model_layer_group(l + 1), version);
    else
        fetch_async(&e->xfer, &e->head, model_head_group(e->c), version);
}

// Forward through every layer for M micro-batches. Training keeps every boundary activation
// for the backward; evaluation only needs two, so it ping-pongs between them.
static void forward_layers(engine *e, int64_t version, int M, int keep) {
    const mt_config *c = e->c;
    fetch_async(&e->xfer, &e->emb, 0, version);
    if (!e->ops->async) fetch_next(e, -1, version); // as in the loop below
    e->ops->load_tokens(e->be, e->inputs, e->targets, M);
    fetch_wait(&e->emb);
    span_begin(e, "embed", -1);
    for (int m = 0; m < M; m++) e->ops->embed_forward(e->be, act(e, 0, m), e->emb.dst, m);
    span_end(e, "embed", -1);
    if (keep) act_out(e, 0);
    if (e->ops->async) fetch_next(e, -1, version);
    for (int l = 0; l < c->layers; l++) {
        weight_buffer *w = layer_weights(e, l);
        fetch_wait(w);
        // The next fetch may wait for an optimizer. A backend that computes in the call fetches
        // first, so the copy runs during the compute; one that only queues it queues the layer
        // first, so the device has it to run while the host waits.
        if (!e->ops->async) fetch_next(e, l, version);
        int in = keep ? l : l % 2, out = keep ? l + 1 : (l + 1) % 2;
        if (keep) act_reuse(e, l + 1);
        span_begin(e, "fwd", l);
        for (int m = 0; m < M; m++)
            e->ops->layer_forward(e->be, w->dst, act(e, in, m), act(e, out, m),
                                  keep ? keep_slot(e, l, m) : -1);
        span_end(e, "fwd", l);
        if (keep) act_out(e, l + 1);
        buffer_done(w);
        if (e->ops->async) fetch_next(e, l, version);
    }
    fetch_wait(&e->head);
}

static void zero_grads(engine *e, grad_buffer *g, uint64_t numel) {
    offload_reuse(g);
    e->ops->zero(e->be, g->src, numel * sizeof(float));
}

// Backward in reverse layer order: the weights come in again (the last two layers are still
// resident from the forward), each layer recomputes its internals from its boundary
// activation, and its gradients leave while the next layer computes.
static void backward_layers(engine *e, int64_t step) {
    const mt_config *c = e->c;
    uint64_t layer_numel = e->job->group_numel[model_layer_group(0)];
    for (int l = c->layers - 1; l >= 0; l--) {
        weight_buffer *w = layer_weights(e, l);
        fetch_async(&e->xfer, w, model_layer_group(l), step);
        fetch_wait(w);
        if (l > 0) fetch_async(&e->xfer, layer_weights(e, l - 1), model_layer_group(l - 1), step);
        grad_buffer *gb = layer_grads(e, l);
        zero_grads(e, gb, layer_numel);
        act_in(e, l - 1); // into the set layer l + 1 (or the head) has finished with
        if (e->offload) e->ops->slot_wait(e->be, l % 2);
        span_begin(e, "bwd", l);
        for (int m = 0; m < c->micro_batches; m++) {
            e->ops->layer_backward(e->be, w->dst, gb->src, act(e, l, m), dres(e, m), e->tmp,
                                   keep_slot(e, l, m));
            e->ops->copy(e->be, dres(e, m), e->tmp, sizeof(float) * e->n * c->dim);
        }
        span_end(e, "bwd", l);
        buffer_done(w);
        offload_async(&e->xfer, gb, model_layer_group(l), step);
        offload_announce(e->ring_g, 2, 0);
    }
}

// The groups the compute rank owns, once every group's norm is in: the optimizer ranks' clip
// coefficient and hyperparameters, so the same bits as theirs; a step whose norm is not finite
// updates nothing, here as there, and is counted. Their weights are then at version step + 1
// where they lie, and no fetch will bring them again.
static void update_own_groups(engine *e, int64_t step) {
    int skipped = e->job->skipped_steps;
    int bad = job_note_step(e->job, (int)step, step_is_bad(e->xfer.group_sumsq, e->job->n_groups));
    if (e->dev.groups == 0) return;
    span_begin(e, "adamw", -1);
    float scale = clip_scale_of_groups(e->xfer.group_sumsq, e->job->n_groups, e->c->clip);
    adamw_params hp = adamw_params_at_step(e->c, (int)step, skipped, scale);
    for (int g = 0; g < e->dev.groups; g++) {
        weight_buffer *w = g == 0 ? &e->emb : &e->own[g - 1];
        grad_buffer *gb = g == 0 ? &e->emb_g : &e->own_g[g - 1];
        if (!bad) device_groups_update(&e->dev, g, &hp, gb->src, w->dst);
        w->version = step + 1;
    }
    span_end(e, "adamw", -1);
}

// Tests (MT_FAULT_NAN_GRAD_STEPS=a or a-b, 1-based): a NaN in the head's gradients at those
// steps, as a diverging run would make.
static void inject_nan(engine *e, int64_t step) {
    const char *f = getenv("MT_FAULT_NAN_GRAD_STEPS");
    if (!f) return;
    int a = 0, b = 0, n = sscanf(f, "%d-%d", &a, &b);
    if (n == 1) b = a;
    if (n < 1 || step + 1 < a || step + 1 > b) return;
    float nan = NAN;
    e->ops->upload(e->be, e->head_g.src, &nan, sizeof nan);
}

// A stop request (job_stop_requested) ends the job after this step, with its checkpoint. The
// optimizer ranks are told before the step's last gradients (the embedding's) are announced,
// so they learn it while they still wait for this step: every rank ends after the same one.
static void stop_if_requested(engine *e, int64_t step) {
    mt_job *job = e->job;
    if (!job_stop_requested() || job->stopped_on_request >= 0) return;
    job_stop_after(job, (int)step);
    control_msg msg = {CONTROL_STOP, -1, step, 0};
    for (int r = 1; r < job->world; r++) control_send(job->ctl, r, &msg);
}

static void load_batches(engine *e, int split, int64_t step, int M) {
    const mt_config *c = e->c;
    for (int m = 0; m < M; m++)
        dataset_batch(&e->data, split, c->seed, step, m, c->micro_batch, c->seq_len,
                      e->inputs + (size_t)m * e->n, e->targets + (size_t)m * e->n);
}

static double train_step(engine *e, int64_t step) {
    const mt_config *c = e->c;
    int M = c->micro_batches;
    load_batches(e, SPLIT_TRAIN, step, M);
    forward_layers(e, step, M, 1);
    zero_grads(e, &e->head_g, e->job->group_numel[model_head_group(c)]);
    zero_grads(e, &e->emb_g, e->job->group_numel[0]);
    float dloss = 1.0f / ((float)M * e->n);
    span_begin(e, "head", -1);
    for (int m = 0; m < M; m++)
        e->ops->head(e->be, e->head.dst, classifier_weights(e), e->head_g.src, classifier_grads(e),
                     act(e, c->layers, m), dres(e, m), m, dloss);
    span_end(e, "head", -1);
    buffer_done(&e->head);
    inject_nan(e, step);
    offload_async(&e->xfer, &e->head_g, model_head_group(c), step);
    backward_layers(e, step);
    span_begin(e, "embed bwd", -1);
    for (int m = 0; m < M; m++) e->ops->embed_backward(e->be, e->emb_g.src, dres(e, m), m);
    span_end(e, "embed bwd", -1);
    buffer_done(&e->emb);
    stop_if_requested(e, step);
    offload_async(&e->xfer, &e->emb_g, 0, step);
    grad_buffer *all[] = {&e->head_g, &e->ring_g[0], &e->ring_g[1], &e->emb_g};
    for (int i = 0; i < 4; i++) offload_reuse(all[i]);
    for (int l = 0; l < e->n_own; l++) offload_reuse(&e->own_g[l]);
    update_own_groups(e, step);
    return e->ops->take_loss(e->be) / ((double)M * e->n);
}

// Mean loss on eval_batches validation micro-batches, with the weights at `version`.
static double eval_loss(engine *e, int64_t version) {
    const mt_config *c = e->c;
    int done = 0;
    for (int chunk = 0; done < c->eval_batches; chunk++) {
        int M =
            c->eval_batches - done < c->micro_batches ? c->eval_batches - done : c->micro_batches;
        load_batches(e, SPLIT_VAL, chunk, M);
        forward_layers(e, version, M, 0);
        for (int m = 0; m < M; m++)
            e->ops->head(e->be, e->head.dst, classifier_weights(e), NULL, NULL,
                         act(e, c->layers % 2, m), NULL, m, 0);
        buffer_done(&e->head);
        buffer_done(&e->emb);
        done += M;
    }
    return e->ops->take_loss(e->be) / ((double)c->eval_batches * e->n);
}

// Logits of the last position of a single sequence, for sampling.
static void last_logits(engine *e, int64_t version, const int32_t *ctx, int len, float *logits) {
    const mt_config *c = e->c;
    e->ops->set_shape(e->be, 1, len);
    e->ops->load_tokens(e->be, ctx, ctx, 1);
    fetch_async(&e->xfer, &e->emb, 0, version);
    fetch_wait(&e->emb);
    e->ops->embed_forward(e->be, act(e, 0, 0), e->emb.dst, 0);
    for (int l = 0; l < c->layers; l++) {
        weight_buffer *w = layer_weights(e, l);
        fetch_async(&e->xfer, w, model_layer_group(l), version);
        fetch_wait(w);
        e->ops->layer_forward(e->be, w->dst, act(e, l % 2, 0), act(e, (l + 1) % 2, 0), -1);
        buffer_done(w);
    }
    fetch_async(&e->xfer, &e->head, model_head_group(c), version);
    fetch_wait(&e->head);
    e->ops->last_logits(e->be, e->head.dst, classifier_weights(e), act(e, c->layers % 2, 0), len,
                        logits);
    buffer_done(&e->head);
    buffer_done(&e->emb);
    e->ops->set_shape(e->be, c->micro_batch, c->seq_len);
}

// Byte-level text from the trained weights: each token reruns the (short) context.
static void sample_text(engine *e, metrics *mx, int64_t version) {
    const mt_config *c = e->c;
    int n = c->sample_tokens, len = 1;
    int32_t *ctx = calloc(n + 1, sizeof(int32_t));
    float *logits = calloc(c->vocab, sizeof(float));
    char *text = calloc(n + 1, 1);
    if (!ctx || !logits || !text) mt_die("out of memory");
    ctx[0] = '\n';
    for (int i = 0; i < n; i++) {
        int start = len > c->seq_len ? len - c->seq_len : 0;
        last_logits(e, version, ctx + start, len - start, logits);
        int tok = sample_token(logits, c->vocab, 0.8f, c->seed ^ splitmix64((uint64_t)i));
        if (sample_is_eos(c, tok)) break;
        ctx[len++] = tok;
        text[i] = (tok >= 32 && tok < 127) || tok == '\n' ? (char)tok : '?';
    }
    metrics_sample(mx, text);
    free(ctx);
    free(logits);
    free(text);
}

// What the step cost besides its time. The step's own time ends before this waits for the
// device: it is the host's view, as the next step starts when the host is free.
static step_costs take_step_costs(engine *e, double opt_wait_at_start) {
    step_costs c = {.opt_wait_seconds = e->xfer.opt_wait_seconds - opt_wait_at_start};
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
    trace_open(c, job->rank, job->world, job->start_step, job->end_step);
    metrics mx;
    metrics_open(&mx, job, e->ops->name, e->dev.groups);
    for (int64_t step = job->start_step; step < job->end_step; step++) {
        if (c->eval_interval > 0 && step > job->start_step && step % c->eval_interval == 0)
            metrics_eval(&mx, step, eval_loss(e, step));
        run_step(e, &mx, step);
        if (e->dev.groups > 0 && checkpoint_state_due(job, (int)step + 1))
            device_groups_send_back(&e->dev);
        if (step == job->start_step && step + 1 < job->end_step) reserve_kept(e, &mx);
    }
    if (c->eval_interval > 0) metrics_eval(&mx, job->end_step, eval_loss(e, job->end_step));
    if (c->sample_tokens > 0) sample_text(e, &mx, job->end_step);
    metrics_close(&mx);
    engine_free(e); // joins the copy streams: their spans are all in
    free(e);
    trace_finish();
}
