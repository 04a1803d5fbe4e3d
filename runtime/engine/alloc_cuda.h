// The CUDA backend's device allocations: each one counted (b->allocated, which the ctest
// plan_matches_allocation holds against the plan), and a working set's list (buffers.h) laid
// into them.
#ifndef MT_ALLOC_CUDA_H
#define MT_ALLOC_CUDA_H

#include "runtime/engine/cuda_state.h"

void *cu_alloc(backend *b, size_t bytes);
// Allocates a working set's list and points its fields (slots, in the list's order) at the
// buffers: one allocation each, none for a count of 0 (the field stays NULL), or, where the
// list has an alignment, one for all of them. The backend frees them (b->owned).
void cu_carve(backend *b, const mt_buffer_list *l, void **const *slots, size_t n_slots);
#define CU_SLOTS(slots) slots, sizeof slots / sizeof *slots
// Points slots at the parts of a list of one allocation, from base.
void cu_point_parts(const mt_buffer_list *l, char *base, void **const *slots);

#endif
