/* nccl_emu.cpp: NCCL over MPI for the CUDA emulator (c/nccl.h), so that the
 * NCCL backend (runtime/cuda/comm_nccl.c, compiled a second time against the
 * emulator's headers) runs in tests without a GPU.
 *
 * What it keeps of NCCL's behaviour, because comm_nccl.c depends on it:
 *  - operations are stream work (cuda_emu.h "Streams"): queued on their
 *    stream after what was queued there before, started when they reach the
 *    head, complete when their MPI requests are; events recorded after them
 *    are not ready until then, and a stream that waits on such an event
 *    holds its kernels back;
 *  - a send is a rendezvous (MPI_Issend), and a stream runs one item at a
 *    time: a send and a recv queued outside a group on one stream, by two
 *    ranks that both send first, deadlock as they do on a GPU; inside
 *    ncclGroupStart/End they start together;
 *  - non-blocking communicators (ncclConfig_t.blocking = 0): set-up and each
 *    call answer ncclInProgress and ncclCommGetAsyncError settles them; a
 *    peer that never calls ncclCommInitRank leaves the others in progress;
 *  - ncclCommAbort drops the communicator's unfinished work (its streams go
 *    on) and makes every later call an error;
 *  - under the emulator's race check (EMU_RACECHECK, cuda_emu.h) a call is
 *    unordered with other streams' work while in flight: it works on copies,
 *    its output reads 0xff (NaN) until something is ordered after it, and
 *    another stream's kernel that changes its buffers meanwhile is an error.
 * Set-up: every rank of the world calls ncclCommInitRank the same number of
 * times in the same order (comm.c opens world, data, tensor, pipeline on
 * every rank); the ranks of one unique id find each other through an
 * all-gather over the world and get an MPI communicator of their own.
 * ncclCommSplit (the pipeline's channels) is the same over the parent's
 * ranks: an all-gather of (color, key), then a communicator for the ranks
 * of our color ordered by (key, parent rank), as MPI_Comm_split orders them.
 * A non-blocking split is the parent's operation in progress until every
 * rank of the parent has split, so a peer that never does leaves it in
 * progress (bounded by the caller's timeout), not a hang; a blocking one
 * waits, as NCCL's does.
 */
#include "cuda_emu.h"

/* the C API only (Open MPI and MPICH add C++ bindings for C++ otherwise) */
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <string>
#include <vector>

#include "c/nccl.h"

struct ncclComm {
    MPI_Comm mpi = MPI_COMM_NULL;
    int rank = 0, nranks = 0;
    bool blocking = true;
    bool aborted = false;
    ncclResult_t err = ncclSuccess; /* the asynchronous error, once there is one */
    std::string last;               /* ncclGetLastError */
    /* set-up in progress: the world all-gather of (key, rank, nranks) */
    bool initializing = false;
    MPI_Request init_req = MPI_REQUEST_NULL;
    long long key[2] = {0, 0};
    std::vector<long long> all;
    int pending = 0; /* queued operations not yet complete */
    bool finalizing = false;
    /* a split of this communicator in progress: the all-gather of (color, key) */
    bool splitting = false;
    MPI_Request split_req = MPI_REQUEST_NULL;
    int split_mine[2] = {0, 0};
    std::vector<int> split_all;
    ncclComm_t *split_out = nullptr; /* the caller's newcomm, set once the split is over */
    bool split_blocking = true;
};

namespace {

MPI_Comm world = MPI_COMM_NULL; /* a dup of MPI_COMM_WORLD for the set-up all-gathers */
int next_id = 0;

ncclResult_t fail(ncclComm_t c, ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
ncclResult_t fail(ncclComm_t c, ncclResult_t r, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (c) c->last = buf;
    return r;
}

/* the MPI communicator of members (ranks of parent, in their new order), errors returned:
 * collective over the members only */
bool comm_of(MPI_Comm parent, const std::vector<int> &members, int tag, MPI_Comm *out)
{
    MPI_Group pg, g;
    MPI_Comm_group(parent, &pg);
    MPI_Group_incl(pg, (int)members.size(), members.data(), &g);
    *out = MPI_COMM_NULL;
    int rc = MPI_Comm_create_group(parent, g, tag, out);
    MPI_Group_free(&g);
    MPI_Group_free(&pg);
    if (rc != MPI_SUCCESS || *out == MPI_COMM_NULL) return false;
    MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
    return true;
}

/* the set-up's second half, once the all-gather is in: the ranks with our key */
ncclResult_t finish_init(ncclComm_t c)
{
    int wsize = 0;
    MPI_Comm_size(world, &wsize);
    std::vector<int> members((size_t)c->nranks, -1);
    for (int w = 0; w < wsize; w++) {
        const long long *x = &c->all[(size_t)w * 4];
        if (x[0] != c->key[0] || x[1] != c->key[1]) continue;
        int r = (int)x[2];
        if (x[3] != c->nranks || r < 0 || r >= c->nranks || members[(size_t)r] >= 0)
            return fail(c, ncclInvalidArgument, "ncclCommInitRank: ranks of one unique id disagree on the size "
                        "(%lld vs %d) or share rank %d", x[3], c->nranks, r);
        members[(size_t)r] = w;
    }
    for (int r = 0; r < c->nranks; r++)
        if (members[(size_t)r] < 0)
            return fail(c, ncclInvalidUsage, "ncclCommInitRank: rank %d of %d never joined", r, c->nranks);
    if (!comm_of(world, members, (int)(c->key[1] & 0x7fff), &c->mpi))
        return fail(c, ncclSystemError, "ncclCommInitRank: MPI_Comm_create_group failed");
    return ncclSuccess;
}

/* whether q (a set-up's or a split's all-gather) is over, waiting for it if block */
static bool gathered(MPI_Request *q, bool block)
{
    int done = 1;
    if (block) MPI_Wait(q, MPI_STATUS_IGNORE);
    else MPI_Test(q, &done, MPI_STATUS_IGNORE);
    return done != 0;
}

/* advances a set-up in progress; true once it is over (c->err says how) */
bool init_progress(ncclComm_t c, bool block)
{
    if (!c->initializing) return true;
    if (!gathered(&c->init_req, block)) return false;
    c->initializing = false;
    c->err = finish_init(c);
    std::vector<long long>().swap(c->all); /* the all-gather's answer is not needed after */
    return true;
}

/* the split's second half, once every rank's (color, key) is in: our color's
 * communicator, its ranks ordered by (key, parent rank) */
ncclResult_t finish_split(ncclComm_t p)
{
    int color = p->split_mine[0];
    if (color < 0) return ncclSuccess;
    std::vector<std::pair<int, int>> order; /* (key, parent rank) */
    for (int r = 0; r < p->nranks; r++)
        if (p->split_all[(size_t)r * 2] == color) order.emplace_back(p->split_all[(size_t)r * 2 + 1], r);
    std::sort(order.begin(), order.end());
    std::vector<int> members;
    for (const auto &o : order) members.push_back(o.second);
    MPI_Comm m;
    /* collective over our color's ranks only, each past the all-gather */
    if (!comm_of(p->mpi, members, color & 0x7fff, &m))
        return fail(p, ncclSystemError, "ncclCommSplit: MPI_Comm_create_group failed");
    ncclComm_t c = new ncclComm;
    c->mpi = m;
    MPI_Comm_rank(m, &c->rank);
    MPI_Comm_size(m, &c->nranks);
    c->blocking = p->split_blocking;
    *p->split_out = c;
    return ncclSuccess;
}

/* advances a split of p in progress; true once it is over (a failure in p->err) */
bool split_progress(ncclComm_t p, bool block)
{
    if (!p->splitting) return true;
    if (!gathered(&p->split_req, block)) return false;
    p->splitting = false;
    ncclResult_t r = finish_split(p);
    if (r != ncclSuccess) p->err = r;
    std::vector<int>().swap(p->split_all);
    return true;
}

ncclResult_t check_comm(ncclComm_t c, const char *call)
{
    if (!c) return ncclInvalidArgument;
    if (c->aborted) return fail(c, ncclInvalidUsage, "%s on an aborted communicator", call);
    if (c->initializing) return fail(c, ncclInvalidUsage, "%s before the communicator's set-up completed", call);
    if (c->splitting) return fail(c, ncclInvalidUsage, "%s before the communicator's split completed", call);
    if (c->err != ncclSuccess) return c->err;
    return ncclSuccess;
}

MPI_Datatype mpi_type(ncclDataType_t t)
{
    return t == ncclDouble ? MPI_DOUBLE : t == ncclBfloat16 ? MPI_UINT16_T : MPI_FLOAT;
}
size_t type_size(ncclDataType_t t) { return t == ncclDouble ? 8 : t == ncclBfloat16 ? 2 : 4; }

/* ncclSum of ncclBfloat16: each pair added in float, the sum rounded to bf16 */
void bf16_add(void *in, void *inout, int *len, MPI_Datatype *)
{
    const __nv_bfloat16 *a = (const __nv_bfloat16 *)in;
    __nv_bfloat16 *b = (__nv_bfloat16 *)inout;
    for (int i = 0; i < *len; i++) b[i] = __float2bfloat16(__bfloat162float(a[i]) + __bfloat162float(b[i]));
}
MPI_Op sum_op(ncclDataType_t t)
{
    static MPI_Op bf16 = MPI_OP_NULL;
    if (t != ncclBfloat16) return MPI_SUM;
    if (bf16 == MPI_OP_NULL) MPI_Op_create(bf16_add, 1, &bf16);
    return bf16;
}

/* one NCCL call */
struct Call {
    enum Kind { ALLREDUCE, REDUCE_SCATTER, ALLGATHER, BROADCAST, SEND, RECV } kind;
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t type;
    int peer; /* root or peer */
    ncclComm_t comm;
    cudaStream_t stream;
};

/* a byte range [lo, hi) */
struct Span {
    const char *lo = nullptr, *hi = nullptr;
    bool empty() const { return hi <= lo; }
};
Span span(const void *p, size_t n) { return Span{(const char *)p, (const char *)p + n}; }
/* a minus b: at most two pieces */
void subtract(Span a, Span b, std::vector<Span> &out)
{
    if (a.empty()) return;
    if (b.empty() || b.hi <= a.lo || b.lo >= a.hi) {
        out.push_back(a);
        return;
    }
    if (a.lo < b.lo) out.push_back(Span{a.lo, b.lo});
    if (b.hi < a.hi) out.push_back(Span{b.hi, a.hi});
}

const char *kind_name(int k)
{
    static const char *n[] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclBroadcast", "ncclSend",
                              "ncclRecv"};
    return n[k];
}

/* One call in flight. MPI works on copies: in_copy holds what the call
 * reads (taken when it starts), out_copy receives its result, copied into
 * the call's output when the call completes. Under the race check
 * (cuda_emu.h) the output is 0xff meanwhile, the result lands only once
 * something is ordered after the call, and the input, where it is not also
 * the output, must keep the bytes the call took. */
struct Flight {
    Span in, out;                 /* the call's input and output in device memory */
    std::vector<char> in_copy, out_copy;
    std::vector<Span> poisoned;   /* the output (less an in-place all-gather's own block) */
    std::vector<Span> kept;       /* the input less the output */
};

/* the calls of one stream in one group (or a lone call): stream work */
struct Ops : emu::StreamWork {
    std::vector<Call> calls;
    std::vector<Flight> fl;
    std::vector<MPI_Request> reqs;
    bool failed = false, mpi_done = false;
    ~Ops() override
    {
        for (Call &c : calls) c.comm->pending--;
    }
    void start() override
    {
        fl.resize(calls.size());
        for (size_t i = 0; i < calls.size(); i++) {
            Call &c = calls[i];
            Flight &f = fl[i];
            if (c.comm->aborted) continue;
            size_t es = type_size(c.type), n = c.count * es, all = n * (size_t)c.comm->nranks;
            bool root = c.kind == Call::BROADCAST && c.comm->rank == c.peer;
            switch (c.kind) {
            case Call::ALLREDUCE: f.in = span(c.send, n), f.out = span(c.recv, n); break;
            case Call::REDUCE_SCATTER: f.in = span(c.send, all), f.out = span(c.recv, n); break;
            case Call::ALLGATHER: f.in = span(c.send, n), f.out = span(c.recv, all); break;
            case Call::BROADCAST: f.in = root ? span(c.send, n) : Span{}, f.out = span(c.recv, n); break;
            case Call::SEND: f.in = span(c.send, n); break;
            case Call::RECV: f.out = span(c.recv, n); break;
            }
            f.in_copy.assign(f.in.lo, f.in.hi);
            f.out_copy.assign((size_t)(f.out.hi - f.out.lo), 0);
            if (c.kind == Call::ALLGATHER) subtract(f.out, f.in, f.poisoned); /* in place: its own block stays */
            else if (!f.out.empty()) f.poisoned.push_back(f.out);
            if (!f.in.empty()) f.kept.push_back(f.in);
            for (const Span &p : f.poisoned) {
                std::vector<Span> rest;
                for (const Span &k : f.kept) subtract(k, p, rest);
                f.kept.swap(rest);
            }
            if (emu::racecheck())
                for (const Span &p : f.poisoned) memset((char *)p.lo, 0xff, (size_t)(p.hi - p.lo));
            MPI_Request rq = MPI_REQUEST_NULL;
            MPI_Datatype t = mpi_type(c.type);
            int cnt = (int)c.count, rc = MPI_SUCCESS;
            char *in = f.in_copy.data(), *out = f.out_copy.data();
            switch (c.kind) {
            case Call::ALLREDUCE: rc = MPI_Iallreduce(in, out, cnt, t, sum_op(c.type), c.comm->mpi, &rq); break;
            case Call::REDUCE_SCATTER:
                rc = MPI_Ireduce_scatter_block(in, out, cnt, t, sum_op(c.type), c.comm->mpi, &rq);
                break;
            case Call::ALLGATHER: rc = MPI_Iallgather(in, cnt, t, out, cnt, t, c.comm->mpi, &rq); break;
            case Call::BROADCAST:
                if (root) memcpy(out, in, n);
                rc = MPI_Ibcast(out, cnt, t, c.peer, c.comm->mpi, &rq);
                break;
            case Call::SEND: rc = MPI_Issend(in, cnt, t, c.peer, 0, c.comm->mpi, &rq); break;
            case Call::RECV: rc = MPI_Irecv(out, cnt, t, c.peer, 0, c.comm->mpi, &rq); break;
            }
            if (rc != MPI_SUCCESS) {
                c.comm->err = ncclSystemError;
                fail(c.comm, ncclSystemError, "an MPI call of the emulated NCCL failed");
                failed = true;
            }
            reqs.push_back(rq);
        }
    }
    std::string race() override
    {
        if (!emu::racecheck()) return std::string();
        for (size_t i = 0; i < fl.size(); i++) {
            const Flight &f = fl[i];
            const char *what = nullptr, *at = nullptr, *base = nullptr;
            for (const Span &k : f.kept)
                for (const char *p = k.lo; p < k.hi && !what; p++)
                    if (*p != f.in_copy[(size_t)(p - f.in.lo)]) what = "input", at = p, base = f.in.lo;
            for (const Span &p : f.poisoned)
                for (const char *q = p.lo; q < p.hi && !what; q++)
                    if ((unsigned char)*q != 0xff) what = "output", at = q, base = f.out.lo;
            if (!what) continue;
            char buf[256];
            snprintf(buf, sizeof buf, "byte %zu of the %s of %s (%zu elements, rank %d of %d)", (size_t)(at - base),
                     what, kind_name(calls[i].kind), calls[i].count, calls[i].comm->rank, calls[i].comm->nranks);
            return buf;
        }
        return std::string();
    }
    bool test() override
    {
        if (failed) return true;
        for (Call &c : calls)
            if (c.comm->aborted) return true; /* its kernels stop: the stream goes on */
        if (!mpi_done) {
            int done = 0;
            if (MPI_Testall((int)reqs.size(), reqs.data(), &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
                for (Call &c : calls) c.comm->err = ncclRemoteError;
                return true;
            }
            mpi_done = done != 0;
        }
        if (!mpi_done) return false;
        bool closing = false;
        for (Call &c : calls) closing |= c.comm->finalizing;
        if (emu::racecheck() && !wanted && !closing) return false;
        std::string r = raced ? std::string() : race();
        if (!r.empty()) {
            std::string msg = "a stream race: " + r + " changed while it was in flight, by device work that "
                              "nothing ordered after it (an event recorded after it and waited for, or a "
                              "synchronization); on a GPU the result would depend on timing";
            emu::set_last_error(cudaErrorLaunchFailure, msg.c_str());
        }
        for (Flight &f : fl)
            if (!f.out.empty()) memcpy((char *)f.out.lo, f.out_copy.data(), f.out_copy.size());
        return true;
    }
};

int group_depth = 0;
std::vector<Call> group_calls;

/* queues calls (all on one stream) as one piece of stream work */
void enqueue(std::vector<Call> calls)
{
    Ops *w = new Ops;
    w->calls = std::move(calls);
    for (Call &c : w->calls) c.comm->pending++;
    emu::stream_enqueue(w->calls[0].stream, w);
}

ncclResult_t submit(const Call &c, const char *name)
{
    ncclResult_t r = check_comm(c.comm, name);
    if (r != ncclSuccess) return r;
    if (c.type != ncclFloat && c.type != ncclDouble && c.type != ncclBfloat16)
        return fail(c.comm, ncclInvalidArgument, "%s: the emulated NCCL moves float, double and bfloat16 only", name);
    if ((c.kind == Call::SEND || c.kind == Call::RECV || c.kind == Call::BROADCAST) &&
        (c.peer < 0 || c.peer >= c.comm->nranks))
        return fail(c.comm, ncclInvalidArgument, "%s: peer %d is not a rank of %d", name, c.peer, c.comm->nranks);
    if (group_depth > 0) {
        group_calls.push_back(c);
        return ncclSuccess;
    }
    enqueue(std::vector<Call>{c});
    return c.comm->blocking ? ncclSuccess : ncclInProgress;
}

} /* namespace */

extern "C" {

ncclResult_t emu_ncclGetUniqueId(ncclUniqueId *id)
{
    int wr = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &wr);
    memset(id, 0, sizeof *id);
    long long key[2] = {(long long)wr + 1, (long long)getpid() * 4096 + ++next_id};
    memcpy(id->internal, key, sizeof key);
    return ncclSuccess;
}

ncclResult_t emu_ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                        ncclConfig_t *config)
{
    *comm = nullptr;
    if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    if (world == MPI_COMM_NULL) {
        MPI_Comm_dup(MPI_COMM_WORLD, &world);
        MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN);
    }
    ncclComm_t c = new ncclComm;
    c->rank = rank;
    c->nranks = nranks;
    c->blocking = !config || config->blocking != 0;
    memcpy(c->key, id.internal, sizeof c->key);
    int wsize = 0;
    MPI_Comm_size(world, &wsize);
    c->all.assign((size_t)wsize * 4, 0);
    long long mine[4] = {c->key[0], c->key[1], rank, nranks};
    if (MPI_Iallgather(mine, 4, MPI_LONG_LONG, c->all.data(), 4, MPI_LONG_LONG, world, &c->init_req) !=
        MPI_SUCCESS) {
        delete c;
        return ncclSystemError;
    }
    c->initializing = true;
    *comm = c;
    if (!c->blocking) return init_progress(c, false) ? c->err : ncclInProgress;
    init_progress(c, true);
    return c->err;
}

ncclResult_t emu_ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    return emu_ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

/* collective over the parent (file comment): a non-blocking split answers
 * ncclInProgress as NCCL does and is the parent's operation until every
 * rank of the parent has split (ncclCommGetAsyncError on the parent
 * advances it); *newcomm is set then, NULL for NCCL_SPLIT_NOCOLOR */
ncclResult_t emu_ncclCommSplit(ncclComm_t parent, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config)
{
    bool blocking = config ? config->blocking != 0 : parent && parent->blocking;
    *newcomm = nullptr;
    ncclResult_t r = check_comm(parent, "ncclCommSplit");
    if (r != ncclSuccess) return r;
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
        return fail(parent, ncclInvalidArgument, "ncclCommSplit: color %d is neither >= 0 nor NCCL_SPLIT_NOCOLOR",
                    color);
    parent->split_mine[0] = color < 0 ? -1 : color;
    parent->split_mine[1] = key;
    parent->split_all.assign((size_t)parent->nranks * 2, 0);
    parent->split_out = newcomm;
    parent->split_blocking = blocking;
    if (MPI_Iallgather(parent->split_mine, 2, MPI_INT, parent->split_all.data(), 2, MPI_INT, parent->mpi,
                       &parent->split_req) != MPI_SUCCESS)
        return fail(parent, ncclSystemError, "ncclCommSplit: MPI_Iallgather failed");
    parent->splitting = true;
    if (!blocking) return split_progress(parent, false) ? parent->err : ncclInProgress;
    split_progress(parent, true);
    return parent->err;
}

ncclResult_t emu_ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *state)
{
    if (!c || !state) return ncclInvalidArgument;
    emu::stream_progress();
    if (!init_progress(c, false) || !split_progress(c, false)) *state = ncclInProgress;
    else if (c->finalizing && c->pending > 0 && c->err == ncclSuccess) *state = ncclInProgress;
    else *state = c->err;
    return ncclSuccess;
}

ncclResult_t emu_ncclCommFinalize(ncclComm_t c)
{
    ncclResult_t r = check_comm(c, "ncclCommFinalize");
    if (r != ncclSuccess) return r;
    c->finalizing = true;
    emu::stream_progress();
    return c->pending > 0 ? ncclInProgress : ncclSuccess;
}

ncclResult_t emu_ncclCommDestroy(ncclComm_t c)
{
    if (!c) return ncclInvalidArgument;
    if (c->pending > 0) return emu_ncclCommAbort(c);
    if (c->mpi != MPI_COMM_NULL) MPI_Comm_free(&c->mpi);
    delete c;
    return ncclSuccess;
}

ncclResult_t emu_ncclCommAbort(ncclComm_t c)
{
    if (!c) return ncclInvalidArgument;
    /* kept: queued work still names it (and its MPI requests may still complete) */
    c->aborted = true;
    /* a split in progress is dropped: its newcomm, the caller's, is never written (the
     * all-gather's request stays pending, as NCCL's abandoned split does) */
    c->splitting = false;
    c->split_out = nullptr;
    emu::stream_progress();
    return ncclSuccess;
}

const char *emu_ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    }
    return "unknown result code";
}

const char *emu_ncclGetLastError(ncclComm_t c) { return c ? c->last.c_str() : ""; }

ncclResult_t emu_ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream)
{
    if (op != ncclSum) return fail(comm, ncclInvalidArgument, "ncclAllReduce: the emulated NCCL sums only");
    return submit(Call{Call::ALLREDUCE, send, recv, count, type, 0, comm, stream}, "ncclAllReduce");
}

ncclResult_t emu_ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t type,
                                   ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    if (op != ncclSum) return fail(comm, ncclInvalidArgument, "ncclReduceScatter: the emulated NCCL sums only");
    return submit(Call{Call::REDUCE_SCATTER, send, recv, recvcount, type, 0, comm, stream}, "ncclReduceScatter");
}

ncclResult_t emu_ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t type,
                               ncclComm_t comm, cudaStream_t stream)
{
    return submit(Call{Call::ALLGATHER, send, recv, sendcount, type, 0, comm, stream}, "ncclAllGather");
}

ncclResult_t emu_ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type, int root,
                               ncclComm_t comm, cudaStream_t stream)
{
    return submit(Call{Call::BROADCAST, send, recv, count, type, root, comm, stream}, "ncclBroadcast");
}

ncclResult_t emu_ncclSend(const void *send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                          cudaStream_t stream)
{
    return submit(Call{Call::SEND, send, nullptr, count, type, peer, comm, stream}, "ncclSend");
}

ncclResult_t emu_ncclRecv(void *recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                          cudaStream_t stream)
{
    return submit(Call{Call::RECV, nullptr, recv, count, type, peer, comm, stream}, "ncclRecv");
}

ncclResult_t emu_ncclGroupStart(void)
{
    group_depth++;
    return ncclSuccess;
}

/* the group's calls start together: one piece of stream work per stream */
ncclResult_t emu_ncclGroupEnd(void)
{
    if (group_depth == 0) return ncclInvalidUsage;
    if (--group_depth > 0) return ncclSuccess;
    std::vector<Call> calls;
    calls.swap(group_calls);
    bool nonblocking = false;
    while (!calls.empty()) {
        cudaStream_t s = calls[0].stream;
        std::vector<Call> mine, rest;
        for (Call &c : calls) (c.stream == s ? mine : rest).push_back(c);
        for (Call &c : mine) nonblocking |= !c.comm->blocking;
        enqueue(std::move(mine));
        calls.swap(rest);
    }
    return nonblocking ? ncclInProgress : ncclSuccess;
}

} /* extern "C" */
