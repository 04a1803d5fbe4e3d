#include "runtime/metrics.h"
#include "runtime/fsutil.h"
#include "runtime/model.h"
#include "runtime/schedule.h"
#include "shm/syscheck.h"
#include <limits.h>
#include <math.h>

void metrics_open(metrics *mx, mt_job *job, const char *backend) {
    memset(mx, 0, sizeof *mx);
    mx->job = job;
    const mt_config *c = &job->cfg;
    make_dirs(c->checkpoint_dir);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/metrics.jsonl", c->checkpoint_dir);
    mx->jsonl = fopen(path, "a"); // appending: a resumed run continues the same record
    if (!mx->jsonl) mt_die("%s: %s", path, strerror(errno));
    // The formula: 6 N per token plus attention's 12 * layers * dim * seq.
    mx->flops_per_token = 6.0 * (double)model_param_count(c) +
                          12.0 * c->layers * (double)c->dim * c->seq_len;
    fprintf(mx->jsonl, "{\"event\":\"start\",\"start_step\":%d,\"end_step\":%d,\"params\":%llu,"
                       "\"optimizer_ranks\":%d}\n",
            job->start_step, job->end_step, (unsigned long long)model_param_count(c),
            job->n_shards);
    fflush(mx->jsonl);
    printf("compute rank: %.2fM parameters in %d groups, %d optimizer ranks, %ld tokens/step, "
           "steps %d..%d, backend %s (%d host threads)\n",
           model_param_count(c) / 1e6, job->n_groups, job->n_shards, mt_tokens_per_step(c),
           job->start_step + 1, job->end_step, backend, job->threads);
    mx->run_start = now_seconds();
}

void metrics_step_begin(metrics *mx, transfer *t) {
    mx->step_start = now_seconds();
    mx->opt_wait_start = t->opt_wait_seconds;
    t->sumsq_announced = 0;
}

static void format_eta(char *out, size_t cap, double seconds) {
    long s = (long)(seconds + 0.5);
    if (s >= 3600) snprintf(out, cap, "%ldh%02ldm", s / 3600, s / 60 % 60);
    else snprintf(out, cap, "%ldm%02lds", s / 60, s % 60);
}

void metrics_step_end(metrics *mx, int64_t step, double loss, transfer *t) {
    const mt_config *c = &mx->job->cfg;
    double now = now_seconds(), dt = now - mx->step_start;
    double wait = t->opt_wait_seconds - mx->opt_wait_start;
    double tok_s = mt_tokens_per_step(c) / dt, norm = sqrt(t->sumsq_announced);
    double lr = lr_at_step(c, (int)step);
    mx->steps_done++;
    double eta = (now - mx->run_start) / mx->steps_done * (mx->job->end_step - step - 1);
    char eta_s[32];
    format_eta(eta_s, sizeof eta_s, eta);
    printf("step %5lld/%d | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | %.3f TFLOP/s | "
           "opt wait %4.1f%% | %.0f ms | ETA %s\n",
           (long long)step + 1, c->steps, loss, lr, norm, tok_s, tok_s * mx->flops_per_token / 1e12,
           100.0 * wait / dt, dt * 1e3, eta_s);
    fflush(stdout);
    fprintf(mx->jsonl,
            "{\"step\":%lld,\"loss\":%.17g,\"lr\":%.9g,\"grad_norm\":%.9g,\"tokens_per_s\":%.1f,"
            "\"step_s\":%.6f,\"opt_wait_s\":%.6f}\n",
            (long long)step + 1, loss, lr, norm, tok_s, dt, wait);
    fflush(mx->jsonl);
}

void metrics_eval(metrics *mx, int64_t step, double loss) {
    printf("eval at step %lld | val loss %.4f\n", (long long)step, loss);
    fflush(stdout);
    fprintf(mx->jsonl, "{\"step\":%lld,\"eval_loss\":%.17g}\n", (long long)step, loss);
    fflush(mx->jsonl);
}

void metrics_sample(metrics *mx, const char *text) {
    printf("sample after step %d:\n----\n%s\n----\n", mx->job->end_step, text);
    fflush(stdout);
}

void metrics_close(metrics *mx) {
    if (mx->jsonl) fclose(mx->jsonl);
    mx->jsonl = NULL;
}
