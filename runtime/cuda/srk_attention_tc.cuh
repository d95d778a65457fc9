/* srk_attention_tc.cuh: causal attention on bf16 tensor cores
 * (nvcuda::wmma 16x16x16 bf16 fragments, float accumulators), the
 * FlashAttention-2 algorithm of srk_attention.cuh with the products of every
 * tile on tensor cores. Used in bf16 programs when q, k, v are bf16 and the
 * head size is 32, 64 or 128; everything else takes the SIMT kernels.
 * SHARDC_CUDA_ATTN=simt forces the SIMT kernels (for comparisons);
 * SHARDC_CUDA_ATTN=mma takes srk_attention_mma.cuh's kernels for head sizes
 * 32 and 64.
 *
 * Blocks of 4 warps: 64 query rows (forward, dq) or 64 key rows (dk, dv),
 * 16 per warp; tiles of 64 keys (or queries) staged in shared memory as
 * bf16 with rows padded by 8 elements (wmma wants 32-byte aligned pointers
 * and ldm a multiple of 16 bytes; the padding also spreads banks). Scores
 * go through shared memory (a fragment's element layout is unspecified, so
 * the causal mask and the online softmax work on stored tiles), and the
 * probabilities are rounded to bf16 before P @ V (the documented
 * difference from the SIMT path: a relative error of about 2^-9 per term).
 * The emulator runs these kernels too (its wmma holds whole tiles per lane
 * and checks the alignment rules), so the CPU tests cover this path.
 */
#ifndef SRK_ATTENTION_TC_CUH
#define SRK_ATTENTION_TC_CUH

#include <stdlib.h>
#include <string.h>

/* bf16 wmma exists from sm_80 on (and in the emulator) */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define SRK_TC_DEVICE 0
#else
#define SRK_TC_DEVICE 1
#endif

namespace srk_tc {
using namespace nvcuda;
enum { TILE = 64, WARPS = 4, THREADS = 128, LDS = TILE + 4, LDP = TILE + 8 };
template <int HD>
struct Lay {
    static constexpr int LDH = HD + 8; /* bf16 tile rows */
    static constexpr int LDO = HD + 4; /* float accumulator rows */
    static constexpr size_t tile = (size_t)TILE * LDH * sizeof(bf16);
    static constexpr size_t warp_f = (size_t)2 * 16 * LDS * sizeof(float); /* two 16x64 float tiles per warp */
    static constexpr size_t warp_p = (size_t)2 * 16 * LDP * sizeof(bf16);  /* two 16x64 bf16 tiles per warp */
    static constexpr size_t stats = 2 * TILE * sizeof(float);
    /* every part's size is a multiple of 128 bytes */
    static constexpr size_t fwd = 3 * tile + WARPS * (warp_f / 2) + WARPS * (warp_p / 2) +
                                  (size_t)WARPS * 16 * LDO * sizeof(float);
    static constexpr size_t bwd = 4 * tile + WARPS * warp_f + WARPS * warp_p + stats;
};
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> Acc;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> ArowT;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> BrowT;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> BcolT;

/* dst (64, LDH) = rows r0.. of src (rows of C elements), zero past T */
template <int HD>
__device__ __forceinline__ void load_tile(bf16 *dst, const bf16 *src, int r0, int T, int C, int vec)
{
    constexpr int LDH = Lay<HD>::LDH;
    if (vec) {
        for (int e = threadIdx.x; e < TILE * HD / 8; e += THREADS) {
            int r = e / (HD / 8), c8 = e - r * (HD / 8);
            uint4 x;
            x.x = x.y = x.z = x.w = 0u;
            if (r0 + r < T) x = *(const uint4 *)(src + (size_t)(r0 + r) * C + c8 * 8);
            *(uint4 *)(dst + r * LDH + c8 * 8) = x;
        }
    } else {
        for (int e = threadIdx.x; e < TILE * HD; e += THREADS) {
            int r = e / HD, c = e - r * HD;
            dst[r * LDH + c] = r0 + r < T ? src[(size_t)(r0 + r) * C + c] : __float2bfloat16(0.0f);
        }
    }
}

/* out (16, 64) = A (16, HD) @ B^T where B is (64, HD) row-major (a col-major B^T) */
template <int HD>
__device__ __forceinline__ void qk_tile(float *out, const bf16 *A, const bf16 *Bm)
{
    constexpr int LDH = Lay<HD>::LDH;
    for (int n = 0; n < 4; n++) {
        Acc acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int kk = 0; kk < HD / 16; kk++) {
            ArowT a;
            BcolT b;
            wmma::load_matrix_sync(a, A + kk * 16, LDH);
            wmma::load_matrix_sync(b, Bm + n * 16 * LDH + kk * 16, LDH);
            wmma::mma_sync(acc, a, b, acc);
        }
        wmma::store_matrix_sync(out + n * 16, acc, LDS, wmma::mem_row_major);
    }
}

/* acc[d] += P (16, 64; ld LDP) @ V (64, HD) for the HD/16 column blocks */
template <int HD>
__device__ __forceinline__ void pv_acc(Acc *acc, const bf16 *P, const bf16 *V)
{
    constexpr int LDH = Lay<HD>::LDH;
    for (int d = 0; d < HD / 16; d++)
        for (int kk = 0; kk < 4; kk++) {
            ArowT a;
            BrowT b;
            wmma::load_matrix_sync(a, P + kk * 16, LDP);
            wmma::load_matrix_sync(b, V + kk * 16 * LDH + d * 16, LDH);
            wmma::mma_sync(acc[d], a, b, acc[d]);
        }
}

/* grad (rows j0.., 16 x HD) += acc (fresh: =), staged through stage (16 x LDO floats) */
template <int HD, class TD>
__device__ __forceinline__ void flush_acc(TD *grad, size_t base, int j0, int T, int C, const Acc *acc, float *stage,
                                          int fresh)
{
    constexpr int LDO = Lay<HD>::LDO;
    __syncwarp();
    for (int d = 0; d < HD / 16; d++) wmma::store_matrix_sync(stage + d * 16, acc[d], LDO, wmma::mem_row_major);
    __syncwarp();
    int lane = threadIdx.x & 31;
    for (int e = lane; e < 16 * HD; e += 32) {
        int r = e / HD, d = e - r * HD;
        if (j0 + r < T) srk_put(&grad[base + (size_t)(j0 + r) * C + d], stage[r * LDO + d], fresh);
    }
    __syncwarp();
}

/* ---- forward ------------------------------------------------------------------------------ */
template <int HD, class TO>
__global__ void __launch_bounds__(THREADS) fwd_kernel(TO *out, TO *out_copy, float *lse, const bf16 *q, const bf16 *k,
                                                      const bf16 *v, int T, int C, int LQ, int NH, float scale,
                                                      int vec)
{
#if SRK_TC_DEVICE
    // grid (ceil(T/64), NH, B); warp w owns query rows r0 + 16w .. +15
    typedef Lay<HD> L;
    constexpr int LDH = L::LDH, LDO = L::LDO;
    SR_EXTERN_SHARED(char, smc);
    bf16 *Qs = (bf16 *)smc, *Ks = Qs + TILE * LDH, *Vs = Ks + TILE * LDH;   // (64, LDH) each
    float *Ss = (float *)(Vs + TILE * LDH);                                 // WARPS x (16, LDS)
    bf16 *Ps = (bf16 *)(Ss + WARPS * 16 * LDS);                             // WARPS x (16, LDP)
    float *Os = (float *)(Ps + WARPS * 16 * LDP);                           // WARPS x (16, LDO)
    int b = blockIdx.z, h = blockIdx.y, r0 = blockIdx.x * TILE;
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31, rr = lane >> 1, half = lane & 1;
    float *Sw = Ss + w * 16 * LDS, *Ow = Os + w * 16 * LDO;
    bf16 *Pw = Ps + w * 16 * LDP;
    size_t base = (size_t)b * T * C + (size_t)h * HD, bi = (size_t)b * T * LQ + (size_t)h * HD;
    load_tile<HD>(Qs, q + bi, r0, T, LQ, vec);
    for (int e = lane; e < 16 * HD; e += 32) Ow[(e / HD) * LDO + e % HD] = 0.0f;
    int qi = r0 + w * 16 + rr; /* the lane pair (2rr, 2rr+1) owns this row, 32 columns each */
    float m = -INFINITY, l = 0.0f;
    int kend = min(T, r0 + TILE);
    for (int c0 = 0; c0 < kend; c0 += TILE) {
        __syncthreads();
        load_tile<HD>(Ks, k + bi, c0, T, LQ, vec);
        load_tile<HD>(Vs, v + bi, c0, T, LQ, vec);
        __syncthreads();
        if (c0 > r0 + w * 16 + 15) continue; /* these keys are all in this warp's future */
        qk_tile<HD>(Sw, Qs + w * 16 * LDH, Ks);
        __syncwarp();
        float tmax = -INFINITY;
        for (int c = half * 32; c < half * 32 + 32; c++) {
            int j = c0 + c;
            float s = j <= qi && j < T ? Sw[rr * LDS + c] * scale : -INFINITY;
            Sw[rr * LDS + c] = s;
            tmax = fmaxf(tmax, s);
        }
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
        float mnew = fmaxf(m, tmax);
        float corr = mnew == -INFINITY ? 1.0f : expf(m - mnew);
        float psum = 0.0f;
        for (int c = half * 32; c < half * 32 + 32; c++) {
            float p = mnew == -INFINITY ? 0.0f : expf(Sw[rr * LDS + c] - mnew);
            Pw[rr * LDP + c] = __float2bfloat16(p);
            psum += p;
        }
        psum += __shfl_xor_sync(0xffffffffu, psum, 1);
        l = l * corr + psum;
        m = mnew;
        for (int d = half * (HD / 2); d < (half + 1) * (HD / 2); d++) Ow[rr * LDO + d] *= corr;
        __syncwarp();
        Acc acc[HD / 16];
        for (int d = 0; d < HD / 16; d++) wmma::load_matrix_sync(acc[d], Ow + d * 16, LDO, wmma::mem_row_major);
        pv_acc<HD>(acc, Pw, Vs);
        for (int d = 0; d < HD / 16; d++) wmma::store_matrix_sync(Ow + d * 16, acc[d], LDO, wmma::mem_row_major);
        __syncwarp();
    }
    if (qi < T) {
        float inv = 1.0f / l;
        for (int d = half * (HD / 2); d < (half + 1) * (HD / 2); d++) {
            TO o = srk_to<TO>(Ow[rr * LDO + d] * inv);
            out[base + (size_t)qi * C + d] = o;
            out_copy[base + (size_t)qi * C + d] = o;
        }
        if (!half) lse[((size_t)b * NH + h) * T + qi] = m + logf(l);
    }
#else
    __trap(); /* bf16 tensor cores need sm_80; the host never launches this there */
#endif
}

/* ---- backward: dk, dv by key tiles ---------------------------------------------------------- */
template <int HD, class TDK, class TDV>
__global__ void __launch_bounds__(THREADS) bwd_kv_kernel(TDK *dk, TDV *dv, const bf16 *dout, const bf16 *q,
                                                         const bf16 *k, const bf16 *v, const float *lse,
                                                         const float *delta, int T, int C, int LQ, int NH, float scale,
                                                         int vec, int fresh)
{
#if SRK_TC_DEVICE
    // grid (ceil(T/64), NH, B); warp w owns key rows c0 + 16w .. +15; queries i >= j (fresh: bit 1 dk, 2 dv)
    typedef Lay<HD> L;
    constexpr int LDH = L::LDH;
    SR_EXTERN_SHARED(char, smc);
    bf16 *Ks = (bf16 *)smc, *Vs = Ks + TILE * LDH, *Qs = Vs + TILE * LDH, *Gs = Qs + TILE * LDH;
    float *Fs = (float *)(Gs + TILE * LDH);           // WARPS x 2 x (16, LDS): S^T, dP^T
    bf16 *Bs = (bf16 *)(Fs + WARPS * 2 * 16 * LDS);    // WARPS x 2 x (16, LDP): P^T, dS^T
    float *ls = (float *)(Bs + WARPS * 2 * 16 * LDP);  // (64) lse, (64) delta of the query tile
    float *dls = ls + TILE;
    int b = blockIdx.z, h = blockIdx.y, c0 = blockIdx.x * TILE;
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *St = Fs + w * 2 * 16 * LDS, *DPt = St + 16 * LDS;
    bf16 *Pt = Bs + w * 2 * 16 * LDP, *DSt = Pt + 16 * LDP;
    size_t base = (size_t)b * T * C + (size_t)h * HD, bi = (size_t)b * T * LQ + (size_t)h * HD;
    const float *lse_bh = lse + ((size_t)b * NH + h) * T, *del_bh = delta + ((size_t)b * NH + h) * T;
    load_tile<HD>(Ks, k + bi, c0, T, LQ, vec);
    load_tile<HD>(Vs, v + bi, c0, T, LQ, vec);
    Acc dka[HD / 16], dva[HD / 16];
    for (int d = 0; d < HD / 16; d++) {
        wmma::fill_fragment(dka[d], 0.0f);
        wmma::fill_fragment(dva[d], 0.0f);
    }
    for (int r0 = c0; r0 < T; r0 += TILE) {
        __syncthreads();
        load_tile<HD>(Qs, q + bi, r0, T, LQ, vec);
        load_tile<HD>(Gs, dout + base, r0, T, C, vec);
        for (int r = threadIdx.x; r < TILE; r += THREADS) {
            ls[r] = r0 + r < T ? lse_bh[r0 + r] : 0.0f;
            dls[r] = r0 + r < T ? del_bh[r0 + r] : 0.0f;
        }
        __syncthreads();
        qk_tile<HD>(St, Ks + w * 16 * LDH, Qs);  // S^T (16 keys, 64 queries)
        qk_tile<HD>(DPt, Vs + w * 16 * LDH, Gs); // dP^T = V dO^T
        __syncwarp();
        for (int e = lane; e < 16 * TILE; e += 32) {
            int jr = e / TILE, c = e - jr * TILE, j = c0 + w * 16 + jr, i = r0 + c;
            float p = i < T && j < T && j <= i ? expf(St[jr * LDS + c] * scale - ls[c]) : 0.0f;
            Pt[jr * LDP + c] = __float2bfloat16(p);
            DSt[jr * LDP + c] = __float2bfloat16(p * (DPt[jr * LDS + c] - dls[c]) * scale);
        }
        __syncwarp();
        pv_acc<HD>(dva, Pt, Gs);  // dV += P^T dO
        pv_acc<HD>(dka, DSt, Qs); // dK += dS^T Q
    }
    if (dk) flush_acc<HD>(dk, bi, c0 + w * 16, T, LQ, dka, St, fresh >> 1 & 1);
    if (dv) flush_acc<HD>(dv, bi, c0 + w * 16, T, LQ, dva, St, fresh >> 2 & 1);
#else
    __trap(); /* bf16 tensor cores need sm_80; the host never launches this there */
#endif
}

/* ---- backward: dq by query tiles ----------------------------------------------------------------- */
template <int HD, class TDQ>
__global__ void __launch_bounds__(THREADS) bwd_q_kernel(TDQ *dq, const bf16 *dout, const bf16 *q, const bf16 *k,
                                                        const bf16 *v, const float *lse, const float *delta, int T,
                                                        int C, int LQ, int NH, float scale, int vec, int fresh)
{
#if SRK_TC_DEVICE
    // grid (ceil(T/64), NH, B); warp w owns query rows r0 + 16w .. +15; keys j <= i (fresh: bit 0 dq)
    typedef Lay<HD> L;
    constexpr int LDH = L::LDH;
    SR_EXTERN_SHARED(char, smc);
    bf16 *Qs = (bf16 *)smc, *Gs = Qs + TILE * LDH, *Ks = Gs + TILE * LDH, *Vs = Ks + TILE * LDH;
    float *Fs = (float *)(Vs + TILE * LDH);            // WARPS x 2 x (16, LDS): S, dP
    bf16 *Bs = (bf16 *)(Fs + WARPS * 2 * 16 * LDS);     // WARPS x (16, LDP): dS
    float *ls = (float *)(Bs + WARPS * 2 * 16 * LDP);
    float *dls = ls + TILE;
    int b = blockIdx.z, h = blockIdx.y, r0 = blockIdx.x * TILE;
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *Sw = Fs + w * 2 * 16 * LDS, *DPw = Sw + 16 * LDS;
    bf16 *DSw = Bs + w * 2 * 16 * LDP;
    size_t base = (size_t)b * T * C + (size_t)h * HD, bi = (size_t)b * T * LQ + (size_t)h * HD;
    load_tile<HD>(Qs, q + bi, r0, T, LQ, vec);
    load_tile<HD>(Gs, dout + base, r0, T, C, vec);
    for (int r = threadIdx.x; r < TILE; r += THREADS) {
        ls[r] = r0 + r < T ? lse[((size_t)b * NH + h) * T + r0 + r] : 0.0f;
        dls[r] = r0 + r < T ? delta[((size_t)b * NH + h) * T + r0 + r] : 0.0f;
    }
    Acc dqa[HD / 16];
    for (int d = 0; d < HD / 16; d++) wmma::fill_fragment(dqa[d], 0.0f);
    int kend = min(T, r0 + TILE);
    for (int c0 = 0; c0 < kend; c0 += TILE) {
        __syncthreads();
        load_tile<HD>(Ks, k + bi, c0, T, LQ, vec);
        load_tile<HD>(Vs, v + bi, c0, T, LQ, vec);
        __syncthreads();
        if (c0 > r0 + w * 16 + 15) continue;
        qk_tile<HD>(Sw, Qs + w * 16 * LDH, Ks);  // S (16 queries, 64 keys)
        qk_tile<HD>(DPw, Gs + w * 16 * LDH, Vs); // dP = dO V^T
        __syncwarp();
        for (int e = lane; e < 16 * TILE; e += 32) {
            int ir = e / TILE, c = e - ir * TILE, i = r0 + w * 16 + ir, j = c0 + c;
            float p = i < T && j < T && j <= i ? expf(Sw[ir * LDS + c] * scale - ls[w * 16 + ir]) : 0.0f;
            DSw[ir * LDP + c] = __float2bfloat16(p * (DPw[ir * LDS + c] - dls[w * 16 + ir]) * scale);
        }
        __syncwarp();
        pv_acc<HD>(dqa, DSw, Ks); // dQ += dS K
    }
    flush_acc<HD>(dq, bi, r0 + w * 16, T, LQ, dqa, Sw, fresh & 1);
#else
    __trap(); /* bf16 tensor cores need sm_80; the host never launches this there */
#endif
}

static inline int enabled(void)
{
    return srk_ctx.attn_mode != SRK_ATTN_SIMT && srk_ctx.bf16 && srk_ctx.cc_major >= 8;
}
static inline int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }
/* both tensor-core families: load_tile's 16-byte form (rows of eights, every tensor aligned;
 * q, k, v rows LQ apart, dout's C), and the grid of 64-row tiles */
static inline int tiles_vec(int C, int LQ, const void *q, const void *k, const void *v, const void *g = NULL)
{
    return C % 8 == 0 && LQ % 8 == 0 && aligned16(q) && aligned16(k) && aligned16(v) && (!g || aligned16(g));
}
static inline dim3 tile_grid(int B, int T, int NH) { return dim3((unsigned)((T + TILE - 1) / TILE), (unsigned)NH, (unsigned)B); }

template <int HD, class TO>
static void launch_fwd(TO *out, TO *copy, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int B, int T, int C,
                       int LQ, int NH, float scale)
{
    int vec = tiles_vec(C, LQ, q, k, v);
    size_t smem = Lay<HD>::fwd;
    SRK_SMEM_AT_LEAST((fwd_kernel<HD, TO>), smem);
    dim3 grid = tile_grid(B, T, NH);
    SR_LAUNCH((fwd_kernel<HD, TO>), grid, THREADS, smem, srk_ctx.stream, out, copy, lse, q, k, v, T, C, LQ, NH, scale,
              vec);
    srk_ctx.attn_tc_launches++;
}

template <int HD, class TDQ, class TDK, class TDV>
static void launch_bwd(TDQ *dq, TDK *dk, TDV *dv, const bf16 *g, const bf16 *q, const bf16 *k, const bf16 *v,
                       const float *lse, const float *delta, int B, int T, int C, int LQ, int NH, float scale,
                       int fresh)
{
    int vec = tiles_vec(C, LQ, q, k, v, g);
    size_t smem = Lay<HD>::bwd;
    dim3 grid = tile_grid(B, T, NH);
    if (dk || dv) {
        SRK_SMEM_AT_LEAST((bwd_kv_kernel<HD, TDK, TDV>), smem);
        SR_LAUNCH((bwd_kv_kernel<HD, TDK, TDV>), grid, THREADS, smem, srk_ctx.stream, dk, dv, g, q, k, v, lse, delta, T,
                  C, LQ, NH, scale, vec, fresh);
    }
    if (dq) {
        SRK_SMEM_AT_LEAST((bwd_q_kernel<HD, TDQ>), smem);
        SR_LAUNCH((bwd_q_kernel<HD, TDQ>), grid, THREADS, smem, srk_ctx.stream, dq, g, q, k, v, lse, delta, T, C, LQ,
                  NH, scale, vec, fresh);
    }
    srk_ctx.attn_tc_launches++;
}
} /* namespace srk_tc */

#include "srk_attention_mma.cuh"

/* 1 when the tensor-core path ran the forward (aux as srk_attention.cuh lays it out) */
template <class TO, class TQ, class TK, class TV>
static inline int srk_attn_tc_fwd(TO *out, TO *copy, float *aux, const TQ *q, const TK *k, const TV *v, int B, int T,
                                  int C, int LQ, int NH, float scale)
{
    if constexpr (srk_dt<TQ>::value == SRK_BF16 && srk_dt<TK>::value == SRK_BF16 && srk_dt<TV>::value == SRK_BF16) {
        if (!srk_tc::enabled()) return 0;
        if (srk_ctx.attn_mode == SRK_ATTN_MMA) switch (C / NH) {
            case 32: srk_mma::launch_fwd<32>(out, copy, aux, q, k, v, B, T, C, LQ, NH, scale); return 1;
            case 64: srk_mma::launch_fwd<64>(out, copy, aux, q, k, v, B, T, C, LQ, NH, scale); return 1;
            default: break; /* hd 128 would spill registers: wmma */
            }
        switch (C / NH) {
        case 32: srk_tc::launch_fwd<32>(out, copy, aux, q, k, v, B, T, C, LQ, NH, scale); return 1;
        case 64: srk_tc::launch_fwd<64>(out, copy, aux, q, k, v, B, T, C, LQ, NH, scale); return 1;
        case 128: srk_tc::launch_fwd<128>(out, copy, aux, q, k, v, B, T, C, LQ, NH, scale); return 1;
        default: return 0;
        }
    }
    return 0;
}

template <class TDQ, class TDK, class TDV, class TG, class TQ, class TK, class TV>
static inline int srk_attn_tc_bwd(TDQ *dq, TDK *dk, TDV *dv, const TG *g, const TQ *q, const TK *k, const TV *v,
                                  const float *lse, const float *delta, int B, int T, int C, int LQ, int NH,
                                  float scale, int fresh)
{
    if constexpr (srk_dt<TQ>::value == SRK_BF16 && srk_dt<TK>::value == SRK_BF16 && srk_dt<TV>::value == SRK_BF16 &&
                  srk_dt<TG>::value == SRK_BF16) {
        if (!srk_tc::enabled()) return 0;
        if (srk_ctx.attn_mode == SRK_ATTN_MMA) switch (C / NH) {
            case 32: srk_mma::launch_bwd<32>(dq, dk, dv, g, q, k, v, lse, delta, B, T, C, LQ, NH, scale, fresh); return 1;
            case 64: srk_mma::launch_bwd<64>(dq, dk, dv, g, q, k, v, lse, delta, B, T, C, LQ, NH, scale, fresh); return 1;
            default: break;
            }
        switch (C / NH) {
        case 32: srk_tc::launch_bwd<32>(dq, dk, dv, g, q, k, v, lse, delta, B, T, C, LQ, NH, scale, fresh); return 1;
        case 64: srk_tc::launch_bwd<64>(dq, dk, dv, g, q, k, v, lse, delta, B, T, C, LQ, NH, scale, fresh); return 1;
        case 128: srk_tc::launch_bwd<128>(dq, dk, dv, g, q, k, v, lse, delta, B, T, C, LQ, NH, scale, fresh); return 1;
        default: return 0;
        }
    }
    return 0;
}

#endif /* SRK_ATTENTION_TC_CUH */
