// The Mixture-of-Experts part of the plan (docs/moe.md): the parameters a token meets, and the
// buffers an MoE MLP adds to the compute rank, on the GPU (runtime/engine/moe_cuda.c's
// cu_moe_alloc) and on the CPU reference (runtime/engine/moe_mlp.c's moe_scratch_new and
// backend_cpu.c's routing statistics). A change to those allocations must be mirrored here.
#include "runtime/plan/moe.h"

// The three matrices of one expert (gate, up, down).
static uint64_t expert_numel(const mt_config *c) {
    return 3 * (uint64_t)c->dim * (uint64_t)c->moe_ffn_dim;
}

uint64_t plan_expert_params(const mt_config *c) {
    if (c->experts <= 0) return 0;
    return (uint64_t)mt_moe_layers(c) * (uint64_t)c->experts * expert_numel(c);
}

// Every parameter but the experts, plus top_k experts in each MoE layer: the router, the shared
// expert, attention, norms, embedding and head are met by every token.
uint64_t plan_active_params(const mt_config *c) {
    uint64_t total = model_param_count(c);
    if (c->experts <= 0) return total;
    uint64_t idle = (uint64_t)(c->experts - c->top_k) * expert_numel(c);
    return total - (uint64_t)mt_moe_layers(c) * idle;
}

// cuda_moe_dispatch_scratch_bytes (kernels/cuda/moe.cu): an int32 count per expert for each
// tile of 2048 (token, slot) pairs, one tile at least.
static uint64_t dispatch_scratch(uint64_t pairs, uint64_t E) {
    uint64_t tiles = (pairs + 2047) / 2048;
    return 4 * (tiles ? tiles : 1) * E;
}

uint64_t plan_moe_aux_bytes(const mt_config *c) {
    if (c->experts <= 0) return 0;
    uint64_t E = (uint64_t)c->experts, M = (uint64_t)c->micro_batches;
    return 4 * M * (uint64_t)mt_moe_layers(c) * E + 4 * M * E; // psum_all, aux_g
}

uint64_t plan_moe_work_bytes(const mt_config *c) {
    if (c->experts <= 0) return 0;
    uint64_t r = (uint64_t)mt_seq_chunk(c), E = (uint64_t)c->experts;
    uint64_t P = r * (uint64_t)c->top_k, D = (uint64_t)c->dim, F = (uint64_t)c->moe_ffn_dim;
    uint64_t S = c->shared_ffn_dim > 0 ? (uint64_t)c->shared_ffn_dim : 0;
    uint64_t router = 4 * r * E + 4 * r * E + 2 * r * E; // logits, probs (fp32), d_logits (bf16)
    uint64_t pairs = 5 * 4 * P; // weight, d_weight, expert, row_of, token_of
    uint64_t dispatch = 4 * E + 4 * (E + 1) + dispatch_scratch(P, E); // counts, offsets, tiles
    uint64_t rows = 4 * 2 * P * D + 5 * 2 * P * F + 4 * P * F; // xp yp d_yp d_xp; gate..d_up; d_act
    uint64_t shared = S ? 5 * 2 * r * S + 4 * r * S + 2 * 2 * r * D + 4 * r + 2 * r : 0;
    return router + pairs + dispatch + rows + shared + plan_moe_aux_bytes(c);
}

// cu_moe_alloc's host side: the pinned counts and offsets, the per micro-batch and layer
// counts and psums copied back for the loss and metrics, the aux gradient, the layer index.
uint64_t plan_moe_host_bytes(const mt_config *c) {
    if (c->experts <= 0) return 0;
    uint64_t E = (uint64_t)c->experts, n = (uint64_t)c->micro_batch * c->seq_len;
    uint64_t r = (uint64_t)mt_seq_chunk(c), chunks = (n + r - 1) / r;
    uint64_t stats = (uint64_t)c->micro_batches * (uint64_t)mt_moe_layers(c) * E;
    uint64_t routed = (uint64_t)c->micro_batches * mt_moe_layers(c) * chunks * (2 * E + 1);
    return 4 * E + 4 * (E + 1) + 2 * 4 * stats + 4 * E + 4 * (uint64_t)c->layers + 4 * routed;
}

uint64_t plan_moe_cpu_bytes(const mt_config *c, uint64_t n) {
    if (c->experts <= 0) return 0;
    uint64_t E = (uint64_t)c->experts, P = n * (uint64_t)c->top_k, D = (uint64_t)c->dim;
    uint64_t F = (uint64_t)c->moe_ffn_dim;
    uint64_t S = c->shared_ffn_dim > 0 ? (uint64_t)c->shared_ffn_dim : 0;
    uint64_t chunk = (uint64_t)mt_chunk_of(c, (int)n), chunks = (n + chunk - 1) / chunk;
    uint64_t floats = 2 * n * E + 5 * P + 2 * chunks * (E + 1) + 4 * P * D + 6 * P * F;
    if (S) floats += 6 * n * S + 2 * n * D + 2 * n;
    return 4 * floats;
}

uint64_t plan_moe_cpu_stats_bytes(const mt_config *c) {
    int moe = c->experts > 0 ? mt_moe_layers(c) : 0;
    if (!moe) return 0;
    uint64_t E = (uint64_t)c->experts, M = (uint64_t)c->micro_batches;
    return 4 * (uint64_t)c->layers + 2 * 4 * M * (uint64_t)moe * E + 4 * M * E;
}
