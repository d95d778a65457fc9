/* kernel_bench.c: where a GPT-2 training step's time goes in the host
 * kernels (runtime/host/kernels.c), kernel by kernel, at a model's shapes.
 *
 * Every kernel the generated program calls in one step (the op list of
 * examples/gpt2.model as `shardc build` emits it: one block's forward and
 * backward repeated n_layer times, the tied head, the loss, then the
 * optimizer's passes in runtime/train.c) is run on its own, on buffers of
 * the step's sizes, `reps` times (round robin over the kernels); its median
 * time is multiplied by the number of calls per step. The sum is a step's kernel time without the
 * program's own overheads, to set against the measured step time.
 *
 * Build and run (bench/kernel_bench.sh does both):
 *   cc -O2 -fopenmp -Iruntime/include bench/kernel_bench.c BUILD/libshardrt.a -lopenblas -lm
 *   OMP_NUM_THREADS=2 ./kernel_bench [B T C NH V L reps P]
 *   (default 4 256 768 12 50257 12 5 256; P = n_positions, for the parameter count)
 *
 * Output: one Markdown table row per kernel (calls per step, median and
 * min ms per call, ms per step, share, GFLOP/s for the matmuls and the
 * attention, GB/s of compulsory traffic for the memory-bound kernels).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <omp.h>

#include <cblas.h>

#include "shardrt.h"

static long B = 4, T = 256, C = 768, NH = 12, V = 50257, L = 12, P = 256;
static int reps = 5;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *buf(long n, float scale)
{
    float *p = malloc((size_t)n * sizeof(float));
    if (!p) { fprintf(stderr, "out of memory (%ld floats)\n", n); exit(1); }
    uint64_t s = 0x9e3779b97f4a7c15ULL ^ (uint64_t)n;
    for (long i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        p[i] = scale * ((float)((s >> 40) & 0xffffff) / 16777216.0f - 0.5f);
    }
    return p;
}

/* buffers, allocated once at the largest sizes */
static float *x, *y, *z, *w, *w2, *g, *g2, *att, *logits, *dlogits, *lse, *mean, *rstd;
static float *pp, *pg, *pm, *pv;
static int32_t *tgt;
static long nparams;

enum {
    K_LN_F, K_MM_QKV_F, K_MM_PROJ_F, K_MM_FC_F, K_MM_FCP_F, K_BIAS3_F, K_BIAS_F, K_BIAS4_F, K_RESID_F,
    K_SLICE_F, K_ATT_F, K_GELU_F, K_DROP_F, K_HEAD_F, K_CE_F,
    K_LN_B, K_MM_QKV_B, K_MM_PROJ_B, K_MM_FC_B, K_MM_FCP_B, K_BIAS3_B, K_BIAS_B, K_BIAS4_B, K_RESID_B,
    K_SLICE_B, K_ATT_B, K_GELU_B, K_DROP_B, K_HEAD_B, K_CE_B,
    K_ZERO_C, K_ZERO_3C, K_ZERO_4C, K_ZERO_LOGITS, K_ZERO_GRADS, K_SUMSQ, K_SCALE, K_ADAMW, NK
};

typedef struct kinfo {
    const char *name;
    double calls;   /* per step */
    double flops;   /* per call, 0 if memory-bound */
    double bytes;   /* per call, compulsory traffic (reads + writes), 0 if compute-bound */
} kinfo;
static kinfo K[NK];

static void run(int k)
{
    long N = B * T;
    switch (k) {
    case K_LN_F: sr_layernorm_fwd(y, mean, rstd, x, w, w + C, (int)N, (int)C, 1e-5f); break;
    case K_MM_QKV_F: sr_matmul_fwd(y, x, w, (int)N, (int)C, (int)(3 * C)); break;
    case K_MM_PROJ_F: sr_matmul_fwd(y, x, w, (int)N, (int)C, (int)C); break;
    case K_MM_FC_F: sr_matmul_fwd(y, x, w, (int)N, (int)C, (int)(4 * C)); break;
    case K_MM_FCP_F: sr_matmul_fwd(y, x, w, (int)N, (int)(4 * C), (int)C); break;
    case K_BIAS3_F: sr_add_fwd(y, x, w, N * 3 * C, 3 * C); break;
    case K_BIAS_F: sr_add_fwd(y, x, w, N * C, C); break;
    case K_BIAS4_F: sr_add_fwd(y, x, w, N * 4 * C, 4 * C); break;
    case K_RESID_F: sr_add_fwd(y, x, z, N * C, N * C); break;
    case K_SLICE_F: sr_slice_fwd(y, x, (int)N, 3, (int)C, 1); break;
    case K_ATT_F: sr_attention_fwd(y, att, x, z, x + N * C, (int)B, (int)T, (int)C, (int)NH); break;
    case K_GELU_F: sr_gelu_fwd(y, x, N * 4 * C); break;
    case K_DROP_F: sr_dropout_fwd(y, x, N * C, 0.0f, 1, 1, 1, 0); break;
    case K_HEAD_F: sr_matmul_t_fwd(logits, x, pp, (int)N, (int)C, (int)V); break;
    case K_CE_F: sr_crossentropy_fwd(lse, logits, tgt, (int)N, (int)V, 0); break;
    case K_LN_B: sr_layernorm_bwd(y, g, g + C, z, x, w, mean, rstd, (int)N, (int)C); break;
    case K_MM_QKV_B: sr_matmul_bwd(y, g, z, x, w, (int)N, (int)C, (int)(3 * C)); break;
    case K_MM_PROJ_B: sr_matmul_bwd(y, g, z, x, w, (int)N, (int)C, (int)C); break;
    case K_MM_FC_B: sr_matmul_bwd(y, g, z, x, w, (int)N, (int)C, (int)(4 * C)); break;
    case K_MM_FCP_B: sr_matmul_bwd(y, g, z, x, w, (int)N, (int)(4 * C), (int)C); break;
    case K_BIAS3_B: sr_add_bwd(y, g, z, N * 3 * C, 3 * C); break;
    case K_BIAS_B: sr_add_bwd(y, g, z, N * C, C); break;
    case K_BIAS4_B: sr_add_bwd(y, g, z, N * 4 * C, 4 * C); break;
    case K_RESID_B: sr_add_bwd(y, g2, z, N * C, N * C); break;
    case K_SLICE_B: sr_slice_bwd(y, x, (int)N, 3, (int)C, 1); break;
    case K_ATT_B:
        sr_attention_bwd(y, y + N * C, y + 2 * N * C, z, x, x + N * C, x + 2 * N * C, att, (int)B, (int)T,
                         (int)C, (int)NH);
        break;
    case K_GELU_B: sr_gelu_bwd(y, z, x, N * 4 * C); break;
    case K_DROP_B: sr_dropout_bwd(y, x, N * C, 0.0f, 1, 1, 1, 0); break;
    case K_HEAD_B: sr_matmul_t_bwd(y, pg, dlogits, x, pp, (int)N, (int)C, (int)V); break;
    case K_CE_B: sr_crossentropy_bwd(dlogits, logits, lse, tgt, 1.0f, (int)N, (int)V, 0); break;
    case K_ZERO_C: sr_zero(y, N * C); break;
    case K_ZERO_3C: sr_zero(y, N * 3 * C); break;
    case K_ZERO_4C: sr_zero(y, N * 4 * C); break;
    case K_ZERO_LOGITS: sr_zero(dlogits, N * V); break;
    case K_ZERO_GRADS: sr_zero(pg, nparams); break;
    case K_SUMSQ: {
        volatile double s = sr_sumsq(pg, nparams);
        (void)s;
        break;
    }
    case K_SCALE: sr_scale_fwd(pg, pg, 0.999f, nparams); break;
    case K_ADAMW: sr_adamw_step(pp, pg, pm, pv, nparams, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 3); break;
    }
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    long *dims[] = {&B, &T, &C, &NH, &V, &L};
    for (int i = 1; i < argc && i <= 6; i++) *dims[i - 1] = atol(argv[i]);
    if (argc > 7) reps = atoi(argv[7]);
    if (argc > 8) P = atol(argv[8]);
    long N = B * T, F = 4;
    double f = 4.0; /* bytes per float */
    /* parameters: wte, wpe (P positions), per layer 2 LN, c_attn, c_proj, c_fc, c_proj, ln_f */
    nparams = V * C + P * C + L * (4 * C + 3 * C * C + 3 * C + C * C + C + 4 * C * C + 4 * C + 4 * C * C + C) + 2 * C;
    long act = N * 4 * C > 3 * N * C ? N * 4 * C : 3 * N * C;
    x = buf(act, 2.0f); y = buf(act, 1.0f); z = buf(act, 1.0f);
    w = buf(4 * C * C + 2 * C, 0.05f); w2 = buf(4 * C * C, 0.05f); g = buf(4 * C * C + 2 * C, 0.0f);
    g2 = buf(act, 0.0f);
    att = buf(B * NH * T * T, 0.0f);
    logits = buf(N * V, 1.0f); dlogits = buf(N * V, 0.0f); lse = buf(N, 0.0f);
    mean = buf(N, 0.0f); rstd = buf(N, 1.0f);
    pp = buf(nparams, 0.02f); pg = buf(nparams, 0.01f); pm = buf(nparams, 0.001f); pv = buf(nparams, 0.0f);
    for (long i = 0; i < nparams; i++) pv[i] = pv[i] * pv[i] + 1e-6f;
    tgt = malloc((size_t)N * sizeof(int32_t));
    for (long i = 0; i < N; i++) tgt[i] = (int32_t)((i * 7919) % V);
    sr_layernorm_fwd(y, mean, rstd, x, w, w + C, (int)N, (int)C, 1e-5f);
    sr_attention_fwd(y, att, x, z, x + N * C, (int)B, (int)T, (int)C, (int)NH); /* valid probabilities */
    sr_matmul_t_fwd(logits, x, pp, (int)N, (int)C, (int)V);
    sr_crossentropy_fwd(lse, logits, tgt, (int)N, (int)V, 0);
    (void)w2; (void)F;

    double mm = 2.0 * N * C * C; /* flops of an (N,C)x(C,C) matmul */
    /* causal attention: QK^T and PV over the lower triangle, 2*2*B*NH*hd*T*(T+1)/2 useful flops */
    double attf = 2.0 * B * C * (double)T * (T + 1);
    long L2 = 2 * L + 1;
    K[K_LN_F] = (kinfo){"layernorm fwd", L2, 0, f * (2.0 * N * C)};
    K[K_MM_QKV_F] = (kinfo){"matmul fwd c_attn (C->3C)", L, 3 * mm, 0};
    K[K_MM_PROJ_F] = (kinfo){"matmul fwd attn.c_proj (C->C)", L, mm, 0};
    K[K_MM_FC_F] = (kinfo){"matmul fwd c_fc (C->4C)", L, 4 * mm, 0};
    K[K_MM_FCP_F] = (kinfo){"matmul fwd mlp.c_proj (4C->C)", L, 4 * mm, 0};
    K[K_BIAS3_F] = (kinfo){"bias add fwd [3C]", L, 0, f * 2.0 * N * 3 * C};
    K[K_BIAS_F] = (kinfo){"bias add fwd [C]", 2 * L, 0, f * 2.0 * N * C};
    K[K_BIAS4_F] = (kinfo){"bias add fwd [4C]", L, 0, f * 2.0 * N * 4 * C};
    K[K_RESID_F] = (kinfo){"residual add fwd", 2 * L + 1, 0, f * 3.0 * N * C};
    K[K_SLICE_F] = (kinfo){"slice q/k/v fwd", 3 * L, 0, f * 2.0 * N * C};
    K[K_ATT_F] = (kinfo){"attention fwd", L, attf, 0};
    K[K_GELU_F] = (kinfo){"gelu fwd", L, 0, f * 2.0 * N * 4 * C};
    K[K_DROP_F] = (kinfo){"dropout fwd (p=0: a copy)", 2 * L + 1, 0, f * 2.0 * N * C};
    K[K_HEAD_F] = (kinfo){"matmul_t fwd lm head (C->V)", 1, 2.0 * N * C * V, 0};
    K[K_CE_F] = (kinfo){"cross-entropy fwd", 1, 0, f * (double)N * V};
    K[K_LN_B] = (kinfo){"layernorm bwd", L2, 0, f * 4.0 * N * C};
    K[K_MM_QKV_B] = (kinfo){"matmul bwd c_attn", L, 6 * mm, 0};
    K[K_MM_PROJ_B] = (kinfo){"matmul bwd attn.c_proj", L, 2 * mm, 0};
    K[K_MM_FC_B] = (kinfo){"matmul bwd c_fc", L, 8 * mm, 0};
    K[K_MM_FCP_B] = (kinfo){"matmul bwd mlp.c_proj", L, 8 * mm, 0};
    K[K_BIAS3_B] = (kinfo){"bias add bwd [3C]", L, 0, f * 3.0 * N * 3 * C};
    K[K_BIAS_B] = (kinfo){"bias add bwd [C]", 2 * L, 0, f * 3.0 * N * C};
    K[K_BIAS4_B] = (kinfo){"bias add bwd [4C]", L, 0, f * 3.0 * N * 4 * C};
    K[K_RESID_B] = (kinfo){"residual add bwd", 2 * L + 1, 0, f * 5.0 * N * C};
    K[K_SLICE_B] = (kinfo){"slice q/k/v bwd", 3 * L, 0, f * 3.0 * N * C};
    K[K_ATT_B] = (kinfo){"attention bwd", L, 2 * attf, 0};
    K[K_GELU_B] = (kinfo){"gelu bwd", L, 0, f * 4.0 * N * 4 * C};
    K[K_DROP_B] = (kinfo){"dropout bwd (p=0: a copy)", 2 * L + 1, 0, f * 2.0 * N * C};
    K[K_HEAD_B] = (kinfo){"matmul_t bwd lm head", 1, 4.0 * N * C * V, 0};
    K[K_CE_B] = (kinfo){"cross-entropy bwd", 1, 0, f * 3.0 * N * V};
    /* sr_zero calls of one step of the generated gpt2 program, by size (from its source) */
    K[K_ZERO_C] = (kinfo){"zero [N,C] grad buffers", 14 * L + 4, 0, f * N * C};
    K[K_ZERO_3C] = (kinfo){"zero [N,3C] grad buffers", 2 * L, 0, f * N * 3 * C};
    K[K_ZERO_4C] = (kinfo){"zero [N,4C] grad buffers", 3 * L, 0, f * N * 4 * C};
    K[K_ZERO_LOGITS] = (kinfo){"zero dlogits [N,V]", 1, 0, f * (double)N * V};
    K[K_ZERO_GRADS] = (kinfo){"zero parameter grads", 1, 0, f * nparams};
    K[K_SUMSQ] = (kinfo){"grad norm (sumsq)", 1, 0, f * nparams};
    K[K_SCALE] = (kinfo){"grad clip (scale)", 1, 0, f * 2.0 * nparams};
    K[K_ADAMW] = (kinfo){"AdamW", 1, 0, f * 7.0 * nparams};

    printf("kernel times, B=%ld T=%ld C=%ld NH=%ld V=%ld L=%ld (N=B*T=%ld), %ld parameters, "
           "%d OpenMP threads, median of %d calls\n\n",
           B, T, C, NH, V, L, N, nparams, omp_get_max_threads(), reps);
    /* round robin: pass r times every kernel once, so that a burst of outside
     * load spreads over all kernels instead of hitting the few timed then */
    double tms[NK], tmin[NK], total = 0, flops = 0;
    double *ts = malloc(sizeof(double) * (size_t)reps * NK);
    for (int k = 0; k < NK; k++) run(k); /* warm-up */
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < NK; k++) {
            double t0 = now();
            run(k);
            ts[(size_t)k * reps + r] = now() - t0;
        }
    for (int k = 0; k < NK; k++) {
        double *tk = ts + (size_t)k * reps;
        qsort(tk, (size_t)reps, sizeof *tk, cmpd);
        tms[k] = tk[reps / 2];
        tmin[k] = tk[0];
        total += tms[k] * K[k].calls;
        flops += K[k].flops * K[k].calls;
    }
    free(ts);
    printf("| kernel | calls/step | ms/call (median) | ms/call (min) | ms/step | share | rate |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|\n");
    int order[NK];
    for (int k = 0; k < NK; k++) order[k] = k;
    for (int i = 0; i < NK; i++) /* by time per step, largest first */
        for (int j = i + 1; j < NK; j++)
            if (tms[order[j]] * K[order[j]].calls > tms[order[i]] * K[order[i]].calls) {
                int t = order[i]; order[i] = order[j]; order[j] = t;
            }
    for (int i = 0; i < NK; i++) {
        int k = order[i];
        char rate[64] = "";
        if (K[k].flops > 0) snprintf(rate, sizeof rate, "%.1f GFLOP/s", K[k].flops / tms[k] / 1e9);
        else if (K[k].bytes > 0) snprintf(rate, sizeof rate, "%.1f GB/s", K[k].bytes / tms[k] / 1e9);
        printf("| %s | %.0f | %.3f | %.3f | %.1f | %.1f%% | %s |\n", K[k].name, K[k].calls, tms[k] * 1e3,
               tmin[k] * 1e3, tms[k] * K[k].calls * 1e3, 100.0 * tms[k] * K[k].calls / total, rate);
    }
    double mmt = 0, memt = 0, mint = 0, minmm = 0;
    for (int k = 0; k < NK; k++) {
        if (K[k].flops > 0) mmt += tms[k] * K[k].calls, minmm += tmin[k] * K[k].calls;
        else memt += tms[k] * K[k].calls;
        mint += tmin[k] * K[k].calls;
    }
    printf("\nsum: %.1f ms per step (matmuls + attention %.1f ms at %.1f GFLOP/s; memory-bound kernels %.1f ms)\n",
           total * 1e3, mmt * 1e3, flops / mmt / 1e9, memt * 1e3);
    printf("sum of the fastest calls: %.1f ms per step (matmuls + attention %.1f ms at %.1f GFLOP/s)\n",
           mint * 1e3, minmm * 1e3, flops / minmm / 1e9);
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("OpenBLAS %s, core %s (OPENBLAS_CORETYPE=%s)\n", openblas_get_config(), openblas_get_corename(),
           ct ? ct : "(unset)");
    return 0;
}
