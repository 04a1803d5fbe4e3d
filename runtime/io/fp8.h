// The hub's block-scaled FP8 weights (DeepSeek-V3, Kimi K2: quantization_config {"quant_method":
// "fp8", "weight_block_size": [128, 128]}), private to io/: dequantized to the values
// transformers' Fp8Dequantize gives when it loads them for training (dequantize=True).
//
// A checkpoint stores a linear weight NAME [rows, cols] as F8_E4M3 codes and NAME_scale_inv, F32
// [ceil(rows / 128), ceil(cols / 128)]: one scale per 128 x 128 block, the blocks of the last row
// and column cut short where rows or cols are not multiples of 128 (DeepSeek-V3's
// kv_a_proj_with_mqa is [576, 7168], its scales [5, 56]). Element (r, c) is
// fp32(e4m3(code)) * scale[r / 128][c / 128], one fp32 product rounded to nearest even, as
// torch multiplies `q.to(float32) * s`. transformers then casts that product to the parameter's
// dtype: a float32 model holds it exactly as we do, and a bfloat16 one holds it rounded to
// nearest even, as our GPU rounds the master when it streams it.
#ifndef MT_FP8_H
#define MT_FP8_H

#include <stdint.h>

enum { FP8_BLOCK = 128 };

// One E4M3 code ("fn": no infinities; 0x7f and 0xff are NaN) as the float it is exactly.
float fp8_e4m3_value(uint8_t code);

// The scale grid's extent over n elements of one dimension: ceil(n / 128).
int64_t fp8_blocks(int64_t n);

// Elements [first, first + n) of a [rows, cols] weight (row-major), from their codes and the
// whole scale grid [fp8_blocks(rows), fp8_blocks(cols)].
void fp8_dequantize(float *out, const uint8_t *codes, uint64_t first, uint64_t n, int64_t cols,
                    const float *scales);

#endif
