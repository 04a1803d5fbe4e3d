// The plan of a job's ranks (plan.h's plan_make): each rank's host bytes by kind (the optimizer
// ranks' shards, their NVMe tier, the compute rank's buffers), summed over the job.
#include "runtime/plan/plan.h"
#include "runtime/model/model.h"
#include "shm/shm.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t align_up(uint64_t x, uint64_t a) {
    return (x + a - 1) / a * a;
}

// One of master, m or v for n elements: optimizer.c's state_bytes (a whole page at least).
static uint64_t state_bytes(uint64_t n) {
    return align_up((n ? n : 1) * 4, 4096);
}

// ---- the ranks ----

static void add_rank(plan_rank *sum, const plan_rank *r) {
    sum->master += r->master, sum->adam_m += r->adam_m, sum->adam_v += r->adam_v;
    sum->grads += r->grads, sum->control += r->control, sum->moving += r->moving;
    sum->compute += r->compute, sum->process += r->process, sum->total += r->total;
    sum->storage += r->storage, sum->disk += r->disk;
}

// A job on the GPU runs a CUDA build, whichever build plans it.
#ifdef MT_HAVE_CUDA
#define PLAN_CUDA_BUILD 1
#else
#define PLAN_CUDA_BUILD 0
#endif

uint64_t plan_process_bytes(int compute_cuda, int in_cuda_build) {
    return PLAN_RANK_PROCESS_BYTES + (in_cuda_build ? PLAN_RANK_CUDA_LIBS_BYTES : 0) +
           (compute_cuda ? PLAN_CUDA_HOST_CONTEXT_BYTES : 0);
}

// Shard k's private state and its shared region, split by kind: the region's master and
// gradient areas (alignment padding included) and its control block add up to its size.
// moment_nodes > 1: each node keeps the moments of a part of the shard (job_moment_part); the
// first node's part, the largest, is planned.
// The NVMe tier (storage.c): an area per group, each array rounded to MT_STORAGE_ALIGN; the
// gradients' file holds the shard's whole slice, the moments' file this node's part. The windows
// hold pieces of model_state_piece() floats of the part: MT_STORAGE_WINDOW buffers a file, each a
// piece of every array of the file (m and v; the gradients with a block more, for a piece of them
// may start inside one). A pass over the pieces in the update's order (`pass`) puts its p-th
// piece in buffer p % MT_STORAGE_WINDOW, from 0 again each step, so a buffer's pages in use are
// its largest piece's: where a rank's slices are smaller than a piece (models of a few billion
// parameters) the head's or the embedding's fills one buffer and the layers' the others.
static uint64_t tier_bytes(uint64_t n, int elem) {
    uint64_t a = MT_STORAGE_ALIGN;
    return (n * (uint64_t)elem + a - 1) / a * a;
}

// The largest piece each window buffer holds. Both files' passes step over this node's part of
// each slice (the gradients' file holds the whole slice, but a node reads back its part).
static void window_pieces(const shard_layout *lay, int moment_nodes, const int *pass, int n_pass,
                          uint64_t most[MT_STORAGE_WINDOW]) {
    uint64_t P = model_state_piece();
    memset(most, 0, MT_STORAGE_WINDOW * sizeof most[0]);
    for (int i = 0, p = 0; i < n_pass; i++) {
        int g = pass[i];
        uint64_t lo = 0, hi = lay->len[g];
        if (moment_nodes > 1) shard_range(lay->len[g], 0, moment_nodes, &lo, &hi);
        for (uint64_t at = 0; at < hi - lo; at += P, p++) {
            uint64_t n = hi - lo - at < P ? hi - lo - at : P, *b = &most[p % MT_STORAGE_WINDOW];
            if (n > *b) *b = n;
        }
    }
}

// pass: model_update_order's n_pass groups.
static void tier_rank(plan_rank *r, const shard_layout *lay, int moment_nodes, const mt_config *c,
                      const int *pass, int n_pass, mt_plan *p) {
    uint64_t grads = 0, adam = 0, master = 0, copy = 0, most[MT_STORAGE_WINDOW], largest = 0;
    for (int g = lay->first_shared; g < lay->n_groups; g++) {
        uint64_t lo = 0, hi = lay->len[g];
        if (moment_nodes > 1) shard_range(lay->len[g], 0, moment_nodes, &lo, &hi);
        grads += tier_bytes(lay->len[g], lay->grad_bytes), adam += 2 * tier_bytes(hi - lo, 4);
        master += tier_bytes(lay->len[g], 4), copy += tier_bytes(lay->len[g], 2);
    }
    window_pieces(lay, moment_nodes, pass, n_pass, most);
    for (int b = 0; b < MT_STORAGE_WINDOW; b++) {
        if (most[b] > largest) largest = most[b];
        if (c->storage_grads) r->storage += tier_bytes(most[b], lay->grad_bytes) + MT_STORAGE_ALIGN;
        if (c->storage_adam) r->storage += 2 * tier_bytes(most[b], 4);
        if (c->storage_master) r->storage += tier_bytes(most[b], 4); // the master's piece
    }
    if (c->storage_grads) r->disk += grads, p->disk_grads += grads;
    if (c->storage_adam) {
        r->disk += adam, p->disk_adam += adam;
        r->adam_m = r->adam_v = 0;
    }
    if (c->storage_master) { // the fp32 master beside m and v, and a bf16 copy of the weights
        r->disk += master + copy, p->disk_adam += master + copy, p->disk_copy += copy;
        // and the bf16 piece the update writes to the copy, and the fp32 piece the master moves
        // through at the start, saves and exports (storage.c's copy_buf and bounce; r->master
        // is the region's weight ring: shard_layout_init's masters_bytes)
        r->storage += tier_bytes(largest, 2) + tier_bytes(largest, 4);
    }
}

// The compute rank's side of the tier (engine/transfer_tier.c), each a piece of the largest
// slice at most: storage.grads, the pieces its gradients are written to disk from (one on the
// CPU backend; two pinned on CUDA, where one crosses PCIe while the other is written); with
// storage.master, the bf16 piece it reads the copy into.
static uint64_t tier_compute_bytes(const mt_config *c, int cuda, int grad_bytes, int n_groups,
                                   int first_shared, int n_shards, const uint64_t *numel) {
    uint64_t most = 0, bytes = 0;
    for (int g = first_shared; g < n_groups; g++)
        for (int k = 0; k < n_shards; k++) {
            uint64_t lo, hi;
            shard_range(numel[g], k, n_shards, &lo, &hi);
            if (hi - lo > most) most = hi - lo;
        }
    uint64_t piece = shard_grads_piece(most, model_state_piece());
    if (c->storage_grads) bytes += (cuda ? 2 : 1) * tier_bytes(piece, grad_bytes);
    if (c->storage_master) bytes += tier_bytes(shard_ring_entry(most, model_state_piece()), 2);
    return bytes;
}

static void optimizer_rank(plan_rank *r, const shard_layout *lay, int moment_nodes) {
    for (int g = lay->first_shared; g < lay->n_groups; g++) {
        uint64_t lo = 0, hi = lay->len[g];
        if (moment_nodes > 1) shard_range(lay->len[g], 0, moment_nodes, &lo, &hi);
        r->adam_m += state_bytes(hi - lo);
    }
    r->moving = lay->first_shared ? 4 * MT_STATE_PIECE : 0; // the piece that state moves through
    r->adam_v = r->adam_m;
    r->master = lay->masters_bytes;
    r->grads = lay->grads_bytes;
    r->control = SHM_HEADER_BYTES;
}

// Data parallel: the compute rank's host bytes for the sums over nodes (engine/transfer.c): a
// scratch of the largest group, and on CUDA each gradient buffer's pinned copy of its group's
// fp32 sums (two layers', the embedding's and the head's).
static uint64_t node_sum_bytes(const mt_model *m, int cuda, int nodes) {
    if (nodes < 2) return 0;
    uint64_t emb = model_group_numel(m, 0), head = model_group_numel(m, model_head_group(m));
    uint64_t layer = model_largest_layer(m), most = emb;
    if (head > most) most = head;
    if (layer > most) most = layer;
    return 4 * (most + (cuda ? 2 * layer + emb + head : 0));
}

int plan_make(mt_plan *p, const mt_config *c, int np, int cuda, int numa_nodes, int bound,
              int grad_bytes, uint64_t device_free, int nodes, char *err, size_t errlen) {
    int moment_nodes = c->shard_across_nodes ? nodes : 1;
    memset(p, 0, sizeof *p);
    p->c = c, p->np = np, p->n_shards = np - 1, p->cuda = cuda, p->grad_bytes = grad_bytes;
    p->gpu_free = device_free;
    uint64_t fixed = plan_backend_fixed_bytes(c, cuda) + (cuda ? PLAN_CUDA_CONTEXT_BYTES : 0);
    uint64_t room = device_free == UINT64_MAX ? UINT64_MAX
                    : device_free > fixed     ? device_free - fixed
                                              : 0;
    plan_choose(&p->choices, c, cuda, plan_leaving_bytes(grad_bytes, nodes), room);
    p->device_groups = p->choices.device_groups;
    p->n_groups = model_group_count(&c->model);
    if (p->n_groups > SHM_MAX_GROUPS) {
        snprintf(err, errlen,
                 "%s: model.layers: %d layers make %d parameter groups, at most %d fit",
                 c->source_path, c->model.layers, p->n_groups, SHM_MAX_GROUPS);
        return -1;
    }
    uint64_t numel[SHM_MAX_GROUPS];
    int order[SHM_MAX_GROUPS];
    for (int g = 0; g < p->n_groups; g++) numel[g] = model_group_numel(&c->model, g);
    model_grad_order(&c->model, order);
    int pass[SHM_MAX_GROUPS], n_pass = model_update_order(c, p->device_groups, pass);
    p->ring_depth = model_grad_ring_depth(c);
    p->ring_urgent = model_ring_by_urgency(c, nodes);
    p->params = model_param_count(&c->model);
    p->rank = calloc((size_t)np, sizeof *p->rank);
    shard_layout *lay = malloc(sizeof *lay);
    if (!p->rank || !lay) {
        snprintf(err, errlen, "out of memory");
        free(lay);
        return -1;
    }
    plan_choices cpu_choices, gpu_choices;
    plan_choose(&cpu_choices, c, 0, plan_leaving_bytes(grad_bytes, nodes), UINT64_MAX);
    if (cuda)
        gpu_choices = p->choices;
    else
        plan_choose(&gpu_choices, c, 1, plan_leaving_bytes(grad_bytes, nodes), UINT64_MAX);
    plan_compute_buffers(c, &cpu_choices, &p->host_buffers);
    plan_compute_buffers(c, &gpu_choices, &p->gpu);
    if (numa_nodes < 1) numa_nodes = 1;
    for (int r = 0; r < np; r++) {
        plan_rank *pr = &p->rank[r];
        if (r == 0) {
            pr->compute = (cuda ? plan_cuda_host_bytes(c, &p->choices) : p->host_buffers.total) +
                          node_sum_bytes(&c->model, cuda, nodes);
            pr->storage = tier_compute_bytes(c, cuda && nodes == 1, grad_bytes, p->n_groups,
                                             p->device_groups, p->n_shards, numel);
        } else {
            // the slots not chosen: with storage.grads, those host memory would hold
            int other = p->ring_depth || c->storage_grads ? 0 : MODEL_GRAD_RING_DEPTH;
            shard_layout_init(lay, numel, p->n_groups, r - 1, p->n_shards, p->device_groups,
                              grad_bytes, other, order,
                              c->storage_master ? model_state_piece() : 0);
            p->other_slots_grads += lay->grads_bytes;
            shard_layout_init(lay, numel, p->n_groups, r - 1, p->n_shards, p->device_groups,
                              grad_bytes, p->ring_depth, order,
                              c->storage_master ? model_state_piece() : 0);
            if (c->storage_grads) shard_layout_grads_elsewhere(lay);
            optimizer_rank(pr, lay, moment_nodes);
            tier_rank(pr, lay, moment_nodes, c, pass, n_pass, p);
        }
        pr->process = plan_process_bytes(r == 0 && cuda, cuda || PLAN_CUDA_BUILD);
        pr->total = pr->master + pr->adam_m + pr->adam_v + pr->grads + pr->control + pr->moving +
                    pr->storage + pr->compute + pr->process;
        pr->numa_node = bound ? r % numa_nodes : -1;
        add_rank(&p->sum, pr);
    }
    free(lay);
    p->state = p->sum.master + p->sum.adam_m + p->sum.adam_v + p->sum.moving + p->sum.storage;
    p->disk = p->sum.disk;
    p->disk_bw = PLAN_DISK_BYTES_PER_S;
    p->shared = p->sum.grads + p->sum.control;
    p->regions = p->sum.master + p->sum.grads + p->sum.control;
    p->host = p->sum.total;
    return 0;
}

void plan_free(mt_plan *p) {
    free(p->rank);
    p->rank = NULL;
}
