#include "runtime/engine.h"
#include "kernels/cpu/kernels_cpu.h"
#include "runtime/data.h"
#include "runtime/hash.h"
#include "runtime/layer.h"
#include "runtime/metrics.h"
#include "runtime/transfer.h"
#include "shm/syscheck.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    mt_job *job;
    const mt_config *c;
    transfer xfer;
    dataset data;
    int n;                       // tokens per micro-batch
    weight_buffer emb, head, ring[2]; // layer l streams through ring[l % 2]
    grad_buffer emb_g, head_g, ring_g[2];
    float *acts;     // [(L + 1) * M * n * D]: layer-boundary activations of the step
    float *dres;     // [M * n * D]: gradient flowing back through the residual stream
    float *tmp, *xf, *dxf, *rstd_f;
    int32_t *inputs, *targets; // [M * n]
    float *inv_freq;
    layer_scratch *scratch;
} engine;

static float *alloc_buffer(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    if (!p) mt_die("out of memory: %zu MiB for the compute rank's buffers", (n * 4) >> 20);
    return p;
}

static float *act(engine *e, int l, int m) {
    return e->acts + ((size_t)l * e->c->micro_batches + m) * e->n * e->c->dim;
}
static float *dres(engine *e, int m) { return e->dres + (size_t)m * e->n * e->c->dim; }

static void engine_init(engine *e, mt_job *job) {
    memset(e, 0, sizeof *e);
    const mt_config *c = e->c = &job->cfg;
    e->job = job;
    transfer_init(&e->xfer, job);
    dataset_open(&e->data, c);
    e->n = c->micro_batch * c->seq_len;
    size_t nD = (size_t)e->n * c->dim, M = c->micro_batches;
    size_t layer_max = job->group_numel[model_layer_group(0)];
    e->emb.dst = alloc_buffer(job->group_numel[0]);
    e->emb_g.src = alloc_buffer(job->group_numel[0]);
    e->head.dst = alloc_buffer(job->group_numel[model_head_group(c)]);
    e->head_g.src = alloc_buffer(job->group_numel[model_head_group(c)]);
    for (int i = 0; i < 2; i++) {
        e->ring[i].dst = alloc_buffer(layer_max);
        e->ring_g[i].src = alloc_buffer(layer_max);
    }
    e->acts = alloc_buffer((c->layers + 1) * M * nD);
    e->dres = alloc_buffer(M * nD);
    e->tmp = alloc_buffer(nD);
    e->xf = alloc_buffer(nD);
    e->dxf = alloc_buffer(nD);
    e->rstd_f = alloc_buffer(e->n);
    e->inputs = calloc(M * e->n, sizeof(int32_t));
    e->targets = calloc(M * e->n, sizeof(int32_t));
    e->inv_freq = alloc_buffer(mt_head_dim(c) / 2);
    rope_inv_freq(e->inv_freq, mt_head_dim(c), (float)c->rope_theta);
    e->scratch = layer_scratch_new(c, c->micro_batch, c->seq_len, e->inv_freq);
}

static void engine_free(engine *e) {
    transfer_free(&e->xfer);
    dataset_close(&e->data);
    float *bufs[] = {e->emb.dst, e->emb_g.src, e->head.dst, e->head_g.src, e->ring[0].dst,
                     e->ring[1].dst, e->ring_g[0].src, e->ring_g[1].src, e->acts, e->dres,
                     e->tmp, e->xf, e->dxf, e->rstd_f, e->inv_freq};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    free(e->inputs);
    free(e->targets);
    layer_scratch_free(e->scratch);
}

static const float *classifier_weights(engine *e) {
    head_params hp;
    head_params_bind(&hp, e->c, e->head.dst);
    return e->c->tied_embeddings ? e->emb.dst : hp.lm_head;
}

// Forward through every layer for M micro-batches. Training keeps every boundary activation
// for the backward; evaluation only needs two, so it ping-pongs between them.
static void forward_layers(engine *e, int64_t version, int M, int keep) {
    const mt_config *c = e->c;
    fetch_async(&e->xfer, &e->emb, 0, version);
    fetch_async(&e->xfer, &e->ring[0], model_layer_group(0), version);
    fetch_wait(&e->emb);
    for (int m = 0; m < M; m++)
        embedding_forward(act(e, 0, m), e->inputs + (size_t)m * e->n, e->emb.dst, e->n, c->dim);
    for (int l = 0; l < c->layers; l++) {
        weight_buffer *w = &e->ring[l % 2];
        fetch_wait(w);
        if (l + 1 < c->layers)
            fetch_async(&e->xfer, &e->ring[(l + 1) % 2], model_layer_group(l + 1), version);
        else
            fetch_async(&e->xfer, &e->head, model_head_group(c), version);
        layer_params p;
        layer_params_bind(&p, c, w->dst);
        int in = keep ? l : l % 2, out = keep ? l + 1 : (l + 1) % 2;
        for (int m = 0; m < M; m++) layer_forward(c, &p, e->scratch, act(e, in, m), act(e, out, m));
    }
    fetch_wait(&e->head);
}

// The loss head over micro-batch m: final norm, then the fused classifier + cross-entropy.
// With dloss != 0 it also runs the head's backward into dres(m) and the head's gradients.
static double head_step(engine *e, int m, const float *x, float dloss) {
    const mt_config *c = e->c;
    head_params hp;
    head_params_bind(&hp, c, e->head.dst);
    const int32_t *targets = e->targets + (size_t)m * e->n;
    rmsnorm_forward(e->xf, e->rstd_f, x, hp.final_norm, e->n, c->dim, (float)c->norm_eps);
    double loss = classifier_forward(e->xf, classifier_weights(e), targets, e->n, c->dim, c->vocab);
    if (dloss == 0) return loss;
    head_params gp;
    head_params_bind(&gp, c, e->head_g.src);
    float *dw = c->tied_embeddings ? e->emb_g.src : gp.lm_head;
    memset(e->dxf, 0, sizeof(float) * e->n * c->dim);
    classifier_backward(e->dxf, dw, e->xf, classifier_weights(e), targets, e->n, c->dim, c->vocab,
                        dloss);
    memset(dres(e, m), 0, sizeof(float) * e->n * c->dim);
    rmsnorm_backward(dres(e, m), gp.final_norm, e->dxf, x, hp.final_norm, e->rstd_f, e->n, c->dim);
    return loss;
}

static void zero_grads(grad_buffer *g, uint64_t numel) {
    offload_reuse(g);
    memset(g->src, 0, numel * sizeof(float));
}

// Backward in reverse layer order: the weights come in again (the last two layers are still
// resident from the forward), each layer recomputes its internals from its boundary
// activation, and its gradients leave while the next layer computes.
static void backward_layers(engine *e, int64_t step) {
    const mt_config *c = e->c;
    uint64_t layer_numel = e->job->group_numel[model_layer_group(0)];
    for (int l = c->layers - 1; l >= 0; l--) {
        weight_buffer *w = &e->ring[l % 2];
        fetch_async(&e->xfer, w, model_layer_group(l), step);
        fetch_wait(w);
        if (l > 0) fetch_async(&e->xfer, &e->ring[(l - 1) % 2], model_layer_group(l - 1), step);
        grad_buffer *gb = &e->ring_g[l % 2];
        zero_grads(gb, layer_numel);
        layer_params p, dp;
        layer_params_bind(&p, c, w->dst);
        layer_params_bind(&dp, c, gb->src);
        for (int m = 0; m < c->micro_batches; m++) {
            layer_forward(c, &p, e->scratch, act(e, l, m), e->tmp);
            layer_backward(c, &p, &dp, e->scratch, act(e, l, m), dres(e, m), e->tmp);
            memcpy(dres(e, m), e->tmp, sizeof(float) * e->n * c->dim);
        }
        offload_async(&e->xfer, gb, model_layer_group(l), step);
        offload_announce(e->ring_g, 2, 0);
    }
}

static double train_step(engine *e, int64_t step) {
    const mt_config *c = e->c;
    int M = c->micro_batches;
    for (int m = 0; m < M; m++)
        dataset_batch(&e->data, SPLIT_TRAIN, c->seed, step, m, c->micro_batch, c->seq_len,
                      e->inputs + (size_t)m * e->n, e->targets + (size_t)m * e->n);
    forward_layers(e, step, M, 1);
    zero_grads(&e->head_g, e->job->group_numel[model_head_group(c)]);
    zero_grads(&e->emb_g, e->job->group_numel[0]);
    float dloss = 1.0f / ((float)M * e->n);
    double loss = 0;
    for (int m = 0; m < M; m++) loss += head_step(e, m, act(e, c->layers, m), dloss);
    offload_async(&e->xfer, &e->head_g, model_head_group(c), step);
    backward_layers(e, step);
    for (int m = 0; m < M; m++)
        embedding_backward(e->emb_g.src, dres(e, m), e->inputs + (size_t)m * e->n, e->n, c->dim);
    offload_async(&e->xfer, &e->emb_g, 0, step);
    grad_buffer *all[] = {&e->head_g, &e->ring_g[0], &e->ring_g[1], &e->emb_g};
    for (int i = 0; i < 4; i++) offload_reuse(all[i]);
    return loss / ((double)M * e->n);
}

// Mean loss on eval_batches validation micro-batches, with the weights at `version`.
static double eval_loss(engine *e, int64_t version) {
    const mt_config *c = e->c;
    int M = c->eval_batches < c->micro_batches ? c->eval_batches : c->micro_batches;
    double total = 0;
    int done = 0;
    for (int chunk = 0; done < c->eval_batches; chunk++) {
        int Mc = c->eval_batches - done < M ? c->eval_batches - done : M;
        for (int m = 0; m < Mc; m++)
            dataset_batch(&e->data, SPLIT_VAL, c->seed, chunk, m, c->micro_batch, c->seq_len,
                          e->inputs + (size_t)m * e->n, e->targets + (size_t)m * e->n);
        forward_layers(e, version, Mc, 0);
        for (int m = 0; m < Mc; m++) total += head_step(e, m, act(e, c->layers % 2, m), 0);
        done += Mc;
    }
    return total / ((double)c->eval_batches * e->n);
}

// Logits of the last position of a single sequence, for sampling.
static void last_logits(engine *e, int64_t version, const int32_t *ctx, int len, float *logits) {
    const mt_config *c = e->c;
    e->scratch->B = 1, e->scratch->T = len;
    fetch_async(&e->xfer, &e->emb, 0, version);
    fetch_wait(&e->emb);
    embedding_forward(act(e, 0, 0), ctx, e->emb.dst, len, c->dim);
    for (int l = 0; l < c->layers; l++) {
        weight_buffer *w = &e->ring[l % 2];
        fetch_async(&e->xfer, w, model_layer_group(l), version);
        fetch_wait(w);
        layer_params p;
        layer_params_bind(&p, c, w->dst);
        layer_forward(c, &p, e->scratch, act(e, l % 2, 0), act(e, (l + 1) % 2, 0));
    }
    fetch_async(&e->xfer, &e->head, model_head_group(c), version);
    fetch_wait(&e->head);
    head_params hp;
    head_params_bind(&hp, c, e->head.dst);
    const float *last = act(e, c->layers % 2, 0) + (size_t)(len - 1) * c->dim;
    rmsnorm_forward(e->xf, e->rstd_f, last, hp.final_norm, 1, c->dim, (float)c->norm_eps);
    linear_forward(logits, e->xf, classifier_weights(e), NULL, 1, c->dim, c->vocab);
    e->scratch->B = c->micro_batch, e->scratch->T = c->seq_len;
}

static int sample_token(const float *logits, int vocab, float temperature, uint64_t key) {
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

// Byte-level text from the trained weights: each token reruns the (short) context.
static void sample_text(engine *e, metrics *mx, int64_t version) {
    const mt_config *c = e->c;
    int n = c->sample_tokens, len = 1;
    int32_t *ctx = calloc(n + 1, sizeof(int32_t));
    float *logits = alloc_buffer(c->vocab);
    char *text = calloc(n + 1, 1);
    ctx[0] = '\n';
    for (int i = 0; i < n; i++) {
        int start = len > c->seq_len ? len - c->seq_len : 0;
        last_logits(e, version, ctx + start, len - start, logits);
        int tok = sample_token(logits, c->vocab, 0.8f, c->seed ^ splitmix64((uint64_t)i));
        ctx[len++] = tok;
        text[i] = (tok >= 32 && tok < 127) || tok == '\n' ? (char)tok : '?';
    }
    metrics_sample(mx, text);
    free(ctx);
    free(logits);
    free(text);
}

void engine_run(mt_job *job) {
    engine e;
    engine_init(&e, job);
    const mt_config *c = &job->cfg;
    metrics mx;
    metrics_open(&mx, job);
    for (int64_t step = job->start_step; step < job->end_step; step++) {
        if (c->eval_interval > 0 && step > job->start_step && step % c->eval_interval == 0)
            metrics_eval(&mx, step, eval_loss(&e, step));
        metrics_step_begin(&mx, &e.xfer);
        double loss = train_step(&e, step);
        metrics_step_end(&mx, step, loss, &e.xfer);
    }
    if (c->eval_interval > 0) metrics_eval(&mx, job->end_step, eval_loss(&e, job->end_step));
    if (c->sample_tokens > 0) sample_text(&e, &mx, job->end_step);
    metrics_close(&mx);
    engine_free(&e);
}
