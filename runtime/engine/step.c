// One step's schedule on the compute rank: the forward through every layer for all
// micro-batches, the head, and the backward pass by pass (segments redo their forward first),
// with the weights streaming in and the gradients out around the compute; evaluation and
// sampling run the same forward.
#include "runtime/engine/step.h"
#include "runtime/base/base.h"
#include "runtime/engine/sample.h"
#include "runtime/model/model.h"
#include "shm/syscheck.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef MT_HAVE_CUDA
#include <nvtx3/nvToolsExt.h> // header-only: a no-op call unless a profiler is attached
#endif

// Boundary l's slot. Segments keep boundaries 0, k, 2k, ... in slots of their own; the ones
// between share the k - 1 slots after those, one segment at a time. Offloaded, boundaries 0, k,
// 2k, ... take turns in two sets (their copies to and from the host run on the set's number)
// and the ones between share the k - 1 slots after those.
static int kept_boundary(const engine *e, int l) {
    return l % e->every == 0;
}
static int act_set(const engine *e, int l) {
    return (l / e->every) % 2;
}
static size_t act_slot(const engine *e, int l) {
    int k = e->every;
    if (e->offload) return kept_boundary(e, l) ? (size_t)act_set(e, l) : (size_t)(1 + l % k);
    return l % k == 0 ? (size_t)(l / k) : (size_t)(e->c->model.layers / k + l % k);
}
static float *act(engine *e, int l, int m) {
    return e->acts + (act_slot(e, l) * e->c->micro_batches + m) * e->n * e->c->model.dim;
}
static float *act_host(engine *e, int l) {
    return e->acts_host + (size_t)(l / e->every) * e->c->micro_batches * e->n * e->c->model.dim;
}

// Forward: kept boundary l (all micro-batches) goes out once the compute that makes it is done.
static void act_out(engine *e, int l) {
    if (e->offload && l < e->c->model.layers && kept_boundary(e, l))
        e->ops->to_host(e->be, act_host(e, l), act(e, l, 0), layer_act_bytes(e), act_set(e, l));
}
// The compute that touches kept boundary l's set waits for the set's last copy: in the forward,
// before it overwrites the set, for the boundary there before to be out; in the backward,
// before it reads boundary l, for it to be back.
static void act_wait(engine *e, int l) {
    if (e->offload && kept_boundary(e, l)) e->ops->slot_wait(e->be, act_set(e, l));
}
// Backward: kept boundary l comes back into its set (once what used the set is done). The last
// segment's first boundary never left the GPU's set.
static void act_in(engine *e, int l) {
    int last = (e->c->model.layers - 1) / e->every * e->every;
    if (e->offload && l >= 0 && l < last)
        e->ops->from_host(e->be, act(e, l, 0), act_host(e, l), layer_act_bytes(e), act_set(e, l));
}
static float *dres(engine *e, int m) {
    return e->dres + (size_t)m * e->n * e->c->model.dim;
}

static weight_buffer *layer_weights(engine *e, int l) {
    return l < e->n_own ? &e->own[l] : &e->ring[l % e->ring_n];
}
static grad_buffer *layer_grads(engine *e, int l) {
    return l < e->n_own ? &e->own_g[l] : &e->ring_g[l % e->ring_n];
}

// The last layers' internals are kept first (any choice saves the same recompute); pairs
// past the reserved slots are recomputed in the backward.
static int keep_slot(const engine *e, int l, int m) {
    int slot = (e->c->model.layers - 1 - l) * e->c->micro_batches + m;
    return slot < e->kept ? slot : -1;
}
// Pair (l, m)'s attention slot, which the training forward fills and the redo and the
// backward read. A pair kept whole (from the second step on) fills none: its redo must not
// read one either, which would hold an older step's output.
static att_ref attention_of(const engine *e, int l, int m, int ready) {
    if (keep_slot(e, l, m) >= 0) return ATT_NONE;
    return (att_ref){e->att_of[l * e->c->micro_batches + m], ready};
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
    if (e->c->model.tied_embeddings) return e->emb.dst;
    return (const char *)e->head.dst + (size_t)e->c->model.dim * e->ops->weight_bytes;
}

// Whether the backend waits for the device within a layer's calls (a MoE layer's routing): the
// host is then not ahead of the device, and each copy must be issued as early as it can be.
static int syncs_in_layers(const engine *e) {
    return e->c->model.experts > 0;
}

// With one layer buffer the next layer's weights can come in only once the compute is done
// with the buffer (buffer_done): no fetch runs ahead of the layer that holds it.
static int fetch_ahead(const engine *e) {
    return e->ring_n != 1; // 0: every layer has buffers of its own
}

// Whether the forward fetches the next layer once the first micro-batch is queued: where the
// host waits for the device anyway, and the next layer's weights are already updated (the ring
// updates them during the backward). With a slot per group the fetch waits for the optimizer
// ranks' update, and the host had better queue the layer's other micro-batches first.
static int fetch_early(const engine *e) {
    return e->ops->async && syncs_in_layers(e) && model_grad_ring_depth(e->c) > 0 && fetch_ahead(e);
}

// In the forward, after layer l: layer l + 1, or the head.
static void fetch_next(engine *e, int l, int64_t version) {
    if (l + 1 < e->c->model.layers)
        fetch_async(&e->xfer, layer_weights(e, l + 1), model_layer_group(l + 1), version);
    else
        fetch_async(&e->xfer, &e->head, model_head_group(&e->c->model), version);
}

// Forward through every layer for M micro-batches. Training keeps every boundary activation
// for the backward; evaluation only needs two, so it ping-pongs between them.
static void forward_layers(engine *e, int64_t version, int M, int keep) {
    const mt_model *model = &e->c->model;
    fetch_async(&e->xfer, &e->emb, 0, version);
    if (!e->ops->async) fetch_next(e, -1, version); // as in the loop below
    e->ops->load_tokens(e->be, e->inputs, e->targets, e->doc_start, M);
    fetch_wait(&e->emb);
    span_begin(e, "embed", -1);
    for (int m = 0; m < M; m++) e->ops->embed_forward(e->be, act(e, 0, m), e->emb.dst, m);
    span_end(e, "embed", -1);
    if (keep) act_out(e, 0);
    if (e->ops->async) fetch_next(e, -1, version);
    for (int l = 0; l < model->layers; l++) {
        weight_buffer *w = layer_weights(e, l);
        fetch_wait(w);
        // The next fetch may wait for an optimizer. A backend that computes in the call fetches
        // first, so the copy runs during the compute; one that only queues it queues the layer
        // first, so the device has it to run while the host waits.
        if (!e->ops->async && fetch_ahead(e)) fetch_next(e, l, version);
        int in = keep ? l : l % 2, out = keep ? l + 1 : (l + 1) % 2;
        if (keep) act_wait(e, l + 1);
        span_begin(e, "fwd", l);
        for (int m = 0; m < M; m++) {
            e->ops->layer_forward(e->be, l, m, w->dst, act(e, in, m), act(e, out, m),
                                  keep ? keep_slot(e, l, m) : -1,
                                  keep ? attention_of(e, l, m, 0) : ATT_NONE);
            // A MoE layer waits for the device inside (its experts' GEMMs are sized on the
            // host): once its first micro-batch is queued, the next weights may already move.
            if (fetch_early(e) && m == 0) fetch_next(e, l, version);
        }
        span_end(e, "fwd", l);
        if (keep) metrics_progress(e->mx, version, "forward", l + 1, model->layers);
        if (keep) act_out(e, l + 1);
        buffer_done(w);
        if ((e->ops->async && !fetch_early(e)) || !fetch_ahead(e)) fetch_next(e, l, version);
    }
    fetch_wait(&e->head);
}

static void zero_grads(engine *e, grad_buffer *g, uint64_t numel) {
    offload_reuse(g);
    e->ops->zero(e->be, g->src, numel * sizeof(float));
}

// Where micro-batch m's gradients of a group of `kind` go: the group's buffer `own`, or with
// micro-batch sums a zeroed buffer of m's own (zeroed when `fresh`).
static float *micro_grads(engine *e, float *own, int kind, int m, size_t numel, int fresh) {
    if (!e->micro[kind] || m == 0) return own;
    if (fresh) e->ops->zero(e->be, e->micro[kind][m], numel * sizeof(float));
    return e->micro[kind][m];
}

static void sum_micro(engine *e, float *own, int kind, size_t numel) {
    if (!e->micro[kind]) return;
    e->micro[kind][0] = own;
    job_sum_tree(e->micro[kind], e->c->micro_batches, numel);
}

// The backward's passes, segment by segment from the top: each segment but the last (whose
// boundaries the forward left in place) first redoes the forward of its layers but the top
// one, remaking its boundaries; then the backward of its layers, top down. k = 1: the
// backward of every layer, as without segments.
int backward_passes(int layers, int k, layer_pass *out) {
    int n = 0;
    for (int top = layers; top > 0;) {
        int start = (top - 1) / k * k;
        for (int l = start; top < layers && l < top - 1; l++) out[n++] = (layer_pass){l, 1};
        for (int l = top - 1; l >= start; l--) out[n++] = (layer_pass){l, 0};
        top = start;
    }
    return n;
}

// The buffer for layer l at version v: its own, a ring buffer that holds it already (or has
// its fetch queued), else the ring buffer other than `busy`, the one the compute is using.
static weight_buffer *ring_for(engine *e, int l, int64_t v, const weight_buffer *busy) {
    if (l < e->n_own) return &e->own[l];
    for (int i = 0; i < e->ring_n; i++)
        if (e->ring[i].group == model_layer_group(l) && e->ring[i].version == v) return &e->ring[i];
    return busy == &e->ring[0] && e->ring_n > 1 ? &e->ring[1] : &e->ring[0];
}

static void redo_forward(engine *e, const weight_buffer *w, int l) {
    act_wait(e, l);
    span_begin(e, "redo", l);
    for (int m = 0; m < e->c->micro_batches; m++)
        e->ops->layer_forward(e->be, l, m, w->dst, act(e, l, m), act(e, l + 1, m), -1,
                              attention_of(e, l, m, 1));
    span_end(e, "redo", l);
}

// Layer l's backward: it recomputes its internals from its boundary activation (or reads the
// kept ones), and its gradients leave while the next pass computes.
static void layer_backward(engine *e, const weight_buffer *w, int l, int64_t step) {
    const mt_config *c = e->c;
    grad_buffer *gb = layer_grads(e, l);
    size_t numel = e->job->group_numel[model_layer_group(l)];
    zero_grads(e, gb, numel);
    // A segment's first layer brings the segment below's first boundary back, into the set the
    // segment above (or the head) has finished with.
    if (kept_boundary(e, l)) act_in(e, l - e->every);
    act_wait(e, l);
    span_begin(e, "bwd", l);
    for (int m = 0; m < c->micro_batches; m++) {
        float *dw = micro_grads(e, gb->src, MICRO_LAYER, m, numel, 1);
        e->ops->layer_backward(e->be, l, m, w->dst, dw, act(e, l, m), dres(e, m), dres(e, m),
                               keep_slot(e, l, m), // in place: no second residual buffer
                               attention_of(e, l, m, 1));
    }
    sum_micro(e, gb->src, MICRO_LAYER, numel);
    span_end(e, "bwd", l);
}

// A layer's gradients leave once the pass after it is queued: with the gradient ring the host
// may wait for a slot there, and the device then has that pass to run meanwhile (its gradients
// go to the other buffer of the two). The order of the offloads, and so every bit, is the same.
static void offload_layer(engine *e, int *pending, int64_t step) {
    if (*pending < 0) return;
    offload_async(&e->xfer, layer_grads(e, *pending), model_layer_group(*pending), step);
    offload_announce(&e->xfer);
    *pending = -1;
}

// The weights come in again for every pass (the last two layers' are still resident from the
// forward, and a redone layer's for its backward), each prefetched during the pass before.
// Returns the layer whose gradients have yet to leave (offload_layer, after the next compute).
static int backward_layers(engine *e, int64_t step) {
    weight_buffer *busy = NULL;
    int pending = -1;
    for (int i = 0; i < e->n_passes; i++) {
        layer_pass p = e->passes[i];
        weight_buffer *w = ring_for(e, p.layer, step, busy);
        fetch_async(&e->xfer, w, model_layer_group(p.layer), step);
        fetch_wait(w);
        if (i + 1 < e->n_passes && fetch_ahead(e)) {
            int next = e->passes[i + 1].layer;
            fetch_async(&e->xfer, ring_for(e, next, step, w), model_layer_group(next), step);
        }
        if (p.redo)
            redo_forward(e, w, p.layer);
        else
            layer_backward(e, w, p.layer, step);
        if (!p.redo) offload_ready(&e->xfer, layer_grads(e, p.layer), model_layer_group(p.layer));
        metrics_progress(e->mx, step, "backward", i + 1, e->n_passes);
        buffer_done(w);
        busy = w;
        offload_layer(e, &pending, step);
        if (!p.redo) pending = p.layer;
        // the device is not behind; or, with one buffer, the next backward zeroes this one
        if (syncs_in_layers(e) || e->ring_n == 1) offload_layer(e, &pending, step);
    }
    return pending;
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
// Over nodes the signal reaches each at its own moment: they agree at the step's start, while
// no gradient sum is in flight, on the largest request (the request then ends this step).
static void stop_if_requested(engine *e, int64_t step, int at_start) {
    mt_job *job = e->job;
    if (at_start != (job->nodes > 1) || job->stopped_on_request >= 0) return;
    int asked = job_stop_requested();
    if (job->nodes > 1)
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &asked, 1, MPI_INT, MPI_MAX, job->dp_comm));
    if (!asked) return;
    job_stop_after(job, (int)step);
    control_msg msg = {CONTROL_STOP, -1, step, 0};
    for (int r = 1; r < job->world; r++) control_send(job->ctl, r, &msg);
}

// Micro-batches first .. first + M - 1 counted from micro-batch 0 of `step`, in global batches
// (every node's micro-batches): what the data hands out never depends on the node count.
static void load_batches(engine *e, int split, int64_t step, int first, int M) {
    const mt_config *c = e->c;
    int global = c->micro_batches * e->job->nodes;
    for (int m = 0; m < M; m++) {
        int i = first + m;
        size_t at = (size_t)m * e->n;
        dataset_batch(&e->data, split, c->seed, step + i / global, i % global, c->micro_batch,
                      c->seq_len, e->inputs + at, e->targets + at);
        if (e->doc_start)
            dataset_pack_documents(c->data_eot, c->micro_batch, c->seq_len, e->inputs + at,
                                   e->targets + at, e->doc_start + at);
    }
}

// The target tokens of the M micro-batches loaded, every node's: a masked shard's context-only
// tokens are not targets. The loss is the mean over these, all micro-batches together (as
// transformers' num_items_in_batch), so each target weighs the same whichever micro-batch holds
// it; without masks the count is the global batch's tokens and nothing changes.
static int64_t local_targets(const engine *e, int M) {
    int64_t n = 0;
    for (size_t i = 0; i < (size_t)M * e->n; i++) n += e->targets[i] >= 0;
    return n;
}

static int64_t count_targets(engine *e, int M) {
    int64_t n = local_targets(e, M);
    if (e->job->nodes > 1)
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &n, 1, MPI_INT64_T, MPI_SUM, e->job->dp_comm));
    return n;
}

// The step's summed loss. Over nodes: every micro-batch's, gathered to the leader and added in
// the global batch's order, as one node adds them.
static double step_loss(engine *e) {
    mt_job *job = e->job;
    int M = e->c->micro_batches;
    if (job->nodes == 1) return e->ops->take_loss(e->be);
    double *all = job_writes(job) ? calloc((size_t)M * job->nodes, sizeof *all) : NULL, sum = 0;
    if (job_writes(job) && !all) mt_die("out of memory");
    MPI_CHECK(MPI_Gather(e->micro_loss, M, MPI_DOUBLE, all, M, MPI_DOUBLE, 0, job->dp_comm));
    for (int i = 0; all && i < M * job->nodes; i++) sum += all[i];
    free(all);
    return sum;
}

// The head over micro-batch m: its gradients go where micro_grads says (the classifier's into
// the embedding's when they are tied), and over nodes its loss is taken on its own.
static void head_pass(engine *e, int m, float dloss, float daux) {
    const mt_model *model = &e->c->model;
    size_t head = e->job->group_numel[model_head_group(model)], emb = e->job->group_numel[0];
    float *head_g = micro_grads(e, e->head_g.src, MICRO_HEAD, m, head, 1);
    float *cls_g = model->tied_embeddings ? micro_grads(e, e->emb_g.src, MICRO_EMB, m, emb, 1)
                                          : head_g + model->dim;
    e->ops->head(e->be, e->head.dst, classifier_weights(e), head_g, cls_g, act(e, model->layers, m),
                 dres(e, m), m, dloss, daux);
    if (e->micro_loss) e->micro_loss[m] = e->ops->take_loss(e->be);
}

// A micro-batch's load-balancing loss's weight in the step's loss: the step's is the mean over
// every node's micro-batches (so how a batch is split changes nothing), times
// model.router_aux_coef when model.router_aux lets it join the loss.
static float aux_weight(const engine *e) {
    const mt_config *c = e->c;
    if (!c->model.experts || !c->model.router_aux) return 0.0f;
    return (float)(c->model.router_aux_coef / ((double)c->micro_batches * e->job->nodes));
}

// The step's load-balancing loss and expert load, every node's.
static void step_aux(engine *e) {
    const mt_config *c = e->c;
    if (!e->moe_load) return;
    size_t n = (size_t)mt_moe_layers(&c->model) * c->model.experts;
    memset(e->moe_load, 0, n * sizeof *e->moe_load);
    double aux = e->ops->take_aux(e->be, e->moe_load);
    if (e->job->nodes > 1) {
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &aux, 1, MPI_DOUBLE, MPI_SUM, e->job->dp_comm));
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, e->moe_load, (int)n, MPI_INT64_T, MPI_SUM,
                                e->job->dp_comm));
    }
    e->step_aux = aux / ((double)c->micro_batches * e->job->nodes);
}

double train_step(engine *e, int64_t step) {
    const mt_config *c = e->c;
    int M = c->micro_batches;
    size_t emb = e->job->group_numel[0], head = e->job->group_numel[model_head_group(&c->model)];
    stop_if_requested(e, step, 1);
    load_batches(e, SPLIT_TRAIN, step, e->job->first_micro, M);
    // Counted over nodes here, at the step's start, while no gradient sum is in flight: MPI
    // runs one thread at a time (MPI_THREAD_SERIALIZED), and the sums run on the copy thread.
    e->step_targets = count_targets(e, M);
    forward_layers(e, step, M, 1);
    zero_grads(e, &e->head_g, head);
    zero_grads(e, &e->emb_g, emb);
    // Each target's share of the global batch's mean loss; a step without targets trains nothing.
    float dloss = e->step_targets ? 1.0f / (float)e->step_targets : 0.0f;
    span_begin(e, "head", -1);
    for (int m = 0; m < M; m++) head_pass(e, m, dloss, aux_weight(e));
    sum_micro(e, e->head_g.src, MICRO_HEAD, head);
    span_end(e, "head", -1);
    buffer_done(&e->head);
    inject_nan(e, step);
    offload_async(&e->xfer, &e->head_g, model_head_group(&c->model), step);
    int pending = backward_layers(e, step);
    span_begin(e, "embed bwd", -1);
    for (int m = 0; m < M; m++) // tied: micro-batch m's buffer holds its classifier part already
        e->ops->embed_backward(
            e->be, micro_grads(e, e->emb_g.src, MICRO_EMB, m, emb, !c->model.tied_embeddings),
            dres(e, m), m);
    sum_micro(e, e->emb_g.src, MICRO_EMB, emb);
    span_end(e, "embed bwd", -1);
    offload_layer(e, &pending, step);
    buffer_done(&e->emb);
    stop_if_requested(e, step, 0);
    offload_async(&e->xfer, &e->emb_g, 0, step);
    grad_buffer *all[] = {&e->head_g, &e->ring_g[0], &e->ring_g[1], &e->emb_g};
    for (int i = 0; i < 4; i++) offload_reuse(all[i]);
    for (int l = 0; l < e->n_own; l++) offload_reuse(&e->own_g[l]);
    update_own_groups(e, step);
    double sum = step_loss(e);
    step_aux(e);
    return e->step_targets ? sum / (double)e->step_targets : 0.0;
}

// Mean loss on eval_batches validation micro-batches, with the weights at `version`.
double eval_loss(engine *e, int64_t version) {
    const mt_config *c = e->c;
    int done = 0;
    int64_t targets = 0; // the leader evaluates alone: its own micro-batches' count
    while (done < c->eval_batches) {
        int M =
            c->eval_batches - done < c->micro_batches ? c->eval_batches - done : c->micro_batches;
        load_batches(e, SPLIT_VAL, 0, done, M);
        targets += local_targets(e, M);
        forward_layers(e, version, M, 0);
        for (int m = 0; m < M; m++)
            e->ops->head(e->be, e->head.dst, classifier_weights(e), NULL, NULL,
                         act(e, c->model.layers % 2, m), NULL, m, 0, 0);
        buffer_done(&e->head);
        buffer_done(&e->emb);
        done += M;
    }
    double sum = e->ops->take_loss(e->be);
    e->ops->take_aux(e->be, NULL); // evaluation's routing is not the step's
    return targets ? sum / (double)targets : 0.0;
}

// Logits of the last position of a single sequence, for sampling.
static void last_logits(engine *e, int64_t version, const int32_t *ctx, int len, float *logits) {
    const mt_config *c = e->c;
    e->ops->set_shape(e->be, 1, len);
    e->ops->load_tokens(e->be, ctx, ctx, NULL, 1);
    fetch_async(&e->xfer, &e->emb, 0, version);
    fetch_wait(&e->emb);
    e->ops->embed_forward(e->be, act(e, 0, 0), e->emb.dst, 0);
    for (int l = 0; l < c->model.layers; l++) {
        weight_buffer *w = layer_weights(e, l);
        fetch_async(&e->xfer, w, model_layer_group(l), version);
        fetch_wait(w);
        e->ops->layer_forward(e->be, l, 0, w->dst, act(e, l % 2, 0), act(e, (l + 1) % 2, 0), -1,
                              ATT_NONE);
        buffer_done(w);
    }
    fetch_async(&e->xfer, &e->head, model_head_group(&c->model), version);
    fetch_wait(&e->head);
    e->ops->last_logits(e->be, e->head.dst, classifier_weights(e), act(e, c->model.layers % 2, 0),
                        len, logits);
    buffer_done(&e->head);
    buffer_done(&e->emb);
    e->ops->set_shape(e->be, c->micro_batch, c->seq_len);
}

// Byte-level text from the trained weights: each token reruns the (short) context.
void sample_text(engine *e, metrics *mx, int64_t version) {
    const mt_config *c = e->c;
    int n = c->sample_tokens, len = 1;
    int32_t *ctx = calloc(n + 1, sizeof(int32_t));
    float *logits = calloc(c->model.vocab, sizeof(float));
    char *text = calloc(n + 1, 1);
    if (!ctx || !logits || !text) mt_die("out of memory");
    ctx[0] = '\n';
    for (int i = 0; i < n; i++) {
        int start = len > c->seq_len ? len - c->seq_len : 0;
        last_logits(e, version, ctx + start, len - start, logits);
        int tok = sample_token(logits, c->model.vocab, 0.8f, c->seed ^ splitmix64((uint64_t)i));
        if (sample_is_eos(&c->model, tok)) break;
        ctx[len++] = tok;
        text[i] = (tok >= 32 && tok < 127) || tok == '\n' ? (char)tok : '?';
    }
    metrics_sample(mx, text);
    free(ctx);
    free(logits);
    free(text);
}
