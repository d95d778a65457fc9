/* sr_comm.h: the process grid and the communication layer of libshardrt.
 *
 * grid: the world's ranks form a mesh with axes data (dp), tensor (tp) and
 * pipeline (pp), world = dp * tp * pp. Rank order, documented and fixed:
 *     rank = (pp_index * dp + dp_index) * tp + tp_index
 * so tensor-parallel peers are adjacent ranks (one node holds them), then
 * data-parallel replicas, then pipeline stages (Megatron's order).
 * One communicator per axis, created in the same order on every rank.
 *
 * comm: one interface, two backends. MPI moves host memory; NCCL moves
 * device memory (its unique id is made on rank 0 and broadcast over MPI).
 * Every operation has a blocking form (req == NULL) and an async form that
 * returns a request to sr_comm_wait on. Waits are bounded: a request not
 * complete after the communicator's timeout fails with SR_ERR_COMM and a
 * message naming the operation, its `what` label and the step, so a dead or
 * hung peer is one clear error rather than a hang.
 * All reductions are sums of float32, or of bfloat16 through the _t forms
 * of the three collectives (tensor parallelism's activations in a bf16
 * program move at 2 bytes, as Megatron-LM's do); sends and receives have
 * _t forms too (a pipeline's bf16 boundaries).
 *
 * Conventions of every operation below (runtime/comm.c):
 *  - n is an element count >= 0; n == 0 is a valid no-data operation that
 *    still matches across the group (its buffers may be NULL);
 *  - `what` labels the operation in error messages (may be NULL);
 *  - req == NULL: blocking, returns when complete (bounded by the timeout);
 *    req != NULL: *req is set to the request on SR_OK, to NULL on failure;
 *  - the timeout counts from the start of the wait (sr_comm_wait, or the
 *    blocking call), not from the launch;
 *  - argument errors (negative n, NULL buffer, root/peer outside the group,
 *    tag outside 0..MPI_TAG_UB, overlapping buffers other than the in-place
 *    forms) return SR_ERR_ARG before anything is launched;
 *  - after a timeout or a transport failure the communicator is broken: the
 *    transfer may still be pending (MPI cannot cancel a collective) and may
 *    still write its buffers; every later operation on it, and every wait on
 *    its other requests, fails at once with SR_ERR_COMM. The program is
 *    expected to report the error and sr_comm_abort;
 *  - MPI backend: non-blocking MPI calls on host memory; a message larger
 *    than INT_MAX elements is split into several MPI calls (Open MPI 4.1 is
 *    MPI 3.1: no large-count calls); MPI progresses a request only while it
 *    is tested or waited on. Waits poll back to back for 1 ms, then sleep
 *    10 us growing to 1 ms between polls. Environment (read once):
 *    SR_COMM_SPIN_US (the busy-poll window, default 1000) and, read at each
 *    sr_grid_init, SR_COMM_MAX_CHUNK (elements per MPI call, default and
 *    maximum INT_MAX; tests lower it to exercise the split paths);
 *  - device memory (a grid made by sr_grid_init_device with the backend's
 *    sr_comm_device): every buffer is classified by dev->on_device; all
 *    buffers of one call must be of one kind, and every rank of the group
 *    must pass the same kind. Host buffers (start-up handshake, sampling)
 *    go over plain MPI whatever the backend;
 *  - MPI backend on device memory ("--comm mpi" of a CUDA program): the
 *    call stages through page-locked host buffers (dev->host_alloc, kept in
 *    a pool per communicator): dev->to_host copies the send data after the
 *    work queued on the device's stream (a host wait for that stream), MPI
 *    moves the host copies, and the wait copies the result back with
 *    dev->to_device before it returns. No CUDA-aware MPI is assumed. After
 *    a timeout the staging buffers of the abandoned request are leaked
 *    (MPI may still write them);
 *  - NCCL backend: buffers are device memory; sr_grid_init selects GPU
 *    local_rank % (visible devices) with cudaSetDevice. Each communicator has
 *    its own stream. With a sr_comm_device, that stream is non-blocking and
 *    ordered by events: each operation first makes it wait for an event
 *    recorded on dev->stream() (the compute stream), so it reads what the
 *    kernels queued before the call wrote; no host synchronization. Without
 *    one (sr_grid_init), the stream is created with default flags, ordered
 *    after work on the legacy default stream only (other streams:
 *    synchronize before the call). sr_comm_wait returns when the result is
 *    in device memory; sr_comm_wait_device only makes dev->stream() wait
 *    for it. On timeout the NCCL communicator is aborted (ncclCommAbort).
 *    A rank's sends and receives on one NCCL communicator execute in issue
 *    order, so pair them like blocking MPI sends (even ranks send first),
 *    launch a send and a recv together inside sr_comm_group_begin/end, or
 *    give each direction a communicator of its own (sr_grid's pipeline
 *    channels); tags are checked but NCCL ignores them (it matches by
 *    order). Two ranks of
 *    one group on one GPU are refused at set-up with a message saying to
 *    use the MPI backend (a program's --comm mpi).
 */
#ifndef SR_COMM_H
#define SR_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "shardrt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sr_comm_backend {
    SR_COMM_MPI = 0,  /* MPI non-blocking calls on host memory (device memory staged) */
    SR_COMM_NCCL = 1  /* device memory, NCCL on a dedicated stream */
} sr_comm_backend;

/* "mpi", "nccl" (what a program's --comm takes); "?" for anything else */
const char *sr_comm_backend_name(sr_comm_backend b);

/* What the comm layer needs to move a GPU's memory, given by the memory
 * backend (sr_backend.device) to sr_grid_init_device. All members are
 * required. */
typedef struct sr_comm_device {
    /* the stream whose kernels write and read the buffers (a cudaStream_t);
     * NULL before the device is set up */
    void *(*stream)(void);
    /* 1 if p is device memory, 0 if host memory */
    int (*on_device)(const void *p);
    /* page-locked host memory for staging; NULL when out of memory */
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);
    /* dst (host) = src (device), after the work queued on stream(); returns
     * once dst holds the data */
    sr_status (*to_host)(void *dst, const void *src, size_t bytes);
    /* dst (device) = src (host), before any work queued on stream() later;
     * src may be reused once it returns */
    sr_status (*to_device)(void *dst, const void *src, size_t bytes);
    /* optional (NULL: to_host): dst (host) = src (device), queued after the
     * work on stream() and returning at once with *token; copy_done(token):
     * 1 once dst holds the data, 0 before, -1 on failure; copy_wait(token):
     * waits for it and frees token. An asynchronous call of the MPI path
     * then starts its MPI transfer when the copy is done, not at once, so
     * the host need not wait for the device to reach the call */
    sr_status (*to_host_async)(void *dst, const void *src, size_t bytes, void **token);
    int (*copy_done)(void *token);
    sr_status (*copy_wait)(void *token);
    /* the NCCL backend for this memory when it is not libshardrt's own (the
     * CUDA emulator's, NCCL over MPI); NULL: libshardrt's */
    const struct srcomm_ops *nccl;
} sr_comm_device;

typedef struct sr_comm sr_comm;
typedef struct sr_req sr_req;

/* traffic counters of one communicator, for the plan-vs-measured checks.
 * Counted when an operation is launched successfully (blocking or async,
 * whether or not it then completes); refused calls are not counted.
 * bytes = payload bytes read from or written to this rank's buffers
 * (4 bytes an element; 2 for SR_BF16):
 *   allreduce       n * 4                (buf)
 *   reduce_scatter  n * size * 4         (the whole send buffer)
 *   allgather       n * 4                (this rank's send block)
 *   broadcast       n * 4 at the root, 0 on the other ranks (calls counted
 *                   on every rank)
 *   send            n * 4
 *   recv            n * 4                (bytes received into buf)
 * sr_comm_allreduce_double and sr_comm_barrier are not counted. */
typedef struct sr_comm_stats {
    int64_t calls[6];    /* by op: allreduce, reduce_scatter, allgather, broadcast, send, recv */
    int64_t bytes[6];    /* payload bytes each op moved from this rank's buffers */
} sr_comm_stats;

/* sr_grid.pp_chan's index: the channel carrying gradients (grad 1) or
 * activations (0) that this rank sends (out 1) or receives (0) */
#define SR_PP_CHAN(grad, out) (2 * (grad) + (out))
#define SR_PP_NCHAN 4

typedef struct sr_grid {
    int rank, world;         /* in MPI_COMM_WORLD */
    int dp, tp, pp;          /* degrees */
    int dp_rank, tp_rank, pp_rank;
    int local_rank;          /* rank on this node (for picking a GPU) */
    sr_comm *world_comm, *dp_comm, *tp_comm, *pp_comm;
    /* The pipeline's channels (NCCL with pp > 1; else all NULL): a
     * two-rank communicator of its own per (sending rank, kind) of
     * sr_schedule.h's channel model, activations to pipeline rank
     * (r+1) % pp and gradients to (r-1+pp) % pp, the sender its rank 0 and
     * the receiver its rank 1. NCCL runs a communicator's transfers in issue
     * order, one stream each; on one communicator two neighbours that each
     * send first wait for each other (the interleaved schedule's steady
     * state does). A channel's transfers are in the same order on both ends
     * (sr_sched_check), so on its own stream none waits for another.
     * SR_COMM_PP_CHANNELS=0 in the environment of any rank: none.
     * Indexed by SR_PP_CHAN(grad, out): grad 1 for gradients, 0 for
     * activations; out 1 where this rank sends, 0 where it receives. */
    sr_comm *pp_chan[SR_PP_NCHAN];
} sr_grid;

/* whether the grid has the pipeline's channels (all four are made, or none) */
static inline int sr_grid_has_pp_chan(const sr_grid *g) { return g->pp_chan[0] != NULL; }

/* MPI_Init (thread level FUNNELED) once; reads rank/size from MPI (which also
 * works under Slurm's srun with Open MPI). SR_OK when MPI is already
 * initialized (by this or by the program); SR_ERR_STATE after MPI was
 * finalized; argc/argv may be NULL. */
sr_status sr_comm_init(int *argc, char ***argv);
/* MPI_Finalize if MPI is initialized and not yet finalized; else nothing.
 * Free the grids first. */
void sr_comm_finalize(void);
/* From MPI once it is initialized; before that from the launcher's
 * environment (OMPI_COMM_WORLD_RANK/SIZE, PMIX_RANK, PMI_RANK/SIZE,
 * SLURM_PROCID/NTASKS), else 0 and 1. */
int sr_comm_world_rank(void);
int sr_comm_world_size(void);

/* Builds the grid. dp*tp*pp must equal the world size: otherwise
 * SR_ERR_ARG with a message giving the numbers (every rank gets the same
 * status, so all can exit non-zero without a hang). timeout_s bounds every
 * wait on the grid's communicators. Initializes MPI if needed.
 * SR_ERR_ARG also for degrees < 1, timeout_s not > 0, an unknown backend,
 * and SR_COMM_NCCL in a libshardrt built without NCCL. The backend's set-up
 * (NCCL: a communicator per group, bounded by max(timeout_s, 120 s)) is
 * checked across the world after each group, so a failure on one rank is
 * SR_ERR_COMM on all. world_comm is a duplicate of MPI_COMM_WORLD.
 * On failure *g is zeroed (sr_grid_free on it is harmless). */
sr_status sr_grid_init(sr_grid *g, int dp, int tp, int pp, sr_comm_backend backend, double timeout_s);
/* sr_grid_init for buffers in a GPU's memory: dev (may be NULL: as
 * sr_grid_init) says how to reach it (see the conventions above); it must
 * outlive the grid. */
sr_status sr_grid_init_device(sr_grid *g, int dp, int tp, int pp, sr_comm_backend backend,
                              const sr_comm_device *dev, double timeout_s);
/* frees the communicators (requests must have been waited on; those handed
 * to sr_comm_wait_device are settled first) and zeroes *g */
void sr_grid_free(sr_grid *g);

int sr_comm_size(const sr_comm *c);
int sr_comm_rank(const sr_comm *c);
const char *sr_comm_name(const sr_comm *c); /* "data", "tensor", "pipeline", "world" */
void sr_comm_set_step(sr_comm *c, int64_t step); /* for timeout messages */
const sr_comm_stats *sr_comm_get_stats(const sr_comm *c);
void sr_comm_reset_stats(sr_comm *c);

/* The element type of a collective's buffers. SR_BF16: bfloat16 (the upper
 * half of a float32), summed as NCCL sums ncclBfloat16: each partial sum of
 * two values in float32, rounded to bf16 (to nearest, ties to even); with
 * more than two ranks the rounding depends on the algorithm's order, the
 * same on every rank. n counts elements of the type; bytes in the stats
 * and in the staging are n * 2. */
typedef enum sr_dtype { SR_F32 = 0, SR_BF16 = 1 } sr_dtype;
/* bytes an element of type t */
static inline size_t sr_dtype_size(sr_dtype t) { return t == SR_BF16 ? 2 : 4; }

/* buf (n) summed over the group, in place (MPI: MPI_IN_PLACE) */
sr_status sr_comm_allreduce(sr_comm *c, float *buf, int64_t n, const char *what, sr_req **req);
/* send (n * size) summed; this rank receives its block recv (n).
 * In place: recv == send + rank * n (MPI stages it and copies on completion) */
sr_status sr_comm_reduce_scatter(sr_comm *c, const float *send, float *recv, int64_t n,
                                 const char *what, sr_req **req);
/* send (n) from every rank -> recv (n * size) in rank order.
 * In place: send == recv + rank * n */
sr_status sr_comm_allgather(sr_comm *c, const float *send, float *recv, int64_t n,
                            const char *what, sr_req **req);
/* the same three collectives on elements of type t (the float forms are
 * these with SR_F32) */
sr_status sr_comm_allreduce_t(sr_comm *c, sr_dtype t, void *buf, int64_t n, const char *what, sr_req **req);
sr_status sr_comm_reduce_scatter_t(sr_comm *c, sr_dtype t, const void *send, void *recv, int64_t n,
                                   const char *what, sr_req **req);
sr_status sr_comm_allgather_t(sr_comm *c, sr_dtype t, const void *send, void *recv, int64_t n,
                              const char *what, sr_req **req);
/* buf (n) of group rank root -> every rank's buf */
sr_status sr_comm_broadcast(sr_comm *c, float *buf, int64_t n, int root, const char *what,
                            sr_req **req);
/* point to point with group rank peer; tag 0..MPI_TAG_UB (>= 32767). A recv
 * that gets a different number of floats than n fails with SR_ERR_COMM (the
 * communicator stays usable when fewer arrived). */
sr_status sr_comm_send(sr_comm *c, const float *buf, int64_t n, int peer, int tag,
                       const char *what, sr_req **req);
sr_status sr_comm_recv(sr_comm *c, float *buf, int64_t n, int peer, int tag, const char *what,
                       sr_req **req);
/* the same on elements of type t (a pipeline's bf16 boundary activations);
 * a send and its recv name the same type */
sr_status sr_comm_send_t(sr_comm *c, sr_dtype t, const void *buf, int64_t n, int peer, int tag,
                         const char *what, sr_req **req);
sr_status sr_comm_recv_t(sr_comm *c, sr_dtype t, void *buf, int64_t n, int peer, int tag, const char *what,
                         sr_req **req);
/* completes and frees req (also on failure); SR_ERR_COMM on timeout or
 * failure, naming the op, its label, group, peer and step. NULL: SR_OK. */
sr_status sr_comm_wait(sr_req *req);
/* For a caller that only needs the device ordered after req: NCCL makes
 * the device's stream (sr_comm_device.stream) wait for the operation's
 * completion event and returns at once, without a host wait; kernels queued
 * afterwards see the result. The request then belongs to its communicator,
 * which checks it under the timeout at the next sr_comm_settle (or
 * sr_comm_settle_all, which the CUDA backend calls before the host waits
 * for the device) and frees it; a failure is reported there, and the
 * communicator is broken. Every other case (MPI, host memory, a grid
 * without a device): exactly sr_comm_wait. NULL: SR_OK. */
sr_status sr_comm_wait_device(sr_req *req);
/* Makes the device's stream wait for req's completion, as
 * sr_comm_wait_device does, but leaves req with the caller (to wait on
 * later: a send whose buffer the next kernels overwrite). Until then the
 * next sr_comm_settle of its communicator (before any host wait for the
 * device) waits for it too, under the timeout, so that a dead peer is an
 * error there and not a hang in the device's synchronization; the
 * request stays the caller's. 1 when done (also for NULL); 0 where it
 * cannot be (no device events: the MPI backend, no sr_comm_device, a
 * request still in its group or complete): the caller waits on the host
 * instead. */
int sr_comm_order_device(sr_req *req);
/* waits (bounded, as sr_comm_wait; the timeout counts from the
 * sr_comm_wait_device call) for the requests c holds from
 * sr_comm_wait_device and frees them, then for those the device was
 * ordered after (sr_comm_order_device), which stay their callers'; the
 * first failure, else SR_OK */
sr_status sr_comm_settle(sr_comm *c);
/* sr_comm_settle on every live communicator of the process */
sr_status sr_comm_settle_all(void);
/* 1 if complete (req still to be waited on), 0 if not; drives progress.
 * NULL: 1. */
int sr_comm_test(sr_req *req);
/* Operations launched between sr_comm_group_begin and sr_comm_group_end
 * (on any communicator of the process) start together: NCCL queues them
 * as one group (ncclGroupStart/ncclGroupEnd), so a send and a recv that two
 * ranks issue to each other cannot deadlock; MPI starts each at once
 * (non-blocking calls never deadlock), so there the group changes nothing.
 * Inside a group every operation must be async (req != NULL; a blocking
 * call is SR_ERR_ARG) and its request is waited on after the group ends
 * (inside, sr_comm_test says 0 and sr_comm_wait is SR_ERR_STATE, leaving
 * the request as it was). Groups nest; the outermost end launches. end
 * without begin: SR_ERR_STATE. A failed end fails every NCCL request of
 * the group: their waits report it and break their communicators. */
sr_status sr_comm_group_begin(void);
sr_status sr_comm_group_end(void);
/* sums n doubles (loss, gradient norm) over the group, in place; blocking,
 * bounded by the timeout; on host memory over MPI whatever the backend */
sr_status sr_comm_allreduce_double(sr_comm *c, double *x, int n);
/* blocking, bounded by the timeout; MPI whatever the backend */
sr_status sr_comm_barrier(sr_comm *c);
/* aborts every rank of the world (after a fatal error on one of them):
 * flushes stdio, MPI_Abort(MPI_COMM_WORLD, code); exit(code) when MPI is
 * not running. Does not return. */
void sr_comm_abort(int code);

#ifdef __cplusplus
}
#endif
#endif /* SR_COMM_H */
