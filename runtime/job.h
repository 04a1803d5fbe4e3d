// What every rank of a job shares: the config, its role, the shard layouts, the shared
// regions and the control plane. Rank 0 is the compute process; rank k >= 1 the optimizer
// process that owns shard k-1 of every parameter group.
#ifndef MT_JOB_H
#define MT_JOB_H

#include "kernels/bf16.h"
#include "runtime/config.h"
#include "runtime/control.h"
#include "shm/shm.h"
#include <mpi.h>

typedef struct {
    const char *config_path, *resume_dir, *out_dir;
    int stop_at; // end the job (with a checkpoint) after this many steps; 0: run them all
} job_args;

typedef struct {
    mt_config cfg;
    job_args args;
    int rank, world, n_shards; // n_shards = world - 1
    MPI_Comm opt_comm;         // the optimizer ranks; MPI_COMM_NULL on the compute rank
    int numa_node, threads;
    int node_peers,
        node_index; // optimizer ranks on this host's NUMA node, and our place among them
    int n_groups;
    uint64_t group_numel[SHM_MAX_GROUPS];
    shard_layout *layouts; // [n_shards]
    shm_region *regions;   // [n_shards]; an optimizer rank maps only its own
    mt_control *ctl;
    int start_step;                // 0, or the step a resumed checkpoint holds
    int end_step;                  // steps, or --stop-at
    char resume_path[MT_PATH_MAX]; // the checkpoint folder to resume from ("" when fresh)
    char job_id[80];
    struct hf_index *hf; // model_dir's weights, checked at setup (optimizer ranks; else NULL)
} mt_job;

// Collective over MPI_COMM_WORLD. Exits with a one-line message (from rank 0) on bad input.
void job_setup(mt_job *job, const job_args *args);
void job_teardown(mt_job *job);

static inline int job_is_compute(const mt_job *j) {
    return j->rank == 0;
}
static inline int job_shard_of_rank(int rank) {
    return rank - 1;
}

static inline shm_control_block *job_control_block(mt_job *j, int k) {
    return (shm_control_block *)j->regions[k].base;
}
static inline bf16 *job_wire(mt_job *j, int k, int g) {
    return (bf16 *)((char *)j->regions[k].base + j->layouts[k].wire_offset[g]);
}
static inline float *job_grad_slot(mt_job *j, int k, int g) {
    return (float *)((char *)j->regions[k].base + j->layouts[k].grad_offset[g]);
}

#endif
