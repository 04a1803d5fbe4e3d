// The step estimate: how long a step takes on this machine and which part bounds each pass.
#include "kernels/attention_args.h"
#include "kernels/gated_delta_args.h"
#include "runtime/model/model.h"
#include "runtime/plan/plan.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

// The attention term's sequence length summed over the layers: seq_len for a layer that sees
// every key before a query, and for a sliding layer seq_len scaled by the share of the causal
// pairs its window keeps, so that a window's real work is counted, in the same convention.
double plan_attention_span(const mt_config *c) {
    double span = 0, T = c->seq_len, causal = attn_score_pairs(c->seq_len, 0);
    for (int l = 0; l < c->model.layers; l++) {
        const mt_layer_kind *k = mt_layer_kind_of(&c->model, l);
        int w = k->window;
        if (k->attention == ATTN_GDN) continue; // plan_gdn_flops
        span += w > 0 && w < c->seq_len ? T * attn_score_pairs(c->seq_len, w) / causal : T;
    }
    return span;
}

// The chunked delta rule of one Gated DeltaNet layer, forward, per token (gated_delta_chunked.c),
// beyond its projections' (in the parameters' 6 N): per value head, reading the state (for the
// correction and for the output) and advancing it, 2 dk dv each, and within its chunk of L
// tokens the causal halves of k k^T and q k^T (L dk each), of the substitution and of the
// output's sum over the chunk (L dv each). L: GDN_CHUNK, or the row when shorter.
static double gdn_layer_flops(const mt_config *c) {
    double dk = c->model.linear_k_dim, dv = c->model.linear_v_dim;
    double L = c->seq_len < GDN_CHUNK ? c->seq_len : GDN_CHUNK;
    return (double)c->model.linear_v_heads * (6.0 * dk * dv + 2.0 * L * (dk + dv));
}

double plan_gdn_flops(const mt_config *c) {
    return mt_gdn_layers(&c->model) * gdn_layer_flops(c);
}

// Attention's width: heads x head_dim (Qwen3's differs from dim); multi-head latent attention's
// the mean of its q k^T and p v widths, heads x (nope + rope + v) / 2.
static double attention_width(const mt_model *m) {
    if (m->mla_kv_rank > 0) return m->heads * (mt_mla_qk_dim(m) + m->mla_v_dim) / 2.0;
    return (double)m->heads * mt_head_dim(m);
}
// The head width the GPU's attention runs at: MLA's q, k and v padded to the wider
// (attn_mla_cuda.c).
static int attention_head_dim(const mt_model *m) {
    if (m->mla_kv_rank > 0)
        return mt_mla_qk_dim(m) > m->mla_v_dim ? mt_mla_qk_dim(m) : m->mla_v_dim;
    return mt_head_dim(m);
}

// The token mixers' forward FLOPs per token, a layer's on average, beyond the parameters':
// softmax attention over every key before a query (2 width seq: q k^T and p v, causal halves),
// and Gated DeltaNet's rule, which runs at a rate of its own.
static double softmax_mixer_flops(const mt_config *c) {
    int softmax = c->model.layers - mt_gdn_layers(&c->model);
    return softmax * 2.0 * attention_width(&c->model) * c->seq_len / c->model.layers;
}
static double gdn_mixer_flops(const mt_config *c) {
    return plan_gdn_flops(c) / c->model.layers;
}

// 6 N + 12 dim (layers x seq) with N the active parameters, as MoE throughput is usually
// counted (an MoE token meets top_k experts, not all of them), and a sliding layer's seq its
// window's share (plan_attention_span); a Gated DeltaNet layer 3 times its rule's forward
// (plan_gdn_flops: forward and backward).
double plan_model_flops_per_token(const mt_config *c) {
    return 6.0 * (double)plan_active_params(&c->model) +
           12.0 * (double)c->model.dim * plan_attention_span(c) + 3.0 * plan_gdn_flops(c);
}

double plan_peak_flops(int cuda, int cores) {
    return cuda ? PLAN_GPU_PEAK_FLOPS : PLAN_CPU_FLOPS_PER_CORE * (cores > 0 ? cores : 1);
}

// The three parts are summed as if they ran one after the other: in a real step prefetch,
// offload and the optimizer overlap the compute, so this is the pessimistic end.
// The Hopper kernels run head dims other than 64 on 128-column tiles (zeros past the head), so
// they take head dim 128's time for fewer counted FLOPs.
static double gpu_attention_rate(int head_dim) {
    if (head_dim <= 64) return PLAN_GPU_ATTENTION_FLOPS_HD64;
    if (head_dim > 128) return PLAN_GPU_ATTENTION_FLOPS_WIDE;
    return PLAN_GPU_ATTENTION_FLOPS * (head_dim < 128 ? head_dim / 128.0 : 1.0);
}

// The experts' GEMMs are one cuBLASLt call per expert, launched from the host once a chunk's
// routing is known (runtime/engine/moe_cuda.c): 3 in the forward, 3 in the backward's recompute
// and 6 in the backward, per MoE layer, micro-batch and chunk. Small experts' GEMMs run far
// below the dense rate (a few thousand rows each, the routing's kernels between them): their
// time beyond their FLOPs at PLAN_GPU_FLOPS, per call, measured on the H200 at d9e635e
// (bench/RESULTS.md 2026-12-05): Qwen3-MoE's experts (768 wide, 1,024 rows a call) 9.7 us,
// at 114,688 tokens 8.4, OLMoE's (1,024 wide, 2,048 rows) 14.5; Mixtral's 768 calls of 4,096 x
// 4,096 x 14,336 are at the dense rate. One constant puts each within 12% of its GPU busy time.
#define PLAN_EXPERT_CALL_S 12e-6

// The expert calls of one GEMM kind a step (every expert taken to have rows).
static double expert_calls(const mt_config *c) {
    long n = (long)c->micro_batch * c->seq_len, chunk = mt_seq_chunk(c);
    double chunks = (double)((n + chunk - 1) / (chunk > 0 ? chunk : 1));
    return (double)mt_moe_layers(&c->model) * c->micro_batches * chunks * c->model.experts;
}

// The parameters that cross PCIe each step: all but the groups the compute rank updates, whose
// weights stay in buffers of their own and whose gradients never leave.
static double streamed_params(const mt_plan *p) {
    return (double)p->params - (double)model_lead_numel(&p->c->model, p->device_groups);
}

// With the ring a group is updated once its gradients land, in the backward's order, and its
// slot frees when the update ends. The pass ends with the optimizer ranks' last update (the
// lowest group they update, which the next forward needs first of theirs; the groups the GPU
// updates take no slot and no time here), so besides the longer of the backward and the
// updates it holds the first group's backward and the last group's update, and a backward that
// waits for a slot while the updates run behind. Large groups make that a large part of the
// step: a Mixtral-8x7B layer is 1.4B parameters, its update 0.36 s (bench/RESULTS.md
// 2026-12-05).
// Each group's backward takes its share of the pass (compute by active parameters, PCIe by all),
// its update its share of the update's time.
// The optimizer ranks update by urgency (p->ring_urgent: the group the next forward needs
// first, into that forward) rather than in this order where they may, and the same pipeline
// stands for both: where AdamW takes longer a layer than the forward (an MoE layer's 0.6 B
// parameters, 160 ms on the host, 40 ms of forward), the forward waits for the first layers'
// updates in either order, and GLM-4.7-Flash's slice took 1.578 s a step by urgency, 1.652 s in
// arrival order, against 1.59 s planned (bench/RESULTS.md 2026-12-07).
static double ring_backward_s(const mt_plan *p, double compute, double pcie, double update) {
    const mt_model *m = &p->c->model;
    int n = model_group_count(m), R = p->ring_depth;
    int *order = malloc(sizeof(int) * (size_t)n);
    double *end = malloc(sizeof(double) * (size_t)n); // the ranks' updates, in turn
    if (!order || !end) {
        free(order), free(end);
        return fmax(compute, fmax(pcie, update));
    }
    model_grad_order(m, order);
    int head = model_head_group(m);
    double N = (double)p->params, embedding = (double)model_group_numel(m, 0);
    double A = (double)plan_active_params(m) - embedding; // what the backward computes with
    double layers = N - embedding - (double)model_group_numel(m, head);
    double layer_active = layers > 0 ? (A - (double)model_group_numel(m, head)) / layers : 1;
    double updated = streamed_params(p); // what the optimizer ranks update: what streams
    double landed = 0, last_end = 0;
    int h = 0; // the optimizer ranks' groups so far: the ring's slots are theirs
    for (int i = 0; i < n; i++) {
        int g = order[i];
        double n_g = (double)model_group_numel(m, g);
        double active = g == 0 ? 0 : g == head ? n_g : n_g * layer_active; // idle experts out
        int here = g < p->device_groups; // no PCIe: its weights and gradients stay
        landed += fmax(A > 0 ? compute * active / A : 0, here ? 0 : pcie * n_g / updated);
        if (here || updated <= 0) continue;
        if (R > 0 && h >= R) landed = fmax(landed, end[h - R]); // no slot free before that
        last_end = end[h++] = fmax(landed, last_end) + update * n_g / updated;
    }
    free(order), free(end);
    return fmax(last_end, landed);
}

// Each pass's parts: compute, PCIe, in one of them the optimizer, and the disk. With one
// streaming layer buffer (serial) a layer's weights come in after the layer before has computed,
// so compute and PCIe take turns.
typedef struct {
    double fwd[4], bwd[4];
    int serial;
} pass_parts;

static int slowest(const double part[4]) {
    int i = 0;
    for (int j = 1; j < 4; j++)
        if (part[j] > part[i]) i = j;
    return i;
}

// A pass's GPU side as the layers see it: when serial, the compute and PCIe one after the other
// (*compute their sum, *pcie nothing apart), else side by side.
static void gpu_parts(const double part[4], int serial, double *compute, double *pcie) {
    *compute = serial ? part[0] + part[1] : part[0];
    *pcie = serial ? 0 : part[1];
}

// A pass: as long as its slowest part.
static double pass_s(const double part[4], int serial) {
    double compute, pcie;
    gpu_parts(part, serial, &compute, &pcie);
    return fmax(fmax(compute, pcie), fmax(part[2], part[3]));
}

// Whether a serial pass is bound by its compute and PCIe in turn.
static int in_turn_bound(const double part[4], int serial) {
    double compute, pcie;
    gpu_parts(part, serial, &compute, &pcie);
    return serial && compute >= fmax(part[2], part[3]);
}

// The backward pass as long as its slowest part or, with the ring, the groups' pipeline
// (ring_backward_s) where that outlasts them; *piped says which.
static double backward_pass_s(const mt_plan *p, const double bwd[4], int serial, int *piped) {
    double longest = pass_s(bwd, serial), compute, pcie;
    gpu_parts(bwd, serial, &compute, &pcie);
    double pipeline =
        p->ring_depth > 0 ? ring_backward_s(p, compute, pcie, fmax(bwd[2], bwd[3])) : 0;
    *piped = pipeline > longest;
    return fmax(longest, pipeline);
}

// The share of the step the GPU computes with compute scaled by `scale` (as many times the
// tokens: the host's and the disk's bytes stay), the disk's part in it or left out.
static double busy_share(const mt_plan *p, const pass_parts *pp, double scale, int disk) {
    double fwd[4], bwd[4];
    for (int i = 0; i < 4; i++) fwd[i] = pp->fwd[i], bwd[i] = pp->bwd[i];
    fwd[0] *= scale, bwd[0] *= scale;
    if (!disk) fwd[3] = bwd[3] = 0;
    int piped;
    double step = pass_s(fwd, pp->serial) + backward_pass_s(p, bwd, pp->serial, &piped);
    return step > 0 ? (fwd[0] + bwd[0]) / step : 1;
}

// The GPU "stops waiting" from the tokens a step at which it computes PLAN_BREAK_EVEN_BUSY of
// the step (plan.h). The pipeline's ends (the first group's backward, the last group's update)
// never hide entirely, so waiting never reaches zero; large MoE layers make those ends long, and
// a balance of the parts' totals alone put Qwen3-MoE's break-even at 69,180 tokens, where the GPU
// was about 70% busy (bench/RESULTS.md 2026-12-05). The share grows with the tokens: bisection
// on a log scale. With the disk (the NVMe tier's break-even) the same rule: its bytes a step stay
// as the compute grows.
static double break_even_scale(const mt_plan *p, const pass_parts *pp, int disk) {
    double lo = 1e-6, hi = 1e6; // as many times this batch: a batch of a few tokens needs more
    while (busy_share(p, pp, hi, disk) < PLAN_BREAK_EVEN_BUSY && hi < 1e18) lo = hi, hi *= 1e3;
    if (busy_share(p, pp, hi, disk) < PLAN_BREAK_EVEN_BUSY) return INFINITY;
    if (busy_share(p, pp, lo, disk) >= PLAN_BREAK_EVEN_BUSY) return lo;
    for (int i = 0; i < 60; i++) {
        double mid = sqrt(lo * hi);
        if (busy_share(p, pp, mid, disk) >= PLAN_BREAK_EVEN_BUSY)
            hi = mid;
        else
            lo = mid;
    }
    return hi;
}

// On the GPU the three overlap, layer by layer, within each pass: the forward's layer takes the
// longest of its compute and its weights' copy in, the backward's of its compute (recompute
// included), its weights' copy in and its gradients' copy out (the two directions run at once).
// The optimizer ranks update a layer during the next forward with a slot per group (a layer's
// forward waits for its update), during the backward with the ring (a layer's gradients wait for
// a slot). Layers are alike, so the sums over them stand for the per-layer maxima. Measured on
// the H200 with full-width 100B and 120B slices (bench/RESULTS.md, bench/run_slices.sh).
// The copies go through host memory too, but the optimizer ranks' cores, not the memory, bound
// AdamW: the slices show no turn-taking (PLAN_OPT_BYTES_PER_S), so the copies add nothing there.
static void overlap_phases(const mt_plan *p, plan_estimate *e, double forward_s) {
    double streamed = streamed_params(p), tokens = (double)mt_tokens_per_step(p->c);
    int ring = p->ring_depth > 0;
    e->forward_s = forward_s + 3.0 * expert_calls(p->c) * PLAN_EXPERT_CALL_S;
    if (e->forward_s > e->compute_s) e->forward_s = e->compute_s;
    double in_fwd = 4.0 * streamed, out_bwd = p->grad_bytes * streamed;
    double in_bwd = e->pcie_bytes - in_fwd - out_bwd;
    double shared = e->opt_s; // the optimizer's updates, in the pass they overlap
    // The NVMe tier: gradients written as they land (the backward), read back and the moments
    // read and written where the optimizer ranks update (its windows run ahead of them); with
    // storage.master the bf16 copy is written by the update and read by the backward.
    double copy = (double)p->disk_copy;
    double written = (p->disk_grads + copy) / p->disk_bw;
    double updating = (p->disk_grads + 2.0 * p->disk_adam - copy) / p->disk_bw;
    pass_parts pp = {
        .fwd = {e->forward_s, in_fwd / PLAN_PCIE_BYTES_PER_S, ring ? 0 : shared,
                ring ? 0 : updating},
        .bwd = {e->compute_s - e->forward_s, fmax(in_bwd, out_bwd) / PLAN_PCIE_BYTES_PER_S,
                ring ? shared : 0, written + (ring ? updating : 0)},
        .serial = p->choices.layer_buffers == 1,
    };
    static const char *const names[4] = {"compute", "PCIe", "the optimizer's updates",
                                         "the disk (storage.dir)"};
    static const char *const piped_names[4] = {
        "compute, then the ring's updates behind it", "PCIe, then the ring's updates behind it",
        "the optimizer's updates, from the first gradients to land to the last",
        "the disk, then the ring's updates behind it"};
    int f = slowest(pp.fwd), b = slowest(pp.bwd), piped;
    e->forward_phase_s = pass_s(pp.fwd, pp.serial), e->forward_bound = names[f];
    e->backward_phase_s = backward_pass_s(p, pp.bwd, pp.serial, &piped);
    e->backward_bound = piped ? piped_names[b] : names[b];
    static const char *const in_turn = "compute and PCIe in turn (one layer buffer)";
    if (in_turn_bound(pp.fwd, pp.serial)) e->forward_bound = in_turn;
    if (!piped && in_turn_bound(pp.bwd, pp.serial)) e->backward_bound = in_turn;
    e->step_s = e->forward_phase_s + e->backward_phase_s;
    // PCIe and the optimizer's updates, the pipeline's ends included; then the disk too
    e->stream_break_even_tokens = tokens * break_even_scale(p, &pp, 0);
    if (e->disk_bytes > 0) e->break_even_tokens = tokens * break_even_scale(p, &pp, 1);
}

void plan_estimate_step(const mt_plan *p, int cores, plan_estimate *e) {
    const mt_config *c = p->c;
    double tokens = (double)mt_tokens_per_step(c);
    // Compute meets the active parameters (all but the idle experts); a redone layer is taken as
    // the mean layer's active part. PCIe and the optimizer move all N but the groups
    // updated on the GPU.
    double A = (double)plan_active_params(&c->model);
    double head = (double)model_group_numel(&c->model, model_head_group(&c->model));
    double layer_n = (A - (double)model_group_numel(&c->model, 0) - head) / c->model.layers;
    double redo = plan_recomputed_layers(c->model.layers, p->choices.boundary_every);
    double width = attention_width(&c->model);
    memset(e, 0, sizeof *e);
    e->active_params = A;
    // GEMMs: 6 N, the backward's recompute of every layer's forward 2 N, a redone segment
    // layer 2 more of its own. Attention as it runs, causal: forward 2 dim seq, backward 4 and
    // the backward's recompute 2 per layer, a redone layer 2 more.
    // Kept attention outputs spare their layers' attention forward in the recompute.
    double kept_att = plan_attention_saved(c, &p->choices);
    double kept_bwd = (double)p->choices.att_slots / c->micro_batches; // the rest: in the redo
    double gemm = tokens * (8.0 * A + 2.0 * layer_n * redo);
    // a sliding layer's share of the causal pairs (plan_attention_span), on average
    double span = plan_attention_span(c) / c->model.layers;
    // Gated DeltaNet's rule, as attention: forward 1, backward 2, recompute 1, a redone layer 1
    // more, a kept output 1 less, its layers' share of the redone and kept passes
    double gdn = plan_gdn_flops(c), share = gdn / c->model.layers;
    double attention =
        tokens * (8.0 * c->model.layers + 2.0 * redo - 2.0 * kept_att) * width * span;
    double rule = tokens * (4.0 * gdn + (redo - kept_att) * share);
    e->flops = gemm + attention + rule;
    e->flops_rate = p->cuda ? PLAN_GPU_FLOPS : PLAN_CPU_FLOPS_PER_CORE * (cores > 0 ? cores : 1);
    e->attention_rate = p->cuda ? gpu_attention_rate(attention_head_dim(&c->model)) : e->flops_rate;
    e->gdn_rate = p->cuda ? PLAN_GPU_GDN_FLOPS : e->flops_rate;
    e->compute_s = gemm / e->flops_rate + attention / e->attention_rate + rule / e->gdn_rate;
    if (p->cuda) e->compute_s += 12.0 * expert_calls(c) * PLAN_EXPERT_CALL_S;
    // recompute: the backward's forward of every layer (2 of the layer's GEMM 8 N, 2 of its
    // attention's 8), and the redone segment layers' forward once more
    double soft = softmax_mixer_flops(c), rule_s = gdn_mixer_flops(c) / e->gdn_rate;
    double mixer_s = soft / e->attention_rate + rule_s; // the recompute's, a layer's
    double redo_per_token =
        2.0 * layer_n * redo / e->flops_rate + (redo - (kept_att - kept_bwd)) * mixer_s;
    double again_per_token = 2.0 * (A - model_group_numel(&c->model, 0)) / e->flops_rate +
                             (c->model.layers - kept_bwd) * mixer_s;
    e->redo_s = tokens * redo_per_token;
    e->recompute_s = tokens * again_per_token + e->redo_s;
    if (p->cuda) { // weights in twice (forward, backward) as fp32, gradients out once, of the
        // groups that stream
        double passes = 2.0 + redo / c->model.layers;
        e->pcie_bytes = (passes * 4.0 + p->grad_bytes) * streamed_params(p);
        e->pcie_s = e->pcie_bytes / PLAN_PCIE_BYTES_PER_S;
    }
    // the groups the compute rank updates: no optimizer rank touches them
    e->opt_bytes = (PLAN_OPT_BYTES_PER_PARAM - 4 + p->grad_bytes) * streamed_params(p);
    e->opt_s = e->opt_bytes / PLAN_OPT_BYTES_PER_S;
    e->disk_bytes = 2.0 * (double)p->disk_grads + 2.0 * (double)p->disk_adam;
    e->disk_s = e->disk_bytes / p->disk_bw;
    e->step_s = e->compute_s + e->pcie_s + e->opt_s + e->disk_s;
    if (p->cuda) // the forward: softmax attention counted at the GEMMs' rate, as it overlaps them
        overlap_phases(p, e,
                       tokens * ((2.0 * A + c->model.layers * soft) / e->flops_rate +
                                 c->model.layers * rule_s));
    e->tokens_per_s = tokens / e->step_s;
}
