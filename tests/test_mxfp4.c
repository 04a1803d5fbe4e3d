// MXFP4 dequantization (runtime/io/mxfp4.c) against values computed here from the formats'
// definitions: every byte under every scale, hand-checked bytes, the layout transformers gives
// the weights, and the shape checks.
#include "runtime/io/mxfp4.h"
#include "tests/check.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// E2M1 from its bits, not from a table: sign, 2 exponent bits (bias 1; 0 is subnormal), 1
// mantissa bit.
static double e2m1(int code) {
    int exponent = (code >> 1) & 3, mantissa = code & 1;
    double magnitude = exponent ? (1 + 0.5 * mantissa) * ldexp(1, exponent - 1) : 0.5 * mantissa;
    return code & 8 ? -magnitude : magnitude;
}

// What transformers gives for a code under a scale (torch 2.11's exact ldexp): the exact
// product (double holds it), or +-inf from 2^128 up (float's overflow).
static float expected(int code, int scale) {
    double v = ldexp(e2m1(code), scale - 127);
    return fabs(v) >= 0x1p128 ? (float)copysign(INFINITY, v) : (float)v;
}

static int same_value(float got, float want) {
    if (isnan(want)) return isnan(got);
    return got == want && signbit(got) == signbit(want); // -0.0 stays -0.0
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

// 256 rows, one per scale, of 16 groups whose 256 bytes are 0..255: every code in both nibbles
// under every scale.
static void test_every_byte_every_scale(void) {
    enum { ROWS = 256, GROUPS = 16, K = GROUPS * MXFP4_GROUP };
    static uint8_t blocks[ROWS * GROUPS * MXFP4_GROUP_BYTES], scales[ROWS * GROUPS];
    static float out[ROWS * K];
    for (int r = 0; r < ROWS; r++) {
        for (int b = 0; b < GROUPS * MXFP4_GROUP_BYTES; b++)
            blocks[r * GROUPS * MXFP4_GROUP_BYTES + b] = (uint8_t)b;
        memset(scales + r * GROUPS, r, GROUPS);
    }
    int64_t suspect = mxfp4_dequantize_rows(out, blocks, scales, ROWS, GROUPS);
    int wrong = 0, not_bf16 = 0, want_suspect = 0;
    for (int r = 0; r < ROWS; r++) {
        for (int k = 0; k < K; k++) {
            int byte = k / 2, code = k % 2 ? byte >> 4 : byte & 15;
            float want = expected(code, r), got = out[r * K + k];
            want_suspect += !isfinite(want) || r == 255;
            if (!same_value(got, want)) {
                if (wrong++ < 5) printf("scale %d code %d: %g, want %g\n", r, code, got, want);
            }
            if (isfinite(got) && (bits_of(got) & 0xFFFF)) not_bf16++;
        }
    }
    check(wrong == 0, "every code under every scale 0..255 as transformers (%d wrong)", wrong);
    check(not_bf16 == 0, "every finite value is exact in bf16 (low 16 bits zero): %d are not",
          not_bf16);
    // scale 255: all 512; 254: the 8 codes of |v| >= 2 (256 values); 253: |v| >= 4 (128)
    check(suspect == want_suspect && suspect == 512 + 256 + 128,
          "suspect values counted (inf, or under scale 255): %lld (want 896)", (long long)suspect);
}

// A few bytes by hand. Byte 0x9F is [-6, -0.5]: the low nibble (0xF, -6) comes first.
static void test_hand_checked(void) {
    static const struct {
        uint8_t byte, scale;
        float lo, hi;
    } cases[] = {
        {0x9F, 127, -6.0f, -0.5f},          // x1
        {0x21, 127, 0.5f, 1.0f},            // x1
        {0x7A, 128, -2.0f, 12.0f},          // x2: -1 and 6
        {0x52, 120, 0x1p-7f, 3 * 0x1p-7f},  // x2^-7: 1 and 3
        {0x31, 0, 0x1p-128f, 0x1.8p-127f},  // x2^-127, subnormal in float: 0.5 and 1.5
        {0x80, 0, 0.0f, -0.0f},             // zeros keep their sign
        {0x76, 254, INFINITY, INFINITY},    // x2^127: 4 and 6 reach 2^129: inf
        {0x93, 254, 0x1.8p127f, -0x1p126f}, // x2^127: 1.5 and -0.5 still finite
        {0x10, 255, 0.0f, 0x1p127f},        // E8M0's NaN, as torch 2.11: 0 and 0.5 * 2^128
        {0xA9, 255, -0x1p127f, -INFINITY},  // -0.5 * 2^128 and -1 * 2^128
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint8_t group[MXFP4_GROUP_BYTES] = {cases[i].byte};
        float out[MXFP4_GROUP];
        mxfp4_dequantize_rows(out, group, &cases[i].scale, 1, 1);
        float lo = cases[i].lo, hi = cases[i].hi;
        check(same_value(out[0], lo) && same_value(out[1], hi) &&
                  same_value(out[2], expected(0, cases[i].scale)),
              "byte 0x%02X scale %d: [%g, %g] (want [%g, %g])", cases[i].byte, cases[i].scale,
              out[0], out[1], lo, hi);
    }
}

// transformers' layout: blocks [E, rows, G, 16] -> [E, G * 32, rows]. For gate_up_proj (rows 2f,
// K = d) that is [E, d, 2f]; for down_proj (rows d, K = f) it is [E, f, d].
static void test_transposed_layout(void) {
    enum { E = 2, ROWS = 3, GROUPS = 2, K = GROUPS * MXFP4_GROUP };
    uint8_t blocks[E * ROWS * GROUPS * MXFP4_GROUP_BYTES], scales[E * ROWS * GROUPS];
    float out[E * K * ROWS], out3[E * K * ROWS];
    srand(7);
    for (size_t i = 0; i < sizeof blocks; i++) blocks[i] = (uint8_t)rand();
    for (size_t i = 0; i < sizeof scales; i++) scales[i] = (uint8_t)(118 + rand() % 16);
    mxfp4_shape shape = {E, ROWS, GROUPS};
    int64_t suspect = mxfp4_dequantize_transposed(out, blocks, scales, shape);
    int wrong = 0;
    for (int e = 0; e < E; e++) {
        for (int k = 0; k < K; k++) {
            for (int r = 0; r < ROWS; r++) {
                int group = (e * ROWS + r) * GROUPS + k / MXFP4_GROUP;
                int byte = blocks[group * MXFP4_GROUP_BYTES + k % MXFP4_GROUP / 2];
                int code = k % 2 ? byte >> 4 : byte & 15;
                wrong += !same_value(out[(e * K + k) * ROWS + r], expected(code, scales[group]));
            }
        }
    }
    check(wrong == 0 && suspect == 0, "[E, rows, G, 16] -> [E, K, rows]: %d wrong", wrong);
    omp_set_num_threads(3);
    mxfp4_dequantize_transposed(out3, blocks, scales, shape);
    omp_set_num_threads(1);
    check(!memcmp(out, out3, sizeof out), "bitwise the same on 1 and 3 threads");
}

static void test_shapes(void) {
    mxfp4_shape s = {0};
    int64_t blocks[4] = {128, 5760, 90, 16}, scales[3] = {128, 5760, 90}; // gpt-oss-120b gate_up
    check(!mxfp4_shape_of(blocks, 4, scales, 3, &s) && s.experts == 128 && s.rows == 5760 &&
              s.groups == 90,
          "gpt-oss-120b's gate_up_proj pair: 128 experts, 5760 rows, 90 groups (K 2880)");
    int64_t short_bytes[4] = {128, 5760, 90, 15}, other_groups[3] = {128, 5760, 45};
    int64_t empty[4] = {0, 5760, 90, 16}, empty_scales[3] = {0, 5760, 90};
    check(mxfp4_shape_of(blocks, 3, scales, 3, &s) != NULL, "3-D blocks refused");
    check(mxfp4_shape_of(short_bytes, 4, scales, 3, &s) != NULL, "15-byte groups refused");
    check(mxfp4_shape_of(blocks, 4, scales, 2, &s) != NULL, "2-D scales refused");
    check(mxfp4_shape_of(blocks, 4, other_groups, 3, &s) != NULL, "scales of 45 groups refused");
    check(mxfp4_shape_of(empty, 4, empty_scales, 3, &s) != NULL, "0 experts refused");
}

int main(void) {
    omp_set_num_threads(1);
    test_every_byte_every_scale();
    test_hand_checked();
    test_transposed_layout();
    test_shapes();
    return tests_summary();
}
