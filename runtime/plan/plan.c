// The compute rank's part of the plan (plan.h): its buffers by working set, the choices that
// shape them (plan_choose_groups), the GPU check.
#include "runtime/plan/plan.h"
#include "runtime/model/model.h"
#include "shm/shm.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- the compute rank ----

// The micro-batch as both backends run it (buffers.h).
static mt_buffer_shape buffer_shape(const mt_config *c) {
    mt_buffer_shape s;
    mt_buffer_shape_of(&s, c, c->micro_batch, c->seq_len);
    return s;
}

// Elements of the groups that stay resident: embedding, head and the ring of `buffers` layers,
// whose buffers hold the largest layer (an MoE model mixes dense and MoE layers).
static uint64_t resident_numel(const mt_model *m, int buffers) {
    return model_group_numel(m, 0) + model_group_numel(m, model_head_group(m)) +
           (uint64_t)buffers * model_largest_layer(m);
}

// A working set's bytes: its list (buffers.h), as the backend allocates it.
typedef void (*buffer_list_of)(mt_buffer_list *l, const mt_buffer_shape *s);
static uint64_t list_bytes(buffer_list_of list, const mt_buffer_shape *s) {
    mt_buffer_list l;
    list(&l, s);
    return mt_buffer_list_bytes(&l);
}

// layer.c's layer_scratch_new (Gated DeltaNet's and latent attention's internals too), with an
// MoE model's moe_scratch_new.
static uint64_t cpu_layer_bytes(const mt_config *c) {
    mt_buffer_shape s = buffer_shape(c);
    return list_bytes(mt_buffers_cpu_layer, &s) + list_bytes(mt_buffers_cpu_gdn, &s) +
           list_bytes(mt_buffers_cpu_mla, &s) + plan_moe_cpu_bytes(c);
}

// The int32 arrays a step's tokens fill, one value a token of each micro-batch: inputs and
// targets, and with data.pack "documents" the document starts. The engine holds one set, each
// backend another.
static uint64_t token_arrays(const mt_config *c) {
    return mt_packs_documents(c) ? 3 : 2;
}

// The layer's working set and backend_cpu.c's own buffers (the head's scratch, token copies,
// routing statistics).
static uint64_t cpu_backend_bytes(const mt_config *c) {
    mt_buffer_shape s = buffer_shape(c);
    return cpu_layer_bytes(c) + list_bytes(mt_buffers_cpu_backend, &s) +
           plan_moe_cpu_stats_bytes(c);
}

// The backend's, and the engine's token ids (its backward writes the residual gradient in
// place).
static uint64_t cpu_working_bytes(const mt_config *c, mt_buffer_shape s) {
    return cpu_backend_bytes(c) + 4 * token_arrays(c) * s.M * s.n;
}

// backend_cuda.c's layer_saved: what one kept layer x micro-batch pass holds (whole), or the
// working set's part of it (h, gate and up for a chunk).
static uint64_t cuda_saved_bytes(const mt_config *c, int whole) {
    mt_buffer_shape s = buffer_shape(c);
    mt_buffer_list l;
    mt_buffers_cuda_saved(&l, &s, whole);
    return mt_buffer_list_bytes(&l);
}

int plan_cuda_keeps_passes(const mt_model *m) {
    return mt_qk_norm(m) == QK_NONE && !m->attn_output_gate && mt_gdn_layers(m) == 0;
}

uint64_t plan_kept_pass_bytes(const mt_config *c, int cuda) {
    return cuda ? cuda_saved_bytes(c, 1) : cpu_layer_bytes(c);
}

// backend_cuda.c's layer working set: its saved tensors for a chunk, the rest of the layer's,
// the qk norms', the output gate's, Gated DeltaNet's and the latent attention's buffers, and an
// MoE model's (plan_moe_work_bytes).
static uint64_t cuda_layer_set_bytes(const mt_config *c) {
    mt_buffer_shape s = buffer_shape(c);
    return cuda_saved_bytes(c, 0) + list_bytes(mt_buffers_cuda_layer, &s) +
           list_bytes(mt_buffers_cuda_qk_norm, &s) + list_bytes(mt_buffers_cuda_gate, &s) +
           list_bytes(mt_buffers_cuda_gdn, &s) + list_bytes(mt_buffers_cuda_mla, &s) +
           plan_moe_work_bytes(c);
}

// backend_cuda.c's head set and the cuBLASLt workspace.
static uint64_t cuda_head_set_bytes(const mt_config *c) {
    mt_buffer_shape s = buffer_shape(c);
    return list_bytes(mt_buffers_cuda_head, &s) + MT_CUDA_GEMM_WORKSPACE;
}

uint64_t plan_device_layer_bytes(const mt_model *m) {
    return 18 * model_largest_layer(m); // state + own buffers
}

const char *plan_bytes_text(char *buf, size_t n, double b) {
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) b /= 1024, u++;
    if (u == 0)
        snprintf(buf, n, "%.0f B", b);
    else
        snprintf(buf, n, b >= 100 || u < 3 ? "%.1f %s" : "%.2f %s", b, unit[u]);
    return buf;
}

void plan_device_layers_text(int groups, char *out, size_t cap) {
    int layers = groups > 1 ? groups - 1 : 0;
    if (layers == 0) snprintf(out, cap, "%s", "");
    if (layers == 1) snprintf(out, cap, " and layer 0");
    if (layers > 1) snprintf(out, cap, " and layers 0-%d", layers - 1);
}

// The compute rank's host piece that the device-updated groups' state moves through.
static uint64_t device_staging_bytes(int groups) {
    return groups ? 4 * MT_STATE_PIECE : 0;
}

int plan_grad_bytes(const mt_config *c) {
    return c->grad_dtype == GRAD_DTYPE_FP32 ? 4 : c->grad_dtype == GRAD_DTYPE_BF16 ? 2 : 0;
}

// transfer_cuda.c's STAGE_ELEMS: the fp32 master's way to the GPU.
#define FETCH_STAGE_BYTES (4ull * (16 << 20))

void plan_compute_buffers(const mt_config *c, const plan_choices *ch, plan_buffers *b) {
    mt_buffer_shape s = buffer_shape(c);
    int cuda = ch->cuda, grad_bytes = ch->grad_bytes;
    memset(b, 0, sizeof *b);
    b->device_groups = ch->device_groups;
    b->layer_buffers = ch->layer_buffers;
    // the groups updated here: their AdamW state, and past the embedding buffers of their own
    uint64_t owned = model_lead_numel(&c->model, b->device_groups);
    uint64_t resident = resident_numel(&c->model, ch->layer_buffers) +
                        (owned ? owned - model_group_numel(&c->model, 0) : 0);
    // on the CPU, also the staging copy, host memory there
    b->optimizer = 12 * owned + (cuda ? 0 : device_staging_bytes(b->device_groups));
    b->weights = resident * (cuda ? 2 : 4);
    b->grads = resident * 4;
    // Offloaded (CUDA): two sets and a segment's on the GPU, the rest pinned.
    b->activations = 4 * (uint64_t)plan_boundary_slots(&c->model, ch) * s.M * s.n * s.D;
    b->residual = 4 * s.M * s.n * s.D;
    if (cuda) {
        uint64_t transfer = 1024 * 8 + 4 * 8 + FETCH_STAGE_BYTES; // reduce scratch, sumsqs, stage
        if (grad_bytes == 2) // the two pieces the leaving gradients are rounded through
            transfer += 2 * sizeof(bf16) * plan_grad_out_piece(&c->model, ch->device_groups);
        b->backend = plan_backend_start_bytes(c, 1);
        b->backend_host = plan_cuda_backend_host_bytes(c);
        b->working = b->backend + transfer;
        b->moe = plan_moe_work_bytes(c);
    } else {
        b->backend = plan_backend_start_bytes(c, 0);
        b->working = cpu_working_bytes(c, s);
        b->moe = plan_moe_cpu_bytes(c) + plan_moe_cpu_stats_bytes(c);
    }
    b->att_slots = ch->att_slots;
    b->attention = (uint64_t)ch->att_slots * plan_attention_slot_bytes(c, cuda);
    b->total = b->weights + b->grads + b->activations + b->residual + b->working + b->optimizer +
               b->attention;
}

// On the CUDA backend the compute rank's host memory is the token ids (and document starts)
// and the pinned losses, plus the offloaded boundary activations.
uint64_t plan_cuda_host_bytes(const mt_config *c, const plan_choices *ch) {
    mt_buffer_shape s = buffer_shape(c);
    uint64_t offloaded = (uint64_t)plan_offloaded_boundaries(&c->model, ch) * s.M * s.n * s.D;
    return 4 * (token_arrays(c) * s.M * s.n + offloaded) + device_staging_bytes(ch->device_groups) +
           plan_cuda_backend_host_bytes(c);
}

uint64_t plan_cuda_backend_host_bytes(const mt_config *c) {
    mt_buffer_shape s = buffer_shape(c);
    return list_bytes(mt_buffers_cuda_pinned, &s) + list_bytes(mt_buffers_cuda_host, &s);
}

uint64_t plan_backend_fixed_bytes(const mt_config *c, int cuda) {
    if (!cuda) return 0;
    return cuda_layer_set_bytes(c) + cuda_head_set_bytes(c);
}

uint64_t plan_backend_start_bytes(const mt_config *c, int cuda) {
    return cuda ? plan_backend_fixed_bytes(c, 1) : cpu_backend_bytes(c);
}

// The buffers the activations' choice must leave room for: what engine_init allocates before it
// chooses (transfer state, the rounding pieces of bf16 slots among it, weight and gradient
// buffers, the GPU-updated groups: engine.c's order): the working set's part beyond the backend's
// own buffers.
static uint64_t before_offload_bytes(const mt_config *c, const plan_choices *ch) {
    plan_buffers b;
    plan_compute_buffers(c, ch, &b);
    return b.weights + b.grads + b.optimizer + (b.working - b.backend);
}

static int segment_slots(int layers, int k) {
    return layers / k + k;
}

int plan_recomputed_layers(int layers, int k) {
    int last = (layers - 1) / k * k; // where the last segment starts
    return last / k * (k - 1);
}

int plan_redone_layer(int layers, int k, int l) {
    int last = (layers - 1) / k * k; // the last segment's layers are not redone
    return k > 1 && l < last && l % k < k - 1;
}

void plan_attention_order(int layers, int k, int *order) {
    int n = 0;
    for (int redone = 1; redone >= 0; redone--)
        for (int l = 0; l < layers; l++)
            if (plan_redone_layer(layers, k, l) == redone) order[n++] = l;
}

// A kept attention output: the output and its statistics (buffers.h).
uint64_t plan_attention_slot_bytes(const mt_config *c, int cuda) {
    mt_buffer_shape s = buffer_shape(c);
    return list_bytes(cuda ? mt_buffers_cuda_attention_slot : mt_buffers_cpu_attention_slot, &s);
}

double plan_attention_saved(const mt_config *c, const plan_choices *ch) {
    int *order = malloc(sizeof(int) * (size_t)c->model.layers), M = c->micro_batches;
    if (!order) return 0;
    plan_attention_order(c->model.layers, ch->boundary_every, order);
    double saved = 0;
    for (int i = 0; i < ch->att_slots; i++)
        saved += (1.0 + plan_redone_layer(c->model.layers, ch->boundary_every, order[i / M])) / M;
    free(order);
    return saved;
}

int plan_boundary_slots(const mt_model *m, const plan_choices *ch) {
    return ch->offload ? 2 + ch->boundary_every - 1 : segment_slots(m->layers, ch->boundary_every);
}

int plan_offloaded_boundaries(const mt_model *m, const plan_choices *ch) {
    return ch->offload ? (m->layers - 1) / ch->boundary_every + 1 : 0;
}

// The k whose slots fit in `fit` boundaries' worth, fewest recomputed layers first (the
// smallest k); the k of fewest slots when none fits.
static int fitting_every(int layers, uint64_t fit) {
    int best = 1;
    for (int k = 1; k <= layers; k++) {
        if ((uint64_t)segment_slots(layers, k) <= fit) return k;
        if (segment_slots(layers, k) < segment_slots(layers, best)) best = k;
    }
    return best;
}

// Boundaries may take 3/4 of what is free once the buffers before them are there, which
// leaves the rest for kept layers; when none will be kept (recompute "always", or layers run
// by chunks, which recompute by chunk), all of it but the residual gradient and a 1 GiB margin
// for the CUDA runtime's and libraries' own allocations. When all of them do not fit, "auto"
// keeps every k-th and recomputes the segments between (no host memory needed, unlike an
// offload, and at long context the host has none to spare); offload_activations "auto"
// offloads only when even that does not fit, every boundary unless boundary_every says k (then
// boundaries 0, k, 2k, ... go to the host, a k-th of the host memory, and the segments between
// are recomputed as without an offload). What the boundaries leave then holds attention
// outputs (keep_attention "auto"), where no layer is kept whole.
void plan_choose_groups(plan_choices *ch, const mt_config *c, int cuda, int grad_bytes,
                        uint64_t room, int device_groups) {
    ch->cuda = cuda, ch->grad_bytes = grad_bytes, ch->offload = 0;
    ch->device_groups = device_groups;
    ch->boundary_every = c->boundary_every > 0 ? c->boundary_every : 1;
    if (ch->boundary_every > c->model.layers) ch->boundary_every = c->model.layers;
    int pairs = c->model.layers * c->micro_batches;
    ch->att_slots = c->keep_attention < 0       ? 0
                    : c->keep_attention < pairs ? c->keep_attention
                                                : pairs;
    if (c->offload_activations == OFFLOAD_ALWAYS) ch->offload = 1;
    ch->layer_buffers = c->layer_buffers > 0 ? c->layer_buffers : 2;
    // every layer updated here, in buffers of its own: none streams
    if (c->layer_buffers == 0 && device_groups > c->model.layers) ch->layer_buffers = 0;
    if (room == UINT64_MAX) return;
    mt_buffer_shape s = buffer_shape(c);
    uint64_t one = 4 * s.M * s.n * s.D;
    // "auto": one streaming layer where two leave no room for even the offloaded activations'
    // two boundaries, the residual gradient and the margin
    if (c->layer_buffers == 0 && before_offload_bytes(c, ch) + 4 * one + (1ull << 30) > room) {
        ch->layer_buffers = 1; // and memory this tight keeps the groups' state off the device
        if (c->device_groups < 0) ch->device_groups = 0;
    }
    uint64_t before = before_offload_bytes(c, ch);
    uint64_t left = room > before ? room - before : 0, reserve = one + (1ull << 30);
    // asked-for attention slots come first: the boundaries take what they leave
    uint64_t asked = (uint64_t)ch->att_slots * plan_attention_slot_bytes(c, cuda);
    left = left > asked ? left - asked : 0;
    int keeps = c->recompute != RECOMPUTE_ALWAYS && s.r == s.n;
    uint64_t fit = (keeps ? left / 4 * 3 : left > reserve ? left - reserve : 0) / one;
    if (!ch->offload) {
        if (c->boundary_every == 0) ch->boundary_every = fitting_every(c->model.layers, fit);
        if (c->offload_activations == OFFLOAD_AUTO &&
            (uint64_t)segment_slots(c->model.layers, ch->boundary_every) > fit)
            ch->offload = 1, ch->boundary_every = c->boundary_every > 0 ? ch->boundary_every : 1;
    }
    if (c->keep_attention >= 0 || keeps) return;
    uint64_t acts = one * (uint64_t)plan_boundary_slots(&c->model, ch),
             slot = plan_attention_slot_bytes(c, cuda);
    uint64_t spare = left > reserve + acts ? left - reserve - acts : 0;
    ch->att_slots = spare / slot < (uint64_t)pairs ? (int)(spare / slot) : pairs;
}

int plan_check_device(const mt_config *c, const plan_choices *ch, uint64_t room, const char *where,
                      char *err, size_t n) {
    plan_buffers b;
    plan_compute_buffers(c, ch, &b);
    uint64_t fixed = plan_backend_fixed_bytes(c, ch->cuda), rest = b.total - fixed;
    if (room == UINT64_MAX || rest <= room) return 0;
    char need[24], have[24], acts[24], opt[24], bufs[24], att[64] = "";
    plan_bytes_text(need, sizeof need, (double)b.total);
    if (b.attention) {
        char bytes[24];
        plan_bytes_text(bytes, sizeof bytes, (double)b.attention);
        snprintf(att, sizeof att, ", kept attention outputs %s", bytes);
    }
    plan_bytes_text(have, sizeof have, (double)(room + fixed));
    plan_bytes_text(acts, sizeof acts, (double)(b.activations + b.residual));
    plan_bytes_text(opt, sizeof opt, (double)b.optimizer);
    plan_bytes_text(bufs, sizeof bufs, (double)(b.weights + b.grads + b.working));
    int cuda = ch->cuda, own = ch->device_groups > 0;
    snprintf(err, n,
             "%s: the compute rank's buffers need %s of %s memory (activations %s, weights, "
             "gradients and working set %s%s%s%s), %s is free (%s); fewer batch.micro_batches or "
             "batch.micro_batch%s%s%s would shrink them",
             c->source_path, need, cuda ? "GPU" : "device", acts, bufs,
             own ? ", state of the groups it updates " : "", own ? opt : "", att, have, where,
             cuda && !ch->offload ? ", offload_activations = \"always\"" : "",
             own ? ", a smaller optimizer.device_groups" : "",
             b.attention ? ", a smaller keep_attention" : "");
    return -1;
}
