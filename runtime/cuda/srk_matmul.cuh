/* srk_matmul.cuh: matmul wrappers in forward/backward pairs, over one GEMM
 * entry point (gemm.cu: cuBLASLt on the GPU, the host BLAS in emulation).
 *
 * Precision: in a bf16 program every GEMM runs on bf16 operands with float
 * accumulation (CUBLAS_COMPUTE_32F); float operands are converted first, the
 * parameters through the per-step bf16 shadow of the parameter arena. In an
 * fp32 program GEMMs are plain float (no TF32), for exact comparisons.
 * Epilogues: srk_matmul_bias_fwd and srk_matmul_bias_gelu_fwd fuse the bias
 * (and the tanh GELU, whose input is kept for the backward) into the GEMM;
 * the code generator emits them for matmul -> add(bias) [-> gelu] chains,
 * srk_matmul_gelu_bwd for a gelu -> matmul chain's backward pair, and
 * srk_matmul_bias_bwd (or srk_matmul_gelu_bwd's dbias) where a bias add's
 * backward comes right before its matmul's: the bias gradient is summed by
 * the weight gradient's GEMM as it reads dout.
 */
#ifndef SRK_MATMUL_CUH
#define SRK_MATMUL_CUH

#include "srk_pointwise.cuh"

enum { SRK_EPI_NONE = 0, SRK_EPI_BIAS = 1, SRK_EPI_BIAS_GELU = 2, SRK_EPI_DGELU = 3, SRK_EPI_BGRAD = 4 };
static inline int srk_epi_bias(int epi) { return epi == SRK_EPI_BIAS || epi == SRK_EPI_BIAS_GELU; }
/* epilogues with a bias vector: read, or (BGRAD) written */
static inline int srk_epi_bias_ptr(int epi) { return srk_epi_bias(epi) || epi == SRK_EPI_BGRAD; }
/* epilogues that may have no algorithm on a GPU: the caller then runs their work apart */
static inline int srk_epi_optional(int epi) { return epi == SRK_EPI_DGELU || epi == SRK_EPI_BGRAD; }
static inline int srk_epi_aux(int epi) { return epi == SRK_EPI_BIAS_GELU || epi == SRK_EPI_DGELU; }

/* C (M,N) = alpha op(A) op(B) + beta C, row-major, op = transpose when ta/tb;
 * A is (M,K) (ta: (K,M)), B is (K,N) (tb: (N,K)), leading dims lda, ldb, ldc.
 * epi: adds bias (N) (dtype bias_dt); BIAS_GELU also applies the tanh GELU
 * and stores its input to pre (M,N) (ld ldc, dtype cdt); DGELU multiplies
 * the product by the tanh GELU's derivative at pre (M,N) (ld ldc, dtype
 * cdt), no bias. beta must be 0 with those epilogues. BGRAD writes the
 * column sums of op(B) (K,N) over K to bias (N floats; C is float, beta
 * free): the bias gradient when B is dout. Errors are recorded in srk_ctx
 * (srk_fail). Returns 1 only when cuBLASLt has no algorithm for a DGELU or
 * BGRAD problem (nothing was written: the caller runs it unfused), else 0. */
int srk_gemm(int ta, int tb, long M, long N, long K, float alpha, const void *A, int adt, long lda, const void *B,
             int bdt, long ldb, float beta, void *C, int cdt, long ldc, const void *bias, int bias_dt, int epi,
             void *pre);

#define SRK_DT(T) ((int)srk_dt<typename std::remove_cv<T>::type>::value)

/* a gradient read by two GEMMs: converted to bf16 once in a bf16 program */
template <class TG>
static inline const void *srk_grad_operand(const TG *g, long n, int *dt)
{
    if (srk_ctx.bf16 && SRK_DT(TG) == SRK_F32) {
        *dt = SRK_BF16;
        return srk_bf16_view((const float *)g, n, SRK_SCR_CONV_C);
    }
    *dt = SRK_DT(TG);
    return g;
}

/* out (M,N) = a (M,K) @ b (K,N) */
template <class TO, class TA, class TB>
void srk_matmul_fwd(TO *out, const TA *a, const TB *b, long M, long K, long N)
{
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        srk_zero(out, M * N);
        return;
    }
    srk_gemm(0, 0, M, N, K, 1.0f, a, SRK_DT(TA), K, b, SRK_DT(TB), N, 0.0f, out, SRK_DT(TO), N, NULL, 0, SRK_EPI_NONE,
             NULL);
}
/* the gradients of an empty product (a zero-length sum) where they must be written */
template <class TDA, class TDB>
static inline void srk_matmul_bwd_empty(TDA *da, long na, TDB *db, long nb, int fresh)
{
    if (da && (fresh & 1) && na > 0) srk_zero(da, na);
    if (db && (fresh & 2) && nb > 0) srk_zero(db, nb);
}
/* db (K,N) += a^T @ dout (fresh bit 1: =), g being dout as the GEMMs read it; with dbias, also
 * dbias (N) += dout's column sums (the bias gradient of matmul -> add(bias)): in a bf16 program
 * the same GEMM sums them (its BGRAD epilogue, into a scratch then added: the epilogue writes),
 * else, with SHARDC_CUDA_BGRAD=0 or where cuBLASLt has no such algorithm, srk_add_bwd's sums */
template <class TDB, class TDBias, class TG, class TA>
static void srk_wgrad(TDB *db, TDBias *dbias, const TG *dout, const void *g, int gdt, const TA *a, long M, long K,
                      long N, int fresh)
{
    if (dbias && db && srk_ctx.bf16 && !srk_ctx.no_bgrad && SRK_DT(TDB) == SRK_F32 && SRK_DT(TDBias) == SRK_F32) {
        float *s = (float *)srk_scratch(SRK_SCR_BGRAD, sizeof(float) * (size_t)N);
        if (!s) return;
        if (!srk_gemm(1, 0, K, N, M, 1.0f, a, SRK_DT(TA), K, g, gdt, N, fresh & 2 ? 0.0f : 1.0f, db, SRK_F32, N, s,
                      SRK_F32, SRK_EPI_BGRAD, NULL)) {
            srk_axpy(dbias, s, 1.0f, N);
            return;
        }
    }
    if (dbias) srk_add_bwd((float *)NULL, dbias, dout, M * N, N);
    if (db)
        srk_gemm(1, 0, K, N, M, 1.0f, a, SRK_DT(TA), K, g, gdt, N, fresh & 2 ? 0.0f : 1.0f, db, SRK_DT(TDB), N, NULL, 0,
                 0, NULL);
}

/* da (M,K) += dout @ b^T (fresh bit 0: =), g being dout as the GEMMs read it */
template <class TDA, class TB>
static inline void srk_dgrad(TDA *da, const void *g, int gdt, const TB *b, long M, long K, long N, int fresh)
{
    srk_gemm(0, 1, M, K, N, 1.0f, g, gdt, N, b, SRK_DT(TB), N, fresh & 1 ? 0.0f : 1.0f, da, SRK_DT(TDA), K, NULL, 0, 0,
             NULL);
}

/* da (M,K) += dout @ b^T ; db (K,N) += a^T @ dout; dbias (N) += dout's column sums (the backward of
 * matmul -> add(bias); NULL: none); fresh (the code generator's $z): bit 0 da, bit 1 db start at
 * zero, uncleared: the GEMM overwrites them (beta 0) */
template <class TDA, class TDB, class TDBias, class TG, class TA, class TB>
void srk_matmul_bias_bwd(TDA *da, TDB *db, TDBias *dbias, const TG *dout, const TA *a, const TB *b, long M, long K,
                         long N, int fresh = 0)
{
    if (M <= 0 || N <= 0 || K <= 0 || (!da && !db)) {
        if (dbias) srk_add_bwd((float *)NULL, dbias, dout, M * N, N);
        srk_matmul_bwd_empty(da, M * K, db, K * N, fresh);
        return;
    }
    int gdt;
    const void *g = srk_grad_operand(dout, M * N, &gdt);
    if (da) srk_dgrad(da, g, gdt, b, M, K, N, fresh);
    srk_wgrad(db, dbias, dout, g, gdt, a, M, K, N, fresh);
}

template <class TDA, class TDB, class TG, class TA, class TB>
void srk_matmul_bwd(TDA *da, TDB *db, const TG *dout, const TA *a, const TB *b, long M, long K, long N,
                    int fresh = 0)
{
    srk_matmul_bias_bwd(da, db, (float *)NULL, dout, a, b, M, K, N, fresh);
}

/* the backward steps of h = gelu(pre) then matmul(h, b) [then add(bias)], one call:
 * dh (M,K) = dout @ b^T, db (K,N) += h^T @ dout (srk_matmul_bwd's rule,
 * fresh its bits), dpre (M,K) = dh * gelu'(pre) (srk_gelu_bwd's, fresh2),
 * and with dbias, dbias (N) += dout's column sums (in db's GEMM, srk_wgrad).
 * In a bf16 program, when dh and dpre are both overwritten, K % 8 == 0
 * (the aux matrix's rule) and dpre, pre are bf16: db's GEMM, then one GEMM
 * whose DGELU epilogue writes dpre (dh is never written or read). db goes
 * first: dpre may take h's slot (the code generator allows it, h's last
 * reader being db's GEMM); it may not take dout's or pre's. Otherwise the
 * two rules one after the other. */
template <class TDH, class TDB, class TG, class TA, class TB, class TDP, class TP, class TDBias = float>
void srk_matmul_gelu_bwd(TDH *dh, TDB *db, const TG *dout, const TA *h, const TB *b, long M, long K, long N,
                         int fresh, TDP *dpre, const TP *pre, int fresh2, TDBias *dbias = nullptr)
{
    if (!srk_ctx.bf16 || !(fresh & 1) || !(fresh2 & 1) || !dh || !dpre || M <= 0 || N <= 0 || K <= 0 || K % 8 ||
        SRK_DT(TDP) != SRK_BF16 || SRK_DT(TP) != SRK_BF16) {
        srk_matmul_bias_bwd(dh, db, dbias, dout, h, b, M, K, N, fresh);
        srk_gelu_bwd(dpre, dh, pre, M * K, fresh2);
        return;
    }
    int gdt;
    const void *g = srk_grad_operand(dout, M * N, &gdt);
    srk_wgrad(db, dbias, dout, g, gdt, h, M, K, N, fresh);
    if (srk_gemm(0, 1, M, K, N, 1.0f, g, gdt, N, b, SRK_DT(TB), N, 0.0f, dpre, SRK_DT(TDP), K, NULL, 0,
                 SRK_EPI_DGELU, (void *)pre)) { /* no fused algorithm for it on this GPU */
        srk_gemm(0, 1, M, K, N, 1.0f, g, gdt, N, b, SRK_DT(TB), N, 0.0f, dh, SRK_DT(TDH), K, NULL, 0, 0, NULL);
        srk_gelu_bwd(dpre, dh, pre, M * K, fresh2);
    }
}

/* out (M,N) = a (M,K) @ b (N,K)^T   (tied output head) */
template <class TO, class TA, class TB>
void srk_matmul_t_fwd(TO *out, const TA *a, const TB *b, long M, long K, long N)
{
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        srk_zero(out, M * N);
        return;
    }
    srk_gemm(0, 1, M, N, K, 1.0f, a, SRK_DT(TA), K, b, SRK_DT(TB), K, 0.0f, out, SRK_DT(TO), N, NULL, 0, SRK_EPI_NONE,
             NULL);
}
/* da (M,K) += dout @ b ; db (N,K) += dout^T @ a; fresh as srk_matmul_bwd's */
template <class TDA, class TDB, class TG, class TA, class TB>
void srk_matmul_t_bwd(TDA *da, TDB *db, const TG *dout, const TA *a, const TB *b, long M, long K, long N,
                      int fresh = 0)
{
    if (M <= 0 || N <= 0 || K <= 0 || (!da && !db)) {
        srk_matmul_bwd_empty(da, M * K, db, N * K, fresh);
        return;
    }
    int gdt;
    const void *g = srk_grad_operand(dout, M * N, &gdt);
    if (da)
        srk_gemm(0, 0, M, K, N, 1.0f, g, gdt, N, b, SRK_DT(TB), K, fresh & 1 ? 0.0f : 1.0f, da, SRK_DT(TDA), K, NULL, 0,
                 0, NULL);
    if (db)
        srk_gemm(1, 0, N, K, M, 1.0f, g, gdt, N, a, SRK_DT(TA), K, fresh & 2 ? 0.0f : 1.0f, db, SRK_DT(TDB), K, NULL, 0,
                 0, NULL);
}

/* out (M,N) = a (M,K) @ w (K,N) + bias (N): matmul and add in one GEMM */
template <class TO, class TA, class TW, class TBias>
void srk_matmul_bias_fwd(TO *out, const TA *a, const TW *w, const TBias *bias, long M, long K, long N)
{
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        srk_zero(out, M * N);
        srk_add_fwd(out, out, bias, M * N, N);
        return;
    }
    srk_gemm(0, 0, M, N, K, 1.0f, a, SRK_DT(TA), K, w, SRK_DT(TW), N, 0.0f, out, SRK_DT(TO), N, bias, SRK_DT(TBias),
             SRK_EPI_BIAS, NULL);
}

/* pre (M,N) = a @ w + bias; out (M,N) = gelu(pre) (tanh approximation).
 * One GEMM with the GELU_AUX_BIAS epilogue in a bf16 program when N % 8 == 0
 * (cuBLASLt's rule for the aux matrix); otherwise, and always in an fp32
 * program (exactness), the bias epilogue then srk_gelu_fwd. */
template <class TO, class TP, class TA, class TW, class TBias>
void srk_matmul_bias_gelu_fwd(TO *out, TP *pre, const TA *a, const TW *w, const TBias *bias, long M, long K, long N)
{
    if (M <= 0 || N <= 0) return;
    if (srk_ctx.bf16 && K > 0 && N % 8 == 0 && SRK_DT(TO) == SRK_DT(TP) && SRK_DT(TO) == SRK_BF16) {
        srk_gemm(0, 0, M, N, K, 1.0f, a, SRK_DT(TA), K, w, SRK_DT(TW), N, 0.0f, out, SRK_DT(TO), N, bias,
                 SRK_DT(TBias), SRK_EPI_BIAS_GELU, pre);
        return;
    }
    srk_matmul_bias_fwd(pre, a, w, bias, M, K, N);
    srk_gelu_fwd(out, pre, M * N);
}

#endif /* SRK_MATMUL_CUH */
