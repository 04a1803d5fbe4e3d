// The frozen tensors' fp32 values (roles.h's MT_FROZEN_ROLES: DeepSeek's router correction
// bias), which the layers read in place of the fetch's bf16 rounding. transformers keeps the
// correction bias in fp32 (_keep_in_fp32_modules_strict), and trained biases sit above 2, where
// bf16's step is 1/64: rounded, they would change which experts win. A frozen tensor never
// changes, so its values come once, at the start: the optimizer ranks send the compute rank
// their slices' share (optimizer.c's send_frozen), and it reads those of the groups it updates
// itself from their master.
#ifndef MT_FROZEN_H
#define MT_FROZEN_H

#include "runtime/engine/device_groups.h"

// Compute rank, once every group is announced: each layer's frozen image (model_frozen_numel)
// to the backend (backend_ops.set_frozen).
void frozen_receive(mt_job *job, const device_groups *dev);

#endif
