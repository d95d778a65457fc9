/* test_kernels.c: unit tests of the host kernels (runtime/host/kernels.c).
 *
 * Forwards are compared with naive double-precision references written here;
 * every forward/backward pair gets a finite-difference gradient check of
 * L = sum(g * fwd(x)) for a random upstream gradient g, a check that the
 * backward accumulates (+=), and a check that each NULL gradient is skipped
 * without changing the others. Prints one line per check and ends with
 * "N passed, M failed"; exits non-zero if any check failed.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "shardrt.h"
#include "sr_program.h"

#include "check.h"

/* ------------------------------------------------------------------------ */
/* Test data                                                                 */

static uint64_t rng_state = 0x2545f4914f6cdd1dULL;

static double urand(void) // [0,1)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}

static float frand(float lo, float hi) { return (float)(lo + (hi - lo) * urand()); }

static float *rand_buf(long n, float lo, float hi)
{
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (long i = 0; i < n; i++) x[i] = frand(lo, hi);
    return x;
}

static float *zbuf(long n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

static float *dup_buf(const float *x, long n)
{
    float *y = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    memcpy(y, x, (size_t)n * sizeof(float));
    return y;
}

/* max_i |a_i - b_i| / max(|b_i|, 1): relative for large values, absolute
 * near 0, like allclose with rtol = atol. */
static double max_err(const float *a, const double *b, long n)
{
    double e = 0.0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / fmax(fabs(b[i]), 1.0);
        if (!(d <= e)) e = d; // NaN-propagating max
    }
    return e;
}

static double max_err_ff(const float *a, const float *b, long n)
{
    double e = 0.0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / fmax(fabs((double)b[i]), 1.0);
        if (!(d <= e)) e = d;
    }
    return e;
}

/* ------------------------------------------------------------------------ */
/* Gradient-check harness                                                    */

enum { MAXIN = 4 };

typedef struct GC GC;
struct GC {
    const char *name;
    int nin;
    const char *inname[MAXIN];
    float *in[MAXIN]; // inputs, perturbed in place by the finite differences
    long inn[MAXIN];
    long nout;
    void (*fwd)(GC *c, float *out);
    void (*bwd)(GC *c, float **grads, const float *dout); // grads[k] may be NULL
    // kernel parameters
    int M, K, N, B, T, C, NH, ndim, d1, d2;
    long n, nb;
    float p;
    long dims[6];
    int32_t *idx;
    float *s0, *s1, *s2; // saved-tensor scratch
};

static double objective(GC *c, const float *g, float *out)
{
    c->fwd(c, out);
    double L = 0.0;
    for (long i = 0; i < c->nout; i++) L += (double)g[i] * out[i];
    return L;
}

static void gradcheck(GC *c, float fd_eps)
{
    float *out = zbuf(c->nout), *g = rand_buf(c->nout, -1.0f, 1.0f);
    float *G[MAXIN] = {0};
    for (int k = 0; k < c->nin; k++) G[k] = zbuf(c->inn[k]);
    c->bwd(c, G, g);

    for (int k = 0; k < c->nin; k++) {
        double scale = 0.0;
        for (long i = 0; i < c->inn[k]; i++) scale = fmax(scale, fabs(G[k][i]));
        long nchk = c->inn[k] <= 64 ? c->inn[k] : 64;
        double maxe = 0.0;
        for (long s = 0; s < nchk; s++) {
            long i = c->inn[k] <= 64 ? s : (s == 0 ? c->inn[k] - 1 : (long)(urand() * c->inn[k]));
            float x0 = c->in[k][i];
            float xp = x0 + fd_eps, xm = x0 - fd_eps;
            c->in[k][i] = xp;
            double Lp = objective(c, g, out);
            c->in[k][i] = xm;
            double Lm = objective(c, g, out);
            c->in[k][i] = x0;
            double fd = (Lp - Lm) / ((double)xp - (double)xm);
            double a = G[k][i];
            double e = fabs(a - fd) / fmax(fmax(fabs(a), fabs(fd)), fmax(0.1 * scale, 1e-6));
            if (!(e <= maxe)) maxe = e;
        }
        check(maxe < 1e-2 && scale > 0.0, "gradcheck %s d%s: max rel err %.2e over %ld entries (|grad| max %.3g)",
              c->name, c->inname[k], maxe, nchk, scale);
    }

    // accumulation: starting from R, two backward calls must give R + 2G
    {
        float *R[MAXIN], *A[MAXIN];
        double maxe = 0.0;
        for (int k = 0; k < c->nin; k++) {
            R[k] = rand_buf(c->inn[k], -1.0f, 1.0f);
            A[k] = dup_buf(R[k], c->inn[k]);
        }
        c->bwd(c, A, g);
        c->bwd(c, A, g);
        for (int k = 0; k < c->nin; k++) {
            for (long i = 0; i < c->inn[k]; i++) {
                double ref = (double)R[k][i] + 2.0 * G[k][i];
                double e = fabs(A[k][i] - ref) / fmax(fabs(ref), 1.0);
                if (!(e <= maxe)) maxe = e;
            }
            free(R[k]);
            free(A[k]);
        }
        check(maxe < 1e-5, "accumulate %s: two bwd calls on nonzero grads = R + 2G (max err %.2e)",
              c->name, maxe);
    }

    // NULL gradients: each gradient alone equals the full call's; all NULL is accepted
    {
        double maxe = 0.0;
        for (int k = 0; k < c->nin; k++) {
            float *only[MAXIN] = {0};
            only[k] = zbuf(c->inn[k]);
            c->bwd(c, only, g);
            double e = max_err_ff(only[k], G[k], c->inn[k]);
            if (!(e <= maxe)) maxe = e;
            free(only[k]);
        }
        float *none[MAXIN] = {0};
        c->bwd(c, none, g);
        check(maxe < 1e-6, "null grads %s: one grad at a time matches, all NULL accepted (max err %.2e)",
              c->name, maxe);
    }

    for (int k = 0; k < c->nin; k++) free(G[k]);
    free(out);
    free(g);
}

static void gc_free(GC *c)
{
    for (int k = 0; k < c->nin; k++) free(c->in[k]);
    free(c->idx);
    free(c->s0);
    free(c->s1);
    free(c->s2);
}

/* ------------------------------------------------------------------------ */
/* Kernel adapters for the harness                                           */

static void mm_fwd(GC *c, float *out) { sr_matmul_fwd(out, c->in[0], c->in[1], c->M, c->K, c->N); }
static void mm_bwd(GC *c, float **gr, const float *d)
{
    sr_matmul_bwd(gr[0], gr[1], d, c->in[0], c->in[1], c->M, c->K, c->N);
}
static void mmt_fwd(GC *c, float *out) { sr_matmul_t_fwd(out, c->in[0], c->in[1], c->M, c->K, c->N); }
static void mmt_bwd(GC *c, float **gr, const float *d)
{
    sr_matmul_t_bwd(gr[0], gr[1], d, c->in[0], c->in[1], c->M, c->K, c->N);
}
static void add_fwd(GC *c, float *out) { sr_add_fwd(out, c->in[0], c->in[1], c->n, c->nb); }
static void add_bwd(GC *c, float **gr, const float *d) { sr_add_bwd(gr[0], gr[1], d, c->n, c->nb); }
static void sub_fwd(GC *c, float *out) { sr_sub_fwd(out, c->in[0], c->in[1], c->n, c->nb); }
static void sub_bwd(GC *c, float **gr, const float *d) { sr_sub_bwd(gr[0], gr[1], d, c->n, c->nb); }
static void mul_fwd(GC *c, float *out) { sr_mul_fwd(out, c->in[0], c->in[1], c->n, c->nb); }
static void mul_bwd(GC *c, float **gr, const float *d)
{
    sr_mul_bwd(gr[0], gr[1], d, c->in[0], c->in[1], c->n, c->nb);
}
static void scale_fwd(GC *c, float *out) { sr_scale_fwd(out, c->in[0], c->p, c->n); }
static void scale_bwd(GC *c, float **gr, const float *d) { sr_scale_bwd(gr[0], d, c->p, c->n); }
static void emb_fwd(GC *c, float *out) { sr_embedding_fwd(out, c->in[0], c->idx, c->N, c->C); }
static void emb_bwd(GC *c, float **gr, const float *d) { sr_embedding_bwd(gr[0], d, c->idx, c->N, c->C); }
static void ln_fwd(GC *c, float *out)
{
    sr_layernorm_fwd(out, c->s1, c->s2, c->in[0], c->in[1], c->in[2], c->N, c->C, 1e-5f);
}
static void ln_bwd(GC *c, float **gr, const float *d)
{
    ln_fwd(c, c->s0); // mean, rstd of the current inputs
    sr_layernorm_bwd(gr[0], gr[1], gr[2], d, c->in[0], c->in[1], c->s1, c->s2, c->N, c->C);
}
static void rms_fwd(GC *c, float *out) { sr_rmsnorm_fwd(out, c->s2, c->in[0], c->in[1], c->N, c->C, 1e-5f); }
static void rms_bwd(GC *c, float **gr, const float *d)
{
    rms_fwd(c, c->s0);
    sr_rmsnorm_bwd(gr[0], gr[1], d, c->in[0], c->in[1], c->s2, c->N, c->C);
}
static void gelu_fwd_(GC *c, float *out) { sr_gelu_fwd(out, c->in[0], c->n); }
static void gelu_bwd_(GC *c, float **gr, const float *d) { sr_gelu_bwd(gr[0], d, c->in[0], c->n); }
static void gelue_fwd_(GC *c, float *out) { sr_gelu_exact_fwd(out, c->in[0], c->n); }
static void gelue_bwd_(GC *c, float **gr, const float *d) { sr_gelu_exact_bwd(gr[0], d, c->in[0], c->n); }
static void relu_fwd_(GC *c, float *out) { sr_relu_fwd(out, c->in[0], c->n); }
static void relu_bwd_(GC *c, float **gr, const float *d) { sr_relu_bwd(gr[0], d, c->in[0], c->n); }
static void silu_fwd_(GC *c, float *out) { sr_silu_fwd(out, c->in[0], c->n); }
static void silu_bwd_(GC *c, float **gr, const float *d) { sr_silu_bwd(gr[0], d, c->in[0], c->n); }
static void sm_fwd(GC *c, float *out) { sr_softmax_fwd(out, c->in[0], c->N, c->C); }
static void sm_bwd(GC *c, float **gr, const float *d)
{
    sm_fwd(c, c->s0);
    sr_softmax_bwd(gr[0], d, c->s0, c->N, c->C);
}
static void att_fwd(GC *c, float *out)
{
    sr_attention_fwd(out, c->s1, c->in[0], c->in[1], c->in[2], c->B, c->T, c->C, c->NH);
}
static void att_bwd(GC *c, float **gr, const float *d)
{
    att_fwd(c, c->s0);
    sr_attention_bwd(gr[0], gr[1], gr[2], d, c->in[0], c->in[1], c->in[2], c->s1,
                     c->B, c->T, c->C, c->NH);
}
static void slice_fwd_(GC *c, float *out) { sr_slice_fwd(out, c->in[0], c->M, c->K, c->N, c->d1); }
static void slice_bwd_(GC *c, float **gr, const float *d) { sr_slice_bwd(gr[0], d, c->M, c->K, c->N, c->d1); }
static void tr_fwd(GC *c, float *out) { sr_transpose_fwd(out, c->in[0], c->ndim, c->dims, c->d1, c->d2); }
static void tr_bwd(GC *c, float **gr, const float *d)
{
    sr_transpose_bwd(gr[0], d, c->ndim, c->dims, c->d1, c->d2);
}
static void drop_fwd(GC *c, float *out) { sr_dropout_fwd(out, c->in[0], c->n, c->p, 1234, 7, 3, 100); }
static void drop_bwd(GC *c, float **gr, const float *d) { sr_dropout_bwd(gr[0], d, c->n, c->p, 1234, 7, 3, 100); }
static void ce_fwd(GC *c, float *out) { out[0] = sr_crossentropy_fwd(c->s1, c->in[0], c->idx, c->N, c->C, 0); }
static void ce_bwd(GC *c, float **gr, const float *d)
{
    float loss;
    ce_fwd(c, &loss);
    sr_crossentropy_bwd(gr[0], c->in[0], c->s1, c->idx, d[0], c->N, c->C, 0);
}

static void set_in(GC *c, int k, const char *name, long n, float lo, float hi)
{
    c->inname[k] = name;
    c->inn[k] = n;
    c->in[k] = rand_buf(n, lo, hi);
    if (k + 1 > c->nin) c->nin = k + 1;
}

/* ------------------------------------------------------------------------ */
/* Gradient checks, one per fwd/bwd pair (and per code path)                 */

static void gc_matmul(int M, int K, int N, int transposed)
{
    GC c = {0};
    c.name = transposed ? "matmul_t" : "matmul";
    c.M = M, c.K = K, c.N = N;
    set_in(&c, 0, "a", (long)M * K, -1, 1);
    set_in(&c, 1, "b", (long)K * N, -1, 1);
    c.nout = (long)M * N;
    c.fwd = transposed ? mmt_fwd : mm_fwd;
    c.bwd = transposed ? mmt_bwd : mm_bwd;
    gradcheck(&c, 1e-2f);
    gc_free(&c);
}

static void gc_broadcast(const char *name, long n, long nb, void (*f)(GC *, float *),
                         void (*b)(GC *, float **, const float *))
{
    GC c = {0};
    c.name = name;
    c.n = n, c.nb = nb;
    set_in(&c, 0, "a", n, -1, 1);
    set_in(&c, 1, "b", nb, -1, 1);
    c.nout = n;
    c.fwd = f, c.bwd = b;
    gradcheck(&c, 1e-2f);
    gc_free(&c);
}

static void gc_pointwise(const char *name, long n, float lo, float hi, void (*f)(GC *, float *),
                         void (*b)(GC *, float **, const float *))
{
    GC c = {0};
    c.name = name;
    c.n = n;
    set_in(&c, 0, "x", n, lo, hi);
    c.nout = n;
    c.fwd = f, c.bwd = b;
    c.p = 0.37f; // scale factor, for scale
    gradcheck(&c, 1e-2f);
    gc_free(&c);
}

static void gc_relu(void)
{
    // keep inputs away from the kink at 0 by more than the FD step
    GC c = {0};
    c.name = "relu";
    c.n = 41;
    set_in(&c, 0, "x", c.n, 0.1f, 1.0f);
    for (long i = 0; i < c.n; i += 2) c.in[0][i] = -c.in[0][i];
    c.nout = c.n;
    c.fwd = relu_fwd_, c.bwd = relu_bwd_;
    gradcheck(&c, 1e-2f);
    gc_free(&c);
}

static void gc_embedding(int V, int N, int D)
{
    GC c = {0};
    c.name = "embedding";
    c.N = N, c.C = D;
    set_in(&c, 0, "w", (long)V * D, -1, 1);
    c.idx = malloc((size_t)N * sizeof(int32_t));
    for (int i = 0; i < N; i++) c.idx[i] = (int32_t)(urand() * V);
    c.idx[N - 1] = c.idx[0]; // a repeated index must accumulate
    c.nout = (long)N * D;
    c.fwd = emb_fwd, c.bwd = emb_bwd;
    gradcheck(&c, 1e-2f);
    gc_free(&c);
}

static void gc_layernorm(int N, int C)
{
    GC c = {0};
    c.name = "layernorm";
    c.N = N, c.C = C;
    set_in(&c, 0, "x", (long)N * C, -2, 2);
    set_in(&c, 1, "w", C, 0.5f, 1.5f);
    set_in(&c, 2, "b", C, -1, 1);
    c.s0 = zbuf((long)N * C), c.s1 = zbuf(N), c.s2 = zbuf(N);
    c.nout = (long)N * C;
    c.fwd = ln_fwd, c.bwd = ln_bwd;
    gradcheck(&c, 1e-2f);
    gc_free(&c);
}

static void gc_rmsnorm(int N, int C)
{
    GC c = {0};
    c.name = "rmsnorm";
    c.N = N, c.C = C;
    set_in(&c, 0, "x", (long)N * C, -2, 2);
    set_in(&c, 1, "w", C, 0.5f, 1.5f);
    c.s0 = zbuf((long)N * C), c.s2 = zbuf(N);
    c.nout = (long)N * C;
    c.fwd = rms_fwd, c.bwd = rms_bwd;
    gradcheck(&c, 1e-2f);
    gc_free(&c);
}

/* Llama 3.1's rope scaling for the rope checks: factor, low_freq_factor,
 * high_freq_factor, original_max_position_embeddings (factor 1: none) */
static float rope_sc[4] = {1.0f, 1.0f, 4.0f, 8192.0f};

static void rope_fwd_(GC *c, float *out)
{
    sr_rope_fwd(out, c->in[0], (long)c->B * c->T, c->T, c->C, c->NH, c->p, rope_sc[0], rope_sc[1], rope_sc[2],
                rope_sc[3]);
}
static void rope_bwd_(GC *c, float **gr, const float *d)
{
    sr_rope_bwd(gr[0], d, (long)c->B * c->T, c->T, c->C, c->NH, c->p, rope_sc[0], rope_sc[1], rope_sc[2],
                rope_sc[3]);
}

static void gc_rope(int B, int T, int C, int NH, float theta)
{
    GC c = {0};
    c.name = "rope";
    c.B = B, c.T = T, c.C = C, c.NH = NH, c.p = theta;
    set_in(&c, 0, "x", (long)B * T * C, -1, 1);
    c.nout = (long)B * T * C;
    c.fwd = rope_fwd_, c.bwd = rope_bwd_;
    gradcheck(&c, 1e-2f);
    gc_free(&c);
}

static void rkv_fwd_(GC *c, float *out) { sr_repeat_kv_fwd(out, c->in[0], c->N, c->NH, c->C, c->M); }
static void rkv_bwd_(GC *c, float **gr, const float *d) { sr_repeat_kv_bwd(gr[0], d, c->N, c->NH, c->C, c->M); }

/* repeat_kv: N rows of NKV heads of HD channels, each repeated REP times */
static void gc_repeat_kv(int N, int NKV, int HD, int REP)
{
    GC c = {0};
    c.name = "repeat_kv";
    c.N = N, c.NH = NKV, c.C = HD, c.M = REP;
    set_in(&c, 0, "x", (long)N * NKV * HD, -1, 1);
    c.nout = (long)N * NKV * HD * REP;
    c.fwd = rkv_fwd_, c.bwd = rkv_bwd_;
    gradcheck(&c, 1e-2f);
    gc_free(&c);
}

static void gc_softmax(int N, int C)
{
    GC c = {0};
    c.name = "softmax";
    c.N = N, c.C = C;
    set_in(&c, 0, "x", (long)N * C, -3, 3);
    c.s0 = zbuf((long)N * C);
    c.nout = (long)N * C;
    c.fwd = sm_fwd, c.bwd = sm_bwd;
    gradcheck(&c, 1e-2f);
    gc_free(&c);
}

static void gc_attention(int B, int T, int C, int NH)
{
    GC c = {0};
    c.name = "attention";
    c.B = B, c.T = T, c.C = C, c.NH = NH;
    long n = (long)B * T * C;
    set_in(&c, 0, "q", n, -1.5f, 1.5f);
    set_in(&c, 1, "k", n, -1.5f, 1.5f);
    set_in(&c, 2, "v", n, -1, 1);
    c.s0 = zbuf(n), c.s1 = zbuf((long)B * NH * T * T);
    c.nout = n;
    c.fwd = att_fwd, c.bwd = att_bwd;
    gradcheck(&c, 1e-2f);
    gc_free(&c);
}

static void gc_slice(int M, int K, int n, int i)
{
    GC c = {0};
    c.name = "slice";
    c.M = M, c.K = K, c.N = n, c.d1 = i;
    set_in(&c, 0, "x", (long)M * K * n, -1, 1);
    c.nout = (long)M * n;
    c.fwd = slice_fwd_, c.bwd = slice_bwd_;
    gradcheck(&c, 1e-2f);
    gc_free(&c);
}

static void gc_transpose(int ndim, const long *dims, int d1, int d2)
{
    GC c = {0};
    c.name = "transpose";
    c.ndim = ndim, c.d1 = d1, c.d2 = d2;
    long n = 1;
    for (int d = 0; d < ndim; d++) n *= (c.dims[d] = dims[d]);
    set_in(&c, 0, "x", n, -1, 1);
    c.nout = n;
    c.fwd = tr_fwd, c.bwd = tr_bwd;
    gradcheck(&c, 1e-2f);
    gc_free(&c);
}

static void gc_dropout(long n, float p)
{
    GC c = {0};
    c.name = p > 0 ? "dropout" : "dropout(p=0)";
    c.n = n, c.p = p;
    set_in(&c, 0, "x", n, -1, 1);
    c.nout = n;
    c.fwd = drop_fwd, c.bwd = drop_bwd;
    gradcheck(&c, 1e-2f);
    gc_free(&c);
}

static void gc_crossentropy(int N, int V)
{
    GC c = {0};
    c.name = "crossentropy";
    c.N = N, c.C = V;
    set_in(&c, 0, "logits", (long)N * V, -3, 3);
    c.idx = malloc((size_t)N * sizeof(int32_t));
    for (int i = 0; i < N; i++) c.idx[i] = (int32_t)(urand() * V);
    c.s1 = zbuf(N);
    c.nout = 1;
    c.fwd = ce_fwd, c.bwd = ce_bwd;
    gradcheck(&c, 1e-2f);
    gc_free(&c);
}

static void test_gradients(void)
{
    gc_matmul(5, 7, 3, 0);
    gc_matmul(33, 65, 17, 0);
    gc_matmul(5, 7, 3, 1);
    gc_matmul(33, 65, 17, 1);
    gc_matmul(150, 64, 40, 0); // big enough to be cut into row slabs
    gc_matmul(70, 130, 90, 1); // ... and into column slabs
    gc_broadcast("add(nb=7)", 35, 7, add_fwd, add_bwd);
    gc_broadcast("add(nb=300)", 20 * 300, 300, add_fwd, add_bwd);
    gc_broadcast("add(nb=1)", 70000, 1, add_fwd, add_bwd);
    gc_broadcast("sub(nb=7)", 35, 7, sub_fwd, sub_bwd);
    gc_broadcast("sub(nb=n)", 45, 45, sub_fwd, sub_bwd);
    gc_broadcast("mul(nb=7)", 35, 7, mul_fwd, mul_bwd);
    gc_broadcast("mul(nb=300)", 70 * 300, 300, mul_fwd, mul_bwd);
    gc_pointwise("scale", 37, -1, 1, scale_fwd, scale_bwd);
    gc_embedding(11, 9, 7);
    gc_embedding(13, 40, 150);
    gc_layernorm(5, 7);
    gc_layernorm(70, 300);
    gc_rmsnorm(5, 7);
    gc_rmsnorm(70, 300);
    gc_pointwise("gelu", 37, -3, 3, gelu_fwd_, gelu_bwd_);
    gc_pointwise("gelu", 20000, -3, 3, gelu_fwd_, gelu_bwd_);
    gc_pointwise("gelu_exact", 37, -3, 3, gelue_fwd_, gelue_bwd_);
    gc_relu();
    gc_pointwise("silu", 37, -4, 4, silu_fwd_, silu_bwd_);
    gc_rope(2, 5, 12, 3, 10000.0f);
    gc_rope(1, 9, 8, 1, 500000.0f);
    rope_sc[0] = 8.0f, rope_sc[3] = 8.0f; /* llama3 scaling that reaches these short sequences */
    gc_rope(2, 9, 24, 2, 10000.0f);
    rope_sc[0] = 1.0f, rope_sc[3] = 8192.0f;
    gc_repeat_kv(3, 2, 5, 3);
    gc_repeat_kv(2, 1, 4, 4); /* one key/value head for all (multi-query attention) */
    gc_softmax(5, 7);
    gc_softmax(40, 500);
    gc_attention(2, 5, 12, 3);
    gc_attention(1, 7, 5, 1);
    gc_attention(2, 33, 48, 3);
    gc_attention(1, 70, 12, 2);
    gc_slice(5, 3, 4, 1);
    gc_slice(5, 3, 4, 2);
    {
        long d2[2] = {5, 7}, d4[4] = {2, 3, 4, 5}, d3[3] = {3, 4, 5}, d6[6] = {2, 1, 3, 2, 2, 3};
        gc_transpose(2, d2, 0, 1);
        gc_transpose(4, d4, 1, 2);
        gc_transpose(3, d3, 2, 0);
        gc_transpose(6, d6, 1, 4);
    }
    gc_dropout(37, 0.3f);
    gc_dropout(37, 0.0f);
    gc_crossentropy(5, 7);
    gc_crossentropy(9, 300);
}

/* ------------------------------------------------------------------------ */
/* Forward checks against naive references                                   */

static void test_matmul_fwd(int M, int K, int N)
{
    float *a = rand_buf((long)M * K, -1, 1), *b = rand_buf((long)K * N, -1, 1);
    float *bt = rand_buf((long)N * K, -1, 1), *out = zbuf((long)M * N);
    double *ref = calloc((size_t)M * N, sizeof(double));
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int p = 0; p < K; p++) s += (double)a[i * K + p] * b[p * N + j];
            ref[i * N + j] = s;
        }
    sr_matmul_fwd(out, a, b, M, K, N);
    double e = max_err(out, ref, (long)M * N);
    check(e < 1e-5, "matmul_fwd %dx%dx%d vs naive (max err %.2e)", M, K, N, e);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int p = 0; p < K; p++) s += (double)a[i * K + p] * bt[j * K + p];
            ref[i * N + j] = s;
        }
    sr_matmul_t_fwd(out, a, bt, M, K, N);
    e = max_err(out, ref, (long)M * N);
    check(e < 1e-5, "matmul_t_fwd %dx%dx%d vs naive (max err %.2e)", M, K, N, e);
    free(a), free(b), free(bt), free(out), free(ref);
}

static void test_broadcast_fwd(long n, long nb)
{
    float *a = rand_buf(n, -1, 1), *b = rand_buf(nb, -1, 1), *out = zbuf(n);
    double *ref = calloc((size_t)n, sizeof(double));
    const char *names[3] = {"add", "sub", "mul"};
    for (int op = 0; op < 3; op++) {
        for (long i = 0; i < n; i++) {
            double x = a[i], y = b[i % nb];
            ref[i] = op == 0 ? x + y : op == 1 ? x - y : x * y;
        }
        if (op == 0) sr_add_fwd(out, a, b, n, nb);
        if (op == 1) sr_sub_fwd(out, a, b, n, nb);
        if (op == 2) sr_mul_fwd(out, a, b, n, nb);
        double e = max_err(out, ref, n);
        check(e < 1e-6, "%s_fwd n=%ld nb=%ld vs naive (max err %.2e)", names[op], n, nb, e);
    }
    for (long i = 0; i < n; i++) ref[i] = (double)a[i] * 0.37f;
    sr_scale_fwd(out, a, 0.37f, n);
    double e = max_err(out, ref, n);
    check(e < 1e-6, "scale_fwd n=%ld vs naive (max err %.2e)", n, e);
    free(a), free(b), free(out), free(ref);
}

static void test_embedding_fwd(void)
{
    int V = 11, N = 9, D = 7;
    float *w = rand_buf((long)V * D, -1, 1), *out = zbuf((long)N * D);
    int32_t idx[9], pos[6];
    for (int i = 0; i < N; i++) idx[i] = (int32_t)(urand() * V);
    sr_embedding_fwd(out, w, idx, N, D);
    int ok = 1;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < D; j++) ok &= out[i * D + j] == w[idx[i] * D + j];
    check(ok, "embedding_fwd copies rows w[idx[i]]");
    sr_arange_fwd(pos, 6);
    ok = 1;
    for (int i = 0; i < 6; i++) ok &= pos[i] == i;
    check(ok, "arange_fwd writes 0..n-1");
    free(w), free(out);
}

static void test_layernorm_fwd(int N, int C)
{
    float *x = rand_buf((long)N * C, -2, 2), *w = rand_buf(C, 0.5f, 1.5f), *b = rand_buf(C, -1, 1);
    for (long i = 0; i < (long)N * C; i++) x[i] += 3.0f; // an offset mean
    float *out = zbuf((long)N * C), *mean = zbuf(N), *rstd = zbuf(N);
    double *ref = calloc((size_t)N * C, sizeof(double)), *rm = calloc((size_t)N, sizeof(double)),
           *rr = calloc((size_t)N, sizeof(double));
    for (int i = 0; i < N; i++) {
        double m = 0, v = 0;
        for (int j = 0; j < C; j++) m += x[i * C + j];
        m /= C;
        for (int j = 0; j < C; j++) v += (x[i * C + j] - m) * (x[i * C + j] - m);
        v /= C; // biased
        double rs = 1.0 / sqrt(v + 1e-5);
        for (int j = 0; j < C; j++) ref[i * C + j] = (x[i * C + j] - m) * rs * w[j] + b[j];
        rm[i] = m, rr[i] = rs;
    }
    sr_layernorm_fwd(out, mean, rstd, x, w, b, N, C, 1e-5f);
    double e = fmax(max_err(out, ref, (long)N * C), fmax(max_err(mean, rm, N), max_err(rstd, rr, N)));
    check(e < 1e-5, "layernorm_fwd N=%d C=%d out, mean, rstd vs naive (max err %.2e)", N, C, e);
    // rmsnorm
    for (int i = 0; i < N; i++) {
        double ss = 0;
        for (int j = 0; j < C; j++) ss += (double)x[i * C + j] * x[i * C + j];
        double rs = 1.0 / sqrt(ss / C + 1e-5);
        for (int j = 0; j < C; j++) ref[i * C + j] = x[i * C + j] * rs * w[j];
        rr[i] = rs;
    }
    sr_rmsnorm_fwd(out, rstd, x, w, N, C, 1e-5f);
    e = fmax(max_err(out, ref, (long)N * C), max_err(rstd, rr, N));
    check(e < 1e-5, "rmsnorm_fwd N=%d C=%d out, rstd vs naive (max err %.2e)", N, C, e);
    free(x), free(w), free(b), free(out), free(mean), free(rstd), free(ref), free(rm), free(rr);
}

static void test_activations_fwd(void)
{
    long n = 1001;
    float *x = rand_buf(n, -6, 6), *out = zbuf(n);
    double *ref = calloc((size_t)n, sizeof(double));
    x[0] = 0.0f, x[1] = -30.0f, x[2] = 30.0f, x[3] = -100.0f;
    const double s2pi = sqrt(2.0 / 3.14159265358979323846);
    for (int op = 0; op < 4; op++) {
        const char *name = (const char *[]){"gelu", "gelu_exact", "relu", "silu"}[op];
        for (long i = 0; i < n; i++) {
            double v = x[i];
            ref[i] = op == 0   ? 0.5 * v * (1.0 + tanh(s2pi * (v + 0.044715 * v * v * v)))
                     : op == 1 ? 0.5 * v * (1.0 + erf(v / sqrt(2.0)))
                     : op == 2 ? (v > 0 ? v : 0)
                               : v / (1.0 + exp(-v));
        }
        if (op == 0) sr_gelu_fwd(out, x, n);
        if (op == 1) sr_gelu_exact_fwd(out, x, n);
        if (op == 2) sr_relu_fwd(out, x, n);
        if (op == 3) sr_silu_fwd(out, x, n);
        double e = max_err(out, ref, n);
        check(e < 1e-5, "%s_fwd vs double formula incl. x = 0, +-30, -100 (max err %.2e)", name, e);
    }
    free(x), free(out), free(ref);
}

static void test_softmax_fwd(int N, int C)
{
    float *x = rand_buf((long)N * C, -10, 10), *out = zbuf((long)N * C);
    x[0] = 80.0f; // exp would overflow without max subtraction
    double *ref = calloc((size_t)N * C, sizeof(double));
    for (int i = 0; i < N; i++) {
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < C; j++) mx = fmax(mx, x[i * C + j]);
        for (int j = 0; j < C; j++) s += exp(x[i * C + j] - mx);
        for (int j = 0; j < C; j++) ref[i * C + j] = exp(x[i * C + j] - mx) / s;
    }
    sr_softmax_fwd(out, x, N, C);
    double e = max_err(out, ref, (long)N * C);
    check(e < 1e-6, "softmax_fwd N=%d C=%d vs naive (max err %.2e)", N, C, e);
    free(x), free(out), free(ref);
}

static void test_attention_fwd(int B, int T, int C, int NH)
{
    long n = (long)B * T * C, na = (long)B * NH * T * T;
    float *q = rand_buf(n, -2, 2), *k = rand_buf(n, -2, 2), *v = rand_buf(n, -1, 1);
    float *out = zbuf(n), *out2 = zbuf(n), *att = rand_buf(na, -1, 1); // garbage in att
    double *ref = calloc((size_t)n, sizeof(double)), *ratt = calloc((size_t)na, sizeof(double));
    int hd = C / NH;
    double sc = 1.0 / sqrt((double)hd);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                double *ar = ratt + (((long)b * NH + h) * T + t) * T, mx = -INFINITY, s = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    double d = 0;
                    for (int i = 0; i < hd; i++)
                        d += (double)q[((long)b * T + t) * C + h * hd + i] * k[((long)b * T + t2) * C + h * hd + i];
                    ar[t2] = d * sc;
                    mx = fmax(mx, ar[t2]);
                }
                for (int t2 = 0; t2 <= t; t2++) s += (ar[t2] = exp(ar[t2] - mx));
                for (int t2 = 0; t2 <= t; t2++) ar[t2] /= s;
                for (int i = 0; i < hd; i++) {
                    double o = 0;
                    for (int t2 = 0; t2 <= t; t2++) o += ar[t2] * v[((long)b * T + t2) * C + h * hd + i];
                    ref[((long)b * T + t) * C + h * hd + i] = o;
                }
            }
    sr_attention_fwd(out, att, q, k, v, B, T, C, NH);
    double e = fmax(max_err(out, ref, n), max_err(att, ratt, na));
    check(e < 1e-5, "attention_fwd B=%d T=%d C=%d NH=%d out, att vs naive (max err %.2e)", B, T, C, NH, e);
    sr_attention_fwd(out2, NULL, q, k, v, B, T, C, NH);
    e = max_err_ff(out2, out, n);
    check(e < 1e-6, "attention_fwd with att NULL gives the same output (max err %.2e)", e);
    free(q), free(k), free(v), free(out), free(out2), free(att), free(ref), free(ratt);
}

/* q|k|v packed in one (B, T, 3C) tensor ($attention_qkv): the same bits as the three slices
 * through sr_attention_fwd/bwd (the kernels only read and write rows 3C apart), forward and
 * backward, T on the row path (<= 16) and the blocked one */
static void test_attention_qkv(int B, int T, int C, int NH)
{
    long n = (long)B * T * C, na = (long)B * NH * T * T, rows = (long)B * T;
    float *x = rand_buf(3 * n, -1, 1), *g = rand_buf(n, -1, 1), *dx = rand_buf(3 * n, -1, 1);
    float *p[3], *dp[3], *out = zbuf(n), *att = zbuf(na), *outp = zbuf(n), *attp = zbuf(na);
    for (int i = 0; i < 3; i++) {
        p[i] = zbuf(n), dp[i] = zbuf(n);
        sr_slice_fwd(p[i], x, (int)rows, 3, C, i);
        sr_slice_fwd(dp[i], dx, (int)rows, 3, C, i); /* the accumulation starts from d(qkv)'s parts */
    }
    sr_attention_fwd(out, att, p[0], p[1], p[2], B, T, C, NH);
    sr_attention_qkv_fwd(outp, attp, x, B, T, C, NH);
    check(!memcmp(out, outp, n * sizeof(float)) && !memcmp(att, attp, na * sizeof(float)),
          "attention_qkv_fwd B=%d T=%d C=%d NH=%d: the same bits as attention_fwd of the three slices", B, T, C, NH);
    sr_attention_bwd(dp[0], dp[1], dp[2], g, p[0], p[1], p[2], att, B, T, C, NH);
    sr_attention_qkv_bwd(dx, g, x, attp, B, T, C, NH);
    int same = 1;
    for (long r = 0; r < rows; r++)
        for (int i = 0; i < 3; i++) same &= !memcmp(dx + (r * 3 + i) * C, dp[i] + r * C, C * sizeof(float));
    check(same, "attention_qkv_bwd B=%d T=%d C=%d NH=%d: d(qkv) += the same bits as attention_bwd's dq|dk|dv", B, T, C,
          NH);
    for (int i = 0; i < 3; i++) free(p[i]), free(dp[i]);
    free(x), free(g), free(dx), free(out), free(att), free(outp), free(attp);
}

static void test_slice_transpose_fwd(void)
{
    int M = 5, K = 3, n = 4;
    float *x = rand_buf((long)M * K * n, -1, 1), *out = zbuf((long)M * n);
    int ok = 1;
    for (int i = 0; i < K; i++) {
        sr_slice_fwd(out, x, M, K, n, i);
        for (int r = 0; r < M; r++)
            for (int j = 0; j < n; j++) ok &= out[r * n + j] == x[(r * K + i) * n + j];
    }
    check(ok, "slice_fwd chunk i of K along the last dim, every i");
    free(x), free(out);

    // transpose against a naive multi-index walk, all (d1, d2) pairs of 4 and 6 dims
    const long dims4[4] = {2, 3, 4, 5}, dims6[6] = {2, 1, 3, 2, 2, 3};
    for (int which = 0; which < 2; which++) {
        int nd = which ? 6 : 4;
        const long *dims = which ? dims6 : dims4;
        long total = 1;
        for (int d = 0; d < nd; d++) total *= dims[d];
        float *xt = rand_buf(total, -1, 1), *ot = zbuf(total);
        int okt = 1;
        for (int d1 = 0; d1 < nd; d1++)
            for (int d2 = 0; d2 < nd; d2++) {
                sr_transpose_fwd(ot, xt, nd, dims, d1, d2);
                long odims[6];
                for (int d = 0; d < nd; d++) odims[d] = dims[d];
                odims[d1] = dims[d2], odims[d2] = dims[d1];
                for (long f = 0; f < total; f++) {
                    long idx[6], rem = f;
                    for (int d = nd - 1; d >= 0; d--) idx[d] = rem % dims[d], rem /= dims[d];
                    long t = idx[d1];
                    idx[d1] = idx[d2], idx[d2] = t;
                    long o = 0;
                    for (int d = 0; d < nd; d++) o = o * odims[d] + idx[d];
                    okt &= ot[o] == xt[f];
                }
            }
        check(okt, "transpose_fwd %d dims, every (d1, d2) vs naive index walk", nd);
        free(xt), free(ot);
    }
}

static void test_crossentropy_fwd(int N, int V)
{
    float *l = rand_buf((long)N * V, -5, 5), *lse = zbuf(N);
    int32_t *t = malloc((size_t)N * sizeof(int32_t));
    for (int i = 0; i < N; i++) t[i] = (int32_t)(urand() * V);
    l[0] = 90.0f; // overflow without log-sum-exp
    double loss = 0, *rl = calloc((size_t)N, sizeof(double));
    for (int i = 0; i < N; i++) {
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < V; j++) mx = fmax(mx, l[(long)i * V + j]);
        for (int j = 0; j < V; j++) s += exp(l[(long)i * V + j] - mx);
        rl[i] = mx + log(s);
        loss += -(l[(long)i * V + t[i]] - rl[i]); // -log_softmax[target]
    }
    loss /= N;
    float got = sr_crossentropy_fwd(lse, l, t, N, V, 0);
    double e = fmax(fabs(got - loss) / fmax(fabs(loss), 1.0), max_err(lse, rl, N));
    check(e < 1e-5, "crossentropy_fwd N=%d V=%d loss %.6f vs naive log-softmax %.6f, lse (max err %.2e)",
          N, V, got, loss, e);
    // backward, every entry: dloss * (softmax - onehot) / N, error relative to the largest entry
    {
        float dloss = 0.7f, *dl = zbuf((long)N * V);
        sr_crossentropy_bwd(dl, l, lse, t, dloss, N, V, 0);
        double emax = 0, gmax = 0;
        for (int i = 0; i < N; i++)
            for (int j = 0; j < V; j++) {
                double ref = dloss * (exp(l[(long)i * V + j] - rl[i]) - (j == t[i])) / N;
                emax = fmax(emax, fabs(dl[(long)i * V + j] - ref));
                gmax = fmax(gmax, fabs(ref));
            }
        check(emax / gmax < 1e-5, "crossentropy_bwd N=%d V=%d vs naive softmax - onehot (max rel err %.2e)",
              N, V, emax / gmax);
        free(dl);
    }
    // an out-of-range target (e.g. -100) adds no loss and no gradient, but still counts in N
    t[1] = -100;
    double ref2 = 0;
    for (int i = 0; i < N; i++)
        if (i != 1) ref2 += rl[i] - l[(long)i * V + t[i]];
    ref2 /= N;
    got = sr_crossentropy_fwd(lse, l, t, N, V, 0);
    float *dl = zbuf((long)N * V);
    sr_crossentropy_bwd(dl, l, lse, t, 1.0f, N, V, 0);
    int zero = 1;
    for (int j = 0; j < V; j++) zero &= dl[(long)1 * V + j] == 0.0f;
    e = fabs(got - ref2) / fmax(fabs(ref2), 1.0);
    check(e < 1e-5 && zero, "crossentropy target -100: row adds 0 loss, 0 grad, mean still over N (err %.2e)", e);
    free(l), free(lse), free(t), free(rl), free(dl);
}

/* a training step's loss (compiler/lossfuse.c): sr_crossentropy_fwd_bwd's loss and lse are
 * sr_crossentropy_fwd's, and the gradient it leaves over the logits is sr_crossentropy_bwd's
 * into zeros, bit for bit: with an ignored row and padding columns (nv < ld) */
/* a loss case for the fused forms: logits l (N, ld) and a copy l2, targets t (classes nv, one row
 * ignored), and the plain loss's lse, gradient dl (d loss 0.7, into zeros) and loss */
typedef struct {
    float *l, *l2, *lse, *dl, loss;
    int32_t *t;
} CeCase;
static CeCase ce_case(int N, int ld, int nv)
{
    CeCase c;
    c.l = rand_buf((long)N * ld, -5, 5), c.lse = zbuf(N), c.dl = zbuf((long)N * ld);
    c.t = malloc((size_t)N * sizeof(int32_t));
    for (int i = 0; i < N; i++) c.t[i] = (int32_t)(urand() * nv);
    c.t[N / 2] = -100;
    c.l2 = malloc(sizeof(float) * (size_t)N * ld);
    memcpy(c.l2, c.l, sizeof(float) * (size_t)N * ld);
    c.loss = sr_crossentropy_fwd(c.lse, c.l, c.t, N, ld, nv);
    sr_crossentropy_bwd(c.dl, c.l, c.lse, c.t, 0.7f, N, ld, nv);
    return c;
}
static void ce_case_free(CeCase *c) { free(c->l), free(c->l2), free(c->lse), free(c->dl), free(c->t); }

static void test_crossentropy_fused(int N, int ld, int nv)
{
    CeCase c = ce_case(N, ld, nv);
    float *l = c.l, *l2 = c.l2, *lse = c.lse, *dl = c.dl, loss = c.loss, *lse2 = zbuf(N);
    int32_t *t = c.t;
    float loss2 = sr_crossentropy_fwd_bwd(lse2, l2, t, 0.7f, N, ld, nv);
    check(loss2 == loss && !memcmp(lse, lse2, sizeof(float) * (size_t)N) &&
              !memcmp(dl, l2, sizeof(float) * (size_t)N * ld),
          "crossentropy fwd+bwd in one pass N=%d V=%d classes %d: the loss (%.7f, %.7f), lse and gradient bit for bit", N,
          ld, nv, loss2, loss);
    sr_crossentropy_bwd_over(l, lse, t, 0.7f, N, ld, nv); /* after a plain forward: the second half */
    check(!memcmp(dl, l, sizeof(float) * (size_t)N * ld), "crossentropy bwd over the logits N=%d V=%d: bit for bit", N,
          ld);
    free(lse2);
    ce_case_free(&c);
}

/* the vocab-parallel loss on one tensor rank (tp 1: no collectives) against the plain one, with an
 * ignored row and padding columns: loss, lse and gradient; its fused forward (lossfuse.c) leaves
 * its backward's gradient into zeros over the logits, bit for bit, and so does its second half
 * after a plain forward */
static void test_crossentropy_vp(int N, int ld, int nv)
{
    sr_exec e;
    memset(&e, 0, sizeof e);
    e.tp = 1;
    CeCase c = ce_case(N, ld, nv);
    float *l = c.l, *l2 = c.l2, *lse = c.lse, *dl = c.dl, loss = c.loss;
    float *lse2 = zbuf(N), *dv = zbuf((long)N * ld), *lse3 = zbuf(N);
    int32_t *t = c.t;
    float lv = sr_crossentropy_vp_fwd(&e, lse2, l, t, N, ld, nv);
    sr_crossentropy_vp_bwd(&e, dv, l, lse2, t, 0.7f, N, ld, nv);
    double el = fabs(lv - loss) / fmax(fabs(loss), 1.0), es = 0.0, eg = 0.0;
    for (int i = 0; i < N; i++) es = fmax(es, fabs(lse2[i] - lse[i]) / fmax(fabs(lse[i]), 1.0));
    for (long k = 0; k < (long)N * ld; k++) eg = fmax(eg, fabs(dv[k] - dl[k]));
    int zero = 1;
    for (int j = 0; j < ld; j++) zero &= dv[(long)(N / 2) * ld + j] == 0.0f;
    check(el < 1e-5 && es < 1e-5 && eg < 1e-7 && zero,
          "crossentropy_vp (tp 1) N=%d V=%d classes %d: the plain loss (err %.1e), lse (%.1e), gradient (%.1e), an "
          "ignored row adds nothing", N, ld, nv, el, es, eg);
    float lf = sr_crossentropy_vp_fwd_bwd(&e, lse3, l2, t, 0.7f, N, ld, nv);
    check(lf == lv && !memcmp(lse3, lse2, sizeof(float) * (size_t)N) &&
              !memcmp(l2, dv, sizeof(float) * (size_t)N * ld),
          "crossentropy_vp fused N=%d V=%d: the loss, lse and the gradient over the logits bit for bit", N, ld);
    memcpy(l2, l, sizeof(float) * (size_t)N * ld);
    sr_crossentropy_vp_bwd_over(&e, l2, lse2, t, 0.7f, N, ld, nv);
    check(!memcmp(l2, dv, sizeof(float) * (size_t)N * ld), "crossentropy_vp bwd over the logits N=%d V=%d: bit for bit",
          N, ld);
    free(lse2), free(lse3), free(dv);
    ce_case_free(&c);
}

/* a vocabulary of V classes padded with P columns (cross_entropy(logits,
 * targets, V) on V + P columns): the unpadded loss, lse and gradient, and
 * nothing for the padding columns, whatever their logits */
static void test_crossentropy_padded(int N, int V, int P)
{
    int W = V + P;
    float *l = rand_buf((long)N * V, -5, 5), *lp = rand_buf((long)N * W, 20, 40); // padding logits dominate
    int32_t *t = malloc((size_t)N * sizeof(int32_t));
    for (int i = 0; i < N; i++) {
        t[i] = (int32_t)(urand() * V);
        memcpy(lp + (long)i * W, l + (long)i * V, sizeof(float) * (size_t)V);
    }
    t[N - 1] = V; // a padding id as a target: ignored like -100
    float *lse = zbuf(N), *lsep = zbuf(N), *dl = zbuf((long)N * V), *dlp = rand_buf((long)N * W, -1, 1);
    float *dlp0 = malloc(sizeof(float) * (size_t)N * (size_t)W);
    memcpy(dlp0, dlp, sizeof(float) * (size_t)N * (size_t)W);
    float ref = sr_crossentropy_fwd(lse, l, t, N, V, 0), got = sr_crossentropy_fwd(lsep, lp, t, N, W, V);
    sr_crossentropy_bwd(dl, l, lse, t, 0.7f, N, V, 0);
    sr_crossentropy_bwd(dlp, lp, lsep, t, 0.7f, N, W, V);
    double eg = 0, el = 0;
    int pad_same = 1;
    for (int i = 0; i < N; i++) {
        el = fmax(el, fabs(lse[i] - lsep[i]));
        for (int j = 0; j < W; j++) {
            long k = (long)i * W + j;
            if (j < V) eg = fmax(eg, fabs((dlp[k] - dlp0[k]) - dl[(long)i * V + j]));
            else pad_same &= dlp[k] == dlp0[k];
        }
    }
    check(got == ref && el == 0 && eg < 1e-6 && pad_same,
          "crossentropy with %d classes padded to %d: loss %.6f = unpadded %.6f, lse (err %.1e) and gradient "
          "(err %.1e) the unpadded ones, padding columns untouched (%s)", V, W, got, ref, el, eg,
          pad_same ? "yes" : "no");
    free(l), free(lp), free(t), free(lse), free(lsep), free(dl), free(dlp), free(dlp0);
}

/* ------------------------------------------------------------------------ */
/* Dropout and RNG                                                           */

static void test_dropout(void)
{
    long n = 1000000;
    float *x = rand_buf(n, -1, 1), *out = zbuf(n), *dx = zbuf(n), *ones = zbuf(n);
    for (long i = 0; i < n; i++) ones[i] = 1.0f;

    // uniform in [0,1), mean 1/2
    double s = 0;
    int inrange = 1;
    for (long i = 0; i < n; i++) {
        float u = sr_rand_uniform(42, 5, (uint64_t)i);
        inrange &= u >= 0.0f && u < 1.0f;
        s += u;
    }
    check(inrange && fabs(s / n - 0.5) < 2e-3, "rand_uniform in [0,1), mean %.5f", s / n);
    check(sr_rand_uniform(1, 2, 3) == sr_rand_uniform(1, 2, 3) &&
              sr_rand_uniform(1, 2, 3) != sr_rand_uniform(1, 2, 4) &&
              sr_rand_uniform(1, 2, 3) != sr_rand_uniform(1, 3, 3) &&
              sr_rand_uniform(1, 2, 3) != sr_rand_uniform(2, 2, 3),
          "rand_uniform is a pure function of (seed, stream, counter) and depends on each");

    sr_dropout_fwd(out, x, n, 0.0f, 1, 2, 3, 0);
    check(memcmp(out, x, (size_t)n * sizeof(float)) == 0, "dropout p=0 is the identity");

    float p = 0.1f;
    sr_dropout_fwd(out, x, n, p, 99, 12, 4, 1000);
    long kept = 0;
    int scaled = 1, agree = 1, rule = 1;
    for (long i = 0; i < n; i++) {
        int k = out[i] != 0.0f;
        kept += k;
        if (k) scaled &= out[i] == x[i] * (1.0f / (1.0f - p));
        rule &= k == (sr_rand_uniform(99, ((uint64_t)12 << 20) ^ 4, 1000 + (uint64_t)i) >= p);
    }
    double frac = (double)kept / n;
    check(fabs(frac - 0.9) < 0.005 * 0.9, "dropout p=0.1 keeps %.5f of 1e6 (within 0.5%% of 0.9)", frac);
    check(scaled, "dropout kept values scaled by 1/(1-p)");
    check(rule, "dropout keeps i iff rand_uniform(seed, step<<20 ^ op, base+i) >= p");

    // bwd recomputes the same mask: with dout = 1, dx is the forward's mask * scale
    sr_dropout_bwd(dx, ones, n, p, 99, 12, 4, 1000);
    for (long i = 0; i < n; i++) agree &= (dx[i] != 0.0f) == (out[i] != 0.0f);
    check(agree, "dropout fwd and bwd masks agree");

    // layout independence: [base, base+n) in two halves equals one call
    float *out2 = zbuf(n);
    long h = 333331;
    sr_dropout_fwd(out2, x, h, p, 99, 12, 4, 1000);
    sr_dropout_fwd(out2 + h, x + h, n - h, p, 99, 12, 4, 1000 + (uint64_t)h);
    check(memcmp(out, out2, (size_t)n * sizeof(float)) == 0,
          "dropout over [base, base+n) in two calls equals one call");

    // different step or op give different masks
    sr_dropout_fwd(out2, x, n, p, 99, 13, 4, 1000);
    long same = 0;
    for (long i = 0; i < n; i++) same += (out2[i] != 0.0f) == (out[i] != 0.0f);
    check(same < n - 1000, "dropout masks differ between steps (%ld of %ld decisions equal)", same, n);
    free(x), free(out), free(out2), free(dx), free(ones);
}

/* ------------------------------------------------------------------------ */
/* Optimizer, reductions, copy                                               */

static void test_adamw(void)
{
    enum { n = 9 };
    float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    for (int withwd = 0; withwd < 2; withwd++) {
        float wd = withwd ? 0.1f : 0.0f;
        float p[n], m[n] = {0}, v[n] = {0}, g[n];
        double rp[n], rm[n] = {0}, rv[n] = {0};
        for (int i = 0; i < n; i++) rp[i] = p[i] = frand(-1, 1);
        double e = 0;
        for (long t = 1; t <= 3; t++) {
            for (int i = 0; i < n; i++) g[i] = frand(-1, 1);
            g[0] = 0.0f; // a zero gradient still decays and moves with momentum
            sr_adamw_step(p, g, m, v, n, lr, b1, b2, eps, wd, t);
            for (int i = 0; i < n; i++) {
                // torch.optim.AdamW, one scalar at a time
                rp[i] *= 1.0 - (double)lr * wd;
                rm[i] = b1 * rm[i] + (1.0 - b1) * g[i];
                rv[i] = b2 * rv[i] + (1.0 - b2) * (double)g[i] * g[i];
                double mhat = rm[i] / (1.0 - pow(b1, (double)t));
                double vhat = rv[i] / (1.0 - pow(b2, (double)t));
                rp[i] -= lr * mhat / (sqrt(vhat) + eps);
            }
            e = fmax(e, fmax(max_err(p, rp, n), fmax(max_err(m, rm, n), max_err(v, rv, n))));
        }
        check(e < 1e-6, "adamw 3 steps (wd=%g) vs scalar torch formula (max err %.2e)", wd, e);
    }
}

static void test_misc(void)
{
    long n = 100003;
    float *x = rand_buf(n, -1, 1), *y = zbuf(n);
    double ref = 0;
    for (long i = 0; i < n; i++) ref += (double)x[i] * x[i];
    double got = sr_sumsq(x, n);
    check(fabs(got - ref) / ref < 1e-12, "sumsq in double (rel err %.2e)", fabs(got - ref) / ref);
    check(sr_sumsq(x, 0) == 0.0, "sumsq of 0 elements is 0");
    sr_copy(y, x, n);
    check(memcmp(x, y, (size_t)n * sizeof(float)) == 0, "copy");
    sr_zero(y, n);
    int z = 1;
    for (long i = 0; i < n; i++) z &= y[i] == 0.0f;
    check(z, "zero");
    free(x), free(y);
}

/* Summation orders are fixed by the shape: 1 thread and many give the same bits. */
static void test_determinism(void)
{
#ifdef _OPENMP
    long rows = 4000, nb = 100, N = 300, V = 1000;
    float *d = rand_buf(rows * nb, -1, 1), *db1 = zbuf(nb), *db2 = zbuf(nb);
    float *l = rand_buf(N * V, -3, 3), *lse = zbuf(N);
    int32_t *t = malloc((size_t)N * sizeof(int32_t));
    for (long i = 0; i < N; i++) t[i] = (int32_t)(urand() * V);
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    sr_add_bwd(NULL, db1, d, rows * nb, nb);
    double s1 = sr_sumsq(d, rows * nb);
    float c1 = sr_crossentropy_fwd(lse, l, t, (int)N, (int)V, 0);
    omp_set_num_threads(saved > 1 ? saved : 4);
    sr_add_bwd(NULL, db2, d, rows * nb, nb);
    double s2 = sr_sumsq(d, rows * nb);
    float c2 = sr_crossentropy_fwd(lse, l, t, (int)N, (int)V, 0);
    omp_set_num_threads(saved);
    check(memcmp(db1, db2, (size_t)nb * sizeof(float)) == 0 && s1 == s2 && c1 == c2,
          "reductions bit-identical with 1 and %d threads", saved > 1 ? saved : 4);
    free(d), free(db1), free(db2), free(l), free(lse), free(t);
#endif
}

/* Llama 3.1's frequency scaling in double, written from its definition:
 * wavelengths longer than orig / low are stretched by factor, shorter than
 * orig / high kept, and in between mixed by s = (orig / wavelength - low) / (high - low) */
static double llama3_inv_freq(double f, const float sc[4])
{
    if (sc[0] == 1.0f) return f;
    double wl = 2 * 3.14159265358979323846 / f, factor = sc[0], low = sc[1], high = sc[2], orig = sc[3];
    if (wl > orig / low) return f / factor;
    if (wl < orig / high) return f;
    double s = (orig / wl - low) / (high - low);
    return (1 - s) * f / factor + s * f;
}

/* rope against the formula in double: in head h, channel i < hd/2 and
 * channel i + hd/2 of the row at position t are (a, b) -> (a cos - b sin,
 * b cos + a sin) with the angle t * theta^(-2i/hd) (Hugging Face's
 * rotate_half), the frequency scaled as Llama 3.1 does when sc[0] != 1;
 * position 0 is the identity, and the output may be the input */
static void test_rope_fwd(int B, int T, int C, int NH, float theta, const float sc[4])
{
    long n = (long)B * T * C;
    int hd = C / NH, half = hd / 2, scaled = 0;
    float *x = rand_buf(n, -1, 1), *out = zbuf(n), *io = malloc(sizeof(float) * (size_t)n);
    double *ref = calloc((size_t)n, sizeof(double));
    for (int i = 0; i < half; i++) {
        double f = pow((double)theta, -2.0 * i / hd);
        scaled += fabs(llama3_inv_freq(f, sc) - f) > 1e-3 * f;
    }
    for (long r = 0; r < (long)B * T; r++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < half; i++) {
                double a = (double)(r % T) * llama3_inv_freq(pow((double)theta, -2.0 * i / hd), sc);
                long j = r * C + (long)h * hd + i;
                ref[j] = x[j] * cos(a) - x[j + half] * sin(a);
                ref[j + half] = x[j + half] * cos(a) + x[j] * sin(a);
            }
    sr_rope_fwd(out, x, (long)B * T, T, C, NH, theta, sc[0], sc[1], sc[2], sc[3]);
    double e = max_err(out, ref, n);
    check(e < 1e-5, "rope_fwd %dx%dx%d, %d heads, theta %g, factor %g (%d of %d frequencies scaled) vs the formula "
          "(max err %.2e)", B, T, C, NH, theta, sc[0], scaled, half, e);
    if (sc[0] != 1.0f) check(scaled > 0 && scaled < half, "rope_fwd: the scaled case scales some frequencies, not all");
    check(memcmp(out, x, sizeof(float) * (size_t)C) == 0, "rope_fwd: position 0 is left as it is");
    memcpy(io, x, sizeof(float) * (size_t)n);
    sr_rope_fwd(io, io, (long)B * T, T, C, NH, theta, sc[0], sc[1], sc[2], sc[3]);
    check(memcmp(io, out, sizeof(float) * (size_t)n) == 0, "rope_fwd in place gives the same values");
    free(x), free(out), free(io), free(ref);
}

/* repeat_kv against its definition: query head h reads key/value head h / rep */
static void test_repeat_kv_fwd(int N, int NKV, int HD, int REP)
{
    long nin = (long)N * NKV * HD, nout = nin * REP;
    float *x = rand_buf(nin, -1, 1), *out = zbuf(nout);
    sr_repeat_kv_fwd(out, x, N, NKV, HD, REP);
    int ok = 1;
    for (long r = 0; r < N; r++)
        for (int h = 0; h < NKV * REP; h++)
            for (int i = 0; i < HD; i++)
                ok &= out[(r * NKV * REP + h) * HD + i] == x[(r * NKV + h / REP) * HD + i];
    check(ok, "repeat_kv_fwd %d rows, %d heads of %d, x%d: query head h gets key/value head h / %d", N, NKV, HD, REP,
          REP);
    free(x), free(out);
}

int main(void)
{
    test_matmul_fwd(5, 7, 3);
    test_matmul_fwd(64, 65, 33);
    test_matmul_fwd(150, 64, 40);
    test_matmul_fwd(70, 130, 90);
    test_broadcast_fwd(35, 7);
    test_broadcast_fwd(70 * 300, 300);
    test_broadcast_fwd(45, 45);
    test_embedding_fwd();
    test_layernorm_fwd(5, 7);
    test_layernorm_fwd(70, 300);
    test_activations_fwd();
    test_softmax_fwd(5, 7);
    test_softmax_fwd(40, 500);
    const float none[4] = {1.0f, 1.0f, 4.0f, 8192.0f}, l31[4] = {8.0f, 1.0f, 4.0f, 8192.0f},
                short_ctx[4] = {32.0f, 1.0f, 4.0f, 32.0f};
    test_rope_fwd(2, 7, 12, 3, 10000.0f, none);
    test_rope_fwd(1, 50, 256, 2, 500000.0f, none);
    test_rope_fwd(1, 50, 256, 2, 500000.0f, l31); /* Llama 3.1 8B's settings, hd 128 */
    test_rope_fwd(2, 40, 64, 2, 10000.0f, short_ctx);
    test_repeat_kv_fwd(5, 2, 6, 4);
    test_attention_fwd(2, 5, 12, 3);
    test_attention_fwd(2, 33, 48, 3);
    test_attention_fwd(2, 70, 12, 2);
    test_attention_qkv(2, 9, 12, 3), test_attention_qkv(2, 70, 48, 2);
    test_slice_transpose_fwd();
    test_crossentropy_fwd(5, 7);
    test_crossentropy_fwd(64, 1000);
    test_crossentropy_fused(5, 7, 7), test_crossentropy_fused(64, 1000, 1000), test_crossentropy_fused(33, 128, 100);
    test_crossentropy_vp(5, 7, 7), test_crossentropy_vp(64, 1000, 1000), test_crossentropy_vp(33, 128, 100);
    test_crossentropy_padded(9, 37, 11);
    test_crossentropy_padded(5, 50257, 47);
    test_gradients();
    test_dropout();
    test_adamw();
    test_misc();
    test_determinism();
    printf("%d passed, %d failed\n", npass, nfail);
    return nfail ? 1 : 0;
}
