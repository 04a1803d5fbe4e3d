#include "runtime/job.h"
#include "runtime/check.h"
#include "runtime/checkpoint.h"
#include "runtime/hf.h"
#include "runtime/model.h"
#include <numa.h>
#include <omp.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/random.h>
#include <unistd.h>

// Every rank sees the same input and so reaches the same verdict; rank 0 alone speaks.
static void fail_input(const mt_job *job, const char *msg) {
    if (job->rank == 0) fprintf(stderr, "mt-rank: %s\n", msg);
    MPI_Finalize();
    exit(2);
}

static void load_config(mt_job *job) {
    char err[1024];
    if (mt_config_load(&job->cfg, job->args.config_path, err, sizeof err) != 0)
        fail_input(job, err);
    if (job->args.out_dir)
        snprintf(job->cfg.checkpoint_dir, sizeof job->cfg.checkpoint_dir, "%s", job->args.out_dir);
    if (job->world < 2) fail_input(job, "need at least 2 ranks: 1 compute + 1 optimizer");
}

// A fresh run never writes over checkpoints a user already has; resuming finds its folder.
static void resolve_checkpoints(mt_job *job) {
    char err[1024];
    if (!job->args.resume_dir) {
        if (checkpoint_find_latest(job->cfg.checkpoint_dir, job->resume_path,
                                   sizeof job->resume_path) == 0) {
            snprintf(err, sizeof err,
                     "%s already holds checkpoints (%s): resume with --resume %s, or write "
                     "elsewhere with --out DIR",
                     job->cfg.checkpoint_dir, job->resume_path, job->cfg.checkpoint_dir);
            fail_input(job, err);
        }
        job->resume_path[0] = 0;
        return;
    }
    if (checkpoint_resolve(job->args.resume_dir, job->resume_path, sizeof job->resume_path, err,
                           sizeof err) != 0 ||
        checkpoint_read_step(job->resume_path, &job->start_step, err, sizeof err) != 0 ||
        checkpoint_check_state(job->resume_path, job, err, sizeof err) != 0)
        fail_input(job, err);
    // Every rank reads only its share of state.bin's blocks; all learn the verdict.
    if (checkpoint_verify_state(job->resume_path, job, MPI_COMM_WORLD, err, sizeof err) != 0)
        fail_input(job, err);
}

// Every rank checks the Hugging Face folders before any shared memory exists, so that bad
// files end the job with one line and exit code 2 rather than a crash mid-load. A resumed run
// takes its weights from the checkpoint, so it does not read model_dir's weights.
static void check_hf_dirs(mt_job *job) {
    char err[MT_PATH_MAX + 512], msg[MT_PATH_MAX + 600];
    const mt_config *c = &job->cfg;
    if (c->export_dir[0] && hf_export_dir_check(c->export_dir, err, sizeof err) < 0) {
        snprintf(msg, sizeof msg, "export_dir: %s", err);
        fail_input(job, msg);
    }
    if (!c->model_dir[0] || job->resume_path[0]) return;
    hf_index *ix = hf_index_open(c->model_dir, err, sizeof err);
    if (!ix || hf_index_check(ix, c, err, sizeof err) < 0) {
        hf_index_close(ix);
        fail_input(job, err);
    }
    if (!job_is_compute(job)) {
        job->hf = ix;
        return;
    }
    hf_index_close(ix); // only optimizer ranks read weights
}

static void make_layouts(mt_job *job) {
    job->n_groups = model_group_count(&job->cfg);
    if (job->n_groups > SHM_MAX_GROUPS) fail_input(job, "model.layers: too many layers");
    for (int g = 0; g < job->n_groups; g++) job->group_numel[g] = model_group_numel(&job->cfg, g);
    job->layouts = calloc(job->n_shards, sizeof *job->layouts);
    job->regions = calloc(job->n_shards, sizeof *job->regions);
    if (!job->layouts || !job->regions) mt_die("out of memory");
    for (int k = 0; k < job->n_shards; k++)
        shard_layout_init(&job->layouts[k], job->group_numel, job->n_groups, k, job->n_shards);
}

// Optimizer ranks sharing a NUMA node (of the same host) split its cores; the compute rank
// takes all of its own.
static void place_threads(mt_job *job) {
    int cpu = sched_getcpu();
    job->numa_node = (numa_available() >= 0 && cpu >= 0) ? numa_node_of_cpu(cpu) : 0;
    if (job->numa_node < 0) job->numa_node = 0;
    MPI_Comm host;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host));
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
        return;
    }
    snprintf(job->job_id, sizeof job->job_id, "%s", id);
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
    MPI_CHECK(
        MPI_Gather(name, sizeof name, MPI_CHAR, names, sizeof name, MPI_CHAR, 0, MPI_COMM_WORLD));
    if (job_is_compute(job)) {
        for (int s = 0; s < job->n_shards; s++)
            shm_region_open(&job->regions[s], names + (s + 1) * sizeof name,
                            job->layouts[s].total_bytes);
        free(names);
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (!job_is_compute(job)) shm_region_unlink(&job->regions[k]);
}

void job_setup(mt_job *job, const job_args *args) {
    memset(job, 0, sizeof *job);
    job->args = *args;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &job->rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &job->world));
    job->n_shards = job->world - 1;
    load_config(job);
    make_layouts(job);
    resolve_checkpoints(job);
    check_hf_dirs(job);
    place_threads(job);
    job_id_from_env(job);
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, job_is_compute(job) ? MPI_UNDEFINED : 1, job->rank,
                             &job->opt_comm));
    job->end_step = job->cfg.steps;
    if (args->stop_at > 0 && args->stop_at < job->end_step) job->end_step = args->stop_at;
    if (job->start_step >= job->end_step)
        fail_input(job, "the checkpoint to resume is already at or past the last step");
    map_regions(job);
    job->ctl = control_init(MPI_COMM_WORLD);
}

void job_teardown(mt_job *job) {
    control_finalize(job->ctl);
    for (int k = 0; k < job->n_shards; k++) shm_region_close(&job->regions[k]);
    if (job->opt_comm != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&job->opt_comm));
    free(job->layouts);
    free(job->regions);
    hf_index_close(job->hf);
}
