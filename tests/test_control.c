// The control plane under load, on 5 ranks: rank 0 plays the compute process, ranks 1..n-1 the
// optimizers. Checks order and bit-exact content of ping-pong and burst traffic, that a blocked
// receiver wakes promptly and burns no CPU, and reports the round-trip latency.
#include "runtime/job/job.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

enum { PINGS = 1000, BURST = 2000, QUEUED = 500, LAT_ROUNDS = 2000 };

static int rank, size;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static double cpu_seconds(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

static void sleep_s(double s) {
    struct timespec t = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    nanosleep(&t, NULL);
}

// Arbitrary 64-bit patterns (NaNs, infinities, subnormals included) to prove bit-exactness.
static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static double bits_to_double(uint64_t b) {
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
}

static uint64_t double_bits(double d) {
    uint64_t b;
    memcpy(&b, &d, sizeof b);
    return b;
}

// The i-th message of a stream from src to dst; kind and fields all depend on the position.
static control_msg make_msg(int kind, int src, int dst, int64_t i) {
    uint64_t key = ((uint64_t)src << 56) ^ ((uint64_t)dst << 48) ^ (uint64_t)i;
    return (control_msg){.kind = kind,
                         .group = (int32_t)(mix(key) % 1000003) - 500000,
                         .step = (int64_t)(mix(key + 1) >> 1) ^ i,
                         .value = bits_to_double(mix(key + 2))};
}

static int same_msg(const control_msg *a, const control_msg *b) {
    return a->kind == b->kind && a->group == b->group && a->step == b->step &&
           double_bits(a->value) == double_bits(b->value);
}

static int expect_msg(int src, const control_msg *got, int want_src, const control_msg *want,
                      const char *what) {
    if (src == want_src && same_msg(got, want)) return 0;
    fprintf(stderr,
            "rank %d %s: got from %d {%d %d %" PRId64 " %016" PRIx64 "}, want from %d "
            "{%d %d %" PRId64 " %016" PRIx64 "}\n",
            rank, what, src, got->kind, got->group, got->step, double_bits(got->value), want_src,
            want->kind, want->group, want->step, double_bits(want->value));
    return 1;
}

// Rank 0 pings every optimizer PINGS times (all of them in flight at once); each answers.
// Replies come from any source in any interleaving, but per source in order.
static int test_ping_pong(mt_control *ctl) {
    int failures = 0;
    control_msg m;
    if (rank == 0) {
        int64_t *next = calloc(size, sizeof *next);
        for (int64_t i = 0; i < PINGS; i++) {
            for (int k = 1; k < size; k++) {
                control_msg ping = make_msg(CONTROL_GRADS_READY, 0, k, i);
                control_send(ctl, k, &ping);
            }
            for (int k = 1; k < size; k++) {
                int src = control_recv(ctl, &m);
                if (src < 1 || src >= size) {
                    failures++;
                    continue;
                }
                control_msg want = make_msg(CONTROL_WEIGHTS_READY, src, 0, next[src]++);
                failures += expect_msg(src, &m, src, &want, "ping-pong reply");
            }
        }
        free(next);
    } else {
        for (int64_t i = 0; i < PINGS; i++) {
            int src = control_recv(ctl, &m);
            control_msg want = make_msg(CONTROL_GRADS_READY, 0, rank, i);
            failures += expect_msg(src, &m, 0, &want, "ping");
            control_msg pong = make_msg(CONTROL_WEIGHTS_READY, rank, 0, i);
            control_send(ctl, 0, &pong);
        }
    }
    return failures;
}

// Every optimizer fires BURST messages at rank 0 without waiting; then rank 0 fires BURST at
// each of them. Far more than fit in a shared-memory FIFO, so sends queue up inside UCX.
static int test_bursts(mt_control *ctl) {
    int failures = 0;
    control_msg m, ack = {.kind = CONTROL_WEIGHTS_READY};
    if (rank == 0) {
        int64_t *next = calloc(size, sizeof *next);
        for (int64_t n = 0; n < (int64_t)BURST * (size - 1); n++) {
            int src = control_recv(ctl, &m);
            if (src < 1 || src >= size) {
                failures++;
                continue;
            }
            control_msg want = make_msg(CONTROL_GRADS_READY, src, 0, next[src]++);
            failures += expect_msg(src, &m, src, &want, "all-to-one burst");
        }
        for (int k = 1; k < size; k++) control_send(ctl, k, &ack);
        for (int k = 1; k < size; k++)
            for (int64_t i = 0; i < BURST; i++) {
                control_msg msg = make_msg(CONTROL_WEIGHTS_READY, 0, k, i + BURST);
                control_send(ctl, k, &msg);
            }
        for (int k = 1; k < size; k++) {
            int src = control_recv(ctl, &m);
            failures += src < 1 || src >= size || m.kind != CONTROL_GRADS_READY;
        }
        free(next);
    } else {
        for (int64_t i = 0; i < BURST; i++) {
            control_msg msg = make_msg(CONTROL_GRADS_READY, rank, 0, i);
            control_send(ctl, 0, &msg);
        }
        int src = control_recv(ctl, &m);
        failures += expect_msg(src, &m, 0, &ack, "burst ack");
        for (int64_t i = 0; i < BURST; i++) {
            src = control_recv(ctl, &m);
            control_msg want = make_msg(CONTROL_WEIGHTS_READY, 0, rank, i + BURST);
            failures += expect_msg(src, &m, 0, &want, "one-to-all burst");
        }
        control_msg done = {.kind = CONTROL_GRADS_READY};
        control_send(ctl, 0, &done);
    }
    return failures;
}

// try_recv returns -1 when nothing is there, and finds a message once one is sent.
static int test_try_recv(mt_control *ctl) {
    int failures = 0;
    control_msg m;
    if (rank == 0) {
        failures += control_try_recv(ctl, &m) != -1;
        MPI_Barrier(MPI_COMM_WORLD); // now rank 1 sends
        double t0 = now();
        int src;
        while ((src = control_try_recv(ctl, &m)) < 0 && now() - t0 < 10) sleep_s(1e-5);
        control_msg want = make_msg(CONTROL_GRADS_READY, 1, 0, 42);
        failures += expect_msg(src, &m, 1, &want, "try_recv");
        failures += control_try_recv(ctl, &m) != -1;
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
        control_msg msg = make_msg(CONTROL_GRADS_READY, 1, 0, 42);
        if (rank == 1) control_send(ctl, 0, &msg);
    }
    return failures;
}

// A receiver blocked for about a second must sleep in the kernel: little CPU, and it wakes
// soon after the message is sent. value carries the send time (CLOCK_MONOTONIC, one node).
static int blocked_recv(mt_control *ctl, int want_src, double min_wait, double *cpu, double *wake) {
    control_msg m;
    double c0 = cpu_seconds(), t0 = now();
    int src = control_recv(ctl, &m);
    double t1 = now();
    *cpu = cpu_seconds() - c0;
    *wake = t1 - m.value;
    int failures = (want_src >= 0 && src != want_src) || m.kind != CONTROL_WEIGHTS_READY;
    if (t1 - t0 < min_wait)
        fprintf(stderr, "rank %d: woke after only %.3f s\n", rank, t1 - t0), failures++;
    return failures;
}

static int test_idle_cpu(mt_control *ctl) {
    int failures = 0;
    double cpu = 0, wake = 0, max_cpu, max_wake;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        sleep_s(1.0); // the optimizers block in control_recv meanwhile
        for (int k = 1; k < size; k++) {
            control_msg m = {.kind = CONTROL_WEIGHTS_READY, .value = now()};
            control_send(ctl, k, &m);
        }
    } else {
        failures += blocked_recv(ctl, 0, 0.9, &cpu, &wake);
    }
    MPI_Reduce(&cpu, &max_cpu, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&wake, &max_wake, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("  optimizers blocked 1 s: max CPU %.4f s, max wake-up delay %.1f us\n", max_cpu,
               max_wake * 1e6);
    failures += rank != 0 && cpu >= 0.3;

    // And the other way round: the compute rank waits for all optimizers.
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        // Only the first message is waited for; the others have arrived by then.
        failures += blocked_recv(ctl, -1, 0.9, &cpu, &wake);
        printf("  compute rank blocked 1 s: CPU %.4f s, wake-up delay %.1f us\n", cpu, wake * 1e6);
        failures += cpu >= 0.3;
        for (int k = 2; k < size; k++) failures += blocked_recv(ctl, -1, 0, &cpu, &wake);
    } else {
        sleep_s(1.0);
        control_msg m = {.kind = CONTROL_WEIGHTS_READY, .value = now()};
        control_send(ctl, 0, &m);
    }
    return failures;
}

// Senders whose messages do not fit in the receiver's shared-memory FIFO keep them queued in
// UCX, and shared memory gives no event when room frees up. While the receiver sleeps for a
// second, such a sender waiting in control_recv must still not spin.
static int test_full_fifo(mt_control *ctl) {
    int failures = 0;
    control_msg m, ack = {.kind = CONTROL_WEIGHTS_READY};
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        sleep_s(1.0);
        int64_t *next = calloc(size, sizeof *next);
        for (int64_t n = 0; n < (int64_t)QUEUED * (size - 1); n++) {
            int src = control_recv(ctl, &m);
            control_msg want = make_msg(CONTROL_GRADS_READY, src, 0, next[src]++ + 2 * BURST);
            failures += expect_msg(src, &m, src, &want, "queued sends");
        }
        free(next);
        for (int k = 1; k < size; k++) control_send(ctl, k, &ack);
    } else {
        for (int64_t i = 0; i < QUEUED; i++) {
            control_msg msg = make_msg(CONTROL_GRADS_READY, rank, 0, i + 2 * BURST);
            control_send(ctl, 0, &msg);
        }
        double c0 = cpu_seconds(), t0 = now();
        int src = control_recv(ctl, &m);
        double cpu = cpu_seconds() - c0, wall = now() - t0;
        failures += expect_msg(src, &m, 0, &ack, "queued sends ack");
        printf("  rank %d with %d queued sends waited %.3f s, CPU %.4f s\n", rank, QUEUED, wall,
               cpu);
        failures += cpu >= 0.05;
    }
    return failures;
}

// Round trips between rank 0 and rank 1 while ranks 2.. sleep in control_recv. "blocking":
// both sides wait in control_recv (the real path, kernel wake-ups included); "polling": both
// spin on control_try_recv. Fails if blocking round trips look like missed wake-ups.
static int recv_spinning(mt_control *ctl, control_msg *m, int polling) {
    int src;
    if (!polling) return control_recv(ctl, m);
    while ((src = control_try_recv(ctl, m)) < 0) continue;
    return src;
}

static void ping_rounds(mt_control *ctl, int polling, double *rtts) {
    control_msg m, ping = {.kind = CONTROL_GRADS_READY};
    for (int i = 0; i < LAT_ROUNDS; i++) {
        if (rank == 0) {
            double t0 = now();
            control_send(ctl, 1, &ping);
            recv_spinning(ctl, &m, polling);
            rtts[i] = now() - t0;
        } else {
            recv_spinning(ctl, &m, polling);
            control_send(ctl, 0, &m);
        }
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double report_rtts(const char *name, double *rtts) {
    qsort(rtts, LAT_ROUNDS, sizeof *rtts, cmp_double);
    double sum = 0;
    for (int i = 0; i < LAT_ROUNDS; i++) sum += rtts[i];
    double median = rtts[LAT_ROUNDS / 2];
    printf("  round trip %s: median %.1f us, mean %.1f us, p99 %.1f us (%d rounds)\n", name,
           median * 1e6, sum / LAT_ROUNDS * 1e6, rtts[LAT_ROUNDS * 99 / 100] * 1e6, LAT_ROUNDS);
    return median;
}

static int test_latency(mt_control *ctl) {
    int failures = 0;
    double *rtts = calloc(LAT_ROUNDS, sizeof *rtts);
    control_msg m, stop = {.kind = CONTROL_STOP};
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank <= 1) {
        ping_rounds(ctl, 0, rtts);
        if (rank == 0) failures += report_rtts("blocking", rtts) > 5e-3;
        ping_rounds(ctl, 1, rtts);
        if (rank == 0) report_rtts("polling", rtts);
    }
    if (rank == 0)
        for (int k = 2; k < size; k++) control_send(ctl, k, &stop);
    else if (rank >= 2)
        failures += control_recv(ctl, &m) != 0 || m.kind != CONTROL_STOP;
    free(rtts);
    return failures;
}

// A second control plane after the first is gone: finalize left nothing behind. It also
// ends with messages in flight.
static int test_reinit(void) {
    mt_control *ctl = control_init(MPI_COMM_WORLD);
    int failures = 0;
    control_msg m, msg = make_msg(CONTROL_STOP, rank, 0, 7);
    if (rank != 0) {
        control_send(ctl, 0, &msg);
    } else {
        for (int k = 1; k < size; k++) {
            int src = control_recv(ctl, &m);
            control_msg want = make_msg(CONTROL_STOP, src, 0, 7);
            failures += expect_msg(src, &m, src, &want, "reinit");
        }
    }
    // Leftovers both ways that nobody receives: finalize must discard them, not trip on them.
    for (int i = 0; i < 10; i++) {
        if (rank != 0)
            control_send(ctl, 0, &msg);
        else
            for (int k = 1; k < size; k++) control_send(ctl, k, &msg);
    }
    control_finalize(ctl);
    return failures;
}

static int passed, failed;

static void record(const char *name, int mine) {
    int all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("%s %s (%d mismatches)\n", all ? "FAIL" : "ok  ", name, all);
    fflush(stdout);
    all ? failed++ : passed++;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    alarm(120); // a hang fails the test (SIGALRM ends the rank, mpirun the job)
    if (size < 3) {
        if (rank == 0) fprintf(stderr, "test_control needs at least 3 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    mt_control *ctl = control_init(MPI_COMM_WORLD);
    record("ping_pong", test_ping_pong(ctl));
    record("bursts", test_bursts(ctl));
    record("try_recv", test_try_recv(ctl));
    record("idle_cpu", test_idle_cpu(ctl));
    record("full_fifo", test_full_fifo(ctl));
    record("latency", test_latency(ctl));
    control_finalize(ctl);
    record("reinit", test_reinit());
    if (rank == 0) printf("%d passed, %d failed\n", passed, failed);
    MPI_Finalize();
    return failed != 0;
}
