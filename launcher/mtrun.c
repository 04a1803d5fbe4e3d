// mtrun: checks a job, then runs it on Open MPI.
//
//   mtrun [options] CONFIG [-- extra mpirun arguments]
//
// Everything that can be checked here is checked before anything starts: the arguments,
// the config (with the same parser the ranks use), the hostfile. Each problem is one line
// on stderr and exit code 2. Then mtrun runs mpirun as a child, forwards SIGINT and
// SIGTERM to it, and when it ends removes whatever shared memory the job left behind in
// /dev/shm, so that even a crashed job leaks nothing.
#include "launcher/launcher.h"
#include "runtime/base/base.h"
#include "runtime/io/io.h"
#include "shm/syscheck.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef MT_VERSION
#define MT_VERSION "unknown"
#endif

static void usage(FILE *f) {
    fputs("usage: mtrun [options] CONFIG [key=value...] [-- extra mpirun arguments]\n"
          "\n"
          "Trains the model that CONFIG (a train.cfg file) describes, on Open MPI: rank 0 is\n"
          "the compute process (it owns the GPU), ranks 1..N-1 are optimizer processes that\n"
          "hold the fp32 weights and Adam state in host memory, one shard each.\n"
          "\n"
          "options:\n"
          "  -np N, -n N      processes in all: 1 compute + N-1 optimizers (N >= 2;\n"
          "                   default: 1 + one optimizer per NUMA node)\n"
          "  --hostfile F     run on the hosts in F (Open MPI syntax: host [slots=N]);\n"
          "                   several hosts train data parallel, N / hosts ranks on each\n"
          "  --gpus G         G compute ranks on each host, one per GPU, data parallel: each\n"
          "                   host's ranks split into G alike nodes (default 1)\n"
          "  --resume DIR     continue from the checkpoint in DIR (a run folder or one step),\n"
          "                   writing on into that run folder unless --out names another\n"
          "  --out DIR        write checkpoints and logs to DIR instead of checkpoint.dir\n"
          "  --stop-at STEP   end after STEP steps, with a checkpoint (resume it later)\n"
          "  --dry-run        check everything, print the mpirun command line and exit\n"
          "  --plan           print the memory plan (host bytes per rank and kind, GPU bytes,\n"
          "                   placement, a step-time estimate) and the checks, then exit:\n"
          "                   0 when the job fits, 2 when it does not\n"
          "  --json           with --plan: the plan as one JSON object, every number exact\n"
          "  --force          start the job even when the plan says it does not fit\n"
          "  --gpu-mem BYTES  the GPU's free memory for the plan (K/M/G/T suffixes; default:\n"
          "                   what nvidia-smi reports for GPU 0, when there is one)\n"
          "  --disk-bw RATE   storage.dir's disk rate in bytes/s for the plan (K/M/G/T\n"
          "                   suffixes; default: a 256 MiB O_DIRECT write and read there)\n"
          "  --help           this text\n"
          "  --version        the version\n"
          "key=value settings override CONFIG's, with the same checks (dotted keys as in\n"
          "docs/configuration.md: optimizer.lr=1e-4 batch.seq_len=4096 backend=cpu); the plan\n"
          "line shows them, checkpoints record them, and --resume applies them again (settings\n"
          "given with --resume win). Arguments after -- go to mpirun, before the rank program.\n"
          "\n"
          "examples:\n"
          "  mtrun configs/tiny.cfg                      # the tiny default, on this machine\n"
          "  mtrun -np 4 train.cfg                       # 1 compute + 3 optimizer processes\n"
          "  mtrun --hostfile hostfiles/two-nodes -np 8 train.cfg   # 2 nodes, data parallel\n"
          "  mtrun --gpus 2 -np 8 train.cfg              # 2 GPUs of this host, 4 ranks each\n"
          "  mtrun --resume runs/tiny -np 4 configs/tiny.cfg\n"
          "  mtrun --dry-run -np 4 train.cfg -- --mca btl_tcp_if_include eth0\n"
          "  mtrun --plan -np 5 configs/7b.cfg           # will it fit? how long per step?\n"
          "  mtrun -np 5 configs/7b.cfg optimizer.lr=1e-4 batch.seq_len=4096\n"
          "\n"
          "Before it starts a job mtrun prints the plan in one line and refuses (exit 2) a job\n"
          "whose host memory or /dev/shm needs exceed what this host has, naming the smallest\n"
          "batch change that fits. MT_PLAN_MEM_LIMIT=BYTES and MT_PLAN_SHM_LIMIT=BYTES pretend\n"
          "that much is available (for tests). When stdout is a terminal, the compute rank\n"
          "redraws one progress line in place; otherwise it prints one line per step.\n"
          "\n"
          "Errors exit with code 2 before anything starts; otherwise mtrun exits with the\n"
          "job's status (128+N when a signal N ended it).\n",
          f);
}

// A user error: one line on stderr, exit code 2.
static void die_usage(const char *fmt, ...) {
    char msg[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fflush(stdout); // what mtrun said before (a resume's settings) comes first: the refusal is last
    mt_put_line(stderr, "mtrun: ", msg);
    exit(2);
}

// A whole positive number, or -1.
static long parse_count(const char *s) {
    if (!*s || *s == '-' || *s == '+') return -1;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    return (*end || errno || v > INT_MAX) ? -1 : v;
}

// "141G", "80000M", "150000000000": bytes (K, M, G, T are powers of 1024); 0 when malformed.
static uint64_t parse_bytes(const char *s) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    const char *units = "KMGT", *u = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
    if (u && *end) v *= (double)(1ull << (10 * (u - units + 1))), end++;
    if (errno || *end || !(v >= 1) || v > 1e18) return 0;
    return (uint64_t)v;
}

// The GPU's free bytes for the plan: --gpu-mem, or nvidia-smi's figure for GPU 0 (the compute
// rank's), or UINT64_MAX when neither says (no GPU, no nvidia-smi: the plan checks nothing).
static uint64_t gpu_free_bytes(const mtrun_opts *o, const char **where) {
    if (o->gpu_mem) return *where = "--gpu-mem", parse_bytes(o->gpu_mem);
    *where = "nvidia-smi";
    FILE *f = popen("nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i 0 "
                    "2>/dev/null",
                    "r");
    if (!f) return UINT64_MAX;
    unsigned long long mib = 0;
    int got = fscanf(f, "%llu", &mib);
    int rc = pclose(f);
    return got == 1 && rc == 0 && mib > 0 ? (uint64_t)mib << 20 : UINT64_MAX;
}

// ", NUMA node N" for GPU `gpu` of this host (nvidia-smi's PCI address, the kernel's node for
// it), or "" when neither says. The ranks number GPUs as nvidia-smi does: mtrun passes them
// CUDA_DEVICE_ORDER=PCI_BUS_ID (mpirun_cmd.c), unless the user chose another order or a subset.
static void gpu_numa_text(int gpu, char *out, size_t n) {
    char cmd[128], bus[64] = "";
    const char *order = getenv("CUDA_DEVICE_ORDER");
    *out = 0;
    if (getenv("CUDA_VISIBLE_DEVICES") || (order && strcmp(order, "PCI_BUS_ID") != 0)) return;
    snprintf(cmd, sizeof cmd,
             "nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader -i %d 2>/dev/null", gpu);
    FILE *f = popen(cmd, "r");
    if (!f) return;
    int got = fscanf(f, "%63s", bus) == 1;
    if (pclose(f) != 0 || !got) return;
    int node = mt_pci_numa_node(bus);
    if (node >= 0) snprintf(out, n, ", NUMA node %d", node);
}

// The value of an option: "--opt VALUE" or "--opt=VALUE".
static const char *value_of(int argc, char **argv, int *i, const char *opt) {
    const char *a = argv[*i];
    size_t n = strlen(opt);
    if (strncmp(a, opt, n) == 0 && a[n] == '=') return a + n + 1;
    if (*i + 1 >= argc) die_usage("%s: needs a value (see mtrun --help)", opt);
    return argv[++*i];
}

static int is_opt(const char *a, const char *opt) {
    size_t n = strlen(opt);
    return strncmp(a, opt, n) == 0 && (a[n] == 0 || a[n] == '=');
}

typedef struct {
    int dry_run, plan, json, force;
} mode;

static void parse_args(int argc, char **argv, mtrun_opts *o, mode *m) {
    const char *np = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            o->extra = argv + i + 1;
            o->nextra = argc - i - 1;
            break;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--version")) {
#ifdef MT_HAVE_CUDA
            printf("mtrun (MegaTrain-C) %s, backends: cpu, cuda\n", MT_VERSION);
#else
            printf("mtrun (MegaTrain-C) %s, backends: cpu\n", MT_VERSION);
#endif
            exit(0);
        } else if (!strcmp(a, "--dry-run")) {
            m->dry_run = 1;
        } else if (!strcmp(a, "--plan")) {
            m->plan = 1;
        } else if (!strcmp(a, "--json")) {
            m->json = 1;
        } else if (!strcmp(a, "--force")) {
            m->force = 1;
        } else if (is_opt(a, "-np") || is_opt(a, "--np") || is_opt(a, "-n")) {
            const char *name = is_opt(a, "-np") ? "-np" : is_opt(a, "--np") ? "--np" : "-n";
            np = value_of(argc, argv, &i, name);
            long v = parse_count(np);
            if (v < 0) die_usage("%s %s: not a number of processes", name, np);
            if (v < 2)
                die_usage("%s %s: need at least 2 processes (1 compute + 1 optimizer)", name, np);
            o->np = (int)v;
        } else if (is_opt(a, "--hostfile") || is_opt(a, "-hostfile")) {
            o->hostfile = value_of(argc, argv, &i, a[1] == '-' ? "--hostfile" : "-hostfile");
        } else if (is_opt(a, "--gpus")) {
            const char *g = value_of(argc, argv, &i, "--gpus");
            o->gpus = (int)parse_count(g);
            if (o->gpus < 1 || o->gpus > 64) die_usage("--gpus %s: not a number of GPUs (1-64)", g);
        } else if (is_opt(a, "--resume")) {
            o->resume = value_of(argc, argv, &i, "--resume");
        } else if (is_opt(a, "--disk-bw")) {
            o->disk_bw = value_of(argc, argv, &i, "--disk-bw");
            if (parse_bytes(o->disk_bw) == 0)
                die_usage("--disk-bw %s: not a rate in bytes/s (like 2G or 2000000000)",
                          o->disk_bw);
        } else if (is_opt(a, "--gpu-mem")) {
            o->gpu_mem = value_of(argc, argv, &i, "--gpu-mem");
            if (parse_bytes(o->gpu_mem) == 0)
                die_usage("--gpu-mem %s: not a byte count (like 141G or 150000000000)", o->gpu_mem);
        } else if (is_opt(a, "--out")) {
            o->out = value_of(argc, argv, &i, "--out");
        } else if (is_opt(a, "--stop-at")) {
            o->stop_at = value_of(argc, argv, &i, "--stop-at");
            if (parse_count(o->stop_at) < 1)
                die_usage("--stop-at %s: not a step number (>= 1)", o->stop_at);
        } else if (a[0] == '-' && a[1]) {
            die_usage("%s: unknown option (see mtrun --help; mpirun options go after --)", a);
        } else if (strchr(a, '=') && (o->config || access(a, F_OK) != 0)) {
            if (o->n_overrides == MT_MAX_OVERRIDES)
                die_usage("%s: more than %d key=value settings", a, MT_MAX_OVERRIDES);
            o->overrides[o->n_overrides++] = a;
        } else if (o->config) {
            die_usage("%s: a second config file? (one CONFIG, then key=value settings; mpirun "
                      "arguments go after --)",
                      a);
        } else {
            o->config = a;
        }
    }
    if (!o->config) die_usage("missing CONFIG, the train.cfg file (usage: mtrun [options] CONFIG)");
    if (m->json && !m->plan) die_usage("--json: only with --plan");
}

static void check_dir(const char *opt, const char *dir) {
    struct stat st;
    if (!*dir) die_usage("%s: needs a folder", opt);
    if (stat(dir, &st) < 0) die_usage("%s %s: %s", opt, dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) die_usage("%s %s: not a folder", opt, dir);
}

// 16 bytes from the kernel's CSPRNG, in hex: other users cannot guess the job's /dev/shm
// names and claim them first.
static void make_job_id(char out[33]) {
    unsigned char b[16];
    ssize_t got = 0;
    while (got < (ssize_t)sizeof b) {
        ssize_t n = getrandom(b + got, sizeof b - (size_t)got, 0);
        if (n < 0 && errno == EINTR) continue;
        SYS_CHECK(n);
        got += n;
    }
    for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

// mt-rank sits beside mtrun: in an install, and in a build tree (bin/).
static void find_rank_program(char *out, size_t n, int must_exist) {
    char self[PATH_MAX - 16];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    SYS_CHECK(len);
    self[len] = 0;
    *strrchr(self, '/') = 0;
    snprintf(out, n, "%s/mt-rank", self);
    if (must_exist && access(out, X_OK) != 0)
        die_usage("%s: not found (build the mt-rank target)", out);
}

static int terminal_columns(void) {
    struct winsize ws;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    const char *env = getenv("COLUMNS");
    return env && atoi(env) > 0 ? atoi(env) : 80;
}

// The memory plan: with --plan it is the whole output; before a job, one line, and a job that
// cannot fit is refused before anything is allocated. Returns the exit code for --plan.
// optimizer.grad_dtype = "auto": fp32 gradient slots when the job fits with them, else bf16.
// The ranks are told the outcome (--grad-dtype), so they lay out exactly what was planned.
static int make_plan(mt_plan *plan, mtrun_opts *o, const mt_config *cfg, const placement *p,
                     const host_probe *host, char *err, size_t n) {
    int want = plan_grad_bytes(cfg), cuda = plan_backend_cuda(cfg);
    const char *where = "";
    uint64_t gpu = cuda ? gpu_free_bytes(o, &where) : UINT64_MAX;
    for (int bytes = want ? want : 4;; bytes = 2) {
        if (plan_make(plan, cfg, o->np / o->nodes, cuda, p->numa_nodes, !p->oversubscribe, bytes,
                      gpu, o->nodes, err, n) < 0)
            die_usage("%s", err);
        plan->gpu_source = where;
        if (host->disk_bw > 0) plan->disk_bw = host->disk_bw;
        int fits = plan_check(plan, host, err, n) == 0;
        o->grad_dtype = bytes == 2 ? "bf16" : "fp32";
        if (fits || want || bytes == 2) return fits;
        plan_free(plan);
    }
}

// Data parallel over the hostfile's hosts, or MT_TEST_NODES virtual nodes on this host (tests):
// every node runs np / nodes ranks over micro_batches / nodes micro-batches of each step.
// Returns one node's config, the one its plan is made for.
static mt_config split_over_nodes(mtrun_opts *o, const mt_config *cfg, int hosts) {
    const char *test = getenv("MT_TEST_NODES");
    o->nodes = test && *test ? (int)parse_count(test) : hosts;
    if (o->nodes < 1) die_usage("MT_TEST_NODES=%s: not a number of nodes", test);
    if (o->gpus < 1) o->gpus = 1;
    o->nodes *= o->gpus;
    if (o->np % o->nodes != 0 || o->np / o->nodes < 2)
        die_usage("-np %d over %d nodes: each node needs the same number of ranks, at least 2 "
                  "(1 compute + 1 optimizer)",
                  o->np, o->nodes);
    char err[MT_PATH_MAX + 256];
    int cuda = plan_backend_cuda(cfg);
    if (mt_config_check_micro_split(cfg, o->nodes, err, sizeof err) < 0 ||
        (cuda && mt_config_check_cuda_nodes(cfg, o->nodes, err, sizeof err) < 0))
        die_usage("%s", err);
    mt_config node = *cfg;
    node.micro_batches /= o->nodes;
    if (cuda && o->nodes > 1) node.device_groups = 0; // as the compute rank decides (engine.c)
    return node;
}

// Data parallel: which ranks each node runs, in what role. The plan above is one node's.
static void print_nodes(const mtrun_opts *o, const mt_config *node_cfg) {
    int per = o->np / o->nodes, M = node_cfg->micro_batches, hosts = o->nodes / o->gpus;
    printf("data parallel over %d nodes (%d %shost%s x %d GPU%s); the plan above is one node's, "
           "checked against this host only:\n",
           o->nodes, hosts, getenv("MT_TEST_NODES") ? "virtual (MT_TEST_NODES) " : "",
           hosts == 1 ? "" : "s", o->gpus, o->gpus == 1 ? "" : "s");
    for (int n = 0; n < o->nodes; n++) {
        int first = n * per, last = first + per - 1;
        char opt[48], micro[48];
        snprintf(opt, sizeof opt, per == 2 ? "optimizer rank %d" : "optimizer ranks %d-%d",
                 first + 1, last);
        snprintf(micro, sizeof micro, M == 1 ? "micro-batch %d" : "micro-batches %d-%d", n * M,
                 (n + 1) * M - 1);
        char numa[32] = ""; // this host's GPUs: other hosts' are theirs to say
        if (n / o->gpus == 0 || getenv("MT_TEST_NODES"))
            gpu_numa_text(n % o->gpus, numa, sizeof numa);
        printf("  node %d (host %d, GPU %d%s): ranks %d-%d: compute rank %d, %s; %s of each "
               "step%s\n",
               n, n / o->gpus, n % o->gpus, numa, first, last, first, opt, micro,
               n == 0 ? "; writes the run folder" : "");
    }
}

// Before a job, the compact plan goes to *line (to print once the run folder is locked: a job
// refused for its folder or its memory says one line and nothing else).
static int plan_job(mtrun_opts *o, const mt_config *cfg, const placement *p, const mode *m,
                    char **line) {
    char err[MT_PATH_MAX + 1024];
    mt_plan plan;
    host_probe host;
    host_probe_read(&host);
    host_probe_disk(&host, cfg, o->disk_bw ? (double)parse_bytes(o->disk_bw) : 0);
    int fits = make_plan(&plan, o, cfg, p, &host, err, sizeof err);
    int cores = plan_compute_cores(p);
    if (m->plan) {
        if (m->json)
            plan_print_json(stdout, &plan, &host, cores, fits);
        else
            plan_print(stdout, &plan, &host, p, cores);
        if (o->nodes > 1 && !m->json) print_nodes(o, cfg);
        fflush(stdout);
        plan_warnings(stderr, &plan, &host);
        if (!fits) fprintf(stderr, "mtrun: %s\n", err);
        plan_free(&plan);
        return fits ? 0 : 2;
    }
    if (!fits && !m->force)
        die_usage("%s (mtrun --plan shows the details; --force starts it anyway)", err);
    if (!m->dry_run) {
        int steps = o->stop_at ? (int)parse_count(o->stop_at) : cfg->steps;
        size_t len;
        FILE *f = open_memstream(line, &len);
        if (!f) mt_die("out of memory");
        plan_print_compact(f, &plan, &host, cores, steps);
        fclose(f);
        plan_warnings(stderr, &plan, &host);
    }
    plan_free(&plan);
    return 0;
}

// More ranks on a host than it has cores only share those cores, and each one costs its process
// overhead (the plan counts it): a thousand would bury a small machine before the plan's memory
// check could help, as each is small. At most 2 per core, and 8 on any host (tests oversubscribe
// small machines).
// MT_TEST_NODES's virtual hosts count as hosts: tests run several on one machine.
static void check_ranks_per_host(const mtrun_opts *o, const placement *p) {
    int hosts = o->nodes / o->gpus;
    long per_host = o->np / (hosts > 0 ? hosts : 1), most = 2L * p->cores;
    if (most < 8) most = 8;
    if (per_host > most)
        die_usage("-np %d: %ld ranks on a host of %d core%s, at most %ld (2 per core, or 8); the "
                  "default, 1 compute + 1 optimizer per NUMA node, is what fits best",
                  o->np, per_host, p->cores, p->cores == 1 ? "" : "s", most);
}

// The checkpoint --resume names, resolved once for the two that need it; "" when there is none
// (the ranks say why).
static char resume_step[MT_PATH_MAX];

static void resolve_resume(const mtrun_opts *o) {
    char err[MT_PATH_MAX + 256];
    if (o->resume &&
        checkpoint_resolve(o->resume, resume_step, sizeof resume_step, err, sizeof err) != 0)
        resume_step[0] = 0;
}

// --resume: the overrides the checkpoint's run was given apply again, under the command line's:
// a resumed run trains on with the settings it had, unless told otherwise.
static void add_resumed_overrides(mtrun_opts *o) {
    static char saved[MT_MAX_OVERRIDES][MT_OVERRIDE_MAX];
    char err[MT_PATH_MAX + 256];
    int n = 0;
    if (!resume_step[0]) return;
    // -1: a damaged manifest, which the ranks check whole and name; -2: its overrides are bad;
    // -3: another user could have written them, so they are not this user's to apply.
    int rc = checkpoint_read_overrides(resume_step, saved, MT_MAX_OVERRIDES, &n, err, sizeof err);
    if (rc == -2) die_usage("%s", err);
    if (rc == -3) die_usage("--resume %s: %s", o->resume, err);
    if (rc != 0) return;
    const char *merged[MT_MAX_OVERRIDES + 1];
    int m = 0;
    for (int i = 0; i < n; i++) {
        size_t key = strcspn(saved[i], "=") + 1;
        int replaced = 0;
        for (int j = 0; j < o->n_overrides && !replaced; j++)
            replaced = strncmp(o->overrides[j], saved[i], key) == 0;
        if (!replaced) merged[m++] = saved[i];
    }
    if (m == 0) return;
    if (m + o->n_overrides > MT_MAX_OVERRIDES)
        die_usage("--resume %s: its %d settings and the command line's %d make more than %d",
                  o->resume, m, o->n_overrides, MT_MAX_OVERRIDES);
    printf("mtrun: --resume: the checkpoint's settings apply again:");
    for (int i = 0; i < m; i++) printf(" %s", mt_shown(merged[i]));
    printf("\n");
    for (int j = 0; j < o->n_overrides; j++) merged[m + j] = o->overrides[j];
    o->n_overrides += m;
    memcpy(o->overrides, merged, sizeof(char *) * (size_t)o->n_overrides);
}

// One job per run folder (run_lock.c): the folder the ranks will write to, decided as they
// decide it (mt-rank's load_config and resolve_checkpoints): --out, else the run folder of the
// checkpoint --resume names, else checkpoint.dir.
static void lock_run_folder(const mtrun_opts *o, const mt_config *cfg) {
    char dir[MT_PATH_MAX], err[MT_PATH_MAX + 256];
    const char *what = o->out ? "--out" : o->resume ? "--resume" : "checkpoint.dir";
    if (o->out) {
        snprintf(dir, sizeof dir, "%s", o->out);
    } else if (resume_step[0]) {
        snprintf(dir, sizeof dir, "%s", resume_step);
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir) *slash = 0;
    } else if (o->resume) { // no checkpoint there (yet): the ranks say so, unless a job writes one
        snprintf(dir, sizeof dir, "%s", o->resume);
    } else {
        snprintf(dir, sizeof dir, "%s", cfg->checkpoint_dir);
    }
    // Trusted before any folder of it is made (none inside another user's), and as made (a name
    // on the way another user took meanwhile).
    if (check_run_folder_writable(dir, what, err, sizeof err) < 0 ||
        check_run_folder_trusted(dir, what, err, sizeof err) < 0 ||
        make_dirs_or_say(dir, err, sizeof err) < 0 ||
        check_run_folder_trusted(dir, what, err, sizeof err) < 0 ||
        run_lock_take(dir, what, err, sizeof err) < 0)
        die_usage("%s", err);
}

int main(int argc, char **argv) {
    mtrun_opts o = {0};
    mode m = {0};
    parse_args(argc, argv, &o, &m);

    char err[MT_PATH_MAX + 512];
    static mt_config cfg; // large: overrides and paths
    if (o.resume) check_dir("--resume", o.resume);
    resolve_resume(&o);
    add_resumed_overrides(&o);
    if (mt_config_load_with(&cfg, o.config, o.overrides, o.n_overrides, err, sizeof err) < 0)
        die_usage("%s", err);
    if (o.out && !*o.out) die_usage("--out: needs a folder");
    if (o.stop_at && parse_count(o.stop_at) > cfg.steps)
        die_usage("--stop-at %s: past the last step (steps = %d in %s)", o.stop_at, cfg.steps,
                  o.config);

    placement p;
    placement_detect(&p, &o, 0); // slots from the hostfile below
    int hosts = 1;
    if (o.hostfile) {
        long slots;
        if (hostfile_check(o.hostfile, p.cores, &hosts, &slots, err, sizeof err) < 0)
            die_usage("%s", err);
        placement_detect(&p, &o, slots);
    }
    if (!o.np) { // default: one optimizer per NUMA node
        o.np = 1 + p.numa_nodes;
        placement_detect(&p, &o, p.slots);
    }
    mt_config node_cfg = split_over_nodes(&o, &cfg, hosts);
    check_ranks_per_host(&o, &p);
    char *plan_line = NULL;
    int rc = plan_job(&o, &node_cfg, &p, &m, &plan_line);
    if (m.plan) return rc;
    if (!m.dry_run) {
        if (check_backend_device(&o, &cfg, err, sizeof err) < 0) die_usage("%s", err);
        lock_run_folder(&o, &cfg);
        fputs(plan_line, stdout);
        fflush(stdout); // before any line on stderr: the plan line comes first
    }
    free(plan_line);

    char mpirun[PATH_MAX];
    const char *want = getenv("MT_MPIRUN") ? getenv("MT_MPIRUN") : "mpirun";
    if (find_in_path(want, mpirun, sizeof mpirun) < 0)
        die_usage("%s: not found%s (install Open MPI, or set MT_MPIRUN)", want,
                  strchr(want, '/') ? "" : " on PATH");
    char rank_prog[PATH_MAX + 16];
    find_rank_program(rank_prog, sizeof rank_prog, !m.dry_run);

    if (!m.dry_run) job_dirs_reap();
    char job[33];
    make_job_id(job);
    SYS_CHECK(setenv("MT_JOB_ID", job, 1)); // mpirun passes it on: -x MT_JOB_ID
    // Open MPI forwards rank 0's stdout through a pipe, so the rank cannot see the terminal:
    // it is told, and how wide the terminal is, to redraw its progress line in place.
    const char *tty = getenv("MT_TTY"); // the user's choice wins
    o.tty = tty && *tty ? atoi(tty) != 0 : isatty(STDOUT_FILENO);
    o.tty_columns = o.tty ? terminal_columns() : 0;

    // One host: Open MPI's segments go to the job's folder (a hostfile's other hosts have none).
    static char dry_dir[96];
    snprintf(dry_dir, sizeof dry_dir, "/dev/shm/mtc-%s", job);
    const char *job_dir = m.dry_run ? dry_dir : job_dir_make(job);
    if (!o.hostfile) o.mpi_shm_dir = job_dir;
    cmdline c;
    mpirun_cmd_build(&c, &o, &p, mpirun, rank_prog);
    if (m.dry_run) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "MT_JOB_ID=%s ", job);
        cmd_print_quoted(stdout, prefix, &c);
        return 0;
    }

    int opt = o.np / o.nodes - 1;
    if (o.nodes > 1) printf("mtrun: %d nodes x (", o.nodes);
    printf("%s1 compute + %d optimizer process%s%s", o.nodes > 1 ? "" : "mtrun: ", opt,
           opt == 1 ? "" : "es", o.nodes > 1 ? ")" : "");
    if (o.hostfile) printf(" on %d host%s", hosts, hosts == 1 ? "" : "s");
    if (p.oversubscribe)
        printf(", oversubscribed (%d processes, %ld slots), unbound", o.np, p.slots);
    else
        printf(", bound over %d NUMA node%s", p.numa_nodes, p.numa_nodes == 1 ? "" : "s");
    printf(", config %s, job %s\n", mt_shown(o.config), job);
    fflush(stdout);
    rc = supervise_run(&c, job, o.np / o.nodes);
    run_lock_clear_unfinished();
    // 2: a rank refused its input, 3: non-finite gradients; each said so in its own line.
    int mpirun_sig, said = supervise_ranks_said(&mpirun_sig);
    if (rc != 0 && rc != 2 && rc != 3 && !supervise_signal() && mpirun_sig)
        fprintf(stderr,
                "mtrun: the job ended abnormally: mpirun itself was killed by signal %d (%s), "
                "and the ranks with it%s\n",
                mpirun_sig, strsignal(mpirun_sig), said ? "; their messages are above" : "");
    else if (rc != 0 && rc != 2 && rc != 3 && !supervise_signal())
        fprintf(stderr, "mtrun: the job ended abnormally (exit code %d%s); %s\n", rc,
                rc > 128 ? ", a rank was killed by a signal" : "",
                said ? "the failing rank's messages are above" : "no rank said why");
    return rc;
}
