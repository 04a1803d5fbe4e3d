// Whole-model gradient check on a tiny Llama: the analytic gradient of every tensor (through
// the layer template, the head and the embedding, exactly as the engine composes them)
// against central finite differences of the summed cross-entropy loss. Also as a Qwen2 (q/k/v
// biases) with Llama 3.1's rope_scaling, and the bias gradients' bits for 1 and 3 threads.
// Then the MoE layer kinds: router, experts, shared expert and its gate, dense layers among
// MoE ones, qk-norm over heads (an explicit head_dim) or the whole projection, and the
// load-balancing loss joined to the loss as the backend joins it (backend_cpu.c moe_aux_of).
// And sliding windows as layer kinds (model.sliding_window, model.layer_types), and gpt-oss's
// router (its bias, the softmax over the top k) and experts (biases, the clamped SwiGLU, whose
// gradient is exactly 0 past its clamps). Then Qwen3.5's parts: Gated DeltaNet layers (GVA, the
// conv and the rule restarting at packed documents) beside softmax ones, the gated attention,
// zero-centred norms and partial rotary. Multi-head latent attention with and without the
// low-rank query path, interleaved RoPE and YaRN's mscale_all_dim. A finite difference
// across a top-k switch is meaningless: a trial whose perturbation moves any token's expert choice
// is skipped and another drawn.
#include "kernels/cpu/kernels_cpu.h"
#include "runtime/engine/layer.h"
#include "runtime/model/model.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 8 };
static int passed, failed;

typedef struct {
    mt_config c;
    float *params[8], *grads[8];
    int32_t in[B * T], tgt[B * T];
    int32_t doc_start[B * T]; // packed documents, for the variants that pack
    layer_scratch *s;
    // The loss: ce_weight * the summed cross-entropy + aux_coef * the load-balancing loss.
    double ce_weight, aux_coef;
    // MoE: per MoE layer each expert's tokens and probability sums, the aux loss's gradient on
    // the probabilities, and each layer's expert choices in the last run ([layers * n * k])
    int32_t *counts, *choice;
    float *psum, aux_g[MOE_MAX_EXPERTS];
} model;

static float *zeros(size_t n) {
    return calloc(n ? n : 1, sizeof(float));
}

static const float *cls_weights(model *m) {
    head_params hp;
    head_params_bind(&hp, &m->c.model, m->params[model_head_group(&m->c.model)]);
    return m->c.model.tied_embeddings ? m->params[0] : hp.lm_head;
}

// Where MoE layer l records its routing, as backend_cpu.c's route_of says; NULL: dense.
static moe_route_io *route_of(model *m, int l, moe_route_io *io) {
    if (!mt_layer_is_moe(&m->c.model, l)) return NULL;
    int i = 0;
    for (int j = 0; j < l; j++) i += mt_layer_is_moe(&m->c.model, j);
    size_t at = (size_t)i * m->c.model.experts;
    *io = (moe_route_io){m->counts + at, m->psum + at, m->aux_g};
    return io;
}

// Forward (and, with want_grads, backward) of the loss over B*T tokens.
static double run(model *m, int want_grads) {
    const mt_config *c = &m->c;
    int n = B * T, D = c->model.dim, L = c->model.layers, k = c->model.top_k;
    float *acts = zeros((size_t)(L + 1) * n * D), *xf = zeros(n * D), *rstd = zeros(n);
    float *dres = zeros(n * D), *dxf = zeros(n * D), *tmp = zeros(n * D);
    moe_route_io io;
    embedding_forward(acts, m->in, m->params[0], n, D);
    for (int l = 0; l < L; l++) {
        layer_params p;
        layer_params_bind(&p, &c->model, l, m->params[model_layer_group(l)]);
        m->s->route = route_of(m, l, &io);
        layer_forward(c, l, &p, m->s, acts + (size_t)l * n * D, acts + (size_t)(l + 1) * n * D, 0);
        if (m->s->route)
            memcpy(m->choice + (size_t)l * n * k, moe_scratch_experts(m->s->moe),
                   sizeof(int32_t) * n * k);
    }
    head_params hp, hg;
    int H = model_head_group(&c->model);
    head_params_bind(&hp, &c->model, m->params[H]);
    float *x_last = acts + (size_t)L * n * D;
    rmsnorm_forward(xf, rstd, x_last, hp.final_norm, n, D, (float)c->model.norm_eps);
    double loss =
        m->ce_weight * classifier_forward(xf, cls_weights(m), m->tgt, n, D, c->model.vocab);
    // As the backend: the MoE layers' statistics pooled, aux_g scaled by the loss's weight on
    // the aux loss (moe_aux_of's daux), and each router's backward adds it.
    if (mt_moe_layers(&c->model))
        loss += m->aux_coef * moe_aux_loss(m->aux_g, m->counts, m->psum, mt_moe_layers(&c->model),
                                           n, c->model.experts, (float)m->aux_coef);
    if (want_grads) {
        head_params_bind(&hg, &c->model, m->grads[H]);
        classifier_backward(dxf, c->model.tied_embeddings ? m->grads[0] : hg.lm_head, xf,
                            cls_weights(m), m->tgt, n, D, c->model.vocab, (float)m->ce_weight);
        rmsnorm_backward(dres, hg.final_norm, dxf, x_last, hp.final_norm, rstd, n, D);
        for (int l = L - 1; l >= 0; l--) {
            layer_params p, dp;
            layer_params_bind(&p, &c->model, l, m->params[model_layer_group(l)]);
            layer_params_bind(&dp, &c->model, l, m->grads[model_layer_group(l)]);
            m->s->route = route_of(m, l, &io);
            layer_forward(c, l, &p, m->s, acts + (size_t)l * n * D, tmp,
                          0); // the engine's recompute
            layer_backward(c, l, &p, &dp, m->s, acts + (size_t)l * n * D, dres, tmp);
            memcpy(dres, tmp, sizeof(float) * n * D);
        }
        embedding_backward(m->grads[0], dres, m->in, n, D);
    }
    free(acts), free(xf), free(rstd), free(dres), free(dxf), free(tmp);
    return loss;
}

// Whether the last run routed every token of every MoE layer as `base` records.
static int same_routing(const model *m, const int32_t *base) {
    size_t pairs = (size_t)m->c.model.layers * B * T * m->c.model.top_k;
    return !pairs || memcmp(m->choice, base, sizeof(int32_t) * pairs) == 0;
}

static void check_tensor(model *m, int g, const tensor_info *t, const int32_t *base,
                         unsigned *seed) {
    double max_grad = 0;
    for (uint64_t i = 0; i < t->numel; i++)
        max_grad = fmax(max_grad, fabs(m->grads[g][t->offset + i]));
    // An expert sees few tokens, so its gradients are small and the loss's float rounding
    // dominates their differences below a step of 4e-2; theirs is larger.
    int expert = (t->role >= T_EXP_GATE && t->role <= T_EXP_DOWN) ||
                 (t->role >= T_EXP_GATE_B && t->role <= T_EXP_DOWN_B);
    // The clamped SwiGLU's (up + 1), up to limit + 1 = 8 where up is clamped, scales the
    // curvature of its gate: a step of 4e-2 there leaves a truncation error of several percent.
    float step = expert && !(m->c.model.swiglu_limit > 0) ? 4e-2f : 2e-2f;
    // The noise floor below is calibrated at this step; a smaller step (Gated DeltaNet's, or a
    // shrunk one) raises it, as the loss's rounding enters the difference as 1 / eps.
    const double full = step;
    // Gated DeltaNet multiplies several projections of the same input (q . k, the decays, the
    // gated norm): its loss curves more, and a step of 2e-2 leaves a truncation error of a few
    // percent where 5e-3 leaves well under 1%.
    if (mt_gdn_layers(&m->c.model)) step = 5e-3f;
    int bad = 0, done = 0, skipped = 0;
    double worst = 0;
    for (int trial = 0; trial < 40 && done < 6; trial++) {
        uint64_t i = t->offset + (uint64_t)rand_r(seed) % t->numel;
        // A step of 2e-2: with 1e-2, the float rounding of the summed loss already shows in the
        // smallest gradients (a k bias's: q . b is nearly the same for every key). Where it
        // moves a token's expert choice, steps 4 and 16 times smaller are tried before the
        // trial is given up.
        float saved = m->params[g][i], eps = step;
        double up = 0, down = 0;
        int moved = 1;
        for (int shrink = 0; shrink < 3 && moved; shrink++, eps /= 4) {
            m->params[g][i] = saved + eps;
            up = run(m, 0);
            moved = !same_routing(m, base);
            m->params[g][i] = saved - eps;
            down = run(m, 0);
            moved |= !same_routing(m, base);
            m->params[g][i] = saved;
        }
        if (moved) { // a top-k switch within every step: no derivative to compare with
            skipped++;
            continue;
        }
        eps *= 4; // the step that kept the routing
        // The loss's rounding enters the difference as 1 / eps: a smaller step's floor grows.
        double fd = (up - down) / (2.0 * eps), an = m->grads[g][i];
        double floor = 1e-2 * max_grad * full / eps + 1e-6;
        double err = fabs(fd - an) / (fmax(fabs(fd), fabs(an)) + floor);
        worst = fmax(worst, err);
        bad += err > 2e-2;
        done++;
    }
    bad += done < 3; // nearly every trial moved the routing: nothing was checked
    char name[128];
    model_tensor_name(name, sizeof name, t, g - 1);
    printf("%s: %-52s worst relative error %.2e (max |grad| %.3g, %d trials, %d skipped)\n",
           bad ? "FAIL" : "PASS", name, worst, max_grad, done, skipped);
    bad ? failed++ : passed++;
}

// Qwen2's biases, and llama3 frequencies whose blended band holds one of the four pairs
// (head dim 8: wavelengths 6.3, 63, 628, 6283 against 16 / 4 and 16 / 1).
static void make_qwen2(mt_model *m) {
    m->qkv_bias = 1;
    m->rope_type = ROPE_LLAMA3;
    m->rope_factor = 4, m->rope_low_freq_factor = 1, m->rope_high_freq_factor = 4;
    m->rope_original_max_pos = 16;
}

// Llama with attention_bias: biases on q, k, v and o_proj.
static void make_llama_bias(mt_model *m) {
    m->qkv_bias = 1, m->o_bias = 1;
}

// Mixtral-like: every layer MoE, 4 experts, top 2, renormalised over the two.
static void make_moe_renorm(mt_model *m) {
    m->experts = 4, m->top_k = 2, m->moe_ffn_dim = 16, m->norm_topk_prob = 1;
}

// Qwen2-MoE-like: 6 experts, top 2 not renormalised, a shared expert with its gate, q/k/v
// biases, and layer 0 a dense MLP.
static void make_moe_shared(mt_model *m) {
    m->experts = 6, m->top_k = 2, m->moe_ffn_dim = 12, m->shared_ffn_dim = 20, m->qkv_bias = 1;
    m->shared_gate = 1;
    snprintf(m->dense_layers, sizeof m->dense_layers, "0");
}

// DeepSeek-V3's router: sigmoid scores, a correction bias (init_params moves it off zero, so it
// changes choices), 8 experts in 4 groups of which the best 2 are kept, top 3, renormalised,
// scaled by 2.5; two ungated shared experts (their widths summed); layer 0 dense.
static void make_deepseek(mt_model *m) {
    m->experts = 8, m->top_k = 3, m->moe_ffn_dim = 8, m->shared_ffn_dim = 16, m->shared_gate = 0;
    m->router_score = ROUTER_SCORE_SIGMOID, m->router_correction = 1, m->router_groups = 4;
    m->router_topk_groups = 2, m->router_scale = 2.5, m->norm_topk_prob = 1;
    m->moe_names = MOE_NAMES_DEEPSEEK;
    snprintf(m->dense_layers, sizeof m->dense_layers, "0");
}
// ... not renormalised (norm_topk_prob false), one group (GLM-4.5's n_group 1), scale 1.8.
static void make_deepseek_plain(mt_model *m) {
    make_deepseek(m);
    m->norm_topk_prob = 0, m->router_groups = 1, m->router_topk_groups = 1, m->router_scale = 1.8;
    m->dense_layers[0] = 0;
}

// Qwen3-like dense: RMSNorm over each head of q and k, head_dim 12 != dim / heads = 8.
static void make_qk_head(mt_model *m) {
    m->head_dim = 12;
    m->qk_norm = QK_HEAD;
}

// Qwen3-MoE-like: qk-norm per head, explicit head_dim, MoE renormalised, odd moe_every so
// layer 0 is dense.
static void make_qwen3_moe(mt_model *m) {
    make_qk_head(m);
    m->experts = 5, m->top_k = 3, m->moe_ffn_dim = 10, m->norm_topk_prob = 1, m->moe_every = 2;
}

// OLMoE-like: RMSNorm over the whole q and k projections, MoE not renormalised.
static void make_olmoe(mt_model *m) {
    m->qk_norm = QK_ALL;
    m->experts = 4, m->top_k = 2, m->moe_ffn_dim = 16;
}

// gpt-oss-like: a router bias and the softmax over the top 2 logits, biases on every expert's
// projections, the clamped SwiGLU (limit 7; init_params pushes a quarter of the experts' gate
// and up features past the clamps).
static void make_gpt_oss(mt_model *m) {
    m->experts = 4, m->top_k = 2, m->moe_ffn_dim = 16, m->router_softmax = ROUTER_SOFTMAX_TOP_K;
    m->router_bias = m->expert_bias = 1, m->swiglu_limit = 7, m->moe_names = MOE_NAMES_GPT_OSS;
}

// Sliding windows as layer kinds: layer 0 sees 3 keys, layer 1 every key before it (gpt-oss's
// alternation), over rows of 8 tokens.
static void make_window(mt_model *m) {
    m->sliding_window = 3;
    snprintf(m->layer_types, sizeof m->layer_types, "sliding_attention,full_attention");
}

// Mistral-like, MoE: every layer slides, window 2.
static void make_window_moe(mt_model *m) {
    make_moe_renorm(m);
    m->sliding_window = 2;
}

// gpt-oss's attention: sinks on every layer, layer 0 sliding (window 3), biases on q, k, v and o.
static void make_sinks(mt_model *m) {
    make_window(m);
    make_llama_bias(m);
    m->attn_sinks = 1;
}

// Qwen3.5's Gated DeltaNet (layer_types linear_attention) beside softmax layers: 4 value heads
// over 2 key heads (GVA), key dim 8, value dim 6, a conv of 4 taps.
static void make_gdn(mt_model *m, const char *types) {
    snprintf(m->layer_types, sizeof m->layer_types, "%s", types);
    m->linear_k_heads = 2, m->linear_v_heads = 4, m->linear_k_dim = 8, m->linear_v_dim = 6;
    m->linear_conv = 4;
}
static void make_gdn_first(mt_model *m) {
    make_gdn(m, "linear_attention,full_attention");
}
static void make_gdn_second(mt_model *m) {
    make_gdn(m, "full_attention,linear_attention");
}
// Both layers Gated DeltaNet, as many value heads as key heads, a conv of 3 taps.
static void make_gdn_only(mt_model *m) {
    make_gdn(m, "linear_attention,linear_attention");
    m->linear_v_heads = 2, m->linear_conv = 3;
}
// The gated attention alone: sigmoid(gate) on each head's output.
static void make_output_gate(mt_model *m) {
    m->attn_output_gate = 1;
}
// Zero-centred norms, (1 + w), on the layers' norms, q_norm, k_norm and the final norm.
static void make_zero_centered(mt_model *m) {
    make_qk_head(m);
    m->norm_zero_centered = 1;
}
// RoPE on half of each head (4 of 8 elements).
static void make_partial_rotary(mt_model *m) {
    m->partial_rotary_factor = 0.5;
}
// Qwen3.5's layer: Gated DeltaNet then gated attention with qk-norm per head, zero-centred norms
// and a quarter of each head rotated (head_dim 16: 4 elements).
static void make_qwen35(mt_model *m) {
    make_gdn_first(m);
    make_output_gate(m);
    m->head_dim = 16, m->qk_norm = QK_HEAD, m->norm_zero_centered = 1;
    m->partial_rotary_factor = 0.25;
}

// Multi-head latent attention (DeepSeek-V3's): q_proj, a latent of 12, k's nope part 6 and
// rope part 4 (plain halves), values of 5 (narrower than q and k's 10).
static void make_mla(mt_model *m) {
    m->mla_kv_rank = 12, m->mla_nope_dim = 6, m->mla_rope_dim = 4, m->mla_v_dim = 5;
    m->kv_heads = m->heads;
}
// With the low-rank query path (rank 10), interleaved RoPE pairs and YaRN (factor 4 over an
// original context of 4) whose mscale_all_dim scales the softmax and, with mscale, the rotation.
static void make_mla_lora(mt_model *m) {
    make_mla(m);
    m->mla_q_rank = 10, m->rope_interleave = 1, m->mla_v_dim = 7;
    m->rope_type = ROPE_YARN, m->rope_factor = 4, m->rope_original_max_pos = 4;
    m->rope_mscale = 1, m->rope_mscale_all_dim = 0.7;
}

typedef struct {
    const char *what;
    void (*make)(mt_model *m); // NULL: a plain Llama
    int tied, bits;            // bits: layer 1's gradients bitwise on 1 and 3 threads
    double ce_weight, aux_coef;
    int packed; // the rows pack documents (row 0 starts one at 3, row 1 at 5 and 6)
} variant;

// The packed documents' starts: each token's document's first token in its row.
static void pack_documents(int32_t *doc_start) {
    static const int starts[B][3] = {{0, 3, T}, {0, 5, 6}};
    for (int b = 0; b < B; b++)
        for (int t = 0, d = 0; t < T; t++) {
            while (d + 1 < 3 && t >= starts[b][d + 1]) d++;
            doc_start[b * T + t] = starts[b][d];
        }
}

// The layer gradients of one model as a run with `threads` OpenMP threads leaves them.
static float *layer_grads(model *m, int threads) {
    const mt_config *c = &m->c;
    int g = model_layer_group(1);
    uint64_t n = model_group_numel(&c->model, g);
    memset(m->grads[g], 0, n * sizeof(float));
    omp_set_num_threads(threads);
    run(m, 1);
    omp_set_num_threads(1);
    float *out = malloc(n * sizeof(float));
    memcpy(out, m->grads[g], n * sizeof(float));
    return out;
}

// The clamped SwiGLU's features past a clamp, by their index f in an expert: the gate above
// +limit (f % 4 == 0), the up above +limit (1) or below -limit (2); 3 stays inside.
static float clamp_push(const mt_model *m, int role, uint64_t i) {
    int f = (int)(i % (uint64_t)m->moe_ffn_dim) % 4;
    float past = (float)m->swiglu_limit + 8.0f;
    if (role == T_EXP_GATE_B) return f == 0 ? past : 0.0f;
    return f == 1 ? past : f == 2 ? -past : 0.0f;
}

// With swiglu_limit: the gate and up biases of the features clamp_push names moved past the
// clamps, far enough that no step of the check crosses back.
static void push_past_clamps(model *m, int g, const tensor_info *t) {
    if (!(m->c.model.swiglu_limit > 0) || (t->role != T_EXP_GATE_B && t->role != T_EXP_UP_B))
        return;
    for (uint64_t i = 0; i < t->numel; i++)
        m->params[g][t->offset + i] += clamp_push(&m->c.model, t->role, i);
}

// Beyond a clamp no gradient passes: the bias and weight-row gradients of every expert's clamped
// features are exactly 0, and those inside are not.
static void check_clamped_zero(model *m) {
    const mt_config *c = &m->c;
    uint64_t D = (uint64_t)c->model.dim;
    for (int g = 1; g < model_head_group(&c->model); g++) {
        tensor_info t[MODEL_MAX_TENSORS];
        uint64_t numel;
        int nt = model_group_tensors(&c->model, g, t, &numel), zero = 1, inside = 0, seen = 0;
        for (int k = 0; k < nt; k++) {
            int bias = t[k].role == T_EXP_GATE_B || t[k].role == T_EXP_UP_B;
            int weight = t[k].role == T_EXP_GATE || t[k].role == T_EXP_UP;
            if (!bias && !weight) continue;
            int role =
                t[k].role == T_EXP_GATE || t[k].role == T_EXP_GATE_B ? T_EXP_GATE_B : T_EXP_UP_B;
            seen = 1;
            for (uint64_t i = 0; i < t[k].numel; i++) {
                float gr = m->grads[g][t[k].offset + i];
                if (clamp_push(&c->model, role, bias ? i : i / D) != 0.0f)
                    zero &= gr == 0.0f;
                else
                    inside |= gr != 0.0f;
            }
        }
        if (!seen) continue;
        int ok = zero && inside;
        printf("%s: layer %d: gate and up gradients exactly 0 beyond the clamps, nonzero inside\n",
               ok ? "PASS" : "FAIL", g - 1);
        ok ? passed++ : failed++;
    }
}

static void init_params(model *m, unsigned *seed) {
    const mt_config *c = &m->c;
    for (int g = 0; g < model_group_count(&c->model); g++) {
        uint64_t n = model_group_numel(&c->model, g);
        m->params[g] = zeros(n), m->grads[g] = zeros(n);
        model_init_slice(c, g, 0, n, m->params[g]);
        // Scale up from the 0.02 init so the finite differences stand well above fp32 noise,
        // and move norm weights off 1 so their gradients are exercised in general position.
        for (uint64_t i = 0; i < n; i++)
            m->params[g][i] = m->params[g][i] == 1.0f ? 0.5f + (rand_r(seed) % 1000) / 1000.0f
                                                      : m->params[g][i] * 10.0f;
    }
    for (int g = 1; g < model_head_group(&c->model);
         g++) { // biases start at zero: move them off it
        tensor_info t[MODEL_MAX_TENSORS];
        uint64_t numel;
        int nt = model_group_tensors(&c->model, g, t, &numel);
        for (int k = 0; k < nt; k++) {
            if (t[k].init == TENSOR_ZEROS)
                for (uint64_t i = 0; i < t[k].numel; i++)
                    m->params[g][t[k].offset + i] = (rand_r(seed) % 1000) / 2500.0f - 0.2f;
            push_past_clamps(m, g, &t[k]);
        }
    }
    for (int g = 0; g < model_group_count(&c->model); g++) { // zero-centred norm weights; A_log
        tensor_info t[MODEL_MAX_TENSORS];
        uint64_t numel;
        int nt = model_group_tensors(&c->model, g, t, &numel);
        for (int k = 0; k < nt; k++) {
            // off 0, where (1 + w) would hide a wrong offset's gradient less well
            float lo = -0.5f, span = 1.0f;
            if (t[k].init == TENSOR_A_LOG) // decays of exp(-0.1) to exp(-2) a token, not 0
                lo = -2.0f, span = 2.0f;
            else if (t[k].init != TENSOR_NORM || !c->model.norm_zero_centered)
                continue;
            for (uint64_t i = 0; i < t[k].numel; i++)
                m->params[g][t[k].offset + i] = lo + span * (rand_r(seed) % 1000) / 1000.0f;
        }
    }
}

static void gradcheck(const variant *v) {
    model m = {.ce_weight = v->ce_weight, .aux_coef = v->aux_coef};
    mt_config *c = &m.c;
    c->model.dim = 32, c->model.layers = 2, c->model.heads = 4, c->model.kv_heads = 2,
    c->model.ffn_dim = 48, c->model.vocab = 37;
    c->model.rope_theta = 10000, c->model.norm_eps = 1e-5, c->model.tied_embeddings = v->tied,
    c->seed = 5;
    if (v->make) v->make(&c->model);
    model_describe_layers(&c->model);
    unsigned seed = 11;
    init_params(&m, &seed);
    size_t pairs = (size_t)c->model.layers * B * T * c->model.top_k,
           per = (size_t)c->model.layers * c->model.experts;
    m.counts = calloc(per + 1, 4), m.psum = zeros(per), m.choice = calloc(pairs + 1, 4);
    int32_t *base = calloc(pairs + 1, 4);
    for (int i = 0; i < B * T; i++)
        m.in[i] = rand_r(&seed) % c->model.vocab, m.tgt[i] = rand_r(&seed) % c->model.vocab;
    m.s = layer_scratch_new(c, B, T);
    if (v->packed) pack_documents(m.doc_start);
    m.s->doc_start = v->packed ? m.doc_start : NULL;
    printf("-- %s%s, loss %.6f\n", v->what, v->packed ? ", packed documents" : "", run(&m, 1));
    memcpy(base, m.choice, sizeof(int32_t) * pairs);
    if (c->model.swiglu_limit > 0) check_clamped_zero(&m);
    for (int g = 0; g < model_group_count(&c->model); g++) {
        tensor_info t[MODEL_MAX_TENSORS];
        uint64_t numel;
        int nt = model_group_tensors(&c->model, g, t, &numel);
        for (int k = 0; k < nt; k++) check_tensor(&m, g, &t[k], base, &seed);
    }
    if (v->bits) {
        uint64_t n = model_group_numel(&c->model, model_layer_group(1));
        float *one = layer_grads(&m, 1), *three = layer_grads(&m, 3);
        int same = memcmp(one, three, n * sizeof(float)) == 0;
        printf("%s: layer 1 gradients bitwise equal on 1 and 3 threads\n", same ? "PASS" : "FAIL");
        same ? passed++ : failed++;
        free(one), free(three);
    }
    layer_scratch_free(m.s);
    for (int g = 0; g < model_group_count(&c->model); g++) free(m.params[g]), free(m.grads[g]);
    free(m.counts), free(m.psum), free(m.choice), free(base);
}

int main(void) {
    omp_set_num_threads(1);
    static const variant all[] = {
        {"tied embeddings", NULL, 1, 0, 1, 0, 0},
        {"untied embeddings", NULL, 0, 0, 1, 0, 0},
        {"q/k/v biases, llama3 rope", make_qwen2, 0, 1, 1, 0, 0},
        {"q/k/v and o_proj biases (Llama's attention_bias)", make_llama_bias, 0, 1, 1, 0, 0},
        {"MoE: 4 experts, top 2 renormalised", make_moe_renorm, 0, 1, 1, 0, 0},
        {"MoE: 6 experts, top 2, shared expert, layer 0 dense", make_moe_shared, 0, 1, 1, 0, 0},
        {"qk-norm per head, head_dim 12", make_qk_head, 0, 0, 1, 0, 0},
        {"MoE every 2nd layer, qk-norm per head, head_dim 12", make_qwen3_moe, 1, 0, 1, 0, 0},
        {"MoE, qk-norm over the projection", make_olmoe, 0, 0, 1, 0, 0},
        {"MoE renormalised, with the aux loss (coef 1)", make_moe_renorm, 0, 0, 1, 1, 0},
        {"MoE with shared expert, the aux loss alone (coef 20)", make_moe_shared, 0, 0, 0, 20, 0},
        {"sliding window 3 on layer 0, layer 1 full", make_window, 0, 1, 1, 0, 0},
        {"MoE, every layer a sliding window of 2", make_window_moe, 0, 0, 1, 0, 0},
        {"attention sinks, a sliding layer, q/k/v/o biases", make_sinks, 0, 1, 1, 0, 0},
        {"gpt-oss MoE: router bias, softmax over the top 2, expert biases, clamped SwiGLU",
         make_gpt_oss, 0, 1, 1, 0, 0},
        {"gpt-oss MoE with the aux loss (coef 1)", make_gpt_oss, 0, 0, 1, 1, 0},
        {"DeepSeek router: sigmoid, correction bias, 2 of 4 groups, top 3 renormalised, scale "
         "2.5, ungated shared experts",
         make_deepseek, 0, 1, 1, 0, 0},
        {"DeepSeek router: one group, not renormalised, scale 1.8", make_deepseek_plain, 1, 1, 1, 0,
         0},
        {"Gated DeltaNet layer 0 (GVA: 4 value heads, 2 key heads), layer 1 full", make_gdn_first,
         0, 0, 1, 0, 0},
        {"layer 0 full, Gated DeltaNet layer 1 (GVA)", make_gdn_second, 0, 1, 1, 0, 0},
        {"Gated DeltaNet on both layers", make_gdn_only, 1, 1, 1, 0, 1},
        {"Gated DeltaNet layer 0 (GVA), layer 1 full", make_gdn_first, 0, 0, 1, 0, 1},
        {"gated attention (attn_output_gate)", make_output_gate, 0, 1, 1, 0, 0},
        {"zero-centred norms, qk-norm per head", make_zero_centered, 0, 0, 1, 0, 0},
        {"partial rotary 0.5", make_partial_rotary, 0, 0, 1, 0, 1},
        {"Qwen3.5: Gated DeltaNet, gated attention, zero-centred norms, rotary 0.25", make_qwen35,
         1, 1, 1, 0, 1},
        {"MLA: q_proj, latent 12, nope 6 + rope 4, values 5", make_mla, 0, 1, 1, 0, 0},
        {"MLA: q rank 10, interleaved rope, YaRN with mscale_all_dim", make_mla_lora, 0, 1, 1, 0,
         0},
        {"MLA: q rank 10, interleaved rope, YaRN", make_mla_lora, 1, 0, 1, 0, 1},
        {"MLA: q_proj", make_mla, 0, 0, 1, 0, 1},
    };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) gradcheck(&all[i]);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
