/* srk_norm.cuh: row-wise kernels in forward/backward pairs: layernorm,
 * rmsnorm, softmax, and the fused softmax + cross-entropy.
 *
 * Norms: one warp per row (rows are short: the model width), statistics in
 * float, the parameter gradients by the deterministic column sums of
 * srk_pointwise.cuh. Softmax and cross-entropy: one block per row (rows can
 * be a 50257-token vocabulary). The loss is reduced over rows in one block in
 * double, in a fixed order, and stays on the device: the generated forward
 * copies the scalar back.
 */
#ifndef SRK_NORM_CUH
#define SRK_NORM_CUH

#include "srk_pointwise.cuh"

/* CE_FUSED_THREADS: the fused loss reads each row twice, the second time from L2; a row of
 * GPT-2's 50304 bf16 logits is 100 KB, and with 1024 threads (2 blocks an SM) the rows in
 * flight on an H100/H200's 132 SMs are about 26 MB of its 50 MB L2 (with 512: about 53 MB) */
enum { NORM_WARPS = 8, ROW_THREADS = 256, CE_THREADS = 512, CE_FUSED_THREADS = 1024 };

/* ---- layernorm ------------------------------------------------------------------------ */
template <class TO, class TX, class TW, class TB>
__global__ void layernorm_fwd_kernel(TO *out, float *mean, float *rstd, const TX *x, const TW *w, const TB *b,
                                     long N, int C, float eps)
{
    // out (N,C), mean (N), rstd (N), x (N,C), w (C), b (C); biased variance, eps inside the sqrt
    long row = (long)blockIdx.x * NORM_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return; /* the whole warp leaves */
    const TX *xr = x + row * C;
    float s = 0.0f;
    for (int j = lane; j < C; j += 32) s += srk_ld(xr[j]);
    float m = srk_warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int j = lane; j < C; j += 32) {
        float d = srk_ld(xr[j]) - m;
        v += d * d;
    }
    float var = srk_warp_sum(v) / (float)C;
    float rs = 1.0f / sqrtf(var + eps);
    TO *orow = out + row * C;
    for (int j = lane; j < C; j += 32) orow[j] = srk_to<TO>((srk_ld(xr[j]) - m) * rs * srk_ld(w[j]) + srk_ld(b[j]));
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = rs;
    }
}

/* the forward norms through 16-byte accesses (C % 8 == 0, 16-byte aligned tensors): a warp per
 * row, lane l the eights l, l + 32, ... of it (NV8 of them), read once into registers; RMS:
 * rmsnorm_fwd_kernel's arithmetic (b, mean unused), else layernorm_fwd_kernel's. Each output
 * is the scalar kernel's expression; the row sums add in another order */
template <int NV8, bool RMS, class TO, class TX, class TW, class TB>
__global__ void __launch_bounds__(32 * NORM_WARPS)
    norm_fwd8_kernel(TO *__restrict__ out, float *__restrict__ mean, float *__restrict__ rstd,
                     const TX *__restrict__ x, const TW *__restrict__ w, const TB *__restrict__ b, long N, int C,
                     float eps)
{
    long row = (long)blockIdx.x * NORM_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31, c8 = C / 8;
    if (row >= N) return; /* the whole warp leaves */
    const TX *xr = x + row * C;
    float xv[NV8][8], s = 0.0f;
    SRK_UNROLL
    for (int k = 0; k < NV8; k++) {
        int c = lane + 32 * k;
        SRK_UNROLL
        for (int e = 0; e < 8; e++) xv[k][e] = 0.0f;
        if (c >= c8) continue;
        srk_ld8(xr + 8 * c, xv[k]);
        SRK_UNROLL
        for (int e = 0; e < 8; e++) s += RMS ? xv[k][e] * xv[k][e] : xv[k][e];
    }
    float m = 0.0f, rs;
    if constexpr (RMS) {
        rs = 1.0f / sqrtf(srk_warp_sum(s) / (float)C + eps);
    } else {
        m = srk_warp_sum(s) / (float)C;
        float v = 0.0f;
        SRK_UNROLL
        for (int k = 0; k < NV8; k++) {
            if (lane + 32 * k >= c8) continue;
            SRK_UNROLL
            for (int e = 0; e < 8; e++) {
                float d = xv[k][e] - m;
                v += d * d;
            }
        }
        rs = 1.0f / sqrtf(srk_warp_sum(v) / (float)C + eps);
    }
    TO *orow = out + row * C;
    SRK_UNROLL
    for (int k = 0; k < NV8; k++) {
        int c = lane + 32 * k;
        if (c >= c8) continue;
        float wv[8], bv[8], o[8];
        srk_ld8(w + 8 * c, wv);
        if constexpr (RMS) {
            SRK_UNROLL
            for (int e = 0; e < 8; e++) o[e] = xv[k][e] * rs * wv[e];
        } else {
            srk_ld8(b + 8 * c, bv);
            SRK_UNROLL
            for (int e = 0; e < 8; e++) o[e] = (xv[k][e] - m) * rs * wv[e] + bv[e];
        }
        srk_st8(orow + 8 * c, o);
    }
    if (lane == 0) {
        if (!RMS && mean) mean[row] = m;
        if (rstd) rstd[row] = rs;
    }
}
/* norm_fwd8_kernel for C up to 1024 (4 eights a lane) where the tensors allow; 0 where not */
template <bool RMS, class TO, class TX, class TW, class TB>
int srk_norm_fwd8(TO *out, float *mean, float *rstd, const TX *x, const TW *w, const TB *b, long N, long C, float eps)
{
    if (C > 1024 || !srk_by8(C, out, x) || !srk_by8(C, w, b)) return 0;
    unsigned grid = (unsigned)((N + NORM_WARPS - 1) / NORM_WARPS);
    long nv8 = (C / 8 + 31) / 32; /* eights per lane */
#define SRK_NORM_FWD8(NV8)                                                                                           \
    SR_LAUNCH((norm_fwd8_kernel<NV8, RMS, TO, TX, TW, TB>), grid, 32 * NORM_WARPS, 0, srk_ctx.stream, out, mean, rstd, \
              x, w, b, N, (int)C, eps)
    if (nv8 <= 1) SRK_NORM_FWD8(1);
    else if (nv8 <= 2) SRK_NORM_FWD8(2);
    else if (nv8 <= 3) SRK_NORM_FWD8(3);
    else SRK_NORM_FWD8(4);
#undef SRK_NORM_FWD8
    return 1;
}

/* NV > 0: a row of at most 32*NV elements is read once and kept in registers
 * (NV values per lane, loops unrolled; up to 93 registers, hence the launch
 * bound); NV = 0: any width, read twice. The sums run in the same order
 * either way. Measured on an H200 before this (two passes, no __restrict__):
 * 203 us for 8192 x 768 bf16 rows, 14 times the forward's 14 us. */
template <int NV, class TD, class TG, class TX, class TW>
__global__ void __launch_bounds__(32 * NORM_WARPS) layernorm_bwd_dx_kernel(TD *__restrict__ dx, const TG *__restrict__ dout, const TX *__restrict__ x,
                                        const TW *__restrict__ w, const float *__restrict__ mean,
                                        const float *__restrict__ rstd, long N, int C)
{
    // dx (N,C) += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dout * w
    long row = (long)blockIdx.x * NORM_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    const TX *xr = x + row * C;
    const TG *gr = dout + row * C;
    TD *dr = dx + row * C;
    float m = mean[row], rs = rstd[row];
    float sd = 0.0f, sdn = 0.0f;
    if constexpr (NV > 0) { /* constexpr: the other form is not compiled (nvcc: "loop is not reachable") */
        float nv[NV], dv[NV];
        SRK_UNROLL
        for (int k = 0; k < NV; k++) {
            int j = lane + 32 * k;
            nv[k] = dv[k] = 0.0f;
            if (j < C) {
                nv[k] = (srk_ld(xr[j]) - m) * rs;
                dv[k] = srk_ld(gr[j]) * srk_ld(w[j]);
                sd += dv[k];
                sdn += dv[k] * nv[k];
            }
        }
        float md = srk_warp_sum(sd) / (float)C, mdn = srk_warp_sum(sdn) / (float)C;
        SRK_UNROLL
        for (int k = 0; k < NV; k++) {
            int j = lane + 32 * k;
            if (j < C) srk_acc(&dr[j], (dv[k] - md - nv[k] * mdn) * rs);
        }
    } else {
        for (int j = lane; j < C; j += 32) {
            float norm = (srk_ld(xr[j]) - m) * rs, dn = srk_ld(gr[j]) * srk_ld(w[j]);
            sd += dn;
            sdn += dn * norm;
        }
        float md = srk_warp_sum(sd) / (float)C, mdn = srk_warp_sum(sdn) / (float)C;
        for (int j = lane; j < C; j += 32) {
            float norm = (srk_ld(xr[j]) - m) * rs, dn = srk_ld(gr[j]) * srk_ld(w[j]);
            srk_acc(&dr[j], (dn - md - norm * mdn) * rs);
        }
    }
}

/* one row of the layernorm backward's dx through 16-byte accesses (a warp; lane l the eights
 * l, l + 32, ... of the row, NV8 of them, in registers); with SUMS also the row's terms of the
 * parameter gradients' column sums (srk_cs_add's LN terms) into aw, ab */
template <int NV8, bool SUMS, class TD, class TG, class TX, class TW>
__device__ __forceinline__ void srk_ln_bwd_row8(TD *__restrict__ dx, const TG *__restrict__ dout,
                                                const TX *__restrict__ x, const TW *__restrict__ w,
                                                const float *__restrict__ mean, const float *__restrict__ rstd,
                                                long row, int C, float (*aw)[8], float (*ab)[8])
{
    int lane = threadIdx.x & 31, c8 = C / 8;
    const TX *xr = x + row * C;
    const TG *gr = dout + row * C;
    TD *dr = dx + row * C;
    float m = mean[row], rs = rstd[row];
    float sd = 0.0f, sdn = 0.0f, nv[NV8][8], dv[NV8][8];
    SRK_UNROLL
    for (int k = 0; k < NV8; k++) {
        int c = lane + 32 * k;
        float xv[8], gv[8], wv[8];
        SRK_UNROLL
        for (int e = 0; e < 8; e++) nv[k][e] = dv[k][e] = 0.0f;
        if (c < c8) {
            srk_ld8(xr + 8 * c, xv);
            srk_ld8(gr + 8 * c, gv);
            srk_ld8(w + 8 * c, wv);
            SRK_UNROLL
            for (int e = 0; e < 8; e++) {
                nv[k][e] = (xv[e] - m) * rs;
                dv[k][e] = gv[e] * wv[e];
                sd += dv[k][e];
                sdn += dv[k][e] * nv[k][e];
                if constexpr (SUMS) srk_cs_add<CS_MODE_LN>(aw[k][e], ab[k][e], gv[e], xv[e], mean, rstd, row);
            }
        }
    }
    float md = srk_warp_sum(sd) / (float)C, mdn = srk_warp_sum(sdn) / (float)C;
    SRK_UNROLL
    for (int k = 0; k < NV8; k++) {
        int c = lane + 32 * k;
        if (c >= c8) continue;
        float d[8];
        srk_ld8(dr + 8 * c, d);
        SRK_UNROLL
        for (int e = 0; e < 8; e++) d[e] += (dv[k][e] - md - nv[k][e] * mdn) * rs;
        srk_st8(dr + 8 * c, d);
    }
}

/* layernorm_bwd_dx_kernel's arithmetic through 16-byte accesses (C % 8 == 0,
 * 16-byte aligned tensors): a warp per row (srk_ln_bwd_row8); the row sums add in another
 * order than the scalar kernel's, each element's update is the same */
template <int NV8, class TD, class TG, class TX, class TW>
__global__ void __launch_bounds__(32 * NORM_WARPS)
    layernorm_bwd_dx8_kernel(TD *__restrict__ dx, const TG *__restrict__ dout, const TX *__restrict__ x,
                             const TW *__restrict__ w, const float *__restrict__ mean, const float *__restrict__ rstd,
                             long N, int C)
{
    long row = (long)blockIdx.x * NORM_WARPS + (threadIdx.x >> 5);
    if (row < N) srk_ln_bwd_row8<NV8, false>(dx, dout, x, w, mean, rstd, row, C, NULL, NULL);
}

/* layernorm_bwd_dx8_kernel's rows with the parameter gradients' column sums of the same pass,
 * so srk_colsum does not read dout and x again: block c takes chunk c's rows [N c / chunks,
 * N (c+1) / chunks), warp w the rows r0 + w, r0 + w + 8, ... in order, lane l the eights l,
 * l + 32, ... of each; the lanes' sums (srk_cs_add's LN terms) stay in registers, then the warps'
 * are added in warp order into pw, pb (chunks, C). Those are colsum_part8_kernel's rows, order
 * and terms: the same bits (srk_layernorm_bwd finishes them as srk_colsum does) */
template <int NV8, class TD, class TG, class TX, class TW>
__global__ void __launch_bounds__(32 * NORM_WARPS, 2)
    layernorm_bwd_dx8_sums_kernel(TD *__restrict__ dx, float *__restrict__ pw, float *__restrict__ pb,
                                  const TG *__restrict__ dout, const TX *__restrict__ x, const TW *__restrict__ w,
                                  const float *__restrict__ mean, const float *__restrict__ rstd, long N, int C,
                                  int chunks)
{
    __shared__ float sw[256 * NV8], sb[256 * NV8];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, c8 = C / 8, ch = blockIdx.x;
    long r0 = N * ch / chunks, r1 = N * (ch + 1) / chunks;
    float aw[NV8][8], ab[NV8][8];
    SRK_UNROLL
    for (int k = 0; k < NV8; k++)
        SRK_UNROLL
        for (int e = 0; e < 8; e++) aw[k][e] = ab[k][e] = 0.0f;
    for (long row = r0 + warp; row < r1; row += NORM_WARPS)
        srk_ln_bwd_row8<NV8, true>(dx, dout, x, w, mean, rstd, row, C, aw, ab);
    for (int j = threadIdx.x; j < C; j += blockDim.x) sw[j] = sb[j] = 0.0f;
    for (int v = 0; v < NORM_WARPS; v++) { /* the warps' sums in warp order, as colsum_part8's row lanes */
        __syncthreads();
        if (warp != v) continue;
        SRK_UNROLL
        for (int k = 0; k < NV8; k++) {
            if (lane + 32 * k >= c8) continue;
            SRK_UNROLL
            for (int e = 0; e < 8; e++) {
                sw[8 * (lane + 32 * k) + e] += aw[k][e];
                sb[8 * (lane + 32 * k) + e] += ab[k][e];
            }
        }
    }
    __syncthreads();
    for (int j = threadIdx.x; j < C; j += blockDim.x) {
        pw[(long)ch * C + j] = sw[j];
        pb[(long)ch * C + j] = sb[j];
    }
}

template <class TO, class TX, class TW, class TB>
void srk_layernorm_fwd(TO *out, float *mean, float *rstd, const TX *x, const TW *w, const TB *b, long N, long C,
                       float eps)
{
    if (N <= 0 || C <= 0 || srk_norm_fwd8<false>(out, mean, rstd, x, w, b, N, C, eps)) return;
    unsigned grid = (unsigned)((N + NORM_WARPS - 1) / NORM_WARPS);
    SR_LAUNCH((layernorm_fwd_kernel<TO, TX, TW, TB>), grid, 32 * NORM_WARPS, 0, srk_ctx.stream, out, mean, rstd, x, w,
              b, N, (int)C, eps);
}
template <class TD, class TDW, class TDB, class TG, class TX, class TW>
void srk_layernorm_bwd(TD *dx, TDW *dw, TDB *db, const TG *dout, const TX *x, const TW *w, const float *mean,
                       const float *rstd, long N, long C)
{
    if (N <= 0 || C <= 0) return;
    if (dx && dw && db && C <= 768 && srk_by8(C, dx, dout, x) && srk_by8(C, w, w)) {
        /* dx and the column sums in one pass (up to 3 eights a lane: the sums' registers) */
        int chunks = srk_colsum_chunks(N);
        float *pw = (float *)srk_scratch(SRK_SCR_PART, sizeof(float) * (size_t)chunks * (size_t)C);
        float *pb = (float *)srk_scratch(SRK_SCR_PART2, sizeof(float) * (size_t)chunks * (size_t)C);
        if (!pw || !pb) return;
        long nv8 = (C / 8 + 31) / 32;
#define SRK_LN_SUMS(NV8)                                                                                             \
    SR_LAUNCH((layernorm_bwd_dx8_sums_kernel<NV8, TD, TG, TX, TW>), (unsigned)chunks, 32 * NORM_WARPS, 0,              \
              srk_ctx.stream, dx, pw, pb, dout, x, w, mean, rstd, N, (int)C, chunks)
        if (nv8 <= 1) SRK_LN_SUMS(1);
        else if (nv8 <= 2) SRK_LN_SUMS(2);
        else SRK_LN_SUMS(3);
#undef SRK_LN_SUMS
        srk_colsum_finish(dw, (const float *)pw, db, (const float *)pb, C, chunks, 1.0f, 0);
        return;
    }
    if (dx) {
        unsigned grid = (unsigned)((N + NORM_WARPS - 1) / NORM_WARPS);
        long nv = (C + 31) / 32; /* values per lane */
#define SRK_LN_DX(NV)                                                                                                \
    SR_LAUNCH((layernorm_bwd_dx_kernel<NV, TD, TG, TX, TW>), grid, 32 * NORM_WARPS, 0, srk_ctx.stream, dx, dout, x, w, \
              mean, rstd, N, (int)C)
#define SRK_LN_DX8(NV8)                                                                                               \
    SR_LAUNCH((layernorm_bwd_dx8_kernel<NV8, TD, TG, TX, TW>), grid, 32 * NORM_WARPS, 0, srk_ctx.stream, dx, dout, x, \
              w, mean, rstd, N, (int)C)
        if (C <= 1024 && srk_by8(C, dx, dout, x) && srk_by8(C, w, w)) {
            long nv8 = (C / 8 + 31) / 32; /* eights per lane */
            if (nv8 <= 1) SRK_LN_DX8(1);
            else if (nv8 <= 2) SRK_LN_DX8(2);
            else if (nv8 <= 3) SRK_LN_DX8(3);
            else SRK_LN_DX8(4);
        } else if (nv <= 8) SRK_LN_DX(8);
        else if (nv <= 16) SRK_LN_DX(16);
        else if (nv <= 24) SRK_LN_DX(24);
        else if (nv <= 32) SRK_LN_DX(32);
        else SRK_LN_DX(0);
#undef SRK_LN_DX
#undef SRK_LN_DX8
    }
    srk_colsum<CS_MODE_LN, TDW, TDB>(dw, db, 1.0f, dout, x, mean, rstd, N, C);
}

/* ---- rmsnorm ---------------------------------------------------------------------------- */
template <class TO, class TX, class TW>
__global__ void rmsnorm_fwd_kernel(TO *out, float *rstd, const TX *x, const TW *w, long N, int C, float eps)
{
    // out (N,C) = x * rsqrt(mean(x^2) + eps) * w ; rstd (N)
    long row = (long)blockIdx.x * NORM_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    const TX *xr = x + row * C;
    float ss = 0.0f;
    for (int j = lane; j < C; j += 32) {
        float v = srk_ld(xr[j]);
        ss += v * v;
    }
    float rs = 1.0f / sqrtf(srk_warp_sum(ss) / (float)C + eps);
    TO *orow = out + row * C;
    for (int j = lane; j < C; j += 32) orow[j] = srk_to<TO>(srk_ld(xr[j]) * rs * srk_ld(w[j]));
    if (lane == 0 && rstd) rstd[row] = rs;
}

template <class TD, class TG, class TX, class TW>
__global__ void rmsnorm_bwd_dx_kernel(TD *__restrict__ dx, const TG *__restrict__ dout, const TX *__restrict__ x,
                                      const TW *__restrict__ w, const float *__restrict__ rstd, long N, int C)
{
    // dx += rstd * (dout*w - x * rstd^2 * mean(dout*w*x))
    long row = (long)blockIdx.x * NORM_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    const TX *xr = x + row * C;
    const TG *gr = dout + row * C;
    float rs = rstd[row];
    float dot = 0.0f;
    for (int j = lane; j < C; j += 32) dot += srk_ld(gr[j]) * srk_ld(w[j]) * srk_ld(xr[j]);
    float c = rs * rs * srk_warp_sum(dot) / (float)C;
    TD *dr = dx + row * C;
    for (int j = lane; j < C; j += 32) srk_acc(&dr[j], rs * (srk_ld(gr[j]) * srk_ld(w[j]) - srk_ld(xr[j]) * c));
}

/* rmsnorm_bwd_dx_kernel's arithmetic through 16-byte accesses (C % 8 == 0,
 * 16-byte aligned tensors), the row read twice as there; the row sum adds
 * in another order, each element's update is the same */
template <class TD, class TG, class TX, class TW>
__global__ void rmsnorm_bwd_dx8_kernel(TD *__restrict__ dx, const TG *__restrict__ dout, const TX *__restrict__ x,
                                       const TW *__restrict__ w, const float *__restrict__ rstd, long N, int C)
{
    long row = (long)blockIdx.x * NORM_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31, c8 = C / 8;
    if (row >= N) return;
    const TX *xr = x + row * C;
    const TG *gr = dout + row * C;
    TD *dr = dx + row * C;
    float rs = rstd[row], dot = 0.0f, xv[8], gv[8], wv[8], d[8];
    for (int c = lane; c < c8; c += 32) {
        srk_ld8(xr + 8 * c, xv), srk_ld8(gr + 8 * c, gv), srk_ld8(w + 8 * c, wv);
        SRK_UNROLL
        for (int e = 0; e < 8; e++) dot += gv[e] * wv[e] * xv[e];
    }
    float k = rs * rs * srk_warp_sum(dot) / (float)C;
    for (int c = lane; c < c8; c += 32) {
        srk_ld8(xr + 8 * c, xv), srk_ld8(gr + 8 * c, gv), srk_ld8(w + 8 * c, wv), srk_ld8(dr + 8 * c, d);
        SRK_UNROLL
        for (int e = 0; e < 8; e++) d[e] += rs * (gv[e] * wv[e] - xv[e] * k);
        srk_st8(dr + 8 * c, d);
    }
}

template <class TO, class TX, class TW>
void srk_rmsnorm_fwd(TO *out, float *rstd, const TX *x, const TW *w, long N, long C, float eps)
{
    if (N <= 0 || C <= 0 || srk_norm_fwd8<true>(out, (float *)NULL, rstd, x, w, (const float *)NULL, N, C, eps))
        return;
    unsigned grid = (unsigned)((N + NORM_WARPS - 1) / NORM_WARPS);
    SR_LAUNCH((rmsnorm_fwd_kernel<TO, TX, TW>), grid, 32 * NORM_WARPS, 0, srk_ctx.stream, out, rstd, x, w, N, (int)C,
              eps);
}
template <class TD, class TDW, class TG, class TX, class TW>
void srk_rmsnorm_bwd(TD *dx, TDW *dw, const TG *dout, const TX *x, const TW *w, const float *rstd, long N, long C)
{
    if (N <= 0 || C <= 0) return;
    if (dx) {
        unsigned grid = (unsigned)((N + NORM_WARPS - 1) / NORM_WARPS);
        if (srk_by8(C, dx, dout, x) && srk_by8(C, w, w))
            SR_LAUNCH((rmsnorm_bwd_dx8_kernel<TD, TG, TX, TW>), grid, 32 * NORM_WARPS, 0, srk_ctx.stream, dx, dout, x,
                      w, rstd, N, (int)C);
        else
            SR_LAUNCH((rmsnorm_bwd_dx_kernel<TD, TG, TX, TW>), grid, 32 * NORM_WARPS, 0, srk_ctx.stream, dx, dout, x,
                      w, rstd, N, (int)C);
    }
    srk_colsum<CS_MODE_RMS, TDW, float>(dw, (float *)NULL, 1.0f, dout, x, NULL, rstd, N, C);
}

/* ---- softmax ------------------------------------------------------------------------------ */
template <class TO, class TX>
__global__ void softmax_fwd_kernel(TO *out, const TX *x, int C)
{
    // one block per row: out (N,C) = exp(x - max) / sum
    long row = blockIdx.x;
    const TX *xr = x + row * C;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < C; j += blockDim.x) mx = fmaxf(mx, srk_ld(xr[j]));
    mx = srk_block_max(mx);
    float s = 0.0f;
    for (int j = threadIdx.x; j < C; j += blockDim.x) s += expf(srk_ld(xr[j]) - mx);
    float inv = 1.0f / srk_block_sum(s);
    TO *orow = out + row * C;
    for (int j = threadIdx.x; j < C; j += blockDim.x) orow[j] = srk_to<TO>(expf(srk_ld(xr[j]) - mx) * inv);
}
template <class TD, class TG, class TY>
__global__ void softmax_bwd_kernel(TD *dx, const TG *dout, const TY *y, int C)
{
    // dx += y * (dout - sum(dout * y))
    long row = blockIdx.x;
    const TG *gr = dout + row * C;
    const TY *yr = y + row * C;
    float dot = 0.0f;
    for (int j = threadIdx.x; j < C; j += blockDim.x) dot += srk_ld(gr[j]) * srk_ld(yr[j]);
    dot = srk_block_sum(dot);
    TD *dr = dx + row * C;
    for (int j = threadIdx.x; j < C; j += blockDim.x) srk_acc(&dr[j], srk_ld(yr[j]) * (srk_ld(gr[j]) - dot));
}
template <class TO, class TX>
void srk_softmax_fwd(TO *out, const TX *x, long N, long C)
{
    if (N <= 0 || C <= 0) return;
    SR_LAUNCH((softmax_fwd_kernel<TO, TX>), (unsigned)N, ROW_THREADS, 0, srk_ctx.stream, out, x, (int)C);
}
template <class TD, class TG, class TY>
void srk_softmax_bwd(TD *dx, const TG *dout, const TY *out, long N, long C)
{
    if (!dx || N <= 0 || C <= 0) return;
    SR_LAUNCH((softmax_bwd_kernel<TD, TG, TY>), (unsigned)N, ROW_THREADS, 0, srk_ctx.stream, dx, dout, out, (int)C);
}

/* ---- fused softmax + cross-entropy ----------------------------------------------------------- */
/* online softmax statistics: after srk_ce_see of every x, s = sum exp(x - m), m = max x */
__device__ __forceinline__ void srk_ce_see(float &m, float &s, float x)
{
    if (x > m) {
        s = s * expf(m - x) + 1.0f; /* m = -inf the first time: expf(-inf) = 0 */
        m = x;
    } else if (x > -INFINITY || x != x) {
        s += expf(x - m); /* NaN stays NaN, as the host's; -inf adds nothing */
    }
}
/* a row 16-byte aligned: the loop over eights through 16-byte accesses (srk_ld8: float or bf16),
 * else the scalar one (block-uniform) */
__device__ __forceinline__ bool srk_ce_vec(const void *row) { return ((uintptr_t)row & 15u) == 0; }
/* the log-sum-exp of a row's first V logits, read once (an online softmax), in every thread of
 * the block (its reductions end in barriers: a thread's reads before the call precede every
 * thread's code after it) */
template <class TL>
__device__ float srk_ce_row_lse(const TL *lr, int V)
{
    float m = -INFINITY, s = 0.0f;
    int j0 = 0;
    if (srk_ce_vec(lr)) {
        for (int q = threadIdx.x; q < V / 8; q += blockDim.x) {
            float x[8];
            srk_ld8(lr + 8 * q, x);
            SRK_UNROLL
            for (int k = 0; k < 8; k++) srk_ce_see(m, s, x[k]);
        }
        j0 = V / 8 * 8;
    }
    for (int j = j0 + threadIdx.x; j < V; j += blockDim.x) srk_ce_see(m, s, srk_ld(lr[j]));
    float mx = srk_block_max(m);
    s = srk_block_sum(m == -INFINITY ? 0.0f : s * expf(m - mx));
    return mx + logf(s);
}
template <class TL>
__global__ void crossentropy_rows_kernel(float *lse, float *rowloss, const TL *logits, const int32_t *targets, int V,
                                         int ld)
{
    // one block per row of ld columns, the first V classes:
    // lse = max + log(sum exp(l - max)); rowloss = lse - l[target] (0 if the target is out of range)
    long row = blockIdx.x;
    const TL *lr = logits + row * ld;
    float l = srk_ce_row_lse(lr, V);
    if (threadIdx.x == 0) {
        if (lse) lse[row] = l;
        int t = targets[row];
        rowloss[row] = (t >= 0 && t < V) ? l - srk_ld(lr[t]) : 0.0f;
    }
}
static __global__ void mean_rows_kernel(float *out, const float *rowloss, long N)
{
    // out[0] = sum(rowloss) / N, in double, in a fixed order (one block)
    double s = 0.0;
    for (long i = threadIdx.x; i < N; i += blockDim.x) s += rowloss[i];
    s = srk_block_sum_d(s);
    if (threadIdx.x == 0) out[0] = (float)(s / (double)N);
}
/* one logit's gradient: sc * (softmax - onehot) */
__device__ __forceinline__ float srk_ce_grad(float x, float l, float sc, int j, int t)
{
    return sc * expf(x - l) - (j == t ? sc : 0.0f);
}
/* a row's gradient, dr += (fresh: =) sc * (softmax - onehot(t)) over its first V columns of ld; an
 * ignored row (t outside [0, V)) gets nothing; fresh also writes 0 where nothing is added (the
 * padding, an ignored row). dr may be lr (each thread reads its elements before it writes them) */
template <class TD, class TL>
__device__ void srk_ce_grad_row(TD *dr, const TL *lr, int V, int ld, float l, float sc, int t, int fresh)
{
    bool ignored = t < 0 || t >= V;
    for (int j = (ignored ? 0 : V) + threadIdx.x; fresh && j < ld; j += blockDim.x) dr[j] = srk_to<TD>(0.0f);
    if (ignored) return; /* the whole block leaves */
    int j0 = 0;
    if (srk_ce_vec(lr) && srk_ce_vec(dr)) {
        for (int q = threadIdx.x; q < V / 8; q += blockDim.x) {
            float x[8], d[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
            srk_ld8(lr + 8 * q, x);
            if (!fresh) srk_ld8(dr + 8 * q, d);
            SRK_UNROLL
            for (int k = 0; k < 8; k++) { /* as srk_put: fresh stores the term itself */
                float g = srk_ce_grad(x[k], l, sc, 8 * q + k, t);
                d[k] = fresh ? g : d[k] + g;
            }
            srk_st8(dr + 8 * q, d);
        }
        j0 = V / 8 * 8;
    }
    for (int j = j0 + threadIdx.x; j < V; j += blockDim.x) srk_put(&dr[j], srk_ce_grad(srk_ld(lr[j]), l, sc, j, t), fresh);
}
template <class TD, class TL>
__global__ void crossentropy_bwd_kernel(TD *dlogits, const TL *logits, const float *lse, const int32_t *targets,
                                        const float *dloss, long N, int V, int ld, int fresh)
{
    // dlogits (N,ld) += dloss/N * (softmax(logits) - onehot(target)) in the first V columns (the
    // rest pad); ignored rows get nothing. fresh: dlogits = that, and 0 where nothing is added
    long row = blockIdx.x;
    srk_ce_grad_row(dlogits + row * ld, logits + row * ld, V, ld, lse[row], dloss[0] / (float)N, targets[row], fresh);
}

/* the rows kernel's statistics of one row, then the row overwritten by the backward kernel's
 * gradient into zeros (fresh), sc = dloss / N: the second read of the row comes from L2, so
 * the logits are read once from memory, not twice, and need no gradient buffer */
template <class TL>
__global__ void crossentropy_fused_kernel(float *lse, float *rowloss, TL *logits, const int32_t *targets, int V,
                                          int ld, float sc)
{
    long row = blockIdx.x;
    TL *lr = logits + row * ld;
    int t = targets[row];
    bool ignored = t < 0 || t >= V;
    float xt = !ignored && threadIdx.x == 0 ? srk_ld(lr[t]) : 0.0f; /* before any thread writes */
    float l = srk_ce_row_lse(lr, V);
    if (threadIdx.x == 0) {
        if (lse) lse[row] = l;
        rowloss[row] = ignored ? 0.0f : l - xt;
    }
    srk_ce_grad_row(lr, lr, V, ld, l, sc, t, 1);
}

/* the loss's rows, then their mean into loss (1): with GRAD, crossentropy_fused_kernel
 * (sc = dloss / N), else crossentropy_rows_kernel (TL const) */
template <bool GRAD, class TL>
static void srk_ce_launch(float *loss, float *lse, TL *logits, const int32_t *targets, long N, long V, long nv, float sc)
{
    if (N <= 0) {
        srk_zero(loss, 1);
        return;
    }
    float *rows = (float *)srk_scratch(SRK_SCR_ROWS, sizeof(float) * (size_t)N);
    if (!rows) return;
    if constexpr (GRAD)
        SR_LAUNCH(crossentropy_fused_kernel<TL>, (unsigned)N, CE_FUSED_THREADS, 0, srk_ctx.stream, lse, rows, logits,
                  targets, sr_ce_classes(0, (int)V, (int)nv), (int)V, sc);
    else
        SR_LAUNCH(crossentropy_rows_kernel<typename std::remove_const<TL>::type>, (unsigned)N, CE_THREADS, 0,
                  srk_ctx.stream, lse, rows, logits, targets, sr_ce_classes(0, (int)V, (int)nv), (int)V);
    SR_LAUNCH(mean_rows_kernel, 1, 1024, 0, srk_ctx.stream, loss, (const float *)rows, N);
}
/* loss (1) = mean over rows (on the device); lse (N) is saved for the backward; the
 * columns of the V from nv on pad the vocabulary (nv 0: none) */
template <class TL>
void srk_crossentropy_fwd(float *loss, float *lse, const TL *logits, const int32_t *targets, long N, long V, long nv)
{
    srk_ce_launch<false>(loss, lse, logits, targets, N, V, nv, 0.0f);
}
/* dloss is a device pointer to the scalar seed (the backward's d loss); fresh (the code
 * generator's $z) bit 0: dlogits starts at zero, uncleared, and is overwritten */
template <class TD, class TL>
void srk_crossentropy_bwd(TD *dlogits, const TL *logits, const float *lse, const int32_t *targets,
                          const float *dloss, long N, long V, long nv, int fresh = 0)
{
    if (!dlogits || N <= 0) return;
    SR_LAUNCH((crossentropy_bwd_kernel<TD, TL>), (unsigned)N, CE_THREADS, 0, srk_ctx.stream, dlogits, logits, lse,
              targets, dloss, N, sr_ce_classes(0, (int)V, (int)nv), (int)V, fresh & 1);
}

/* srk_crossentropy_fwd, and logits overwritten by srk_crossentropy_bwd's gradient (overwriting)
 * with the seed dloss given by value, in one pass over each row: a training step's forward
 * (compiler/lossfuse.c; the backward step is gone) */
template <class TL>
void srk_crossentropy_fwd_bwd(float *loss, float *lse, TL *logits, const int32_t *targets, float dloss, long N, long V,
                              long nv)
{
    srk_ce_launch<true>(loss, lse, logits, targets, N, V, nv, dloss / (float)N);
}

#endif /* SRK_NORM_CUH */
