// Choosing the tokens of generated text.
#include "runtime/engine/sample.h"
#include "runtime/base/base.h"
#include <math.h>

int sample_is_eos(const mt_model *m, int tok) {
    if (tok == m->eos_id) return 1;
    for (int i = 0; i < m->n_eos_more; i++)
        if (tok == m->eos_more[i]) return 1;
    return 0;
}

int sample_token(const float *logits, int vocab, float temperature, uint64_t key) {
    float max = logits[0];
    for (int i = 1; i < vocab; i++) max = logits[i] > max ? logits[i] : max;
    double total = 0;
    for (int i = 0; i < vocab; i++) total += exp((logits[i] - max) / temperature);
    double u = (splitmix64(key) >> 11) * 0x1.0p-53 * total, acc = 0;
    for (int i = 0; i < vocab; i++) {
        acc += exp((logits[i] - max) / temperature);
        if (acc >= u) return i;
    }
    return vocab - 1;
}
