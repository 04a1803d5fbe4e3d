#include "runtime/plan/buffers.h"
#include "kernels/scratch.h"
#include "shm/shm.h"
#include "shm/syscheck.h"
#ifdef MT_HAVE_CUDA
#include "kernels/cuda/kernels_gdn_cuda.h"
#endif

static uint64_t most(uint64_t a, uint64_t b) {
    return a > b ? a : b;
}

// The scratch the kernels ask for (kernels/scratch.h), for the shape's sizes. A config of a
// layer alone (tests) may have no vocabulary.
static void kernel_scratch(mt_buffer_shape *s, const mt_model *m) {
    if (m->kv_heads > 0)
        s->attn_scratch =
            cuda_attention_scratch_bytes((int)s->B, (int)s->T, m->heads, (int)s->KVH, (int)s->hd);
    s->norm_scratch = cuda_rmsnorm_scratch_floats((int)s->r, m->dim);
    // q, k and v's biases; the router's and the experts' (gpt-oss)
    s->bias_scratch = cuda_bias_scratch_floats((int)most(
        most(s->Q, s->KV), most(most(s->D, (uint64_t)m->experts), (uint64_t)m->moe_ffn_dim)));
    // qk_norm's norms: over each head (rows of hd) or over the whole projections
    int all = mt_qk_norm(m) == QK_ALL;
    int rows = (int)(all ? s->n : s->n * s->H);
    s->norm_qk = most(cuda_rmsnorm_scratch_floats(rows, (int)(all ? s->Q : s->hd)),
                      cuda_rmsnorm_scratch_floats(rows, (int)(all ? s->KV : s->hd)));
    if (s->mla)
        s->norm_mla = most(cuda_rmsnorm_scratch_floats((int)s->r, (int)s->QR),
                           cuda_rmsnorm_scratch_floats((int)s->r, (int)s->KR));
    // the classifier's chunks: as many tokens as its weight gradient's traffic asks, within the
    // token chunk of the layers' token-wise work
    s->cls_chunk = most(1, s->r < MT_CLASSIFIER_ROWS ? s->r : MT_CLASSIFIER_ROWS);
    s->cls_scratch = cuda_classifier_scratch_bytes((int)s->cls_chunk, m->dim, m->vocab);
    s->dispatch = s->moe ? cuda_moe_dispatch_scratch_bytes((int)s->r, m->experts, m->top_k) : 0;
}

#ifdef MT_HAVE_CUDA
// The delta rule's most chunks a row: one a token with packed documents (gdn_max_chunks), else
// one per GDN_CHUNK tokens.
static int gdn_rule_chunks(const mt_buffer_shape *s) {
    return s->docs ? (int)s->T : (int)((s->T + GDN_CHUNK - 1) / GDN_CHUNK);
}

// The delta rule's shape for its size functions (the scale does not size anything).
static gdn_args gdn_rule_args(const mt_buffer_shape *s, const mt_config *c) {
    return (gdn_args){
        (int)s->B, (int)s->T, (int)s->LH, (int)s->LKH, c->model.linear_k_dim, c->model.linear_v_dim,
        NULL,      1.0f};
}
#endif

// Gated DeltaNet's kernels' scratch on CUDA: the largest any of them asks for (they run in turn
// on one stream), by their own size functions. The delta rule's grows with the chunks of a row,
// which packed documents split (gdn_max_chunks): at most one a token. A build without CUDA runs
// none of them.
static uint64_t gdn_scratch(const mt_buffer_shape *s, const mt_config *c) {
#ifdef MT_HAVE_CUDA
    int B = (int)s->B, T = (int)s->T, H = (int)s->LH;
    const gdn_args a = gdn_rule_args(s, c);
    int chunks = gdn_rule_chunks(s);
    const conv1d_args conv = {.B = B, .T = T, .C = (int)s->LC, .K = c->model.linear_conv};
    uint64_t bytes = cuda_gated_delta_scratch_bytes(&a, chunks, 1);
    bytes = most(bytes, cuda_gated_delta_scratch_bytes(&a, chunks, 0));
    bytes = most(bytes, sizeof(float) * cuda_conv1d_scratch_floats(&conv));
    bytes = most(bytes, sizeof(float) * cuda_gdn_gates_scratch_floats((long)s->n, H));
    return most(bytes, sizeof(float) *
                           cuda_rmsnorm_gated_scratch_floats((int)s->n * H, c->model.linear_v_dim));
#else
    (void)s, (void)c;
    return 0;
#endif
}

// The delta rule's checkpoints on CUDA (cuda_gated_delta_ckpt_bytes), at gdn_scratch's most
// chunks a row.
static uint64_t gdn_ckpt(const mt_buffer_shape *s, const mt_config *c) {
#ifdef MT_HAVE_CUDA
    const gdn_args a = gdn_rule_args(s, c);
    return cuda_gated_delta_ckpt_bytes(&a, gdn_rule_chunks(s));
#else
    (void)s, (void)c;
    return 0;
#endif
}

// Multi-head latent attention (every attention layer when mla_kv_rank > 0): q, k and v in the
// softmax buffers, one key head a query head, at the wider of q's and v's head widths (the CUDA
// kernels take one head width: attn_mla_cuda.c pads the narrower to it).
static void mla_shape(mt_buffer_shape *s, const mt_model *m) {
    s->mla = 1, s->QR = m->mla_q_rank > 0 ? (uint64_t)m->mla_q_rank : 0;
    s->KR = (uint64_t)m->mla_kv_rank, s->RD = (uint64_t)m->mla_rope_dim;
    s->KB = s->H * (uint64_t)(m->mla_nope_dim + m->mla_v_dim);
    s->hd = most((uint64_t)mt_mla_qk_dim(m), (uint64_t)m->mla_v_dim);
    s->KVH = s->H, s->Q = s->KV = s->H * s->hd, s->AO = most(s->AO, s->Q);
    s->LR = most(s->QR, s->KR);
}

void mt_buffer_shape_of(mt_buffer_shape *s, const mt_config *c, int B, int T) {
    *s = (mt_buffer_shape){0};
    s->B = (uint64_t)B, s->T = (uint64_t)T, s->n = s->B * s->T;
    s->r = (uint64_t)mt_chunk_of(c, (int)s->n);
    s->chunks = s->r ? (s->n + s->r - 1) / s->r : 0;
    s->D = c->model.dim, s->hd = mt_head_dim(&c->model), s->F = c->model.ffn_dim,
    s->H = c->model.heads;
    s->KVH = c->model.kv_heads, s->Q = s->H * s->hd, s->KV = s->KVH * s->hd;
    s->M = c->micro_batches, s->V = c->model.vocab, s->L = c->model.layers;
    s->qk = mt_qk_norm(&c->model) != QK_NONE;
    s->og = !!c->model.attn_output_gate;
    s->AO = s->Q;
    if (mt_gdn_layers(&c->model) > 0) {
        s->gdn = 1, s->LK = (uint64_t)mt_gdn_key_width(&c->model),
        s->LV = (uint64_t)mt_gdn_value_width(&c->model);
        s->LC = 2 * s->LK + s->LV, s->LH = (uint64_t)c->model.linear_v_heads;
        s->LKH = (uint64_t)c->model.linear_k_heads, s->AO = most(s->Q, s->LV);
    }
    if (c->model.mla_kv_rank > 0) mla_shape(s, &c->model);
    s->docs = mt_packs_documents(c);
    s->moe_layers = mt_moe_layers(&c->model);
    if (c->model.experts > 0) {
        s->moe = 1, s->E = c->model.experts, s->MF = c->model.moe_ffn_dim;
        s->P = s->r * c->model.top_k, s->Pn = s->n * c->model.top_k;
        s->S = c->model.shared_ffn_dim > 0 ? c->model.shared_ffn_dim : 0, s->sh = s->S > 0;
        s->stat_rows = s->M * most(s->moe_layers, 1);
        s->frozen = model_frozen_base(&c->model, c->model.layers);
    }
    kernel_scratch(s, &c->model);
    if (s->gdn) s->gdn_scratch = gdn_scratch(s, c), s->gdn_ckpt = gdn_ckpt(s, c);
}

void mt_buffer_add(mt_buffer_list *l, const char *name, uint64_t bytes) {
    if (l->n == MT_BUFFERS_MAX) mt_die("buffer list: more than %d buffers", MT_BUFFERS_MAX);
    l->name[l->n] = name, l->bytes[l->n] = bytes;
    l->n++;
}

static uint64_t rounded(const mt_buffer_list *l, int i) {
    return l->align ? (l->bytes[i] + l->align - 1) / l->align * l->align : l->bytes[i];
}

uint64_t mt_buffer_offset(const mt_buffer_list *l, int i) {
    uint64_t at = 0;
    for (int j = 0; j < i; j++) at += rounded(l, j);
    return at;
}

uint64_t mt_buffer_list_bytes(const mt_buffer_list *l) {
    return mt_buffer_offset(l, l->n);
}

static void start(mt_buffer_list *l, uint64_t align) {
    l->n = 0, l->align = align;
}

void mt_buffers_cuda_saved(mt_buffer_list *l, const mt_buffer_shape *s, int whole) {
    start(l, MT_CUDA_SAVED_ALIGN);
    MT_CUDA_SAVED(MT_BUFFER_COUNT, l, *s, whole ? s->n : s->r)
}

// A list's builder: the list's buffers counted for the shape s, with its parts' alignment.
#define LIST_BUILDER(name, LIST, align)                                                            \
    void name(mt_buffer_list *l, const mt_buffer_shape *s) {                                       \
        start(l, align);                                                                           \
        LIST(MT_BUFFER_COUNT, l, *s)                                                               \
    }
LIST_BUILDER(mt_buffers_cuda_layer, MT_CUDA_LAYER, 0)
LIST_BUILDER(mt_buffers_cuda_qk_norm, MT_CUDA_QK_NORM, 0)
LIST_BUILDER(mt_buffers_cuda_gate, MT_CUDA_GATE, 0)
LIST_BUILDER(mt_buffers_cuda_gdn, MT_CUDA_GDN, 0)
LIST_BUILDER(mt_buffers_cuda_mla, MT_CUDA_MLA, 0)
LIST_BUILDER(mt_buffers_cuda_head, MT_CUDA_HEAD, 0)
LIST_BUILDER(mt_buffers_cuda_moe, MT_CUDA_MOE, 0)
LIST_BUILDER(mt_buffers_cuda_attention_slot, MT_CUDA_ATTENTION_SLOT, MT_CUDA_ATTENTION_SLOT_ALIGN)
LIST_BUILDER(mt_buffers_cuda_pinned, MT_CUDA_PINNED, 0)
LIST_BUILDER(mt_buffers_cuda_host, MT_CUDA_HOST, 0)
LIST_BUILDER(mt_buffers_cpu_layer, MT_CPU_LAYER, 0)
LIST_BUILDER(mt_buffers_cpu_gdn, MT_CPU_GDN, 0)
LIST_BUILDER(mt_buffers_cpu_mla, MT_CPU_MLA, 0)
LIST_BUILDER(mt_buffers_cpu_moe, MT_CPU_MOE, 0)
LIST_BUILDER(mt_buffers_cpu_backend, MT_CPU_BACKEND, 0)
LIST_BUILDER(mt_buffers_cpu_moe_stats, MT_CPU_MOE_STATS, 0)
LIST_BUILDER(mt_buffers_cpu_attention_slot, MT_CPU_ATTENTION_SLOT, 0)

uint64_t plan_grad_out_piece(const mt_model *m, int device_groups) {
    uint64_t largest = 0;
    for (int g = device_groups; g < model_group_count(m); g++)
        largest = most(largest, model_group_numel(m, g));
    return shard_grads_piece(largest, model_state_piece());
}
