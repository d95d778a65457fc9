/* dp.c: bucketed gradient all-reduce (or ZeRO-1 reduce-scatter) overlapped
 * with backward; see sr_dp.h. */
#include "sr_dp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bucket {
    int64_t lo, hi;        /* float range of the gradient arena */
    int64_t slice, at;     /* ZeRO-1: floats per rank, this rank's slice's offset in the shard */
    int nparams, pending;  /* parameters overlapping it, not yet final */
    int launched, held;
    sr_req *req;
    double t_launch, t_done;
    sr_req *greq;          /* ZeRO-1: its all-gather (parameters, or sr_dp_gather's), not waited for yet */
    double t_glaunch, t_gdone;
    char label[32], glabel[32];
} bucket;

struct sr_dp {
    const sr_program *prog;
    sr_comm *comm;
    float *grads, *shard;  /* shard: ZeRO-1's reduce-scatter output, NULL for all-reduce */
    int size, rank;
    sr_trace *trace;
    bucket *b;
    int nb;
    int *first, *count;    /* parameter -> the buckets its floats overlap (consecutive) */
    int armed;
    sr_status err;         /* first failure inside a hook, reported by finish */
    float *gfull;          /* the parameters being all-gathered (sr_dp_gather_start), else NULL */
    void (*gathered)(float *p, int64_t n);
    double g_wait_us, g_flight_us; /* the gathers' host waits and spans, summed */
};

sr_status sr_dp_init(sr_dp **out, const sr_program *prog, const int64_t *offsets, int64_t n_floats,
                     sr_comm *comm, float *grads, float *shard, int64_t bucket_bytes, sr_trace *trace)
{
    sr_dp *dp = calloc(1, sizeof *dp);
    if (!dp) return sr_seterr(SR_ERR_NOMEM, "out of memory");
    dp->prog = prog;
    dp->comm = comm;
    dp->grads = grads;
    dp->shard = shard;
    dp->size = sr_comm_size(comm);
    dp->rank = sr_comm_rank(comm);
    dp->trace = trace;
    int np = prog->n_params;
    dp->b = calloc((size_t)np + 1, sizeof(bucket));
    dp->first = calloc((size_t)np + 1, sizeof(int));
    dp->count = calloc((size_t)np + 1, sizeof(int));
    if (!dp->b || !dp->first || !dp->count) {
        sr_dp_free(dp);
        return sr_seterr(SR_ERR_NOMEM, "out of memory");
    }
    /* ZeRO-1 cuts the arena at multiples of dp, so that every bucket
     * reduce-scatters into equal slices (Megatron's distributed optimizer
     * layout); a cut may then fall inside a parameter, which is then in two
     * buckets. n_floats is a multiple of dp there. */
    int64_t align = shard ? dp->size : 1;
    if (n_floats % align) {
        sr_dp_free(dp);
        return sr_seterr(SR_ERR_ARG, "sr_dp_init: %lld floats do not split over %lld ranks",
                         (long long)n_floats, (long long)align);
    }
    /* reverse declaration order: the order backward completes gradients.
     * Consecutive parameters held are adjacent in the arena, so a bucket is
     * one contiguous range (including the alignment padding between them). */
    int64_t limit = bucket_bytes / 4 > 0 ? bucket_bytes / 4 : 1;
    bucket *cur = NULL;
    int64_t end = n_floats; /* where the held parameter after this one starts */
    for (int i = np - 1; i >= 0; i--) {
        if (offsets[i] < 0) continue;
        if (!cur || cur->hi - offsets[i] > limit) {
            cur = &dp->b[dp->nb++];
            cur->hi = end;
        }
        cur->lo = offsets[i];
        end = offsets[i];
    }
    if (align > 1 && dp->nb > 0) {
        /* the cuts rounded down; buckets left empty by it are dropped */
        int nb = 0;
        dp->b[dp->nb - 1].lo = 0;
        for (int j = 0; j < dp->nb; j++) {
            int64_t hi = nb ? dp->b[nb - 1].lo : n_floats, lo = dp->b[j].lo / align * align;
            if (lo == hi) continue;
            dp->b[nb].hi = hi;
            dp->b[nb++].lo = lo;
        }
        dp->nb = nb;
    }
    int64_t at = 0;
    for (int j = 0; j < dp->nb; j++) {
        bucket *b = &dp->b[j];
        snprintf(b->label, sizeof b->label, "grad bucket %d", j);
        snprintf(b->glabel, sizeof b->glabel, "param bucket %d", j);
        b->slice = (b->hi - b->lo) / align;
        b->at = at;
        at += b->slice;
    }
    /* which buckets each parameter's floats fall in (descending ranges) */
    for (int i = 0; i < np; i++) {
        int64_t lo = offsets[i], hi = lo + prog->params[i].numel;
        dp->first[i] = -1;
        if (lo < 0) continue;
        for (int j = 0; j < dp->nb; j++) {
            if (dp->b[j].lo >= hi || dp->b[j].hi <= lo) continue;
            if (dp->first[i] < 0) dp->first[i] = j;
            dp->count[i]++;
            dp->b[j].nparams++;
        }
    }
    *out = dp;
    return SR_OK;
}

void sr_dp_free(sr_dp *dp)
{
    if (!dp) return;
    free(dp->b);
    free(dp->first);
    free(dp->count);
    free(dp);
}

int sr_dp_buckets(const sr_dp *dp) { return dp->nb; }

int sr_dp_bucket(const sr_dp *dp, int j, int64_t *lo, int64_t *hi, int *launched)
{
    if (j < 0 || j >= dp->nb) return 0;
    *lo = dp->b[j].lo;
    *hi = dp->b[j].hi;
    *launched = dp->b[j].launched;
    return 1;
}

int sr_dp_slice(const sr_dp *dp, int j, int64_t *lo, int64_t *n, int64_t *at)
{
    if (!dp->shard || j < 0 || j >= dp->nb) return 0;
    *lo = dp->b[j].lo + (int64_t)dp->rank * dp->b[j].slice;
    *n = dp->b[j].slice;
    *at = dp->b[j].at;
    return 1;
}

void sr_dp_hold(sr_dp *dp, int param)
{
    if (param < 0 || param >= dp->prog->n_params) return;
    for (int k = 0; k < dp->count[param]; k++) dp->b[dp->first[param] + k].held = 1;
}

void sr_dp_begin(sr_dp *dp, int last, int64_t step)
{
    dp->armed = last;
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
    sr_status s = dp->shard ? sr_comm_reduce_scatter(dp->comm, dp->grads + b->lo, dp->shard + b->at, b->slice,
                                                     b->label, &b->req)
                            : sr_comm_allreduce(dp->comm, dp->grads + b->lo, b->hi - b->lo, b->label, &b->req);
    if (s != SR_OK && dp->err == SR_OK) dp->err = s;
}

/* MPI progresses non-blocking collectives only inside MPI calls: the hooks
 * poll every pending reduction and gather (the time each is first seen
 * complete is its span's end) */
static void progress(sr_dp *dp)
{
    for (int i = 0; i < dp->nb; i++) {
        bucket *b = &dp->b[i];
        if (b->req && b->t_done == 0 && sr_comm_test(b->req)) b->t_done = sr_trace_now_us();
        if (b->greq && b->t_gdone == 0 && sr_comm_test(b->greq)) b->t_gdone = sr_trace_now_us();
    }
}

void sr_dp_grad_ready(sr_exec *e, int param)
{
    sr_dp *dp = e->user;
    if (!dp || !dp->armed || param < 0 || param >= dp->prog->n_params) return;
    for (int k = 0; k < dp->count[param]; k++) {
        bucket *b = &dp->b[dp->first[param] + k];
        if (--b->pending == 0 && !b->launched && !b->held) launch(dp, b);
    }
    progress(dp);
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
        sr_trace_span(dp->trace, SR_TRACK_COMM, dp->shard ? "reduce-scatter" : "all-reduce", b->t_launch,
                      b->t_done, b->label);
    }
    dp->err = SR_OK;
    dp->armed = 0;
    return first;
}

/* every bucket's all-gather into full (from shard, or with shard NULL in
 * place), the last bucket (the forward's first) first; b->greq each */
static sr_status launch_gathers(sr_dp *dp, const float *shard, float *full, const char *what)
{
    sr_status first = SR_OK;
    for (int i = dp->nb - 1; i >= 0 && first == SR_OK; i--) {
        bucket *b = &dp->b[i];
        const float *send = shard ? shard + b->at : full + b->lo + (int64_t)dp->rank * b->slice;
        b->t_glaunch = sr_trace_now_us();
        b->t_gdone = 0;
        first = sr_comm_allgather(dp->comm, send, full + b->lo, b->slice, what, &b->greq);
    }
    return first;
}

sr_status sr_dp_gather(sr_dp *dp, const float *shard, float *full, const char *what)
{
    sr_status first = launch_gathers(dp, shard, full, what);
    for (int i = 0; i < dp->nb; i++) { /* every launched one waited for, even after a failure */
        if (!dp->b[i].greq) continue;
        sr_status s = sr_comm_wait(dp->b[i].greq);
        if (s != SR_OK && first == SR_OK) first = s;
        dp->b[i].greq = NULL;
    }
    return first;
}

void sr_dp_on_gathered(sr_dp *dp, void (*fn)(float *p, int64_t n)) { dp->gathered = fn; }

sr_status sr_dp_gather_start(sr_dp *dp, float *full)
{
    dp->gfull = full;
    return launch_gathers(dp, NULL, full, "parameters (ZeRO-1)");
}

/* bucket b's gather: the device ordered after it (the host waits with
 * MPI), then what the backend derives from the parameters refreshed */
static sr_status gather_wait(sr_dp *dp, bucket *b)
{
    double t0 = sr_trace_now_us();
    sr_status s = sr_comm_wait_device(b->greq);
    b->greq = NULL;
    double t1 = sr_trace_now_us();
    sr_trace_span(dp->trace, SR_TRACK_COMPUTE, "wait", t0, t1, b->glabel); /* where the rank needed it */
    dp->g_wait_us += t1 - t0;
    if (b->t_gdone == 0) b->t_gdone = t1;
    if (s == SR_OK && dp->gathered) dp->gathered(dp->gfull + b->lo, b->hi - b->lo);
    return s;
}

void sr_dp_param_needed(sr_exec *e, int param)
{
    sr_dp *dp = e->user;
    if (!dp || !dp->gfull || param < 0 || param >= dp->prog->n_params) return;
    for (int k = 0; k < dp->count[param]; k++) {
        bucket *b = &dp->b[dp->first[param] + k];
        if (!b->greq) continue;
        sr_status s = gather_wait(dp, b);
        if (s != SR_OK && dp->err == SR_OK) dp->err = s;
    }
    progress(dp);
}

sr_status sr_dp_gather_settle(sr_dp *dp)
{
    if (!dp->gfull) return SR_OK;
    sr_status first = dp->err;
    double lo = 0, hi = 0;
    for (int i = dp->nb - 1; i >= 0; i--) {
        bucket *b = &dp->b[i];
        if (b->greq) {
            sr_status s = gather_wait(dp, b);
            if (s != SR_OK && first == SR_OK) first = s;
        }
        sr_trace_span(dp->trace, SR_TRACK_COMM, "all-gather", b->t_glaunch, b->t_gdone, b->glabel);
        if (i == dp->nb - 1 || b->t_glaunch < lo) lo = b->t_glaunch;
        if (b->t_gdone > hi) hi = b->t_gdone;
    }
    dp->g_flight_us += hi > lo ? hi - lo : 0;
    dp->gfull = NULL;
    dp->err = SR_OK;
    return first;
}

void sr_dp_gather_stats(const sr_dp *dp, double *wait_us, double *flight_us)
{
    *wait_us = dp->g_wait_us;
    *flight_us = dp->g_flight_us;
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
