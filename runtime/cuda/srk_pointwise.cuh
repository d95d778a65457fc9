/* srk_pointwise.cuh: element-wise kernels in forward/backward pairs:
 * broadcasting add/sub/mul, scale, activations, rotary position embedding,
 * repeat_kv, dropout, embedding, arange, slice, transpose, copy, zero; and the
 * deterministic column sums their backward passes (and the norms') need.
 *
 * Semantics are those of the host kernels (shardrt.h). Reductions add in an
 * order fixed by the shape, so results do not change from run to run; the
 * embedding backward, where rows repeat, sorts its positions by row first
 * and adds each row's in order (no atomics), as the host does.
 */
#ifndef SRK_POINTWISE_CUH
#define SRK_POINTWISE_CUH

#include "srk_common.cuh"

enum { SRK_EW_THREADS = 256 };

template <class T>
void srk_zero(T *x, long n); /* x (n) = 0, below */

/* eight elements as floats through 16-byte accesses (p 16-byte aligned) */
__device__ __forceinline__ void srk_ld8(const float *p, float v[8])
{
    float4 a = ((const float4 *)p)[0], b = ((const float4 *)p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
/* bf16 pairs packed in 32-bit words by bits (no bf16 view of a word: that
 * breaks C++'s aliasing rules, and the emulator's compiler acts on it);
 * element 2k is the low half of word k, a bf16 is a float's high half */
__device__ __forceinline__ void srk_ld8(const bf16 *p, float v[8])
{
    uint4 u = *(const uint4 *)p;
    unsigned w[4] = {u.x, u.y, u.z, u.w};
    SRK_UNROLL
    for (int k = 0; k < 4; k++) {
        v[2 * k] = __uint_as_float(w[k] << 16);
        v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    }
}
__device__ __forceinline__ void srk_st8(float *p, const float v[8])
{
    ((float4 *)p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    ((float4 *)p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ void srk_st8(bf16 *p, const float v[8])
{
    unsigned w[4];
    SRK_UNROLL
    for (int k = 0; k < 4; k++)
        w[k] = (unsigned)__bfloat16_as_ushort(__float2bfloat16(v[2 * k])) |
               (unsigned)__bfloat16_as_ushort(__float2bfloat16(v[2 * k + 1])) << 16;
    uint4 u;
    u.x = w[0], u.y = w[1], u.z = w[2], u.w = w[3];
    *(uint4 *)p = u;
}
/* the 16-byte kernels' condition: n splits into eights and every tensor is
 * 16-byte aligned (c may be NULL: two tensors) */
static inline int srk_by8(long n, const void *a, const void *b, const void *c = NULL)
{
    return n % 8 == 0 && (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 15) == 0;
}

/* ---- column sums: db[j] += s * sum_r f(r, j) ----------------------------------- */
/* Two phases, both in an order fixed by the shape: phase 1 cuts the rows into
 * `chunks` ranges and sums each (one block per 32 columns x chunk, or 256
 * columns read 16 bytes at a time, 8 row lanes per column added in order);
 * phase 2 adds the chunks (8 lanes of every 8th chunk, added in order). */
enum { CS_MODE_X = 0, CS_MODE_XY = 1, CS_MODE_LN = 2, CS_MODE_RMS = 3 };

/* mode X: x; XY: x*y; LN: x*(y-mean)*rstd and x (two sums); RMS: x*y*rstd.
 * One row r's term of a column: a1 += f(x, y), a2 += x (LN's second sum) */
template <int MODE>
__device__ __forceinline__ void srk_cs_add(float &a1, float &a2, float xv, float yv, const float *mean,
                                           const float *rstd, long r)
{
    if constexpr (MODE == CS_MODE_X) {
        a1 += xv;
    } else if constexpr (MODE == CS_MODE_XY) {
        a1 += xv * yv;
    } else if constexpr (MODE == CS_MODE_LN) {
        a1 += xv * ((yv - mean[r]) * rstd[r]);
        a2 += xv;
    } else {
        a1 += xv * (yv * rstd[r]);
    }
}
template <int MODE, class TX, class TY>
__global__ void colsum_part_kernel(float *part, float *part2, const TX *x, const TY *y, const float *mean,
                                   const float *rstd, long rows, long nb, int chunks)
{
    // part, part2 (chunks, nb); x, y (rows, nb)
    __shared__ float s1[8][33], s2[8][33];
    long j = (long)blockIdx.x * 32 + threadIdx.x;
    int c = blockIdx.y;
    long r0 = rows * c / chunks, r1 = rows * (c + 1) / chunks;
    float a1 = 0.0f, a2 = 0.0f;
    if (j < nb) {
        for (long r = r0 + threadIdx.y; r < r1; r += 8) {
            float yv = 0.0f;
            if constexpr (MODE != CS_MODE_X) yv = srk_ld(y[r * nb + j]);
            srk_cs_add<MODE>(a1, a2, srk_ld(x[r * nb + j]), yv, mean, rstd, r);
        }
    }
    s1[threadIdx.y][threadIdx.x] = a1;
    s2[threadIdx.y][threadIdx.x] = a2;
    __syncthreads();
    if (threadIdx.y == 0 && j < nb) {
        float t1 = 0.0f, t2 = 0.0f;
        for (int k = 0; k < 8; k++) {
            t1 += s1[k][threadIdx.x];
            t2 += s2[k][threadIdx.x];
        }
        part[(long)c * nb + j] = t1;
        if (part2) part2[(long)c * nb + j] = t2;
    }
}

/* colsum_part_kernel's sums, 8 columns a thread through 16-byte loads (nb % 8 == 0, x and y
 * 16-byte aligned): each column adds the same rows in the same order, so the same bits */
template <int MODE, class TX, class TY>
__global__ void colsum_part8_kernel(float *part, float *part2, const TX *x, const TY *y, const float *mean,
                                    const float *rstd, long rows, long nb, int chunks)
{
    // part, part2 (chunks, nb); x, y (rows, nb); a block: 256 columns x 8 row lanes
    __shared__ float s1[8][257], s2[MODE == CS_MODE_LN ? 8 : 1][257];
    long j = ((long)blockIdx.x * 32 + threadIdx.x) * 8;
    int c = blockIdx.y;
    long r0 = rows * c / chunks, r1 = rows * (c + 1) / chunks;
    float a1[8], a2[8];
    for (int k = 0; k < 8; k++) a1[k] = a2[k] = 0.0f;
    if (j < nb) {
        for (long r = r0 + threadIdx.y; r < r1; r += 8) {
            float xv[8], yv[8];
            srk_ld8(x + r * nb + j, xv);
            if constexpr (MODE != CS_MODE_X) srk_ld8(y + r * nb + j, yv);
            SRK_UNROLL
            for (int k = 0; k < 8; k++) srk_cs_add<MODE>(a1[k], a2[k], xv[k], MODE == CS_MODE_X ? 0.0f : yv[k], mean, rstd, r);
        }
    }
    for (int k = 0; k < 8; k++) {
        s1[threadIdx.y][threadIdx.x * 8 + k] = a1[k];
        if constexpr (MODE == CS_MODE_LN) s2[threadIdx.y][threadIdx.x * 8 + k] = a2[k];
    }
    __syncthreads();
    int col = threadIdx.y * 32 + threadIdx.x; /* the block's columns, one a thread */
    long jc = (long)blockIdx.x * 256 + col;
    if (jc < nb) {
        float t1 = 0.0f, t2 = 0.0f;
        for (int k = 0; k < 8; k++) {
            t1 += s1[k][col];
            if constexpr (MODE == CS_MODE_LN) t2 += s2[k][col];
        }
        part[(long)c * nb + jc] = t1;
        if (part2) part2[(long)c * nb + jc] = t2;
    }
}

template <class TD>
__global__ void colsum_finish_kernel(TD *db, const float *part, long nb, int chunks, float s, int fresh)
{
    // db (nb) += s * sum over chunks of part (chunks, nb): a block of 32 columns x 8 chunk lanes,
    // the lanes' sums added in order (the order is the shape's)
    __shared__ float red[8][33];
    long j = (long)blockIdx.x * 32 + threadIdx.x;
    float t = 0.0f;
    if (j < nb)
        for (int c = threadIdx.y; c < chunks; c += 8) t += part[(long)c * nb + j];
    red[threadIdx.y][threadIdx.x] = t;
    __syncthreads();
    if (threadIdx.y == 0 && j < nb) {
        float u = 0.0f;
        for (int k = 0; k < 8; k++) u += red[k][threadIdx.x];
        srk_put(&db[j], s * u, fresh);
    }
}

static inline int srk_colsum_chunks(long rows)
{
    long c = rows / 64;
    return (int)(c < 1 ? 1 : c > 256 ? 256 : c);
}

/* the second phase: db (nb) += s * the chunks' sums in part (fresh: db =), db2 += part2's (either
 * may be NULL) */
template <class TD, class TD2>
void srk_colsum_finish(TD *db, const float *part, TD2 *db2, const float *part2, long nb, int chunks, float s, int fresh)
{
    unsigned fb = (unsigned)((nb + 31) / 32);
    if (db) SR_LAUNCH(colsum_finish_kernel<TD>, fb, dim3(32, 8), 0, srk_ctx.stream, db, part, nb, chunks, s, fresh);
    if (db2) SR_LAUNCH(colsum_finish_kernel<TD2>, fb, dim3(32, 8), 0, srk_ctx.stream, db2, part2, nb, chunks, 1.0f, 0);
}

/* db (nb) += s * colsum(f(x, y)) (fresh: db =); for LN also db2 (nb) += colsum(x) */
template <int MODE, class TD, class TD2, class TX, class TY>
void srk_colsum(TD *db, TD2 *db2, float s, const TX *x, const TY *y, const float *mean, const float *rstd,
                long rows, long nb, int fresh = 0)
{
    if ((!db && !db2) || rows <= 0 || nb <= 0) return;
    int chunks = srk_colsum_chunks(rows);
    float *part = (float *)srk_scratch(SRK_SCR_PART, sizeof(float) * (size_t)chunks * (size_t)nb);
    float *part2 = MODE == CS_MODE_LN ? (float *)srk_scratch(SRK_SCR_PART2, sizeof(float) * (size_t)chunks * (size_t)nb) : NULL;
    if (!part || (MODE == CS_MODE_LN && !part2)) return;
    if (srk_by8(nb, x, MODE == CS_MODE_X ? (const void *)x : (const void *)y)) {
        dim3 grid((unsigned)((nb / 8 + 31) / 32), (unsigned)chunks);
        SR_LAUNCH((colsum_part8_kernel<MODE, TX, TY>), grid, dim3(32, 8), 0, srk_ctx.stream, part, part2, x, y, mean,
                  rstd, rows, nb, chunks);
    } else {
        dim3 grid((unsigned)((nb + 31) / 32), (unsigned)chunks);
        SR_LAUNCH((colsum_part_kernel<MODE, TX, TY>), grid, dim3(32, 8), 0, srk_ctx.stream, part, part2, x, y, mean,
                  rstd, rows, nb, chunks);
    }
    srk_colsum_finish(db, (const float *)part, MODE == CS_MODE_LN ? db2 : (TD2 *)NULL, (const float *)part2, nb,
                      chunks, s, fresh);
}

/* ---- broadcasting add / sub / mul -------------------------------------------------- */
enum { EW_ADD = 0, EW_SUB = 1, EW_MUL = 2 };

template <int OP, class TO, class TA, class TB>
__global__ void binary_fwd_kernel(TO *out, const TA *a, const TB *b, long n, long nb)
{
    // out (n) = a (n) op b (nb) broadcast along a's rows
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float x = srk_ld(a[i]), y = srk_ld(b[i % nb]);
        out[i] = srk_to<TO>(OP == EW_ADD ? x + y : OP == EW_SUB ? x - y : x * y);
    }
}

/* binary_fwd_kernel's arithmetic, eight elements a thread through 16-byte accesses (n8 eights;
 * nb a multiple of 8, so an eight of a never straddles b's rows): the same bits. No __restrict__:
 * out may be a or b (an add in place) */
template <int OP, class TO, class TA, class TB>
__global__ void binary8_kernel(TO *out, const TA *a, const TB *b, long n8, long nb)
{
    int bcast = nb != 8 * n8; /* no 64-bit division for a residual add */
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += (long)gridDim.x * blockDim.x) {
        float x[8], y[8], o[8];
        srk_ld8(a + 8 * i, x);
        srk_ld8(b + (bcast ? 8 * i % nb : 8 * i), y);
        SRK_UNROLL
        for (int k = 0; k < 8; k++) o[k] = OP == EW_ADD ? x[k] + y[k] : OP == EW_SUB ? x[k] - y[k] : x[k] * y[k];
        srk_st8(out + 8 * i, o);
    }
}
template <int OP, class TO, class TA, class TB>
void srk_binary_fwd(TO *out, const TA *a, const TB *b, long n, long nb)
{
    if (n <= 0 || nb <= 0) return;
    if (nb % 8 == 0 && srk_by8(n, out, a, b))
        SR_LAUNCH((binary8_kernel<OP, TO, TA, TB>), srk_blocks(n / 8, SRK_EW_THREADS), SRK_EW_THREADS, 0,
                  srk_ctx.stream, out, a, b, n / 8, nb);
    else
        SR_LAUNCH((binary_fwd_kernel<OP, TO, TA, TB>), srk_blocks(n, SRK_EW_THREADS), SRK_EW_THREADS, 0,
                  srk_ctx.stream, out, a, b, n, nb);
}

/* da (n) += s * dout (n) * (y ? y[i % ny] : 1); fresh: da = (da's old values are not read) */
template <class TD, class TG, class TY>
__global__ void axpy_bcast_kernel(TD *da, const TG *dout, const TY *y, float s, long n, long ny, int fresh)
{
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float g = srk_ld(dout[i]) * s;
        if (y) g *= srk_ld(y[ny == n ? i : i % ny]); /* no 64-bit division when y is not broadcast */
        srk_put(&da[i], g, fresh);
    }
}

/* da (8 n8) += s * dout: axpy_bcast_kernel's arithmetic, eight elements a thread */
template <class TD, class TG>
__global__ void axpy8_kernel(TD *__restrict__ da, const TG *__restrict__ dout, float s, long n8, int fresh)
{
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += (long)gridDim.x * blockDim.x) {
        float g[8], d[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        srk_ld8(dout + 8 * i, g);
        if (!fresh) srk_ld8(da + 8 * i, d);
        SRK_UNROLL
        for (int k = 0; k < 8; k++) d[k] = d[k] + g[k] * s;
        srk_st8(da + 8 * i, d);
    }
}

/* da (n) += s * dout (n) (fresh: da =): vectorized when the sizes and addresses allow */
template <class TD, class TG>
void srk_axpy(TD *da, const TG *dout, float s, long n, int fresh = 0)
{
    if (srk_by8(n, da, dout))
        SR_LAUNCH((axpy8_kernel<TD, TG>), srk_blocks(n / 8, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream, da,
                  dout, s, n / 8, fresh);
    else
        SR_LAUNCH((axpy_bcast_kernel<TD, TG, float>), srk_blocks(n, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream,
                  da, dout, (const float *)NULL, s, n, 1L, fresh);
}

template <class TO, class TA, class TB>
void srk_add_fwd(TO *out, const TA *a, const TB *b, long n, long nb)
{
    srk_binary_fwd<EW_ADD>(out, a, b, n, nb);
}
/* db (nb) += s * (the column sums of dout (n/nb, nb) [times y]); with nb == n
 * (no broadcast, a residual add) that is element-wise: no column sums.
 * fresh: db = (its old values are not read) */
template <int MODE, class TDB, class TG, class TY>
void srk_bcast_bwd(TDB *db, const TG *dout, const TY *y, float s, long n, long nb, int fresh = 0)
{
    if (!db || nb <= 0) return;
    if (n <= 0) {
        if (fresh) srk_zero(db, nb); /* column sums of no rows */
        return;
    }
    if (nb == n && !y)
        srk_axpy(db, dout, s, n, fresh);
    else if (nb == n)
        SR_LAUNCH((axpy_bcast_kernel<TDB, TG, TY>), srk_blocks(n, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream,
                  db, dout, y, s, n, n, fresh);
    else
        srk_colsum<MODE, TDB, float>(db, (float *)NULL, s, dout, y, NULL, NULL, n / nb, nb, fresh);
}

/* fresh (the code generator's $z): bit 0 da, bit 1 db start at zero and are
 * overwritten (their clearing was left out) */
template <class TDA, class TDB, class TG>
void srk_add_bwd(TDA *da, TDB *db, const TG *dout, long n, long nb, int fresh = 0)
{
    if (da && n > 0) srk_axpy(da, dout, 1.0f, n, fresh & 1);
    srk_bcast_bwd<CS_MODE_X>(db, dout, (const float *)NULL, 1.0f, n, nb, fresh >> 1 & 1);
}
template <class TO, class TA, class TB>
void srk_sub_fwd(TO *out, const TA *a, const TB *b, long n, long nb)
{
    srk_binary_fwd<EW_SUB>(out, a, b, n, nb);
}
template <class TDA, class TDB, class TG>
void srk_sub_bwd(TDA *da, TDB *db, const TG *dout, long n, long nb, int fresh = 0)
{
    if (da && n > 0) srk_axpy(da, dout, 1.0f, n, fresh & 1);
    srk_bcast_bwd<CS_MODE_X>(db, dout, (const float *)NULL, -1.0f, n, nb, fresh >> 1 & 1);
}
template <class TO, class TA, class TB>
void srk_mul_fwd(TO *out, const TA *a, const TB *b, long n, long nb)
{
    srk_binary_fwd<EW_MUL>(out, a, b, n, nb);
}
template <class TDA, class TDB, class TG, class TA, class TB>
void srk_mul_bwd(TDA *da, TDB *db, const TG *dout, const TA *a, const TB *b, long n, long nb, int fresh = 0)
{
    // da += dout * b (broadcast); db += colsum(dout * a); fresh as srk_add_bwd's
    if (nb <= 0) return;
    if (da && n > 0)
        SR_LAUNCH((axpy_bcast_kernel<TDA, TG, TB>), srk_blocks(n, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream,
                  da, dout, b, 1.0f, n, nb, fresh & 1);
    srk_bcast_bwd<CS_MODE_XY>(db, dout, a, 1.0f, n, nb, fresh >> 1 & 1);
}

template <class TO, class TX>
__global__ void scale_kernel(TO *out, const TX *x, float s, long n)
{
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        out[i] = srk_to<TO>(srk_ld(x[i]) * s);
}
template <class TO, class TX>
void srk_scale_fwd(TO *out, const TX *x, float s, long n)
{
    if (n <= 0) return;
    SR_LAUNCH((scale_kernel<TO, TX>), srk_blocks(n, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream, out, x, s, n);
}
template <class TD, class TG>
void srk_scale_bwd(TD *dx, const TG *dout, float s, long n, int fresh = 0)
{
    if (!dx || n <= 0) return;
    SR_LAUNCH((axpy_bcast_kernel<TD, TG, float>), srk_blocks(n, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream,
              dx, dout, (const float *)NULL, s, n, 1L, fresh & 1);
}

/* ---- activations ---------------------------------------------------------------------- */
enum { ACT_GELU = 0, ACT_GELU_EXACT, ACT_RELU, ACT_SILU, ACT_COPY };

#define SRK_GELU_SCALE 0.7978845608028654f
#define SRK_INV_SQRT2 0.70710678118654752f
#define SRK_INV_SQRT2PI 0.39894228040143268f

__device__ __forceinline__ float srk_act(int act, float x)
{
    switch (act) {
    case ACT_GELU: {
        // x * sigmoid(2u), u = sqrt(2/pi)(x + 0.044715 x^3): the tanh GELU without 1 + tanh cancellation
        float u = SRK_GELU_SCALE * (x + 0.044715f * x * x * x);
        return x / (1.0f + expf(-2.0f * u));
    }
    case ACT_GELU_EXACT: return 0.5f * x * (1.0f + erff(x * SRK_INV_SQRT2));
    case ACT_RELU: return x > 0.0f ? x : 0.0f;
    case ACT_SILU: return x / (1.0f + expf(-x));
    default: return x;
    }
}
__device__ __forceinline__ float srk_act_grad(int act, float x)
{
    switch (act) {
    case ACT_GELU: {
        float u = SRK_GELU_SCALE * (x + 0.044715f * x * x * x);
        float s = 1.0f / (1.0f + expf(-2.0f * u));
        float du = SRK_GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        return s + 2.0f * x * s * (1.0f - s) * du;
    }
    case ACT_GELU_EXACT: {
        float cdf = 0.5f * (1.0f + erff(x * SRK_INV_SQRT2));
        return cdf + x * SRK_INV_SQRT2PI * expf(-0.5f * x * x);
    }
    case ACT_RELU: return x > 0.0f ? 1.0f : 0.0f;
    case ACT_SILU: {
        float s = 1.0f / (1.0f + expf(-x));
        return s * (1.0f + x * (1.0f - s));
    }
    default: return 1.0f;
    }
}

template <int ACT, class TO, class TX>
__global__ void act_fwd_kernel(TO *out, const TX *x, long n)
{
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        out[i] = srk_to<TO>(srk_act(ACT, srk_ld(x[i])));
}
template <int ACT, class TD, class TG, class TX>
__global__ void act_bwd_kernel(TD *dx, const TG *dout, const TX *x, long n, int fresh)
{
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float g = srk_ld(dout[i]);
        // relu: the gradient is exactly dout or 0 (no 0 * inf)
        float d = ACT == ACT_RELU ? (srk_ld(x[i]) > 0.0f ? g : 0.0f) : srk_act_grad(ACT, srk_ld(x[i])) * g;
        srk_put(&dx[i], d, fresh);
    }
}

/* act_bwd_kernel's arithmetic, eight elements a thread through 16-byte accesses */
template <int ACT, class TD, class TG, class TX>
__global__ void act_bwd8_kernel(TD *__restrict__ dx, const TG *__restrict__ dout, const TX *__restrict__ x, long n8,
                                int fresh)
{
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += (long)gridDim.x * blockDim.x) {
        float g[8], xv[8], d[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        srk_ld8(dout + 8 * i, g);
        srk_ld8(x + 8 * i, xv);
        if (!fresh) srk_ld8(dx + 8 * i, d);
        SRK_UNROLL
        for (int k = 0; k < 8; k++)
            d[k] = d[k] + (ACT == ACT_RELU ? (xv[k] > 0.0f ? g[k] : 0.0f) : srk_act_grad(ACT, xv[k]) * g[k]);
        srk_st8(dx + 8 * i, d);
    }
}

#define SRK_ACT_PAIR(name, ACT)                                                                          \
    template <class TO, class TX>                                                                        \
    void srk_##name##_fwd(TO *out, const TX *x, long n)                                                  \
    {                                                                                                    \
        if (n <= 0) return;                                                                              \
        SR_LAUNCH((act_fwd_kernel<ACT, TO, TX>), srk_blocks(n, SRK_EW_THREADS), SRK_EW_THREADS, 0,       \
                  srk_ctx.stream, out, x, n);                                                            \
    }                                                                                                    \
    template <class TD, class TG, class TX>                                                              \
    void srk_##name##_bwd(TD *dx, const TG *dout, const TX *x, long n, int fresh = 0)                    \
    {                                                                                                    \
        if (!dx || n <= 0) return;                                                                       \
        if (srk_by8(n, dx, dout, x))                                                                     \
            SR_LAUNCH((act_bwd8_kernel<ACT, TD, TG, TX>), srk_blocks(n / 8, SRK_EW_THREADS), SRK_EW_THREADS, \
                      0, srk_ctx.stream, dx, dout, x, n / 8, fresh & 1);                                 \
        else                                                                                             \
            SR_LAUNCH((act_bwd_kernel<ACT, TD, TG, TX>), srk_blocks(n, SRK_EW_THREADS), SRK_EW_THREADS,  \
                      0, srk_ctx.stream, dx, dout, x, n, fresh & 1);                                     \
    }
SRK_ACT_PAIR(gelu, ACT_GELU)
SRK_ACT_PAIR(gelu_exact, ACT_GELU_EXACT)
SRK_ACT_PAIR(relu, ACT_RELU)
SRK_ACT_PAIR(silu, ACT_SILU)
#undef SRK_ACT_PAIR

/* ---- rotary position embedding (the host's sr_rope_fwd/bwd) ---------------------------------- */
/* One thread per (row, i < hd/2): the angle once, from sr_rope_inv_freq as on
 * the host, then the pair (i, i + hd/2) of every head. sign -1 with acc: the
 * backward, dx += R(-a) dout. */
struct srk_rope_freq {
    float theta, factor, low, high, orig;
};
template <class TO, class TX>
__global__ void rope_kernel(TO *out, const TX *x, long N, int T, int C, int hd, srk_rope_freq fq, float sign, int acc)
{
    // out, x (N, C)
    int half = hd / 2;
    for (long p = (long)blockIdx.x * blockDim.x + threadIdx.x; p < N * half; p += (long)gridDim.x * blockDim.x) {
        long r = p / half;
        int i = (int)(p % half);
        float a = (float)(r % T) * sr_rope_inv_freq(i, hd, fq.theta, fq.factor, fq.low, fq.high, fq.orig);
        float cs = cosf(a), sn = sign * sinf(a);
        for (int h = 0; h < C; h += hd) {
            long j = r * C + h + i;
            float u = srk_ld(x[j]), v = srk_ld(x[j + half]);
            float ru = u * cs - v * sn, rv = v * cs + u * sn;
            if (acc) {
                srk_acc(&out[j], ru);
                srk_acc(&out[j + half], rv);
            } else {
                out[j] = srk_to<TO>(ru);
                out[j + half] = srk_to<TO>(rv);
            }
        }
    }
}
template <class TO, class TX>
void srk_rope_fwd(TO *out, const TX *x, long N, int T, int C, int n_head, float theta, float factor, float low,
                  float high, float orig)
{
    long n = N * (long)(C / n_head / 2);
    if (n <= 0) return;
    srk_rope_freq fq = {theta, factor, low, high, orig};
    SR_LAUNCH((rope_kernel<TO, TX>), srk_blocks(n, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream, out, x, N, T,
              C, C / n_head, fq, 1.0f, 0);
}
template <class TD, class TG>
void srk_rope_bwd(TD *dx, const TG *dout, long N, int T, int C, int n_head, float theta, float factor, float low,
                  float high, float orig)
{
    long n = N * (long)(C / n_head / 2);
    if (!dx || n <= 0) return;
    srk_rope_freq fq = {theta, factor, low, high, orig};
    SR_LAUNCH((rope_kernel<TD, TG>), srk_blocks(n, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream, dx, dout, N,
              T, C, C / n_head, fq, -1.0f, 1);
}

/* ---- repeat_kv (the host's sr_repeat_kv_fwd/bwd) ---------------------------------------------- */
template <class TO, class TX>
__global__ void repeat_kv_fwd_kernel(TO *out, const TX *x, long N, int n_kv, int hd, int n_rep)
{
    // out (N, n_kv * n_rep * hd), x (N, n_kv * hd): one thread per output element
    long cin = (long)n_kv * hd, cout = cin * n_rep;
    for (long p = (long)blockIdx.x * blockDim.x + threadIdx.x; p < N * cout; p += (long)gridDim.x * blockDim.x) {
        long r = p / cout, c = p % cout;
        long h = c / hd, i = c % hd;
        out[p] = srk_to<TO>(srk_ld(x[r * cin + (h / n_rep) * hd + i]));
    }
}
template <class TD, class TG>
__global__ void repeat_kv_bwd_kernel(TD *dx, const TG *dout, long N, int n_kv, int hd, int n_rep)
{
    // dx (N, n_kv * hd) += the n_rep copies of dout, summed in order as the host does
    long cin = (long)n_kv * hd, cout = cin * n_rep;
    for (long p = (long)blockIdx.x * blockDim.x + threadIdx.x; p < N * cin; p += (long)gridDim.x * blockDim.x) {
        long r = p / cin, c = p % cin;
        long g = c / hd, i = c % hd;
        const TG *d = dout + r * cout + g * n_rep * hd + i;
        float s = 0.0f;
        for (int k = 0; k < n_rep; k++) s += srk_ld(d[(long)k * hd]);
        srk_acc(&dx[p], s);
    }
}
template <class TO, class TX>
void srk_repeat_kv_fwd(TO *out, const TX *x, long N, int n_kv, int hd, int n_rep)
{
    long n = N * n_kv * (long)hd * n_rep;
    if (n <= 0) return;
    SR_LAUNCH((repeat_kv_fwd_kernel<TO, TX>), srk_blocks(n, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream, out,
              x, N, n_kv, hd, n_rep);
}
template <class TD, class TG>
void srk_repeat_kv_bwd(TD *dx, const TG *dout, long N, int n_kv, int hd, int n_rep)
{
    long n = N * n_kv * (long)hd;
    if (!dx || n <= 0) return;
    SR_LAUNCH((repeat_kv_bwd_kernel<TD, TG>), srk_blocks(n, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream, dx,
              dout, N, n_kv, hd, n_rep);
}

/* ---- copy and zero -------------------------------------------------------------------------- */
template <class TO, class TX>
void srk_copy(TO *out, const TX *x, long n)
{
    if (n <= 0 || (const void *)out == (const void *)x) return;
    if constexpr (srk_dt<TO>::value == srk_dt<TX>::value)
        srk_check_cuda(cudaMemcpyAsync(out, x, (size_t)n * sizeof(TO), cudaMemcpyDeviceToDevice, srk_ctx.stream),
                       "srk_copy");
    else
        SR_LAUNCH((act_fwd_kernel<ACT_COPY, TO, TX>), srk_blocks(n, SRK_EW_THREADS), SRK_EW_THREADS, 0,
                  srk_ctx.stream, out, x, n);
}
template <class T>
void srk_zero(T *x, long n)
{
    if (n <= 0) return;
    srk_check_cuda(cudaMemsetAsync(x, 0, (size_t)n * sizeof(T), srk_ctx.stream), "srk_zero");
}

/* ---- dropout: the host's counter-based RNG (shardrt.h's sr_mix64), bit for bit ------------------ */
#define SRK_RNG_GOLDEN 0x9e3779b97f4a7c15ULL
__host__ __device__ __forceinline__ uint64_t srk_rng_key(uint64_t seed, uint64_t stream)
{
    return sr_mix64(sr_mix64(seed + SRK_RNG_GOLDEN) ^ stream);
}
__device__ __forceinline__ float srk_rng_at(uint64_t key, uint64_t counter)
{
    return (float)(sr_mix64(key + counter * SRK_RNG_GOLDEN) >> 40) * (1.0f / 16777216.0f);
}

/* BWD = 0 (or fresh): out = keep ? x * scale : 0; BWD = 1: out += keep ? x * scale : 0 */
template <int BWD, class TO, class TX>
__global__ void dropout_kernel(TO *out, const TX *x, long n, float p, float scale, uint64_t key, uint64_t base,
                               int fresh)
{
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float v = srk_rng_at(key, base + (uint64_t)i) >= p ? srk_ld(x[i]) * scale : 0.0f;
        srk_put(&out[i], v, !BWD || fresh);
    }
}

template <class TO, class TX>
void srk_dropout_fwd(TO *out, const TX *x, long n, float p, uint64_t seed, uint64_t step, uint32_t op, uint64_t base)
{
    if (n <= 0) return;
    if (!(p > 0.0f)) {
        srk_copy(out, x, n);
        return;
    }
    if (p >= 1.0f) {
        srk_zero(out, n);
        return;
    }
    uint64_t key = srk_rng_key(seed, (step << 20) ^ (uint64_t)op);
    SR_LAUNCH((dropout_kernel<0, TO, TX>), srk_blocks(n, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream, out, x,
              n, p, 1.0f / (1.0f - p), key, base, 1);
}
/* out = a + dropout(x), the dropped-out value rounded to x's type as the unfused dropout stores it
 * (the same bits as the two calls) */
template <class TO, class TA, class TX>
__global__ void dropout_add_kernel(TO *out, const TA *a, const TX *x, long n, float p, float scale, uint64_t key,
                                   uint64_t base)
{
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float v = srk_rng_at(key, base + (uint64_t)i) >= p ? srk_ld(srk_to<TX>(srk_ld(x[i]) * scale)) : 0.0f;
        out[i] = srk_to<TO>(srk_ld(a[i]) + v);
    }
}

/* a residual add of a dropped-out branch, out (n) = a + dropout(x), in one pass: the code
 * generator's fusion of dropout and the add that alone reads it (codegen_cuda.c); the mask is
 * srk_dropout_fwd's for the same (seed, step, op, base), so srk_dropout_bwd undoes it. At p = 0
 * (training without dropout, and every evaluation) the add alone: no copy of the branch */
template <class TO, class TA, class TX>
void srk_dropout_add_fwd(TO *out, const TA *a, const TX *x, long n, float p, uint64_t seed, uint64_t step, uint32_t op,
                         uint64_t base)
{
    if (n <= 0) return;
    if (!(p > 0.0f)) {
        srk_add_fwd(out, a, x, n, n);
        return;
    }
    if (p >= 1.0f) {
        srk_copy(out, a, n);
        return;
    }
    uint64_t key = srk_rng_key(seed, (step << 20) ^ (uint64_t)op);
    SR_LAUNCH((dropout_add_kernel<TO, TA, TX>), srk_blocks(n, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream, out,
              a, x, n, p, 1.0f / (1.0f - p), key, base);
}

template <class TD, class TG>
void srk_dropout_bwd(TD *dx, const TG *dout, long n, float p, uint64_t seed, uint64_t step, uint32_t op,
                     uint64_t base, int fresh = 0)
{
    if (!dx || n <= 0) return;
    if (p >= 1.0f) {
        if (fresh & 1) srk_zero(dx, n); /* nothing passes */
        return;
    }
    if (!(p > 0.0f)) {
        srk_add_bwd(dx, (float *)NULL, dout, n, n, fresh & 1);
        return;
    }
    uint64_t key = srk_rng_key(seed, (step << 20) ^ (uint64_t)op);
    SR_LAUNCH((dropout_kernel<1, TD, TG>), srk_blocks(n, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream, dx,
              dout, n, p, 1.0f / (1.0f - p), key, base, fresh & 1);
}

/* ---- embedding and arange --------------------------------------------------------------------- */
template <class TO, class TW>
__global__ void embedding_fwd_kernel(TO *out, const TW *w, const int32_t *idx, long N, int D)
{
    // out (N, D) = w[idx[i]]
    for (long e = (long)blockIdx.x * blockDim.x + threadIdx.x; e < N * D; e += (long)gridDim.x * blockDim.x) {
        long i = e / D;
        int j = (int)(e - i * D);
        out[e] = srk_to<TO>(srk_ld(w[(long)idx[i] * D + j]));
    }
}
/* ---- the embedding backward, deterministic: rows summed in position order ---------------------- */
/* The host adds dout's rows into dw in position order; atomics would add repeated ids in whatever
 * order the threads land (round-off varying from run to run, as llm.c's first encoder backward).
 * Instead the (row, position) pairs are sorted on the device (a bitonic sort of 64-bit keys in
 * scratch) and one thread per (row, column) adds its row's positions in order: the host's bits. */
enum { SRK_SORT_CHUNK = 1024 }; /* keys a block sorts in shared memory (two per thread) */
typedef unsigned long long srk_key;
#define SRK_NO_KEY (~0ull) /* a position whose row this rank does not hold, or padding: sorted last */

static __global__ void emb_keys_kernel(srk_key *key, const int32_t *idx, long N, long P, long lo, long Vl)
{
    // key (P) = row << 32 | position, row = idx - lo where 0 <= row < Vl (every row: Vl < 0)
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < P; i += (long)gridDim.x * blockDim.x) {
        srk_key k = SRK_NO_KEY;
        if (i < N) {
            long row = (long)idx[i] - lo;
            if (row >= 0 && (Vl < 0 || row < Vl)) k = ((srk_key)row << 32) | (srk_key)i;
        }
        key[i] = k;
    }
}
static __global__ void bitonic_step_kernel(srk_key *key, long P, long k, long j)
{
    // one step (k, j) of the bitonic network over all P keys: pairs j apart, ascending where (i & k) == 0
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < P; i += (long)gridDim.x * blockDim.x) {
        long l = i ^ j;
        if (l <= i) continue;
        srk_key a = key[i], b = key[l];
        if ((a > b) == ((i & k) == 0)) {
            key[i] = b;
            key[l] = a;
        }
    }
}
static __global__ void bitonic_chunk_kernel(srk_key *key, long k0, long k1)
{
    // the steps (k, j < SRK_SORT_CHUNK) for k = k0 .. k1 on this block's chunk, in shared memory
    __shared__ srk_key s[SRK_SORT_CHUNK];
    long base = (long)blockIdx.x * SRK_SORT_CHUNK;
    for (int t = threadIdx.x; t < SRK_SORT_CHUNK; t += blockDim.x) s[t] = key[base + t];
    __syncthreads();
    for (long k = k0; k <= k1; k <<= 1)
        for (int j = (int)((k >> 1) < SRK_SORT_CHUNK ? (k >> 1) : SRK_SORT_CHUNK / 2); j > 0; j >>= 1) {
            for (int t = threadIdx.x; t < SRK_SORT_CHUNK; t += blockDim.x) {
                int l = t ^ j;
                if (l <= t) continue;
                srk_key a = s[t], b = s[l];
                if ((a > b) == (((base + t) & k) == 0)) {
                    s[t] = b;
                    s[l] = a;
                }
            }
            __syncthreads();
        }
    for (int t = threadIdx.x; t < SRK_SORT_CHUNK; t += blockDim.x) key[base + t] = s[t];
}
/* positions of a row whose gradients a thread loads before adding them: a frequent token (real
 * text: a few percent of a batch, thousands of positions) is one chain of adds, and with one load
 * in flight at a time its latency, not bandwidth, would set the kernel's time */
enum { SRK_EMB_BATCH = 16 };
template <class TD, class TG>
__global__ void emb_rows_kernel(TD *dw, const TG *dout, const srk_key *key, long N, int D)
{
    // dw[row] (D) += dout[p] for the positions p of each row, ascending: one thread per (first key of
    // a row, column); the other keys' threads leave at once. SRK_EMB_BATCH loads, then their adds
    // in order: the bits of one add after another
    for (long e = (long)blockIdx.x * blockDim.x + threadIdx.x; e < N * D; e += (long)gridDim.x * blockDim.x) {
        long s = e / D;
        int j = (int)(e - s * D);
        srk_key k = key[s];
        if (k == SRK_NO_KEY || (s > 0 && key[s - 1] >> 32 == k >> 32)) continue;
        long row = (long)(k >> 32);
        float acc = srk_ld(dw[row * D + j]);
        for (long t = s;; t += SRK_EMB_BATCH) {
            float v[SRK_EMB_BATCH];
            int n = 0; /* the keys are sorted: this row's are a prefix of the batch */
            SRK_UNROLL
            for (int u = 0; u < SRK_EMB_BATCH; u++) {
                srk_key ku = t + u < N ? key[t + u] : SRK_NO_KEY;
                bool mine = ku >> 32 == k >> 32;
                v[u] = mine ? srk_ld(dout[(long)(ku & 0xffffffffull) * D + j]) : 0.0f;
                n += mine;
            }
            SRK_UNROLL
            for (int u = 0; u < SRK_EMB_BATCH; u++)
                if (u < n) acc += v[u];
            if (n < SRK_EMB_BATCH) break;
        }
        dw[row * D + j] = srk_to<TD>(acc);
    }
}
/* dw (rows, D) += dout (N, D) scattered to rows idx - lo (those in [0, Vl); Vl < 0: every one) */
template <class TD, class TG>
void srk_embedding_bwd_rows(TD *dw, const TG *dout, const int32_t *idx, long N, long D, long lo, long Vl)
{
    if (!dw || N <= 0 || D <= 0) return;
    long P = SRK_SORT_CHUNK;
    while (P < N) P <<= 1;
    srk_key *key = (srk_key *)srk_scratch(SRK_SCR_EMB_KEYS, sizeof(srk_key) * (size_t)P);
    if (!key) return;
    SR_LAUNCH(emb_keys_kernel, srk_blocks(P, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream, key, idx, N, P,
              lo, Vl);
    /* each chunk sorted alone (k up to the chunk), then each larger k: its steps across chunks one
     * launch each, the rest of its steps within the chunks in one */
    unsigned nchunk = (unsigned)(P / SRK_SORT_CHUNK);
    SR_LAUNCH(bitonic_chunk_kernel, nchunk, SRK_SORT_CHUNK / 2, 0, srk_ctx.stream, key, 2L, (long)SRK_SORT_CHUNK);
    for (long k = 2L * SRK_SORT_CHUNK; k <= P; k <<= 1) {
        for (long j = k >> 1; j >= SRK_SORT_CHUNK; j >>= 1)
            SR_LAUNCH(bitonic_step_kernel, srk_blocks(P, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream, key, P,
                      k, j);
        SR_LAUNCH(bitonic_chunk_kernel, nchunk, SRK_SORT_CHUNK / 2, 0, srk_ctx.stream, key, k, k);
    }
    SR_LAUNCH((emb_rows_kernel<TD, TG>), srk_blocks(N * D, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream, dw,
              dout, key, N, (int)D);
}
template <class TO, class TW>
void srk_embedding_fwd(TO *out, const TW *w, const int32_t *idx, long N, long D)
{
    if (N <= 0 || D <= 0) return;
    SR_LAUNCH((embedding_fwd_kernel<TO, TW>), srk_blocks(N * D, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream,
              out, w, idx, N, (int)D);
}
template <class TD, class TG>
void srk_embedding_bwd(TD *dw, const TG *dout, const int32_t *idx, long N, long D)
{
    // dw[idx[i]] (D) += dout[i] (N, D), in position order
    srk_embedding_bwd_rows(dw, dout, idx, N, D, 0, -1);
}

static __global__ void arange_kernel(int32_t *out, long n)
{
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        out[i] = (int32_t)i;
}
static inline void srk_arange_fwd(int32_t *out, long n)
{
    if (n <= 0) return;
    SR_LAUNCH(arange_kernel, srk_blocks(n, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream, out, n);
}

/* ---- slice ------------------------------------------------------------------------------------- */
template <int BWD, class TO, class TX>
__global__ void slice_kernel(TO *out, const TX *x, long M, int K, int n, int part)
{
    // fwd: out (M, n) = x (M, K*n) columns [part*n, (part+1)*n); bwd: x is dout (M, n), out is dx (M, K*n)
    for (long e = (long)blockIdx.x * blockDim.x + threadIdx.x; e < M * n; e += (long)gridDim.x * blockDim.x) {
        long r = e / n;
        int j = (int)(e - r * n);
        long wide = r * (long)K * n + (long)part * n + j;
        if (BWD) srk_acc(&out[wide], srk_ld(x[e]));
        else out[e] = srk_to<TO>(srk_ld(x[wide]));
    }
}
/* slice_kernel with n % 8 == 0: eight elements of one row a thread (one
 * division per eight), 16-byte accesses */
template <int BWD, class TO, class TX>
__global__ void slice8_kernel(TO *__restrict__ out, const TX *__restrict__ x, long M, int K, int n, int part)
{
    int n8 = n / 8;
    for (long e8 = (long)blockIdx.x * blockDim.x + threadIdx.x; e8 < M * n8; e8 += (long)gridDim.x * blockDim.x) {
        long r = e8 / n8;
        long j = (e8 - r * n8) * 8;
        long wide = r * (long)K * n + (long)part * n + j, e = r * n + j;
        float v[8], o[8];
        if (BWD) {
            srk_ld8(x + e, v);
            srk_ld8(out + wide, o);
            SRK_UNROLL
            for (int k = 0; k < 8; k++) o[k] = o[k] + v[k];
            srk_st8(out + wide, o);
        } else {
            srk_ld8(x + wide, v);
            srk_st8(out + e, v);
        }
    }
}
/* either slice kernel: the 16-byte form when rows split into eights and both
 * tensors are aligned */
template <int BWD, class TO, class TX>
static inline void srk_slice_run(TO *out, const TX *x, long M, long K, long n, long i)
{
    if (srk_by8(n, out, x))
        SR_LAUNCH((slice8_kernel<BWD, TO, TX>), srk_blocks(M * n / 8, SRK_EW_THREADS), SRK_EW_THREADS, 0,
                  srk_ctx.stream, out, x, M, (int)K, (int)n, (int)i);
    else
        SR_LAUNCH((slice_kernel<BWD, TO, TX>), srk_blocks(M * n, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream,
                  out, x, M, (int)K, (int)n, (int)i);
}
template <class TO, class TX>
void srk_slice_fwd(TO *out, const TX *x, long M, long K, long n, long i)
{
    if (M > 0 && n > 0) srk_slice_run<0>(out, x, M, K, n, i);
}
template <class TD, class TG>
void srk_slice_bwd(TD *dx, const TG *dout, long M, long K, long n, long i)
{
    if (dx && M > 0 && n > 0) srk_slice_run<1>(dx, dout, M, K, n, i);
}

/* ---- transpose: x viewed as (outer, A, mid, Bd, inner) -> (outer, Bd, mid, A, inner) ------------ */
struct srk_tview {
    long outer, A, mid, Bd, inner;
};
static inline int srk_transpose_view(int ndim, const long *dims, int d1, int d2, srk_tview *v)
{
    if (ndim <= 0 || ndim > 6 || d1 < 0 || d2 < 0 || d1 >= ndim || d2 >= ndim) return 0;
    int lo = d1 < d2 ? d1 : d2, hi = d1 < d2 ? d2 : d1;
    v->outer = v->mid = v->inner = 1;
    for (int d = 0; d < lo; d++) v->outer *= dims[d];
    for (int d = lo + 1; d < hi; d++) v->mid *= dims[d];
    for (int d = hi + 1; d < ndim; d++) v->inner *= dims[d];
    v->A = lo == hi ? 1 : dims[lo];
    v->Bd = dims[hi];
    return 1;
}
/* fwd: out[transposed index] = x[e]; bwd: dx[e] += dout[transposed index]; e runs over x's elements */
template <int BWD, class TO, class TX>
__global__ void transpose_kernel(TO *out, const TX *x, srk_tview v)
{
    long n = v.outer * v.A * v.mid * v.Bd * v.inner;
    for (long e = (long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (long)gridDim.x * blockDim.x) {
        long i = e % v.inner, t = e / v.inner;
        long bb = t % v.Bd;
        t /= v.Bd;
        long m = t % v.mid;
        t /= v.mid;
        long a = t % v.A, o = t / v.A;
        long te = (((o * v.Bd + bb) * v.mid + m) * v.A + a) * v.inner + i;
        if (BWD) srk_acc(&out[e], srk_ld(x[te]));
        else out[te] = srk_to<TO>(srk_ld(x[e]));
    }
}
template <class TO, class TX>
void srk_transpose_fwd(TO *out, const TX *x, int ndim, srk_dims6 dims, int d1, int d2)
{
    srk_tview v;
    if (!srk_transpose_view(ndim, dims.d, d1, d2, &v)) return;
    long n = v.outer * v.A * v.mid * v.Bd * v.inner;
    if (n <= 0) return;
    SR_LAUNCH((transpose_kernel<0, TO, TX>), srk_blocks(n, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream, out,
              x, v);
}
template <class TD, class TG>
void srk_transpose_bwd(TD *dx, const TG *dout, int ndim, srk_dims6 dims, int d1, int d2)
{
    srk_tview v;
    if (!dx || !srk_transpose_view(ndim, dims.d, d1, d2, &v)) return;
    long n = v.outer * v.A * v.mid * v.Bd * v.inner;
    if (n <= 0) return;
    SR_LAUNCH((transpose_kernel<1, TD, TG>), srk_blocks(n, SRK_EW_THREADS), SRK_EW_THREADS, 0, srk_ctx.stream, dx,
              dout, v);
}

#endif /* SRK_POINTWISE_CUH */
