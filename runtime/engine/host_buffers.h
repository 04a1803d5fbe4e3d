// A working set's list (buffers.h) in host memory, as the CPU backend allocates it: each buffer
// an allocation of its own, zeroed; a count of 0 allocates nothing and leaves its field NULL.
#ifndef MT_HOST_BUFFERS_H
#define MT_HOST_BUFFERS_H

#include "runtime/plan/plan.h"
#include <stddef.h>

// Allocates list l's buffers and points the fields in slots (the list's order) at them; returns
// the bytes allocated. what names the working set in an out-of-memory message.
size_t host_buffers_new(const mt_buffer_list *l, void **const *slots, size_t n_slots,
                        const char *what);
// Frees the buffers the fields in slots point at.
void host_buffers_free(void **const *slots, size_t n_slots);
#define HOST_SLOTS(slots) slots, sizeof slots / sizeof *slots

#endif
