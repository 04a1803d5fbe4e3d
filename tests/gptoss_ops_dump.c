// Writes what our gpt-oss leaf functions give on fixed inputs, for tests/gptoss_ops_parity.py to
// hold against transformers:
//   gptoss_ops_dump DIR
//   DIR/yarn.f32         gpt-oss-120b's YaRN inv_freq [32], truncate off then on;
//   DIR/yarn.f64         the attention factor, twice;
//   DIR/swiglu_in.f32    gate, up, dout [3, N];  DIR/swiglu_out.f32  out, dgate, dup [3, N];
//   DIR/mxfp4_blocks.u8  [1, 256, 16, 16] (row r: bytes 0..255), DIR/mxfp4_scales.u8 [1, 256, 16]
//                        (row r: scale r), DIR/mxfp4.f32 their dequantization [1, 512, 256].
#include "kernels/cpu/kernels_cpu.h"
#include "runtime/io/mxfp4.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static void write_file(const char *dir, const char *name, const void *data, size_t bytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, bytes, f) != bytes || fclose(f) != 0) {
        fprintf(stderr, "gptoss_ops_dump: cannot write %s\n", path);
        exit(1);
    }
}

static void dump_yarn(const char *dir) {
    float inv[2][32];
    double attention[2];
    for (int truncate = 0; truncate < 2; truncate++) {
        rope_yarn y = {
            .factor = 32, .orig_ctx = 4096, .beta_fast = 32, .beta_slow = 1, .truncate = truncate};
        attention[truncate] = rope_yarn_inv_freq(inv[truncate], 64, 150000.0f, &y);
    }
    write_file(dir, "yarn.f32", inv, sizeof inv);
    write_file(dir, "yarn.f64", attention, sizeof attention);
}

// A grid over [-10, 10] by 1/8 for gate and for up (so +-7 and the points beyond are on it),
// plus each bound's neighbouring floats, with dout 1 + small variations.
enum { STEPS = 161, EXTRA = 4, N = (STEPS + EXTRA) * (STEPS + EXTRA) };
static void dump_swiglu(const char *dir) {
    static float in[3][N], out[3][N];
    float axis[STEPS + EXTRA];
    for (int i = 0; i < STEPS; i++) axis[i] = -10.0f + 0.125f * i;
    axis[STEPS] = nextafterf(7.0f, 0), axis[STEPS + 1] = nextafterf(7.0f, 8);
    axis[STEPS + 2] = nextafterf(-7.0f, 0), axis[STEPS + 3] = nextafterf(-7.0f, -8);
    for (int i = 0; i < N; i++) {
        in[0][i] = axis[i / (STEPS + EXTRA)], in[1][i] = axis[i % (STEPS + EXTRA)];
        in[2][i] = 1.0f + (float)(i % 7) / 8;
    }
    swiglu_clamp c = {.alpha = 1.702f, .limit = 7.0f};
    swiglu_clamped_forward(out[0], in[0], in[1], N, c);
    swiglu_clamped_backward(out[1], out[2], in[2], in[0], in[1], N, c);
    write_file(dir, "swiglu_in.f32", in, sizeof in);
    write_file(dir, "swiglu_out.f32", out, sizeof out);
}

static void dump_mxfp4(const char *dir) {
    enum { ROWS = 256, GROUPS = 16, BYTES = ROWS * GROUPS * MXFP4_GROUP_BYTES };
    static uint8_t blocks[BYTES], scales[ROWS * GROUPS];
    static float out[ROWS * GROUPS * MXFP4_GROUP];
    for (int i = 0; i < BYTES; i++) blocks[i] = (uint8_t)i;
    for (int i = 0; i < ROWS * GROUPS; i++) scales[i] = (uint8_t)(i / GROUPS);
    mxfp4_dequantize_transposed(out, blocks, scales, (mxfp4_shape){1, ROWS, GROUPS});
    write_file(dir, "mxfp4_blocks.u8", blocks, sizeof blocks);
    write_file(dir, "mxfp4_scales.u8", scales, sizeof scales);
    write_file(dir, "mxfp4.f32", out, sizeof out);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: gptoss_ops_dump DIR\n");
        return 2;
    }
    dump_yarn(argv[1]);
    dump_swiglu(argv[1]);
    dump_mxfp4(argv[1]);
    return 0;
}
