// The compute rank's working sets, one list each: every buffer a backend allocates at its start,
// by name, element type and element count. The plan sums a list (plan.c, moe.c); the backend
// walks the same list to allocate its buffers and point its fields at them (backend_cuda.c,
// moe_cuda.c, layer_scratch.c, moe_mlp.c, backend_cpu.c). A buffer is added, resized or dropped
// here and nowhere else.
//
// A list is an X-macro: LIST(X, o, s) expands X(o, type, name, count) for each buffer, in the
// order they are allocated, where count is in elements of type, from s, an mt_buffer_shape. The
// plan's expansion (MT_BUFFER_COUNT) adds each to an mt_buffer_list; a backend's
// (MT_BUFFER_SLOT) lists the fields &o->name its allocator points at the buffers. A count of 0
// is a buffer the configuration does not have: none is allocated, its field stays NULL.
#ifndef MT_PLAN_BUFFERS_H
#define MT_PLAN_BUFFERS_H

#include "kernels/bf16.h"
#include "runtime/model/model.h"
#include <stdint.h>

// What the lists' counts are made of, for B x T tokens a micro-batch (mt_buffer_shape_of).
typedef struct {
    uint64_t B, T, n, r, chunks; // n = B x T; r: tokens a chunk (mt_chunk_of), chunks of n
    uint64_t D, hd, Q, KV, F, H, KVH, M, V, L;
    uint64_t qk;   // 1 with qk_norm, else 0
    uint64_t docs; // 1 with data.pack "documents", else 0
    uint64_t og;   // 1 with the gated attention (attn_output_gate), else 0
    // Gated DeltaNet, with such layers (all 0 without): 1, its conv channels LC, q (and k)
    // width LK, value width LV, value and key heads LH and LKH
    uint64_t gdn, LC, LK, LV, LH, LKH;
    uint64_t AO; // the attention part's output width: Q, or LV where a GDN layer's is wider
    // Multi-head latent attention, with such layers (all 0 without): 1; its query rank QR, latent
    // KR, rotated width RD and kv_b_proj's output KB (heads x (nope + v)). Its q, k and v take
    // the softmax buffers, KVH = H heads of hd = the larger of q's and v's head widths.
    uint64_t mla, QR, KR, RD, KB, LR; // LR: the wider of QR and KR
    // MoE (all 0 for a dense model): E experts; P and Pn (token, slot) pairs of a chunk and of
    // the micro-batch; MF, S the experts' and the shared expert's widths, sh 1 with a shared
    // expert; the MoE layers and stat_rows, the rows of per-expert statistics on the GPU
    // (micro-batches x MoE layers, one unused row without MoE layers)
    uint64_t moe, E, P, Pn, MF, S, sh, moe_layers, stat_rows;
    uint64_t frozen; // the layers' frozen images (model_frozen_numel), fp32, one after another
    // the kernels' scratch (kernels/scratch.h), and the classifier's rows a chunk
    uint64_t attn_scratch, norm_scratch, bias_scratch, norm_qk, cls_chunk, cls_scratch, dispatch;
    uint64_t gdn_scratch; // Gated DeltaNet's kernels on CUDA, one scratch they take in turn
    uint64_t gdn_ckpt;    // the delta rule's checkpoints on CUDA
    uint64_t norm_mla;    // the latent attention's norms' (a chunk of rows of QR and of KR)
} mt_buffer_shape;

void mt_buffer_shape_of(mt_buffer_shape *s, const mt_config *c, int B, int T);

// The CUDA backend (backend_cuda.c, moe_cuda.c). A layer pass's saved tensors (layer_saved):
// attention's span the micro-batch, h, gate and up `rows` tokens (a chunk in the working set,
// the micro-batch in a kept slot); att is the attention part's output (a Gated DeltaNet layer's:
// its delta rule's, LV wide). One allocation, each part 256-byte aligned.
#define MT_CUDA_SAVED(X, o, s, rows)                                                               \
    X(o, bf16, q, (s).n *(s).Q)                                                                    \
    X(o, bf16, k, (s).n *(s).KV)                                                                   \
    X(o, bf16, v, (s).n *(s).KV)                                                                   \
    X(o, bf16, att, (s).n *(s).AO)                                                                 \
    X(o, bf16, gate, (rows) * (s).F)                                                               \
    X(o, bf16, up, (rows) * (s).F)                                                                 \
    X(o, float, lse, (s).n *(s).H)                                                                 \
    X(o, float, h, (rows) * (s).D)
#define MT_CUDA_SAVED_ALIGN 256

// The layer's working set beside its saved tensors: attention's gradients span the micro-batch,
// the rest a chunk; the head's dxf and rstd_f too; RoPE's frequencies.
#define MT_CUDA_LAYER(X, o, s)                                                                     \
    X(o, float, inv_freq, (s).hd / 2)                                                              \
    X(o, bf16, n1, (s).r *(s).D)                                                                   \
    X(o, bf16, n2, (s).r *(s).D)                                                                   \
    X(o, bf16, dout_b, (s).r *(s).D)                                                               \
    X(o, bf16, dh_b, (s).r *(s).D)                                                                 \
    X(o, bf16, d_att, (s).n *(s).Q)                                                                \
    X(o, bf16, dk, (s).n *(s).KV)                                                                  \
    X(o, bf16, dv, (s).n *(s).KV)                                                                  \
    X(o, bf16, act, (s).r *(s).F)                                                                  \
    X(o, bf16, d_gate, (s).r *(s).F)                                                               \
    X(o, bf16, d_up, (s).r *(s).F)                                                                 \
    X(o, float, d_n2, (s).r *(s).D)                                                                \
    X(o, float, d_n1, (s).r *(s).D)                                                                \
    X(o, float, dxf, (s).r *(s).D)                                                                 \
    X(o, float, d_act, (s).r *(s).F)                                                               \
    X(o, float, rstd1, (s).r)                                                                      \
    X(o, float, rstd2, (s).r)                                                                      \
    X(o, float, rstd_f, (s).r)                                                                     \
    X(o, float, norm_scratch, (s).norm_scratch)                                                    \
    X(o, float, bias_scratch, (s).bias_scratch)                                                    \
    X(o, unsigned char, attn_scratch, (s).attn_scratch)

// qk_norm: fp32 q and k for the whole micro-batch (the norms' inputs), their statistics, two
// fp32 q-sized halves for the norms' backward, and the norms' weight-gradient scratch.
#define MT_CUDA_QK_NORM(X, o, s)                                                                   \
    X(o, float, q_raw, (s).qk *(s).n *(s).Q)                                                       \
    X(o, float, k_raw, (s).qk *(s).n *(s).KV)                                                      \
    X(o, float, rstd_q, (s).qk *(s).n *(s).H)                                                      \
    X(o, float, rstd_k, (s).qk *(s).n *(s).KVH)                                                    \
    X(o, float, qk_scratch, (s).qk * 2 * (s).n * (s).Q)                                            \
    X(o, float, norm_qk, (s).qk *(s).norm_qk)

// The gated attention (attn_output_gate, attn_cuda.c): a chunk's q_proj output [r, 2Q] in fp32
// (the backward's bf16 gradient of it, too), the gates' logits over the micro-batch (their
// gradient in the backward), and a chunk's gated output, o_proj's input.
#define MT_CUDA_GATE(X, o, s)                                                                      \
    X(o, float, qg, (s).og * 2 * (s).r * (s).Q)                                                    \
    X(o, float, gate_q, (s).og *(s).n *(s).Q)                                                      \
    X(o, bf16, att_g, (s).og *(s).r *(s).Q)

// A Gated DeltaNet layer's internals over the micro-batch on CUDA (attn_gdn_cuda.c), with such
// layers: the in projections' outputs (qkv mixed, z, b, a), the conv's output and its q, k, v
// split, l2-normalised q and k, the gated norm's output y (out_proj's input), in bf16 as the
// kernels take them (kernels_gdn_cuda.h); the norms' statistics and the gates in fp32; then the
// gradients, the kernels' scratch and the delta rule's checkpoints (the state entering every 32
// chunks of a row but the first: none at rows of 2,048 tokens without packed documents), which
// the backward reads from the forward recomputed before it. The delta rule's output is the layer's
// att.
#define MT_CUDA_GDN(X, o, s)                                                                       \
    X(o, bf16, la.mixed, (s).n *(s).LC)                                                            \
    X(o, bf16, la.conv, (s).n *(s).LC)                                                             \
    X(o, bf16, la.z, (s).n *(s).LV)                                                                \
    X(o, bf16, la.b, (s).n *(s).LH)                                                                \
    X(o, bf16, la.a, (s).n *(s).LH)                                                                \
    X(o, bf16, la.q, (s).n *(s).LK)                                                                \
    X(o, bf16, la.k, (s).n *(s).LK)                                                                \
    X(o, bf16, la.v, (s).n *(s).LV)                                                                \
    X(o, bf16, la.qn, (s).n *(s).LK)                                                               \
    X(o, bf16, la.kn, (s).n *(s).LK)                                                               \
    X(o, bf16, la.y, (s).n *(s).LV)                                                                \
    X(o, float, la.rq, (s).n *(s).LKH)                                                             \
    X(o, float, la.rk, (s).n *(s).LKH)                                                             \
    X(o, float, la.g, (s).n *(s).LH)                                                               \
    X(o, float, la.beta, (s).n *(s).LH)                                                            \
    X(o, float, la.rstd, (s).n *(s).LH)                                                            \
    X(o, float, la.d_y, (s).n *(s).LV)                                                             \
    X(o, float, la.d_o, (s).n *(s).LV)                                                             \
    X(o, bf16, la.d_z, (s).n *(s).LV)                                                              \
    X(o, float, la.d_qn, (s).n *(s).LK)                                                            \
    X(o, float, la.d_kn, (s).n *(s).LK)                                                            \
    X(o, float, la.d_v, (s).n *(s).LV)                                                             \
    X(o, float, la.d_g, (s).n *(s).LH)                                                             \
    X(o, float, la.d_beta, (s).n *(s).LH)                                                          \
    X(o, float, la.d_q, (s).n *(s).LK)                                                             \
    X(o, float, la.d_k, (s).n *(s).LK)                                                             \
    X(o, float, la.d_conv, (s).n *(s).LC)                                                          \
    X(o, bf16, la.d_a, (s).n *(s).LH)                                                              \
    X(o, bf16, la.d_b, (s).n *(s).LH)                                                              \
    X(o, bf16, la.d_mixed, (s).n *(s).LC)                                                          \
    X(o, unsigned char, la.scratch, (s).gdn_scratch)                                               \
    X(o, unsigned char, la.ckpt, (s).gdn_ckpt)
// Multi-head latent attention (attn_mla_cuda.c), with such layers: a chunk's q_a_proj output
// (fp32, its norm's input), its norm and statistics, the latent (fp32) and its norm and
// statistics, kv_b_proj's output (its gradient in the backward); the micro-batch's rotated key
// part (fp32 from kv_a_proj, then bf16 for RoPE; their gradients in the backward); attention's
// output and its gradient padded from v_dim to q's and k's head width (the attention kernels
// take one: 2 n H (nope + rope) bf16, what padding costs beside the kernels' work on the zeros);
// the norms' fp32 gradients (dout and dx) and dx in bf16 for the projections, a chunk of the
// wider of the two ranks; the norms' weight-gradient scratch.
#define MT_CUDA_MLA(X, o, s)                                                                       \
    X(o, float, mla.qa, (s).r *(s).QR)                                                             \
    X(o, bf16, mla.qan, (s).r *(s).QR)                                                             \
    X(o, float, mla.rstd_qa, ((s).QR > 0) * (s).r)                                                 \
    X(o, float, mla.lat, (s).r *(s).KR)                                                            \
    X(o, bf16, mla.kvn, (s).r *(s).KR)                                                             \
    X(o, float, mla.rstd_kv, (s).mla *(s).r)                                                       \
    X(o, bf16, mla.kvb, (s).r *(s).KB)                                                             \
    X(o, float, mla.krot_f, (s).n *(s).RD)                                                         \
    X(o, bf16, mla.krot, (s).n *(s).RD)                                                            \
    X(o, bf16, mla.pad, (s).mla *(s).n *(s).Q)                                                     \
    X(o, bf16, mla.dpad, (s).mla *(s).n *(s).Q)                                                    \
    X(o, float, mla.d_a, (s).r *(s).LR)                                                            \
    X(o, float, mla.d_x, (s).r *(s).LR)                                                            \
    X(o, bf16, mla.d_b, (s).r *(s).LR)                                                             \
    X(o, float, mla.norm_scratch, (s).norm_mla)

// The head: the final norm's output for a chunk, every micro-batch's losses and tokens, one
// row of logits for sampling, the classifier's scratch.
#define MT_CUDA_HEAD(X, o, s)                                                                      \
    X(o, bf16, xf, (s).r *(s).D)                                                                   \
    X(o, float, losses, (s).n *(s).M)                                                              \
    X(o, float, logits, (s).V)                                                                     \
    X(o, unsigned char, cls_scratch, (s).cls_scratch)                                              \
    X(o, int32_t, inputs, (s).n *(s).M)                                                            \
    X(o, int32_t, targets, (s).n *(s).M)                                                           \
    X(o, int32_t, doc_start, (s).docs *(s).n *(s).M)

// A MoE MLP's working set for a chunk of r tokens (moe_set), P = r x top_k pairs: the router's,
// the dispatch's, the experts' rows, the shared expert's, and the load-balancing loss's state;
// then a correction bias widened from bf16 (where no frozen image came) and the layers' frozen
// images (engine/frozen.h).
#define MT_CUDA_MOE(X, o, s)                                                                       \
    X(o, float, logits, (s).r *(s).E)                                                              \
    X(o, float, probs, (s).r *(s).E)                                                               \
    X(o, bf16, d_logits, (s).r *(s).E)                                                             \
    X(o, float, weight, (s).P)                                                                     \
    X(o, float, d_weight, (s).P)                                                                   \
    X(o, int32_t, expert, (s).P)                                                                   \
    X(o, int32_t, row_of, (s).P)                                                                   \
    X(o, int32_t, token_of, (s).P)                                                                 \
    X(o, int32_t, counts, (s).E)                                                                   \
    X(o, int32_t, offsets, (s).moe *((s).E + 1))                                                   \
    X(o, unsigned char, dispatch_scratch, (s).dispatch)                                            \
    X(o, bf16, xp, (s).P *(s).D)                                                                   \
    X(o, bf16, yp, (s).P *(s).D)                                                                   \
    X(o, bf16, d_yp, (s).P *(s).D)                                                                 \
    X(o, bf16, d_xp, (s).P *(s).D)                                                                 \
    X(o, bf16, gate, (s).P *(s).MF)                                                                \
    X(o, bf16, up, (s).P *(s).MF)                                                                  \
    X(o, bf16, act, (s).P *(s).MF)                                                                 \
    X(o, bf16, d_gate, (s).P *(s).MF)                                                              \
    X(o, bf16, d_up, (s).P *(s).MF)                                                                \
    X(o, float, d_act, (s).P *(s).MF)                                                              \
    X(o, bf16, sh_gate, (s).r *(s).S)                                                              \
    X(o, bf16, sh_up, (s).r *(s).S)                                                                \
    X(o, bf16, sh_act, (s).r *(s).S)                                                               \
    X(o, bf16, d_sh_gate, (s).r *(s).S)                                                            \
    X(o, bf16, d_sh_up, (s).r *(s).S)                                                              \
    X(o, float, sh_dact, (s).r *(s).S)                                                             \
    X(o, bf16, sh_y, (s).sh *(s).r *(s).D)                                                         \
    X(o, bf16, d_sh_y, (s).sh *(s).r *(s).D)                                                       \
    X(o, float, sh_logit, (s).sh *(s).r)                                                           \
    X(o, bf16, d_sh_logit, (s).sh *(s).r)                                                          \
    X(o, float, psum_all, (s).stat_rows *(s).E)                                                    \
    X(o, float, aux_g, (s).M *(s).E)                                                               \
    X(o, float, correction, (s).E)                                                                 \
    X(o, float, frozen, (s).frozen)

// The CUDA backend's host memory, pinned: every micro-batch's losses copied back, and a MoE
// chunk's expert counts and offsets (the experts' GEMMs are sized on the host).
#define MT_CUDA_PINNED(X, o, s)                                                                    \
    X(o, float, losses_host, (s).n *(s).M)                                                         \
    X(o, int32_t, moe.counts_host, (s).E)                                                          \
    X(o, int32_t, moe.offsets_host, (s).moe *((s).E + 1))

// And plain: per micro-batch whether it holds a second document; with MoE each layer's index
// among the MoE layers, the per-expert statistics copied back (counts and probability sums),
// the aux gradient's host copy, and every forward chunk's counts and offsets, which its backward
// reuses.
#define MT_CUDA_HOST(X, o, s)                                                                      \
    X(o, unsigned char, has_docs, (s).docs *(s).M)                                                 \
    X(o, int, gdn_chunks, (s).docs *(s).gdn *(s).M)                                                \
    X(o, int, moe.moe_index, (s).moe *(s).L)                                                       \
    X(o, int64_t, moe.frozen_corr, ((s).frozen > 0) * (s).L)                                       \
    X(o, int32_t, moe.counts_all, (s).stat_rows *(s).E)                                            \
    X(o, float, moe.psum_host, (s).stat_rows *(s).E)                                               \
    X(o, float, moe.aux_g_host, (s).E)                                                             \
    X(o, int32_t, moe.routed, (s).stat_rows *(s).chunks *(2 * (s).E + 1))

// A kept attention output (keep_attention): the bf16 output and the fp32 statistics, in one
// allocation per slot, each 256-byte aligned.
#define MT_CUDA_ATTENTION_SLOT(X, o, s)                                                            \
    X(o, bf16, att, (s).n *(s).AO)                                                                 \
    X(o, float, lse, (s).n *(s).H)
#define MT_CUDA_ATTENTION_SLOT_ALIGN 256

// The GEMMs' cuBLASLt workspace, which the CUDA backend asks cuda_gemm_new for.
#define MT_CUDA_GEMM_WORKSPACE (32u << 20)

// The CPU backend: a layer's working set over the micro-batch (layer_scratch.c), all
// fp32, each buffer an allocation of its own; a kept slot is another one.
#define MT_CPU_LAYER(X, o, s)                                                                      \
    X(o, float, inv_freq, (s).hd / 2)                                                              \
    X(o, float, n1, (s).n *(s).D)                                                                  \
    X(o, float, h, (s).n *(s).D)                                                                   \
    X(o, float, n2, (s).n *(s).D)                                                                  \
    X(o, float, d_n2, (s).n *(s).D)                                                                \
    X(o, float, d_h, (s).n *(s).D)                                                                 \
    X(o, float, d_n1, (s).n *(s).D)                                                                \
    X(o, float, q, (s).n *(s).Q)                                                                   \
    X(o, float, att, (s).n *(s).AO)                                                                \
    X(o, float, d_att, (s).n *(s).AO)                                                              \
    X(o, float, d_q, (s).n *(s).Q)                                                                 \
    X(o, float, k, (s).n *(s).KV)                                                                  \
    X(o, float, v, (s).n *(s).KV)                                                                  \
    X(o, float, d_k, (s).n *(s).KV)                                                                \
    X(o, float, d_v, (s).n *(s).KV)                                                                \
    X(o, float, gate, (s).n *(s).F)                                                                \
    X(o, float, up, (s).n *(s).F)                                                                  \
    X(o, float, act, (s).n *(s).F)                                                                 \
    X(o, float, d_act, (s).n *(s).F)                                                               \
    X(o, float, d_gate, (s).n *(s).F)                                                              \
    X(o, float, d_up, (s).n *(s).F)                                                                \
    X(o, float, rstd1, (s).n)                                                                      \
    X(o, float, rstd2, (s).n)                                                                      \
    X(o, float, lse, (s).n *(s).H)                                                                 \
    X(o, float, q_raw, (s).qk *(s).n *(s).Q)                                                       \
    X(o, float, k_raw, (s).qk *(s).n *(s).KV)                                                      \
    X(o, float, rstd_q, (s).qk *(s).n *(s).H)                                                      \
    X(o, float, rstd_k, (s).qk *(s).n *(s).KVH)                                                    \
    X(o, float, qg, (s).og * 2 * (s).n * (s).Q)                                                    \
    X(o, float, gate_q, (s).og *(s).n *(s).Q)                                                      \
    X(o, float, att_g, (s).og *(s).n *(s).Q)                                                       \
    X(o, float, d_att_g, (s).og *(s).n *(s).Q)

// A Gated DeltaNet layer's internals over the micro-batch (attn_gdn_cpu.c), with such layers:
// the in projections' outputs (qkv mixed, z, b, a), the conv's output and its q, k, v split,
// l2-normalised q and k with their norms, the gates g and beta, the gated norm's statistics and
// output (y, out_proj's input; the rule's own output is the layer's att); then their gradients.
#define MT_CPU_GDN(X, o, s)                                                                        \
    X(o, float, la.mixed, (s).n *(s).LC)                                                           \
    X(o, float, la.conv, (s).n *(s).LC)                                                            \
    X(o, float, la.z, (s).n *(s).LV)                                                               \
    X(o, float, la.b, (s).n *(s).LH)                                                               \
    X(o, float, la.a, (s).n *(s).LH)                                                               \
    X(o, float, la.q, (s).n *(s).LK)                                                               \
    X(o, float, la.k, (s).n *(s).LK)                                                               \
    X(o, float, la.v, (s).n *(s).LV)                                                               \
    X(o, float, la.qn, (s).n *(s).LK)                                                              \
    X(o, float, la.kn, (s).n *(s).LK)                                                              \
    X(o, float, la.rq, (s).n *(s).LKH)                                                             \
    X(o, float, la.rk, (s).n *(s).LKH)                                                             \
    X(o, float, la.g, (s).n *(s).LH)                                                               \
    X(o, float, la.beta, (s).n *(s).LH)                                                            \
    X(o, float, la.rstd, (s).n *(s).LH)                                                            \
    X(o, float, la.y, (s).n *(s).LV)                                                               \
    X(o, float, la.d_y, (s).n *(s).LV)                                                             \
    X(o, float, la.d_z, (s).n *(s).LV)                                                             \
    X(o, float, la.d_qn, (s).n *(s).LK)                                                            \
    X(o, float, la.d_kn, (s).n *(s).LK)                                                            \
    X(o, float, la.d_q, (s).n *(s).LK)                                                             \
    X(o, float, la.d_k, (s).n *(s).LK)                                                             \
    X(o, float, la.d_v, (s).n *(s).LV)                                                             \
    X(o, float, la.d_g, (s).n *(s).LH)                                                             \
    X(o, float, la.d_beta, (s).n *(s).LH)                                                          \
    X(o, float, la.d_a, (s).n *(s).LH)                                                             \
    X(o, float, la.d_b, (s).n *(s).LH)                                                             \
    X(o, float, la.d_conv, (s).n *(s).LC)                                                          \
    X(o, float, la.d_mixed, (s).n *(s).LC)

// A multi-head latent attention layer's internals over the micro-batch (attn_mla_cpu.c), with
// such layers: the low-rank query path's q_a_proj output, its norm and statistics; kv_a_proj's
// output, its latent and rotated parts, the latent's norm and statistics, kv_b_proj's output
// (per head k's nope part, then v); then their gradients.
#define MT_CPU_MLA(X, o, s)                                                                        \
    X(o, float, mla.qa, (s).n *(s).QR)                                                             \
    X(o, float, mla.qan, (s).n *(s).QR)                                                            \
    X(o, float, mla.rstd_qa, ((s).QR > 0) * (s).n)                                                 \
    X(o, float, mla.kva, (s).n *((s).KR + (s).RD))                                                 \
    X(o, float, mla.lat, (s).n *(s).KR)                                                            \
    X(o, float, mla.krot, (s).n *(s).RD)                                                           \
    X(o, float, mla.kvn, (s).n *(s).KR)                                                            \
    X(o, float, mla.rstd_kv, (s).mla *(s).n)                                                       \
    X(o, float, mla.kvb, (s).n *(s).KB)                                                            \
    X(o, float, mla.d_qan, (s).n *(s).QR)                                                          \
    X(o, float, mla.d_qa, (s).n *(s).QR)                                                           \
    X(o, float, mla.d_kvn, (s).n *(s).KR)                                                          \
    X(o, float, mla.d_lat, (s).n *(s).KR)                                                          \
    X(o, float, mla.d_krot, (s).n *(s).RD)

// A MoE MLP's internals over the micro-batch (moe_mlp.c's moe_scratch), Pn = n x top_k pairs,
// each chunk its own counts and offsets.
#define MT_CPU_MOE(X, o, s)                                                                        \
    X(o, float, probs, (s).n *(s).E)                                                               \
    X(o, float, d_logits, (s).n *(s).E)                                                            \
    X(o, float, weight, (s).Pn)                                                                    \
    X(o, float, d_weight, (s).Pn)                                                                  \
    X(o, int32_t, expert, (s).Pn)                                                                  \
    X(o, int32_t, row_of, (s).Pn)                                                                  \
    X(o, int32_t, token_of, (s).Pn)                                                                \
    X(o, int32_t, counts, (s).moe *(s).chunks *((s).E + 1))                                        \
    X(o, int32_t, offsets, (s).moe *(s).chunks *((s).E + 1))                                       \
    X(o, float, xp, (s).Pn *(s).D)                                                                 \
    X(o, float, yp, (s).Pn *(s).D)                                                                 \
    X(o, float, d_yp, (s).Pn *(s).D)                                                               \
    X(o, float, d_xp, (s).Pn *(s).D)                                                               \
    X(o, float, gate, (s).Pn *(s).MF)                                                              \
    X(o, float, up, (s).Pn *(s).MF)                                                                \
    X(o, float, act, (s).Pn *(s).MF)                                                               \
    X(o, float, d_act, (s).Pn *(s).MF)                                                             \
    X(o, float, d_gate, (s).Pn *(s).MF)                                                            \
    X(o, float, d_up, (s).Pn *(s).MF)                                                              \
    X(o, float, sh_gate, (s).n *(s).S)                                                             \
    X(o, float, sh_up, (s).n *(s).S)                                                               \
    X(o, float, sh_act, (s).n *(s).S)                                                              \
    X(o, float, d_sh_act, (s).n *(s).S)                                                            \
    X(o, float, d_sh_gate, (s).n *(s).S)                                                           \
    X(o, float, d_sh_up, (s).n *(s).S)                                                             \
    X(o, float, sh_y, (s).sh *(s).n *(s).D)                                                        \
    X(o, float, d_sh_y, (s).sh *(s).n *(s).D)                                                      \
    X(o, float, sh_logit, (s).sh *(s).n)                                                           \
    X(o, float, d_sh_logit, (s).sh *(s).n)

// backend_cpu.c's own: the head's scratch and every micro-batch's tokens.
#define MT_CPU_BACKEND(X, o, s)                                                                    \
    X(o, float, tmp, (s).n *(s).D)                                                                 \
    X(o, float, xf, (s).n *(s).D)                                                                  \
    X(o, float, dxf, (s).n *(s).D)                                                                 \
    X(o, float, rstd_f, (s).n)                                                                     \
    X(o, int32_t, inputs, (s).n *(s).M)                                                            \
    X(o, int32_t, targets, (s).n *(s).M)                                                           \
    X(o, int32_t, doc_start, (s).docs *(s).n *(s).M)

// backend_cpu.c's routing statistics, with MoE layers: each layer's index among them, and per
// micro-batch, MoE layer and expert the tokens and probability sums; per micro-batch and
// expert the load-balancing loss's gradient. And the layers' frozen images in fp32, with 1 +
// where each layer's lies among them once it has come (engine/frozen.h).
#define MT_CPU_MOE_STATS(X, o, s)                                                                  \
    X(o, int, moe_index, ((s).moe_layers > 0) * (s).L)                                             \
    X(o, int32_t, counts, (s).M *(s).moe_layers *(s).E)                                            \
    X(o, float, psum, (s).M *(s).moe_layers *(s).E)                                                \
    X(o, float, aux_g, ((s).moe_layers > 0) * (s).M * (s).E)                                       \
    X(o, float, frozen, (s).frozen)                                                                \
    X(o, int64_t, frozen_at, ((s).frozen > 0) * (s).L)

// A kept attention output on the CPU: fp32 output and statistics, an allocation each.
#define MT_CPU_ATTENTION_SLOT(X, o, s)                                                             \
    X(o, float, att, (s).n *(s).AO)                                                                \
    X(o, float, lse, (s).n *(s).H)

// A list's buffers and their bytes. align 0: each buffer is an allocation of its own, of its
// exact bytes; else one allocation holds them all, each rounded up to align bytes.
#define MT_BUFFERS_MAX 64
typedef struct {
    const char *name[MT_BUFFERS_MAX];
    uint64_t bytes[MT_BUFFERS_MAX];
    int n;
    uint64_t align;
} mt_buffer_list;

// The X of a list for the plan: adds the buffer to list o.
#define MT_BUFFER_COUNT(o, type, name, count)                                                      \
    mt_buffer_add((o), #name, sizeof(type) * (uint64_t)(count));
// The X of a list for a backend: the field o->name its buffer goes to (the conditional makes
// the compiler check that the field's type is the list's).
#define MT_BUFFER_SLOT(o, type, name, count) (void **)(1 ? &(o)->name : (type **)0),

void mt_buffer_add(mt_buffer_list *l, const char *name, uint64_t bytes);
// Where buffer i starts in a list of one allocation (its bytes rounded up to the alignment).
uint64_t mt_buffer_offset(const mt_buffer_list *l, int i);
// The bytes a list's allocations request in all.
uint64_t mt_buffer_list_bytes(const mt_buffer_list *l);

// Each working set's list, for shape s.
void mt_buffers_cuda_saved(mt_buffer_list *l, const mt_buffer_shape *s, int whole);
void mt_buffers_cuda_layer(mt_buffer_list *l, const mt_buffer_shape *s);
void mt_buffers_cuda_qk_norm(mt_buffer_list *l, const mt_buffer_shape *s);
void mt_buffers_cuda_gate(mt_buffer_list *l, const mt_buffer_shape *s);
void mt_buffers_cuda_gdn(mt_buffer_list *l, const mt_buffer_shape *s);
void mt_buffers_cuda_mla(mt_buffer_list *l, const mt_buffer_shape *s);
void mt_buffers_cuda_head(mt_buffer_list *l, const mt_buffer_shape *s);
void mt_buffers_cuda_moe(mt_buffer_list *l, const mt_buffer_shape *s);
void mt_buffers_cuda_attention_slot(mt_buffer_list *l, const mt_buffer_shape *s);
void mt_buffers_cuda_pinned(mt_buffer_list *l, const mt_buffer_shape *s);
void mt_buffers_cuda_host(mt_buffer_list *l, const mt_buffer_shape *s);
void mt_buffers_cpu_layer(mt_buffer_list *l, const mt_buffer_shape *s);
void mt_buffers_cpu_gdn(mt_buffer_list *l, const mt_buffer_shape *s);
void mt_buffers_cpu_mla(mt_buffer_list *l, const mt_buffer_shape *s);
void mt_buffers_cpu_moe(mt_buffer_list *l, const mt_buffer_shape *s);
void mt_buffers_cpu_backend(mt_buffer_list *l, const mt_buffer_shape *s);
void mt_buffers_cpu_moe_stats(mt_buffer_list *l, const mt_buffer_shape *s);
void mt_buffers_cpu_attention_slot(mt_buffer_list *l, const mt_buffer_shape *s);

// bf16 gradient slots on CUDA: the elements of each of the two device pieces the leaving
// gradients are rounded through (grads_out_cuda.c): a tier piece of the largest group past the
// first device_groups (shard_grads_piece), so that the tier's pieces fit them too.
uint64_t plan_grad_out_piece(const mt_model *m, int device_groups);

#endif
