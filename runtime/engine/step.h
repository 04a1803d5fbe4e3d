// The engine's state, private to runtime/engine/: engine.c sets it up and runs the loop,
// step.c schedules one step's passes over it (forward, head, backward, evaluation, sampling).
#ifndef MT_STEP_H
#define MT_STEP_H

#include "runtime/engine/backend.h"
#include "runtime/engine/device_groups.h"
#include "runtime/engine/transfer.h"
#include "runtime/io/io.h"
#include "runtime/observe/observe.h"

// One layer's pass in the backward: its backward, or (redo) its forward once more, to remake
// the boundary above it that a segment did not keep.
typedef struct {
    int layer, redo;
} layer_pass;

typedef struct engine engine; // as in engine.h (C11 allows the repeat)

struct engine {
    mt_job *job;
    metrics *mx; // while engine_run runs: a long step's progress goes there
    const mt_config *c;
    const backend_ops *ops;
    backend *be;
    transfer xfer;
    dataset data;
    int n;                            // tokens per micro-batch
    weight_buffer emb, head, ring[2]; // layer l streams through ring[l % ring_n]
    grad_buffer emb_g, head_g, ring_g[2];
    int ring_n; // streaming layer buffers (layer_buffers): 2, 1 for layers too large for two, or
                // 0 where every layer is updated here, in buffers of its own (n_own)
    // The groups the compute rank updates (the embedding and layers 0 .. n_own - 1): their
    // layers have buffers of their own, which stay put.
    device_groups dev;
    weight_buffer *own;
    grad_buffer *own_g;
    int n_own;
    // Layer-boundary activations of the step, [slots * M * n * D] in device memory (act_slot):
    // all L + 1; or with segments (boundary_every k > 1) boundaries 0, k, 2k, ... and the k - 1
    // of one segment; or when offloaded two sets (boundary l = ik in set i % 2) and the k - 1,
    // with the `offloaded` boundaries 0, k, 2k, ... below L in acts_host: each goes out after
    // the forward makes it and comes back before its segment's backward.
    float *acts, *acts_host;
    int offload, every, slots, offloaded;
    layer_pass *passes; // the backward's order of layer passes (backward_passes)
    int n_passes;
    float *dres;               // [M * n * D]: gradient flowing back through the residual stream
    int32_t *inputs, *targets; // host, [M * n]
    int32_t *doc_start;        // data.pack "documents": each token's document start, or NULL
    int kept;                  // (layer, micro-batch) pairs whose internals the backend keeps
    // Attention outputs kept from the forward (keep_attention): att_of[l * M + m] is pair (l, m)'s
    // slot of the backend's, or -1; plan_attention_order says which pairs have one.
    int att_planned, n_att, *att_of;
    // Micro-batch sums (CPU backend, M > 1): each micro-batch's gradients start from zero in a
    // buffer of their own, micro[kind][m] (m >= 1; m = 0 is the group's buffer), and are summed
    // in job_sum_tree's order, the order nodes holding them would sum them in: a run's bits then
    // do not depend on how many nodes share its micro-batches. NULL: accumulated in place.
    float **micro[3];     // MICRO_LAYER, MICRO_HEAD, MICRO_EMB
    double *micro_loss;   // [M]: each micro-batch's loss, for the nodes' ordered sum
    int64_t step_targets; // the last step's target tokens, every node's (the loss's divisor)
    // MoE: the last step's load-balancing loss (the mean over every node's micro-batches) and
    // each MoE layer's expert load, tokens per expert summed over them ([moe layers * E])
    double step_aux;
    int64_t *moe_load;
};

enum { MICRO_LAYER, MICRO_HEAD, MICRO_EMB };

// One boundary activation's bytes over all micro-batches.
static inline size_t layer_act_bytes(const engine *e) {
    return sizeof(float) * e->c->micro_batches * e->n * e->c->model.dim;
}

// The backward's passes for `layers` layers that keep every k-th boundary; returns how many
// (at most 2 * layers).
int backward_passes(int layers, int k, layer_pass *out);
// One training step at `step` (the weights' version): forward, head, backward, and the update
// of the groups the compute rank owns; returns the mean loss.
double train_step(engine *e, int64_t step);
// Mean loss on eval.batches validation micro-batches, with the weights at `version`.
double eval_loss(engine *e, int64_t version);
// Byte-level text from the weights at `version`, into the metrics.
void sample_text(engine *e, metrics *mx, int64_t version);

#endif
