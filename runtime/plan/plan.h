// The memory plan of a job: what every rank will allocate, in bytes, computed from the config
// and the rank count alone, before anything starts. mtrun prints it (--plan, and compactly at
// the start of every job) and refuses a job that cannot fit. The numbers mirror the allocations
// of shm/layout.c (shared regions), runtime/optimizer/optimizer.c (fp32 master, Adam m and v),
// runtime/engine/engine.c and runtime/engine/transfer_cuda.c: a change to one of those
// allocations must be mirrored here. The backends' working sets are not mirrored: both the plan
// and the backends' allocators read their lists (buffers.h), and the ctest
// plan_matches_allocation measures what the allocators take against the plan.
#ifndef MT_PLAN_H
#define MT_PLAN_H

#include "runtime/model/model.h"
#include "runtime/plan/buffers.h"
#include "runtime/plan/moe.h"
#include <stdint.h>

// Rates for the estimates, fitted to steps measured on the H200 host (bench/RESULTS.md,
// 2026-12-04: the measured steps beside the estimate).
// The GEMMs' rate: the 7B bench (65,536 tokens a step, compute-bound: 5.41-5.50 s a step,
// 2026-12-03, commits 77e6bee and dfa8f08) together with the 7B at 131,072 tokens below.
#define PLAN_GPU_FLOPS 700e12      // sustained bf16 training rate of one H100/H200-class GPU
#define PLAN_GPU_PEAK_FLOPS 989e12 // H100/H200 dense bf16 peak, for MFU
// Causal attention as it runs (forward, backward and its recompute), measured on the H200: what
// a step leaves after the GEMMs' share at PLAN_GPU_FLOPS. Head dim 128: the 7B at 131,072
// tokens, 46.2 s a step (2026-12-03, commit 4ab13dc); head dim 64: the 1.1B at 524,288 tokens,
// 288.0 s a step (2026-12-02, the fused TMA backward at hd 64).
#define PLAN_GPU_ATTENTION_FLOPS 375e12
#define PLAN_GPU_ATTENTION_FLOPS_HD64 296e12
// Heads of 129 to 256 (Qwen3.5's 256, MLA's 192 and 256) run on the mma.sync kernels: on an H100
// (2026-12-06, bench/RESULTS.md) forward 205, backward 120-129 TFLOP/s at 8 x 2,048 tokens, so
// forward, backward (twice its FLOPs) and recompute together about 155.
#define PLAN_GPU_ATTENTION_FLOPS_WIDE 155e12
// Gated DeltaNet's chunked rule (plan_gdn_flops' count) on the tensor-core kernels, in the layers
// of Qwen3.5-27B's 4-layer slice on an H100 (2026-12-06, MT_KERNEL_TIMES at a micro-batch of
// 16,384 tokens): forward 29.0, backward 26.6 TFLOP/s, with the state passes in registers on
// side streams beside the per-chunk kernels; about 27.5 over the forwards, recomputes and
// backwards together.
#define PLAN_GPU_GDN_FLOPS 27.5e12
#define PLAN_CPU_FLOPS_PER_CORE 5e9 // fp32 reference kernels, per core (also the MFU peak)
// PCIe 5 x16, one direction, achieved: a 120B layer's fp32 weights in 90 ms (the slices' trace).
#define PLAN_PCIE_BYTES_PER_S 55e9
// AdamW's bytes (PLAN_OPT_BYTES_PER_PARAM) through the optimizer ranks of the 16-core H200 host
// together. The PCIe copies beside them do not take their share: the cores' own memory
// bandwidth bounds AdamW, not the memory's (the 120B slices moved AdamW's 28 B and the copies' 8
// B a parameter in 0.271 s a layer, 164 GB/s, where 16 cores' STREAM triad is 113 GB/s). Fitted
// to the full-width slices extrapolated to the full models: the 120B's 35.7 s a step (128 GB/s
// alone, commit eb0ea84) and the 100B's 43.5 s (89 GB/s alone, bf16 gradients, commit fa07b2a):
// 110e9 puts the estimate within 13% of both.
#define PLAN_OPT_BYTES_PER_S 110e9
// A disk's rate when none is measured or given: the H200 host's, 2.3 GB/s written and 1.8 read
// with O_DIRECT (one dd stream of 16 MiB blocks).
#define PLAN_DISK_BYTES_PER_S 2e9
#define PLAN_OPT_BYTES_PER_PARAM 28.0 // AdamW: p, m, v read + written, fp32 g read (26 with bf16)
// The GPU's share of the step at which the plan's break-even puts it (runtime/plan/estimate.c)
#define PLAN_BREAK_EVEN_BUSY 0.95

// The compute rank's buffers, by kind: host bytes on the CPU backend, GPU bytes on CUDA.
typedef struct {
    uint64_t weights;     // fetched weights: embedding + head + 2 of the largest layer (fp32 cpu,
                          // bf16 cuda)
    uint64_t grads;       // fp32 gradient buffers of the same groups
    uint64_t activations; // layer-boundary activations: (layers + 1) x micro-batches x tokens x dim
    uint64_t residual;    // gradient of the residual stream: micro-batches x tokens x dim
    uint64_t working;     // one layer's working set, the head's scratch, token ids, workspace
    uint64_t moe;         // of working: the MoE MLP's buffers and routing statistics
    uint64_t backend;     // of working: the backend's own, allocated at its start (buffers.h's
                          // lists: plan_backend_start_bytes)
    uint64_t backend_host; // CUDA: the backend's own host memory (not in total: in the compute
                           // rank's host bytes, plan_cuda_backend_host_bytes)
    uint64_t optimizer;    // fp32 master, m and v of the groups the compute rank updates
    uint64_t attention;    // the kept attention outputs (keep_attention): att_slots of them
    int att_slots;
    int device_groups; // how many: the embedding, then layers 0, 1, ... (own buffers each)
    int layer_buffers; // streaming layers at once (plan_choices')
    uint64_t total;
} plan_buffers;

// One rank's host bytes, by kind. An optimizer rank creates its shard's shared region (on its
// NUMA node: fp32 master, gradient slots, control block) and holds Adam m and v privately; the
// compute rank maps every region and adds its own buffers. The groups the compute rank updates
// itself have none of these: their slices pass through an optimizer rank a piece at a time while
// they move (at start, at saves and exports), and that piece is `moving`.
typedef struct {
    uint64_t master;         // fp32, in the region (the GPU streams it)
    uint64_t adam_m, adam_v; // fp32, page-rounded per group, private
    uint64_t grads, control; // the region's gradient slots (bf16 or fp32) and control block
    uint64_t moving;         // the piece (MT_STATE_PIECE floats) device-updated state moves in
    uint64_t storage;        // the NVMe tier's windows (MT_STORAGE_WINDOW pieces each)
    uint64_t disk;           // what it keeps in storage.dir: not host memory, not in total
    uint64_t compute;        // the compute rank's own host buffers
    uint64_t process;        // the process itself: MPI, UCX, libraries, the CUDA context
    uint64_t total;
    int numa_node; // where mpirun binds it; -1 when ranks are left unbound
} plan_rank;

// What the compute rank decides from its device's free memory, the plan and the compute rank
// alike (engine_new), with the same function and the same free figure: the free bytes once
// the backend's fixed buffers are there (plan_backend_fixed_bytes; for the plan, the GPU's free
// memory less those and PLAN_CUDA_CONTEXT_BYTES). UINT64_MAX: not known (no limit).
typedef struct {
    int cuda;
    int grad_bytes;     // what a gradient leaves the device as: 2 where the device rounds it
                        // for bf16 slots (plan_leaving_bytes), else 4
    int device_groups;  // optimizer.device_groups, "auto" resolved
    int offload;        // offload_activations, "auto" resolved
    int boundary_every; // boundary_every, "auto" (0) resolved: 1 keeps every boundary
    int att_slots;      // keep_attention, "auto" (-1) resolved: passes whose attention output stays
    int layer_buffers;  // layer_buffers, "auto" (0) resolved: 1 or 2 streaming layers, or none
                        // where every layer is updated on the device (device_groups)
} plan_choices;

#define PLAN_CUDA_CONTEXT_BYTES (512ull << 20) // the CUDA context, not measured

// What a rank takes in host memory before it allocates anything of the model: the private pages
// (anonymous and shared-memory, not the libraries' shared code) of an mt-rank process with MPI,
// UCX and OpenMP up, measured with bench/rank_rss.sh on configs/test-small.cfg and rounded up
// (bench/RELIABILITY.md, 2026-12-03): 11 MiB in a build without CUDA. A CUDA build links
// cuBLASLt into every rank, whose loaded data adds 92 MiB to each, GPU or not (107 MiB a rank
// on the H200). The compute rank of a GPU job adds its CUDA context and cuBLAS handles: 276 MiB
// in all there, 169 more. They matter when -np is large: 1000 ranks of a CUDA build would take
// 110 GB before the first parameter.
#define PLAN_RANK_PROCESS_BYTES (16ull << 20)
#define PLAN_RANK_CUDA_LIBS_BYTES (96ull << 20)
#define PLAN_CUDA_HOST_CONTEXT_BYTES (256ull << 20)
// The host bytes of rank process itself (not its buffers): compute_cuda for the compute rank of
// a job on the GPU, in_cuda_build for any rank of a build with the CUDA backend.
uint64_t plan_process_bytes(int compute_cuda, int in_cuda_build);

typedef struct {
    const mt_config *c;
    int np, n_shards, n_groups;
    int cuda; // the compute rank runs on the GPU
    uint64_t params;
    plan_rank *rank;            // [np]: rank 0 computes, rank k >= 1 owns shard k - 1
    plan_rank sum;              // over all ranks; sum.numa_node unused
    int grad_bytes;             // gradient slots: 4 (fp32) or 2 (bf16)
    int ring_urgent;            // model_ring_by_urgency: the ring's updates overlap the forward
    int ring_depth;             // model_grad_ring_depth: 0 (a slot per group) or the ring's
    uint64_t other_slots_grads; // the gradient slots' bytes the other way (ring or per group)
    int device_groups;          // groups the compute rank updates itself
    uint64_t state;             // fp32 master, m and v on the host (moving included)
    uint64_t shared;            // gradient slots and control blocks
    uint64_t regions;           // the shared regions (master, slots, control): /dev/shm
    uint64_t host;              // all host bytes: state + shared + the compute rank's
    plan_buffers host_buffers;  // the compute rank's host buffers (in rank[0].compute)
    plan_buffers gpu;           // GPU bytes when cuda (also filled, for reference, otherwise)
    plan_choices choices;       // for the backend the job runs on
    uint64_t gpu_free;          // the GPU's free bytes as given (UINT64_MAX: not known)
    const char *gpu_source;     // where that figure came from, for messages
    // The NVMe tier: bytes in storage.dir (all ranks), of them the gradients' and the moments',
    // and the disk's rate (bytes/s, read or write) the estimate takes: the caller's (a probe, or
    // --disk-bw), PLAN_DISK_BYTES_PER_S when it sets none.
    uint64_t disk, disk_grads, disk_adam; // disk_adam: m, v (and the master and its copy)
    uint64_t disk_copy;                   // storage.master: the bf16 copy, within disk_adam
    double disk_bw;
} mt_plan;

// Boundary activations the compute rank holds on its device for boundary_every k: boundaries
// 0, k, 2k, ... and the k - 1 of the segment being recomputed. Offloaded, boundaries 0, k, 2k,
// ... go to host memory instead (plan_offloaded_boundaries of them) and take turns in two sets.
int plan_boundary_slots(const mt_model *m, const plan_choices *ch);
int plan_offloaded_boundaries(const mt_model *m, const plan_choices *ch);
// Layers whose forward the backward runs once more to remake a segment's boundaries: k - 1
// in every segment but the last, whose boundaries are still there from the forward.
int plan_recomputed_layers(int layers, int boundary_every);

// Kept attention outputs (keep_attention): slot i holds the output and softmax statistics of
// layer order[i / micro_batches]'s pass of micro-batch i % micro_batches, where order lists the
// layers whose forward a segment redoes first (a slot saves them two attention forwards, the
// redo's and the backward's), then the others, each by layer. plan_attention_order fills
// order[layers]; plan_attention_slot_bytes is one slot's bytes.
void plan_attention_order(int layers, int boundary_every, int *order);
int plan_redone_layer(int layers, int boundary_every, int l);
uint64_t plan_attention_slot_bytes(const mt_config *c, int cuda);
// Layer forwards' worth of attention (over all micro-batches) that att_slots slots save.
double plan_attention_saved(const mt_config *c, const plan_choices *ch);

// One kept layer x micro-batch pass (recompute = "auto"), on the GPU or the CPU reference.
uint64_t plan_kept_pass_bytes(const mt_config *c, int cuda);
// Whether the CUDA backend keeps layer passes whole: not where its kept slot (MT_CUDA_SAVED)
// lacks what the backward reads, qk_norm's fp32 inputs, the output gate's logits or Gated
// DeltaNet's internals; such passes are always recomputed.
int plan_cuda_keeps_passes(const mt_model *m);

// Fills p for a job of np ranks. numa_nodes: nodes the ranks are spread over round-robin
// (mpirun --map-by numa); bound = 0 when mpirun leaves them unbound. Returns 0, or -1 with a
// one-line message in err (a model whose groups do not fit the shard layout).
// grad_bytes: the gradient slots' 4 or 2 (plan_grad_bytes). device_free: the GPU's free bytes
// before the job (UINT64_MAX when not known), for the "auto" settings and the GPU check.
// nodes: data-parallel nodes (1: none); c is one node's config (its share of micro_batches).
// They split Adam's moments when c->shard_across_nodes.
int plan_make(mt_plan *p, const mt_config *c, int np, int cuda, int numa_nodes, int bound,
              int grad_bytes, uint64_t device_free, int nodes, char *err, size_t errlen);
// optimizer.grad_dtype as slot bytes: 4 for "fp32", 2 for "bf16", 0 for "auto" (the caller
// plans with 4 and takes 2 when that does not fit).
int plan_grad_bytes(const mt_config *c);
void plan_free(mt_plan *p);

// The compute rank's choices for `room` free bytes (UINT64_MAX: not known): device groups
// (plan_device_groups, then plan_more_device_groups), layer buffers, boundaries, offload, kept
// attention outputs. plan_choose_groups: the same with device_groups groups given.
void plan_choose(plan_choices *ch, const mt_config *c, int cuda, int grad_bytes, uint64_t room);
void plan_choose_groups(plan_choices *ch, const mt_config *c, int cuda, int grad_bytes,
                        uint64_t room, int device_groups);
// The bytes a gradient leaves the device as, for plan_choose: the host slots' (2 for bf16) on
// one node; over nodes the compute ranks sum the fp32 gradients on the host first, and round
// there.
static inline int plan_leaving_bytes(int grad_bytes, int nodes) {
    return nodes > 1 ? 4 : grad_bytes;
}
// What backend_cuda_new allocates before anything is decided (0 on the CPU).
uint64_t plan_backend_fixed_bytes(const mt_config *c, int cuda);
// What the backend's allocator gives at its start (backend_ops.allocated_bytes right after
// backend_*_new): GPU bytes on CUDA (plan_backend_fixed_bytes), host bytes on the CPU.
uint64_t plan_backend_start_bytes(const mt_config *c, int cuda);
// 0 when the compute rank's buffers (plan_compute_buffers, less the fixed ones) fit in room;
// else -1 with one line naming the bytes by kind, what is free and the change that would fit.
int plan_check_device(const mt_config *c, const plan_choices *ch, uint64_t room, const char *where,
                      char *err, size_t n);

// The compute rank's buffers for a config: GPU bytes (cuda) or host bytes (cpu); and, for the
// CUDA backend, the little it keeps in host memory (pinned, offloaded activations included).
// grad_bytes 2: on CUDA the gradients that leave are rounded through two pieces on the device.
void plan_compute_buffers(const mt_config *c, const plan_choices *ch, plan_buffers *b);
// optimizer.device_groups resolved for a backend with device_free bytes free (UINT64_MAX when
// not known; device_groups.c). "auto" (-1) on a GPU: the embedding and the first layers / 8
// layers (rounded up), as many as fit in an eighth of the free memory (12 B/param of state, 6
// more of own buffers).
// Measured on an H200, that lead is what lets the optimizer ranks (0.7-1.1x as long per layer
// as the forward at 65k tokens a step) stay ahead through the forward; every extra layer costs
// kept activations. None on the CPU, whose compute rank has no memory faster than the
// optimizer ranks'. The embedding alone at long context, where all boundaries would take over
// half the free memory.
int plan_device_groups(const mt_config *c, int cuda, uint64_t device_free);
// "auto" once the free memory is known (room): more layers updated on the GPU, one at a time,
// while each shortens the plan's step by 1% or more and fits with the boundaries unchanged
// (the optimizer ranks then bound the step); ch as plan_choose_groups made it.
void plan_more_device_groups(plan_choices *ch, const mt_config *c, uint64_t room);
// GPU memory one more device-updated decoder layer takes: its fp32 state and own buffers.
uint64_t plan_device_layer_bytes(const mt_model *m);
// "512 B", "20.0 KiB", "1.5 MiB", "6.28 GiB", "1.10 TiB" into buf; returns buf.
const char *plan_bytes_text(char *buf, size_t n, double bytes);
// The layers among `groups` device-updated groups, for messages: "", " and layer 0",
// " and layers 0-3".
void plan_device_layers_text(int groups, char *out, size_t cap);
uint64_t plan_cuda_host_bytes(const mt_config *c, const plan_choices *ch);
// Of it, the CUDA backend's own (MT_CUDA_PINNED and MT_CUDA_HOST: the pinned losses and MoE
// counts, the MoE routing statistics).
uint64_t plan_cuda_backend_host_bytes(const mt_config *c);

// Per step: FLOPs the GPU or CPU executes (GEMMs 8 N per token, as the backward recomputes
// the forward, plus redone segment layers; causal attention as it runs) and bytes moved.
typedef struct {
    double flops, flops_rate, attention_rate, gdn_rate, compute_s;
    double recompute_s, redo_s; // of compute_s: forwards run again (all), segments' redo
    double pcie_bytes, pcie_s;
    double opt_bytes, opt_s;
    // GPU: the forward's share of compute_s, and each pass with what overlaps it (the slowest of
    // compute, PCIe and, in one of them, the optimizer); their sum is step_s. CPU: the sum of all.
    double forward_s, forward_phase_s, backward_phase_s;
    const char *forward_bound, *backward_bound; // which of them bounds each pass (GPU)
    // The NVMe tier: bytes it moves a step and their time at disk_bw, and the tokens per step
    // from which the GPU computes PLAN_BREAK_EVEN_BUSY of the step with the disk's share in it
    // (0: no tier; at least stream_break_even_tokens)
    double disk_bytes, disk_s, break_even_tokens;
    // GPU: the tokens per step from which the GPU computes PLAN_BREAK_EVEN_BUSY of the step, PCIe
    // and the optimizer's updates (whose bytes do not grow with the tokens) hidden but for the
    // ring's pipeline ends (compute scales with the active parameters, they with all of them: an
    // MoE model needs more tokens than a dense one); the disk left out
    double active_params, stream_break_even_tokens;
    double step_s, tokens_per_s;
} plan_estimate;

// cores: the compute rank's cores (used on the CPU backend).
void plan_estimate_step(const mt_plan *p, int cores, plan_estimate *e);

// Mixture of Experts: runtime/plan/moe.h (included above).

// Model FLOPs per token as throughput is reported (6 N + 12 layers dim seq, N the active
// parameters, plan_active_params: the recompute is not counted; a sliding layer's seq its
// window's share, plan_attention_span; a Gated DeltaNet layer 3 x its rule's, plan_gdn_flops),
// and the peak MFU is measured against.
double plan_model_flops_per_token(const mt_config *c);
// The attention FLOPs' sequence length summed over the softmax layers, a sliding layer's scaled
// by the share of the causal (query, key) pairs its window keeps (estimate.c).
double plan_attention_span(const mt_config *c);
// The Gated DeltaNet layers' delta rule, forward FLOPs per token summed over them (estimate.c;
// docs/performance.md has the formula).
double plan_gdn_flops(const mt_config *c);
double plan_peak_flops(int cuda, int cores);

#endif
