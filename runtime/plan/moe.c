// The Mixture-of-Experts part of the plan (docs/moe.md): the parameters a token meets, and the
// buffers an MoE MLP adds to the compute rank, on the GPU (runtime/engine/moe_cuda.c's
// cu_moe_alloc) and on the CPU reference (runtime/engine/moe_mlp.c's moe_scratch_new and
// backend_cpu.c's routing statistics): their lists' bytes (buffers.h).
#include "runtime/plan/moe.h"
#include "runtime/plan/buffers.h"

// The three matrices of one expert (gate, up, down).
static uint64_t expert_numel(const mt_model *m) {
    return 3 * (uint64_t)m->dim * (uint64_t)m->moe_ffn_dim;
}

uint64_t plan_expert_params(const mt_model *m) {
    if (m->experts <= 0) return 0;
    return (uint64_t)mt_moe_layers(m) * (uint64_t)m->experts * expert_numel(m);
}

// Every parameter but the experts, plus top_k experts in each MoE layer: the router, the shared
// expert, attention, norms, embedding and head are met by every token.
uint64_t plan_active_params(const mt_model *m) {
    uint64_t total = model_param_count(m);
    if (m->experts <= 0) return total;
    uint64_t idle = (uint64_t)(m->experts - m->top_k) * expert_numel(m);
    return total - (uint64_t)mt_moe_layers(m) * idle;
}

static mt_buffer_shape micro_batch_shape(const mt_config *c) {
    mt_buffer_shape s;
    mt_buffer_shape_of(&s, c, c->micro_batch, c->seq_len);
    return s;
}

uint64_t plan_moe_work_bytes(const mt_config *c) {
    mt_buffer_shape s = micro_batch_shape(c);
    mt_buffer_list l;
    mt_buffers_cuda_moe(&l, &s);
    return mt_buffer_list_bytes(&l);
}

uint64_t plan_moe_cpu_bytes(const mt_config *c) {
    if (c->model.experts <= 0) return 0;
    mt_buffer_shape s = micro_batch_shape(c);
    mt_buffer_list l;
    mt_buffers_cpu_moe(&l, &s);
    return mt_buffer_list_bytes(&l);
}

uint64_t plan_moe_cpu_stats_bytes(const mt_config *c) {
    mt_buffer_shape s = micro_batch_shape(c);
    mt_buffer_list l;
    mt_buffers_cpu_moe_stats(&l, &s);
    return mt_buffer_list_bytes(&l);
}
