// The rules a config meets to train data parallel over several nodes (model.h).
#include "runtime/model/model.h"
#include <stdio.h>
#include <stdlib.h>

int mt_config_check_micro_split(const mt_config *c, int nodes, char *err, size_t n) {
    if (c->micro_batches % nodes == 0) return 0;
    snprintf(err, n,
             "%s: batch.micro_batches = %d does not split evenly over %d nodes: make it a "
             "multiple of %d",
             c->source_path, c->micro_batches, nodes, nodes);
    return -1;
}

int mt_config_check_cuda_nodes(const mt_config *c, int nodes, char *err, size_t n) {
    const char *on = getenv("MT_CUDA_DATA_PARALLEL");
    if (nodes < 2) return 0;
    if (!on || atoi(on) != 1) {
        snprintf(err, n,
                 "%s: data parallel over %d nodes on the CUDA backend has not yet run on a GPU: "
                 "set backend = \"cpu\", run on one node, or try it with "
                 "MT_CUDA_DATA_PARALLEL=1",
                 c->source_path, nodes);
        return -1;
    }
    if (c->device_groups <= 0) return 0;
    snprintf(err, n,
             "%s: optimizer.device_groups = %d: over nodes the CUDA backend updates no group "
             "itself; leave it out",
             c->source_path, c->device_groups);
    return -1;
}
