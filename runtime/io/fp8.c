// Block-scaled FP8 dequantization as transformers' Fp8Dequantize (runtime/io/fp8.h).
#include "runtime/io/fp8.h"

#include <math.h>

// E4M3 (OCP FP8, the "fn" variant torch calls float8_e4m3fn): bit 7 the sign, bits 6-3 the
// exponent (bias 7), bits 2-0 the mantissa; exponent 0 is subnormal (m x 2^-9), and exponent 15
// with mantissa 7 is NaN, the only special value: the rest of exponent 15 is finite, up to 448.
float fp8_e4m3_value(uint8_t code) {
    int exponent = (code >> 3) & 0x0f, mantissa = code & 0x07;
    float magnitude = exponent == 15 && mantissa == 7 ? NAN
                      : exponent == 0                 ? ldexpf((float)mantissa, -9)
                                      : ldexpf((float)(8 + mantissa), exponent - 10);
    return code & 0x80 ? -magnitude : magnitude;
}

int64_t fp8_blocks(int64_t n) {
    return (n + FP8_BLOCK - 1) / FP8_BLOCK;
}

void fp8_dequantize(float *out, const uint8_t *codes, uint64_t first, uint64_t n, int64_t cols,
                    const float *scales) {
    int64_t scale_cols = fp8_blocks(cols);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t at = first + i;
        int64_t r = (int64_t)(at / (uint64_t)cols), c = (int64_t)(at % (uint64_t)cols);
        float scale = scales[(r / FP8_BLOCK) * scale_cols + c / FP8_BLOCK];
        out[i] = fp8_e4m3_value(codes[i]) * scale; // one fp32 product, as torch's
    }
}
