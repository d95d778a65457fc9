/* comm_nccl.c: the NCCL backend of the communication layer (sr_comm.h),
 * on device memory. Plain C against cuda_runtime.h and nccl.h; compiled in
 * (with SR_HAVE_NCCL) only where the CUDA toolkit and NCCL are found.
 *
 * Per communicator: the GPU local_rank % (visible devices), a ncclComm_t
 * over the group (unique id made on the group's rank 0 and broadcast over
 * the group's MPI communicator), and a dedicated stream. Each operation is
 * queued on that stream and followed by a cudaEvent; sr_comm_wait polls
 * cudaEventQuery (and ncclCommGetAsyncError) under the communicator's
 * timeout and, when it gives up, aborts the NCCL communicator so that the
 * GPU does not spin forever on a dead peer.
 *
 * Ordering with the compute stream (a grid with a sr_comm_device): the NCCL
 * stream is non-blocking; before each operation an event is recorded on
 * the compute stream (dev->stream()) and the NCCL stream waits for it, so
 * the collective reads what the kernels queued before the call wrote, with
 * no host wait. sr_comm_wait returns once the result is in device memory
 * (the host polls the completion event under the timeout);
 * sr_comm_wait_device (order()) only makes the compute stream wait for the
 * completion event. Without a device (sr_grid_init), the stream is created
 * with default flags, so it is ordered after work the caller queued on the
 * legacy default stream; work on other streams must be synchronized before
 * a call.
 *
 * Groups (sr_comm_group_begin/end): ncclGroupStart/ncclGroupEnd around the
 * members; their completion events are recorded after ncclGroupEnd, when
 * the members are actually queued.
 *
 * Two ranks of one group on one GPU: NCCL refuses them ("Duplicate GPU
 * detected", ncclInvalidUsage); set-up checks first (host name and PCI bus
 * id, gathered over MPI) and names the ranks and the way out (--comm mpi).
 *
 * Communicators are non-blocking (NCCL >= 2.14): set-up and every call may
 * answer ncclInProgress, which settle() polls under the same timeout, so a
 * peer that never arrives at ncclCommInitRank is an error, not a hang.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "../comm_impl.h"

#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
#define NONBLOCKING 1
#else
#define NONBLOCKING 0
#endif

typedef struct nccl_state {
    ncclComm_t comm;     /* NULL once aborted */
    cudaStream_t stream;
    cudaEvent_t ready;   /* recorded on the compute stream before each operation */
    int device;
} nccl_state;

/* what a rank should do when its group shares a GPU */
#define SHARED_GPU_HINT                                                                      \
    "NCCL needs one GPU per rank: run the program with --comm mpi (or SHARDC_COMM=mpi), or " \
    "start at most one rank per GPU"

/* "cudaSetDevice(s->device)" -> "cudaSetDevice" */
static const char *fname(const char *call, char *buf, size_t len)
{
    snprintf(buf, len, "%.*s", (int)strcspn(call, "("), call);
    return buf;
}

static sr_status cuda_fail(const sr_comm *c, const char *ctx, const char *call, cudaError_t e)
{
    char fn[64];
    return sr_seterr(SR_ERR_COMM, "rank %d: %s on the %s group (%d ranks): %s failed: %s",
                     c->world_rank, ctx, c->name, c->size, fname(call, fn, sizeof fn),
                     cudaGetErrorString(e));
}

static sr_status nccl_fail(const sr_comm *c, ncclComm_t comm, const char *ctx, const char *call,
                           ncclResult_t e)
{
    char fn[64];
    const char *last = comm ? ncclGetLastError(comm) : NULL;
    return sr_seterr(SR_ERR_COMM, "rank %d: %s on the %s group (%d ranks): %s failed: %s%s%s",
                     c->world_rank, ctx, c->name, c->size, fname(call, fn, sizeof fn),
                     ncclGetErrorString(e), last && *last ? " - " : "", last ? last : "");
}

#define CUDA_TRY(c, ctx, call)                                          \
    do {                                                                \
        cudaError_t e_ = (call);                                        \
        if (e_ != cudaSuccess) {                                        \
            st = cuda_fail((c), (ctx), #call, e_);                      \
            goto fail;                                                  \
        }                                                               \
    } while (0)

/* Waits while the communicator answers ncclInProgress, at most timeout_s. */
static ncclResult_t settle(ncclComm_t comm, double timeout_s, int *timed_out)
{
    double t0 = srcomm_now();
    long ns = 10000;
    *timed_out = 0;
    for (;;) {
        ncclResult_t state = ncclSuccess;
        ncclResult_t e = ncclCommGetAsyncError(comm, &state);
        if (e != ncclSuccess) return e;
        if (state != ncclInProgress) return state;
        if (srcomm_now() - t0 >= timeout_s) {
            *timed_out = 1;
            return ncclInProgress;
        }
        srcomm_backoff(&ns);
    }
}

/* NCCL refuses a communicator with two ranks on one GPU; find them first
 * (same host name and PCI bus id) and say what to do instead */
static sr_status check_gpu_per_rank(sr_comm *c, int device, double timeout_s)
{
    typedef struct {
        char host[96];
        char bus[32];
    } where;
    where me;
    memset(&me, 0, sizeof me);
    if (gethostname(me.host, sizeof me.host - 1) != 0) snprintf(me.host, sizeof me.host, "?");
    if (cudaDeviceGetPCIBusId(me.bus, (int)sizeof me.bus, device) != cudaSuccess) {
        cudaGetLastError();
        snprintf(me.bus, sizeof me.bus, "device %d", device);
    }
    where *all = calloc((size_t)c->size, sizeof *all);
    if (!all) return sr_seterr(SR_ERR_NOMEM, "rank %d: out of memory", c->world_rank);
    MPI_Request rq;
    int rc = MPI_Iallgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, c->mpi, &rq);
    sr_status st = rc == MPI_SUCCESS ? srcomm_mpi_bounded(c, &rq, "the GPU-per-rank check", timeout_s)
                                     : sr_seterr(SR_ERR_COMM, "rank %d: NCCL set-up of the %s group: "
                                                 "MPI_Iallgather failed", c->world_rank, c->name);
    for (int i = 0; st == SR_OK && i < c->size; i++)
        for (int j = i + 1; st == SR_OK && j < c->size; j++)
            if (!strcmp(all[i].host, all[j].host) && !strcmp(all[i].bus, all[j].bus))
                st = sr_seterr(SR_ERR_COMM,
                               "rank %d: NCCL set-up of the %s group (%d ranks): its ranks %d and %d "
                               "are both on GPU %s of %s; " SHARED_GPU_HINT,
                               c->world_rank, c->name, c->size, i, j, all[i].bus, all[i].host);
    free(all);
    return st;
}

/* a communicator's stream and its ordering event: ordered by events when
 * the compute stream is known, else after the legacy default stream
 * (default flags) */
static sr_status make_stream(sr_comm *c, nccl_state *s)
{
    sr_status st = SR_OK;
    const char *ctx = "NCCL set-up";
    CUDA_TRY(c, ctx, cudaStreamCreateWithFlags(&s->stream, c->dev ? cudaStreamNonBlocking : cudaStreamDefault));
    CUDA_TRY(c, ctx, cudaEventCreateWithFlags(&s->ready, cudaEventDisableTiming));
fail:
    return st;
}

static sr_status nccl_open(sr_comm *c, int local_rank, double init_timeout_s)
{
    sr_status st = SR_OK;
    const char *ctx = "NCCL set-up";
    nccl_state *s = calloc(1, sizeof *s);
    if (!s) return sr_seterr(SR_ERR_NOMEM, "rank %d: out of memory", c->world_rank);
    int ndev = 0;
    CUDA_TRY(c, ctx, cudaGetDeviceCount(&ndev));
    if (ndev < 1) {
        st = sr_seterr(SR_ERR_COMM, "rank %d: NCCL set-up of the %s group: no CUDA device is visible",
                       c->world_rank, c->name);
        goto fail;
    }
    s->device = local_rank % ndev;
    CUDA_TRY(c, ctx, cudaSetDevice(s->device));
    if (c->size > 1) {
        st = check_gpu_per_rank(c, s->device, init_timeout_s);
        if (st != SR_OK) goto fail;
    }

    /* the id travels with a flag, so that a failure on rank 0 does not leave
     * the others waiting for an id that never comes */
    struct {
        int ok;
        ncclUniqueId id;
    } boot;
    memset(&boot, 0, sizeof boot);
    ncclResult_t idres = ncclSuccess;
    if (c->rank == 0) {
        idres = ncclGetUniqueId(&boot.id);
        boot.ok = idres == ncclSuccess;
    }
    MPI_Request rq;
    int rc = MPI_Ibcast(&boot, (int)sizeof boot, MPI_BYTE, 0, c->mpi, &rq);
    if (rc != MPI_SUCCESS) {
        st = sr_seterr(SR_ERR_COMM, "rank %d: NCCL set-up of the %s group: MPI_Ibcast failed",
                       c->world_rank, c->name);
        goto fail;
    }
    st = srcomm_mpi_bounded(c, &rq, "the NCCL unique id broadcast", init_timeout_s);
    if (st != SR_OK) goto fail;
    if (!boot.ok) {
        if (c->rank == 0)
            st = nccl_fail(c, NULL, ctx, "ncclGetUniqueId", idres);
        else
            st = sr_seterr(SR_ERR_COMM,
                           "rank %d: NCCL set-up of the %s group: ncclGetUniqueId failed on the "
                           "group's rank 0",
                           c->world_rank, c->name);
        goto fail;
    }
    st = make_stream(c, s);
    if (st != SR_OK) goto fail;

    ncclResult_t e;
#if NONBLOCKING
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    e = ncclCommInitRankConfig(&s->comm, c->size, boot.id, c->rank, &cfg);
    if (e == ncclInProgress) {
        int timed_out;
        e = settle(s->comm, init_timeout_s, &timed_out);
        if (timed_out) {
            ncclCommAbort(s->comm);
            s->comm = NULL;
            st = sr_seterr(SR_ERR_COMM,
                           "rank %d: NCCL set-up of the %s group (%d ranks) did not complete "
                           "within %g s: another rank may have died or hung",
                           c->world_rank, c->name, c->size, init_timeout_s);
            goto fail;
        }
    }
    if (e != ncclSuccess) {
        st = nccl_fail(c, s->comm, ctx, "ncclCommInitRankConfig", e);
        goto fail_usage;
    }
#else
    e = ncclCommInitRank(&s->comm, c->size, boot.id, c->rank);
    if (e != ncclSuccess) {
        st = nccl_fail(c, NULL, ctx, "ncclCommInitRank", e);
        s->comm = NULL;
        goto fail_usage;
    }
#endif
    c->impl = s;
    return SR_OK;

fail_usage:
    /* what NCCL answers for two ranks on one GPU the check above missed */
    if (e == ncclInvalidUsage) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", sr_errmsg());
        st = sr_seterr(st, "%s (if ranks of the group share a GPU: " SHARED_GPU_HINT ")", msg);
    }
fail:
    if (s->comm) ncclCommAbort(s->comm);
    if (s->ready) cudaEventDestroy(s->ready);
    if (s->stream) cudaStreamDestroy(s->stream);
    free(s);
    return st;
}

#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
/* One part of a split of parent's communicator (ncclCommSplit: collective
 * over parent, c == NULL on a rank in no part), on parent's GPU with a
 * stream of its own. Bounded as the set-up is. */
static sr_status nccl_open_split(sr_comm *parent, sr_comm *c, int color, int key, double init_timeout_s)
{
    nccl_state *ps = parent->impl;
    sr_status st = SR_OK;
    if (!ps || !ps->comm)
        return sr_seterr(SR_ERR_COMM, "rank %d: NCCL set-up of the %s group's channels: its communicator is gone",
                         parent->world_rank, parent->name);
    nccl_state *s = c ? calloc(1, sizeof *s) : NULL;
    if (c && !s) st = sr_seterr(SR_ERR_NOMEM, "rank %d: out of memory", parent->world_rank);
    cudaError_t ce = cudaSetDevice(ps->device);
    if (ce != cudaSuccess) {
        free(s);
        return cuda_fail(parent, "NCCL set-up", "cudaSetDevice", ce);
    }
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t nc = NULL;
    /* a rank that failed above still joins, in no part, so that the others do not wait for it */
    ncclResult_t e = ncclCommSplit(ps->comm, s ? color : NCCL_SPLIT_NOCOLOR, key, &nc, &cfg);
    /* non-blocking: the split completes as the parent's operation (NCCL sets
     * newcomm then), and the new communicator settles after it */
    if (e == ncclInProgress) {
        int timed_out = 0;
        e = settle(ps->comm, init_timeout_s, &timed_out);
        if (e == ncclSuccess && nc) e = settle(nc, init_timeout_s, &timed_out);
        if (timed_out) {
            if (nc) ncclCommAbort(nc);
            free(s);
            st = sr_seterr(SR_ERR_COMM, "rank %d: NCCL set-up of the %s group's channels did not complete within "
                           "%g s: another rank may have died or hung", parent->world_rank, parent->name, init_timeout_s);
            /* its split is still in progress: no further operation, closed by abort, not finalize */
            parent->broken = 1;
            snprintf(parent->broken_msg, sizeof parent->broken_msg, "%s", sr_errmsg());
            return st;
        }
    }
    if (e != ncclSuccess) {
        st = nccl_fail(parent, nc, "NCCL set-up", "ncclCommSplit", e);
        if (nc) ncclCommAbort(nc);
        free(s);
        return st;
    }
    if (!s) return st;
    s->comm = nc;
    s->device = ps->device;
    st = make_stream(c, s);
    if (st != SR_OK) {
        ncclCommAbort(nc);
        if (s->ready) cudaEventDestroy(s->ready);
        if (s->stream) cudaStreamDestroy(s->stream);
        free(s);
        return st;
    }
    c->impl = s;
    return SR_OK;
}
#endif

static void nccl_close(sr_comm *c)
{
    nccl_state *s = c->impl;
    if (!s) return;
    cudaSetDevice(s->device);
    if (s->comm) {
        if (c->broken) {
            ncclCommAbort(s->comm);
        } else {
#if NONBLOCKING
            int timed_out = 0;
            ncclResult_t e = ncclCommFinalize(s->comm);
            if (e == ncclInProgress) e = settle(s->comm, c->timeout_s, &timed_out);
            if (e == ncclSuccess)
                ncclCommDestroy(s->comm);
            else
                ncclCommAbort(s->comm);
#else
            ncclCommDestroy(s->comm);
#endif
        }
    }
    if (s->ready) cudaEventDestroy(s->ready);
    if (s->stream) cudaStreamDestroy(s->stream);
    free(s);
    c->impl = NULL;
}

static sr_status nccl_start(sr_req *r, const void *send, void *recv)
{
    sr_comm *c = r->c;
    nccl_state *s = c->impl;
    sr_status st = SR_OK;
    const char *ctx = srcomm_op_name(r->op);
    size_t n = (size_t)r->n;
    cudaEvent_t ev = NULL;
    int queued = 0;
    if (!s || !s->comm)
        return sr_seterr(SR_ERR_COMM, "rank %d: %s on the %s group: the NCCL communicator is gone",
                         c->world_rank, ctx, c->name);
    CUDA_TRY(c, ctx, cudaSetDevice(s->device));
    /* after the kernels queued so far on the compute stream, without a host wait */
    cudaStream_t compute = c->dev ? (cudaStream_t)c->dev->stream() : NULL;
    if (compute) {
        CUDA_TRY(c, ctx, cudaEventRecord(s->ready, compute));
        CUDA_TRY(c, ctx, cudaStreamWaitEvent(s->stream, s->ready, 0));
    }
    /* every rank passes the same n; zero elements is nothing to move */
    if (n > 0) {
        ncclResult_t e = ncclSuccess;
        const char *call = "";
        /* ncclBfloat16 is 9 in every NCCL that has it (2.10 on); headers before 2.19 name it
         * only after cuda_bf16.h, which this C file does not include */
        ncclDataType_t et = r->dt == SR_BF16 ? (ncclDataType_t)9 : ncclFloat;
        switch (r->op) {
        case SRC_ALLREDUCE:
            call = "ncclAllReduce";
            e = ncclAllReduce(recv, recv, n, et, ncclSum, s->comm, s->stream);
            break;
        case SRC_REDUCE_SCATTER:
            call = "ncclReduceScatter";
            e = ncclReduceScatter(send, recv, n, et, ncclSum, s->comm, s->stream);
            break;
        case SRC_ALLGATHER:
            call = "ncclAllGather";
            e = ncclAllGather(send, recv, n, et, s->comm, s->stream);
            break;
        case SRC_BROADCAST:
            call = "ncclBroadcast";
            e = ncclBroadcast(recv, recv, n, et, r->peer, s->comm, s->stream);
            break;
        case SRC_SEND:
            call = "ncclSend";
            e = ncclSend(send, n, et, r->peer, s->comm, s->stream);
            break;
        case SRC_RECV:
            call = "ncclRecv";
            e = ncclRecv(recv, n, et, r->peer, s->comm, s->stream);
            break;
        default:
            return sr_seterr(SR_ERR_ARG, "rank %d: op %d is not an NCCL operation",
                             c->world_rank, r->op);
        }
        queued = 1;
        /* inside a group the call only records the operation: the group's end settles it */
        if (e == ncclInProgress && r->grouped) e = ncclSuccess;
        if (e == ncclInProgress) {
            int timed_out;
            e = settle(s->comm, c->timeout_s, &timed_out);
            if (timed_out) {
                r->inflight = 1;
                return sr_seterr(SR_ERR_COMM,
                                 "rank %d: %s on the %s group (%d ranks): %s was still being "
                                 "queued after %g s: another rank may have died or hung",
                                 c->world_rank, ctx, c->name, c->size, call, c->timeout_s);
            }
        }
        if (e != ncclSuccess) {
            r->inflight = 1; /* the communicator is in an unknown state */
            return nccl_fail(c, s->comm, ctx, call, e);
        }
    }
    CUDA_TRY(c, ctx, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    /* a group's members are queued by ncclGroupEnd: their events after it */
    if (!r->grouped) CUDA_TRY(c, ctx, cudaEventRecord(ev, s->stream));
    r->impl = ev;
    return SR_OK;

fail:
    if (ev) cudaEventDestroy(ev);
    r->inflight = queued;
    return st;
}

static int nccl_poll(sr_req *r)
{
    if (r->done) return 1;
    nccl_state *s = r->c->impl;
    cudaError_t ce = cudaEventQuery((cudaEvent_t)r->impl);
    if (ce == cudaSuccess) {
        r->done = 1;
        r->err = SR_OK;
        return 1;
    }
    if (ce != cudaErrorNotReady) {
        snprintf(r->detail, sizeof r->detail, "cudaEventQuery failed: %s", cudaGetErrorString(ce));
        r->err = SR_ERR_COMM;
        r->done = 1;
        return 1;
    }
    /* a peer's failure surfaces here before the event would ever complete */
    ncclResult_t state = ncclSuccess;
    if (s && s->comm && ncclCommGetAsyncError(s->comm, &state) == ncclSuccess &&
        state != ncclSuccess && state != ncclInProgress) {
        snprintf(r->detail, sizeof r->detail, "NCCL reported an asynchronous error: %s",
                 ncclGetErrorString(state));
        r->err = SR_ERR_COMM;
        r->done = 1;
        return 1;
    }
    return 0;
}

static void nccl_release(sr_req *r)
{
    if (r->impl) cudaEventDestroy((cudaEvent_t)r->impl);
    r->impl = NULL;
}

/* Aborting the communicator stops its kernels; the event can then go. */
static void nccl_give_up(sr_req *r)
{
    nccl_state *s = r->c->impl;
    if (s && s->comm) {
        ncclCommAbort(s->comm);
        s->comm = NULL;
    }
    nccl_release(r);
}

/* the compute stream waits for r's completion event; no host wait */
static sr_status nccl_order(sr_req *r, void *stream)
{
    nccl_state *s = r->c->impl;
    cudaError_t e = s ? cudaSetDevice(s->device) : cudaErrorInvalidValue;
    if (e == cudaSuccess) e = cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)r->impl, 0);
    if (e != cudaSuccess)
        return cuda_fail(r->c, srcomm_op_name(r->op), "cudaStreamWaitEvent", e);
    return SR_OK;
}

static sr_status nccl_group_begin(void)
{
    ncclResult_t e = ncclGroupStart();
    if (e != ncclSuccess)
        return sr_seterr(SR_ERR_COMM, "rank %d: ncclGroupStart failed: %s", sr_comm_world_rank(),
                         ncclGetErrorString(e));
    return SR_OK;
}

/* a member that cannot complete: its wait reports why */
static void fail_member(sr_req *r, const char *why)
{
    snprintf(r->detail, sizeof r->detail, "%s", why);
    r->err = SR_ERR_COMM;
    r->done = 1;
}

static sr_status nccl_group_end(sr_req *members)
{
    ncclResult_t e = ncclGroupEnd();
    sr_status st = SR_OK;
    char why[256] = "";
    if (e != ncclSuccess && e != ncclInProgress) {
        snprintf(why, sizeof why, "ncclGroupEnd failed: %s", ncclGetErrorString(e));
        st = sr_seterr(SR_ERR_COMM, "rank %d: %s", sr_comm_world_rank(), why);
    }
    for (sr_req *r = members; r; r = r->next) {
        if (r->ops != &srcomm_nccl_ops) continue;
        sr_comm *c = r->c;
        nccl_state *s = c->impl;
        if (st != SR_OK || !s || !s->comm) {
            fail_member(r, why[0] ? why : "the NCCL communicator is gone");
            continue;
        }
        /* non-blocking communicators finish queuing the group's work asynchronously */
        if (e == ncclInProgress) {
            int timed_out = 0;
            ncclResult_t x = settle(s->comm, c->timeout_s, &timed_out);
            if (x != ncclSuccess) {
                snprintf(why, sizeof why, "%s", timed_out ? "the group was still being queued after the timeout"
                                                           : ncclGetErrorString(x));
                st = sr_seterr(SR_ERR_COMM, "rank %d: ncclGroupEnd on the %s group: %s", c->world_rank,
                               c->name, why);
                fail_member(r, why);
                continue;
            }
        }
        cudaError_t ce = cudaSetDevice(s->device);
        if (ce == cudaSuccess) ce = cudaEventRecord((cudaEvent_t)r->impl, s->stream);
        if (ce != cudaSuccess) {
            snprintf(why, sizeof why, "cudaEventRecord failed: %s", cudaGetErrorString(ce));
            st = sr_seterr(SR_ERR_COMM, "rank %d: ncclGroupEnd on the %s group: %s", c->world_rank,
                           c->name, why);
            fail_member(r, why);
        }
    }
    return st;
}

const srcomm_ops srcomm_nccl_ops = {
    .name = "NCCL",
    .open = nccl_open,
    .close = nccl_close,
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
    .open_split = nccl_open_split,
#endif
    .start = nccl_start,
    .poll = nccl_poll,
    .give_up = nccl_give_up,
    .release = nccl_release,
    .order = nccl_order,
    .group_begin = nccl_group_begin,
    .group_end = nccl_group_end,
};
