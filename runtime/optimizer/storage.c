#include "runtime/optimizer/storage.h"
#include "kernels/bf16.h"
#include "runtime/base/base.h"
#include "runtime/model/model.h"
#include "shm/syscheck.h"
#include <fcntl.h>
#include <liburing.h>
#include <numa.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define ALIGN MT_STORAGE_ALIGN  // O_DIRECT: offsets, lengths and buffers on block multiples
#define CHUNK ((size_t)4 << 20) // one request; several in flight keep a drive's queue full
#define QUEUE 64
#define WINDOW MT_STORAGE_WINDOW

static uint64_t round_up(uint64_t x) {
    return (x + ALIGN - 1) / ALIGN * ALIGN;
}

// The tier's piece, model_state_piece(): one rule for the files, the regions and the plan.
size_t storage_piece(void) {
    return (size_t)model_state_piece();
}

// Piece k of n elements: [k * P, k * P + piece_len(n, k)).
static uint64_t piece_len(uint64_t n, int k) {
    uint64_t at = (uint64_t)k * storage_piece();
    return n - at < storage_piece() ? n - at : storage_piece();
}

int storage_pieces(uint64_t n) {
    return (int)((n + storage_piece() - 1) / storage_piece());
}

// One file: per group, `arrays` arrays of array_bytes[g] (each rounded to ALIGN) at offset[g].
// The rank works on elements [first[g], first[g] + count[g]) of each array, a piece at a time:
// a window's buffer holds one piece of each array, `stride` bytes apart.
typedef struct {
    int fd, arrays, elem;
    char path[MT_PATH_MAX];
    const char *what; // for messages: "gradients", "Adam moments"
    uint64_t offset[SHM_MAX_GROUPS], array_bytes[SHM_MAX_GROUPS], bytes, stride;
    uint64_t first[SHM_MAX_GROUPS], count[SHM_MAX_GROUPS];
} tier_file;

// Where piece k of group g lies: `bytes` from `off` in each array (ALIGN-rounded), its first
// element `skip` bytes into them.
typedef struct {
    uint64_t off, bytes, skip;
} span;

static span span_of(const tier_file *f, int g, int k) {
    uint64_t s = (f->first[g] + (uint64_t)k * storage_piece()) * f->elem;
    uint64_t end = s + piece_len(f->count[g], k) * f->elem, a0 = s / ALIGN * ALIGN;
    return (span){f->offset[g] + a0, round_up(end) - a0, s - a0};
}

// A piece: k of group g.
typedef struct {
    int g, k;
} item;

// A pass over one file's pieces in a fixed order, WINDOW buffers deep: position p of the order
// uses buffer p % WINDOW. Pieces may be taken out of order within the window; `low` is the first
// position not given back yet, and no read runs more than WINDOW positions past it.
typedef struct {
    tier_file *file;
    int writes_back;
    char *buf[WINDOW];
    int pending[WINDOW]; // requests in flight into or out of each buffer
    item *items;         // the pass's order, n of them (room for every piece the rank updates)
    unsigned char *given;
    int n, fetched, low, current;
} window;

struct storage {
    mt_job *job;
    int shard, step;
    // tests (-1: none): MT_TEST_STORAGE_FULL_AT_STEP's, and MT_TEST_STORAGE_KILL_AT_STEP's
    int full_at_step, kill_at_step;
    int n_pieces; // every piece of the groups this rank updates
    struct io_uring ring;
    int in_flight;
    // [0] reads, [1] writes: requests in flight, since when, and the time with any in flight and
    // the bytes moved: the tier's own rate (MT_STORAGE_INFO=1 prints it at the end)
    int moving[2];
    double since[2], busy[2], bytes[2];
    tier_file grads, moments;
    window grads_win, moments_win;
    // storage.master: the bf16 copy of the weights (shard_copy_offset's layout), written a
    // piece at a time from copy_buf; bounce: one piece of fp32, for the master's moves
    tier_file copy;
    bf16 *copy_buf;
    char *bounce;
    int copy_pending;
};

// ---- files ----

// Creates the file (O_EXCL, 0600, O_DIRECT), gives it its size and unlinks its name.
static void file_create(storage *s, tier_file *f, const char *suffix) {
    mt_job *job = s->job;
    // A random part: storage.dir may be writable by others, who can read the job id in ps.
    char secret[33];
    mt_random_hex(secret, 16);
    snprintf(f->path, sizeof f->path, "%s/mtc-%s-n%d-s%d-%s.%s", job->cfg.storage_dir, job->job_id,
             job->node, s->shard, secret, suffix);
    f->fd = open(f->path, O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (f->fd < 0 && errno == EEXIST) mt_refuse_taken("storage.dir: ", f->path);
    if (f->fd < 0 && errno == EINVAL)
        mt_die("storage.dir: %s: the filesystem does not support O_DIRECT", f->path);
    if (f->fd < 0) mt_die("storage.dir: %s: %s", f->path, strerror(errno));
    int rc = posix_fallocate(f->fd, 0, (off_t)f->bytes);
    if (rc == EOPNOTSUPP || rc == EINVAL) rc = ftruncate(f->fd, (off_t)f->bytes) ? errno : 0;
    SYS_CHECK(unlink(f->path));
    if (rc)
        mt_die("storage.dir: %s: no room for this rank's %s (%.2f GiB): %s", job->cfg.storage_dir,
               f->what, (double)f->bytes / (1 << 30), strerror(rc));
}

// The layout: `arrays` arrays of elem * n[g] bytes for each group the optimizer ranks update, of
// which the rank updates [lo[g], lo[g] + part[g]) (lo NULL: from 0). A window's buffer holds the
// largest piece, and an ALIGN more where a piece may start inside a block.
static void file_layout(storage *s, tier_file *f, const uint64_t *n, const uint64_t *lo,
                        const uint64_t *part, int elem, int arrays) {
    uint64_t most = 0;
    f->arrays = arrays, f->elem = elem;
    for (int g = s->job->device_groups; g < s->job->n_groups; g++) {
        f->offset[g] = f->bytes;
        f->array_bytes[g] = round_up(n[g] * (uint64_t)elem);
        f->bytes += arrays * f->array_bytes[g];
        f->first[g] = lo ? lo[g] : 0, f->count[g] = part[g];
        if (piece_len(part[g], 0) > most) most = piece_len(part[g], 0);
    }
    // plan.c's tier_rank counts the pages a pass touches: in each buffer its largest piece's
    f->stride = round_up((most ? most : 1) * (uint64_t)elem) + (lo ? ALIGN : 0);
    if (!f->bytes) f->bytes = ALIGN;
}

static char *alloc_local(size_t bytes) {
    char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) mt_die("out of memory: the storage window (%zu MiB)", bytes >> 20);
    if (numa_available() >= 0) numa_setlocal_memory(p, bytes);
    return p;
}

// ---- requests ----

static void fail(storage *s, const tier_file *f, int writing, int g, int err) {
    mt_die("storage.dir: %s group %d's %s %s %s failed: %s%s", writing ? "writing" : "reading", g,
           f->what, writing ? "to" : "from", s->job->cfg.storage_dir, strerror(err),
           err == ENOSPC || err == EDQUOT ? " (the disk is full)" : "");
}

// A request's user data: the buffer's counter, and what to say when it fails.
typedef struct {
    int *pending;
    const tier_file *file;
    int writing, group;
    unsigned len;
} request;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void complete(storage *s, struct io_uring_cqe *cqe) {
    request *r = io_uring_cqe_get_data(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(&s->ring, cqe);
    if (r->writing && s->full_at_step >= 0 && s->step == s->full_at_step)
        res = -ENOSPC; // tests: a disk that fills
    if (res < 0) fail(s, r->file, r->writing, r->group, -res);
    if ((unsigned)res != r->len) fail(s, r->file, r->writing, r->group, EIO);
    (*r->pending)--;
    s->in_flight--;
    s->bytes[r->writing] += r->len;
    job_control_block(s->job, s->shard)->tier_bytes[r->writing] = s->bytes[r->writing];
    if (--s->moving[r->writing] == 0) s->busy[r->writing] += now_s() - s->since[r->writing];
    free(r);
}

static void reap(storage *s, int wait) {
    struct io_uring_cqe *cqe;
    int rc;
    while ((rc = wait ? io_uring_wait_cqe(&s->ring, &cqe) : io_uring_peek_cqe(&s->ring, &cqe)) ==
           0) {
        complete(s, cqe);
        wait = 0;
    }
    if (rc < 0 && rc != -EAGAIN && rc != -EINTR) mt_die("io_uring: %s", strerror(-rc));
}

static void wait_for(storage *s, const int *pending) {
    io_uring_submit(&s->ring);
    while (*pending > 0) reap(s, 1);
}

// bytes at off of f, in requests of CHUNK, counted in *pending.
static void queue_io(storage *s, const tier_file *f, int writing, int g, char *buf, uint64_t bytes,
                     uint64_t off, int *pending) {
    for (uint64_t at = 0; at < bytes; at += CHUNK) {
        struct io_uring_sqe *sqe;
        while (!(sqe = io_uring_get_sqe(&s->ring))) {
            io_uring_submit(&s->ring);
            reap(s, s->in_flight >= QUEUE);
        }
        request *r = malloc(sizeof *r);
        if (!r) mt_die("out of memory");
        *r = (request){pending, f, writing, g, (unsigned)(bytes - at < CHUNK ? bytes - at : CHUNK)};
        if (writing)
            io_uring_prep_write(sqe, f->fd, buf + at, r->len, off + at);
        else
            io_uring_prep_read(sqe, f->fd, buf + at, r->len, off + at);
        io_uring_sqe_set_data(sqe, r);
        (*pending)++, s->in_flight++;
        if (s->moving[writing]++ == 0) s->since[writing] = now_s();
    }
    io_uring_submit(&s->ring);
}

// Piece `it` of every array of the window's file, between buffer b and the disk.
static void move_piece(storage *s, window *w, item it, int b, int writing) {
    const tier_file *f = w->file;
    span sp = span_of(f, it.g, it.k);
    for (int a = 0; a < f->arrays; a++)
        queue_io(s, f, writing, it.g, w->buf[b] + a * f->stride, sp.bytes,
                 sp.off + a * f->array_bytes[it.g], &w->pending[b]);
}

// ---- windows ----

static void window_init(storage *s, window *w, tier_file *f, int writes_back) {
    w->file = f, w->writes_back = writes_back;
    for (int i = 0; i < WINDOW; i++) w->buf[i] = alloc_local(f->arrays * f->stride);
    w->items = malloc((size_t)(s->n_pieces ? s->n_pieces : 1) * sizeof *w->items);
    w->given = malloc((size_t)(s->n_pieces ? s->n_pieces : 1));
    if (!w->items || !w->given) mt_die("out of memory");
}

// Reads ahead into every buffer that is free, in order; a buffer still writing stops it.
static void pump(storage *s, window *w) {
    reap(s, 0);
    while (w->fetched < w->n && w->fetched < w->low + WINDOW) {
        int b = w->fetched % WINDOW;
        if (w->pending[b]) break;
        move_piece(s, w, w->items[w->fetched], b, 0);
        w->fetched++;
    }
}

// The pass: every piece of each group of `order` in turn.
static void window_begin(storage *s, window *w, const int *order, int n) {
    w->n = w->fetched = w->low = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < storage_pieces(w->file->count[order[i]]); k++) {
            if (w->n == s->n_pieces) mt_die("storage: a pass over more pieces than the rank has");
            w->items[w->n++] = (item){order[i], k};
        }
    memset(w->given, 0, (size_t)w->n);
    pump(s, w);
}

static char *window_take(storage *s, window *w, int g, int k) {
    int p = w->low;
    while (p < w->n && p < w->low + WINDOW &&
           (w->given[p] || w->items[p].g != g || w->items[p].k != k))
        p++;
    if (p >= w->n || p >= w->low + WINDOW)
        mt_die("storage: group %d's piece %d's turn is not within the next %d pieces", g, k,
               WINDOW);
    int b = p % WINDOW;
    while (w->fetched <= p) { // its buffer was still writing when the others went
        wait_for(s, &w->pending[b]);
        pump(s, w);
    }
    wait_for(s, &w->pending[b]);
    w->current = p;
    return w->buf[b] + span_of(w->file, g, k).skip;
}

static void window_give(storage *s, window *w) {
    int p = w->current, b = p % WINDOW;
    if (w->writes_back) move_piece(s, w, w->items[p], b, 1);
    if (s->kill_at_step >= 0 && s->step == s->kill_at_step &&
        s->moving[1] > 0) // tests: a kill -9 among writes
        SYS_CHECK(kill(getpid(), SIGKILL));
    w->given[p] = 1;
    while (w->low < w->n && w->given[w->low]) w->low++;
    pump(s, w);
}

static void window_end(storage *s, window *w) {
    for (int b = 0; b < WINDOW; b++) wait_for(s, &w->pending[b]);
    w->n = w->fetched = w->low = 0;
}

static void window_free(window *w) {
    for (int b = 0; b < WINDOW; b++)
        SYS_CHECK(munmap(w->buf[b], w->file->arrays * w->file->stride));
    free(w->items), free(w->given);
}

// ---- the tier ----

// The copy has no name: the compute rank opens it through /proc/<pid>/fd/<fd> (same node).
static void copy_open(storage *s) {
    tier_file *f = &s->copy;
    f->what = "bf16 copy of the weights";
    f->bytes = shard_copy_bytes(&s->job->layouts[s->shard]);
    file_create(s, f, "copy");
    s->copy_buf = (bf16 *)alloc_local(round_up(storage_piece() * 2));
    s->bounce = alloc_local(round_up(storage_piece() * sizeof(float)));
    shm_control_block *cb = job_control_block(s->job, s->shard);
    cb->copy_fd = f->fd;
    cb->tier_pid = (int32_t)getpid();
}

// The gradients: the compute rank writes them into this file (through /proc/<pid>/fd/<fd>, as
// it reads the copy), at shard_grads_file_offset's places; the rank reads its part back.
static void grads_open(storage *s, const uint64_t *part_lo, const uint64_t *part_n) {
    const shard_layout *lay = &s->job->layouts[s->shard];
    tier_file *f = &s->grads;
    f->what = "gradients";
    file_layout(s, f, lay->len, part_lo, part_n, s->job->grad_bytes, 1);
    for (int g = s->job->device_groups; g < s->job->n_groups; g++)
        if (f->offset[g] != shard_grads_file_offset(lay, g))
            mt_die("storage: group %d's gradients: the file's layout and the compute rank's differ",
                   g);
    file_create(s, f, "grads");
    window_init(s, &s->grads_win, f, 0);
    shm_control_block *cb = job_control_block(s->job, s->shard);
    cb->grads_fd = f->fd;
    cb->tier_pid = (int32_t)getpid();
}

storage *storage_open(mt_job *job, int shard, const uint64_t *part_lo, const uint64_t *part_n) {
    const mt_config *c = &job->cfg;
    if (!c->storage_grads && !c->storage_adam) return NULL;
    storage *s = calloc(1, sizeof *s);
    if (!s) mt_die("out of memory");
    s->job = job, s->shard = shard, s->full_at_step = s->kill_at_step = s->step = -1;
    const char *full = getenv("MT_TEST_STORAGE_FULL_AT_STEP"); // 1-based, as the progress shows
    const char *kill9 = getenv("MT_TEST_STORAGE_KILL_AT_STEP");
    if (full && shard == 0 && job->node == 0) s->full_at_step = atoi(full) - 1;
    if (kill9 && shard == 0 && job->node == 0) s->kill_at_step = atoi(kill9) - 1;
    for (int g = job->device_groups; g < job->n_groups; g++)
        s->n_pieces += storage_pieces(part_n[g]);
    int rc = io_uring_queue_init(QUEUE, &s->ring, 0);
    if (rc < 0) mt_die("storage: io_uring_queue_init: %s", strerror(-rc));
    s->grads.fd = s->moments.fd = s->copy.fd = -1;
    if (c->storage_grads) grads_open(s, part_lo, part_n); // the shard's slice; the rank's part
    if (c->storage_adam) { // fresh moments are zeros: the unwritten blocks of a new file read so
        // storage.master: the master is a third array beside m and v, so that a piece's master,
        // m and v come in one pass of the window
        s->moments.what = c->storage_master ? "master and Adam moments" : "Adam moments";
        file_layout(s, &s->moments, part_n, NULL, part_n, sizeof(float), c->storage_master ? 3 : 2);
        file_create(s, &s->moments, "adam");
        window_init(s, &s->moments_win, &s->moments, 1);
    }
    if (c->storage_master) copy_open(s);
    return s;
}

void storage_close(storage *s) {
    if (!s) return;
    if (getenv("MT_STORAGE_INFO"))
        fprintf(stderr,
                "storage: optimizer %d: %d pieces of at most %zu floats; read %.2f GiB in %.2f s "
                "busy (%.2f GB/s), wrote %.2f GiB in %.2f s busy (%.2f GB/s)\n",
                s->shard, s->n_pieces, storage_piece(), s->bytes[0] / (1 << 30), s->busy[0],
                s->busy[0] > 0 ? s->bytes[0] / s->busy[0] / 1e9 : 0, s->bytes[1] / (1 << 30),
                s->busy[1], s->busy[1] > 0 ? s->bytes[1] / s->busy[1] / 1e9 : 0);
    tier_file *files[2] = {&s->grads, &s->moments};
    window *wins[2] = {&s->grads_win, &s->moments_win};
    for (int i = 0; i < 2; i++) {
        if (files[i]->fd < 0) continue;
        window_free(wins[i]);
        SYS_CHECK(close(files[i]->fd));
    }
    if (s->copy.fd >= 0) {
        storage_copy_wait(s);
        SYS_CHECK(munmap(s->copy_buf, round_up(storage_piece() * 2)));
        SYS_CHECK(munmap(s->bounce, round_up(storage_piece() * sizeof(float))));
        SYS_CHECK(close(s->copy.fd));
    }
    io_uring_queue_exit(&s->ring);
    free(s);
}

void storage_begin_moments(storage *s, const int *order, int n) {
    if (s && s->moments.fd >= 0) window_begin(s, &s->moments_win, order, n);
}

void storage_begin_grads(storage *s, const int *order, int n) {
    if (s && s->grads.fd >= 0) window_begin(s, &s->grads_win, order, n);
}

float *storage_take_moments(storage *s, int g, int k) {
    if (!s || s->moments.fd < 0) return NULL;
    return (float *)window_take(s, &s->moments_win, g, k);
}

float *storage_v_of(storage *s, float *m) {
    return (float *)((char *)m + s->moments.stride);
}

int storage_has_master(const storage *s) {
    return s && s->copy.fd >= 0;
}

float *storage_master_of(storage *s, float *m) {
    return (float *)((char *)m + 2 * s->moments.stride);
}

// Piece k of group g's master, between `buf` and the moments file's third array. Pieces start
// on block boundaries there (their first element is a multiple of the piece, itself of a
// block's floats), so one bounce buffer, zeroed past the piece, carries them.
static void move_master(storage *s, int g, int k, float *buf, int writing) {
    tier_file *f = &s->moments;
    span sp = span_of(f, g, k);
    size_t n = piece_len(f->count[g], k);
    int pending = 0;
    if (writing) memset(s->bounce, 0, sp.bytes), memcpy(s->bounce, buf, n * sizeof(float));
    queue_io(s, f, writing, g, s->bounce, sp.bytes, sp.off + 2 * f->array_bytes[g], &pending);
    wait_for(s, &pending);
    if (!writing) memcpy(buf, s->bounce, n * sizeof(float));
}

void storage_store_master(storage *s, int g, int k, const float *piece) {
    move_master(s, g, k, (float *)piece, 1);
}

void storage_load_master(storage *s, int g, int k, float *piece) {
    move_master(s, g, k, piece, 0);
}

void storage_read_master(storage *s, int g, uint64_t at, uint64_t n, float *out) {
    size_t piece = storage_piece();
    float *buf = malloc(piece * sizeof(float));
    if (!buf) mt_die("out of memory");
    for (uint64_t i = at, k, end; i < at + n; i = end) {
        k = i / piece, end = (k + 1) * piece < at + n ? (k + 1) * piece : at + n;
        storage_load_master(s, g, (int)k, buf);
        memcpy(out + (i - at), buf + (i - k * piece), (end - i) * sizeof(float));
    }
    free(buf);
}

bf16 *storage_copy_buffer(storage *s) {
    wait_for(s, &s->copy_pending); // the previous piece's write is done with it
    return s->copy_buf;
}

void storage_write_copy(storage *s, int g, int k) {
    const shard_layout *lay = &s->job->layouts[s->shard];
    uint64_t bytes = round_up(piece_len(lay->len[g], k) * 2);
    queue_io(s, &s->copy, 1, g, (char *)s->copy_buf, bytes, shard_copy_offset(lay, g, k),
             &s->copy_pending);
}

void storage_copy_wait(storage *s) {
    if (s && s->copy.fd >= 0) wait_for(s, &s->copy_pending);
}

const void *storage_take_grads(storage *s, int g, int k) {
    if (!s || s->grads.fd < 0) return NULL;
    return window_take(s, &s->grads_win, g, k);
}

void storage_give(storage *s, int step) {
    if (!s) return;
    s->step = step;
    if (s->moments.fd >= 0) window_give(s, &s->moments_win);
    if (s->grads.fd >= 0) window_give(s, &s->grads_win);
}

void storage_end(storage *s) {
    if (!s) return;
    if (s->moments.fd >= 0) window_end(s, &s->moments_win);
    if (s->grads.fd >= 0) window_end(s, &s->grads_win);
}

void storage_describe(const storage *s, int g, group_state *state) {
    if (!s || s->moments.fd < 0) return;
    state->tier_fd = s->moments.fd;
    state->tier_m = s->moments.offset[g];
    state->tier_v = s->moments.offset[g] + s->moments.array_bytes[g];
    if (storage_has_master(s)) state->tier_master = state->tier_v + s->moments.array_bytes[g];
}
