// mpirun's standard error, relayed line by line: the ranks' own lines pass as they are; of
// Open MPI's boxed messages (between lines of dashes), the ones that only repeat what a rank
// already said are dropped, the one naming a rank that a signal killed becomes one line that
// names its node and role, and any other passes whole (it says why mpirun itself failed).
#include "launcher/launcher.h"
#include "shm/syscheck.h"
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BOX_MAX 8192

typedef struct {
    int ranks_per_node;
    char line[1024];
    size_t len;
    int in_box;
    int rank_lines;    // lines a rank said when it gave up ("megatrain: ...", "mt-rank: ...")
    uint64_t said[32]; // hashes of those lines: several ranks that fail alike say one line
    int nsaid;
    char box[BOX_MAX];
    size_t box_len;
} relay;

static int is_rule(const char *line) {
    size_t n = strspn(line, "-");
    return n >= 40 && (line[n] == '\n' || line[n] == 0);
}

static void say_killed(const relay *r, const char *box) {
    int rank, sig;
    char host[256], name[64] = "";
    const char *at = strstr(box, "noticed that process rank");
    if (!at || sscanf(at,
                      "noticed that process rank %d with PID %*d on node %255s exited on "
                      "signal %d (%63[^)])",
                      &rank, host, &sig, name) < 3) {
        fputs(box, stderr);
        return;
    }
    int node = rank / r->ranks_per_node, local = rank % r->ranks_per_node;
    char role[48];
    if (local == 0)
        snprintf(role, sizeof role, "the compute rank");
    else
        snprintf(role, sizeof role, "optimizer %d", local - 1);
    fprintf(stderr,
            "mtrun: rank %d (node %d, %s) on %s was killed by signal %d%s%s%s; mpirun "
            "ended the job\n",
            rank, node, role, host, sig, *name ? " (" : "", name, *name ? ")" : "");
}

static void end_box(relay *r) {
    r->box[r->box_len] = 0;
    if (strstr(r->box, "noticed that process rank") && strstr(r->box, "on signal"))
        say_killed(r, r->box);
    else if (!strstr(r->box, "terminated normally, but") &&
             !strstr(r->box, "exited with non-zero status"))
        fprintf(stderr,
                "--------------------------------------------------------------------------"
                "\n%s--------------------------------------------------------------------"
                "------\n",
                r->box);
    r->in_box = 0, r->box_len = 0;
}

// Whether a rank's last line was said already, by another rank (every optimizer rank finds the
// disk full at the same save).
static int said_before(relay *r, const char *line) {
    uint64_t h = 1469598103934665603ull; // FNV-1a
    for (const unsigned char *p = (const unsigned char *)line; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    for (int i = 0; i < r->nsaid && i < 32; i++)
        if (r->said[i] == h) return 1;
    r->said[r->nsaid++ % 32] = h;
    return 0;
}

static void take_line(relay *r, const char *line) {
    if (is_rule(line)) {
        if (r->in_box)
            end_box(r);
        else
            r->in_box = 1;
        return;
    }
    if (!r->in_box) {
        int last = !strncmp(line, "megatrain: ", 11) || !strncmp(line, "mt-rank: ", 9);
        if (last && said_before(r, line)) return;
        r->rank_lines += last;
        fputs(line, stderr);
        return;
    }
    size_t n = strlen(line);
    if (r->box_len + n < BOX_MAX) memcpy(r->box + r->box_len, line, n), r->box_len += n;
}

// Reads what is there; returns 0 at the pipe's end.
static int relay_some(relay *r, int fd) {
    char buf[4096];
    ssize_t got = read(fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR) return 1; // a Ctrl-C forwarded: keep relaying
    if (got <= 0) return 0;
    for (ssize_t i = 0; i < got; i++) {
        if (r->len < sizeof r->line - 2) r->line[r->len++] = buf[i];
        if (buf[i] != '\n' && r->len < sizeof r->line - 2) continue;
        r->line[r->len] = 0;
        take_line(r, r->line);
        r->len = 0;
    }
    fflush(stderr);
    return 1;
}

// Until the pipe ends, or mpirun has ended (a rank it could not take down may hold the pipe
// open) and a last second has brought nothing more.
int relay_mpirun_stderr(int fd, int ranks_per_node, pid_t mpirun, int *status, void (*tick)(void)) {
    static relay r;
    memset(&r, 0, sizeof r);
    r.ranks_per_node = ranks_per_node > 0 ? ranks_per_node : 1;
    int reaped = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n = poll(&p, 1, reaped ? 1000 : 200);
        if (n < 0 && errno != EINTR) SYS_CHECK(n);
        if (tick && !reaped) tick();
        if (n > 0 && !relay_some(&r, fd)) break;
        if (n == 0 && reaped) break;
        if (!reaped) {
            pid_t got = waitpid(mpirun, status, WNOHANG);
            if (got < 0 && errno != EINTR) SYS_CHECK(got);
            reaped = got == mpirun;
        }
    }
    if (r.len) r.line[r.len] = 0, take_line(&r, r.line);
    if (r.in_box && r.box_len) fputs(r.box, stderr); // a box cut short: show what came
    fflush(stderr);
    if (!reaped) {
        pid_t got;
        while ((got = waitpid(mpirun, status, 0)) < 0 && errno == EINTR) {
        }
        SYS_CHECK(got);
    }
    return r.rank_lines;
}
