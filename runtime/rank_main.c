// mt-rank: the program mtrun starts on every rank. Rank 0 becomes the compute process, the
// others optimizer processes; everything else follows from the config.
#include "runtime/check.h"
#include "runtime/engine.h"
#include "runtime/job.h"
#include "runtime/optimizer.h"
#include <stdlib.h>

static void usage(FILE *f) {
    fprintf(f, "usage: mt-rank CONFIG [--resume DIR] [--out DIR] [--stop-at STEP]\n"
               "Started by mtrun on every rank of a job; run mtrun --help instead.\n");
}

static job_args parse_args(int argc, char **argv) {
    job_args a = {0};
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
        else if (s[0] != '-' && !a.config_path)
            a.config_path = s;
        else
            usage(stderr), exit(2);
    }
    if (!a.config_path) usage(stderr), exit(2);
    return a;
}

int main(int argc, char **argv) {
    job_args args = parse_args(argc, argv);
    MPI_CHECK(MPI_Init(&argc, &argv));
    mt_job job;
    job_setup(&job, &args);
    if (job_is_compute(&job))
        engine_run(&job);
    else
        optimizer_run(&job);
    job_teardown(&job);
    MPI_CHECK(MPI_Finalize());
    return 0;
}
