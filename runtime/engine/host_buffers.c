#include "runtime/engine/host_buffers.h"
#include "shm/syscheck.h"
#include <stdlib.h>

size_t host_buffers_new(const mt_buffer_list *l, void **const *slots, size_t n_slots,
                        const char *what) {
    if ((size_t)l->n != n_slots) mt_die("a buffer list of %d has %zu fields", l->n, n_slots);
    size_t bytes = 0;
    for (int i = 0; i < l->n; i++) {
        *slots[i] = NULL;
        if (!l->bytes[i]) continue;
        *slots[i] = calloc(1, l->bytes[i]);
        if (!*slots[i])
            mt_die("out of memory allocating %llu MiB for %s (%s)",
                   (unsigned long long)(l->bytes[i] >> 20), what, l->name[i]);
        bytes += l->bytes[i];
    }
    return bytes;
}

void host_buffers_free(void **const *slots, size_t n_slots) {
    for (size_t i = 0; i < n_slots; i++) free(*slots[i]);
}
