/* test_dp.c: the data-parallel gradient buckets (runtime/dp.c) under mpirun,
 * on a made-up parameter layout of odd sizes at the runtime's 16-float
 * alignment, in both modes (all-reduce; ZeRO-1 reduce-scatter into slices)
 * and with many buckets or one:
 *   - ZeRO-1's buckets tile the arena, each a multiple of the ranks in
 *     length, so cuts fall inside parameters at 3 ranks;
 *   - over 30 steps the gradients are reported final in reverse order and
 *     in shuffled ones, each written just before its report: a launched bucket never holds a float of a
 *     parameter not yet final (one cut inside a parameter makes it wait
 *     for that parameter too), and a held parameter's buckets wait for
 *     sr_dp_finish;
 *   - the sums: the all-reduced arena, ZeRO-1's slices of every bucket;
 *   - sr_dp_gather from the shard and in place gives the whole arena;
 *   - the gather overlapped with a forward (sr_dp_gather_start): each
 *     parameter is whole once sr_dp_param_needed returns for it, every
 *     bucket is reported gathered once (sr_dp_on_gathered), by the hook of
 *     the first parameter in it, and sr_dp_gather_settle leaves the arena
 *     whole;
 *   - an arena that does not split over the ranks is refused.
 * Values are small integers, so every sum is exact. Rank 0 prints one line
 * per check, "ok" only where it held on every rank, then "N passed, M failed".
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sr_comm.h"
#include "sr_dp.h"

static int me, nworld, n_pass, n_fail;

static void check(int ok, const char *what)
{
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (!ok) printf("rank %d: FAIL - %s\n", me, what);
    if (me == 0) printf("%s - %s\n", all ? "ok  " : "FAIL", what);
    fflush(stdout);
    if (all) n_pass++;
    else n_fail++;
}

#define NP 9
static const int64_t numel[NP] = {1, 48, 100, 16, 5, 256, 64, 3, 77}; /* some fill their alignment */
static int64_t off[NP], n_floats;

/* rank r's gradient at arena float x of parameter i; padding is 0 */
static float val(int r, int64_t x) { return (float)((r + 1) * (int)(x % 7 + 1)); }
static float sum(int64_t x) { return (float)(nworld * (nworld + 1) / 2 * (int)(x % 7 + 1)); }
static int param_at(int64_t x)
{
    for (int i = 0; i < NP; i++)
        if (x >= off[i] && x < off[i] + numel[i]) return i;
    return -1;
}

#define STEPS 30

/* sr_dp_on_gathered's reports: bucket ranges, in order */
static int64_t arrived[64][2];
static int narrived;
static float *full; /* the arena gathered into */
static void on_gathered(float *p, int64_t n)
{
    if (narrived < 64) {
        arrived[narrived][0] = p - full;
        arrived[narrived][1] = p - full + n;
    }
    narrived++;
}

static void run_mode(const sr_program *prog, sr_comm *comm, int zero, int64_t bucket_bytes)
{
    char what[256];
    const char *mode = zero ? "ZeRO-1" : "all-reduce";
    const char *size = bucket_bytes < 1000 ? "small buckets" : "one bucket";
    int64_t n = zero ? (n_floats + nworld - 1) / nworld * nworld : n_floats;
    float *grads = malloc(sizeof(float) * (size_t)n), *shard = zero ? malloc(sizeof(float) * (size_t)(n / nworld)) : NULL;
    for (int64_t x = 0; x < n; x++) grads[x] = param_at(x) >= 0 ? NAN : 0.0f; /* NaN: not computed yet */
    sr_dp *dp = NULL;
    sr_status st = sr_dp_init(&dp, prog, off, n, comm, grads, shard, bucket_bytes, NULL);
    snprintf(what, sizeof what, "%s, %s: sr_dp_init", mode, size);
    check(st == SR_OK, what);
    if (st != SR_OK) return;
    int held = zero ? 4 : -1; /* a tied parameter's buckets wait for sr_dp_finish */
    if (held >= 0) sr_dp_hold(dp, held);

    /* the buckets: descending, tiling the arena (ZeRO: multiples of the ranks) */
    int64_t lo, hi, top = n;
    int launched, ok = sr_dp_buckets(dp) >= 1, nb = sr_dp_buckets(dp);
    for (int j = 0; sr_dp_bucket(dp, j, &lo, &hi, &launched); j++) {
        ok &= hi == top && lo < hi && (!zero || (hi - lo) % nworld == 0);
        top = lo;
    }
    ok &= zero ? top == 0 : top == off[0];
    snprintf(what, sizeof what, "%s, %s: %d buckets, descending and contiguous%s", mode, size, nb,
             zero ? ", each a multiple of the ranks in length, down to 0" : "");
    check(ok, what);
    int straddle = 0;
    for (int j = 0; sr_dp_bucket(dp, j, &lo, &hi, &launched); j++)
        straddle += param_at(lo) >= 0 && param_at(lo) == param_at(lo - 1);
    if (zero && bucket_bytes < 1000 && nworld == 3) {
        snprintf(what, sizeof what, "%s, %s: cuts inside parameters (%d)", mode, size, straddle);
        check(straddle > 0, what);
    }

    /* steps of a backward: each gradient written, then reported final; in
     * reverse order first, then in shuffled orders (a tied parameter's
     * gradient may be final late), the same on every rank */
    sr_exec e;
    memset(&e, 0, sizeof e);
    e.user = dp;
    int early = 0, held_early = 0, all = 1, sums = 1;
    unsigned seed = 12345;
    for (int step = 0; step < STEPS; step++) {
        int order[NP], final[NP] = {0};
        for (int t = 0; t < NP; t++) order[t] = NP - 1 - t;
        for (int t = NP - 1; step > 0 && t > 0; t--) { /* Fisher-Yates */
            seed = seed * 1103515245u + 12345u;
            int u = (int)((seed >> 16) % (unsigned)(t + 1)), tmp = order[t];
            order[t] = order[u];
            order[u] = tmp;
        }
        for (int64_t x = 0; x < n; x++) grads[x] = param_at(x) >= 0 ? NAN : 0.0f;
        sr_dp_begin(dp, 1, step);
        for (int t = 0; t < NP; t++) {
            int i = order[t];
            for (int64_t x = off[i]; x < off[i] + numel[i]; x++) grads[x] = val(me, x);
            final[i] = 1;
            sr_dp_grad_ready(&e, i);
            for (int j = 0; sr_dp_bucket(dp, j, &lo, &hi, &launched); j++) {
                if (!launched) continue;
                for (int64_t x = lo; x < hi; x++) {
                    int p = param_at(x);
                    early += p >= 0 && !final[p];      /* not final yet */
                    held_early += p >= 0 && p == held; /* must wait for finish */
                }
            }
        }
        for (int j = 0; sr_dp_bucket(dp, j, &lo, &hi, &launched); j++) {
            int has_held = 0;
            for (int64_t x = lo; x < hi; x++) has_held |= held >= 0 && param_at(x) == held;
            all &= launched == !has_held;
        }
        sums &= sr_dp_finish(dp) == SR_OK;
        int64_t mine = 0, at, k;
        if (zero) {
            for (int j = 0; sr_dp_slice(dp, j, &lo, &k, &at); j++) {
                mine += k;
                for (int64_t x = 0; x < k; x++)
                    sums &= shard[at + x] == (param_at(lo + x) >= 0 ? sum(lo + x) : 0.0f);
            }
            sums &= mine == n / nworld;
        } else {
            for (int64_t x = 0; x < n; x++) sums &= grads[x] == (param_at(x) >= 0 ? sum(x) : 0.0f);
            sums &= !sr_dp_slice(dp, 0, &lo, &k, &at);
        }
    }
    snprintf(what, sizeof what, "%s, %s, %d orders: no bucket launched before all its floats were final", mode,
             size, STEPS);
    check(early == 0, what);
    snprintf(what, sizeof what, "%s, %s, %d orders: every bucket launched by the last report%s", mode, size, STEPS,
             zero ? " but the held parameter's" : "");
    check(all && held_early == 0, what);
    snprintf(what, sizeof what, "%s, %s, %d orders: %s", mode, size, STEPS,
             zero ? "this rank's slices of every bucket hold the sums, 1/dp of the arena" : "the arena holds the sums");
    check(sums, what);

    int64_t at, k;
    if (zero) {
        /* gather from the shard, then in place */
        full = malloc(sizeof(float) * (size_t)n);
        for (int64_t x = 0; x < n; x++) full[x] = -1;
        for (int j = 0; sr_dp_slice(dp, j, &lo, &k, &at); j++)
            for (int64_t x = 0; x < k; x++) shard[at + x] = (float)(lo + x);
        ok = sr_dp_gather(dp, shard, full, "test") == SR_OK;
        for (int64_t x = 0; x < n; x++) ok &= full[x] == (float)x;
        snprintf(what, sizeof what, "%s, %s: sr_dp_gather from the shard gives the whole arena", mode, size);
        check(ok, what);
        for (int64_t x = 0; x < n; x++) full[x] = -1;
        for (int j = 0; sr_dp_slice(dp, j, &lo, &k, &at); j++)
            for (int64_t x = 0; x < k; x++) full[lo + x] = (float)(2 * (lo + x));
        ok = sr_dp_gather(dp, NULL, full, "test") == SR_OK;
        for (int64_t x = 0; x < n; x++) ok &= full[x] == (float)(2 * x);
        snprintf(what, sizeof what, "%s, %s: sr_dp_gather in place gives the whole arena", mode, size);
        check(ok, what);

        /* overlapped with a forward: started, then the parameters needed in
         * declaration order (the last bucket's first) */
        for (int64_t x = 0; x < n; x++) full[x] = -1;
        for (int j = 0; sr_dp_slice(dp, j, &lo, &k, &at); j++)
            for (int64_t x = 0; x < k; x++) full[lo + x] = (float)(3 * (lo + x));
        sr_dp_on_gathered(dp, on_gathered);
        narrived = 0;
        ok = sr_dp_gather_start(dp, full) == SR_OK;
        int whole = 1, reported = 1;
        for (int i = 0; i < NP; i++) {
            sr_dp_param_needed(&e, i);
            for (int64_t x = off[i]; x < off[i] + numel[i]; x++) whole &= full[x] == (float)(3 * x);
            for (int64_t x = off[i]; x < off[i] + numel[i]; x++) { /* its buckets reported by now */
                int seen = 0;
                for (int a = 0; a < narrived && a < 64; a++) seen |= arrived[a][0] <= x && x < arrived[a][1];
                reported &= seen;
            }
        }
        int during = narrived;
        ok &= sr_dp_gather_settle(dp) == SR_OK && sr_dp_gather_settle(dp) == SR_OK;
        for (int64_t x = 0; x < n; x++) ok &= full[x] == (float)(3 * x);
        int once = narrived == nb && during == nb;
        for (int j = 0; once && sr_dp_bucket(dp, j, &lo, &hi, &launched); j++) {
            int c = 0;
            for (int a = 0; a < narrived; a++) c += arrived[a][0] == lo && arrived[a][1] == hi;
            once &= c == 1;
        }
        sr_dp_param_needed(&e, 0); /* settled: nothing to wait for, nothing reported */
        once &= narrived == nb;
        snprintf(what, sizeof what, "%s, %s: gathered during a forward, each parameter whole when its hook returns",
                 mode, size);
        check(ok && whole, what);
        snprintf(what, sizeof what, "%s, %s: gathered during a forward, each of the %d buckets reported once, by "
                 "the hook of its first parameter", mode, size, nb);
        check(once && reported, what);
        sr_dp_on_gathered(dp, NULL);
        free(full);
    }
    sr_dp_free(dp);
    free(grads);
    free(shard);
}

int main(int argc, char **argv)
{
    if (sr_comm_init(&argc, &argv) != SR_OK) return 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &nworld);
    sr_grid g;
    if (sr_grid_init(&g, nworld, 1, 1, SR_COMM_MPI, 30) != SR_OK) {
        fprintf(stderr, "rank %d: %s\n", me, sr_errmsg());
        return 1;
    }
    /* the runtime's layout: each parameter at a 16-float (64-byte) boundary */
    sr_param_desc params[NP];
    memset(params, 0, sizeof params);
    for (int i = 0; i < NP; i++) {
        off[i] = n_floats;
        params[i].numel = numel[i];
        params[i].offset = off[i];
        n_floats = (off[i] + numel[i] + 15) / 16 * 16;
    }
    sr_program prog;
    memset(&prog, 0, sizeof prog);
    prog.n_params = NP;
    prog.params = params;
    prog.n_param_floats = n_floats;
    for (int zero = 0; zero < 2; zero++) {
        run_mode(&prog, g.dp_comm, zero, 4 * 40); /* about two parameters a bucket */
        run_mode(&prog, g.dp_comm, zero, 1 << 20);
    }
    if (nworld > 1 && (n_floats + 1) % nworld != 0) {
        float *grads = calloc((size_t)n_floats + 1, sizeof(float)), shard[1];
        sr_dp *dp = NULL;
        sr_status st = sr_dp_init(&dp, &prog, off, n_floats + 1, g.dp_comm, grads, shard, 1 << 20, NULL);
        check(st == SR_ERR_ARG && strstr(sr_errmsg(), "do not split"), "ZeRO-1: an arena not a multiple of the ranks is refused");
        free(grads);
    }
    if (me == 0) printf("%d passed, %d failed\n", n_pass, n_fail);
    sr_grid_free(&g);
    sr_comm_finalize();
    return n_fail ? 1 : 0;
}
