// A decoder layer and the head on the GPU: stateless templates of bf16 tensor-core GEMMs and
// fused kernels, their weight pointers bound per call to whichever streaming buffer holds the
// layer. The layer is a skeleton, norm -> attention part -> residual -> norm -> MLP part ->
// residual, whose parts come from the rows of the layer's kinds (layer_parts_cuda.h). Its
// token-wise work runs a chunk of the micro-batch at a time (batch.seq_chunk).
#include "runtime/engine/layer_cuda.h"
#include "runtime/engine/layer_parts_cuda.h"
#include "shm/syscheck.h"

// Layer l's tensors by role in a fetched buffer (weights) or its gradients: each pointer is the
// base plus the role's offset in the layer's layout, NULL where it has none.
static layer_w bind_w(const backend *b, int l, const void *w) {
    const bf16 *base = w;
    const mt_layer_kind *kind = mt_layer_kind_of(&b->c->model, l);
    const uint64_t *off = b->offsets[kind->attention][kind->mlp];
    layer_w weights, *r = &weights;
    MT_LAYER_ROLES(MT_ROLE_BIND)
    return weights;
}

static layer_g bind_g(const backend *b, int l, float *base) {
    const mt_layer_kind *kind = mt_layer_kind_of(&b->c->model, l);
    const uint64_t *off = b->offsets[kind->attention][kind->mlp];
    layer_g grads, *r = &grads;
    MT_LAYER_ROLES(MT_ROLE_BIND)
    return grads;
}

// A kept pass's own internals; else the working set, whose attention output and statistics
// are an attention slot's when the pass has one (`with` then holds the mix).
static layer_saved *internals(backend *b, int keep, att_ref att, layer_saved *with) {
    if (keep >= 0) return &b->kept[keep];
    if (att.slot < 0) return &b->work;
    *with = b->work;
    with->att = b->att[att.slot], with->lse = b->lse[att.slot];
    return with;
}

static const cu_attn_part *const attn_parts[ATTN_KINDS] = {
    [ATTN_SOFTMAX] = &attn_softmax_cuda, [ATTN_GDN] = &attn_gdn_cuda, [ATTN_MLA] = &attn_mla_cuda};
static const cu_mlp_part *const mlp_parts[MLP_KINDS] = {
    [MLP_DENSE] = &mlp_dense_cuda, [MLP_MOE] = &mlp_moe_cuda};

static const cu_attn_part *attn_of(const cu_layer_call *k) {
    return attn_parts[mt_layer_kind_of(&k->b->c->model, k->l)->attention];
}

// One chunk's h = x + o(att) (o the attention part's output projection, with o_proj's bias:
// model.o_bias) into h (the residual add rides on the GEMM's beta), and the second norm of it
// into b->n2.
static void residual_and_norm(const cu_layer_call *k, float *h, int t0, int rows) {
    backend *b = k->b;
    int D = b->c->model.dim;
    const cu_attn_out o = attn_of(k)->out(k, t0, rows);
    cu_copy(b, h, k->x + (size_t)t0 * D, sizeof(float) * rows * D);
    cuda_linear_forward(b->gemm, h, 1, 1.0f, o.in, o.w, rows, o.width, D, b->s);
    if (o.bias) cuda_bias_forward_f32(h, o.bias, rows, D, b->s);
    cu_norm_forward(b, b->n2, b->rstd2, h, k->w->ffn_norm, rows, D);
}

// With its attention output at hand the attention part does only what its output projection
// needs (softmax attention without the output gate: nothing).
void cu_layer_forward(backend *b, int l, int m, const void *wbuf, const float *x, float *out,
                      int keep, att_ref att) {
    const mt_layer_kind *kind = mt_layer_kind_of(&b->c->model, l);
    layer_w w = bind_w(b, l, wbuf);
    layer_saved with;
    cu_layer_call k = {b, l, m, keep, att, &w, NULL, x, internals(b, keep, att, &with)};
    attn_parts[kind->attention]->forward(&k, !att_ready(keep, att));
    FOR_CHUNKS(b, t0, rows) { // a kept slot is whole: then the only chunk is the micro-batch
        residual_and_norm(&k, k.a->h, t0, rows);
        mlp_parts[kind->mlp]->forward(&k, out, t0, rows);
    }
}

// Below the MLP of one chunk, d_n2 at hand: the second norm's backward and the residual path
// into dh (dx's chunk), and the output projection's into its input's gradient (its bias's from
// fp32 dh).
static void mlp_tail_backward(const cu_layer_call *k, const float *dout, float *dx, int t0,
                              int rows) {
    backend *b = k->b;
    int D = b->c->model.dim;
    cudaStream_t s = b->s;
    cuda_gemm *gm = b->gemm;
    const float *dy = dout + (size_t)t0 * D;
    float *dh = dx + (size_t)t0 * D;
    if (dh != dy) cu_copy(b, dh, dy, sizeof(float) * rows * D); // the engine passes dx = dout
    cu_norm_backward(b, dh, k->g->ffn_norm, b->d_n2, k->a->h, k->w->ffn_norm, b->rstd2, rows, D,
                     b->norm_scratch);
    cuda_float_to_bf16(b->dh_b, dh, (long)rows * D, s);
    const cu_attn_out o = attn_of(k)->out(k, t0, rows);
    size_t at = (size_t)t0 * o.width * (o.d_f32 ? sizeof(float) : sizeof(bf16));
    cuda_linear_backward_input(gm, (char *)o.d_in + at, o.d_f32, 0, b->dh_b, o.w, rows, o.width, D,
                               s);
    cuda_linear_backward_weight(gm, o.dw, b->dh_b, o.in, rows, o.width, D, s);
    if (o.dbias) cuda_bias_backward_f32(o.dbias, dh, rows, D, b->bias_scratch, s);
}

// One chunk of the MLP block's backward: n2 again (from the kept h, or h itself recomputed),
// the MLP part's backward into d_n2, then what lies below the MLP.
static void block_backward(const cu_layer_call *k, const cu_mlp_part *mlp, const float *dout,
                           float *dx, int t0, int rows) {
    backend *b = k->b;
    if (k->keep >= 0)
        cu_norm_forward(b, b->n2, b->rstd2, k->a->h, k->w->ffn_norm, rows, b->c->model.dim);
    else
        residual_and_norm(k, k->a->h, t0, rows);
    mlp->backward(k, dout, t0, rows);
    mlp_tail_backward(k, dout, dx, t0, rows);
}

// dx = dout + d(attention block) + d(MLP block); weight gradients accumulate in fp32. The
// internals come from slot `keep`, or are recomputed from x: attention's for the whole
// micro-batch, the rest chunk by chunk as the backward reaches it (the same kernels on the
// same inputs: the same bits as the forward's).
void cu_layer_backward(backend *b, int l, int m, const void *wbuf, float *dwbuf, const float *x,
                       const float *dout, float *dx, int keep, att_ref att) {
    const mt_layer_kind *kind = mt_layer_kind_of(&b->c->model, l);
    layer_w w = bind_w(b, l, wbuf);
    layer_g g = bind_g(b, l, dwbuf);
    layer_saved with;
    cu_layer_call k = {b, l, m, keep, att, &w, &g, x, internals(b, keep, att, &with)};
    const cu_attn_part *attn = attn_parts[kind->attention];
    attn->prepare(&k);
    FOR_CHUNKS(b, t0, rows) block_backward(&k, mlp_parts[kind->mlp], dout, dx, t0, rows);
    attn->backward(&k, dx);
}

// Final norm, classifier and loss chunk by chunk; with dloss != 0 also their backward, into
// dx's chunk (the head's share of the residual stream's gradient).
void cu_head(backend *b, const void *head_w, const void *cls_w, float *head_g, float *cls_g,
             const float *x, float *dx, int m, float dloss) {
    const mt_model *model = &b->c->model;
    int n = tokens(b), D = model->dim;
    const bf16 *final_norm = head_w;
    float *losses = b->losses + (size_t)m * n;
    const int32_t *targets = b->targets + (size_t)m * n;
    if (m + 1 > b->loss_micro) b->loss_micro = m + 1;
    FOR_CHUNKS(b, t0, rows) {
        const float *xc = x + (size_t)t0 * D;
        int logit_rows = b->chunk < rows ? b->chunk : rows;
        cu_norm_forward(b, b->xf, b->rstd_f, xc, final_norm, rows, D);
        if (dloss == 0) {
            cuda_classifier(b->gemm, losses + t0, NULL, NULL, b->xf, cls_w, targets + t0, rows, D,
                            model->vocab, 0, b->cls_scratch, logit_rows, b->s);
            continue;
        }
        float *dxc = dx + (size_t)t0 * D;
        cu_zero(b, b->dxf, sizeof(float) * rows * D);
        cuda_classifier(b->gemm, losses + t0, b->dxf, cls_g, b->xf, cls_w, targets + t0, rows, D,
                        model->vocab, dloss, b->cls_scratch, logit_rows, b->s);
        cu_zero(b, dxc, sizeof(float) * rows * D);
        cu_norm_backward(b, dxc, head_g, b->dxf, xc, final_norm, b->rstd_f, rows, D,
                         b->norm_scratch);
    }
}
