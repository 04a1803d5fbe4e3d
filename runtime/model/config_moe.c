// train.cfg's Mixture-of-Experts fields, their rules between them: the options that go with
// experts, the dense layers, and the routers' (config.c's cross-field step calls it).
#include "runtime/model/config_source.h"
#include "runtime/model/model.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

// Whether the list's entries before at name layer v.
static int listed_before(const char *list, const char *at, long v) {
    for (const char *p = list; p < at; p = strchr(p, ',') + 1)
        if (strtol(p, NULL, 10) == v) return 1;
    return 0;
}

// model.dense_layers: layer indices below model.layers, comma-separated, digits only, each once
// ("0,", " 1" and "1,1" are refused rather than read loosely).
static int check_dense_layers(ctx_t *x, const mt_model *m) {
    const char *k = "model.dense_layers", *list = m->dense_layers;
    for (const char *p = list; *p;) {
        char *end;
        errno = 0;
        long v = isdigit((unsigned char)*p) ? strtol(p, &end, 10) : -1;
        if (v < 0 || errno || v >= m->layers || (*end && (*end != ',' || !end[1])))
            return source_fail(x, LINE(k), k,
                               "\"%s\" must list layer indices below model.layers = %d, "
                               "comma-separated, digits only",
                               list, m->layers);
        if (listed_before(list, p, v))
            return source_fail(x, LINE(k), k, "\"%s\" lists layer %ld twice", list, v);
        p = *end ? end + 1 : end;
    }
    return 0;
}

// gpt-oss's router and expert options go with experts; their biases have hub names only in
// gpt-oss's fused layout (moe_names "gpt_oss"), which has both.
static int check_moe_options(ctx_t *x, const mt_model *m) {
    const char *keys[] = {"model.shared_ffn_dim", "model.router_bias", "model.expert_bias",
                          "model.swiglu_limit", "model.router_softmax"};
    int set[] = {m->shared_ffn_dim > 0, m->router_bias, m->expert_bias, m->swiglu_limit > 0,
                 m->router_softmax != ROUTER_SOFTMAX_ALL};
    for (int i = 0; i < 5; i++)
        if (set[i] && m->experts == 0)
            return source_fail(x, LINE(keys[i]), keys[i], "needs model.experts > 0");
    int oss = m->moe_names == MOE_NAMES_GPT_OSS;
    if (oss != !!m->router_bias || oss != !!m->expert_bias) {
        const char *k = oss              ? "model.moe_names"
                        : m->router_bias ? "model.router_bias"
                                         : "model.expert_bias";
        return source_fail(x, LINE(k), k,
                           "model.moe_names = \"gpt_oss\" goes with model.router_bias and "
                           "model.expert_bias (its fused layout has both; no other has either)");
    }
    return 0;
}

// The correction bias, the groups and the scale are the sigmoid router's.
static int check_softmax_router(ctx_t *x, const mt_model *m) {
    const char *keys[] = {"model.router_correction", "model.router_groups", "model.router_scale"};
    int set[] = {m->router_correction, m->router_groups > 1, m->router_scale != 1};
    for (int i = 0; i < 3; i++)
        if (set[i])
            return source_fail(x, LINE(keys[i]), keys[i],
                               "goes with model.router_score = \"sigmoid\" (DeepSeek's router)");
    return 0;
}

// DeepSeek's router (DeepseekV3TopkRouter): each group's score is its top 2 (torch.topk(2)
// needs two experts a group), the k chosen come from the kept groups, the weights are the
// scores (never gpt-oss's top-k softmax), and transformers adds no load-balancing loss.
static int check_sigmoid_router(ctx_t *x, const mt_model *m, int groups) {
    int per = m->experts / groups;
    if (per < 2)
        return source_fail(x, LINE("model.router_groups"), "model.router_groups",
                           "%d groups of model.experts = %d: each group needs 2 experts at least",
                           groups, m->experts);
    int kept = m->router_groups > 1 ? m->router_topk_groups * per : m->experts;
    if (m->top_k > kept)
        return source_fail(x, LINE("model.top_k"), "model.top_k",
                           "%d is more than the %d experts of the model.router_topk_groups kept",
                           m->top_k, kept);
    if (m->router_softmax != ROUTER_SOFTMAX_ALL)
        return source_fail(x, LINE("model.router_softmax"), "model.router_softmax",
                           "must be \"all\" with model.router_score = \"sigmoid\"");
    if (m->router_aux)
        return source_fail(x, LINE("model.router_aux"), "model.router_aux",
                           "transformers adds no load-balancing loss for the sigmoid router "
                           "(DeepSeek-V3, GLM-4.5): set it false");
    return 0;
}

// DeepSeek's router: its options go with experts, the groups divide them.
static int check_router(ctx_t *x, const mt_model *m) {
    const char *keys[] = {"model.router_score", "model.router_correction", "model.router_groups"};
    int set[] = {m->router_score != ROUTER_SCORE_SOFTMAX, m->router_correction,
                 m->router_groups > 1};
    for (int i = 0; i < 3; i++)
        if (set[i] && m->experts == 0)
            return source_fail(x, LINE(keys[i]), keys[i], "needs model.experts > 0");
    int groups = m->router_groups > 1 ? m->router_groups : 1;
    if (m->experts % groups)
        return source_fail(x, LINE("model.router_groups"), "model.router_groups",
                           "%d does not divide model.experts = %d", groups, m->experts);
    if (m->router_groups > 1 && (m->router_topk_groups < 1 || m->router_topk_groups > groups))
        return source_fail(x, LINE("model.router_topk_groups"), "model.router_topk_groups",
                           "%d: needs 1..model.router_groups = %d", m->router_topk_groups, groups);
    return m->router_score == ROUTER_SCORE_SIGMOID ? check_sigmoid_router(x, m, groups)
                                                   : check_softmax_router(x, m);
}

int config_check_moe(ctx_t *x, const mt_model *m) {
    if (check_moe_options(x, m) < 0 || check_router(x, m) < 0) return -1;
    if (m->experts == 0) return 0;
    if (m->top_k > m->experts)
        return source_fail(x, LINE("model.top_k"), "model.top_k",
                           "%d is more than model.experts = %d", m->top_k, m->experts);
    return check_dense_layers(x, m);
}
