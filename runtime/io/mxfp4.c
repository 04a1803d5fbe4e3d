// MXFP4 dequantization as transformers' convert_moe_packed_tensors (runtime/io/mxfp4.h).
#include "runtime/io/mxfp4.h"

#include <math.h>
#include <stddef.h>

// The E2M1 code points (OCP Microscaling spec): bit 3 the sign, bits 2-1 the exponent (bias 1),
// bit 0 the mantissa; exponent 0 is subnormal (0 and 0.5).
static const float fp4_value[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// One group: 16 bytes into 32 values, the low nibble of byte j first (value 2j), then the high.
// ldexp, like torch 2.11's (std::ldexp on the CPU, ::ldexp on CUDA): exact, or +-inf from 2^128
// up. Returns how many values are suspect: inf, or any under scale 255.
static int64_t decode_group(float *out, const uint8_t *bytes, uint8_t scale) {
    int exponent = (int)scale - 127;
    int64_t suspect = 0;
    for (int j = 0; j < MXFP4_GROUP_BYTES; j++) {
        out[2 * j] = ldexpf(fp4_value[bytes[j] & 0x0F], exponent);
        out[2 * j + 1] = ldexpf(fp4_value[bytes[j] >> 4], exponent);
        suspect += !isfinite(out[2 * j]) + !isfinite(out[2 * j + 1]);
    }
    return scale == 255 ? MXFP4_GROUP : suspect;
}

const char *mxfp4_shape_of(const int64_t *blocks_dims, int blocks_ndim, const int64_t *scales_dims,
                           int scales_ndim, mxfp4_shape *shape) {
    if (blocks_ndim != 4) return "blocks must be 4-D [experts, rows, groups, 16]";
    if (blocks_dims[3] != MXFP4_GROUP_BYTES) return "blocks' last dimension must be 16 bytes";
    if (scales_ndim != 3) return "scales must be 3-D [experts, rows, groups]";
    for (int i = 0; i < 3; i++)
        if (scales_dims[i] != blocks_dims[i])
            return "scales' shape must be blocks' shape without its last dimension";
    for (int i = 0; i < 3; i++)
        if (blocks_dims[i] <= 0) return "every dimension must be positive";
    *shape = (mxfp4_shape){blocks_dims[0], blocks_dims[1], blocks_dims[2]};
    return NULL;
}

int64_t mxfp4_dequantize_rows(float *out, const uint8_t *blocks, const uint8_t *scales,
                              int64_t rows, int64_t groups) {
    int64_t suspect = 0;
#pragma omp parallel for schedule(static) reduction(+ : suspect)
    for (int64_t g = 0; g < rows * groups; g++)
        suspect += decode_group(out + g * MXFP4_GROUP, blocks + g * MXFP4_GROUP_BYTES, scales[g]);
    return suspect;
}

// Each (expert, row) is decoded whole, then written down its column of the [K, rows] result.
int64_t mxfp4_dequantize_transposed(float *out, const uint8_t *blocks, const uint8_t *scales,
                                    mxfp4_shape shape) {
    int64_t rows = shape.rows, groups = shape.groups, K = groups * MXFP4_GROUP;
    int64_t suspect = 0;
#pragma omp parallel for schedule(static) reduction(+ : suspect)
    for (int64_t er = 0; er < shape.experts * rows; er++) {
        int64_t e = er / rows, r = er % rows;
        float *column = out + e * K * rows + r;
        for (int64_t g = 0; g < groups; g++) {
            float group[MXFP4_GROUP];
            suspect += decode_group(group, blocks + (er * groups + g) * MXFP4_GROUP_BYTES,
                                    scales[er * groups + g]);
            for (int j = 0; j < MXFP4_GROUP; j++) column[(g * MXFP4_GROUP + j) * rows] = group[j];
        }
    }
    return suspect;
}
