// The plan as the operator sees it: the per-rank table, the GPU and step-time estimates
// (the verdict and the refusals: plan_verdict.c). runtime/plan/plan.c computes the numbers,
// host_probe.c reads the machine; this file only prints. It makes no CUDA call: mtrun must start on
// a login node or in a container without the driver; the GPU's free memory comes from nvidia-smi or
// --gpu-mem (mtrun.c), and the compute rank checks it again with CUDA.
#include "launcher/launcher.h"
#include "launcher/plan_text.h"
#include "runtime/model/model.h"
#include "shm/syscheck.h"

#include <inttypes.h>
#include <numa.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

// ---- formatting (plan_text.h) ----

const char *plan_grouped(char *buf, size_t n, uint64_t v) {
    char digits[32];
    int len = snprintf(digits, sizeof digits, "%" PRIu64, v), o = 0;
    for (int i = 0; i < len && o + 2 < (int)n; i++) {
        if (i && (len - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = 0;
    return buf;
}

const char *plan_duration(char *buf, size_t n, double s) {
    if (s < 1)
        snprintf(buf, n, "%.3g ms", s * 1e3);
    else if (s < 60)
        snprintf(buf, n, "%.2f s", s);
    else if (s < 3600)
        snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else if (s < 86400 * 3)
        snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)s / 60 % 60);
    else
        snprintf(buf, n, "%.1f days", s / 86400);
    return buf;
}

const char *plan_si(char *buf, size_t n, double v) {
    static const char *prefix[] = {"", "k", "M", "G", "T", "P", "E"};
    int p = 0;
    while (v >= 1000 && p < 6) v /= 1000, p++;
    snprintf(buf, n, "%.3g %s", v, prefix[p]);
    return buf;
}

// ---- printing ----

static void kind_cell(FILE *f, uint64_t v) {
    fprintf(f, " %10s", v ? H(v) : "-");
}

// Which gradient slots, why, and what the other kind would take.
static void print_slots(FILE *f, const mt_plan *p) {
    if (p->c->storage_grads)
        fprintf(
            f,
            "gradient slots: one per group in storage.dir (storage.grads), written there by the\n"
            "  compute rank a piece at a time; in host memory they would take %s\n",
            H(p->other_slots_grads));
    else if (p->ring_depth)
        fprintf(f,
                "gradient slots: a ring of %d groups' (each the size of the largest slice), each\n"
                "  group updated as its gradients land (optimizer.clip = 0); one slot per group\n"
                "  would take %s\n",
                p->ring_depth, H(p->other_slots_grads));
    else
        fprintf(f,
                "gradient slots: one per group, %s; a ring of %d\n"
                "  (optimizer.clip = 0: each group updated as its gradients land) would take %s\n",
                p->c->clip > 0 ? "as global-norm clipping (optimizer.clip) needs every\n"
                                 "  gradient before the first update"
                               : "as optimizer.grad_slots = \"all\" asks",
                MODEL_GRAD_RING_DEPTH, H(p->other_slots_grads));
}

// storage.dir given without storage.grads or storage.adam (storage.master needs adam): the
// tier is off and the folder unused, which the user who named it should hear.
static int storage_dir_unused(const mt_config *c) {
    return c->storage_dir[0] && !c->storage_grads && !c->storage_adam;
}

// The NVMe tier: what lives on disk, what it keeps in memory, and when the disk keeps up.
static void print_storage(FILE *f, const mt_plan *p, const host_probe *h) {
    const mt_config *c = p->c;
    if (storage_dir_unused(c))
        fprintf(f,
                "NVMe tier: off; storage.dir %s is set but unused: nothing goes there without "
                "storage.grads or storage.adam = true\n",
                mt_shown(c->storage_dir));
    if (!p->disk) return;
    plan_estimate e;
    plan_estimate_step(p, 1, &e);
    char what[128];
    if (c->storage_grads && c->storage_adam)
        snprintf(what, sizeof what, "gradient slots %s, %s %s", H(p->disk_grads),
                 c->storage_master ? "fp32 master, its bf16 copy, Adam m and v" : "Adam m and v",
                 H(p->disk_adam));
    else
        snprintf(what, sizeof what, "%s", c->storage_grads ? "the gradient slots" : "Adam m and v");
    fprintf(f,
            "NVMe tier (storage.dir %s): %s on disk, %s a rank (%s); host memory keeps\n"
            "  windows of %d pieces%s (%s, in \"optimizer state\" above)%s\n",
            mt_shown(c->storage_dir), H(p->disk), H(p->rank[1].disk), what, MT_STORAGE_WINDOW,
            p->rank[0].storage ? " and the compute rank's pieces" : "", H(p->sum.storage),
            c->storage_master ? ", and each region a ring of the last 4 pieces updated" : "");
    if (*h->disk_bw_unmeasured)
        fprintf(f, "  disk rate not measured (%s): assuming %sB/s; set --disk-bw\n",
                h->disk_bw_unmeasured, SI(p->disk_bw));
    fprintf(f, "  %sB a step at %sB/s (%s): %s", SI(e.disk_bytes), SI(p->disk_bw),
            *h->disk_bw_source ? h->disk_bw_source : "assumed: the H200 host's disk", T(e.disk_s));
    if (p->cuda)
        fprintf(f,
                "; with it the GPU computes %.0f%% of the step from %s tokens a step (this "
                "batch: %s)",
                100 * PLAN_BREAK_EVEN_BUSY, G(e.break_even_tokens + 0.5), G(mt_tokens_per_step(c)));
    fputc('\n', f);
}

static void print_rank_table(FILE *f, const mt_plan *p) {
    fprintf(f, "\nhost memory by rank (1 KiB = 1024 bytes; regions and state rounded to pages)\n");
    fprintf(f,
            "rank  role       node fp32 master     Adam m     Adam v %s grads     moving"
            "    windows    compute    process      total\n",
            p->grad_bytes == 2 ? "bf16" : "fp32");
    for (int r = 0; r < p->np; r++) {
        const plan_rank *pr = &p->rank[r];
        char node[8] = "any";
        if (pr->numa_node >= 0) snprintf(node, sizeof node, "%d", pr->numa_node);
        fprintf(f, "%4d  %-9s  %4s  ", r, r ? "optimizer" : "compute", node);
        kind_cell(f, pr->master), kind_cell(f, pr->adam_m), kind_cell(f, pr->adam_v);
        kind_cell(f, pr->grads), kind_cell(f, pr->moving), kind_cell(f, pr->storage);
        kind_cell(f, pr->compute);
        kind_cell(f, pr->process), kind_cell(f, pr->total);
        fputc('\n', f);
    }
    const plan_rank *s = &p->sum;
    fprintf(f, "total                 ");
    kind_cell(f, s->master), kind_cell(f, s->adam_m), kind_cell(f, s->adam_v);
    kind_cell(f, s->grads), kind_cell(f, s->moving), kind_cell(f, s->storage);
    kind_cell(f, s->compute);
    kind_cell(f, s->process), kind_cell(f, s->total);
    fputc('\n', f);
    double N = (double)p->params;
    fprintf(f, "host total %s (%s bytes) = %.2f bytes/param:\n", H(p->host), G(p->host),
            p->host / N);
    fprintf(f,
            "  optimizer state %s (%.2f B/param), gradient slots %s (%.2f), compute rank %s "
            "(%.2f), rank processes %s\n",
            H(p->state), p->state / N, H(p->shared), p->shared / N, H(p->rank[0].compute),
            p->rank[0].compute / N, H(p->sum.process));
    fprintf(f,
            "  %s and gradient slots are in the shared regions (%s in /dev/shm, a %s\n"
            "  control block each); m and v are private. \"moving\": the piece the GPU-updated\n"
            "  groups' state passes through (at start, saves and exports). \"process\": the\n"
            "  rank process itself (MPI, UCX, libraries, the CUDA context), as measured\n",
            p->c->storage_master ? "the weight ring (storage.master: 4 pieces)" : "fp32 master",
            H(p->regions), H(p->n_shards ? p->rank[1].control : 0));
    print_slots(f, p);
}

static void print_numa(FILE *f, const mt_plan *p, const placement *pl) {
    if (pl->oversubscribe) {
        fprintf(f, "placement: more ranks than cores, so mpirun leaves them unbound: the kernel\n"
                   "  places each rank, and its memory, where it runs\n");
        return;
    }
    fprintf(f,
            "placement: ranks round-robin over %d NUMA node%s (mpirun --map-by numa); rank 0 "
            "computes, rank k owns shard k-1\n",
            pl->numa_nodes, pl->numa_nodes == 1 ? "" : "s");
    for (int node = 0; node < pl->numa_nodes; node++) {
        uint64_t sum = 0;
        for (int r = 0; r < p->np; r++) sum += p->rank[r].numa_node == node ? p->rank[r].total : 0;
        long long freeb = 0, size = numa_available() < 0 ? 0 : numa_node_size64(node, &freeb);
        fprintf(f, "  node %d: %s", node, H(sum));
        if (size > 0) fprintf(f, " of %s (%s free)", H(size), H(freeb));
        fputc('\n', f);
    }
}

static void print_kept_attention(FILE *f, const mt_plan *p, const plan_buffers *b) {
    const mt_config *c = p->c;
    int slots = p->choices.att_slots, pairs = c->model.layers * c->micro_batches;
    double saved = plan_attention_saved(c, &p->choices);
    double redo = saved - (double)slots / c->micro_batches;
    char also[96] = "";
    if (redo > 0) snprintf(also, sizeof also, ", and the segments' redo of %.0f", redo);
    fprintf(f,
            "  %-13s %11s  %d of %d layer x micro-batch passes keep their attention output "
            "(keep_attention%s): their backward's recompute%s skips the attention kernel\n",
            "attention", H(b->attention), slots, pairs,
            c->keep_attention < 0 ? " auto: what the boundaries leave" : "", also);
}

static void print_buffers(FILE *f, const mt_plan *p) {
    const mt_config *c = p->c;
    const plan_buffers *b = p->cuda ? &p->gpu : &p->host_buffers;
    long n = (long)c->micro_batch * c->seq_len;
    fprintf(f, "\ncompute rank buffers (%s)\n",
            p->cuda ? "cuda backend: GPU bytes" : "cpu backend: host bytes");
    int own = b->device_groups > 1 ? b->device_groups - 1 : 0; // layers with buffers of their own
    char owned[64] = "";
    if (own) snprintf(owned, sizeof owned, " + %d updated here", own);
    fprintf(f, "  %-13s %11s  embedding + head + %d streaming layer%s%s, %s\n", "weights",
            H(b->weights), b->layer_buffers, b->layer_buffers != 1 ? "s" : "", owned,
            p->cuda ? "bf16" : "fp32");
    if (b->layer_buffers == 1)
        fprintf(f,
                "  %-13s layer_buffers = %s: a layer's weights come in once the layer before has "
                "computed, and its gradients leave before the next one's backward%s\n",
                "", c->layer_buffers ? "1" : "\"auto\"",
                c->layer_buffers ? "" : " (two leave no room for the activations)");
    fprintf(f, "  %-13s %11s  the same groups, fp32\n", "gradients", H(b->grads));
    int offloaded = p->cuda && p->choices.offload, every = p->choices.boundary_every;
    char off[96] = "";
    int on_host = plan_offloaded_boundaries(&c->model, &p->choices);
    if (offloaded)
        snprintf(off, sizeof off, " (%d boundaries offloaded to pinned host memory, %s)", on_host,
                 H((double)on_host * c->micro_batches * n * c->model.dim * 4));
    fprintf(f, "  %-13s %11s  %d boundaries x %d micro-batches x %ld tokens x %d dim x 4 B%s\n",
            "activations", H(b->activations), plan_boundary_slots(&c->model, &p->choices),
            c->micro_batches, n, c->model.dim, off);
    if (every > 1)
        fprintf(f,
                "  segments      boundary_every = %d%s: boundaries 0, %d, %d, ... stay%s, and the "
                "backward recomputes the forward of the %d layers between them (%.0f%% more "
                "layer forwards)\n",
                every, c->boundary_every ? "" : " (auto: all would not fit)", every, 2 * every,
                offloaded ? " (in host memory)" : "",
                plan_recomputed_layers(c->model.layers, every),
                100.0 * plan_recomputed_layers(c->model.layers, every) / c->model.layers);
    if (p->choices.att_slots > 0) print_kept_attention(f, p, b);
    fprintf(f, "  %-13s %11s  %d micro-batches x %ld tokens x %d dim x 4 B\n", "residual grad",
            H(b->residual), c->micro_batches, n, c->model.dim);
    fprintf(f, "  %-13s %11s  one layer's internals, the head%s, token ids\n", "working set",
            H(b->working), p->cuda ? "'s classifier chunks, cuBLASLt workspace" : "");
    if (b->moe)
        fprintf(f,
                "  of it MoE     %11s  the MoE MLP's: %s (token, expert) pairs (top_k x %s), "
                "routing, the aux loss's statistics%s\n",
                H(b->moe), G((uint64_t)c->model.top_k * (p->cuda ? mt_seq_chunk(c) : n)),
                p->cuda ? "chunk" : "micro-batch",
                c->model.shared_ffn_dim ? ", the shared expert" : "");
    if (p->cuda)
        fprintf(f,
                "  chunk         %11s  tokens at a time (batch.seq_chunk%s) of %ld: a layer's "
                "norms, projections and MLP and the head run by chunk, attention over them all\n",
                G(mt_seq_chunk(c)), c->seq_chunk ? "" : " auto", n);
    if (b->device_groups > 0) {
        char layers[48];
        plan_device_layers_text(b->device_groups, layers, sizeof layers);
        fprintf(f, "  %-13s %11s  fp32 master, m, v of the embedding%s, updated %s\n", "optimizer",
                H(b->optimizer), layers, p->cuda ? "on the GPU" : "by the compute rank");
    }
    fprintf(f, "  %-13s %11s\n", "total", H(b->total));
    if (p->cuda && c->offload_activations == OFFLOAD_AUTO)
        fprintf(
            f,
            "  offload       offload_activations = \"auto\": %s (they go to pinned host memory, "
            "all but two layers' worth, when they would take over 3/4 of the GPU memory free "
            "once the buffers before them are there)\n",
            p->choices.offload ? "offloaded" : "kept on the GPU");
    uint64_t pass = plan_kept_pass_bytes(c, p->cuda);
    if (c->recompute == RECOMPUTE_AUTO && p->cuda && !plan_cuda_keeps_passes(&c->model))
        fprintf(f, "  kept          none: the GPU keeps no layer pass of this model (qk_norm, the "
                   "output gate or Gated DeltaNet: its backward recomputes each one)\n");
    else if (c->recompute == RECOMPUTE_AUTO)
        fprintf(f,
                "  kept          %11s  per layer x micro-batch pass, as many of %d as the %s "
                "left over holds (recompute = \"auto\"): each one kept is a layer forward the "
                "backward does not redo; all of them: %s\n",
                H(pass), c->model.layers * c->micro_batches,
                p->cuda ? "GPU memory" : "eighth of free host memory",
                H(pass * c->model.layers * c->micro_batches));
    if (p->cuda)
        fprintf(f,
                "  plus the CUDA context (about 0.5 GiB); the offload and device_groups "
                "\"auto\" choices above are the compute rank's for %s of free GPU memory\n",
                p->gpu_free == UINT64_MAX ? "unlimited (not known)" : H(p->gpu_free));
    else if (c->backend == BACKEND_AUTO)
        fprintf(f, "  on a GPU (backend \"auto\" with CUDA) these would be %s of GPU memory\n",
                H(p->gpu.total));
}

static void print_estimate(FILE *f, const mt_plan *p, const plan_estimate *e, int cores) {
    fprintf(f, "\nstep time estimate (rates measured on an H200 host, bench/RESULTS.md)\n");
    fprintf(f,
            "  compute    %sFLOP (GEMMs 8 N per token at %sFLOP/s, causal attention 8 layers dim "
            "seq at %sFLOP/s",
            SI(e->flops), SI(e->flops_rate), SI(e->attention_rate));
    if (p->cuda && mt_gdn_layers(&p->c->model) > 0)
        fprintf(f, ", Gated DeltaNet's rule at %sFLOP/s", SI(e->gdn_rate));
    if (!p->cuda) fprintf(f, "; %sFLOP/s per core x %d", SI(PLAN_CPU_FLOPS_PER_CORE), cores);
    fprintf(f, "): %s\n", T(e->compute_s));
    if (p->cuda)
        fprintf(f, "  recompute  %s of it (%.0f%%): the backward's forward of every layer%s%s\n",
                T(e->recompute_s), 100.0 * e->recompute_s / e->compute_s,
                e->redo_s > 0 ? ", and the segments' redo " : "",
                e->redo_s > 0 ? T(e->redo_s) : "");
    if (p->cuda)
        fprintf(f, "  PCIe       %sB (the weights in %.2f times, gradients out) at %sB/s: %s\n",
                SI(e->pcie_bytes),
                2.0 +
                    (double)plan_recomputed_layers(p->c->model.layers, p->choices.boundary_every) /
                        p->c->model.layers,
                SI(PLAN_PCIE_BYTES_PER_S), T(e->pcie_s));
    fprintf(f, "  optimizer  %sB (%.0f B/param) at %sB/s: %s\n", SI(e->opt_bytes),
            PLAN_OPT_BYTES_PER_PARAM, SI(PLAN_OPT_BYTES_PER_S), T(e->opt_s));
    if (p->cuda)
        fprintf(f,
                "  balance    compute meets %s active parameters of %s, PCIe and the optimizer "
                "move all of them%s: the GPU computes %.0f%% of the step from %s tokens a step "
                "(this batch: %s)\n",
                G(e->active_params), G(p->params),
                p->device_groups > 0 ? " but the groups updated on the GPU" : "",
                100.0 * PLAN_BREAK_EVEN_BUSY, G(e->stream_break_even_tokens + 0.5),
                G(mt_tokens_per_step(p->c)));
    if (p->cuda) {
        fprintf(f,
                "  step       %s, each pass as long as the slowest of what overlaps in it: the "
                "forward %s (%s), the backward %s (%s); the optimizer ranks update %s\n",
                T(e->step_s), T(e->forward_phase_s), e->forward_bound, T(e->backward_phase_s),
                e->backward_bound,
                !p->ring_depth   ? "during the next forward (a slot per group)"
                : p->ring_urgent ? "as gradients land (the ring), the group the next forward "
                                   "needs first, into that forward"
                                 : "during the backward, as gradients land (the ring)");
    } else {
        fprintf(f, "  step       %s if nothing overlapped\n", T(e->step_s));
    }
    fprintf(f, "             %s tokens/s, %d steps in %s\n", G(e->tokens_per_s + 0.5), p->c->steps,
            T(e->step_s * p->c->steps));
}

static void print_checks(FILE *f, const mt_plan *p, const host_probe *h) {
    fprintf(f, "\nchecks\n");
    if (h->mem_known)
        fprintf(f, "  host memory  needs %s, %s available (%s%s%s): %s\n", H(p->host),
                H(h->mem_available), h->mem_forced ? "MT_PLAN_MEM_LIMIT" : "MemAvailable",
                h->mem_total && !h->mem_forced ? " of " : "",
                h->mem_total && !h->mem_forced ? H(h->mem_total) : "",
                p->host <= h->mem_available ? "ok" : "DOES NOT FIT");
    else
        fprintf(f, "  host memory  not checked (no MemAvailable in /proc/meminfo)\n");
    if (h->elastic)
        fprintf(f, "               (a VM with a memory balloon: its memory may grow on demand)\n");
    if (h->shm_known)
        fprintf(f, "  /dev/shm     needs %s, %s free%s: %s\n", H(p->regions), H(h->shm_free),
                h->shm_forced ? " (MT_PLAN_SHM_LIMIT)" : "",
                p->regions <= h->shm_free ? "ok" : "DOES NOT FIT");
    else
        fprintf(f, "  /dev/shm     not checked (statvfs failed)\n");
    if (p->disk && h->disk_known)
        fprintf(f, "  storage.dir  needs %s, %s free%s: %s\n", H(p->disk), H(h->disk_free),
                h->disk_forced ? " (MT_PLAN_DISK_LIMIT)" : "",
                p->disk <= h->disk_free ? "ok" : "DOES NOT FIT");
    if (!p->cuda)
        fprintf(f, "  ulimit -l    not needed (cpu backend: nothing is pinned)\n");
    else if (h->memlock_unlimited || h->root)
        fprintf(f, "  ulimit -l    %s: ok\n", h->memlock_unlimited ? "unlimited" : "root, exempt");
    else
        fprintf(f, "  ulimit -l    %s for %s of regions to pin: %s\n", H(h->memlock), H(p->regions),
                plan_memlock_short(p, h) ? "LOW (see the warning)" : "ok");
    if (p->cuda && p->gpu_free == UINT64_MAX)
        fprintf(f, "  GPU memory   not checked (no nvidia-smi answer; --gpu-mem BYTES gives it)\n");
    else if (p->cuda)
        fprintf(f, "  GPU memory   needs %s with a %s CUDA context, %s free (%s): %s\n",
                H(p->gpu.total + PLAN_CUDA_CONTEXT_BYTES), H(PLAN_CUDA_CONTEXT_BYTES),
                H(p->gpu_free), p->gpu_source,
                p->gpu.total + PLAN_CUDA_CONTEXT_BYTES <= p->gpu_free ? "ok" : "DOES NOT FIT");
}

// Whether a variant of the config fits the GPU, with the choices the compute rank would make
// for it, and the host.
static int variant_fits(const mt_plan *p, const host_probe *h, const mt_config *c) {
    if (p->cuda && p->gpu_free != UINT64_MAX) {
        uint64_t fixed = plan_backend_fixed_bytes(c, 1) + PLAN_CUDA_CONTEXT_BYTES;
        if (p->gpu_free <= fixed) return 0;
        plan_choices ch;
        plan_choose(&ch, c, 1, p->choices.grad_bytes, p->gpu_free - fixed);
        char err[8];
        if (plan_check_device(c, &ch, p->gpu_free - fixed, "", err, sizeof err) < 0) return 0;
    }
    return !h->mem_known || plan_host_with(p, c) <= h->mem_available;
}

// The longest batch.seq_len that fits with the other settings as they are (0: none); memory
// grows with it, whatever the auto choices make of it, so a binary search finds it.
static int longest_seq_len(const mt_plan *p, const host_probe *h) {
    mt_config v = *p->c;
    int lo = 0, hi = MT_MAX_MICRO_BATCH_TOKENS / v.micro_batch;
    if (hi > 1 << 21) hi = 1 << 21; // batch.seq_len's own bound
    while (lo < hi) {
        v.seq_len = lo + (hi - lo + 1) / 2;
        if (variant_fits(p, h, &v))
            lo = v.seq_len;
        else
            hi = v.seq_len - 1;
    }
    return lo;
}

static void print_longest(FILE *f, const mt_plan *p, const host_probe *h) {
    if (p->cuda && p->gpu_free == UINT64_MAX) return; // nothing to hold it to
    int longest = longest_seq_len(p, h);
    fprintf(f,
            "  seq_len      the longest that fits: %s tokens (batch.micro_batch %d, the rest as "
            "it is)\n",
            G(longest), p->c->micro_batch);
}

// The command line's key=value settings the plan was made with, after `lead`.
static void print_overrides(FILE *f, const mt_config *c, const char *lead) {
    if (!c->n_overrides) return;
    fputs(lead, f);
    for (int i = 0; i < c->n_overrides; i++) fprintf(f, " %s", mt_shown(c->overrides[i]));
}

void plan_print(FILE *f, const mt_plan *p, const host_probe *h, const placement *pl, int cores) {
    const mt_config *c = p->c;
    const char *resolved = c->backend != BACKEND_AUTO ? "" : p->cuda ? " -> cuda" : " -> cpu";
    fprintf(f, "plan for %s", mt_shown(c->source_path));
    print_overrides(f, c, " with");
    fprintf(f, ": -np %d = 1 compute + %d optimizer rank%s, backend %s%s\n", p->np, p->n_shards,
            p->n_shards == 1 ? "" : "s", mt_choice_name(BACKEND_NAMES, c->backend), resolved);
    fprintf(f,
            "model: %s parameters in %d groups (dim %d, %d layers, %d heads, %d kv heads, ffn "
            "%d, vocab %d, %s embeddings)\n",
            G(p->params), p->n_groups, c->model.dim, c->model.layers, c->model.heads,
            c->model.kv_heads, c->model.ffn_dim, c->model.vocab,
            c->model.tied_embeddings ? "tied" : "untied");
    if (c->model.experts > 0)
        fprintf(f,
                "MoE: %d of %d layers, %d experts of ffn %d, top %d%s; %s active parameters a "
                "token (experts %s of all)\n",
                mt_moe_layers(&c->model), c->model.layers, c->model.experts, c->model.moe_ffn_dim,
                c->model.top_k, c->model.shared_ffn_dim ? ", a shared expert" : "",
                G(plan_active_params(&c->model)), G(plan_expert_params(&c->model)));
    fprintf(f, "batch: %d sequences x %d tokens x %d micro-batches = %s tokens/step\n",
            c->micro_batch, c->seq_len, c->micro_batches, G(mt_tokens_per_step(c)));
    print_rank_table(f, p);
    print_storage(f, p, h);
    print_numa(f, p, pl);
    print_buffers(f, p);
    plan_estimate e;
    plan_estimate_step(p, cores, &e);
    print_estimate(f, p, &e, cores);
    print_checks(f, p, h);
    print_longest(f, p, h);
}

void plan_print_compact(FILE *f, const mt_plan *p, const host_probe *h, int cores, int steps) {
    plan_estimate e;
    plan_estimate_step(p, cores, &e);
    double N = (double)p->params;
    fprintf(f,
            "mtrun: plan: %.2f%s params, host %s = %.1f B/param (optimizer state %s, %s gradient "
            "slots %s%s, compute rank %s, %d processes %s)",
            N >= 1e9 ? N / 1e9 : N / 1e6, N >= 1e9 ? "B" : "M", H(p->host), p->host / N,
            H(p->state), p->grad_bytes == 2 ? "bf16" : "fp32", H(p->shared),
            p->ring_depth         ? " in a ring"
            : p->c->storage_grads ? " in storage.dir"
                                  : "",
            H(p->rank[0].compute), p->np, H(p->sum.process));
    if (h->mem_known) fprintf(f, " of %s available", H(h->mem_available));
    if (p->cuda) fprintf(f, "; GPU %s", H(p->gpu.total));
    if (p->disk)
        fprintf(f, "; disk %s in storage.dir at %sB/s%s", H(p->disk), SI(p->disk_bw),
                *h->disk_bw_unmeasured ? " (not measured: assumed; mtrun --plan says why)" : "");
    if (storage_dir_unused(p->c))
        fprintf(f, "; storage.dir unused (no storage.grads or storage.adam)");
    print_overrides(f, p->c, "; with");
    fprintf(f, "; estimated %s/step, %s for %d step%s at assumed rates (mtrun --plan)\n",
            T(e.step_s), T(e.step_s * steps), steps, steps == 1 ? "" : "s");
}

static void json_rank(FILE *f, const char *key, const plan_rank *r) {
    fprintf(f,
            "%s{\"master\":%" PRIu64 ",\"adam_m\":%" PRIu64 ",\"adam_v\":%" PRIu64
            ",\"grads\":%" PRIu64 ",\"control\":%" PRIu64 ",\"moving\":%" PRIu64
            ",\"compute\":%" PRIu64 ",\"process\":%" PRIu64 ",\"total\":%" PRIu64,
            key, r->master, r->adam_m, r->adam_v, r->grads, r->control, r->moving, r->compute,
            r->process, r->total);
}

static void json_buffers(FILE *f, const char *key, const plan_buffers *b) {
    fprintf(f,
            ",\"%s\":{\"weights\":%" PRIu64 ",\"grads\":%" PRIu64 ",\"activations\":%" PRIu64
            ",\"residual\":%" PRIu64 ",\"working\":%" PRIu64 ",\"optimizer\":%" PRIu64
            ",\"attention\":%" PRIu64 ",\"att_slots\":%d,\"device_groups\":%d,\"moe\":%" PRIu64
            ",\"backend\":%" PRIu64 ",\"backend_host\":%" PRIu64 ",\"total\":%" PRIu64 "}",
            key, b->weights, b->grads, b->activations, b->residual, b->working, b->optimizer,
            b->attention, b->att_slots, b->device_groups, b->moe, b->backend, b->backend_host,
            b->total);
}

// One JSON object, every number exact, for scripts and tests.
void plan_print_json(FILE *f, const mt_plan *p, const host_probe *h, int cores, int fits) {
    plan_estimate e;
    plan_estimate_step(p, cores, &e);
    fprintf(f, "{\"np\":%d,\"backend\":\"%s\",\"params\":%" PRIu64 ",\"groups\":%d,\"ranks\":[",
            p->np, p->cuda ? "cuda" : "cpu", p->params, p->n_groups);
    for (int r = 0; r < p->np; r++) {
        json_rank(f, r ? "," : "", &p->rank[r]);
        fprintf(f, ",\"rank\":%d,\"numa_node\":%d}", r, p->rank[r].numa_node);
    }
    json_rank(f, "],\"total\":", &p->sum);
    fprintf(f,
            "},\"grad_dtype\":\"%s\",\"grad_ring\":%d,\"other_slots_grads\":%" PRIu64
            ",\"device_groups\":%d,\"optimizer_state\":%" PRIu64 ",\"shared\":%" PRIu64
            ",\"regions\":%" PRIu64 ",\"host\":%" PRIu64,
            p->grad_bytes == 2 ? "bf16" : "fp32", p->ring_depth, p->other_slots_grads,
            p->device_groups, p->state, p->shared, p->regions, p->host);
    json_buffers(f, "compute_host", &p->host_buffers);
    json_buffers(f, "gpu", &p->gpu);
    fprintf(f,
            ",\"estimate\":{\"flops\":%.6g,\"flops_rate\":%.6g,\"compute_s\":%.6g,\"pcie_s\":%.6g,"
            "\"optimizer_s\":%.6g,\"forward_phase_s\":%.6g,\"backward_phase_s\":%.6g,"
            "\"disk_s\":%.6g,\"break_even_tokens\":%.6g,\"step_s\":%.6g,"
            "\"active_params\":%.17g,\"stream_break_even_tokens\":%.6g}",
            e.flops, e.flops_rate, e.compute_s, e.pcie_s, e.opt_s, e.forward_phase_s,
            e.backward_phase_s, e.disk_s, e.break_even_tokens, e.step_s, e.active_params,
            e.stream_break_even_tokens);
    fprintf(f,
            ",\"disk\":{\"total\":%" PRIu64 ",\"grads\":%" PRIu64 ",\"adam\":%" PRIu64
            ",\"per_rank\":%" PRIu64 ",\"windows\":%" PRIu64 ",\"bw\":%.6g,\"bw_measured\":%s,"
            "\"free\":%" PRIu64 "}",
            p->disk, p->disk_grads, p->disk_adam, p->np > 1 ? p->rank[1].disk : 0, p->sum.storage,
            p->disk_bw, strncmp(h->disk_bw_source, "measured", 8) == 0 ? "true" : "false",
            h->disk_free);
    fprintf(f, ",\"mem_available\":%" PRIu64 ",\"shm_free\":%" PRIu64 ",\"fits\":%s}\n",
            h->mem_available, h->shm_free, fits ? "true" : "false");
}
