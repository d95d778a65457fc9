/* test_schedule.c: property tests of the pipeline schedules (runtime/schedule.c).
 *
 * For every schedule and p in 1..8, m in 1..32 (v in 1..4 and m % p == 0 for
 * interleaved): the library's own check passes; an independent check here of
 * completeness, order and transfers; sends and receives matched per channel;
 * the simulation finishes; peak in-flight microbatches; the simulated bubble
 * against theory. Then hand-made bad schedules the checker must reject.
 *
 * Prints one line per failing check, a summary per schedule, and ends with
 * "N passed, M failed"; exits non-zero when a check fails.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sr_schedule.h"

static int n_pass, n_fail;

static void check_(int ok, int line, const char *fmt, ...)
{
    if (ok) {
        n_pass++;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL - ");
    vprintf(fmt, ap);
    va_end(ap);
    printf("  (test_schedule.c:%d; last error: %s)\n", line, sr_errmsg());
    n_fail++;
}
#define CHECK(cond, ...) check_((cond) != 0, __LINE__, __VA_ARGS__)

#define PMAX 8
#define MMAX 32
#define VMAX 4

static int is_compute(sr_op op)
{
    return op == SR_I_FWD || op == SR_I_BWD || op == SR_I_BWD_INPUT || op == SR_I_BWD_WEIGHT;
}

/* ------------------------------------------------------------------------ */
/* independent structure check                                              */

/* Every (mb, chunk) once forward and once backward, in order, each wrapped
 * by exactly the transfers its stage needs and no others, REDUCE then STEP
 * at the end. Returns NULL or what is wrong. */
static const char *structure(const sr_schedule *s, int r, char *why, size_t n)
{
    int p = s->p, m = s->m, v = s->v, S = p * v, len = s->n[r];
    const sr_instr *a = s->ins[r];
    int split = s->kind == SR_SCHED_ZBH1;
    static int f[MMAX][VMAX], b[MMAX][VMAX], w[MMAX][VMAX];
    for (int i = 0; i < MMAX; i++)
        for (int c = 0; c < VMAX; c++) f[i][c] = b[i][c] = w[i][c] = -1;
    if (len < 2 || a[len - 2].op != SR_I_REDUCE || a[len - 1].op != SR_I_STEP) {
        snprintf(why, n, "rank %d does not end with REDUCE, STEP", r);
        return why;
    }
    int transfers = 0, expected = 0;
    for (int i = 0; i < len - 2; i++) {
        const sr_instr *in = &a[i];
        if (!is_compute(in->op)) {
            if (in->op == SR_I_REDUCE || in->op == SR_I_STEP) {
                snprintf(why, n, "rank %d: %s at %d, before the end", r, sr_op_name(in->op), i);
                return why;
            }
            transfers++;
            continue;
        }
        if (in->mb < 0 || in->mb >= m || in->chunk < 0 || in->chunk >= v) {
            snprintf(why, n, "rank %d: %s out of range at %d", r, sr_op_name(in->op), i);
            return why;
        }
        int st = in->chunk * p + r;
        int *slot = in->op == SR_I_FWD              ? &f[in->mb][in->chunk]
                    : in->op == SR_I_BWD_WEIGHT     ? &w[in->mb][in->chunk]
                                                    : &b[in->mb][in->chunk];
        if (*slot >= 0 || (split ? in->op == SR_I_BWD : in->op != SR_I_FWD && in->op != SR_I_BWD)) {
            snprintf(why, n, "rank %d: %s mb %d chunk %d twice or of the wrong kind", r,
                     sr_op_name(in->op), in->mb, in->chunk);
            return why;
        }
        *slot = i;
        /* the transfers right around the compute instruction */
        int before = -1, after = -1;
        if (in->op == SR_I_FWD) {
            if (st > 0) before = SR_I_RECV_ACT;
            if (st < S - 1) after = SR_I_SEND_ACT;
        } else if (in->op != SR_I_BWD_WEIGHT) {
            if (st < S - 1) before = SR_I_RECV_GRAD;
            if (st > 0) after = SR_I_SEND_GRAD;
        }
        if (before >= 0) {
            expected++;
            if (i == 0 || (int)a[i - 1].op != before || a[i - 1].mb != in->mb ||
                a[i - 1].chunk != in->chunk) {
                snprintf(why, n, "rank %d: %s mb %d chunk %d not right after its %s", r,
                         sr_op_name(in->op), in->mb, in->chunk, sr_op_name((sr_op)before));
                return why;
            }
        }
        if (after >= 0) {
            expected++;
            if ((int)a[i + 1].op != after || a[i + 1].mb != in->mb || a[i + 1].chunk != in->chunk) {
                snprintf(why, n, "rank %d: %s mb %d chunk %d not right before its %s", r,
                         sr_op_name(in->op), in->mb, in->chunk, sr_op_name((sr_op)after));
                return why;
            }
        }
    }
    if (transfers != expected) {
        snprintf(why, n, "rank %d: %d transfers, expected %d", r, transfers, expected);
        return why;
    }
    for (int i = 0; i < m; i++)
        for (int c = 0; c < v; c++) {
            if (f[i][c] < 0 || b[i][c] < 0 || (split && w[i][c] < 0)) {
                snprintf(why, n, "rank %d: mb %d chunk %d incomplete", r, i, c);
                return why;
            }
            if (b[i][c] < f[i][c] || (split && w[i][c] < b[i][c])) {
                snprintf(why, n, "rank %d: mb %d chunk %d out of order", r, i, c);
                return why;
            }
        }
    return NULL;
}

/* the sequence of compute instructions of one kind on a rank */
static int seq(const sr_schedule *s, int r, sr_op op, sr_instr *out)
{
    int k = 0;
    for (int i = 0; i < s->n[r]; i++)
        if (s->ins[r][i].op == op) out[k++] = s->ins[r][i];
    return k;
}

/* forwards before the first backward (or B) on a rank */
static int warmup_forwards(const sr_schedule *s, int r)
{
    int k = 0;
    for (int i = 0; i < s->n[r]; i++) {
        if (s->ins[r][i].op == SR_I_BWD || s->ins[r][i].op == SR_I_BWD_INPUT) break;
        if (s->ins[r][i].op == SR_I_FWD) k++;
    }
    return k;
}

static int imin(int a, int b) { return a < b ? a : b; }

/* The order each schedule promises. Returns NULL or what is wrong. */
static const char *order(const sr_schedule *s, int r, char *why, size_t n)
{
    int p = s->p, m = s->m, v = s->v;
    static sr_instr F[MMAX * VMAX], B[MMAX * VMAX], W[MMAX * VMAX];
    int nf = seq(s, r, SR_I_FWD, F);
    int nb = seq(s, r, s->kind == SR_SCHED_ZBH1 ? SR_I_BWD_INPUT : SR_I_BWD, B);
    int warm = warmup_forwards(s, r);
    if (s->kind != SR_SCHED_INTERLEAVED) {
        for (int k = 0; k < nf; k++)
            if (F[k].mb != k || B[k].mb != k) {
                snprintf(why, n, "rank %d: forward/backward %d is not microbatch %d", r, k, k);
                return why;
            }
    }
    switch (s->kind) {
    case SR_SCHED_GPIPE:
        if (warm != m) {
            snprintf(why, n, "rank %d: %d forwards before the first backward, not all %d", r, warm, m);
            return why;
        }
        break;
    case SR_SCHED_1F1B:
    case SR_SCHED_ZBH1: {
        if (warm != imin(p - r, m)) {
            snprintf(why, n, "rank %d: %d forwards before the first backward, want min(p-r, m) = %d",
                     r, warm, imin(p - r, m));
            return why;
        }
        /* steady state: one forward between consecutive backwards */
        int fs = 0, bs = 0;
        for (int i = 0; i < s->n[r]; i++) {
            sr_op op = s->ins[r][i].op;
            if (op == SR_I_FWD) fs++;
            if (op == SR_I_BWD || op == SR_I_BWD_INPUT) {
                bs++;
                if (fs != imin(warm + bs - 1, m)) {
                    snprintf(why, n, "rank %d: backward %d after %d forwards, want %d", r, bs - 1,
                             fs, imin(warm + bs - 1, m));
                    return why;
                }
            }
        }
        if (s->kind == SR_SCHED_ZBH1) {
            /* W of microbatch j right after B of microbatch j + r (or at the
             * end when there is none) */
            int nw = seq(s, r, SR_I_BWD_WEIGHT, W);
            for (int j = 0; j < nw; j++) {
                if (W[j].mb != j) {
                    snprintf(why, n, "rank %d: W %d is microbatch %d", r, j, W[j].mb);
                    return why;
                }
            }
            int bi = 0;
            for (int i = 0; i < s->n[r]; i++) {
                const sr_instr *in = &s->ins[r][i];
                if (in->op == SR_I_BWD_INPUT) bi = in->mb;
                if (in->op == SR_I_BWD_WEIGHT && in->mb + r <= m - 1 && bi != in->mb + r) {
                    snprintf(why, n, "rank %d: W %d after B %d, want after B %d", r, in->mb, bi,
                             in->mb + r);
                    return why;
                }
            }
        }
        break;
    }
    case SR_SCHED_INTERLEAVED: {
        /* Megatron-LM's order, written out independently of the library */
        for (int k = 0; k < nf; k++) {
            int c = (k / p) % v, mb = (k / (p * v)) * p + k % p;
            if (F[k].chunk != c || F[k].mb != mb) {
                snprintf(why, n, "rank %d: forward %d is (mb %d, chunk %d), want (%d, %d)", r, k,
                         F[k].mb, F[k].chunk, mb, c);
                return why;
            }
            if (B[k].chunk != v - 1 - c || B[k].mb != mb) {
                snprintf(why, n, "rank %d: backward %d is (mb %d, chunk %d), want (%d, %d)", r, k,
                         B[k].mb, B[k].chunk, mb, v - 1 - c);
                return why;
            }
        }
        int want = imin(m * v, (p - r - 1) * 2 + (v - 1) * p);
        if (want < m * v) want++; /* the first steady forward runs before the first backward */
        if (warm != want) {
            snprintf(why, n, "rank %d: %d forwards before the first backward, want %d", r, warm, want);
            return why;
        }
        break;
    }
    }
    if (nf != m * v || nb != m * v) {
        snprintf(why, n, "rank %d: %d forwards and %d backwards for %d", r, nf, nb, m * v);
        return why;
    }
    return NULL;
}

/* Per channel (sender, kind): the k-th send and the k-th receive name the
 * same microbatch and adjacent stages. */
static const char *matched(const sr_schedule *s, char *why, size_t n)
{
    int p = s->p;
    for (int src = 0; src < p; src++)
        for (int kind = 0; kind < 2; kind++) {
            int dst = kind == 0 ? (src + 1) % p : (src - 1 + p) % p;
            sr_op so = kind == 0 ? SR_I_SEND_ACT : SR_I_SEND_GRAD;
            sr_op ro = kind == 0 ? SR_I_RECV_ACT : SR_I_RECV_GRAD;
            sr_instr *snd = malloc(sizeof(sr_instr) * (size_t)s->n[src]);
            sr_instr *rcv = malloc(sizeof(sr_instr) * (size_t)s->n[dst]);
            int ns = seq(s, src, so, snd), nr = seq(s, dst, ro, rcv);
            const char *bad = NULL;
            if (ns != nr) {
                snprintf(why, n, "rank %d sends %d %s, rank %d receives %d", src, ns, sr_op_name(so),
                         dst, nr);
                bad = why;
            }
            for (int k = 0; !bad && k < ns; k++) {
                int from = snd[k].chunk * p + src, to = rcv[k].chunk * p + dst;
                if (snd[k].mb != rcv[k].mb || to != (kind == 0 ? from + 1 : from - 1)) {
                    snprintf(why, n, "message %d from rank %d to %d: sent mb %d stage %d, received "
                             "mb %d stage %d", k, src, dst, snd[k].mb, from, rcv[k].mb, to);
                    bad = why;
                }
            }
            free(snd);
            free(rcv);
            if (bad) return bad;
        }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* properties                                                               */

typedef struct summary {
    int cases, failed_checks;
    double worst_theory_gap;
} summary;

static void properties(sr_sched_kind kind, int p, int m, int v, summary *sum)
{
    int before = n_fail;
    const char *name = sr_sched_name(kind);
    char why[256];
    sr_schedule s;
    sr_status st = sr_sched_build(&s, kind, p, m, v);
    CHECK(st == SR_OK, "%s p %d m %d v %d: builds", name, p, m, v);
    if (st != SR_OK) {
        sum->cases++;
        sum->failed_checks += n_fail - before;
        return;
    }
    CHECK(sr_sched_check(&s) == SR_OK, "%s p %d m %d v %d: sr_sched_check passes", name, p, m, v);
    for (int r = 0; r < p; r++) {
        const char *e = structure(&s, r, why, sizeof why);
        CHECK(!e, "%s p %d m %d v %d: completeness and transfers: %s", name, p, m, v, e ? e : "");
        e = e ? NULL : order(&s, r, why, sizeof why);
        CHECK(!e, "%s p %d m %d v %d: order: %s", name, p, m, v, e ? e : "");
    }
    const char *e = matched(&s, why, sizeof why);
    CHECK(!e, "%s p %d m %d v %d: sends and receives matched: %s", name, p, m, v, e ? e : "");

    /* simulation: no deadlock, peak in-flight, bubble = theory */
    int peak[PMAX];
    double bub = sr_sched_simulate(&s, 1, 2, peak);
    CHECK(bub >= 0, "%s p %d m %d v %d: simulation finishes (no deadlock)", name, p, m, v);
    double th = sr_sched_bubble_theory(kind, p, m, v);
    double gap = fabs(bub - th);
    if (gap > sum->worst_theory_gap) sum->worst_theory_gap = gap;
    CHECK(gap < 1e-12, "%s p %d m %d v %d: bubble %.6f with t_fwd 1, t_bwd 2, theory %.6f", name,
          p, m, v, bub, th);
    for (int r = 0; r < p; r++) {
        int want;
        switch (kind) {
        case SR_SCHED_GPIPE: want = m; break;
        case SR_SCHED_1F1B: want = imin(p - r, m); break;
        case SR_SCHED_ZBH1: want = r == 0 ? imin(p, m) : -1; break;
        default: want = imin(m * v, (p - r - 1) * 2 + (v - 1) * p + 1); break;
        }
        if (want >= 0)
            CHECK(peak[r] == want, "%s p %d m %d v %d: rank %d peak in-flight %d, want %d", name,
                  p, m, v, r, peak[r], want);
        if (kind == SR_SCHED_ZBH1)
            CHECK(peak[r] <= p, "%s p %d m %d: rank %d peak in-flight %d > p", name, p, m, r,
                  peak[r]);
        /* the executor's slots (taken at the receive, given back after the
         * last instruction): one pool per chunk */
        int slots[VMAX], total = 0;
        CHECK(sr_sched_slot_peaks(&s, r, slots) == SR_OK, "%s p %d m %d v %d: slots counted", name, p, m, v);
        for (int c = 0; c < v; c++) total += slots[c];
        if (kind == SR_SCHED_ZBH1)
            CHECK(total == imin(p, m), "%s p %d m %d: rank %d holds %d slots, want min(p, m) = %d", name, p, m, r,
                  total, imin(p, m));
        else if (v == 1)
            CHECK(total == peak[r], "%s p %d m %d: rank %d holds %d slots, in flight %d", name, p, m, r, total,
                  peak[r]);
        else /* chunks peak at different times: at most v pools of the rank's peak */
            CHECK(total >= peak[r] && total <= v * peak[r], "%s p %d m %d v %d: rank %d holds %d slots over its "
                  "chunks, in flight %d", name, p, m, v, r, total, peak[r]);
    }
    if (kind != SR_SCHED_ZBH1) {
        /* the formulas hold for any t_bwd / t_fwd, the same on every stage */
        static const double ratio[] = {0.5, 1, 3, 7.25};
        for (int k = 0; k < 4; k++) {
            double b2 = sr_sched_simulate(&s, 1.5, 1.5 * ratio[k], NULL);
            CHECK(fabs(b2 - th) < 1e-12, "%s p %d m %d v %d: bubble %.6f with t_bwd/t_fwd %g, "
                  "theory %.6f", name, p, m, v, b2, ratio[k], th);
        }
    } else {
        /* the paper's (p-1)F / (m(F+B+W) + (p-1)F) for B = W <= F, m >= p */
        static const double ratio[] = {0.5, 1, 1.5};
        for (int k = 0; m >= p && k < 3; k++) {
            double b2 = sr_sched_simulate(&s, 1, ratio[k], NULL);
            double want = (p - 1) / (m * (1 + ratio[k]) + (p - 1));
            CHECK(fabs(b2 - want) < 1e-12, "%s p %d m %d: bubble %.6f with t_bwd/t_fwd %g, "
                  "paper %.6f", name, p, m, b2, ratio[k], want);
        }
        /* strictly below 1f1b's with the same costs */
        sr_schedule o;
        if (p > 1 && sr_sched_build(&o, SR_SCHED_1F1B, p, m, 1) == SR_OK) {
            double b1 = sr_sched_simulate(&o, 1, 2, NULL);
            CHECK(bub < b1 - 1e-12, "%s p %d m %d: bubble %.6f below 1f1b's %.6f", name, p, m, bub,
                  b1);
            sr_sched_free(&o);
        }
    }
    sr_sched_free(&s);
    sum->cases++;
    sum->failed_checks += n_fail - before;
}

static void all_properties(void)
{
    for (int kind = SR_SCHED_GPIPE; kind <= SR_SCHED_ZBH1; kind++) {
        summary sum = {0, 0, 0};
        int pass0 = n_pass;
        for (int p = 1; p <= PMAX; p++)
            for (int m = 1; m <= MMAX; m++)
                for (int v = 1; v <= (kind == SR_SCHED_INTERLEAVED ? VMAX : 1); v++) {
                    if (kind == SR_SCHED_INTERLEAVED && m % p) continue;
                    properties((sr_sched_kind)kind, p, m, v, &sum);
                }
        printf("%-11s %4d layouts, %5d checks passed, %d failed, largest |bubble - theory| %.1e\n",
               sr_sched_name((sr_sched_kind)kind), sum.cases, n_pass - pass0, sum.failed_checks,
               sum.worst_theory_gap);
    }
}

/* the numbers for the docs and the report */
static void report(void)
{
    static const struct { sr_sched_kind k; int v; } rows[] = {
        {SR_SCHED_GPIPE, 1}, {SR_SCHED_1F1B, 1}, {SR_SCHED_INTERLEAVED, 2}, {SR_SCHED_ZBH1, 1}};
    printf("bubble, p 4, m 8, t_fwd 1, t_bwd 2 (simulated / theory):");
    for (int i = 0; i < 4; i++) {
        sr_schedule s;
        if (sr_sched_build(&s, rows[i].k, 4, 8, rows[i].v) != SR_OK) continue;
        printf(" %s%s %.4f/%.4f", sr_sched_name(rows[i].k), rows[i].v > 1 ? " v 2" : "",
               sr_sched_simulate(&s, 1, 2, NULL), sr_sched_bubble_theory(rows[i].k, 4, 8, rows[i].v));
        sr_sched_free(&s);
    }
    printf("\n");
}

/* ------------------------------------------------------------------------ */
/* the checker rejects bad schedules                                        */

static int find(const sr_schedule *s, int r, sr_op op, int mb)
{
    for (int i = 0; i < s->n[r]; i++)
        if (s->ins[r][i].op == op && s->ins[r][i].mb == mb) return i;
    return -1;
}

static void drop(sr_schedule *s, int r, int i)
{
    if (i < 0) return; /* nothing to mutate: the check below then fails */
    memmove(&s->ins[r][i], &s->ins[r][i + 1], sizeof(sr_instr) * (size_t)(s->n[r] - i - 1));
    s->n[r]--;
}

/* moves instruction i of rank r to position j (j < i) */
static void move_before(sr_schedule *s, int r, int i, int j)
{
    if (i < 0 || j < 0 || j >= i) return;
    sr_instr t = s->ins[r][i];
    memmove(&s->ins[r][j + 1], &s->ins[r][j], sizeof(sr_instr) * (size_t)(i - j));
    s->ins[r][j] = t;
}

static void expect_reject(sr_schedule *s, const char *what, const char *needle)
{
    sr_status st = sr_sched_check(s);
    CHECK(st == SR_ERR_STATE && strstr(sr_errmsg(), needle),
          "checker rejects %s (status %d, message should contain \"%s\")", what, (int)st, needle);
    if (st == SR_ERR_STATE) printf("  rejected %s: %s\n", what, sr_errmsg());
    CHECK(sr_sched_simulate(s, 1, 2, NULL) < 0 || strcmp(needle, "deadlock"),
          "simulate reports the deadlock of %s", what);
    sr_sched_free(s);
}

static void negatives(void)
{
    sr_schedule s;

    /* swapped receive order: the last rank takes microbatch 1 before 0, while
     * its neighbour sends 0 first */
    sr_sched_build(&s, SR_SCHED_GPIPE, 2, 2, 1);
    {
        int a = find(&s, 1, SR_I_RECV_ACT, 0), b = find(&s, 1, SR_I_RECV_ACT, 1);
        if (a < 0 || b < 0 || b + 1 >= s.n[1]) a = b = 0;
        sr_instr t0 = s.ins[1][a], t1 = s.ins[1][a + 1];
        s.ins[1][a] = s.ins[1][b];
        s.ins[1][a + 1] = s.ins[1][b + 1];
        s.ins[1][b] = t0;
        s.ins[1][b + 1] = t1;
    }
    expect_reject(&s, "a swapped receive order", "different order");

    /* a missing send */
    sr_sched_build(&s, SR_SCHED_1F1B, 4, 8, 1);
    drop(&s, 2, find(&s, 2, SR_I_SEND_ACT, 5));
    expect_reject(&s, "a missing send", "no SEND_ACT");

    /* a missing gradient send, on the last rank */
    sr_sched_build(&s, SR_SCHED_GPIPE, 2, 3, 1);
    drop(&s, 1, find(&s, 1, SR_I_SEND_GRAD, 2));
    expect_reject(&s, "a missing gradient send", "no SEND_GRAD");

    /* a backward before its forward */
    sr_sched_build(&s, SR_SCHED_GPIPE, 1, 2, 1);
    move_before(&s, 0, find(&s, 0, SR_I_BWD, 0), find(&s, 0, SR_I_FWD, 0));
    expect_reject(&s, "a backward before its forward", "backward before its forward");

    /* a duplicate forward */
    sr_sched_build(&s, SR_SCHED_1F1B, 2, 4, 1);
    if (find(&s, 0, SR_I_FWD, 2) >= 0) s.ins[0][find(&s, 0, SR_I_FWD, 2)].mb = 1;
    expect_reject(&s, "a duplicate forward", "FWD mb 1 twice");

    /* a cyclic wait that every static rule accepts: rank 0 waits for the
     * gradient of microbatch 0 before sending its activation */
    sr_sched_build(&s, SR_SCHED_1F1B, 2, 2, 1);
    move_before(&s, 0, find(&s, 0, SR_I_RECV_GRAD, 0), find(&s, 0, SR_I_SEND_ACT, 0));
    expect_reject(&s, "a cyclic wait", "deadlock");

    /* the same in the interleaved schedule, across the wrap-around link */
    sr_sched_build(&s, SR_SCHED_INTERLEAVED, 2, 2, 2);
    {
        int i = find(&s, 1, SR_I_RECV_GRAD, 0), j = find(&s, 1, SR_I_SEND_ACT, 0);
        if (i > j) move_before(&s, 1, i, j);
    }
    expect_reject(&s, "an interleaved cyclic wait", "deadlock");

    /* split backward out of order (zb-h1) */
    sr_sched_build(&s, SR_SCHED_ZBH1, 2, 2, 1);
    move_before(&s, 1, find(&s, 1, SR_I_BWD_WEIGHT, 0), find(&s, 1, SR_I_BWD_INPUT, 0));
    expect_reject(&s, "W before B", "BWD_WEIGHT before BWD_INPUT");

    /* no REDUCE, STEP tail */
    sr_sched_build(&s, SR_SCHED_GPIPE, 2, 2, 1);
    s.n[1]--;
    expect_reject(&s, "a missing STEP", "REDUCE, STEP");

    /* a microbatch out of range */
    sr_sched_build(&s, SR_SCHED_GPIPE, 2, 2, 1);
    s.ins[0][0].mb = 2;
    expect_reject(&s, "a microbatch out of range", "out of range");
}

static void arguments(void)
{
    sr_schedule s;
    CHECK(sr_sched_build(&s, SR_SCHED_1F1B, 0, 4, 1) == SR_ERR_ARG, "pp 0 rejected");
    CHECK(sr_sched_build(&s, SR_SCHED_1F1B, 2, 0, 1) == SR_ERR_ARG, "0 microbatches rejected");
    CHECK(sr_sched_build(&s, SR_SCHED_1F1B, 2, 4, 2) == SR_ERR_ARG &&
              strstr(sr_errmsg(), "interleaved"),
          "chunks > 1 outside interleaved rejected");
    CHECK(sr_sched_build(&s, SR_SCHED_INTERLEAVED, 4, 6, 2) == SR_ERR_ARG &&
              strstr(sr_errmsg(), "multiple") && strstr(sr_errmsg(), "6"),
          "interleaved with m %% p != 0 rejected with the numbers");
    for (int k = 0; k < 4; k++)
        CHECK(sr_sched_parse(sr_sched_name((sr_sched_kind)k)) == k, "name round trip %d", k);
    CHECK(sr_sched_parse("zb-h1") == SR_SCHED_ZBH1 && sr_sched_parse("pipedream") == -1,
          "parse names");
    CHECK(!strcmp(sr_op_name(SR_I_BWD_WEIGHT), "BWD_WEIGHT"), "op names");
    CHECK(sr_sched_bubble_theory(SR_SCHED_1F1B, 4, 8, 1) == 3.0 / 11, "theory 1f1b p 4 m 8");
}

int main(void)
{
    arguments();
    all_properties();
    negatives();
    report();
    if (getenv("SR_SCHED_PRINT")) {
        sr_schedule s;
        for (int k = 0; k < 4; k++)
            if (sr_sched_build(&s, (sr_sched_kind)k, 4, 8, k == SR_SCHED_INTERLEAVED ? 2 : 1) == SR_OK) {
                printf("%s p 4 m 8:\n", sr_sched_name((sr_sched_kind)k));
                sr_sched_print(stdout, &s);
                sr_sched_free(&s);
            }
    }
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
