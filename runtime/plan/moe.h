// The Mixture-of-Experts part of the plan (runtime/plan/moe.c, docs/moe.md): part of the plan's
// face (plan.h includes it), apart so that moe.c needs nothing of the rest of the plan.
#ifndef MT_PLAN_MOE_H
#define MT_PLAN_MOE_H

#include "runtime/model/model.h"
#include <stdint.h>

// Parameters of all the experts of every MoE layer (0 for a dense model).
uint64_t plan_expert_params(const mt_config *c);
// The parameters a token meets: all but the experts, plus top_k experts in each MoE layer.
// Compute scales with them; PCIe and the optimizer with model_param_count (every expert's
// weights stream in and its gradients out each step, tokens or none).
uint64_t plan_active_params(const mt_config *c);
// GPU bytes of the MoE MLP's buffers (cu_moe_alloc, runtime/engine/moe_cuda.c), one set for the
// whole backend: for a chunk of r = mt_seq_chunk(c) tokens and P = r x top_k (token, slot)
// pairs, fp32 logits and probs and bf16 d_logits [r, E]; fp32 weight and d_weight, int32
// expert, row_of and token_of [P]; int32 counts [E], offsets [E + 1] and the dispatch's tile
// counts (cuda_moe_dispatch_scratch_bytes); bf16 xp, yp, d_yp, d_xp [P, dim]; bf16 gate, up,
// act, d_gate, d_up and fp32 d_act [P, moe_ffn_dim]; with a shared expert bf16 gate, up, act,
// d_gate, d_up and fp32 d_act [r, shared_ffn_dim], bf16 y and d_y [r, dim], its fp32 logit and
// bf16 d_logit [r]; and plan_moe_aux_bytes. 0 for a dense model. The CUDA backend may size its
// own check from it; the plan counts it in the fixed working set (plan_backend_fixed_bytes).
uint64_t plan_moe_work_bytes(const mt_config *c);
// The load-balancing loss's state on the GPU: fp32 psum [micro_batches, MoE layers, E] and the
// aux gradient [micro_batches, E] (in plan_moe_work_bytes).
uint64_t plan_moe_aux_bytes(const mt_config *c);
// cu_moe_alloc's host bytes: pinned counts and offsets, the per micro-batch and layer counts and
// psums copied back, the aux gradient, the MoE layer index and each forward chunk's counts and
// offsets kept for its backward (in plan_cuda_host_bytes).
uint64_t plan_moe_host_bytes(const mt_config *c);
// The CPU reference: moe_scratch_new's fp32 / int32 bytes for n tokens (in each layer working
// set, kept passes included), and backend_cpu.c's routing statistics.
uint64_t plan_moe_cpu_bytes(const mt_config *c, uint64_t n);
uint64_t plan_moe_cpu_stats_bytes(const mt_config *c);

#endif
