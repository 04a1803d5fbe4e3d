// bfloat16: what the GPU computes with (rounded from the streamed fp32 master) and, optionally,
// the host's gradient slots.
#ifndef MT_BF16_H
#define MT_BF16_H

#include <stdint.h>
#include <string.h>

typedef uint16_t bf16;

// Round to nearest, ties to even, as torch's .to(torch.bfloat16). NaN stays a quiet NaN
// (the carry of the rounding must not turn a NaN payload into Inf).
static inline bf16 bf16_from_float(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)((u >> 16) | 0x0040u);
    uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
    return (bf16)((u + rounding_bias) >> 16);
}

static inline float bf16_to_float(bf16 h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif
