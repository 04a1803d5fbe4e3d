// Multi-head latent attention's part of a decoder layer on the GPU (the kind ATTN_MLA), the twin
// of attn_mla_cpu.c: the first norm, the queries (q_proj, or q_a_proj -> RMSNorm -> q_b_proj),
// kv_a_proj_with_mqa as two products (its first mla_kv_rank rows give the latent, the rest the
// rotated key part every head shares), the latent's RMSNorm and kv_b_proj, RoPE on the queries'
// last mla_rope_dim and on the shared part, flash attention, o_proj the skeleton's on the
// compact [n, heads x mla_v_dim] output. The projections run by chunks, RoPE and attention over
// the micro-batch.
//
// The attention kernels take one head width for q, k and v. q and k are nope + rope wide; the
// values (mla_v_dim, no wider: cu_layers_check) are padded with zeros to that width (kernels/cuda/
// mla.cu), so the output's extra columns are zero, and the output and its gradient are moved
// between the padded and the compact layouts around the kernels; the values' extra gradient
// columns are discarded. The cost: the kernels' p v work and dv on (nope + rope) / v_dim times
// the columns (DeepSeek-V3: 192 / 128), two padded bf16 buffers of n x heads x (nope + rope)
// (MT_CUDA_MLA), and the copies. The chunk's latent, its norms and q_a_proj's output are
// recomputed in the backward (two small products), so a kept pass keeps only q, k, v and the
// output.
#include "runtime/engine/layer_parts_cuda.h"
#include "shm/syscheck.h"

static mla_layout layout_of(const backend *b, long rows) {
    const mt_model *m = &b->c->model;
    return (mla_layout){.rows = rows,
                        .H = m->heads,
                        .dn = m->mla_nope_dim,
                        .dr = m->mla_rope_dim,
                        .dv = m->mla_v_dim,
                        .P = mt_mla_qk_dim(m)};
}

// Every head its own key head, q and k (and the padded v) nope + rope wide.
static attn_args attention_args(const backend *b, int l, int m) {
    const mt_model *model = &b->c->model;
    return (attn_args){.B = b->B,
                       .T = b->T,
                       .H = model->heads,
                       .KV = model->heads,
                       .hd = mt_mla_qk_dim(model),
                       .scale = model_mla_softmax_scale(model),
                       .doc_start = cu_doc_starts(b, m),
                       .window = mt_layer_kind_of(model, l)->window};
}

// RoPE on the last mla_rope_dim of each query head, or (shared) on the rotated key part alone.
static rope_args rope_of(const backend *b, const int32_t *ds, int shared) {
    const mt_model *m = &b->c->model;
    return (rope_args){.inv_freq = b->inv_freq,
                       .scale = b->rope_scale,
                       .B = b->B,
                       .T = b->T,
                       .hd = shared ? m->mla_rope_dim : mt_mla_qk_dim(m),
                       .rot = m->mla_rope_dim,
                       .off = shared ? 0 : m->mla_nope_dim,
                       .interleave = m->rope_interleave,
                       .doc_start = ds};
}

// One chunk's first norm, q_a_proj's output and its norm (with a query rank), and the latent
// and its norm: what the projections and their backward read.
static void latents(backend *b, const layer_w *w, const float *x, int t0, int rows) {
    const mt_model *model = &b->c->model;
    mla_set *m = &b->mla;
    int D = model->dim, QR = model->mla_q_rank, R = model->mla_kv_rank;
    cudaStream_t s = b->s;
    cu_norm_forward(b, b->n1, b->rstd1, x + (size_t)t0 * D, w->attn_norm, rows, D);
    if (QR > 0) {
        cuda_linear_forward(b->gemm, m->qa, 1, 0, b->n1, w->mla_q_a, rows, D, QR, s);
        cuda_rmsnorm_forward(m->qan, m->rstd_qa, m->qa, w->mla_q_a_norm, rows, QR,
                             MT_MLA_LATENT_NORM_EPS, s);
    }
    cuda_linear_forward(b->gemm, m->lat, 1, 0, b->n1, w->mla_kv_a, rows, D, R, s);
    cuda_rmsnorm_forward(m->kvn, m->rstd_kv, m->lat, w->mla_kv_a_norm, rows, R,
                         MT_MLA_LATENT_NORM_EPS, s);
}

// One chunk's q, the rotated key part (fp32, before RoPE), and k's nope parts and v.
static void project(backend *b, const layer_w *w, const float *x, layer_saved *a, int t0,
                    int rows) {
    const mt_model *model = &b->c->model;
    mla_set *m = &b->mla;
    int D = model->dim, HQ = model->heads * mt_mla_qk_dim(model), R = model->mla_kv_rank,
        dr = model->mla_rope_dim;
    int KB = model->heads * (model->mla_nope_dim + model->mla_v_dim);
    cudaStream_t s = b->s;
    latents(b, w, x, t0, rows);
    bf16 *q = a->q + (size_t)t0 * HQ;
    if (model->mla_q_rank > 0)
        cuda_linear_forward(b->gemm, q, 0, 0, m->qan, w->mla_q_b, rows, model->mla_q_rank, HQ, s);
    else
        cuda_linear_forward(b->gemm, q, 0, 0, b->n1, w->mla_q, rows, D, HQ, s);
    cuda_linear_forward(b->gemm, m->krot_f + (size_t)t0 * dr, 1, 0, b->n1,
                        w->mla_kv_a + (size_t)R * D, rows, D, dr, s);
    cuda_linear_forward(b->gemm, m->kvb, 0, 0, m->kvn, w->mla_kv_b, rows, R, KB, s);
    const mla_layout L = layout_of(b, rows);
    cuda_mla_split(a->k + (size_t)t0 * HQ, a->v + (size_t)t0 * HQ, m->kvb, &L, s);
}

// q, k, v for micro-batch m, then RoPE and (unless its output is at hand) attention, its output
// compact into a->att for o_proj.
static void attention_part(backend *b, int l, int m, const layer_w *w, const float *x,
                           layer_saved *a, int run_attention) {
    const mt_model *model = &b->c->model;
    mla_set *ms = &b->mla;
    cudaStream_t s = b->s;
    FOR_CHUNKS(b, t0, rows) project(b, w, x, a, t0, rows);
    cuda_float_to_bf16(ms->krot, ms->krot_f, (long)tokens(b) * model->mla_rope_dim, s);
    const int32_t *ds = cu_doc_starts(b, m);
    const rope_args rq = rope_of(b, ds, 0), rk = rope_of(b, ds, 1);
    cuda_rope_forward(a->q, model->heads, &rq, s);
    cuda_rope_forward(ms->krot, 1, &rk, s);
    const mla_layout L = layout_of(b, tokens(b));
    cuda_mla_rope_broadcast(a->k, ms->krot, &L, s);
    if (!run_attention) return;
    const attn_args args = attention_args(b, l, m);
    const cuda_attn_tensors t = {.q = a->q, .k = a->k, .v = a->v, .out = ms->pad, .lse = a->lse};
    cuda_attention_forward(&args, &t, b->attn_scratch, s);
    cuda_mla_compact(a->att, ms->pad, &L, s);
}

static void mla_forward(const cu_layer_call *k, int run_attention) {
    attention_part(k->b, k->l, k->m, k->w, k->x, k->a, run_attention);
}

// q, k and v again unless a kept pass holds them; the chunks' latents come in the backward.
static void mla_prepare(const cu_layer_call *k) {
    if (k->keep < 0)
        attention_part(k->b, k->l, k->m, k->w, k->x, k->a, !att_ready(k->keep, k->att));
}

// The queries' projections backward for one chunk: d_n1 = their input gradient.
static void query_backward(backend *b, const layer_w *w, const layer_g *g, const bf16 *dq,
                           int rows) {
    const mt_model *model = &b->c->model;
    mla_set *m = &b->mla;
    int D = model->dim, HQ = model->heads * mt_mla_qk_dim(model), QR = model->mla_q_rank;
    cudaStream_t s = b->s;
    cuda_gemm *gm = b->gemm;
    if (QR <= 0) {
        cuda_linear_backward_input(gm, b->d_n1, 1, 0, dq, w->mla_q, rows, D, HQ, s);
        cuda_linear_backward_weight(gm, g->mla_q, dq, b->n1, rows, D, HQ, s);
        return;
    }
    cuda_linear_backward_input(gm, m->d_a, 1, 0, dq, w->mla_q_b, rows, QR, HQ, s);
    cuda_linear_backward_weight(gm, g->mla_q_b, dq, m->qan, rows, QR, HQ, s);
    cu_zero(b, m->d_x, sizeof(float) * rows * QR);
    cuda_rmsnorm_backward(m->d_x, g->mla_q_a_norm, m->d_a, m->qa, w->mla_q_a_norm, m->rstd_qa, rows,
                          QR, m->norm_scratch, s);
    cuda_float_to_bf16(m->d_b, m->d_x, (long)rows * QR, s);
    cuda_linear_backward_input(gm, b->d_n1, 1, 0, m->d_b, w->mla_q_a, rows, D, QR, s);
    cuda_linear_backward_weight(gm, g->mla_q_a, m->d_b, b->n1, rows, D, QR, s);
}

// kv_b_proj, the latent's norm and kv_a_proj backward for the chunk at t0: d_n1 gains their
// input gradient. dkrot: the micro-batch's rotated key part's gradient, RoPE undone.
static void latent_backward(backend *b, const layer_w *w, const layer_g *g, const bf16 *dkrot,
                            int t0, int rows) {
    const mt_model *model = &b->c->model;
    mla_set *m = &b->mla;
    int D = model->dim, HQ = model->heads * mt_mla_qk_dim(model), R = model->mla_kv_rank,
        dr = model->mla_rope_dim;
    int KB = model->heads * (model->mla_nope_dim + model->mla_v_dim);
    cudaStream_t s = b->s;
    cuda_gemm *gm = b->gemm;
    const mla_layout L = layout_of(b, rows);
    bf16 *dkvb = m->kvb; // kv_b_proj's output is not read again
    cuda_mla_join(dkvb, b->dk + (size_t)t0 * HQ, b->dv + (size_t)t0 * HQ, &L, s);
    cuda_linear_backward_input(gm, m->d_a, 1, 0, dkvb, w->mla_kv_b, rows, R, KB, s);
    cuda_linear_backward_weight(gm, g->mla_kv_b, dkvb, m->kvn, rows, R, KB, s);
    cu_zero(b, m->d_x, sizeof(float) * rows * R);
    cuda_rmsnorm_backward(m->d_x, g->mla_kv_a_norm, m->d_a, m->lat, w->mla_kv_a_norm, m->rstd_kv,
                          rows, R, m->norm_scratch, s);
    cuda_float_to_bf16(m->d_b, m->d_x, (long)rows * R, s);
    cuda_linear_backward_input(gm, b->d_n1, 1, 1.0f, m->d_b, w->mla_kv_a, rows, D, R, s);
    cuda_linear_backward_weight(gm, g->mla_kv_a, m->d_b, b->n1, rows, D, R, s);
    const bf16 *dk_rot = dkrot + (size_t)t0 * dr;
    const bf16 *w_rot = w->mla_kv_a + (size_t)R * D;
    cuda_linear_backward_input(gm, b->d_n1, 1, 1.0f, dk_rot, w_rot, rows, D, dr, s);
    cuda_linear_backward_weight(gm, g->mla_kv_a + (size_t)R * D, dk_rot, b->n1, rows, D, dr, s);
}

// One chunk: its latents again, the projections' backward, the first norm's into dx.
static void chunk_backward(const cu_layer_call *k, float *dx, int t0, int rows) {
    backend *b = k->b;
    const mt_model *m = &b->c->model;
    int D = m->dim, HQ = m->heads * mt_mla_qk_dim(m);
    latents(b, k->w, k->x, t0, rows);
    query_backward(b, k->w, k->g, k->a->q + (size_t)t0 * HQ, rows);
    latent_backward(b, k->w, k->g, b->mla.krot, t0, rows);
    cu_norm_backward(b, dx + (size_t)t0 * D, k->g->attn_norm, b->d_n1, k->x + (size_t)t0 * D,
                     k->w->attn_norm, b->rstd1, rows, D, b->norm_scratch);
}

// From d_att (compact): attention's backward on the padded layouts, dq in q's buffer, RoPE's,
// the rotated key part's gradient summed over the heads, then the chunks.
static void mla_backward(const cu_layer_call *k, float *dx) {
    backend *b = k->b;
    const mt_model *model = &b->c->model;
    layer_saved *a = k->a;
    mla_set *m = &b->mla;
    cudaStream_t s = b->s;
    const mla_layout L = layout_of(b, tokens(b));
    cuda_mla_pad(m->pad, a->att, &L, s);
    cuda_mla_pad(m->dpad, b->d_att, &L, s);
    const attn_args args = attention_args(b, k->l, k->m);
    const cuda_attn_tensors t = {.q = a->q,
                                 .k = a->k,
                                 .v = a->v,
                                 .out = m->pad,
                                 .lse = a->lse,
                                 .dout = m->dpad,
                                 .dq = a->q, // in place: q is not read again
                                 .dk = b->dk,
                                 .dv = b->dv};
    cuda_attention_backward(&args, &t, b->attn_scratch, s);
    const int32_t *ds = cu_doc_starts(b, k->m);
    const rope_args rq = rope_of(b, ds, 0), rk = rope_of(b, ds, 1);
    cuda_rope_backward(a->q, model->heads, &rq, s);
    cuda_mla_rope_reduce(m->krot_f, b->dk, &L, s);
    cuda_float_to_bf16(m->krot, m->krot_f, (long)tokens(b) * model->mla_rope_dim, s);
    cuda_rope_backward(m->krot, 1, &rk, s);
    FOR_CHUNKS(b, t0, rows) chunk_backward(k, dx, t0, rows);
}

void cu_layers_check(const mt_model *model) {
    if (model->mla_kv_rank <= 0) return;
    if (model->mla_v_dim > mt_mla_qk_dim(model))
        mt_refuse("model.mla_v_dim: values of %d, wider than q's and k's heads of %d: not on the "
                  "CUDA backend (its values are padded to the q and k heads' width)",
                  model->mla_v_dim, mt_mla_qk_dim(model));
    if (mt_mla_qk_dim(model) > 256)
        mt_refuse("model.mla_nope_dim + model.mla_rope_dim: heads of %d, over the CUDA attention "
                  "kernels' 256",
                  mt_mla_qk_dim(model));
}

// o_proj on the compact output [rows, heads x mla_v_dim]; its input's gradient into d_att.
static cu_attn_out mla_out(const cu_layer_call *k, int t0, int rows) {
    (void)rows;
    const mt_model *m = &k->b->c->model;
    int O = m->heads * m->mla_v_dim;
    return (cu_attn_out){.in = k->a->att + (size_t)t0 * O,
                         .w = k->w->mla_o,
                         .dw = k->g ? k->g->mla_o : NULL,
                         .d_in = k->b->d_att,
                         .width = O};
}

const cu_attn_part attn_mla_cuda = {mla_forward, mla_prepare, mla_backward, mla_out};
