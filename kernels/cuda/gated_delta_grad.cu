// The gated delta rule's gradients a chunk at a time (the last of gated_delta.cu's kernels):
// from the chunk's entering state S0 and the gradient of its leaving state dS_end, both kept by
// the passes over chunks, every gradient of the chunk's tokens, recomputing M, P, Rn and Delta.
// In the notation of gated_delta.cu's header, with dO = scale dout and A_ij = beta_i M_ij:
//   dDelta = w dS_end^T k + P^T dO, dR = (I + A)^-T dDelta, dP = dO Delta^T, dA = -dR Delta^T,
// then dq, dk, dv = beta dR, dbeta and dgamma (summed from the end into dg) through each of
// M, P, R, the outputs' state term and the state update.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gated_delta.cuh"

namespace {

using namespace gdn;

// A grad block's shared memory: K and Q tiles; per-token gates and sums; four [L, L] tiles (M
// and P, then the pair terms of the backward); and three [L, dv + 1] rows tiles: Rn = v -
// exp(gamma) S0^T k (so R = beta Rn), Delta and dR.
struct GradSmem {
    bf *K, *Q;
    float *gam, *beta, *eg, *w, *dgam, *rowg, *kz, *red, *M, *P, *dPD, *dAB, *Rn, *Dl, *dR;
};

__host__ __device__ size_t grad_smem_bytes(int dk, int dv) {
    return 2 * sizeof(bf) * L * kstride(dk) +
           sizeof(float) * (7 * L + THREADS + 4 * L * L + 3 * (size_t)L * (dv + 1));
}

__device__ GradSmem grad_smem(unsigned char *base, int dk, int dv) {
    GradSmem s;
    s.K = reinterpret_cast<bf *>(base);
    s.Q = s.K + L * kstride(dk);
    float *p = reinterpret_cast<float *>(s.Q + L * kstride(dk));
    float **small[] = {&s.gam, &s.beta, &s.eg, &s.w, &s.dgam, &s.rowg, &s.kz};
    for (int i = 0; i < 7; i++) *small[i] = p + i * L;
    s.red = p + 7 * L, s.M = s.red + THREADS, s.P = s.M + L * L, s.dPD = s.P + L * L;
    s.dAB = s.dPD + L * L, s.Rn = s.dAB + L * L, s.Dl = s.Rn + L * (dv + 1);
    s.dR = s.Dl + L * (dv + 1);
    return s;
}

// One (chunk, value head) of the grad kernel: where its rows and states are.
struct GradChunk {
    int b, h, hk, t0, Lc;
    const float *S0, *dSe; // [dk, dv]: the entering state and the leaving state's gradient
    const bf *v;           // row 0 of v, dout, dv: stride H dv
    const float *dout;
    bool first; // the key head's first value head: dq and dk are written, then added to
};

// Rn, then Delta = (I + A)^-1 (beta Rn).
__device__ void grad_delta(const GradSmem &s, const gdn_args &a, const GradChunk &g) {
    int dk = a.dk, dv = a.dv, ks = kstride(dk), xs = dv + 1;
    long vs = (long)a.H * dv;
    for (int e = threadIdx.x; e < g.Lc * dv; e += blockDim.x) {
        int i = e / dv, n = e % dv;
        float sk = 0.0f;
        for (int m = 0; m < dk; m++) sk += f(s.K[i * ks + m]) * g.S0[(long)m * dv + n];
        float rn = f(g.v[i * vs + n]) - s.eg[i] * sk;
        s.Rn[i * xs + n] = rn;
        s.Dl[i * xs + n] = s.beta[i] * rn;
    }
    __syncthreads();
    solve_lower(s.Dl, xs, dv, s.M, s.beta, g.Lc);
}

// dDelta_j = w_j dS_end^T k_j + sum_{i >= j} P_ij dO_i into dR, then dR = (I + A)^-T dDelta.
__device__ void grad_ddelta(const GradSmem &s, const gdn_args &a, const GradChunk &g) {
    int dk = a.dk, dv = a.dv, ks = kstride(dk), xs = dv + 1;
    long vs = (long)a.H * dv;
    for (int e = threadIdx.x; e < g.Lc * dv; e += blockDim.x) {
        int j = e / dv, n = e % dv;
        float ds = 0.0f, po = 0.0f;
        for (int m = 0; m < dk; m++) ds += f(s.K[j * ks + m]) * g.dSe[(long)m * dv + n];
        for (int i = j; i < g.Lc; i++) po += s.P[i * L + j] * g.dout[i * vs + n];
        s.dR[j * xs + n] = s.w[j] * ds + a.scale * po;
    }
    __syncthreads();
    solve_upper(s.dR, xs, dv, s.M, s.beta, g.Lc);
}

// The pair terms: dP_ij = dO_i . Delta_j (j <= i), dA_ij = -dR_i . Delta_j (j < i). In place of
// M and P (each thread reads only its own pair): M <- the pair's share of dgamma (added to i,
// taken from j), P <- dA_ij M_ij (dbeta_i's); dPD = dP D, dAB = dA beta_i D (dq's and dk's).
// Then dv = beta dR.
__device__ void grad_pairs(const GradSmem &s, const gdn_args &a, const GradChunk &g,
                           float *dv_out) {
    int dv = a.dv, xs = dv + 1;
    long vs = (long)a.H * dv;
    for (int e = threadIdx.x; e < L * L; e += blockDim.x) {
        int i = e / L, j = e % L;
        float e1 = 0.0f, dam = 0.0f, dpd = 0.0f, dab = 0.0f;
        if (i < g.Lc && j <= i) {
            float dp = 0.0f, da = 0.0f;
            for (int n = 0; n < dv; n++) {
                float dl = s.Dl[j * xs + n];
                dp += g.dout[i * vs + n] * dl;
                da -= s.dR[i * xs + n] * dl;
            }
            dp *= a.scale;
            if (j == i) da = 0.0f;
            float D = expf(s.gam[i] - s.gam[j]);
            e1 = dp * s.P[e] + da * s.beta[i] * s.M[e];
            dam = da * s.M[e], dpd = dp * D, dab = da * s.beta[i] * D;
        }
        s.M[e] = e1, s.P[e] = dam, s.dPD[e] = dpd, s.dAB[e] = dab;
    }
    for (int e = threadIdx.x; e < g.Lc * dv; e += blockDim.x) {
        int i = e / dv, n = e % dv;
        dv_out[i * vs + n] = s.beta[i] * s.dR[i * xs + n];
    }
    __syncthreads();
}

// dq and dk of the chunk's rows, a warp a row, a lane a column m, with the row sums over m
// that dgamma needs: X = S0 dO_i, Y = S0 dR_i, Z = dS_end Delta_i (rows m of each),
//   dq_i = exp(gamma_i) X + sum_j dPD_ij k_j,
//   dk_i = w_i Z - beta_i exp(gamma_i) Y + sum_j (dPD_ji q_j + dAB_ji k_j + dAB_ij k_j).
__device__ void grad_rows(const GradSmem &s, const gdn_args &a, const Tensors &t,
                          const GradChunk &g) {
    int dk = a.dk, dv = a.dv, ks = kstride(dk), xs = dv + 1, lane = threadIdx.x % 32;
    long vs = (long)a.H * dv;
    for (int i = threadIdx.x / 32; i < g.Lc; i += blockDim.x / 32) {
        float gpart = 0.0f, kzpart = 0.0f;
        const float *doi = g.dout + i * vs, *dri = s.dR + i * xs, *dli = s.Dl + i * xs;
        for (int m = lane; m < dk; m += 32) {
            const float *s0 = g.S0 + (long)m * dv, *dse = g.dSe + (long)m * dv;
            float X = 0.0f, Y = 0.0f, Z = 0.0f;
            for (int n = 0; n < dv; n++) {
                X += s0[n] * doi[n];
                Y += s0[n] * dri[n];
                Z += dse[n] * dli[n];
            }
            X *= a.scale;
            float qi = f(s.Q[i * ks + m]), ki = f(s.K[i * ks + m]);
            float dq = s.eg[i] * X, dkv = s.w[i] * Z - s.beta[i] * s.eg[i] * Y;
            for (int j = 0; j <= i; j++) dq += s.dPD[i * L + j] * f(s.K[j * ks + m]);
            for (int j = i; j < g.Lc; j++)
                dkv +=
                    s.dPD[j * L + i] * f(s.Q[j * ks + m]) + s.dAB[j * L + i] * f(s.K[j * ks + m]);
            for (int j = 0; j < i; j++) dkv += s.dAB[i * L + j] * f(s.K[j * ks + m]);
            long o = gdn_qk_off(&a, g.b, g.t0 + i, g.hk) + m;
            t.dq[o] = g.first ? dq : t.dq[o] + dq;
            t.dk[o] = g.first ? dkv : t.dk[o] + dkv;
            gpart += s.eg[i] * qi * X - s.w[i] * ki * Z;
            kzpart += ki * Z;
        }
        gpart = warp_sum(gpart);
        kzpart = warp_sum(kzpart);
        if (lane == 0) s.rowg[i] = gpart, s.kz[i] = kzpart;
    }
    __syncthreads();
}

// dbeta, and dg from dgamma: the rows' sums, the pair terms, R's share, and the state's
// exp(gamma_last) <S0, dS_end> + sum_j w_j k_j . Z_j on the last token; dg is dgamma summed
// from the end (gamma_i sums g_0 .. g_i).
__device__ void grad_scalars(const GradSmem &s, const gdn_args &a, const Tensors &t,
                             const GradChunk &g) {
    int dv = a.dv, xs = dv + 1, Lc = g.Lc;
    long vs = (long)a.H * dv;
    float part = 0.0f;
    for (int e = threadIdx.x; e < a.dk * dv; e += blockDim.x) part += g.S0[e] * g.dSe[e];
    s.red[threadIdx.x] = part;
    int i = threadIdx.x;
    if (i < Lc) {
        float dgam = s.rowg[i], db = 0.0f;
        for (int j = 0; j <= i; j++) dgam += s.M[i * L + j];
        for (int j = i; j < Lc; j++) dgam -= s.M[j * L + i];
        for (int j = 0; j < i; j++) db += s.P[i * L + j];
        for (int n = 0; n < dv; n++) {
            float r = s.dR[i * xs + n], rn = s.Rn[i * xs + n];
            db += r * rn;
            dgam -= s.beta[i] * r * (f(g.v[i * vs + n]) - rn);
        }
        s.dgam[i] = dgam;
        t.dbeta[gdn_gate_off(&a, g.b, g.t0 + i, g.h)] = db;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float sd = 0.0f;
        for (int r = 0; r < (int)blockDim.x; r++) sd += s.red[r];
        float dlast = s.eg[Lc - 1] * sd;
        for (int j = 0; j < Lc; j++) dlast += s.w[j] * s.kz[j];
        s.dgam[Lc - 1] += dlast;
        float acc = 0.0f;
        for (int r = Lc - 1; r >= 0; r--)
            t.dg[gdn_gate_off(&a, g.b, g.t0 + r, g.h)] = acc += s.dgam[r];
    }
}

// Grid (span length, HK, B): chunk span.begin + blockIdx.x of row b, for each value head of key
// head hk in order.
__global__ void __launch_bounds__(THREADS)
    grad_kernel(gdn_args a, Tensors t, const int32_t *starts, const int32_t *counts, int max_chunks,
                Span span, StateBuf states, StateBuf dstates) {
    extern __shared__ __align__(16) unsigned char smem[];
    int c = span.begin + blockIdx.x, hk = blockIdx.y, b = blockIdx.z, group = a.H / a.HK;
    if (c >= min(span.end, counts[b])) return;
    const int32_t *row = starts + (long)b * (max_chunks + 1);
    GradChunk g;
    g.b = b, g.hk = hk, g.t0 = row[c], g.Lc = row[c + 1] - g.t0;
    GradSmem s = grad_smem(smem, a.dk, a.dv);
    long qk_stride = (long)a.HK * a.dk;
    load_rows(s.K, t.k + gdn_qk_off(&a, b, g.t0, hk), qk_stride, g.Lc, a.dk);
    load_rows(s.Q, t.q + gdn_qk_off(&a, b, g.t0, hk), qk_stride, g.Lc, a.dk);
    for (int h = hk * group; h < (hk + 1) * group; h++) {
        g.h = h, g.first = h == hk * group;
        g.S0 = state_at(states, a, b, h, c - span.begin);
        g.dSe = state_at(dstates, a, b, h, c - span.begin);
        g.v = t.v + gdn_v_off(&a, b, g.t0, h), g.dout = t.dout + gdn_v_off(&a, b, g.t0, h);
        __syncthreads(); // the previous head is done with the tiles
        long go = gdn_gate_off(&a, b, g.t0, h);
        if (threadIdx.x == 0)
            load_gates(s.gam, s.beta, s.eg, s.w, t.g + go, t.beta + go, a.H, g.Lc);
        __syncthreads();
        chunk_mats(s.M, s.P, s.K, s.Q, s.gam, g.Lc, a.dk);
        __syncthreads();
        grad_delta(s, a, g);
        grad_ddelta(s, a, g);
        grad_pairs(s, a, g, t.dv + gdn_v_off(&a, b, g.t0, h));
        grad_rows(s, a, t, g);
        grad_scalars(s, a, t, g);
    }
}

} // namespace

void gdn::grad_launch(const gdn_args *a, const Tensors &t, const int32_t *starts,
                      const int32_t *counts, int max_chunks, Span span, const StateBuf &states,
                      const StateBuf &dstates, cudaStream_t stream) {
    size_t smem = grad_smem_bytes(a->dk, a->dv);
    CUDA_CHECK(
        cudaFuncSetAttribute(grad_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid(span.end - span.begin, a->HK, a->B);
    grad_kernel<<<grid, THREADS, smem, stream>>>(*a, t, starts, counts, max_chunks, span, states,
                                                 dstates);
    CUDA_CHECK_LAUNCH();
}
