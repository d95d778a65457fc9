/* comm_impl.h: internals shared by the communication layer's files
 * (runtime/comm.c: interface, grid, MPI backend; runtime/cuda/comm_nccl.c:
 * NCCL backend). Not installed, not part of libshardrt's interface.
 *
 * A communicator always owns an MPI communicator (its group; used for the
 * NCCL bootstrap, barriers and double reductions whatever the backend) and
 * points at the backend's table of operations. A request records what was
 * launched, so that a timeout message can name it, plus the backend's handles.
 */
#ifndef SR_COMM_IMPL_H
#define SR_COMM_IMPL_H

#include <mpi.h>

#include "sr_comm.h"

/* Operations, in the order of the sr_comm_stats arrays; the last two are
 * host-side helpers (MPI whatever the backend) and are not counted. */
enum {
    SRC_ALLREDUCE = 0,
    SRC_REDUCE_SCATTER,
    SRC_ALLGATHER,
    SRC_BROADCAST,
    SRC_SEND,
    SRC_RECV,
    SRC_ALLREDUCE_DOUBLE,
    SRC_BARRIER
};

typedef struct srcomm_ops srcomm_ops;

struct sr_comm {
    MPI_Comm mpi;            /* the group (a dup or split of MPI_COMM_WORLD) */
    int rank, size;          /* in the group */
    int world_rank;          /* for messages */
    const char *name;        /* "data", "tensor", "pipeline", "world" */
    const srcomm_ops *ops;   /* the backend */
    void *impl;              /* backend state (NCCL: communicator, stream) */
    double timeout_s;        /* bound on every wait */
    int64_t step;            /* for timeout messages; -1 until set */
    int64_t max_chunk;       /* MPI: elements per MPI call (<= INT_MAX) */
    int broken;              /* a wait timed out: no further operation */
    char broken_msg[256];    /* why (the timeout message) */
    sr_comm_stats stats;
};

struct sr_req {
    sr_comm *c;
    const srcomm_ops *ops;   /* backend that launched it (host helpers: MPI) */
    int op;                  /* SRC_* */
    int peer;                /* root (broadcast), peer (send/recv), else -1 */
    int tag;
    int64_t n;               /* elements, as passed by the caller */
    int64_t step;            /* the communicator's step at launch */
    char what[96];           /* caller's label */
    int done;                /* complete (successfully or not) */
    int inflight;            /* start failed with part of r launched */
    sr_status err;           /* on completion: SR_OK or the failure... */
    char detail[256];        /* ...and its backend message */
    int comm_ok;             /* the failure left the communicator usable
                              * (a recv of the wrong size) */
    /* MPI */
    MPI_Request *mreq;       /* nmreq requests (chunks), inline1 when one */
    int nmreq;
    MPI_Request inline1;
    float *tmp;              /* staged result copied to tmp_dst on completion */
    float *tmp_dst;
    int64_t tmp_n;
    /* backend-specific (NCCL: a cudaEvent) */
    void *impl;
};

/* A backend: a small table, one per kind of memory. */
struct srcomm_ops {
    const char *name;
    /* sets up c->impl for the group c->mpi; collective over the group */
    sr_status (*open)(sr_comm *c, int local_rank, double init_timeout_s);
    void (*close)(sr_comm *c);
    /* launches r (op, n, peer, tag filled in); send/recv are the buffers
     * (float, or double for SRC_ALLREDUCE_DOUBLE; in place: send == recv).
     * On failure it sets r->inflight if part of r was already launched. */
    sr_status (*start)(sr_req *r, const void *send, void *recv);
    /* 1 when complete (sets r->done, r->err, r->detail), 0 if still running */
    int (*poll)(sr_req *r);
    /* the wait gave up on r (timeout, broken communicator): free what is
     * safe to free; buffers the transfer may still write are leaked;
     * NCCL also aborts the communicator */
    void (*give_up)(sr_req *r);
    /* frees r's backend handles; r completed */
    void (*release)(sr_req *r);
};

extern const srcomm_ops srcomm_mpi_ops;
#ifdef SR_HAVE_NCCL
extern const srcomm_ops srcomm_nccl_ops;
#endif

/* monotonic seconds */
double srcomm_now(void);
/* "all-reduce", "send", ... */
const char *srcomm_op_name(int op);
/* sleeps *ns nanoseconds, then doubles *ns up to 1 ms */
void srcomm_backoff(long *ns);
/* how long a wait polls without sleeping before it starts to back off */
double srcomm_spin_s(void);
/* waits for one MPI request on c's group, at most timeout_s; `what` names
 * it in the error (SR_ERR_COMM on timeout or MPI failure) */
sr_status srcomm_mpi_bounded(sr_comm *c, MPI_Request *rq, const char *what, double timeout_s);

#endif /* SR_COMM_IMPL_H */
