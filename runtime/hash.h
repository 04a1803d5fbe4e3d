#ifndef MT_HASH_H
#define MT_HASH_H

#include <stdint.h>

// A counter-based generator: a pure function of its input, so random draws need no state to
// carry through checkpoints or to split across shards.
static inline uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

#endif
