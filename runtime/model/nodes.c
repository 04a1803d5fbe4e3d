// The rules a config meets to train data parallel over several nodes (model.h).
#include "runtime/model/model.h"
#include <stdio.h>

int mt_config_check_micro_split(const mt_config *c, int nodes, char *err, size_t n) {
    if (c->micro_batches % nodes == 0) return 0;
    snprintf(err, n,
             "%s: batch.micro_batches = %d does not split evenly over %d nodes: make it a "
             "multiple of %d",
             c->source_path, c->micro_batches, nodes, nodes);
    return -1;
}

int mt_config_check_cuda_nodes(const mt_config *c, int nodes, char *err, size_t n) {
    if (nodes < 2 || c->device_groups <= 0) return 0;
    snprintf(err, n,
             "%s: optimizer.device_groups = %d: over nodes the CUDA backend updates no group "
             "itself; leave it out",
             c->source_path, c->device_groups);
    return -1;
}
