// The plan's verdict: whether the job fits the host, /dev/shm, storage.dir and the GPU, and
// when it does not, one line that says what it needs, what there is, and the smallest change
// that fits (the NVMe tier, the gradient ring, or a smaller batch).
#include "launcher/launcher.h"
#include "launcher/plan_text.h"
#include "runtime/model/model.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

// ---- the verdict ----

// The compute rank's host bytes for a variant of the config; the rest does not depend on it.
uint64_t plan_host_with(const mt_plan *p, const mt_config *c) {
    plan_buffers b;
    plan_choices ch = p->choices;
    if (p->cuda) { // the same choices for the variant, from the same free figure
        uint64_t fixed = plan_backend_fixed_bytes(c, 1) + PLAN_CUDA_CONTEXT_BYTES;
        uint64_t room = p->gpu_free == UINT64_MAX ? UINT64_MAX
                        : p->gpu_free > fixed     ? p->gpu_free - fixed
                                                  : 0;
        plan_choose(&ch, c, 1, p->choices.grad_bytes, room);
    }
    plan_compute_buffers(c, &ch, &b);
    uint64_t compute = p->cuda ? plan_cuda_host_bytes(c, &ch) : b.total;
    return p->host - p->rank[0].compute + compute;
}

// The largest value in [1, now - 1] of the int field at offset off (batch.micro_batches, ...)
// with which the job needs at most limit bytes, given the other changes already in base; 0 when
// none fits. Memory grows with every batch dimension, so a binary search finds it.
static int largest_fitting(const mt_plan *p, mt_config base, size_t off, uint64_t limit) {
    int *field = (int *)((char *)&base + off);
    int lo = 0, hi = *field - 1; // lo fits (0: nothing does), hi is the last candidate
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        *field = mid;
        if (plan_host_with(p, &base) <= limit)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

// The smallest change that fits: one batch setting if one is enough, else two.
static void suggest(const mt_plan *p, uint64_t limit, const char *lead, char *out, size_t n) {
    const mt_config *c = p->c;
    int mb = largest_fitting(p, *c, offsetof(mt_config, micro_batches), limit);
    int rows = largest_fitting(p, *c, offsetof(mt_config, micro_batch), limit);
    int seq = largest_fitting(p, *c, offsetof(mt_config, seq_len), limit);
    if (mb || rows || seq) {
        int used = snprintf(out, n, "; %sit fits with", lead);
        const char *sep = "";
        if (mb)
            used += snprintf(out + used, n - used, " batch.micro_batches = %d", mb), sep = " or";
        if (rows)
            used += snprintf(out + used, n - used, "%s batch.micro_batch = %d", sep, rows),
                sep = " or";
        if (seq) snprintf(out + used, n - used, "%s batch.seq_len = %d", sep, seq);
        return;
    }
    mt_config one = *c; // one setting alone is not enough: shrink the batch to one sequence
    one.micro_batches = one.micro_batch = 1;
    int used = snprintf(out, n,
                        "; %sit fits with batch.micro_batches = 1 and batch.micro_batch = 1", lead);
    if (plan_host_with(p, &one) > limit)
        snprintf(out + used, n - used, " and batch.seq_len = %d",
                 largest_fitting(p, one, offsetof(mt_config, seq_len), limit));
}

// The host bytes of the config with the NVMe tier's switches set as asked.
static uint64_t host_with_tier(const mt_plan *p, const int *way) {
    mt_config v = *p->c;
    v.storage_grads = way[0], v.storage_adam = way[1], v.storage_master = way[2];
    if (!v.storage_dir[0]) snprintf(v.storage_dir, sizeof v.storage_dir, "/");
    mt_plan q;
    char err[256];
    if (plan_make(&q, &v, p->np, p->cuda, 1, 0, p->grad_bytes, p->gpu_free, 1, err, sizeof err))
        return UINT64_MAX;
    uint64_t host = q.host;
    plan_free(&q);
    return host;
}

// The tier's switches, and what each one moves to the disk.
static const struct {
    const char *name, *moves;
} tier_parts[3] = {{"storage.grads = true", "the gradient slots"},
                   {"storage.adam = true", "Adam's m and v"},
                   {"storage.master = true", "the fp32 master"}};

// The parts picked, by switch (`switches`: "a and b and c") or by what they move ("a, b and c").
static void tier_list(const int *pick, int switches, char *out, size_t n) {
    int count = 0, left = pick[0] + pick[1] + pick[2];
    out[0] = 0;
    for (int i = 0; i < 3; i++) {
        if (!pick[i]) continue;
        size_t used = strlen(out);
        const char *sep = !count ? "" : switches || count == left - 1 ? " and " : ", ";
        snprintf(out + used, n - used, "%s%s", sep,
                 switches ? tier_parts[i].name : tier_parts[i].moves);
        count++;
    }
}

// The NVMe tier, when it is the smallest change that fits: the gradient slots first (exact
// clipping stays, the step as it is), then the moments, both, and then every byte of state
// (the master too). Returns whether it offered one.
static int offer_storage(const mt_plan *p, const host_probe *h, char *out, size_t n) {
    const mt_config *c = p->c;
    static const int ways[5][3] = {{1, 0, 0}, {0, 1, 0}, {1, 1, 0}, {0, 1, 1}, {1, 1, 1}};
    const int have[3] = {c->storage_grads, c->storage_adam, c->storage_master};
    for (int i = 0; i < 5; i++) {
        int way[3], added[3];
        for (int k = 0; k < 3; k++) way[k] = ways[i][k] || have[k], added[k] = way[k] && !have[k];
        if ((way[0] && model_grad_ring_depth(c)) || (way[2] && c->shard_across_nodes) ||
            !(added[0] || added[1] || added[2]))
            continue;
        uint64_t host = host_with_tier(p, way);
        if (host > h->mem_available) continue;
        char switches[96], moves[128];
        tier_list(added, 1, switches, sizeof switches);
        tier_list(way, 0, moves, sizeof moves);
        snprintf(out, n,
                 "; it fits with %s and storage.dir on a local disk: %s then live in files "
                 "there, and host memory needs %s",
                 switches, moves, H(host));
        return 1;
    }
    return 0;
}

static int refuse_host(const mt_plan *p, const host_probe *h, char *err, size_t n) {
    const mt_config *c = p->c;
    int used = snprintf(err, n,
                        "%s with -np %d does not fit in host memory: it needs %s (%s bytes: "
                        "optimizer state %s, gradient slots %s, compute rank %s, %d rank "
                        "processes %s), %s (%s bytes) is available (%s)",
                        c->source_path, p->np, H(p->host), G(p->host), H(p->state), H(p->shared),
                        H(p->rank[0].compute), p->np, H(p->sum.process), H(h->mem_available),
                        G(h->mem_available),
                        h->mem_forced ? "MT_PLAN_MEM_LIMIT" : "MemAvailable in /proc/meminfo");
    if (used < 0 || (size_t)used >= n) return -1;
    int tier = offer_storage(p, h, err + used, n - used);
    used = (int)strlen(err);
    if (!p->ring_depth && !c->storage_grads &&
        p->host - p->sum.grads + p->other_slots_grads <= h->mem_available) {
        snprintf(err + used, n - used,
                 "; %sit fits with %s: each group is then updated as soon as its gradients land, "
                 "and the gradient slots become a ring of %d groups' (%s instead of %s)%s",
                 tier ? "or " : "",
                 c->clip > 0 ? "optimizer.clip = 0" : "optimizer.grad_slots = \"ring\"",
                 MODEL_GRAD_RING_DEPTH, H(p->other_slots_grads), H(p->sum.grads),
                 c->clip > 0 ? ", with no global-norm clipping" : "");
        return -1;
    }
    mt_config least = *c; // the smallest batch: what no batch setting can shrink
    least.micro_batches = least.micro_batch = least.seq_len = 1;
    uint64_t fixed = plan_host_with(p, &least);
    if (tier) { // a smaller batch too, where one fits (a small model a little short)
        if (fixed <= h->mem_available) suggest(p, h->mem_available, "or ", err + used, n - used);
    } else if (fixed > h->mem_available)
        snprintf(err + used, n - used,
                 "; even a batch of one token needs %s (optimizer state, gradient slots%s), so "
                 "no batch setting helps: use a smaller model or a host with more memory (each "
                 "data-parallel host holds a whole copy)",
                 H(fixed), p->cuda ? "" : ", the compute rank's weight and gradient buffers");
    else
        suggest(p, h->mem_available, "", err + used, n - used);
    if (h->elastic) {
        used = (int)strlen(err);
        snprintf(err + used, n - used,
                 "; this VM has a memory balloon, so its memory may grow past MemAvailable on "
                 "demand");
    }
    return -1;
}

// The GPU check: the compute rank's GPU buffers against the free figure less the CUDA context
// (the compute rank checks the same with cudaMemGetInfo before it allocates).
static uint64_t gpu_room(const mt_plan *p) {
    uint64_t context = PLAN_CUDA_CONTEXT_BYTES + plan_backend_fixed_bytes(p->c, 1);
    if (p->gpu_free == UINT64_MAX) return UINT64_MAX;
    return p->gpu_free > context ? p->gpu_free - context : 0;
}

int plan_check(const mt_plan *p, const host_probe *h, char *err, size_t n) {
    char where[96];
    snprintf(where, sizeof where, "%s, less %s for the CUDA context", p->gpu_source,
             H(PLAN_CUDA_CONTEXT_BYTES));
    if (p->cuda && plan_check_device(p->c, &p->choices, gpu_room(p), where, err, n) < 0) return -1;
    if (h->mem_known && p->host > h->mem_available) return refuse_host(p, h, err, n);
    if (h->disk_known && p->disk > h->disk_free) {
        snprintf(err, n,
                 "storage.dir: %s: the NVMe tier needs %s (%s bytes: gradients %s, Adam moments "
                 "%s), %s is free%s; free some or point storage.dir at a larger disk",
                 p->c->storage_dir, H(p->disk), G(p->disk), H(p->disk_grads), H(p->disk_adam),
                 H(h->disk_free), h->disk_forced ? " (MT_PLAN_DISK_LIMIT)" : "");
        return -1;
    }
    if (h->shm_known && p->regions > h->shm_free) {
        uint64_t gib = (p->regions + (h->shm_size - h->shm_free) + (1ull << 30) - 1) >> 30;
        snprintf(err, n,
                 "%s with -np %d does not fit in /dev/shm: the shared regions need %s (%s bytes), "
                 "%s (%s bytes) is free (%s); grow it: mount -o remount,size=%" PRIu64 "G /dev/shm",
                 p->c->source_path, p->np, H(p->regions), G(p->regions), H(h->shm_free),
                 G(h->shm_free), h->shm_forced ? "MT_PLAN_SHM_LIMIT" : "statvfs", gib);
        return -1;
    }
    return 0;
}

// The pinning of the shared regions for DMA may count against the lock limit.
int plan_memlock_short(const mt_plan *p, const host_probe *h) {
    return p->cuda && !h->memlock_unlimited && !h->root && h->memlock < p->regions;
}

void plan_warnings(FILE *f, const mt_plan *p, const host_probe *h) {
    if (plan_memlock_short(p, h))
        fprintf(f,
                "mtrun: warning: ulimit -l is %s, below the %s of shared regions the GPU "
                "pins for DMA; if registering them fails, raise it (ulimit -l unlimited, or "
                "memlock in /etc/security/limits.conf)\n",
                H(h->memlock), H(p->regions));
}
