/* sr_schedule.h: pipeline schedules as instruction lists, produced by a pure
 * function and checked before anything runs. Shared by the compiler (which
 * checks the file's layout at build time and whose tests run the property
 * checks) and the runtime (which builds the list for the run's flags and
 * checks it again before step 0). A schedule that could deadlock is an error,
 * never a hang.
 *
 * Terms: p pipeline ranks, m microbatches per step, v model chunks per rank
 * (virtual stages; 1 except for the interleaved schedule). The model is cut
 * into S = p*v stages; stage s runs on pipeline rank s % p as its chunk
 * s / p (Megatron's interleaved assignment). Activations go from stage s to
 * s+1, their gradients back from s+1 to s.
 */
#ifndef SR_SCHEDULE_H
#define SR_SCHEDULE_H

#include <stdio.h>

#include "shardrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* schedules, value by value */
typedef enum sr_sched_kind {
    SR_SCHED_GPIPE = 0,       /* all forwards, then all backwards */
    SR_SCHED_1F1B = 1,        /* PipeDream-flush: warm-up, one forward one backward, cool-down */
    SR_SCHED_INTERLEAVED = 2, /* Megatron's interleaved 1F1B over v chunks per rank */
    SR_SCHED_ZBH1 = 3         /* zero-bubble H1 (arXiv 2401.10241): B and W split, W fills bubbles */
} sr_sched_kind;

/* instructions, value by value */
typedef enum sr_op {
    SR_I_RECV_ACT = 0,   /* receive the input activation of (mb, chunk) from the previous stage */
    SR_I_FWD = 1,        /* forward of (mb, chunk) */
    SR_I_SEND_ACT = 2,   /* send its output activation to the next stage */
    SR_I_RECV_GRAD = 3,  /* receive the gradient of its output from the next stage */
    SR_I_BWD = 4,        /* full backward of (mb, chunk) */
    SR_I_BWD_INPUT = 5,  /* backward for the input gradient only (zb-h1 "B") */
    SR_I_BWD_WEIGHT = 6, /* backward for the parameter gradients only (zb-h1 "W") */
    SR_I_SEND_GRAD = 7,  /* send the gradient of its input to the previous stage */
    SR_I_REDUCE = 8,     /* data-parallel gradient reduction of this rank's parameters */
    SR_I_STEP = 9        /* optimizer step */
} sr_op;

typedef struct sr_instr {
    sr_op op;
    int mb;     /* microbatch, -1 for REDUCE/STEP */
    int chunk;  /* model chunk on this rank (0..v-1); the stage is chunk*p + rank */
} sr_instr;

typedef struct sr_schedule {
    sr_sched_kind kind;
    int p, m, v;
    int *n;              /* n[r]: instructions of rank r */
    sr_instr **ins;      /* ins[r][0 .. n[r]) */
} sr_schedule;

/* "gpipe" | "1f1b" | "interleaved" | "zb-h1" -> kind; -1 if unknown */
int sr_sched_parse(const char *name);
const char *sr_sched_name(sr_sched_kind k);
const char *sr_op_name(sr_op op);

/* Builds the instruction lists. Errors (SR_ERR_ARG, with a message giving
 * the numbers): p, m, v < 1; v > 1 for a schedule other than interleaved;
 * interleaved with m not a multiple of p. */
sr_status sr_sched_build(sr_schedule *s, sr_sched_kind kind, int p, int m, int v);
void sr_sched_free(sr_schedule *s);

/* Checks, without running anything: every (mb, stage) has exactly one
 * forward and one backward (or one BWD_INPUT and one BWD_WEIGHT) on the
 * stage's rank, forward before backward, BWD_INPUT before BWD_WEIGHT; the
 * transfers of each (mb, stage): RECV_ACT before its FWD on stages > 0,
 * SEND_ACT after it on stages < S-1, RECV_GRAD before its BWD/BWD_INPUT on
 * stages < S-1, SEND_GRAD after it on stages > 0, none elsewhere; every list
 * ends with REDUCE, STEP; every SEND_ACT/SEND_GRAD matched by the neighbour's
 * RECV in the same order; and a simulation (sends buffered, receives
 * blocking, unit time per FWD/BWD/B/W) completes: no cyclic wait. On failure
 * SR_ERR_STATE with a message naming the rank, the instruction and what it
 * waits for.
 *
 * Transfers travel on one FIFO channel per (sending rank, kind): activations
 * from rank r go to rank (r+1)%p, gradients to rank (r-1+p)%p (with p == 1
 * and v > 1 a rank sends to itself: a local copy). The k-th RECV of a kind
 * matches the k-th SEND of that kind from that neighbour, so an executor must
 * keep the two kinds apart (e.g. one MPI tag per kind) but may rely on the
 * order within a kind. */
sr_status sr_sched_check(const sr_schedule *s);

/* Simulated timeline with costs t_fwd, t_bwd (t_bwd is split evenly into B
 * and W for zb-h1); communication, REDUCE and STEP free. Returns the bubble
 * fraction: idle time / (p * makespan), and the largest number of
 * microbatches whose forward ran but whose backward (W for zb-h1) did not,
 * per rank, in peak_inflight[r] if not NULL (with v > 1 it counts (mb,
 * chunk) pairs, each holding the activations of one chunk). Returns a
 * negative value if the schedule deadlocks (sr_sched_check says where).
 *
 * Simulation against theory (tests/unit/test_schedule.c checks it for p <= 8,
 * m <= 32, v <= 4): gpipe, 1f1b and interleaved equal the formulas below
 * exactly for every ratio t_bwd / t_fwd (the same on every stage, as here);
 * zb-h1 equals its formula exactly for t_bwd = 2 t_fwd (F = B = W), and for
 * m >= p equals the paper's (p-1)F / (m(F+B+W) + (p-1)F) whenever
 * t_bwd <= 2 t_fwd. */
double sr_sched_simulate(const sr_schedule *s, double t_fwd, double t_bwd, int *peak_inflight);

/* The executor's activation slots (runtime/pipeline.c): a microbatch takes
 * one of its chunk's at the first instruction there for which
 * sr_sched_takes_slot holds (RECV_ACT or FWD), and gives it back after the
 * one for which sr_sched_frees_slot holds, its last on the stage:
 * BWD_WEIGHT (zb-h1), else the backward on stage 0, else the gradient's
 * SEND_GRAD. */
int sr_sched_takes_slot(sr_op op);
int sr_sched_frees_slot(sr_sched_kind kind, sr_op op, int stage);
/* The slots those rules need on rank r, per chunk: peak[c] (v entries), the
 * most (mb, chunk c) pairs held at once, which depends on the order of rank
 * r's list only (runtime/pipeline.c sizes its pools with it, shardc plan
 * its activations). */
sr_status sr_sched_slot_peaks(const sr_schedule *s, int r, int *peak);

/* Theoretical bubble fraction: (p-1)/(m+p-1) for gpipe and 1f1b, divided by
 * v for interleaved (Megatron: (p-1)/(v*m + p-1)), and zb-h1's from the
 * paper's formula for t_w = t_b = t_f: idle (p-1)F per rank against 3mF of
 * work, (p-1)/(3m + p-1), for m >= p. With m < p the first backward reaches
 * rank 0 only at 2p-1 and rank 0 then still has 2m passes to run, so the
 * makespan is (2p + 2m - 1)F and the fraction (2p - m - 1)/(2p + 2m - 1)
 * (the two agree at m = p). -1 for p, m or v < 1. */
double sr_sched_bubble_theory(sr_sched_kind kind, int p, int m, int v);

/* Prints the compute order of every rank, one line each, transfers left
 * out: "rank 1: F0 F1 B0 F2 B1 B2" (F forward, B backward, Bi/W the split
 * backward; ".C" after the microbatch names the chunk when v > 1). For
 * `shardc plan`, error reports and debugging. */
void sr_sched_print(FILE *f, const sr_schedule *s);

#ifdef __cplusplus
}
#endif
#endif /* SR_SCHEDULE_H */
