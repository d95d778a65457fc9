/* pipeline.c: the pipeline executor. Each rank runs its instruction list
 * (sr_schedule.h) for a step: receive an activation, run a stage's forward,
 * send its output on; receive a gradient, run the backward (or zb-h1's two
 * halves), send the input's gradient back. Sends are asynchronous and
 * receives wait, as the schedule checker assumes, so a checked schedule
 * cannot deadlock. Every in-flight microbatch of a stage has its own
 * workspace (the values that outlive a pass: memplan.c's kept slots) from a
 * pool sized by the schedule's peak; the values that live within one pass
 * share the rank's one scratch, since the rank runs one pass at a time.
 * Both are what the run reports as its activation memory.
 *
 * Parameters: a pipeline rank holds only the parameters its stages use,
 * in an arena laid out by the compiler (sr_program.rank_param_offsets); a
 * parameter held by several ranks (the tied embedding: first and last) has
 * its gradient summed among its holders, so the copies stay equal, and is
 * owned by the lowest of them (which counts it in the gradient norm and
 * saves it). Evaluation (rt_pipe_eval: the microbatches in flight together)
 * and sampling (rt_pipe_forward: stage after stage) run through the
 * pipeline too, the boundary activation sent on.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run.h"
#include "sr_schedule.h"

typedef struct slot {
    int mb;              /* microbatch using it, -1 when free */
    char *work;          /* the stage's workspace */
    float *act_in, *act_in_grad, *act_out_grad;
    float *act_out;      /* inside work, set by forward */
    int32_t *inputs, *targets;
    sr_req *send[2];     /* sends from this slot still in flight: activation, gradient */
} slot;

typedef struct chunk {
    int stage;
    const sr_stage *st;
    slot *slots;
    int nslots, in_use, peak;
} chunk;

struct rt_pipe {
    sr_schedule sched;
    int p, v, m, S, rank;
    chunk *chunks;
    size_t act_bytes;    /* the slots' workspaces and boundary buffers, and the scratch */
    char *scratch;       /* the largest of the rank's stages' scratch (NULL: none) */
    size_t scratch_bytes;
    double t_step0, busy_us, step_us; /* bubble measurement over the steps */
    int *owner;          /* owner[i]: the lowest pipeline rank holding parameter i */
    char *tied;          /* tied[i]: parameter i is held by more than one pipeline rank */
    float *tied_tmp;     /* the owner's receive buffer for tied gradients (TIED_CHUNK floats at most) */
    int *last_w;         /* last_w[c]: the rank's last instruction adding to chunk c's parameter gradients */
};

/* tied gradients move in pieces of at most this many floats, which bounds
 * the owner's receive buffer */
#define TIED_CHUNK ((int64_t)1 << 20)
/* message tags outside a step's (tag_of) */
#define TAG_TIED 32000
#define TAG_EVAL 32001

/* pipeline rank rk holds parameter i */
static int holds(const sr_program *prog, int rk, int i)
{
    return prog->rank_param_offsets[(int64_t)rk * prog->n_params + i] >= 0;
}

static int tag_of(const struct rt_pipe *pp, int mb, int stage, int grad)
{
    return (mb * pp->S + stage) * 2 + grad;
}

static int64_t rows(run *r) { return (int64_t)r->B * r->o.seq; }

/* a stage's boundary activations and their gradients: bf16 in a bf16 CUDA
 * program (sent as such, 2 bytes an element), else float */
static sr_dtype act_dt(const sr_stage *st) { return st->act_bf16 ? SR_BF16 : SR_F32; }
static size_t act_size(const sr_stage *st) { return sr_dtype_size(act_dt(st)); }

/* one slot's bytes: the stage's workspace and its boundary buffers (act_in,
 * act_in_grad, act_out_grad), as alloc_slot allocates them */
static size_t slot_bytes(run *r, const sr_stage *st)
{
    return st->work_bytes(r->B, r->o.seq) +
           (size_t)rows(r) * act_size(st) * (size_t)(2 * st->act_in_row + st->act_out_row);
}

static sr_status alloc_slot(run *r, chunk *c, slot *s)
{
    const sr_backend *be = r->be;
    size_t n = (size_t)rows(r);
    s->mb = -1;
    s->work = be->alloc(c->st->work_bytes(r->B, r->o.seq));
    s->inputs = be->alloc(n * sizeof(int32_t));
    s->targets = be->alloc(n * sizeof(int32_t));
    int ok = s->work && s->inputs && s->targets;
    if (c->st->act_in_row) {
        s->act_in = be->alloc(n * (size_t)c->st->act_in_row * act_size(c->st));
        s->act_in_grad = be->alloc(n * (size_t)c->st->act_in_row * act_size(c->st));
        ok = ok && s->act_in && s->act_in_grad;
    }
    if (c->st->act_out_row) {
        s->act_out_grad = be->alloc(n * (size_t)c->st->act_out_row * act_size(c->st));
        ok = ok && s->act_out_grad;
    }
    return ok ? SR_OK : sr_seterr(SR_ERR_NOMEM, "cannot allocate the activations of pipeline stage %d "
                                  "(lower --batch or raise --microbatches)", c->stage);
}

static void free_slot(run *r, slot *s)
{
    void *b[] = {s->work, s->inputs, s->targets, s->act_in, s->act_in_grad, s->act_out_grad};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        if (b[i]) r->be->free(b[i]);
}

sr_status rt_pipe_init(run *r)
{
    const sr_program *prog = r->prog;
    struct rt_pipe *pp = calloc(1, sizeof *pp);
    if (!pp) return sr_seterr(SR_ERR_NOMEM, "out of memory");
    r->pipe = pp;
    pp->p = r->grid.pp;
    pp->v = prog->virtual_stages;
    pp->m = r->o.microbatches;
    pp->S = prog->n_stages;
    pp->rank = r->grid.pp_rank;
    int kind = sr_sched_parse(r->o.schedule);
    if (kind < 0)
        return sr_seterr(SR_ERR_USAGE, "--schedule: unknown schedule '%s' (gpipe, 1f1b, interleaved, zb-h1)",
                         r->o.schedule);
    if ((kind == SR_SCHED_INTERLEAVED) != (pp->v > 1))
        return sr_seterr(SR_ERR_USAGE, "--schedule %s: this program was built with %d virtual stage%s per "
                         "rank; %s", r->o.schedule, pp->v, pp->v == 1 ? "" : "s",
                         pp->v > 1 ? "use --schedule interleaved" : "rebuild with --virtual-stages for interleaved");
    if (kind == SR_SCHED_ZBH1 && !prog->split_backward)
        return sr_seterr(SR_ERR_USAGE, "--schedule zb-h1: this program was built for %s; rebuild it with "
                         "shardc build --schedule zb-h1 (its memory plan keeps what the weight-gradient passes "
                         "read)", prog->split_backward ? "zb-h1" : "schedules that run the backward whole");
    /* NCCL runs a rank's transfers on one communicator in issue order, a send
     * until its receiver takes it. Over the grid's channels (one per
     * direction and kind) nothing waits for a transfer of another channel;
     * without them (one pipeline rank, whose sends go to itself; NCCL before
     * 2.18; SR_COMM_PP_CHANNELS=0) the
     * interleaved schedule's steady state (more microbatches than stages)
     * would have each send wait for a recv queued after it. A clear error
     * rather than a timeout at the first step */
    if (kind == SR_SCHED_INTERLEAVED && pp->m > pp->p && !sr_grid_has_pp_chan(&r->grid) && r->o.comm &&
        !strcmp(r->o.comm, "nccl"))
        return sr_seterr(SR_ERR_USAGE, "--schedule interleaved with %d microbatches on %d pipeline stage%s would "
                         "deadlock over NCCL without the pipeline's channels (a rank's sends and receives on one "
                         "communicator run in order); use --comm mpi, --microbatches %d, or the channels (more than "
                         "one pipeline rank, NCCL 2.18 or later, SR_COMM_PP_CHANNELS not 0)", pp->m, pp->p,
                         pp->p == 1 ? "" : "s", pp->p);
    SR_CHECK(sr_sched_build(&pp->sched, (sr_sched_kind)kind, pp->p, pp->m, pp->v));
    SR_CHECK(sr_sched_check(&pp->sched)); /* never a hang: a bad schedule stops here */
    pp->chunks = calloc((size_t)pp->v, sizeof(chunk));
    pp->owner = calloc((size_t)prog->n_params + 1, sizeof(int));
    pp->tied = calloc((size_t)prog->n_params + 1, 1);
    pp->last_w = calloc((size_t)pp->v, sizeof(int));
    int *peak = calloc((size_t)pp->v, sizeof(int));
    if (!pp->chunks || !pp->owner || !pp->tied || !pp->last_w || !peak) {
        free(peak);
        return sr_seterr(SR_ERR_NOMEM, "out of memory");
    }
    /* each chunk's pool: the most of its microbatches the list holds at once */
    sr_status st = sr_sched_slot_peaks(&pp->sched, pp->rank, peak);
    for (int c = 0; c < pp->v; c++) pp->chunks[c].nslots = peak[c] > 0 ? peak[c] : 1;
    free(peak);
    SR_CHECK(st);
    /* a chunk's gradients are final after its last backward (or zb-h1
     * weight half) on this rank: that pass runs the data-parallel hooks */
    for (int c = 0; c < pp->v; c++) pp->last_w[c] = -1;
    for (int i = 0; i < pp->sched.n[pp->rank]; i++) {
        const sr_instr *in = &pp->sched.ins[pp->rank][i];
        if (in->op == SR_I_BWD || in->op == SR_I_BWD_WEIGHT) pp->last_w[in->chunk] = i;
    }
    /* the holders of each parameter (rt_param_layout checked every one has one) */
    int64_t tmp_n = 0;
    for (int i = 0; i < prog->n_params; i++) {
        int n = 0;
        pp->owner[i] = -1;
        for (int rk = 0; rk < pp->p; rk++)
            if (holds(prog, rk, i)) {
                if (pp->owner[i] < 0) pp->owner[i] = rk;
                n++;
            }
        pp->tied[i] = n > 1;
        if (n > 1 && pp->owner[i] == pp->rank) {
            int64_t k = prog->params[i].numel < TIED_CHUNK ? prog->params[i].numel : TIED_CHUNK;
            if (k > tmp_n) tmp_n = k;
        }
    }
    if (tmp_n > 0) {
        pp->tied_tmp = r->be->alloc(sizeof(float) * (size_t)tmp_n);
        if (!pp->tied_tmp) return sr_seterr(SR_ERR_NOMEM, "out of memory for the tied gradients");
    }
    for (int c = 0; c < pp->v; c++) {
        chunk *ch = &pp->chunks[c];
        ch->stage = c * pp->p + pp->rank;
        ch->st = &prog->stages[ch->stage];
        int pool = ch->nslots;
        ch->slots = calloc((size_t)pool, sizeof(slot));
        if (!ch->slots) return sr_seterr(SR_ERR_NOMEM, "out of memory");
        for (int k = 0; k < pool; k++) SR_CHECK(alloc_slot(r, ch, &ch->slots[k]));
        pp->act_bytes += (size_t)pool * slot_bytes(r, ch->st);
        size_t scr = ch->st->scratch_bytes ? ch->st->scratch_bytes(r->B, r->o.seq) : 0;
        if (scr > pp->scratch_bytes) pp->scratch_bytes = scr;
    }
    if (pp->scratch_bytes) {
        pp->scratch = r->be->alloc(pp->scratch_bytes);
        if (!pp->scratch)
            return sr_seterr(SR_ERR_NOMEM, "cannot allocate the %.1f MB scratch of pipeline rank %d (lower --batch "
                             "or raise --microbatches)", (double)pp->scratch_bytes / 1e6, pp->rank);
        pp->act_bytes += pp->scratch_bytes;
    }
    return SR_OK;
}

size_t rt_pipe_activation_bytes(run *r) { return r->pipe ? r->pipe->act_bytes : 0; }

void rt_pipe_free(run *r)
{
    struct rt_pipe *pp = r->pipe;
    if (!pp) return;
    for (int c = 0; pp->chunks && c < pp->v; c++) {
        for (int k = 0; pp->chunks[c].slots && k < pp->chunks[c].nslots; k++) free_slot(r, &pp->chunks[c].slots[k]);
        free(pp->chunks[c].slots);
    }
    free(pp->chunks);
    if (pp->scratch) r->be->free(pp->scratch);
    if (pp->tied_tmp) r->be->free(pp->tied_tmp);
    free(pp->owner);
    free(pp->tied);
    free(pp->last_w);
    sr_sched_free(&pp->sched);
    free(pp);
    r->pipe = NULL;
}

int rt_pipe_owner(const run *r, int param) { return r->pipe ? r->pipe->owner[param] : 0; }
int rt_pipe_owns(const run *r, int param) { return !r->pipe || r->pipe->owner[param] == r->pipe->rank; }
int rt_pipe_tied(const run *r, int param) { return r->pipe && r->pipe->tied[param] && r->poff[param] >= 0; }

/* the slot of (mb, chunk): found, or taken from the free ones */
static slot *slot_for(chunk *c, int mb, int take)
{
    for (int k = 0; k < c->nslots; k++)
        if (c->slots[k].mb == mb) return &c->slots[k];
    if (!take) return NULL;
    for (int k = 0; k < c->nslots; k++)
        if (c->slots[k].mb < 0) {
            c->slots[k].mb = mb;
            if (++c->in_use > c->peak) c->peak = c->in_use;
            return &c->slots[k];
        }
    return NULL;
}

/* a slot's buffers may be reused once its sends have completed. A host
 * wait, at the point the schedule checker assumes: a send handed to
 * sr_comm_wait_device instead would join its communicator's deferred
 * requests, which the next host synchronization (a loss read, a token
 * upload) waits for whole, a wait for the peer's later receive that the
 * schedule does not have (with NCCL at pp=2, 1F1B and GPipe then stop) */
static sr_status drain(slot *s)
{
    sr_status st = SR_OK;
    for (int k = 0; k < 2; k++)
        if (s->send[k]) {
            sr_status x = sr_comm_wait(s->send[k]);
            s->send[k] = NULL;
            if (st == SR_OK) st = x;
        }
    return st;
}

static void release(chunk *c, slot *s)
{
    s->mb = -1;
    c->in_use--;
}

static void exec_for(run *r, chunk *c, slot *s, sr_exec *e, long step, float dropout)
{
    rt_exec_init(r, e, r->B, dropout, step);
    e->train = 1; /* a training pass: this microbatch's backward follows its forward */
    e->work = s->work;
    e->scratch = r->pipe->scratch;
    e->inputs = s->inputs;
    e->targets = s->targets;
    e->row0 = (int64_t)rt_first_seq(r, s->mb) * r->o.seq;
    e->act_in = s->act_in;
    e->act_in_grad = s->act_in_grad;
    e->act_out = s->act_out;
    e->act_out_grad = s->act_out_grad;
    (void)c;
}

static sr_status fill_tokens(run *r, sr_data *d, int64_t batch, slot *s)
{
    SR_CHECK(sr_data_batch(d, batch, r->o.batch, r->o.seq, rt_first_seq(r, s->mb), r->B, r->h_inputs, r->h_targets));
    size_t bytes = (size_t)rows(r) * sizeof(int32_t);
    r->be->h2d(s->inputs, r->h_inputs, bytes);
    r->be->h2d(s->targets, r->h_targets, bytes);
    return SR_OK;
}

static void span(run *r, int track, const char *name, double t0, int mb, int c)
{
    char info[32];
    if (r->pipe->v > 1) snprintf(info, sizeof info, "mb %d chunk %d", mb, c);
    else snprintf(info, sizeof info, "mb %d", mb);
    sr_trace_span(r->trace, track, name, t0, sr_trace_now_us(), info);
}

/* where a transfer goes (grad: a gradient, else an activation; out: sent
 * by this rank): over NCCL the grid's channel of that kind and direction,
 * the peer its other end; else the pipeline group and the neighbour's rank */
static sr_comm *link_of(run *r, int grad, int out, int neighbour, int *peer)
{
    const sr_grid *g = &r->grid;
    sr_comm *c = g->pp_chan[SR_PP_CHAN(grad, out)];
    *peer = c ? out : neighbour; /* the sender is a channel's rank 0 */
    return c ? c : g->pp_comm;
}

/* one step's forwards and backwards on this rank, as the schedule says;
 * loss_sum gets the last stage's microbatch losses, *t_end the time its
 * last pass ended. With data parallelism (r->dp) each chunk's last
 * gradient pass runs the grad_ready hooks, so the gradient all-reduce
 * starts while the rest of the schedule runs (sr_dp_finish waits). */
sr_status rt_pipe_step(run *r, long k, double *loss_sum, double *t_end)
{
    struct rt_pipe *pp = r->pipe;
    const sr_schedule *sc = &pp->sched;
    sr_comm_set_step(r->grid.pp_comm, k);
    for (int j = 0; j < SR_PP_NCHAN; j++)
        if (r->grid.pp_chan[j]) sr_comm_set_step(r->grid.pp_chan[j], k);
    if (r->dp) sr_dp_begin(r->dp, 1, k); /* armed for the hooks of the chunks' last gradient passes */
    double t_step = sr_trace_now_us(), busy = 0;
    /* Without the grid's channels (MPI; over NCCL as rt_pipe_init says):
     * 1F1B's steady state issues a send and at once a recv (SEND_ACT then
     * RECV_GRAD, SEND_GRAD then RECV_ACT). NCCL runs a rank's transfers in
     * issue order on its stream, so a send would wait for a recv queued
     * behind it: such a pair is launched as one group
     * (ncclGroupStart/End; a no-op on MPI, where it changes nothing).
     * Inside the group the recv is async (blocking calls are refused); once
     * the group is launched, the compute stream waits for it (the kernels
     * that read it come next), and the send's request stays with its slot
     * for drain() as any send's. Over the channels each transfer is alone on
     * its channel's stream and the compute stream waits for a recv's
     * completion event, with no host wait. */
    int channels = sr_grid_has_pp_chan(&r->grid);
    int grouped = 0; /* a send's group is open: this instruction is its recv */
    for (int i = 0; i < sc->n[pp->rank]; i++) {
        const sr_instr *in = &sc->ins[pp->rank][i];
        if (in->op == SR_I_REDUCE || in->op == SR_I_STEP) continue; /* train.c does these */
        chunk *c = &pp->chunks[in->chunk];
        int s = c->stage, mb = in->mb;
        slot *sl = slot_for(c, mb, sr_sched_takes_slot(in->op));
        if (!sl)
            return sr_seterr(SR_ERR_STATE, "pipeline stage %d: no activation slot for microbatch %d at "
                             "instruction %d (%s)", s, mb, i, sr_op_name(in->op));
        /* a grouped recv's slot is drained after the group (no waits inside);
         * the recv writes act_in, which no send reads */
        if ((in->op == SR_I_RECV_ACT && !grouped) || (in->op == SR_I_FWD && s == 0)) SR_CHECK(drain(sl));
        int64_t n = rows(r);
        double t0 = sr_trace_now_us();
        sr_exec e;
        sr_req *rq = NULL, **rqp = grouped ? &rq : NULL; /* the grouped recv's request */
        int pair = !channels && (in->op == SR_I_SEND_ACT || in->op == SR_I_SEND_GRAD) && i + 1 < sc->n[pp->rank] &&
                   (in[1].op == SR_I_RECV_ACT || in[1].op == SR_I_RECV_GRAD);
        if (pair) {
            SR_CHECK(sr_comm_group_begin());
            grouped = 1;
        }
        sr_status st = SR_OK; /* of a send or a recv */
        sr_comm *lc;
        int peer;
        sr_req *own = NULL; /* a channel's recv: ordered on the device below */
        switch (in->op) {
        case SR_I_RECV_ACT:
            lc = link_of(r, 0, 0, (s - 1) % pp->p, &peer);
            st = sr_comm_recv_t(lc, act_dt(c->st), sl->act_in, n * c->st->act_in_row, peer, tag_of(pp, mb, s, 0),
                                "activation", rqp ? rqp : channels ? &own : NULL);
            break;
        case SR_I_FWD:
            SR_CHECK(fill_tokens(r, &r->train, k, sl));
            if (r->batches && in->chunk == 0) rt_record_batch(r, k, rt_first_seq(r, mb)); /* once a microbatch */
            exec_for(r, c, sl, &e, k, r->o.dropout);
            if (r->gshard) { /* the parameters' all-gather waited for as the chunk needs them */
                e.param_needed = sr_dp_param_needed;
                e.user = r->dp;
            }
            c->st->forward(&e);
            sl->act_out = e.act_out;
            if (s == pp->S - 1) *loss_sum += e.loss;
            busy += sr_trace_now_us() - t0;
            span(r, SR_TRACK_COMPUTE, "forward", t0, mb, in->chunk);
            break;
        case SR_I_SEND_ACT:
            lc = link_of(r, 0, 1, (s + 1) % pp->p, &peer);
            st = sr_comm_send_t(lc, act_dt(c->st), sl->act_out, n * c->st->act_out_row, peer,
                                tag_of(pp, mb, s + 1, 0), "activation", &sl->send[0]);
            if (st == SR_OK) span(r, SR_TRACK_P2P, "send", t0, mb, in->chunk);
            break;
        case SR_I_RECV_GRAD:
            lc = link_of(r, 1, 0, (s + 1) % pp->p, &peer);
            st = sr_comm_recv_t(lc, act_dt(c->st), sl->act_out_grad, n * c->st->act_out_row, peer,
                                tag_of(pp, mb, s, 1), "activation gradient", rqp ? rqp : channels ? &own : NULL);
            break;
        case SR_I_BWD:
        case SR_I_BWD_INPUT:
        case SR_I_BWD_WEIGHT: {
            /* the backward's first gradient may reuse the output's memory
             * (memplan.c): the activation's send must be done with it */
            if (in->op != SR_I_BWD_WEIGHT && sl->send[0] && !sr_comm_order_device(sl->send[0])) {
                sr_status w = sr_comm_wait(sl->send[0]);
                sl->send[0] = NULL;
                SR_CHECK(w);
            }
            exec_for(r, c, sl, &e, k, r->o.dropout);
            if (r->dp && i == pp->last_w[in->chunk]) {
                e.grad_ready = sr_dp_grad_ready;
                e.user = r->dp;
            }
            const char *name = in->op == SR_I_BWD ? "backward" : in->op == SR_I_BWD_INPUT ? "backward-input"
                                                                                           : "backward-weight";
            if (in->op == SR_I_BWD) c->st->backward(&e);
            else if (in->op == SR_I_BWD_INPUT) c->st->backward_input(&e);
            else c->st->backward_weight(&e);
            *t_end = sr_trace_now_us();
            busy += *t_end - t0;
            span(r, SR_TRACK_COMPUTE, name, t0, mb, in->chunk);
            /* the slot is free once nothing of this microbatch remains to
             * run here (the rule the pools are sized by) */
            if (sr_sched_frees_slot(sc->kind, in->op, s)) release(c, sl);
            break;
        }
        case SR_I_SEND_GRAD:
            lc = link_of(r, 1, 1, (s - 1) % pp->p, &peer);
            st = sr_comm_send_t(lc, act_dt(c->st), sl->act_in_grad, n * c->st->act_in_row, peer,
                                tag_of(pp, mb, s - 1, 1), "activation gradient", &sl->send[1]);
            if (st != SR_OK) break;
            span(r, SR_TRACK_P2P, "send", t0, mb, in->chunk);
            if (sr_sched_frees_slot(sc->kind, in->op, s)) release(c, sl);
            break;
        default:
            break;
        }
        if (rqp) { /* the pair's recv: launch the group, then order the device after the recv */
            sr_status end = sr_comm_group_end();
            grouped = 0;
            if (st == SR_OK) st = end;
            sr_status w = sr_comm_wait_device(rq); /* also after a failed end: it reports and frees */
            if (st == SR_OK) st = w;
            if (st == SR_OK && in->op == SR_I_RECV_ACT) st = drain(sl);
        } else if (st != SR_OK && grouped) { /* the send failed: close its group */
            sr_comm_group_end();
        } else if (own) { /* the kernels that read it come next */
            st = sr_comm_wait_device(own);
        }
        SR_CHECK(st);
        if (in->op == SR_I_RECV_ACT || in->op == SR_I_RECV_GRAD) span(r, SR_TRACK_P2P, "recv", t0, mb, in->chunk);
    }
    for (int c = 0; c < pp->v; c++)
        for (int q = 0; q < pp->chunks[c].nslots; q++) {
            slot *sl = &pp->chunks[c].slots[q];
            SR_CHECK(drain(sl));
            if (sl->mb >= 0)
                return sr_seterr(SR_ERR_STATE, "pipeline stage %d: microbatch %d never finished its backward",
                                 pp->chunks[c].stage, sl->mb);
        }
    pp->busy_us += busy;
    pp->step_us += sr_trace_now_us() - t_step;
    /* the loss lives on the last stage: every pipeline rank learns it */
    return sr_comm_allreduce_double(r->grid.pp_comm, loss_sum, 1);
}

/* gradients of parameters held by several pipeline ranks (the tied
 * embedding), summed among the holders only: the others send theirs to the
 * owner, which adds them (in rank order) and sends the sum back. */
sr_status rt_pipe_sync_grads(run *r)
{
    struct rt_pipe *pp = r->pipe;
    const sr_program *prog = r->prog;
    sr_comm *comm = r->grid.pp_comm;
    for (int i = 0; i < prog->n_params; i++) {
        if (!pp->tied[i] || r->poff[i] < 0) continue;
        float *g = r->grads + r->poff[i];
        int64_t n = prog->params[i].numel;
        int own = pp->owner[i];
        for (int rk = own + 1; rk < pp->p; rk++) {
            if (!holds(prog, rk, i) || (pp->rank != own && pp->rank != rk)) continue;
            for (int64_t a = 0; a < n; a += TIED_CHUNK) {
                int64_t k = n - a < TIED_CHUNK ? n - a : TIED_CHUNK;
                if (pp->rank == rk) {
                    SR_CHECK(sr_comm_send(comm, g + a, k, own, TAG_TIED, "tied parameter gradient", NULL));
                } else {
                    SR_CHECK(sr_comm_recv(comm, pp->tied_tmp, k, rk, TAG_TIED, "tied parameter gradient", NULL));
                    r->be->add(g + a, pp->tied_tmp, k);
                }
            }
        }
        for (int rk = own + 1; rk < pp->p; rk++) {
            if (!holds(prog, rk, i) || (pp->rank != own && pp->rank != rk)) continue;
            for (int64_t a = 0; a < n; a += TIED_CHUNK) {
                int64_t k = n - a < TIED_CHUNK ? n - a : TIED_CHUNK;
                if (pp->rank == own)
                    SR_CHECK(sr_comm_send(comm, g + a, k, rk, TAG_TIED, "tied parameter gradient", NULL));
                else
                    SR_CHECK(sr_comm_recv(comm, g + a, k, own, TAG_TIED, "tied parameter gradient", NULL));
            }
        }
    }
    return SR_OK;
}

/* one chunk's forward of a microbatch outside a step (evaluation,
 * sampling) in slot sl: the activation received from the previous stage,
 * the forward, the output sent on (with send: asynchronously, the request
 * kept there; else waited for). x holds the rows, tokens and settings. */
static sr_status eval_chunk(run *r, chunk *ch, slot *sl, sr_exec *x, sr_req **send)
{
    struct rt_pipe *pp = r->pipe;
    int s = ch->stage, peer;
    int64_t n = (int64_t)x->B * x->T;
    x->work = sl->work;
    x->scratch = pp->scratch;
    x->act_in = s > 0 ? sl->act_in : NULL;
    if (s > 0) {
        sr_comm *c = link_of(r, 0, 0, (s - 1) % pp->p, &peer);
        SR_CHECK(sr_comm_recv_t(c, act_dt(ch->st), sl->act_in, n * ch->st->act_in_row, peer, TAG_EVAL, "activation",
                                NULL));
    }
    ch->st->forward(x);
    if (s < pp->S - 1) {
        sr_comm *c = link_of(r, 0, 1, (s + 1) % pp->p, &peer);
        SR_CHECK(sr_comm_send_t(c, act_dt(ch->st), x->act_out, n * ch->st->act_out_row, peer, TAG_EVAL, "activation",
                                send));
    }
    return SR_OK;
}

/* One forward of the whole model through the pipeline (sampling),
 * collective over the pipeline group: the stages run one after another,
 * each on its rank in the first slot of its chunk (no step is in flight
 * then), the boundary activation sent on. e holds the rows, tokens and
 * settings; the rank that ran the last stage gets e->loss and e->logits,
 * and *last = 1. */
sr_status rt_pipe_forward(run *r, sr_exec *e, int *last)
{
    struct rt_pipe *pp = r->pipe;
    *last = 0;
    for (int c = 0; c < pp->v; c++) {
        chunk *ch = &pp->chunks[c];
        sr_exec x = *e;
        SR_CHECK(eval_chunk(r, ch, &ch->slots[0], &x, NULL));
        if (ch->stage == pp->S - 1) {
            e->loss = x.loss;
            e->logits = x.logits;
            e->logits_bf16 = x.logits_bf16;
            *last = 1;
        }
    }
    return SR_OK;
}

/* The validation loss over nb batches of M microbatches through the
 * pipeline, collective over the pipeline group. The microbatches flow as
 * GPipe's forwards do: each rank receives, runs its chunks and sends on
 * without waiting for its sends (a slot is drained before it is reused),
 * so with one chunk a rank the stages work on successive microbatches at
 * once. Transfers only go to later stages, so no rank waits on one that
 * waits on it (NCCL's sends wait for their receives: no cycle either).
 * *sum: the last stage's losses added in microbatch order, 0 elsewhere. */
sr_status rt_pipe_eval(run *r, int64_t nb, double *sum)
{
    struct rt_pipe *pp = r->pipe;
    int M = r->o.microbatches;
    *sum = 0;
    for (int64_t j = 0; j < nb * M; j++)
        for (int c = 0; c < pp->v; c++) {
            chunk *ch = &pp->chunks[c];
            slot *sl = &ch->slots[j % ch->nslots];
            SR_CHECK(drain(sl)); /* its buffers were last sent from */
            sl->mb = (int)(j % M);
            SR_CHECK(fill_tokens(r, &r->val, j / M, sl)); /* as a training forward: every stage */
            sr_exec x;
            rt_exec_init(r, &x, r->B, 0.0f, j / M);
            x.inputs = sl->inputs;
            x.targets = sl->targets;
            x.row0 = (int64_t)rt_first_seq(r, sl->mb) * r->o.seq;
            sr_status st = eval_chunk(r, ch, sl, &x, &sl->send[0]);
            sl->mb = -1;
            SR_CHECK(st);
            if (ch->stage == pp->S - 1) *sum += x.loss;
        }
    for (int c = 0; c < pp->v; c++)
        for (int q = 0; q < pp->chunks[c].nslots; q++) SR_CHECK(drain(&pp->chunks[c].slots[q]));
    return SR_OK;
}

void rt_pipe_report(run *r)
{
    struct rt_pipe *pp = r->pipe;
    if (!pp || pp->step_us <= 0) return;
    /* measured bubble per pipeline rank: idle over the steps' duration */
    double *b = calloc((size_t)pp->p, sizeof(double));
    if (!b) return;
    b[pp->rank] = 1.0 - pp->busy_us / pp->step_us;
    char vs[32] = "";
    if (pp->v > 1) snprintf(vs, sizeof vs, ", v=%d", pp->v);
    if (sr_comm_allreduce_double(r->grid.pp_comm, b, pp->p) == SR_OK)
        for (int k = 0; k < pp->p; k++)
            rt_info(r, "pipeline rank %d: measured bubble %.1f%% (theory %.1f%% for %s, p=%d, m=%d%s)", k,
                    100.0 * b[k], 100.0 * sr_sched_bubble_theory(pp->sched.kind, pp->p, pp->m, pp->v),
                    sr_sched_name(pp->sched.kind), pp->p, pp->m, vs);
    /* every stage's peak in flight and its activation memory at that peak
     * (its slots; the rank's scratch is counted with its first stage) */
    int S = pp->S;
    double *st = calloc(2 * (size_t)S, sizeof(double));
    if (st) {
        for (int c = 0; c < pp->v; c++) {
            const chunk *ch = &pp->chunks[c];
            size_t one = slot_bytes(r, ch->st);
            st[2 * ch->stage] = ch->peak;
            st[2 * ch->stage + 1] = (double)ch->peak * (double)one + (c == 0 ? (double)pp->scratch_bytes : 0.0);
        }
        if (sr_comm_allreduce_double(r->grid.pp_comm, st, 2 * S) == SR_OK)
            for (int s = 0; s < S; s++)
                rt_info(r, "pipeline stage %d (rank %d): peak %d microbatch%s in flight, activations %.2f MiB", s,
                        s % pp->p, (int)st[2 * s], st[2 * s] == 1 ? "" : "es", st[2 * s + 1] / 1048576.0);
        free(st);
    }
    free(b);
}
