/* comm.c: the process grid and the communication layer (sr_comm.h), and its
 * MPI backend.
 *
 * Every operation goes the same way: check the arguments (SR_ERR_ARG names
 * the one at fault), fill in a request, let the backend launch it
 * (srcomm_ops.start), count it in the communicator's stats, then either hand
 * the request to the caller (async form) or wait on it at once (blocking
 * form). sr_comm_wait polls the backend: back to back for the first 1 ms
 * (SR_COMM_SPIN_US; small messages complete in microseconds, and MPI only
 * progresses a non-blocking collective while it is polled), then with a
 * sleep that grows from 10 us to 1 ms, so waiting ranks leave the cores to
 * the ranks still computing; it gives up after the communicator's timeout
 * with one sentence naming the operation, its label, the group and the step.
 *
 * A communicator whose operation failed or timed out is "broken": MPI cannot
 * cancel a collective, so the transfer may still be pending (and may still
 * write its buffers); every later operation on it fails at once and the
 * program is expected to report the error and sr_comm_abort.
 *
 * Device memory (sr_grid_init_device): each call's buffers are classified
 * (host or device); host buffers go over plain MPI whatever the backend,
 * device buffers over NCCL, or over MPI staged through page-locked host
 * copies (runtime/comm_device.c; an asynchronous call's copy is queued and
 * its MPI start deferred until the copy is done, starts kept in issue order
 * per communicator: start_pending). sr_comm_wait_device hands an NCCL request
 * to its communicator ("deferred"): the device waits for it, the host checks
 * it later under the timeout (sr_comm_settle); finished ones are reaped at
 * every launch on the communicator. Groups (sr_comm_group_begin/end) are
 * process-wide, like NCCL's.
 *
 * MPI backend: non-blocking MPI-3 calls on host memory, one MPI call per
 * chunk of at most max_chunk elements (INT_MAX; Open MPI 4.1 implements
 * MPI 3.1, which has no large-count calls). The environment variable
 * SR_COMM_MAX_CHUNK lowers the chunk, for tests of the chunked paths; it is
 * read when a grid is created.
 */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_impl.h"

/* ------------------------------------------------------------------------ */
/* helpers                                                                    */

const char *sr_comm_backend_name(sr_comm_backend b)
{
    return b == SR_COMM_MPI ? "mpi" : b == SR_COMM_NCCL ? "nccl" : "?";
}

static const char *const op_names[] = {
    "all-reduce", "reduce-scatter", "all-gather", "broadcast",
    "send",       "recv",           "all-reduce of doubles", "barrier"};

const char *srcomm_op_name(int op)
{
    return op >= 0 && op < (int)(sizeof op_names / sizeof op_names[0]) ? op_names[op] : "?";
}

double srcomm_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void srcomm_backoff(long *ns)
{
    struct timespec ts = {0, *ns};
    nanosleep(&ts, NULL);
    *ns = *ns >= 500000 ? 1000000 : *ns * 2;
}

double srcomm_spin_s(void)
{
    static double v = -1;
    if (v < 0) {
        const char *e = getenv("SR_COMM_SPIN_US");
        v = e && *e ? atof(e) * 1e-6 : 1e-3;
        if (!(v >= 0)) v = 1e-3;
    }
    return v;
}

static void mpi_errstr(int code, char *buf, size_t len)
{
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(code, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", code);
    snprintf(buf, len, "%s", s);
}

static int mpi_running(void)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

/* " at step 12", or "" before the first sr_comm_set_step */
static const char *step_phrase(int64_t step, char *buf, size_t len)
{
    if (step < 0) return "";
    snprintf(buf, len, " at step %lld", (long long)step);
    return buf;
}

/* " 'grad bucket 3'", or "" without a label */
static const char *label(const char *what, char *buf, size_t len)
{
    if (!what || !*what) return "";
    snprintf(buf, len, " '%.96s'", what);
    return buf;
}

/* "all-reduce 'grad bucket 3' on the data group (2 ranks)",
 * "send 'act' to rank 1 (world rank 3) of the pipeline group (2 ranks)" */
static void describe(const sr_req *r, char *buf, size_t len)
{
    const sr_comm *c = r->c;
    char lb[112];
    const char *lbl = label(r->what, lb, sizeof lb);
    const char *op = srcomm_op_name(r->op);
    if (r->op == SRC_SEND || r->op == SRC_RECV) {
        int wr = -1;
        MPI_Group wg, cg;
        if (MPI_Comm_group(MPI_COMM_WORLD, &wg) == MPI_SUCCESS) {
            if (MPI_Comm_group(c->mpi, &cg) == MPI_SUCCESS) {
                MPI_Group_translate_ranks(cg, 1, &r->peer, wg, &wr);
                MPI_Group_free(&cg);
            }
            MPI_Group_free(&wg);
        }
        snprintf(buf, len, "%s%s %s rank %d (world rank %d) of the %s group (%d ranks)", op,
                 lbl, r->op == SRC_SEND ? "to" : "from", r->peer, wr, c->name, c->size);
    } else if (r->op == SRC_BROADCAST) {
        snprintf(buf, len, "%s%s from root %d on the %s group (%d ranks)", op, lbl, r->peer,
                 c->name, c->size);
    } else {
        snprintf(buf, len, "%s%s on the %s group (%d ranks)", op, lbl, c->name, c->size);
    }
}

static void mark_broken(sr_comm *c, const char *why)
{
    if (c->broken) return;
    c->broken = 1;
    snprintf(c->broken_msg, sizeof c->broken_msg, "%s", why);
}

/* Polls n MPI requests until done or timeout_s. 1: done (*rc the MPI
 * result), 0: timed out. */
static int mpi_wait_bounded(MPI_Request *rq, int n, double timeout_s, int *rc)
{
    double t0 = srcomm_now();
    long ns = 10000;
    for (;;) {
        int flag = 0;
        *rc = MPI_Testall(n, rq, &flag, MPI_STATUSES_IGNORE);
        if (*rc != MPI_SUCCESS || flag) return 1;
        double el = srcomm_now() - t0;
        if (el >= timeout_s) return 0;
        if (el >= srcomm_spin_s()) srcomm_backoff(&ns);
    }
}

sr_status srcomm_mpi_bounded(sr_comm *c, MPI_Request *rq, const char *what, double timeout_s)
{
    int rc;
    if (!mpi_wait_bounded(rq, 1, timeout_s, &rc)) {
        sr_seterr(SR_ERR_COMM,
                  "rank %d: %s on the %s group (%d ranks) did not complete within %g s: "
                  "another rank may have died or hung",
                  c->world_rank, what, c->name, c->size, timeout_s);
        mark_broken(c, sr_errmsg());
        return SR_ERR_COMM;
    }
    if (rc != MPI_SUCCESS) {
        char e[MPI_MAX_ERROR_STRING];
        mpi_errstr(rc, e, sizeof e);
        sr_seterr(SR_ERR_COMM, "rank %d: %s on the %s group (%d ranks) failed: %s",
                  c->world_rank, what, c->name, c->size, e);
        mark_broken(c, sr_errmsg());
        return SR_ERR_COMM;
    }
    return SR_OK;
}

/* ------------------------------------------------------------------------ */
/* MPI: init, finalize, world                                                 */

sr_status sr_comm_init(int *argc, char ***argv)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (fin)
        return sr_seterr(SR_ERR_STATE,
                         "sr_comm_init: MPI was already finalized in this process and cannot be "
                         "initialized again");
    if (init) return SR_OK;
    /* srun started us without PMIx (--mpi=none or pmi2): Open MPI would abort
       in MPI_Init with a page of text; say what to do in one line instead. */
    const char *step = getenv("SLURM_STEP_ID");
    if (step && *step && !getenv("PMIX_RANK") && !getenv("OMPI_COMM_WORLD_RANK")) {
        const char *how = getenv("SLURM_MPI_TYPE");
        return sr_seterr(SR_ERR_USAGE,
                         "started by srun without PMIx (--mpi=%s), and Open MPI needs it: run "
                         "srun --mpi=pmix (or set MpiDefault=pmix in slurm.conf), or mpirun "
                         "inside salloc/sbatch",
                         how && *how ? how : "none");
    }
    int provided = 0;
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) {
        char e[MPI_MAX_ERROR_STRING];
        mpi_errstr(rc, e, sizeof e);
        return sr_seterr(SR_ERR_COMM, "sr_comm_init: MPI_Init_thread failed: %s", e);
    }
    return SR_OK;
}

void sr_comm_finalize(void)
{
    if (mpi_running()) {
        fflush(NULL);
        MPI_Finalize();
    }
}

/* Before MPI is up: the launcher's environment (Open MPI, PMIx, Slurm). */
static int env_int(const char *const *names, int dflt)
{
    for (int i = 0; names[i]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) {
            char *end;
            long x = strtol(v, &end, 10);
            if (*end == '\0' && x >= 0 && x <= INT_MAX) return (int)x;
        }
    }
    return dflt;
}

int sr_comm_world_rank(void)
{
    if (mpi_running()) {
        int r = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
        return r;
    }
    static const char *const names[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
                                        "SLURM_PROCID", NULL};
    return env_int(names, 0);
}

int sr_comm_world_size(void)
{
    if (mpi_running()) {
        int s = 1;
        MPI_Comm_size(MPI_COMM_WORLD, &s);
        return s;
    }
    static const char *const names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", NULL};
    int s = env_int(names, 1);
    return s > 0 ? s : 1;
}

void sr_comm_abort(int code)
{
    fflush(NULL); /* MPI_Abort does not flush stdio: keep the error messages */
    if (mpi_running()) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

/* ------------------------------------------------------------------------ */
/* communicators and the grid                                                 */

static int64_t max_chunk_from_env(void)
{
    const char *v = getenv("SR_COMM_MAX_CHUNK");
    if (v && *v) {
        char *end;
        long long x = strtoll(v, &end, 10);
        if (*end == '\0' && x >= 1 && x <= INT_MAX) return (int64_t)x;
    }
    return INT_MAX;
}

/* every communicator not yet freed, newest first (sr_comm_settle_all) */
static sr_comm *live;

static sr_comm *comm_new(MPI_Comm m, const char *name, const srcomm_ops *ops, double timeout_s,
                         int world_rank, int64_t max_chunk, const sr_comm_device *dev)
{
    sr_comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->dev = dev;
    c->next_live = live;
    live = c;
    c->mpi = m;
    MPI_Comm_set_errhandler(m, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m, &c->rank);
    MPI_Comm_size(m, &c->size);
    c->world_rank = world_rank;
    c->name = name;
    c->ops = ops;
    c->timeout_s = timeout_s;
    c->step = -1;
    c->max_chunk = max_chunk;
    return c;
}

static void comm_free(sr_comm *c)
{
    if (!c) return;
    sr_comm_settle(c); /* frees what sr_comm_wait_device left (bounded) */
    for (sr_comm **p = &live; *p; p = &(*p)->next_live)
        if (*p == c) {
            *p = c->next_live;
            break;
        }
    if (c->impl && c->ops->close) c->ops->close(c);
    srcomm_pins_free(c);
    if (c->mpi != MPI_COMM_NULL && mpi_running()) MPI_Comm_free(&c->mpi);
    free(c);
}

void sr_grid_free(sr_grid *g)
{
    if (!g) return;
    /* reverse order of creation */
    for (int j = SR_PP_NCHAN - 1; j >= 0; j--) comm_free(g->pp_chan[j]);
    comm_free(g->pp_comm);
    comm_free(g->tp_comm);
    comm_free(g->dp_comm);
    comm_free(g->world_comm);
    memset(g, 0, sizeof *g);
}

/* All ranks learn whether every rank's step succeeded: the failing ranks keep
 * their own message, the others get one naming the first failing rank. */
static sr_status agree(sr_comm *world, sr_status mine, double timeout_s, const char *what)
{
    int in = mine == SR_OK ? INT_MAX : world->rank, first = INT_MAX;
    MPI_Request rq;
    char mymsg[2048];
    snprintf(mymsg, sizeof mymsg, "%s", sr_errmsg());
    int rc = MPI_Iallreduce(&in, &first, 1, MPI_INT, MPI_MIN, world->mpi, &rq);
    if (rc != MPI_SUCCESS) {
        char e[MPI_MAX_ERROR_STRING];
        mpi_errstr(rc, e, sizeof e);
        return sr_seterr(SR_ERR_COMM, "rank %d: grid: MPI_Iallreduce failed: %s", world->rank, e);
    }
    sr_status st = srcomm_mpi_bounded(world, &rq, "the grid set-up check", timeout_s);
    if (mine != SR_OK) return sr_seterr(mine, "%s", mymsg);
    if (st != SR_OK) return st;
    if (first == INT_MAX) return SR_OK;
    return sr_seterr(SR_ERR_COMM, "rank %d: grid: %s failed on rank %d (see that rank's message)",
                     world->rank, what, first);
}

#define GRID_MPI(call)                                                                  \
    do {                                                                                \
        int rc_ = (call);                                                               \
        if (rc_ != MPI_SUCCESS) {                                                       \
            char e_[MPI_MAX_ERROR_STRING];                                              \
            mpi_errstr(rc_, e_, sizeof e_);                                             \
            st = sr_seterr(SR_ERR_COMM, "rank %d: grid: %.*s failed: %s", rank,         \
                           (int)strcspn(#call, "("), #call, e_);                        \
            goto fail;                                                                  \
        }                                                                               \
    } while (0)

/* The pipeline's channels (sr_grid): 2 pp of them, channel k sending
 * activations (k < pp) or gradients from pipeline rank k % pp to its ring
 * neighbour. Made in rounds, one split of the pipeline group each, a rank in
 * at most one channel a round (the same greedy plan on every rank); after
 * each round every rank learns whether all succeeded. */
static sr_status open_channels(sr_grid *g, int64_t chunk, const sr_comm_device *dev, double init_timeout)
{
    sr_comm *pc = g->pp_comm;
    const srcomm_ops *ops = pc->ops;
    int p = g->pp, me = g->pp_rank, nch = 2 * p, left = nch;
    char *done = calloc((size_t)nch + (size_t)p, 1);
    if (!done) return sr_seterr(SR_ERR_NOMEM, "rank %d: grid: out of memory", g->rank);
    char *busy = done + nch;
    sr_status st = SR_OK;
    while (left > 0 && st == SR_OK) {
        memset(busy, 0, (size_t)p);
        int color = MPI_UNDEFINED, key = 0;
        for (int k = 0; k < nch; k++) {
            int a = k % p, b = k < p ? (a + 1) % p : (a - 1 + p) % p;
            if (done[k] || busy[a] || busy[b]) continue;
            done[k] = busy[a] = busy[b] = 1;
            left--;
            if (me == a || me == b) color = k, key = me == a ? 0 : 1;
        }
        MPI_Comm m = MPI_COMM_NULL;
        int rc = MPI_Comm_split(pc->mpi, color, key, &m);
        sr_comm *c = NULL;
        sr_status mine = SR_OK;
        if (rc != MPI_SUCCESS) {
            mine = sr_seterr(SR_ERR_COMM, "rank %d: grid: MPI_Comm_split of the pipeline channels failed", g->rank);
        } else if (m != MPI_COMM_NULL) {
            int grad = color >= p;
            c = comm_new(m, grad ? "pipeline gradient" : "pipeline activation", ops, pc->timeout_s, g->rank, chunk,
                         dev);
            if (!c) {
                MPI_Comm_free(&m);
                mine = sr_seterr(SR_ERR_NOMEM, "rank %d: grid: out of memory for the communicators", g->rank);
            } else {
                g->pp_chan[SR_PP_CHAN(grad, key == 0)] = c; /* the sender is rank 0 */
            }
        }
        /* every rank of the group joins the backend's split, members or not */
        sr_status x = ops->open_split(pc, c, c ? color : -1, key, init_timeout);
        if (mine == SR_OK) mine = x;
        st = agree(g->world_comm, mine, init_timeout, "the set-up of the pipeline's channels");
    }
    free(done);
    return st;
}

sr_status sr_grid_init(sr_grid *g, int dp, int tp, int pp, sr_comm_backend backend, double timeout_s)
{
    return sr_grid_init_device(g, dp, tp, pp, backend, NULL, timeout_s);
}

sr_status sr_grid_init_device(sr_grid *g, int dp, int tp, int pp, sr_comm_backend backend,
                              const sr_comm_device *dev, double timeout_s)
{
    if (!g) return sr_seterr(SR_ERR_ARG, "sr_grid_init: the grid pointer is NULL");
    memset(g, 0, sizeof *g);
    if (dp < 1 || tp < 1 || pp < 1)
        return sr_seterr(SR_ERR_ARG,
                         "grid: parallel degrees must be at least 1, got dp=%d tp=%d pp=%d", dp,
                         tp, pp);
    if (!(timeout_s > 0) || !isfinite(timeout_s))
        return sr_seterr(SR_ERR_ARG,
                         "grid: the communication timeout must be a positive number of seconds, "
                         "got %g",
                         timeout_s);
    const srcomm_ops *ops;
    if (backend == SR_COMM_MPI) {
        ops = &srcomm_mpi_ops;
    } else if (backend == SR_COMM_NCCL && dev && dev->nccl) {
        ops = dev->nccl; /* the emulator's */
    } else if (backend == SR_COMM_NCCL) {
#ifdef SR_HAVE_NCCL
        ops = &srcomm_nccl_ops;
#else
        return sr_seterr(SR_ERR_ARG,
                         "grid: the NCCL backend was requested but this libshardrt was built "
                         "without NCCL (build it where the CUDA toolkit and NCCL are installed, "
                         "or use the MPI backend: a program's --comm mpi)");
#endif
    } else {
        return sr_seterr(SR_ERR_ARG, "grid: unknown communication backend %d", (int)backend);
    }
    SR_CHECK(sr_comm_init(NULL, NULL));

    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int64_t prod = (int64_t)dp * tp * pp;
    if (prod != world)
        return sr_seterr(SR_ERR_ARG,
                         "grid: dp*tp*pp = %d*%d*%d = %lld but the world has %d ranks; the "
                         "degrees must multiply to the number of processes (mpirun -np)",
                         dp, tp, pp, (long long)prod, world);

    g->rank = rank;
    g->world = world;
    g->dp = dp;
    g->tp = tp;
    g->pp = pp;
    /* rank = (pp_index * dp + dp_index) * tp + tp_index */
    g->tp_rank = rank % tp;
    g->dp_rank = (rank / tp) % dp;
    g->pp_rank = rank / (tp * dp);

    sr_status st = SR_OK;
    MPI_Comm wdup = MPI_COMM_NULL, node = MPI_COMM_NULL;
    MPI_Comm dpc = MPI_COMM_NULL, tpc = MPI_COMM_NULL, ppc = MPI_COMM_NULL;
    int64_t chunk = max_chunk_from_env();

    GRID_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &wdup));
    MPI_Comm_set_errhandler(wdup, MPI_ERRORS_RETURN);
    GRID_MPI(MPI_Comm_split_type(wdup, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
    GRID_MPI(MPI_Comm_rank(node, &g->local_rank));
    MPI_Comm_free(&node);
    /* one split per axis, in this order on every rank; color = the other two
     * coordinates, key = the coordinate along the axis */
    GRID_MPI(MPI_Comm_split(wdup, g->pp_rank * tp + g->tp_rank, g->dp_rank, &dpc));
    GRID_MPI(MPI_Comm_split(wdup, g->pp_rank * dp + g->dp_rank, g->tp_rank, &tpc));
    GRID_MPI(MPI_Comm_split(wdup, g->dp_rank * tp + g->tp_rank, g->pp_rank, &ppc));

    /* the host helpers (barrier, double sums) of every communicator use MPI */
    g->world_comm = comm_new(wdup, "world", ops, timeout_s, rank, chunk, dev);
    if (g->world_comm) wdup = MPI_COMM_NULL;
    g->dp_comm = comm_new(dpc, "data", ops, timeout_s, rank, chunk, dev);
    if (g->dp_comm) dpc = MPI_COMM_NULL;
    g->tp_comm = comm_new(tpc, "tensor", ops, timeout_s, rank, chunk, dev);
    if (g->tp_comm) tpc = MPI_COMM_NULL;
    g->pp_comm = comm_new(ppc, "pipeline", ops, timeout_s, rank, chunk, dev);
    if (g->pp_comm) ppc = MPI_COMM_NULL;
    if (!g->world_comm || !g->dp_comm || !g->tp_comm || !g->pp_comm) {
        st = sr_seterr(SR_ERR_NOMEM, "rank %d: grid: out of memory for the communicators", rank);
        goto fail;
    }

    /* a rank on another backend would never join the others' set-up */
    {
        int mine[2] = {(int)backend, -(int)backend}, all[2];
        MPI_Request rq;
        GRID_MPI(MPI_Iallreduce(mine, all, 2, MPI_INT, MPI_MIN, g->world_comm->mpi, &rq));
        st = srcomm_mpi_bounded(g->world_comm, &rq, "the communication backend check",
                                timeout_s > 120 ? timeout_s : 120);
        if (st != SR_OK) goto fail;
        if (all[0] != -all[1]) {
            st = sr_seterr(SR_ERR_ARG,
                           "grid: the ranks disagree on the communication backend (%s on some, "
                           "%s on others); give every rank the same --comm (or SHARDC_COMM)",
                           sr_comm_backend_name((sr_comm_backend)all[0]),
                           sr_comm_backend_name((sr_comm_backend)-all[1]));
            goto fail;
        }
    }
    if (ops->open) {
        /* backend set-up is collective per group; after each group every rank
         * learns whether all succeeded, so a failure is an error everywhere
         * rather than a hang in the next group's set-up */
        double init_timeout = timeout_s > 120 ? timeout_s : 120;
        sr_comm *order[4] = {g->world_comm, g->dp_comm, g->tp_comm, g->pp_comm};
        for (int i = 0; i < 4; i++) {
            sr_status mine = ops->open(order[i], g->local_rank, init_timeout);
            char what[64];
            snprintf(what, sizeof what, "%s set-up of the %s group", ops->name, order[i]->name);
            st = agree(g->world_comm, mine, init_timeout, what);
            if (st != SR_OK) goto fail;
        }
        if (pp > 1 && ops->open_split) {
            /* SR_COMM_PP_CHANNELS=0 turns them off (the one pipeline
             * communicator, its transfers paired in groups); any rank's 0
             * counts, so that every rank makes the same splits */
            const char *e = getenv("SR_COMM_PP_CHANNELS");
            int want = !(e && !strcmp(e, "0")), all = 0;
            MPI_Request rq;
            GRID_MPI(MPI_Iallreduce(&want, &all, 1, MPI_INT, MPI_MIN, g->world_comm->mpi, &rq));
            st = srcomm_mpi_bounded(g->world_comm, &rq, "the pipeline channels check", init_timeout);
            if (st == SR_OK && all) st = open_channels(g, chunk, dev, init_timeout);
            if (st != SR_OK) goto fail;
        }
    }
    return SR_OK;

fail:
    {
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", sr_errmsg());
        if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
        if (ppc != MPI_COMM_NULL) MPI_Comm_free(&ppc);
        if (tpc != MPI_COMM_NULL) MPI_Comm_free(&tpc);
        if (dpc != MPI_COMM_NULL) MPI_Comm_free(&dpc);
        if (wdup != MPI_COMM_NULL) MPI_Comm_free(&wdup);
        sr_grid_free(g);
        return sr_seterr(st, "%s", msg);
    }
}

int sr_comm_size(const sr_comm *c)
{
    return c ? c->size : 0;
}

int sr_comm_rank(const sr_comm *c)
{
    return c ? c->rank : -1;
}

const char *sr_comm_name(const sr_comm *c)
{
    return c ? c->name : "none";
}

void sr_comm_set_step(sr_comm *c, int64_t step)
{
    if (c) c->step = step;
}

const sr_comm_stats *sr_comm_get_stats(const sr_comm *c)
{
    return c ? &c->stats : NULL;
}

void sr_comm_reset_stats(sr_comm *c)
{
    if (c) memset(&c->stats, 0, sizeof c->stats);
}

/* ------------------------------------------------------------------------ */
/* operations                                                                 */

/* [a, a+na) and [b, b+nb) (elements of es bytes) overlap */
static int overlap(const void *a, int64_t na, const void *b, int64_t nb, size_t es)
{
    if (!a || !b || na == 0 || nb == 0) return 0;
    uintptr_t a0 = (uintptr_t)a, a1 = a0 + (uintptr_t)na * es;
    uintptr_t b0 = (uintptr_t)b, b1 = b0 + (uintptr_t)nb * es;
    return a0 < b1 && b0 < a1;
}

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static sr_status bad_arg(const sr_comm *c, int op, const char *what, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    char lb[112];
    return sr_seterr(SR_ERR_ARG, "rank %d: %s%s on the %s group: %s", c->world_rank,
                     srcomm_op_name(op), label(what, lb, sizeof lb), c->name, why);
}

/* Common checks; peer: root or peer (checked against the group), -1 none. */
static sr_status check_args(const sr_comm *c, const char *fn, int op, const void *buf, int64_t n,
                            int peer, int tag, const char *what)
{
    if (!c) return sr_seterr(SR_ERR_ARG, "%s: the communicator is NULL", fn);
    if (c->broken) {
        char lb[112];
        return sr_seterr(SR_ERR_COMM,
                         "rank %d: %s%s on the %s group refused: the communicator is unusable "
                         "after an earlier failure (%s)",
                         c->world_rank, srcomm_op_name(op), label(what, lb, sizeof lb), c->name,
                         c->broken_msg);
    }
    if (n < 0) return bad_arg(c, op, what, "negative element count %lld", (long long)n);
    if (n > 0 && !buf) return bad_arg(c, op, what, "NULL buffer for %lld elements", (long long)n);
    if (peer != -1 && (peer < 0 || peer >= c->size))
        return bad_arg(c, op, what, "%s %d is outside the group (ranks 0..%d)",
                       op == SRC_BROADCAST ? "root" : "peer", peer, c->size - 1);
    if (op == SRC_SEND || op == SRC_RECV) {
        int *ub = NULL, flag = 0;
        MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
        long long tag_ub = flag && ub ? *ub : 32767;
        if (tag < 0 || tag > tag_ub)
            return bad_arg(c, op, what, "tag %d is outside 0..%lld (MPI_TAG_UB)", tag, tag_ub);
    }
    return SR_OK;
}

/* the process-wide group (sr_comm_group_begin/end): its depth, its
 * requests in launch order, and the backend whose group it opened */
static int group_depth;
static sr_req *group_head, **group_tail = &group_head;
static const srcomm_ops *group_ops;

/* frees the requests of c's deferred list that completed; failures stay
 * for sr_comm_settle to report */
static void reap(sr_comm *c)
{
    for (sr_req **p = &c->deferred; *p && !c->broken;) {
        sr_req *r = *p;
        if (r->ops->poll(r) && r->err == SR_OK) {
            *p = r->next;
            r->ops->release(r);
            free(r);
        } else {
            p = &r->next;
        }
    }
}

/* Starts the asynchronous calls of c's MPI path whose staging copies are
 * done, oldest first, stopping at the first still copying; force: waits
 * for the copies, up to and including `upto` (NULL: all). Issue order is
 * kept, since MPI matches collectives (and a peer's sends) in the order
 * they start. A failed start is reported by the call's wait. */
static void start_pending(sr_comm *c, const sr_req *upto, int force)
{
    while (c->starting) {
        sr_req *r = c->starting;
        if (!force && c->dev->copy_done(r->copy) == 0) return;
        c->starting = r->next_start;
        r->next_start = NULL;
        sr_status st = c->dev->copy_wait(r->copy);
        r->copy = NULL;
        if (st == SR_OK) st = r->ops->start(r, r->st_send, r->st_recv);
        if (st != SR_OK) { /* as launch cleans up a failed start */
            r->done = 1;
            r->err = st;
            r->comm_ok = 0;
            snprintf(r->detail, sizeof r->detail, "%s", sr_errmsg());
            if (r->inflight) r->ops->give_up(r);
            else r->ops->release(r);
            srcomm_unstage(r, r->inflight);
            r->cleaned = 1;
        }
        if (r == upto) return;
    }
}

/* every communicator's ready starts: a rank waiting for one transfer must
 * not hold back another that a peer waits for */
static void start_ready_all(void)
{
    for (sr_comm *c = live; c; c = c->next_live)
        if (c->starting) start_pending(c, NULL, 0);
}

/* MPI on device memory: the ops that copy device data to the host before
 * their MPI start (a broadcast only at its root; a recv copies nothing) */
static int copies_to_host(const sr_comm *c, int op, int peer)
{
    return op == SRC_ALLREDUCE || op == SRC_REDUCE_SCATTER || op == SRC_ALLGATHER || op == SRC_SEND ||
           (op == SRC_BROADCAST && c->rank == peer);
}

static sr_status launch(sr_comm *c, int op, sr_dtype dt, const void *send, void *recv, int64_t n,
                        int peer, int tag, const char *what, sr_req **req)
{
    if (req) *req = NULL;
    int moves = op < SRC_ALLREDUCE_DOUBLE; /* floats of the caller's, not a host helper */
    if (moves && group_depth > 0 && !req)
        return bad_arg(c, op, what, "a blocking call inside sr_comm_group_begin/end would wait "
                       "for itself; pass a request and wait after sr_comm_group_end");
    /* device memory: NCCL, or MPI through staging; host memory: plain MPI.
     * Zero elements stay on the backend (NCCL: nothing to queue), so ranks
     * that pass NULL and ranks that pass a pointer still match. */
    int on_dev = 1;
    if (moves && c->dev && n > 0) {
        on_dev = srcomm_on_device(c, op, send, recv);
        if (on_dev < 0)
            return bad_arg(c, op, what, "one buffer is in device memory and the other in host "
                           "memory; both must be in one");
    }
    if (c->deferred) reap(c);
    /* MPI through staging: an async call queues its copy to the host and
     * starts when it is done (start_pending); any other call but a recv
     * first starts those queued before it */
    int staged = moves && c->dev && n > 0 && on_dev && c->ops == &srcomm_mpi_ops;
    int async = staged && req && group_depth == 0 && c->dev->to_host_async && copies_to_host(c, op, peer);
    if (c->starting) start_pending(c, NULL, !async && op != SRC_RECV);
    sr_req *r = calloc(1, sizeof *r);
    if (!r)
        return sr_seterr(SR_ERR_NOMEM, "rank %d: out of memory for a %s request", c->world_rank,
                         srcomm_op_name(op));
    r->c = c;
    r->ops = !moves || !on_dev ? &srcomm_mpi_ops : c->ops;
    r->op = op;
    r->peer = peer;
    r->tag = tag;
    r->n = n;
    r->dt = dt;
    r->step = c->step;
    r->grouped = moves && group_depth > 0;
    snprintf(r->what, sizeof r->what, "%s", what ? what : "");
    sr_status st = SR_OK;
    if (staged) st = srcomm_stage_in(r, &send, &recv, async);
    if (st == SR_OK && r->copy) {
        r->st_send = send;
        r->st_recv = recv;
        sr_req **q = &c->starting;
        while (*q) q = &(*q)->next_start;
        *q = r;
    } else if (st == SR_OK) {
        st = r->ops->start(r, send, recv);
    }
    if (st != SR_OK) {
        if (r->inflight) {
            mark_broken(c, sr_errmsg());
            r->ops->give_up(r);
        } else {
            r->ops->release(r);
        }
        srcomm_unstage(r, r->inflight);
        free(r);
        return st;
    }
    if (op < 6) {
        int64_t bytes = n * (int64_t)sr_dtype_size(dt);
        if (op == SRC_REDUCE_SCATTER) bytes *= c->size;
        if (op == SRC_BROADCAST && c->rank != peer) bytes = 0;
        c->stats.calls[op]++;
        c->stats.bytes[op] += bytes;
    }
    if (r->copy) start_pending(c, NULL, 0); /* its copy may be done already */
    if (r->grouped) {
        *group_tail = r;
        group_tail = &r->next;
    }
    if (req) {
        *req = r;
        return SR_OK;
    }
    return sr_comm_wait(r);
}

/* an element type the _t forms take */
static sr_status check_dtype(const sr_comm *c, int op, sr_dtype t, const char *what)
{
    if (t == SR_F32 || t == SR_BF16) return SR_OK;
    return bad_arg(c, op, what, "unknown element type %d", (int)t);
}

sr_status sr_comm_allreduce_t(sr_comm *c, sr_dtype t, void *buf, int64_t n, const char *what, sr_req **req)
{
    if (req) *req = NULL;
    SR_CHECK(check_args(c, "sr_comm_allreduce", SRC_ALLREDUCE, buf, n, -1, 0, what));
    SR_CHECK(check_dtype(c, SRC_ALLREDUCE, t, what));
    return launch(c, SRC_ALLREDUCE, t, buf, buf, n, -1, 0, what, req);
}

sr_status sr_comm_reduce_scatter_t(sr_comm *c, sr_dtype t, const void *send, void *recv, int64_t n,
                                   const char *what, sr_req **req)
{
    if (req) *req = NULL;
    SR_CHECK(check_args(c, "sr_comm_reduce_scatter", SRC_REDUCE_SCATTER, send, n, -1, 0, what));
    SR_CHECK(check_dtype(c, SRC_REDUCE_SCATTER, t, what));
    size_t es = sr_dtype_size(t);
    if (n > 0 && !recv)
        return bad_arg(c, SRC_REDUCE_SCATTER, what, "NULL receive buffer for %lld elements",
                       (long long)n);
    if (n > INT64_MAX / c->size / (int64_t)es)
        return bad_arg(c, SRC_REDUCE_SCATTER, what, "%lld elements per rank is too large",
                       (long long)n);
    /* in place: this rank's block of send; any other overlap is an error */
    if (overlap(send, n * c->size, recv, n, es) && (const char *)recv != (const char *)send + c->rank * n * (int64_t)es)
        return bad_arg(c, SRC_REDUCE_SCATTER, what,
                       "the receive buffer overlaps the send buffer other than at this "
                       "rank's block (%d)",
                       c->rank);
    return launch(c, SRC_REDUCE_SCATTER, t, send, recv, n, -1, 0, what, req);
}

sr_status sr_comm_allgather_t(sr_comm *c, sr_dtype t, const void *send, void *recv, int64_t n,
                              const char *what, sr_req **req)
{
    if (req) *req = NULL;
    SR_CHECK(check_args(c, "sr_comm_allgather", SRC_ALLGATHER, send, n, -1, 0, what));
    SR_CHECK(check_dtype(c, SRC_ALLGATHER, t, what));
    size_t es = sr_dtype_size(t);
    if (n > 0 && !recv)
        return bad_arg(c, SRC_ALLGATHER, what, "NULL receive buffer for %lld elements",
                       (long long)n);
    if (n > INT64_MAX / c->size / (int64_t)es)
        return bad_arg(c, SRC_ALLGATHER, what, "%lld elements per rank is too large",
                       (long long)n);
    /* in place: send is this rank's block of recv */
    if (overlap(send, n, recv, n * c->size, es) && (const char *)send != (const char *)recv + c->rank * n * (int64_t)es)
        return bad_arg(c, SRC_ALLGATHER, what,
                       "the send buffer overlaps the receive buffer other than at this "
                       "rank's block (%d)",
                       c->rank);
    return launch(c, SRC_ALLGATHER, t, send, recv, n, -1, 0, what, req);
}

sr_status sr_comm_allreduce(sr_comm *c, float *buf, int64_t n, const char *what, sr_req **req)
{
    return sr_comm_allreduce_t(c, SR_F32, buf, n, what, req);
}

sr_status sr_comm_reduce_scatter(sr_comm *c, const float *send, float *recv, int64_t n,
                                 const char *what, sr_req **req)
{
    return sr_comm_reduce_scatter_t(c, SR_F32, send, recv, n, what, req);
}

sr_status sr_comm_allgather(sr_comm *c, const float *send, float *recv, int64_t n,
                            const char *what, sr_req **req)
{
    return sr_comm_allgather_t(c, SR_F32, send, recv, n, what, req);
}

sr_status sr_comm_broadcast(sr_comm *c, float *buf, int64_t n, int root, const char *what,
                            sr_req **req)
{
    if (req) *req = NULL;
    SR_CHECK(check_args(c, "sr_comm_broadcast", SRC_BROADCAST, buf, n, root, 0, what));
    return launch(c, SRC_BROADCAST, SR_F32, buf, buf, n, root, 0, what, req);
}

sr_status sr_comm_send_t(sr_comm *c, sr_dtype t, const void *buf, int64_t n, int peer, int tag,
                         const char *what, sr_req **req)
{
    if (req) *req = NULL;
    SR_CHECK(check_args(c, "sr_comm_send", SRC_SEND, buf, n, peer, tag, what));
    SR_CHECK(check_dtype(c, SRC_SEND, t, what));
    return launch(c, SRC_SEND, t, buf, NULL, n, peer, tag, what, req);
}

sr_status sr_comm_recv_t(sr_comm *c, sr_dtype t, void *buf, int64_t n, int peer, int tag, const char *what,
                         sr_req **req)
{
    if (req) *req = NULL;
    SR_CHECK(check_args(c, "sr_comm_recv", SRC_RECV, buf, n, peer, tag, what));
    SR_CHECK(check_dtype(c, SRC_RECV, t, what));
    return launch(c, SRC_RECV, t, NULL, buf, n, peer, tag, what, req);
}

sr_status sr_comm_send(sr_comm *c, const float *buf, int64_t n, int peer, int tag,
                       const char *what, sr_req **req)
{
    return sr_comm_send_t(c, SR_F32, buf, n, peer, tag, what, req);
}

sr_status sr_comm_recv(sr_comm *c, float *buf, int64_t n, int peer, int tag, const char *what,
                       sr_req **req)
{
    return sr_comm_recv_t(c, SR_F32, buf, n, peer, tag, what, req);
}

sr_status sr_comm_allreduce_double(sr_comm *c, double *x, int n)
{
    SR_CHECK(check_args(c, "sr_comm_allreduce_double", SRC_ALLREDUCE_DOUBLE, x, n, -1, 0, NULL));
    return launch(c, SRC_ALLREDUCE_DOUBLE, SR_F32, x, x, n, -1, 0, NULL, NULL);
}

sr_status sr_comm_barrier(sr_comm *c)
{
    SR_CHECK(check_args(c, "sr_comm_barrier", SRC_BARRIER, NULL, 0, -1, 0, NULL));
    return launch(c, SRC_BARRIER, SR_F32, NULL, NULL, 0, -1, 0, NULL, NULL);
}

int sr_comm_test(sr_req *r)
{
    if (!r || r->done) return 1;
    if (r->grouped) return 0; /* not launched before the group ends */
    if (r->copy) {
        start_pending(r->c, NULL, 0);
        if (r->copy) return 0;
        if (r->done) return 1; /* its start failed */
    }
    return r->ops->poll(r);
}

/* sr_comm_wait with the timeout counted from t0 */
static void unwatch(sr_req *r)
{
    if (!r->watched) return;
    for (sr_req **p = &r->c->watched; *p; p = &(*p)->next_watched)
        if (*p == r) {
            *p = r->next_watched;
            break;
        }
    r->watched = 0;
}

/* stops r for good after a timeout (NCCL: the abort lets the device's wait end), once */
static void give_up(sr_req *r)
{
    if (r->given_up) return;
    r->ops->give_up(r);
    srcomm_unstage(r, 1);
    r->given_up = 1;
}

/* polls r until it completes (SR_OK) or its communicator is broken or the
 * timeout since t0 passes: SR_ERR_COMM, said why, the communicator broken */
static sr_status until_done(sr_req *r, double t0)
{
    sr_comm *c = r->c;
    char desc[512], sp[48];
    long ns = 10000;
    if (r->copy) start_pending(c, r, 1);
    while (!r->done && (r->given_up || !r->ops->poll(r))) { /* given up: c is broken */
        start_ready_all();
        double el = srcomm_now() - t0;
        if (c->broken || el >= c->timeout_s) {
            describe(r, desc, sizeof desc);
            if (c->broken)
                sr_seterr(SR_ERR_COMM,
                          "rank %d: %s%s was abandoned: the communicator is unusable after an "
                          "earlier failure (%s)",
                          c->world_rank, desc, step_phrase(r->step, sp, sizeof sp), c->broken_msg);
            else
                sr_seterr(SR_ERR_COMM,
                          "rank %d: %s did not complete within %g s%s: another rank may have "
                          "died or hung",
                          c->world_rank, desc, c->timeout_s, step_phrase(r->step, sp, sizeof sp));
            mark_broken(c, sr_errmsg());
            return SR_ERR_COMM;
        }
        if (el >= srcomm_spin_s()) srcomm_backoff(&ns);
    }
    return SR_OK;
}

static sr_status wait_from(sr_req *r, double t0)
{
    sr_comm *c = r->c;
    char desc[512], sp[48];
    unwatch(r);
    if (until_done(r, t0) != SR_OK) {
        give_up(r);
        free(r);
        return SR_ERR_COMM;
    }
    sr_status st = r->err;
    if (st != SR_OK) {
        describe(r, desc, sizeof desc);
        sr_seterr(st, "rank %d: %s failed%s: %s", c->world_rank, desc,
                  step_phrase(r->step, sp, sizeof sp), r->detail);
        if (!r->comm_ok) mark_broken(c, sr_errmsg());
    } else {
        if (r->tmp) memcpy(r->tmp_dst, r->tmp, r->tmp_bytes);
        if (r->dev_dst) st = srcomm_stage_out(r);
    }
    if (!r->cleaned) {
        r->ops->release(r);
        srcomm_unstage(r, 0);
    }
    free(r);
    return st;
}

sr_status sr_comm_wait(sr_req *r)
{
    if (!r) return SR_OK;
    if (r->grouped)
        return sr_seterr(SR_ERR_STATE, "rank %d: %s '%s' on the %s group was waited on inside "
                         "its group: call sr_comm_group_end first", r->c->world_rank,
                         srcomm_op_name(r->op), r->what, r->c->name);
    return wait_from(r, srcomm_now());
}

/* the device's stream waits for r: 1, or 0 where it cannot */
static int order_stream(sr_req *r)
{
    sr_comm *c = r->c;
    void *stream = c->dev && !r->grouped && !r->done && !c->broken && r->ops->order ? c->dev->stream()
                                                                                    : NULL;
    return stream && r->ops->order(r, stream) == SR_OK;
}

int sr_comm_order_device(sr_req *r)
{
    if (!r) return 1;
    sr_comm *c = r->c;
    if (!order_stream(r)) return 0;
    /* the device now waits for r: a host wait for the device (which
     * sr_comm_settle_all precedes) waits for it, under the timeout */
    if (!r->watched) {
        r->watched = 1;
        r->t_wait = srcomm_now();
        r->next_watched = c->watched;
        c->watched = r;
    }
    return 1;
}

sr_status sr_comm_wait_device(sr_req *r)
{
    if (!r) return SR_OK;
    sr_comm *c = r->c;
    /* anything else, or a failure to order: the host wait orders it too */
    if (r->watched || !order_stream(r)) return sr_comm_wait(r);
    r->t_wait = srcomm_now();
    r->next = NULL;
    sr_req **p = &c->deferred;
    while (*p) p = &(*p)->next;
    *p = r;
    return SR_OK;
}

sr_status sr_comm_settle(sr_comm *c)
{
    sr_status first = SR_OK;
    char msg[1024] = "";
    while (c && c->deferred) {
        sr_req *r = c->deferred;
        c->deferred = r->next;
        sr_status st = wait_from(r, r->t_wait);
        if (st != SR_OK && first == SR_OK) {
            first = st;
            snprintf(msg, sizeof msg, "%s", sr_errmsg());
        }
    }
    /* the ones the device was ordered after: complete, or a timeout's error;
     * each stays its caller's to wait on (and free) */
    while (c && c->watched) {
        sr_req *r = c->watched;
        sr_status st = until_done(r, r->t_wait);
        unwatch(r);
        if (st != SR_OK) give_up(r);
        if (st != SR_OK && first == SR_OK) {
            first = st;
            snprintf(msg, sizeof msg, "%s", sr_errmsg());
        }
    }
    return first == SR_OK ? SR_OK : sr_seterr(first, "%s", msg);
}

sr_status sr_comm_settle_all(void)
{
    sr_status first = SR_OK;
    char msg[1024] = "";
    for (sr_comm *c = live; c; c = c->next_live) {
        sr_status st = sr_comm_settle(c);
        if (st != SR_OK && first == SR_OK) {
            first = st;
            snprintf(msg, sizeof msg, "%s", sr_errmsg());
        }
    }
    return first == SR_OK ? SR_OK : sr_seterr(first, "%s", msg);
}

sr_status sr_comm_group_begin(void)
{
    if (group_depth++ > 0) return SR_OK;
    group_head = NULL;
    group_tail = &group_head;
    /* only a backend with a live communicator opens its own group */
    group_ops = NULL;
    for (sr_comm *c = live; c && !group_ops; c = c->next_live)
        if (c->impl && c->ops->group_begin) group_ops = c->ops;
    sr_status st = group_ops ? group_ops->group_begin() : SR_OK;
    if (st != SR_OK) {
        group_depth = 0;
        group_ops = NULL;
    }
    return st;
}

sr_status sr_comm_group_end(void)
{
    if (group_depth == 0)
        return sr_seterr(SR_ERR_STATE, "sr_comm_group_end without sr_comm_group_begin");
    if (--group_depth > 0) return SR_OK;
    sr_req *members = group_head;
    group_head = NULL;
    group_tail = &group_head;
    sr_status st = group_ops ? group_ops->group_end(members) : SR_OK;
    group_ops = NULL;
    for (sr_req *r = members; r; r = r->next) r->grouped = 0;
    return st;
}

/* ------------------------------------------------------------------------ */
/* MPI backend                                                                */

/* r->impl holds the MPI_Status array of a recv (to check the sizes) */

static int64_t nchunks(int64_t n, int64_t chunk)
{
    return n == 0 ? 1 : (n + chunk - 1) / chunk;
}

static sr_status mpi_reserve(sr_req *r, int64_t k)
{
    if (k > INT_MAX) k = INT_MAX; /* Testall takes an int; unreachable with chunk >= 1e3 */
    if (k <= 1) {
        r->mreq = &r->inline1;
    } else {
        r->mreq = malloc((size_t)k * sizeof *r->mreq);
        if (!r->mreq)
            return sr_seterr(SR_ERR_NOMEM, "rank %d: out of memory for %lld MPI requests",
                             r->c->world_rank, (long long)k);
    }
    r->nmreq = 0;
    return SR_OK;
}

static sr_status mpi_start_fail(sr_req *r, const char *fn, int rc)
{
    char e[MPI_MAX_ERROR_STRING], desc[512];
    mpi_errstr(rc, e, sizeof e);
    describe(r, desc, sizeof desc);
    r->inflight = r->nmreq > 0;
    return sr_seterr(SR_ERR_COMM, "rank %d: %s: %s failed: %s", r->c->world_rank, desc, fn, e);
}

#define POST(fn, ...)                                                    \
    do {                                                                 \
        int rc_ = fn(__VA_ARGS__, &r->mreq[r->nmreq]);                   \
        if (rc_ != MPI_SUCCESS) return mpi_start_fail(r, #fn, rc_);      \
        r->nmreq++;                                                      \
    } while (0)

/* bf16 (as uint16_t) summed as NCCL sums ncclBfloat16: in float32, then
 * rounded to the nearest bf16, ties to even (a NaN stays a quiet NaN) */
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) {
        uint32_t ua = (uint32_t)a[i] << 16, ub = (uint32_t)b[i] << 16, u;
        float fa, fb, f;
        memcpy(&fa, &ua, 4);
        memcpy(&fb, &ub, 4);
        f = fa + fb;
        memcpy(&u, &f, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u) b[i] = (uint16_t)((u >> 16) | 0x40);
        else b[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
}

/* MPI's type and sum for r's elements (the bf16 sum made at first use;
 * MPI frees it at MPI_Finalize) */
static sr_status mpi_elem(sr_req *r, MPI_Datatype *t, MPI_Op *sum)
{
    static MPI_Op bf16_op = MPI_OP_NULL;
    *t = MPI_FLOAT;
    *sum = MPI_SUM;
    if (r->dt != SR_BF16) return SR_OK;
    if (bf16_op == MPI_OP_NULL) {
        int rc = MPI_Op_create(bf16_sum, 1, &bf16_op);
        if (rc != MPI_SUCCESS) return mpi_start_fail(r, "MPI_Op_create", rc);
    }
    *t = MPI_UINT16_T;
    *sum = bf16_op;
    return SR_OK;
}

static sr_status mpi_start(sr_req *r, const void *sendv, void *recvv)
{
    sr_comm *c = r->c;
    MPI_Comm m = c->mpi;
    const int64_t n = r->n, C = c->max_chunk, es = (int64_t)sr_dtype_size(r->dt);
    /* element offsets are scaled by es: floats or bf16 */
    const char *send = sendv;
    char *recv = recvv;
    const int size = c->size, me = c->rank;
    MPI_Datatype ET;
    MPI_Op SUM;
    SR_CHECK(mpi_elem(r, &ET, &SUM));

    switch (r->op) {
    case SRC_ALLREDUCE_DOUBLE:
        SR_CHECK(mpi_reserve(r, 1));
        POST(MPI_Iallreduce, MPI_IN_PLACE, recvv, (int)n, MPI_DOUBLE, MPI_SUM, m);
        return SR_OK;
    case SRC_BARRIER:
        SR_CHECK(mpi_reserve(r, 1));
        POST(MPI_Ibarrier, m);
        return SR_OK;
    case SRC_ALLREDUCE:
        SR_CHECK(mpi_reserve(r, nchunks(n, C)));
        for (int64_t off = 0; off == 0 || off < n; off += C) {
            int len = (int)(n - off < C ? n - off : C);
            POST(MPI_Iallreduce, MPI_IN_PLACE, recv ? recv + off * es : NULL, len, ET, SUM, m);
        }
        return SR_OK;
    case SRC_BROADCAST:
        SR_CHECK(mpi_reserve(r, nchunks(n, C)));
        for (int64_t off = 0; off == 0 || off < n; off += C) {
            int len = (int)(n - off < C ? n - off : C);
            POST(MPI_Ibcast, recv ? recv + off * es : NULL, len, ET, r->peer, m);
        }
        return SR_OK;
    case SRC_SEND:
        SR_CHECK(mpi_reserve(r, nchunks(n, C)));
        for (int64_t off = 0; off == 0 || off < n; off += C) {
            int len = (int)(n - off < C ? n - off : C);
            POST(MPI_Isend, send ? send + off * es : NULL, len, ET, r->peer, r->tag, m);
        }
        return SR_OK;
    case SRC_RECV: {
        int64_t k = nchunks(n, C);
        SR_CHECK(mpi_reserve(r, k));
        r->impl = calloc((size_t)k, sizeof(MPI_Status));
        if (!r->impl)
            return sr_seterr(SR_ERR_NOMEM, "rank %d: out of memory for %lld MPI statuses",
                             c->world_rank, (long long)k);
        for (int64_t off = 0; off == 0 || off < n; off += C) {
            int len = (int)(n - off < C ? n - off : C);
            POST(MPI_Irecv, recv ? recv + off * es : NULL, len, ET, r->peer, r->tag, m);
        }
        return SR_OK;
    }
    case SRC_REDUCE_SCATTER: {
        char *dst = recv;
        if (n > 0 && recv == send + (int64_t)me * n * es) {
            /* in place: MPI's MPI_IN_PLACE means something else here (input
             * in recv); reduce into a staging block, copied out on completion */
            r->tmp = malloc((size_t)(n * es));
            if (!r->tmp)
                return sr_seterr(SR_ERR_NOMEM, "rank %d: out of memory staging a %lld-element "
                                 "reduce-scatter", c->world_rank, (long long)n);
            r->tmp_dst = recv;
            r->tmp_bytes = (size_t)(n * es);
            dst = r->tmp;
        }
        if (n * size <= C) {
            SR_CHECK(mpi_reserve(r, 1));
            POST(MPI_Ireduce_scatter_block, send, dst, (int)n, ET, SUM, m);
            return SR_OK;
        }
        /* large: one reduce per (chunk, root), in the same order everywhere */
        SR_CHECK(mpi_reserve(r, nchunks(n, C) * size));
        for (int64_t off = 0; off < n; off += C) {
            int len = (int)(n - off < C ? n - off : C);
            for (int root = 0; root < size; root++)
                POST(MPI_Ireduce, send + ((int64_t)root * n + off) * es, root == me ? dst + off * es : NULL, len,
                     ET, SUM, root, m);
        }
        return SR_OK;
    }
    case SRC_ALLGATHER: {
        int inplace = n > 0 && send == recv + (int64_t)me * n * es;
        if (n * size <= C) {
            SR_CHECK(mpi_reserve(r, 1));
            POST(MPI_Iallgather, inplace ? MPI_IN_PLACE : send, (int)n, ET, recv, (int)n, ET, m);
            return SR_OK;
        }
        /* large: chunk j of every rank's block in one call, received through
         * a type of len elements whose extent is a whole block (n elements) */
        int64_t L = C / size > 0 ? C / size : 1;
        SR_CHECK(mpi_reserve(r, nchunks(n, L)));
        for (int64_t off = 0; off < n; off += L) {
            int len = (int)(n - off < L ? n - off : L);
            MPI_Datatype t0, t;
            int rc = MPI_Type_contiguous(len, ET, &t0);
            if (rc != MPI_SUCCESS) return mpi_start_fail(r, "MPI_Type_contiguous", rc);
            rc = MPI_Type_create_resized(t0, 0, (MPI_Aint)(n * es), &t);
            MPI_Type_free(&t0);
            if (rc != MPI_SUCCESS) return mpi_start_fail(r, "MPI_Type_create_resized", rc);
            rc = MPI_Type_commit(&t);
            if (rc != MPI_SUCCESS) {
                MPI_Type_free(&t);
                return mpi_start_fail(r, "MPI_Type_commit", rc);
            }
            rc = MPI_Iallgather(inplace ? MPI_IN_PLACE : send + off * es, len, ET, recv + off * es,
                                1, t, m, &r->mreq[r->nmreq]);
            MPI_Type_free(&t); /* freed when the pending call is done with it */
            if (rc != MPI_SUCCESS) return mpi_start_fail(r, "MPI_Iallgather", rc);
            r->nmreq++;
        }
        return SR_OK;
    }
    }
    return sr_seterr(SR_ERR_ARG, "rank %d: unknown communication op %d", c->world_rank, r->op);
}

static int mpi_poll(sr_req *r)
{
    if (r->done) return 1;
    int flag = 0;
    MPI_Status *stv = r->op == SRC_RECV ? r->impl : MPI_STATUSES_IGNORE;
    int rc = MPI_Testall(r->nmreq, r->mreq, &flag, stv);
    if (rc != MPI_SUCCESS) {
        char e[MPI_MAX_ERROR_STRING];
        if (rc == MPI_ERR_IN_STATUS && stv != MPI_STATUSES_IGNORE) {
            for (int i = 0; i < r->nmreq; i++)
                if (stv[i].MPI_ERROR != MPI_SUCCESS) {
                    rc = stv[i].MPI_ERROR;
                    break;
                }
        }
        mpi_errstr(rc, e, sizeof e);
        snprintf(r->detail, sizeof r->detail, "MPI_Testall: %.200s", e);
        r->err = SR_ERR_COMM;
        r->done = 1;
        return 1;
    }
    if (!flag) return 0;
    r->done = 1;
    r->err = SR_OK;
    if (r->op == SRC_RECV) {
        /* a shorter message than expected fits silently: check the sizes */
        int64_t got = 0;
        MPI_Datatype et;
        MPI_Op sum;
        (void)mpi_elem(r, &et, &sum); /* made when the recv started */
        for (int i = 0; i < r->nmreq; i++) {
            int cnt = 0;
            MPI_Get_count(&stv[i], et, &cnt);
            got += cnt;
        }
        if (got != r->n) {
            snprintf(r->detail, sizeof r->detail,
                     "received %lld %s but expected %lld: the sender's size differs",
                     (long long)got, r->dt == SR_BF16 ? "bf16 elements" : "floats", (long long)r->n);
            r->err = SR_ERR_COMM;
            r->comm_ok = 1; /* nothing is left pending */
        }
    }
    return 1;
}

static void mpi_release(sr_req *r)
{
    if (r->mreq != &r->inline1) free(r->mreq);
    r->mreq = NULL;
    free(r->impl);
    r->impl = NULL;
    free(r->tmp);
    r->tmp = NULL;
}

/* MPI cannot cancel a collective: the requests stay pending inside MPI and
 * may still write the staging buffer, which is therefore leaked. */
static void mpi_give_up(sr_req *r)
{
    if (r->mreq != &r->inline1) free(r->mreq);
    r->mreq = NULL;
    free(r->impl);
    r->impl = NULL;
    r->tmp = NULL;
}

const srcomm_ops srcomm_mpi_ops = {
    .name = "MPI",
    .start = mpi_start,
    .poll = mpi_poll,
    .give_up = mpi_give_up,
    .release = mpi_release,
};
