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
//   checkpoint (keeping each chunk's entering state), dpass_kernel (grid dv / pass_cols
//   column blocks, H, B: the segment's chunks in reverse, keeping each chunk's leaving-state
//   gradient, carrying dS to the segment before, and each chunk's dV'), and tc_grad's kernels
//   (gated_delta_tc_grad.cu: every gradient of a chunk from its factors, its entering state and
//   its leaving state's gradient).
// No atomics: a rerun gives the same bits.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gated_delta_tc.cuh"
#include "kernels/cuda/ktime.cuh"

namespace {

using namespace gdn;
using wmma::col_major;
using wmma::row_major;

struct DpassSmem {
    float *dS, *DV;      // [dk, ldf32(bv)], [L, ldf32(bv)]
    Split dSs, W, P, dO; // dS [dk, bv], W [L, dk], P [L, L], dO [L, bv]
    Split EO, DVs;       // diag(exp(gamma)) dO [L, bv], dV' [L, bv]
    bf *K, *Q;           // [L, ldb16(dk)]
    float *gam, *beta, *eg, *w;
};

__host__ __device__ DpassSmem dpass_smem(unsigned char *base, int dk, int bv, bool exact,
                                         size_t *bytes) {
    Carve cv = {base, 0};
    DpassSmem s;
    s.dS = cv.take<float>(dk * ldf32(bv));
    s.DV = cv.take<float>(L * ldf32(bv));
    s.dSs = take_split(cv, dk, bv, exact);
    s.W = take_split(cv, L, dk, exact);
    s.P = take_split(cv, L, L, exact);
    s.dO = take_split(cv, L, bv, exact);
    s.EO = take_split(cv, L, bv, exact);
    s.DVs = take_split(cv, L, bv, exact);
    s.K = cv.take<bf>(L * ldb16(dk));
    s.Q = cv.take<bf>(L * ldb16(dk));
    float *g = cv.take<float>(4 * L);
    s.gam = g, s.beta = g + L, s.eg = g + 2 * L, s.w = g + 3 * L;
    *bytes = cv.off;
    return s;
}

// The chunk's W, P, K, Q and gates; ends with a barrier.
__device__ void dpass_load(const DpassSmem &s, const gdn_args &a, const Tensors &t,
                           const Factors &f, long idx, int b, int h, int t0, int Lc) {
    int dk = a.dk, hk = h / (a.H / a.HK);
    long qks = (long)a.HK * dk, go = gdn_gate_off(&a, b, t0, h);
    load_split_factor(s.W, f.whi, f.wlo, idx * L * dk, dk);
    load_split_factor(s.P, f.phi, f.plo, idx * L * L, L);
    load_bf16_rows(s.K, t.k + gdn_qk_off(&a, b, t0, hk), qks, Lc, dk);
    load_bf16_rows(s.Q, t.q + gdn_qk_off(&a, b, t0, hk), qks, Lc, dk);
    load_gates_padded(s.gam, s.beta, s.eg, s.w, t.g + go, t.beta + go, a.H, Lc);
    __syncthreads();
}

// dV' = diag(w) (K dS) (through DV, its rows scaled) + P^T dO, into DV (a warp a tile).
__device__ void dpass_dvprime(const DpassSmem &s, int dk, int bv) {
    int ldv = ldf32(bv);
    for (int id = threadIdx.x / 32; id < 4 * (bv / 16); id += TC_WARPS) {
        int m0 = id % 4 * 16, c0 = id / 4 * 16;
        float *d = s.DV + m0 * ldv + c0;
        FragC acc;
        wmma::fill_fragment(acc, 0.0f);
        mma_split<row_major, row_major>(acc, s.K, NULL, ldb16(dk), s.dSs.hi, s.dSs.lo, s.dSs.ld, m0,
                                        c0, dk);
        wmma::store_matrix_sync(d, acc, ldv, wmma::mem_row_major);
        scale_tile_rows(d, ldv, s.w + m0);
        wmma::load_matrix_sync(acc, d, ldv, wmma::mem_row_major);
        mma_split<col_major, row_major>(acc, s.P.hi, s.P.lo, s.P.ld, s.dO.hi, s.dO.lo, s.dO.ld, m0,
                                        c0, L);
        wmma::store_matrix_sync(d, acc, ldv, wmma::mem_row_major);
    }
}

// dS = decay dS + Q^T diag(exp(gamma)) dO - W^T dV', or zero where the chunk starts a document.
__device__ void dpass_update(const DpassSmem &s, int dk, int bv, float decay, bool reset) {
    int lds = ldf32(bv), nb = bv / 16, ld = ldb16(dk);
    for (int id = threadIdx.x / 32; id < (dk / 16) * nb; id += TC_WARPS) {
        int m0 = id / nb * 16, c0 = id % nb * 16;
        FragC acc, wd;
        wmma::load_matrix_sync(acc, s.dS + m0 * lds + c0, lds, wmma::mem_row_major);
        for (int i = 0; i < acc.num_elements; i++) acc.x[i] *= decay;
        mma_split<col_major, row_major>(acc, s.Q, NULL, ld, s.EO.hi, s.EO.lo, s.EO.ld, m0, c0, L);
        wmma::fill_fragment(wd, 0.0f);
        mma_split<col_major, row_major>(wd, s.W.hi, s.W.lo, s.W.ld, s.DVs.hi, s.DVs.lo, s.DVs.ld,
                                        m0, c0, L);
        for (int i = 0; i < acc.num_elements; i++) acc.x[i] = reset ? 0.0f : acc.x[i] - wd.x[i];
        wmma::store_matrix_sync(s.dS + m0 * lds + c0, acc, lds, wmma::mem_row_major);
    }
}

// Grid (dv / bv, H, B): walks the chunks of span back with dS (the gradient of the state leaving
// the chunk; carry holds it for the span's last chunk on entry, [B, H, dk, dv], and gets it for
// the chunk before the span on return), keeping it in slot c - span.begin of keep.
__global__ void __launch_bounds__(TC_THREADS)
    dpass_kernel(gdn_args a, Tensors t, const int32_t *starts, const int32_t *counts,
                 int max_chunks, Span span, Factors f, float *carry, StateBuf keep, int bv) {
    extern __shared__ __align__(128) unsigned char smem[];
    int b = blockIdx.z, h = blockIdx.y, n0 = blockIdx.x * bv, dk = a.dk, dv = a.dv;
    int c1 = min(span.end, counts[b]), lds = ldf32(bv), ldv = ldf32(bv);
    if (span.begin >= c1) return; // the row has no chunk in the span: carry stays
    size_t bytes;
    DpassSmem s = dpass_smem(smem, dk, bv, f.wlo != NULL, &bytes);
    const int32_t *row = starts + (long)b * (max_chunks + 1);
    float *carry_bh = carry + ((long)b * a.H + h) * dk * dv;
    for (int e = threadIdx.x; e < dk * bv; e += blockDim.x)
        s.dS[e / bv * lds + e % bv] = carry_bh[(long)(e / bv) * dv + n0 + e % bv];
    for (int c = c1 - 1; c >= span.begin; c--) {
        int slot = c - span.begin, t0 = row[c], Lc = row[c + 1] - t0;
        __syncthreads(); // the previous chunk is done with the tiles
        dpass_load(s, a, t, f, factor_index(a, b, h, slot), b, h, t0, Lc);
        const float *dout = t.dout + gdn_v_off(&a, b, t0, h) + n0;
        long vs = (long)a.H * dv;
        load_split_rows(s.dO, dout, vs, Lc, L, bv, NULL, a.scale);
        load_split_rows(s.EO, dout, vs, Lc, L, bv, s.eg, a.scale);
        float *kept = state_at(keep, a, b, h, slot);
        for (int e = threadIdx.x; e < dk * bv; e += blockDim.x) {
            float x = s.dS[e / bv * lds + e % bv];
            kept[(long)(e / bv) * dv + n0 + e % bv] = x;
            split_store(s.dSs, e / bv, e % bv, x);
        }
        __syncthreads();
        dpass_dvprime(s, dk, bv);
        __syncthreads();
        float *dvp = f.dvp + factor_index(a, b, h, slot) * L * dv + n0;
        for (int e = threadIdx.x; e < L * bv; e += blockDim.x) {
            float x = s.DV[e / bv * ldv + e % bv];
            dvp[(long)(e / bv) * dv + e % bv] = x; // for the chunk's gradients
            split_store(s.DVs, e / bv, e % bv, x);
        }
        __syncthreads();
        dpass_update(s, dk, bv, s.eg[Lc - 1], starts_document(a, b, t0));
    }
    __syncthreads();
    for (int e = threadIdx.x; e < dk * bv; e += blockDim.x)
        carry_bh[(long)(e / bv) * dv + n0 + e % bv] = s.dS[e / bv * lds + e % bv];
}

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

void dpass_launch(const gdn_args *a, const Tensors &t, const int32_t *starts, const int32_t *counts,
                  int max_chunks, Span span, const BwdScratch &s, cudaStream_t stream) {
    int bv = pass_cols(a);
    size_t bytes;
    dpass_smem(NULL, a->dk, bv, s.f.wlo != NULL, &bytes);
    CUDA_CHECK(cudaFuncSetAttribute(dpass_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)bytes));
    phase_begin(GDN_PHASE_DPASS, stream);
    dpass_kernel<<<dim3(a->dv / bv, a->H, a->B), TC_THREADS, bytes, stream>>>(
        *a, t, starts, counts, max_chunks, span, s.f, s.carry, s.dstates, bv);
    CUDA_CHECK_LAUNCH();
    phase_end(stream);
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
        dpass_launch(a, tt, starts, counts, max_chunks, span, s, stream);
        if (!ref_grads) {
            tc_grad(a, tt, starts, counts, max_chunks, span, s.f, s.states, s.dstates, stream);
            continue;
        }
        phase_begin(GDN_PHASE_GRAD, stream);
        grad_launch(a, tt, starts, counts, max_chunks, span, s.states, s.dstates, stream);
        phase_end(stream);
    }
}
