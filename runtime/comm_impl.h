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
    const sr_comm_device *dev; /* the buffers' device; NULL: host memory */
    struct srcomm_pin *pins; /* MPI on device memory: page-locked staging buffers */
    int npins;
    sr_req *deferred;        /* handed to sr_comm_wait_device, oldest first */
    sr_req *watched;         /* the device ordered after them (sr_comm_order_device),
                              * still the caller's: sr_comm_settle waits for them, bounded */
    sr_req *starting;        /* MPI on device memory: launched, waiting for their
                              * staging copies to start, in issue order */
    sr_comm *next_live;      /* every live communicator (sr_comm_settle_all) */
};

/* a page-locked host buffer of a communicator's staging pool */
typedef struct srcomm_pin {
    void *p;
    size_t bytes;
    int busy;                /* held by a request */
} srcomm_pin;

struct sr_req {
    sr_comm *c;
    const srcomm_ops *ops;   /* backend that launched it (host helpers: MPI) */
    int op;                  /* SRC_* */
    int peer;                /* root (broadcast), peer (send/recv), else -1 */
    int tag;
    int64_t n;               /* elements, as passed by the caller */
    sr_dtype dt;             /* their type (SR_F32 for the host helpers' doubles too) */
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
    void *tmp;               /* staged result copied to tmp_dst on completion */
    void *tmp_dst;
    size_t tmp_bytes;
    /* backend-specific (NCCL: a cudaEvent) */
    void *impl;
    /* MPI on device memory: the page-locked copies MPI moves; on success the
     * wait copies host_res (dev_n elements) to dev_dst */
    void *pin[2];
    void *host_res, *dev_dst;
    int64_t dev_n;
    /* ... and for an asynchronous call, the copy to the host in flight (the
     * device's token) and the buffers the MPI start then gets; the start
     * keeps issue order per communicator (c->starting, next_start) */
    void *copy;
    const void *st_send;
    void *st_recv;
    sr_req *next_start;
    int cleaned;             /* its start failed and was cleaned up there */
    int grouped;             /* launched inside a group that has not ended */
    double t_wait;           /* when sr_comm_wait_device or sr_comm_order_device took it */
    sr_req *next;            /* in the group, or in c->deferred */
    int watched;             /* in c->watched (sr_comm_order_device) */
    sr_req *next_watched;
    int given_up;            /* sr_comm_settle timed out on it (ops->give_up done): its
                              * caller's wait reports it abandoned and frees it */
};

/* A backend: a small table, one per kind of memory. */
struct srcomm_ops {
    const char *name;
    /* sets up c->impl for the group c->mpi; collective over the group */
    sr_status (*open)(sr_comm *c, int local_rank, double init_timeout_s);
    void (*close)(sr_comm *c);
    /* sets up c->impl for one part of a split of parent's group (color,
     * key as MPI_Comm_split's, which made c->mpi); collective over parent:
     * a rank in no part calls it with c == NULL. NULL where the backend
     * cannot (sr_grid then makes no pipeline channels) */
    sr_status (*open_split)(sr_comm *parent, sr_comm *c, int color, int key, double init_timeout_s);
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
    /* makes `stream` (a cudaStream_t) wait for r's completion without a host
     * wait; NULL where the backend has no device events */
    sr_status (*order)(sr_req *r, void *stream);
    /* the process-wide group (sr_comm_group_begin/end): begin, and end,
     * which launches the members (linked by next) and completes their
     * set-up; NULL where a group changes nothing */
    sr_status (*group_begin)(void);
    sr_status (*group_end)(sr_req *members);
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

/* ---- device memory (runtime/comm_device.c) ---- */
/* where op's buffers (n > 0) are: 1 device memory, 0 host memory, -1 mixed */
int srcomm_on_device(const sr_comm *c, int op, const void *send, const void *recv);
/* MPI on device memory: copies what r sends into page-locked buffers of
 * c's pool (after the work queued on the device's stream) and points *send
 * and *recv at the host copies; r remembers where the result goes */
sr_status srcomm_stage_in(sr_req *r, const void **send, void **recv, int async);
/* after r succeeded: its result to the device */
sr_status srcomm_stage_out(sr_req *r);
/* r's staging buffers back to the pool, or, when the transfer may still
 * write them (lost), out of it for good */
void srcomm_unstage(sr_req *r, int lost);
/* frees c's staging pool (buffers still held by requests are leaked) */
void srcomm_pins_free(sr_comm *c);

#endif /* SR_COMM_IMPL_H */
