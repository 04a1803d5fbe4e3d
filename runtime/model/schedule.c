#include "runtime/model/model.h"
#include <math.h>

double lr_at_step(const mt_config *c, int s) {
    if (s < c->warmup_steps) return c->lr * (s + 1) / c->warmup_steps;
    int decay_steps = c->steps - c->warmup_steps;
    if (decay_steps <= 0) return c->lr;
    double progress = (double)(s - c->warmup_steps) / decay_steps;
    if (progress > 1.0) progress = 1.0;
    return c->min_lr + 0.5 * (c->lr - c->min_lr) * (1.0 + cos(M_PI * progress));
}

adamw_params adamw_params_at_step(const mt_config *c, int s, int skipped, float grad_scale) {
    adamw_params hp = {(float)lr_at_step(c, s), (float)c->beta1, (float)c->beta2, (float)c->eps,
                       (float)c->weight_decay,  s + 1 - skipped, grad_scale};
    return hp;
}

int step_is_bad(const double *group_sumsq, int n_groups) {
    double total = 0;
    for (int g = 0; g < n_groups; g++) total += group_sumsq[g];
    return !isfinite(total);
}
