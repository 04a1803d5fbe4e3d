// optimizer.device_groups "auto": how many parameter groups (the embedding, then layers 0, 1,
// ...) the compute rank updates on the GPU, their fp32 state in its memory. A group there costs
// the GPU 18 B/param (state and its own weight and gradient buffers) and spares the host's
// AdamW of it (28 B/param through the optimizer ranks) and its PCIe traffic (its weights stay,
// its gradients never leave).
#include "runtime/plan/plan.h"
#include "runtime/model/model.h"
#include <string.h>

int plan_device_groups(const mt_config *c, int cuda, uint64_t device_free) {
    if (c->device_groups >= 0) return c->device_groups;
    if (!cuda) return 0;
    uint64_t budget = device_free / 8, used = 12 * model_group_numel(&c->model, 0);
    if (used > budget) return 0;
    // At long context the boundaries need the memory more than an optimizer lead does (a step
    // takes minutes there, the optimizers are never behind): when all of them would take over
    // half of it, the embedding alone.
    mt_buffer_shape s;
    mt_buffer_shape_of(&s, c, c->micro_batch, c->seq_len);
    if (4 * (s.L + 1) * s.M * s.n * s.D > device_free / 2) return 1;
    // The first layer may take up to a quarter of it, the rest stay within the eighth: layer 0
    // is the update the next forward waits for at the step boundary (its gradients land last,
    // its weights are needed first), a whole layer's AdamW where layers are large (a
    // Mixtral-8x7B layer of 1.45B parameters: 0.36 s on a 16-core host, bench/RESULTS.md
    // 2026-12-05), and the GPU updates it in milliseconds.
    int most = (c->model.layers + 7) / 8, layers = 0; // layer by layer: their sizes may differ
    for (; layers < most; layers++) {
        uint64_t layer = 18 * model_group_numel(&c->model, model_layer_group(layers));
        if (used + layer > (layers == 0 ? device_free / 4 : budget)) break;
        used += layer;
    }
    return 1 + layers;
}

// The step the plan estimates with choices ch (plan_estimate_step on a plan of one node, no
// NVMe tier: the parts it reads).
static double step_s(const mt_config *c, const plan_choices *ch) {
    mt_plan p;
    memset(&p, 0, sizeof p);
    p.c = c, p.cuda = ch->cuda, p.choices = *ch, p.device_groups = ch->device_groups;
    p.params = model_param_count(&c->model), p.grad_bytes = ch->grad_bytes;
    p.ring_depth = model_grad_ring_depth(c), p.ring_urgent = model_ring_by_urgency(c, 1);
    p.disk_bw = PLAN_DISK_BYTES_PER_S;
    plan_estimate e;
    plan_estimate_step(&p, 0, &e);
    return e.step_s;
}

// Whether ch's buffers fit in room with the margin the boundaries' choice keeps (a boundary's
// worth and 1 GiB for the CUDA runtime's and libraries' own allocations).
static int fits(const mt_config *c, const plan_choices *ch, uint64_t room) {
    plan_buffers b;
    plan_compute_buffers(c, ch, &b);
    uint64_t rest = b.total - plan_backend_fixed_bytes(c, ch->cuda);
    return rest + b.residual + (1ull << 30) <= room;
}

// The lead above is what the step boundary needs; where the optimizer ranks bound the whole
// step (an MoE slice or model whose host AdamW outlasts its compute at this batch), the GPU
// memory left does more updating further layers than keeping layer passes: Qwen3.5-35B-A3B's
// first 2 layers at 65,536 tokens took 1.235 s a step with the embedding alone on the GPU (the
// lead in the memory left there) and 0.880 s with both layers too, GPU 100% busy (H100,
// bench/RESULTS.md 2026-12-07). So "auto", once the GPU's memory is known, adds layers one at a
// time while each shortens the plan's step by 1% or more, fits, and leaves the boundaries as they
// were (no offload, no recomputed segments); with every layer there, the two streaming layer
// buffers go too (plan_choose_groups). Not with one layer buffer (memory is tight there), nor
// with the NVMe tier, whose disk the estimate's pipeline weighs otherwise.
void plan_more_device_groups(plan_choices *ch, const mt_config *c, uint64_t room) {
    if (c->device_groups >= 0 || !ch->cuda || room == UINT64_MAX || ch->device_groups < 1 ||
        ch->layer_buffers == 1 || ch->offload || c->storage_grads || c->storage_adam ||
        c->storage_master)
        return;
    double best = step_s(c, ch);
    for (int k = ch->device_groups + 1; k <= c->model.layers + 1; k++) {
        plan_choices t;
        plan_choose_groups(&t, c, ch->cuda, ch->grad_bytes, room, k);
        if (t.offload || t.layer_buffers == 1 || t.boundary_every > ch->boundary_every ||
            !fits(c, &t, room))
            return;
        double s = step_s(c, &t);
        if (s > 0.99 * best) return;
        *ch = t, best = s;
    }
}

void plan_choose(plan_choices *ch, const mt_config *c, int cuda, int grad_bytes, uint64_t room) {
    plan_choose_groups(ch, c, cuda, grad_bytes, room, plan_device_groups(c, cuda, room));
    plan_more_device_groups(ch, c, room);
}
