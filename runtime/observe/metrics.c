#include "runtime/observe/observe.h"
#include "runtime/base/base.h"
#include "runtime/model/model.h"
#include "runtime/plan/plan.h"
#include "shm/syscheck.h"
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

// ---- the terminal ----

// mtrun says whether its stdout is a terminal (MT_TTY): ours cannot tell, as Open MPI hands the
// ranks a pseudo-terminal whatever its own stdout is. Started by plain mpirun, plain lines.
static void detect_tty(metrics *mx) {
    const char *env = getenv("MT_TTY");
    if (env && *env)
        mx->tty = atoi(env) != 0;
    else
        mx->tty = !getenv("OMPI_COMM_WORLD_SIZE") && isatty(STDOUT_FILENO);
    const char *cols = getenv("MT_TTY_COLUMNS");
    struct winsize ws;
    if (cols && atoi(cols) > 0)
        mx->columns = atoi(cols);
    else if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        mx->columns = ws.ws_col;
    else
        mx->columns = 80;
}

// Erases the live line, so that a whole line can print where it was.
static void live_clear(metrics *mx) {
    if (mx->live_shown) fputs("\r\033[K", stdout);
    mx->live_shown = 0;
}

static void live_draw(metrics *mx) {
    if (!mx->tty || !mx->live[0]) return;
    fputs("\r\033[K", stdout);
    fputs(mx->live, stdout);
    fflush(stdout);
    mx->live_shown = 1;
}

// A line of its own (eval, sample): printed above the live line, which is then redrawn.
static void print_above(metrics *mx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void print_above(metrics *mx, const char *fmt, ...) {
    live_clear(mx);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    live_draw(mx);
    fflush(stdout);
}

// ---- what a step line shows ----

// Memory in use on this node (MemTotal - MemAvailable): the optimizer ranks' state and the
// shared regions live here too, so it is the number that says how close the node is to full.
static int node_memory(double *used, double *total) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    unsigned long long kb, t = 0, a = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) t = kb;
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) a = kb;
    }
    fclose(f);
    if (!t || !a) return -1;
    *used = (double)(t - a) * 1024, *total = (double)t * 1024;
    return 0;
}

static void format_eta(char *out, size_t cap, double seconds) {
    long s = (long)(seconds + 0.5);
    if (s >= 3600)
        snprintf(out, cap, "%ldh%02ldm", s / 3600, s / 60 % 60);
    else
        snprintf(out, cap, "%ldm%02lds", s / 60, s % 60);
}

typedef struct {
    int64_t step;
    double loss, lr, norm, tok_s, tflops, mfu, wait_frac, dt, eta;
    double busy;                // the compute stream's busy fraction; < 0: unknown (CPU)
    double mem_used, mem_total; // < 0: unknown
    // MoE (moe_load.c): the load-balancing loss, the worst layer's max/mean tokens per expert
    // and the idle experts; moe = 0 for a dense model
    int moe, idle;
    double aux, worst;
    // the NVMe tier: storage.dir's read and write rates over the step, GB/s (< 0: no tier)
    double disk_read, disk_write;
} step_info;

// The live line keeps the most useful fields when the terminal is narrow: each has a rank,
// and the highest-ranked ones go first until the line fits (rank 0 always stays).
typedef struct {
    char text[64];
    int rank;
} field;

enum { MAX_FIELDS = 12 };

static void add_field(field *f, int *n, int rank, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add_field(field *f, int *n, int rank, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f[*n].text, sizeof f[*n].text, fmt, ap);
    va_end(ap);
    f[(*n)++].rank = rank;
}

static int live_fields(const metrics *mx, const step_info *s, field *f) {
    char eta[32];
    format_eta(eta, sizeof eta, s->eta);
    int n = 0;
    add_field(f, &n, 0, "step %lld/%d", (long long)s->step + 1, mx->job->cfg.steps);
    add_field(f, &n, 0, "loss %.4f", s->loss);
    add_field(f, &n, 2, "%.0f tok/s", s->tok_s);
    add_field(f, &n, 5, "%.3g TFLOP/s", s->tflops); // MFU says it too
    add_field(f, &n, 3, "MFU %.1f%%", 100 * s->mfu);
    if (s->busy >= 0) add_field(f, &n, 4, "busy %.0f%%", 100 * s->busy);
    add_field(f, &n, 4, "opt wait %.0f%%", 100 * s->wait_frac);
    if (s->mem_total > 0)
        add_field(f, &n, 6, "mem %.1f/%.0f GiB", s->mem_used / 1073741824.0,
                  s->mem_total / 1073741824.0);
    if (s->disk_read >= 0)
        add_field(f, &n, 5, "disk r/w %.2f/%.2f GB/s", s->disk_read, s->disk_write);
    add_field(f, &n, 7, "lr %.2e", s->lr);
    add_field(f, &n, 1, "ETA %s", eta);
    return n;
}

static void build_live(metrics *mx, const step_info *s) {
    field f[MAX_FIELDS];
    int n = live_fields(mx, s, f), keep[MAX_FIELDS], width = 0;
    for (int i = 0; i < n; i++) keep[i] = 1, width += (int)strlen(f[i].text) + (i ? 3 : 0);
    for (int r = 7; r > 0 && width > mx->columns - 1; r--)
        for (int i = 0; i < n; i++)
            if (keep[i] && f[i].rank == r) keep[i] = 0, width -= (int)strlen(f[i].text) + 3;
    size_t used = 0;
    mx->live[0] = 0;
    for (int i = 0; i < n; i++)
        if (keep[i] && used < sizeof mx->live)
            used += snprintf(mx->live + used, sizeof mx->live - used, "%s%s", used ? " | " : "",
                             f[i].text);
    // Never wider than the terminal: a wrapped line could not be redrawn with \r.
    if (mx->columns > 1 && (int)strlen(mx->live) > mx->columns - 1) mx->live[mx->columns - 1] = 0;
}

// The plain line, for logs: one per step, as it always was.
static void print_plain(metrics *mx, const step_info *s) {
    char eta[32];
    format_eta(eta, sizeof eta, s->eta);
    char busy[32] = "";
    if (s->busy >= 0) snprintf(busy, sizeof busy, "busy %.1f%% | ", 100 * s->busy);
    printf("step %5lld/%d | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | %.3f TFLOP/s | "
           "%sopt wait %4.1f%% | %.0f ms | ETA %s\n",
           (long long)s->step + 1, mx->job->cfg.steps, s->loss, s->lr, s->norm, s->tok_s, s->tflops,
           busy, 100.0 * s->wait_frac, s->dt * 1e3, eta);
    if (s->moe)
        printf("           | aux %.4f | expert load max/mean %.2f | idle experts %d\n", s->aux,
               s->worst, s->idle);
    if (s->disk_read >= 0)
        printf("           | storage.dir read %.3f GB/s | written %.3f GB/s\n", s->disk_read,
               s->disk_write);
    fflush(stdout);
}

// ---- the record ----

// One record out to metrics.jsonl in one write(2), whole or not at all: a disk that fills up
// leaves no cut line behind (a part written is taken back), and a later line, or a resumed run,
// never continues half a record. The first one lost is said in one line; the job goes on.
static void line_out(metrics *mx) {
    off_t len = fflush(mx->jsonl) == 0 ? ftello(mx->jsonl) : -1;
    struct stat st;
    int err = len < 0 || fstat(mx->fd, &st) != 0 ? errno : 0;
    ssize_t n = err ? -1 : write(mx->fd, mx->line, (size_t)len);
    if (!err && n != (ssize_t)len) err = n < 0 ? errno : ENOSPC;
    if (err && n > 0 && ftruncate(mx->fd, st.st_size) != 0) err = errno;
    if (err && !mx->lost++)
        fprintf(stderr,
                "metrics: %s/metrics.jsonl: a record could not be written (%s); records that "
                "fail are left out whole, training goes on\n",
                mt_shown(mx->job->cfg.checkpoint_dir), strerror(err));
    rewind(mx->jsonl);
}

// A resumed run appends to metrics.jsonl: a last line cut short (a disk that filled up under an
// earlier version, a crash mid-write) is removed first, so that the file stays JSON Lines.
static void drop_cut_line(metrics *mx) {
    struct stat st;
    char buf[4096];
    SYS_CHECK(fstat(mx->fd, &st));
    off_t end = st.st_size, at = end;
    while (at > 0) {
        size_t n = at < (off_t)sizeof buf ? (size_t)at : sizeof buf;
        if (pread(mx->fd, buf, n, at - (off_t)n) != (ssize_t)n) return; // left as it is
        size_t i = n;
        while (i > 0 && buf[i - 1] != '\n') i--;
        if (i > 0) {
            at -= (off_t)(n - i);
            break;
        }
        at -= (off_t)n;
    }
    if (at == end) return;
    SYS_CHECK(ftruncate(mx->fd, at));
    fprintf(stderr,
            "metrics: %s/metrics.jsonl ended in a record cut short (%lld bytes, from an earlier "
            "run that could not finish it): removed it\n",
            mt_shown(mx->job->cfg.checkpoint_dir), (long long)(end - at));
}

void metrics_open(metrics *mx, mt_job *job, const char *backend, int device_groups) {
    memset(mx, 0, sizeof *mx);
    mx->job = job;
    mx->device_groups = device_groups;
    if (!job_writes(job)) return; // the leader node reports the job: mx->jsonl stays NULL
    detect_tty(mx);
    const char *every = getenv("MT_PROGRESS_S");
    mx->progress_every = every && *every ? atof(every) : 30;
    const mt_config *c = &job->cfg;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/metrics.jsonl", job->run_at); // the folder held open
    // Appending: a resumed run continues the record. Read too, to find a cut last line.
    mx->fd = open(path, O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (mx->fd >= 0) drop_cut_line(mx);
    mx->jsonl = mx->fd < 0 ? NULL : open_memstream(&mx->line, &mx->line_size);
    if (!mx->jsonl)
        mt_die("%s: %s", job_run_shown(job, path),
               errno == ELOOP ? "a symbolic link: not writing through it" : strerror(errno));
    // The formula: 6 N per token plus attention's 12 * layers * dim * seq.
    mx->flops_per_token = plan_model_flops_per_token(c);
    mx->tokens_per_step = mt_tokens_per_step(c) * job->nodes;
    int cuda = strcmp(backend, "cuda") == 0;
    const char *peak = getenv("MT_PEAK_FLOPS"); // another GPU, or a measured CPU peak
    mx->peak_flops = peak && atof(peak) > 0 ? atof(peak) : plan_peak_flops(cuda, job->threads);
    fprintf(mx->jsonl,
            "{\"event\":\"start\",\"start_step\":%d,\"end_step\":%d,\"params\":%llu,"
            "\"optimizer_ranks\":%d,\"backend\":\"%s\",\"tokens_per_step\":%ld,"
            "\"flops_per_token\":%.6g,\"peak_flops\":%.6g}\n",
            job->start_step, job->end_step, (unsigned long long)model_param_count(&c->model),
            job->n_shards, backend, mx->tokens_per_step, mx->flops_per_token, mx->peak_flops);
    line_out(mx);
    mx->tb = tb_open(job->run_at, c->checkpoint_dir);
    printf("compute rank: %.2fM parameters in %d groups, %d optimizer ranks, %ld tokens/step, "
           "steps %d..%d, backend %s (%d host threads)\n",
           model_param_count(&c->model) / 1e6, job->n_groups, job->n_shards, mx->tokens_per_step,
           job->start_step + 1, job->end_step, backend, job->threads);
    if (peak && atof(peak) > 0)
        printf("MFU is against %.4g TFLOP/s (MT_PEAK_FLOPS)\n", mx->peak_flops / 1e12);
    else if (cuda)
        printf("MFU is against %.0f TFLOP/s (H100/H200 dense bf16 peak; MT_PEAK_FLOPS sets "
               "another)\n",
               mx->peak_flops / 1e12);
    else
        printf("MFU is against %.0f GFLOP/s (an assumed %.0f GFLOP/s per core x %d threads; "
               "MT_PEAK_FLOPS sets another)\n",
               mx->peak_flops / 1e9, PLAN_CPU_FLOPS_PER_CORE / 1e9, job->threads);
    fflush(stdout);
    mx->run_start = now_seconds();
}

void metrics_memory(metrics *mx, size_t device_bytes, int kept, int passes) {
    if (!mx->jsonl) return;
    fprintf(mx->jsonl, "{\"event\":\"memory\",\"device_bytes\":%zu,\"kept\":%d,\"passes\":%d}\n",
            device_bytes, kept, passes);
    line_out(mx);
    if (device_bytes) {
        tb_begin(mx->tb, mx->job->start_step);
        tb_scalar(mx->tb, "memory/gpu_gib", device_bytes / 1073741824.0);
        tb_end(mx->tb);
    }
    char gpu[64] = "";
    if (device_bytes)
        snprintf(gpu, sizeof gpu, "; %.2f GiB of GPU memory in use, from now on",
                 device_bytes / 1073741824.0);
    print_above(mx,
                "compute rank: keeping the internals of %d of %d layer x micro-batch passes, "
                "recomputing %d in the backward%s\n",
                kept, passes, passes - kept, gpu);
}

void metrics_step_begin(metrics *mx) {
    if (!mx->jsonl) return;
    mx->step_start = mx->progress_last = now_seconds();
}

void metrics_progress(metrics *mx, int64_t step, const char *phase, int done, int total) {
    if (!mx || !mx->jsonl) return;
    double now = now_seconds();
    if (now - mx->progress_last < mx->progress_every) return;
    mx->progress_last = now;
    char in[32], usual[48] = "", last[32];
    format_eta(in, sizeof in, now - mx->step_start);
    if (mx->last_step_s > 0) {
        format_eta(last, sizeof last, mx->last_step_s);
        snprintf(usual, sizeof usual, " (the last step took %s)", last);
    }
    if (mx->tty) {
        live_clear(mx);
        printf("\r\033[Kstep %lld/%d | %s %d/%d | %s in%s", (long long)step + 1, mx->job->cfg.steps,
               phase, done, total, in, usual);
        fflush(stdout);
        mx->live_shown = 1;
        return;
    }
    printf("step %lld/%d: %s, %d of %d layer passes, %s in%s\n", (long long)step + 1,
           mx->job->cfg.steps, phase, done, total, in, usual);
    fflush(stdout);
}

void metrics_step_stop(metrics *mx) {
    if (!mx->jsonl) return;
    mx->step_stop = now_seconds();
}

// The copy engines' and compute stream's share of the step, when the transfer layer knows.
static void write_transfer_stats(metrics *mx, const transfer_stats st, double dt) {
    if (st.h2d_seconds > 0)
        fprintf(mx->jsonl, ",\"h2d_GBps\":%.3f", st.h2d_bytes / st.h2d_seconds / 1e9);
    if (st.d2h_seconds > 0)
        fprintf(mx->jsonl, ",\"d2h_GBps\":%.3f", st.d2h_bytes / st.d2h_seconds / 1e9);
    if (st.compute_busy_seconds >= 0 && dt > 0)
        fprintf(mx->jsonl, ",\"compute_busy\":%.4f", st.compute_busy_seconds / dt);
    if (st.opt_stall_seconds >= 0 && dt > 0)
        fprintf(mx->jsonl, ",\"opt_stall\":%.4f", st.opt_stall_seconds / dt);
    if (st.disk_read_bytes >= 0)
        fprintf(mx->jsonl, ",\"disk_read_GB\":%.6f,\"disk_write_GB\":%.6f",
                st.disk_read_bytes / 1e9, st.disk_write_bytes / 1e9);
}

// Once per run, when the GPU keeps idling on the optimizer ranks, say what would shorten it: the
// per-step "opt wait" figure alone does not tell a user which knob to turn. Only the first two
// steps of a run are left out (warm-up), and only a wait that costs real time (>= 5% and
// >= 50 ms a step over three steps) is worth a line.
static void advise_on_stall(metrics *mx, const transfer_stats *st, double dt) {
    enum { WARMUP = 2, SPAN = 3 };
    if (mx->advised || st->opt_stall_seconds < 0 || mx->steps_done <= WARMUP) return;
    mx->stall_seconds += st->opt_stall_seconds, mx->stall_step_seconds += dt;
    if (++mx->stall_steps < SPAN) return;
    double frac = mx->stall_seconds / mx->stall_step_seconds;
    double per_step = mx->stall_seconds / mx->stall_steps;
    mx->stall_seconds = mx->stall_step_seconds = 0, mx->stall_steps = 0;
    if (frac < 0.05 || per_step < 0.05) return;
    mx->advised = 1;
    if (mx->job->ring_depth) { // the backward waits for slots: a head start does not help
        print_above(mx,
                    "note: the GPU idles %.0f%% of each step (%.0f ms) waiting for the optimizer "
                    "ranks, which update each group as its gradients land (the gradient ring). "
                    "More tokens a step (batch.micro_batches) give them more time per layer; more "
                    "cores or memory bandwidth for the optimizer ranks also help.\n",
                    100 * frac, 1e3 * per_step);
        return;
    }
    char layer[24];
    plan_bytes_text(layer, sizeof layer, (double)plan_device_layer_bytes(&mx->job->cfg.model));
    print_above(mx,
                "note: the GPU idles %.0f%% of each step (%.0f ms) waiting for the optimizer "
                "ranks' updates. More GPU-updated layers give them a longer head start: "
                "optimizer.device_groups is %d now, and each further layer costs %s of GPU "
                "memory. More tokens a step, or more cores or memory bandwidth for the optimizer "
                "ranks, also help.\n",
                100 * frac, 1e3 * per_step, mx->device_groups, layer);
}

static void json_number(char *out, size_t n, const char *fmt, double v) {
    if (isfinite(v))
        snprintf(out, n, fmt, v);
    else
        snprintf(out, n, "null");
}

// The step's scalars as TensorBoard shows them, in three sections: train, perf, memory.
static void write_tensorboard(metrics *mx, const step_info *s, const transfer_stats *st) {
    tb_begin(mx->tb, s->step + 1);
    tb_scalar(mx->tb, "train/loss", s->loss);
    tb_scalar(mx->tb, "train/lr", s->lr);
    tb_scalar(mx->tb, "train/grad_norm", s->norm);
    tb_scalar(mx->tb, "perf/tokens_per_s", s->tok_s);
    tb_scalar(mx->tb, "perf/tflops", s->tflops);
    tb_scalar(mx->tb, "perf/mfu", s->mfu);
    tb_scalar(mx->tb, "perf/step_s", s->dt);
    tb_scalar(mx->tb, "perf/optimizer_wait", s->wait_frac);
    if (s->busy >= 0) tb_scalar(mx->tb, "perf/busy", s->busy);
    if (st->h2d_seconds > 0)
        tb_scalar(mx->tb, "perf/h2d_GBps", st->h2d_bytes / st->h2d_seconds / 1e9);
    if (st->d2h_seconds > 0)
        tb_scalar(mx->tb, "perf/d2h_GBps", st->d2h_bytes / st->d2h_seconds / 1e9);
    if (s->mem_total > 0) tb_scalar(mx->tb, "memory/host_used_gib", s->mem_used / 1073741824.0);
    if (s->disk_read >= 0) {
        tb_scalar(mx->tb, "storage/read_GBps", s->disk_read);
        tb_scalar(mx->tb, "storage/write_GBps", s->disk_write);
    }
    if (s->moe) {
        tb_scalar(mx->tb, "moe/aux_loss", s->aux);
        tb_scalar(mx->tb, "moe/load_max_over_mean", s->worst);
        tb_scalar(mx->tb, "moe/idle_experts", s->idle);
    }
    tb_end(mx->tb);
}

void metrics_step_end(metrics *mx, int64_t step, double loss, const step_costs *costs) {
    if (!mx->jsonl) return;
    const mt_config *c = &mx->job->cfg;
    double now = mx->step_stop;
    step_info s = {.step = step, .loss = loss, .mem_used = -1, .mem_total = -1};
    s.dt = now - mx->step_start;
    double wait = costs->opt_wait_seconds;
    transfer_stats st = costs->transfers;
    // On the GPU the host runs ahead of the compute stream, so its own wait on the optimizers
    // overstates what they cost: the compute stream's idle time during the waits is the cost.
    s.wait_frac = s.dt <= 0                   ? 0
                  : st.opt_stall_seconds >= 0 ? st.opt_stall_seconds / s.dt
                                              : wait / s.dt;
    s.busy = st.compute_busy_seconds >= 0 && s.dt > 0 ? st.compute_busy_seconds / s.dt : -1;
    s.tok_s = mx->tokens_per_step / s.dt, s.norm = sqrt(costs->grad_sumsq);
    s.tflops = s.tok_s * mx->flops_per_token / 1e12;
    s.mfu = s.tok_s * mx->flops_per_token / mx->peak_flops;
    s.lr = lr_at_step(c, (int)step);
    s.disk_read = st.disk_read_bytes >= 0 && s.dt > 0 ? st.disk_read_bytes / s.dt / 1e9 : -1;
    s.disk_write = st.disk_write_bytes >= 0 && s.dt > 0 ? st.disk_write_bytes / s.dt / 1e9 : -1;
    if ((s.moe = costs->moe_load != NULL)) {
        s.aux = costs->aux_loss;
        moe_load_summary(&c->model, costs->moe_load, &s.worst, &s.idle);
    }
    mx->steps_done++;
    mx->last_step_s = s.dt;
    s.eta = (now - mx->run_start) / mx->steps_done * (mx->job->end_step - step - 1);
    node_memory(&s.mem_used, &s.mem_total);
    if (mx->tty) {
        build_live(mx, &s);
        live_draw(mx);
    } else {
        print_plain(mx, &s);
    }
    char loss_text[32], norm_text[32]; // JSON has no NaN or Infinity: null stands for them
    json_number(loss_text, sizeof loss_text, "%.17g", loss);
    json_number(norm_text, sizeof norm_text, "%.9g", s.norm);
    fprintf(mx->jsonl,
            "{\"step\":%lld,\"loss\":%s,\"lr\":%.9g,\"grad_norm\":%s,\"tokens_per_s\":%.1f,"
            "\"step_s\":%.6f,\"opt_wait_s\":%.6f,\"tflops\":%.4f,\"mfu\":%.5f,\"targets\":%lld",
            (long long)step + 1, loss_text, s.lr, norm_text, s.tok_s, s.dt, wait, s.tflops, s.mfu,
            (long long)costs->targets);
    if (s.moe) moe_load_json(mx->jsonl, &c->model, costs->aux_loss, costs->moe_load);
    if (!isfinite(s.norm) && mx->job->ring_depth) // half applied: the job ends, unsaved
        fprintf(mx->jsonl, ",\"ended_job\":true");
    else if (!isfinite(s.norm)) // no weight or moment changed (optimizer.max_bad_steps)
        fprintf(mx->jsonl, ",\"skipped\":true,\"skipped_steps\":%d", mx->job->skipped_steps);
    if (s.mem_total > 0) fprintf(mx->jsonl, ",\"node_mem_used\":%.0f", s.mem_used);
    write_transfer_stats(mx, st, s.dt);
    fputs("}\n", mx->jsonl);
    line_out(mx);
    write_tensorboard(mx, &s, &st);
    advise_on_stall(mx, &st, s.dt);
}

void metrics_eval(metrics *mx, int64_t step, double loss) {
    if (!mx->jsonl) return;
    print_above(mx, "eval at step %lld | val loss %.4f\n", (long long)step, loss);
    char loss_text[32];
    json_number(loss_text, sizeof loss_text, "%.17g", loss);
    fprintf(mx->jsonl, "{\"step\":%lld,\"eval_loss\":%s}\n", (long long)step, loss_text);
    line_out(mx);
    tb_begin(mx->tb, step);
    tb_scalar(mx->tb, "eval/loss", loss);
    tb_end(mx->tb);
}

void metrics_sample(metrics *mx, const char *text) {
    if (!mx->jsonl) return;
    print_above(mx, "sample after step %d:\n----\n%s\n----\n", mx->job->end_step, text);
}

void metrics_close(metrics *mx) {
    if (!mx->jsonl) return;
    if (mx->live_shown) fputc('\n', stdout); // leave the last live line on the screen
    mx->live_shown = 0;
    fflush(stdout);
    fclose(mx->jsonl);
    free(mx->line);
    SYS_CHECK(close(mx->fd));
    mx->jsonl = NULL;
    tb_close(mx->tb);
    mx->tb = NULL;
}
