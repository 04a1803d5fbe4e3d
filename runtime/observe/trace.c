#include "runtime/observe/observe.h"
#include "runtime/base/base.h"
#include "shm/syscheck.h"
#include <limits.h>
#include <mpi.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

// Bounds the array whatever the range: 1M spans are 40 MiB; a longer range drops the rest.
#define TRACE_MAX_SPANS ((size_t)1 << 20)

typedef struct {
    trace_tag tag;
    double begin_us, end_us;
    int track;
} span;

static struct {
    int on;              // this job traces (every rank agrees: same config and steps)
    int64_t first, last; // traced steps, 0-based, inclusive
    int64_t current;     // the step now running, -1: none; only the main thread uses it
                         // (the copy streams get it in the tags of their jobs)
    int rank, world, layers;
    MPI_Comm comm;
    char dir[MT_PATH_MAX];
    span *spans;
    size_t cap;
    atomic_size_t used; // an atomic index: the main thread and the copy streams record at once
} T = {.current = -1};

double trace_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

void trace_open(const mt_config *c, const mt_job *job, int start_step, int end_step) {
    T.rank = job->rank, T.world = job->world, T.layers = c->model.layers, T.comm = job->comm;
    snprintf(T.dir, sizeof T.dir, "%s", c->checkpoint_dir);
    T.first = c->trace_steps[0] - 1, T.last = c->trace_steps[1] - 1;
    if (T.first < start_step) T.first = start_step;
    if (T.last > end_step - 1) T.last = end_step - 1;
    T.on = c->trace_steps[0] > 0 && T.first <= T.last && job_writes(job);
    if (!T.on) return;
    // Per step, rank 0 records per layer a fwd, a bwd, a gradient offload, two waits, two
    // fetches of a copy per shard (fewer than world) and up to two activation copies per
    // micro-batch, and a few spans for the embedding, the head and the step; an optimizer
    // fewer.
    size_t per_layer = 8 + 2 * (size_t)T.world + 2 * (size_t)c->micro_batches;
    size_t per_step = per_layer * ((size_t)c->model.layers + 2) + 32;
    size_t steps = (size_t)(T.last - T.first + 1);
    T.cap = steps > TRACE_MAX_SPANS / per_step ? TRACE_MAX_SPANS : steps * per_step;
    T.spans = malloc(T.cap * sizeof *T.spans);
    if (!T.spans) mt_die("trace: out of memory for %zu spans", T.cap);
    atomic_init(&T.used, 0);
}

void trace_set_step(int64_t step) {
    T.current = step;
}

int trace_active(void) {
    return T.on && T.current >= T.first && T.current <= T.last;
}

trace_tag trace_tag_of(const char *name, int arg_kind, int arg) {
    if (!trace_active()) return (trace_tag){NULL, 0, 0, -1};
    return (trace_tag){name, arg, arg_kind, T.current};
}

void trace_record(int track, trace_tag tag, double begin_us, double end_us) {
    if (!tag.name || !T.spans) return;
    size_t i = atomic_fetch_add_explicit(&T.used, 1, memory_order_relaxed);
    if (i >= T.cap) return; // counted in used: trace_finish reports the drops
    T.spans[i] = (span){tag, begin_us, end_us, track};
}

// ---- writing ----

static void span_name(const trace_tag *t, char *out, size_t n) {
    int g = t->arg;
    switch (t->arg_kind) {
    case TRACE_ARG_LAYER:
        snprintf(out, n, "%s L%d", t->name, g);
        break;
    case TRACE_ARG_STEP:
        snprintf(out, n, "%s %d", t->name, g);
        break;
    case TRACE_ARG_GROUP: // group 0 is the embedding, 1..L the layers, L+1 the head
        if (g == 0)
            snprintf(out, n, "%s embed", t->name);
        else if (g == T.layers + 1)
            snprintf(out, n, "%s head", t->name);
        else
            snprintf(out, n, "%s L%d", t->name, g - 1);
        break;
    default:
        snprintf(out, n, "%s", t->name);
    }
}

static void write_meta(FILE *f, const char *what, int tid, const char *name) {
    fprintf(f, "{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d,", what, T.rank);
    if (tid > 0) fprintf(f, "\"tid\":%d,", tid);
    fprintf(f, "\"args\":{\"name\":\"%s\"}}\n", name);
    if (tid > 0)
        fprintf(f,
                "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                "\"args\":{\"sort_index\":%d}}\n",
                T.rank, tid, tid);
}

// One JSON object per line; the merge adds the commas between them.
static void write_lines(FILE *f) {
    char name[96];
    if (T.rank == 0) {
        write_meta(f, "process_name", 0, "rank 0: compute");
        const char *tracks[] = {"compute", "h2d", "d2h", "host"};
        for (int i = 0; i < 4; i++) write_meta(f, "thread_name", TRACE_COMPUTE + i, tracks[i]);
    } else {
        snprintf(name, sizeof name, "rank %d: optimizer (shard %d)", T.rank, T.rank - 1);
        write_meta(f, "process_name", 0, name);
        snprintf(name, sizeof name, "optimizer %d", T.rank - 1);
        write_meta(f, "thread_name", TRACE_OPTIMIZER, name);
    }
    fprintf(f,
            "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,"
            "\"args\":{\"sort_index\":%d}}\n",
            T.rank, T.rank);
    size_t n = atomic_load(&T.used);
    for (size_t i = 0; i < n && i < T.cap; i++) {
        const span *s = &T.spans[i];
        span_name(&s->tag, name, sizeof name);
        double dur = s->end_us > s->begin_us ? s->end_us - s->begin_us : 0;
        fprintf(f,
                "{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                "\"args\":{\"step\":%lld}}\n",
                name, T.rank, s->track, s->begin_us, dur, (long long)s->tag.step + 1);
    }
    if (n > T.cap)
        fprintf(stderr, "trace: rank %d dropped %zu spans (its buffer holds %zu)\n", T.rank,
                n - T.cap, T.cap);
}

static void part_path(char *out, size_t n, int rank) {
    snprintf(out, n, "%s/trace.rank%d.part", T.dir, rank);
}

// Appends the part's lines to out, each after a separating comma.
static int append_part(FILE *out, const char *path) {
    FILE *in = fopen(path, "r");
    if (!in) return -1;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, in) > 0) fprintf(out, ",\n%.*s", (int)strcspn(line, "\n"), line);
    free(line);
    fclose(in);
    return 0;
}

// The optimizers' parts, once merged or when no trace.json can be written: nothing of a trace
// stays behind in pieces.
static void remove_parts(void) {
    char part[MT_PATH_MAX + 64];
    for (int r = 1; r < T.world; r++) {
        part_path(part, sizeof part, r);
        unlink(part);
    }
}

// Rank 0: its own spans, then every optimizer's part, into trace.json (via a temporary name,
// so a reader never sees half a file); the parts are removed.
static void merge(void) {
    char path[MT_PATH_MAX + 64], tmp[MT_PATH_MAX + 64], part[MT_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/trace.json", T.dir);
    snprintf(tmp, sizeof tmp, "%s/trace.json.tmp", T.dir);
    char err[MT_PATH_MAX + 256] = "";
    FILE *f = remove_stale_temp(tmp, err, sizeof err) == 0 ? fopen_nofollow(tmp, "x") : NULL;
    if (!f) {
        if (err[0])
            mt_put_line(stderr, "trace: ", err);
        else
            fprintf(stderr, "trace: cannot write %s: %s\n", mt_shown(tmp), strerror(errno));
        remove_parts();
        return;
    }
    char *mine = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&mine, &len);
    if (!m) mt_die("trace: out of memory");
    write_lines(m);
    fclose(m);
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", f);
    for (char *p = mine, *end; p && *p; p = end + 1) { // the first line has no comma before it
        end = strchr(p, '\n');
        if (!end) break;
        fprintf(f, "%s%.*s", p == mine ? "" : ",\n", (int)(end - p), p);
    }
    free(mine);
    for (int r = 1; r < T.world; r++) {
        part_path(part, sizeof part, r);
        if (append_part(f, part) < 0) fprintf(stderr, "trace: %s is missing\n", mt_shown(part));
    }
    remove_parts();
    fputs("\n]}\n", f);
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        fprintf(stderr, "trace: cannot write %s: %s\n", path, strerror(errno));
    else
        printf("trace of steps %lld..%lld: %s\n", (long long)T.first + 1, (long long)T.last + 1,
               mt_shown(path));
}

static void write_part(void) {
    char path[MT_PATH_MAX + 64];
    part_path(path, sizeof path, T.rank);
    FILE *f = fopen_nofollow(path, "w");
    if (!f) {
        fprintf(stderr, "trace: cannot write %s: %s\n", path, strerror(errno));
        return;
    }
    write_lines(f);
    if (fclose(f) != 0) fprintf(stderr, "trace: cannot write %s: %s\n", path, strerror(errno));
}

// The optimizers write their parts before the barrier and rank 0 reads them after it: the
// barrier is the only synchronization needed, and no trace data crosses the control plane.
void trace_finish(void) {
    if (!T.on) return;
    make_dirs(T.dir);
    if (T.rank != 0) write_part();
    MPI_CHECK(MPI_Barrier(T.comm));
    if (T.rank == 0) merge();
    free(T.spans);
    T.spans = NULL, T.on = 0;
}
