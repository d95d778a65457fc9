/* schedule.c: pipeline schedules as instruction lists; see sr_schedule.h.
 *
 * Pure functions: no MPI, no clocks. A builder first decides, per rank, the
 * order of its compute instructions (FWD, BWD or B/W); emit_fwd/emit_bwd then
 * wrap each with the transfers its stage needs, so the transfer rules live in
 * one place whatever the schedule.
 *
 * The checker and the simulator share one execution model: every rank has a
 * program counter; messages travel on one FIFO channel per (sending rank,
 * kind), kind being activation or gradient (the executor keeps the kinds
 * apart, e.g. with one MPI tag each); a SEND is buffered and never blocks; the
 * k-th RECV on a channel waits for the k-th SEND on it. Because each channel
 * is FIFO and each rank sequential, the times do not depend on the order in
 * which the simulation visits ranks (a Kahn process network), so a plain
 * "advance every rank as far as it can, repeat" loop is exact.
 */
#include "sr_schedule.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* names                                                                    */

static const char *const kind_names[] = {"gpipe", "1f1b", "interleaved", "zb-h1"};
static const char *const op_names[] = {"RECV_ACT",   "FWD",         "SEND_ACT",
                                       "RECV_GRAD",  "BWD",         "BWD_INPUT",
                                       "BWD_WEIGHT", "SEND_GRAD",   "REDUCE",
                                       "STEP"};
#define NKINDS ((int)(sizeof kind_names / sizeof kind_names[0]))
#define NOPS ((int)(sizeof op_names / sizeof op_names[0]))

int sr_sched_parse(const char *name)
{
    if (!name) return -1;
    for (int k = 0; k < NKINDS; k++)
        if (!strcmp(name, kind_names[k])) return k;
    return -1;
}

const char *sr_sched_name(sr_sched_kind k)
{
    return (int)k >= 0 && (int)k < NKINDS ? kind_names[k] : "unknown";
}

const char *sr_op_name(sr_op op)
{
    return (int)op >= 0 && (int)op < NOPS ? op_names[op] : "UNKNOWN";
}

/* "FWD mb 3 chunk 1" (chunk only when v > 1) into buf, for messages */
static const char *describe(char *buf, size_t n, const sr_instr *in, int v)
{
    if (in->op == SR_I_REDUCE || in->op == SR_I_STEP || (int)in->op < 0 || (int)in->op >= NOPS)
        snprintf(buf, n, "%s", sr_op_name(in->op));
    else if (v > 1)
        snprintf(buf, n, "%s mb %d chunk %d", sr_op_name(in->op), in->mb, in->chunk);
    else
        snprintf(buf, n, "%s mb %d", sr_op_name(in->op), in->mb);
    return buf;
}

/* ------------------------------------------------------------------------ */
/* building                                                                 */

typedef struct builder {
    const sr_schedule *s;
    int r;          /* rank being built */
    sr_instr *out;  /* s->ins[r] */
    int n;
} builder;

static void put(builder *b, sr_op op, int mb, int chunk)
{
    b->out[b->n].op = op;
    b->out[b->n].mb = mb;
    b->out[b->n].chunk = chunk;
    b->n++;
}

static int stage_of(const sr_schedule *s, int r, int chunk) { return chunk * s->p + r; }

/* FWD with its transfers: input from the previous stage, output to the next */
static void emit_fwd(builder *b, int mb, int chunk)
{
    int st = stage_of(b->s, b->r, chunk), last = b->s->p * b->s->v - 1;
    if (st > 0) put(b, SR_I_RECV_ACT, mb, chunk);
    put(b, SR_I_FWD, mb, chunk);
    if (st < last) put(b, SR_I_SEND_ACT, mb, chunk);
}

/* BWD or BWD_INPUT with its transfers; BWD_WEIGHT needs none */
static void emit_bwd(builder *b, sr_op op, int mb, int chunk)
{
    int st = stage_of(b->s, b->r, chunk), last = b->s->p * b->s->v - 1;
    if (op == SR_I_BWD_WEIGHT) {
        put(b, op, mb, chunk);
        return;
    }
    if (st < last) put(b, SR_I_RECV_GRAD, mb, chunk);
    put(b, op, mb, chunk);
    if (st > 0) put(b, SR_I_SEND_GRAD, mb, chunk);
}

static void build_gpipe(builder *b)
{
    for (int i = 0; i < b->s->m; i++) emit_fwd(b, i, 0);
    for (int i = 0; i < b->s->m; i++) emit_bwd(b, SR_I_BWD, i, 0);
}

/* PipeDream-flush: rank r runs p-r-1 warm-up forwards, so at most p-r
 * microbatches are in flight on it (p on the first rank). */
static void build_1f1b(builder *b)
{
    int p = b->s->p, m = b->s->m, r = b->r;
    int warm = p - r - 1 < m ? p - r - 1 : m;
    for (int i = 0; i < warm; i++) emit_fwd(b, i, 0);
    for (int k = 0; k < m - warm; k++) {
        emit_fwd(b, warm + k, 0);
        emit_bwd(b, SR_I_BWD, k, 0);
    }
    for (int k = m - warm; k < m; k++) emit_bwd(b, SR_I_BWD, k, 0);
}

/* Megatron-LM's forward_backward_pipelining_with_interleaving: the k-th
 * forward of a rank works on chunk (k/p)%v and microbatch
 * (k/(p*v))*p + k%p; the k-th backward on the same microbatch and chunk
 * v-1-(k/p)%v. Every rank walks the same (mb, chunk) sequence, which is what
 * keeps each channel's sends and receives in the same order. */
static void interleaved_unit(const sr_schedule *s, int k, int backward, int *mb, int *chunk)
{
    int p = s->p, v = s->v;
    int c = (k / p) % v;
    *chunk = backward ? v - 1 - c : c;
    *mb = (k / (p * v)) * p + k % p;
}

static void build_interleaved(builder *b)
{
    int p = b->s->p, m = b->s->m, v = b->s->v, r = b->r;
    int total = m * v;
    int warm = (p - r - 1) * 2 + (v - 1) * p;
    if (warm > total) warm = total;
    int mb, c;
    for (int k = 0; k < warm; k++) {
        interleaved_unit(b->s, k, 0, &mb, &c);
        emit_fwd(b, mb, c);
    }
    for (int k = 0; k < total - warm; k++) {
        interleaved_unit(b->s, warm + k, 0, &mb, &c);
        emit_fwd(b, mb, c);
        interleaved_unit(b->s, k, 1, &mb, &c);
        emit_bwd(b, SR_I_BWD, mb, c);
    }
    for (int k = total - warm; k < total; k++) {
        interleaved_unit(b->s, k, 1, &mb, &c);
        emit_bwd(b, SR_I_BWD, mb, c);
    }
}

/* ZB-H1 (Qi et al., arXiv 2401.10241, figure 3): 1F1B's order with the
 * backward split into B (input gradient, on the critical path) and W
 * (weight gradient, free to move). Rank r runs W of microbatch k right after
 * B of microbatch k+r: the later ranks hold their W back and so pass the B
 * of the last microbatches upstream faster, and the r held-back W fill the
 * cool-down bubble that 1F1B leaves on them. In-flight microbatches (forward
 * done, W not) peak at (p-r-1) + 1 + r = p on every rank, i.e. 1F1B's peak
 * on the first rank; the bubble drops from (p-1)(F+B+W) to (p-1)(F+B-W). */
static void build_zbh1(builder *b)
{
    int p = b->s->p, m = b->s->m, r = b->r;
    int warm = p - r - 1 < m ? p - r - 1 : m;
    int next_w = 0; /* oldest microbatch whose W has not run */
    for (int i = 0; i < warm; i++) emit_fwd(b, i, 0);
    for (int k = 0; k < m; k++) {
        if (k < m - warm) emit_fwd(b, warm + k, 0);
        emit_bwd(b, SR_I_BWD_INPUT, k, 0);
        if (k - r >= 0) emit_bwd(b, SR_I_BWD_WEIGHT, next_w++, 0);
    }
    while (next_w < m) emit_bwd(b, SR_I_BWD_WEIGHT, next_w++, 0);
}

void sr_sched_free(sr_schedule *s)
{
    if (!s) return;
    if (s->ins)
        for (int r = 0; r < s->p; r++) free(s->ins[r]);
    free(s->ins);
    free(s->n);
    s->ins = NULL;
    s->n = NULL;
}

sr_status sr_sched_build(sr_schedule *s, sr_sched_kind kind, int p, int m, int v)
{
    memset(s, 0, sizeof *s);
    if ((int)kind < 0 || (int)kind >= NKINDS)
        return sr_seterr(SR_ERR_ARG, "unknown pipeline schedule %d (gpipe, 1f1b, interleaved, zb-h1)",
                         (int)kind);
    if (p < 1 || m < 1 || v < 1)
        return sr_seterr(SR_ERR_ARG,
                         "pipeline schedule %s needs pp >= 1, microbatches >= 1 and chunks >= 1, "
                         "got pp %d, microbatches %d, chunks %d",
                         kind_names[kind], p, m, v);
    if (v > 1 && kind != SR_SCHED_INTERLEAVED)
        return sr_seterr(SR_ERR_ARG,
                         "%d model chunks per rank need the interleaved schedule, not %s",
                         v, kind_names[kind]);
    if (kind == SR_SCHED_INTERLEAVED && m % p != 0) {
        if (m < p)
            return sr_seterr(SR_ERR_ARG,
                             "the interleaved schedule needs microbatches a multiple of pp: %d "
                             "microbatches over pp %d (use %d)",
                             m, p, p);
        return sr_seterr(SR_ERR_ARG,
                         "the interleaved schedule needs microbatches a multiple of pp: %d "
                         "microbatches over pp %d (use %d or %d)",
                         m, p, m / p * p, (m / p + 1) * p);
    }
    /* per rank at most 7 instructions per (mb, chunk) (RECV, F, SEND,
     * RECV, B, SEND, W) plus REDUCE and STEP */
    long long cap = 7LL * m * v + 2;
    if ((long long)m * v > 1000000 || p > 100000 || cap > INT_MAX)
        return sr_seterr(SR_ERR_ARG,
                         "pipeline schedule too large: pp %d, microbatches %d, chunks %d", p, m, v);
    s->kind = kind;
    s->p = p;
    s->m = m;
    s->v = v;
    s->n = calloc((size_t)p, sizeof *s->n);
    s->ins = calloc((size_t)p, sizeof *s->ins);
    if (!s->n || !s->ins) {
        sr_sched_free(s);
        return sr_seterr(SR_ERR_NOMEM, "out of memory for the pipeline schedule");
    }
    for (int r = 0; r < p; r++) {
        builder b = {s, r, malloc(sizeof(sr_instr) * (size_t)cap), 0};
        if (!b.out) {
            sr_sched_free(s);
            return sr_seterr(SR_ERR_NOMEM, "out of memory for the pipeline schedule");
        }
        s->ins[r] = b.out;
        switch (kind) {
        case SR_SCHED_GPIPE: build_gpipe(&b); break;
        case SR_SCHED_1F1B: build_1f1b(&b); break;
        case SR_SCHED_INTERLEAVED: build_interleaved(&b); break;
        case SR_SCHED_ZBH1: build_zbh1(&b); break;
        }
        put(&b, SR_I_REDUCE, -1, 0);
        put(&b, SR_I_STEP, -1, 0);
        s->n[r] = b.n;
    }
    return SR_OK;
}

void sr_sched_print(FILE *f, const sr_schedule *s)
{
    for (int r = 0; r < s->p; r++) {
        fprintf(f, "rank %d:", r);
        for (int i = 0; i < s->n[r]; i++) {
            const sr_instr *in = &s->ins[r][i];
            const char *t = in->op == SR_I_FWD           ? "F"
                            : in->op == SR_I_BWD         ? "B"
                            : in->op == SR_I_BWD_INPUT   ? "Bi"
                            : in->op == SR_I_BWD_WEIGHT  ? "W"
                                                         : NULL;
            if (!t) continue;
            if (s->v > 1) fprintf(f, " %s%d.%d", t, in->mb, in->chunk);
            else fprintf(f, " %s%d", t, in->mb);
        }
        fprintf(f, "\n");
    }
}

/* ------------------------------------------------------------------------ */
/* simulation                                                               */

enum { CH_ACT = 0, CH_GRAD = 1 };

/* channel of a transfer instruction on rank r: (sender, kind) */
static int is_send(sr_op op) { return op == SR_I_SEND_ACT || op == SR_I_SEND_GRAD; }
static int is_recv(sr_op op) { return op == SR_I_RECV_ACT || op == SR_I_RECV_GRAD; }
static int chan_kind(sr_op op) { return op == SR_I_SEND_ACT || op == SR_I_RECV_ACT ? CH_ACT : CH_GRAD; }
static int chan_of(const sr_schedule *s, int r, sr_op op)
{
    int p = s->p, sender = r;
    if (op == SR_I_RECV_ACT) sender = (r - 1 + p) % p;
    if (op == SR_I_RECV_GRAD) sender = (r + 1) % p;
    return sender * 2 + chan_kind(op);
}

typedef struct sim {
    int *pc;          /* [p] next instruction per rank */
    double *clock;    /* [p] local time per rank */
    double *busy;     /* [p] compute time per rank */
    int *sent, *got;  /* [2p] messages sent / received per channel */
    double **t_sent;  /* [2p][capacity] send time of each message */
    int *inflight;    /* [p*m*v] 1 while (rank, mb, chunk) holds activations */
    int *cur;         /* [p] in-flight count now */
} sim;

static void sim_free(sim *x, int p)
{
    if (x->t_sent)
        for (int c = 0; c < 2 * p; c++) free(x->t_sent[c]);
    free(x->t_sent);
    free(x->pc);
    free(x->clock);
    free(x->busy);
    free(x->sent);
    free(x->got);
    free(x->inflight);
    free(x->cur);
}

static int valid_unit(const sr_schedule *s, const sr_instr *in)
{
    return in->mb >= 0 && in->mb < s->m && in->chunk >= 0 && in->chunk < s->v;
}

/* Runs the schedule. Returns 0 when every rank finished, 1 on a deadlock
 * (x->pc tells where each rank stopped), -1 when out of memory. Out-of-range
 * instructions are skipped here; sr_sched_check reports them. */
static int run_sim(const sr_schedule *s, sim *x, double t_fwd, double t_bwd, int *peak)
{
    int p = s->p;
    size_t units = (size_t)p * (size_t)s->m * (size_t)s->v;
    memset(x, 0, sizeof *x);
    x->pc = calloc((size_t)p, sizeof *x->pc);
    x->clock = calloc((size_t)p, sizeof *x->clock);
    x->busy = calloc((size_t)p, sizeof *x->busy);
    x->sent = calloc((size_t)(2 * p), sizeof *x->sent);
    x->got = calloc((size_t)(2 * p), sizeof *x->got);
    x->t_sent = calloc((size_t)(2 * p), sizeof *x->t_sent);
    x->inflight = calloc(units ? units : 1, sizeof *x->inflight);
    x->cur = calloc((size_t)p, sizeof *x->cur);
    if (!x->pc || !x->clock || !x->busy || !x->sent || !x->got || !x->t_sent || !x->inflight ||
        !x->cur)
        return -1;
    for (int r = 0; r < p; r++) {
        /* a channel carries at most the sender's instruction count */
        for (int k = 0; k < 2; k++)
            if (!(x->t_sent[r * 2 + k] = malloc(sizeof(double) * (size_t)(s->n[r] + 1)))) return -1;
        if (peak) peak[r] = 0;
    }
    for (int progress = 1; progress;) {
        progress = 0;
        for (int r = 0; r < p; r++) {
            while (x->pc[r] < s->n[r]) {
                const sr_instr *in = &s->ins[r][x->pc[r]];
                size_t u = valid_unit(s, in)
                               ? ((size_t)r * (size_t)s->m + (size_t)in->mb) * (size_t)s->v +
                                     (size_t)in->chunk
                               : 0;
                if (is_recv(in->op)) {
                    int c = chan_of(s, r, in->op);
                    if (x->got[c] >= x->sent[c]) break; /* blocked */
                    double t = x->t_sent[c][x->got[c]++];
                    if (t > x->clock[r]) x->clock[r] = t;
                } else if (is_send(in->op)) {
                    int c = chan_of(s, r, in->op);
                    x->t_sent[c][x->sent[c]++] = x->clock[r];
                } else if (in->op == SR_I_FWD || in->op == SR_I_BWD ||
                           in->op == SR_I_BWD_INPUT || in->op == SR_I_BWD_WEIGHT) {
                    double t = in->op == SR_I_FWD ? t_fwd
                               : in->op == SR_I_BWD ? t_bwd
                                                    : t_bwd / 2;
                    x->clock[r] += t;
                    x->busy[r] += t;
                    if (valid_unit(s, in)) {
                        if (in->op == SR_I_FWD && !x->inflight[u]) {
                            x->inflight[u] = 1;
                            if (++x->cur[r] > 0 && peak && x->cur[r] > peak[r]) peak[r] = x->cur[r];
                        } else if ((in->op == SR_I_BWD || in->op == SR_I_BWD_WEIGHT) &&
                                   x->inflight[u]) {
                            x->inflight[u] = 0;
                            x->cur[r]--;
                        }
                    }
                }
                /* REDUCE and STEP: outside the pipeline's timeline */
                x->pc[r]++;
                progress = 1;
            }
        }
    }
    for (int r = 0; r < p; r++)
        if (x->pc[r] < s->n[r]) return 1;
    return 0;
}

double sr_sched_simulate(const sr_schedule *s, double t_fwd, double t_bwd, int *peak_inflight)
{
    sim x;
    int rc = run_sim(s, &x, t_fwd, t_bwd, peak_inflight);
    double bubble = -1;
    if (rc == 0) {
        double span = 0, busy = 0;
        for (int r = 0; r < s->p; r++) {
            if (x.clock[r] > span) span = x.clock[r];
            busy += x.busy[r];
        }
        bubble = span > 0 ? (s->p * span - busy) / (s->p * span) : 0;
    }
    sim_free(&x, s->p);
    return bubble;
}

int sr_sched_takes_slot(sr_op op) { return op == SR_I_RECV_ACT || op == SR_I_FWD; }

int sr_sched_frees_slot(sr_sched_kind kind, sr_op op, int stage)
{
    return op == SR_I_BWD_WEIGHT || (op == SR_I_BWD && stage == 0) || (op == SR_I_SEND_GRAD && kind != SR_SCHED_ZBH1);
}

sr_status sr_sched_slot_peaks(const sr_schedule *s, int r, int *peak)
{
    int v = s->v, m = s->m, *held = calloc((size_t)v, sizeof(int));
    char *has = calloc((size_t)v * (size_t)m, 1);
    for (int c = 0; c < v; c++) peak[c] = 0;
    if (!held || !has) {
        free(held);
        free(has);
        return sr_seterr(SR_ERR_NOMEM, "out of memory counting the pipeline's activation slots");
    }
    for (int i = 0; i < s->n[r]; i++) {
        const sr_instr *in = &s->ins[r][i];
        if (in->mb < 0) continue;
        int c = in->chunk, stage = c * s->p + r;
        char *h = &has[(size_t)c * (size_t)m + (size_t)in->mb];
        if (sr_sched_takes_slot(in->op) && !*h) {
            *h = 1;
            if (++held[c] > peak[c]) peak[c] = held[c];
        }
        if (sr_sched_frees_slot(s->kind, in->op, stage) && *h) {
            *h = 0;
            held[c]--;
        }
    }
    free(held);
    free(has);
    return SR_OK;
}

double sr_sched_bubble_theory(sr_sched_kind kind, int p, int m, int v)
{
    if (p < 1 || m < 1 || v < 1) return -1;
    switch (kind) {
    case SR_SCHED_GPIPE:
    case SR_SCHED_1F1B: return (double)(p - 1) / (m + p - 1);
    case SR_SCHED_INTERLEAVED: return (double)(p - 1) / ((double)v * m + p - 1);
    case SR_SCHED_ZBH1:
        /* F = B = W: idle (p-1)(F + B - W) per rank against m(F + B + W) of
         * work; with fewer microbatches than ranks, the makespan is the first
         * backward's arrival on rank 0 (2p-1) plus its 2m remaining passes */
        if (m >= p) return (double)(p - 1) / (3.0 * m + p - 1);
        return (double)(2 * p - m - 1) / (2.0 * p + 2.0 * m - 1);
    }
    return -1;
}

/* ------------------------------------------------------------------------ */
/* checking                                                                 */

/* positions of a (rank, mb, chunk)'s instructions, -1 if absent */
enum { P_RA, P_F, P_SA, P_RG, P_B, P_BI, P_BW, P_SG, NPOS };
static int pos_slot(sr_op op)
{
    switch (op) {
    case SR_I_RECV_ACT: return P_RA;
    case SR_I_FWD: return P_F;
    case SR_I_SEND_ACT: return P_SA;
    case SR_I_RECV_GRAD: return P_RG;
    case SR_I_BWD: return P_B;
    case SR_I_BWD_INPUT: return P_BI;
    case SR_I_BWD_WEIGHT: return P_BW;
    case SR_I_SEND_GRAD: return P_SG;
    default: return -1;
    }
}

/* The per-rank structure: ranges, the REDUCE/STEP tail, every (mb, chunk)
 * once forward and once backward in order, and the transfers each needs. */
static sr_status check_rank(const sr_schedule *s, int r, int *pos)
{
    int m = s->m, v = s->v, last = s->p * v - 1, n = s->n[r];
    char d1[64], d2[64];
    for (size_t k = 0; k < (size_t)m * v * NPOS; k++) pos[k] = -1;
    if (n < 2 || s->ins[r][n - 2].op != SR_I_REDUCE || s->ins[r][n - 1].op != SR_I_STEP)
        return sr_seterr(SR_ERR_STATE,
                         "pipeline schedule %s: rank %d's instructions do not end with REDUCE, STEP",
                         sr_sched_name(s->kind), r);
    for (int i = 0; i < n; i++) {
        const sr_instr *in = &s->ins[r][i];
        if ((int)in->op < 0 || (int)in->op >= NOPS)
            return sr_seterr(SR_ERR_STATE,
                             "pipeline schedule %s: rank %d instruction %d has unknown op %d",
                             sr_sched_name(s->kind), r, i, (int)in->op);
        if (in->op == SR_I_REDUCE || in->op == SR_I_STEP) {
            if (i < n - 2)
                return sr_seterr(SR_ERR_STATE,
                                 "pipeline schedule %s: rank %d instruction %d: %s before the end",
                                 sr_sched_name(s->kind), r, i, sr_op_name(in->op));
            continue;
        }
        if (!valid_unit(s, in))
            return sr_seterr(SR_ERR_STATE,
                             "pipeline schedule %s: rank %d instruction %d (%s) is out of range "
                             "(microbatches %d, chunks %d)",
                             sr_sched_name(s->kind), r, i, describe(d1, sizeof d1, in, 2), m, v);
        int *slot = &pos[((size_t)in->mb * v + in->chunk) * NPOS + pos_slot(in->op)];
        if (*slot >= 0)
            return sr_seterr(SR_ERR_STATE,
                             "pipeline schedule %s: rank %d has %s twice (instructions %d and %d)",
                             sr_sched_name(s->kind), r, describe(d1, sizeof d1, in, v), *slot, i);
        *slot = i;
    }
    for (int mb = 0; mb < m; mb++) {
        for (int c = 0; c < v; c++) {
            const int *q = &pos[((size_t)mb * v + c) * NPOS];
            int st = stage_of(s, r, c);
            sr_instr u = {SR_I_FWD, mb, c};
            const char *what = describe(d1, sizeof d1, &u, v);
            const char *why = NULL;
            int bwd = q[P_B] >= 0 ? q[P_B] : q[P_BI];
            if (q[P_F] < 0) why = "has no FWD";
            else if (q[P_B] >= 0 && (q[P_BI] >= 0 || q[P_BW] >= 0))
                why = "has both BWD and a split backward";
            else if (q[P_B] < 0 && (q[P_BI] < 0 || q[P_BW] < 0))
                why = q[P_BI] >= 0 ? "has BWD_INPUT but no BWD_WEIGHT"
                      : q[P_BW] >= 0 ? "has BWD_WEIGHT but no BWD_INPUT"
                                     : "has no backward";
            else if (bwd < q[P_F]) why = "runs its backward before its forward";
            else if (q[P_BI] >= 0 && q[P_BW] < q[P_BI]) why = "runs BWD_WEIGHT before BWD_INPUT";
            else if (st > 0 && q[P_RA] < 0) why = "has no RECV_ACT";
            else if (st > 0 && q[P_RA] > q[P_F]) why = "receives its activation after FWD";
            else if (st == 0 && q[P_RA] >= 0) why = "receives an activation on the first stage";
            else if (st < last && q[P_SA] < 0) why = "has no SEND_ACT";
            else if (st < last && q[P_SA] < q[P_F]) why = "sends its activation before FWD";
            else if (st == last && q[P_SA] >= 0) why = "sends an activation from the last stage";
            else if (st < last && q[P_RG] < 0) why = "has no RECV_GRAD";
            else if (st < last && q[P_RG] > bwd) why = "receives its gradient after the backward";
            else if (st == last && q[P_RG] >= 0) why = "receives a gradient on the last stage";
            else if (st > 0 && q[P_SG] < 0) why = "has no SEND_GRAD";
            else if (st > 0 && q[P_SG] < bwd) why = "sends its gradient before the backward";
            else if (st == 0 && q[P_SG] >= 0) why = "sends a gradient from the first stage";
            if (why) {
                /* "FWD mb 3" -> "mb 3" */
                const char *unit = strchr(what, ' ') ? strchr(what, ' ') + 1 : what;
                snprintf(d2, sizeof d2, "%s", unit);
                return sr_seterr(SR_ERR_STATE, "pipeline schedule %s: rank %d (stage %d) %s %s",
                                 sr_sched_name(s->kind), r, st, d2, why);
            }
        }
    }
    return SR_OK;
}

/* Sends and receives of each channel, in program order, must name the same
 * microbatches and stages. */
static sr_status check_channels(const sr_schedule *s)
{
    int p = s->p, S = p * s->v;
    for (int sender = 0; sender < p; sender++) {
        for (int kind = CH_ACT; kind <= CH_GRAD; kind++) {
            int recvr = kind == CH_ACT ? (sender + 1) % p : (sender - 1 + p) % p;
            sr_op sop = kind == CH_ACT ? SR_I_SEND_ACT : SR_I_SEND_GRAD;
            sr_op rop = kind == CH_ACT ? SR_I_RECV_ACT : SR_I_RECV_GRAD;
            int i = 0, j = 0, k = 0;
            char d1[64], d2[64];
            for (;; k++) {
                while (i < s->n[sender] && s->ins[sender][i].op != sop) i++;
                while (j < s->n[recvr] && s->ins[recvr][j].op != rop) j++;
                if (i == s->n[sender] && j == s->n[recvr]) break;
                if (i == s->n[sender])
                    return sr_seterr(SR_ERR_STATE,
                                     "pipeline schedule %s: rank %d instruction %d (%s) has no "
                                     "matching %s on rank %d (message %d of that channel)",
                                     sr_sched_name(s->kind), recvr, j,
                                     describe(d1, sizeof d1, &s->ins[recvr][j], s->v),
                                     sr_op_name(sop), sender, k);
                if (j == s->n[recvr])
                    return sr_seterr(SR_ERR_STATE,
                                     "pipeline schedule %s: rank %d instruction %d (%s) has no "
                                     "matching %s on rank %d (message %d of that channel)",
                                     sr_sched_name(s->kind), sender, i,
                                     describe(d1, sizeof d1, &s->ins[sender][i], s->v),
                                     sr_op_name(rop), recvr, k);
                const sr_instr *a = &s->ins[sender][i], *b = &s->ins[recvr][j];
                int from = stage_of(s, sender, a->chunk);
                int to = stage_of(s, recvr, b->chunk);
                int want = kind == CH_ACT ? from + 1 : from - 1;
                if (a->mb != b->mb || to != want || want < 0 || want >= S)
                    return sr_seterr(SR_ERR_STATE,
                                     "pipeline schedule %s: message %d from rank %d to rank %d: "
                                     "rank %d instruction %d sends (%s, stage %d) but rank %d "
                                     "instruction %d receives (%s, stage %d): different order",
                                     sr_sched_name(s->kind), k, sender, recvr, sender, i,
                                     describe(d1, sizeof d1, a, s->v), from, recvr, j,
                                     describe(d2, sizeof d2, b, s->v), to);
                i++;
                j++;
            }
        }
    }
    return SR_OK;
}

sr_status sr_sched_check(const sr_schedule *s)
{
    if (!s || s->p < 1 || s->m < 1 || s->v < 1 || !s->n || !s->ins)
        return sr_seterr(SR_ERR_STATE, "pipeline schedule: empty or not built");
    size_t units = (size_t)s->m * (size_t)s->v;
    int *pos = malloc(sizeof(int) * units * NPOS);
    if (!pos) return sr_seterr(SR_ERR_NOMEM, "out of memory checking the pipeline schedule");
    sr_status st = SR_OK;
    for (int r = 0; r < s->p && st == SR_OK; r++) st = check_rank(s, r, pos);
    free(pos);
    if (st != SR_OK) return st;
    SR_CHECK(check_channels(s));

    sim x;
    int rc = run_sim(s, &x, 1, 1, NULL);
    if (rc < 0) {
        sim_free(&x, s->p);
        return sr_seterr(SR_ERR_NOMEM, "out of memory simulating the pipeline schedule");
    }
    if (rc > 0) {
        /* report the first blocked rank and the rank it waits on */
        int r = 0;
        while (x.pc[r] >= s->n[r]) r++;
        const sr_instr *in = &s->ins[r][x.pc[r]];
        int peer = chan_of(s, r, in->op) / 2;
        char d1[64], d2[64];
        if (x.pc[peer] < s->n[peer])
            describe(d2, sizeof d2, &s->ins[peer][x.pc[peer]], s->v);
        else
            snprintf(d2, sizeof d2, "finished");
        st = sr_seterr(SR_ERR_STATE,
                       "pipeline schedule %s deadlocks: rank %d instruction %d (%s) waits for "
                       "rank %d, which is itself stuck at instruction %d (%s)",
                       sr_sched_name(s->kind), r, x.pc[r], describe(d1, sizeof d1, in, s->v), peer,
                       x.pc[peer], d2);
    }
    sim_free(&x, s->p);
    return st;
}
