// The pieces the two state passes share (gated_delta_pass.cu, the forward's; gated_delta_dpass.cu,
// the backward's state gradient): the chunk tiles' copies, a warp's accumulators in and out of
// memory and through its staging tile, the chunk's decays, and the choice of a block's warps.
// gated_delta_pass.cu's header says how a pass works.
#pragma once
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gated_delta_tc.cuh"
#include "kernels/cuda/mma.cuh"

// The warps a pass block takes where cuda_gated_delta_pass_warps forces them (0: pass_warps
// chooses).
extern int gdn_pass_forced_warps;

namespace {

using namespace gdn;

const int PASS_MAX_WARPS = 4;

// Each warp's floats for chunk_decay's trade, after the staging tiles.
const int DECAY_FLOATS = 2 * L;

// Row stride (bf16) of a warp's staging tile, through which its kept states and V' leave in
// 16-byte stores: 16 columns and 8 of padding (48 bytes), which puts the eight 16-byte rows an
// stmatrix writes in distinct banks. A tile has STAGE_ROWS rows: a state of dk 128 passes in
// two halves, so that a pass block (119 KB at dk 128, chunk_decay's floats with it) still leaves
// room on its multiprocessor for an out or prep block beside it (measured: a whole state's tile
// made the forward's out kernel 19% slower). A split pass's block is larger (150 KB forward, 202 KB
// backward, with its partial products): to be measured beside them.
const int STAGE_LD = 24;
const int STAGE_ROWS = L;

// The block's staging tiles (bv / 16 warps'), after its chunk tiles; none in the exact mode,
// whose split stores take the element path (acc_t_split).
__host__ __device__ bf16 *take_stage(Carve &cv, int bv, bool exact) {
    return exact ? NULL : cv.take<bf16>(bv / 16 * STAGE_ROWS * STAGE_LD);
}

// The warps' buffers after a pass block's chunk tiles: staging tiles (their bytes the same split
// or not: half the rows for twice the warps), chunk_decay's floats, and a split pass's partial
// products (xbuf: 32 x 32 floats a warp; NULL unsplit).
__host__ __device__ void take_warp_buffers(Carve &cv, int bv, bool exact, int split, bf16 **stage,
                                           float **decay, float **xbuf) {
    *stage = take_stage(cv, bv, exact);
    *decay = cv.take<float>(bv / 16 * split * DECAY_FLOATS);
    *xbuf = split > 1 ? cv.take<float>(bv / 16 * split * 32 * 32) : NULL;
}

// A pass block's carve of its shared memory (base NULL: counts the bytes): two chunks' tiles
// (Tiles::take: the next chunk's in flight while a chunk computes), then the warps' buffers.
template <typename Tiles>
__host__ __device__ void carve_pass(Tiles (&t)[2], bf16 **stage, float **decay, float **xbuf,
                                    unsigned char *base, int dk, int bv, bool exact, int split,
                                    size_t *bytes) {
    Carve cv = {base, 0};
    for (int i = 0; i < 2; i++) t[i].take(cv, dk, bv, exact);
    take_warp_buffers(cv, bv, exact, split, stage, decay, xbuf);
    *bytes = cv.off;
}

// Rows [0, n) of a [., WIDTH] bf16 matrix (row stride `stride`) into a [L, ldb16(WIDTH)] tile
// by cp.async, rows from n to L zero (FULL: n is L). A thread takes one 16-byte column of every
// STEP-th row, STEP = threads / (WIDTH / 8), with THREADS the block's threads where the kernel
// fixes them (0: blockDim.x): then the copies unroll with their offsets folded into the
// instructions. These copies sit on the passes' chain of chunks, and as loops stepped at run
// time they were a third of a chunk's instructions in the pass's SASS.
template <int WIDTH, int THREADS, bool FULL>
__device__ __forceinline__ void copy_rows_async(bf16 *dst, const bf *src, long stride, int n) {
    const int vecs = WIDTH / 8, ld = ldb16(WIDTH);
    int i = threadIdx.x / vecs, m = threadIdx.x % vecs * 8;
    const bf *from = src + i * stride + m;
    bf16 *to = dst + i * ld + m;
    if (THREADS) {
        const int step = (THREADS ? THREADS : vecs) / vecs;
        const long jump = step * stride;
#pragma unroll
        for (int r = 0; r < L / step; r++, from += jump)
            cp_async16_zfill(to + r * step * ld, from, FULL || i + r * step < n);
        return;
    }
    int step = blockDim.x / vecs;
    for (; i < L; i += step, from += step * stride, to += step * ld) {
        if (FULL || i < n)
            cp_async16(to, from);
        else
            *reinterpret_cast<uint4 *>(to) = make_uint4(0, 0, 0, 0);
    }
}

// Rows [0, n) of a block's bv columns of a fp32 matrix (row stride `stride`) into a
// [L, ldf32(bv)] tile by cp.async, rows from n to L zero (FULL: n is L). The block's threads are
// STEP (bv / 4): a thread takes one 4-column vector of every STEP-th row, its source stepped by a
// stride computed once, and the rows past n are the copy's zero fill.
template <bool FULL, int STEP = 8>
__device__ __forceinline__ void copy_cols_async(float *dst, const float *src, long stride, int n,
                                                int bv) {
    int vecs = bv / 4, ld = ldf32(bv), c = threadIdx.x % vecs * 4, i0 = threadIdx.x / vecs;
    const float *from = src + i0 * stride + c;
    float *to = dst + i0 * ld + c;
    const long step = STEP * stride;
#pragma unroll
    for (int r = 0; r < L / STEP; r++, from += step)
        cp_async16_zfill(to + STEP * r * ld, from, FULL || i0 + STEP * r < n);
}

// Where element e of n8-tile j of a warp's [16, 8 NT] accumulator lies (mma16816's C layout,
// lane = 4 g + q): row g or g + 8, column 8 j + 2 q or one past it.
__device__ __forceinline__ int frag_row(int lane, int e) {
    return lane / 4 + (e >> 1) * 8;
}
__device__ __forceinline__ int frag_col(int lane, int j, int e) {
    return 8 * j + 2 * (lane % 4) + (e & 1);
}

// S^T's accumulators from a [dk, dv] fp32 state (columns nw .. nw + 15; src NULL: zeros), and
// back.
template <int NT>
__device__ void state_in(float (&st)[1][NT][4], const float *src, int dv, int nw, int lane) {
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            st[0][j][e] =
                src ? src[(long)frag_col(lane, j, e) * dv + nw + frag_row(lane, e)] : 0.0f;
}
template <int NT>
__device__ void state_out(float *dst, const float (&st)[1][NT][4], int dv, int nw, int lane) {
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            dst[(long)frag_col(lane, j, e) * dv + nw + frag_row(lane, e)] = st[0][j][e];
}

// A warp's accumulators zeroed where `reset` (a chunk that starts a document: rare). The empty asm
// keeps the branch a branch: the compiler had made the zeroing selects, 64 instructions on every
// chunk of the chain.
template <int NT> __device__ __forceinline__ void zero_where(float (&acc)[1][NT][4], bool reset) {
    if (reset) {
        asm volatile("");
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[0][j][e] = 0.0f;
    }
}

// Two fp32 values as a bf16x2 register (hi) and, in the exact mode, their remainders' (lo).
template <bool EXACT>
__device__ __forceinline__ void split_pack(float x0, float x1, uint32_t &hi, uint32_t &lo) {
    hi = pack_bf16(x0, x1);
    if (EXACT) lo = pack_bf16(x0 - bf2f(f2bf(x0)), x1 - bf2f(f2bf(x1)));
}

// acc as acc_t_split below with lo NULL, rounded to bf16 pairs and stored transposed into the
// warp's staging tile (stmatrix: 8 rows of acc's fragments, 8 of the matrix's rows, at a time),
// whose rows then leave in two 16-byte stores each, to rows 0 .. 8 NT - 1 of the [., ld]
// matrix at dst (column nw there). A quarter of the element path's instructions, the same bits.
template <int NT, int ROWS = STAGE_ROWS>
__device__ void acc_t_store(bf *dst, const float (&acc)[1][NT][4], bf16 *stage, int ld, int lane) {
    const int PART = ROWS / 8; // n8-tiles (8 rows of the matrix each) the tile holds (ROWS rows)
    int m = lane / 8; // the matrix whose row this lane names: acc's rows 8 (m % 2) .., tile m / 2
    bf16 *row = stage + (lane % 8 + 8 * (m / 2)) * STAGE_LD + 8 * (m % 2);
    const bf16 *src = stage + lane / 2 * STAGE_LD + lane % 2 * 8;
    bf *out = dst + (long)(lane / 2) * ld + lane % 2 * 8;
#pragma unroll
    for (int p = 0; p < NT; p += PART) {
        const int n = NT - p < PART ? NT - p : PART;
#pragma unroll
        for (int j = 0; j < n; j += 2)
            stsm_x4_t(row + 8 * j * STAGE_LD, pack_bf16(acc[0][p + j][0], acc[0][p + j][1]),
                      pack_bf16(acc[0][p + j][2], acc[0][p + j][3]),
                      pack_bf16(acc[0][p + j + 1][0], acc[0][p + j + 1][1]),
                      pack_bf16(acc[0][p + j + 1][2], acc[0][p + j + 1][3]));
        __syncwarp();
#pragma unroll
        for (int i = 0; i < n / 2; i++) // 16 rows at a time
            *reinterpret_cast<uint4 *>(out + (long)(8 * p + 16 * i) * ld) =
                *reinterpret_cast<const uint4 *>(src + 16 * i * STAGE_LD);
        __syncwarp(); // the tile is free for the next part or store
    }
}

// A warp's accumulator block acc, [16, 8 NT] whose element (r, c) is the matrix's (c, nw + r),
// into rows of a [., ld] row-major matrix in global memory at hi + off (and lo + off; lo NULL:
// hi alone), split as load_split_rows would split it. With a staging tile (stage) and lo NULL
// on sm_90: acc_t_store; else one store an element, as many as fp32's and no shuffles (the
// passes' chunks are a chain, where every instruction counts).
template <int NT, int ROWS = STAGE_ROWS>
__device__ void acc_t_split(bf *hi, bf *lo, long off, const float (&acc)[1][NT][4], int ld, int nw,
                            bf16 *stage, int lane) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (stage && !lo) {
        acc_t_store<NT, ROWS>(hi + off + nw, acc, stage, ld, lane);
        return;
    }
#endif
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            split_put(hi, lo, off + (long)frag_col(lane, j, e) * ld + nw + frag_row(lane, e),
                      acc[0][j][e]);
}

// S^T's accumulators (the state's rows row0 ..) into slot `slot` of the kept states: split, or
// fp32 where k.f32 is set.
template <int NT, int ROWS = STAGE_ROWS>
__device__ void keep_state(const Kept &k, const gdn_args &a, int b, int h, int slot,
                           const float (&st)[1][NT][4], int nw, bf16 *stage, int lane,
                           int row0 = 0) {
    long o = kept_index(k, a, b, h, slot) + (long)row0 * a.dv;
    if (k.f32)
        state_out<NT>(k.f32 + o, st, a.dv, nw, lane);
    else
        acc_t_split<NT, ROWS>(k.hi, k.lo, o, st, a.dv, nw, stage, lane);
}

// k-step ks of a [16, 16 KS] accumulator block as A fragments (acc_to_a's layout), split.
template <bool EXACT, int NT>
__device__ __forceinline__ void acc_split_a(uint32_t (&hi)[1][4], uint32_t (&lo)[1][4],
                                            const float (&acc)[1][NT][4], int ks) {
    split_pack<EXACT>(acc[0][2 * ks][0], acc[0][2 * ks][1], hi[0][0], lo[0][0]);
    split_pack<EXACT>(acc[0][2 * ks][2], acc[0][2 * ks][3], hi[0][1], lo[0][1]);
    split_pack<EXACT>(acc[0][2 * ks + 1][0], acc[0][2 * ks + 1][1], hi[0][2], lo[0][2]);
    split_pack<EXACT>(acc[0][2 * ks + 1][2], acc[0][2 * ks + 1][3], hi[0][3], lo[0][3]);
}

// vt = S^T B^T ([16, L]) for B = Bhi + Blo, [L, 16 KS] rows in shared memory (Blo NULL: exact
// in bf16): B's rows are the product's columns (mma_nt_step), S^T's k-steps the A fragments.
template <bool EXACT, int KS>
__device__ void state_times_rows(float (&vt)[1][8][4], const float (&st)[1][2 * KS][4],
                                 const bf16 *Bhi, const bf16 *Blo, int ld, int lane) {
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) vt[0][j][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        uint32_t hi[1][4], lo[1][4];
        acc_split_a<EXACT, 2 * KS>(hi, lo, st, ks);
        if (EXACT) mma_nt_step<1, 8>(vt, lo, Bhi, ld, ks, lane);
        if (EXACT && Blo) mma_nt_step<1, 8>(vt, hi, Blo, ld, ks, lane);
        mma_nt_step<1, 8>(vt, hi, Bhi, ld, ks, lane);
    }
}

// A [16, L] accumulator block's four k-steps as A fragments, split.
template <bool EXACT>
__device__ __forceinline__ void rows_split_a(uint32_t (&hi)[1][4][4], uint32_t (&lo)[1][4][4],
                                             const float (&x)[1][8][4]) {
#pragma unroll
    for (int ks = 0; ks < 4; ks++) {
        uint32_t h1[1][4], l1[1][4];
        acc_split_a<EXACT, 8>(h1, l1, x, ks);
#pragma unroll
        for (int r = 0; r < 4; r++) hi[0][ks][r] = h1[0][r], lo[0][ks][r] = l1[0][r];
    }
}

// The chunk's w_i = exp(gamma_last - gamma_i) and exp(gamma_i) (EG) at the columns i of a [16, L]
// accumulator's elements (zero past Lc), and exp(gamma_last), from the raw gates each warp
// fetched. A lane computes columns lane and lane + 32, and the warp trades them through its own
// 64 (EG: 128) floats of shared memory, buf: an adjacent pair a load, where a shuffle an element
// was twice the instructions (and the shuffles' convergence checks as many again).
struct ChunkDecay {
    float w[8][2], eg[8][2]; // n8-tile j, element e & 1 (rows g and g + 8 share a column)
    float last;
};

template <bool EG> __device__ ChunkDecay chunk_decay(const RawGates &r, float *buf, int lane) {
    float x[2] = {r.g[0], r.g[1]};
    float glast = cumulate_gates(x, r.Lc);
    __syncwarp(); // every lane has read the chunk before's
    for (int half = 0; half < 2; half++) {
        bool live = lane + 32 * half < r.Lc;
        buf[lane + 32 * half] = live ? expf(glast - x[half]) : 0.0f;
        if (EG) buf[L + lane + 32 * half] = live ? expf(x[half]) : 0.0f;
    }
    __syncwarp();
    ChunkDecay d;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        int i = frag_col(lane, j, 0); // even: the pair i, i + 1
        float2 w = *reinterpret_cast<const float2 *>(buf + i);
        float2 eg = EG ? *reinterpret_cast<const float2 *>(buf + L + i) : make_float2(0.0f, 0.0f);
        d.w[j][0] = w.x, d.w[j][1] = w.y, d.eg[j][0] = eg.x, d.eg[j][1] = eg.y;
    }
    d.last = expf(glast);
    return d;
}

// A split pass's pair adds its two partial products: each warp writes its 32 floats a lane to
// its own slot of xbuf, the pair meets at a named barrier of its 64 threads (1 + grp; 0 is
// __syncthreads'), and each adds the other's. fp32 addition commutes, so both hold the same
// sums. A slot is written again only after the next chunk's __syncthreads, when both have read.
__device__ void pair_sum(float (&vt)[1][8][4], float *xbuf, int grp, int kh, int lane) {
    float *mine = xbuf + (2 * grp + kh) * 32 * 32, *other = xbuf + (2 * grp + (kh ^ 1)) * 32 * 32;
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) mine[(4 * j + e) * 32 + lane] = vt[0][j][e];
    asm volatile("bar.sync %0, 64;\n" ::"r"(1 + grp) : "memory");
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) vt[0][j][e] += other[(4 * j + e) * 32 + lane];
}

// The instance of a pass kernel template for dk = 16 KS (gdn_tc_shape: dk <= MAX_DIM = 128), the
// mode and the block's warps: Qwen3.5's dk 128 in blocks of 4 warps has its own, whose copies
// unroll (copy_rows_async); any other shape the instance of any block size.
#define PASS_KS(kernel, dk, exact, nw)                                                             \
    ((dk) == 16    ? kernel<1, exact, 0>                                                           \
     : (dk) == 32  ? kernel<2, exact, 0>                                                           \
     : (dk) == 48  ? kernel<3, exact, 0>                                                           \
     : (dk) == 64  ? kernel<4, exact, 0>                                                           \
     : (dk) == 80  ? kernel<5, exact, 0>                                                           \
     : (dk) == 96  ? kernel<6, exact, 0>                                                           \
     : (dk) == 112 ? kernel<7, exact, 0>                                                           \
     : (nw) == 4   ? kernel<8, exact, 4>                                                           \
                   : kernel<8, exact, 0>)
#define PASS_INSTANCE(kernel, dk, exact, nw)                                                       \
    ((exact) ? PASS_KS(kernel, dk, true, nw) : PASS_KS(kernel, dk, false, nw))

// The most shared memory a block of the current device may take.
size_t block_smem_most() {
    int dev, most;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return (size_t)most;
}

// Warps a block of a pass whose tiles take bytes_of: the most (up to 4; or the forced number, 8
// counting as 4: the forward's pass splits dk over pairs of them, tc_pass) whose tiles fit a
// block's shared memory, else 1. One copy of a chunk's tiles serves every warp of
// the block, and the pass is a chain of dependent chunks, bound by latency: fewer, larger blocks
// lose nothing where each holds a multiprocessor of its own (measured on the H100: blocks of 4
// warps ran the backward 1.4x faster than blocks of 1 spread over every multiprocessor).
int pass_warps(const gdn_args *a, size_t (*bytes_of)(int, int, bool), bool exact) {
    size_t most = block_smem_most();
    int forced =
        gdn_pass_forced_warps == 2 * PASS_MAX_WARPS ? PASS_MAX_WARPS : gdn_pass_forced_warps;
    for (int nw = PASS_MAX_WARPS; nw > 1; nw /= 2)
        if ((!forced || nw == forced) && a->dv % (16 * nw) == 0 &&
            bytes_of(a->dk, 16 * nw, exact) <= most)
            return nw;
    return 1;
}

// The bytes of a pass block's carve (carve_pass, counting).
template <typename Tiles> size_t carve_bytes(int dk, int bv, bool exact, int split) {
    Tiles t[2];
    bf16 *stage;
    float *decay, *xbuf;
    size_t bytes;
    carve_pass(t, &stage, &decay, &xbuf, NULL, dk, bv, exact, split, &bytes);
    return bytes;
}

// Whether a pass runs split (the forced 8 warps, at dk 128, in blocks of 4 column groups, its
// tiles fitting a block's shared memory at split_bytes).
bool split_fits(const gdn_args *a, int nw, size_t (*split_bytes)(int, int, bool), bool exact) {
    if (gdn_pass_forced_warps != 2 * PASS_MAX_WARPS || a->dk != 128 || nw != PASS_MAX_WARPS)
        return false;
    return split_bytes(a->dk, 16 * nw, exact) <= block_smem_most();
}

// One launch of a pass kernel over grid (dv / bv, H, B), bv = 16 nw, in blocks of nw warps (split
// 2: nw pairs of warps, each pair's dk in halves).
template <typename Kernel, typename... Args>
void pass_launch(Kernel kernel, int nw, int split, int phase, const gdn_args *a,
                 size_t (*bytes_of)(int, int, bool), bool exact, cudaStream_t stream,
                 Args... args) {
    size_t bytes = bytes_of(a->dk, 16 * nw, exact);
    CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    phase_begin(phase, stream);
    kernel<<<dim3(a->dv / (16 * nw), a->H, a->B), 32 * nw * split, bytes, stream>>>(args...);
    CUDA_CHECK_LAUNCH();
    phase_end(stream);
}

} // namespace
