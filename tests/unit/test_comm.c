/* test_comm.c: the process grid and the communication layer (runtime/comm.c),
 * under mpirun on 2 or 4 ranks.
 *
 *   test_comm            every grid shape the world allows; coordinates, axis
 *                        membership, every op blocking and async on exact
 *                        integer-valued data (odd sizes, zero length, in place,
 *                        chunked paths), send/recv rings, stats, argument and
 *                        world-size errors
 *   test_comm --timeout  rank 1 skips a collective: the others must get
 *                        SR_ERR_COMM after the 1 s timeout; then every rank
 *                        calls sr_comm_abort(3) (the ctest expects status 3)
 *
 * Checks are collective: every rank evaluates the same check, rank 0 prints
 * one line for it ("ok" only if it held on every rank), a rank where it
 * failed prints its own detail. Rank 0 ends with "N passed, M failed".
 * The harness itself talks to MPI_COMM_WORLD directly, not through the layer
 * under test.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sr_comm.h"

static int me, nworld;
static int n_pass, n_fail;

/* collective check: every rank must call it in the same order */
static void check_(int ok, int line, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    unsigned mine = ok ? 0u : 1u << (me % 32), bad = 0;
    MPI_Allreduce(&mine, &bad, 1, MPI_UNSIGNED, MPI_BOR, MPI_COMM_WORLD);
    if (!ok) {
        printf("rank %d: FAIL - %s (test_comm.c:%d; last error: %s)\n", me, msg, line, sr_errmsg());
        fflush(stdout);
    }
    if (me == 0) {
        if (bad) {
            printf("FAIL - %s (failed on ranks:", msg);
            for (int r = 0; r < nworld && r < 32; r++)
                if (bad >> r & 1u) printf(" %d", r);
            printf(")\n");
        } else {
            printf("ok   - %s\n", msg);
        }
        fflush(stdout);
    }
    if (bad) n_fail++;
    else n_pass++;
}
#define CHECK(cond, ...) check_((cond) != 0, __LINE__, __VA_ARGS__)

/* local check (timeout mode: the ranks take different paths) */
static void lcheck_(int ok, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("rank %d: %s - ", me, ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    va_end(ap);
    if (!ok) printf(" (test_comm.c:%d; last error: %s)", line, sr_errmsg());
    printf("\n");
    fflush(stdout);
    if (ok) n_pass++;
    else n_fail++;
}
#define LCHECK(cond, ...) lcheck_((cond) != 0, __LINE__, __VA_ARGS__)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *alloc_f(int64_t n)
{
    return n > 0 ? malloc((size_t)n * sizeof(float)) : NULL;
}

/* completes req: polls sr_comm_test (at most 20 s) then waits */
static sr_status finish(sr_req *req)
{
    double t0 = now();
    while (!sr_comm_test(req) && now() - t0 < 20) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    return sr_comm_wait(req);
}

/* runs `call` (which names `req`) blocking, or async and then finished */
#define RUN(st, async, call)                                              \
    do {                                                                  \
        sr_req *rq_ = NULL;                                               \
        sr_req **req = (async) ? &rq_ : NULL;                             \
        (st) = (call);                                                    \
        if ((st) == SR_OK && (async)) (st) = rq_ ? finish(rq_) : SR_ERR_STATE; \
    } while (0)

/* ------------------------------------------------------------------------ */
/* one op each, on exact integer-valued floats (sums are exact in any order) */

static int t_allreduce(sr_comm *c, int64_t n, int async)
{
    int r = sr_comm_rank(c), size = sr_comm_size(c);
    float *buf = alloc_f(n);
    for (int64_t i = 0; i < n; i++) buf[i] = (float)((r + 1) * (i % 101 + 1));
    sr_status st;
    RUN(st, async, sr_comm_allreduce(c, buf, n, "test allreduce", req));
    int ok = st == SR_OK;
    float S = (float)(size * (size + 1) / 2);
    for (int64_t i = 0; ok && i < n; i++) ok = buf[i] == S * (float)(i % 101 + 1);
    free(buf);
    return ok;
}

static int t_reduce_scatter(sr_comm *c, int64_t n, int async, int inplace)
{
    int r = sr_comm_rank(c), size = sr_comm_size(c);
    float *send = alloc_f(n * size);
    for (int b = 0; b < size; b++)
        for (int64_t i = 0; i < n; i++) send[b * n + i] = (float)((r + 1) * (b + 1) + i % 13);
    float *own = inplace ? NULL : alloc_f(n);
    float *recv = inplace ? (send ? send + (int64_t)r * n : NULL) : own;
    for (int64_t i = 0; !inplace && i < n; i++) recv[i] = -1;
    sr_status st;
    RUN(st, async, sr_comm_reduce_scatter(c, send, recv, n, "test rs", req));
    int ok = st == SR_OK;
    float S = (float)(size * (size + 1) / 2);
    for (int64_t i = 0; ok && i < n; i++)
        ok = recv[i] == S * (float)(r + 1) + (float)(size * (i % 13));
    free(send);
    free(own);
    return ok;
}

static int t_allgather(sr_comm *c, int64_t n, int async, int inplace)
{
    int r = sr_comm_rank(c), size = sr_comm_size(c);
    float *recv = alloc_f(n * size);
    for (int64_t i = 0; i < n * size; i++) recv[i] = -1;
    float *own = inplace ? NULL : alloc_f(n);
    float *send = inplace ? (recv ? recv + (int64_t)r * n : NULL) : own;
    for (int64_t i = 0; i < n; i++) send[i] = (float)(r * 1000 + i % 997);
    sr_status st;
    RUN(st, async, sr_comm_allgather(c, send, recv, n, "test ag", req));
    int ok = st == SR_OK;
    for (int b = 0; b < size && ok; b++)
        for (int64_t i = 0; ok && i < n; i++) ok = recv[b * n + i] == (float)(b * 1000 + i % 997);
    free(recv);
    free(own);
    return ok;
}

static int t_broadcast(sr_comm *c, int64_t n, int async, int root)
{
    int r = sr_comm_rank(c);
    float *buf = alloc_f(n);
    for (int64_t i = 0; i < n; i++) buf[i] = r == root ? (float)(root * 7 + i % 89) : -1.0f;
    sr_status st;
    RUN(st, async, sr_comm_broadcast(c, buf, n, root, "test bcast", req));
    int ok = st == SR_OK;
    for (int64_t i = 0; ok && i < n; i++) ok = buf[i] == (float)(root * 7 + i % 89);
    free(buf);
    return ok;
}

/* ring: send to the right, receive from the left. Async: both posted, then
 * both waited. Blocking: even ranks send first (a group of 1 is skipped). */
static int t_ring(sr_comm *c, int64_t n, int async)
{
    int r = sr_comm_rank(c), size = sr_comm_size(c);
    int right = (r + 1) % size, left = (r - 1 + size) % size;
    float *out = alloc_f(n), *in = alloc_f(n);
    for (int64_t i = 0; i < n; i++) {
        out[i] = (float)(r * 1000 + i % 997);
        in[i] = -1;
    }
    sr_status st = SR_OK;
    if (async) {
        sr_req *rr = NULL, *rs = NULL;
        st = sr_comm_recv(c, in, n, left, 5, "ring in", &rr);
        if (st == SR_OK) st = sr_comm_send(c, out, n, right, 5, "ring out", &rs);
        sr_status s1 = finish(rs), s2 = finish(rr);
        if (st == SR_OK) st = s1 != SR_OK ? s1 : s2;
    } else if (size > 1) {
        if (r % 2 == 0) {
            st = sr_comm_send(c, out, n, right, 6, "ring out", NULL);
            if (st == SR_OK) st = sr_comm_recv(c, in, n, left, 6, "ring in", NULL);
        } else {
            st = sr_comm_recv(c, in, n, left, 6, "ring in", NULL);
            if (st == SR_OK) st = sr_comm_send(c, out, n, right, 6, "ring out", NULL);
        }
    } else {
        for (int64_t i = 0; i < n; i++) in[i] = out[i]; /* nothing to test */
    }
    int ok = st == SR_OK;
    for (int64_t i = 0; ok && i < n; i++) ok = in[i] == (float)(left * 1000 + i % 997);
    free(out);
    free(in);
    return ok;
}

/* ---- bf16 (sr_comm_*_t with SR_BF16): values held as their 16 bits ----- */

static uint16_t bf(float x) /* x must be a bf16 value: its upper half */
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}
static float bf_f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* small integers: every partial sum is a bf16 value, so exact in any order */
static int t_bf16(sr_comm *c, int64_t n, int async)
{
    int r = sr_comm_rank(c), size = sr_comm_size(c), ok = 1;
    float S = (float)(size * (size + 1) / 2);
    uint16_t *a = malloc((size_t)(n * size + 1) * 2), *b = malloc((size_t)(n * size + 1) * 2);
    sr_status st;
    for (int64_t i = 0; i < n; i++) a[i] = bf((float)((r + 1) * (i % 7 + 1)));
    RUN(st, async, sr_comm_allreduce_t(c, SR_BF16, a, n, "test bf16 allreduce", req));
    ok &= st == SR_OK;
    for (int64_t i = 0; ok && i < n; i++) ok = bf_f(a[i]) == S * (float)(i % 7 + 1);
    for (int inplace = 0; inplace < 2; inplace++) {
        for (int64_t i = 0; i < n * size; i++) a[i] = bf((float)((r + 1) * (i / (n ? n : 1) + 1) + i % 5));
        uint16_t *recv = inplace ? a + (int64_t)r * n : b;
        RUN(st, async, sr_comm_reduce_scatter_t(c, SR_BF16, a, recv, n, "test bf16 rs", req));
        ok &= st == SR_OK;
        for (int64_t i = 0; ok && i < n; i++)
            ok = bf_f(recv[i]) == S * (float)(r + 1) + (float)(size * ((r * n + i) % 5));
        for (int64_t i = 0; i < n * size; i++) b[i] = 0xffff;
        uint16_t *send = inplace ? b + (int64_t)r * n : a;
        for (int64_t i = 0; i < n; i++) send[i] = bf((float)(r * 64 + i % 61));
        RUN(st, async, sr_comm_allgather_t(c, SR_BF16, send, b, n, "test bf16 ag", req));
        ok &= st == SR_OK;
        for (int64_t i = 0; ok && i < n * size; i++) ok = bf_f(b[i]) == (float)((i / n) * 64 + (i % n) % 61);
    }
    /* a ring of bf16 sends and receives (a pipeline's boundaries), both posted, then waited */
    int right = (r + 1) % size, left = (r - 1 + size) % size;
    for (int64_t i = 0; i < n; i++) a[i] = bf((float)(r * 64 + i % 59)), b[i] = 0xffff;
    sr_req *rr = NULL, *rs = NULL;
    st = sr_comm_recv_t(c, SR_BF16, b, n, left, 9, "bf16 ring in", &rr);
    if (st == SR_OK) st = sr_comm_send_t(c, SR_BF16, a, n, right, 9, "bf16 ring out", &rs);
    sr_status s1 = finish(rs), s2 = finish(rr);
    ok &= st == SR_OK && s1 == SR_OK && s2 == SR_OK;
    for (int64_t i = 0; ok && i < n; i++) ok = bf_f(b[i]) == (float)(left * 64 + i % 59);
    free(a);
    free(b);
    return ok;
}

/* on a group of two, the sum of a pair is rounded once: to nearest bf16, ties to even */
static void bf16_rounding_checks(sr_comm *c, const char *shape)
{
    if (sr_comm_size(c) != 2) return;
    const float u = 1.0f / 128; /* one unit in the last place of bf16 at 1 */
    /* rank 0's terms, rank 1's terms, and the sums */
    const float x0[] = {1, 1 + u, 1, 1, -3}, x1[] = {u / 2, u / 2, 0.75f * u, 0.25f * u, -u};
    const float want[] = {1, 1 + 2 * u, 1 + u, 1, -3};
    enum { K = 5 };
    uint16_t v[K];
    for (int k = 0; k < K; k++) v[k] = bf(sr_comm_rank(c) ? x1[k] : x0[k]);
    sr_status st = sr_comm_allreduce_t(c, SR_BF16, v, K, "rounding", NULL);
    int ok = st == SR_OK;
    for (int k = 0; ok && k < K; k++) ok = v[k] == bf(want[k]);
    CHECK(ok, "%s: %s group (2): bf16 all-reduce rounds a pair's sum once, to nearest, ties to even "
              "(1 + u/2 -> 1, 1+u + u/2 -> 1+2u, 1 + 3u/4 -> 1+u, 1 + u/4 -> 1, -3 - u -> -3)", shape,
          sr_comm_name(c));
}

static const int64_t SIZES[] = {0, 1, 7, 1000, 4099};
static const int64_t SMALL_SIZES[] = {0, 1, 3, 5, 6, 23};

/* every op on c, blocking and async, over the sizes; one check per op/mode */
static void ops_suite(sr_comm *c, const char *shape, const int64_t *sizes, int nsizes)
{
    char sz[128] = "";
    for (int k = 0; k < nsizes; k++)
        snprintf(sz + strlen(sz), sizeof sz - strlen(sz), "%s%lld", k ? "," : "", (long long)sizes[k]);
    for (int async = 0; async < 2; async++) {
        const char *mode = async ? "async" : "blocking";
        const char *g = sr_comm_name(c);
        int size = sr_comm_size(c);
        int ok = 1;
        for (int k = 0; k < nsizes; k++) ok &= t_allreduce(c, sizes[k], async);
        CHECK(ok, "%s: %s group (%d): all-reduce %s, n = %s: exact sums", shape, g, size, mode, sz);
        ok = 1;
        for (int k = 0; k < nsizes; k++) ok &= t_reduce_scatter(c, sizes[k], async, 0);
        CHECK(ok, "%s: %s group (%d): reduce-scatter %s, n = %s: exact blocks", shape, g, size, mode, sz);
        ok = 1;
        for (int k = 0; k < nsizes; k++) ok &= t_reduce_scatter(c, sizes[k], async, 1);
        CHECK(ok, "%s: %s group (%d): reduce-scatter in place %s, n = %s", shape, g, size, mode, sz);
        ok = 1;
        for (int k = 0; k < nsizes; k++) ok &= t_allgather(c, sizes[k], async, 0);
        CHECK(ok, "%s: %s group (%d): all-gather %s, n = %s: rank order", shape, g, size, mode, sz);
        ok = 1;
        for (int k = 0; k < nsizes; k++) ok &= t_allgather(c, sizes[k], async, 1);
        CHECK(ok, "%s: %s group (%d): all-gather in place %s, n = %s", shape, g, size, mode, sz);
        ok = 1;
        for (int k = 0; k < nsizes; k++) {
            ok &= t_broadcast(c, sizes[k], async, 0);
            ok &= t_broadcast(c, sizes[k], async, size - 1);
        }
        CHECK(ok, "%s: %s group (%d): broadcast %s from roots 0 and %d, n = %s", shape, g, size,
              mode, size - 1, sz);
        ok = 1;
        for (int k = 0; k < nsizes; k++) ok &= t_ring(c, sizes[k], async);
        CHECK(ok, "%s: %s group (%d): send/recv ring %s, n = %s", shape, g, size, mode, sz);
        ok = 1;
        for (int k = 0; k < nsizes; k++) ok &= t_bf16(c, sizes[k], async);
        CHECK(ok, "%s: %s group (%d): bf16 all-reduce, reduce-scatter and all-gather (also in place), "
                  "send/recv ring %s, n = %s: exact", shape, g, size, mode, sz);
    }
}

/* ------------------------------------------------------------------------ */
/* grid                                                                       */

static void grid_checks(const sr_grid *g, const char *shape)
{
    int ok = g->rank == me && g->world == nworld && g->dp_rank >= 0 && g->dp_rank < g->dp &&
             g->tp_rank >= 0 && g->tp_rank < g->tp && g->pp_rank >= 0 && g->pp_rank < g->pp &&
             me == (g->pp_rank * g->dp + g->dp_rank) * g->tp + g->tp_rank;
    CHECK(ok, "%s: rank %d = (pp %d * dp %d + dp %d) * tp %d + tp %d", shape, me, g->pp_rank,
          g->dp, g->dp_rank, g->tp, g->tp_rank);
    CHECK(g->local_rank == me, "%s: local rank %d (one node: equals the world rank)", shape,
          g->local_rank);
    CHECK(sr_comm_size(g->world_comm) == nworld && sr_comm_rank(g->world_comm) == me &&
              sr_comm_size(g->dp_comm) == g->dp && sr_comm_rank(g->dp_comm) == g->dp_rank &&
              sr_comm_size(g->tp_comm) == g->tp && sr_comm_rank(g->tp_comm) == g->tp_rank &&
              sr_comm_size(g->pp_comm) == g->pp && sr_comm_rank(g->pp_comm) == g->pp_rank,
          "%s: axis communicators have sizes %d/%d/%d/%d and ranks = coordinates", shape, nworld,
          g->dp, g->tp, g->pp);
    CHECK(!strcmp(sr_comm_name(g->world_comm), "world") && !strcmp(sr_comm_name(g->dp_comm), "data") &&
              !strcmp(sr_comm_name(g->tp_comm), "tensor") &&
              !strcmp(sr_comm_name(g->pp_comm), "pipeline"),
          "%s: names world, data, tensor, pipeline", shape);

    /* members in group-rank order: all-gather the world ranks */
    sr_comm *axes[4] = {g->world_comm, g->dp_comm, g->tp_comm, g->pp_comm};
    for (int a = 0; a < 4; a++) {
        sr_comm *c = axes[a];
        int size = sr_comm_size(c);
        float mine = (float)me, *all = calloc((size_t)size, sizeof(float));
        sr_status st = sr_comm_allgather(c, &mine, all, 1, "members", NULL);
        int ok2 = st == SR_OK;
        char list[128] = "";
        for (int i = 0; i < size; i++) {
            int want = a == 0   ? i
                       : a == 1 ? (g->pp_rank * g->dp + i) * g->tp + g->tp_rank
                       : a == 2 ? (g->pp_rank * g->dp + g->dp_rank) * g->tp + i
                                : (i * g->dp + g->dp_rank) * g->tp + g->tp_rank;
            ok2 = ok2 && all[i] == (float)want;
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d", i ? "," : "", want);
        }
        CHECK(ok2, "%s: %s group members in order (rank 0's group: %s on rank %d)", shape,
              sr_comm_name(c), list, me);
        free(all);
    }
}

/* several ops in flight at once on two communicators, completed out of order */
static void overlap_checks(const sr_grid *g, const char *shape)
{
    sr_comm *d = g->dp_comm, *w = g->world_comm;
    int dr = sr_comm_rank(d), ds = sr_comm_size(d);
    enum { N = 513 };
    float *a = malloc(N * sizeof(float)), *rs_in = malloc((size_t)N * ds * sizeof(float));
    float *rs_out = malloc(N * sizeof(float)), *ag = malloc((size_t)N * ds * sizeof(float));
    float *agsrc = malloc(N * sizeof(float));
    float *bc = malloc(N * sizeof(float)), *out = malloc(N * sizeof(float)), *in = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) {
        a[i] = (float)(dr + 1);
        agsrc[i] = (float)(dr * 1000 + i);
        for (int b = 0; b < ds; b++) rs_in[b * N + i] = (float)(b + i);
        bc[i] = dr == 0 ? (float)i : -1.0f;
        out[i] = (float)me;
        in[i] = -1;
    }
    sr_req *q[6] = {0};
    sr_status st = SR_OK;
    int right = (me + 1) % nworld, left = (me - 1 + nworld) % nworld;
    if (st == SR_OK) st = sr_comm_recv(w, in, N, left, 9, "ring in", &q[0]);
    if (st == SR_OK) st = sr_comm_allreduce(d, a, N, "a", &q[1]);
    if (st == SR_OK) st = sr_comm_reduce_scatter(d, rs_in, rs_out, N, "rs", &q[2]);
    if (st == SR_OK) st = sr_comm_allgather(d, agsrc, ag, N, "ag", &q[3]);
    if (st == SR_OK) st = sr_comm_broadcast(d, bc, N, 0, "bc", &q[4]);
    if (st == SR_OK) st = sr_comm_send(w, out, N, right, 9, "ring out", &q[5]);
    double t0 = now();
    int all = 0;
    while (st == SR_OK && !all && now() - t0 < 20) {
        all = 1;
        for (int k = 0; k < 6; k++) all &= sr_comm_test(q[k]);
    }
    for (int k = 5; k >= 0; k--) {
        sr_status s = sr_comm_wait(q[k]);
        if (st == SR_OK) st = s;
    }
    int ok = st == SR_OK && all;
    float S = (float)(ds * (ds + 1) / 2);
    for (int i = 0; ok && i < N; i++)
        ok = a[i] == S && rs_out[i] == (float)(ds * (dr + i)) && bc[i] == (float)i &&
             in[i] == (float)left;
    for (int b = 0; ok && b < ds; b++)
        for (int i = 0; ok && i < N; i++) ok = ag[b * N + i] == (float)(b * 1000 + i);
    free(agsrc);
    free(a), free(rs_in), free(rs_out), free(ag), free(bc), free(out), free(in);
    CHECK(ok, "%s: 6 async ops in flight on the data and world groups, tested then waited in "
              "reverse order", shape);
}

static void stats_checks(const sr_grid *g)
{
    sr_comm *c = g->world_comm;
    int r = sr_comm_rank(c), size = sr_comm_size(c);
    sr_comm_reset_stats(c);
    sr_comm_reset_stats(g->dp_comm);
    const sr_comm_stats *s = sr_comm_get_stats(c);
    int zero = 1;
    for (int k = 0; k < 6; k++) zero &= s->calls[k] == 0 && s->bytes[k] == 0;
    CHECK(zero, "stats: zero after sr_comm_reset_stats");

    float buf[64] = {0}, big[256] = {0};
    sr_status st = sr_comm_allreduce(c, buf, 6, "s", NULL);
    if (st == SR_OK) st = sr_comm_allreduce_t(c, SR_BF16, buf, 8, "s", NULL); /* 2 bytes an element */
    if (st == SR_OK) st = sr_comm_reduce_scatter(c, big, buf, 3, "s", NULL);
    if (st == SR_OK) st = sr_comm_allgather(c, buf, big, 5, "s", NULL);
    if (st == SR_OK) st = sr_comm_broadcast(c, buf, 6, 0, "s", NULL);
    sr_req *q1 = NULL, *q2 = NULL;
    if (st == SR_OK) st = sr_comm_recv(c, big, 7, (r - 1 + size) % size, 3, "s", &q1);
    if (st == SR_OK) st = sr_comm_send(c, buf, 7, (r + 1) % size, 3, "s", &q2);
    sr_status s1 = sr_comm_wait(q2), s2 = sr_comm_wait(q1);
    if (st == SR_OK) st = s1 != SR_OK ? s1 : s2;
    sr_req *q3 = NULL;
    if (st == SR_OK) st = sr_comm_allreduce(c, buf, 0, "s", &q3); /* zero-length, async */
    if (st == SR_OK) st = sr_comm_wait(q3);
    double x = 1;
    if (st == SR_OK) st = sr_comm_allreduce_double(c, &x, 1); /* not counted */
    if (st == SR_OK) st = sr_comm_barrier(c);                  /* not counted */
    CHECK(st == SR_OK, "stats: the counted ops succeed");
    int64_t want_calls[6] = {3, 1, 1, 1, 1, 1}; /* all-reduce: 6 floats, 8 bf16, 0 */
    int64_t want_bytes[6] = {40, 3 * 4 * (int64_t)size, 20, r == 0 ? 24 : 0, 28, 28};
    int ok = 1;
    for (int k = 0; k < 6; k++) ok &= s->calls[k] == want_calls[k] && s->bytes[k] == want_bytes[k];
    CHECK(ok, "stats: calls {3,1,1,1,1,1}, bytes {40 (24 + 8 bf16 at 2), %d, 20, %d, 28, 28} on world rank %d (got "
              "calls %lld,%lld,%lld,%lld,%lld,%lld bytes %lld,%lld,%lld,%lld,%lld,%lld)",
          3 * 4 * size, r == 0 ? 24 : 0, r, (long long)s->calls[0], (long long)s->calls[1],
          (long long)s->calls[2], (long long)s->calls[3], (long long)s->calls[4],
          (long long)s->calls[5], (long long)s->bytes[0], (long long)s->bytes[1],
          (long long)s->bytes[2], (long long)s->bytes[3], (long long)s->bytes[4],
          (long long)s->bytes[5]);
    sr_comm_stats other = *sr_comm_get_stats(g->dp_comm);
    int dp_zero = 1;
    for (int k = 0; k < 6; k++) dp_zero &= other.calls[k] == 0;
    CHECK(dp_zero, "stats: counted per communicator (the data group saw none of them)");
    x = me + 0.5;
    double y[2] = {me + 0.5, 0.25 * me};
    st = sr_comm_allreduce_double(g->world_comm, y, 2);
    double want0 = nworld * (nworld - 1) / 2.0 + 0.5 * nworld, want1 = 0.25 * nworld * (nworld - 1) / 2.0;
    CHECK(st == SR_OK && y[0] == want0 && y[1] == want1,
          "sr_comm_allreduce_double over the world: %g, %g", y[0], y[1]);
}

static void arg_checks(const sr_grid *g)
{
    sr_comm *c = g->world_comm;
    float buf[8] = {0}, big[64] = {0};
    sr_req *q = (sr_req *)&buf; /* must come back NULL */
    sr_status st = sr_comm_allreduce(c, buf, -1, "neg", &q);
    CHECK(st == SR_ERR_ARG && q == NULL && strstr(sr_errmsg(), "negative element count -1") &&
              strstr(sr_errmsg(), "'neg'"),
          "negative size: SR_ERR_ARG, req NULL (%s)", sr_errmsg());
    st = sr_comm_allreduce(c, NULL, 3, "null", NULL);
    CHECK(st == SR_ERR_ARG && strstr(sr_errmsg(), "NULL buffer"), "NULL buffer: SR_ERR_ARG (%s)",
          sr_errmsg());
    st = sr_comm_broadcast(c, buf, 2, nworld, "root", NULL);
    CHECK(st == SR_ERR_ARG && strstr(sr_errmsg(), "root"), "root out of range: SR_ERR_ARG (%s)",
          sr_errmsg());
    st = sr_comm_send(c, buf, 2, -2, 0, "peer", NULL);
    CHECK(st == SR_ERR_ARG && strstr(sr_errmsg(), "peer -2"), "peer out of range: SR_ERR_ARG (%s)",
          sr_errmsg());
    st = sr_comm_recv(c, buf, 2, 0, -1, "tag", NULL);
    CHECK(st == SR_ERR_ARG && strstr(sr_errmsg(), "tag -1"), "negative tag: SR_ERR_ARG (%s)",
          sr_errmsg());
    st = sr_comm_allgather(c, big + 1, big, 4, "overlap", NULL);
    CHECK(st == SR_ERR_ARG && strstr(sr_errmsg(), "overlaps"),
          "all-gather with overlapping buffers (not in place): SR_ERR_ARG (%s)", sr_errmsg());
    st = sr_comm_reduce_scatter(c, big, big + 1, 4, "overlap", NULL);
    CHECK(st == SR_ERR_ARG && strstr(sr_errmsg(), "overlaps"),
          "reduce-scatter with overlapping buffers (not in place): SR_ERR_ARG (%s)", sr_errmsg());
    st = sr_comm_allreduce(NULL, buf, 1, "x", NULL);
    CHECK(st == SR_ERR_ARG, "NULL communicator: SR_ERR_ARG (%s)", sr_errmsg());
    st = sr_comm_allreduce_t(c, (sr_dtype)7, buf, 2, "type", NULL);
    CHECK(st == SR_ERR_ARG && strstr(sr_errmsg(), "unknown element type 7"),
          "an unknown element type: SR_ERR_ARG (%s)", sr_errmsg());
    /* in bf16 units the blocks start at even elements: one element in is no rank's */
    st = sr_comm_allgather_t(c, SR_BF16, (uint16_t *)big + 1, big, 2, "overlap", NULL);
    CHECK(st == SR_ERR_ARG && strstr(sr_errmsg(), "overlaps"),
          "bf16 all-gather whose send overlaps the receive buffer off every rank's block: SR_ERR_ARG (%s)",
          sr_errmsg());
    CHECK(sr_comm_wait(NULL) == SR_OK && sr_comm_test(NULL) == 1,
          "sr_comm_wait(NULL) is SR_OK, sr_comm_test(NULL) is 1");
    /* the world still works after the refused calls (nothing half-launched) */
    CHECK(t_allreduce(c, 5, 0), "world all-reduce after the refused calls");
}

static void mismatch_checks(void)
{
    sr_grid g;
    sr_status st = sr_grid_init(&g, nworld + 1, 1, 1, SR_COMM_MPI, 5);
    char want[128];
    snprintf(want, sizeof want, "dp*tp*pp = %d*1*1 = %d but the world has %d ranks", nworld + 1,
             nworld + 1, nworld);
    CHECK(st == SR_ERR_ARG && strstr(sr_errmsg(), want), "dp=%d on %d ranks: SR_ERR_ARG on every "
          "rank: %s", nworld + 1, nworld, sr_errmsg());
    st = sr_grid_init(&g, 1, 2, nworld, SR_COMM_MPI, 5);
    snprintf(want, sizeof want, "1*2*%d = %d", nworld, 2 * nworld);
    CHECK(st == SR_ERR_ARG && strstr(sr_errmsg(), want), "tp=2 pp=%d on %d ranks: SR_ERR_ARG: %s",
          nworld, nworld, sr_errmsg());
    st = sr_grid_init(&g, 0, 1, nworld, SR_COMM_MPI, 5);
    CHECK(st == SR_ERR_ARG && strstr(sr_errmsg(), "dp=0"), "dp=0: SR_ERR_ARG: %s", sr_errmsg());
    st = sr_grid_init(&g, nworld, 1, 1, SR_COMM_MPI, 0);
    CHECK(st == SR_ERR_ARG && strstr(sr_errmsg(), "timeout"), "timeout 0: SR_ERR_ARG: %s",
          sr_errmsg());
    st = sr_grid_init(&g, nworld, 1, 1, (sr_comm_backend)7, 5);
    CHECK(st == SR_ERR_ARG, "unknown backend: SR_ERR_ARG: %s", sr_errmsg());
    sr_grid_free(&g); /* zeroed by the failed init: a no-op */
    CHECK(g.world_comm == NULL, "sr_grid_free after a failed init is harmless");

    st = sr_grid_init(&g, nworld, 1, 1, SR_COMM_NCCL, 5);
#ifdef SR_HAVE_NCCL
    /* built with NCCL: a GPU machine sets it up, this one has none; either
     * way every rank must get the same answer (no hang, no crash) */
    int s_min = (int)st, s_max = (int)st;
    MPI_Allreduce(MPI_IN_PLACE, &s_min, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &s_max, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    CHECK(s_min == s_max && (st == SR_OK || st == SR_ERR_COMM),
          "NCCL backend (compiled in): the same status on every rank: %s%s%s", sr_status_str(st),
          st == SR_OK ? "" : ": ", st == SR_OK ? "" : sr_errmsg());
    if (st == SR_OK) sr_grid_free(&g);
#else
    CHECK(st == SR_ERR_ARG && strstr(sr_errmsg(), "built without NCCL"),
          "NCCL backend (not compiled in): SR_ERR_ARG: %s", sr_errmsg());
#endif
}

/* ------------------------------------------------------------------------ */

static int run_normal(void)
{
    CHECK(sr_comm_init(NULL, NULL) == SR_OK, "sr_comm_init again: SR_OK (already initialized)");
    CHECK(sr_comm_world_rank() == me && sr_comm_world_size() == nworld,
          "sr_comm_world_rank/size = %d/%d", me, nworld);

    int shapes[16][3], ns = 0;
    for (int dp = 1; dp <= nworld; dp++)
        for (int tp = 1; tp <= nworld; tp++)
            for (int pp = 1; pp <= nworld; pp++)
                if (dp * tp * pp == nworld && ns < 16) {
                    shapes[ns][0] = dp, shapes[ns][1] = tp, shapes[ns][2] = pp;
                    ns++;
                }
    for (int k = 0; k < ns; k++) {
        char shape[64];
        snprintf(shape, sizeof shape, "dp=%d tp=%d pp=%d", shapes[k][0], shapes[k][1], shapes[k][2]);
        sr_grid g;
        sr_status st = sr_grid_init(&g, shapes[k][0], shapes[k][1], shapes[k][2], SR_COMM_MPI, 60);
        CHECK(st == SR_OK, "%s: sr_grid_init", shape);
        if (st != SR_OK) continue;
        grid_checks(&g, shape);
        sr_comm *axes[4] = {g.world_comm, g.dp_comm, g.tp_comm, g.pp_comm};
        for (int a = 0; a < 4; a++) {
            ops_suite(axes[a], shape, SIZES, 5);
            bf16_rounding_checks(axes[a], shape);
        }
        overlap_checks(&g, shape);
        if (k == 0) {
            stats_checks(&g);
            arg_checks(&g);
            CHECK(sr_comm_barrier(g.world_comm) == SR_OK, "%s: barrier", shape);
            /* a recv that gets fewer floats than it asked for is an error */
            if (nworld >= 2) {
                float buf[16] = {0};
                if (me == 0) st = sr_comm_send(g.world_comm, buf, 6, 1, 4, "short", NULL);
                else if (me == 1) st = sr_comm_recv(g.world_comm, buf, 11, 0, 4, "short", NULL);
                else st = SR_ERR_COMM;
                int ok = me == 0 ? st == SR_OK
                                 : st == SR_ERR_COMM && (me > 1 || strstr(sr_errmsg(), "received 6 floats but expected 11"));
                CHECK(ok, "%s: recv of 11 floats matched by a send of 6: SR_ERR_COMM on the receiver",
                      shape);
            }
            CHECK(t_allreduce(g.world_comm, 9, 0), "%s: the world group still works after that", shape);
        }
        sr_grid_free(&g);
        CHECK(g.world_comm == NULL && g.dp_comm == NULL, "%s: sr_grid_free zeroes the grid", shape);
    }

    /* chunked paths: at most 5 elements per MPI call */
    setenv("SR_COMM_MAX_CHUNK", "5", 1);
    for (int k = 0; k < ns; k++) {
        if (!(k == 0 || (shapes[k][0] > 1 && shapes[k][1] > 1) || k == ns - 1)) continue;
        char shape[80];
        snprintf(shape, sizeof shape, "chunks of 5: dp=%d tp=%d pp=%d", shapes[k][0], shapes[k][1],
                 shapes[k][2]);
        sr_grid g;
        sr_status st = sr_grid_init(&g, shapes[k][0], shapes[k][1], shapes[k][2], SR_COMM_MPI, 60);
        CHECK(st == SR_OK, "%s: sr_grid_init", shape);
        if (st != SR_OK) continue;
        sr_comm *axes[4] = {g.world_comm, g.dp_comm, g.tp_comm, g.pp_comm};
        for (int a = 0; a < 4; a++)
            if (a == 0 || sr_comm_size(axes[a]) > 1) ops_suite(axes[a], shape, SMALL_SIZES, 6);
        overlap_checks(&g, shape);
        sr_grid_free(&g);
    }
    unsetenv("SR_COMM_MAX_CHUNK");

    mismatch_checks();
    return 0;
}

/* rank 1 skips a collective; the others must time out */
static int run_timeout(void)
{
    sr_grid g;
    sr_status st = sr_grid_init(&g, nworld, 1, 1, SR_COMM_MPI, 1.0);
    LCHECK(st == SR_OK, "grid dp=%d, timeout 1 s", nworld);
    if (st != SR_OK) return 1;
    sr_comm_set_step(g.dp_comm, 12);
    sr_comm_set_step(g.world_comm, 13);
    float buf[1024];
    for (int i = 0; i < 1024; i++) buf[i] = 1;
    LCHECK(sr_comm_barrier(g.world_comm) == SR_OK, "barrier before the test");

    if (me == 1) {
        printf("rank 1: skipping the all-reduce 'grad bucket 3' and the all-gather 'params'\n");
        fflush(stdout);
    } else {
        /* blocking form */
        double t0 = now();
        st = sr_comm_allreduce(g.dp_comm, buf, 1024, "grad bucket 3", NULL);
        double dt = now() - t0;
        char want[160];
        snprintf(want, sizeof want,
                 "rank %d: all-reduce 'grad bucket 3' on the data group (%d ranks) did not "
                 "complete within 1 s at step 12: another rank may have died or hung",
                 me, nworld);
        printf("rank %d: got %s after %.2f s: %s\n", me, sr_status_str(st), dt, sr_errmsg());
        LCHECK(st == SR_ERR_COMM, "blocking all-reduce with rank 1 absent: SR_ERR_COMM");
        LCHECK(dt >= 0.95 && dt < 5, "... after the 1 s timeout (%.2f s)", dt);
        LCHECK(strstr(sr_errmsg(), want) != NULL, "... message: \"%s\"", want);
        t0 = now();
        st = sr_comm_allreduce(g.dp_comm, buf, 4, "next", NULL);
        LCHECK(st == SR_ERR_COMM && strstr(sr_errmsg(), "unusable") && now() - t0 < 0.5,
               "the data group then refuses at once: %s", sr_errmsg());

        /* async form, on the world group */
        sr_req *q = NULL;
        float *all = calloc((size_t)nworld * 16, sizeof(float));
        st = sr_comm_allgather(g.world_comm, buf, all, 16, "params", &q);
        LCHECK(st == SR_OK && q, "async all-gather launched");
        t0 = now();
        int early = 0;
        while (now() - t0 < 0.2) early |= sr_comm_test(q);
        LCHECK(!early, "sr_comm_test says not complete while rank 1 is absent");
        st = sr_comm_wait(q);
        dt = now() - t0;
        LCHECK(st == SR_ERR_COMM && strstr(sr_errmsg(), "all-gather 'params' on the world group") &&
                   strstr(sr_errmsg(), "did not complete within 1 s at step 13"),
               "async all-gather wait: SR_ERR_COMM after %.2f s: %s", dt, sr_errmsg());
        free(all);
    }
    /* the harness's own channel: MPI_COMM_WORLD, untouched by the layer */
    int counts[2] = {n_pass, n_fail}, tot[2] = {0, 0};
    MPI_Reduce(counts, tot, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (me == 0) {
        printf("%d passed, %d failed\n", tot[0], tot[1]);
        fflush(stdout);
    }
    MPI_Bcast(tot, 2, MPI_INT, 0, MPI_COMM_WORLD);
    /* what a program does after a communication error (runtime/train.c):
     * free the grid (must not hang on the broken groups), abort every rank */
    sr_grid_free(&g);
    sr_comm_abort(tot[1] ? 1 : 3);
    return 1; /* not reached */
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    sr_status st = sr_comm_init(&argc, &argv);
    if (st != SR_OK) {
        fprintf(stderr, "test_comm: %s\n", sr_errmsg());
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &nworld);
    if (argc > 1 && !strcmp(argv[1], "--timeout")) {
        if (nworld < 2) {
            fprintf(stderr, "test_comm --timeout needs at least 2 ranks\n");
            sr_comm_abort(1);
        }
        return run_timeout();
    }
    run_normal();
    int counts[2] = {n_pass, n_fail};
    MPI_Bcast(counts, 2, MPI_INT, 0, MPI_COMM_WORLD);
    if (me == 0) printf("%d passed, %d failed\n", counts[0], counts[1]);
    fflush(stdout);
    sr_comm_finalize();
    sr_comm_finalize(); /* safe when already finalized */
    if (sr_comm_init(NULL, NULL) != SR_ERR_STATE) {
        fprintf(stderr, "rank %d: FAIL - sr_comm_init after finalize should be SR_ERR_STATE\n", me);
        return 1;
    }
    return counts[1] ? 1 : 0;
}
