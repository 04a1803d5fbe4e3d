// Rotary position embedding, Hugging Face "rotate_half" convention: the pairs are (i, i + hd/2)
// rather than adjacent elements, as in HF Llama checkpoints.
#include "kernels/cpu/kernels_cpu.h"

#include <math.h>
#include <stdlib.h>

// theta^(2i / hd) in float, like HF's base ** (torch.arange(0, dim, 2).float() / dim).
static float rope_base_power(float theta, int i, int head_dim) {
    return powf(theta, (float)(2 * i) / (float)head_dim);
}

// inv_freq[i] = 1 / theta^(2i / hd), computed in float like HF's
// 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)).
void rope_inv_freq(float *inv_freq, int head_dim, float theta) {
    for (int i = 0; i < head_dim / 2; i++) inv_freq[i] = 1.0f / rope_base_power(theta, i, head_dim);
}

// Llama 3.1's rescaling (transformers' _compute_llama3_parameters) of the table above, in place:
// wavelengths 2 pi / inv_freq shorter than orig_ctx / high_freq_factor stay, those longer than
// orig_ctx / low_freq_factor are divided by factor, and the band between is blended smoothly.
// Each operation rounds in float in transformers' order, with its Python numbers rounded to
// float first (torch's `number / tensor` is reciprocal(tensor) * number), so the table has the
// same bits as theirs. The file is built without FMA contraction for the same reason.
void rope_llama3_scale(float *inv_freq, int head_dim, double factor, double low_freq_factor,
                       double high_freq_factor, double orig_ctx) {
    float low_wavelen = (float)(orig_ctx / low_freq_factor);
    float high_wavelen = (float)(orig_ctx / high_freq_factor);
    float f = (float)factor, two_pi = (float)(2 * M_PI), ctx = (float)orig_ctx;
    float low = (float)low_freq_factor, band = (float)(high_freq_factor - low_freq_factor);
    for (int i = 0; i < head_dim / 2; i++) {
        float inv = inv_freq[i], wavelen = (1.0f / inv) * two_pi;
        float scaled = wavelen > low_wavelen ? inv / f : inv;
        float smooth = ((1.0f / wavelen) * ctx - low) / band;
        float blended = (1.0f - smooth) * scaled / f + smooth * scaled;
        int medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
        inv_freq[i] = medium ? blended : scaled;
    }
}

// YaRN's mscale (transformers' yarn_get_mscale): 0.1 * mscale * ln(factor) + 1, or 1 when the
// factor does not stretch.
double rope_yarn_mscale(double factor, double mscale) {
    return factor <= 1 ? 1.0 : 0.1 * mscale * log(factor) + 1.0;
}

// The (fractional) dimension whose frequency turns `rotations` times over orig_ctx positions
// (transformers' find_correction_dim), in double like their Python.
static double yarn_correction_dim(double rotations, int dim, double theta, double orig_ctx) {
    return (dim * log(orig_ctx / (rotations * 2 * M_PI))) / (2 * log(theta));
}

// As transformers' _compute_yarn_parameters: dimensions below the correction range `low` keep
// their frequency (extrapolation), those above `high` are divided by factor (interpolation), and
// a linear ramp over the index blends the two between. The range is [dim at beta_fast rotations,
// dim at beta_slow rotations], floored / ceiled when truncate, then clipped to [0, dim - 1].
// Each float operation rounds in transformers' order (tensor - number and tensor / number round
// the number to float first; number / tensor is reciprocal(tensor) * number). Only theta^x may
// differ: libm's powf against torch's vectorized pow, 1 ulp apart on a few entries (2 of
// gpt-oss-120b's 32 with torch 2.11; the attention factor is bitwise theirs).
double rope_yarn_inv_freq(float *inv_freq, int head_dim, float theta, const rope_yarn *yarn) {
    double beta_fast = yarn->beta_fast ? yarn->beta_fast : 32;
    double beta_slow = yarn->beta_slow ? yarn->beta_slow : 1;
    double low = yarn_correction_dim(beta_fast, head_dim, theta, yarn->orig_ctx);
    double high = yarn_correction_dim(beta_slow, head_dim, theta, yarn->orig_ctx);
    if (yarn->truncate) low = floor(low), high = ceil(high);
    low = fmax(low, 0.0), high = fmin(high, head_dim - 1);
    if (low == high) high += 0.001; // their guard against a zero-width ramp
    float ramp_lo = (float)low, ramp_span = (float)(high - low), factor = (float)yarn->factor;
    for (int i = 0; i < head_dim / 2; i++) {
        float pos = rope_base_power(theta, i, head_dim);
        float extrapolated = 1.0f / pos, interpolated = 1.0f / (factor * pos);
        float ramp = fminf(fmaxf(((float)i - ramp_lo) / ramp_span, 0.0f), 1.0f);
        float keep = 1.0f - ramp; // their inv_freq_extrapolation_factor
        inv_freq[i] = interpolated * (1.0f - keep) + extrapolated * keep;
    }
    if (yarn->attention_factor) return yarn->attention_factor;
    if (yarn->mscale && yarn->mscale_all_dim)
        return rope_yarn_mscale(yarn->factor, yarn->mscale) /
               rope_yarn_mscale(yarn->factor, yarn->mscale_all_dim);
    return rope_yarn_mscale(yarn->factor, 1.0);
}

// cs[t * rot + i] = cos, cs[t * rot + rot/2 + i] = sin of the angle (float)t * inv_freq[i],
// rounded in float like HF's freqs = inv_freq @ position_ids, each times scale.
static float *rope_table(const float *inv_freq, float scale, int T, int rot) {
    int half = rot / 2;
    float *cs = malloc(sizeof(float) * (size_t)T * rot);
    if (!cs) abort();
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < half; i++) {
            float angle = (float)t * inv_freq[i];
            cs[(long)t * rot + i] = cosf(angle) * scale;
            cs[(long)t * rot + half + i] = sinf(angle) * scale;
        }
    }
    return cs;
}

// Rotate r->rot elements of every head of every row, from r->off, by +angle (sign = 1) or -angle
// (sign = -1), times r->scale; the rest of the head is left as it is. Pair i is (i, i + rot/2),
// or with r->interleave (2i, 2i + 1). The
// rotation is orthogonal, so the backward is the forward with the angle negated (the scale is
// the same both ways). A token's position is its index in the row, or with packed documents its
// index in its document (t - doc_start[row]).
static void rope_apply(float *x, int heads, const rope_args *r, float sign) {
    int head_dim = r->hd, rot = r->rot, half = rot / 2, T = r->T;
    int step = r->interleave ? 2 : 1, partner = r->interleave ? 1 : half; // pair i's elements
    const int32_t *doc_start = r->doc_start;
    float *cs = rope_table(r->inv_freq, r->scale, T, rot);
#pragma omp parallel for schedule(static)
    for (long row = 0; row < (long)r->B * T; row++) {
        long pos = row % T - (doc_start ? doc_start[row] : 0);
        const float *c = cs + pos * rot, *s = c + half;
        for (int h = 0; h < heads; h++) {
            float *x1 = x + (row * heads + h) * head_dim + r->off, *x2 = x1 + partner;
            for (int i = 0; i < half; i++) {
                float a = x1[i * step], b = x2[i * step], si = sign * s[i];
                x1[i * step] = a * c[i] - b * si;
                x2[i * step] = b * c[i] + a * si;
            }
        }
    }
    free(cs);
}

void rope_forward(float *x, int heads, const rope_args *r) {
    rope_apply(x, heads, r, 1.0f);
}

void rope_backward(float *dx, int heads, const rope_args *r) {
    rope_apply(dx, heads, r, -1.0f);
}
