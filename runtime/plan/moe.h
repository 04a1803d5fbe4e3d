// The Mixture-of-Experts part of the plan (runtime/plan/moe.c, docs/moe.md): part of the plan's
// face (plan.h includes it), apart so that moe.c needs nothing of the rest of the plan.
#ifndef MT_PLAN_MOE_H
#define MT_PLAN_MOE_H

#include "runtime/model/model.h"
#include <stdint.h>

// Parameters of all the experts of every MoE layer (0 for a dense model).
uint64_t plan_expert_params(const mt_model *m);
// The parameters a token meets: all but the experts, plus top_k experts in each MoE layer.
// Compute scales with them; PCIe and the optimizer with model_param_count (every expert's
// weights stream in and its gradients out each step, tokens or none).
uint64_t plan_active_params(const mt_model *m);
// GPU bytes of the MoE MLP's buffers (cu_moe_alloc, runtime/engine/moe_cuda.c), one set for the
// whole backend: its list, MT_CUDA_MOE (buffers.h). 0 for a dense model. The plan counts it in
// the fixed working set (plan_backend_fixed_bytes).
uint64_t plan_moe_work_bytes(const mt_config *c);
// The CPU reference: moe_scratch_new's bytes for the micro-batch (MT_CPU_MOE: in each layer
// working set, kept passes included), and backend_cpu.c's routing statistics (MT_CPU_MOE_STATS).
uint64_t plan_moe_cpu_bytes(const mt_config *c);
uint64_t plan_moe_cpu_stats_bytes(const mt_config *c);

#endif
