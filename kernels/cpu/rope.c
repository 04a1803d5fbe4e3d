// Rotary position embedding, Hugging Face "rotate_half" convention: the pairs are (i, i + hd/2)
// rather than adjacent elements, as in HF Llama checkpoints.
#include "kernels/cpu/kernels_cpu.h"

#include <math.h>
#include <stdlib.h>

// inv_freq[i] = 1 / theta^(2i / hd), computed in float like HF's
// 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)).
void rope_inv_freq(float *inv_freq, int head_dim, float theta) {
    for (int i = 0; i < head_dim / 2; i++)
        inv_freq[i] = 1.0f / powf(theta, (float)(2 * i) / (float)head_dim);
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

// cs[t * hd + i] = cos, cs[t * hd + hd/2 + i] = sin of the angle (float)t * inv_freq[i],
// rounded in float like HF's freqs = inv_freq @ position_ids.
static float *rope_table(const float *inv_freq, int T, int head_dim) {
    int half = head_dim / 2;
    float *cs = malloc(sizeof(float) * (size_t)T * head_dim);
    if (!cs) abort();
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < half; i++) {
            float angle = (float)t * inv_freq[i];
            cs[(long)t * head_dim + i] = cosf(angle);
            cs[(long)t * head_dim + half + i] = sinf(angle);
        }
    }
    return cs;
}

// Rotate every head of every row by +angle (sign = 1) or -angle (sign = -1). The rotation is
// orthogonal, so the backward is the forward with the angle negated. A token's position is its
// index in the row, or with packed documents its index in its document (t - doc_start[row]).
static void rope_apply(float *x, const float *inv_freq, int B, int T, int heads, int head_dim,
                       float sign, const int32_t *doc_start) {
    int half = head_dim / 2;
    float *cs = rope_table(inv_freq, T, head_dim);
#pragma omp parallel for schedule(static)
    for (long row = 0; row < (long)B * T; row++) {
        long pos = row % T - (doc_start ? doc_start[row] : 0);
        const float *c = cs + pos * head_dim, *s = c + half;
        for (int h = 0; h < heads; h++) {
            float *x1 = x + (row * heads + h) * head_dim, *x2 = x1 + half;
            for (int i = 0; i < half; i++) {
                float a = x1[i], b = x2[i], si = sign * s[i];
                x1[i] = a * c[i] - b * si;
                x2[i] = b * c[i] + a * si;
            }
        }
    }
    free(cs);
}

void rope_forward(float *x, const float *inv_freq, int B, int T, int heads, int head_dim,
                  const int32_t *doc_start) {
    rope_apply(x, inv_freq, B, T, heads, head_dim, 1.0f, doc_start);
}

void rope_backward(float *dx, const float *inv_freq, int B, int T, int heads, int head_dim,
                   const int32_t *doc_start) {
    rope_apply(dx, inv_freq, B, T, heads, head_dim, -1.0f, doc_start);
}
