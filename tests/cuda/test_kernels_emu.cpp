/* test_kernels_emu.cpp: every CUDA kernel of runtime/cuda against the host
 * kernel it stands for (runtime/host/kernels.c), on random inputs with odd
 * sizes, in fp32 and in bf16.
 *
 * Built two ways from this one source: with g++ against the CPU emulator
 * (CI, no GPU) and with nvcc for a real GPU (scripts/gpu-check.sh). The
 * reference always runs on the host.
 *
 * Tolerances (|got - want| <= tol * (|want| + max|want|), elementwise):
 *   fp32: 1e-5 (2e-5 for attention and matmuls: reordered float sums).
 *   bf16: 1e-2. Activations are stored in bf16 (8 significant bits: a
 *   rounding costs up to 2^-9 relative) and matmuls round their float
 *   operands (the weights) to bf16 before multiplying; the host reference
 *   gets the same bf16-rounded activations but full-precision weights, so
 *   a K-term dot product differs by a few 2^-9 relative. The tensor-core
 *   attention also rounds the probabilities to bf16 before P @ V. Measured
 *   in emulation: at most 3e-3. And over a tensor of 64 values or more, a
 *   relative L2 error of at most 6e-3 (measured: 3.1e-3), which a few
 *   percent off in many values fails (see expect).
 * Backward kernels are checked to accumulate (gradients start non-zero) and
 * to skip NULL gradients. Emulator-only checks (warp functions, barriers,
 * deadlock detection, launch limits) run only in the emulated build.
 * Prints one line per check and "N passed, M failed"; exit status 1 on a
 * failure.
 */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>
#include <string>
#include <vector>

#include "sr_cuda.h"
#include "srk.cuh"

typedef std::vector<float> vec;

#include "check.h"

/* ---- data ------------------------------------------------------------------------------ */
static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static float frand(float lo, float hi)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return lo + (hi - lo) * (float)((double)(rng >> 11) * (1.0 / 9007199254740992.0));
}
static vec rnd(long n, float lo = -1.0f, float hi = 1.0f)
{
    vec v((size_t)n);
    for (auto &x : v) x = frand(lo, hi);
    return v;
}
/* values as a T tensor holds them */
template <class T>
static vec rounded(vec v)
{
    for (auto &x : v) x = srk_ld(srk_to<T>(x));
    return v;
}

template <class T>
static T *up(const vec &h)
{
    T *d = NULL;
    size_t n = h.size() ? h.size() : 1;
    cudaMalloc((void **)&d, n * sizeof(T));
    std::vector<T> t(n);
    for (size_t i = 0; i < h.size(); i++) t[i] = srk_to<T>(h[i]);
    cudaMemcpy(d, t.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
    return d;
}
template <class T>
static vec down(const T *d, long n)
{
    cudaStreamSynchronize(srk_ctx.stream);
    std::vector<T> t((size_t)n);
    cudaMemcpy(t.data(), d, (size_t)n * sizeof(T), cudaMemcpyDeviceToHost);
    vec h((size_t)n);
    for (long i = 0; i < n; i++) h[(size_t)i] = srk_ld(t[(size_t)i]);
    return h;
}
static int32_t *up_i(const std::vector<int32_t> &h)
{
    int32_t *d = NULL;
    cudaMalloc((void **)&d, (h.size() ? h.size() : 1) * sizeof(int32_t));
    cudaMemcpy(d, h.data(), h.size() * sizeof(int32_t), cudaMemcpyHostToDevice);
    return d;
}
static void dfree(const void *p) { cudaFree((void *)p); }

template <class T>
static const char *tname()
{
    return srk_dt<T>::value == SRK_BF16 ? "bf16" : "fp32";
}
template <class T>
static float tol_for(float fp32_tol)
{
    return srk_dt<T>::value == SRK_BF16 ? 1e-2f : fp32_tol;
}

/* elementwise |g - w| <= tol (|w| + max|w|); and at bf16's tolerance (1e-2) over 64 values or
 * more, the relative L2 error ||g - w|| / ||w|| <= 6e-3 (measured here: at most 3.1e-3, the
 * attention's gradients): a systematic error of a few percent in many values (a mis-scaled tile,
 * a wrong rescaling) passes the elementwise bound, which lets each value be 1e-2 of the largest off */
enum { L2_MIN_N = 64 };
static const double BF16_L2_TOL = 6e-3;
static void expect(const char *what, const vec &got, const vec &want, float tol)
{
    double mx = 0.0, worst = 0.0;
    long wi = -1;
    bool finite = got.size() == want.size();
    for (float w : want) mx = fmax(mx, fabs(w));
    for (size_t i = 0; finite && i < got.size(); i++) {
        if (!isfinite(got[i]) && isfinite(want[i])) {
            finite = false;
            wi = (long)i;
            break;
        }
        double r = fabs((double)got[i] - want[i]) / (fabs(want[i]) + mx + 1e-30);
        if (r > worst) {
            worst = r;
            wi = (long)i;
        }
    }
    bool ok = finite && worst <= tol;
    double l2 = 0.0;
    if (ok && tol >= 1e-2f && got.size() >= L2_MIN_N) {
        double d = 0.0, w2 = 0.0;
        for (size_t i = 0; i < got.size(); i++) {
            double e = (double)got[i] - want[i];
            d += e * e, w2 += (double)want[i] * want[i];
        }
        l2 = w2 > 0.0 ? sqrt(d / w2) : (d > 0.0 ? INFINITY : 0.0);
        if (l2 > BF16_L2_TOL) {
            check(false, "%s: relative L2 error %.3g over the %zu values > %.1g (max rel err %.2g within %.1g)", what, l2,
                  got.size(), BF16_L2_TOL, worst, tol);
            return;
        }
    }
    if (ok && l2 > 0.0) check(true, "%s (max rel err %.2g, L2 %.2g)", what, worst, l2);
    else if (ok) check(true, "%s (max rel err %.2g)", what, worst);
    else if (got.size() != want.size()) check(false, "%s: %zu values, want %zu", what, got.size(), want.size());
    else check(false, "%s: at %ld got %.9g want %.9g (rel err %.3g > %.1g)", what, wi, wi >= 0 ? got[(size_t)wi] : 0.0f,
               wi >= 0 ? want[(size_t)wi] : 0.0f, worst, tol);
}

static std::string fmt(const char *f, ...)
{
    char b[256];
    va_list ap;
    va_start(ap, f);
    vsnprintf(b, sizeof b, f, ap);
    va_end(ap);
    return b;
}

static void no_error(const char *what)
{
    cudaStreamSynchronize(srk_ctx.stream);
    check(!srk_ctx.failed, "%s: no CUDA error%s%s", what, srk_ctx.failed ? ": " : "", srk_ctx.failed ? srk_ctx.err : "");
    srk_ctx.failed = 0;
}

/* ---- matmuls --------------------------------------------------------------------------- */
/* T: activations (a, out, dout, da); weights b and their gradient db are float (parameters) */
template <class T>
static void test_matmul(long M, long K, long N, bool transposed)
{
    const char *nm = transposed ? "matmul_t" : "matmul";
    float tol = tol_for<T>(2e-5f);
    vec a = rounded<T>(rnd(M * K)), b = rnd(K * N), g = rounded<T>(rnd(M * N));
    vec da0 = rounded<T>(rnd(M * K)), db0 = rnd(K * N);
    T *d_a = up<T>(a), *d_out = up<T>(vec((size_t)(M * N))), *d_g = up<T>(g), *d_da = up<T>(da0);
    float *d_b = up<float>(b), *d_db = up<float>(db0);
    vec out((size_t)(M * N)), da = da0, db = db0;
    if (transposed) {
        sr_matmul_t_fwd(out.data(), a.data(), b.data(), (int)M, (int)K, (int)N);
        sr_matmul_t_bwd(da.data(), db.data(), g.data(), a.data(), b.data(), (int)M, (int)K, (int)N);
        srk_matmul_t_fwd(d_out, d_a, d_b, M, K, N);
        srk_matmul_t_bwd(d_da, d_db, d_g, d_a, d_b, M, K, N);
    } else {
        sr_matmul_fwd(out.data(), a.data(), b.data(), (int)M, (int)K, (int)N);
        sr_matmul_bwd(da.data(), db.data(), g.data(), a.data(), b.data(), (int)M, (int)K, (int)N);
        srk_matmul_fwd(d_out, d_a, d_b, M, K, N);
        srk_matmul_bwd(d_da, d_db, d_g, d_a, d_b, M, K, N);
    }
    expect(fmt("%s %s fwd %ldx%ldx%ld", nm, tname<T>(), M, K, N).c_str(), down(d_out, M * N), out, tol);
    expect(fmt("%s %s bwd da (accumulates)", nm, tname<T>()).c_str(), down(d_da, M * K), da, tol);
    expect(fmt("%s %s bwd db (accumulates)", nm, tname<T>()).c_str(), down(d_db, K * N), db, tol);
    /* NULL da: db alone */
    float *d_db2 = up<float>(db0);
    vec db2 = db0;
    if (transposed) {
        sr_matmul_t_bwd(NULL, db2.data(), g.data(), a.data(), b.data(), (int)M, (int)K, (int)N);
        srk_matmul_t_bwd((T *)NULL, d_db2, d_g, d_a, d_b, M, K, N);
    } else {
        sr_matmul_bwd(NULL, db2.data(), g.data(), a.data(), b.data(), (int)M, (int)K, (int)N);
        srk_matmul_bwd((T *)NULL, d_db2, d_g, d_a, d_b, M, K, N);
    }
    expect(fmt("%s %s bwd with da NULL", nm, tname<T>()).c_str(), down(d_db2, K * N), db2, tol);
    no_error(nm);
    for (const void *p : {(const void *)d_a, (const void *)d_out, (const void *)d_g, (const void *)d_da,
                          (const void *)d_b, (const void *)d_db, (const void *)d_db2})
        dfree(p);
}

/* the fused epilogues against matmul, add, gelu */
template <class T>
static void test_matmul_epilogues(long M, long K, long N)
{
    float tol = tol_for<T>(2e-5f);
    vec a = rounded<T>(rnd(M * K)), w = rnd(K * N), bias = rnd(N);
    vec mm((size_t)(M * N)), pre((size_t)(M * N)), out((size_t)(M * N));
    sr_matmul_fwd(mm.data(), a.data(), w.data(), (int)M, (int)K, (int)N);
    sr_add_fwd(pre.data(), mm.data(), bias.data(), M * N, N);
    sr_gelu_fwd(out.data(), pre.data(), M * N);
    T *d_a = up<T>(a), *d_o = up<T>(vec((size_t)(M * N))), *d_p = up<T>(vec((size_t)(M * N)));
    float *d_w = up<float>(w), *d_bias = up<float>(bias);
    srk_matmul_bias_fwd(d_o, d_a, d_w, d_bias, M, K, N);
    expect(fmt("matmul+bias %s %ldx%ldx%ld", tname<T>(), M, K, N).c_str(), down(d_o, M * N), pre, tol);
    srk_matmul_bias_gelu_fwd(d_o, d_p, d_a, d_w, d_bias, M, K, N);
    expect(fmt("matmul+bias+gelu %s: gelu output", tname<T>()).c_str(), down(d_o, M * N), out, tol);
    expect(fmt("matmul+bias+gelu %s: saved input", tname<T>()).c_str(), down(d_p, M * N), pre, tol);
    no_error("matmul epilogues");
    for (const void *p : {(const void *)d_a, (const void *)d_o, (const void *)d_p, (const void *)d_w, (const void *)d_bias})
        dfree(p);
}

/* d matmul + d gelu in one call (srk_matmul_gelu_bwd: the DGELU epilogue in a bf16 program when
 * K % 8 == 0, else the two rules) against the host's two rules. dh and dpre start as NaN (fresh:
 * overwritten, never read); db accumulates, or is fresh too; then dpre in h's own buffer, as the
 * code generator allows: db must still see h */
template <class T>
static void test_matmul_gelu_bwd(long M, long K, long N)
{
    float tol = tol_for<T>(2e-5f);
    vec h = rounded<T>(rnd(M * K)), w = rnd(K * N), g = rounded<T>(rnd(M * N)), pre = rounded<T>(rnd(M * K, -3, 3));
    vec db0 = rnd(K * N), dh((size_t)(M * K)), dpre((size_t)(M * K)), db = db0, dbf((size_t)(K * N));
    sr_matmul_bwd(dh.data(), db.data(), g.data(), h.data(), w.data(), (int)M, (int)K, (int)N);
    sr_matmul_bwd(NULL, dbf.data(), g.data(), h.data(), w.data(), (int)M, (int)K, (int)N);
    if (srk_dt<T>::value == SRK_BF16) dh = rounded<T>(dh); /* the unfused path stores dh */
    sr_gelu_bwd(dpre.data(), dh.data(), pre.data(), M * K);
    vec nan_k((size_t)(M * K), NAN);
    const char *path = srk_ctx.bf16 && K % 8 == 0 ? "DGELU epilogue" : "two rules";
    for (int fresh_db = 0; fresh_db < 2; fresh_db++) {
        T *d_h = up<T>(h), *d_g = up<T>(g), *d_pre = up<T>(pre), *d_dh = up<T>(nan_k), *d_dpre = up<T>(nan_k);
        float *d_w = up<float>(w), *d_db = up<float>(fresh_db ? vec((size_t)(K * N), NAN) : db0);
        srk_matmul_gelu_bwd(d_dh, d_db, d_g, d_h, d_w, M, K, N, fresh_db ? 3 : 1, d_dpre, d_pre, 1);
        expect(fmt("matmul+gelu %s bwd %ldx%ldx%ld (%s): dpre", tname<T>(), M, K, N, path).c_str(), down(d_dpre, M * K),
               dpre, tol);
        expect(fmt("matmul+gelu %s bwd: db %s", tname<T>(), fresh_db ? "overwritten" : "accumulates").c_str(),
               down(d_db, K * N), fresh_db ? dbf : db, tol);
        if (fresh_db) { /* dpre in h's buffer */
            T *d_h2 = up<T>(h);
            float *d_db2 = up<float>(db0);
            srk_matmul_gelu_bwd(d_dh, d_db2, d_g, d_h2, d_w, M, K, N, 1, d_h2, d_pre, 1);
            expect(fmt("matmul+gelu %s bwd, dpre over h: dpre", tname<T>()).c_str(), down(d_h2, M * K), dpre, tol);
            expect(fmt("matmul+gelu %s bwd, dpre over h: db", tname<T>()).c_str(), down(d_db2, K * N), db, tol);
            dfree(d_h2), dfree(d_db2);
        }
        no_error("matmul+gelu bwd");
        for (const void *q : {(const void *)d_h, (const void *)d_g, (const void *)d_pre, (const void *)d_dh,
                              (const void *)d_dpre, (const void *)d_w, (const void *)d_db})
            dfree(q);
    }
}

/* d add(bias) + d matmul in one call (srk_matmul_bias_bwd: in a bf16 program the weight
 * gradient's GEMM sums the bias gradient in its epilogue, or, with SHARDC_CUDA_BGRAD=0 or no
 * such algorithm, the column sums apart) against the host's two rules; da and db fresh (from
 * NaN) or accumulating, dbias always accumulating; then the same through srk_matmul_gelu_bwd's
 * dbias (d add + d matmul + d gelu) */
template <class T>
static void test_matmul_bias_bwd(long M, long K, long N)
{
    float tol = tol_for<T>(2e-5f);
    vec a = rounded<T>(rnd(M * K)), w = rnd(K * N), g = rounded<T>(rnd(M * N)), pre = rounded<T>(rnd(M * K, -3, 3));
    vec da0 = rounded<T>(rnd(M * K)), db0 = rnd(K * N), dbias0 = rnd(N);
    vec da = da0, db = db0, dbias = dbias0, daf((size_t)(M * K)), dbf((size_t)(K * N));
    sr_add_bwd(NULL, dbias.data(), g.data(), M * N, N);
    sr_matmul_bwd(da.data(), db.data(), g.data(), a.data(), w.data(), (int)M, (int)K, (int)N);
    sr_matmul_bwd(daf.data(), dbf.data(), g.data(), a.data(), w.data(), (int)M, (int)K, (int)N);
    vec dpre((size_t)(M * K)), dhf = daf;
    if (srk_dt<T>::value == SRK_BF16) dhf = rounded<T>(dhf);
    sr_gelu_bwd(dpre.data(), dhf.data(), pre.data(), M * K);
    vec nan_k((size_t)(M * K), NAN), nan_w((size_t)(K * N), NAN);
    for (int apart = 0; apart < 2; apart++) {
        srk_ctx.no_bgrad = apart;
        const char *path = srk_ctx.bf16 && !apart ? "in the GEMM" : "apart";
        for (int fresh = 0; fresh < 2; fresh++) {
            T *d_a = up<T>(a), *d_g = up<T>(g), *d_da = up<T>(fresh ? nan_k : da0);
            float *d_w = up<float>(w), *d_db = up<float>(fresh ? nan_w : db0), *d_dbias = up<float>(dbias0);
            srk_matmul_bias_bwd(d_da, d_db, d_dbias, d_g, d_a, d_w, M, K, N, fresh ? 3 : 0);
            const char *how = fresh ? "overwritten" : "accumulate";
            expect(fmt("add+matmul %s bwd %ldx%ldx%ld (bias gradient %s): dbias", tname<T>(), M, K, N, path).c_str(),
                   down(d_dbias, N), dbias, tol);
            expect(fmt("add+matmul %s bwd: da %s", tname<T>(), how).c_str(), down(d_da, M * K), fresh ? daf : da, tol);
            expect(fmt("add+matmul %s bwd: db %s", tname<T>(), how).c_str(), down(d_db, K * N), fresh ? dbf : db, tol);
            /* the gelu that made a: dpre instead of da, the bias gradient in the weight GEMM */
            T *d_pre = up<T>(pre), *d_dpre = up<T>(nan_k), *d_dh = up<T>(nan_k);
            float *d_db2 = up<float>(fresh ? nan_w : db0), *d_dbias2 = up<float>(dbias0);
            srk_matmul_gelu_bwd(d_dh, d_db2, d_g, d_a, d_w, M, K, N, fresh ? 3 : 1, d_dpre, d_pre, 1, d_dbias2);
            expect(fmt("add+matmul+gelu %s bwd (bias gradient %s): dbias", tname<T>(), path).c_str(), down(d_dbias2, N),
                   dbias, tol);
            expect(fmt("add+matmul+gelu %s bwd: dpre", tname<T>()).c_str(), down(d_dpre, M * K), dpre, tol);
            expect(fmt("add+matmul+gelu %s bwd: db %s", tname<T>(), how).c_str(), down(d_db2, K * N), fresh ? dbf : db,
                   tol);
            no_error("add+matmul bwd");
            for (const void *q : {(const void *)d_a, (const void *)d_g, (const void *)d_da, (const void *)d_w,
                                  (const void *)d_db, (const void *)d_dbias, (const void *)d_pre, (const void *)d_dpre,
                                  (const void *)d_dh, (const void *)d_db2, (const void *)d_dbias2})
                dfree(q);
        }
    }
    srk_ctx.no_bgrad = 0;
    /* no rows: the bias gradient gains nothing; no weight gradient: its sums apart */
    float *d_dbias = up<float>(dbias0);
    srk_matmul_bias_bwd((T *)NULL, (float *)NULL, d_dbias, (T *)NULL, (T *)NULL, (float *)NULL, 0, K, N, 0);
    expect(fmt("add+matmul %s bwd, no rows: dbias unchanged", tname<T>()).c_str(), down(d_dbias, N), dbias0, 0);
    T *d_g = up<T>(g), *d_da = up<T>(da0);
    float *d_w = up<float>(w);
    srk_matmul_bias_bwd(d_da, (float *)NULL, d_dbias, d_g, (T *)NULL, d_w, M, K, N, 0);
    expect(fmt("add+matmul %s bwd, db NULL: dbias", tname<T>()).c_str(), down(d_dbias, N), dbias, tol);
    expect(fmt("add+matmul %s bwd, db NULL: da", tname<T>()).c_str(), down(d_da, M * K), da, tol);
    no_error("add+matmul bwd, edge cases");
    dfree(d_dbias), dfree(d_g), dfree(d_da), dfree(d_w);
}

/* ---- element-wise ---------------------------------------------------------------------- */
template <class T>
static void test_binary(int op, long n, long nb)
{
    static const char *names[] = {"add", "sub", "mul"};
    float tol = tol_for<T>(1e-5f);
    vec a = rounded<T>(rnd(n)), b = rnd(nb), g = rounded<T>(rnd(n));
    vec da0 = rounded<T>(rnd(n)), db0 = rnd(nb);
    vec out((size_t)n), da = da0, db = db0;
    T *d_a = up<T>(a), *d_o = up<T>(vec((size_t)n)), *d_g = up<T>(g), *d_da = up<T>(da0);
    float *d_b = up<float>(b), *d_db = up<float>(db0);
    auto fwd = [&](T *o, const T *x) { /* the device's forward, o = x op b */
        if (op == 0) srk_add_fwd(o, x, d_b, n, nb);
        else if (op == 1) srk_sub_fwd(o, x, d_b, n, nb);
        else srk_mul_fwd(o, x, d_b, n, nb);
    };
    fwd(d_o, d_a);
    if (op == 0) {
        sr_add_fwd(out.data(), a.data(), b.data(), n, nb);
        sr_add_bwd(da.data(), db.data(), g.data(), n, nb);
        srk_add_bwd(d_da, d_db, d_g, n, nb);
    } else if (op == 1) {
        sr_sub_fwd(out.data(), a.data(), b.data(), n, nb);
        sr_sub_bwd(da.data(), db.data(), g.data(), n, nb);
        srk_sub_bwd(d_da, d_db, d_g, n, nb);
    } else {
        sr_mul_fwd(out.data(), a.data(), b.data(), n, nb);
        sr_mul_bwd(da.data(), db.data(), g.data(), a.data(), b.data(), n, nb);
        srk_mul_bwd(d_da, d_db, d_g, d_a, d_b, n, nb);
    }
    expect(fmt("%s %s fwd n=%ld nb=%ld", names[op], tname<T>(), n, nb).c_str(), down(d_o, n), out, tol);
    /* one float operation rounded to T: the host's bits, on the 16-byte path too (n, nb in eights) */
    expect(fmt("%s %s fwd: the host's bits", names[op], tname<T>()).c_str(), down(d_o, n), rounded<T>(out), 0.0f);
    /* in place, out = a: the residual stream's add */
    T *d_a2 = up<T>(a);
    fwd(d_a2, d_a2);
    expect(fmt("%s %s fwd in place: the host's bits", names[op], tname<T>()).c_str(), down(d_a2, n), rounded<T>(out),
           0.0f);
    dfree(d_a2);
    expect(fmt("%s %s bwd da", names[op], tname<T>()).c_str(), down(d_da, n), da, tol);
    expect(fmt("%s %s bwd db (column sums)", names[op], tname<T>()).c_str(), down(d_db, nb), db, tol);
    no_error(names[op]);
    for (const void *p : {(const void *)d_a, (const void *)d_o, (const void *)d_g, (const void *)d_da, (const void *)d_b,
                          (const void *)d_db})
        dfree(p);
}

template <class T>
static void test_scale(long n)
{
    float tol = tol_for<T>(1e-6f);
    vec x = rounded<T>(rnd(n)), g = rounded<T>(rnd(n)), dx0 = rounded<T>(rnd(n));
    vec out((size_t)n), dx = dx0;
    sr_scale_fwd(out.data(), x.data(), 0.37f, n);
    sr_scale_bwd(dx.data(), g.data(), 0.37f, n);
    T *d_x = up<T>(x), *d_o = up<T>(vec((size_t)n)), *d_g = up<T>(g), *d_dx = up<T>(dx0);
    srk_scale_fwd(d_o, d_x, 0.37f, n);
    srk_scale_bwd(d_dx, d_g, 0.37f, n);
    expect(fmt("scale %s fwd n=%ld", tname<T>(), n).c_str(), down(d_o, n), out, tol);
    expect(fmt("scale %s bwd", tname<T>()).c_str(), down(d_dx, n), dx, tol);
    no_error("scale");
    for (const void *p : {(const void *)d_x, (const void *)d_o, (const void *)d_g, (const void *)d_dx}) dfree(p);
}

template <class T>
static void test_activations(long n)
{
    static const char *names[] = {"gelu", "gelu_exact", "relu", "silu"};
    float tol = tol_for<T>(1e-5f);
    vec x = rounded<T>(rnd(n, -4.0f, 4.0f)), g = rounded<T>(rnd(n)), dx0 = rounded<T>(rnd(n));
    x[0] = 0.0f; /* relu's kink: gradient 0 there, as torch */
    T *d_x = up<T>(x), *d_g = up<T>(g);
    for (int a = 0; a < 4; a++) {
        vec out((size_t)n), dx = dx0;
        T *d_o = up<T>(vec((size_t)n)), *d_dx = up<T>(dx0);
        switch (a) {
        case 0:
            sr_gelu_fwd(out.data(), x.data(), n), sr_gelu_bwd(dx.data(), g.data(), x.data(), n);
            srk_gelu_fwd(d_o, d_x, n), srk_gelu_bwd(d_dx, d_g, d_x, n);
            break;
        case 1:
            sr_gelu_exact_fwd(out.data(), x.data(), n), sr_gelu_exact_bwd(dx.data(), g.data(), x.data(), n);
            srk_gelu_exact_fwd(d_o, d_x, n), srk_gelu_exact_bwd(d_dx, d_g, d_x, n);
            break;
        case 2:
            sr_relu_fwd(out.data(), x.data(), n), sr_relu_bwd(dx.data(), g.data(), x.data(), n);
            srk_relu_fwd(d_o, d_x, n), srk_relu_bwd(d_dx, d_g, d_x, n);
            break;
        default:
            sr_silu_fwd(out.data(), x.data(), n), sr_silu_bwd(dx.data(), g.data(), x.data(), n);
            srk_silu_fwd(d_o, d_x, n), srk_silu_bwd(d_dx, d_g, d_x, n);
        }
        expect(fmt("%s %s fwd n=%ld", names[a], tname<T>(), n).c_str(), down(d_o, n), out, tol);
        expect(fmt("%s %s bwd", names[a], tname<T>()).c_str(), down(d_dx, n), dx, tol);
        dfree(d_o);
        dfree(d_dx);
    }
    no_error("activations");
    dfree(d_x);
    dfree(d_g);
}

template <class T>
static void test_rope(long B, int S, int C, int nh, float theta, float factor = 1.0f, float orig = 8192.0f)
{
    float tol = tol_for<T>(1e-5f), lo = 1.0f, hi = 4.0f;
    long n = B * S * C, N = B * S;
    vec x = rounded<T>(rnd(n)), g = rounded<T>(rnd(n)), dx0 = rounded<T>(rnd(n));
    vec out((size_t)n), dx = dx0;
    sr_rope_fwd(out.data(), x.data(), N, S, C, nh, theta, factor, lo, hi, orig);
    sr_rope_bwd(dx.data(), g.data(), N, S, C, nh, theta, factor, lo, hi, orig);
    T *d_x = up<T>(x), *d_o = up<T>(vec((size_t)n)), *d_g = up<T>(g), *d_dx = up<T>(dx0);
    srk_rope_fwd(d_o, d_x, N, S, C, nh, theta, factor, lo, hi, orig);
    srk_rope_bwd(d_dx, d_g, N, S, C, nh, theta, factor, lo, hi, orig);
    expect(fmt("rope %s fwd %ldx%dx%d, %d heads, theta %g, llama3 factor %g", tname<T>(), B, S, C, nh, theta, factor)
               .c_str(),
           down(d_o, n), out, tol);
    expect(fmt("rope %s bwd", tname<T>()).c_str(), down(d_dx, n), dx, tol);
    srk_rope_fwd(d_x, d_x, N, S, C, nh, theta, factor, lo, hi, orig); /* in place, as the memory plan may place it */
    expect(fmt("rope %s fwd in place", tname<T>()).c_str(), down(d_x, n), out, tol);
    srk_rope_bwd((T *)NULL, d_g, N, S, C, nh, theta, factor, lo, hi, orig);
    no_error("rope");
    for (const void *q : {(const void *)d_x, (const void *)d_o, (const void *)d_g, (const void *)d_dx}) dfree(q);
}

template <class T>
static void test_repeat_kv(long N, int nkv, int hd, int rep)
{
    float tol = tol_for<T>(1e-6f);
    long nin = N * nkv * hd, nout = nin * rep;
    vec x = rounded<T>(rnd(nin)), g = rounded<T>(rnd(nout)), dx0 = rounded<T>(rnd(nin));
    vec out((size_t)nout), dx = dx0;
    sr_repeat_kv_fwd(out.data(), x.data(), N, nkv, hd, rep);
    sr_repeat_kv_bwd(dx.data(), g.data(), N, nkv, hd, rep);
    T *d_x = up<T>(x), *d_o = up<T>(vec((size_t)nout)), *d_g = up<T>(g), *d_dx = up<T>(dx0);
    srk_repeat_kv_fwd(d_o, d_x, N, nkv, hd, rep);
    srk_repeat_kv_bwd(d_dx, d_g, N, nkv, hd, rep);
    expect(fmt("repeat_kv %s fwd %ld rows, %d heads of %d, x%d", tname<T>(), N, nkv, hd, rep).c_str(),
           down(d_o, nout), out, tol);
    expect(fmt("repeat_kv %s bwd", tname<T>()).c_str(), down(d_dx, nin), dx, tol_for<T>(1e-5f));
    srk_repeat_kv_bwd((T *)NULL, d_g, N, nkv, hd, rep);
    no_error("repeat_kv");
    for (const void *q : {(const void *)d_x, (const void *)d_o, (const void *)d_g, (const void *)d_dx}) dfree(q);
}

template <class T>
static void test_dropout(long n, float p)
{
    float tol = tol_for<T>(1e-6f);
    vec x = rounded<T>(rnd(n)), g = rounded<T>(rnd(n)), dx0 = rounded<T>(rnd(n));
    vec out((size_t)n), dx = dx0;
    sr_dropout_fwd(out.data(), x.data(), n, p, 1337, 5, 17, 1000);
    sr_dropout_bwd(dx.data(), g.data(), n, p, 1337, 5, 17, 1000);
    T *d_x = up<T>(x), *d_o = up<T>(vec((size_t)n)), *d_g = up<T>(g), *d_dx = up<T>(dx0);
    srk_dropout_fwd(d_o, d_x, n, p, 1337, 5, 17, 1000);
    srk_dropout_bwd(d_dx, d_g, n, p, 1337, 5, 17, 1000);
    expect(fmt("dropout %s p=%g fwd (same mask as the host)", tname<T>(), p).c_str(), down(d_o, n), out, tol);
    expect(fmt("dropout %s p=%g bwd", tname<T>(), p).c_str(), down(d_dx, n), dx, tol);
    /* the residual add fused in (codegen_cuda.c): the bits of dropout then add, also with out over x */
    vec a = rounded<T>(rnd(n));
    T *d_a = up<T>(a), *d_sum = up<T>(vec((size_t)n)), *d_f = up<T>(vec((size_t)n)), *d_in = up<T>(x);
    srk_add_fwd(d_sum, d_a, d_o, n, n);
    srk_dropout_add_fwd(d_f, d_a, d_x, n, p, 1337, 5, 17, 1000);
    srk_dropout_add_fwd(d_in, d_a, d_in, n, p, 1337, 5, 17, 1000);
    expect(fmt("dropout+add %s p=%g: the bits of dropout, then add", tname<T>(), p).c_str(), down(d_f, n),
           down(d_sum, n), 0.0f);
    expect(fmt("dropout+add %s p=%g, out over x: the same", tname<T>(), p).c_str(), down(d_in, n), down(d_sum, n), 0.0f);
    no_error("dropout");
    for (const void *q : {(const void *)d_x, (const void *)d_o, (const void *)d_g, (const void *)d_dx, (const void *)d_a,
                          (const void *)d_sum, (const void *)d_f, (const void *)d_in})
        dfree(q);
}

template <class T>
static void test_embedding(long N, long D, long V)
{
    float tol = tol_for<T>(1e-5f);
    vec w = rnd(V * D), g = rounded<T>(rnd(N * D)), dw0 = rnd(V * D);
    std::vector<int32_t> idx((size_t)N);
    for (long i = 0; i < N; i++) idx[(size_t)i] = (int32_t)((i * 7 + i / 3) % V); /* repeats */
    vec out((size_t)(N * D)), dw = dw0;
    sr_embedding_fwd(out.data(), w.data(), idx.data(), (int)N, (int)D);
    sr_embedding_bwd(dw.data(), g.data(), idx.data(), (int)N, (int)D);
    float *d_w = up<float>(w), *d_dw = up<float>(dw0);
    T *d_o = up<T>(vec((size_t)(N * D))), *d_g = up<T>(g);
    int32_t *d_i = up_i(idx);
    srk_embedding_fwd(d_o, d_w, d_i, N, D);
    srk_embedding_bwd(d_dw, d_g, d_i, N, D);
    expect(fmt("embedding %s fwd N=%ld D=%ld", tname<T>(), N, D).c_str(), down(d_o, N * D), rounded<T>(out), tol);
    /* each row's positions added in order, as the host does: its bits */
    expect(fmt("embedding %s bwd N=%ld D=%ld V=%ld (repeated ids, sorted): the host's bits", tname<T>(), N, D, V).c_str(),
           down(d_dw, V * D), dw, 0.0f);
    /* the vocabulary-parallel one: rank 1 of 2 holds rows [Vl, 2 Vl) */
    long Vl = (V + 1) / 2;
    vec dwv0 = rnd(Vl * D), dwv = dwv0;
    sr_embedding_vp_bwd(dwv.data(), g.data(), idx.data(), (int)N, (int)D, (int)Vl, 1);
    float *d_dwv = up<float>(dwv0);
    srk_embedding_vp_bwd(d_dwv, d_g, d_i, N, D, Vl, 1);
    expect(fmt("embedding %s vocab-parallel bwd, rank 1 of 2: the host's bits", tname<T>()).c_str(), down(d_dwv, Vl * D),
           dwv, 0.0f);
    dfree(d_dwv);
    std::vector<int32_t> ar((size_t)N), want((size_t)N);
    sr_arange_fwd(want.data(), (int)N);
    srk_arange_fwd(d_i, N);
    cudaStreamSynchronize(srk_ctx.stream);
    cudaMemcpy(ar.data(), d_i, sizeof(int32_t) * (size_t)N, cudaMemcpyDeviceToHost);
    check(ar == want, "arange n=%ld", N);
    no_error("embedding");
    for (const void *p : {(const void *)d_w, (const void *)d_dw, (const void *)d_o, (const void *)d_g, (const void *)d_i})
        dfree(p);
}

template <class T>
static void test_slice_transpose(long n = 7)
{
    float tol = tol_for<T>(1e-6f);
    long M = 13, K = 3;
    vec x = rounded<T>(rnd(M * K * n)), g = rounded<T>(rnd(M * n)), dx0 = rounded<T>(rnd(M * K * n));
    T *d_x = up<T>(x), *d_g = up<T>(g);
    for (int i = 0; i < 3; i++) {
        vec out((size_t)(M * n)), dx = dx0;
        sr_slice_fwd(out.data(), x.data(), (int)M, (int)K, (int)n, i);
        sr_slice_bwd(dx.data(), g.data(), (int)M, (int)K, (int)n, i);
        T *d_o = up<T>(vec((size_t)(M * n))), *d_dx = up<T>(dx0);
        srk_slice_fwd(d_o, d_x, M, K, n, i);
        srk_slice_bwd(d_dx, d_g, M, K, n, i);
        expect(fmt("slice %s fwd n=%ld part %d", tname<T>(), n, i).c_str(), down(d_o, M * n), out, tol);
        expect(fmt("slice %s bwd n=%ld part %d", tname<T>(), n, i).c_str(), down(d_dx, M * K * n), dx, tol);
        dfree(d_o);
        dfree(d_dx);
    }
    dfree(d_x);
    dfree(d_g);
    /* transposes of a 4-D tensor, every pair of dims */
    long dims[4] = {3, 5, 2, 7};
    long N = 3 * 5 * 2 * 7;
    vec t = rounded<T>(rnd(N)), tg = rounded<T>(rnd(N)), tdx0 = rounded<T>(rnd(N));
    T *d_t = up<T>(t), *d_tg = up<T>(tg);
    srk_dims6 d6 = {{3, 5, 2, 7, 0, 0}};
    for (int d1 = 0; d1 < 4; d1++)
        for (int d2 = d1; d2 < 4; d2++) {
            vec out((size_t)N), dx = tdx0;
            sr_transpose_fwd(out.data(), t.data(), 4, dims, d1, d2);
            sr_transpose_bwd(dx.data(), tg.data(), 4, dims, d1, d2);
            T *d_o = up<T>(vec((size_t)N)), *d_dx = up<T>(tdx0);
            srk_transpose_fwd(d_o, d_t, 4, d6, d1, d2);
            srk_transpose_bwd(d_dx, d_tg, 4, d6, d1, d2);
            expect(fmt("transpose %s dims %d,%d fwd", tname<T>(), d1, d2).c_str(), down(d_o, N), out, tol);
            expect(fmt("transpose %s dims %d,%d bwd", tname<T>(), d1, d2).c_str(), down(d_dx, N), dx, tol);
            dfree(d_o);
            dfree(d_dx);
        }
    no_error("slice/transpose");
    dfree(d_t);
    dfree(d_tg);
}

/* ---- row-wise ------------------------------------------------------------------------------ */
template <class T>
static void test_layernorm(long N, long C)
{
    float tol = tol_for<T>(2e-5f);
    vec x = rounded<T>(rnd(N * C, -2.0f, 3.0f)), w = rnd(C, 0.5f, 1.5f), b = rnd(C), g = rounded<T>(rnd(N * C));
    vec dx0 = rounded<T>(rnd(N * C)), dw0 = rnd(C), db0 = rnd(C);
    vec out((size_t)(N * C)), mean((size_t)N), rstd((size_t)N), dx = dx0, dw = dw0, db = db0;
    sr_layernorm_fwd(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), (int)N, (int)C, 1e-5f);
    sr_layernorm_bwd(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), mean.data(), rstd.data(), (int)N,
                     (int)C);
    T *d_x = up<T>(x), *d_o = up<T>(vec((size_t)(N * C))), *d_g = up<T>(g), *d_dx = up<T>(dx0);
    float *d_w = up<float>(w), *d_b = up<float>(b), *d_m = up<float>(vec((size_t)N)), *d_r = up<float>(vec((size_t)N));
    float *d_dw = up<float>(dw0), *d_db = up<float>(db0);
    srk_layernorm_fwd(d_o, d_m, d_r, d_x, d_w, d_b, N, C, 1e-5f);
    expect(fmt("layernorm %s fwd N=%ld C=%ld", tname<T>(), N, C).c_str(), down(d_o, N * C), out, tol);
    expect(fmt("layernorm %s mean", tname<T>()).c_str(), down(d_m, N), mean, 1e-5f);
    expect(fmt("layernorm %s rstd", tname<T>()).c_str(), down(d_r, N), rstd, 1e-5f);
    /* the backward from the host's statistics, so only the backward is compared */
    float *d_hm = up<float>(mean), *d_hr = up<float>(rstd);
    srk_layernorm_bwd(d_dx, d_dw, d_db, d_g, d_x, d_w, d_hm, d_hr, N, C);
    expect(fmt("layernorm %s bwd dx", tname<T>()).c_str(), down(d_dx, N * C), dx, tol);
    expect(fmt("layernorm %s bwd dw", tname<T>()).c_str(), down(d_dw, C), dw, tol);
    expect(fmt("layernorm %s bwd db", tname<T>()).c_str(), down(d_db, C), db, tol);
    /* the parameter gradients as srk_colsum alone sums them: the same bits (the one-pass form's
     * contract, where it runs: C <= 768 in eights) */
    float *d_dw3 = up<float>(dw0), *d_db3 = up<float>(db0);
    srk_colsum<CS_MODE_LN, float, float>(d_dw3, d_db3, 1.0f, d_g, d_x, d_hm, d_hr, N, C);
    expect(fmt("layernorm %s bwd dw: srk_colsum's bits", tname<T>()).c_str(), down(d_dw, C), down(d_dw3, C), 0.0f);
    expect(fmt("layernorm %s bwd db: srk_colsum's bits", tname<T>()).c_str(), down(d_db, C), down(d_db3, C), 0.0f);
    dfree(d_dw3), dfree(d_db3);
    /* NULL dx and dw: db alone */
    vec db2 = db0;
    float *d_db2 = up<float>(db0);
    sr_layernorm_bwd(NULL, NULL, db2.data(), g.data(), x.data(), w.data(), mean.data(), rstd.data(), (int)N, (int)C);
    srk_layernorm_bwd((T *)NULL, (float *)NULL, d_db2, d_g, d_x, d_w, d_hm, d_hr, N, C);
    expect(fmt("layernorm %s bwd with dx, dw NULL", tname<T>()).c_str(), down(d_db2, C), db2, tol);
    no_error("layernorm");
    for (const void *p : {(const void *)d_x, (const void *)d_o, (const void *)d_g, (const void *)d_dx, (const void *)d_w,
                          (const void *)d_b, (const void *)d_m, (const void *)d_r, (const void *)d_dw, (const void *)d_db,
                          (const void *)d_hm, (const void *)d_hr, (const void *)d_db2})
        dfree(p);
}

template <class T>
static void test_rmsnorm(long N, long C)
{
    float tol = tol_for<T>(2e-5f);
    vec x = rounded<T>(rnd(N * C, -2.0f, 2.0f)), w = rnd(C, 0.5f, 1.5f), g = rounded<T>(rnd(N * C));
    vec dx0 = rounded<T>(rnd(N * C)), dw0 = rnd(C);
    vec out((size_t)(N * C)), rstd((size_t)N), dx = dx0, dw = dw0;
    sr_rmsnorm_fwd(out.data(), rstd.data(), x.data(), w.data(), (int)N, (int)C, 1e-6f);
    sr_rmsnorm_bwd(dx.data(), dw.data(), g.data(), x.data(), w.data(), rstd.data(), (int)N, (int)C);
    T *d_x = up<T>(x), *d_o = up<T>(vec((size_t)(N * C))), *d_g = up<T>(g), *d_dx = up<T>(dx0);
    float *d_w = up<float>(w), *d_r = up<float>(vec((size_t)N)), *d_dw = up<float>(dw0);
    srk_rmsnorm_fwd(d_o, d_r, d_x, d_w, N, C, 1e-6f);
    expect(fmt("rmsnorm %s fwd N=%ld C=%ld", tname<T>(), N, C).c_str(), down(d_o, N * C), out, tol);
    expect(fmt("rmsnorm %s rstd", tname<T>()).c_str(), down(d_r, N), rstd, 1e-5f);
    float *d_hr = up<float>(rstd);
    srk_rmsnorm_bwd(d_dx, d_dw, d_g, d_x, d_w, d_hr, N, C);
    expect(fmt("rmsnorm %s bwd dx", tname<T>()).c_str(), down(d_dx, N * C), dx, tol);
    expect(fmt("rmsnorm %s bwd dw", tname<T>()).c_str(), down(d_dw, C), dw, tol);
    no_error("rmsnorm");
    for (const void *p : {(const void *)d_x, (const void *)d_o, (const void *)d_g, (const void *)d_dx, (const void *)d_w,
                          (const void *)d_r, (const void *)d_dw, (const void *)d_hr})
        dfree(p);
}

template <class T>
static void test_softmax(long N, long C)
{
    float tol = tol_for<T>(1e-5f);
    vec x = rounded<T>(rnd(N * C, -5.0f, 5.0f)), g = rounded<T>(rnd(N * C)), dx0 = rounded<T>(rnd(N * C));
    vec out((size_t)(N * C)), dx = dx0;
    sr_softmax_fwd(out.data(), x.data(), (int)N, (int)C);
    vec y = rounded<T>(out); /* the backward reads the stored output */
    sr_softmax_bwd(dx.data(), g.data(), y.data(), (int)N, (int)C);
    T *d_x = up<T>(x), *d_o = up<T>(vec((size_t)(N * C))), *d_g = up<T>(g), *d_dx = up<T>(dx0);
    srk_softmax_fwd(d_o, d_x, N, C);
    expect(fmt("softmax %s fwd N=%ld C=%ld", tname<T>(), N, C).c_str(), down(d_o, N * C), out, tol);
    T *d_y = up<T>(y);
    srk_softmax_bwd(d_dx, d_g, d_y, N, C);
    expect(fmt("softmax %s bwd", tname<T>()).c_str(), down(d_dx, N * C), dx, tol);
    no_error("softmax");
    for (const void *p : {(const void *)d_x, (const void *)d_o, (const void *)d_g, (const void *)d_dx, (const void *)d_y})
        dfree(p);
}

/* logits are float in bf16 programs too (the sampler reads them) */
/* logits and their gradient in T (bf16: as a bf16 program keeps them), the loss and lse in float */
/* vp: the vocab-parallel loss on one tensor rank (tp 1: no collectives) against the host's */
template <class T>
static void test_crossentropy(long N, long V, long nv = 0, bool vp = false)
{
    float tol = tol_for<T>(1e-5f);
    sr_exec e;
    memset(&e, 0, sizeof e);
    e.tp = 1;
    const char *name = vp ? "crossentropy_vp" : "crossentropy";
    vec l = rounded<T>(rnd(N * V, -4.0f, 4.0f)), dl0 = rounded<T>(rnd(N * V));
    std::vector<int32_t> t((size_t)N);
    for (long i = 0; i < N; i++) t[(size_t)i] = (int32_t)((i * 13 + 5) % V);
    t[1] = -100; /* ignored rows: no loss, no gradient, still counted in N */
    if (N > 5) t[5] = (int32_t)V;
    vec lse((size_t)N), dl = dl0;
    float loss = vp ? sr_crossentropy_vp_fwd(&e, lse.data(), l.data(), t.data(), (int)N, (int)V, (int)nv)
                    : sr_crossentropy_fwd(lse.data(), l.data(), t.data(), (int)N, (int)V, (int)nv);
    if (vp) sr_crossentropy_vp_bwd(&e, dl.data(), l.data(), lse.data(), t.data(), 0.7f, (int)N, (int)V, (int)nv);
    else sr_crossentropy_bwd(dl.data(), l.data(), lse.data(), t.data(), 0.7f, (int)N, (int)V, (int)nv);
    T *d_l = up<T>(l), *d_dl = up<T>(dl0);
    float *d_lse = up<float>(vec((size_t)N)), *d_loss = up<float>(vec(1)), *d_seed = up<float>(vec(1, 0.7f));
    int32_t *d_t = up_i(t);
    auto fwd = [&](float *loss_, float *lse_, T *l_) {
        if (vp) srk_crossentropy_vp_fwd(&e, loss_, lse_, l_, d_t, N, V, nv);
        else srk_crossentropy_fwd(loss_, lse_, l_, d_t, N, V, nv);
    };
    auto bwd = [&](T *d_, const T *l_, int over) { /* over: written (into zeros), else added */
        if (vp) srk_crossentropy_vp_bwd(&e, d_, l_, d_lse, d_t, d_seed, N, V, nv, over);
        else srk_crossentropy_bwd(d_, l_, d_lse, d_t, d_seed, N, V, nv, over);
    };
    fwd(d_loss, d_lse, d_l);
    /* the loss and lse from the same (rounded) logits: float sums, float's tolerance */
    expect(fmt("%s %s loss N=%ld V=%ld classes %ld", name, tname<T>(), N, V, nv ? nv : V).c_str(), down(d_loss, 1),
           vec(1, loss), 1e-5f);
    expect(fmt("%s lse", name).c_str(), down(d_lse, N), lse, 1e-5f);
    bwd(d_dl, d_l, 0);
    expect(fmt("%s %s bwd (ignored targets, accumulates)", name, tname<T>()).c_str(), down(d_dl, N * V), dl, tol);
    check(fabsf(srk_get_scalar(d_loss) - loss) <= 1e-5f * fabsf(loss), "srk_get_scalar reads the loss back");
    /* a training step's forward (lossfuse.c): the loss, lse and, over the logits, the gradient
     * the backward writes when it overwrites (from NaN), bit for bit */
    T *d_l2 = up<T>(l), *d_fresh = up<T>(vec((size_t)(N * V), NAN));
    float *d_lse2 = up<float>(vec((size_t)N)), *d_loss2 = up<float>(vec(1));
    bwd(d_fresh, d_l, 1);
    if (vp) srk_crossentropy_vp_fwd_bwd(&e, d_loss2, d_lse2, d_l2, d_t, 0.7f, N, V, nv);
    else srk_crossentropy_fwd_bwd(d_loss2, d_lse2, d_l2, d_t, 0.7f, N, V, nv);
    expect(fmt("%s %s fwd+bwd (a training forward): the loss", name, tname<T>()).c_str(), down(d_loss2, 1),
           down(d_loss, 1), 0);
    expect(fmt("%s fwd+bwd: lse", name).c_str(), down(d_lse2, N), down(d_lse, N), 0);
    expect(fmt("%s fwd+bwd: the gradient over the logits (padding, ignored rows: 0)", name).c_str(), down(d_l2, N * V),
           down(d_fresh, N * V), 0);
    bwd(d_l, d_l, 1); /* in place, after a plain forward */
    expect(fmt("%s bwd in place over the logits", name).c_str(), down(d_l, N * V), down(d_fresh, N * V), 0);
    no_error(name);
    for (const void *p : {(const void *)d_l, (const void *)d_lse, (const void *)d_loss, (const void *)d_dl,
                          (const void *)d_seed, (const void *)d_t, (const void *)d_l2, (const void *)d_fresh,
                          (const void *)d_lse2, (const void *)d_loss2})
        dfree(p);
}

/* ---- attention ------------------------------------------------------------------------------- */
/* which path ran since the counters read tc0, mma0, cd0 */
static const char *attn_path_since(long tc0, long mma0, long cd0)
{
    switch (srk_pick::path_since(tc0, mma0, cd0)) {
    case SRK_ATTN_CUDNN: return "cuDNN";
    case SRK_ATTN_MMA: return "tensor cores (mma.sync)";
    case SRK_ATTN_WMMA: return "tensor cores (wmma)";
    default: return "the SIMT kernels";
    }
}

/* sharp > 1 widens q's range: scores of spread ~0.33 sharp (hd 64), so that a row's weights sit on
 * a few keys and its running maximum moves from tile to tile, as in a trained model (at sharp 1
 * the weights are near uniform, and an error in the rescaling or in one score is averaged away) */
template <class T>
static void test_attention(long B, long T_, long C, long NH, float sharp = 1.0f)
{
    float tol = tol_for<T>(2e-5f);
    long n = B * T_ * C;
    vec q = rounded<T>(rnd(n, -sharp, sharp)), k = rounded<T>(rnd(n)), v = rounded<T>(rnd(n)), g = rounded<T>(rnd(n));
    vec dq0 = rounded<T>(rnd(n)), dk0 = rounded<T>(rnd(n)), dv0 = rounded<T>(rnd(n));
    vec out((size_t)n), att((size_t)(B * NH * T_ * T_)), dq = dq0, dk = dk0, dv = dv0;
    sr_attention_fwd(out.data(), att.data(), q.data(), k.data(), v.data(), (int)B, (int)T_, (int)C, (int)NH);
    sr_attention_bwd(dq.data(), dk.data(), dv.data(), g.data(), q.data(), k.data(), v.data(), att.data(), (int)B,
                     (int)T_, (int)C, (int)NH);
    T *d_q = up<T>(q), *d_k = up<T>(k), *d_v = up<T>(v), *d_g = up<T>(g), *d_o = up<T>(vec((size_t)n));
    T *d_dq = up<T>(dq0), *d_dk = up<T>(dk0), *d_dv = up<T>(dv0);
    float *d_aux = NULL;
    cudaMalloc((void **)&d_aux, srk_attention_aux_bytes(B, T_, C, NH, sizeof(T)));
    long tc0 = srk_ctx.attn_tc_launches, mma0 = srk_ctx.attn_mma_launches, cd0 = srk_ctx.attn_cudnn_calls;
    srk_attention_fwd(d_o, d_aux, d_q, d_k, d_v, B, T_, C, NH);
    long hd = C / NH;
    bool bf = srk_dt<T>::value == SRK_BF16;
    bool want_cudnn = bf && srk_ctx.attn_mode == SRK_ATTN_CUDNN && srk_ctx.cc_major >= 8 && hd % 16 == 0 && hd >= 32 &&
                      hd <= 128;
    bool want_tc = !want_cudnn && bf && (hd == 32 || hd == 64 || hd == 128) && srk_ctx.attn_mode != SRK_ATTN_SIMT;
    bool want_mma = want_tc && hd <= 64 && srk_ctx.attn_mode == SRK_ATTN_MMA;
    const char *path = attn_path_since(tc0, mma0, cd0);
    check((srk_ctx.attn_tc_launches > tc0) == want_tc && (srk_ctx.attn_mma_launches > mma0) == want_mma &&
              (srk_ctx.attn_cudnn_calls > cd0) == want_cudnn,
          "attention %s hd %ld runs on %s", tname<T>(), hd, path);
    expect(fmt("attention %s fwd B=%ld T=%ld C=%ld NH=%ld (hd %ld, %s%s)", tname<T>(), B, T_, C, NH, C / NH, path,
               sharp > 1.0f ? fmt(", q x%g: sharp scores", sharp).c_str() : "")
               .c_str(),
           down(d_o, n), out, tol);
    srk_attention_bwd(d_dq, d_dk, d_dv, d_g, d_q, d_k, d_v, d_aux, B, T_, C, NH);
    expect(fmt("attention %s bwd dq", tname<T>()).c_str(), down(d_dq, n), dq, tol);
    expect(fmt("attention %s bwd dk", tname<T>()).c_str(), down(d_dk, n), dk, tol);
    expect(fmt("attention %s bwd dv", tname<T>()).c_str(), down(d_dv, n), dv, tol);
    /* dq NULL: dk, dv alone */
    vec dk2 = dk0, dv2 = dv0;
    sr_attention_bwd(NULL, dk2.data(), dv2.data(), g.data(), q.data(), k.data(), v.data(), att.data(), (int)B, (int)T_,
                     (int)C, (int)NH);
    T *d_dk2 = up<T>(dk0), *d_dv2 = up<T>(dv0);
    srk_attention_bwd((T *)NULL, d_dk2, d_dv2, d_g, d_q, d_k, d_v, d_aux, B, T_, C, NH);
    expect(fmt("attention %s bwd with dq NULL: dk", tname<T>()).c_str(), down(d_dk2, n), dk2, tol);
    expect(fmt("attention %s bwd with dq NULL: dv", tname<T>()).c_str(), down(d_dv2, n), dv2, tol);
    /* fresh ($z): gradients that start as NaN, overwritten; against the host's from zeros */
    vec dq3((size_t)n), dk3((size_t)n), dv3((size_t)n), nan_n((size_t)n, NAN);
    sr_attention_bwd(dq3.data(), dk3.data(), dv3.data(), g.data(), q.data(), k.data(), v.data(), att.data(), (int)B,
                     (int)T_, (int)C, (int)NH);
    T *d_dq3 = up<T>(nan_n), *d_dk3 = up<T>(nan_n), *d_dv3 = up<T>(nan_n);
    srk_attention_bwd(d_dq3, d_dk3, d_dv3, d_g, d_q, d_k, d_v, d_aux, B, T_, C, NH, 7);
    expect(fmt("attention %s bwd, fresh: dq", tname<T>()).c_str(), down(d_dq3, n), dq3, tol);
    expect(fmt("attention %s bwd, fresh: dk", tname<T>()).c_str(), down(d_dk3, n), dk3, tol);
    expect(fmt("attention %s bwd, fresh: dv", tname<T>()).c_str(), down(d_dv3, n), dv3, tol);
    /* fresh 5: dq and dv overwritten, dk accumulates (each gradient reads its own bit) */
    T *d_dq5 = up<T>(nan_n), *d_dk5 = up<T>(dk0), *d_dv5 = up<T>(nan_n);
    srk_attention_bwd(d_dq5, d_dk5, d_dv5, d_g, d_q, d_k, d_v, d_aux, B, T_, C, NH, 5);
    expect(fmt("attention %s bwd, fresh 5: dq", tname<T>()).c_str(), down(d_dq5, n), dq3, tol);
    expect(fmt("attention %s bwd, fresh 5: dk accumulates", tname<T>()).c_str(), down(d_dk5, n), dk, tol);
    expect(fmt("attention %s bwd, fresh 5: dv", tname<T>()).c_str(), down(d_dv5, n), dv3, tol);
    dfree(d_dq3), dfree(d_dk3), dfree(d_dv3), dfree(d_dq5), dfree(d_dk5), dfree(d_dv5);
    no_error("attention");
    for (const void *p : {(const void *)d_q, (const void *)d_k, (const void *)d_v, (const void *)d_g, (const void *)d_o,
                          (const void *)d_dq, (const void *)d_dk, (const void *)d_dv, (const void *)d_aux,
                          (const void *)d_dk2, (const void *)d_dv2})
        dfree(p);
}

/* q|k|v packed in one (B, T, 3C) tensor and read in place ($attention_qkv, compiler/qkvpack.c):
 * against the host's packed kernels; d(qkv) accumulating, then fresh from NaN (the three parts
 * are all written) */
template <class T>
static void test_attention_qkv(long B, long T_, long C, long NH)
{
    float tol = tol_for<T>(2e-5f);
    long n = B * T_ * C, n3 = 3 * n;
    vec x = rounded<T>(rnd(n3)), g = rounded<T>(rnd(n)), dx0 = rounded<T>(rnd(n3));
    vec out((size_t)n), att((size_t)(B * NH * T_ * T_)), dx = dx0, dx1((size_t)n3);
    sr_attention_qkv_fwd(out.data(), att.data(), x.data(), (int)B, (int)T_, (int)C, (int)NH);
    sr_attention_qkv_bwd(dx.data(), g.data(), x.data(), att.data(), (int)B, (int)T_, (int)C, (int)NH);
    sr_attention_qkv_bwd(dx1.data(), g.data(), x.data(), att.data(), (int)B, (int)T_, (int)C, (int)NH);
    T *d_x = up<T>(x), *d_g = up<T>(g), *d_o = up<T>(vec((size_t)n)), *d_dx = up<T>(dx0);
    T *d_dx1 = up<T>(vec((size_t)n3, NAN));
    float *d_aux = NULL;
    cudaMalloc((void **)&d_aux, srk_attention_aux_bytes(B, T_, C, NH, sizeof(T)));
    long tc0 = srk_ctx.attn_tc_launches, mma0 = srk_ctx.attn_mma_launches, cd0 = srk_ctx.attn_cudnn_calls;
    srk_attention_qkv_fwd(d_o, d_aux, d_x, B, T_, C, NH);
    const char *path = attn_path_since(tc0, mma0, cd0);
    expect(fmt("attention q|k|v packed %s fwd B=%ld T=%ld C=%ld NH=%ld (hd %ld, %s)", tname<T>(), B, T_, C, NH, C / NH,
               path).c_str(),
           down(d_o, n), out, tol);
    srk_attention_qkv_bwd(d_dx, d_g, d_x, d_aux, B, T_, C, NH);
    expect(fmt("attention q|k|v packed %s bwd: d(qkv) accumulates", tname<T>()).c_str(), down(d_dx, n3), dx, tol);
    srk_attention_qkv_bwd(d_dx1, d_g, d_x, d_aux, B, T_, C, NH, 1);
    expect(fmt("attention q|k|v packed %s bwd, fresh: d(qkv) overwritten", tname<T>()).c_str(), down(d_dx1, n3), dx1,
           tol);
    no_error("attention q|k|v packed");
    for (const void *p : {(const void *)d_x, (const void *)d_g, (const void *)d_o, (const void *)d_dx,
                          (const void *)d_dx1, (const void *)d_aux})
        dfree(p);
}

/* cuDNN's attention can run here: it loads and plans a small shape both ways (else why, once) */
static bool cudnn_usable(const char **why = NULL)
{
    static int known = -1;
    static char err[512];
    if (known < 0) {
        known = srk_cudnn_attn_workspace(0, 1, 64, 64, 64, 1, 0.125f, err, sizeof err) >= 0 &&
                srk_cudnn_attn_workspace(1, 1, 64, 64, 64, 1, 0.125f, err, sizeof err) >= 0;
        if (!known) printf("# cuDNN attention (SHARDC_CUDA_ATTN=cudnn) not tested here: %s\n", err);
    }
    if (why) *why = err;
    return known == 1;
}

/* SHARDC_CUDA_ATTN=cudnn where cuDNN cannot run (the emulator's runtime never has it): the
 * first attention call records an error that says why; nothing else runs */
static void test_cudnn_unavailable(void)
{
    const char *why;
    if (cudnn_usable(&why)) return;
    int mode = srk_ctx.attn_mode;
    srk_ctx.attn_mode = SRK_ATTN_CUDNN;
    long B = 1, T = 16, C = 64, NH = 1, n = B * T * C, tc0 = srk_ctx.attn_tc_launches;
    bf16 *q = up<bf16>(rnd(n)), *o = up<bf16>(vec((size_t)n));
    float *aux = NULL;
    cudaMalloc((void **)&aux, srk_attention_aux_bytes(B, T, C, NH, sizeof(bf16)));
    srk_attention_fwd(o, aux, q, q, q, B, T, C, NH);
    check(srk_ctx.failed && strstr(srk_ctx.err, "SHARDC_CUDA_ATTN=cudnn: ") && strstr(srk_ctx.err, why) &&
              srk_ctx.attn_tc_launches == tc0,
          "SHARDC_CUDA_ATTN=cudnn without cuDNN: the attention fails and says why (%s)", srk_ctx.err);
    srk_ctx.failed = 0;
    srk_ctx.attn_mode = mode;
    for (const void *p : {(const void *)q, (const void *)o, (const void *)aux}) dfree(p);
}

/* SHARDC_CUDA_ATTN=auto (srk_attention_pick.cuh): the trial keeps a path that agrees with simt and
 * drops one that does not (spoil: its results altered as a wrong kernel's would be); a program's
 * call under auto runs the chosen path, once tried per head layout, and gives the host's results */
static void test_attention_auto(void)
{
    int mode0 = srk_ctx.attn_mode;
    char note[1024];
    bool cd = cudnn_usable();
    struct {
        long B, T, C, NH, L;
    } shapes[] = {{2, 37, 64, 2, 192}, {2, 37, 64, 2, 64}, {2, 70, 128, 2, 3 * 128}, {1, 40, 96, 1, 96}};
    for (auto &s : shapes) {
        long hd = s.C / s.NH;
        int m = srk_pick::trial(s.B, s.T, s.C, s.NH, s.L, -1, note, sizeof note);
        bool mma_ok = hd == 32 || hd == 64, cd_ok = cd && hd % 16 == 0 && hd >= 32 && hd <= 128;
        bool tc = hd == 32 || hd == 64 || hd == 128;
        bool any = tc || cd_ok; /* else only simt takes it */
        auto timed = [&](const char *path) { /* the note gives the path's time */
            const char *p = strstr(note, fmt(" %s ", path).c_str());
            return p && isdigit((unsigned char)p[strlen(path) + 2]);
        };
        check(!srk_ctx.failed && (any ? strstr(note, "using ") && m != SRK_ATTN_SIMT
                                      : strstr(note, "no other path takes this layout: simt") && m == SRK_ATTN_SIMT) &&
                  timed("wmma") == tc && timed("mma.sync") == mma_ok && timed("cudnn") == cd_ok &&
                  (strstr(note, "cudnn unavailable") != NULL) == !cd_ok &&
                  !strstr(note, "differs from"),
              "attention trial, hd %ld%s: %s (%s)", hd, s.L != s.C ? ", packed" : "",
              any ? "a path that agrees" : "simt, the one path", note);
        srk_ctx.failed = 0;
        for (int spoil : {SRK_ATTN_WMMA, SRK_ATTN_MMA, SRK_ATTN_CUDNN}) {
            if ((spoil == SRK_ATTN_MMA && !mma_ok) || (spoil == SRK_ATTN_CUDNN && !cd_ok) ||
                (spoil == SRK_ATTN_WMMA && !tc))
                continue;
            m = srk_pick::trial(s.B, s.T, s.C, s.NH, s.L, spoil, note, sizeof note);
            check(m != spoil && !srk_ctx.failed &&
                      strstr(note, fmt("%s differs from simt", srk_pick::name(spoil)).c_str()),
                  "attention trial, hd %ld: a wrong %s is not used (%s)", hd, srk_pick::name(spoil), note);
            srk_ctx.failed = 0;
        }
    }
    /* a program's calls: the trial once per layout, its choice runs, the host's results */
    srk_ctx.attn_mode = SRK_ATTN_AUTO;
    srk_ctx.attn_picks = 0, srk_ctx.attn_note[0] = 0;
    long tc0 = srk_ctx.attn_tc_launches, mma0 = srk_ctx.attn_mma_launches, cd0 = srk_ctx.attn_cudnn_calls;
    test_attention_qkv<bf16>(2, 37, 64, 2);
    int ran = srk_pick::path_since(tc0, mma0, cd0);
    check(srk_ctx.attn_picks == 1 && srk_ctx.attn_pick[0].mode == ran && srk_ctx.attn_mode == SRK_ATTN_AUTO &&
              strstr(srk_ctx.attn_note, "using ") && !strchr(srk_ctx.attn_note, '\n') &&
              !strstr(srk_ctx.attn_note, "differs from"),
          "auto: one trial for the layout, its choice ran (%s), the mode is auto again after the call: %s",
          srk_pick::name(ran), srk_ctx.attn_note);
    test_attention_qkv<bf16>(1, 19, 64, 2); /* the same layout: no second trial */
    test_attention_qkv<bf16>(2, 19, 32, 1); /* another layout: a second line */
    const char *nl = strchr(srk_ctx.attn_note, '\n');
    check(srk_ctx.attn_picks == 2 && nl && strstr(nl, "using ") && !strchr(nl + 1, '\n'),
          "auto: a trial per head layout, a line each (%d trials)", srk_ctx.attn_picks);
    srk_ctx.attn_mode = mode0;
    no_error("attention auto");
}

/* ---- fresh gradients ($z): the call overwrites, never reads ------------------------------------ */
/* The gradients start as NaN on the device (as memory nobody cleared) and at 0 on the host:
 * a kernel that reads one it was told to overwrite, or leaves an element unwritten, shows NaN */
template <class T>
static void test_fresh(void)
{
    float tol = tol_for<T>(2e-5f);
    auto nans = [](long n) { return vec((size_t)n, NAN); };
    for (int tr = 0; tr < 2; tr++) { /* matmul, matmul_t: da and db fresh; then db accumulating */
        long M = 37, K = 19, N = 24;
        vec a = rounded<T>(rnd(M * K)), b = rnd(K * N), g = rounded<T>(rnd(M * N)), db0 = rnd(K * N);
        vec da((size_t)(M * K)), db((size_t)(K * N)), db2 = db0;
        T *d_a = up<T>(a), *d_g = up<T>(g), *d_da = up<T>(nans(M * K));
        float *d_b = up<float>(b), *d_db = up<float>(nans(K * N)), *d_db2 = up<float>(db0);
        T *d_da2 = up<T>(nans(M * K));
        if (tr) {
            sr_matmul_t_bwd(da.data(), db.data(), g.data(), a.data(), b.data(), (int)M, (int)K, (int)N);
            sr_matmul_t_bwd(NULL, db2.data(), g.data(), a.data(), b.data(), (int)M, (int)K, (int)N);
            srk_matmul_t_bwd(d_da, d_db, d_g, d_a, d_b, M, K, N, 3);
            srk_matmul_t_bwd(d_da2, d_db2, d_g, d_a, d_b, M, K, N, 1);
        } else {
            sr_matmul_bwd(da.data(), db.data(), g.data(), a.data(), b.data(), (int)M, (int)K, (int)N);
            sr_matmul_bwd(NULL, db2.data(), g.data(), a.data(), b.data(), (int)M, (int)K, (int)N);
            srk_matmul_bwd(d_da, d_db, d_g, d_a, d_b, M, K, N, 3);
            srk_matmul_bwd(d_da2, d_db2, d_g, d_a, d_b, M, K, N, 1);
        }
        const char *nm = tr ? "matmul_t" : "matmul";
        expect(fmt("fresh %s %s bwd: da overwritten", nm, tname<T>()).c_str(), down(d_da, M * K), da, tol);
        expect(fmt("fresh %s %s bwd: db overwritten", nm, tname<T>()).c_str(), down(d_db, K * N), db, tol);
        expect(fmt("fresh %s %s bwd, bit 0 only: da overwritten", nm, tname<T>()).c_str(), down(d_da2, M * K), da, tol);
        expect(fmt("fresh %s %s bwd, bit 0 only: db accumulates", nm, tname<T>()).c_str(), down(d_db2, K * N), db2, tol);
        for (const void *q : {(const void *)d_a, (const void *)d_g, (const void *)d_da, (const void *)d_b,
                              (const void *)d_db, (const void *)d_db2, (const void *)d_da2})
            dfree(q);
    }
    { /* an empty product (N = 0): gradients of zeros */
        T *d_da = up<T>(nans(20));
        float *d_db = up<float>(nans(4 * 3));
        srk_matmul_bwd(d_da, d_db, (const T *)NULL, (const T *)NULL, (const float *)NULL, 5L, 4L, 0L, 3);
        expect(fmt("fresh matmul %s bwd of an empty product: zeros", tname<T>()).c_str(), down(d_da, 20), vec(20), 0);
        dfree(d_da), dfree(d_db);
    }
    /* add, sub, mul: element-wise (8 at a time and not) and broadcast (column sums) */
    for (long nb : {13L, 40L * 24, 301L})
        for (int op = 0; op < 3; op++) {
            long n = nb == 13 ? 37 * 13 : nb;
            vec a = rounded<T>(rnd(n)), b = rounded<T>(rnd(nb)), g = rounded<T>(rnd(n));
            vec da((size_t)n), db((size_t)nb);
            if (op == 0) sr_add_bwd(da.data(), db.data(), g.data(), n, nb);
            else if (op == 1) sr_sub_bwd(da.data(), db.data(), g.data(), n, nb);
            else sr_mul_bwd(da.data(), db.data(), g.data(), a.data(), b.data(), n, nb);
            T *d_a = up<T>(a), *d_b = up<T>(b), *d_g = up<T>(g), *d_da = up<T>(nans(n)), *d_db = up<T>(nans(nb));
            if (op == 0) srk_add_bwd(d_da, d_db, d_g, n, nb, 3);
            else if (op == 1) srk_sub_bwd(d_da, d_db, d_g, n, nb, 3);
            else srk_mul_bwd(d_da, d_db, d_g, d_a, d_b, n, nb, 3);
            static const char *names[] = {"add", "sub", "mul"};
            expect(fmt("fresh %s %s bwd n=%ld nb=%ld: da", names[op], tname<T>(), n, nb).c_str(), down(d_da, n), da, tol);
            expect(fmt("fresh %s %s bwd: db", names[op], tname<T>()).c_str(), down(d_db, nb), db, tol);
            for (const void *q : {(const void *)d_a, (const void *)d_b, (const void *)d_g, (const void *)d_da,
                                  (const void *)d_db})
                dfree(q);
        }
    for (long n : {777L, 776L}) { /* scale, the activations (776: 8 at a time), dropout */
        vec x = rounded<T>(rnd(n, -4.0f, 4.0f)), g = rounded<T>(rnd(n));
        T *d_x = up<T>(x), *d_g = up<T>(g);
        for (int k = 0; k < 7; k++) {
            vec dx((size_t)n);
            T *d_dx = up<T>(nans(n));
            const char *nm[] = {"scale", "gelu", "relu", "silu", "dropout p=0", "dropout p=0.1", "dropout p=1"};
            float p = k == 5 ? 0.1f : k == 6 ? 1.0f : 0.0f;
            if (k == 0) sr_scale_bwd(dx.data(), g.data(), 0.37f, n), srk_scale_bwd(d_dx, d_g, 0.37f, n, 1);
            if (k == 1) sr_gelu_bwd(dx.data(), g.data(), x.data(), n), srk_gelu_bwd(d_dx, d_g, d_x, n, 1);
            if (k == 2) sr_relu_bwd(dx.data(), g.data(), x.data(), n), srk_relu_bwd(d_dx, d_g, d_x, n, 1);
            if (k == 3) sr_silu_bwd(dx.data(), g.data(), x.data(), n), srk_silu_bwd(d_dx, d_g, d_x, n, 1);
            if (k >= 4) {
                sr_dropout_bwd(dx.data(), g.data(), n, p, 1337, 5, 17, 1000);
                srk_dropout_bwd(d_dx, d_g, n, p, 1337, 5, 17, 1000, 1);
            }
            expect(fmt("fresh %s %s bwd n=%ld", nm[k], tname<T>(), n).c_str(), down(d_dx, n), dx, tol);
            dfree(d_dx);
        }
        dfree(d_x), dfree(d_g);
    }
    if (srk_dt<T>::value == SRK_F32) { /* cross-entropy (float logits): ignored rows and padding written 0 */
        long N = 37, V = 101, nv = 90;
        vec l = rnd(N * V, -4.0f, 4.0f), lse((size_t)N), dl((size_t)(N * V));
        std::vector<int32_t> t((size_t)N);
        for (long i = 0; i < N; i++) t[(size_t)i] = (int32_t)((i * 13 + 5) % nv);
        t[1] = -100, t[5] = (int32_t)nv;
        sr_crossentropy_fwd(lse.data(), l.data(), t.data(), (int)N, (int)V, (int)nv);
        sr_crossentropy_bwd(dl.data(), l.data(), lse.data(), t.data(), 0.7f, (int)N, (int)V, (int)nv);
        float *d_l = up<float>(l), *d_lse = up<float>(lse), *d_dl = up<float>(nans(N * V)), *d_seed = up<float>(vec(1, 0.7f));
        int32_t *d_t = up_i(t);
        srk_crossentropy_bwd(d_dl, d_l, d_lse, d_t, d_seed, N, V, nv, 1);
        expect("fresh crossentropy bwd (ignored rows, padded classes)", down(d_dl, N * V), dl, 1e-5f);
        for (const void *q : {(const void *)d_l, (const void *)d_lse, (const void *)d_dl, (const void *)d_seed,
                              (const void *)d_t})
            dfree(q);
    }
    no_error("fresh gradients");
}

/* ---- the backend: memory, optimizer, norms ------------------------------------------------------- */
static void test_backend(void)
{
    const sr_backend *be = &sr_backend_cuda;
    for (long n : {1L, 1000L, 123457L}) {
        vec p = rnd(n), g = rnd(n), m = rnd(n, 0.0f, 0.1f), v = rnd(n, 0.0f, 0.1f);
        float *dp = (float *)be->alloc(sizeof(float) * (size_t)n), *dg = (float *)be->alloc(sizeof(float) * (size_t)n);
        float *dm = (float *)be->alloc(sizeof(float) * (size_t)n), *dv = (float *)be->alloc(sizeof(float) * (size_t)n);
        check(dp && dg && dm && dv, "backend alloc n=%ld", n);
        if (!(dp && dg && dm && dv)) return;
        vec z((size_t)n);
        be->d2h(z.data(), dp, sizeof(float) * (size_t)n);
        bool zero = true;
        for (float x : z) zero &= x == 0.0f;
        check(zero, "backend alloc returns zeroed memory");
        be->h2d(dp, p.data(), sizeof(float) * (size_t)n);
        be->h2d(dg, g.data(), sizeof(float) * (size_t)n);
        be->h2d(dm, m.data(), sizeof(float) * (size_t)n);
        be->h2d(dv, v.data(), sizeof(float) * (size_t)n);
        double want = sr_sumsq(g.data(), n), got = be->sumsq(dg, n);
        check(fabs(got - want) <= 1e-9 * want, "backend sumsq n=%ld: %.12g vs %.12g", n, got, want);
        for (long t = 1; t <= 3; t++) {
            sr_adamw_step(p.data(), g.data(), m.data(), v.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
            be->adamw(dp, dg, dm, dv, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
        }
        vec gp((size_t)n), gm((size_t)n), gv((size_t)n);
        be->d2h(gp.data(), dp, sizeof(float) * (size_t)n);
        be->d2h(gm.data(), dm, sizeof(float) * (size_t)n);
        be->d2h(gv.data(), dv, sizeof(float) * (size_t)n);
        expect(fmt("backend adamw n=%ld: params", n).c_str(), gp, p, 1e-6f);
        expect("backend adamw: m", gm, m, 1e-6f);
        expect("backend adamw: v", gv, v, 1e-6f);
        be->scale(dg, 0.25f, n);
        be->copy(dm, dg, sizeof(float) * (size_t)n);
        for (auto &x : g) x *= 0.25f;
        be->d2h(gm.data(), dm, sizeof(float) * (size_t)n);
        expect("backend scale, then copy", gm, g, 0.0f);
        be->zero(dg, n);
        be->d2h(gm.data(), dg, sizeof(float) * (size_t)n);
        zero = true;
        for (float x : gm) zero &= x == 0.0f;
        check(zero, "backend zero");
        check(be->sync() == SR_OK, "backend sync");
        be->free(dp);
        be->free(dg);
        be->free(dm);
        be->free(dv);
    }
    size_t used, high, cap;
    sr_cuda_arena_stats(&used, &high, &cap);
    /* what stays is the kernels' scratch */
    check(used < 65536 && high > 0 && cap >= high, "arena: freed blocks coalesce (used %zu, high %zu, capacity %zu)", used,
          high, cap);
}

/* the parameters' bf16 shadow (bf16 program): made by srk_bind_params once
 * a step; parameters the comm layer writes during the step (ZeRO-1's gather
 * in the forward, which NCCL writes behind the backend's back) reach it only
 * through the backend's params_arrived, for their range alone */
static void test_shadow(void)
{
    const sr_backend *be = &sr_backend_cuda;
    const long n = 1000, lo = 300, k = 400;
    vec p = rnd(n), q = rnd(n);
    /* not freed: the shadow stays bound to it, and no later buffer may take its address */
    float *dp = (float *)be->alloc(sizeof(float) * (size_t)n);
    if (!dp) {
        check(false, "shadow: alloc");
        return;
    }
    be->h2d(dp, p.data(), sizeof(float) * (size_t)n);
    srk_bind_params(dp, n, 7);
    auto shadow_is = [&](const vec &want_lo, const char *what) { /* want_lo in [lo, lo+k), p elsewhere */
        std::vector<bf16> s((size_t)n);
        be->d2h(s.data(), srk_bf16_view(dp, n, SRK_SCR_CONV_C), sizeof(bf16) * (size_t)n);
        long bad = 0;
        for (long i = 0; i < n; i++) {
            float want = __bfloat162float(__float2bfloat16(i >= lo && i < lo + k ? want_lo[(size_t)i] : p[(size_t)i]));
            bad += __bfloat162float(s[(size_t)i]) != want;
        }
        check(bad == 0, "shadow: %s (%ld of %ld differ)", what, bad, n);
    };
    shadow_is(p, "srk_bind_params makes it");
    /* the comm layer writes [lo, lo+k) in device memory, not through the backend */
    check(cudaMemcpy(dp + lo, q.data() + lo, sizeof(float) * (size_t)k, cudaMemcpyHostToDevice) == cudaSuccess,
          "shadow: a write behind the backend's back");
    srk_bind_params(dp, n, 7);
    shadow_is(p, "the same step's next srk_bind_params does not see such a write");
    be->params_arrived(dp + lo, k);
    shadow_is(q, "params_arrived refreshes its range, and only it");
    /* a write elsewhere through the backend (a microbatch's tokens) leaves the shadow as it is
     * (the parameters' change behind its back shows a conversion); one into them does not */
    vec r = rnd(n);
    check(cudaMemcpy(dp + lo, r.data() + lo, sizeof(float) * (size_t)k, cudaMemcpyHostToDevice) == cudaSuccess,
          "shadow: a second write behind the backend's back");
    float *other = (float *)be->alloc(sizeof(float) * 64);
    be->h2d(other, r.data(), sizeof(float) * 64);
    srk_bind_params(dp, n, 7);
    shadow_is(q, "a copy into other memory does not make it stale");
    be->h2d(dp + lo, r.data() + lo, sizeof(float) * (size_t)k);
    srk_bind_params(dp, n, 7);
    shadow_is(r, "a copy into the parameters does");
    be->free(other);
}

/* errors name the kernel and the generated line */
static __global__ void too_big_kernel(float *x) { x[threadIdx.x] = 0.0f; }
/* SHARDC_CUDA_GEMM: the choice rule, the settings refused, and matmuls under tune (on a GPU their
 * first calls time cuBLASLt's candidates; the results must be the same within the tolerance) */
static void test_gemm_tune(void)
{
    const float a[] = {1.0f, 0.9f, 0.99f}, b[] = {1.0f, 0.98f}, c[] = {-1.0f, 2.0f, 1.5f}, d[] = {-1.0f, -1.0f},
                e[] = {1.0f, -1.0f, 0.5f}, f[] = {0.0f, 0.5f};
    int pa = srk_tune_pick(a, 3, 0.03f), pb = srk_tune_pick(b, 2, 0.03f), pc = srk_tune_pick(c, 3, 0.03f);
    int pd = srk_tune_pick(d, 2, 0.03f), pe = srk_tune_pick(e, 3, 0.03f), pf = srk_tune_pick(f, 2, 0.03f);
    check(pa == 1 && pb == 0 && pc == 2 && pd == 0 && pe == 2 && pf == 1,
          "GEMM tuning's choice: 10%% faster than the first taken, 2%% not, failed candidates skipped, nothing "
          "timed keeps the first (got %d %d %d %d %d %d)", pa, pb, pc, pd, pe, pf);
    setenv("SHARDC_CUDA_GEMM", "fast", 1);
    srk_ctx.failed = 0;
    srk_configure(1, 1);
    check(srk_ctx.failed && strstr(srk_ctx.err, "SHARDC_CUDA_GEMM=fast: expected heuristic"),
          "SHARDC_CUDA_GEMM=fast is refused, naming the values: %s", srk_ctx.err);
    setenv("SHARDC_CUDA_GEMM", "tune", 1);
    srk_ctx.failed = 0;
    srk_configure(1, 2);
    check(srk_ctx.failed && strstr(srk_ctx.err, "not with tensor parallelism (this program is built for tp=2)"),
          "SHARDC_CUDA_GEMM=tune is refused at tp=2 (replicated gradients need one algorithm on every rank): %s",
          srk_ctx.err);
    srk_ctx.failed = 0;
    srk_configure(1, 1);
    check(!srk_ctx.failed && srk_ctx.gemm_tune, "SHARDC_CUDA_GEMM=tune at tp=1 is taken");
    /* shapes no earlier test used: their plans are made (and, on a GPU, tuned) here */
    test_matmul<bf16>(41, 29, 67, false), test_matmul<bf16>(96, 64, 136, true);
    test_matmul_epilogues<bf16>(41, 32, 72);
    test_matmul_gelu_bwd<bf16>(43, 40, 24);
    test_matmul_bias_bwd<bf16>(43, 40, 24);
    const char *note = sr_backend_cuda.note();
    check(note && strstr(note, "GEMMs (SHARDC_CUDA_GEMM=tune): "), "the note after the first step says what "
          "tuning did: %s (%ld problems tuned, %ld changed)", note ? note : "(none)", srk_ctx.gemm_tuned,
          srk_ctx.gemm_changed);
    unsetenv("SHARDC_CUDA_GEMM");
    srk_configure(1, 1);
}

static void test_error_report(void)
{
    float *d = NULL;
    cudaMalloc((void **)&d, 4096);
    srk_ctx.failed = 0;
    int line = __LINE__ + 1;
    SRK_AT("test.model:7 bad launch", SR_LAUNCH(too_big_kernel, 1, 2048, 0, srk_ctx.stream, d));
    /* this file's name as compiled: nvcc builds a copy, test_kernels_cuda.cu */
    const char *file = strrchr(__FILE__, '/') ? strrchr(__FILE__, '/') + 1 : __FILE__;
    std::string want = fmt("%s:%d (test.model:7 bad launch)", file, line);
    check(srk_ctx.failed && strstr(srk_ctx.err, "too_big_kernel") && strstr(srk_ctx.err, want.c_str()),
          "a bad launch is reported with the kernel and the line: %s", srk_ctx.err);
    check(sr_backend_cuda.sync() != SR_OK && strstr(sr_errmsg(), "too_big_kernel"), "backend sync reports it: %s",
          sr_errmsg());
    srk_ctx.failed = 0;
    cudaGetLastError();
    dfree(d);
}

#ifdef SR_CUDA_EMULATION
/* ---- the emulator itself ---------------------------------------------------------------------- */
static __global__ void warp_ops_kernel(int *out)
{
    // blockDim 48: a full warp and a half one
    __shared__ int s[64];
    int t = threadIdx.x;
    s[t] = t;
    __syncthreads();
    int v = s[(t + 1) % blockDim.x];
    int sum = v;
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, o);
    unsigned odd = __ballot_sync(0xffffffffu, t & 1);
    int all = __all_sync(0xffffffffu, t < 40), any = __any_sync(0xffffffffu, t == 44);
    int bc = __shfl_sync(0xffffffffu, t * 10, 3);
    int x = __shfl_xor_sync(0xffffffffu, t, 1);
    out[t * 6 + 0] = sum;
    out[t * 6 + 1] = (int)odd;
    out[t * 6 + 2] = all;
    out[t * 6 + 3] = any;
    out[t * 6 + 4] = bc;
    out[t * 6 + 5] = x;
}
static __global__ void dyn_smem_kernel(float *out, int n)
{
    SR_EXTERN_SHARED(float, buf);
    for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = (float)i;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int i = 0; i < n; i++) s += buf[i];
        out[blockIdx.x] = s;
    }
}
static __global__ void deadlock_kernel(float *x)
{
    if (threadIdx.x < 16) __syncthreads();
    else __syncwarp();
    x[threadIdx.x] = 1.0f;
}
/* warp calls CUDA leaves undefined (the emulator's "Warp calls" check); mode:
 * 0 the two halves of each warp at different shuffles under a full mask (divergent),
 * 1 the same halves with masks of their own half (legal: each mask names only its half),
 * 2 a lane whose mask leaves itself out, 3 two different __syncthreads,
 * 4 lanes 16..31 exited, then a full-mask xor 16 and an __all_sync over those left
 * (legal; the shuffle reads lanes that exited: undefined, the poison),
 * 5 an mma.sync with lanes 16..31 exited (it needs the whole warp) */
static __global__ void warp_rules_kernel(float *x, int mode)
{
    int t = threadIdx.x, lane = t & 31;
    float v = (float)t;
    if (mode == 0) {
        if (lane < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
        else v = __shfl_down_sync(0xffffffffu, v, 1);
    } else if (mode == 1) {
        if (lane < 16) v = __shfl_xor_sync(0x0000ffffu, v, 1);
        else v = __shfl_xor_sync(0xffff0000u, v, 1);
    } else if (mode == 2) {
        v = __shfl_xor_sync(lane == 5 ? 0xffffffdfu : 0xffffffffu, v, 1);
    } else if (mode == 3) {
        if (t < 32) __syncthreads();
        else __syncthreads();
    } else if (mode == 4) {
        if (lane >= 16) return;
        float far = __shfl_xor_sync(0xffffffffu, v, 16);
        v = __shfl_xor_sync(0xffffffffu, v, 1) + (__all_sync(0xffffffffu, lane < 16) ? 1000.0f : 0.0f);
        x[64 + t] = far;
    } else if (mode == 5) {
        if (lane >= 16) return;
        float d[4] = {0, 0, 0, 0};
        uint32_t a[4] = {0, 0, 0, 0};
        srk_mma::mma(d, a, 0u, 0u);
        v = d[0];
    } else if (mode == 6) {
        v = __shfl_down_sync(0xffffffffu, v, 1, 12); /* width 12: not a power of two */
    } else if (mode == 7) {
        if (lane >= 16) return;
        namespace wm = nvcuda::wmma;
        wm::fragment<wm::matrix_a, 16, 16, 16, __nv_bfloat16, wm::row_major> fa;
        wm::fragment<wm::matrix_b, 16, 16, 16, __nv_bfloat16, wm::col_major> fb;
        wm::fragment<wm::accumulator, 16, 16, 16, float> fc;
        wm::fill_fragment(fa, 1.0f), wm::fill_fragment(fb, 1.0f), wm::fill_fragment(fc, 0.0f);
        wm::mma_sync(fc, fa, fb, fc);
        v = fc.x[0];
    }
    x[t] = v;
}
static __global__ void early_exit_kernel(float *x)
{
    // threads that return count as arrived at later barriers
    if (threadIdx.x >= 20) return;
    __shared__ float s[32];
    s[threadIdx.x] = 1.0f;
    __syncthreads();
    x[threadIdx.x] = s[(threadIdx.x + 1) % 20];
}
/* cp.async: two groups a thread (4 bytes, then 16), read before, between and after the waits */
static __global__ void cp_async_kernel(int *out, const int *src)
{
    __shared__ int a[32];
    __shared__ int4 b4[32]; /* 16-byte aligned */
    int *b = (int *)b4;
    int t = threadIdx.x;
    a[t] = -1;
    for (int i = 0; i < 4; i++) b[4 * t + i] = -1;
    srk_mma::cp_async<4>(&a[t], &src[t]);
    srk_mma::cp_async_commit();
    srk_mma::cp_async<16>(&b[4 * t], &src[32 + 4 * t]);
    srk_mma::cp_async_commit();
    out[4 * t] = a[t]; /* nothing waited for: the emulator has landed nothing */
    srk_mma::cp_async_wait<1>();
    out[4 * t + 1] = a[t];     /* the older group landed */
    out[4 * t + 2] = b[4 * t]; /* the newest may still fly: not landed here */
    srk_mma::cp_async_wait<0>();
    out[4 * t + 3] = b[4 * t + 3];
}

/* reads a neighbour's shared slot with (sync 1) or without (sync 0) a barrier
 * between the write and the read; block b also reads what block b-1 wrote */
static __global__ void neighbour_kernel(float *out, float *chain, int sync, int gen)
{
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = (float)(gen * 1000 + t + 1);
    if (sync) __syncthreads();
    out[blockIdx.x * blockDim.x + t] = s[(t + 1) % blockDim.x];
    if (t == 0) chain[blockIdx.x + 1] = chain[blockIdx.x] + 1.0f; /* a race between blocks */
}

/* runs neighbour_kernel under ORDER; true when the block reads and the chain
 * came out as if every write happened before every read */
static bool neighbour_run(const char *order, int sync, float *out, float *chain)
{
    static int gen; /* new values each run: a stale read shows */
    gen++;
    emu::set_schedule(order);
    for (int i = 0; i < 4; i++) chain[i] = 0.0f;
    emu::launch("neighbour_kernel", neighbour_kernel, dim3(3), dim3(64), 0, 0, out, chain, sync, gen); /* < 4 blocks: one OS thread */
    bool as_written = true;
    for (int i = 0; i < 3 * 64; i++) as_written &= out[i] == (float)(gen * 1000 + (i % 64 + 1) % 64 + 1);
    return as_written;
}

static void test_schedules(void)
{
    std::string was = emu::schedule_name();
    float *out = (float *)malloc(sizeof(float) * 3 * 64), chain[4];
    bool ok = true;
    for (const char *o : {"forward", "reverse", "shuffle:3"}) {
        ok &= neighbour_run(o, 1, out, chain);
    }
    check(ok, "emulator: with the barrier, every resume order (forward, reverse, shuffle) gives the written values");
#ifdef __SANITIZE_THREAD__
    /* a race on purpose, which ThreadSanitizer would report: the race check runs its own */
    printf("# the race without a barrier is left out under ThreadSanitizer (race_kernels<0>)\n");
#else
    /* without it each order sees a different mix of old and new values: forward
     * misses all but the last thread's neighbour, reverse only the last's */
    bool fwd = neighbour_run("forward", 0, out, chain);
    float fwd0 = out[0], fwd_chain = chain[3];
    bool rev = neighbour_run("reverse", 0, out, chain);
    float rev0 = out[0], rev_chain = chain[3];
    check(!fwd && !rev && fwd0 != rev0 && fwd_chain == 3.0f && rev_chain == 1.0f,
          "emulator: a shared-memory race without __syncthreads and a race between blocks give different results "
          "under forward and reverse order (thread 0 read %g vs %g; chain %g vs %g)",
          fwd0, rev0, fwd_chain, rev_chain);
#endif
    check(!emu::set_schedule("sideways"), "emulator: an unknown resume order is refused");
    emu::set_schedule(was.c_str());
    free(out);
    /* memory the program never wrote reads as NaN, as a GPU's would read garbage */
    if (!getenv("EMU_POISON")) {
        float *d = nullptr;
        cudaMalloc((void **)&d, 64 * sizeof(float));
        float h[64];
        cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
        check(isnan(h[0]) && isnan(h[63]), "emulator: fresh device memory is poisoned (reads NaN, not zero)");
        cudaFree(d);
    }
}

/* ---- the race check (a build with SHARDC_SANITIZE_THREAD; tests/cuda/racecheck.sh) -------
 * Each kernel has one race when SYNC is 0, the order CUDA needs when it is 1; racecheck.sh
 * expects ThreadSanitizer to report every <0> kernel at its 'race:' line and nothing in a run
 * of the <1> kernels and of the library's kernels. */
/* threads of a block: a neighbour's shared slot read without __syncthreads */
template <int SYNC>
static __global__ void race_block_kernel(float *out)
{
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = (float)t;
    if (SYNC) __syncthreads();
    out[t] = s[(t + 1) % 64]; /* race: block */
}
/* thread 0 writes after the first barrier and thread 4 reads before the next one; thread 0
 * reaches the last barrier first (forward order), so a check that took one order object for
 * every barrier would hand thread 4 that write as ordered */
template <int SYNC>
static __global__ void race_phase_kernel(float *out)
{
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = (float)t;
    __syncthreads();
    if (t == 0) s[5] = -1.0f;
    if (SYNC) __syncthreads();
    float v = s[(t + 1) % 64]; /* race: phase */
    __syncthreads();
    out[t] = v;
}
/* lanes of one warp: __syncwarp orders them */
template <int SYNC>
static __global__ void race_warp_kernel(float *out)
{
    __shared__ float s[32];
    int t = threadIdx.x;
    s[t] = (float)t;
    if (SYNC) __syncwarp();
    out[t] = s[t ^ 1]; /* race: warp */
}
/* blocks of a grid adding to one global value: atomically, or not */
template <int SYNC>
static __global__ void race_grid_kernel(float *out)
{
    if (threadIdx.x != 0) return;
    if (SYNC) atomicAdd(out, 1.0f);
    else out[0] += 1.0f; /* race: grid */
}

template <int SYNC>
static void race_kernels(void)
{
    float *d = nullptr;
    cudaMalloc((void **)&d, 64 * sizeof(float));
    cudaMemset(d, 0, 64 * sizeof(float));
    emu::launch("race_block_kernel", race_block_kernel<SYNC>, dim3(1), dim3(64), 0, 0, d);
    emu::launch("race_phase_kernel", race_phase_kernel<SYNC>, dim3(1), dim3(64), 0, 0, d);
    emu::launch("race_warp_kernel", race_warp_kernel<SYNC>, dim3(1), dim3(32), 0, 0, d);
    cudaMemset(d, 0, sizeof(float));
    /* 256 blocks over the OS threads (EMU_THREADS=2): blocks on two of them race */
    emu::launch("race_grid_kernel", race_grid_kernel<SYNC>, dim3(256), dim3(32), 0, 0, d);
    float h = 0.0f;
    cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost);
    check(cudaGetLastError() == cudaSuccess && (!SYNC || h == 256.0f),
          "race check: the %s kernels ran (the grid's sum %g)", SYNC ? "ordered" : "racy", h);
    cudaFree(d);
}

/* the race check's clean run: the kernels with shared memory, warp operations or blocks that
 * share outputs, on sizes that take each path (tiles full and partial, several of them, the
 * mma kernels' buffers refilled, 16-byte and scalar rows, sorts across chunks) */
static void race_library(void)
{
    race_kernels<1>();
    test_backend(); /* the gradient norm's block sums, AdamW */
    srk_configure(0, 1);
    test_binary<float>(0, 70000 * 3, 3), test_binary<float>(0, 9001 * 24, 24); /* column sums over chunks */
    test_layernorm<float>(300, 64), test_layernorm<float>(7, 300), test_layernorm<float>(5, 1100);
    test_rmsnorm<float>(45, 37), test_rmsnorm<float>(9, 296);
    test_softmax<float>(7, 1000);
    test_embedding<float>(5000, 24, 29), test_embedding<float>(33, 8, 1);
    test_crossentropy<float>(37, 101, 90), test_crossentropy<float>(6, 130, 100, true);
    test_attention<float>(2, 37, 24, 3), test_attention<float>(1, 130, 64, 1);
    srk_configure(1, 1);
    test_layernorm<bf16>(300, 768), test_layernorm<bf16>(9, 1024);
    test_crossentropy<bf16>(4, 50304, 50257);
    test_dropout<bf16>(1000, 0.1f);
    int env_mode = srk_ctx.attn_mode;
    srk_ctx.attn_mode = SRK_ATTN_WMMA;
    test_attention<bf16>(2, 37, 24, 3), test_attention<bf16>(1, 130, 128, 2); /* hd 64, 3 tiles */
    test_attention<bf16>(1, 70, 256, 2); /* hd 128 (wmma under every mode) */
    test_attention_qkv<bf16>(2, 37, 64, 2);
    srk_ctx.attn_mode = SRK_ATTN_MMA;
    test_attention<bf16>(2, 37, 24, 3), test_attention<bf16>(1, 250, 128, 2); /* hd 64, 4 tiles: buffers refilled */
    test_attention_qkv<bf16>(2, 37, 64, 2);
    srk_ctx.attn_mode = env_mode;
}

static void test_emulator(void)
{
    int out[48 * 6];
    emu::launch("warp_ops_kernel", warp_ops_kernel, dim3(1), dim3(48), 0, 0, out);
    bool ok = true;
    for (int t = 0; t < 48; t++) {
        int w0 = t < 32 ? 0 : 32, wn = t < 32 ? 32 : 16, lane = t - w0;
        int sum = 0; /* the shfl_down tree gathers a full warp in lane 0 (a partial warp reads lanes that do not exist: undefined) */
        if (lane == 0 && wn == 32) {
            for (int l = 0; l < wn; l++) sum += (w0 + l + 1) % 48;
            ok &= out[t * 6 + 0] == sum;
        }
        unsigned odd = 0;
        for (int l = 0; l < wn; l++)
            if ((w0 + l) & 1) odd |= 1u << l;
        ok &= (unsigned)out[t * 6 + 1] == odd;
        ok &= out[t * 6 + 2] == (t < 32 ? 1 : 0);
        ok &= out[t * 6 + 3] == (t < 32 ? 0 : 1);
        ok &= out[t * 6 + 4] == (w0 + 3) * 10;
        ok &= out[t * 6 + 5] == (t ^ 1);
    }
    check(ok, "emulator: shuffles, ballot, all/any over a full and a partial warp");
    float *d = (float *)malloc(sizeof(float) * 64);
    cudaGetLastError();
    emu::launch("dyn_smem_kernel", dyn_smem_kernel, dim3(2), dim3(64), 20000 * sizeof(float), 0, d, 20000);
    check(cudaGetLastError() == cudaErrorInvalidValue,
          "emulator: 80 KB of dynamic shared memory without cudaFuncSetAttribute is refused, as on a GPU");
    cudaFuncSetAttribute(dyn_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 20000 * sizeof(float));
    emu::launch("dyn_smem_kernel", dyn_smem_kernel, dim3(2), dim3(64), 20000 * sizeof(float), 0, d, 20000);
    float want = 0.0f;
    for (int i = 0; i < 20000; i++) want += (float)i;
    check(cudaGetLastError() == cudaSuccess && d[0] == want && d[1] == want,
          "emulator: dynamic shared memory after cudaFuncSetAttribute (%g)", d[0]);
    emu::launch("deadlock_kernel", deadlock_kernel, dim3(1), dim3(32), 0, 0, d);
    check(cudaGetLastError() == cudaErrorLaunchFailure, "emulator: a barrier not reached by every thread is a deadlock");
    {
        alignas(16) int src[32 * 5], got[32 * 4];
        for (int i = 0; i < 32 * 5; i++) src[i] = 100 + i;
        emu::launch("cp_async_kernel", cp_async_kernel, dim3(1), dim3(32), 0, 0, got, src);
        bool as_late = cudaGetLastError() == cudaSuccess;
        for (int t = 0; t < 32; t++)
            as_late &= got[4 * t] == -1 && got[4 * t + 1] == 100 + t && got[4 * t + 2] == -1 &&
                       got[4 * t + 3] == 100 + 32 + 4 * t + 3;
        check(as_late, "emulator: cp.async lands at the wait that covers it, no sooner (wait<1> leaves the newest "
                       "group in flight): a read before the wait sees the old value (thread 0: %d %d %d %d)",
              got[0], got[1], got[2], got[3]);
    }
    {
        /* each wrong call fails the launch and names what it saw */
        const char *expect_said[8] = {"diverges: lane 0 calls __shfl_xor_sync at test_kernels_emu.cpp", nullptr,
                               "lane 5 calls __shfl_xor_sync at test_kernels_emu.cpp",
                               "wait at different __syncthreads", nullptr,
                               "mma.sync at srk_attention_mma.cuh",
                               "calls __shfl_down_sync at test_kernels_emu.cpp:",
                               "wmma::mma_sync at test_kernels_emu.cpp:"};
        const char *expect_why[8] = {nullptr, nullptr, nullptr, nullptr, nullptr, "needs all 32 lanes",
                                     "with width 12 (a power of two from 1 to 32)", "needs all 32 lanes"};
        float w[128];
        for (int mode = 0; mode < 8; mode++) {
            for (int i = 0; i < 128; i++) w[i] = -1.0f;
            cudaGetLastError();
            emu::launch("warp_rules_kernel", warp_rules_kernel, dim3(1), dim3(64), 0, 0, w, mode);
            cudaError_t e = cudaGetLastError();
            std::string said = e == cudaSuccess ? std::string() : emu::last_error_detail();
            if (expect_said[mode]) {
                check(e == cudaErrorLaunchFailure && said.find(expect_said[mode]) != std::string::npos &&
                          (!expect_why[mode] || said.find(expect_why[mode]) != std::string::npos),
                      "emulator: a wrong warp or block call fails the launch (mode %d: '%s')", mode, said.c_str());
            } else if (mode == 1) {
                bool legal = e == cudaSuccess;
                for (int t = 0; t < 64; t++) legal &= w[t] == (float)(t ^ 1);
                check(legal, "emulator: each half of a warp shuffling under a mask of its own half is legal (%s)",
                      said.c_str());
            } else {
                bool legal = e == cudaSuccess;
                for (int t = 0; t < 64; t++) {
                    bool left = (t & 31) < 16;
                    legal &= left ? w[t] == (float)(t ^ 1) + 1000.0f && isnan(w[64 + t]) : w[t] == -1.0f;
                }
                check(legal, "emulator: lanes that exited are left out of a full mask; a shuffle from one reads the "
                          "poison (NaN), __all_sync is over the lanes left (lane 0: %g, %g; %s)",
                      w[0], w[64], said.c_str());
            }
        }
    }
    emu::launch("early_exit_kernel", early_exit_kernel, dim3(1), dim3(32), 0, 0, d);
    check(cudaGetLastError() == cudaSuccess && d[0] == 1.0f && d[19] == 1.0f,
          "emulator: threads that exited count as arrived at __syncthreads");
    free(d);
    /* bf16: round to nearest even, NaN stays NaN */
    check(__bfloat162float(__float2bfloat16(1.0f + 1.0f / 256)) == 1.0f &&
              __bfloat162float(__float2bfloat16(1.0f + 3.0f / 256)) == 1.0f + 4.0f / 256 &&
              __bfloat162float(__float2bfloat16(1.0f + 1.0f / 256 + 1.0f / 65536)) == 1.0f + 2.0f / 256 &&
              isnan(__bfloat162float(__float2bfloat16(NAN))) &&
              __bfloat162float(__float2bfloat16(65536.0f + 256.0f)) == 65536.0f &&
              __bfloat162float(__float2bfloat16(65536.0f + 768.0f)) == 65536.0f + 1024.0f,
          "emulator: bf16 conversions round to nearest even");
}
#endif

/* --bench-attention B T C NH ITERS: bf16 causal attention's forward and backward on each
 * path (wmma, mma.sync, SIMT, and cuDNN where it runs), ms per call and TFLOP/s (forward 2 B NH T^2 hd with the
 * causal half left out, backward 2.5 times that: five products to the forward's two).
 * Timed on the host around a synchronized loop, after one warm-up call. */
static double now_ms(void)
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
static int bench_attention(long B, long T, long C, long NH, int iters)
{
    srk_configure(1, 1);
    if (srk_ctx.failed || B <= 0 || T <= 0 || NH <= 0 || C % NH || iters <= 0) {
        printf("bench-attention: B T C NH ITERS, positive, C a multiple of NH\n");
        return 2;
    }
    long n = B * T * C;
    bf16 *q = up<bf16>(rnd(n)), *k = up<bf16>(rnd(n)), *v = up<bf16>(rnd(n)), *g = up<bf16>(rnd(n));
    bf16 *o = up<bf16>(vec((size_t)n)), *dq = up<bf16>(vec((size_t)n)), *dk = up<bf16>(vec((size_t)n));
    bf16 *dv = up<bf16>(vec((size_t)n));
    float *aux = NULL;
    cudaMalloc((void **)&aux, srk_attention_aux_bytes(B, T, C, NH, sizeof(bf16)));
    double flop = 2.0 * B * NH * (double)T * T * (double)(C / NH);
    printf("# bf16 causal attention B=%ld T=%ld C=%ld NH=%ld (hd %ld), %d calls each\n", B, T, C, NH, C / NH, iters);
    int rc = 0;
    std::vector<int> modes = {SRK_ATTN_WMMA, SRK_ATTN_MMA, SRK_ATTN_SIMT};
    if (cudnn_usable()) modes.push_back(SRK_ATTN_CUDNN);
    for (int mode : modes) {
        srk_ctx.attn_mode = mode;
        long mma0 = srk_ctx.attn_mma_launches, tc0 = srk_ctx.attn_tc_launches, cd0 = srk_ctx.attn_cudnn_calls;
        double ms[2];
        for (int bwd = 0; bwd < 2; bwd++) {
            for (int it = -1; it < iters; it++) {
                if (it == 0) {
                    cudaDeviceSynchronize();
                    ms[bwd] = -now_ms();
                }
                if (bwd) srk_attention_bwd(dq, dk, dv, g, q, k, v, aux, B, T, C, NH, 7);
                else srk_attention_fwd(o, aux, q, k, v, B, T, C, NH);
            }
            cudaDeviceSynchronize();
            ms[bwd] = (ms[bwd] + now_ms()) / iters;
        }
        const char *ran = srk_pick::name(srk_pick::path_since(tc0, mma0, cd0));
        printf("attention %-8s (ran %-8s): forward %8.3f ms %6.1f TFLOP/s   backward %8.3f ms %6.1f TFLOP/s\n",
               srk_pick::name(mode), ran, ms[0], flop / (ms[0] * 1e9), ms[1], 2.5 * flop / (ms[1] * 1e9));
        if (srk_ctx.failed) {
            printf("FAIL %s: %s\n", srk_pick::name(mode), srk_ctx.err);
            srk_ctx.failed = 0;
            rc = 1;
        }
    }
    /* what the default (SHARDC_CUDA_ATTN=auto) would run here, q|k|v packed as GPT-2 has them */
    char note[1024];
    srk_pick::trial(B, T, C, NH, 3 * C, -1, note, sizeof note);
    printf("auto, the default: %s\n", note);
    if (srk_ctx.failed) {
        printf("FAIL auto's trial: %s\n", srk_ctx.err);
        srk_ctx.failed = 0;
        rc = 1;
    }
    for (const void *p : {(const void *)q, (const void *)k, (const void *)v, (const void *)g, (const void *)o,
                          (const void *)dq, (const void *)dk, (const void *)dv, (const void *)aux})
        dfree(p);
    return rc;
}

int main(int argc, char **argv)
{
    srk_configure(0, 1);
    sr_status st = sr_backend_cuda.init(0);
    if (st != SR_OK) {
        printf("FAIL backend init: %s\n0 passed, 1 failed\n", sr_errmsg());
        return 1;
    }
    if (argc == 2 && !strcmp(argv[1], "--cudnn-probe")) { /* gpu-check: can the cuDNN attention run here */
        srk_configure(1, 1);
        const char *why;
        bool ok = cudnn_usable(&why);
        char err[512];
        long ver = srk_cudnn_version(err, sizeof err);
        if (ok) /* GPT-2's shape at batch 8 (q|k|v packed, as its program runs): what its workspaces come to */
            printf("cuDNN %ld.%ld.%ld attention: plans for both directions built (GPT-2 at batch 8: workspace %ld and "
                   "%ld bytes)\n", ver / 10000, ver / 100 % 100, ver % 100,
                   srk_cudnn_attn_workspace(0, 8, 1024, 768, 3 * 768, 12, 0.125f, err, sizeof err),
                   srk_cudnn_attn_workspace(1, 8, 1024, 768, 3 * 768, 12, 0.125f, err, sizeof err));
        else
            printf("cuDNN attention unavailable: %s\n", why);
        return ok ? 0 : 1;
    }
    if (argc == 7 && !strcmp(argv[1], "--bench-attention"))
        return bench_attention(atol(argv[2]), atol(argv[3]), atol(argv[4]), atol(argv[5]), atoi(argv[6]));
#ifdef SR_CUDA_EMULATION
    if (argc == 3 && !strcmp(argv[1], "--races")) { /* racecheck.sh: racy | clean */
        if (!strcmp(argv[2], "racy")) race_kernels<0>();
        else race_library();
        sr_backend_cuda.shutdown();
        printf("%d passed, %d failed\n", npass, nfail);
        return nfail ? 1 : 0;
    }
    printf("# CUDA kernels on the CPU emulator\n");
    test_emulator();
    test_schedules();
    printf("# resume order of threads and blocks: %s (EMU_SCHEDULE)\n", emu::schedule_name());
#else
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    printf("# CUDA kernels on %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
#endif
    test_error_report();
    test_backend();
    for (int bf = 0; bf < 2; bf++) {
        srk_configure(bf, 1);
        if (bf) {
            test_matmul<bf16>(37, 19, 23, false), test_matmul<bf16>(64, 96, 48, false);
            test_matmul<bf16>(37, 19, 23, true), test_matmul<bf16>(33, 64, 101, true);
            test_matmul_epilogues<bf16>(37, 24, 40);
            test_matmul_epilogues<bf16>(19, 16, 13);
            test_matmul_gelu_bwd<bf16>(37, 24, 19), test_matmul_gelu_bwd<bf16>(37, 19, 24); /* fused, apart */
            test_matmul_bias_bwd<bf16>(37, 24, 19), test_matmul_bias_bwd<bf16>(300, 16, 40);
            for (int op = 0; op < 3; op++) test_binary<bf16>(op, 37 * 13, 13), test_binary<bf16>(op, 301, 301);
            /* sizes divisible by 8: the 16-byte (vectorized) accumulation */
            for (int op = 0; op < 3; op++) test_binary<bf16>(op, 40 * 24, 24), test_binary<bf16>(op, 1000, 1000);
            test_binary<bf16>(0, 13 * 8, 13); /* n in eights, b's rows not: one element at a time */
            test_binary<bf16>(2, 5000 * 16, 16); /* multi-chunk 16-byte column sums of dout * a */
            test_scale<bf16>(1001);
            test_activations<bf16>(777), test_activations<bf16>(776); /* 776 = 8 x 97: the 16-byte form */
            test_rope<bf16>(2, 37, 48, 3, 10000.0f), test_rope<bf16>(2, 33, 64, 2, 10000.0f, 16.0f, 32.0f);
            test_repeat_kv<bf16>(37, 2, 24, 3);
            test_dropout<bf16>(1000, 0.1f), test_dropout<bf16>(1000, 0.0f), test_dropout<bf16>(1000, 1.0f);
            test_embedding<bf16>(53, 37, 29);
            test_embedding<bf16>(2500, 24, 29); /* long rows of positions; the sort across chunks */
            test_shadow();
            test_slice_transpose<bf16>(), test_slice_transpose<bf16>(24); /* rows of eights: the 16-byte form */
            test_layernorm<bf16>(45, 37), test_layernorm<bf16>(16, 768), test_layernorm<bf16>(9, 1000);
            test_layernorm<bf16>(9, 8), test_layernorm<bf16>(9, 1024); /* one eight a row; four a lane */
            test_layernorm<bf16>(300, 768); /* GPT-2's width over 4 chunks: dx and the sums in one pass */
            test_rmsnorm<bf16>(45, 37), test_rmsnorm<bf16>(9, 8), test_rmsnorm<bf16>(9, 768);
            test_fresh<bf16>();
            test_softmax<bf16>(7, 1000), test_softmax<bf16>(33, 17);
            /* bf16 logits, as the LM head of a bf16 program writes them (50304: the 16-byte form) */
            test_crossentropy<bf16>(37, 101), test_crossentropy<bf16>(37, 101, 90);
            test_crossentropy<bf16>(4, 50304, 50257);
            test_crossentropy<bf16>(37, 101, 0, true), test_crossentropy<bf16>(6, 130, 100, true); /* vocab-parallel */
            /* hd 8: SIMT; hd 32, 64, 128: tensor cores, one and several 64-row tiles; with wmma (the
             * default) and with mma.sync (hd 32, 64), or only the one SHARDC_CUDA_ATTN names */
            int env_mode = srk_ctx.attn_mode;
            std::vector<int> modes = {SRK_ATTN_WMMA, SRK_ATTN_MMA};
            if (cudnn_usable()) modes.push_back(SRK_ATTN_CUDNN); /* where cuDNN loads: a GPU */
            if (getenv("SHARDC_CUDA_ATTN")) modes = {env_mode};
            for (int mode : modes) {
                srk_ctx.attn_mode = mode;
                test_attention<bf16>(2, 37, 24, 3), test_attention<bf16>(1, 70, 128, 2);
                test_attention<bf16>(2, 19, 64, 1), test_attention<bf16>(2, 65, 64, 2);
                test_attention<bf16>(1, 130, 256, 2), test_attention<bf16>(1, 150, 96, 3);
                test_attention<bf16>(1, 250, 128, 2); /* hd 64, 4 tiles: mma's two buffers each refilled */
                test_attention<bf16>(1, 250, 128, 2, 6.0f), test_attention<bf16>(2, 70, 64, 2, 6.0f);
                test_attention<bf16>(1, 130, 256, 2, 6.0f);
                test_attention_qkv<bf16>(2, 19, 24, 3), test_attention_qkv<bf16>(2, 37, 64, 2);
                test_attention_qkv<bf16>(1, 70, 128, 2), test_attention_qkv<bf16>(1, 130, 256, 2);
            }
            srk_ctx.attn_mode = env_mode;
            test_cudnn_unavailable();
            test_attention_auto();
            test_gemm_tune();
        } else {
            test_matmul<float>(37, 19, 23, false), test_matmul<float>(64, 96, 48, false);
            test_matmul<float>(37, 19, 23, true), test_matmul<float>(33, 64, 101, true);
            test_matmul_epilogues<float>(37, 24, 40);
            test_matmul_gelu_bwd<float>(37, 24, 19); /* fp32: always the two rules */
            test_matmul_bias_bwd<float>(37, 24, 19);   /* fp32: the bias gradient apart */
            for (int op = 0; op < 3; op++) test_binary<float>(op, 37 * 13, 13), test_binary<float>(op, 301, 301);
            for (int op = 0; op < 3; op++) test_binary<float>(op, 40 * 24, 24), test_binary<float>(op, 1000, 1000);
            test_binary<float>(1, 13 * 8, 13); /* n in eights, b's rows not: one element at a time */
            test_binary<float>(0, 70000 * 3, 3); /* many rows: multi-chunk column sums */
            test_binary<float>(0, 9001 * 24, 24); /* the same, 16-byte column sums */
            test_layernorm<float>(300, 64);       /* 5 chunks of 16-byte column sums (LN's two) */
            test_scale<float>(1001);
            test_activations<float>(777), test_activations<float>(776); /* 776 = 8 x 97: the 16-byte form */
            test_rope<float>(2, 37, 48, 3, 10000.0f), test_rope<float>(3, 5, 6, 3, 500000.0f);
            test_rope<float>(1, 40, 256, 2, 10000.0f); /* hd 128: several chunks of the host's angles */
            test_rope<float>(2, 33, 64, 2, 10000.0f, 16.0f, 32.0f); /* llama3 scaling within 33 positions */
            test_repeat_kv<float>(37, 2, 24, 3), test_repeat_kv<float>(5, 1, 64, 4);
            test_dropout<float>(1000, 0.1f), test_dropout<float>(100, 0.0f), test_dropout<float>(100, 1.0f);
            test_embedding<float>(53, 37, 29), test_embedding<float>(1024, 8, 5000);
            test_embedding<float>(5000, 24, 29); /* 8192 keys: two of the steps across chunks */
            /* one row: its positions in whole batches of SRK_EMB_BATCH loads (16, 32), and not (33) */
            test_embedding<float>(16, 8, 1), test_embedding<float>(32, 8, 1), test_embedding<float>(33, 8, 1);
            test_slice_transpose<float>(), test_slice_transpose<float>(24); /* rows of eights: the 16-byte form */
            test_layernorm<float>(45, 37), test_layernorm<float>(16, 768), test_layernorm<float>(1000, 5);
            /* the backward's row widths: in registers (300: 10 a lane, of 16) and not (1100 > 1024) */
            test_layernorm<float>(7, 300), test_layernorm<float>(5, 1100);
            /* rows of eights: the 16-byte backward, 1 to 4 eights a lane (and 1032: the scalar one) */
            test_layernorm<float>(9, 200), test_layernorm<float>(9, 296), test_layernorm<float>(9, 1032);
            test_layernorm<float>(200, 296); /* 3 chunks, 2 eights a lane, one pass */
            test_rmsnorm<float>(45, 37), test_rmsnorm<float>(3, 300);
            test_rmsnorm<float>(9, 296), test_rmsnorm<float>(5, 1032); /* rows of eights: the 16-byte dx */
            test_rmsnorm<float>(9, 1024), test_rmsnorm<float>(9, 8); /* the 16-byte forward: 4 eights a lane, 1 */
            test_softmax<float>(7, 1000), test_softmax<float>(33, 17);
            test_fresh<float>();
            test_crossentropy<float>(37, 101), test_crossentropy<float>(4, 50257);
            test_crossentropy<float>(37, 101, 90), test_crossentropy<float>(4, 50304, 50257);
            test_crossentropy<float>(37, 101, 0, true), test_crossentropy<float>(6, 130, 100, true);
            test_attention<float>(2, 37, 24, 3), test_attention<float>(1, 70, 128, 2);
            test_attention<float>(2, 5, 10, 2), test_attention<float>(1, 130, 64, 1);
            test_attention<float>(1, 130, 64, 1, 6.0f), test_attention<float>(2, 37, 24, 3, 6.0f);
            test_attention_qkv<float>(2, 37, 24, 3), test_attention_qkv<float>(1, 70, 128, 2);
            check(srk_ctx.attn_picks == 0 && !srk_ctx.attn_note[0], "fp32 attention: no trial under %s (%d)",
                  srk_pick::name(srk_ctx.attn_mode), srk_ctx.attn_picks);
        }
    }
    sr_backend_cuda.shutdown();
    printf("%d passed, %d failed\n", npass, nfail);
    return nfail ? 1 : 0;
}
