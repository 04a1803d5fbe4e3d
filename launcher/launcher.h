// mtrun's parts: the hostfile check, the mpirun command line and the memory plan's report.
// main and the arguments live in mtrun.c.
#ifndef MT_LAUNCHER_H
#define MT_LAUNCHER_H

#include "runtime/plan/plan.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

typedef struct {
    int np;    // processes in all: per node 1 compute + np / nodes - 1 optimizers
    int nodes; // data parallel: hosts (the hostfile's, or MT_TEST_NODES virtual ones) x gpus
    int gpus;  // --gpus: compute ranks per host, one per GPU
    const char *config, *hostfile, *resume, *out; // NULL when not given
    const char *stop_at;                          // passed through to mt-rank
    const char *grad_dtype;  // "fp32" or "bf16": the plan's resolution of optimizer.grad_dtype
    const char *gpu_mem;     // --gpu-mem, or NULL
    const char *disk_bw;     // --disk-bw, or NULL
    const char *mpi_shm_dir; // Open MPI's shared-memory segments go here (one host), or NULL
    // key=value settings over the config: a resumed checkpoint's first, then the command line's
    const char *overrides[MT_MAX_OVERRIDES + 1];
    int n_overrides;
    char **extra; // the mpirun arguments after "--"
    int nextra;
    int tty, tty_columns; // stdout is a terminal, this wide
} mtrun_opts;

// hostfile.c: checks an Open MPI hostfile, one "host [slots=N] [max_slots=N]" per line.
// Returns 0 and the number of hosts and slots (a host without slots= counts as
// default_slots, which is what Open MPI does on a host like this one), or -1 with a
// one-line message in err.
int hostfile_check(const char *path, int default_slots, int *hosts, long *slots, char *err,
                   size_t errlen);

// mpirun_cmd.c
typedef struct {
    int numa_nodes; // configured NUMA nodes (1 without NUMA support)
    int cores;      // physical cores this process may run on
    long slots;     // what the job may use without oversubscribing
    int oversubscribe;
} placement;

typedef struct {
    char *argv[256];
    int argc;
} cmdline;

void placement_detect(placement *p, const mtrun_opts *o, long hostfile_slots);
// The absolute path of an executable found on PATH (or name itself when it holds a '/').
// Returns -1 when there is none.
int find_in_path(const char *name, char *out, size_t n);
// "mpirun ... mt-rank CONFIG ...": pointers into o and into the given strings.
void mpirun_cmd_build(cmdline *c, const mtrun_opts *o, const placement *p, const char *mpirun,
                      const char *rank_prog);
// One line that a POSIX shell reads back as the same words.
void cmd_print_quoted(FILE *f, const char *prefix, const cmdline *c);

// relay.c: copies mpirun's standard error (read from fd until it closes) to ours, the ranks'
// lines as they are; Open MPI's boxes that repeat a rank's own message are dropped, and the one
// for a rank killed by a signal becomes a line naming its node and role. Also waits for mpirun
// (its exit status into *status). Returns how many lines ranks said as they gave up
// ("megatrain: ...", "mt-rank: ..."). tick, when not NULL, runs at least every 200 ms and after
// every signal until mpirun has ended.
int relay_mpirun_stderr(int fd, int ranks_per_node, pid_t mpirun, int *status, void (*tick)(void));

// supervise.c: runs mpirun for job `job` and returns its exit code (128+N when signal N ended
// it, or when N asked it to stop) once no process of the job is left, its files in /dev/shm
// removed. The first SIGINT, SIGTERM or SIGHUP stops the job after a step, with a checkpoint;
// a second aborts it.
int supervise_run(const cmdline *c, const char *job, int ranks_per_node);
int supervise_signal(void); // the signal that asked the job to stop, or 0
// How many lines ranks said as they gave up (relayed or repeated), and the signal that killed
// mpirun itself (0: none).
int supervise_ranks_said(int *mpirun_killed_by);
// Makes the job's private folder /dev/shm/mtc-<job> (mode 0700: Open MPI's segments, the stop
// request, the ranks' last words) and the janitor that removes it should mtrun be killed.
// Returns its path, or NULL when /dev/shm is not writable or the name is taken.
const char *job_dir_make(const char *job);
// Removes the /dev/shm folders of this user's jobs whose mtrun and mpirun are gone.
void job_dirs_reap(void);

// run_lock.c: one job per run folder. Takes the lock of folder `dir` (made when missing) for as
// long as this process and mpirun live; 0, or -1 with one line in err naming the folder and the
// pid of the job that holds it. `what` names the option the folder came from.
int run_lock_take(const char *dir, const char *what, char *err, size_t n);
// Once no rank of the job is left: removes the hidden folders of saves it did not finish (a
// second signal, a rank killed mid-save) from the locked folder, saying so on stderr; those
// there before it started are left alone. The lock is still held, so no other job can be
// writing one.
void run_lock_clear_unfinished(void);

// plan_report.c: this host's memory limits, and the plan printed against them.
typedef struct {
    uint64_t mem_total, mem_available; // /proc/meminfo (mem_available: MT_PLAN_MEM_LIMIT)
    uint64_t shm_size, shm_free;       // statvfs of /dev/shm (shm_free: MT_PLAN_SHM_LIMIT)
    uint64_t memlock;                  // RLIMIT_MEMLOCK, when not unlimited
    int mem_known, mem_forced, shm_known, shm_forced, memlock_unlimited, root;
    int elastic; // a VM whose memory can grow on demand (virtio balloon or virtio-mem)
    // storage.dir, when the config puts anything there: its free bytes (statvfs, or
    // MT_PLAN_DISK_LIMIT) and its rate in bytes/s (--disk-bw, or a short O_DIRECT probe; 0: not
    // known), with where that came from, or why the probe could not measure it
    uint64_t disk_free;
    int disk_known, disk_forced;
    double disk_bw;
    char disk_bw_source[96];      // "--disk-bw", "measured: ..."; "" when not known
    char disk_bw_unmeasured[192]; // why the probe did not run or failed; "" when it measured
} host_probe;

void host_probe_read(host_probe *h);
// storage.dir's free space and rate (disk_bw: --disk-bw's value in bytes/s, 0 to probe).
void host_probe_disk(host_probe *h, const mt_config *c, double disk_bw);
// Whether the compute rank will run on the GPU: backend "cuda", or "auto" in a CUDA build on a
// host with an NVIDIA device.
int plan_backend_cuda(const mt_config *c);
int plan_compute_cores(const placement *pl);
// 0 when the job fits; -1 with one line in err: the numbers and the smallest change that fits.
int plan_check(const mt_plan *p, const host_probe *h, char *err, size_t n);
void plan_warnings(FILE *f, const mt_plan *p, const host_probe *h);
void plan_print(FILE *f, const mt_plan *p, const host_probe *h, const placement *pl, int cores);
void plan_print_compact(FILE *f, const mt_plan *p, const host_probe *h, int cores, int steps);
void plan_print_json(FILE *f, const mt_plan *p, const host_probe *h, int cores, int fits);

// input_check.c: bad input the ranks would find only after they start. backend = "cuda" in a build
// without CUDA, or with no CUDA device on this host (a hostfile's hosts are not checked here).
int check_backend_device(const mtrun_opts *o, const mt_config *cfg, char *err, size_t n);
// The run folder dir (what: "--out", "--resume", ...), or the folder above it where it will be
// made, is writable: not on a read-only mount, not another user's.
int check_run_folder_writable(const char *dir, const char *what, char *err, size_t n);
// ... and no other user can change it, or a folder above it (path_trust_check): one that another
// user owns or may write to could hand the job their checkpoints and settings, or take its own.
int check_run_folder_trusted(const char *dir, const char *what, char *err, size_t n);

#endif
