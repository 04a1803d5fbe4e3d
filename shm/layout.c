#include "shm/shm.h"

static uint64_t round_up(uint64_t x, uint64_t a) {
    return (x + a - 1) / a * a;
}

void shard_range(uint64_t n, int k, int K, uint64_t *lo, uint64_t *hi) {
    uint64_t a = round_up(n * (uint64_t)k / (uint64_t)K, SHM_ALIGN_ELEMS);
    uint64_t b = round_up(n * (uint64_t)(k + 1) / (uint64_t)K, SHM_ALIGN_ELEMS);
    *lo = a < n ? a : n;
    *hi = b < n ? b : n;
}

// The ring: entries of the largest slice, taken in `order`.
static uint64_t ring_slots(shard_layout *lay, const int *order, uint64_t off) {
    uint64_t entry = 0;
    int last[SHM_MAX_GROUPS], n = 0; // the group in each entry so far
    for (int g = lay->first_shared; g < lay->n_groups; g++)
        if (lay->len[g] * lay->grad_bytes > entry) entry = lay->len[g] * lay->grad_bytes;
    entry = round_up(entry, 4096); // O_DIRECT writes an entry to disk straight from here
    for (int i = 0; i < lay->n_groups; i++) {
        int g = order[i], e = n % lay->ring_depth;
        if (g < lay->first_shared) continue;
        lay->ring_prev[g] = n >= lay->ring_depth ? last[e] : -1;
        lay->grad_offset[g] = off + (uint64_t)e * entry;
        last[e] = g, n++;
    }
    int used = n < lay->ring_depth ? n : lay->ring_depth;
    return off + (uint64_t)used * entry;
}

void shard_layout_init(shard_layout *lay, const uint64_t *group_numel, int n_groups, int shard,
                       int n_shards, int first_shared, int grad_bytes, int ring_depth,
                       const int *order, uint64_t weight_ring) {
    lay->n_groups = n_groups;
    lay->shard = shard;
    lay->n_shards = n_shards;
    lay->first_shared = first_shared;
    lay->grad_bytes = grad_bytes;
    lay->ring_depth = ring_depth;
    uint64_t off = SHM_HEADER_BYTES;
    for (int g = 0; g < n_groups; g++) {
        uint64_t lo, hi;
        shard_range(group_numel[g], shard, n_shards, &lo, &hi);
        lay->lo[g] = lo;
        lay->len[g] = hi - lo;
        lay->master_offset[g] = g < first_shared || weight_ring ? 0 : off;
        if (g >= first_shared && !weight_ring) off = round_up(off + lay->len[g] * 4, 64);
    }
    uint64_t most = 0;
    for (int g = first_shared; g < n_groups; g++)
        if (lay->len[g] > most) most = lay->len[g];
    lay->weight_ring = weight_ring, lay->ring_offset = weight_ring ? off : 0;
    lay->ring_entry = weight_ring ? shard_ring_entry(most, weight_ring) : 0;
    off += SHM_WEIGHT_RING * lay->ring_entry * 4;
    // Gradients after all weights: the two directions of DMA touch separate pages.
    off = round_up(off, 4096);
    lay->masters_bytes = off - SHM_HEADER_BYTES;
    uint64_t grads = off;
    for (int g = 0; g < n_groups; g++) {
        lay->grad_offset[g] = g < first_shared ? 0 : off;
        lay->ring_prev[g] = -1;
        if (g >= first_shared && !ring_depth)
            off = round_up(off + lay->len[g] * (uint64_t)grad_bytes, 64);
    }
    if (ring_depth) off = ring_slots(lay, order, off);
    lay->total_bytes = round_up(off, 4096);
    lay->grads_bytes = lay->total_bytes - grads;
}

static uint64_t copy_piece_bytes(const shard_layout *lay) {
    return round_up(lay->weight_ring * 2, 4096);
}

// Group g's area: its pieces, the last one page-rounded on its own (so a group's area is its
// bf16 bytes page-rounded whenever a piece is a whole number of pages, as at full size).
static uint64_t copy_area(const shard_layout *lay, int g) {
    uint64_t whole = lay->len[g] / lay->weight_ring, rest = lay->len[g] % lay->weight_ring;
    return whole * copy_piece_bytes(lay) + round_up(rest * 2, 4096);
}

uint64_t shard_copy_offset(const shard_layout *lay, int g, uint64_t i) {
    uint64_t off = 0;
    for (int h = lay->first_shared; h < g; h++) off += copy_area(lay, h);
    return off + i * copy_piece_bytes(lay);
}

uint64_t shard_copy_bytes(const shard_layout *lay) {
    uint64_t bytes = shard_copy_offset(lay, lay->n_groups, 0);
    return bytes ? bytes : 4096;
}

void shard_layout_grads_elsewhere(shard_layout *lay) {
    for (int g = 0; g < lay->n_groups; g++) lay->grad_offset[g] = 0, lay->ring_prev[g] = -1;
    lay->total_bytes -= lay->grads_bytes;
    lay->grads_bytes = 0;
}

uint64_t shard_grads_file_offset(const shard_layout *lay, int g) {
    uint64_t off = 0;
    for (int h = lay->first_shared; h < g; h++)
        off += round_up(lay->len[h] * (uint64_t)lay->grad_bytes, 4096);
    return off;
}

uint64_t shard_grads_file_bytes(const shard_layout *lay) {
    uint64_t bytes = shard_grads_file_offset(lay, lay->n_groups);
    return bytes ? bytes : 4096;
}

uint64_t shard_ring_entry(uint64_t largest_slice, uint64_t piece) {
    return round_up(largest_slice < piece ? largest_slice : piece, 16);
}

uint64_t shard_grads_piece(uint64_t largest_slice, uint64_t piece) {
    piece = round_up(piece, 4096 / 2);
    return largest_slice < piece ? (largest_slice ? largest_slice : 1) : piece;
}
