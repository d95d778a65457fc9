/* kernels.c: the host (CPU) kernels of libshardrt, in forward/backward pairs.
 *
 * Needs: float32 row-major contiguous tensors, shapes as documented in
 * shardrt.h. Guarantees: results match PyTorch float32 to round-off (the
 * reference tests compare at 1e-5 relative); every backward ACCUMULATES (+=)
 * into its gradient outputs and skips a gradient whose pointer is NULL; the
 * reductions written here (column sums, norms, losses, sum of squares) add in
 * an order fixed by the shape, never by the thread count, so results do not
 * change with OMP_NUM_THREADS.
 *
 * Matmuls go through OpenBLAS; everything else is plain C, parallelized with
 * OpenMP over rows (or heads, or column blocks) where the work pays for the
 * fork, and vectorized with `omp simd`. Without -fopenmp the pragmas vanish
 * and the same code runs serially.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "shardrt.h"

/* OMP(parallel for ...) expands to the pragma only under -fopenmp, so a
 * serial build does not trip -Wunknown-pragmas. */
#define PRAGMA_(x) _Pragma(#x)
#ifdef _OPENMP
#define OMP(x) PRAGMA_(omp x)
#else
#define OMP(x)
#endif

/* `omp simd` asks for vectorization; where it cannot happen (sanitizer
 * builds, targets without the instructions) the code is still correct, so
 * clang's "loop not vectorized" must not fail a -Werror build. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

/* Below this many elements a parallel region costs more than it saves. */
enum { PAR_MIN = 1 << 14 };

/* exp(x) for the hot loops (softmax, cross-entropy, attention, activations).
 * glibc's expf (and tanhf, 8x slower) are calls that block vectorization;
 * this is straight-line code that `omp simd` vectorizes. exp(x) = 2^n e^r,
 * n = round(x log2 e), r = x - n ln2 (Cody-Waite split), e^r by the Cephes
 * expf polynomial: within 1.5 ulp of exp over [-87, 88]. x < -87 gives 0 (no
 * slow denormals), x > 88 gives exp(88) ~ 1.7e38 instead of overflowing, NaN
 * stays NaN. The range selects are integer masks on the bits: float compares
 * may trap, so under the default -ftrapping-math gcc would not if-convert
 * them and the loop would stay scalar. */
static inline float fexp(float x)
{
    uint32_t xb;
    memcpy(&xb, &x, sizeof xb);
    uint32_t hi = 0u - (uint32_t)((int32_t)xb > 0x42B00000);   // x > 88, +inf, +NaN
    uint32_t lo = 0u - (uint32_t)(xb > 0xC2AE0000u);           // x < -87, -inf, -NaN
    uint32_t nan = 0u - (uint32_t)((xb & 0x7FFFFFFFu) > 0x7F800000u);
    uint32_t cb = (xb & ~(hi | lo)) | (0x42B00000u & hi) | (0xC2AE0000u & lo);
    float xc;
    memcpy(&xc, &cb, sizeof xc); // x clamped to [-87, 88]
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; // round to nearest
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float q = 1.9875691500e-4f;
    q = q * r + 1.3981999507e-3f;
    q = q * r + 8.3334519073e-3f;
    q = q * r + 4.1665795894e-2f;
    q = q * r + 1.6666665459e-1f;
    q = q * r + 5.0000001201e-1f;
    float y = q * r * r + r + 1.0f;
    uint32_t sb = (uint32_t)((int32_t)n + 127) << 23; // 2^n, n in [-126, 127]
    float sc;
    memcpy(&sc, &sb, sizeof sc);
    y *= sc;
    uint32_t yb;
    memcpy(&yb, &y, sizeof yb);
    yb = (yb & ~(lo | nan)) | (xb & nan);
    memcpy(&y, &yb, sizeof y);
    return y;
}

/* max of x[0..n), n >= 1. Compared as integers: the float bits mapped to
 * an order-preserving int32 (negative floats get their magnitude bits
 * flipped). A float max reduction does not vectorize without fast-math (NaN
 * rules); an integer one does, with both gcc and clang. A NaN in the row
 * comes out as the max or is caught by the exp-sum that follows. */
static float row_max(const float *x, int n)
{
    int32_t mk = INT32_MIN;
    OMP(simd reduction(max:mk))
    for (int j = 0; j < n; j++) {
        uint32_t u;
        memcpy(&u, &x[j], sizeof u);
        int32_t k = (int32_t)(u ^ ((0u - (u >> 31)) & 0x7FFFFFFFu));
        mk = k > mk ? k : mk;
    }
    uint32_t u = (uint32_t)mk;
    u ^= (0u - (u >> 31)) & 0x7FFFFFFFu;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ------------------------------------------------------------------------ */
/* Deterministic column sums                                                 */

/* db[j] += s * sum_r x[r,j] * (y ? y[r,j] : 1) for x, y (rows, nb).
 * Narrow rows are split into a fixed number of row chunks (partial sums kept
 * per chunk, added in chunk order); wide rows into blocks of columns, each
 * summed over all rows by one thread. Either way the order of additions
 * depends only on the shape, never on the thread count. Sums are in double. */
enum { CS_NARROW = 256, CS_CHUNKS = 16, CS_BLOCK = 64 };

static void colsum_acc(float *db, const float *x, const float *y, float s,
                       long rows, long nb)
{
    if (rows <= 0 || nb <= 0) return;
    if (nb <= CS_NARROW) {
        double part[CS_CHUNKS][CS_NARROW]; // (chunks, nb)
        long nc = rows < CS_CHUNKS ? rows : CS_CHUNKS;
        OMP(parallel for if(rows * nb >= PAR_MIN))
        for (long c = 0; c < nc; c++) {
            double *acc = part[c];
            long r0 = rows * c / nc, r1 = rows * (c + 1) / nc;
            for (long j = 0; j < nb; j++) acc[j] = 0.0;
            for (long r = r0; r < r1; r++) {
                const float *xr = x + r * nb;
                if (y) {
                    const float *yr = y + r * nb;
                    OMP(simd)
                    for (long j = 0; j < nb; j++) acc[j] += (double)xr[j] * yr[j];
                } else {
                    OMP(simd)
                    for (long j = 0; j < nb; j++) acc[j] += xr[j];
                }
            }
        }
        for (long j = 0; j < nb; j++) {
            double t = 0.0;
            for (long c = 0; c < nc; c++) t += part[c][j];
            db[j] += (float)(s * t);
        }
        return;
    }
    long nblk = (nb + CS_BLOCK - 1) / CS_BLOCK;
    OMP(parallel for if(rows * nb >= PAR_MIN))
    for (long bk = 0; bk < nblk; bk++) {
        double acc[CS_BLOCK] = {0};
        long j0 = bk * CS_BLOCK, j1 = j0 + CS_BLOCK < nb ? j0 + CS_BLOCK : nb;
        for (long r = 0; r < rows; r++) {
            const float *xr = x + r * nb;
            if (y) {
                const float *yr = y + r * nb;
                OMP(simd)
                for (long j = j0; j < j1; j++) acc[j - j0] += (double)xr[j] * yr[j];
            } else {
                OMP(simd)
                for (long j = j0; j < j1; j++) acc[j - j0] += xr[j];
            }
        }
        for (long j = j0; j < j1; j++) db[j] += (float)(s * acc[j - j0]);
    }
}

/* ------------------------------------------------------------------------ */
/* Matmul (OpenBLAS)                                                         */

/* OpenBLAS's pthreads busy-wait for a while after every call and steal the
 * cores from the OpenMP loops that follow (measured on 2 cores: a layernorm
 * 20x slower right after a matmul). So under OpenMP every BLAS-using kernel
 * first makes sure OpenBLAS runs on the calling thread only, and OpenMP owns
 * all the parallelism: gemm() below cuts a matmul into one slab per thread,
 * and attention calls sgemm per (batch, head) inside its parallel loop. The
 * check is a global read, and re-pins if anything raised the count since. */
static void blas_single(void)
{
#ifdef _OPENMP
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
#endif
}

/* C (M,N) = alpha op(A) op(B) + beta C, row-major, with the output cut into
 * slabs of rows (or of columns when it is wider than tall), one
 * single-threaded sgemm per slab. Every element is still one full dot product
 * over K inside OpenBLAS. */
static void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
#ifdef _OPENMP
    blas_single();
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (nt > 1 && (double)M * N * K >= (double)(1 << 18)) {
        int by_rows = M >= N, dim = by_rows ? M : N;
        int chunk = ((dim + nt - 1) / nt + 15) / 16 * 16; // slab edges on micro-kernel tiles
        int nchunks = (dim + chunk - 1) / chunk;
        OMP(parallel for num_threads(nchunks))
        for (int c = 0; c < nchunks; c++) {
            int i0 = c * chunk, len = dim - i0 < chunk ? dim - i0 : chunk;
            if (by_rows) {
                const float *Ai = ta == CblasNoTrans ? A + (size_t)i0 * lda : A + i0;
                cblas_sgemm(CblasRowMajor, ta, tb, len, N, K, alpha, Ai, lda, B, ldb, beta,
                            C + (size_t)i0 * ldc, ldc);
            } else {
                const float *Bj = tb == CblasNoTrans ? B + i0 : B + (size_t)i0 * ldb;
                cblas_sgemm(CblasRowMajor, ta, tb, M, len, K, alpha, A, lda, Bj, ldb, beta,
                            C + i0, ldc);
            }
        }
        return;
    }
#endif
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void sr_matmul_fwd(float *out, const float *a, const float *b, int M, int K, int N)
{
    // out (M,N), a (M,K), b (K,N)
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { sr_zero(out, (long)M * N); return; }
    gemm(CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a, K, b, N, 0.0f, out, N);
}

void sr_matmul_bwd(float *da, float *db, const float *dout, const float *a,
                   const float *b, int M, int K, int N)
{
    // dout (M,N); da (M,K) += dout @ b^T; db (K,N) += a^T @ dout
    if (M <= 0 || N <= 0 || K <= 0) return;
    if (da) gemm(CblasNoTrans, CblasTrans, M, K, N, 1.0f, dout, N, b, N, 1.0f, da, K);
    if (db) gemm(CblasTrans, CblasNoTrans, K, N, M, 1.0f, a, K, dout, N, 1.0f, db, N);
}

void sr_matmul_t_fwd(float *out, const float *a, const float *b, int M, int K, int N)
{
    // out (M,N), a (M,K), b (N,K): out = a @ b^T
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { sr_zero(out, (long)M * N); return; }
    gemm(CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, out, N);
}

void sr_matmul_t_bwd(float *da, float *db, const float *dout, const float *a,
                     const float *b, int M, int K, int N)
{
    // dout (M,N); da (M,K) += dout @ b; db (N,K) += dout^T @ a
    if (M <= 0 || N <= 0 || K <= 0) return;
    if (da) gemm(CblasNoTrans, CblasNoTrans, M, K, N, 1.0f, dout, N, b, K, 1.0f, da, K);
    if (db) gemm(CblasTrans, CblasNoTrans, N, K, M, 1.0f, dout, N, a, K, 1.0f, db, K);
}

/* ------------------------------------------------------------------------ */
/* Broadcasting elementwise ops: a (n) viewed as (n/nb, nb), b (nb)          */

void sr_add_fwd(float *out, const float *a, const float *b, long n, long nb)
{
    long rows = nb > 0 ? n / nb : 0;
    OMP(parallel for collapse(2) if(n >= PAR_MIN))
    for (long r = 0; r < rows; r++)
        for (long j = 0; j < nb; j++) out[r * nb + j] = a[r * nb + j] + b[j];
}

void sr_add_bwd(float *da, float *db, const float *dout, long n, long nb)
{
    if (da) {
        OMP(parallel for if(n >= PAR_MIN))
        for (long i = 0; i < n; i++) da[i] += dout[i];
    }
    if (db && nb > 0) colsum_acc(db, dout, NULL, 1.0f, n / nb, nb);
}

void sr_sub_fwd(float *out, const float *a, const float *b, long n, long nb)
{
    long rows = nb > 0 ? n / nb : 0;
    OMP(parallel for collapse(2) if(n >= PAR_MIN))
    for (long r = 0; r < rows; r++)
        for (long j = 0; j < nb; j++) out[r * nb + j] = a[r * nb + j] - b[j];
}

void sr_sub_bwd(float *da, float *db, const float *dout, long n, long nb)
{
    if (da) {
        OMP(parallel for if(n >= PAR_MIN))
        for (long i = 0; i < n; i++) da[i] += dout[i];
    }
    if (db && nb > 0) colsum_acc(db, dout, NULL, -1.0f, n / nb, nb);
}

void sr_mul_fwd(float *out, const float *a, const float *b, long n, long nb)
{
    long rows = nb > 0 ? n / nb : 0;
    OMP(parallel for collapse(2) if(n >= PAR_MIN))
    for (long r = 0; r < rows; r++)
        for (long j = 0; j < nb; j++) out[r * nb + j] = a[r * nb + j] * b[j];
}

void sr_mul_bwd(float *da, float *db, const float *dout, const float *a,
                const float *b, long n, long nb)
{
    long rows = nb > 0 ? n / nb : 0;
    if (da) {
        OMP(parallel for collapse(2) if(n >= PAR_MIN))
        for (long r = 0; r < rows; r++)
            for (long j = 0; j < nb; j++) da[r * nb + j] += dout[r * nb + j] * b[j];
    }
    if (db && nb > 0) colsum_acc(db, dout, a, 1.0f, rows, nb);
}

void sr_scale_fwd(float *out, const float *x, float s, long n)
{
    OMP(parallel for if(n >= PAR_MIN))
    for (long i = 0; i < n; i++) out[i] = x[i] * s;
}

void sr_scale_bwd(float *dx, const float *dout, float s, long n)
{
    if (!dx) return;
    OMP(parallel for if(n >= PAR_MIN))
    for (long i = 0; i < n; i++) dx[i] += dout[i] * s;
}

/* ------------------------------------------------------------------------ */
/* Embedding                                                                 */

void sr_embedding_fwd(float *out, const float *w, const int32_t *idx, int N, int D)
{
    // out (N,D), w (V,D), idx (N)
    OMP(parallel for if((long)N * D >= PAR_MIN))
    for (int i = 0; i < N; i++)
        memcpy(out + (size_t)i * D, w + (size_t)idx[i] * D, (size_t)D * sizeof(float));
}

void sr_embedding_bwd(float *dw, const float *dout, const int32_t *idx, int N, int D)
{
    // dw (V,D) += scatter of dout (N,D) by idx (N). Repeated indices would
    // race under a row split, so threads own blocks of columns instead.
    if (!dw || D <= 0) return;
    long nblk = ((long)D + CS_BLOCK - 1) / CS_BLOCK;
    OMP(parallel for if((long)N * D >= PAR_MIN))
    for (long bk = 0; bk < nblk; bk++) {
        long j0 = bk * CS_BLOCK, j1 = j0 + CS_BLOCK < D ? j0 + CS_BLOCK : D;
        for (int i = 0; i < N; i++) {
            float *dwr = dw + (size_t)idx[i] * D;
            const float *dr = dout + (size_t)i * D;
            OMP(simd)
            for (long j = j0; j < j1; j++) dwr[j] += dr[j];
        }
    }
}

void sr_arange_fwd(int32_t *out, int n)
{
    // out (n) = 0, 1, ..., n-1
    for (int i = 0; i < n; i++) out[i] = i;
}

/* ------------------------------------------------------------------------ */
/* LayerNorm and RMSNorm                                                     */

/* dw[j] += sum_r dout[r,j] * xhat[r,j], db[j] += sum_r dout[r,j] with
 * xhat = (x - mean) * rstd (mean NULL: xhat = x * rstd, for rmsnorm).
 * Same fixed-order strategy as colsum_acc. */
static void norm_param_grads(float *dw, float *db, const float *dout, const float *x,
                             const float *mean, const float *rstd, long N, long C)
{
    if ((!dw && !db) || N <= 0 || C <= 0) return;
    if (C <= CS_NARROW) {
        double pw[CS_CHUNKS][CS_NARROW], pb[CS_CHUNKS][CS_NARROW]; // (chunks, C)
        long nc = N < CS_CHUNKS ? N : CS_CHUNKS;
        OMP(parallel for if(N * C >= PAR_MIN))
        for (long c = 0; c < nc; c++) {
            long r0 = N * c / nc, r1 = N * (c + 1) / nc;
            for (long j = 0; j < C; j++) pw[c][j] = pb[c][j] = 0.0;
            for (long r = r0; r < r1; r++) {
                const float *xr = x + r * C, *dr = dout + r * C;
                float m = mean ? mean[r] : 0.0f, rs = rstd[r];
                OMP(simd)
                for (long j = 0; j < C; j++) {
                    pw[c][j] += (double)dr[j] * ((xr[j] - m) * rs);
                    pb[c][j] += dr[j];
                }
            }
        }
        for (long j = 0; j < C; j++) {
            double tw = 0.0, tb = 0.0;
            for (long c = 0; c < nc; c++) { tw += pw[c][j]; tb += pb[c][j]; }
            if (dw) dw[j] += (float)tw;
            if (db) db[j] += (float)tb;
        }
        return;
    }
    long nblk = (C + CS_BLOCK - 1) / CS_BLOCK;
    OMP(parallel for if(N * C >= PAR_MIN))
    for (long bk = 0; bk < nblk; bk++) {
        double aw[CS_BLOCK] = {0}, ab[CS_BLOCK] = {0};
        long j0 = bk * CS_BLOCK, j1 = j0 + CS_BLOCK < C ? j0 + CS_BLOCK : C;
        for (long r = 0; r < N; r++) {
            const float *xr = x + r * C, *dr = dout + r * C;
            float m = mean ? mean[r] : 0.0f, rs = rstd[r];
            OMP(simd)
            for (long j = j0; j < j1; j++) {
                aw[j - j0] += (double)dr[j] * ((xr[j] - m) * rs);
                ab[j - j0] += dr[j];
            }
        }
        for (long j = j0; j < j1; j++) {
            if (dw) dw[j] += (float)aw[j - j0];
            if (db) db[j] += (float)ab[j - j0];
        }
    }
}

void sr_layernorm_fwd(float *out, float *mean, float *rstd, const float *x,
                      const float *w, const float *b, int N, int C, float eps)
{
    // out (N,C), mean (N), rstd (N), x (N,C), w (C), b (C)
    // Biased variance, eps inside the sqrt: torch.nn.LayerNorm. Two passes in
    // double so a large mean does not cancel the variance away.
    OMP(parallel for if((long)N * C >= PAR_MIN))
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * C;
        float *oi = out + (size_t)i * C;
        double s = 0.0;
        OMP(simd reduction(+:s))
        for (int j = 0; j < C; j++) s += xi[j];
        double m = s / C;
        double var = 0.0;
        OMP(simd reduction(+:var))
        for (int j = 0; j < C; j++) {
            double d = xi[j] - m;
            var += d * d;
        }
        var /= C;
        float mf = (float)m, rs = (float)(1.0 / sqrt(var + (double)eps));
        OMP(simd)
        for (int j = 0; j < C; j++) oi[j] = (xi[j] - mf) * rs * w[j] + b[j];
        if (mean) mean[i] = mf;
        if (rstd) rstd[i] = rs;
    }
}

void sr_layernorm_bwd(float *dx, float *dw, float *db, const float *dout,
                      const float *x, const float *w, const float *mean,
                      const float *rstd, int N, int C)
{
    // dout (N,C), x (N,C), w (C), mean (N), rstd (N) -> dx (N,C), dw (C), db (C)
    if (dx) {
        OMP(parallel for if((long)N * C >= PAR_MIN))
        for (int i = 0; i < N; i++) {
            const float *xi = x + (size_t)i * C, *gi = dout + (size_t)i * C;
            float *dxi = dx + (size_t)i * C;
            float m = mean[i], rs = rstd[i];
            // dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm))
            double sd = 0.0, sdn = 0.0;
            OMP(simd reduction(+:sd, sdn))
            for (int j = 0; j < C; j++) {
                float norm = (xi[j] - m) * rs, dnorm = gi[j] * w[j];
                sd += dnorm;
                sdn += (double)dnorm * norm;
            }
            float md = (float)(sd / C), mdn = (float)(sdn / C);
            OMP(simd)
            for (int j = 0; j < C; j++) {
                float norm = (xi[j] - m) * rs, dnorm = gi[j] * w[j];
                dxi[j] += (dnorm - md - norm * mdn) * rs;
            }
        }
    }
    norm_param_grads(dw, db, dout, x, mean, rstd, N, C);
}

void sr_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *w,
                    int N, int C, float eps)
{
    // out (N,C) = x * rsqrt(mean(x^2) + eps) * w ; rstd (N)
    OMP(parallel for if((long)N * C >= PAR_MIN))
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * C;
        float *oi = out + (size_t)i * C;
        double ss = 0.0;
        OMP(simd reduction(+:ss))
        for (int j = 0; j < C; j++) ss += (double)xi[j] * xi[j];
        float rs = (float)(1.0 / sqrt(ss / C + (double)eps));
        OMP(simd)
        for (int j = 0; j < C; j++) oi[j] = xi[j] * rs * w[j];
        if (rstd) rstd[i] = rs;
    }
}

void sr_rmsnorm_bwd(float *dx, float *dw, const float *dout, const float *x,
                    const float *w, const float *rstd, int N, int C)
{
    // dx = rstd * (dout*w - x * rstd^2 * mean(dout*w*x)) ; dw += sum dout * x * rstd
    if (dx) {
        OMP(parallel for if((long)N * C >= PAR_MIN))
        for (int i = 0; i < N; i++) {
            const float *xi = x + (size_t)i * C, *gi = dout + (size_t)i * C;
            float *dxi = dx + (size_t)i * C;
            float rs = rstd[i];
            double dot = 0.0;
            OMP(simd reduction(+:dot))
            for (int j = 0; j < C; j++) dot += (double)gi[j] * w[j] * xi[j];
            float c = (float)((double)rs * rs * dot / C);
            OMP(simd)
            for (int j = 0; j < C; j++) dxi[j] += rs * (gi[j] * w[j] - xi[j] * c);
        }
    }
    norm_param_grads(dw, NULL, dout, x, NULL, rstd, N, C);
}

/* ------------------------------------------------------------------------ */
/* Pointwise activations                                                     */

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define INV_SQRT2 0.70710678118654752f
#define INV_SQRT2PI 0.39894228040143268f

/* 0.5 (1 + tanh(u)) = sigmoid(2u): the tanh-GELU is x * sigmoid(2u) with
 * u = sqrt(2/pi) (x + 0.044715 x^3). Same function as torch's
 * gelu(approximate='tanh'), through exp instead of the slow tanhf, and
 * without the cancellation of 1 + tanh(u) at very negative x. */
void sr_gelu_fwd(float *out, const float *x, long n)
{
    OMP(parallel for simd if(n >= PAR_MIN))
    for (long i = 0; i < n; i++) {
        float xi = x[i];
        float u = GELU_SCALE * (xi + 0.044715f * xi * xi * xi);
        out[i] = xi / (1.0f + fexp(-2.0f * u));
    }
}

void sr_gelu_bwd(float *dx, const float *dout, const float *x, long n)
{
    // d/dx = 0.5 (1 + tanh u) + 0.5 x sech^2(u) u'  with  0.5 (1 + tanh u) = s,
    // sech^2 u = 4 s (1 - s), s = sigmoid(2u)
    if (!dx) return;
    OMP(parallel for simd if(n >= PAR_MIN))
    for (long i = 0; i < n; i++) {
        float xi = x[i];
        float u = GELU_SCALE * (xi + 0.044715f * xi * xi * xi);
        float s = 1.0f / (1.0f + fexp(-2.0f * u));
        float du = GELU_SCALE * (1.0f + 3.0f * 0.044715f * xi * xi);
        dx[i] += (s + 2.0f * xi * s * (1.0f - s) * du) * dout[i];
    }
}

void sr_gelu_exact_fwd(float *out, const float *x, long n)
{
    // x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2)))
    OMP(parallel for if(n >= PAR_MIN))
    for (long i = 0; i < n; i++) out[i] = 0.5f * x[i] * (1.0f + erff(x[i] * INV_SQRT2));
}

void sr_gelu_exact_bwd(float *dx, const float *dout, const float *x, long n)
{
    // d/dx x Phi(x) = Phi(x) + x phi(x)
    if (!dx) return;
    OMP(parallel for if(n >= PAR_MIN))
    for (long i = 0; i < n; i++) {
        float xi = x[i];
        float cdf = 0.5f * (1.0f + erff(xi * INV_SQRT2));
        float pdf = INV_SQRT2PI * fexp(-0.5f * xi * xi);
        dx[i] += (cdf + xi * pdf) * dout[i];
    }
}

void sr_relu_fwd(float *out, const float *x, long n)
{
    OMP(parallel for simd if(n >= PAR_MIN))
    for (long i = 0; i < n; i++) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void sr_relu_bwd(float *dx, const float *dout, const float *x, long n)
{
    // gradient 0 at x == 0, as torch
    if (!dx) return;
    OMP(parallel for simd if(n >= PAR_MIN))
    for (long i = 0; i < n; i++) {
        float d = dout[i];
        dx[i] += x[i] > 0.0f ? d : 0.0f;
    }
}

void sr_silu_fwd(float *out, const float *x, long n)
{
    // x * sigmoid(x)
    OMP(parallel for simd if(n >= PAR_MIN))
    for (long i = 0; i < n; i++) out[i] = x[i] / (1.0f + fexp(-x[i]));
}

void sr_silu_bwd(float *dx, const float *dout, const float *x, long n)
{
    // d/dx x s(x) = s (1 + x (1 - s))
    if (!dx) return;
    OMP(parallel for simd if(n >= PAR_MIN))
    for (long i = 0; i < n; i++) {
        float s = 1.0f / (1.0f + fexp(-x[i]));
        dx[i] += dout[i] * s * (1.0f + x[i] * (1.0f - s));
    }
}

/* ------------------------------------------------------------------------ */
/* Rotary position embedding                                                 */

/* The nb rows at position t (rows t, t + T, ...): each pair (i, i + hd/2)
 * of every head rotated by sign * t * inv_freq[i]; acc adds into out (the
 * backward). The angles of a chunk of pairs are computed once per position
 * and used for every head of every row at that position. */
static void rope_position(float *out, const float *x, int t, int T, long nb, int C, int hd, const float *inv_freq,
                          float sign, int acc)
{
    enum { CHUNK = 32 };
    int half = hd / 2;
    for (int i0 = 0; i0 < half; i0 += CHUNK) {
        float cs[CHUNK], sn[CHUNK];
        int m = half - i0 < CHUNK ? half - i0 : CHUNK;
        for (int i = 0; i < m; i++) {
            float a = (float)t * inv_freq[i0 + i];
            cs[i] = cosf(a);
            sn[i] = sign * sinf(a);
        }
        for (long b = 0; b < nb; b++) {
            long row = (b * T + t) * (long)C;
            for (int h = 0; h < C; h += hd)
                for (int i = 0; i < m; i++) {
                    long j = row + h + i0 + i;
                    float u = x[j], v = x[j + half];
                    float ru = u * cs[i] - v * sn[i], rv = v * cs[i] + u * sn[i];
                    if (acc) {
                        out[j] += ru;
                        out[j + half] += rv;
                    } else {
                        out[j] = ru;
                        out[j + half] = rv;
                    }
                }
        }
    }
}

static void rope_rows(float *out, const float *x, long N, int T, int C, int n_head, float theta, float factor,
                      float low, float high, float orig, float sign, int acc)
{
    int hd = C / n_head;
    float inv_freq[SR_ROPE_MAX_HEAD / 2]; /* once per call; shardc checks hd */
    for (int i = 0; i < hd / 2; i++) inv_freq[i] = sr_rope_inv_freq(i, hd, theta, factor, low, high, orig);
    OMP(parallel for if(N * C >= PAR_MIN))
    for (int t = 0; t < T; t++) rope_position(out, x, t, T, N / T, C, hd, inv_freq, sign, acc);
}

void sr_rope_fwd(float *out, const float *x, long N, int T, int C, int n_head, float theta, float factor,
                 float low_freq_factor, float high_freq_factor, float original_max)
{
    rope_rows(out, x, N, T, C, n_head, theta, factor, low_freq_factor, high_freq_factor, original_max, 1.0f, 0);
}

void sr_rope_bwd(float *dx, const float *dout, long N, int T, int C, int n_head, float theta, float factor,
                 float low_freq_factor, float high_freq_factor, float original_max)
{
    // the rotation is orthogonal: its gradient is the rotation by -angle
    if (!dx) return;
    rope_rows(dx, dout, N, T, C, n_head, theta, factor, low_freq_factor, high_freq_factor, original_max, -1.0f, 1);
}

void sr_repeat_kv_fwd(float *out, const float *x, long N, int n_kv, int hd, int n_rep)
{
    long cin = (long)n_kv * hd, cout = cin * n_rep;
    OMP(parallel for if(N * cout >= PAR_MIN))
    for (long r = 0; r < N; r++)
        for (int g = 0; g < n_kv; g++)
            for (int k = 0; k < n_rep; k++)
                memcpy(out + r * cout + ((long)g * n_rep + k) * hd, x + r * cin + (long)g * hd,
                       sizeof(float) * (size_t)hd);
}

void sr_repeat_kv_bwd(float *dx, const float *dout, long N, int n_kv, int hd, int n_rep)
{
    if (!dx) return;
    long cin = (long)n_kv * hd, cout = cin * n_rep;
    OMP(parallel for if(N * cout >= PAR_MIN))
    for (long r = 0; r < N; r++)
        for (int g = 0; g < n_kv; g++)
            for (int i = 0; i < hd; i++) {
                const float *d = dout + r * cout + (long)g * n_rep * hd + i;
                float s = 0.0f;
                for (int k = 0; k < n_rep; k++) s += d[(long)k * hd];
                dx[r * cin + (long)g * hd + i] += s;
            }
}

/* ------------------------------------------------------------------------ */
/* Softmax                                                                   */

/* One row: y = exp(x - max) / sum. In place is fine (y == x). */
static void softmax_row(float *y, const float *x, int C)
{
    float mx = row_max(x, C);
    double s = 0.0;
    OMP(simd reduction(+:s))
    for (int j = 0; j < C; j++) {
        y[j] = fexp(x[j] - mx);
        s += y[j];
    }
    float inv = (float)(1.0 / s);
    OMP(simd)
    for (int j = 0; j < C; j++) y[j] *= inv;
}

void sr_softmax_fwd(float *out, const float *x, int N, int C)
{
    // out (N,C) = softmax(x) along C, max-subtracted
    OMP(parallel for if((long)N * C >= PAR_MIN))
    for (int i = 0; i < N; i++) softmax_row(out + (size_t)i * C, x + (size_t)i * C, C);
}

void sr_softmax_bwd(float *dx, const float *dout, const float *out, int N, int C)
{
    // dx += y * (dout - sum(dout * y)), y = softmax output
    if (!dx) return;
    OMP(parallel for if((long)N * C >= PAR_MIN))
    for (int i = 0; i < N; i++) {
        const float *gi = dout + (size_t)i * C, *yi = out + (size_t)i * C;
        float *dxi = dx + (size_t)i * C;
        double dot = 0.0;
        OMP(simd reduction(+:dot))
        for (int j = 0; j < C; j++) dot += (double)gi[j] * yi[j];
        float d = (float)dot;
        OMP(simd)
        for (int j = 0; j < C; j++) dxi[j] += yi[j] * (gi[j] - d);
    }
}

/* ------------------------------------------------------------------------ */
/* Causal self-attention, one (batch, head) pair per task                    */

static inline float dot_f(const float *a, const float *b, int n)
{
    float s = 0.0f;
    OMP(simd reduction(+:s))
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static inline void axpy_f(float *y, float a, const float *x, int n)
{
    OMP(simd)
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

/* Query rows per block. Rows r0..r1 of a causal head only see keys 0..r1, so
 * blocking skips most of the masked upper triangle while each block is still
 * one sgemm. Heads of at most ATT_ROWS_T positions go row by row: too small
 * for sgemm calls to pay (the row path is also the fallback when scratch
 * cannot be allocated). */
enum { ATT_TB = 64, ATT_ROWS_T = 16 };

/* One head, forward, with BLAS. qh, kh, vh, oh point at (b, 0, h*hd) with row
 * stride C; ah (T,T) saves the probabilities, or is NULL and the block
 * scratch scr (ATT_TB,T) holds them. */
static void attn_fwd_head(float *oh, float *ah, float *scr, const float *qh, const float *kh,
                          const float *vh, int T, int C, int L, int hd, float scale)
{
    for (int r0 = 0; r0 < T; r0 += ATT_TB) {
        int r1 = r0 + ATT_TB < T ? r0 + ATT_TB : T, nr = r1 - r0;
        float *pb = ah ? ah + (size_t)r0 * T : scr; // (nr, T) block of probabilities
        // scores[r0:r1, 0:r1] = scale * q k^T, then softmax over 0..t per row
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, r1, hd, scale,
                    qh + (size_t)r0 * L, L, kh, L, 0.0f, pb, T);
        for (int t = r0; t < r1; t++) {
            float *row = pb + (size_t)(t - r0) * T;
            softmax_row(row, row, t + 1);
            for (int t2 = t + 1; t2 < (ah ? T : r1); t2++) row[t2] = 0.0f; // masked
        }
        // out[r0:r1] = P[r0:r1, 0:r1] v[0:r1]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, hd, r1, 1.0f,
                    pb, T, vh, L, 0.0f, oh + (size_t)r0 * C, C);
    }
}

/* One head, forward, row by row without scratch: the path when the scratch
 * cannot be allocated. rowbuf (T) stands in for a NULL ah. */
static void attn_fwd_head_rows(float *oh, float *ah, float *rowbuf, const float *qh,
                               const float *kh, const float *vh, int T, int C, int L, int hd,
                               float scale)
{
    for (int t = 0; t < T; t++) {
        float *at = ah ? ah + (size_t)t * T : rowbuf;
        for (int t2 = 0; t2 <= t; t2++)
            at[t2] = dot_f(qh + (size_t)t * L, kh + (size_t)t2 * L, hd) * scale;
        softmax_row(at, at, t + 1);
        if (ah)
            for (int t2 = t + 1; t2 < T; t2++) at[t2] = 0.0f;
        float *ot = oh + (size_t)t * C;
        for (int i = 0; i < hd; i++) ot[i] = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) axpy_f(ot, at[t2], vh + (size_t)t2 * L, hd);
    }
}

/* q, k, v (and dq, dk, dv) rows L apart, out and dout rows C apart: L = C for
 * three tensors, 3C for q|k|v packed in one (sr_attention_qkv_fwd) */
static void attention_fwd(float *out, float *att, const float *q, const float *k, const float *v, int B, int T,
                          int C, int NH, int L)
{
    // q, k, v (B,T,L) head h in columns [h*hd, (h+1)*hd); out (B,T,C); att (B,NH,T,T)
    if (B <= 0 || T <= 0 || NH <= 0 || C / NH <= 0) return;
    int hd = C / NH;
    float scale = 1.0f / sqrtf((float)hd);
    blas_single();
    OMP(parallel if((long)B * NH * T * T * hd >= PAR_MIN))
    {
        int rows = T <= ATT_ROWS_T;
        float *scr = att || rows ? NULL : malloc((size_t)ATT_TB * T * sizeof(float)); // (ATT_TB, T)
        OMP(for collapse(2) schedule(static))
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                size_t off = (size_t)b * T * C + (size_t)h * hd;  // (b, 0, h*hd) of out
                size_t offi = (size_t)b * T * L + (size_t)h * hd; // ... of q, k, v
                float *ah = att ? att + ((size_t)b * NH + h) * T * T : NULL;
                if (!rows && (ah || scr)) {
                    attn_fwd_head(out + off, ah, scr, q + offi, k + offi, v + offi, T, C, L, hd, scale);
                } else {
                    float rowbuf[T];
                    attn_fwd_head_rows(out + off, ah, rowbuf, q + offi, k + offi, v + offi, T, C, L, hd, scale);
                }
            }
        }
        free(scr);
    }
}

void sr_attention_fwd(float *out, float *att, const float *q, const float *k,
                      const float *v, int B, int T, int C, int NH)
{
    attention_fwd(out, att, q, k, v, B, T, C, NH, C);
}

void sr_attention_qkv_fwd(float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    // qkv (B,T,3C) = q|k|v
    attention_fwd(out, att, qkv, qkv + C, qkv + 2 * (size_t)C, B, T, C, NH, 3 * C);
}

/* One head, backward, with BLAS; ds (ATT_TB,T) is scratch for a block of
 * d scores. P = ah. dv += P^T dout; dP = dout v^T;
 * dS = P * (dP - rowsum(P * dP)) * scale; dq += dS k; dk += dS^T q. */
static void attn_bwd_head(float *dqh, float *dkh, float *dvh, float *ds, const float *doh,
                          const float *qh, const float *kh, const float *vh, const float *ah,
                          int T, int C, int L, int hd, float scale)
{
    for (int r0 = 0; r0 < T; r0 += ATT_TB) {
        int r1 = r0 + ATT_TB < T ? r0 + ATT_TB : T, nr = r1 - r0;
        const float *pb = ah + (size_t)r0 * T; // (nr, T), zero right of the diagonal
        if (dvh)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hd, nr, 1.0f,
                        pb, T, doh + (size_t)r0 * C, C, 1.0f, dvh, L);
        if (!dqh && !dkh) continue;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, r1, hd, 1.0f,
                    doh + (size_t)r0 * C, C, vh, L, 0.0f, ds, T);
        for (int t = r0; t < r1; t++) {
            const float *prow = pb + (size_t)(t - r0) * T;
            float *drow = ds + (size_t)(t - r0) * T;
            double s = 0.0;
            OMP(simd reduction(+:s))
            for (int t2 = 0; t2 <= t; t2++) s += (double)prow[t2] * drow[t2];
            float sf = (float)s;
            OMP(simd)
            for (int t2 = 0; t2 <= t; t2++) drow[t2] = prow[t2] * (drow[t2] - sf) * scale;
            for (int t2 = t + 1; t2 < r1; t2++) drow[t2] = 0.0f; // masked
        }
        if (dqh)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, hd, r1, 1.0f,
                        ds, T, kh, L, 1.0f, dqh + (size_t)r0 * L, L);
        if (dkh)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hd, nr, 1.0f,
                        ds, T, qh + (size_t)r0 * L, L, 1.0f, dkh, L);
    }
}

/* One head, backward, row by row; datt (T) is the only scratch. */
static void attn_bwd_head_rows(float *dqh, float *dkh, float *dvh, float *datt,
                               const float *doh, const float *qh, const float *kh,
                               const float *vh, const float *ah, int T, int C, int L, int hd,
                               float scale)
{
    for (int t = 0; t < T; t++) {
        const float *at = ah + (size_t)t * T, *gt = doh + (size_t)t * C;
        if (dvh)
            for (int t2 = 0; t2 <= t; t2++) axpy_f(dvh + (size_t)t2 * L, at[t2], gt, hd);
        if (!dqh && !dkh) continue;
        double s = 0.0;
        for (int t2 = 0; t2 <= t; t2++) {
            datt[t2] = dot_f(gt, vh + (size_t)t2 * L, hd);
            s += (double)at[t2] * datt[t2];
        }
        float sf = (float)s;
        OMP(simd)
        for (int t2 = 0; t2 <= t; t2++) datt[t2] = at[t2] * (datt[t2] - sf) * scale;
        for (int t2 = 0; t2 <= t; t2++) {
            if (dqh) axpy_f(dqh + (size_t)t * L, datt[t2], kh + (size_t)t2 * L, hd);
            if (dkh) axpy_f(dkh + (size_t)t2 * L, datt[t2], qh + (size_t)t * L, hd);
        }
    }
}

static void attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                          const float *v, const float *att, int B, int T, int C, int NH, int L)
{
    // dout (B,T,C); q, k, v, dq, dk, dv (B,T,L); att (B,NH,T,T).
    // Each (b,h) task writes only its own head's columns: no races.
    if (B <= 0 || T <= 0 || NH <= 0 || C / NH <= 0) return;
    int hd = C / NH;
    float scale = 1.0f / sqrtf((float)hd);
    blas_single();
    OMP(parallel if((long)B * NH * T * T * hd >= PAR_MIN))
    {
        float *ds = T <= ATT_ROWS_T ? NULL : malloc((size_t)ATT_TB * T * sizeof(float)); // (ATT_TB, T)
        OMP(for collapse(2) schedule(static))
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                size_t off = (size_t)b * T * C + (size_t)h * hd, offi = (size_t)b * T * L + (size_t)h * hd;
                const float *ah = att + ((size_t)b * NH + h) * T * T;
                float *dqh = dq ? dq + offi : NULL, *dkh = dk ? dk + offi : NULL;
                float *dvh = dv ? dv + offi : NULL;
                if (ds) {
                    attn_bwd_head(dqh, dkh, dvh, ds, dout + off, q + offi, k + offi, v + offi, ah, T, C, L, hd,
                                  scale);
                } else {
                    float datt[T];
                    attn_bwd_head_rows(dqh, dkh, dvh, datt, dout + off, q + offi, k + offi, v + offi, ah, T, C, L,
                                       hd, scale);
                }
            }
        }
        free(ds);
    }
}

void sr_attention_bwd(float *dq, float *dk, float *dv, const float *dout,
                      const float *q, const float *k, const float *v,
                      const float *att, int B, int T, int C, int NH)
{
    attention_bwd(dq, dk, dv, dout, q, k, v, att, B, T, C, NH, C);
}

void sr_attention_qkv_bwd(float *dqkv, const float *dout, const float *qkv, const float *att, int B, int T, int C,
                          int NH)
{
    if (!dqkv) return;
    attention_bwd(dqkv, dqkv + C, dqkv + 2 * (size_t)C, dout, qkv, qkv + C, qkv + 2 * (size_t)C, att, B, T, C, NH,
                  3 * C);
}

/* ------------------------------------------------------------------------ */
/* Slice and transpose                                                       */

void sr_slice_fwd(float *out, const float *x, int M, int K, int n, int i)
{
    // x (M, K*n) -> out (M, n): columns [i*n, (i+1)*n)
    OMP(parallel for if((long)M * n >= PAR_MIN))
    for (int r = 0; r < M; r++)
        memcpy(out + (size_t)r * n, x + (size_t)r * K * n + (size_t)i * n,
               (size_t)n * sizeof(float));
}

void sr_slice_bwd(float *dx, const float *dout, int M, int K, int n, int i)
{
    // dx (M, K*n) columns [i*n, (i+1)*n) += dout (M, n)
    if (!dx) return;
    OMP(parallel for if((long)M * n >= PAR_MIN))
    for (int r = 0; r < M; r++) {
        float *dr = dx + (size_t)r * K * n + (size_t)i * n;
        const float *gr = dout + (size_t)r * n;
        for (int j = 0; j < n; j++) dr[j] += gr[j];
    }
}

/* View x as (outer, A, mid, Bd, inner) with A = dims[lo], Bd = dims[hi]; the
 * transpose is then (outer, Bd, mid, A, inner), whatever ndim is. */
static void transpose_view(int ndim, const long *dims, int d1, int d2, long *outer,
                           long *A, long *mid, long *Bd, long *inner)
{
    int lo = d1 < d2 ? d1 : d2, hi = d1 < d2 ? d2 : d1;
    *outer = *mid = *inner = 1;
    for (int d = 0; d < lo; d++) *outer *= dims[d];
    for (int d = lo + 1; d < hi; d++) *mid *= dims[d];
    for (int d = hi + 1; d < ndim; d++) *inner *= dims[d];
    *A = lo == hi ? 1 : dims[lo]; // d1 == d2: a plain copy
    *Bd = dims[hi];
}

void sr_transpose_fwd(float *out, const float *x, int ndim, const long *dims, int d1, int d2)
{
    // x dims (.., A@d1, .., Bd@d2, ..) -> out with those two dims swapped
    if (ndim <= 0 || d1 < 0 || d2 < 0 || d1 >= ndim || d2 >= ndim) return;
    long outer, A, mid, Bd, inner;
    transpose_view(ndim, dims, d1, d2, &outer, &A, &mid, &Bd, &inner);
    OMP(parallel for collapse(2) if(outer * A * mid * Bd * inner >= PAR_MIN))
    for (long o = 0; o < outer; o++)
        for (long bb = 0; bb < Bd; bb++)
            for (long m = 0; m < mid; m++)
                for (long a = 0; a < A; a++) {
                    float *dst = out + (((o * Bd + bb) * mid + m) * A + a) * inner;
                    const float *src = x + (((o * A + a) * mid + m) * Bd + bb) * inner;
                    for (long i = 0; i < inner; i++) dst[i] = src[i];
                }
}

void sr_transpose_bwd(float *dx, const float *dout, int ndim, const long *dims, int d1, int d2)
{
    // dims are x's dims; dout has d1 and d2 swapped; dx += dout transposed back
    if (!dx || ndim <= 0 || d1 < 0 || d2 < 0 || d1 >= ndim || d2 >= ndim) return;
    long outer, A, mid, Bd, inner;
    transpose_view(ndim, dims, d1, d2, &outer, &A, &mid, &Bd, &inner);
    OMP(parallel for collapse(2) if(outer * A * mid * Bd * inner >= PAR_MIN))
    for (long o = 0; o < outer; o++)
        for (long a = 0; a < A; a++)
            for (long m = 0; m < mid; m++)
                for (long bb = 0; bb < Bd; bb++) {
                    float *dst = dx + (((o * A + a) * mid + m) * Bd + bb) * inner;
                    const float *src = dout + (((o * Bd + bb) * mid + m) * A + a) * inner;
                    for (long i = 0; i < inner; i++) dst[i] += src[i];
                }
}

/* ------------------------------------------------------------------------ */
/* Counter-based random numbers and dropout                                  */


#define RNG_GOLDEN 0x9e3779b97f4a7c15ULL

/* key = mix64(mix64(seed + G) ^ stream); element counter c then gives
 * mix64(key + c * G): a splitmix64 sequence started at the key (mix64 is
 * sr_mix64, shardrt.h: only 64-bit multiplies and shifts, so the CUDA
 * kernels compute the same bits). */
static inline uint64_t rng_key(uint64_t seed, uint64_t stream)
{
    return sr_mix64(sr_mix64(seed + RNG_GOLDEN) ^ stream);
}

static inline float rng_at(uint64_t key, uint64_t counter)
{
    // top 24 bits: every value k / 2^24 exactly representable, never 1.0
    return (float)(sr_mix64(key + counter * RNG_GOLDEN) >> 40) * (1.0f / 16777216.0f);
}

float sr_rand_uniform(uint64_t seed, uint64_t stream, uint64_t counter)
{
    return rng_at(rng_key(seed, stream), counter);
}

void sr_dropout_fwd(float *out, const float *x, long n, float p, uint64_t seed,
                    uint64_t step, uint32_t op, uint64_t base)
{
    // out (n), x (n); element i kept iff U(seed, step<<20 ^ op, base+i) >= p
    if (!(p > 0.0f)) { sr_copy(out, x, n); return; }
    if (p >= 1.0f) { sr_zero(out, n); return; } // everything dropped
    uint64_t key = rng_key(seed, (step << 20) ^ (uint64_t)op);
    float scale = 1.0f / (1.0f - p);
    OMP(parallel for if(n >= PAR_MIN))
    for (long i = 0; i < n; i++)
        out[i] = rng_at(key, base + (uint64_t)i) >= p ? x[i] * scale : 0.0f;
}

void sr_dropout_bwd(float *dx, const float *dout, long n, float p, uint64_t seed,
                    uint64_t step, uint32_t op, uint64_t base)
{
    // recomputes the forward's mask from the same counters
    if (!dx) return;
    if (!(p > 0.0f)) {
        OMP(parallel for if(n >= PAR_MIN))
        for (long i = 0; i < n; i++) dx[i] += dout[i];
        return;
    }
    if (p >= 1.0f) return;
    uint64_t key = rng_key(seed, (step << 20) ^ (uint64_t)op);
    float scale = 1.0f / (1.0f - p);
    OMP(parallel for if(n >= PAR_MIN))
    for (long i = 0; i < n; i++)
        if (rng_at(key, base + (uint64_t)i) >= p) dx[i] += dout[i] * scale;
}

/* ------------------------------------------------------------------------ */
/* Fused softmax + cross-entropy                                             */

enum { CE_CHUNKS = 64 };

void sr_ce_grad_row(float *di, const float *li, float l, int hot, int live, int V, int ld, float sc, int acc)
{
    if (acc) {
        if (!live) return;
        OMP(simd)
        for (int j = 0; j < V; j++) di[j] += sc * fexp(li[j] - l);
    } else if (live) {
        OMP(simd)
        for (int j = 0; j < V; j++) di[j] = sc * fexp(li[j] - l);
    } else {
        memset(di, 0, sizeof(float) * (size_t)V);
    }
    if (live && hot >= 0 && hot < V) di[hot] -= sc; // the one-hot term
    if (!acc && ld > V) memset(di + V, 0, sizeof(float) * (size_t)(ld - V));
}
/* a row of logits (ld columns, V classes) overwritten by its gradient, target t: ignored outside [0, V) */
static void ce_grad_row(float *li, float l, int t, int V, int ld, float sc)
{
    sr_ce_grad_row(li, li, l, t, t >= 0 && t < V, V, ld, sc, 0);
}

/* the loss's rows: lse, and the mean loss returned; with grad, each row, still in cache,
 * overwritten by sr_crossentropy_bwd's gradient into zeros (sc = dloss / N) */
static float ce_rows(float *lse, float *logits, const int32_t *targets, int N, int V, int nv, int grad, float sc)
{
    // logits (N,V), targets (N) -> lse (N); returns mean_i (lse_i - logits[i, t_i]).
    // Only the first nv columns are classes (0: all); the others pad a
    // vocabulary and are left out. A target outside [0,nv) (e.g. -100,
    // torch's ignore_index) adds 0 loss and 0 gradient but still counts in N:
    // there is no status to report it.
    if (N <= 0) return 0.0f;
    int ld = V;
    V = sr_ce_classes(0, V, nv);
    double part[CE_CHUNKS];
    int nc = N < CE_CHUNKS ? N : CE_CHUNKS;
    OMP(parallel for if((long)N * V >= PAR_MIN))
    for (int c = 0; c < nc; c++) {
        int r0 = (int)((long)N * c / nc), r1 = (int)((long)N * (c + 1) / nc);
        double acc = 0.0;
        for (int i = r0; i < r1; i++) {
            float *li = logits + (size_t)i * ld;
            float mx = row_max(li, V);
            double s = 0.0;
            OMP(simd reduction(+:s))
            for (int j = 0; j < V; j++) s += fexp(li[j] - mx);
            double l = (double)mx + log(s);
            if (lse) lse[i] = (float)l;
            int t = targets[i];
            if (t >= 0 && t < V) acc += l - li[t];
            if (grad) ce_grad_row(li, (float)l, t, V, ld, sc);
        }
        part[c] = acc;
    }
    double tot = 0.0;
    for (int c = 0; c < nc; c++) tot += part[c];
    return (float)(tot / N);
}

float sr_crossentropy_fwd(float *lse, const float *logits, const int32_t *targets, int N, int V, int nv)
{
    return ce_rows(lse, (float *)logits, targets, N, V, nv, 0, 0.0f); /* read only */
}

void sr_crossentropy_bwd(float *dlogits, const float *logits, const float *lse,
                         const int32_t *targets, float dloss, int N, int V, int nv)
{
    // dlogits (N,V) += dloss/N * (exp(logits - lse) - onehot(targets)) in the
    // first nv columns (0: all); the padding columns get nothing
    if (!dlogits || N <= 0) return;
    int ld = V;
    V = sr_ce_classes(0, V, nv);
    float sc = dloss / (float)N;
    OMP(parallel for if((long)N * V >= PAR_MIN))
    for (int i = 0; i < N; i++) { // an ignored row (target outside [0, V)): no gradient
        int t = targets[i];
        sr_ce_grad_row(dlogits + (size_t)i * ld, logits + (size_t)i * ld, lse[i], t, t >= 0 && t < V, V, ld, sc, 1);
    }
}

float sr_crossentropy_fwd_bwd(float *lse, float *logits, const int32_t *targets, float dloss, int N, int V, int nv)
{
    // one pass over the logits from memory instead of two, no gradient buffer
    return ce_rows(lse, logits, targets, N, V, nv, 1, dloss / (float)N);
}

void sr_crossentropy_bwd_over(float *logits, const float *lse, const int32_t *targets, float dloss, int N, int V,
                              int nv)
{
    if (N <= 0) return;
    int ld = V;
    V = sr_ce_classes(0, V, nv);
    float sc = dloss / (float)N;
    OMP(parallel for if((long)N * V >= PAR_MIN))
    for (int i = 0; i < N; i++) ce_grad_row(logits + (size_t)i * ld, lse[i], targets[i], V, ld, sc);
}

/* ------------------------------------------------------------------------ */
/* Copy, zero, optimizer                                                     */

void sr_copy(float *out, const float *x, long n)
{
    if (n <= 0 || out == x) return;
    memmove(out, x, (size_t)n * sizeof(float));
}

void sr_zero(float *x, long n)
{
    if (n <= 0) return;
    memset(x, 0, (size_t)n * sizeof(float));
}

void sr_adamw_step(float *p, const float *g, float *m, float *v, long n, float lr,
                   float beta1, float beta2, float eps, float wd, long t)
{
    // p, g, m, v (n). torch.optim.AdamW (single-tensor path): decay first,
    // bias corrections and step size in double, denom = sqrt(v)/sqrt(bc2) + eps.
    if (t < 1) t = 1; // step counts from 1; t = 0 would divide by zero
    double bc1 = 1.0 - pow((double)beta1, (double)t);
    double bc2 = 1.0 - pow((double)beta2, (double)t);
    float step_size = (float)((double)lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    float decay = (float)(1.0 - (double)lr * (double)wd); // exactly 1 when wd == 0
    // not `omp simd`: sqrtf may set errno, so clang refuses to vectorize it
    OMP(parallel for if(n >= PAR_MIN))
    for (long i = 0; i < n; i++) {
        float gi = g[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float pi = p[i] * decay;
        p[i] = pi - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
    }
}

double sr_sumsq(const float *x, long n)
{
    // fixed chunking so the result does not depend on the thread count
    enum { SQ_CHUNKS = 64 };
    if (n <= 0) return 0.0;
    double part[SQ_CHUNKS];
    long nc = n < SQ_CHUNKS ? n : SQ_CHUNKS;
    OMP(parallel for if(n >= PAR_MIN))
    for (long c = 0; c < nc; c++) {
        long i0 = n * c / nc, i1 = n * (c + 1) / nc;
        double s = 0.0;
        OMP(simd reduction(+:s))
        for (long i = i0; i < i1; i++) s += (double)x[i] * x[i];
        part[c] = s;
    }
    double tot = 0.0;
    for (long c = 0; c < nc; c++) tot += part[c];
    return tot;
}
