#include "runtime/optimizer/optimizer.h"
#include "runtime/optimizer/optimizer_parts.h"
#include "kernels/adamw.h"
#include "runtime/optimizer/storage.h"
#include "runtime/base/base.h"
#include "runtime/io/io.h"
#include "runtime/model/model.h"
#include "runtime/observe/observe.h"
#include "shm/syscheck.h"
#include <limits.h>
#include <math.h>
#include <numa.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

// ---- Optimizer state memory: NUMA-local, huge pages, first touched by its updaters ----

#define HUGE_PAGE ((size_t)2 << 20)

static size_t state_bytes(size_t n) {
    return ((n ? n : 1) * sizeof(float) + 4095) & ~(size_t)4095;
}

// An anonymous mapping on 2 MiB boundaries (when it is that large), marked for transparent huge
// pages: the update streams master, m and v linearly, and 4 KiB pages would cost a TLB miss every
// 1024 floats of each. The NUMA policy is "local": each page goes to the node of the thread that
// first touches it, and adamw_first_touch touches it with the threads, the chunks and (after
// pin_threads) the cores that will update it.
static float *alloc_local(size_t n) {
    size_t bytes = state_bytes(n), slack = bytes >= HUGE_PAGE ? HUGE_PAGE : 0;
    char *raw =
        mmap(NULL, bytes + slack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) mt_die("out of memory: optimizer state of %zu MiB", bytes >> 20);
    char *p = raw;
    if (slack) { // trim to a 2 MiB-aligned start; the tail past p + bytes goes back too
        p = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
        if (p > raw) SYS_CHECK(munmap(raw, (size_t)(p - raw)));
        if ((size_t)(p - raw) < slack) SYS_CHECK(munmap(p + bytes, slack - (size_t)(p - raw)));
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(p, bytes, MADV_HUGEPAGE); // best effort: THP may be off ("never") on this host
#endif
    if (numa_available() >= 0) numa_setlocal_memory(p, bytes);
    adamw_first_touch((float *)p, n);
    return (float *)p;
}

static void free_local(float *p, size_t n) {
    SYS_CHECK(munmap(p, state_bytes(n)));
}

// ---- Thread pinning ----

// Pins OpenMP thread t of this process to the t-th CPU of its mask that lies on its NUMA node,
// so that a thread and the pages it first-touched stay together and threads do not migrate
// mid-stream. Only where this process has those CPUs to itself: with mtrun's default placement
// (one optimizer rank per NUMA node, bound to it by mpirun --bind-to numa) its mask is the node
// and job.c gave it one thread per CPU. Otherwise nothing is pinned:
//  - OMP_PLACES / OMP_PROC_BIND set: the OpenMP runtime binds, as the user asked;
//  - a mask over more than one node: mpirun did not bind (e.g. --bind-to none when ranks are
//    oversubscribed, as in CI where 5 ranks share 2 cores); the scheduler places threads;
//  - more threads than CPUs: nothing sensible to pin to.
// Optimizer ranks sharing the node's mask (several per node) split its CPUs in rank order:
// rank `index` of `peers` takes CPUs [index * threads, (index + 1) * threads).
// MT_NO_PIN=1 turns it off; MT_OPTIMIZER_INFO=1 prints what was decided.
static void pin_threads(int shard, int index, int peers) {
    const char *why = NULL;
    cpu_set_t mask;
    int cpus[CPU_SETSIZE], ncpus = 0, threads = omp_get_max_threads(), node = -1;
    if (getenv("MT_NO_PIN") && atoi(getenv("MT_NO_PIN")) != 0)
        why = "MT_NO_PIN is set";
    else if (getenv("OMP_PLACES") || getenv("OMP_PROC_BIND"))
        why = "OMP_PLACES/OMP_PROC_BIND is set";
    else if (sched_getaffinity(0, sizeof mask, &mask) != 0)
        why = "sched_getaffinity failed";
    if (!why) {
        for (int c = 0; c < CPU_SETSIZE && !why; c++) {
            if (!CPU_ISSET(c, &mask)) continue;
            int nc = numa_available() >= 0 ? numa_node_of_cpu(c) : 0;
            if (node < 0) node = nc;
            if (nc != node) why = "the process mask spans NUMA nodes (not bound by mpirun)";
            cpus[ncpus++] = c;
        }
        if (!why && threads * (peers > 0 ? peers : 1) > ncpus) why = "more threads than CPUs";
    }
    int first = peers > 1 ? index * threads : 0;
    int pinned = 0;
    if (!why) {
#pragma omp parallel num_threads(threads) reduction(+ : pinned)
        {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(cpus[first + omp_get_thread_num()], &one);
            pinned += pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0;
        }
        if (pinned != threads) why = "pthread_setaffinity_np failed";
    }
    if (getenv("MT_OPTIMIZER_INFO")) {
        if (!why)
            fprintf(stderr,
                    "optimizer %d: %d OpenMP threads pinned one per CPU of NUMA node %d "
                    "(cpus %d..%d), adamw %s, streaming stores %s\n",
                    shard, threads, node, cpus[first], cpus[first + threads - 1],
                    adamw_isa_name(adamw_isa_default()), adamw_nt_name(adamw_nt_default()));
        else
            fprintf(stderr,
                    "optimizer %d: %d OpenMP thread%s not pinned (%s), adamw %s, "
                    "streaming stores %s\n",
                    shard, threads, threads == 1 ? "" : "s", why,
                    adamw_isa_name(adamw_isa_default()), adamw_nt_name(adamw_nt_default()));
    }
}

// ---- the groups the compute rank updates itself (engine/device_groups.c is the other side) ----

// Their state lives on the compute rank's device. It passes through this rank a piece of
// job_piece() floats at a time, never whole, so that it adds no peak to the host's memory:
// at start, made or read here and sent over; at saves and exports, taken back and written
// (checkpoint.c moves the saved and resumed state the same way). Their state[g] stays empty.

// Elements [lo, lo + len) of group g's initial master: model_dir's (each rank pread()s only its
// slice; mt-rank's set-up validated the files), or fresh.
static void init_master(optimizer *o, int g, uint64_t lo, uint64_t len, float *out) {
    mt_job *job = o->job;
    char err[MT_PATH_MAX + 512];
    if (!job->hf) {
        model_init_slice(&job->cfg, g, lo, len, out);
    } else if (hf_read_group_slice(job->hf, &job->cfg.model, g, lo, len, out, err, sizeof err) <
                   0 ||
               hf_check_finite(&job->cfg, g, lo, len, out, err, sizeof err) < 0) {
        // model_dir's files are the user's input: bad input (exit 2, which mtrun passes on),
        // said by this rank alone, as only its slice holds the bad element.
        char msg[sizeof err + 32];
        snprintf(msg, sizeof msg, "optimizer %d: %s", o->shard, err);
        mt_say_last("megatrain: ", msg);
        exit(2);
    }
}

// A fresh start: this rank's slices of their master (initialized or read) and zero moments.
static void give_fresh_device_groups(optimizer *o) {
    mt_job *job = o->job;
    const shard_layout *lay = &job->layouts[o->shard];
    float *piece = job->device_groups ? job_piece_buffer() : NULL;
    for (int g = 0; g < job->device_groups; g++)
        for (int which = 0; which < 3; which++)
            for (uint64_t at = 0, n; at < lay->len[g]; at += n) {
                n = job_piece_len(lay->len[g], at);
                if (which == 0)
                    init_master(o, g, lay->lo[g] + at, n, piece);
                else
                    memset(piece, 0, n * sizeof(float));
                job_send_floats(piece, n, 0);
            }
    free(piece);
}

// ---- storage.master: the weights reach the compute rank through the ring and the copy ----

// Piece k of group g's master at `version`, from outside an update (the start, a resume): its
// bf16 copy to disk and the piece into the ring, as an update does.
static void publish_piece(optimizer *o, int g, int k, int64_t version, const float *p, uint64_t n) {
    bf16 *copy = storage_copy_buffer(o->tier);
    for (uint64_t i = 0; i < n; i++) copy[i] = bf16_from_float(p[i]);
    storage_write_copy(o->tier, g, k);
    opt_ring_put(o, g, k, version, p, n);
}

// The master of group g at the start: initialized (fresh) or read back from the tier (where
// checkpoint_load put it), a piece at a time, with its bf16 copy; then announced.
static void start_master(optimizer *o, int g, int fresh) {
    mt_job *job = o->job;
    const shard_layout *lay = &job->layouts[o->shard];
    size_t piece = storage_piece();
    float *buf = malloc(piece * sizeof(float));
    if (!buf) mt_die("out of memory");
    for (int k = 0; k < storage_pieces(lay->len[g]); k++) {
        uint64_t at = (uint64_t)k * piece, n = lay->len[g] - at < piece ? lay->len[g] - at : piece;
        if (fresh) {
            init_master(o, g, lay->lo[g] + at, n, buf);
            storage_store_master(o->tier, g, k, buf);
        } else {
            storage_load_master(o->tier, g, k, buf);
        }
        publish_piece(o, g, k, job->start_step, buf, n);
    }
    free(buf);
    storage_copy_wait(o->tier);
}

// The frozen tensors' share of this rank's slices, in fp32, to the compute rank, which reads
// them in place of the fetch's bf16 rounding (engine/frozen.c, the other side; the groups it
// updates itself it reads from their master). After every group is announced, so that the
// compute rank, which takes them once it has seen every announcement, never holds this up.
static void send_frozen(optimizer *o) {
    mt_job *job = o->job;
    const mt_model *m = &job->cfg.model;
    for (int l = 0; l < m->layers; l++) {
        int g = model_layer_group(l);
        uint64_t lo[MODEL_MAX_FROZEN], hi[MODEL_MAX_FROZEN], at;
        int spans = g < job->device_groups ? 0 : model_frozen_spans(m, g, lo, hi);
        for (int i = 0; i < spans; i++) {
            uint64_t n = job_slice_overlap(job, o->shard, g, lo[i], hi[i], &at);
            if (n == 0) continue;
            float *v = malloc(n * sizeof(float));
            if (!v) mt_die("out of memory");
            at -= job->layouts[o->shard].lo[g]; // in the region, or the tier (storage.master)
            if (o->state[g].master)
                memcpy(v, o->state[g].master + at, n * sizeof(float));
            else
                storage_read_master(o->tier, g, at, n, v);
            job_send_floats(v, n, 0);
            free(v);
        }
    }
}

static void init_state(optimizer *o) {
    mt_job *job = o->job;
    const shard_layout *lay = &job->layouts[o->shard];
    for (int g = job->device_groups; g < job->n_groups; g++) {
        job_moment_part(job, g, lay->len[g], job->node, &o->part_lo[g], &o->part_n[g]);
        // in the region, which the GPU streams; or in the tier (storage.master)
        o->state[g].master = job->cfg.storage_master ? NULL : job_master(job, o->shard, g);
        if (job->cfg.storage_adam) continue;
        o->state[g].m = alloc_local(o->part_n[g]);
        o->state[g].v = alloc_local(o->part_n[g]);
    }
    o->tier = storage_open(job, o->shard, o->part_lo, o->part_n);
    for (int g = job->device_groups; g < job->n_groups; g++)
        storage_describe(o->tier, g, &o->state[g]);
    if (job->resume_path[0]) { // the device groups' state goes over as it is read
        checkpoint_load(job, o->state);
        for (int g = 0; g < job->n_groups; g++) {
            if (g >= job->device_groups && job->cfg.storage_master) start_master(o, g, 0);
            opt_publish_weights(o, g, job->start_step);
        }
        send_frozen(o);
        return;
    }
    give_fresh_device_groups(o);
    for (int g = 0; g < job->n_groups; g++) {
        if (g >= job->device_groups && job->cfg.storage_master)
            start_master(o, g, 1);
        else if (g >= job->device_groups)
            init_master(o, g, lay->lo[g], lay->len[g], o->state[g].master);
        // group by group: the compute rank shows progress
        opt_publish_weights(o, g, job->start_step);
    }
    send_frozen(o);
}

// The norm is summed over groups in a fixed order from per-group values computed once by the
// compute rank, so every optimizer rank, for any -np, gets the same bits (and the compute rank,
// for the groups it updates).
static float clip_scale(const optimizer *o) {
    return clip_scale_of_groups(o->sumsq, o->job->n_groups, o->job->cfg.clip);
}

// Tests: die like a crashed process (MT_FAULT_ABORT_AT_STEP) or a kill -9 (MT_FAULT_KILL_AT_STEP),
// as optimizer 0 of node MT_FAULT_NODE (default 0).
static void fault_injection(const optimizer *o, int step) {
    const char *node = getenv("MT_FAULT_NODE"), *f = getenv("MT_FAULT_ABORT_AT_STEP");
    const char *kill9 = getenv("MT_FAULT_KILL_AT_STEP");
    if (o->shard != 0 || o->job->node != (node ? atoi(node) : 0)) return;
    if (f && atoi(f) == step) {
        fprintf(stderr, "optimizer 0: MT_FAULT_ABORT_AT_STEP=%d: aborting\n", step);
        abort();
    }
    if (kill9 && atoi(kill9) == step) SYS_CHECK(kill(getpid(), SIGKILL));
}

// One slot per group: once every gradient is in, the groups in forward order, which the next
// forward needs first. A step whose gradient norm is not finite changes no weight and no moment:
// the groups are published again at the next version as they are (step_is_bad, job_note_step).
static void update_step(optimizer *o, int step) {
    mt_job *job = o->job;
    adamw_params hp = adamw_params_at_step(&job->cfg, step, job->skipped_steps, clip_scale(o));
    int bad = job_note_step(job, step, step_is_bad(o->sumsq, job->n_groups));
    if (!bad) storage_begin_grads(o->tier, o->order, o->n_order);
    for (int g = job->device_groups; g < job->n_groups; g++) {
        if (bad)
            opt_publish_weights(o, g, step + 1);
        else
            opt_update_group(o, g, step, &hp);
    }
    storage_end(o->tier);
}

// export_dir, written like a checkpoint: the leader lays the files out, every rank pwrite()s
// its fp32 master slices (of the device-updated groups, as the compute rank sends them back)
// and then permutes its share of gpt-oss's fused expert tensors, the leader renames the
// finished folder into place.
static void export_hf(optimizer *o) {
    mt_job *job = o->job;
    const shard_layout *lay = &job->layouts[o->shard];
    char tmp[MT_PATH_MAX + 32];
    uint64_t max = hf_export_max_shard_bytes();
    float *piece = job->device_groups ? job_piece_buffer() : NULL;
    hf_export_tmp_path(job->cfg.export_dir, tmp, sizeof tmp);
    if (job->rank == 1) hf_export_prepare(&job->cfg, tmp, max);
    MPI_CHECK(MPI_Barrier(job->opt_comm));
    for (int g = 0; g < job->n_groups; g++) {
        if (g >= job->device_groups && !o->state[g].master) { // storage.master: from the tier
            float *buf = malloc(storage_piece() * sizeof(float));
            if (!buf) mt_die("out of memory");
            for (int k = 0; k < storage_pieces(lay->len[g]); k++) {
                uint64_t at = (uint64_t)k * storage_piece(), left = lay->len[g] - at;
                storage_load_master(o->tier, g, k, buf);
                hf_export_write_slice(&job->cfg, tmp, max, g, lay->lo[g] + at,
                                      left < storage_piece() ? left : storage_piece(), buf);
            }
            free(buf);
            continue;
        }
        if (g >= job->device_groups) {
            hf_export_write_slice(&job->cfg, tmp, max, g, lay->lo[g], lay->len[g],
                                  o->state[g].master);
            continue;
        }
        for (uint64_t at = 0, n; at < lay->len[g]; at += n) {
            n = job_piece_len(lay->len[g], at);
            job_recv_floats(piece, n, 0);
            hf_export_write_slice(&job->cfg, tmp, max, g, lay->lo[g] + at, n, piece);
        }
    }
    free(piece);
    MPI_CHECK(MPI_Barrier(job->opt_comm));
    hf_export_assemble(&job->cfg, tmp, max, o->shard, job->n_shards); // fused hub layouts
    MPI_CHECK(MPI_Barrier(job->opt_comm));
    if (job->rank == 1) hf_export_publish(tmp, job->cfg.export_dir);
    MPI_CHECK(MPI_Barrier(job->opt_comm));
}

// The elements of the reordered ring's pieces: a few milliseconds of AdamW on one rank, the
// longest a group that has just landed waits for the rank to turn to it (MT_TEST_RING_PIECE:
// smaller, for tests on small models).
static uint64_t ring_piece(void) {
    const char *test = getenv("MT_TEST_RING_PIECE");
    return test && atoll(test) > 0 ? (uint64_t)atoll(test) : (uint64_t)1 << 22;
}

void optimizer_run(mt_job *job) {
    optimizer o = {.job = job, .shard = job_shard_of_rank(job->rank)};
    const char *slow = getenv("MT_FAULT_SLOW_ADAMW_MS"); // for tests: a slow optimizer rank
    if (slow) o.slow_ms = atoi(slow);
    o.state = calloc(job->n_groups, sizeof *o.state);
    o.sumsq = calloc(job->n_groups, sizeof *o.sumsq);
    o.grads_step = malloc(job->n_groups * sizeof *o.grads_step);
    o.part_lo = calloc(job->n_groups, sizeof *o.part_lo);
    o.part_n = calloc(job->n_groups, sizeof *o.part_n);
    o.left = calloc(job->n_groups, sizeof *o.left);
    if (!o.state || !o.sumsq || !o.grads_step || !o.part_lo || !o.part_n || !o.left)
        mt_die("out of memory");
    for (int g = 0; g < job->n_groups; g++) o.grads_step[g] = -1;
    model_grad_order(&job->cfg.model, o.arrival);
    o.n_order = model_update_order(&job->cfg, job->device_groups, o.order);
    pin_threads(o.shard, job->node_index, job->node_peers); // before the state is first touched
    init_state(&o);
    o.reorder = model_ring_by_urgency(&job->cfg, job->nodes), o.piece = ring_piece();
    trace_open(&job->cfg, job, job->start_step, job->end_step);
    for (int step = job->start_step; step < job->end_step; step++) {
        double began = now_seconds(); // the watchdog allows 3 of the longest step
        trace_set_step(step);
        opt_receive_step(&o, step);
        fault_injection(&o, step);
        if (job->ring_depth)
            job_note_step(job, step, step_is_bad(o.sumsq, job->n_groups));
        else
            update_step(&o, step);
        trace_set_step(-1);
        if (checkpoint_due(job, step + 1)) checkpoint_save(job, step + 1, o.state);
        double took = now_seconds() - began;
        if (took > job->longest_step) job->longest_step = took;
    }
    if (checkpoint_export_due(job)) export_hf(&o);
    trace_finish(); // collective with rank 0's
    for (int g = job->device_groups; g < job->n_groups && !job->cfg.storage_adam; g++) {
        free_local(o.state[g].m, o.part_n[g]);
        free_local(o.state[g].v, o.part_n[g]);
    }
    storage_close(o.tier);
    free(o.part_lo), free(o.part_n), free(o.left);
    free(o.state);
    free(o.sumsq);
    free(o.grads_step);
}
