// A checkpoint's manifest.json as a resume reads it: checkpoint_read_step (the step and skip
// count mtrun shows), then checkpoint_check_state against a small model's job (the "self"
// checksum, version, shape, seed, groups and the block list; state.bin is absent, so the
// check ends at its header).
#include "runtime/io/io.h"
#include "tests/fuzz/fuzz.h"

static mt_job *small_job(void) {
    static mt_job job;
    if (job.n_groups) return &job;
    mt_config *c = &job.cfg;
    c->model.dim = 64, c->model.layers = 2, c->model.heads = 4, c->model.kv_heads = 2,
    c->model.ffn_dim = 160, c->model.vocab = 256;
    c->model.tied_embeddings = 1, c->seed = 1337;
    model_describe_layers(&c->model);
    job.n_groups = model_group_count(&c->model);
    for (int g = 0; g < job.n_groups; g++) job.group_numel[g] = model_group_numel(&c->model, g);
    return &job;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[4096];
    int step, skipped;
    fuzz_write("manifest.json", data, size);
    checkpoint_read_step(fuzz_dir(), &step, &skipped, err, sizeof err);
    checkpoint_check_state(fuzz_dir(), small_job(), err, sizeof err);
    return 0;
}
