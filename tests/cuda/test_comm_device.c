/* test_comm_device.c: the communication layer on device memory, the path a
 * CUDA program's --comm mpi takes (runtime/comm_device.c), under mpirun on
 * the CPU emulator of the CUDA backend (device memory is the backend's
 * arena; the staging copies are its calls, counted here).
 *
 *   test_comm_device            every grid shape of the world; every op on
 *                               device buffers blocking, async + sr_comm_wait
 *                               and async + sr_comm_wait_device, odd sizes,
 *                               zero length, in place, chunked MPI calls; the
 *                               staging copies (one to the host, one back per
 *                               op that moves data) and the pool (page-locked
 *                               buffers reused, not reallocated); host buffers
 *                               on the same grid (not staged); mixed buffers;
 *                               a short recv; groups (send/recv pairs, misuse);
 *                               the pipeline's channels (NCCL: four, which let
 *                               every rank send first); the emulated
 *                               ncclCommSplit itself (in progress, not
 *                               blocked, while a peer has not split);
 *                               async calls' deferred starts, in order
 *                               (EMU_EVENT_LAG=N: rank 0's copies report
 *                               "not ready" N times, the other ranks' not)
 *   test_comm_device --timeout  rank 1 skips an all-reduce on device memory:
 *                               the others get SR_ERR_COMM after the 1 s
 *                               timeout, blocking and through
 *                               sr_comm_wait_device (NCCL: also a send on a
 *                               pipeline channel no one receives); every
 *                               rank then sr_comm_abort(3)
 *   test_comm_device --race --nccl  rank 0 copies into an all-reduce in
 *                               flight: the emulator's race check reports it
 *                               and rank 0's sync fails; sr_comm_abort(3)
 *
 * Checks are collective as in tests/unit/test_comm.c: rank 0 prints one line
 * per check and ends with "N passed, M failed".
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "emu/c/nccl.h" /* the emulator's NCCL: split_checks calls it directly */
#include "sr_comm.h"
#include "sr_cuda.h"

static int me, nworld;
static int n_pass, n_fail;
static const sr_backend *be = &sr_backend_cuda;

static void check_(int ok, int line, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int bad = !ok, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (!ok) printf("rank %d: FAIL - %s (test_comm_device.c:%d; last error: %s)\n", me, msg, line, sr_errmsg());
    if (me == 0) printf("%s - %s\n", any ? "FAIL" : "ok  ", msg);
    fflush(stdout);
    if (any) n_fail++;
    else n_pass++;
}
#define CHECK(cond, ...) check_((cond) != 0, __LINE__, __VA_ARGS__)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the backend's device calls, counted ---------------------------------- */
static const sr_comm_device *real;
static long n_to_host, n_to_device, n_pinned, n_async, n_not_ready;
static int lagged; /* EMU_EVENT_LAG was set: kept on rank 0 only (main) */
static void *c_stream(void) { return real->stream(); }
static int c_on_device(const void *p) { return real->on_device(p); }
static void *c_host_alloc(size_t b)
{
    n_pinned++;
    return real->host_alloc(b);
}
static void c_host_free(void *p) { real->host_free(p); }
static sr_status c_to_host(void *d, const void *s, size_t b)
{
    n_to_host++;
    return real->to_host(d, s, b);
}
static sr_status c_to_device(void *d, const void *s, size_t b)
{
    n_to_device++;
    return real->to_device(d, s, b);
}
static sr_status c_to_host_async(void *d, const void *s, size_t b, void **token)
{
    n_to_host++;
    n_async++;
    return real->to_host_async(d, s, b, token);
}
static int c_copy_done(void *token)
{
    int done = real->copy_done(token);
    if (done == 0) n_not_ready++;
    return done;
}
static sr_status c_copy_wait(void *token) { return real->copy_wait(token); }
/* the backend's device with counted calls; .nccl set in main */
static sr_comm_device counted = {c_stream,        c_on_device, c_host_alloc, c_host_free, c_to_host,
                                 c_to_device,     c_to_host_async, c_copy_done, c_copy_wait, NULL};
/* SR_COMM_MPI (staging), or with --nccl the emulator's NCCL (comm_nccl.c over nccl_emu.cpp) */
static sr_comm_backend backend = SR_COMM_MPI;
static const char *bname = "MPI";

/* ---- device buffers --------------------------------------------------------- */
typedef struct dbuf {
    float *d, *h; /* device memory and its host image */
    int64_t n;
} dbuf;

static dbuf dnew(int64_t n)
{
    dbuf b = {be->alloc(sizeof(float) * (size_t)(n > 0 ? n : 1)), calloc((size_t)(n > 0 ? n : 1), sizeof(float)), n};
    return b;
}
static void dput(dbuf *b) { be->h2d(b->d, b->h, sizeof(float) * (size_t)b->n); }
static void dget(dbuf *b) { be->d2h(b->h, b->d, sizeof(float) * (size_t)b->n); }
static void dfree(dbuf *b)
{
    be->free(b->d);
    free(b->h);
}

/* mode 0 blocking, 1 async + sr_comm_wait, 2 async + sr_comm_wait_device */
#define RUN(st, mode, call)                                                            \
    do {                                                                               \
        sr_req *rq_ = NULL;                                                            \
        sr_req **req = (mode) ? &rq_ : NULL;                                           \
        (st) = (call);                                                                 \
        if ((st) == SR_OK && (mode) == 1) (st) = sr_comm_wait(rq_);                    \
        if ((st) == SR_OK && (mode) == 2) (st) = sr_comm_wait_device(rq_);             \
    } while (0)

static int t_allreduce(sr_comm *c, int64_t n, int mode)
{
    int r = sr_comm_rank(c), size = sr_comm_size(c);
    dbuf b = dnew(n);
    for (int64_t i = 0; i < n; i++) b.h[i] = (float)((r + 1) * (i % 101 + 1));
    dput(&b);
    sr_status st;
    RUN(st, mode, sr_comm_allreduce(c, n ? b.d : NULL, n, "ar", req));
    dget(&b);
    int ok = st == SR_OK;
    float S = (float)(size * (size + 1) / 2);
    for (int64_t i = 0; ok && i < n; i++) ok = b.h[i] == S * (float)(i % 101 + 1);
    dfree(&b);
    return ok;
}

static int t_reduce_scatter(sr_comm *c, int64_t n, int mode, int inplace)
{
    int r = sr_comm_rank(c), size = sr_comm_size(c);
    dbuf s = dnew(n * size), o = dnew(n);
    for (int b = 0; b < size; b++)
        for (int64_t i = 0; i < n; i++) s.h[b * n + i] = (float)((r + 1) * (b + 1) + i % 13);
    dput(&s);
    float *recv = inplace ? s.d + (int64_t)r * n : o.d;
    sr_status st;
    RUN(st, mode, sr_comm_reduce_scatter(c, s.d, recv, n, "rs", req));
    dget(&s);
    dget(&o);
    const float *got = inplace ? s.h + (int64_t)r * n : o.h;
    int ok = st == SR_OK;
    float S = (float)(size * (size + 1) / 2);
    for (int64_t i = 0; ok && i < n; i++) ok = got[i] == S * (float)(r + 1) + (float)(size * (i % 13));
    dfree(&s);
    dfree(&o);
    return ok;
}

static int t_allgather(sr_comm *c, int64_t n, int mode, int inplace)
{
    int r = sr_comm_rank(c), size = sr_comm_size(c);
    dbuf all = dnew(n * size), own = dnew(n);
    for (int64_t i = 0; i < n * size; i++) all.h[i] = -1;
    float *mine = inplace ? all.h + (int64_t)r * n : own.h;
    for (int64_t i = 0; i < n; i++) mine[i] = (float)(r * 1000 + i % 997);
    dput(&all);
    dput(&own);
    sr_status st;
    RUN(st, mode, sr_comm_allgather(c, inplace ? all.d + (int64_t)r * n : own.d, all.d, n, "ag", req));
    dget(&all);
    int ok = st == SR_OK;
    for (int b = 0; b < size && ok; b++)
        for (int64_t i = 0; ok && i < n; i++) ok = all.h[b * n + i] == (float)(b * 1000 + i % 997);
    dfree(&all);
    dfree(&own);
    return ok;
}

static int t_broadcast(sr_comm *c, int64_t n, int mode, int root)
{
    int r = sr_comm_rank(c);
    dbuf b = dnew(n);
    for (int64_t i = 0; i < n; i++) b.h[i] = r == root ? (float)(root * 7 + i % 89) : -1.0f;
    dput(&b);
    sr_status st;
    RUN(st, mode, sr_comm_broadcast(c, b.d, n, root, "bc", req));
    dget(&b);
    int ok = st == SR_OK;
    for (int64_t i = 0; ok && i < n; i++) ok = b.h[i] == (float)(root * 7 + i % 89);
    dfree(&b);
    return ok;
}

/* send right, receive from the left: both posted (in a group when asked),
 * then both waited; blocking: even ranks send first */
static int t_ring(sr_comm *c, int64_t n, int mode, int grouped)
{
    int r = sr_comm_rank(c), size = sr_comm_size(c);
    int right = (r + 1) % size, left = (r - 1 + size) % size;
    dbuf out = dnew(n), in = dnew(n);
    for (int64_t i = 0; i < n; i++) out.h[i] = (float)(r * 1000 + i % 997), in.h[i] = -1;
    dput(&out);
    dput(&in);
    sr_status st = SR_OK;
    if (size == 1) {
        be->copy(in.d, out.d, sizeof(float) * (size_t)n); /* nothing to test */
    } else if (mode || grouped) {
        sr_req *rr = NULL, *rs = NULL;
        /* NCCL runs a rank's operations on a communicator one after the other:
         * outside a group, recv-then-send on every rank would deadlock (as on a
         * GPU; run_timeout shows it), so even ranks send first there */
        int send_first = backend == SR_COMM_NCCL && !grouped && r % 2 == 0;
        if (grouped) st = sr_comm_group_begin();
        if (st == SR_OK && send_first) st = sr_comm_send(c, out.d, n, right, 5, "ring out", &rs);
        if (st == SR_OK) st = sr_comm_recv(c, in.d, n, left, 5, "ring in", &rr);
        if (st == SR_OK && !send_first) st = sr_comm_send(c, out.d, n, right, 5, "ring out", &rs);
        if (grouped) {
            sr_status e = sr_comm_group_end();
            if (st == SR_OK) st = e;
        }
        sr_status s1 = mode == 2 ? sr_comm_wait_device(rs) : sr_comm_wait(rs);
        sr_status s2 = mode == 2 ? sr_comm_wait_device(rr) : sr_comm_wait(rr);
        if (st == SR_OK) st = s1 != SR_OK ? s1 : s2;
    } else if (r % 2 == 0) {
        st = sr_comm_send(c, out.d, n, right, 6, "ring out", NULL);
        if (st == SR_OK) st = sr_comm_recv(c, in.d, n, left, 6, "ring in", NULL);
    } else {
        st = sr_comm_recv(c, in.d, n, left, 6, "ring in", NULL);
        if (st == SR_OK) st = sr_comm_send(c, out.d, n, right, 6, "ring out", NULL);
    }
    dget(&in);
    int ok = st == SR_OK;
    for (int64_t i = 0; ok && i < n; i++) ok = in.h[i] == (float)(left * 1000 + i % 997);
    dfree(&out);
    dfree(&in);
    return ok;
}

/* bf16 (SR_BF16) on device memory: all-reduce, reduce-scatter and all-gather, each also in
 * place, on small integers (every partial sum a bf16 value: exact in any order); host images
 * hold the 16 bits */
static uint16_t bf(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}
static int t_bf16(sr_comm *c, int64_t n, int mode)
{
    int r = sr_comm_rank(c), size = sr_comm_size(c), ok = 1;
    size_t bytes = 2 * (size_t)(n * size + 1);
    uint16_t *d = be->alloc(bytes), *d2 = be->alloc(bytes), *h = calloc(bytes, 1), *h2 = calloc(bytes, 1);
    float S = (float)(size * (size + 1) / 2);
    sr_status st;
    for (int64_t i = 0; i < n; i++) h[i] = bf((float)((r + 1) * (i % 7 + 1)));
    be->h2d(d, h, 2 * (size_t)n);
    RUN(st, mode, sr_comm_allreduce_t(c, SR_BF16, n ? d : NULL, n, "ar bf16", req));
    be->d2h(h, d, 2 * (size_t)n);
    ok &= st == SR_OK;
    for (int64_t i = 0; ok && i < n; i++) ok = h[i] == bf(S * (float)(i % 7 + 1));
    for (int inplace = 0; inplace < 2; inplace++) {
        for (int64_t i = 0; i < n * size; i++) h[i] = bf((float)((r + 1) * (i / n + 1) + (i % n) % 5));
        be->h2d(d, h, 2 * (size_t)(n * size));
        uint16_t *recv = inplace ? d + (int64_t)r * n : d2;
        RUN(st, mode, sr_comm_reduce_scatter_t(c, SR_BF16, d, recv, n, "rs bf16", req));
        be->d2h(h2, recv, 2 * (size_t)n);
        ok &= st == SR_OK;
        for (int64_t i = 0; ok && i < n; i++) ok = h2[i] == bf(S * (float)(r + 1) + (float)(size * (i % 5)));
        /* this rank's block: in place in d, else in d2 */
        uint16_t *mine = inplace ? h + (int64_t)r * n : h2;
        for (int64_t i = 0; i < n * size; i++) h[i] = 0xffff;
        for (int64_t i = 0; i < n; i++) mine[i] = bf((float)(r * 64 + i % 61));
        be->h2d(d, h, 2 * (size_t)(n * size));
        be->h2d(d2, h2, 2 * (size_t)n);
        RUN(st, mode, sr_comm_allgather_t(c, SR_BF16, inplace ? d + (int64_t)r * n : d2, d, n, "ag bf16", req));
        be->d2h(h, d, 2 * (size_t)(n * size));
        ok &= st == SR_OK;
        for (int64_t i = 0; ok && i < n * size; i++) ok = h[i] == bf((float)((i / n) * 64 + (i % n) % 61));
    }
    /* a ring of bf16 sends and receives in one group (a pipeline's boundaries) */
    int right = (r + 1) % size, left = (r - 1 + size) % size;
    for (int64_t i = 0; i < n; i++) h[i] = bf((float)(r * 64 + i % 59)), h2[i] = 0xffff;
    be->h2d(d, h, 2 * (size_t)n);
    be->h2d(d2, h2, 2 * (size_t)n);
    sr_req *rr = NULL, *rs = NULL;
    st = sr_comm_group_begin();
    if (st == SR_OK) st = sr_comm_recv_t(c, SR_BF16, n ? d2 : NULL, n, left, 9, "bf16 ring in", &rr);
    if (st == SR_OK) st = sr_comm_send_t(c, SR_BF16, n ? d : NULL, n, right, 9, "bf16 ring out", &rs);
    sr_status ge = sr_comm_group_end();
    sr_status s1 = sr_comm_wait(rs), s2 = sr_comm_wait(rr);
    be->d2h(h2, d2, 2 * (size_t)n);
    ok &= st == SR_OK && ge == SR_OK && s1 == SR_OK && s2 == SR_OK;
    for (int64_t i = 0; ok && i < n; i++) ok = h2[i] == bf((float)(left * 64 + i % 59));
    be->free(d);
    be->free(d2);
    free(h);
    free(h2);
    return ok;
}

static const int64_t SIZES[] = {0, 1, 7, 1000, 4099};
static const int64_t SMALL_SIZES[] = {0, 1, 3, 5, 6, 23}; /* around the 5-float chunks */

static void ops_suite(sr_comm *c, const char *shape, const int64_t *sizes, int nsizes)
{
    static const char *const modes[] = {"blocking", "async + wait", "async + wait_device"};
    const char *g = sr_comm_name(c);
    int size = sr_comm_size(c);
    for (int m = 0; m < 3; m++) {
        int ok[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
        for (int k = 0; k < nsizes; k++) {
            int64_t n = sizes[k];
            ok[0] &= t_allreduce(c, n, m);
            ok[1] &= t_reduce_scatter(c, n, m, 0);
            ok[2] &= t_reduce_scatter(c, n, m, 1);
            ok[3] &= t_allgather(c, n, m, 0);
            ok[4] &= t_allgather(c, n, m, 1);
            ok[5] &= t_broadcast(c, n, m, 0) && t_broadcast(c, n, m, size - 1);
            ok[6] &= t_ring(c, n, m, 0);
            ok[7] &= t_ring(c, n, m, 1);
            ok[8] &= t_bf16(c, n, m);
        }
        static const char *const what[] = {"all-reduce", "reduce-scatter", "reduce-scatter in place", "all-gather",
                                           "all-gather in place", "broadcast (first and last root)", "send/recv ring",
                                           "send/recv ring in a group",
                                           "bf16 all-reduce, reduce-scatter, all-gather (also in place), send/recv ring"};
        for (int k = 0; k < 9; k++)
            CHECK(ok[k], "%s: %s group (%d): %s on device memory, %s", shape, g, size, what[k], modes[m]);
    }
}

/* asynchronous calls on the MPI path: the copy to the host is queued and
 * the MPI start waits for it, starts kept in issue order (under
 * EMU_EVENT_LAG the first queries of every copy say "not ready") */
static void async_checks(sr_comm *w)
{
    int size = sr_comm_size(w), rank = sr_comm_rank(w);
    long a0 = n_async;
    int ok = t_allreduce(w, 77, 0);
    CHECK(ok && n_async == a0, "async staging: a blocking all-reduce copies synchronously");
    ok = t_allreduce(w, 77, 1);
    CHECK(ok && n_async == a0 + 1, "async staging: an async all-reduce queues its copy (%ld)", n_async - a0);
    /* six in flight, a blocking host all-reduce among them (it starts the
     * queued ones first), a send/recv pair, then the waits in reverse */
    enum { K = 6 };
    dbuf b[K];
    sr_req *rq[K];
    long nr0 = n_not_ready;
    sr_status st = SR_OK;
    double hsum = 0;
    for (int k = 0; k < K; k++) {
        int64_t n = 100 + 37 * k;
        b[k] = dnew(n);
        for (int64_t i = 0; i < n; i++) b[k].h[i] = (float)(rank * 1000 + k + i);
        dput(&b[k]);
        rq[k] = NULL;
        if (st == SR_OK) st = sr_comm_allreduce(w, b[k].d, n, "in order", &rq[k]);
        if (k == 2 && st == SR_OK) {
            hsum = rank;
            st = sr_comm_allreduce_double(w, &hsum, 1);
        }
    }
    for (int k = K - 1; k >= 0; k--) {
        sr_status x = sr_comm_wait(rq[k]);
        if (st == SR_OK) st = x;
    }
    int good = st == SR_OK && hsum == size * (size - 1) / 2.0;
    double rsum = 1000.0 * size * (size - 1) / 2.0;
    for (int k = 0; k < K; k++) {
        dget(&b[k]);
        for (int64_t i = 0; i < b[k].n; i++) good &= b[k].h[i] == (float)(rsum + (double)size * (double)(k + i));
        dfree(&b[k]);
    }
    CHECK(good, "async staging: 6 all-reduces in flight with a host one among them, waited in reverse: every "
          "sum right (%s)", st == SR_OK ? "ok" : sr_errmsg());
    /* polled to completion, as the data-parallel hook does */
    dbuf t = dnew(50);
    for (int i = 0; i < 50; i++) t.h[i] = 1.0f;
    dput(&t);
    sr_req *q = NULL;
    st = sr_comm_allreduce(w, t.d, 50, "polled", &q);
    int unordered = st == SR_OK && !sr_comm_order_device(q); /* MPI: no device events */
    double t0 = now();
    while (st == SR_OK && !sr_comm_test(q) && now() - t0 < 30) {
    }
    if (st == SR_OK) st = sr_comm_wait(q);
    dget(&t);
    CHECK(st == SR_OK && t.h[0] == (float)size && t.h[49] == (float)size, "async staging: sr_comm_test starts "
          "and completes a deferred all-reduce");
    CHECK(unordered, "MPI: sr_comm_order_device cannot order the device (0: the caller waits on the host)");
    dfree(&t);
    if (lagged)
        CHECK(me != 0 || n_not_ready > nr0, "EMU_EVENT_LAG on rank 0: its copies were still running when asked "
              "(%ld times), its starts came later than the other ranks' and in the same order", n_not_ready - nr0);
}

/* the staging copies and the pool, on the world group */
static void staging_checks(sr_comm *w)
{
    int size = sr_comm_size(w);
    long h0 = n_to_host, d0 = n_to_device;
    int ok = t_allreduce(w, 513, 0);
    CHECK(ok && n_to_host - h0 == 1 && n_to_device - d0 == 1,
          "all-reduce of 513 floats: one copy to the host, one back (got %ld, %ld)", n_to_host - h0, n_to_device - d0);
    h0 = n_to_host, d0 = n_to_device;
    ok = t_broadcast(w, 64, 0, 0);
    long want_back = sr_comm_rank(w) == 0 ? 0 : 1, want_out = sr_comm_rank(w) == 0 ? 1 : 0;
    CHECK(ok && n_to_host - h0 == want_out && n_to_device - d0 == want_back,
          "broadcast: the root copies to the host, the others back to the device (rank %d: %ld, %ld)",
          sr_comm_rank(w), n_to_host - h0, n_to_device - d0);
    h0 = n_to_host, d0 = n_to_device;
    ok = t_allreduce(w, 0, 1);
    CHECK(ok && n_to_host == h0 && n_to_device == d0, "zero elements: nothing staged");
    ok = t_allreduce(w, 1000, 1) && t_reduce_scatter(w, 300, 2, 0); /* the pool's size now */
    long p0 = n_pinned;
    for (int i = 0; i < 20; i++) ok &= t_allreduce(w, 1000 + i, 1) && t_reduce_scatter(w, 300, 2, 0);
    CHECK(ok && n_pinned == p0, "40 more ops of sizes seen before: page-locked buffers reused (%ld new)",
          n_pinned - p0);

    /* host memory on the device grid: plain MPI, nothing staged */
    float hb[9];
    for (int i = 0; i < 9; i++) hb[i] = (float)(sr_comm_rank(w) + i);
    h0 = n_to_host, d0 = n_to_device;
    sr_status st = sr_comm_allreduce(w, hb, 9, "host", NULL);
    float base = (float)(size * (size - 1) / 2);
    CHECK(st == SR_OK && hb[0] == base && hb[8] == base + 8.0f * (float)size && n_to_host == h0 && n_to_device == d0,
          "host buffers on a device grid: summed over plain MPI, not staged");
    dbuf d = dnew(4 * size);
    st = sr_comm_allgather(w, hb, d.d, 4, "mixed", NULL);
    CHECK(st == SR_ERR_ARG && strstr(sr_errmsg(), "device memory and the other in host memory"),
          "a host send buffer with a device receive buffer: SR_ERR_ARG (%s)", sr_errmsg());
    dfree(&d);

    /* a recv that gets fewer floats than it asked for */
    if (size >= 2) {
        dbuf b = dnew(16);
        int r = sr_comm_rank(w);
        h0 = n_to_device;
        if (r == 0) st = sr_comm_send(w, b.d, 6, 1, 4, "short", NULL);
        else if (r == 1) st = sr_comm_recv(w, b.d, 11, 0, 4, "short", NULL);
        else st = SR_ERR_COMM;
        ok = r == 0 ? st == SR_OK
                    : st == SR_ERR_COMM && (r > 1 || (strstr(sr_errmsg(), "received 6 floats but expected 11") &&
                                                      n_to_device == h0));
        CHECK(ok, "device recv of 11 floats matched by a send of 6: SR_ERR_COMM, nothing copied back");
        dfree(&b);
        CHECK(t_allreduce(w, 9, 0), "the world group still works after that");
    }
    CHECK(sr_comm_settle(w) == SR_OK && sr_comm_settle_all() == SR_OK, "settle with nothing deferred: SR_OK");
}

static void group_checks(sr_comm *w)
{
    float x[4] = {0};
    sr_status st = sr_comm_group_end();
    CHECK(st == SR_ERR_STATE, "sr_comm_group_end without begin: SR_ERR_STATE (%s)", sr_errmsg());
    st = sr_comm_group_begin();
    sr_status inner = sr_comm_allreduce(w, x, 4, "inside", NULL);
    CHECK(st == SR_OK && inner == SR_ERR_ARG && strstr(sr_errmsg(), "inside sr_comm_group_begin"),
          "a blocking call inside a group: SR_ERR_ARG (%s)", sr_errmsg());
    sr_req *q = NULL;
    st = sr_comm_allreduce(w, x, 4, "grouped", &q);
    sr_status early = sr_comm_wait(q);
    int tested = sr_comm_test(q);
    CHECK(st == SR_OK && early == SR_ERR_STATE && !tested && strstr(sr_errmsg(), "sr_comm_group_end first"),
          "waiting inside the group: SR_ERR_STATE, and test says not complete (%s)", sr_errmsg());
    sr_comm_group_begin(); /* nested */
    sr_status e1 = sr_comm_group_end();
    sr_status e2 = sr_comm_group_end();
    st = sr_comm_wait(q);
    CHECK(e1 == SR_OK && e2 == SR_OK && st == SR_OK, "nested groups end; the request completes after the outer end");
}

/* NCCL runs on its own stream: the compute stream sees an all-reduce's result
 * only after sr_comm_wait_device (or a host wait). Rank 1 joins late, so that
 * on rank 0 the unordered read is sure to come first: the emulator's race
 * check (cuda_emu.h) keeps the buffer 0xff, NaN, until something is ordered
 * after the all-reduce, so a missing wait shows as NaN */
static void ordering_checks(sr_comm *w)
{
    int r = sr_comm_rank(w), size = sr_comm_size(w);
    dbuf b = dnew(256);
    for (int i = 0; i < 256; i++) b.h[i] = (float)(r + 1);
    dput(&b);
    if (r == 1) {
        struct timespec ts = {0, 300 * 1000000L};
        nanosleep(&ts, NULL);
    }
    sr_req *q = NULL;
    sr_status st = sr_comm_allreduce(w, b.d, 256, "late", &q);
    int early = 1;
    if (st == SR_OK && r == 0) {
        dget(&b); /* a copy on the compute stream, not ordered after the all-reduce */
        early = isnan(b.h[0]) && isnan(b.h[255]);
    }
    if (st == SR_OK) st = sr_comm_wait_device(q);
    dget(&b);
    float S = (float)(size * (size + 1) / 2);
    CHECK(st == SR_OK && early && b.h[0] == S && b.h[255] == S,
          "NCCL: before sr_comm_wait_device the compute stream reads NaN, no result (%s); after it, the sum "
          "(%g)", r == 0 ? (early ? "yes" : "no") : "rank 0 checks", b.h[0]);
    dfree(&b);
}

/* the grid's pipeline channels (sr_grid): over NCCL four two-rank
 * communicators, the sender each one's rank 0; over MPI none. Every rank
 * sends first, an activation to the next pipeline rank and a gradient to
 * the previous one (a ring), and then receives both: on one NCCL
 * communicator each send would wait for a recv queued behind the peer's own
 * send; over the channels it completes. */
static void channel_checks(sr_grid *g, const char *shape)
{
    sr_comm *const *ch = g->pp_chan;
    int have = 0, two = 1;
    for (int k = 0; k < SR_PP_NCHAN; k++) /* out (k odd): the sender, rank 0 */
        if (ch[k]) have++, two = two && sr_comm_size(ch[k]) == 2 && sr_comm_rank(ch[k]) == 1 - (k & 1);
    if (backend == SR_COMM_MPI) {
        CHECK(have == 0, "%s: MPI: no pipeline channels (tags match its transfers)", shape);
        return;
    }
    CHECK(have == 4 && two, "%s: NCCL: four pipeline channels of 2 ranks, the sender each one's rank 0", shape);
    if (have != 4) return;
    int p = g->pp, r = g->pp_rank, n = 37;
    dbuf ao = dnew(n), ai = dnew(n), go = dnew(n), gi = dnew(n);
    for (int i = 0; i < n; i++) ao.h[i] = (float)(1000 * r + i), go.h[i] = (float)(-1000 * r - i);
    dput(&ao);
    dput(&go);
    sr_req *sa = NULL, *sg = NULL, *ra = NULL;
    sr_status st = sr_comm_send(g->pp_chan[SR_PP_CHAN(0, 1)], ao.d, n, 1, 1, "activation", &sa);
    if (st == SR_OK) st = sr_comm_send(g->pp_chan[SR_PP_CHAN(1, 1)], go.d, n, 1, 2, "gradient", &sg);
    if (st == SR_OK) st = sr_comm_recv(g->pp_chan[SR_PP_CHAN(0, 0)], ai.d, n, 0, 1, "activation", &ra);
    if (st == SR_OK) st = sr_comm_wait_device(ra);
    if (st == SR_OK) st = sr_comm_recv(g->pp_chan[SR_PP_CHAN(1, 0)], gi.d, n, 0, 2, "gradient", NULL);
    /* the device ordered after a send, the request kept for its wait */
    int ordered = st == SR_OK && sr_comm_order_device(sa) && sr_comm_order_device(NULL);
    if (st == SR_OK) st = sr_comm_wait(sa);
    if (st == SR_OK) st = sr_comm_wait(sg);
    dget(&ai);
    dget(&gi);
    int from = (r - 1 + p) % p, next = (r + 1) % p, ok = st == SR_OK;
    for (int i = 0; ok && i < n; i++)
        ok = ai.h[i] == (float)(1000 * from + i) && gi.h[i] == (float)(-1000 * next - i);
    CHECK(ok, "%s: NCCL: every pipeline rank sends on both channels first, then receives both (%s)", shape,
          st == SR_OK ? "got its neighbours' data" : sr_errmsg());
    CHECK(ordered, "%s: NCCL: sr_comm_order_device orders the device after a send and leaves it to its wait", shape);
    dfree(&ao);
    dfree(&ai);
    dfree(&go);
    dfree(&gi);
}

/* polls comm's state up to t seconds; ncclInProgress if it is still in progress then */
static ncclResult_t poll_for(ncclComm_t comm, double t)
{
    ncclResult_t state = ncclInProgress;
    for (double t0 = now(); state == ncclInProgress && now() - t0 < t;)
        if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclInternalError;
    return state;
}

/* the emulator's ncclCommSplit, which makes the pipeline's channels: non-blocking,
 * it stays the parent's operation in progress while a rank of the parent has not
 * split (a rank that never comes is bounded by the caller's timeout, not a hang),
 * and completes once every rank has; its ranks ordered by key as NCCL's; a rank
 * with NCCL_SPLIT_NOCOLOR gets none */
static void split_checks(void)
{
    ncclUniqueId id;
    if (me == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t parent = NULL, child = NULL;
    ncclResult_t e = ncclCommInitRankConfig(&parent, nworld, id, me, &cfg);
    if (e == ncclInProgress) e = poll_for(parent, 30);
    CHECK(e == ncclSuccess, "emulated NCCL: a non-blocking communicator of the world for the split checks");
    if (e != ncclSuccess) return;
    /* the last rank of three has no color; the others' keys reverse their order */
    int colored = nworld > 2 ? nworld - 1 : nworld;
    int color = me < colored ? 5 : NCCL_SPLIT_NOCOLOR;
    double late = 0; /* how long rank 0's split stayed in progress while the others had not split */
    ncclResult_t early = ncclSuccess;
    if (me == 0) {
        e = ncclCommSplit(parent, color, nworld - me, &child, &cfg);
        double t0 = now();
        early = e == ncclInProgress ? poll_for(parent, 0.5) : e;
        late = now() - t0;
    }
    int go = 1;
    MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD); /* now the others split */
    if (me != 0) e = ncclCommSplit(parent, color, nworld - me, &child, &cfg);
    if (e == ncclInProgress) e = poll_for(parent, 30);
    if (e == ncclSuccess && child) e = poll_for(child, 30);
    CHECK(me != 0 || (early == ncclInProgress && late >= 0.5),
          "emulated ncclCommSplit: in progress, not blocked, while the other ranks have not split (%.2f s)", late);
    CHECK(e == ncclSuccess && (child != NULL) == (me < colored),
          "emulated ncclCommSplit: complete once every rank has split; a communicator for each colored rank, "
          "none for NCCL_SPLIT_NOCOLOR");
    /* the ranks in the new communicator by descending key: world ranks colored-1 .. 0 */
    int order_ok = 1;
    if (e == ncclSuccess && child) {
        dbuf s = dnew(1), r = dnew(colored);
        s.h[0] = (float)me;
        dput(&s);
        cudaStream_t st = (cudaStream_t)be->device->stream();
        e = ncclAllGather(s.d, r.d, 1, ncclFloat, child, st);
        if (e == ncclInProgress) e = poll_for(child, 30);
        if (be->sync() != SR_OK) e = ncclInternalError;
        dget(&r);
        for (int i = 0; i < colored; i++) order_ok = order_ok && r.h[i] == (float)(colored - 1 - i);
        order_ok = order_ok && e == ncclSuccess;
        dfree(&s);
        dfree(&r);
    }
    CHECK(order_ok, "emulated ncclCommSplit: ranks ordered by key (an all-gather over it gives world ranks %d..0)",
          colored - 1);
    if (child) ncclCommDestroy(child);
    ncclCommDestroy(parent);
}

static void shapes_suite(const char *prefix, int reduced)
{
    const int64_t *sizes = reduced ? SMALL_SIZES : SIZES;
    int nsizes = reduced ? 6 : 5;
    for (int dp = 1; dp <= nworld; dp++)
        for (int tp = 1; tp <= nworld; tp++)
            for (int pp = 1; pp <= nworld; pp++) {
                if (dp * tp * pp != nworld) continue;
                char shape[96];
                snprintf(shape, sizeof shape, "%sdp=%d tp=%d pp=%d", prefix, dp, tp, pp);
                sr_grid g;
                sr_status st = sr_grid_init_device(&g, dp, tp, pp, backend, &counted, 60);
                CHECK(st == SR_OK, "%s: sr_grid_init_device (%s)", shape, bname);
                if (st != SR_OK) continue;
                sr_comm *axes[4] = {g.world_comm, g.dp_comm, g.tp_comm, g.pp_comm};
                for (int a = 0; a < 4; a++)
                    if (a == 0 || (!reduced && sr_comm_size(axes[a]) > 1) || (reduced && a == 1))
                        ops_suite(axes[a], shape, sizes, nsizes);
                if (pp > 1 && !reduced) channel_checks(&g, shape);
                sr_grid_free(&g);
            }
}

static int run_normal(void)
{
    CHECK(be->device != NULL && be->device->stream() != NULL, "the CUDA backend (emulated) offers its device");
    long h0 = n_to_host, d0 = n_to_device;
    shapes_suite("", 0);
    if (backend == SR_COMM_NCCL)
        CHECK(n_to_host == h0 && n_to_device == d0, "NCCL: every operation on every shape moved device memory "
              "directly (nothing staged through the host)");
    sr_grid g;
    sr_status st = sr_grid_init_device(&g, nworld, 1, 1, backend, &counted, 60);
    CHECK(st == SR_OK, "grid dp=%d for the staging and group checks", nworld);
    if (st == SR_OK) {
        if (backend == SR_COMM_MPI) staging_checks(g.world_comm);
        if (backend == SR_COMM_MPI) async_checks(g.world_comm);
        if (backend == SR_COMM_NCCL && nworld >= 2) ordering_checks(g.world_comm);
        if (backend == SR_COMM_NCCL && nworld >= 2) split_checks();
        group_checks(g.world_comm);
        sr_grid_free(&g);
    }
    if (backend == SR_COMM_MPI) {
        setenv("SR_COMM_MAX_CHUNK", "5", 1); /* several MPI calls per op */
        shapes_suite("chunks of 5: ", 1);
        unsetenv("SR_COMM_MAX_CHUNK");
    }
    return 0;
}

/* rank 1 skips an all-reduce; the others must time out */
static int run_timeout(void)
{
    sr_grid g;
    sr_status st = sr_grid_init_device(&g, nworld, 1, 1, backend, &counted, 1.0);
    if (st != SR_OK) {
        printf("rank %d: FAIL - grid: %s\n", me, sr_errmsg());
        sr_comm_abort(1);
    }
    sr_comm_set_step(g.dp_comm, 12);
    dbuf b = dnew(1024);
    int fails = 0;
    if (backend == SR_COMM_NCCL && nworld == 2) {
        /* what NCCL does on a GPU: a rank's operations on one communicator run
         * in order, and a send waits for its receiver, so two ranks that both
         * send before they receive, outside a group, wait for each other */
        dbuf o = dnew(64), i = dnew(64);
        sr_req *rs = NULL, *rr = NULL;
        double t0 = now();
        st = sr_comm_send(g.world_comm, o.d, 64, 1 - me, 9, "send first", &rs);
        if (st == SR_OK) st = sr_comm_recv(g.world_comm, i.d, 64, 1 - me, 9, "then recv", &rr);
        if (st == SR_OK) st = sr_comm_wait(rr);
        double dt = now() - t0;
        int ok = st == SR_ERR_COMM && dt >= 0.95 && dt < 5 && strstr(sr_errmsg(), "did not complete within 1 s");
        fails += !ok;
        printf("rank %d: %s - NCCL send then recv outside a group on both ranks: deadlock, reported after %.2f s (%s)\n",
               me, ok ? "ok  " : "FAIL", dt, sr_errmsg());
        /* a pipeline channel is bounded as any communicator: rank 1 never
         * receives the activation rank 0 sends it */
        sr_grid pg;
        st = sr_grid_init_device(&pg, 1, 1, 2, backend, &counted, 1.0);
        ok = st == SR_OK && pg.pp_chan[SR_PP_CHAN(0, 1)];
        if (ok && me == 0) {
            sr_comm_set_step(pg.pp_chan[SR_PP_CHAN(0, 1)], 7);
            t0 = now();
            st = sr_comm_send(pg.pp_chan[SR_PP_CHAN(0, 1)], o.d, 64, 1, 3, "activation", NULL);
            dt = now() - t0;
            ok = st == SR_ERR_COMM && dt >= 0.95 && dt < 5 &&
                 strstr(sr_errmsg(), "send 'activation' to rank 1 (world rank 1) of the pipeline activation group (2 "
                        "ranks) did not complete within 1 s at step 7");
            printf("rank 0: %s - a send on a pipeline channel no one receives: reported after %.2f s (%s)\n",
                   ok ? "ok  " : "FAIL", dt, sr_errmsg());
        }
        fails += !ok;
        /* the device ordered after a send no one receives (sr_comm_order_device, as the
         * pipeline does before a backward and at a slot's reuse): the next host wait for the
         * device is that send's timeout error, not a hang in the device's synchronization;
         * the caller's own wait then reports it abandoned and frees it */
        if (ok && me == 0) {
            sr_comm *gc = pg.pp_chan[SR_PP_CHAN(1, 1)];
            sr_req *sq = NULL;
            sr_comm_set_step(gc, 8);
            t0 = now();
            st = sr_comm_send(gc, o.d, 64, 1, 4, "gradient", &sq);
            int ordered = st == SR_OK && sr_comm_order_device(sq);
            sr_status sy = ordered ? be->sync() : SR_OK;
            dt = now() - t0;
            ok = ordered && sy == SR_ERR_COMM && dt >= 0.95 && dt < 5 &&
                 strstr(sr_errmsg(), "send 'gradient' to rank 1 (world rank 1) of the pipeline gradient group (2 "
                        "ranks) did not complete within 1 s at step 8");
            printf("rank 0: %s - the device ordered after a send no one receives: its sync fails after %.2f s (%s)\n",
                   ok ? "ok  " : "FAIL", dt, sr_errmsg());
            sr_status w = sr_comm_wait(sq);
            ok = ok && w == SR_ERR_COMM && strstr(sr_errmsg(), "abandoned");
            printf("rank 0: %s - its wait then: %s\n", ok ? "ok  " : "FAIL", sr_errmsg());
            fails += !ok;
        }
    }
    if (me == 1) {
        printf("rank 1: skipping the all-reduce 'grad bucket 3'\n");
    } else {
        double t0 = now();
        sr_req *q = NULL;
        st = sr_comm_allreduce(g.dp_comm, b.d, 1024, "grad bucket 3", &q);
        if (st == SR_OK) st = sr_comm_wait_device(q);
        /* NCCL: wait_device only orders the stream, and a kernel launched next
         * queues behind the collective without holding the host (as on a
         * GPU); the next host wait (what the backend does before
         * synchronizing) finds the dead peer */
        if (st == SR_OK) be->scale(b.d, 2.0f, 1024);
        if (st == SR_OK) st = sr_comm_settle_all();
        double dt = now() - t0;
        printf("rank %d: got %s after %.2f s: %s\n", me, sr_status_str(st), dt, sr_errmsg());
        char want[200];
        snprintf(want, sizeof want, "rank %d: all-reduce 'grad bucket 3' on the data group (%d ranks) did not complete "
                 "within 1 s at step 12", me, nworld);
        fails += !(st == SR_ERR_COMM && dt >= 0.95 && dt < 5 && strstr(sr_errmsg(), want));
        st = sr_comm_allreduce(g.dp_comm, b.d, 4, "next", NULL);
        fails += !(st == SR_ERR_COMM && strstr(sr_errmsg(), "unusable"));
        printf("rank %d: %s - device all-reduce timed out after 1 s; the group then refuses\n", me,
               fails ? "FAIL" : "ok  ");
    }
    int tot = 0;
    MPI_Allreduce(&fails, &tot, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (me == 0) printf("%d passed, %d failed\n", tot ? 0 : 1, tot);
    fflush(stdout);
    sr_grid_free(&g);
    sr_comm_abort(tot ? 1 : 3);
    return 1;
}

/* --race (NCCL, 2 ranks): rank 0 writes into an all-reduce in flight, with
 * nothing ordering the write after it (rank 1 joins late, so it surely is in
 * flight). On a GPU the sum would depend on timing; the emulator's race check
 * reports the write (its line names the copy and the collective's output,
 * which the ctest entry looks for) and the program's sync reports an error */
static int run_race(void)
{
    sr_grid g;
    sr_status st = sr_grid_init_device(&g, nworld, 1, 1, backend, &counted, 60);
    int fails = st != SR_OK;
    dbuf b = dnew(256);
    for (int i = 0; i < 256; i++) b.h[i] = 1.0f;
    dput(&b);
    if (me == 1) {
        struct timespec ts = {0, 300 * 1000000L};
        nanosleep(&ts, NULL);
    }
    sr_req *q = NULL;
    if (!fails) st = sr_comm_allreduce(g.world_comm, b.d, 256, "raced", &q);
    fails += st != SR_OK;
    if (me == 0 && !fails) dput(&b); /* the race: a copy on the compute stream into the output */
    if (!fails) st = sr_comm_wait(q);
    sr_status synced = be->sync();
    int ok = me == 0 ? !fails && synced != SR_OK : !fails && synced == SR_OK;
    printf("rank %d: %s - a write into an all-reduce in flight: %s (%s)\n", me, ok ? "ok  " : "FAIL",
           me == 0 ? "the sync reports an error" : "nothing raced here", synced == SR_OK ? "no error" : sr_errmsg());
    int bad = !ok, tot = 0;
    MPI_Allreduce(&bad, &tot, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (me == 0) printf("%d passed, %d failed\n", tot ? 0 : 1, tot);
    fflush(stdout);
    sr_comm_abort(tot ? 1 : 3);
    return 1;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (sr_comm_init(&argc, &argv) != SR_OK) {
        fprintf(stderr, "test_comm_device: %s\n", sr_errmsg());
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &nworld);
    real = be->device;
    /* a lag on rank 0 only: its deferred starts then come later than the
     * others', which only issue order per communicator keeps matched */
    lagged = getenv("EMU_EVENT_LAG") != NULL;
    if (me != 0) unsetenv("EMU_EVENT_LAG");
    if (be->init(me) != SR_OK) {
        fprintf(stderr, "rank %d: test_comm_device: %s\n", me, sr_errmsg());
        sr_comm_abort(1);
    }
    counted.nccl = real->nccl;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--nccl")) backend = SR_COMM_NCCL, bname = "NCCL";
    if (me == 0) printf("# comm layer on emulated device memory over %s\n", bname);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--timeout")) return run_timeout();
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--race")) return run_race();
    run_normal();
    int counts[2] = {n_pass, n_fail};
    MPI_Bcast(counts, 2, MPI_INT, 0, MPI_COMM_WORLD);
    if (me == 0) printf("%d passed, %d failed\n", counts[0], counts[1]);
    fflush(stdout);
    be->shutdown();
    sr_comm_finalize();
    return counts[1] ? 1 : 0;
}
