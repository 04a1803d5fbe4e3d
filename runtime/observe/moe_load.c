// A MoE model's routing, as a step's metrics report it: the load-balancing loss and, per MoE
// layer, how unevenly the tokens fell on the experts (the busiest one's tokens over the mean)
// and how many got none.
#include "runtime/observe/observe.h"
#include <stdio.h>

static void layer_load(const int64_t *load, int E, double *max_over_mean, int *idle) {
    int64_t most = 0, sum = 0;
    *idle = 0;
    for (int e = 0; e < E; e++) {
        most = load[e] > most ? load[e] : most;
        sum += load[e];
        *idle += load[e] == 0;
    }
    *max_over_mean = sum ? (double)most * E / (double)sum : 0.0;
}

void moe_load_summary(const mt_model *m, const int64_t *load, double *worst, int *idle) {
    *worst = 0, *idle = 0;
    for (int l = 0; l < mt_moe_layers(m); l++) {
        double r;
        int i;
        layer_load(load + (size_t)l * m->experts, m->experts, &r, &i);
        *worst = r > *worst ? r : *worst;
        *idle += i;
    }
}

void moe_load_json(FILE *f, const mt_model *m, double aux, const int64_t *load) {
    fprintf(f, ",\"aux_loss\":%.9g,\"expert_load\":[", aux);
    for (int l = 0; l < mt_moe_layers(m); l++) {
        double r;
        int idle;
        layer_load(load + (size_t)l * m->experts, m->experts, &r, &idle);
        fprintf(f, "%s{\"max_over_mean\":%.4f,\"idle\":%d}", l ? "," : "", r, idle);
    }
    fputc(']', f);
}
