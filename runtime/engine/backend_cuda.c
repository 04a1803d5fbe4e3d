// The CUDA backend: one decoder layer as a stateless template of bf16 tensor-core GEMMs and
// fused kernels, weight pointers bound per call to whichever streaming buffer holds the layer.
// Everything runs on one compute stream; the only allocations are made here, at start.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cuda/kernels_cuda.h"
#include "runtime/engine/backend.h"
#include "runtime/model/model.h"
#include "shm/syscheck.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct { // one layer's weights inside a fetched bf16 buffer (biases: NULL if none)
    const bf16 *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w_gate, *w_up, *w_down, *bq, *bk, *bv;
} layer_w;

typedef struct { // the same layer's fp32 gradients
    float *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w_gate, *w_up, *w_down, *bq, *bk, *bv;
} layer_g;

// What a layer's backward needs from its forward beyond x and cannot cheaply redo: the
// normalized inputs (n1, n2) and the SwiGLU product are recomputed from x, h, gate and up.
typedef struct {
    bf16 *q, *k, *v, *att, *gate, *up;
    float *lse, *h;
} layer_saved;

struct backend {
    const mt_config *c;
    int B, T, max_tokens, chunk, loss_micro;
    uint64_t offsets[MODEL_MAX_TENSORS];
    cudaStream_t s;
    cuda_gemm *gemm;
    float *inv_freq;
    int32_t *inputs, *targets;
    // the layer's working set
    layer_saved work;
    layer_saved *kept; // kept activations, in one allocation
    void *kept_arena, *work_arena;
    int n_kept;
    bf16 *n1, *n2, *act;
    bf16 *dout_b, *d_gate, *d_up, *dh_b, *d_att, *dq, *dk, *dv;
    float *rstd1, *rstd2, *d_act, *d_n2, *d_h, *d_n1, *norm_scratch;
    void *attn_scratch;
    float *bias_scratch;
    // activation offload: its own copy streams, and per slot the event of its last copy
    cudaStream_t to_host_s, from_host_s;
    cudaEvent_t slot_done[2], queued;
    // the head
    bf16 *xf;
    float *rstd_f, *dxf, *losses, *losses_host, *logits;
    void *cls_scratch;
};

static void *cu_alloc(backend *b, size_t bytes) {
    void *p = NULL;
    cudaError_t rc = cudaMalloc(&p, bytes ? bytes : 1);
    if (rc != cudaSuccess)
        mt_die("GPU out of memory allocating %zu MiB (%s): fewer micro-batches or a shorter "
               "sequence would fit",
               bytes >> 20, cudaGetErrorString(rc));
    return p;
}
static void cu_release(backend *b, void *p) {
    CUDA_CHECK(cudaFree(p));
}
static void cu_zero(backend *b, void *p, size_t bytes) {
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, b->s));
}
static void cu_copy(backend *b, void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, b->s));
}

static void cu_upload(backend *b, void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, b->s));
    CUDA_CHECK(cudaStreamSynchronize(b->s));
}
static void cu_download(backend *b, void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, b->s));
    CUDA_CHECK(cudaStreamSynchronize(b->s));
}

static int tokens(const backend *b) {
    return b->B * b->T;
}

static void cu_load_tokens(backend *b, const int32_t *inputs, const int32_t *targets, int count) {
    size_t bytes = sizeof(int32_t) * count * tokens(b);
    CUDA_CHECK(cudaMemcpyAsync(b->inputs, inputs, bytes, cudaMemcpyHostToDevice, b->s));
    CUDA_CHECK(cudaMemcpyAsync(b->targets, targets, bytes, cudaMemcpyHostToDevice, b->s));
    // The host buffers are reused for the next batch: the copies must have read them.
    CUDA_CHECK(cudaStreamSynchronize(b->s));
}

static void cu_embed_forward(backend *b, float *out, const void *table, int m) {
    cuda_embedding_forward(out, b->inputs + (size_t)m * tokens(b), table, tokens(b), b->c->dim,
                           b->s);
}

static void cu_embed_backward(backend *b, float *dtable, const float *dout, int m) {
    cuda_embedding_backward(dtable, dout, b->inputs + (size_t)m * tokens(b), tokens(b), b->c->dim,
                            b->s);
}

static layer_w bind_w(const backend *b, const void *w) {
    const bf16 *base = w;
    const uint64_t *o = b->offsets;
    int bias = b->c->qkv_bias;
    return (layer_w){base + o[0],
                     base + o[1],
                     base + o[2],
                     base + o[3],
                     base + o[4],
                     base + o[5],
                     base + o[6],
                     base + o[7],
                     base + o[8],
                     bias ? base + o[9] : NULL,
                     bias ? base + o[10] : NULL,
                     bias ? base + o[11] : NULL};
}

static layer_g bind_g(const backend *b, float *g) {
    const uint64_t *o = b->offsets;
    int bias = b->c->qkv_bias;
    return (layer_g){g + o[0],
                     g + o[1],
                     g + o[2],
                     g + o[3],
                     g + o[4],
                     g + o[5],
                     g + o[6],
                     g + o[7],
                     g + o[8],
                     bias ? g + o[9] : NULL,
                     bias ? g + o[10] : NULL,
                     bias ? g + o[11] : NULL};
}

// out = in . w^T (+ bias): the q, k and v projections.
static void projection(backend *b, bf16 *out, const bf16 *in, const bf16 *w, const bf16 *bias,
                       int ic, int oc) {
    cuda_linear_forward(b->gemm, out, 0, 0, in, w, tokens(b), ic, oc, b->s);
    if (bias) cuda_bias_forward(out, bias, tokens(b), oc, b->s);
}

static layer_saved *internals(backend *b, int keep) {
    return keep >= 0 ? &b->kept[keep] : &b->work;
}

static void cu_layer_forward(backend *b, const void *wbuf, const float *x, float *out, int keep) {
    const mt_config *c = b->c;
    layer_w w = bind_w(b, wbuf);
    layer_saved *a = internals(b, keep);
    int n = tokens(b), D = c->dim, hd = mt_head_dim(c), F = c->ffn_dim;
    int Q = c->heads * hd, KV = c->kv_heads * hd;
    cudaStream_t s = b->s;
    cuda_rmsnorm_forward(b->n1, b->rstd1, x, w.attn_norm, n, D, (float)c->norm_eps, s);
    projection(b, a->q, b->n1, w.wq, w.bq, D, Q);
    projection(b, a->k, b->n1, w.wk, w.bk, D, KV);
    projection(b, a->v, b->n1, w.wv, w.bv, D, KV);
    cuda_rope_forward(a->q, b->inv_freq, b->B, b->T, c->heads, hd, s);
    cuda_rope_forward(a->k, b->inv_freq, b->B, b->T, c->kv_heads, hd, s);
    cuda_attention_forward(a->att, a->lse, a->q, a->k, a->v, b->B, b->T, c->heads, c->kv_heads, hd,
                           s);
    // The residual adds ride on the GEMMs' beta: h = x + att . wo^T, out = h + act . down^T.
    cu_copy(b, a->h, x, sizeof(float) * n * D);
    cuda_linear_forward(b->gemm, a->h, 1, 1.0f, a->att, w.wo, n, Q, D, s);
    cuda_rmsnorm_forward(b->n2, b->rstd2, a->h, w.ffn_norm, n, D, (float)c->norm_eps, s);
    cuda_linear_forward(b->gemm, a->gate, 0, 0, b->n2, w.w_gate, n, D, F, s);
    cuda_linear_forward(b->gemm, a->up, 0, 0, b->n2, w.w_up, n, D, F, s);
    cuda_swiglu_forward(b->act, a->gate, a->up, (long)n * F, s);
    cu_copy(b, out, a->h, sizeof(float) * n * D);
    cuda_linear_forward(b->gemm, out, 1, 1.0f, b->act, w.w_down, n, F, D, s);
}

// The internals the backward reads: all of them recomputed from x, or the cheap ones redone
// from a kept slot (the same kernels on the same inputs: the same bits).
static layer_saved *forward_internals(backend *b, const void *wbuf, const float *x, float *scratch,
                                      int keep) {
    const mt_config *c = b->c;
    if (keep < 0) {
        cu_layer_forward(b, wbuf, x, scratch, -1);
        return &b->work;
    }
    layer_w w = bind_w(b, wbuf);
    layer_saved *a = &b->kept[keep];
    int n = tokens(b), D = c->dim;
    cuda_rmsnorm_forward(b->n1, b->rstd1, x, w.attn_norm, n, D, (float)c->norm_eps, b->s);
    cuda_rmsnorm_forward(b->n2, b->rstd2, a->h, w.ffn_norm, n, D, (float)c->norm_eps, b->s);
    cuda_swiglu_forward(b->act, a->gate, a->up, (long)n * c->ffn_dim, b->s);
    return a;
}

// dx = dout + d(attention block) + d(MLP block); weight gradients accumulate in fp32.
static void cu_layer_backward(backend *b, const void *wbuf, float *dwbuf, const float *x,
                              const float *dout, float *dx, int keep) {
    const mt_config *c = b->c;
    layer_w w = bind_w(b, wbuf);
    layer_g g = bind_g(b, dwbuf);
    layer_saved *a = forward_internals(b, wbuf, x, dx, keep); // dx is scratch until the end
    int n = tokens(b), D = c->dim, hd = mt_head_dim(c), F = c->ffn_dim;
    int Q = c->heads * hd, KV = c->kv_heads * hd;
    cudaStream_t s = b->s;
    cuda_gemm *gm = b->gemm;
    // MLP block
    cuda_float_to_bf16(b->dout_b, dout, (long)n * D, s);
    cuda_linear_backward_input(gm, b->d_act, 1, 0, b->dout_b, w.w_down, n, F, D, s);
    cuda_linear_backward_weight(gm, g.w_down, b->dout_b, b->act, n, F, D, s);
    cuda_swiglu_backward(b->d_gate, b->d_up, b->d_act, a->gate, a->up, (long)n * F, s);
    cuda_linear_backward_input(gm, b->d_n2, 1, 0, b->d_gate, w.w_gate, n, D, F, s);
    cuda_linear_backward_input(gm, b->d_n2, 1, 1.0f, b->d_up, w.w_up, n, D, F, s);
    cuda_linear_backward_weight(gm, g.w_gate, b->d_gate, b->n2, n, D, F, s);
    cuda_linear_backward_weight(gm, g.w_up, b->d_up, b->n2, n, D, F, s);
    cu_copy(b, b->d_h, dout, sizeof(float) * n * D);
    cuda_rmsnorm_backward(b->d_h, g.ffn_norm, b->d_n2, a->h, w.ffn_norm, b->rstd2, n, D,
                          b->norm_scratch, s);
    // attention block
    cuda_float_to_bf16(b->dh_b, b->d_h, (long)n * D, s);
    cuda_linear_backward_input(gm, b->d_att, 0, 0, b->dh_b, w.wo, n, Q, D, s);
    cuda_linear_backward_weight(gm, g.wo, b->dh_b, a->att, n, Q, D, s);
    cuda_attention_backward(b->dq, b->dk, b->dv, b->d_att, a->att, a->lse, a->q, a->k, a->v, b->B,
                            b->T, c->heads, c->kv_heads, hd, b->attn_scratch, s);
    cuda_rope_backward(b->dq, b->inv_freq, b->B, b->T, c->heads, hd, s);
    cuda_rope_backward(b->dk, b->inv_freq, b->B, b->T, c->kv_heads, hd, s);
    if (g.bq) {
        cuda_bias_backward(g.bq, b->dq, n, Q, b->bias_scratch, s);
        cuda_bias_backward(g.bk, b->dk, n, KV, b->bias_scratch, s);
        cuda_bias_backward(g.bv, b->dv, n, KV, b->bias_scratch, s);
    }
    cuda_linear_backward_input(gm, b->d_n1, 1, 0, b->dq, w.wq, n, D, Q, s);
    cuda_linear_backward_input(gm, b->d_n1, 1, 1.0f, b->dk, w.wk, n, D, KV, s);
    cuda_linear_backward_input(gm, b->d_n1, 1, 1.0f, b->dv, w.wv, n, D, KV, s);
    cuda_linear_backward_weight(gm, g.wq, b->dq, b->n1, n, D, Q, s);
    cuda_linear_backward_weight(gm, g.wk, b->dk, b->n1, n, D, KV, s);
    cuda_linear_backward_weight(gm, g.wv, b->dv, b->n1, n, D, KV, s);
    cu_copy(b, dx, b->d_h, sizeof(float) * n * D);
    cuda_rmsnorm_backward(dx, g.attn_norm, b->d_n1, x, w.attn_norm, b->rstd1, n, D, b->norm_scratch,
                          s);
}

static void cu_head(backend *b, const void *head_w, const void *cls_w, float *head_g, float *cls_g,
                    const float *x, float *dx, int m, float dloss) {
    const mt_config *c = b->c;
    int n = tokens(b), D = c->dim;
    const bf16 *final_norm = head_w;
    cuda_rmsnorm_forward(b->xf, b->rstd_f, x, final_norm, n, D, (float)c->norm_eps, b->s);
    float *losses = b->losses + (size_t)m * n;
    if (m + 1 > b->loss_micro) b->loss_micro = m + 1;
    if (dloss == 0) {
        cuda_classifier(b->gemm, losses, NULL, NULL, b->xf, cls_w, b->targets + (size_t)m * n, n, D,
                        c->vocab, 0, b->cls_scratch, b->chunk, b->s);
        return;
    }
    cu_zero(b, b->dxf, sizeof(float) * n * D);
    cuda_classifier(b->gemm, losses, b->dxf, cls_g, b->xf, cls_w, b->targets + (size_t)m * n, n, D,
                    c->vocab, dloss, b->cls_scratch, b->chunk, b->s);
    cu_zero(b, dx, sizeof(float) * n * D);
    cuda_rmsnorm_backward(dx, head_g, b->dxf, x, final_norm, b->rstd_f, n, D, b->norm_scratch,
                          b->s);
}

// Summed on the host in token order: deterministic, and one small copy per step.
static double cu_take_loss(backend *b) {
    size_t count = (size_t)b->loss_micro * tokens(b);
    CUDA_CHECK(cudaMemcpyAsync(b->losses_host, b->losses, count * sizeof(float),
                               cudaMemcpyDeviceToHost, b->s));
    CUDA_CHECK(cudaStreamSynchronize(b->s));
    double total = 0;
    for (size_t i = 0; i < count; i++) total += b->losses_host[i];
    b->loss_micro = 0;
    return total;
}

static void cu_set_shape(backend *b, int B, int T) {
    b->B = B, b->T = T;
}

static void cu_last_logits(backend *b, const void *head_w, const void *cls_w, const float *x,
                           int len, float *host_logits) {
    const mt_config *c = b->c;
    const float *last = x + (size_t)(len - 1) * c->dim;
    cuda_rmsnorm_forward(b->xf, b->rstd_f, last, head_w, 1, c->dim, (float)c->norm_eps, b->s);
    cuda_linear_forward(b->gemm, b->logits, 1, 0, b->xf, cls_w, 1, c->dim, c->vocab, b->s);
    CUDA_CHECK(cudaMemcpyAsync(host_logits, b->logits, sizeof(float) * c->vocab,
                               cudaMemcpyDeviceToHost, b->s));
    CUDA_CHECK(cudaStreamSynchronize(b->s));
}

static void *dev(backend *b, size_t elems, size_t elem_bytes) {
    return cu_alloc(b, elems * elem_bytes);
}

// Lays out one layer_saved from base (NULL: only measures); returns its bytes.
static size_t carve_saved(const backend *b, char *base, layer_saved *a) {
    const mt_config *c = b->c;
    size_t n = b->max_tokens, D = c->dim, hd = mt_head_dim(c), F = c->ffn_dim;
    size_t Q = c->heads * hd, KV = c->kv_heads * hd;
    struct {
        void **p;
        size_t bytes;
    } parts[] = {{(void **)&a->q, n * Q * 2},          {(void **)&a->k, n * KV * 2},
                 {(void **)&a->v, n * KV * 2},         {(void **)&a->att, n * Q * 2},
                 {(void **)&a->gate, n * F * 2},       {(void **)&a->up, n * F * 2},
                 {(void **)&a->lse, n * c->heads * 4}, {(void **)&a->h, n * D * 4}};
    size_t used = 0;
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
        *parts[i].p = base ? base + used : NULL;
        used += (parts[i].bytes + 255) & ~(size_t)255; // keep every tensor 256-byte aligned
    }
    return used;
}

// Kept slots fill the free device memory but for a margin, in one allocation: 1 GiB for the
// allocations the CUDA runtime and libraries may still make (MT_GPU_MARGIN_GIB sets another).
static int cu_keep_reserve(backend *b, int wanted) {
    layer_saved measured;
    size_t bytes = carve_saved(b, NULL, &measured), free_bytes, total;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    const char *env = getenv("MT_GPU_MARGIN_GIB");
    double gib = env && atof(env) > 0 ? atof(env) : 1.0;
    size_t margin = (size_t)(gib * 1073741824.0);
    long fit = free_bytes > margin ? (long)((free_bytes - margin) / bytes) : 0;
    int n = wanted < fit ? wanted : (int)fit;
    while (n > 0 && cudaMalloc(&b->kept_arena, bytes * n) != cudaSuccess) {
        cudaGetLastError(); // not sticky: try a little less
        n = n * 9 / 10;
    }
    b->kept = calloc(n + 1, sizeof *b->kept);
    if (!b->kept) mt_die("out of memory");
    for (int i = 0; i < n; i++) carve_saved(b, (char *)b->kept_arena + bytes * i, &b->kept[i]);
    return b->n_kept = n;
}

static void alloc_layer_set(backend *b) {
    const mt_config *c = b->c;
    size_t n = b->max_tokens, D = c->dim, hd = mt_head_dim(c), F = c->ffn_dim;
    size_t Q = c->heads * hd, KV = c->kv_heads * hd;
    b->work_arena = dev(b, carve_saved(b, NULL, &b->work), 1);
    carve_saved(b, b->work_arena, &b->work);
    bf16 **nd[] = {&b->n1, &b->n2, &b->dout_b, &b->dh_b};
    for (size_t i = 0; i < sizeof nd / sizeof *nd; i++) *nd[i] = dev(b, n * D, 2);
    bf16 **nq[] = {&b->d_att, &b->dq};
    for (size_t i = 0; i < sizeof nq / sizeof *nq; i++) *nq[i] = dev(b, n * Q, 2);
    bf16 **nkv[] = {&b->dk, &b->dv};
    for (size_t i = 0; i < sizeof nkv / sizeof *nkv; i++) *nkv[i] = dev(b, n * KV, 2);
    bf16 **nf[] = {&b->act, &b->d_gate, &b->d_up};
    for (size_t i = 0; i < sizeof nf / sizeof *nf; i++) *nf[i] = dev(b, n * F, 2);
    float **fd[] = {&b->d_n2, &b->d_h, &b->d_n1, &b->dxf};
    for (size_t i = 0; i < sizeof fd / sizeof *fd; i++) *fd[i] = dev(b, n * D, 4);
    b->d_act = dev(b, n * F, 4);
    b->rstd1 = dev(b, n, 4), b->rstd2 = dev(b, n, 4), b->rstd_f = dev(b, n, 4);
    b->norm_scratch = dev(b, cuda_rmsnorm_scratch_floats((int)n, c->dim), 4);
    b->bias_scratch = dev(b, cuda_bias_scratch_floats(Q > KV ? (int)Q : (int)KV), 4);
    b->attn_scratch = dev(
        b, cuda_attention_scratch_bytes(c->micro_batch, c->seq_len, c->heads, c->kv_heads, (int)hd),
        1);
}

static void alloc_head_set(backend *b) {
    const mt_config *c = b->c;
    size_t n = b->max_tokens, M = c->micro_batches;
    // Chunks of the classifier keep its logits near 256 MiB whatever the vocabulary.
    long chunk = (256l << 20) / ((long)c->vocab * 6);
    b->chunk = chunk < 1 ? 1 : chunk > (long)n ? (int)n : (int)chunk;
    b->xf = dev(b, n * c->dim, 2);
    b->losses = dev(b, n * M, 4);
    CUDA_CHECK(cudaMallocHost((void **)&b->losses_host, sizeof(float) * n * M));
    b->logits = dev(b, c->vocab, 4);
    b->cls_scratch = dev(b, cuda_classifier_scratch_bytes(b->chunk, c->dim, c->vocab), 1);
    b->inputs = dev(b, n * M, 4);
    b->targets = dev(b, n * M, 4);
}

static size_t cu_device_free(backend *b) {
    size_t free_bytes, total;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    return free_bytes;
}

static void *cu_host_alloc(backend *b, size_t bytes) {
    void *p = NULL;
    cudaError_t rc = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault);
    if (rc != cudaSuccess)
        mt_die("out of pinned host memory allocating %zu MiB for offloaded activations (%s)",
               bytes >> 20, cudaGetErrorString(rc));
    return p;
}
static void cu_host_release(backend *b, void *p) {
    CUDA_CHECK(cudaFreeHost(p));
}

// The copy stream s waits for the compute queued so far.
static void after_compute(backend *b, cudaStream_t s) {
    CUDA_CHECK(cudaEventRecord(b->queued, b->s));
    CUDA_CHECK(cudaStreamWaitEvent(s, b->queued, 0));
}
static void cu_to_host(backend *b, void *dst, const void *src, size_t bytes, int slot) {
    after_compute(b, b->to_host_s);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, b->to_host_s));
    CUDA_CHECK(cudaEventRecord(b->slot_done[slot], b->to_host_s));
}
static void cu_from_host(backend *b, void *dst, const void *src, size_t bytes, int slot) {
    after_compute(b, b->from_host_s);
    CUDA_CHECK(cudaStreamWaitEvent(b->from_host_s, b->slot_done[slot], 0));
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, b->from_host_s));
    CUDA_CHECK(cudaEventRecord(b->slot_done[slot], b->from_host_s));
}
static void cu_slot_wait(backend *b, int slot) {
    CUDA_CHECK(cudaStreamWaitEvent(b->s, b->slot_done[slot], 0));
}

static void offload_streams_new(backend *b) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&b->to_host_s, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&b->from_host_s, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&b->queued, cudaEventDisableTiming));
    for (int i = 0; i < 2; i++)
        CUDA_CHECK(cudaEventCreateWithFlags(&b->slot_done[i], cudaEventDisableTiming));
}

static void offload_streams_free(backend *b) {
    CUDA_CHECK(cudaStreamSynchronize(b->to_host_s));
    CUDA_CHECK(cudaStreamSynchronize(b->from_host_s));
    CUDA_CHECK(cudaStreamDestroy(b->to_host_s));
    CUDA_CHECK(cudaStreamDestroy(b->from_host_s));
    CUDA_CHECK(cudaEventDestroy(b->queued));
    for (int i = 0; i < 2; i++) CUDA_CHECK(cudaEventDestroy(b->slot_done[i]));
}

static void cu_destroy(backend *b) {
    CUDA_CHECK(cudaStreamSynchronize(b->s));
    void *all[] = {b->work_arena,   b->kept_arena,  b->n1,     b->n2,      b->act,
                   b->dout_b,       b->d_gate,      b->d_up,   b->dh_b,    b->d_att,
                   b->dq,           b->dk,          b->dv,     b->rstd1,   b->rstd2,
                   b->d_act,        b->d_n2,        b->d_h,    b->d_n1,    b->norm_scratch,
                   b->attn_scratch, b->xf,          b->rstd_f, b->dxf,     b->losses,
                   b->logits,       b->cls_scratch, b->inputs, b->targets, b->inv_freq,
                   b->bias_scratch};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) CUDA_CHECK(cudaFree(all[i]));
    CUDA_CHECK(cudaFreeHost(b->losses_host));
    free(b->kept);
    cuda_gemm_free(b->gemm);
    offload_streams_free(b);
    CUDA_CHECK(cudaStreamDestroy(b->s));
    free(b);
}

// Every buffer is allocated at start and none inside a step, so what the device has in use
// now (context and cuBLAS workspace included) is the run's peak.
static size_t cu_device_bytes(backend *b) {
    size_t free_bytes, total;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    return total - free_bytes;
}

static void cu_adamw(backend *b, float *p, float *m, float *v, void *w, const float *g, size_t n,
                     const adamw_params *hp) {
    adamw_consts k;
    adamw_consts_init(&k, hp);
    cuda_adamw(p, m, v, (bf16 *)w, g, (long)n, &k, b->s);
}

static void cu_weights_of(backend *b, void *w, const float *p, size_t n) {
    cuda_float_to_bf16((bf16 *)w, p, (long)n, b->s);
}

void *backend_cuda_compute_stream(backend *b) {
    return b->s;
}

// The same float frequencies as the CPU reference (and transformers), computed once on the host.
static void upload_inv_freq(backend *b) {
    int half = mt_head_dim(b->c) / 2;
    float *host = malloc(sizeof(float) * half);
    if (!host) mt_die("out of memory");
    model_rope_inv_freq(b->c, host);
    b->inv_freq = dev(b, half, 4);
    CUDA_CHECK(cudaMemcpy(b->inv_freq, host, sizeof(float) * half, cudaMemcpyHostToDevice));
    free(host);
}

backend *backend_cuda_new(const mt_config *c) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        cudaGetLastError(); // clear the sticky "no device" error
        return NULL;
    }
    CUDA_CHECK(cudaSetDevice(0));
    backend *b = calloc(1, sizeof *b);
    if (!b) mt_die("out of memory");
    b->c = c;
    b->B = c->micro_batch, b->T = c->seq_len, b->max_tokens = b->B * b->T;
    tensor_info t[MODEL_MAX_TENSORS];
    uint64_t numel;
    int nt = model_group_tensors(c, model_layer_group(0), t, &numel);
    for (int i = 0; i < nt; i++) b->offsets[i] = t[i].offset;
    CUDA_CHECK(cudaStreamCreateWithFlags(&b->s, cudaStreamNonBlocking));
    offload_streams_new(b);
    b->gemm = cuda_gemm_new(32u << 20);
    upload_inv_freq(b);
    alloc_layer_set(b);
    alloc_head_set(b);
    return b;
}

const backend_ops *backend_cuda_ops(void) {
    static const backend_ops ops = {
        "cuda",
        2,
        1,
        cu_alloc,
        cu_release,
        cu_zero,
        cu_copy,
        cu_upload,
        cu_download,
        cu_load_tokens,
        cu_embed_forward,
        cu_embed_backward,
        cu_keep_reserve,
        cu_layer_forward,
        cu_layer_backward,
        cu_head,
        cu_take_loss,
        cu_set_shape,
        cu_last_logits,
        cu_destroy,
        cu_device_bytes,
        cu_device_free,
        cu_host_alloc,
        cu_host_release,
        cu_to_host,
        cu_from_host,
        cu_slot_wait,
        cu_adamw,
        cu_weights_of,
    };
    return &ops;
}
