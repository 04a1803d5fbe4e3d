// The chunked gated delta rule's backward on tensor cores (gated_delta_tc.cu has the forward's
// math). With dO = scale dout, a chunk's state-gradient step, from the gradient dS of the state
// leaving it to the gradient of the state entering it, is
//   dV' = P^T dO + diag(w) K dS,
//   dS0 = exp(gamma_last) dS + Q^T diag(exp(gamma)) dO - W^T dV'
// (zero before a document's first token): two products a chunk, as the forward's V' and S_end.
//
// Like the CUDA-core backward, it recomputes the chunk states from checkpoints: kernels, in
// call order,
// - chunk_list_kernel (gated_delta.cu);
// - a sweep over the segments of 32 chunks, prep_kernel and pass_kernel (gated_delta_tc.cu),
//   keeping the state entering each segment (the checkpoints);
// - for each segment from the last: prep_kernel (W, U and P), pass_kernel from the segment's
//   checkpoint (keeping each chunk's entering state), dpass_kernel (gated_delta_pass.cu,
//   the state gradient in registers: the segment's chunks in reverse, keeping each chunk's
//   leaving-state gradient, carrying dS to the segment before, and each chunk's dV'), and tc_grad's
//   kernels (gated_delta_tc_grad.cu: every gradient of a chunk from its factors, its entering state
//   and its leaving state's gradient).
// No atomics: a rerun gives the same bits.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gated_delta_tc.cuh"
#include "kernels/cuda/ktime.cuh"

namespace {

using namespace gdn;
using wmma::col_major;
using wmma::row_major;

int segments_of(int max_chunks) {
    return (max_chunks + TC_SEG - 1) / TC_SEG;
}

// The backward's scratch after the chunk lists: one segment's factors (with P), then fp32
// states of every (b, h): the checkpoints, a segment's entering states, a segment's leaving
// states' gradients, and the gradient carried between segments.
struct BwdScratch {
    Factors f;
    StateBuf ckpt, states, dstates;
    float *carry;
};

size_t bwd_carve(BwdScratch *s, unsigned char *p, const gdn_args *a, int max_chunks) {
    size_t fbytes = factors_carve(&s->f, p, *a, true, tc_exact());
    size_t one = (size_t)a->B * a->H * a->dk * a->dv;
    int nseg = segments_of(max_chunks);
    float *base = reinterpret_cast<float *>(p + fbytes);
    s->ckpt = StateBuf{base, nseg, 1};
    s->states = StateBuf{base + one * nseg, TC_SEG, 1};
    s->dstates = StateBuf{base + one * (nseg + TC_SEG), TC_SEG, 1};
    s->carry = base + one * (nseg + 2 * TC_SEG);
    return fbytes + sizeof(float) * one * (nseg + 2 * TC_SEG + 1);
}

Span span_of(int sg, int max_chunks) {
    int end = sg * TC_SEG + TC_SEG;
    return Span{sg * TC_SEG, end < max_chunks ? end : max_chunks};
}

// cuda_gated_delta_ref_grads: the chunks' gradients on gated_delta_grad.cu's kernel.
bool ref_grads;

} // namespace

extern "C" void cuda_gated_delta_ref_grads(int on) {
    ref_grads = on != 0;
}

size_t gdn::tc_backward_bytes(const gdn_args *a, int max_chunks) {
    BwdScratch s;
    return lists_bytes(a, max_chunks) + bwd_carve(&s, NULL, a, max_chunks);
}

extern "C" void cuda_gated_delta_backward(const gdn_args *a, int max_chunks,
                                          const cuda_gdn_tensors *t, void *scratch,
                                          cudaStream_t stream) {
    if (!gdn_tc_shape(a)) {
        cuda_gated_delta_backward_ref(a, max_chunks, t, scratch, stream);
        return;
    }
    KtScope kt(stream, KT_ATTENTION);
    if (a->B <= 0 || a->T <= 0) return;
    check_shape(a);
    kt_work(stream, KT_ATTENTION, 3.0 * forward_flops(a), 0, "gated delta backward dk %d", a->dk);
    int32_t *starts, *counts;
    build_lists(a, max_chunks, scratch, &starts, &counts, stream);
    BwdScratch s;
    bwd_carve(&s, static_cast<unsigned char *>(scratch) + lists_bytes(a, max_chunks), a,
              max_chunks);
    Tensors tt = tensors_of(t);
    tt.out = NULL;
    const StateBuf none = {NULL, 0, 1};
    int nseg = segments_of(max_chunks);
    Factors fwd_only = s.f; // the sweep needs W and U alone
    fwd_only.phi = NULL;
    for (int sg = 0; sg + 1 < nseg; sg++) { // the checkpoints: the state entering each segment
        Span span = span_of(sg, max_chunks);
        tc_prep(a, tt, starts, counts, max_chunks, span, fwd_only, stream);
        tc_pass(a, tt, starts, counts, max_chunks, span, s.f, sg > 0 ? s.ckpt : none, sg, s.ckpt,
                sg + 1, none, stream);
    }
    CUDA_CHECK(cudaMemsetAsync(s.carry, 0, sizeof(float) * a->B * a->H * a->dk * a->dv, stream));
    for (int sg = nseg - 1; sg >= 0; sg--) {
        Span span = span_of(sg, max_chunks);
        tc_prep(a, tt, starts, counts, max_chunks, span, s.f, stream);
        tc_pass(a, tt, starts, counts, max_chunks, span, s.f, sg > 0 ? s.ckpt : none, sg, none, 0,
                s.states, stream);
        tc_dpass(a, tt, starts, counts, max_chunks, span, s.f, s.carry, s.dstates, stream);
        if (!ref_grads) {
            tc_grad(a, tt, starts, counts, max_chunks, span, s.f, s.states, s.dstates, stream);
            continue;
        }
        phase_begin(GDN_PHASE_GRAD, stream);
        grad_launch(a, tt, starts, counts, max_chunks, span, s.states, s.dstates, stream);
        phase_end(stream);
    }
}
