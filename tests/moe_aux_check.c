// The load-balancing loss as the CPU backend computes it, for hf_moe_parity.py to hold against
// transformers' load_balancing_loss_func: reads "layers n E k" and then layers * n * E router
// logits (text, layer-major) from stdin; routes each layer's tokens (moe_route_forward, the
// counts of moe_dispatch, moe_prob_sums) and prints moe_aux_loss over the layers pooled.
#include "kernels/cpu/kernels_cpu.h"
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    int L, n, E, k;
    if (scanf("%d %d %d %d", &L, &n, &E, &k) != 4 || E > MOE_MAX_EXPERTS || k > E) return 2;
    size_t nE = (size_t)n * E, nk = (size_t)n * k;
    float *logits = malloc(sizeof(float) * nE), *probs = malloc(sizeof(float) * nE);
    float *weight = malloc(sizeof(float) * nk), *psum = malloc(sizeof(float) * L * E);
    int32_t *expert = malloc(4 * nk), *row_of = malloc(4 * nk), *token_of = malloc(4 * nk);
    int32_t *counts = malloc(4 * (size_t)L * E), offsets[MOE_MAX_EXPERTS + 1];
    for (int l = 0; l < L; l++) {
        for (size_t i = 0; i < nE; i++)
            if (scanf("%f", &logits[i]) != 1) return 2;
        moe_route_forward(probs, expert, weight, logits, n, E, k, 0);
        moe_dispatch(counts + (size_t)l * E, offsets, row_of, token_of, expert, n, E, k);
        moe_prob_sums(psum + (size_t)l * E, probs, n, E);
    }
    printf("%.9g\n", moe_aux_loss(NULL, counts, psum, L, n, E, 1.0f));
    return 0;
}
