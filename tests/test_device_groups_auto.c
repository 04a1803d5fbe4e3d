// optimizer.device_groups = auto (plan_device_groups): the embedding and ceil(layers / 8)
// layers on a GPU, fewer when an eighth of the free GPU memory does not hold their state (a
// quarter for layer 0, whose update the step boundary waits for), none on the CPU backend; an
// explicit setting is taken as it is. engine.c and the plan both ask it.
// Then, with the free memory known (plan_choose, plan_more_device_groups), more layers where
// the optimizer ranks bound the step and the memory holds them: the bench configs of an MoE
// slice (bench/configs/moe-qwen3.5-35b-a3b-2l.cfg: 0.88 s a step measured with both its layers
// there, 1.24 s with the embedding alone) and of a dense 7B, which its compute bounds.
// usage: test_device_groups_auto SOURCE_DIR
#include "runtime/io/io.h"
#include "runtime/model/model.h"
#include "runtime/plan/plan.h"
#include "tests/check.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB (1ull << 30)

static mt_config bench(const char *src, const char *name) {
    mt_config c;
    char path[4096], err[8192];
    snprintf(path, sizeof path, "%s/bench/configs/%s.cfg", src, name);
    if (mt_config_load(&c, path, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    return c;
}

static int chosen(const mt_config *c, uint64_t room) {
    plan_choices ch;
    plan_choose(&ch, c, 1, 4, room);
    return ch.device_groups;
}

// The choices with the memory known: more layers on the GPU only where they pay and fit.
static void more_layers(const char *src) {
    mt_config moe = bench(src, "moe-qwen3.5-35b-a3b-2l");
    check(moe.model.layers == 2 && moe.device_groups == -1, "the MoE slice: 2 layers, auto");
    int base = plan_device_groups(&moe, 1, 70 * GIB);
    check(base == 1, "the lead alone: the embedding (layer 0 is more than a quarter of 70 GiB)");
    check(chosen(&moe, 70 * GIB) == 3, "70 GiB free: layer 1 on the GPU too (all 3 groups)");
    plan_choices ch;
    plan_choose(&ch, &moe, 1, 4, 70 * GIB);
    check(plan_check_device(&moe, &ch, 70 * GIB, "test", NULL, 0) == 0 && !ch.offload,
          "and its buffers fit the 70 GiB, boundaries on the GPU");
    check(ch.layer_buffers == 0, "every layer updated on the GPU: no streaming layer buffers");
    plan_choices lead;
    plan_choose_groups(&lead, &moe, 1, 4, 70 * GIB, 2);
    check(lead.layer_buffers == 2, "layer 1 left to stream: two streaming layer buffers");
    plan_buffers all, two;
    plan_compute_buffers(&moe, &ch, &all);
    plan_compute_buffers(&moe, &lead, &two);
    uint64_t layer = model_largest_layer(&moe.model), layer1 = model_group_numel(&moe.model, 2);
    check(all.weights + 2 * 2 * layer == two.weights + 2 * layer1,
          "the buffers: layer 1's own weights for the two streaming ones (bf16)");
    moe.layer_buffers = 2;
    plan_choose_groups(&lead, &moe, 1, 4, 70 * GIB, 3);
    check(lead.layer_buffers == 2, "an explicit layer_buffers = 2 stays, unused");
    moe.layer_buffers = 0;
    check(chosen(&moe, 40 * GIB) == plan_device_groups(&moe, 1, 40 * GIB),
          "40 GiB: no room for layer 1's state beside the rest, the lead alone");
    check(chosen(&moe, UINT64_MAX) == plan_device_groups(&moe, 1, UINT64_MAX),
          "the memory not known: the lead alone");
    moe.storage_adam = 1;
    check(chosen(&moe, 70 * GIB) == base, "the NVMe tier: the lead alone");
    moe.storage_adam = 0, moe.device_groups = 2;
    check(chosen(&moe, 70 * GIB) == 2, "an explicit 2 stays 2");
    mt_config dense = bench(src, "bench-7b");
    check(chosen(&dense, 70 * GIB) == plan_device_groups(&dense, 1, 70 * GIB),
          "the dense 7B, bound by its compute: the lead alone");
}

static mt_config llama(int layers) {
    mt_config c;
    memset(&c, 0, sizeof c);
    c.model.dim = 4096, c.model.layers = layers, c.model.heads = 32, c.model.kv_heads = 32,
    c.model.ffn_dim = 11008;
    c.model.vocab = 32000, c.model.tied_embeddings = 0, c.device_groups = -1;
    model_describe_layers(&c.model);
    return c;
}

int main(int argc, char **argv) {
    if (argc < 2) return fprintf(stderr, "usage: test_device_groups_auto SOURCE_DIR\n"), 2;
    mt_config c = llama(32);
    uint64_t emb = 12 * model_group_numel(&c.model, 0);
    uint64_t layer = 18 * model_group_numel(&c.model, model_layer_group(0)); // state + own buffers
    check(plan_device_groups(&c, 1, UINT64_MAX) == 5, "7B shape, room: embedding + 4 layers");
    check(plan_device_groups(&c, 0, UINT64_MAX) == 0, "cpu backend: none");
    check(plan_device_groups(&c, 1, 8 * (emb + 2 * layer)) == 3,
          "an eighth of the free memory holds the embedding + 2 layers: 3 groups");
    check(plan_device_groups(&c, 1, 8 * (emb + 2 * layer) - 8) == 2, "a byte short: 2 groups");
    check(plan_device_groups(&c, 1, 4 * (emb + layer)) == 2,
          "a quarter holds the embedding + layer 0, an eighth does not: layer 0 all the same");
    check(plan_device_groups(&c, 1, 4 * (emb + layer) - 8) == 1,
          "a byte short of that quarter: the embedding only");
    check(plan_device_groups(&c, 1, 8 * emb) == 1, "room for the embedding only: 1 group");
    check(plan_device_groups(&c, 1, 8 * emb - 8) == 0, "not even the embedding: none");
    mt_config small = llama(2);
    check(plan_device_groups(&small, 1, UINT64_MAX) == 2, "2 layers: embedding + 1 layer");
    c.device_groups = 7;
    check(plan_device_groups(&c, 0, 0) == 7, "an explicit setting is kept, even on the cpu");
    c.device_groups = 0;
    check(plan_device_groups(&c, 1, UINT64_MAX) == 0, "device_groups = 0: none");
    more_layers(argv[1]);
    return tests_summary();
}
