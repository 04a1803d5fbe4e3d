#include "runtime/job/job.h"
#include "runtime/base/base.h"
#include <numa.h>
#include <omp.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define STATE_TAG 0x4d54
#define CHUNK job_piece() // MPI counts are ints

size_t job_piece(void) {
    static size_t piece;
    if (!piece) {
        const char *s = getenv("MT_TEST_STATE_PIECE");
        long long v = s ? atoll(s) : 0;
        piece = v > 0 && (size_t)v < MT_STATE_PIECE ? (size_t)v : MT_STATE_PIECE;
    }
    return piece;
}

float *job_piece_buffer(void) {
    float *p = malloc(job_piece() * sizeof(float));
    if (!p) mt_die("out of memory: a %zu MiB piece of state in motion", job_piece() >> 18);
    return p;
}

void job_send_floats_on(const float *x, size_t n, int dest, int tag, MPI_Comm comm) {
    for (size_t i = 0; i < n; i += CHUNK) {
        int count = (int)(n - i < CHUNK ? n - i : CHUNK);
        MPI_CHECK(MPI_Send(x + i, count, MPI_FLOAT, dest, tag, comm));
    }
}

void job_recv_floats_on(float *x, size_t n, int src, int tag, MPI_Comm comm) {
    for (size_t i = 0; i < n; i += CHUNK) {
        int count = (int)(n - i < CHUNK ? n - i : CHUNK);
        MPI_CHECK(MPI_Recv(x + i, count, MPI_FLOAT, src, tag, comm, MPI_STATUS_IGNORE));
    }
}

void job_bcast_floats_on(float *x, size_t n, int root, MPI_Comm comm) {
    for (size_t i = 0; i < n; i += CHUNK) {
        int count = (int)(n - i < CHUNK ? n - i : CHUNK);
        MPI_CHECK(MPI_Bcast(x + i, count, MPI_FLOAT, root, comm));
    }
}

// The node's communicator, for the two calls above that take none.
static MPI_Comm state_comm = MPI_COMM_WORLD;

void job_send_floats(const float *x, size_t n, int dest) {
    job_send_floats_on(x, n, dest, STATE_TAG, state_comm);
}

void job_recv_floats(float *x, size_t n, int src) {
    job_recv_floats_on(x, n, src, STATE_TAG, state_comm);
}

void job_fail_input(const mt_job *job, const char *msg) {
    if (job->world_rank == 0) mt_say_last("mt-rank: ", msg);
    MPI_Finalize();
    exit(2);
}

void job_make_layouts(mt_job *job) {
    job->n_groups = model_group_count(&job->cfg.model);
    if (job->n_groups > SHM_MAX_GROUPS) job_fail_input(job, "model.layers: too many layers");
    for (int g = 0; g < job->n_groups; g++)
        job->group_numel[g] = model_group_numel(&job->cfg.model, g);
    job->layouts = calloc(job->n_shards, sizeof *job->layouts);
    job->regions = calloc(job->n_shards, sizeof *job->regions);
    if (!job->layouts || !job->regions) mt_die("out of memory");
    int order[SHM_MAX_GROUPS];
    model_grad_order(&job->cfg.model, order);
    job->ring_depth = model_grad_ring_depth(&job->cfg);
    for (int k = 0; k < job->n_shards; k++) {
        shard_layout_init(&job->layouts[k], job->group_numel, job->n_groups, k, job->n_shards,
                          job->device_groups, job->grad_bytes, job->ring_depth, order,
                          job->cfg.storage_master ? model_state_piece() : 0);
        if (job->cfg.storage_grads) shard_layout_grads_elsewhere(&job->layouts[k]);
    }
}

// Optimizer ranks sharing a NUMA node (of the same host) split its cores; the compute rank
// takes all of its own.
static void place_threads(mt_job *job) {
    int cpu = sched_getcpu();
    job->numa_node = (numa_available() >= 0 && cpu >= 0) ? numa_node_of_cpu(cpu) : 0;
    if (job->numa_node < 0) job->numa_node = 0;
    MPI_Comm host;
    MPI_CHECK(MPI_Comm_split_type(job->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host));
    int hsize, hrank;
    MPI_CHECK(MPI_Comm_size(host, &hsize));
    MPI_CHECK(MPI_Comm_rank(host, &hrank));
    int mine[2] = {job->numa_node, job_is_compute(job)}, *all = malloc(sizeof(int) * 2 * hsize);
    if (!all) mt_die("out of memory");
    MPI_CHECK(MPI_Allgather(mine, 2, MPI_INT, all, 2, MPI_INT, host));
    MPI_CHECK(MPI_Comm_free(&host));
    int peers = 0;
    job->node_index = 0;
    for (int r = 0; r < hsize; r++) {
        if (all[2 * r] != job->numa_node || all[2 * r + 1]) continue;
        if (r < hrank) job->node_index++;
        peers++;
    }
    free(all);
    job->node_peers = peers;
    cpu_set_t set;
    SYS_CHECK(sched_getaffinity(0, sizeof set, &set));
    int cpus = CPU_COUNT(&set);
    job->threads = job_is_compute(job) ? cpus : (cpus / peers > 0 ? cpus / peers : 1);
    omp_set_num_threads(job->threads);
}

static void job_id_from_env(mt_job *job) {
    const char *id = getenv("MT_JOB_ID");
    if (!id || !*id) { // started by plain mpirun: rank 0 makes one and tells the others
        unsigned char raw[16];
        if (job->rank == 0 && getrandom(raw, sizeof raw, 0) != sizeof raw)
            mt_die("getrandom: %s", strerror(errno));
        MPI_CHECK(MPI_Bcast(raw, sizeof raw, MPI_BYTE, 0, MPI_COMM_WORLD));
        for (int i = 0; i < 16; i++) sprintf(job->job_id + 2 * i, "%02x", raw[i]);
    } else {
        snprintf(job->job_id, sizeof job->job_id, "%s", id);
    }
    // Virtual nodes share one /dev/shm: each names its regions apart (mtrun's clean-up of
    // "mtc-<job>-*" still finds them).
    size_t len = strlen(job->job_id);
    if (job->nodes > 1) snprintf(job->job_id + len, sizeof job->job_id - len, "-n%d", job->node);
}

// Owners create their regions; names go to rank 0 over MPI; once rank 0 has mapped them all,
// the names are unlinked, so a crash from here on can leak nothing.
static void map_regions(mt_job *job) {
    char name[96] = {0}, *names = NULL;
    int k = job_shard_of_rank(job->rank);
    if (!job_is_compute(job)) {
        shm_region_name(name, sizeof name, job->job_id, k);
        shm_region_create(&job->regions[k], name, job->layouts[k].total_bytes, job->numa_node);
        shm_control_block *cb = job_control_block(job, k);
        cb->magic = SHM_MAGIC;
        cb->total_bytes = job->layouts[k].total_bytes;
        cb->n_groups = job->n_groups, cb->shard = k, cb->n_shards = job->n_shards;
        for (int g = 0; g < job->n_groups; g++) cb->weights_version[g] = cb->grads_step[g] = -1;
    } else {
        names = calloc(job->world, sizeof name);
    }
    MPI_CHECK(MPI_Gather(name, sizeof name, MPI_CHAR, names, sizeof name, MPI_CHAR, 0, job->comm));
    if (job_is_compute(job)) {
        for (int s = 0; s < job->n_shards; s++)
            shm_region_open(&job->regions[s], names + (s + 1) * sizeof name,
                            job->layouts[s].total_bytes);
        free(names);
    }
    MPI_CHECK(MPI_Barrier(job->comm));
    if (!job_is_compute(job)) shm_region_unlink(&job->regions[k]);
}

// Positive integer from the environment, else 0.
static int env_count(const char *name) {
    const char *v = getenv(name);
    return v && atoi(v) > 0 ? atoi(v) : 0;
}

// A node is one data-parallel replica: a compute rank (one GPU) and its optimizer ranks. The
// ranks that share memory form a host (MT_TEST_NODES=N: N virtual hosts of consecutive ranks,
// for tests on one host), and a host's ranks split into MT_GPUS_PER_NODE nodes (mtrun --gpus),
// node i of its host computing on GPU i. Nodes must be alike, and a node's ranks consecutive,
// so that node n holds ranks n * world .. (n + 1) * world - 1 as mtrun's plan says.
static void split_nodes(mt_job *job) {
    int size, hsize, hrank, uniform[2], most;
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    int hosts = env_count("MT_TEST_NODES"), gpus = env_count("MT_GPUS_PER_NODE");
    int bad_hosts = hosts > 0 && size % hosts != 0;
    MPI_Comm host;
    if (hosts > 0 && !bad_hosts)
        MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, job->world_rank / (size / hosts), job->world_rank,
                                 &host));
    else
        MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, job->world_rank,
                                      MPI_INFO_NULL, &host));
    MPI_CHECK(MPI_Comm_size(host, &hsize));
    MPI_CHECK(MPI_Comm_rank(host, &hrank));
    int bad_gpus = gpus > 0 && hsize % gpus != 0;
    job->gpu = gpus > 0 && !bad_gpus ? hrank / (hsize / gpus) : 0;
    MPI_CHECK(MPI_Comm_split(host, job->gpu, hrank, &job->comm));
    MPI_CHECK(MPI_Comm_free(&host));
    MPI_CHECK(MPI_Comm_rank(job->comm, &job->rank));
    MPI_CHECK(MPI_Comm_size(job->comm, &job->world));
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, job->rank, job->world_rank, &job->dp_comm));
    MPI_CHECK(MPI_Comm_rank(job->dp_comm, &job->node));
    MPI_CHECK(MPI_Comm_size(job->dp_comm, &job->nodes));
    int mine[2] = {job->world, job->world_rank == job->node * job->world + job->rank};
    MPI_CHECK(MPI_Allreduce(mine, uniform, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Allreduce(&job->world, &most, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &bad_gpus, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    state_comm = job->comm;
    char err[160];
    if (bad_hosts) {
        snprintf(err, sizeof err, "MT_TEST_NODES=%d: %d ranks do not split into %d alike nodes",
                 hosts, size, hosts);
        job_fail_input(job, err);
    }
    if (bad_gpus) {
        snprintf(err, sizeof err, "--gpus %d: a host's ranks do not split into %d alike nodes",
                 gpus, gpus);
        job_fail_input(job, err);
    }
    if (uniform[0] != most || !uniform[1])
        job_fail_input(job, "the nodes hold different numbers of ranks, or not consecutive ones: "
                            "give every host of the hostfile the same slots");
}

void job_init(mt_job *job, const job_args *args) {
    memset(job, 0, sizeof *job);
    job->args = *args;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &job->world_rank));
    split_nodes(job);
    job->n_shards = job->world - 1;
}

static volatile sig_atomic_t stop_requested;

static void on_stop_request(int sig) {
    (void)sig;
    stop_requested = 1;
}

// mtrun also leaves /dev/shm/mtc-<job>/stop: a request whose signal mpirun did not pass on (a
// wrapper script in mpirun's place, a launcher that keeps SIGUSR1) still stops the job. Only a
// plain file of the job's own user counts: the folder is mtrun's, mode 0700, and a file anyone
// else managed to put there steers nothing.
int job_stop_requested(void) {
    char path[128];
    struct stat st;
    if (stop_requested) return 1;
    return mt_job_file(path, sizeof path, NULL, "stop") == 0 && lstat(path, &st) == 0 &&
           S_ISREG(st.st_mode) && st.st_uid == geteuid();
}

void job_hold_run_folder(mt_job *job) {
    const char *dir = job->cfg.checkpoint_dir;
    char err[MT_PATH_MAX + 160];
    make_dirs(dir);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) mt_die("%s: %s", dir, strerror(errno));
    // "dev:ino:host" of the folder mtrun locked; device numbers are the same only on its host
    const char *locked = getenv("MT_RUN_FOLDER");
    unsigned long long dev, ino;
    int at = 0;
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    if (locked && sscanf(locked, "%llu:%llu:%n", &dev, &ino, &at) == 2 && at &&
        !strcmp(locked + at, host) &&
        (dev != (unsigned long long)st.st_dev || ino != (unsigned long long)st.st_ino)) {
        snprintf(err, sizeof err,
                 "%s is no longer the folder mtrun locked for this job (it was moved, or "
                 "replaced by a link): not writing into it; start the job again",
                 dir);
        job_fail_input(job, err);
    }
    snprintf(job->run_at, sizeof job->run_at, "/proc/self/fd/%d", fd);
    if (access(job->run_at, F_OK) != 0) // no /proc: the name it is
        snprintf(job->run_at, sizeof job->run_at, "%.*s", (int)sizeof job->run_at - 1, dir);
}

const char *job_run_shown(const mt_job *job, const char *p) {
    static char buf[4][MT_PATH_MAX + 64];
    static int next;
    size_t n = strlen(job->run_at);
    if (!n || strncmp(p, job->run_at, n) != 0) return p;
    char *out = buf[next++ & 3];
    snprintf(out, sizeof buf[0], "%s%s", job->cfg.checkpoint_dir, p + n);
    return out;
}

// The job's last step becomes `step`, unless it ends earlier anyway.
static void end_after(mt_job *job, int step) {
    if (step + 1 < job->end_step) job->end_step = step + 1;
}

void job_stop_after(mt_job *job, int step) {
    end_after(job, step);
    job->stopped_on_request = step;
}

static void gather_hosts(mt_job *job) {
    char mine[64] = "?";
    gethostname(mine, sizeof mine - 1);
    job->hosts = calloc((size_t)job->world, sizeof *job->hosts);
    job->pids = calloc((size_t)job->world, sizeof *job->pids);
    if (!job->hosts || !job->pids) mt_die("out of memory");
    MPI_CHECK(MPI_Allgather(mine, 64, MPI_CHAR, job->hosts, 64, MPI_CHAR, job->comm));
    int pid = (int)getpid();
    MPI_CHECK(MPI_Allgather(&pid, 1, MPI_INT, job->pids, 1, MPI_INT, job->comm));
}

// A rank of this host that the kernel holds stopped (kill -STOP, a debugger), or -1. The rank a
// waiter waits on may itself only wait on the stopped one (in the optimizers' collectives), so
// naming it would send the user after the wrong process.
static int stopped_rank(const mt_job *job) {
    for (int r = 0; r < job->world; r++) {
        if (r == job->rank || strcmp(job->hosts[r], job->hosts[job->rank]) != 0) continue;
        char state;
        int ppid;
        if (proc_stat(job->pids[r], &state, &ppid) == 0 && (state == 'T' || state == 't')) return r;
    }
    return -1;
}

int job_recv(mt_job *job, control_msg *msg, const char *what, int from) {
    if (!what) return control_recv(job->ctl, msg);
    double limit = job->cfg.watchdog_s, scaled = 3 * job->longest_step;
    if (scaled > limit) limit = scaled;
    // The optimizer ranks wait twice as long: when one of them is stuck, the compute rank, the
    // one that knows which rank is late, is the first to speak.
    if (job->rank != 0) limit *= 2;
    int src = control_recv_within(job->ctl, msg, limit);
    if (src >= 0) return src;
    char who[200];
    int stopped = stopped_rank(job);
    if (stopped >= 0)
        snprintf(who, sizeof who, "rank %d (%s, on %s, pid %d), whose process is stopped", stopped,
                 stopped == 0 ? "the compute rank" : "an optimizer rank", job->hosts[stopped],
                 job->pids[stopped]);
    else if (from >= 0)
        snprintf(who, sizeof who, "rank %d (%s, on %s)", from,
                 from == 0 ? "the compute rank" : "an optimizer rank", job->hosts[from]);
    else
        snprintf(who, sizeof who, "%s", job->rank == 0 ? "the optimizer ranks" : "rank 0");
    mt_die("watchdog: rank %d (on %s) heard nothing for %.0f s while waiting for %s from %s: "
           "it is stopped, hung or far too slow (watchdog_s = %d); ending the job",
           job->rank, job->hosts[job->rank], limit, what, who, job->cfg.watchdog_s);
}

void job_start(mt_job *job) {
    job->stopped_on_request = -1;
    gather_hosts(job);
    // SA_RESTART: a stop request must not fail the system calls it lands in.
    struct sigaction sa = {.sa_handler = on_stop_request, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    SYS_CHECK(sigaction(SIGUSR1, &sa, NULL));
    place_threads(job);
    job_id_from_env(job);
    MPI_CHECK(MPI_Comm_split(job->comm, job_is_compute(job) ? MPI_UNDEFINED : 1, job->rank,
                             &job->opt_comm));
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, job_is_compute(job) ? MPI_UNDEFINED : 1,
                             job->world_rank, &job->opt_world));
    job->end_step = job->cfg.steps;
    if (job->args.stop_at > 0 && job->args.stop_at < job->end_step)
        job->end_step = job->args.stop_at;
    if (job->start_step >= job->end_step)
        job_fail_input(job, "the checkpoint to resume is already at or past the last step");
    map_regions(job);
    job->ctl = control_init(job->comm);
}

void job_teardown(mt_job *job) {
    control_finalize(job->ctl);
    for (int k = 0; k < job->n_shards; k++) shm_region_close(&job->regions[k]);
    if (job->opt_comm != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&job->opt_comm));
    if (job->opt_world != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&job->opt_world));
    MPI_CHECK(MPI_Comm_free(&job->dp_comm));
    MPI_CHECK(MPI_Comm_free(&job->comm));
    free(job->layouts);
    free(job->regions);
    free(job->hosts);
    free(job->pids);
}

int job_note_step(mt_job *job, int step, int bad) {
    job->bad_in_a_row = bad ? job->bad_in_a_row + 1 : 0;
    job->skipped_steps += bad;
    if (bad && job->ring_depth) {
        end_after(job, step);
        job->stopped_bad = 2;
    } else if (job->bad_in_a_row >= job->cfg.max_bad_steps) {
        end_after(job, step);
        job->stopped_bad = 1;
    }
    return bad;
}
