// optimizer.device_groups = auto (plan_device_groups): the embedding and ceil(layers / 8)
// layers on a GPU, fewer when an eighth of the free GPU memory does not hold their state (a
// quarter for layer 0, whose update the step boundary waits for), none on the CPU backend; an
// explicit setting is taken as it is. engine.c and the plan both ask it.
#include "runtime/model/model.h"
#include "runtime/plan/plan.h"
#include "tests/check.h"
#include <stdint.h>
#include <string.h>

static mt_config llama(int layers) {
    mt_config c;
    memset(&c, 0, sizeof c);
    c.model.dim = 4096, c.model.layers = layers, c.model.heads = 32, c.model.kv_heads = 32,
    c.model.ffn_dim = 11008;
    c.model.vocab = 32000, c.model.tied_embeddings = 0, c.device_groups = -1;
    model_describe_layers(&c.model);
    return c;
}

int main(void) {
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
    return tests_summary();
}
