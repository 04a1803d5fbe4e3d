// Block-scaled FP8 dequantization (runtime/io/fp8.c) against values computed here from the
// format's definition: all 256 E4M3 codes (NaN, signed zeros, subnormals, the largest 448),
// hand-checked codes, and a weight whose scale grid is cut short at both edges.
#include "runtime/io/fp8.h"
#include "tests/check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// E4M3 from its definition, in double: (-1)^s x 2^(e - 7) x (1 + m / 8), or 2^-6 x m / 8 when
// e is 0; e = 15 with m = 7 is NaN (the "fn" variant has no infinities).
static double e4m3(int code) {
    int e = (code >> 3) & 15, m = code & 7;
    if (e == 15 && m == 7) return NAN;
    double magnitude = e ? ldexp(1 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
    return code & 0x80 ? -magnitude : magnitude;
}

static int same_value(float got, double want) {
    if (isnan(want)) return isnan(got);
    return (double)got == want && !!signbit(got) == !!signbit(want);
}

static void all_codes(void) {
    int bad = 0, nans = 0;
    for (int code = 0; code < 256; code++) {
        float v = fp8_e4m3_value((uint8_t)code);
        bad += !same_value(v, e4m3(code));
        nans += isnan(v);
    }
    CHECK(bad == 0, "every E4M3 code decodes to its value (%d wrong)", bad);
    CHECK(nans == 2, "exactly 0x7f and 0xff are NaN (%d NaN codes)", nans);
    CHECK(fp8_e4m3_value(0x7e) == 448.0f && fp8_e4m3_value(0xfe) == -448.0f, "0x7e is 448");
    CHECK(fp8_e4m3_value(0x38) == 1.0f && fp8_e4m3_value(0x40) == 2.0f, "0x38 is 1, 0x40 is 2");
    CHECK(fp8_e4m3_value(0x01) == 0x1p-9f && fp8_e4m3_value(0x08) == 0x1p-6f,
          "0x01 is 2^-9 (the least subnormal), 0x08 is 2^-6 (the least normal)");
    CHECK(fp8_e4m3_value(0x80) == 0.0f && signbit(fp8_e4m3_value(0x80)), "0x80 is -0");
    CHECK(fp8_e4m3_value(0x78) == 256.0f && fp8_e4m3_value(0x7d) == 416.0f,
          "exponent 15 below mantissa 7 is finite (256, 416)");
}

// A [200, 300] weight: scales [2, 3], its last block row 72 rows, its last block column 44.
static void ragged_grid(void) {
    enum { ROWS = 200, COLS = 300 };
    CHECK(fp8_blocks(ROWS) == 2 && fp8_blocks(COLS) == 3 && fp8_blocks(128) == 1 &&
              fp8_blocks(576) == 5,
          "the scale grid is ceil(n / 128)");
    uint8_t *codes = malloc(ROWS * COLS);
    float *out = malloc(ROWS * COLS * sizeof *out);
    float scales[6] = {0.5f, 3.0f, 1.0f / 3, 0x1p-20f, 7.25f, 1e-3f};
    if (!codes || !out) abort();
    for (int i = 0; i < ROWS * COLS; i++) codes[i] = (uint8_t)((i * 37 + 11) % 256);
    int bad = 0;
    // whole, then in uneven pieces, as ranks read their slices
    fp8_dequantize(out, codes, 0, ROWS * COLS, COLS, scales);
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++) {
            double v = e4m3(codes[r * COLS + c]);
            float want = (float)v * scales[(r / 128) * 3 + c / 128]; // one fp32 product
            bad += !same_value(out[r * COLS + c], isnan(v) ? NAN : (double)want);
        }
    CHECK(bad == 0, "each element is its code times its block's scale (%d wrong)", bad);
    float piece[1000];
    int differs = 0;
    for (uint64_t at = 0; at < ROWS * COLS; at += 997) {
        uint64_t n = ROWS * COLS - at < 997 ? ROWS * COLS - at : 997;
        fp8_dequantize(piece, codes + at, at, n, COLS, scales);
        for (uint64_t i = 0; i < n; i++)
            differs += memcmp(&piece[i], &out[at + i], sizeof *piece) != 0;
    }
    CHECK(differs == 0, "pieces read at any offset are the whole's values (%d differ)", differs);
    free(codes);
    free(out);
}

int main(void) {
    all_codes();
    ragged_grid();
    return tests_summary();
}
