// The chunked gated delta rule on CUDA cores (cuda_gated_delta_*_ref): the reference the
// tensor-core kernels (gated_delta_tc.cu) are checked against, and the path of head dims that
// are not multiples of 16. The math of kernels/cpu/gated_delta_chunked.c (its header states it),
// in fp32 from bf16 q, k, v. Within a chunk of L <= 64 tokens entered with
// state S0, with gamma the cumulative sum of g and D_ij = exp(gamma_i - gamma_j):
//   M_ij = D_ij k_i.k_j (j < i), A_ij = beta_i M_ij, P_ij = D_ij q_i.k_j (j <= i);
//   Delta = (I + A)^-1 R, R_i = beta_i (v_i - exp(gamma_i) S0^T k_i)   (fp32 substitution);
//   o_i = scale (exp(gamma_i) S0^T q_i + sum_j P_ij Delta_j);
//   S_end = exp(gamma_last) S0 + sum_j exp(gamma_last - gamma_j) k_j Delta_j^T.
// Every column n of S, Delta and R is independent of the others given M and P, so the passes
// over chunks run one block per (b, value head, 32 state columns).
//
// Kernels, in call order:
// - chunk_list_kernel: each row's chunk starts (a chunk starts where t - doc_start[t] is a
//   multiple of 64: at each document's first token and every 64 tokens after).
// - forward_pass_kernel: per (b, h, column slice) the chunks in order, S in shared memory; writes
//   out (forward), or keeps entering states (backward: a checkpoint every SEG chunks, then the
//   states of one segment of SEG chunks from its checkpoint).
// - backward_pass_kernel: per (b, h, column slice) a segment's chunks in reverse: the gradient of
//   each chunk's final state, from dout, without Delta (dS0 needs M, P and dR only).
// - grad_kernel: per (b, key head, chunk of the segment), all of a chunk's gradients from its S0
//   and dS_end, the key head's value heads one after the other, so dq and dk add up in a fixed
//   order.
// No atomics anywhere: every output element has one owner thread.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gated_delta.cuh"
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/cuda/ktime.cuh"

#include <stdio.h>
#include <stdlib.h>

namespace {

using namespace gdn;

// Chunks a backward segment: the backward keeps ceil(max_chunks / SEG) checkpoints and 2 SEG + 1
// states of every (b, h) (at 32k tokens 80 states instead of 2 x 512), and its grad launches
// have SEG x HK x B blocks.
const int SEG = 32;

// ---- chunk lists -------------------------------------------------------------------------

// starts[b (max_chunks + 1) + i]: the first token of row b's chunk i, then T after the last;
// counts[b]: the row's chunks. One block a row, a block-wide prefix count per 1024 tokens.
__global__ void __launch_bounds__(LIST_THREADS)
    chunk_list_kernel(int32_t *starts, int32_t *counts, const int32_t *doc_start, int T,
                      int max_chunks) {
    __shared__ int warp_total[LIST_THREADS / 32];
    __shared__ int base;
    int b = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int32_t *row = starts + (long)b * (max_chunks + 1);
    if (threadIdx.x == 0) base = 0;
    __syncthreads();
    for (int t0 = 0; t0 < T; t0 += LIST_THREADS) {
        int t = t0 + threadIdx.x, flag = 0;
        if (t < T) {
            int first = doc_start ? doc_start[(long)b * T + t] : 0;
            flag = t == 0 || (t - first) % L == 0;
        }
        unsigned ballot = __ballot_sync(0xffffffffu, flag);
        if (lane == 0) warp_total[warp] = __popc(ballot);
        __syncthreads();
        int idx = base + __popc(ballot & ((1u << lane) - 1u));
        for (int w = 0; w < warp; w++) idx += warp_total[w];
        if (flag && idx < max_chunks) row[idx] = t;
        __syncthreads();
        if (threadIdx.x == 0)
            for (int w = 0; w < LIST_THREADS / 32; w++) base += warp_total[w];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        if (base > max_chunks) {
            printf("gated_delta: row %d has %d chunks, more than max_chunks %d\n", b, base,
                   max_chunks);
            __trap();
        }
        row[base] = T;
        counts[b] = base;
    }
}

// ---- the passes over chunks --------------------------------------------------------------

// A pass block's shared memory: K and Q tiles, the gates, M and P, and three fp32 tiles:
// S or dS [dk, COLS], and two [L, COLS].
struct PassSmem {
    bf *K, *Q;
    float *gam, *beta, *eg, *w, *M, *P, *S, *X, *Y;
};

__host__ __device__ size_t pass_smem_bytes(int dk) {
    return 2 * sizeof(bf) * L * kstride(dk) +
           sizeof(float) * (4 * L + 2 * L * L + (size_t)dk * COLS + 2 * L * COLS);
}

__device__ PassSmem pass_smem(unsigned char *base, int dk) {
    PassSmem s;
    s.K = reinterpret_cast<bf *>(base);
    s.Q = s.K + L * kstride(dk);
    float *p = reinterpret_cast<float *>(s.Q + L * kstride(dk));
    s.gam = p, s.beta = p + L, s.eg = p + 2 * L, s.w = p + 3 * L, s.M = p + 4 * L;
    s.P = s.M + L * L, s.S = s.P + L * L, s.X = s.S + dk * COLS, s.Y = s.X + L * COLS;
    return s;
}

// K, Q, the gates and M, P of chunk [t0, t0 + Lc) of (b, h); ends with a block barrier.
__device__ void load_chunk(const PassSmem &s, const gdn_args &a, const Tensors &t, int b, int h,
                           int t0, int Lc) {
    int hk = h / (a.H / a.HK);
    long qk_stride = (long)a.HK * a.dk, go = gdn_gate_off(&a, b, t0, h);
    load_rows(s.K, t.k + gdn_qk_off(&a, b, t0, hk), qk_stride, Lc, a.dk);
    load_rows(s.Q, t.q + gdn_qk_off(&a, b, t0, hk), qk_stride, Lc, a.dk);
    if (threadIdx.x == 0) load_gates(s.gam, s.beta, s.eg, s.w, t.g + go, t.beta + go, a.H, Lc);
    __syncthreads();
    chunk_mats(s.M, s.P, s.K, s.Q, s.gam, Lc, a.dk);
    __syncthreads();
}

// Columns n0 .. n0 + nc - 1 of a block-owned [dk, COLS] tile to a [dk, dv] state, and back
// (columns past dv read as zeros).
__device__ void store_slice(float *dst, const float *S, int dk, int dv, int n0, int nc) {
    for (int e = threadIdx.x; e < dk * COLS; e += blockDim.x)
        if (e % COLS < nc) dst[(long)(e / COLS) * dv + n0 + e % COLS] = S[e];
}
__device__ void load_slice(float *S, const float *src, int dk, int dv, int n0, int nc) {
    for (int e = threadIdx.x; e < dk * COLS; e += blockDim.x)
        S[e] = e % COLS < nc ? src[(long)(e / COLS) * dv + n0 + e % COLS] : 0.0f;
}

// Grid (column slices, H, B): the chunks of span. The state entering span.begin is slot
// entry_slot of `entry` (NULL: zero, span.begin must be 0). out != NULL: writes the outputs;
// keep.p != NULL: keeps the entering state of every keep.every-th chunk of the span.
__global__ void __launch_bounds__(THREADS)
    forward_pass_kernel(gdn_args a, Tensors t, const int32_t *starts, const int32_t *counts,
                        int max_chunks, Span span, StateBuf entry, int entry_slot, StateBuf keep) {
    extern __shared__ __align__(16) unsigned char smem[];
    int b = blockIdx.z, h = blockIdx.y, n0 = blockIdx.x * COLS, dk = a.dk;
    int nc = min(COLS, a.dv - n0), c1 = min(span.end, counts[b]);
    if (span.begin >= c1) return; // the row has no chunk in the span
    PassSmem s = pass_smem(smem, dk);
    float *S = s.S, *Dl = s.X, *Oa = s.Y;
    const int32_t *row = starts + (long)b * (max_chunks + 1);
    if (entry.p)
        load_slice(S, state_at(entry, a, b, h, entry_slot), dk, a.dv, n0, nc);
    else
        for (int e = threadIdx.x; e < dk * COLS; e += blockDim.x) S[e] = 0.0f;
    for (int c = span.begin; c < c1; c++) {
        int t0 = row[c], Lc = row[c + 1] - t0;
        __syncthreads(); // the previous chunk is done with the tiles
        if (starts_document(a, b, t0))
            for (int e = threadIdx.x; e < dk * COLS; e += blockDim.x) S[e] = 0.0f;
        load_chunk(s, a, t, b, h, t0, Lc);
        if (keep.p && (c - span.begin) % keep.every == 0)
            store_slice(state_at(keep, a, b, h, (c - span.begin) / keep.every), S, dk, a.dv, n0,
                        nc);
        int ks = kstride(dk);
        const bf *v = t.v + gdn_v_off(&a, b, t0, h) + n0;
        for (int e = threadIdx.x; e < Lc * COLS; e += blockDim.x) {
            int i = e / COLS, n = e % COLS;
            if (n >= nc) { // a column past dv: zeros, which the state update keeps at 0
                Dl[e] = Oa[e] = 0.0f;
                continue;
            }
            float sk = 0.0f, sq = 0.0f;
            for (int m = 0; m < dk; m++) {
                float sv = S[m * COLS + n];
                sk += sv * f(s.K[i * ks + m]);
                sq += sv * f(s.Q[i * ks + m]);
            }
            Dl[e] = s.beta[i] * (f(v[(long)i * a.H * a.dv + n]) - s.eg[i] * sk);
            Oa[e] = s.eg[i] * sq;
        }
        __syncthreads();
        solve_lower(Dl, COLS, nc, s.M, s.beta, Lc);
        if (t.out) {
            bf *o = t.out + gdn_v_off(&a, b, t0, h) + n0;
            for (int e = threadIdx.x; e < Lc * COLS; e += blockDim.x) {
                int i = e / COLS, n = e % COLS;
                if (n >= nc) continue;
                float acc = Oa[e];
                for (int j = 0; j <= i; j++) acc += s.P[i * L + j] * Dl[j * COLS + n];
                o[(long)i * a.H * a.dv + n] = __float2bfloat16(a.scale * acc);
            }
        }
        float decay = s.eg[Lc - 1]; // each thread updates its own S entries from Dl and K only
        for (int e = threadIdx.x; e < dk * COLS; e += blockDim.x) {
            int m = e / COLS, n = e % COLS;
            float acc = decay * S[e];
            for (int j = 0; j < Lc; j++) acc += s.w[j] * f(s.K[j * ks + m]) * Dl[j * COLS + n];
            S[e] = acc;
        }
    }
}

// Grid (column slices, H, B): walks the chunks of span back with dS (the gradient of the state
// leaving the chunk; carry holds it for the span's last chunk on entry, [B, H, dk, dv], and
// gets it for the chunk before the span on return), keeps it in slot c - span.begin of keep for
// each chunk c, then moves it to the chunk's entering state:
//   dDelta_j = w_j dS^T k_j + sum_{i >= j} P_ij dO_i,  dR = (I + A)^-T dDelta,
//   dS0 = exp(gamma_last) dS + sum_i exp(gamma_i) q_i dO_i^T - sum_i beta_i exp(gamma_i) k_i
//   dR_i^T,
// with dO = scale dout; zero before a document's first token.
__global__ void __launch_bounds__(THREADS)
    backward_pass_kernel(gdn_args a, Tensors t, const int32_t *starts, const int32_t *counts,
                         int max_chunks, Span span, float *carry, StateBuf keep) {
    extern __shared__ __align__(16) unsigned char smem[];
    int b = blockIdx.z, h = blockIdx.y, n0 = blockIdx.x * COLS, dk = a.dk, ks = kstride(dk);
    int nc = min(COLS, a.dv - n0);
    PassSmem s = pass_smem(smem, dk);
    float *dS = s.S, *dO = s.X, *dR = s.Y;
    const int32_t *row = starts + (long)b * (max_chunks + 1);
    int c1 = min(span.end, counts[b]);
    if (span.begin >= c1) return; // the row has no chunk in the span: carry stays
    float *carry_bh = carry + ((long)b * a.H + h) * dk * a.dv;
    load_slice(dS, carry_bh, dk, a.dv, n0, nc);
    for (int c = c1 - 1; c >= span.begin; c--) {
        int t0 = row[c], Lc = row[c + 1] - t0;
        __syncthreads();
        const float *dout = t.dout + gdn_v_off(&a, b, t0, h) + n0;
        for (int e = threadIdx.x; e < Lc * COLS; e += blockDim.x) {
            int i = e / COLS, n = e % COLS;
            dO[e] = n < nc ? a.scale * dout[(long)i * a.H * a.dv + n] : 0.0f;
        }
        load_chunk(s, a, t, b, h, t0, Lc);
        store_slice(state_at(keep, a, b, h, c - span.begin), dS, dk, a.dv, n0, nc);
        for (int e = threadIdx.x; e < Lc * COLS; e += blockDim.x) {
            int j = e / COLS, n = e % COLS;
            float ds = 0.0f, po = 0.0f;
            for (int m = 0; m < dk; m++) ds += f(s.K[j * ks + m]) * dS[m * COLS + n];
            for (int i = j; i < Lc; i++) po += s.P[i * L + j] * dO[i * COLS + n];
            dR[e] = s.w[j] * ds + po;
        }
        __syncthreads();
        solve_upper(dR, COLS, nc, s.M, s.beta, Lc);
        bool reset = starts_document(a, b, t0);
        float decay = s.eg[Lc - 1];
        for (int e = threadIdx.x; e < dk * COLS; e += blockDim.x) {
            int m = e / COLS, n = e % COLS;
            float acc = decay * dS[e];
            for (int i = 0; i < Lc; i++)
                acc += s.eg[i] * (f(s.Q[i * ks + m]) * dO[i * COLS + n] -
                                  s.beta[i] * f(s.K[i * ks + m]) * dR[i * COLS + n]);
            dS[e] = reset ? 0.0f : acc;
        }
    }
    __syncthreads();
    store_slice(carry_bh, dS, dk, a.dv, n0, nc);
}

int slices(int dv) {
    return (dv + COLS - 1) / COLS;
}

// The backward's segments of SEG chunks: checkpoints at their starts, then per segment (last
// first) the states of its chunks, their gradients and the gradient carried to the one before.
int segments(int max_chunks) {
    return (max_chunks + SEG - 1) / SEG;
}

// Floats of n states of every (b, h).
size_t states_floats(const gdn_args *a, long n) {
    return (size_t)a->B * a->H * n * a->dk * a->dv;
}

// The chunk lists and the passes' arguments, shared by the launches of one call.
struct Call {
    const gdn_args *a;
    Tensors t;
    const int32_t *starts, *counts;
    int max_chunks;
    cudaStream_t stream;
};

void forward_pass(const Call &c, Span span, StateBuf entry, int entry_slot, StateBuf keep) {
    size_t smem = pass_smem_bytes(c.a->dk);
    CUDA_CHECK(cudaFuncSetAttribute(forward_pass_kernel,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid(slices(c.a->dv), c.a->H, c.a->B);
    forward_pass_kernel<<<grid, THREADS, smem, c.stream>>>(
        *c.a, c.t, c.starts, c.counts, c.max_chunks, span, entry, entry_slot, keep);
    CUDA_CHECK_LAUNCH();
}

void backward_pass(const Call &c, Span span, float *carry, StateBuf keep) {
    size_t smem = pass_smem_bytes(c.a->dk);
    CUDA_CHECK(cudaFuncSetAttribute(backward_pass_kernel,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid(slices(c.a->dv), c.a->H, c.a->B);
    backward_pass_kernel<<<grid, THREADS, smem, c.stream>>>(*c.a, c.t, c.starts, c.counts,
                                                            c.max_chunks, span, carry, keep);
    CUDA_CHECK_LAUNCH();
}

} // namespace

size_t gdn::lists_bytes(const gdn_args *a, int max_chunks) {
    size_t n = sizeof(int32_t) * ((size_t)a->B * (max_chunks + 1) + a->B);
    return (n + 255) / 256 * 256;
}

void gdn::check_shape(const gdn_args *a) {
    if (a->dk > MAX_DIM || a->dv > MAX_DIM || a->dk < 1 || a->dv < 1 || a->H % a->HK != 0) {
        fprintf(stderr,
                "megatrain: gated_delta.cu: dk %d, dv %d, H %d, HK %d: need dk, dv <= %d "
                "and H a multiple of HK\n",
                a->dk, a->dv, a->H, a->HK, MAX_DIM);
        exit(2);
    }
}

Tensors gdn::tensors_of(const cuda_gdn_tensors *t) {
    return Tensors{reinterpret_cast<const bf *>(t->q),
                   reinterpret_cast<const bf *>(t->k),
                   reinterpret_cast<const bf *>(t->v),
                   t->g,
                   t->beta,
                   reinterpret_cast<bf *>(t->out),
                   t->dout,
                   t->dq,
                   t->dk,
                   t->dv,
                   t->dg,
                   t->dbeta};
}

// The chunk lists at the start of scratch; returns (starts, counts).
void gdn::build_lists(const gdn_args *a, int max_chunks, void *scratch, int32_t **starts,
                      int32_t **counts, cudaStream_t stream) {
    *starts = static_cast<int32_t *>(scratch);
    *counts = *starts + (size_t)a->B * (max_chunks + 1);
    chunk_list_kernel<<<a->B, LIST_THREADS, 0, stream>>>(*starts, *counts, a->doc_start, a->T,
                                                         max_chunks);
    CUDA_CHECK_LAUNCH();
}

// Multiply-adds a token and value head, the chunked form's (M, P, the state reads and update,
// the solve); the backward counts as 3 forwards.
double gdn::forward_flops(const gdn_args *a) {
    double per = 2.0 * L * a->dk + 3.0 * a->dk * a->dv + 1.5 * L * a->dv;
    return 2.0 * per * a->B * a->T * a->H;
}

extern "C" size_t cuda_gated_delta_scratch_bytes_ref(const gdn_args *a, int max_chunks,
                                                     int backward) {
    long states = segments(max_chunks) + 2 * SEG + 1;
    return lists_bytes(a, max_chunks) + (backward ? sizeof(float) * states_floats(a, states) : 0);
}

extern "C" void cuda_gated_delta_forward_ref(const gdn_args *a, int max_chunks,
                                             const cuda_gdn_tensors *t, void *scratch,
                                             cudaStream_t stream) {
    KtScope kt(stream, KT_ATTENTION);
    if (a->B <= 0 || a->T <= 0) return;
    check_shape(a);
    kt_work(stream, KT_ATTENTION, forward_flops(a), 0, "gated delta forward dk %d", a->dk);
    int32_t *starts, *counts;
    build_lists(a, max_chunks, scratch, &starts, &counts, stream);
    const Call c = {a, tensors_of(t), starts, counts, max_chunks, stream};
    forward_pass(c, Span{0, max_chunks}, StateBuf{NULL, 0, 1}, 0, StateBuf{NULL, 0, 1});
}

// The states pass once over all chunks keeping a checkpoint every SEG chunks; then for each
// segment from the last: its chunks' states again from its checkpoint, the gradient pass over
// it (carry: the state gradient between segments), and its chunks' gradients.
extern "C" void cuda_gated_delta_backward_ref(const gdn_args *a, int max_chunks,
                                              const cuda_gdn_tensors *t, void *scratch,
                                              cudaStream_t stream) {
    KtScope kt(stream, KT_ATTENTION);
    if (a->B <= 0 || a->T <= 0) return;
    check_shape(a);
    kt_work(stream, KT_ATTENTION, 3.0 * forward_flops(a), 0, "gated delta backward dk %d", a->dk);
    int32_t *starts, *counts;
    build_lists(a, max_chunks, scratch, &starts, &counts, stream);
    int nseg = segments(max_chunks);
    float *ckpt =
        reinterpret_cast<float *>(static_cast<char *>(scratch) + lists_bytes(a, max_chunks));
    float *states = ckpt + states_floats(a, nseg), *dstates = states + states_floats(a, SEG);
    float *carry = dstates + states_floats(a, SEG);
    Call c = {a, tensors_of(t), starts, counts, max_chunks, stream};
    c.t.out = NULL;
    const StateBuf ckpts = {ckpt, nseg, SEG}, seg_states = {states, SEG, 1};
    const StateBuf seg_dstates = {dstates, SEG, 1};
    forward_pass(c, Span{0, max_chunks}, StateBuf{NULL, 0, 1}, 0, ckpts);
    CUDA_CHECK(cudaMemsetAsync(carry, 0, sizeof(float) * states_floats(a, 1), stream));
    for (int sg = nseg - 1; sg >= 0; sg--) {
        Span span = {sg * SEG, sg * SEG + SEG < max_chunks ? sg * SEG + SEG : max_chunks};
        forward_pass(c, span, ckpts, sg, seg_states);
        backward_pass(c, span, carry, seg_dstates);
        grad_launch(a, c.t, starts, counts, max_chunks, span, seg_states, seg_dstates, stream);
    }
}
