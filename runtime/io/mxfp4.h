// The hub's MXFP4 expert weights (gpt-oss), private to io/: dequantized to the values
// transformers' convert_moe_packed_tensors gives when it loads them for training
// (Mxfp4Config(dequantize=True), the path that supports training).
//
// A checkpoint stores each expert projection NAME as two U8 tensors:
//   NAME_blocks [E, rows, G, 16]: 32 FP4 codes (E2M1) a group, two a byte, the low nibble first;
//   NAME_scales [E, rows, G]:     one E8M0 exponent a group, biased by 127.
// A value is FP4(code) * 2^(scale - 127); a row holds K = G * 32 values in order. transformers
// then swaps the last two dimensions, so the weight it trains is [E, K, rows]:
//   gate_up_proj_blocks [E, 2f, d/32, 16] -> gate_up_proj [E, d, 2f] (gate and up interleaved);
//   down_proj_blocks    [E, d, f/32, 16]  -> down_proj    [E, f, d].
// Untransposed, a row is one output of the projection: the [out, in] layout of a linear weight.
//
// Every finite value is exactly representable in bf16 (and fp32): an FP4 value has at most two
// significant bits and the smallest nonzero one, 0.5 * 2^-127 = 2^-128, is above bf16's smallest
// subnormal (2^-133). So transformers' bf16 result (its default dtype) and its fp32 one are the
// same numbers, and so are ours. Values of 2^128 and more overflow to +-inf, in torch as here:
// scale 254 with |FP4| >= 2, 253 with |FP4| >= 4, 255 with |FP4| >= 1. Scale 255 is E8M0's NaN,
// which no quantizer writes; torch 2.11 computes ldexp exactly (as here: 0.5 * 2^128 is 2^127),
// while older torch multiplied by 2^(scale - 127) formed first, 2^128 = inf (inf for any nonzero
// code, NaN for a zero). Real checkpoints have none of these; the functions count them (every value
// under scale 255, every inf) so that a loader can refuse the tensor.
#ifndef MT_MXFP4_H
#define MT_MXFP4_H

#include <stdint.h>

enum { MXFP4_GROUP = 32, MXFP4_GROUP_BYTES = MXFP4_GROUP / 2 };

typedef struct {
    int64_t experts, rows, groups; // blocks [experts, rows, groups, 16]; K = groups * 32
} mxfp4_shape;

// The shape of a blocks/scales pair from their dimensions: NULL when they agree (blocks 4-D
// ending in 16, scales 3-D equal to the blocks' first three), else a phrase saying what does not,
// for the caller's one-line error naming the tensor.
const char *mxfp4_shape_of(const int64_t *blocks_dims, int blocks_ndim, const int64_t *scales_dims,
                           int scales_ndim, mxfp4_shape *shape);

// rows rows of groups groups each, in the checkpoint's order: out[r * K + k] (K = groups * 32).
// Returns how many values are suspect (inf, or under scale 255).
int64_t mxfp4_dequantize_rows(float *out, const uint8_t *blocks, const uint8_t *scales,
                              int64_t rows, int64_t groups);

// A whole tensor in transformers' layout: out[(e * K + k) * rows + r] is value k of row r of
// expert e. Returns how many values are suspect (inf, or under scale 255).
int64_t mxfp4_dequantize_transposed(float *out, const uint8_t *blocks, const uint8_t *scales,
                                    mxfp4_shape shape);

#endif
