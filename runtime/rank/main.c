// mt-rank: the program mtrun starts on every rank. Rank 0 becomes the compute process, the
// others optimizer processes; everything else follows from the config. The set-up that reads
// files (the config, the checkpoint to resume, model_dir's weights) lives here, above both the
// job (ranks, regions, control plane) and io/, between the job's set-up steps.
#include "runtime/base/base.h"
#include "runtime/io/io.h"
#include "runtime/engine/engine.h"
#include "runtime/job/job.h"
#include "runtime/optimizer/optimizer.h"
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>

// The longest name a run writes inside its folders ("/.step_000000.tmp/manifest.json", an
// export's shard index, "/trace.part-NNN.jsonl"), with room to spare: a longer folder path would
// be cut short by the first save, after hours of training, so it is refused now.
#define LONGEST_NAME 64

static void check_path_room(const mt_job *job, const char *what, const char *path) {
    size_t n = strlen(path);
    if (n + LONGEST_NAME < MT_PATH_MAX) return;
    char err[160];
    snprintf(err, sizeof err,
             "%s: a path of %zu bytes, too long for the files a run writes inside it (at most %d)",
             what, n, MT_PATH_MAX - LONGEST_NAME - 1);
    job_fail_input(job, err);
}

// Data parallel: each node takes an equal run of every step's micro-batches.
static void split_batch(mt_job *job) {
    mt_config *c = &job->cfg;
    char err[MT_PATH_MAX + 256];
    if (mt_config_check_micro_split(c, job->nodes, err, sizeof err) < 0) job_fail_input(job, err);
    c->micro_batches /= job->nodes;
    job->first_micro = job->node * c->micro_batches;
}

static void load_config(mt_job *job) {
    char err[1024];
    if (mt_config_load_with(&job->cfg, job->args.config_path, job->args.overrides,
                            job->args.n_overrides, err, sizeof err) != 0)
        job_fail_input(job, err);
    if (job->args.out_dir)
        snprintf(job->cfg.checkpoint_dir, sizeof job->cfg.checkpoint_dir, "%s", job->args.out_dir);
    if (job->world < 2) job_fail_input(job, "need at least 2 ranks: 1 compute + 1 optimizer");
    split_batch(job);
    check_path_room(job, job->args.out_dir ? "--out" : "checkpoint.dir", job->cfg.checkpoint_dir);
    check_path_room(job, "export_dir", job->cfg.export_dir);
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
            job_fail_input(job, err);
        }
        job->resume_path[0] = 0;
        return;
    }
    if (checkpoint_resolve(job->args.resume_dir, job->resume_path, sizeof job->resume_path, err,
                           sizeof err) != 0 ||
        checkpoint_read_step(job->resume_path, &job->start_step, &job->skipped_steps, err,
                             sizeof err) != 0 ||
        checkpoint_check_state(job->resume_path, job, err, sizeof err) != 0)
        job_fail_input(job, err);
    // Every rank reads only its share of state.bin's blocks; all learn the verdict.
    if (checkpoint_verify_state(job->resume_path, job, job->comm, err, sizeof err) != 0)
        job_fail_input(job, err);
    // --resume without --out continues in the run folder it resumes, not in checkpoint.dir.
    if (!job->args.out_dir) {
        snprintf(job->cfg.checkpoint_dir, sizeof job->cfg.checkpoint_dir, "%s", job->resume_path);
        char *slash = strrchr(job->cfg.checkpoint_dir, '/');
        if (slash && slash != job->cfg.checkpoint_dir) *slash = 0;
    }
}

// Every rank checks the Hugging Face folders before any shared memory exists, so that bad
// files end the job with one line and exit code 2 rather than a crash mid-load. A resumed run
// takes its weights from the checkpoint, so it does not read model_dir's weights.
static void check_hf_dirs(mt_job *job) {
    char err[MT_PATH_MAX + 512], msg[MT_PATH_MAX + 600];
    const mt_config *c = &job->cfg;
    if (c->export_dir[0] && hf_export_dir_check(c->export_dir, err, sizeof err) < 0) {
        snprintf(msg, sizeof msg, "export_dir: %s", err);
        job_fail_input(job, msg);
    }
    if (!c->model_dir[0] || job->resume_path[0]) return;
    hf_index *ix = hf_index_open(c->model_dir, err, sizeof err);
    if (!ix || hf_index_check(ix, &c->model, err, sizeof err) < 0) {
        hf_index_close(ix);
        job_fail_input(job, err);
    }
    if (!job_is_compute(job)) {
        job->hf = ix;
        return;
    }
    hf_index_close(ix); // only optimizer ranks read weights
}

// optimizer.grad_dtype: "auto" is mtrun's to resolve (its memory plan knows what fits) and
// arrives as --grad-dtype; started without it, auto keeps fp32.
static int grad_bytes_of(const mt_job *job) {
    int want = job->cfg.grad_dtype;
    if (want == GRAD_DTYPE_AUTO && job->args.grad_dtype)
        want = mt_choice_index(GRAD_DTYPE_NAMES, job->args.grad_dtype);
    return want == GRAD_DTYPE_BF16 ? 2 : 4;
}

// The layouts need to know which groups the compute rank updates itself: it decides (with its
// device's free memory, engine_new), and tells the others.
static void setup(mt_job *job, const job_args *args, engine **eng) {
    char err[1024] = "";
    job_init(job, args);
    load_config(job);
    job->grad_bytes = grad_bytes_of(job);
    if (job_is_compute(job) && !(*eng = engine_new(job, err, sizeof err)))
        job->device_groups = -1; // its buffers do not fit: every rank ends, rank 0 says why
    // Any node's compute rank may refuse; the first one's reason is the one said.
    int refused = job->device_groups < 0, first = refused ? job->node : job->nodes;
    MPI_CHECK(MPI_Bcast(&job->device_groups, 1, MPI_INT, 0, job->comm));
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first < job->nodes) {
        MPI_CHECK(MPI_Bcast(err, sizeof err, MPI_CHAR, first * job->world, MPI_COMM_WORLD));
        job_fail_input(job, err);
    }
    job_make_layouts(job);
    resolve_checkpoints(job);
    job_hold_run_folder(job);
    check_hf_dirs(job);
    job_start(job);
}

// optimizer.max_bad_steps non-finite norms in a row ended the job early, with a checkpoint of
// the last good state, or one did with the gradient ring, without: every rank exits with 3,
// rank 0 says why.
static void teardown(mt_job *job) {
    int stopped = job->stopped_bad, rank = job->world_rank, at = job->end_step;
    if (job->stopped_on_request >= 0 && rank == 0) {
        char saved[MT_PATH_MAX + 64] = "checkpoint.interval = 0: nothing was saved";
        if (job->cfg.checkpoint_interval > 0)
            snprintf(saved, sizeof saved, "continue with --resume %s",
                     mt_shown(job->cfg.checkpoint_dir));
        printf("compute rank: stopped on request after step %d, with its checkpoint; %s\n",
               job->stopped_on_request + 1, saved);
    }
    job_teardown(job);
    hf_index_close(job->hf);
    if (!stopped) return;
    if (stopped == 2 && rank == 0)
        fprintf(stderr,
                "mt-rank: stopped at step %d: its gradient norm is not finite, and with the "
                "gradient ring (optimizer.clip = 0) the groups before the bad one were already "
                "updated as their gradients arrived, so the step cannot be skipped; nothing of it "
                "was saved: resume from the last checkpoint, with a lower optimizer.lr, or set "
                "optimizer.grad_slots = \"all\" to skip such steps\n",
                at);
    if (stopped == 2) {
        MPI_CHECK(MPI_Finalize());
        exit(3);
    }
    char saved[64] = "checkpoint.interval = 0: nothing was saved";
    if (job->cfg.checkpoint_interval > 0)
        snprintf(saved, sizeof saved, "the checkpoint of step %d holds the last good state", at);
    if (rank == 0)
        fprintf(stderr,
                "mt-rank: stopped after step %d: %d steps in a row had a non-finite gradient norm "
                "(optimizer.max_bad_steps) and changed nothing; %s\n",
                at, job->cfg.max_bad_steps, saved);
    MPI_CHECK(MPI_Finalize());
    exit(3);
}

static void usage(FILE *f) {
    fprintf(f, "usage: mt-rank CONFIG [key=value...] [--resume DIR] [--out DIR] [--stop-at STEP] "
               "[--grad-dtype fp32|bf16]\n"
               "Started by mtrun on every rank of a job; run mtrun --help instead.\n");
}

static job_args parse_args(int argc, char **argv) {
    job_args a = {0};
    static const char *overrides[MT_MAX_OVERRIDES + 1];
    a.overrides = overrides;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        int has_value = i + 1 < argc;
        if (strcmp(s, "--help") == 0)
            usage(stdout), exit(0);
        else if (strcmp(s, "--resume") == 0 && has_value)
            a.resume_dir = argv[++i];
        else if (strcmp(s, "--out") == 0 && has_value)
            a.out_dir = argv[++i];
        else if (strcmp(s, "--stop-at") == 0 && has_value)
            a.stop_at = atoi(argv[++i]);
        else if (strcmp(s, "--grad-dtype") == 0 && has_value)
            a.grad_dtype = argv[++i];
        else if (s[0] != '-' && !a.config_path)
            a.config_path = s;
        else if (s[0] != '-' && strchr(s, '=') && a.n_overrides <= MT_MAX_OVERRIDES)
            overrides[a.n_overrides++] = s; // more than the most: the config loader says so
        else
            usage(stderr), exit(2);
    }
    if (!a.config_path) usage(stderr), exit(2);
    return a;
}

// A rank must not outlive the mpirun (or Open MPI daemon) that started it: killed with kill -9,
// mpirun cannot take its ranks down, and they would train on, into a folder that a resume may
// be writing to already. Nothing of a rank's state needs a goodbye: checkpoints are renamed into
// place whole. A parent gone before this ran (the rank was handed to mtrun or init) ends it too.
static void die_with_parent(void) {
    pid_t parent = getppid();
    SYS_CHECK(prctl(PR_SET_PDEATHSIG, SIGKILL));
    if (getppid() != parent || parent == 1) exit(1);
}

// The files the job writes (checkpoints, exports, metrics) get no more permissions than the
// user's umask gives: mtrun's, which a rank that ssh started on another host does not inherit
// (that login's may be wider). The tighter of the two applies.
static void take_users_umask(void) {
    const char *s = getenv("MT_UMASK");
    char *end;
    long mask = s ? strtol(s, &end, 8) : -1;
    if (!s || !*s || *end || mask < 0 || mask > 0777) return;
    mode_t own = umask(0);
    umask(own | (mode_t)mask);
}

int main(int argc, char **argv) {
    job_args args = parse_args(argc, argv);
    take_users_umask();
    die_with_parent();
    // The compute rank's gradient sums across nodes run on its copy thread (engine/transfer.c),
    // never at the same time as another MPI call of the rank.
    int provided;
    MPI_CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided));
    if (provided < MPI_THREAD_SERIALIZED) mt_die("MPI: this Open MPI has no MPI_THREAD_SERIALIZED");
    // Tests: the ranks' standard error goes nowhere, as when mpirun's forwarding loses a dying
    // rank's line; mtrun must still say it (from the last words, shm/syscheck.h).
    if (getenv("MT_FAULT_MUTE_STDERR") && !freopen("/dev/null", "w", stderr)) return 1;
    mt_job job;
    engine *eng = NULL;
    setup(&job, &args, &eng);
    if (job_is_compute(&job))
        engine_run(eng);
    else
        optimizer_run(&job);
    teardown(&job);
    MPI_CHECK(MPI_Finalize());
    return 0;
}
