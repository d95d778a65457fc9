/* tp.c: tensor-parallel operations called by generated code, and the
 * mapping between a parameter's shard and its full logical tensor.
 *
 * Collective failures inside a step cannot return through the generated
 * code; they are fatal: the message names the operation and every rank is
 * aborted (a collective that one rank leaves would hang the others).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sr_comm.h"
#include "sr_program.h"
#include "sr_tp.h"

static void fatal(const char *what)
{
    fprintf(stderr, "error: tensor-parallel %s failed: %s\n", what, sr_errmsg());
    sr_comm_abort(1);
    exit(1);
}

/* Host buffers these reuse: they run in every tensor-parallel step, and a
 * fresh malloc of a large block is an mmap and page faults each time. One
 * slot per use (the calls nest: a reduce-scatter's backward gathers). */
enum { SCR_GATHER, SCR_RS, SCR_RS_SUM, SCR_CE_MAX, SCR_CE_SUMS, SCR_CE_GATHER, SCR_RS_BWD, SCR_N };
static float *scr[SCR_N];
static size_t scr_cap[SCR_N];

static float *scratch(int slot, size_t n, const char *what)
{
    if (n > scr_cap[slot]) {
        float *p = realloc(scr[slot], sizeof(float) * n);
        if (!p) {
            sr_seterr(SR_ERR_NOMEM, "out of memory (%zu floats)", n);
            fatal(what);
        }
        scr[slot] = p;
        scr_cap[slot] = n;
    }
    return scr[slot];
}

void sr_tp_release(void)
{
    for (int i = 0; i < SCR_N; i++) {
        free(scr[i]);
        scr[i] = NULL;
        scr_cap[i] = 0;
    }
}

void sr_tp_allreduce(sr_exec *e, float *out, const float *in, long n)
{
    if (out != in) memcpy(out, in, sizeof(float) * (size_t)n);
    if (e->tp <= 1) return;
    if (sr_comm_allreduce(e->tp_comm, out, n, "activation", NULL) != SR_OK) fatal("all-reduce");
}

void sr_tp_allgather(sr_exec *e, float *out, const float *in, long outer, long local, long inner)
{
    int tp = e->tp;
    long blk = outer * local * inner;
    float *tmp = scratch(SCR_GATHER, (size_t)(blk * tp + 1), "all-gather");
    if (sr_comm_allgather(e->tp_comm, in, tmp, blk, "activation", NULL) != SR_OK) fatal("all-gather");
    /* tmp (tp, outer, local, inner) -> out (outer, tp*local, inner) */
    for (int r = 0; r < tp; r++)
        for (long o = 0; o < outer; o++)
            memcpy(out + (o * tp * local + r * local) * inner, tmp + r * blk + o * local * inner,
                   sizeof(float) * (size_t)(local * inner));
}

void sr_tp_allgather_bwd(sr_exec *e, float *dx, const float *dout, long outer, long local, long inner)
{
    if (!dx) return;
    int tp = e->tp, r = e->tp_rank;
    for (long o = 0; o < outer; o++) {
        const float *src = dout + (o * tp * local + r * local) * inner;
        float *dst = dx + o * local * inner;
        for (long i = 0; i < local * inner; i++) dst[i] += src[i];
    }
}

/* out (outer, local, inner) = this rank's block of in (outer, tp*local, inner)
 * summed over the tensor group */
static void seq_reduce_scatter(sr_exec *e, float *out, const float *in, long outer, long local, long inner,
                               const char *what)
{
    int tp = e->tp > 0 ? e->tp : 1;
    long blk = outer * local * inner;
    float *tmp = scratch(SCR_RS, (size_t)(blk * tp + 1), "reduce-scatter");
    /* in (outer, tp*local, inner) -> tmp (tp, outer, local, inner): rank r's block */
    for (int r = 0; r < tp; r++)
        for (long o = 0; o < outer; o++)
            memcpy(tmp + r * blk + o * local * inner, in + (o * tp * local + r * local) * inner,
                   sizeof(float) * (size_t)(local * inner));
    if (tp == 1) memcpy(out, tmp, sizeof(float) * (size_t)blk);
    else if (sr_comm_reduce_scatter(e->tp_comm, tmp, out, blk, what, NULL) != SR_OK) fatal("reduce-scatter");
}

/* dx (outer, local, inner) += this rank's block of dout (outer, tp*local, inner)
 * summed over the tensor group: one reduce-scatter where a partial dout was
 * all-reduced and then sliced (compiler/autodiff.c folds the two) */
void sr_tp_allgather_bwd_rs(sr_exec *e, float *dx, const float *dout, long outer, long local, long inner)
{
    if (!dx) return;
    long blk = outer * local * inner;
    float *sum = scratch(SCR_RS_SUM, (size_t)(blk + 1), "reduce-scatter");
    seq_reduce_scatter(e, sum, dout, outer, local, inner, "activation grad");
    for (long i = 0; i < blk; i++) dx[i] += sum[i];
}

void sr_embedding_vp_fwd(float *out, const float *w, const int32_t *idx, int N, int D, int Vl, int rank)
{
    long lo = (long)rank * Vl;
#pragma omp parallel for if (N >= 64)
    for (int i = 0; i < N; i++) {
        long row = (long)idx[i] - lo;
        float *o = out + (long)i * D;
        if (row >= 0 && row < Vl) memcpy(o, w + row * D, sizeof(float) * (size_t)D);
        else memset(o, 0, sizeof(float) * (size_t)D);
    }
}

void sr_embedding_vp_bwd(float *dw, const float *dout, const int32_t *idx, int N, int D, int Vl, int rank)
{
    if (!dw) return;
    long lo = (long)rank * Vl;
    for (int i = 0; i < N; i++) { /* serial: rows may repeat */
        long row = (long)idx[i] - lo;
        if (row < 0 || row >= Vl) continue;
        const float *g = dout + (long)i * D;
        float *d = dw + row * D;
        for (int j = 0; j < D; j++) d[j] += g[j];
    }
}

/* a row counts when its target is a class of the whole vocabulary (nv, or every rank's columns):
 * outside it (-100, torch's ignore_index) no loss and no gradient, as sr_crossentropy_fwd */
static int ce_vp_live(const sr_exec *e, int32_t target, int Vl, int nv)
{
    long classes = nv > 0 ? nv : (long)Vl * (e->tp > 0 ? e->tp : 1);
    return target >= 0 && target < classes;
}

/* this rank's columns' gradient, added to d (acc 1) or written into it (acc 0; d may be the logits) */
static void ce_vp_grad(sr_exec *e, float *d, const float *logits, const float *lse, const int32_t *targets,
                       float dloss, int N, int Vl, int nv, int acc)
{
    if (!d || N <= 0) return;
    long lo = (long)e->tp_rank * Vl;
    int nc = sr_ce_classes(lo, Vl, nv);
    float sc = dloss / (float)N;
#pragma omp parallel for if (N >= 16)
    for (int i = 0; i < N; i++) {
        long t = (long)targets[i] - lo;
        sr_ce_grad_row(d + (long)i * Vl, logits + (long)i * Vl, lse[i], t >= 0 && t < nc ? (int)t : -1,
                       ce_vp_live(e, targets[i], Vl, nv), nc, Vl, sc, acc);
    }
}

float sr_crossentropy_vp_fwd(sr_exec *e, float *lse, const float *logits, const int32_t *targets, int N, int Vl,
                             int nv)
{
    int tp = e->tp;
    long lo = (long)e->tp_rank * Vl;
    int nc = sr_ce_classes(lo, Vl, nv); /* the rest of this rank's columns pad */
    float *mx = scratch(SCR_CE_MAX, (size_t)N * (size_t)(tp + 1), "cross-entropy");
    float *sums = scratch(SCR_CE_SUMS, (size_t)2 * (size_t)N + 1, "cross-entropy");
    float *allmx = mx + N;
    /* 1. the row maxima of every rank's columns, gathered: a max is not a sum */
#pragma omp parallel for if (N >= 16)
    for (int i = 0; i < N; i++) {
        const float *x = logits + (long)i * Vl;
        float m = -INFINITY;
        for (int j = 0; j < nc; j++) m = x[j] > m ? x[j] : m;
        mx[i] = m;
    }
    if (tp > 1) {
        float *g = scratch(SCR_CE_GATHER, (size_t)N * (size_t)tp, "cross-entropy");
        if (sr_comm_allgather(e->tp_comm, mx, g, N, "cross-entropy max", NULL) != SR_OK) fatal("cross-entropy");
        for (int i = 0; i < N; i++) {
            float m = g[i];
            for (int r = 1; r < tp; r++) m = g[(long)r * N + i] > m ? g[(long)r * N + i] : m;
            allmx[i] = m;
        }
    } else {
        memcpy(allmx, mx, sizeof(float) * (size_t)N);
    }
    /* 2. sums of exponentials and the target's logit, summed over ranks */
#pragma omp parallel for if (N >= 16)
    for (int i = 0; i < N; i++) {
        const float *x = logits + (long)i * Vl;
        double s = 0;
        for (int j = 0; j < nc; j++) s += exp((double)(x[j] - allmx[i]));
        sums[i] = (float)s;
        long t = (long)targets[i] - lo;
        sums[N + i] = (t >= 0 && t < nc) ? x[t] : 0.0f;
    }
    if (tp > 1 && sr_comm_allreduce(e->tp_comm, sums, 2L * N, "cross-entropy sums", NULL) != SR_OK)
        fatal("cross-entropy");
    double loss = 0;
    for (int i = 0; i < N; i++) {
        lse[i] = allmx[i] + logf(sums[i]);
        if (ce_vp_live(e, targets[i], Vl, nv)) loss += (double)(lse[i] - sums[N + i]);
    }
    return (float)(loss / N);
}

float sr_crossentropy_vp_fwd_bwd(sr_exec *e, float *lse, float *logits, const int32_t *targets, float dloss, int N,
                                 int Vl, int nv)
{
    /* the statistics need the group's collectives between the passes: the forward's two passes,
     * then the gradient over the logits in a third, with no buffer of its own */
    float loss = sr_crossentropy_vp_fwd(e, lse, logits, targets, N, Vl, nv);
    sr_crossentropy_vp_bwd_over(e, logits, lse, targets, dloss, N, Vl, nv);
    return loss;
}

void sr_crossentropy_vp_bwd_over(sr_exec *e, float *logits, const float *lse, const int32_t *targets, float dloss,
                                 int N, int Vl, int nv)
{
    ce_vp_grad(e, logits, logits, lse, targets, dloss, N, Vl, nv, 0);
}

void sr_crossentropy_vp_bwd(sr_exec *e, float *dlogits, const float *logits, const float *lse,
                            const int32_t *targets, float dloss, int N, int Vl, int nv)
{
    ce_vp_grad(e, dlogits, logits, lse, targets, dloss, N, Vl, nv, 1);
}

/* ---- shards of parameters ----------------------------------------------------- */

int64_t sr_param_full_numel(const sr_param_desc *d)
{
    int64_t n = 1;
    for (int i = 0; i < d->ndim; i++) n *= d->full_dims[i] > 0 ? d->full_dims[i] : d->dims[i];
    return n;
}

/* the full tensor's flat index of this rank's local element `li` */
int64_t sr_param_global_index(const sr_param_desc *d, int rank, int64_t li)
{
    if (d->split_dim < 0) return li;
    int sd = d->split_dim;
    int64_t inner = 1, outer_local = 1;
    for (int i = sd + 1; i < d->ndim; i++) inner *= d->dims[i];
    for (int i = 0; i < sd; i++) outer_local *= d->dims[i];
    int64_t L = d->dims[sd];                        /* local size of the split dim */
    int64_t F = d->full_dims[sd];                   /* full size */
    int g = d->groups > 0 ? d->groups : 1;
    int64_t per = L / g;                            /* local rows per group */
    int64_t o = li / (L * inner), rem = li % (L * inner);
    int64_t j = rem / inner, in = rem % inner;
    int64_t grp = j / per, jj = j % per;
    int64_t fj = grp * (F / g) + (int64_t)rank * per + jj;
    (void)outer_local;
    return (o * F + fj) * inner + in;
}

void sr_param_shard(const sr_param_desc *d, int rank, float *full, float *local, int to_local)
{
    if (d->split_dim < 0) {
        if (to_local) memcpy(local, full, sizeof(float) * (size_t)d->numel);
        else memcpy(full, local, sizeof(float) * (size_t)d->numel);
        return;
    }
    for (int64_t i = 0; i < d->numel; i++) {
        int64_t gi = sr_param_global_index(d, rank, i);
        if (to_local) local[i] = full[gi];
        else full[gi] = local[i];
    }
}

/* ---- sequence parallelism ------------------------------------------------------ */

void sr_tp_reduce_scatter(sr_exec *e, float *out, const float *in, long outer, long local, long inner)
{
    seq_reduce_scatter(e, out, in, outer, local, inner, "activation");
}

void sr_tp_reduce_scatter_bwd(sr_exec *e, float *dx, const float *dout, long outer, long local, long inner)
{
    if (!dx) return;
    int tp = e->tp;
    float *full = scratch(SCR_RS_BWD, (size_t)(outer * local * inner * tp + 1), "all-gather");
    sr_tp_allgather(e, full, dout, outer, local, inner);
    long n = outer * local * inner * tp;
    for (long i = 0; i < n; i++) dx[i] += full[i];
}

void sr_tp_slice(sr_exec *e, float *out, const float *in, long outer, long local, long inner)
{
    int tp = e->tp, r = e->tp_rank;
    for (long o = 0; o < outer; o++)
        memcpy(out + o * local * inner, in + (o * tp * local + r * local) * inner, sizeof(float) * (size_t)(local * inner));
}

void sr_tp_slice_bwd(sr_exec *e, float *dx, const float *dout, long outer, long local, long inner)
{
    if (!dx) return;
    int tp = e->tp, r = e->tp_rank;
    for (long o = 0; o < outer; o++) {
        float *d = dx + (o * tp * local + r * local) * inner;
        const float *g = dout + o * local * inner;
        for (long i = 0; i < local * inner; i++) d[i] += g[i];
    }
}

/* element (b, t, c) of this rank is element (row0 + b*T + rank*Tl + t, c) of
 * the whole microbatch, T = Tl * tp: each row keyed by its global place */
void sr_dropout_seq_fwd(sr_exec *e, float *out, const float *x, long B, long Tl, long C, unsigned op)
{
    long T = Tl * e->tp;
    for (long b = 0; b < B; b++)
        for (long t = 0; t < Tl; t++) {
            long row = (long)e->row0 + b * T + (long)e->tp_rank * Tl + t, i = (b * Tl + t) * C;
            sr_dropout_fwd(out + i, x + i, C, e->dropout, e->seed, e->step, op, (uint64_t)row * (uint64_t)C);
        }
}

void sr_dropout_seq_bwd(sr_exec *e, float *dx, const float *dout, long B, long Tl, long C, unsigned op)
{
    if (!dx) return;
    long T = Tl * e->tp;
    for (long b = 0; b < B; b++)
        for (long t = 0; t < Tl; t++) {
            long row = (long)e->row0 + b * T + (long)e->tp_rank * Tl + t, i = (b * Tl + t) * C;
            sr_dropout_bwd(dx + i, dout + i, C, e->dropout, e->seed, e->step, op, (uint64_t)row * (uint64_t)C);
        }
}

/* element (token, j) of this rank is element (row0 + token, rank*Cl + j) of
 * the whole microbatch: each row's part keyed by its global place */
void sr_dropout_col_fwd(sr_exec *e, float *out, const float *x, long B, long T, long Cl, unsigned op)
{
    long C = Cl * e->tp;
    for (long k = 0; k < B * T; k++) {
        uint64_t base = (uint64_t)(e->row0 + k) * (uint64_t)C + (uint64_t)e->tp_rank * (uint64_t)Cl;
        sr_dropout_fwd(out + k * Cl, x + k * Cl, Cl, e->dropout, e->seed, e->step, op, base);
    }
}

void sr_dropout_col_bwd(sr_exec *e, float *dx, const float *dout, long B, long T, long Cl, unsigned op)
{
    if (!dx) return;
    long C = Cl * e->tp;
    for (long k = 0; k < B * T; k++) {
        uint64_t base = (uint64_t)(e->row0 + k) * (uint64_t)C + (uint64_t)e->tp_rank * (uint64_t)Cl;
        sr_dropout_bwd(dx + k * Cl, dout + k * Cl, Cl, e->dropout, e->seed, e->step, op, base);
    }
}
