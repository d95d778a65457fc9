/* gemm.cu: the one GEMM entry point of the CUDA backend (srk_matmul.cuh).
 *
 * GPU: cuBLASLt, row-major via the transposed problem (C^T = op(B)^T op(A)^T
 * in column-major), float accumulation (CUBLAS_COMPUTE_32F, never TF32), bias,
 * GELU_AUX_BIAS, DGELU and bias-gradient (BGRADA: the column-major problem's
 * A is our B) epilogues, a 32 MiB workspace, the operands' actual
 * alignment given to the heuristic, and a small cache of descriptors and
 * heuristic results per problem so the steady state does no heuristic
 * queries. SHARDC_CUDA_GEMM=tune (off by default until a GPU has measured
 * it): the heuristic's first 8 candidates for a problem are timed at its
 * first call on the call's own operands, the output going to a buffer of
 * its own (or, with beta 0 and an output that overlaps no input, to the
 * output itself, which the call then writes again), and the fastest is
 * kept where it beats the first by more than 3% (srk_tune_pick), as XLA
 * and PyTorch's TunableOp do; the note after the first step says what it
 * changed.
 *
 * Emulation: the host BLAS (cblas_sgemm) on float copies of the operands;
 * bf16 operands are rounded exactly as the GPU sees them, the epilogue runs
 * in float and rounds once, like cuBLASLt's.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srk.cuh"

#ifdef __CUDACC__
#include <cublasLt.h>
#else
#include <cblas.h>
#include <vector>
#endif

/* the output and bias types a program may ask for (both GEMM paths check them) */
static int gemm_types_ok(int cdt, int epi, int bias_dt)
{
    if (!srk_ctx.bf16 && cdt == SRK_BF16) {
        srk_fail("internal: an fp32 program produced a bf16 matmul output at %s:%d", srk_ctx.site_file,
                 srk_ctx.site_line);
        return 0;
    }
    if (epi == SRK_EPI_BGRAD && (cdt != SRK_F32 || bias_dt != SRK_F32)) {
        srk_fail("internal: a bias gradient from a GEMM needs a float output and bias at %s:%d", srk_ctx.site_file,
                 srk_ctx.site_line);
        return 0;
    }
    return 1;
}

/* an operand in the compute type: bf16 in a bf16 program, else float */
static const void *as_compute(const void *p, int dt, long n, int scratch_id, int *out_dt)
{
    if (srk_ctx.bf16) {
        *out_dt = SRK_BF16;
        return dt == SRK_BF16 ? p : (const void *)srk_bf16_view((const float *)p, n, scratch_id);
    }
    *out_dt = SRK_F32;
    if (dt == SRK_F32) return p;
    float *f = (float *)srk_scratch(scratch_id, sizeof(float) * (size_t)n);
    if (f) srk_bf16_to_f32(f, (const bf16 *)p, n);
    return f;
}

#ifdef __CUDACC__

static cublasLtHandle_t lt;
enum { LT_WS_BYTES = 32 << 20, LT_CACHE = 64, LT_TUNE_ALGOS = 8 };
static const int LT_TUNE_RUNS = 3; /* timed runs of each candidate, after one untimed */
/* the most a trial's own output may take (the LM head's logits, 13 GB at GPT-2's batch 128,
 * are tried in place or not at all) */
static const size_t LT_TUNE_MAX_OUT = (size_t)1 << 30;

typedef struct lt_plan {
    int used;
    long key[16];
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
    cublasLtMatmulAlgo_t cand[LT_TUNE_ALGOS]; /* SHARDC_CUDA_GEMM=tune: the heuristic's candidates, */
    int ncand;                                /* until the first call has timed them (then 0) */
    int none; /* no algorithm for this DGELU or BGRAD problem: the caller runs it apart */
    uint64_t stamp;
} lt_plan;
static lt_plan plans[LT_CACHE];
static uint64_t plan_clock;

static cudaDataType_t cuda_type(int dt) { return dt == SRK_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

/* the largest power of two up to 256 that divides p's address. cuBLASLt's
 * heuristic assumes 256-byte-aligned matrices unless the preference says
 * less (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*), and an algorithm chosen under
 * that assumption fails on a slice that starts at a smaller alignment */
static uint32_t lt_align(const void *p)
{
    uint32_t a = 256;
    while (a > 1 && ((uintptr_t)p & (a - 1))) a >>= 1;
    return a;
}

static int lt_ok(cublasStatus_t s, const char *what)
{
    if (s == CUBLAS_STATUS_SUCCESS) return 1;
    srk_fail("cuBLASLt %s failed (status %d) in a matmul launched at %s:%d (%s)", what, (int)s,
             srk_ctx.site_file ? srk_ctx.site_file : "?", srk_ctx.site_line, srk_ctx.site_what ? srk_ctx.site_what : "");
    return 0;
}

static void free_plan(lt_plan *p)
{
    if (!p->used) return;
    cublasLtMatrixLayoutDestroy(p->a);
    cublasLtMatrixLayoutDestroy(p->b);
    cublasLtMatrixLayoutDestroy(p->c);
    cublasLtMatmulDescDestroy(p->desc);
    p->used = 0;
}

/* descriptors + algorithm for one problem (pointers only matter through
 * their alignment, which is part of the key) */
static lt_plan *get_plan(long *key, int nkey, int ta, int tb, long M, long N, long K, int adt, long lda, int bdt,
                         long ldb, int cdt, long ldc, int epi, int bias_dt, const void *bias, void *pre, void *ws,
                         uint32_t align_a, uint32_t align_b, uint32_t align_c)
{
    lt_plan *slot = NULL;
    for (int i = 0; i < LT_CACHE; i++)
        if (plans[i].used && !memcmp(plans[i].key, key, sizeof(long) * (size_t)nkey)) {
            plans[i].stamp = ++plan_clock;
            return &plans[i];
        }
    for (int i = 0; i < LT_CACHE; i++)
        if (!slot || !plans[i].used || plans[i].stamp < slot->stamp) {
            slot = &plans[i];
            if (!slot->used) break;
        }
    free_plan(slot);
    lt_plan *p = slot;
    memset(p, 0, sizeof *p);
    memcpy(p->key, key, sizeof(long) * (size_t)nkey);
    /* column-major problem: D^T (N x M) = op(B)^T (N x K) op(A)^T (K x M) */
    cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (!lt_ok(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "descriptor")) return NULL;
    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
    cublasLtEpilogue_t e = epi == SRK_EPI_BIAS_GELU ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                         : epi == SRK_EPI_BIAS      ? CUBLASLT_EPILOGUE_BIAS
                         : epi == SRK_EPI_DGELU     ? CUBLASLT_EPILOGUE_DGELU
                         : epi == SRK_EPI_BGRAD     ? CUBLASLT_EPILOGUE_BGRADA
                                                    : CUBLASLT_EPILOGUE_DEFAULT;
    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e);
    if (srk_epi_bias_ptr(epi)) {
        cudaDataType_t bt = cuda_type(bias_dt);
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    }
    if (srk_epi_aux(epi)) { /* GELU's input, read (DGELU) or written, laid out as C */
        int64_t ld = ldc;
        cudaDataType_t at = cuda_type(cdt);
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pre, sizeof pre);
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld);
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &at, sizeof at);
    }
    if (!lt_ok(cublasLtMatrixLayoutCreate(&p->a, cuda_type(bdt), tb ? K : N, tb ? N : K, ldb), "layout A") ||
        !lt_ok(cublasLtMatrixLayoutCreate(&p->b, cuda_type(adt), ta ? M : K, ta ? K : M, lda), "layout B") ||
        !lt_ok(cublasLtMatrixLayoutCreate(&p->c, cuda_type(cdt), N, M, ldc), "layout C"))
        return NULL;
    cublasLtMatmulPreference_t pref;
    size_t wsb = LT_WS_BYTES;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb);
    /* the column-major problem's A is our B, its B our A; C and D are C */
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_b, sizeof align_b);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_a, sizeof align_a);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof align_c);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof align_c);
    cublasLtMatmulHeuristicResult_t h[LT_TUNE_ALGOS];
    int found = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt, p->desc, p->a, p->b, p->c, p->c, pref,
                                                      srk_ctx.gemm_tune ? LT_TUNE_ALGOS : 1, h, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    (void)ws;
    if ((s != CUBLAS_STATUS_SUCCESS || found == 0) && srk_epi_optional(epi)) {
        p->none = 1; /* cached too: asked once */
        p->used = 1;
        p->stamp = ++plan_clock;
        return p;
    }
    if (s != CUBLAS_STATUS_SUCCESS || found == 0) {
        srk_fail("cuBLASLt has no algorithm for a %s matmul (%ld x %ld x %ld, epilogue %d) launched at %s:%d (%s)",
                 srk_ctx.bf16 ? "bf16" : "fp32", M, N, K, epi, srk_ctx.site_file ? srk_ctx.site_file : "?",
                 srk_ctx.site_line, srk_ctx.site_what ? srk_ctx.site_what : "");
        p->used = 1;
        free_plan(p);
        return NULL;
    }
    p->algo = h[0].algo;
    if (srk_ctx.gemm_tune && found > 1) {
        p->ncand = found;
        for (int i = 0; i < found; i++) p->cand[i] = h[i].algo;
    }
    p->used = 1;
    p->stamp = ++plan_clock;
    return p;
}

/* [p, p + n) and [q, q + m) share a byte */
static int overlaps(const void *p, size_t n, const void *q, size_t m)
{
    return p && q && (const char *)p < (const char *)q + m && (const char *)q < (const char *)p + n;
}

/* SHARDC_CUDA_GEMM=tune: times p's candidates on this call's operands (its output, c_bytes at C,
 * written to a buffer of its own, or to C itself where in_place: beta 0 and no input overlapping
 * it) and keeps the fastest (srk_tune_pick); the call then runs as usual */
static void lt_tune(lt_plan *p, const float *alpha, const void *a, const void *b, const float *beta, void *C,
                    size_t c_bytes, int in_place, void *ws)
{
    int n = p->ncand;
    p->ncand = 0;
    void *D = in_place ? C : c_bytes <= LT_TUNE_MAX_OUT ? srk_dev_alloc(c_bytes) : NULL;
    if (!D) {
        srk_ctx.gemm_untried++;
        return;
    }
    float ms[LT_TUNE_ALGOS];
    for (int i = 0; i < n; i++) {
        /* a candidate the library refuses at run time is left out, not an error */
        auto run = [&]() {
            return cublasLtMatmul(lt, p->desc, alpha, b, p->a, a, p->b, beta, C, p->c, D, p->c, &p->cand[i], ws,
                                  LT_WS_BYTES, srk_ctx.stream) == CUBLAS_STATUS_SUCCESS;
        };
        ms[i] = run() ? (float)srk_time_ms(run, LT_TUNE_RUNS, NULL) : -1.0f; /* the first run: not timed */
    }
    cudaGetLastError(); /* a refused candidate's launch error is not the program's */
    int best = srk_tune_pick(ms, n, 0.03f);
    p->algo = p->cand[best];
    srk_ctx.gemm_tuned++;
    if (best) srk_ctx.gemm_changed++, srk_ctx.gemm_saved_ms += ms[0] > 0.0f ? ms[0] - ms[best] : 0.0;
    if (D != C) {
        srk_stream_sync("a GEMM's trial"); /* its buffer is free once the trial's runs are done */
        srk_dev_free(D);
    }
}

int srk_gemm(int ta, int tb, long M, long N, long K, float alpha, const void *A, int adt, long lda, const void *B,
             int bdt, long ldb, float beta, void *C, int cdt, long ldc, const void *bias, int bias_dt, int epi,
             void *pre)
{
    if (srk_ctx.failed || M <= 0 || N <= 0) return 0;
    if (!lt && !lt_ok(cublasLtCreate(&lt), "initialization")) return 0;
    int a_dt, b_dt;
    const void *a = as_compute(A, adt, (ta ? K : M) * lda, SRK_SCR_CONV_A, &a_dt);
    const void *b = as_compute(B, bdt, (tb ? N : K) * ldb, SRK_SCR_CONV_B, &b_dt);
    if (!a || !b) return 0;
    if (!gemm_types_ok(cdt, epi, bias_dt)) return 0;
    /* the bias in the output's type (cuBLASLt's rule) */
    if (srk_epi_bias(epi) && bias_dt != cdt) {
        if (cdt == SRK_BF16) {
            bias = srk_bf16_view((const float *)bias, N, SRK_SCR_CONV_C);
            bias_dt = SRK_BF16;
        } else {
            float *f = (float *)srk_scratch(SRK_SCR_CONV_C, sizeof(float) * (size_t)N);
            if (f) srk_bf16_to_f32(f, (const bf16 *)bias, N);
            bias = f;
            bias_dt = SRK_F32;
        }
        if (!bias) return 0;
    }
    void *ws = srk_scratch(SRK_SCR_LT_WS, LT_WS_BYTES);
    if (!ws) return 0;
    /* the heuristic depends on pointers through their alignment only */
    uint32_t al_a = lt_align(a), al_b = lt_align(b), al_c = lt_align(C);
    long key[16] = {ta, tb, M, N, K, lda, ldb, ldc, a_dt, b_dt, cdt, epi, bias_dt,
                    (long)al_a | (long)al_b << 9 | (long)al_c << 18 | (long)lt_align(bias) << 27 |
                        (long)lt_align(pre) << 36,
                    0, 0};
    lt_plan *p = get_plan(key, 16, ta, tb, M, N, K, a_dt, lda, b_dt, ldb, cdt, ldc, epi, bias_dt, bias, pre, ws,
                          al_a, al_b, al_c);
    if (!p) return 0;
    if (p->none) return 1;
    /* this call's bias and aux pointers (the cached descriptor has a previous call's) */
    if (srk_epi_bias_ptr(epi))
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (srk_epi_aux(epi))
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pre, sizeof pre);
    if (p->ncand > 1) {
        size_t es = cdt == SRK_BF16 ? 2 : 4, c_bytes = ((size_t)(M - 1) * ldc + N) * es;
        size_t a_bytes = (size_t)((ta ? K : M) * lda) * (a_dt == SRK_BF16 ? 2 : 4);
        size_t b_bytes = (size_t)((tb ? N : K) * ldb) * (b_dt == SRK_BF16 ? 2 : 4);
        /* what the epilogue reads: the bias (N), GELU's input (DGELU: laid out as C) */
        size_t bias_bytes = srk_epi_bias(epi) ? (size_t)N * (bias_dt == SRK_BF16 ? 2 : 4) : 0;
        size_t pre_bytes = epi == SRK_EPI_DGELU ? c_bytes : 0;
        int in_place = beta == 0.0f && !overlaps(C, c_bytes, a, a_bytes) && !overlaps(C, c_bytes, b, b_bytes) &&
                       !overlaps(C, c_bytes, bias, bias_bytes) && !overlaps(C, c_bytes, pre, pre_bytes);
        lt_tune(p, &alpha, a, b, &beta, C, c_bytes, in_place, ws);
    }
    lt_ok(cublasLtMatmul(lt, p->desc, &alpha, b, p->a, a, p->b, &beta, C, p->c, C, p->c, &p->algo, ws, LT_WS_BYTES,
                         srk_ctx.stream),
          "matmul");
    return 0;
}

#else /* emulation */

/* float copy of an operand in the compute precision (bf16-rounded in a bf16 program) */
static const float *as_float(const void *p, int dt, long n, std::vector<float> &buf)
{
    if (dt == SRK_F32 && !srk_ctx.bf16) return (const float *)p;
    buf.resize((size_t)n);
    for (long i = 0; i < n; i++) {
        float v = dt == SRK_BF16 ? __bfloat162float(((const bf16 *)p)[i]) : ((const float *)p)[i];
        buf[(size_t)i] = srk_ctx.bf16 ? __bfloat162float(__float2bfloat16(v)) : v;
    }
    return buf.data();
}

static float gelu_tanh(float x)
{
    float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return x / (1.0f + expf(-2.0f * u));
}

int srk_gemm(int ta, int tb, long M, long N, long K, float alpha, const void *A, int adt, long lda, const void *B,
             int bdt, long ldb, float beta, void *C, int cdt, long ldc, const void *bias, int bias_dt, int epi,
             void *pre)
{
    if (srk_ctx.failed || M <= 0 || N <= 0) return 0;
    if (!gemm_types_ok(cdt, epi, bias_dt)) return 0;
    /* it runs here and now on the host: after the work queued on the stream
     * (kernels waiting behind a collective), as cuBLASLt's would */
    if (!emu::stream_drain(srk_ctx.stream, "matmul")) {
        srk_check_cuda(cudaGetLastError(), "a matmul waiting for its stream");
        return 0;
    }
    std::vector<float> abuf, bbuf, cbuf;
    const float *a = as_float(A, adt, (ta ? K : M) * lda, abuf);
    const float *b = as_float(B, bdt, (tb ? N : K) * ldb, bbuf);
    float *c = (float *)C;
    if (cdt == SRK_BF16) {
        cbuf.assign((size_t)(M * ldc), 0.0f);
        if (beta != 0.0f)
            for (long i = 0; i < M * ldc; i++) cbuf[(size_t)i] = __bfloat162float(((bf16 *)C)[i]);
        c = cbuf.data();
    }
    if (K > 0)
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                    (int)K, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
    if (epi == SRK_EPI_DGELU) /* the product times GELU'(pre), in float, rounded once below */
        for (long i = 0; i < M; i++)
            for (long j = 0; j < N; j++) {
                long at = i * ldc + j;
                float x = cdt == SRK_BF16 ? __bfloat162float(((const bf16 *)pre)[at]) : ((const float *)pre)[at];
                c[at] *= srk_act_grad(ACT_GELU, x);
            }
    else if (epi == SRK_EPI_BGRAD) /* op(B)'s column sums over K, from the operand as the GPU reads it */
        for (long j = 0; j < N; j++) {
            float s = 0.0f;
            for (long k = 0; k < K; k++) s += tb ? b[j * ldb + k] : b[k * ldb + j];
            ((float *)bias)[j] = s;
        }
    else if (epi) {
        for (long i = 0; i < M; i++)
            for (long j = 0; j < N; j++) {
                float bj = bias_dt == SRK_BF16 ? __bfloat162float(((const bf16 *)bias)[j]) : ((const float *)bias)[j];
                if (cdt == SRK_BF16) bj = __bfloat162float(__float2bfloat16(bj)); /* bias in the output's type */
                float v = c[i * ldc + j] + bj;
                if (epi == SRK_EPI_BIAS_GELU) {
                    if (cdt == SRK_BF16) ((bf16 *)pre)[i * ldc + j] = __float2bfloat16(v);
                    else ((float *)pre)[i * ldc + j] = v;
                    v = gelu_tanh(v);
                }
                c[i * ldc + j] = v;
            }
    }
    if (cdt == SRK_BF16)
        for (long i = 0; i < M; i++)
            for (long j = 0; j < N; j++) ((bf16 *)C)[i * ldc + j] = __float2bfloat16(c[i * ldc + j]);
    (void)as_compute; /* the GPU path's conversions; emulation rounds inline */
    if (!emu::device_work_ran(srk_ctx.stream, "matmul")) srk_check_cuda(cudaGetLastError(), "a matmul");
    return 0;
}

#endif
