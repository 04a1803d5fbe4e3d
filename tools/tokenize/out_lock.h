#ifndef MT_TOKENIZE_OUT_LOCK_H
#define MT_TOKENIZE_OUT_LOCK_H

// The -o PREFIX of an mt-tokenize run, held from its check for an earlier run's shards to the
// rename of its own: PREFIX.lock, flocked.
#include <stddef.h>

typedef struct {
    int fd; // -1 when not held
    char path[4200];
} out_lock;

// Takes PREFIX's lock, or returns -1 with one line in err that names PREFIX (or its folder, or
// PREFIX.lock) and what to do: the folder is missing, another run holds the lock, a link or
// something other than a file is planted at PREFIX.lock.
int out_lock_take(out_lock *l, const char *prefix, char *err, size_t n);
// Removes PREFIX.lock and lets it go; nothing when not held.
void out_lock_release(out_lock *l);

#endif
