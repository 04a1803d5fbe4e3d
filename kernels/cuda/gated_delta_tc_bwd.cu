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
// - unless the forward before it left them (t->ckpt_ready), a sweep over the segments of 32
//   chunks, prep_kernel and pass_kernel (gated_delta_tc.cu), keeping the state entering each
//   segment (the checkpoints, t->ckpt: the forward writes the same states, bit for bit);
// - for each segment from the last: prep_kernel (W, U and P), pass_kernel from the segment's
//   checkpoint (keeping each chunk's entering state), dpass_kernel (gated_delta_pass.cu,
//   the state gradient in registers: the segment's chunks in reverse, keeping each chunk's
//   leaving-state gradient, carrying dS to the segment before, and each chunk's dV'), and tc_grad's
//   kernels (gated_delta_tc_grad.cu: every gradient of a chunk from its factors, its entering state
//   and its leaving state's gradient).
// The passes run on side streams (gated_delta_tc.cuh's lanes): the sweep's beside the next
// segment's prep, and a segment's pass and state-gradient pass (which needs no states) side by
// side, beside the previous segment's prep and then its own gradients' kernels beside the
// passes of the segment before. Two sets of a segment's buffers let neighbouring segments
// overlap.
// No atomics: a rerun gives the same bits.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gated_delta_tc.cuh"
#include "kernels/cuda/ktime.cuh"

namespace {

using namespace gdn;

// cuda_gated_delta_ref_grads: the chunks' gradients on gated_delta_grad.cu's kernel, which reads
// the kept states in fp32.
bool ref_grads;

// The backward's scratch after the chunk lists: two sets (segments take them in turn; one where
// there is a single segment, sets_of) of one segment's factors (with P), its entering states and
// its leaving states' gradients (split, or fp32 for ref_grads), then the fp32 gradient of every
// (b, h)'s state carried between segments.
struct BwdScratch {
    Factors f[2];
    Kept states[2], dstates[2];
    float *carry;
};

size_t bwd_carve(BwdScratch *s, unsigned char *p, const gdn_args *a, int max_chunks) {
    size_t off = 0, one = (size_t)a->B * a->H * a->dk * a->dv;
    int sets = sets_of(max_chunks);
    bool exact = tc_exact();
    for (int i = 0; i < sets; i++) off += factors_carve(&s->f[i], p + off, *a, true, exact);
    Carve cv = {p ? p + off : NULL, 0};
    for (int i = 0; i < sets; i++) {
        s->states[i] = take_kept(cv, *a, TC_SEG, exact, ref_grads);
        s->dstates[i] = take_kept(cv, *a, TC_SEG, exact, ref_grads);
    }
    if (sets == 1) // never taken
        s->f[1] = s->f[0], s->states[1] = s->states[0], s->dstates[1] = s->dstates[0];
    s->carry = cv.take<float>(one);
    return off + cv.off;
}

// The checkpoints (ckpt: the state entering segment sg at slot sg - 1), segment sg's pass on the
// pass lane beside the next one's prep (W and U alone) on `stream`. Returns with `stream` after
// the last pass.
void sweep(const gdn_args *a, const Tensors &tt, const int32_t *starts, const int32_t *counts,
           int max_chunks, const BwdScratch &s, StateBuf ckpt, cudaStream_t stream) {
    int nseg = segments_of(max_chunks);
    if (nseg < 2) return;
    Factors f[2] = {s.f[0], s.f[1]};
    f[0].phi = f[1].phi = NULL; // the sweep needs W and U alone
    const StateBuf none = {NULL, 0, 1};
    const Kept unkept = {NULL, NULL, NULL, 0};
    cudaStream_t pass = lane(LANE_PASS, stream);
    tc_prep(a, tt, starts, counts, max_chunks, span_at(0, max_chunks), f[0], stream);
    after(pass, mark(MARK_PREP, stream));
    cudaEvent_t passed = NULL;
    for (int sg = 0; sg + 1 < nseg; sg++) {
        int k = sg % 2;
        if (passed) after(stream, passed); // pass(sg - 1) before prep(sg + 1) takes its set
        tc_pass(a, tt, starts, counts, max_chunks, span_at(sg, max_chunks), f[k],
                sg > 0 ? ckpt : none, sg - 1, ckpt, sg, unkept, pass);
        passed = mark(MARK_PASS, pass);
        if (sg + 2 < nseg) {
            tc_prep(a, tt, starts, counts, max_chunks, span_at(sg + 1, max_chunks), f[1 - k],
                    stream);
            after(pass, mark(MARK_PREP, stream));
        }
    }
    after(stream, passed);
}

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
    const StateBuf none = {NULL, 0, 1}, ckpt = checkpoints(a, max_chunks, t);
    int nseg = segments_of(max_chunks);
    if (!t->ckpt_ready) sweep(a, tt, starts, counts, max_chunks, s, ckpt, stream);
    // From the last segment: its pass (the entering states, from its checkpoint) on the pass lane
    // and its state-gradient pass (which needs no states) on the dpass lane, side by side, beside
    // the previous segment's prep on `stream`; then its gradients on `stream`. Set sg % 2 is free
    // again once the gradients of segment sg + 2 are done, which prep(sg) follows on `stream`.
    CUDA_CHECK(cudaMemsetAsync(s.carry, 0, sizeof(float) * a->B * a->H * a->dk * a->dv, stream));
    cudaStream_t pass = lane(LANE_PASS, stream), dpass = lane(LANE_DPASS, stream);
    tc_prep(a, tt, starts, counts, max_chunks, span_at(nseg - 1, max_chunks), s.f[(nseg - 1) % 2],
            stream);
    cudaEvent_t prepped = mark(MARK_PREP, stream);
    for (int sg = nseg - 1; sg >= 0; sg--) {
        Span span = span_at(sg, max_chunks);
        int k = sg % 2;
        after(pass, prepped);
        tc_pass(a, tt, starts, counts, max_chunks, span, s.f[k], sg > 0 ? ckpt : none, sg - 1, none,
                0, s.states[k], pass);
        cudaEvent_t passed = mark(MARK_PASS, pass);
        after(dpass, prepped);
        tc_dpass(a, tt, starts, counts, max_chunks, span, s.f[k], s.carry, s.dstates[k], dpass);
        cudaEvent_t dpassed = mark(MARK_DPASS, dpass);
        if (sg > 0) {
            tc_prep(a, tt, starts, counts, max_chunks, span_at(sg - 1, max_chunks), s.f[1 - k],
                    stream);
            prepped = mark(MARK_PREP, stream);
        }
        after(stream, passed);
        after(stream, dpassed);
        if (!ref_grads) {
            tc_grad(a, tt, starts, counts, max_chunks, span, s.f[k], s.states[k], s.dstates[k],
                    stream);
            continue;
        }
        phase_begin(GDN_PHASE_GRAD, stream);
        grad_launch(a, tt, starts, counts, max_chunks, span, fp32_states(s.states[k]),
                    fp32_states(s.dstates[k]), stream);
        phase_end(stream);
    }
}
