// Parameter groups the compute rank updates itself, on its device.
//
// The step boundary is the one stretch the optimizer ranks cannot hide: clip_grad_norm_ needs
// the last gradient (the embedding's) before any update, and the next forward needs the
// embedding and layer 0 updated and copied in before it can start. With their fp32 master
// weights and Adam moments kept in device memory, the device updates them in about a
// millisecond, the forward starts at once, and the optimizer ranks get a layer's forward of
// head start on the groups they still update. The arithmetic is the optimizer ranks' own
// (kernels/adamw.h), so where a group is updated never changes a bit.
//
// The state lives here only: the optimizer ranks initialize (or load) their slices of it at
// start and send them over, and get them back before every save and export, a piece at a time
// on both sides, so that no host holds it whole.
#ifndef MT_DEVICE_GROUPS_H
#define MT_DEVICE_GROUPS_H

#include "runtime/engine/backend.h"
#include "runtime/io/io.h"
#include "runtime/job/job.h"

typedef struct {
    mt_job *job;
    const backend_ops *ops;
    backend *be;
    int groups;     // groups 0 .. groups - 1
    float **state;  // [groups * 3]: master, m and v of each group, in backend memory
    float *staging; // host, a piece (MT_STATE_PIECE floats) while state moves
} device_groups;

// Compute rank, collective with the optimizer ranks' start (optimizer.c's init_state, or a
// resume's checkpoint_load): receives the state of `groups` groups from them, a piece at a time.
void device_groups_init(device_groups *d, mt_job *job, const backend_ops *ops, backend *be,
                        int groups);
void device_groups_free(device_groups *d);
// Group g's weights w, in the backend's format, from its master (there is no other copy of it
// to fetch).
void device_groups_weights(device_groups *d, int g, void *w);
// One group's AdamW step: master, m and v in place, the weights w in the backend's format.
void device_groups_update(device_groups *d, int g, const adamw_params *hp, const float *grads,
                          void *w);
// Compute rank: sends the state back to the optimizer ranks, for a save (arrays 3: master, m
// and v, when checkpoint_saves_device_state says so) or an export (arrays 1: the master).
void device_groups_send_back(device_groups *d, int arrays);

#endif
