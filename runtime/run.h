/* run.h: the training driver's state, shared by train.c (flags, the step,
 * sampling) and state.c (initialization and checkpoints). Internal to
 * libshardrt: names shared between the two files carry the rt_ prefix. */
#ifndef SR_RUN_H
#define SR_RUN_H

#include <stdint.h>
#include <stdio.h>

#include "shardrt.h"
#include "sr_backend.h"
#include "sr_comm.h"
#include "sr_data.h"
#include "sr_dp.h"
#include "sr_mc.h"
#include "sr_program.h"
#include "sr_trace.h"

/* The prefixes Hugging Face files may put before, or leave off, the names
 * (sr_st_find_alias): GPT-2's "transformer.", Llama's "model." */
#define HF_PREFIX "transformer.,model."

typedef struct opts {
    const char *data, *val_data, *lr_schedule, *init, *load, *save, *log, *prompt,
        *dump_grads, *trace, *dump_batches, *comm_stats, *schedule, *recompute, *comm, *tokenizer, *export_dir,
        *eval_mc, *eval_mc_out;
    long steps;
    int batch, seq, microbatches, warmup, save_every, eval_every, eval_batches, sample, sample_every,
        top_k, threads, dp, tp, pp, zero, shuffle, decay_steps, keep_last, eod_mask_loss, eod_token, eval_mc_examples;
    float lr, min_lr, weight_decay, beta1, beta2, eps, grad_clip, dropout, temperature, top_p,
        bucket_mb, comm_timeout, time_limit;
    unsigned long long seed;
    int quiet, help, version;
} opts;

#define RT_MAX_FLAGS 64

/* A run of one parameter's floats that this rank's optimizer updates: arena
 * floats [at, at + n) of params, whose gradients and AdamW moments are at
 * offset so of run.gopt, m and v; tp_partial: the parameter's gradient is
 * summed over the tensor group (sr_program.tp_partial_grads) */
typedef struct rt_seg {
    int param, tp_partial;
    int64_t at, n, so;
} rt_seg;

typedef struct run {
    const sr_program *prog;
    opts o;
    char given[RT_MAX_FLAGS];
    const char *argv0;
    int B;                      /* sequences per microbatch: G / M */
    float *params, *grads, *m, *v;
    char *work;
    size_t work_size;
    int32_t *inputs, *targets;  /* (B, T) in backend memory */
    sr_data train, val;
    int have_train, have_val;
    sr_mc mc;                   /* --eval-mc's examples (have_mc) */
    int have_mc;
    sr_tokenizer *tok;          /* --tokenizer (or --init's): text data, prompt, samples */
    FILE *log;
    FILE *mc_out;               /* --eval-mc-out (rank 0) */
    FILE *batches;              /* --dump-batches */
    long start_step;
    int loaded;                 /* state came from --load */
    int tty, line_open;         /* progress line on a terminal, not yet ended */
    double comm_hidden_us, comm_total_us; /* gradient all-reduce overlap, summed over steps */
    sr_grid grid;               /* ranks, degrees, communicators */
    int have_grid;
    int rank0;                  /* the rank that prints, logs, saves and samples */
    sr_dp *dp;                  /* bucketed gradient all-reduce or ZeRO-1 reduce-scatter (dp > 1) */
    sr_trace *trace;
    int64_t *poff;              /* poff[i]: parameter i's float offset in this rank's arenas;
                                 * -1: another pipeline rank holds it */
    int64_t n_local;            /* floats of this rank's parameter layout */
    int64_t n_alloc;            /* floats of the parameter and gradient arenas (n_local padded for ZeRO) */
    int64_t shard_n;            /* floats of m, v and gopt: n_alloc, or n_alloc / dp with ZeRO-1 */
    float *gshard;              /* ZeRO-1 (non-NULL only then): this rank's slices of the summed gradients */
    float *gopt;                /* the gradients the optimizer reads: grads, or gshard */
    rt_seg *segs;               /* what the optimizer updates, in arena order within a bucket */
    int nsegs;
    const sr_backend *be;       /* where params, grads, m, v, work, inputs, targets live */
    int32_t *h_inputs, *h_targets; /* (B, T) host staging of the token buffers */
    sr_param_desc *full;        /* the parameters in the full layout of checkpoints */
    int64_t n_full;             /* floats of that layout */
    struct rt_pipe *pipe;       /* the pipeline executor (pipeline.c), NULL without one */
    double t_start;             /* when sr_main began: --time-limit counts from it */
    double loss_w;              /* this step's G*T / its loss targets: 1 unless the data is masked */
    int stopped;                /* the run stopped early: RT_STOP_* (train.c) */
} run;

/* state.c: a checkpoint root (with `latest`) or a step directory -> the step
 * directory (malloc'ed) */
sr_status rt_resolve_ckpt(const char *dir, char **out);
/* state.c: --export DIR (collective; rank 0 writes) */
sr_status rt_export(run *r, const char *dir);

/* train.c */
float *rt_host_view(run *r, const float *dev, int64_t n);
void rt_host_done(run *r, float *h, float *dev, int64_t n, int write_back);
void rt_info(run *r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void *rt_alloc_floats(int64_t n);
int rt_flag_given(const char *given, const char *name);

void rt_exec_init(run *r, sr_exec *e, int B, float dropout, long step);
int rt_first_seq(const run *r, int mb);
void rt_record_batch(run *r, long k, int first);

/* pipeline.c: the pipeline executor */
sr_status rt_pipe_init(run *r);
void rt_pipe_free(run *r);
sr_status rt_pipe_step(run *r, long k, double *loss_sum, double *t_end);
sr_status rt_pipe_sync_grads(run *r);
sr_status rt_pipe_forward(run *r, sr_exec *e, int *last);
sr_status rt_pipe_eval(run *r, int64_t nb, double *sum);
void rt_pipe_report(run *r);
size_t rt_pipe_activation_bytes(run *r);
int rt_pipe_owner(const run *r, int param); /* the pipeline rank that counts and saves it */
int rt_pipe_owns(const run *r, int param);  /* this rank is its owner (always without a pipeline) */
int rt_pipe_tied(const run *r, int param);  /* this rank holds one of its copies on several pipeline ranks */

/* state.c: parameters and optimizer state in and out */
sr_status rt_param_layout(run *r);
sr_status rt_agree(run *r, sr_status s, const char *what);
sr_status rt_init_random(run *r);
sr_status rt_init_from(run *r, const char *path);
sr_status rt_load_checkpoint(run *r);
sr_status rt_checkpoint(run *r, long step);
/* ZeRO-1: waits for the parameters' all-gather in flight (SR_OK without) */
sr_status rt_params_settle(run *r);
sr_status rt_dump_grads(run *r, long step);

#endif /* SR_RUN_H */
