// Mixture-of-Experts routing: the router's softmax and top-k, the dispatch of (token, slot)
// pairs to expert-sorted rows, the gather and combine around the experts' GEMMs, and the
// load-balancing loss's statistics. The experts themselves are linear_* and swiglu_* calls on
// their rows.
//
// Every output has one owner and every sum runs in a fixed order, so the results are bitwise
// the same for any thread count; the CUDA kernels (kernels/cuda/moe.cu) follow the same orders.
#include "kernels/cpu/kernels_cpu.h"

#include <math.h>
#include <string.h>

// The k largest of p[E], largest first; equal values go to the lower expert index, as a
// stable descending sort would order them.
static void top_k(int32_t *idx, const float *p, int E, int k) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int i = 0; i < j; i++) taken |= idx[i] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        idx[j] = best;
    }
}

// The k weights from the logits z: the softmax over the chosen logits alone, each less the
// largest (the first chosen), as torch.softmax computes it on the top-k values.
static void top_k_softmax(float *w, const float *z, const int32_t *idx, int k) {
    float s = 0.0f;
    for (int j = 0; j < k; j++) s += w[j] = expf(z[idx[j]] - z[idx[0]]);
    for (int j = 0; j < k; j++) w[j] /= s;
}

void moe_route_forward(float *probs, int32_t *expert, float *weight, const float *logits, int n,
                       int E, int k, int weights) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        const float *z = logits + (size_t)t * E;
        float *p = probs + (size_t)t * E, mx = z[0], sum = 0.0f;
        for (int e = 1; e < E; e++) mx = z[e] > mx ? z[e] : mx;
        for (int e = 0; e < E; e++) sum += p[e] = expf(z[e] - mx);
        for (int e = 0; e < E; e++) p[e] /= sum;
        int32_t *idx = expert + (size_t)t * k;
        float *w = weight + (size_t)t * k, s = 0.0f;
        if (weights == MOE_WEIGHTS_TOP_K) {
            top_k(idx, z, E, k);
            top_k_softmax(w, z, idx, k);
            continue;
        }
        top_k(idx, p, E, k);
        for (int j = 0; j < k; j++) s += w[j] = p[idx[j]];
        if (weights == MOE_WEIGHTS_RENORM)
            for (int j = 0; j < k; j++) w[j] /= s;
    }
}

// dp[e] += d(loss)/d(p_e) from d_weight, for the weights taken from p (PROBS, RENORM): with
// RENORM w_j = p_j / s, s the chosen probabilities' sum, dp_j = (dw_j - sum_i dw_i w_i) / s.
static void weights_to_probs(float *dp, const float *dw, const float *p, const int32_t *idx, int k,
                             int renorm) {
    float s = 0.0f, dot_w = 0.0f;
    for (int j = 0; j < k; j++) s += p[idx[j]];
    for (int j = 0; j < k; j++) dot_w += dw[j] * p[idx[j]];
    for (int j = 0; j < k; j++) dp[idx[j]] += renorm ? (dw[j] - dot_w / s) / s : dw[j];
}

void moe_route_backward(float *d_logits, const float *d_weight, const float *probs,
                        const int32_t *expert, const float *weight, const float *aux_g, int n,
                        int E, int k, int weights) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        const float *p = probs + (size_t)t * E, *dw = d_weight + (size_t)t * k;
        const int32_t *idx = expert + (size_t)t * k;
        float dp[MOE_MAX_EXPERTS], dot_p = 0.0f;
        for (int e = 0; e < E; e++) dp[e] = aux_g ? aux_g[e] : 0.0f;
        if (weights != MOE_WEIGHTS_TOP_K)
            weights_to_probs(dp, dw, p, idx, k, weights == MOE_WEIGHTS_RENORM);
        for (int e = 0; e < E; e++) dot_p += p[e] * dp[e];
        float *dz = d_logits + (size_t)t * E;
        for (int e = 0; e < E; e++) dz[e] += p[e] * (dp[e] - dot_p);
        if (weights != MOE_WEIGHTS_TOP_K) continue;
        // The softmax over the k chosen logits: dz_j += w_j (dw_j - sum_i dw_i w_i).
        const float *w = weight + (size_t)t * k;
        float dot_w = 0.0f;
        for (int j = 0; j < k; j++) dot_w += dw[j] * w[j];
        for (int j = 0; j < k; j++) dz[idx[j]] += w[j] * (dw[j] - dot_w);
    }
}

void moe_dispatch(int32_t *counts, int32_t *offsets, int32_t *row_of, int32_t *token_of,
                  const int32_t *expert, int n, int E, int k) {
    memset(counts, 0, sizeof(int32_t) * E);
    for (long i = 0; i < (long)n * k; i++) counts[expert[i]]++;
    offsets[0] = 0;
    for (int e = 0; e < E; e++) offsets[e + 1] = offsets[e] + counts[e];
    int32_t next[MOE_MAX_EXPERTS];
    memcpy(next, offsets, sizeof(int32_t) * E);
    // In (token, slot) order: an expert's rows keep the tokens' order.
    for (long i = 0; i < (long)n * k; i++) {
        int32_t r = next[expert[i]]++;
        row_of[i] = r;
        token_of[r] = (int32_t)(i / k);
    }
}

void moe_gather(float *xp, const float *x, const int32_t *token_of, int rows, int D) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++)
        memcpy(xp + (size_t)r * D, x + (size_t)token_of[r] * D, sizeof(float) * D);
}

void moe_combine(float *out, const float *yp, const int32_t *row_of, const float *weight, int n,
                 int k, int D) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        float *o = out + (size_t)t * D;
        for (int j = 0; j < k; j++) {
            const float *y = yp + (size_t)row_of[(size_t)t * k + j] * D;
            float w = weight[(size_t)t * k + j];
            for (int d = 0; d < D; d++) o[d] += w * y[d];
        }
    }
}

void moe_combine_backward(float *d_yp, float *d_weight, const float *dout, const float *yp,
                          const int32_t *row_of, const float *weight, int n, int k, int D) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        const float *g = dout + (size_t)t * D;
        for (int j = 0; j < k; j++) {
            size_t r = (size_t)row_of[(size_t)t * k + j];
            const float *y = yp + r * D;
            float w = weight[(size_t)t * k + j], s = 0.0f, *dy = d_yp + r * D;
            for (int d = 0; d < D; d++) dy[d] += w * g[d], s += g[d] * y[d];
            d_weight[(size_t)t * k + j] += s;
        }
    }
}

void moe_scatter_add(float *dx, const float *d_xp, const int32_t *row_of, int n, int k, int D) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        float *o = dx + (size_t)t * D;
        for (int j = 0; j < k; j++) {
            const float *g = d_xp + (size_t)row_of[(size_t)t * k + j] * D;
            for (int d = 0; d < D; d++) o[d] += g[d];
        }
    }
}

void moe_prob_sums(float *psum, const float *probs, int n, int E) {
#pragma omp parallel for schedule(static)
    for (int e = 0; e < E; e++) {
        double s = 0.0; // in token order
        for (int t = 0; t < n; t++) s += probs[(size_t)t * E + e];
        psum[e] = (float)s;
    }
}

double moe_aux_loss(float *aux_g, const int32_t *counts, const float *psum, int layers, int n,
                    int E, float scale) {
    double tokens = (double)layers * n, loss = 0.0;
    for (int e = 0; e < E; e++) {
        double c = 0.0, p = 0.0;
        for (int l = 0; l < layers; l++)
            c += counts[(size_t)l * E + e], p += psum[(size_t)l * E + e];
        loss += (c / tokens) * (p / tokens);
        if (aux_g) aux_g[e] = (float)(scale * E * c / (tokens * tokens));
    }
    return loss * E;
}

// Qwen2-MoE's shared expert: its output y scaled by sigmoid of a per-token gate logit g.
static float sigmoid(float g) {
    return 1.0f / (1.0f + expf(-g));
}

void moe_gate_scale_forward(float *out, const float *y, const float *gate_logit, int n, int D) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        float s = sigmoid(gate_logit[t]);
        for (int d = 0; d < D; d++) out[(size_t)t * D + d] += s * y[(size_t)t * D + d];
    }
}

void moe_gate_scale_backward(float *dy, float *d_gate_logit, const float *dout, const float *y,
                             const float *gate_logit, int n, int D) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        float s = sigmoid(gate_logit[t]), dot = 0.0f;
        const float *g = dout + (size_t)t * D, *yt = y + (size_t)t * D;
        for (int d = 0; d < D; d++) dy[(size_t)t * D + d] += s * g[d], dot += g[d] * yt[d];
        d_gate_logit[t] += dot * s * (1.0f - s);
    }
}

void moe_sum_load(int64_t *load, const int32_t *counts, int passes, size_t per) {
    for (int m = 0; m < passes; m++)
        for (size_t i = 0; i < per; i++) load[i] += counts[(size_t)m * per + i];
}
