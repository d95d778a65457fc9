/* sr_dp.h: data-parallel gradient synchronisation.
 *
 * Plain data parallelism: the gradient arena is cut into buckets (about
 * bucket_bytes each, like PyTorch DDP's 25 MB) of consecutive parameters in
 * reverse declaration order, the order backward finishes them. The
 * generated backward reports each parameter's gradient as final
 * (sr_exec.grad_ready); when every parameter of a bucket is final on the
 * last microbatch, the bucket's all-reduce is launched at once, so it runs
 * while backward computes the rest. In a pipeline rt_pipe_step arms it once
 * per step and installs the hook in each chunk's last gradient pass
 * (pipeline.c). sr_dp_finish launches what is left and waits for all.
 *
 * ZeRO-1 (a shard buffer given): the optimizer state is sharded over the
 * data ranks. The arena (padded to a multiple of dp) is cut at multiples of
 * dp, so each bucket splits into dp equal slices, and a bucket's gradients
 * are reduce-scattered, launched as an all-reduce bucket would be: rank d
 * receives the sum of slice d of every bucket, its shard (Megatron-LM's
 * distributed-optimizer layout). It updates those slices of the parameters
 * with its shard of the AdamW state, and sr_dp_gather_start all-gathers
 * them per bucket while the next forward runs (sr_dp_param_needed).
 */
#ifndef SR_DP_H
#define SR_DP_H

#include "sr_comm.h"
#include "sr_program.h"
#include "sr_trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sr_dp sr_dp;

/* offsets[i]: parameter i's float offset in the gradient arena of n_floats
 * floats, -1 where this rank does not hold it (a pipeline rank holds its
 * stages' parameters only). shard: NULL to all-reduce the buckets in place;
 * for ZeRO-1 the n_floats / dp floats that receive this rank's slices
 * (n_floats a multiple of dp) */
sr_status sr_dp_init(sr_dp **out, const sr_program *prog, const int64_t *offsets, int64_t n_floats,
                     sr_comm *dp_comm, float *grads, float *shard, int64_t bucket_bytes, sr_trace *trace);
void sr_dp_free(sr_dp *dp);
int sr_dp_buckets(const sr_dp *dp);
/* bucket j (0: the highest range, all-reduced or reduce-scattered first):
 * the arena's floats [*lo, *hi), and whether this step launched it yet;
 * returns 0 past the last */
int sr_dp_bucket(const sr_dp *dp, int j, int64_t *lo, int64_t *hi, int *launched);
/* ZeRO-1: bucket j's slice on this rank is the arena's floats [*lo, *lo + *n),
 * held at shard + *at; returns 0 past the last bucket (or without ZeRO) */
int sr_dp_slice(const sr_dp *dp, int j, int64_t *lo, int64_t *n, int64_t *at);
/* the buckets holding the parameter's floats wait for sr_dp_finish (a tied
 * copy summed over the pipeline first) */
void sr_dp_hold(sr_dp *dp, int param);
/* before a microbatch's backward: `last` arms the launches */
void sr_dp_begin(sr_dp *dp, int last, int64_t step);
/* the sr_exec.grad_ready hook (e->user must be the sr_dp) */
void sr_dp_grad_ready(sr_exec *e, int param);
/* launches the buckets not launched yet, waits for every bucket */
sr_status sr_dp_finish(sr_dp *dp);
/* ZeRO-1: full (the arena's layout) = every rank's slices, all-gathered per
 * bucket (all launched, then waited for); from shard (this rank's slices in
 * the shard's layout), or with shard NULL in place from full's own slices;
 * not while sr_dp_gather_start's gathers are in flight (settle them first) */
sr_status sr_dp_gather(sr_dp *dp, const float *shard, float *full, const char *what);
/* ZeRO-1, overlapped with the next forward (Megatron-LM's
 * --overlap-param-gather): launches every bucket's in-place all-gather of
 * full (the arena's layout; this rank's slices updated), the one the
 * forward needs first first, and returns. Until sr_dp_gather_settle the
 * parameters may be read only after the sr_exec.param_needed hook
 * (sr_dp_param_needed) has waited for their buckets. */
sr_status sr_dp_gather_start(sr_dp *dp, float *full);
/* the sr_exec.param_needed hook (e->user must be the sr_dp): the device
 * (with MPI the host) waits for the gathers of the buckets holding the
 * parameter; a failure is reported by sr_dp_finish */
void sr_dp_param_needed(sr_exec *e, int param);
/* waits for the gathers not waited for yet (all of the parameters readable
 * then) and traces them; SR_OK without gathers in flight */
sr_status sr_dp_gather_settle(sr_dp *dp);
/* called after each bucket's gather is waited for, with the bucket's
 * parameters (the CUDA backend refreshes its bf16 copy of them) */
void sr_dp_on_gathered(sr_dp *dp, void (*fn)(float *p, int64_t n));
/* over the run: microseconds spent waiting for the gathers (in the hooks
 * and the settles), and from each step's first launch to its last completion */
void sr_dp_gather_stats(const sr_dp *dp, double *wait_us, double *flight_us);
/* over the last step: microseconds during which some bucket all-reduce was
 * in flight (total; concurrent buckets counted once), and how much of that
 * was before the backward ended (hidden); total - hidden is the exposed wait */
void sr_dp_overlap(const sr_dp *dp, double *hidden_us, double *total_us, double backward_end_us);

#ifdef __cplusplus
}
#endif
#endif /* SR_DP_H */
