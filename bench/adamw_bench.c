// adamw_bench: throughput of the optimizer's AdamW (kernels/adamw.c) on this host.
//
//   adamw_bench [--params N] [--threads LIST] [--procs LIST] [--reps R] [--no-pin]
//
// N takes K/M/G suffixes (powers of 2); LIST is comma separated, "all" = every CPU of the mask.
// Sections, all on the same arrays and placement as the optimizer ranks use them (2 MiB-aligned
// mmap + MADV_HUGEPAGE, first touch by the thread that updates the chunk, threads pinned):
//  1. per path (scalar, AVX2, AVX-512) and thread count: G params/s, and the effective GB/s at
//     30 bytes/param (p, m, v read + written = 24, g read = 4, bf16 wire written = 2), next to
//     a STREAM triad (a = b + s*c, 12 bytes/element, STREAM's count) measured on the same arrays
//     with the same threads;
//  2. the streaming-store policies (none / wire / all) at the full thread count;
//  3. N optimizer processes (fork), each with threads/N threads, its own shard of N params/N,
//     its own memory, each making the optimizer ranks' call (fp32 gradients, no bf16 copy: 28
//     bytes/param); every pass starts on a barrier and lasts until its slowest process ends;
//     aggregate G params/s = N params / that time.
// Every measurement is the best of R timed passes after one warm-up pass. Machine-readable
// "RESULT ..." lines at the end are what bench/run_adamw_bench.sh tabulates.
#include "kernels/adamw.h"
#include <dirent.h>
#include <errno.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BYTES_PER_PARAM 30.0
#define RANK_BYTES_PER_PARAM 28.0 // the optimizer ranks' call: no bf16 copy
#define TRIAD_BYTES 12.0
#define MAX_LIST 64
#define HUGE_PAGE ((size_t)2 << 20)

static int cpus[CPU_SETSIZE], ncpus; // the mask's CPUs: by NUMA node, physical cores first
static int pin = 1;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static size_t parse_size(const char *s) {
    char *end;
    double x = strtod(s, &end);
    switch (*end) {
    case 'k':
    case 'K':
        x *= 1 << 10;
        break;
    case 'm':
    case 'M':
        x *= 1 << 20;
        break;
    case 'g':
    case 'G':
        x *= 1 << 30;
        break;
    }
    return (size_t)x;
}

static int parse_list(const char *s, int *out, int all) {
    int n = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok && n < MAX_LIST; tok = strtok(NULL, ","))
        out[n++] = !strcmp(tok, "all") ? all : atoi(tok);
    return n;
}

static int sibling_index(int cpu) { // 0 for the first hardware thread of a core, 1.. for others
    char path[128], buf[256];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", cpu);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int first = cpu;
    if (fgets(buf, sizeof buf, f)) first = atoi(buf);
    fclose(f);
    return cpu == first ? 0 : 1;
}

// NUMA topology from sysfs (no libnuma needed): cpuN/nodeM links; 0 where there are none.
static int cpu_node(int cpu) {
    char path[96];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d", cpu);
    DIR *d = opendir(path);
    int node = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (!strncmp(e->d_name, "node", 4) && e->d_name[4] >= '0' && e->d_name[4] <= '9')
            node = atoi(e->d_name + 4);
    if (d) closedir(d);
    return node;
}

static int count_nodes(void) {
    DIR *d = opendir("/sys/devices/system/node");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += !strncmp(e->d_name, "node", 4) && e->d_name[4] >= '0' && e->d_name[4] <= '9';
    if (d) closedir(d);
    return n > 0 ? n : 1;
}

static int cpu_order(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    int nx = cpu_node(x), ny = cpu_node(y), sx = sibling_index(x), sy = sibling_index(y);
    if (nx != ny) return nx - ny;
    if (sx != sy) return sx - sy;
    return x - y;
}

static void find_cpus(void) {
    cpu_set_t mask;
    if (sched_getaffinity(0, sizeof mask, &mask) != 0) {
        perror("sched_getaffinity");
        exit(1);
    }
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &mask)) cpus[ncpus++] = c;
    qsort(cpus, ncpus, sizeof(int), cpu_order);
}

// Thread t of a team of `threads` to cpus[first + t], when they fit; no pinning otherwise.
static void pin_team(int threads, int first) {
    if (!pin || first + threads > ncpus || first < 0) return;
#pragma omp parallel num_threads(threads)
    {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[first + omp_get_thread_num()], &one);
        pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    }
}

// As runtime/optimizer/optimizer.c allocates master, m and v.
static void *alloc_huge(size_t bytes) {
    bytes = (bytes + 4095) & ~(size_t)4095;
    char *raw =
        mmap(NULL, bytes + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        fprintf(stderr, "adamw_bench: mmap of %zu MiB: %s\n", bytes >> 20, strerror(errno));
        exit(1);
    }
    char *p = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (p > raw) munmap(raw, (size_t)(p - raw));
    if ((size_t)(p - raw) < HUGE_PAGE) munmap(p + bytes, HUGE_PAGE - (size_t)(p - raw));
    madvise(p, bytes, MADV_HUGEPAGE);
    return p;
}
static void free_huge(void *p, size_t bytes) {
    munmap(p, (bytes + 4095) & ~(size_t)4095);
}

static long anon_huge_kib(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "AnonHugePages:", 14)) kib = atol(line + 14);
    if (f) fclose(f);
    return kib;
}

typedef struct {
    size_t n;
    float *p, *m, *v, *g;
    bf16 *w;
} arrays;

// Allocated and first-touched with the chunks of adamw_update (via adamw_first_touch), then
// filled with training-like values (no subnormals: they would measure microcode assists).
static void arrays_init(arrays *a, size_t n) {
    a->n = n;
    a->p = alloc_huge(n * 4), a->m = alloc_huge(n * 4), a->v = alloc_huge(n * 4);
    a->g = alloc_huge(n * 4), a->w = alloc_huge(n * 2);
    adamw_first_touch(a->p, n), adamw_first_touch(a->m, n), adamw_first_touch(a->v, n);
    adamw_first_touch(a->g, n);
    int threads = adamw_threads_for(n, omp_get_max_threads());
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        size_t lo, hi;
        adamw_chunk(a->p, n, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        unsigned s = 12345u + (unsigned)lo;
        for (size_t i = lo; i < hi; i++) {
            s = s * 1664525u + 1013904223u;
            float u = (s >> 8) * (1.0f / 16777216.0f);
            a->p[i] = u - 0.5f, a->m[i] = (u - 0.5f) * 1e-3f, a->v[i] = u * 1e-6f + 1e-8f;
            a->g[i] = (0.5f - u) * 2e-3f, a->w[i] = 0;
        }
    }
}
static void arrays_free(arrays *a) {
    free_huge(a->p, a->n * 4), free_huge(a->m, a->n * 4), free_huge(a->v, a->n * 4);
    free_huge(a->g, a->n * 4), free_huge(a->w, a->n * 2);
}

static double time_adamw(arrays *a, adamw_isa isa, adamw_nt nt, int reps) {
    adamw_params hp = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f};
    double best = 1e30;
    for (int r = 0; r <= reps; r++) { // r = 0: warm-up
        hp.step = r + 1;
        double t0 = now();
        adamw_update_ex(a->p, a->m, a->v, a->w, a->g, a->n, &hp, isa, nt);
        double t = now() - t0;
        if (r > 0 && t < best) best = t;
    }
    return best;
}

// The optimizer ranks' own calls since issue 13: no bf16 copy (the GPU rounds the streamed
// master), gradients fp32 (28 B/param) or bf16 (26 B/param). Default path and store policy.
static double time_update(arrays *a, const bf16 *g16, int reps) {
    adamw_params hp = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f};
    double best = 1e30;
    for (int r = 0; r <= reps; r++) {
        hp.step = r + 1;
        double t0 = now();
        if (g16)
            adamw_update_bf16_grads(a->p, a->m, a->v, NULL, g16, a->n, &hp);
        else
            adamw_update(a->p, a->m, a->v, NULL, a->g, a->n, &hp);
        double t = now() - t0;
        if (r > 0 && t < best) best = t;
    }
    return best;
}

static void optimizer_path(arrays *a, int threads, int reps, double triad_gbs) {
    bf16 *g16 = alloc_huge(a->n * 2);
    for (size_t i = 0; i < a->n; i++) g16[i] = bf16_from_float(a->g[i]);
    double t32 = time_update(a, NULL, reps), t16 = time_update(a, g16, reps);
    printf("  optimizer path at %d threads (no bf16 copy): fp32 grads %.3f G params/s (%.1f GB/s "
           "at 28 B), bf16 grads %.3f (%.1f GB/s at 26 B); triad %.1f GB/s\n",
           threads, a->n / t32 * 1e-9, a->n * 28.0 / t32 * 1e-9, a->n / t16 * 1e-9,
           a->n * 26.0 / t16 * 1e-9, triad_gbs);
    printf("RESULT section=path grads=fp32 threads=%d params=%zu seconds=%.6f gparams=%.4f "
           "gbs=%.2f\n",
           threads, a->n, t32, a->n / t32 * 1e-9, a->n * 28.0 / t32 * 1e-9);
    printf("RESULT section=path grads=bf16 threads=%d params=%zu seconds=%.6f gparams=%.4f "
           "gbs=%.2f\n",
           threads, a->n, t16, a->n / t16 * 1e-9, a->n * 26.0 / t16 * 1e-9);
    free_huge(g16, a->n * 2);
}

// STREAM triad a = b + s*c on three of the same arrays, the same threads and chunks; once with
// plain stores (what gcc makes of STREAM's loop) and once with streaming stores (what STREAM
// builds with icc do, and what published STREAM figures usually are). The better of the two is
// the ceiling the AdamW figures are compared with.
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
__attribute__((target("avx2"))) static void triad_streaming(float *x, const float *y,
                                                            const float *z, float s, size_t n) {
    size_t i = 0;
    for (; i < n && ((uintptr_t)(x + i) & 31); i++) x[i] = y[i] + s * z[i];
    __m256 S = _mm256_set1_ps(s);
    for (; i + 8 <= n; i += 8)
        _mm256_stream_ps(
            x + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(S, _mm256_loadu_ps(z + i))));
    for (; i < n; i++) x[i] = y[i] + s * z[i];
    _mm_sfence();
}
static int have_streaming_triad(void) {
    return __builtin_cpu_supports("avx2");
}
#else
static void triad_streaming(float *x, const float *y, const float *z, float s, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = y[i] + s * z[i];
}
static int have_streaming_triad(void) {
    return 0;
}
#endif

static void triad_plain(float *restrict x, const float *restrict y, const float *restrict z,
                        float s, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = y[i] + s * z[i];
}

static double time_triad(arrays *a, int reps, int streaming) {
    float *x = a->p, *y = a->m, *z = a->v, s = 0.5f;
    size_t n = a->n;
    double best = 1e30;
    int threads = adamw_threads_for(n, omp_get_max_threads());
    for (int r = 0; r <= reps; r++) {
        double t0 = now();
#pragma omp parallel num_threads(threads) if (threads > 1)
        {
            size_t lo, hi;
            adamw_chunk(x, n, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
            if (streaming)
                triad_streaming(x + lo, y + lo, z + lo, s, hi - lo);
            else
                triad_plain(x + lo, y + lo, z + lo, s, hi - lo);
        }
        double t = now() - t0;
        if (r > 0 && t < best) best = t;
    }
    return best;
}

// ---- results, printed at the end ----
typedef struct {
    char section[8];
    adamw_isa isa;
    adamw_nt nt;
    int procs, threads;
    size_t params;
    double seconds, triad_gbs, bytes_per_param;
} result;
static result results[512];
static int nresults;
static struct {
    int threads;
    double plain, streaming;
} triads[MAX_LIST];
static int ntriads;

static void add_triad(int threads, double plain, double streaming) {
    if (ntriads < MAX_LIST)
        triads[ntriads].threads = threads, triads[ntriads].plain = plain,
        triads[ntriads++].streaming = streaming;
}

static void add_result(const char *section, adamw_isa isa, adamw_nt nt, int procs, int threads,
                       size_t params, double seconds, double triad_gbs) {
    if (nresults == (int)(sizeof results / sizeof results[0])) return;
    result *r = &results[nresults++];
    snprintf(r->section, sizeof r->section, "%s", section);
    r->isa = isa, r->nt = nt, r->procs = procs, r->threads = threads, r->params = params;
    r->seconds = seconds, r->triad_gbs = triad_gbs;
    r->bytes_per_param = strcmp(section, "procs") == 0 ? RANK_BYTES_PER_PARAM : BYTES_PER_PARAM;
}

// ---- N processes ----
#define MAX_PROCS 64
#define MAX_PROC_REPS 64
typedef struct {
    pthread_barrier_t start;
    double seconds[MAX_PROCS][MAX_PROC_REPS];
    long huge_kib[MAX_PROCS];
} shared_block;

static void child(shared_block *sh, int j, int procs, size_t total, int threads, int reps,
                  adamw_isa isa, adamw_nt nt) {
    size_t lo = total * j / procs / 64 * 64,
           hi = j == procs - 1 ? total : total * (j + 1) / procs / 64 * 64;
    omp_set_num_threads(threads);
    pin_team(threads, procs * threads <= ncpus ? j * threads : -1); // all pinned, or none
    arrays a;
    arrays_init(&a, hi - lo);
    adamw_params hp = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f};
    adamw_update_ex(a.p, a.m, a.v, NULL, a.g, a.n, &hp, isa, nt); // warm-up
    sh->huge_kib[j] = anon_huge_kib();
    for (int r = 0; r < reps && r < MAX_PROC_REPS; r++) { // every pass starts together
        hp.step = r + 2;
        pthread_barrier_wait(&sh->start);
        double t0 = now();
        adamw_update_ex(a.p, a.m, a.v, NULL, a.g, a.n, &hp, isa, nt);
        sh->seconds[j][r] = now() - t0;
    }
    arrays_free(&a);
}

// Must run before this process uses OpenMP: libgomp's thread pool does not survive fork().
static void process_scaling(const int *procs_list, int nprocs, size_t n, int threads_total,
                            int reps, adamw_isa isa, adamw_nt nt) {
    for (int k = 0; k < nprocs; k++) {
        int procs = procs_list[k];
        if (procs < 1 || procs > MAX_PROCS) continue;
        int threads = threads_total / procs > 0 ? threads_total / procs : 1;
        shared_block *sh =
            mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        pthread_barrierattr_t attr;
        pthread_barrierattr_init(&attr);
        pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
        pthread_barrier_init(&sh->start, &attr, procs);
        for (int j = 0; j < procs; j++) {
            pid_t pid = fork();
            if (pid == 0) {
                child(sh, j, procs, n, threads, reps, isa, nt);
                _exit(0);
            }
            if (pid < 0) {
                perror("fork");
                exit(1);
            }
        }
        int ok = 1, status;
        for (int j = 0; j < procs; j++) {
            wait(&status);
            ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
        }
        if (!ok) {
            fprintf(stderr, "adamw_bench: a child process failed\n");
            exit(1);
        }
        double slowest = 1e30; // the best pass, where a pass lasts as long as its slowest process
        long huge = 0;
        for (int r = 0; r < reps && r < MAX_PROC_REPS; r++) {
            double pass = 0;
            for (int j = 0; j < procs; j++)
                pass = sh->seconds[j][r] > pass ? sh->seconds[j][r] : pass;
            slowest = pass < slowest ? pass : slowest;
        }
        for (int j = 0; j < procs; j++) huge += sh->huge_kib[j] > 0 ? sh->huge_kib[j] : 0;
        printf("  %d process%s x %d thread%s (%s): %.4f s/pass (slowest process), %.3f G params/s "
               "aggregate, "
               "%.1f GB/s; THP %ld MiB\n",
               procs, procs > 1 ? "es" : "", threads, threads > 1 ? "s" : "",
               procs * threads > ncpus || !pin ? "unpinned" : "pinned", slowest, n / slowest * 1e-9,
               n * RANK_BYTES_PER_PARAM / slowest * 1e-9, huge >> 10);
        fflush(stdout);
        add_result("procs", isa, nt, procs, threads, n, slowest, 0);
        pthread_barrier_destroy(&sh->start);
        munmap(sh, sizeof *sh);
    }
}

static void usage(void) {
    fprintf(stderr, "usage: adamw_bench [--params N[K|M|G]] [--threads 1,2,all] [--procs 1,2,4] "
                    "[--reps R] [--no-pin]\n");
    exit(2);
}

int main(int argc, char **argv) {
    size_t n = (size_t)256 << 20;
    int reps = 5, threads_list[MAX_LIST], nthreads = 0, procs_list[MAX_LIST] = {1, 2, 4},
        nprocs = 3;
    const char *threads_arg = NULL, *procs_arg = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--params") && i + 1 < argc)
            n = parse_size(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads_arg = argv[++i];
        else if (!strcmp(argv[i], "--procs") && i + 1 < argc)
            procs_arg = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-pin"))
            pin = 0;
        else
            usage();
    }
    if (n < 1024 || reps < 1) usage();
    find_cpus();
    if (threads_arg)
        nthreads = parse_list(threads_arg, threads_list, ncpus);
    else {
        for (int t = 1; t < ncpus; t *= 2) threads_list[nthreads++] = t;
        int per_node = 0;
        for (int i = 0; i < ncpus; i++) per_node += cpu_node(cpus[i]) == cpu_node(cpus[0]);
        if (per_node < ncpus && (per_node & (per_node - 1))) threads_list[nthreads++] = per_node;
        threads_list[nthreads++] = ncpus;
    }
    if (procs_arg) nprocs = parse_list(procs_arg, procs_list, ncpus);
    adamw_isa best = adamw_isa_default();
    adamw_nt nt_default = adamw_nt_default();

    char model[256] = "?", line[512], thp[128] = "?";
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            snprintf(model, sizeof model, "%s", strchr(line, ':') + 2);
            model[strcspn(model, "\n")] = 0;
            break;
        }
    if (f) fclose(f);
    f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f && fgets(thp, sizeof thp, f)) thp[strcspn(thp, "\n")] = 0;
    if (f) fclose(f);
    int nodes = count_nodes();
    printf("adamw_bench: %s; %d CPUs in the mask (cpus %d..%d first), %d NUMA node%s; THP %s\n",
           model, ncpus, cpus[0], cpus[ncpus - 1], nodes, nodes > 1 ? "s" : "", thp);
    printf("paths:");
    for (int i = 0; i < ADAMW_ISA_COUNT; i++)
        if (adamw_isa_available((adamw_isa)i)) printf(" %s", adamw_isa_name((adamw_isa)i));
    printf("; default %s, streaming stores %s; %zu params (%.2f GiB of p,m,v,g,wire), best of %d "
           "passes, threads %s\n",
           adamw_isa_name(best), adamw_nt_name(nt_default), n, n * 18.0 / (1 << 30), reps,
           pin ? "pinned (by node, physical cores first)" : "not pinned");
    fflush(stdout);

    // 3 first (fork before any OpenMP in this process); printed in this order anyway.
    printf("\n[processes] %s, streaming stores %s, %d threads split over the processes\n",
           adamw_isa_name(best), adamw_nt_name(nt_default), ncpus);
    fflush(stdout);
    process_scaling(procs_list, nprocs, n, ncpus, reps, best, nt_default);

    printf("\n[threads] triad GB/s with plain / streaming stores (12 B/element); AdamW G params/s "
           "(GB/s at 30 B/param, %% of the better triad)\n");
    for (int k = 0; k < nthreads; k++) {
        int threads = threads_list[k];
        if (threads < 1) continue;
        omp_set_num_threads(threads);
        pin_team(threads, 0);
        arrays a;
        arrays_init(&a, n);
        long huge = anon_huge_kib();
        double plain = n * TRIAD_BYTES / time_triad(&a, reps, 0) * 1e-9;
        double streaming =
            have_streaming_triad() ? n * TRIAD_BYTES / time_triad(&a, reps, 1) * 1e-9 : 0;
        double triad_gbs = plain > streaming ? plain : streaming;
        arrays_free(&a);
        arrays_init(&a, n); // the triad overwrote p
        printf("  %3d thread%s: triad %6.1f / %6.1f GB/s |", threads, threads > 1 ? "s" : " ",
               plain, streaming);
        add_triad(threads, plain, streaming);
        for (int i = 0; i < ADAMW_ISA_COUNT; i++) {
            if (!adamw_isa_available((adamw_isa)i)) continue;
            double t = time_adamw(&a, (adamw_isa)i, nt_default, reps);
            double gbs = n * BYTES_PER_PARAM / t * 1e-9;
            printf(" %s %.3f (%.1f, %.0f%%)", adamw_isa_name((adamw_isa)i), n / t * 1e-9, gbs,
                   100 * gbs / triad_gbs);
            fflush(stdout);
            add_result("threads", (adamw_isa)i, nt_default, 1, threads, n, t, triad_gbs);
        }
        printf(" | THP %ld MiB\n", huge >> 10);
        if (threads == threads_list[nthreads - 1]) { // the store policies, at the last count
            printf("  streaming stores at %d threads:", threads);
            for (int i = 0; i < ADAMW_ISA_COUNT; i++) {
                if (!adamw_isa_available((adamw_isa)i) || i == ADAMW_ISA_SCALAR) continue;
                for (int nt = 0; nt < ADAMW_NT_COUNT; nt++) {
                    double t = time_adamw(&a, (adamw_isa)i, (adamw_nt)nt, reps);
                    printf(" %s/%s %.3f", adamw_isa_name((adamw_isa)i), adamw_nt_name((adamw_nt)nt),
                           n / t * 1e-9);
                    fflush(stdout);
                    add_result("nt", (adamw_isa)i, (adamw_nt)nt, 1, threads, n, t, triad_gbs);
                }
            }
            printf(" G params/s\n");
            optimizer_path(&a, threads, reps, triad_gbs);
        }
        arrays_free(&a);
    }

    printf("\n");
    for (int i = 0; i < ntriads; i++)
        printf("RESULT section=triad threads=%d params=%zu plain_gbs=%.2f streaming_gbs=%.2f\n",
               triads[i].threads, n, triads[i].plain, triads[i].streaming);
    for (int i = 0; i < nresults; i++) {
        result *r = &results[i];
        double gbs = r->params * r->bytes_per_param / r->seconds * 1e-9;
        printf("RESULT section=%s isa=%s nt=%s procs=%d threads=%d params=%zu seconds=%.6f "
               "gparams=%.4f gbs=%.2f triad_gbs=%.2f pct_triad=%.1f\n",
               r->section, adamw_isa_name(r->isa), adamw_nt_name(r->nt), r->procs, r->threads,
               r->params, r->seconds, r->params / r->seconds * 1e-9, gbs, r->triad_gbs,
               r->triad_gbs > 0 ? 100 * gbs / r->triad_gbs : 0.0);
    }
    return 0;
}
