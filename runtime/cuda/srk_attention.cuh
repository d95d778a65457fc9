/* srk_attention.cuh: causal self-attention as fused, tiled kernels with an
 * online softmax (FlashAttention-2's algorithm): the (T, T) score matrix is
 * never stored. q, k, v, out are (B, T, C) with head h in columns
 * [h*hd, (h+1)*hd), hd = C / NH; scores are scaled by 1/sqrt(hd) and row t
 * attends to keys 0..t, as sr_attention_fwd. The rows of q, k, v (and of
 * dq, dk, dv) are L elements apart: L = C, or 3C where they are the parts
 * of one packed q|k|v tensor read in place (srk_attention_qkv_fwd).
 *
 * The op's aux buffer (planned by the CUDA code generator, not the host's
 * (B, NH, T, T) probabilities) holds, in order:
 *     lse   (B, NH, T) float   log-sum-exp of every score row (forward)
 *     delta (B, NH, T) float   rowsum(dout * out) (backward scratch)
 *     out   (B, T, C)  TO      a copy of the output: the backward needs it
 *                              and the generated program may reuse out's slot
 * srk_attention_aux_bytes() gives its size.
 *
 * Two implementations:
 *  - SIMT (any head size, fp32 or bf16 storage, fp32 math): one thread per
 *    query row (forward, dq) or key row (dk, dv), tiles in shared memory.
 *    This is the path of --precision fp32 and of odd head sizes.
 *  - tensor cores (srk_attention_tc.cuh, bf16 with hd % 16 == 0 and
 *    hd <= 128): the same tiling with the two products of each tile on
 *    nvcuda::wmma bf16 fragments with float accumulators (or mma.sync,
 *    srk_attention_mma.cuh, under SHARDC_CUDA_ATTN=mma).
 * and cuDNN's fused attention under SHARDC_CUDA_ATTN=cudnn
 * (srk_attention_cudnn.cuh). By default (SHARDC_CUDA_ATTN=auto) a trial on
 * the device picks among wmma, mma.sync and cuDNN at each head layout's
 * first call (srk_attention_pick.cuh).
 * The backward is two kernels, dk/dv by key tiles and dq by query tiles, so
 * that no gradient needs atomics: results are deterministic.
 */
#ifndef SRK_ATTENTION_CUH
#define SRK_ATTENTION_CUH

#include "srk_pointwise.cuh"

enum { AF_BR = 64, AF_BC = 32, AB_BK = 32, AB_BQ = 32, AQ_BR = 64, AQ_BC = 32 };

static inline size_t srk_attn_lse_floats(long B, long T, long NH) { return (size_t)B * NH * T; }

/* bytes of the aux buffer of one attention op (see above) */
static inline size_t srk_attention_aux_bytes(long B, long T, long C, long NH, size_t out_elem)
{
    size_t head = (2 * srk_attn_lse_floats(B, T, NH) * sizeof(float) + 255) & ~(size_t)255;
    return head + (size_t)B * T * C * out_elem;
}
template <class TO>
static inline TO *srk_attn_out_copy(float *aux, long B, long T, long NH)
{
    size_t head = (2 * srk_attn_lse_floats(B, T, NH) * sizeof(float) + 255) & ~(size_t)255;
    return (TO *)((char *)aux + head);
}

/* raises a kernel's dynamic shared memory limit the first time it needs more than 48 KiB */
#define SRK_SMEM_AT_LEAST(kern, bytes)                                  \
    do {                                                                \
        static size_t srk_smem_set_ = 48 * 1024;                        \
        if ((size_t)(bytes) > srk_smem_set_) {                          \
            SRK_SET_SMEM(kern, bytes);                                  \
            srk_smem_set_ = (size_t)(bytes);                            \
        }                                                               \
    } while (0)

/* ---- forward (SIMT) ----------------------------------------------------------------------- */
template <class TO, class TQ, class TK, class TV>
__global__ void attn_fwd_simt_kernel(TO *out, TO *out_copy, float *lse, const TQ *q, const TK *k, const TV *v, int T,
                                     int C, int L, int NH, int hd, float scale)
{
    // grid (ceil(T/AF_BR), NH, B); block AF_BR threads, thread = one query row
    SR_EXTERN_SHARED(float, sm);
    const int ld = hd + 1; /* odd row stride: per-thread rows hit distinct banks */
    float *qs = sm;                    // (AF_BR, ld) scaled q
    float *os = qs + AF_BR * ld;       // (AF_BR, ld) unnormalized output
    float *ks = os + AF_BR * ld;       // (AF_BC, ld)
    float *vs = ks + AF_BC * ld;       // (AF_BC, ld)
    float *ss = vs + AF_BC * ld;       // (AF_BR, AF_BC + 1) scores
    int b = blockIdx.z, h = blockIdx.y, r0 = blockIdx.x * AF_BR, tid = threadIdx.x, i = r0 + tid;
    size_t base = (size_t)b * T * C + (size_t)h * hd, bi = (size_t)b * T * L + (size_t)h * hd;
    for (int e = tid; e < AF_BR * hd; e += AF_BR) {
        int r = e / hd, d = e - r * hd;
        qs[r * ld + d] = r0 + r < T ? srk_ld(q[bi + (size_t)(r0 + r) * L + d]) * scale : 0.0f;
        os[r * ld + d] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    int kend = min(T, r0 + AF_BR);
    for (int c0 = 0; c0 < kend; c0 += AF_BC) {
        __syncthreads(); /* the previous tile is consumed */
        for (int e = tid; e < AF_BC * hd; e += AF_BR) {
            int r = e / hd, d = e - r * hd, j = c0 + r;
            ks[r * ld + d] = j < T ? srk_ld(k[bi + (size_t)j * L + d]) : 0.0f;
            vs[r * ld + d] = j < T ? srk_ld(v[bi + (size_t)j * L + d]) : 0.0f;
        }
        __syncthreads();
        int jn = i < T ? min(AF_BC, i - c0 + 1) : 0; /* keys c0..c0+jn-1 are visible to row i */
        if (jn <= 0) continue;
        float *qr = qs + tid * ld, *orow = os + tid * ld, *sr = ss + tid * (AF_BC + 1);
        float tmax = -INFINITY;
        for (int jj = 0; jj < jn; jj++) {
            const float *kr = ks + jj * ld;
            float s = 0.0f;
            for (int d = 0; d < hd; d++) s += qr[d] * kr[d];
            sr[jj] = s;
            tmax = fmaxf(tmax, s);
        }
        float mnew = fmaxf(m, tmax);
        float corr = expf(m - mnew); /* 0 on the first tile (m = -inf) */
        l *= corr;
        for (int d = 0; d < hd; d++) orow[d] *= corr;
        for (int jj = 0; jj < jn; jj++) {
            float p = expf(sr[jj] - mnew);
            l += p;
            const float *vr = vs + jj * ld;
            for (int d = 0; d < hd; d++) orow[d] += p * vr[d];
        }
        m = mnew;
    }
    if (i < T) {
        float inv = 1.0f / l;
        for (int d = 0; d < hd; d++) {
            TO o = srk_to<TO>(os[tid * ld + d] * inv);
            out[base + (size_t)i * C + d] = o;
            out_copy[base + (size_t)i * C + d] = o;
        }
        lse[((size_t)b * NH + h) * T + i] = m + logf(l);
    }
}

/* ---- backward (SIMT) --------------------------------------------------------------------------- */
template <class TG, class TO>
__global__ void attn_delta_kernel(float *delta, const TG *dout, const TO *o, int T, int C, int NH, int hd, long rows)
{
    // delta (B, NH, T) = sum_d dout * o; one warp per (b, h, t)
    long w = (long)blockIdx.x * 8 + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (w >= rows) return;
    int t = (int)(w % T);
    long bh = w / T;
    int h = (int)(bh % NH), b = (int)(bh / NH);
    size_t off = (size_t)b * T * C + (size_t)t * C + (size_t)h * hd;
    float s = 0.0f;
    for (int d = lane; d < hd; d += 32) s += srk_ld(dout[off + d]) * srk_ld(o[off + d]);
    s = srk_warp_sum(s);
    if (lane == 0) delta[w] = s;
}

template <class TDK, class TDV, class TG, class TQ, class TK, class TV>
__global__ void attn_bwd_kv_simt_kernel(TDK *dk, TDV *dv, const TG *dout, const TQ *q, const TK *k, const TV *v,
                                        const float *lse, const float *delta, int T, int C, int L, int NH, int hd,
                                        float scale, int fresh)
{
    // grid (ceil(T/AB_BK), NH, B); block AB_BK threads, thread = one key row j (fresh: bit 1 dk, bit 2 dv):
    // dv_j += sum_i p_ij dout_i ; dk_j += scale * sum_i p_ij (dout_i . v_j - delta_i) q_i, over i >= j
    SR_EXTERN_SHARED(float, sm);
    const int ld = hd + 1;
    float *ks = sm;                  // (AB_BK, ld)
    float *vs = ks + AB_BK * ld;     // (AB_BK, ld)
    float *dks = vs + AB_BK * ld;    // (AB_BK, ld)
    float *dvs = dks + AB_BK * ld;   // (AB_BK, ld)
    float *qs = dvs + AB_BK * ld;    // (AB_BQ, ld)
    float *gs = qs + AB_BQ * ld;     // (AB_BQ, ld) dout
    float *ls = gs + AB_BQ * ld;     // (AB_BQ) lse
    float *ds = ls + AB_BQ;          // (AB_BQ) delta
    int b = blockIdx.z, h = blockIdx.y, c0 = blockIdx.x * AB_BK, tid = threadIdx.x, j = c0 + tid;
    size_t base = (size_t)b * T * C + (size_t)h * hd, bi = (size_t)b * T * L + (size_t)h * hd;
    const float *lse_bh = lse + ((size_t)b * NH + h) * T, *del_bh = delta + ((size_t)b * NH + h) * T;
    for (int e = tid; e < AB_BK * hd; e += AB_BK) {
        int r = e / hd, d = e - r * hd, jj = c0 + r;
        ks[r * ld + d] = jj < T ? srk_ld(k[bi + (size_t)jj * L + d]) : 0.0f;
        vs[r * ld + d] = jj < T ? srk_ld(v[bi + (size_t)jj * L + d]) : 0.0f;
        dks[r * ld + d] = 0.0f;
        dvs[r * ld + d] = 0.0f;
    }
    for (int r0 = c0; r0 < T; r0 += AB_BQ) {
        __syncthreads();
        for (int e = tid; e < AB_BQ * hd; e += AB_BK) {
            int r = e / hd, d = e - r * hd, i = r0 + r;
            qs[r * ld + d] = i < T ? srk_ld(q[bi + (size_t)i * L + d]) : 0.0f;
            gs[r * ld + d] = i < T ? srk_ld(dout[base + (size_t)i * C + d]) : 0.0f;
        }
        for (int r = tid; r < AB_BQ; r += AB_BK) {
            ls[r] = r0 + r < T ? lse_bh[r0 + r] : 0.0f;
            ds[r] = r0 + r < T ? del_bh[r0 + r] : 0.0f;
        }
        __syncthreads();
        if (j >= T) continue;
        const float *kr = ks + tid * ld, *vr = vs + tid * ld;
        float *dkr = dks + tid * ld, *dvr = dvs + tid * ld;
        for (int ii = 0; ii < AB_BQ; ii++) {
            int i = r0 + ii;
            if (i >= T || i < j) continue;
            const float *qr = qs + ii * ld, *gr = gs + ii * ld;
            float s = 0.0f, dp = 0.0f;
            for (int d = 0; d < hd; d++) {
                s += qr[d] * kr[d];
                dp += gr[d] * vr[d];
            }
            float p = expf(s * scale - ls[ii]);
            float dsc = p * (dp - ds[ii]) * scale;
            for (int d = 0; d < hd; d++) {
                dvr[d] += p * gr[d];
                dkr[d] += dsc * qr[d];
            }
        }
    }
    if (j < T)
        for (int d = 0; d < hd; d++) {
            if (dk) srk_put(&dk[bi + (size_t)j * L + d], dks[tid * ld + d], fresh >> 1 & 1);
            if (dv) srk_put(&dv[bi + (size_t)j * L + d], dvs[tid * ld + d], fresh >> 2 & 1);
        }
}

template <class TDQ, class TG, class TQ, class TK, class TV>
__global__ void attn_bwd_q_simt_kernel(TDQ *dq, const TG *dout, const TQ *q, const TK *k, const TV *v,
                                       const float *lse, const float *delta, int T, int C, int L, int NH, int hd,
                                       float scale, int fresh)
{
    // grid (ceil(T/AQ_BR), NH, B); block AQ_BR threads, thread = one query row i (fresh: bit 0 dq):
    // dq_i += scale * sum_{j <= i} p_ij (dout_i . v_j - delta_i) k_j
    SR_EXTERN_SHARED(float, sm);
    const int ld = hd + 1;
    float *qs = sm;                  // (AQ_BR, ld)
    float *gs = qs + AQ_BR * ld;     // (AQ_BR, ld)
    float *dqs = gs + AQ_BR * ld;    // (AQ_BR, ld)
    float *ks = dqs + AQ_BR * ld;    // (AQ_BC, ld)
    float *vs = ks + AQ_BC * ld;     // (AQ_BC, ld)
    int b = blockIdx.z, h = blockIdx.y, r0 = blockIdx.x * AQ_BR, tid = threadIdx.x, i = r0 + tid;
    size_t base = (size_t)b * T * C + (size_t)h * hd, bi = (size_t)b * T * L + (size_t)h * hd;
    for (int e = tid; e < AQ_BR * hd; e += AQ_BR) {
        int r = e / hd, d = e - r * hd, ii = r0 + r;
        qs[r * ld + d] = ii < T ? srk_ld(q[bi + (size_t)ii * L + d]) : 0.0f;
        gs[r * ld + d] = ii < T ? srk_ld(dout[base + (size_t)ii * C + d]) : 0.0f;
        dqs[r * ld + d] = 0.0f;
    }
    float li = i < T ? lse[((size_t)b * NH + h) * T + i] : 0.0f;
    float di = i < T ? delta[((size_t)b * NH + h) * T + i] : 0.0f;
    int kend = min(T, r0 + AQ_BR);
    for (int c0 = 0; c0 < kend; c0 += AQ_BC) {
        __syncthreads();
        for (int e = tid; e < AQ_BC * hd; e += AQ_BR) {
            int r = e / hd, d = e - r * hd, j = c0 + r;
            ks[r * ld + d] = j < T ? srk_ld(k[bi + (size_t)j * L + d]) : 0.0f;
            vs[r * ld + d] = j < T ? srk_ld(v[bi + (size_t)j * L + d]) : 0.0f;
        }
        __syncthreads();
        int jn = i < T ? min(AQ_BC, i - c0 + 1) : 0;
        const float *qr = qs + tid * ld, *gr = gs + tid * ld;
        float *dqr = dqs + tid * ld;
        for (int jj = 0; jj < jn; jj++) {
            const float *kr = ks + jj * ld, *vr = vs + jj * ld;
            float s = 0.0f, dp = 0.0f;
            for (int d = 0; d < hd; d++) {
                s += qr[d] * kr[d];
                dp += gr[d] * vr[d];
            }
            float p = expf(s * scale - li);
            float dsc = p * (dp - di) * scale;
            for (int d = 0; d < hd; d++) dqr[d] += dsc * kr[d];
        }
    }
    if (i < T)
        for (int d = 0; d < hd; d++) srk_put(&dq[bi + (size_t)i * L + d], dqs[tid * ld + d], fresh & 1);
}

#include "srk_attention_tc.cuh"
#include "srk_attention_cudnn.cuh"

/* ---- wrappers ------------------------------------------------------------------------------------ */
/* SHARDC_CUDA_ATTN=auto's choice for a call (srk_attention_pick.cuh), undone when the call returns */
template <class TQ>
static int srk_attn_auto_begin(long B, long T, long C, long NH, long L);
struct srk_attn_mode_restore {
    int mode;
    ~srk_attn_mode_restore() { srk_ctx.attn_mode = mode; }
};

/* out (B,T,C); q, k, v rows L apart (0: C); aux: see the top of this file */
template <class TO, class TQ, class TK, class TV>
void srk_attention_fwd(TO *out, float *aux, const TQ *q, const TK *k, const TV *v, long B, long T, long C, long NH,
                       long L = 0)
{
    if (B <= 0 || T <= 0 || NH <= 0 || C / NH <= 0) return;
    if (!L) L = C;
    srk_attn_mode_restore restore{srk_attn_auto_begin<TQ>(B, T, C, NH, L)};
    int hd = (int)(C / NH);
    float scale = 1.0f / sqrtf((float)hd);
    TO *copy = srk_attn_out_copy<TO>(aux, B, T, NH);
    if (srk_attn_cudnn_fwd(out, copy, aux, q, k, v, (int)B, (int)T, (int)C, (int)L, (int)NH, scale)) return;
    if (srk_attn_tc_fwd(out, copy, aux, q, k, v, (int)B, (int)T, (int)C, (int)L, (int)NH, scale)) return;
    size_t smem = sizeof(float) * ((size_t)(2 * AF_BR + 2 * AF_BC) * (hd + 1) + (size_t)AF_BR * (AF_BC + 1));
    if (smem > 227 * 1024) {
        srk_fail("causal_attention: head size %d is too large for the attention kernel (at most 280)", hd);
        return;
    }
    SRK_SMEM_AT_LEAST((attn_fwd_simt_kernel<TO, TQ, TK, TV>), smem);
    dim3 grid((unsigned)((T + AF_BR - 1) / AF_BR), (unsigned)NH, (unsigned)B);
    SR_LAUNCH((attn_fwd_simt_kernel<TO, TQ, TK, TV>), grid, AF_BR, smem, srk_ctx.stream, out, copy, aux, q, k, v,
              (int)T, (int)C, (int)L, (int)NH, hd, scale);
}

/* dq, dk, dv (B,T,C) += the gradients; dout (B,T,C); aux as the forward left it; fresh (the code
 * generator's $z): bit 0 dq, 1 dk, 2 dv start at zero, uncleared, and are overwritten; the rows of
 * q, k, v, dq, dk, dv are L apart (0: C) */
template <class TDQ, class TDK, class TDV, class TG, class TQ, class TK, class TV>
void srk_attention_bwd(TDQ *dq, TDK *dk, TDV *dv, const TG *dout, const TQ *q, const TK *k, const TV *v, float *aux,
                       long B, long T, long C, long NH, int fresh = 0, long L = 0)
{
    if (B <= 0 || T <= 0 || NH <= 0 || C / NH <= 0 || (!dq && !dk && !dv)) return;
    if (!L) L = C;
    srk_attn_mode_restore restore{srk_attn_auto_begin<TQ>(B, T, C, NH, L)};
    int hd = (int)(C / NH);
    float scale = 1.0f / sqrtf((float)hd);
    float *lse = aux, *delta = aux + srk_attn_lse_floats(B, T, NH);
    const TG *o = srk_attn_out_copy<TG>(aux, B, T, NH);
    if (srk_attn_cudnn_bwd(dq, dk, dv, dout, q, k, v, o, lse, (int)B, (int)T, (int)C, (int)L, (int)NH, scale, fresh))
        return;
    long rows = B * NH * T;
    SR_LAUNCH((attn_delta_kernel<TG, TG>), (unsigned)((rows + 7) / 8), 256, 0, srk_ctx.stream, delta, dout, o, (int)T,
              (int)C, (int)NH, hd, rows);
    if (srk_attn_tc_bwd(dq, dk, dv, dout, q, k, v, lse, delta, (int)B, (int)T, (int)C, (int)L, (int)NH, scale, fresh))
        return;
    dim3 gkv((unsigned)((T + AB_BK - 1) / AB_BK), (unsigned)NH, (unsigned)B);
    size_t skv = sizeof(float) * ((size_t)(4 * AB_BK + 2 * AB_BQ) * (hd + 1) + 2 * AB_BQ);
    dim3 gq((unsigned)((T + AQ_BR - 1) / AQ_BR), (unsigned)NH, (unsigned)B);
    size_t sq = sizeof(float) * (size_t)(3 * AQ_BR + 2 * AQ_BC) * (hd + 1);
    if (skv > 227 * 1024 || sq > 227 * 1024) {
        srk_fail("causal_attention: head size %d is too large for the attention kernel (at most 280)", hd);
        return;
    }
    if (dk || dv) {
        SRK_SMEM_AT_LEAST((attn_bwd_kv_simt_kernel<TDK, TDV, TG, TQ, TK, TV>), skv);
        SR_LAUNCH((attn_bwd_kv_simt_kernel<TDK, TDV, TG, TQ, TK, TV>), gkv, AB_BK, skv, srk_ctx.stream, dk, dv, dout,
                  q, k, v, (const float *)lse, (const float *)delta, (int)T, (int)C, (int)L, (int)NH, hd, scale, fresh);
    }
    if (dq) {
        SRK_SMEM_AT_LEAST((attn_bwd_q_simt_kernel<TDQ, TG, TQ, TK, TV>), sq);
        SR_LAUNCH((attn_bwd_q_simt_kernel<TDQ, TG, TQ, TK, TV>), gq, AQ_BR, sq, srk_ctx.stream, dq, dout, q, k, v,
                  (const float *)lse, (const float *)delta, (int)T, (int)C, (int)L, (int)NH, hd, scale, fresh);
    }
}

/* q, k, v packed in qkv (B,T,3C) = q|k|v and read in place ($attention_qkv, compiler/qkvpack.c) */
template <class TO, class TX>
void srk_attention_qkv_fwd(TO *out, float *aux, const TX *qkv, long B, long T, long C, long NH)
{
    srk_attention_fwd(out, aux, qkv, qkv + C, qkv + 2 * C, B, T, C, NH, 3 * C);
}

/* d(qkv) (B,T,3C) += dq|dk|dv; fresh bit 0: d(qkv) starts here (all three parts are written) */
template <class TD, class TG, class TX>
void srk_attention_qkv_bwd(TD *dqkv, const TG *dout, const TX *qkv, float *aux, long B, long T, long C, long NH,
                           int fresh = 0)
{
    if (!dqkv) return;
    srk_attention_bwd(dqkv, dqkv + C, dqkv + 2 * C, dout, qkv, qkv + C, qkv + 2 * C, aux, B, T, C, NH,
                      fresh & 1 ? 7 : 0, 3 * C);
}

#include "srk_attention_pick.cuh"

#endif /* SRK_ATTENTION_CUH */
