// The tensor-core pieces of the chunked gated delta rule (gated_delta_tc.cu's header has the
// math): shared-memory carving, bf16 tiles of 16 x 16 on mma.sync (fp32 accumulation), and the
// optional hi/lo split that keeps fp32 operands at fp32's precision on bf16 tensor cores.
//
// By default every fp32 operand (the state, V', T, P and their gradients) enters a product
// rounded to bf16 once, with fp32 accumulation: the precision flash-linear-attention's kernels
// run at, and what the layer's bf16 activations around the rule already allow. With the exact
// mode on (cuda_gated_delta_exact, for tests against the fp32 reference) such an operand X
// enters as two bf16 matrices, hi = bf16(X) and lo = bf16(X - hi), and X Y = hi Y + lo Y
// (+ X hi_Y + ...): the dropped lo x lo term is 2^-16 relative, at two or three bf16 products
// each. A Split's lo is NULL when the mode is off, and every product and store skips it. q, k
// and v are bf16 already and enter once.
#ifndef MT_GATED_DELTA_TC_CUH
#define MT_GATED_DELTA_TC_CUH

#include "kernels/cuda/gated_delta.cuh"
#include "kernels/cuda/mma.cuh"

namespace gdn {

// Operand layouts of the tile products: row_major holds element (r, c) at p[r ld + c],
// col_major at p[c ld + r] (the transpose of what is stored).
struct row_major {};
struct col_major {};

const int TC_THREADS = 256; // 8 warps
const int TC_WARPS = TC_THREADS / 32;
const int TC_SEG = 32; // chunks a segment: the scratch holds one segment's chunk factors

// A warp's 16 x 16 fp32 accumulator tile in mma.sync's layout (mma.cuh): two m16n8 C fragments,
// x[4 h + e] at row g + 8 (e >> 1) and column 8 h + 2 q + (e & 1) (g = lane / 4, q = lane % 4).
// The products load their bf16 fragments by ldmatrix from shared memory, where the wmma API's
// loads went through generic 32-bit loads (measured on an H100: 16% off the rule's forward and
// backward at 32,768 tokens). Each tile's k-steps run in order, two m16n8k16 MMAs a step, as
// wmma's did; the bits differ from wmma's in the last place here and there (wmma ordered the
// k's within an MMA otherwise), and every rerun gives the same bits.
struct FragC {
    static const int num_elements = 8;
    float x[8];
};

// The per-chunk kernels are compiled twice: for Qwen3.5's and Qwen3-Next's heads (dk = dv =
// 128), where every loop bound, tile count and index is a constant (no runtime divisions, the
// tile loops unrolled, their mma.sync's without the guards a runtime tile count needs), and for
// any other shape (a template's DK = DV = 0: the dims read from gdn_args). The same operations
// in the same order, so the same bits (test_gdn_cuda's digests).
template <int D> inline __host__ __device__ int dim_or(int runtime) {
    return D ? D : runtime;
}
#define GDN_DIMS_KERNEL(kernel, a)                                                                 \
    ((a)->dk == 128 && (a)->dv == 128 ? kernel<128, 128> : kernel<0, 0>)

// Row strides of the shared tiles: bf16 rows padded by 8 (16 bytes), fp32 rows by 4, which
// keeps ldmatrix's alignment (16-byte rows, tiles at 16-byte offsets) and spreads
// the rows over the banks.
inline __host__ __device__ int ldb16(int width) {
    return width + 8;
}
inline __host__ __device__ int ldf32(int width) {
    return width + 4;
}

// Carves one block's dynamic shared memory into 128-byte aligned arrays. With base NULL it only
// counts: the host sizes a kernel's shared memory with the same code the kernel carves it with.
struct Carve {
    unsigned char *base;
    size_t off;
    template <typename T> __host__ __device__ T *take(size_t n) {
        off = (off + 127) / 128 * 128;
        T *p = reinterpret_cast<T *>(base + off);
        off += n * sizeof(T);
        return p;
    }
};

// A fp32 matrix for the tensor cores: its bf16 rounding hi and (exact mode) the remainder lo,
// NULL otherwise, with one row stride.
struct Split {
    bf *hi, *lo;
    int ld;
};

inline __host__ __device__ Split take_split(Carve &cv, int rows, int width, bool exact) {
    Split s;
    s.ld = ldb16(width);
    s.hi = cv.take<bf>((size_t)rows * s.ld);
    s.lo = exact ? cv.take<bf>((size_t)rows * s.ld) : NULL;
    return s;
}

// x at hi[i] and its remainder at lo[i] (lo NULL: the rounding alone).
inline __device__ void split_put(bf *hi, bf *lo, long i, float x) {
    bf h = __float2bfloat16(x);
    hi[i] = h;
    if (lo) lo[i] = __float2bfloat16(x - __bfloat162float(h));
}

// Eight fp32 values from / to p (16-byte aligned) in two 16-byte accesses.
inline __device__ void row8(float (&x)[8], const float *p) {
    *reinterpret_cast<float4 *>(x) = *reinterpret_cast<const float4 *>(p);
    *reinterpret_cast<float4 *>(x + 4) = *reinterpret_cast<const float4 *>(p + 4);
}
inline __device__ void put8(float *p, const float (&x)[8]) {
    *reinterpret_cast<float4 *>(p) = *reinterpret_cast<const float4 *>(x);
    *reinterpret_cast<float4 *>(p + 4) = *reinterpret_cast<const float4 *>(x + 4);
}

// x[0 .. 8) at hi[i ..] and their remainders at lo[i ..] (lo NULL: the rounding alone), one
// 16-byte store each: i a multiple of 8 and the arrays 16-byte aligned.
inline __device__ void split_put8(bf *hi, bf *lo, long i, const float (&x)[8]) {
    __align__(16) bf h[8], l[8];
    for (int e = 0; e < 8; e++) {
        h[e] = __float2bfloat16(x[e]);
        l[e] = __float2bfloat16(x[e] - __bfloat162float(h[e]));
    }
    *reinterpret_cast<uint4 *>(hi + i) = *reinterpret_cast<const uint4 *>(h);
    if (lo) *reinterpret_cast<uint4 *>(lo + i) = *reinterpret_cast<const uint4 *>(l);
}

inline __device__ void split_store(const Split &s, int r, int c, float x) {
    split_put(s.hi, s.lo, (long)r * s.ld + c, x);
}

// The value a split holds at (r, c).
inline __device__ float split_value(const Split &s, int r, int c) {
    int i = r * s.ld + c;
    return __bfloat162float(s.hi[i]) + (s.lo ? __bfloat162float(s.lo[i]) : 0.0f);
}

// The A fragment (mma16816's a0..a3) of the 16 x 16 tile at (m0, k0) of A in shared memory:
// row_major A[m][k] by ldmatrix, col_major (stored [k][m]) by its transposing form. Lane l
// names row l % 8 of 8 x 8 block l / 8.
template <typename LA>
inline __device__ void frag_a(uint32_t (&a)[4], const bf *A, int ld, int m0, int k0);
template <>
inline __device__ void frag_a<row_major>(uint32_t (&a)[4], const bf *A, int ld, int m0, int k0) {
    int lane = threadIdx.x % 32;
    ldsm_x4(a, (const bf16 *)A + (m0 + (lane & 15)) * ld + k0 + (lane >> 4) * 8);
}
template <>
inline __device__ void frag_a<col_major>(uint32_t (&a)[4], const bf *A, int ld, int m0, int k0) {
    int lane = threadIdx.x % 32, blk = lane / 8;
    ldsm_x4_t(a, (const bf16 *)A + (k0 + (blk >> 1) * 8 + (lane & 7)) * ld + m0 + (blk & 1) * 8);
}

// The B fragments of the 16 x 16 tile at (k0, n0) of B in shared memory: b[0], b[1] of columns
// n0 .. n0 + 7, b[2], b[3] of the next 8. col_major (stored [n][k]) by ldmatrix, row_major
// B[k][n] by its transposing form.
template <typename LB>
inline __device__ void frag_b(uint32_t (&b)[4], const bf *B, int ld, int k0, int n0);
template <>
inline __device__ void frag_b<col_major>(uint32_t (&b)[4], const bf *B, int ld, int k0, int n0) {
    int lane = threadIdx.x % 32, blk = lane / 8;
    ldsm_x4(b, (const bf16 *)B + (n0 + (blk >> 1) * 8 + (lane & 7)) * ld + k0 + (blk & 1) * 8);
}
template <>
inline __device__ void frag_b<row_major>(uint32_t (&b)[4], const bf *B, int ld, int k0, int n0) {
    int lane = threadIdx.x % 32, blk = lane / 8;
    ldsm_x4_t(b, (const bf16 *)B + (k0 + (blk & 1) * 8 + (lane & 7)) * ld + n0 + (blk >> 1) * 8);
}

// acc += a b for one k-step of a 16 x 16 tile: two m16n8k16 MMAs.
inline __device__ void mma_step(FragC &acc, const uint32_t (&a)[4], const uint32_t (&b)[4]) {
    float(&c0)[4] = *reinterpret_cast<float(*)[4]>(acc.x);
    float(&c1)[4] = *reinterpret_cast<float(*)[4]>(acc.x + 4);
    mma16816(c0, a, b[0], b[1]);
    mma16816(c1, a, b[2], b[3]);
}

// acc += A[m0 .. m0 + 16, 0 .. K) B[0 .. K, n0 .. n0 + 16), K a multiple of 16.
template <typename LA, typename LB>
inline __device__ void mma_tile(FragC &acc, const bf *A, int lda, const bf *B, int ldb, int m0,
                                int n0, int K) {
    for (int k0 = 0; k0 < K; k0 += 16) {
        uint32_t a[4], b[4];
        frag_a<LA>(a, A, lda, m0, k0);
        frag_b<LB>(b, B, ldb, k0, n0);
        mma_step(acc, a, b);
    }
}

// Where element e of a lane's half h of a FragC lies in its 16 x 16 tile.
inline __device__ int frag_c_row(int e) {
    return threadIdx.x % 32 / 4 + 8 * (e >> 1);
}
inline __device__ int frag_c_col(int h) {
    return 8 * h + 2 * (threadIdx.x % 4);
}

// The lane's pair k (0 .. 3) of a FragC, elements 2 k and 2 k + 1: at (frag_pair_row(k),
// frag_pair_col(k)) of the tile and one column on, read and written 8 bytes at a time.
const int FRAG_PAIRS = 4;
inline __device__ int frag_pair_row(int k) {
    return frag_c_row(2 * (k & 1));
}
inline __device__ int frag_pair_col(int k) {
    return frag_c_col(k >> 1);
}

inline __device__ void frag_fill(FragC &acc, float v) {
#pragma unroll
    for (int i = 0; i < 8; i++) acc.x[i] = v;
}

// The tile into / from the fp32 matrix at p (row stride ld): two 8-byte accesses a row half.
inline __device__ void frag_store(float *p, const FragC &acc, int ld) {
#pragma unroll
    for (int k = 0; k < FRAG_PAIRS; k++)
        *reinterpret_cast<float2 *>(p + frag_pair_row(k) * ld + frag_pair_col(k)) =
            make_float2(acc.x[2 * k], acc.x[2 * k + 1]);
}
// A pair x0, x1 split as split_put splits each: its rounding and its remainders, each a bf16x2
// word (x0 in the low half).
struct SplitPair {
    uint32_t hi, lo;
};
inline __device__ SplitPair split_pair(float x0, float x1) {
    return {pack_bf16(x0, x1), pack_bf16(x0 - bf2f(f2bf(x0)), x1 - bf2f(f2bf(x1)))};
}

// The tile into the bf16 matrix at hi + off (row stride ld), split (lo NULL: the rounding
// alone), straight from the lanes' registers: a 4-byte store a pair.
inline __device__ void frag_put_split(bf *hi, bf *lo, int ld, long off, const FragC &acc) {
#pragma unroll
    for (int k = 0; k < FRAG_PAIRS; k++) {
        long i = off + frag_pair_row(k) * ld + frag_pair_col(k);
        SplitPair sp = split_pair(acc.x[2 * k], acc.x[2 * k + 1]);
        *reinterpret_cast<uint32_t *>(hi + i) = sp.hi;
        if (lo) *reinterpret_cast<uint32_t *>(lo + i) = sp.lo;
    }
}

inline __device__ void frag_load(FragC &acc, const float *p, int ld) {
#pragma unroll
    for (int k = 0; k < FRAG_PAIRS; k++) {
        float2 v = *reinterpret_cast<const float2 *>(p + frag_pair_row(k) * ld + frag_pair_col(k));
        acc.x[2 * k] = v.x, acc.x[2 * k + 1] = v.y;
    }
}

// The 16 x 16 tiles a warp owns in a [L, width] product: rows m0 .. m0 + 16 of the n column
// blocks at c0 + dc j (j < n, n at most MAX_TILES). warp_tiles gives the block's warps the
// 4 x (width / 16) tiles, each once; a tile's arithmetic does not depend on which warp has it. A
// warp runs its tiles' products side by side (mma_tiles): one tile's chain of k-steps, each waiting
// on the one before, leaves the tensor cores idle between steps with one block a multiprocessor.
const int MAX_TILES = MAX_DIM / 32;

struct WarpTiles {
    int m0, c0, dc, n;
};

// nw: the block's warps (a multiple of 4), TC_WARPS unless a kernel runs more.
inline __device__ WarpTiles warp_tiles(int width, int nw = TC_WARPS) {
    int w = threadIdx.x / 32, total = 4 * (width / 16);
    // every warp the same count where the tiles divide evenly: a constant where width is one
    int n = total % nw == 0 ? total / nw : (w < total ? (total - w + nw - 1) / nw : 0);
    return {w % 4 * 16, w / 4 * 16, 16 * (nw / 4), n};
}

inline __device__ int tile_col(const WarpTiles &wt, int j) {
    return wt.c0 + wt.dc * j;
}

// Tiles j0 .. j0 + N of wt (where it has them), for a kernel that holds N at a time.
inline __device__ WarpTiles tiles_from(const WarpTiles &wt, int j0, int N) {
    return {wt.m0, tile_col(wt, j0), wt.dc, min(N, wt.n - j0)};
}

template <int N> inline __device__ void tiles_zero(FragC (&acc)[N]) {
#pragma unroll
    for (int j = 0; j < N; j++) frag_fill(acc[j], 0.0f);
}

// acc[j] += A[m0 .., 0 .. K) B[0 .. K, tile_col(j) ..) for the warp's tiles: A's fragment loaded
// once a k-step, each tile's k-steps in order (each tile's bits those of mma_tile).
template <typename LA, typename LB, int N>
inline __device__ void mma_tiles(FragC (&acc)[N], const WarpTiles &wt, const bf *A, int lda,
                                 const bf *B, int ldb, int K) {
    for (int k0 = 0; k0 < K; k0 += 16) {
        uint32_t a[4], b[N][4];
        frag_a<LA>(a, A, lda, wt.m0, k0);
#pragma unroll
        for (int j = 0; j < N; j++)
            if (j < wt.n) frag_b<LB>(b[j], B, ldb, k0, tile_col(wt, j));
#pragma unroll
        for (int j = 0; j < N; j++)
            if (j < wt.n) mma_step(acc[j], a, b[j]);
    }
}

// The same with split operands: acc += A B, A = Ahi + Alo, B = Bhi + Blo (Alo or Blo NULL: that
// operand is exact in bf16). The small terms go first.
template <typename LA, typename LB, int N>
inline __device__ void mma_split_tiles(FragC (&acc)[N], const WarpTiles &wt, const bf *Ahi,
                                       const bf *Alo, int lda, const bf *Bhi, const bf *Blo,
                                       int ldb, int K) {
    if (Alo) mma_tiles<LA, LB>(acc, wt, Alo, lda, Bhi, ldb, K);
    if (Blo) mma_tiles<LA, LB>(acc, wt, Ahi, lda, Blo, ldb, K);
    mma_tiles<LA, LB>(acc, wt, Ahi, lda, Bhi, ldb, K);
}

// The warp's tiles acc into the fp32 matrix at dst (row stride ld, the tiles' rows and columns
// as wt places them).
template <int N>
inline __device__ void tiles_store(float *dst, int ld, const FragC (&acc)[N], const WarpTiles &wt) {
#pragma unroll
    for (int j = 0; j < N; j++)
        if (j < wt.n) frag_store(dst + wt.m0 * ld + tile_col(wt, j), acc[j], ld);
}

// Rows [0, rows) of a [., width] bf16 global matrix (row stride `stride` elements) into a
// [pad, ldb16(width)] tile, rows from `rows` to pad zero. width a multiple of 8, 16-byte copies
// by cp.async: all of a block's copies are in flight at once (a load then a store an element
// waits out the memory's latency once per element, and these kernels have one block a
// multiprocessor to hide it). Asynchronous: the block calls loads_done() before the barrier
// after which anyone reads the tile.
inline __device__ void load_bf16_block(bf *dst, const bf *src, long stride, int rows, int pad,
                                       int width) {
    int ld = ldb16(width), vecs = width / 8;
    for (int e = threadIdx.x; e < pad * vecs; e += blockDim.x) {
        int i = e / vecs, m = e % vecs * 8;
        if (i < rows)
            cp_async16(dst + i * ld + m, src + i * stride + m);
        else
            *reinterpret_cast<uint4 *>(dst + i * ld + m) = make_uint4(0, 0, 0, 0);
    }
}

// The reverse of load_bf16_block's copy: rows [0, rows) of a [., ldb16(width)] tile to a bf16
// global matrix of row stride `stride`, 16 bytes at a time.
inline __device__ void store_bf16_block(bf *dst, long stride, const bf *src, int rows, int width) {
    int ld = ldb16(width), vecs = width / 8;
    for (int e = threadIdx.x; e < rows * vecs; e += blockDim.x) {
        int i = e / vecs, m = e % vecs * 8;
        *reinterpret_cast<uint4 *>(dst + i * stride + m) =
            *reinterpret_cast<const uint4 *>(src + i * ld + m);
    }
}

// The thread's load_bf16_block copies have landed (committed or not); a barrier after it makes
// every thread's visible to all.
inline __device__ void loads_done() {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// The same into a [L, ldb16(width)] tile (asynchronous too).
inline __device__ void load_bf16_rows(bf *dst, const bf *src, long stride, int rows, int width) {
    load_bf16_block(dst, src, stride, rows, L, width);
}

// A [rows, width] matrix split in global memory (hi + off, and lo + off in the exact mode) into
// the shared split s: the copy of what load_split_rows would make of its fp32 values
// (asynchronous, as load_bf16_block).
inline __device__ void load_split_block(const Split &s, const bf *hi, const bf *lo, long off,
                                        int rows, int width) {
    load_bf16_block(s.hi, hi + off, width, rows, rows, width);
    if (lo) load_bf16_block(s.lo, lo + off, width, rows, rows, width);
}

// A chunk's [L, width] factor split in global memory into the shared split s.
inline __device__ void load_split_factor(const Split &s, const bf *hi, const bf *lo, long off,
                                         int width) {
    load_split_block(s, hi, lo, off, L, width);
}

// Rows [0, n) of a fp32 global matrix (columns [0, width), row stride `stride`), times
// mul[i] (NULL: 1) and `scale`, split into s; rows from n to `pad_rows` zero. width a multiple
// of 4 and stride of 4 floats: float4 loads, a batch of them in flight before any is stored.
inline __device__ void load_split_rows(const Split &s, const float *src, long stride, int n,
                                       int pad_rows, int width, const float *mul, float scale) {
    const int BATCH = 8;
    int vecs = width / 4, total = pad_rows * vecs;
    for (int e0 = threadIdx.x; e0 < total; e0 += BATCH * blockDim.x) {
        float4 x[BATCH];
#pragma unroll
        for (int r = 0; r < BATCH; r++) {
            int e = e0 + r * blockDim.x, i = e / vecs, m = e % vecs * 4;
            x[r] = e < total && i < n ? *reinterpret_cast<const float4 *>(src + i * stride + m)
                                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int r = 0; r < BATCH; r++) {
            int e = e0 + r * blockDim.x, i = e / vecs, m = e % vecs * 4;
            if (e >= total) continue;
            float k = scale * (mul && i < n ? mul[i] : 1.0f);
            split_store(s, i, m, x[r].x * k);
            split_store(s, i, m + 1, x[r].y * k);
            split_store(s, i, m + 2, x[r].z * k);
            split_store(s, i, m + 3, x[r].w * k);
        }
    }
}

// A chunk's raw gates in a warp's registers: lane l holds g and beta of tokens l and l + 32
// (zeros past Lc). The state passes fetch them a chunk ahead, so that their latency overlaps
// work; the per-chunk kernels' warp 0 stores them (store_gates).
struct RawGates {
    float g[2], beta[2];
    int Lc;
};

inline __device__ RawGates fetch_gates(const float *g, const float *bt, long stride, int Lc) {
    RawGates r;
    r.Lc = Lc;
    for (int half = 0; half < 2; half++) {
        int i = threadIdx.x % 32 + 32 * half;
        r.g[half] = i < Lc ? g[i * stride] : 0.0f;
        r.beta[half] = i < Lc ? bt[i * stride] : 0.0f;
    }
    return r;
}

// gamma, the cumulative sum of a warp's raw gates (a fixed shuffle scan): lane l's x[0] and
// x[1] become gamma of tokens l and l + 32; returns gamma of the chunk's last token (Lc - 1).
inline __device__ float cumulate_gates(float (&x)[2], int Lc) {
    int lane = threadIdx.x % 32;
    for (int half = 0; half < 2; half++)
        for (int o = 1; o < 32; o *= 2) {
            float y = __shfl_up_sync(0xffffffffu, x[half], o);
            if (lane >= o) x[half] += y;
        }
    x[1] += __shfl_sync(0xffffffffu, x[0], 31);
    int last = Lc - 1;
    return __shfl_sync(0xffffffffu, last < 32 ? x[0] : x[1], last % 32);
}

// From warp 0's raw gates: gamma, beta, exp(gamma) and w_j = exp(gamma_last - gamma_j) for
// j < Lc; zeros on the rows past Lc, so that padded rows drop out of every product. Other warps
// return at once; a barrier must follow before anyone reads the gates.
inline __device__ void store_gates(const RawGates &r, float *gam, float *beta, float *eg,
                                   float *w) {
    if (threadIdx.x >= 32) return;
    int lane = threadIdx.x, Lc = r.Lc;
    float x[2] = {r.g[0], r.g[1]};
    float glast = cumulate_gates(x, Lc);
    for (int half = 0; half < 2; half++) {
        int i = lane + 32 * half;
        bool live = i < Lc;
        gam[i] = live ? x[half] : 0.0f;
        beta[i] = live ? r.beta[half] : 0.0f;
        eg[i] = live ? expf(x[half]) : 0.0f;
        w[i] = live ? expf(glast - x[half]) : 0.0f;
    }
}

// The chunk's gates for value head h, by warp 0 (fetch_gates and store_gates).
inline __device__ void load_gates_padded(float *gam, float *beta, float *eg, float *w,
                                         const float *g, const float *bt, long stride, int Lc) {
    if (threadIdx.x >= 32) return;
    store_gates(fetch_gates(g, bt, stride, Lc), gam, beta, eg, w);
}

// A warp's own 16 x 16 fp32 tile in shared memory (a block carves TC_WARPS of them): where an
// accumulator goes to be read element by element by any lane.
const int TMP_LD = 20;

inline __host__ __device__ float *take_warp_tiles(Carve &cv) {
    return cv.take<float>(TC_WARPS * 16 * TMP_LD);
}

inline __device__ float *warp_tile(float *tiles) {
    return tiles + threadIdx.x / 32 * 16 * TMP_LD;
}

// acc into the warp's tile (tmp), readable by every lane when it returns.
inline __device__ void tile_stage(float *tmp, const FragC &acc) {
    __syncwarp();
    frag_store(tmp, acc, TMP_LD);
    __syncwarp();
}

// Scales row r of the accumulator tile by mul[r], in the lanes' registers.
inline __device__ void frag_scale_rows(FragC &acc, const float *mul) {
    float m0 = mul[frag_c_row(0)], m1 = mul[frag_c_row(2)];
#pragma unroll
    for (int i = 0; i < 8; i++) acc.x[i] *= i & 2 ? m1 : m0;
}

// One segment's chunk factors in global memory, per (b, h, chunk of the segment). A "split" one
// is stored as the products read it: hi = bf16(x) and, in the exact mode only (NULL otherwise),
// lo = bf16(x - hi), so that a kernel copies it to shared memory as it is, with no conversion,
// at half fp32's bytes in the default mode. W = T diag(beta exp(gamma)) K split ([L, dk]),
// U = T diag(beta) V ([L, dv] fp32: the pass subtracts from it in fp32), V' = U - W S0 split
// ([L, dv]) and, for the backward (with_p), the rest: P and T split ([L, L]), M = D KK^T (strictly
// lower, [L, L] fp32), dV' and dR split ([L, dv]), the pair terms dPD and dAB split ([L, L]),
// the rows' partial dgamma and dbeta ([L] fp32 each), and in the default mode scale dO
// rounded to bf16 ([L, dv], doh: the pairs kernel's, which the rows kernel copies as it is).
struct Factors {
    bf *whi, *wlo, *phi, *plo, *thi, *tlo, *dpdhi, *dpdlo, *dabhi, *dablo;
    bf *vphi, *vplo, *dvphi, *dvplo, *drhi, *drlo, *doh;
    float *u, *m, *rowg, *rowb;
};

// The chunk states a pass keeps for the per-chunk kernels: slot i of (b, h) at kept_index,
// [dk, dv] each, split as the products read them (hi, and lo in the exact mode only), or fp32
// at f32 instead, where gated_delta_grad.cu's CUDA-core gradients read them
// (cuda_gated_delta_ref_grads). Nothing is kept where all three are NULL.
struct Kept {
    bf *hi, *lo;
    float *f32;
    int slots;
};

inline __host__ __device__ bool keeps(const Kept &k) {
    return k.hi || k.f32;
}

inline __host__ __device__ long kept_index(const Kept &k, const gdn_args &a, int b, int h,
                                           int slot) {
    return (((long)b * a.H + h) * k.slots + slot) * a.dk * a.dv;
}

// Slots of every (b, h)'s states carved from cv: fp32 with f32, else split.
inline __host__ __device__ Kept take_kept(Carve &cv, const gdn_args &a, int slots, bool exact,
                                          bool f32) {
    long n = (long)a.B * a.H * slots * a.dk * a.dv;
    Kept k = {NULL, NULL, NULL, slots};
    if (f32)
        k.f32 = cv.take<float>(n);
    else
        k.hi = cv.take<bf>(n), k.lo = exact ? cv.take<bf>(n) : NULL;
    return k;
}

inline StateBuf fp32_states(const Kept &k) {
    return StateBuf{k.f32, k.slots, 1};
}

inline __host__ __device__ long factor_index(const gdn_args &a, int b, int h, int slot) {
    return ((long)b * a.H + h) * TC_SEG + slot;
}

// Bytes of one segment's factors; carves them from p (NULL: counts).
inline __host__ __device__ size_t factors_carve(Factors *f, unsigned char *p, const gdn_args &a,
                                                bool with_p, bool exact) {
    long n = (long)a.B * a.H * TC_SEG, nb = with_p ? n : 0;
    Carve cv = {p, 0};
    f->whi = cv.take<bf>(n * L * a.dk);
    f->wlo = exact ? cv.take<bf>(n * L * a.dk) : NULL;
    f->u = cv.take<float>(n * L * a.dv);
    f->vphi = cv.take<bf>(n * L * a.dv);
    f->vplo = exact ? cv.take<bf>(n * L * a.dv) : NULL;
    bf **halves[] = {&f->phi,   &f->plo,   &f->thi,   &f->tlo,
                     &f->dpdhi, &f->dpdlo, &f->dabhi, &f->dablo};
    for (int i = 0; i < 8; i++) // the lo halves at odd indices
        *halves[i] = with_p && (exact || i % 2 == 0) ? cv.take<bf>(nb * L * L) : NULL;
    bf **rows[] = {&f->dvphi, &f->dvplo, &f->drhi, &f->drlo};
    for (int i = 0; i < 4; i++)
        *rows[i] = with_p && (exact || i % 2 == 0) ? cv.take<bf>(nb * L * a.dv) : NULL;
    f->doh = with_p && !exact ? cv.take<bf>(nb * L * a.dv) : NULL;
    f->m = with_p ? cv.take<float>(nb * L * L) : NULL;
    f->rowg = with_p ? cv.take<float>(nb * L) : NULL;
    f->rowb = with_p ? cv.take<float>(nb * L) : NULL;
    return (cv.off + 255) / 256 * 256;
}

// Whether the exact mode is on (cuda_gated_delta_exact), read once a call where the factors are
// carved; the kernels and their launches then ask the factors (f.wlo != NULL), so one call never
// mixes the modes.
bool tc_exact();

// A segment's chunks: [sg TC_SEG, (sg + 1) TC_SEG), cut at max_chunks.
inline int segments_of(int max_chunks) {
    return (max_chunks + TC_SEG - 1) / TC_SEG;
}
// The sets of a segment's buffers the passes' overlap takes: two, one where a row holds a single
// segment (nothing to overlap; a set can be gigabytes at many rows and heads).
inline int sets_of(int max_chunks) {
    return segments_of(max_chunks) > 1 ? 2 : 1;
}
// Where a per-chunk block's (b, h, chunk) is: the chunk's first token and length, or false where
// row b has no chunk c in the span.
inline __device__ bool chunk_at(const int32_t *starts, const int32_t *counts, int max_chunks,
                                Span span, int b, int c, int *t0, int *Lc) {
    if (c >= min(span.end, counts[b])) return false;
    const int32_t *row = starts + (long)b * (max_chunks + 1);
    *t0 = row[c], *Lc = row[c + 1] - row[c];
    return true;
}

inline Span span_at(int sg, int max_chunks) {
    int end = sg * TC_SEG + TC_SEG;
    return Span{sg * TC_SEG, end < max_chunks ? end : max_chunks};
}

// The side streams (lanes) the sequential passes run on beside the caller's stream. A pass over
// a segment is a few dozen blocks, each a chain of dependent steps over the segment's chunks;
// meanwhile the per-chunk kernels of the segments around it (prep, out, the gradients) fill the
// other multiprocessors. The lanes are created once, at the device's highest priority, so that
// a pass's blocks go first as the per-chunk kernels' blocks retire. Each factor buffer is used by
// two segments in turn, ordered by the marks below; every output element still has one owner
// thread, so the bits do not depend on how the lanes overlap.
enum Lane { LANE_PASS, LANE_DPASS, LANES };
enum Mark { MARK_PREP, MARK_PASS, MARK_DPASS, MARKS };
// The lane, or `stream` itself while cuda_gated_delta_lanes is off.
cudaStream_t lane(Lane which, cudaStream_t stream);
// Records mark m on stream s (after what is queued there so far) and returns its event; a wait
// (after) takes the event as last recorded before the wait is queued, so one event a mark serves
// every segment.
cudaEvent_t mark(Mark m, cudaStream_t s);
// Stream `waiter` runs nothing queued after this until e has happened.
void after(cudaStream_t waiter, cudaEvent_t e);

// gated_delta_tc.cu's launches, shared with the backward (gated_delta_tc_bwd.cu). Span: the
// segment's chunks (at most TC_SEG). prep: W, U (and P with f.phi) of the span's chunks. pass:
// the span's chunks in order from the state in slot entry_slot of entry (entry.p NULL: zero),
// leaving the last state in slot leave_slot of leave (leave.p NULL: dropped), keeping each chunk's
// entering state in slot c - span.begin of keep and its V' in f.vphi (none kept: neither).
void tc_prep(const gdn_args *a, const Tensors &t, const int32_t *starts, const int32_t *counts,
             int max_chunks, Span span, const Factors &f, cudaStream_t stream);
void tc_pass(const gdn_args *a, const Tensors &t, const int32_t *starts, const int32_t *counts,
             int max_chunks, Span span, const Factors &f, StateBuf entry, int entry_slot,
             StateBuf leave, int leave_slot, Kept keep, cudaStream_t stream);

// gated_delta_pass.cu: the backward's state-gradient pass over the span's chunks in reverse,
// from the gradient of the state leaving the span's last chunk (carry, [B, H, dk, dv]; on
// return the gradient of the state entering the span), keeping each chunk's leaving-state
// gradient in slot c - span.begin of keep and its dV' in f.dvphi. Needs prep's P and pass's
// V'-independent factors (W).
void tc_dpass(const gdn_args *a, const Tensors &t, const int32_t *starts, const int32_t *counts,
              int max_chunks, Span span, const Factors &f, float *carry, Kept keep,
              cudaStream_t stream);

// gated_delta_tc_grad.cu: every gradient of the span's chunks from the factors (prep with P,
// pass keeping V', dpass keeping dV'), each chunk's entering state (states) and its leaving
// state's gradient (dstates), in slot c - span.begin.
void tc_grad(const gdn_args *a, const Tensors &t, const int32_t *starts, const int32_t *counts,
             int max_chunks, Span span, const Factors &f, Kept states, Kept dstates,
             cudaStream_t stream);

// t->ckpt as the passes' states: the state entering segment sg at slot sg - 1. Exits with a
// message where rows have more than one segment and t->ckpt is NULL.
StateBuf checkpoints(const gdn_args *a, int max_chunks, const cuda_gdn_tensors *t);

// The profiling marks of cuda_gated_delta_profile (kernels_gdn_cuda.h): a launch of phase ph
// between mark_begin and mark_end is timed when profiling is on.
void phase_begin(int ph, cudaStream_t stream);
void phase_end(cudaStream_t stream);

} // namespace gdn

#endif
