// The mpirun command line: placement, binding, environment, then the rank program.
//
// Placement: when every rank gets a core, Open MPI maps the ranks round-robin over the NUMA
// nodes and binds each one to its node (--map-by numa --bind-to numa). Rank 0, the compute
// process, lands on node 0; each optimizer process then allocates its shard where it runs.
// With more ranks than cores (CI runs -np 5 on 2 cores) binding would only stack ranks on
// the same cores, so they are left unbound and Open MPI is told to oversubscribe. With a
// hostfile the slots it declares are the limit.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE // sched_getaffinity, CPU_SET
#endif
#include "launcher/launcher.h"
#include "shm/syscheck.h"

#include <numa.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int read_int(const char *path, int *v) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int ok = fscanf(f, "%d", v) == 1;
    fclose(f);
    return ok ? 0 : -1;
}

// Physical cores among the CPUs this process may use: Open MPI's default slot count is
// the number of cores, not of hardware threads, so counting threads would promise slots
// that mpirun then refuses.
static int count_cores(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) < 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        return n > 0 ? (int)n : 1;
    }
    enum { MAXC = CPU_SETSIZE };
    static uint64_t seen[MAXC]; // (package << 32 | core) of cores counted so far
    int ncores = 0, nthreads = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &set)) continue;
        nthreads++;
        char path[128];
        int pkg = 0, core = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id",
                 cpu);
        if (read_int(path, &pkg) < 0) return CPU_COUNT(&set); // no topology: count threads
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
        if (read_int(path, &core) < 0) return CPU_COUNT(&set);
        uint64_t id = (uint64_t)(uint32_t)pkg << 32 | (uint32_t)core;
        int dup = 0;
        for (int i = 0; i < ncores && !dup; i++) dup = seen[i] == id;
        if (!dup) seen[ncores++] = id;
    }
    return ncores > 0 ? ncores : (nthreads > 0 ? nthreads : 1);
}

void placement_detect(placement *p, const mtrun_opts *o, long hostfile_slots) {
    p->numa_nodes = numa_available() < 0 ? 1 : numa_num_configured_nodes();
    if (p->numa_nodes < 1) p->numa_nodes = 1;
    p->cores = count_cores();
    p->slots = o->hostfile ? hostfile_slots : p->cores;
    p->oversubscribe = o->np > p->slots;
}

int find_in_path(const char *name, char *out, size_t n) {
    if (strchr(name, '/')) {
        snprintf(out, n, "%s", name);
        return access(out, X_OK);
    }
    const char *path = getenv("PATH");
    if (!path) path = "/usr/local/bin:/usr/bin:/bin";
    for (const char *p = path; *p;) {
        size_t len = strcspn(p, ":");
        if ((int)snprintf(out, n, "%.*s/%s", (int)len, len ? p : ".", name) < (int)n &&
            access(out, X_OK) == 0)
            return 0;
        p += len + (p[len] == ':');
    }
    return -1;
}

// Whether the extra mpirun arguments already set MCA parameter name: Open MPI refuses a
// parameter given twice on one command line.
static int extra_sets_mca(const mtrun_opts *o, const char *name) {
    for (int i = 0; i + 1 < o->nextra; i++)
        if ((!strcmp(o->extra[i], "--mca") || !strcmp(o->extra[i], "-mca") ||
             !strcmp(o->extra[i], "--gmca") || !strcmp(o->extra[i], "-gmca")) &&
            !strcmp(o->extra[i + 1], name))
            return 1;
    return 0;
}

static void add(cmdline *c, const char *arg) {
    if (c->argc + 2 > (int)(sizeof c->argv / sizeof c->argv[0]))
        mt_die("mtrun: too many mpirun arguments");
    c->argv[c->argc++] = (char *)arg;
    c->argv[c->argc] = NULL;
}

void mpirun_cmd_build(cmdline *c, const mtrun_opts *o, const placement *p, const char *mpirun,
                      const char *rank_prog) {
    static char np[16];
    snprintf(np, sizeof np, "%d", o->np);
    c->argc = 0;
    add(c, mpirun);
    if (geteuid() == 0) add(c, "--allow-run-as-root");
    // Not --quiet: it would hide which rank a signal killed. mtrun's relay (relay.c) drops
    // the banners that only repeat a rank's own one-line refusal.
    // Nothing reads standard input, and mpirun runs in its own process group (mtrun.c): were
    // it to read the terminal, the terminal would stop it.
    add(c, "--stdin"), add(c, "none");
    add(c, "-np"), add(c, np);
    if (o->hostfile) add(c, "--hostfile"), add(c, o->hostfile);
    if (p->oversubscribe)
        add(c, "--oversubscribe"), add(c, "--bind-to"), add(c, "none");
    else
        // A hostfile may give a host more slots than cores; binding the ranks to their
        // NUMA node is still right there, but Open MPI calls it an overload and refuses.
        add(c, "--map-by"), add(c, "numa"), add(c, "--bind-to"),
            add(c, o->hostfile ? "numa:overload-allowed" : "numa");
    // openib is Open MPI 4's old InfiniBand transport: UCX drives InfiniBand now, and openib
    // only prints warnings where it finds a device it cannot use. ofi (libfabric's) carries
    // nothing of ours either, and closing it sleeps a second in every rank's MPI_Finalize
    // (Open MPI 4.1.4): a second off every job's exit.
    if (!extra_sets_mca(o, "btl")) add(c, "--mca"), add(c, "btl"), add(c, "^openib,ofi");
    // Open MPI's own shared-memory segments (vader) in a folder of the job's, which mtrun
    // removes whatever happened to mpirun: a killed mpirun cannot clean them up itself.
    if (o->mpi_shm_dir && !extra_sets_mca(o, "btl_vader_backing_directory"))
        add(c, "--mca"), add(c, "btl_vader_backing_directory"), add(c, o->mpi_shm_dir);
    // Ranks can share cores (oversubscribed, or OpenMP threads beside a spinning peer):
    // idle OpenMP threads must sleep, not spin. A value the user exported wins.
    add(c, "-x"), add(c, getenv("OMP_WAIT_POLICY") ? "OMP_WAIT_POLICY" : "OMP_WAIT_POLICY=PASSIVE");
    add(c, "-x"), add(c, "MT_JOB_ID");
    // The user's umask, for ranks that ssh starts on other hosts with that login's (mt-rank).
    static char mask[32];
    mode_t was = umask(077);
    umask(was);
    snprintf(mask, sizeof mask, "MT_UMASK=%04o", (unsigned)was);
    add(c, "-x"), add(c, mask);
    if (getenv("MT_RUN_FOLDER")) add(c, "-x"), add(c, "MT_RUN_FOLDER"); // the locked run folder
    // Open MPI gives the ranks a pseudo-terminal for stdout even when ours is a file, so
    // rank 0 cannot tell by itself whether a person watches: it is told.
    add(c, "-x"), add(c, o->tty ? "MT_TTY=1" : "MT_TTY=0");
    if (getenv("MT_PEAK_FLOPS")) add(c, "-x"), add(c, "MT_PEAK_FLOPS"); // MFU's peak
    if (getenv("MT_PROGRESS_S")) add(c, "-x"), add(c, "MT_PROGRESS_S"); // in-step progress
    if (getenv("MT_TEST_NODES")) add(c, "-x"), add(c, "MT_TEST_NODES"); // virtual nodes
    // GPU i is nvidia-smi's GPU i (--plan's placement, --gpus), not CUDA's fastest-first order
    add(c, "-x"),
        add(c, getenv("CUDA_DEVICE_ORDER") ? "CUDA_DEVICE_ORDER" : "CUDA_DEVICE_ORDER=PCI_BUS_ID");
    if (o->gpus > 1) { // nodes per host
        static char gpus[40];
        snprintf(gpus, sizeof gpus, "MT_GPUS_PER_NODE=%d", o->gpus);
        add(c, "-x"), add(c, gpus);
    }
    if (o->tty) {
        static char cols[32];
        snprintf(cols, sizeof cols, "MT_TTY_COLUMNS=%d", o->tty_columns);
        add(c, "-x"), add(c, cols);
    }
    for (int i = 0; i < o->nextra; i++) add(c, o->extra[i]);
    add(c, rank_prog);
    add(c, o->config);
    for (int i = 0; i < o->n_overrides; i++) add(c, o->overrides[i]);
    if (o->resume) add(c, "--resume"), add(c, o->resume);
    if (o->out) add(c, "--out"), add(c, o->out);
    if (o->stop_at) add(c, "--stop-at"), add(c, o->stop_at);
    if (o->grad_dtype) add(c, "--grad-dtype"), add(c, o->grad_dtype);
}

static void print_word(FILE *f, const char *w) {
    int plain = *w != 0;
    for (const char *p = w; *p && plain; p++)
        plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                strchr("_-+=/.,:@%", *p);
    if (plain) {
        fputs(w, f);
        return;
    }
    fputc('\'', f);
    for (const char *p = w; *p; p++) {
        if (*p == '\'')
            fputs("'\\''", f);
        else
            fputc(*p, f);
    }
    fputc('\'', f);
}

void cmd_print_quoted(FILE *f, const char *prefix, const cmdline *c) {
    if (prefix) fputs(prefix, f);
    for (int i = 0; i < c->argc; i++) {
        if (i) fputc(' ', f);
        print_word(f, c->argv[i]);
    }
    fputc('\n', f);
}
