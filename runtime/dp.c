/* dp.c: bucketed gradient all-reduce overlapped with backward; see sr_dp.h. */
#include "sr_dp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bucket {
    int64_t lo, hi;        /* float range of the gradient arena */
    int nparams, pending;  /* parameters in it, not yet final */
    int launched;
    sr_req *req;
    double t_launch, t_done;
    char label[32];
} bucket;

struct sr_dp {
    const sr_program *prog;
    sr_comm *comm;
    float *grads;
    sr_trace *trace;
    bucket *b;
    int nb;
    int *bucket_of;        /* parameter -> bucket */
    int armed;
    int64_t step;
    sr_status err;         /* first failure inside a hook, reported by finish */
};

sr_status sr_dp_init(sr_dp **out, const sr_program *prog, const int64_t *offsets, int64_t n_floats,
                     sr_comm *comm, float *grads, int64_t bucket_bytes, sr_trace *trace)
{
    sr_dp *dp = calloc(1, sizeof *dp);
    if (!dp) return sr_seterr(SR_ERR_NOMEM, "out of memory");
    dp->prog = prog;
    dp->comm = comm;
    dp->grads = grads;
    dp->trace = trace;
    dp->b = calloc((size_t)prog->n_params + 1, sizeof(bucket));
    dp->bucket_of = calloc((size_t)prog->n_params + 1, sizeof(int));
    if (!dp->b || !dp->bucket_of) {
        sr_dp_free(dp);
        return sr_seterr(SR_ERR_NOMEM, "out of memory");
    }
    /* reverse declaration order: the order backward completes gradients.
     * Consecutive parameters held are adjacent in the arena, so a bucket is
     * one contiguous range (including the alignment padding between them). */
    int64_t limit = bucket_bytes / 4 > 0 ? bucket_bytes / 4 : 1;
    bucket *cur = NULL;
    int64_t end = n_floats; /* where the held parameter after this one starts */
    for (int i = prog->n_params - 1; i >= 0; i--) {
        dp->bucket_of[i] = -1;
        if (offsets[i] < 0) continue;
        if (!cur || cur->hi - offsets[i] > limit) {
            cur = &dp->b[dp->nb++];
            cur->hi = end;
            snprintf(cur->label, sizeof cur->label, "grad bucket %d", dp->nb - 1);
        }
        cur->lo = offsets[i];
        cur->nparams++;
        dp->bucket_of[i] = (int)(cur - dp->b);
        end = offsets[i];
    }
    *out = dp;
    return SR_OK;
}

void sr_dp_free(sr_dp *dp)
{
    if (!dp) return;
    free(dp->b);
    free(dp->bucket_of);
    free(dp);
}

int sr_dp_buckets(const sr_dp *dp) { return dp->nb; }

void sr_dp_begin(sr_dp *dp, int last, int64_t step)
{
    dp->armed = last;
    dp->step = step;
    if (!last) return;
    sr_comm_set_step(dp->comm, step);
    for (int i = 0; i < dp->nb; i++) {
        dp->b[i].pending = dp->b[i].nparams;
        dp->b[i].launched = 0;
        dp->b[i].req = NULL;
        dp->b[i].t_done = 0;
    }
}

static void launch(sr_dp *dp, bucket *b)
{
    b->launched = 1;
    b->t_launch = sr_trace_now_us();
    sr_status s = sr_comm_allreduce(dp->comm, dp->grads + b->lo, b->hi - b->lo, b->label, &b->req);
    if (s != SR_OK && dp->err == SR_OK) dp->err = s;
}

void sr_dp_grad_ready(sr_exec *e, int param)
{
    sr_dp *dp = e->user;
    if (!dp || !dp->armed || param < 0 || param >= dp->prog->n_params || dp->bucket_of[param] < 0) return;
    bucket *b = &dp->b[dp->bucket_of[param]];
    if (--b->pending == 0 && !b->launched) launch(dp, b);
    /* MPI progresses non-blocking collectives only inside MPI calls */
    for (int i = 0; i < dp->nb; i++)
        if (dp->b[i].launched && dp->b[i].req && dp->b[i].t_done == 0 && sr_comm_test(dp->b[i].req))
            dp->b[i].t_done = sr_trace_now_us(); /* first seen complete */
}

sr_status sr_dp_finish(sr_dp *dp)
{
    for (int i = 0; i < dp->nb; i++)
        if (!dp->b[i].launched) launch(dp, &dp->b[i]);
    sr_status first = dp->err;
    for (int i = 0; i < dp->nb; i++) {
        bucket *b = &dp->b[i];
        if (b->req) {
            sr_status s = sr_comm_wait(b->req);
            if (s != SR_OK && first == SR_OK) first = s;
            b->req = NULL;
        }
        if (b->t_done == 0) b->t_done = sr_trace_now_us();
        sr_trace_span(dp->trace, SR_TRACK_COMM, "all-reduce", b->t_launch, b->t_done, b->label);
    }
    dp->err = SR_OK;
    dp->armed = 0;
    return first;
}

/* Buckets overlap one another, so their spans are merged first: the time
 * any all-reduce was in flight (total), the part of it before the backward
 * ended (hidden), and the part after it (what the step waited for). */
void sr_dp_overlap(const sr_dp *dp, double *hidden_us, double *total_us, double backward_end_us)
{
    double h = 0, tot = 0, cur_lo = 0, cur_hi = -1;
    char *used = calloc((size_t)dp->nb + 1, 1);
    for (int n = 0; used && n < dp->nb; n++) {
        int k = -1; /* the next span by launch time (few buckets: a selection is enough) */
        for (int i = 0; i < dp->nb; i++)
            if (!used[i] && (k < 0 || dp->b[i].t_launch < dp->b[k].t_launch)) k = i;
        used[k] = 1;
        double lo = dp->b[k].t_launch, hi = dp->b[k].t_done;
        if (hi <= lo) continue;
        if (cur_hi >= cur_lo && lo <= cur_hi) { /* overlaps the current run: extend it */
            if (hi > cur_hi) cur_hi = hi;
            continue;
        }
        if (cur_hi > cur_lo) {
            tot += cur_hi - cur_lo;
            double e = cur_hi < backward_end_us ? cur_hi : backward_end_us;
            if (e > cur_lo) h += e - cur_lo;
        }
        cur_lo = lo;
        cur_hi = hi;
    }
    if (cur_hi > cur_lo) {
        tot += cur_hi - cur_lo;
        double e = cur_hi < backward_end_us ? cur_hi : backward_end_us;
        if (e > cur_lo) h += e - cur_lo;
    }
    free(used);
    *hidden_us = h;
    *total_us = tot;
}
