/* train.c: sr_main, the training driver of every generated program.
 *
 * The generated code only knows how to run forward and backward on one
 * microbatch; everything around it lives here: flags, data, initialization,
 * the optimizer step, evaluation, checkpoints, logging and sampling.
 *
 * A step is "for each microbatch: fetch its slice of the global batch,
 * forward, backward", then one optimizer update. Every input to a step (the
 * tokens, the learning rate, the dropout masks) is a pure function of the step
 * number and the flags, which is what makes a resumed run bit-exact and lets
 * data-parallel ranks be added without changing the numbers.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "run.h"
#include "shardrt.h"
#include "sr_backend.h"
#include "sr_ckpt.h"
#include "sr_comm.h"
#include "sr_data.h"
#include "sr_dp.h"
#include "sr_json.h"
#include "sr_program.h"
#include "sr_tp.h"
#include "sr_trace.h"

#define PRAGMA_(x) _Pragma(#x)
#ifdef _OPENMP
#define OMP(x) PRAGMA_(omp x)
#else
#define OMP(x)
#endif


/* RNG stream of the sampler; parameter streams are 1..n_params. */
#define SAMPLE_STREAM 0x53414d504c45ULL
/* M_PI is not ISO C */
#define PI 3.14159265358979323846

/* -------------------------------------------------------------------------- */
/* Flags                                                                       */


typedef enum ftype { F_STR, F_LONG, F_INT, F_FLOAT, F_U64, F_BOOL } ftype;

typedef struct flag {
    const char *name;
    ftype type;
    size_t off;
    const char *arg;
    const char *help;
} flag;

#define O(f) offsetof(opts, f)
static const flag flags[] = {
    {"data", F_STR, O(data), "FILE", "training tokens: llm.c .bin, text (tokenized by --tokenizer, else raw bytes) or JSON Lines records (prompt + completion: loss on the completion); a quoted glob reads many files; a quoted \"W1 FILE1 W2 FILE2 ...\" blends sources by weight"},
    {"val-data", F_STR, O(val_data), "FILE", "validation tokens (same formats, a blend too)"},
    {"shuffle", F_INT, O(shuffle), "0|1", "1: visit the training sequences in a new random order each pass (from --seed)"},
    {"eod-mask-loss", F_INT, O(eod_mask_loss), "0|1", "1: no loss on the token after an end-of-text token (packed documents: a document's first token is not predicted from the one before; Megatron's --eod-mask-loss)"},
    {"eod-token", F_INT, O(eod_token), "ID", "the end-of-text token of --eod-mask-loss (default: the tokenizer's, else 50256 for GPT-2's vocabulary)"},
    {"steps", F_LONG, O(steps), "N", "optimizer steps in total (a resumed run continues to N)"},
    {"batch", F_INT, O(batch), "G", "sequences per optimizer step (global batch)"},
    {"seq", F_INT, O(seq), "T", "sequence length"},
    {"microbatches", F_INT, O(microbatches), "M", "gradient accumulation: G/M sequences at a time"},
    {"lr", F_FLOAT, O(lr), "F", "peak learning rate"},
    {"lr-schedule", F_STR, O(lr_schedule), "S", "constant | cosine | linear | wsd (after warmup)"},
    {"warmup", F_INT, O(warmup), "N", "linear warmup steps"},
    {"min-lr", F_FLOAT, O(min_lr), "F", "final learning rate of cosine, linear and wsd (at most --lr)"},
    {"decay-steps", F_INT, O(decay_steps), "N", "wsd: the last N steps decay linearly to --min-lr (0 = a fifth of --steps)"},
    {"weight-decay", F_FLOAT, O(weight_decay), "F", "AdamW decoupled weight decay (>= 2-D tensors)"},
    {"beta1", F_FLOAT, O(beta1), "F", "AdamW beta1"},
    {"beta2", F_FLOAT, O(beta2), "F", "AdamW beta2"},
    {"eps", F_FLOAT, O(eps), "F", "AdamW epsilon"},
    {"grad-clip", F_FLOAT, O(grad_clip), "F", "clip the global gradient norm to F (0 = off)"},
    {"dropout", F_FLOAT, O(dropout), "P", "dropout probability during training"},
    {"seed", F_U64, O(seed), "N", "seed of initialization, dropout and sampling"},
    {"init", F_STR, O(init), "random|PATH", "random, or parameters from a model.safetensors, a sharded model.safetensors.index.json (Hugging Face), or their directory"},
    {"load", F_STR, O(load), "DIR", "resume from a checkpoint (root with 'latest', or a step directory)"},
    {"save", F_STR, O(save), "DIR", "write checkpoints to DIR/step-NNNNNNNN"},
    {"save-every", F_INT, O(save_every), "N", "checkpoint every N steps (0 = only at the end)"},
    {"keep-last", F_INT, O(keep_last), "N", "keep the N newest step directories under --save, removing older ones (0 = all)"},
    {"time-limit", F_FLOAT, O(time_limit), "MIN", "stop before a step that would end over MIN minutes after the start, saving with --save (0 = none)"},
    {"export", F_STR, O(export_dir), "DIR", "at the end, write DIR as a Hugging Face model directory (vocabulary padding cut)"},
    {"eval-every", F_INT, O(eval_every), "N", "evaluate (--val-data, --eval-mc) every N steps (0 = only at the end)"},
    {"eval-batches", F_INT, O(eval_batches), "N", "validation batches per evaluation"},
    {"eval-mc", F_STR, O(eval_mc), "FILE", "at each evaluation, multiple-choice accuracy on FILE (llm.c's HellaSwag .bin, or HellaSwag's JSON Lines)"},
    {"eval-mc-examples", F_INT, O(eval_mc_examples), "N", "score the first N examples of --eval-mc (0 = all)"},
    {"eval-mc-out", F_STR, O(eval_mc_out), "FILE", "append each scored example's completion losses to FILE (JSON Lines)"},
    {"log", F_STR, O(log), "FILE", "append one JSON line per step and per evaluation"},
    {"sample", F_INT, O(sample), "N", "after training, generate N tokens"},
    {"sample-every", F_INT, O(sample_every), "N", "also print a sample of --sample N tokens every N steps while training (0 = only at the end)"},
    {"temperature", F_FLOAT, O(temperature), "F", "sampling temperature (0 = greedy)"},
    {"top-k", F_INT, O(top_k), "K", "sample from the K most likely tokens (0 = all)"},
    {"top-p", F_FLOAT, O(top_p), "P", "sample from the most likely tokens whose probabilities add up to P (nucleus sampling; 1 = all)"},
    {"prompt", F_STR, O(prompt), "TEXT", "sampling prompt (through the tokenizer, or bytes for a byte-level model)"},
    {"tokenizer", F_STR, O(tokenizer), "PATH|none", "byte-level BPE tokenizer (GPT-2, Llama 3, Qwen2) for text data, --prompt and samples: tokenizer.json, vocab.json, gpt2_tokenizer.bin or their directory (default: the one with --init's or --load's files)"},
    {"threads", F_INT, O(threads), "N", "CPU threads (0 = OpenMP/OpenBLAS default)"},
    {"dump-grads", F_STR, O(dump_grads), "FILE", "write the first step's gradients (before clipping) as safetensors"},
    {"dp", F_INT, O(dp), "N", "data-parallel degree (world = dp x tp x pp ranks under mpirun)"},
    {"tp", F_INT, O(tp), "N", "tensor-parallel degree"},
    {"pp", F_INT, O(pp), "N", "pipeline-parallel degree"},
    {"zero", F_INT, O(zero), "0|1", "1: shard the AdamW state over the data ranks (ZeRO-1)"},
    {"bucket-mb", F_FLOAT, O(bucket_mb), "MB", "gradient bucket size in MB (reduced during the backward)"},
    {"comm", F_STR, O(comm), "nccl|mpi", "collectives over NCCL, or MPI (CUDA: staged through host memory)"},
    {"comm-timeout", F_FLOAT, O(comm_timeout), "S", "seconds a collective may wait before the run aborts"},
    {"trace", F_STR, O(trace), "DIR", "write a Chrome trace per rank to DIR/trace-rankR.json"},
    {"dump-batches", F_STR, O(dump_batches), "DIR", "record which sequences each rank trains on (testing)"},
    {"comm-stats", F_STR, O(comm_stats), "FILE", "write rank 0's collective calls and bytes per group (%r in FILE: every rank's)"},
    {"schedule", F_STR, O(schedule), "S", "pipeline schedule: gpipe | 1f1b | interleaved | zb-h1"},
    {"recompute", F_STR, O(recompute), "block|none", "activation recomputation (compiled in: shardc build --recompute)"},
    {"quiet", F_BOOL, O(quiet), NULL, "print only errors and samples"},
    {"help", F_BOOL, O(help), NULL, "show this help"},
    {"version", F_BOOL, O(version), NULL, "show the model and runtime versions"},
};
#define N_FLAGS ((int)(sizeof flags / sizeof flags[0]))
_Static_assert(sizeof flags / sizeof flags[0] <= RT_MAX_FLAGS, "raise RT_MAX_FLAGS in run.h");

static void set_defaults(opts *o, const sr_program *prog)
{
    const sr_train_defaults *d = &prog->defaults;
    memset(o, 0, sizeof *o);
    o->data = d->data;
    o->val_data = d->val_data;
    o->steps = d->steps;
    o->batch = d->batch > 0 ? d->batch : 8;
    o->seq = d->seq > 0 ? d->seq : (prog->max_seq > 0 ? prog->max_seq : 64);
    o->microbatches = d->microbatches > 0 ? d->microbatches : 1;
    o->lr = d->lr;
    o->min_lr = d->min_lr;
    o->warmup = d->warmup;
    o->decay_steps = d->decay_steps;
    o->lr_schedule = d->lr_schedule ? d->lr_schedule : "constant";
    o->weight_decay = d->weight_decay;
    /* a train block that leaves the betas/eps at 0 means "torch defaults" */
    o->beta1 = d->beta1 > 0 ? d->beta1 : 0.9f;
    o->beta2 = d->beta2 > 0 ? d->beta2 : 0.999f;
    o->eps = d->eps > 0 ? d->eps : 1e-8f;
    o->grad_clip = d->grad_clip;
    o->dropout = d->dropout;
    o->seed = d->seed;
    o->eval_every = d->eval_every;
    o->save_every = d->save_every;
    o->eval_batches = 8;
    o->temperature = 1.0f;
    o->top_p = 1.0f;
    o->init = "random";
    o->eod_token = -1; /* the tokenizer's */
    /* the degrees the program was built for; dp = what the world leaves
     * (filled in once the world size is known, unless --dp is given) */
    o->tp = prog->tp > 0 ? prog->tp : 1;
    o->pp = prog->pp > 0 ? prog->pp : 1;
    o->dp = 0;
    o->bucket_mb = 25.0f; /* PyTorch DDP's default */
    o->schedule = d->schedule ? d->schedule : prog->virtual_stages > 1 ? "interleaved" : "1f1b";
    o->recompute = prog->recompute ? "block" : "none";
    o->comm_timeout = 60.0f;
    o->comm = sr_comm_backend_name((prog->backend ? prog->backend : &sr_backend_host)->comm);
}

static sr_status parse_value(const flag *f, const char *v, opts *o)
{
    char *end;
    void *dst = (char *)o + f->off;
    errno = 0;
    switch (f->type) {
    case F_STR:
        *(const char **)dst = v;
        return SR_OK;
    case F_LONG:
    case F_INT: {
        long x = strtol(v, &end, 10);
        if (end == v || *end || errno == ERANGE || (f->type == F_INT && (x > INT_MAX || x < INT_MIN)))
            return sr_seterr(SR_ERR_USAGE, "--%s: '%s' is not an integer", f->name, v);
        if (f->type == F_LONG) *(long *)dst = x;
        else *(int *)dst = (int)x;
        return SR_OK;
    }
    case F_FLOAT: {
        double x = strtod(v, &end);
        if (end == v || *end || !isfinite(x) || fabs(x) > 3e38)
            return sr_seterr(SR_ERR_USAGE, "--%s: '%s' is not a number", f->name, v);
        *(float *)dst = (float)x;
        return SR_OK;
    }
    case F_U64: {
        const char *p = v;
        while (*p == ' ') p++;
        unsigned long long x = strtoull(v, &end, 10);
        if (end == v || *end || errno == ERANGE || *p == '-')
            return sr_seterr(SR_ERR_USAGE, "--%s: '%s' is not a non-negative integer", f->name, v);
        *(unsigned long long *)dst = x;
        return SR_OK;
    }
    case F_BOOL:
        *(int *)dst = 1;
        return SR_OK;
    }
    return SR_OK;
}

/* GNU style: --name value or --name=value. given[i] records explicit flags. */
static sr_status parse_flags(opts *o, char *given, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0')
            return sr_seterr(SR_ERR_USAGE, "unexpected argument '%s' (flags start with --)", a);
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t nl = eq ? (size_t)(eq - name) : strlen(name);
        int k = -1;
        for (int j = 0; j < N_FLAGS; j++)
            if (strlen(flags[j].name) == nl && strncmp(flags[j].name, name, nl) == 0) k = j;
        if (k < 0) return sr_seterr(SR_ERR_USAGE, "unknown flag '--%.*s'", (int)nl, name);
        const flag *f = &flags[k];
        given[k] = 1;
        if (f->type == F_BOOL) {
            if (eq) return sr_seterr(SR_ERR_USAGE, "--%s takes no value", f->name);
            SR_CHECK(parse_value(f, NULL, o));
            continue;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v) {
            if (i + 1 >= argc) return sr_seterr(SR_ERR_USAGE, "--%s needs a value (%s)", f->name, f->arg);
            v = argv[++i];
        }
        SR_CHECK(parse_value(f, v, o));
    }
    return SR_OK;
}

int rt_flag_given(const char *given, const char *name)
{
    for (int j = 0; j < N_FLAGS; j++)
        if (strcmp(flags[j].name, name) == 0) return given[j];
    return 0;
}

/* Flags given that this run would ignore: a warning each (rank 0), so that a
 * missing --save or --sample shows before the run, not after it. A value that
 * asks for nothing (--eval-every 0, say, to be sure) is not warned about. */
static void warn_idle_flags(const run *r)
{
    const opts *o = &r->o;
    const int no_sample = o->sample == 0, no_val = !o->val_data;
    const struct { const char *flag; int idle; const char *why; } w[] = {
        {"save-every", !o->save && o->save_every > 0, "without --save DIR"},
        {"keep-last", !o->save && o->keep_last > 0, "without --save DIR"},
        {"eval-every", no_val && !o->eval_mc && o->eval_every > 0, "without --val-data FILE or --eval-mc FILE"},
        {"eval-mc-examples", !o->eval_mc, "without --eval-mc FILE"},
        {"eval-mc-out", !o->eval_mc, "without --eval-mc FILE"},
        {"eval-batches", no_val, "without --val-data FILE"},
        {"prompt", no_sample, "without --sample N"},
        {"sample-every", no_sample && o->sample_every > 0, "without --sample N"},
        {"temperature", no_sample, "without --sample N"},
        {"top-k", no_sample, "without --sample N"},
        {"top-p", no_sample, "without --sample N"},
        {"decay-steps", strcmp(o->lr_schedule, "wsd") != 0 && o->decay_steps > 0, "unless --lr-schedule is wsd"},
        {"min-lr", strcmp(o->lr_schedule, "constant") == 0 && o->min_lr > 0, "with --lr-schedule constant"},
    };
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        if (w[i].idle && rt_flag_given(r->given, w[i].flag))
            fprintf(stderr, "%s: warning: --%s has no effect %s\n", r->argv0, w[i].flag, w[i].why);
}

static sr_status check_opts(const opts *o, const char *given, const sr_program *prog)
{
#define NEED(cond, ...) \
    do { if (!(cond)) return sr_seterr(SR_ERR_USAGE, __VA_ARGS__); } while (0)
    NEED(o->steps >= 0, "--steps must be >= 0 (got %ld)", o->steps);
    NEED(o->batch >= 1, "--batch must be >= 1 (got %d)", o->batch);
    NEED(o->seq >= 1, "--seq must be >= 1 (got %d)", o->seq);
    NEED(prog->max_seq <= 0 || o->seq <= prog->max_seq,
         "--seq %d is longer than the model's %d positions", o->seq, prog->max_seq);
    NEED(o->microbatches >= 1, "--microbatches must be >= 1 (got %d)", o->microbatches);
    NEED(o->dp >= 1 && o->tp >= 1 && o->pp >= 1, "--dp, --tp and --pp must be >= 1 (got %d, %d, %d)",
         o->dp, o->tp, o->pp);
    NEED(o->batch % ((long long)o->dp * o->microbatches) == 0,
         "--batch %d is not divisible by --dp %d x --microbatches %d", o->batch, o->dp,
         o->microbatches);
    NEED(o->tp == prog->tp, "--tp %d: this program was built for tensor=%d; rebuild it with "
         "shardc build --tp %d (the compiler splits the layers)", o->tp, prog->tp, o->tp);
    NEED(o->pp == (prog->pp > 0 ? prog->pp : 1), "--pp %d: this program was built for pipeline=%d; rebuild "
         "it with shardc build --pp %d (the compiler cuts the stages)", o->pp, prog->pp > 0 ? prog->pp : 1, o->pp);
    NEED(o->zero == 0 || o->zero == 1, "--zero must be 0 or 1 (got %d)", o->zero);
    NEED(!prog->sequence_parallel || o->seq % prog->tp == 0,
         "--seq %d is not divisible by --tp %d, which sequence parallelism needs", o->seq, prog->tp);
    NEED(!strcmp(o->recompute, "block") || !strcmp(o->recompute, "none"),
         "--recompute must be block or none (got '%s')", o->recompute);
    NEED(!strcmp(o->recompute, prog->recompute ? "block" : "none"),
         "--recompute %s: this program was built with recompute=%s; rebuild it with shardc build "
         "--recompute %s (the compiler plans the memory)", o->recompute, prog->recompute ? "block" : "none",
         o->recompute);
    NEED(o->bucket_mb > 0, "--bucket-mb must be > 0 (got %g)", (double)o->bucket_mb);
    NEED(o->comm_timeout > 0, "--comm-timeout must be > 0 (got %g)", (double)o->comm_timeout);
    NEED(o->keep_last >= 0, "--keep-last must be >= 0 (got %d)", o->keep_last);
    NEED(o->time_limit >= 0 && isfinite(o->time_limit), "--time-limit must be >= 0 minutes (got %g)",
         (double)o->time_limit);
    NEED(!(o->zero && o->dump_grads), "--dump-grads is not available with --zero 1");
    NEED((long long)o->batch * o->seq <= INT_MAX / 2, "--batch x --seq = %lld tokens is too large",
         (long long)o->batch * o->seq);
    NEED(o->lr >= 0, "--lr must be >= 0 (got %g)", (double)o->lr);
    NEED(o->min_lr >= 0, "--min-lr must be >= 0 (got %g)", (double)o->min_lr);
    NEED(strcmp(o->lr_schedule, "constant") == 0 || strcmp(o->lr_schedule, "cosine") == 0 ||
             strcmp(o->lr_schedule, "linear") == 0 || strcmp(o->lr_schedule, "wsd") == 0,
         "--lr-schedule must be constant, cosine, linear or wsd (got '%s')", o->lr_schedule);
    /* as Megatron-LM's scheduler asserts: a decay towards a higher rate is a typo, not a schedule
     * (--steps 0, a sample or an export, runs none) */
    NEED(o->steps == 0 || strcmp(o->lr_schedule, "constant") == 0 || o->min_lr <= o->lr,
         "--min-lr %g%s is above --lr %g, so the %s schedule would raise the rate; give a --min-lr of at "
         "most --lr (or --lr-schedule constant)", (double)o->min_lr,
         rt_flag_given(given, "min-lr") ? "" : " (the model's train.min_lr)", (double)o->lr, o->lr_schedule);
    NEED(o->decay_steps >= 0, "--decay-steps must be >= 0 (got %d)", o->decay_steps);
    NEED(o->warmup >= 0, "--warmup must be >= 0 (got %d)", o->warmup);
    NEED(o->weight_decay >= 0, "--weight-decay must be >= 0 (got %g)", (double)o->weight_decay);
    NEED(o->beta1 >= 0 && o->beta1 < 1, "--beta1 must be in [0, 1) (got %g)", (double)o->beta1);
    NEED(o->beta2 >= 0 && o->beta2 < 1, "--beta2 must be in [0, 1) (got %g)", (double)o->beta2);
    NEED(o->eps > 0, "--eps must be > 0 (got %g)", (double)o->eps);
    NEED(o->grad_clip >= 0, "--grad-clip must be >= 0 (got %g)", (double)o->grad_clip);
    NEED(o->dropout >= 0 && o->dropout < 1, "--dropout must be in [0, 1) (got %g)", (double)o->dropout);
    NEED(o->save_every >= 0, "--save-every must be >= 0 (got %d)", o->save_every);
    NEED(o->eval_every >= 0, "--eval-every must be >= 0 (got %d)", o->eval_every);
    NEED(o->shuffle == 0 || o->shuffle == 1, "--shuffle must be 0 or 1 (got %d)", o->shuffle);
    NEED(o->eod_mask_loss == 0 || o->eod_mask_loss == 1, "--eod-mask-loss must be 0 or 1 (got %d)", o->eod_mask_loss);
    NEED(o->eod_token >= -1, "--eod-token must be a token id >= 0 (got %d)", o->eod_token);
    NEED(o->eod_token == -1 || o->eod_mask_loss, "--eod-token is the token --eod-mask-loss 1 masks after: give both");
    NEED(o->eval_batches >= 1, "--eval-batches must be >= 1 (got %d)", o->eval_batches);
    NEED(o->eval_mc_examples >= 0, "--eval-mc-examples must be >= 0 (got %d)", o->eval_mc_examples);
    NEED(o->sample >= 0, "--sample must be >= 0 (got %d)", o->sample);
    NEED(o->sample_every >= 0, "--sample-every must be >= 0 (got %d)", o->sample_every);
    NEED(o->temperature >= 0, "--temperature must be >= 0 (got %g)", (double)o->temperature);
    NEED(o->top_k >= 0, "--top-k must be >= 0 (got %d)", o->top_k);
    NEED(o->top_p > 0 && o->top_p <= 1, "--top-p must be in (0, 1] (got %g)", (double)o->top_p);
    NEED(o->threads >= 0, "--threads must be >= 0 (got %d)", o->threads);
    NEED(!o->tokenizer || *o->tokenizer, "--tokenizer needs a path or 'none'");
    NEED(!(o->load && o->init && strcmp(o->init, "random") != 0),
         "--init and --load cannot be combined (--load restores the parameters)");
    NEED(o->init && *o->init, "--init needs 'random' or a path");
    NEED(!o->data || *o->data, "--data needs a file name");
    NEED(!o->save || *o->save, "--save needs a directory");
    NEED(!o->export_dir || *o->export_dir, "--export needs a directory");
#undef NEED
    return SR_OK;
}

/* --comm (or SHARDC_COMM, which from_env says it came from): a backend this
 * program's memory can use */
static sr_status parse_comm(const opts *o, const sr_program *prog, int from_env, sr_comm_backend *out)
{
    const sr_backend *be = prog->backend ? prog->backend : &sr_backend_host;
    const char *what = from_env ? "SHARDC_COMM" : "--comm";
    char sep = from_env ? '=' : ' ';
    if (!strcmp(o->comm, "mpi")) *out = SR_COMM_MPI;
    else if (!strcmp(o->comm, "nccl")) *out = SR_COMM_NCCL;
    else return sr_seterr(SR_ERR_USAGE, "%s must be nccl or mpi (got '%s')", what, o->comm);
    if (!(be->comms & 1u << *out))
        return sr_seterr(SR_ERR_USAGE, "%s%c%s: %s; use --comm %s", what, sep, o->comm,
                         be->comm_why ? be->comm_why : "this program cannot use it",
                         sr_comm_backend_name(be->comm));
    return SR_OK;
}

static void print_help(const sr_program *prog, const opts *d, const char *argv0)
{
    printf("usage: %s [flags]\n", argv0);
    printf("Trains %s (built by shardc from %s): %d parameter tensors, %lld floats, vocab %d", prog->name ? prog->name : "model",
           prog->source ? prog->source : "?", prog->n_params, (long long)prog->n_param_floats, sr_classes(prog));
    if (sr_classes(prog) != prog->vocab) printf(" (padded to %d)", prog->vocab);
    printf(".\n\n");
    for (int i = 0; i < N_FLAGS; i++) {
        const flag *f = &flags[i];
        char left[64], def[96] = "";
        snprintf(left, sizeof left, "--%s%s%s", f->name, f->arg ? " " : "", f->arg ? f->arg : "");
        const void *p = (const char *)d + f->off;
        switch (f->type) {
        case F_STR:
            if (*(const char *const *)p) snprintf(def, sizeof def, " (default %s)", *(const char *const *)p);
            break;
        case F_LONG: snprintf(def, sizeof def, " (default %ld)", *(const long *)p); break;
        case F_INT:
            if (f->off == O(dp) && *(const int *)p == 0) /* worked out from the world size */
                snprintf(def, sizeof def, " (default: the ranks left, world / (tp x pp))");
            else if (*(const int *)p >= 0) /* -1: the flag's text says what it is */
                snprintf(def, sizeof def, " (default %d)", *(const int *)p);
            break;
        case F_FLOAT: snprintf(def, sizeof def, " (default %g)", (double)*(const float *)p); break;
        case F_U64: snprintf(def, sizeof def, " (default %llu)", *(const unsigned long long *)p); break;
        case F_BOOL: break;
        }
        printf("  %-26s %s%s\n", left, f->help, def);
    }
    printf("\nParallel runs: mpirun -np N %s ..., srun --mpi=pmix -n N %s ..., or mpirun inside salloc/sbatch;\n"
           "N = dp x tp x pp.\n", argv0, argv0);
    printf("\nEnvironment: SHARDC_COMM=nccl|mpi is --comm where the flag is not given.\n");
    if (prog->backend && prog->backend->name && !strcmp(prog->backend->name, "cuda"))
        printf("CUDA: SHARDC_CUDA_ATTN=auto|wmma|mma|cudnn|simt, the attention kernels (auto, the default: a trial\n"
               "at the first call picks the fastest path that agrees with simt, said after the first step);\n"
               "SHARDC_CUDA_PROFILE=1 (device time by .model line, at exit); SHARDC_CUDA_SYNC=1 (wait after\n"
               "each kernel: errors name it); SHARDC_CUDA_ARENA_MB=N (the device arena's size);\n"
               "SHARDC_CUDA_BGRAD=0 (bias gradients apart from the weight GEMMs); SHARDC_CUDA_TP_OVERLAP=0 (a\n"
               "column-parallel input gradient's all-reduce or reduce-scatter after its weight gradient,\n"
               "not during it); SHARDC_CUDA_GEMM=heuristic|tune (tune: each GEMM's cuBLASLt candidates\n"
               "timed at its first call, the fastest kept; not with --tp); SHARDC_CUDNN_LIB=FILE.\n");
    printf("Stopping early: with --save, a SIGTERM, SIGUSR1 (mpirun passes SIGUSR1 on; Slurm's --signal) or Ctrl-C\n"
           "ends the run after the step under way, with a checkpoint to resume from (a second one ends it at once).\n");
    printf("Exit status: 0 ok, 1 error, 2 usage error, 3 stopped early (a signal or --time-limit).\n");
}

/* -------------------------------------------------------------------------- */
/* Run state                                                                   */

/* A host-readable copy of n floats of backend memory; on the host backend
 * the memory itself. host_done writes it back when asked, and frees it. */
float *rt_host_view(run *r, const float *dev, int64_t n)
{
    if (r->be == &sr_backend_host) return (float *)dev;
    float *h = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (h) r->be->d2h(h, dev, sizeof(float) * (size_t)n);
    return h;
}

void rt_host_done(run *r, float *h, float *dev, int64_t n, int write_back)
{
    if (r->be == &sr_backend_host || !h) return;
    if (write_back) r->be->h2d(dev, h, sizeof(float) * (size_t)n);
    free(h);
}

/* the staged tokens to the backend's buffers */
static void push_tokens(run *r, int rows)
{
    size_t bytes = (size_t)rows * (size_t)r->o.seq * sizeof(int32_t);
    r->be->h2d(r->inputs, r->h_inputs, bytes);
    r->be->h2d(r->targets, r->h_targets, bytes);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Info lines go to stderr so stdout carries only samples. */
void rt_info(run *r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void rt_info(run *r, const char *fmt, ...)
{
    if (r->o.quiet || !r->rank0) return;
    if (r->line_open) {
        fputc('\n', stderr);
        r->line_open = 0;
    }
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void *rt_alloc_floats(int64_t n)
{
    void *p = NULL;
    size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(float);
    if (posix_memalign(&p, 64, bytes) != 0) return NULL;
    memset(p, 0, bytes);
    return p;
}

static sr_status check_program(const sr_program *prog)
{
    if (!prog || !prog->forward || !prog->work_bytes || prog->n_params < 0 || prog->vocab < 1)
        return sr_seterr(SR_ERR_STATE, "the program descriptor is incomplete (rebuild it with shardc)");
    for (int i = 0; i < prog->n_params; i++) {
        const sr_param_desc *p = &prog->params[i];
        int64_t n = 1;
        for (int d = 0; d < p->ndim && d < 4; d++) n *= p->dims[d];
        if (p->ndim < 0 || p->ndim > 4 || n != p->numel || p->offset < 0 ||
            p->offset + p->numel > prog->n_param_floats)
            return sr_seterr(SR_ERR_STATE,
                             "parameter '%s' of the program descriptor is inconsistent (shape, "
                             "size or offset); rebuild it with shardc",
                             p->name ? p->name : "?");
    }
    return SR_OK;
}

/* -------------------------------------------------------------------------- */
/* Training                                                                    */

static float lr_at(const opts *o, long k)
{
    if (k < o->warmup) return (float)((double)o->lr * (double)(k + 1) / (double)o->warmup);
    int cosine = strcmp(o->lr_schedule, "cosine") == 0, linear = strcmp(o->lr_schedule, "linear") == 0;
    int wsd = strcmp(o->lr_schedule, "wsd") == 0;
    if (!cosine && !linear && !wsd) return o->lr;
    /* the decay runs over [start, steps): after warmup, or wsd's last
     * decay_steps (a fifth of the run by default, never into the warmup) */
    long start = o->warmup;
    if (wsd) {
        long d = o->decay_steps > 0 ? o->decay_steps : o->steps / 5;
        if (o->steps - d > start) start = o->steps - d;
        if (k < start) return o->lr; /* the stable part */
    }
    long span = o->steps - start;
    double frac = (double)(k - start) / (double)(span > 1 ? span : 1);
    if (frac > 1) frac = 1; /* past --steps (a longer resumed run): stay at min_lr */
    if (cosine) return (float)(o->min_lr + 0.5 * ((double)o->lr - o->min_lr) * (1.0 + cos(PI * frac)));
    return (float)(o->min_lr + ((double)o->lr - o->min_lr) * (1.0 - frac));
}

void rt_exec_init(run *r, sr_exec *e, int B, float dropout, long step)
{
    memset(e, 0, sizeof *e);
    e->B = B;
    e->T = r->o.seq;
    e->params = r->params;
    e->grads = r->grads;
    e->work = r->work;
    e->inputs = r->inputs;
    e->targets = r->targets;
    /* the mean over the global batch's loss targets: each microbatch's loss is
     * its rows' sum / B*T, so a masked batch's weight makes it sum / targets */
    e->dloss = (float)r->loss_w / (float)(r->o.microbatches * r->grid.dp);
    e->dropout = dropout;
    e->seed = r->o.seed;
    e->tp_rank = r->grid.tp_rank;
    e->tp = r->grid.tp;
    e->tp_comm = r->grid.tp_comm;
    e->step = (uint64_t)step;
}

/* --dump-batches: one line per sequence trained on: step, sequence index in
 * the global batch, FNV-1a hash of its tokens and targets (r->h_inputs,
 * r->h_targets: the microbatch just read) */
void rt_record_batch(run *r, long k, int first)
{
    int T = r->o.seq;
    for (int j = 0; j < r->B; j++) {
        uint64_t h = 1469598103934665603ULL;
        for (int t = 0; t < T; t++) {
            h = (h ^ (uint64_t)(uint32_t)r->h_inputs[j * T + t]) * 1099511628211ULL;
            h = (h ^ (uint64_t)(uint32_t)r->h_targets[j * T + t]) * 1099511628211ULL;
        }
        fprintf(r->batches, "%ld %d %016llx\n", k, first + j, (unsigned long long)h);
    }
}

/* the first sequence of microbatch mb of this data rank in the global batch:
 * data rank d owns sequences [d*G/dp, (d+1)*G/dp), in microbatches of B */
int rt_first_seq(const run *r, int mb)
{
    return r->grid.dp_rank * (r->o.batch / r->grid.dp) + mb * r->B;
}

/* a forward of the whole model: one program, or (with a pipeline) every
 * stage in turn, a collective over the pipeline group; *last: this rank
 * has the loss and the logits (the last stage's) */
static sr_status forward_whole(run *r, sr_exec *e, int *last)
{
    *last = 1;
    if (r->pipe) return rt_pipe_forward(r, e, last);
    r->prog->forward(e);
    return SR_OK;
}

/* G*T over the loss targets of the global batch: the loss and the gradient
 * are means over those; 1 for unmasked data, 0 when none (nothing to learn
 * from: a loss of 0 and no gradient) */
static double loss_weight(const sr_data *d, int64_t batch, int G, int T)
{
    if (!d->masked) return 1.0;
    int64_t c = sr_data_loss_targets(d, batch, G, T);
    return c > 0 ? (double)G * T / (double)c : 0.0;
}

static sr_status evaluate(run *r, double *out)
{
    const opts *o = &r->o;
    int64_t E = sr_data_batches_per_epoch(&r->val, o->batch, o->seq);
    int64_t nb = o->eval_batches < E ? o->eval_batches : E; /* no batch counted twice */
    double sum = 0;
    if (r->pipe) {
        SR_CHECK(rt_pipe_eval(r, nb, &sum));
        /* the last stage's sum to every pipeline rank (the others add 0) */
        SR_CHECK(sr_comm_allreduce_double(r->grid.pp_comm, &sum, 1));
    } else {
        for (int64_t b = 0; b < nb; b++)
            for (int mb = 0; mb < o->microbatches; mb++) {
                int first = rt_first_seq(r, mb);
                SR_CHECK(sr_data_batch(&r->val, b, o->batch, o->seq, first, r->B, r->h_inputs, r->h_targets));
                push_tokens(r, r->B);
                sr_exec e;
                rt_exec_init(r, &e, r->B, 0.0f, b);
                e.row0 = (int64_t)first * o->seq;
                r->prog->forward(&e);
                sum += e.loss;
            }
    }
    if (r->grid.dp > 1) SR_CHECK(sr_comm_allreduce_double(r->grid.dp_comm, &sum, 1));
    *out = sum / (double)(nb * o->microbatches * r->grid.dp);
    if (r->val.masked) { /* the mean over the batches' loss targets */
        int64_t c = 0;
        for (int64_t b = 0; b < nb; b++) c += sr_data_loss_targets(&r->val, b, o->batch, o->seq);
        *out = c > 0 ? *out * (double)nb * o->batch * o->seq / (double)c : 0.0;
    }
    return SR_OK;
}

/* npos rows of the last stage's logits, from row pos of e's (B, T) grid on,
 * into out (2 * npos * V floats of room): under tensor parallelism, where
 * each rank holds V/tp columns, as tp blocks of npos rows of V/tp columns
 * (rank q's block first holds columns q*V/tp on), as the all-gather leaves
 * them; one whole row when npos is 1 */
static sr_status fetch_logits(run *r, const sr_exec *e, size_t pos, int npos, float *out)
{
    int Vl = r->prog->vocab / r->grid.tp;
    size_t n = (size_t)npos * Vl;
    float *mine = out + (size_t)npos * r->prog->vocab;
    if (e->logits) {
        r->be->d2h(mine, e->logits + pos * (size_t)Vl, n * sizeof(float));
    } else { /* bf16 bits into the upper half of mine's float room, widened in place
              * upwards (float j never reaches the bits of j + 1 on) */
        uint16_t *bits = (uint16_t *)(mine + n) - n;
        r->be->d2h(bits, e->logits_bf16 + pos * (size_t)Vl, n * sizeof(uint16_t));
        for (size_t j = 0; j < n; j++) {
            uint32_t u = (uint32_t)bits[j] << 16;
            memcpy(&mine[j], &u, sizeof u);
        }
    }
    if (r->grid.tp > 1) return sr_comm_allgather(r->grid.tp_comm, mine, out, (int64_t)n, "logits", NULL);
    memcpy(out, mine, n * sizeof(float));
    return SR_OK;
}

/* -log softmax(logits)[target] at row p of npos rows as fetch_logits leaves
 * them (tp blocks of Vl columns), over the nv classes */
static double token_loss(const float *out, int p, int npos, int Vl, int tp, int nv, int target)
{
    double mx = -INFINITY, z = 0, xt = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int q = 0; q < tp; q++) {
            const float *x = out + ((size_t)q * npos + (size_t)p) * Vl;
            for (int j = 0; j < Vl && q * Vl + j < nv; j++) {
                if (pass == 0) mx = x[j] > mx ? x[j] : mx;
                else z += exp((double)x[j] - mx);
            }
            if (pass == 1 && target >= q * Vl && target < (q + 1) * Vl) xt = x[target - q * Vl];
        }
    return mx + log(z) - xt;
}

/* the logits rows scored at a time (2 * MC_ROWS * V floats of room) */
#define MC_ROWS 32

/* --eval-mc: each completion's summed loss after its example's context
 * (cut from the left where the two are longer than --seq: the completion
 * whole). The examples are dealt round-robin over the data ranks, each rank's
 * completions B rows to a forward (its tensor and pipeline group in step);
 * the last stage sums the losses, then every rank has them all. Rank 0 then
 * counts the right answers: least summed loss (acc), least loss per token
 * (acc_norm, llm.c's HellaSwag figure). */
static sr_status mc_eval(run *r, long step)
{
    const opts *o = &r->o;
    const sr_mc *mc = &r->mc;
    int T = o->seq, V = r->prog->vocab, tp = r->grid.tp, Vl = V / tp, nv = sr_classes(r->prog);
    int ne = o->eval_mc_examples > 0 && o->eval_mc_examples < mc->n ? o->eval_mc_examples : mc->n;
    int64_t nc = mc->first[ne];
    double *loss = calloc((size_t)nc + 1, sizeof *loss);
    float *out = malloc(2 * (size_t)MC_ROWS * V * sizeof *out);
    int64_t *comp = malloc((size_t)r->B * sizeof *comp);
    int *ex = malloc((size_t)r->B * sizeof *ex), *cut = malloc((size_t)r->B * sizeof *cut);
    sr_status s = (loss && out && comp && ex && cut) ? SR_OK : sr_seterr(SR_ERR_NOMEM, "out of memory for --eval-mc");
    int i = r->grid.dp_rank;
    int64_t k = i < ne ? mc->first[i] : 0;
    while (s == SR_OK) {
        int rows = 0; /* the next B completions of this data rank's examples */
        for (; rows < r->B && i < ne; rows++) {
            ex[rows] = i;
            comp[rows] = k;
            if (++k == mc->first[i + 1]) {
                i += r->grid.dp;
                k = i < ne ? mc->first[i] : 0;
            }
        }
        if (rows == 0) break;
        for (int j = 0; j < rows; j++) { /* context then completion, the completion's tokens the targets */
            int32_t *in = r->h_inputs + (size_t)j * T, *tg = r->h_targets + (size_t)j * T;
            int lc = mc->ctx_len[ex[j]], L = lc + mc->comp_len[comp[j]];
            cut[j] = L - 1 > T ? L - 1 - T : 0;
            for (int t = 0; t < T; t++) {
                int a = cut[j] + t, b = a + 1;
                in[t] = b < L ? (a < lc ? mc->tok[mc->ctx[ex[j]] + a] : mc->tok[mc->comp[comp[j]] + a - lc]) : 0;
                tg[t] = b < L && b >= lc ? mc->tok[mc->comp[comp[j]] + b - lc] : -1;
            }
        }
        push_tokens(r, rows);
        sr_exec e;
        rt_exec_init(r, &e, rows, 0.0f, step);
        int last;
        s = forward_whole(r, &e, &last);
        if (s != SR_OK || !last) continue;
        if (!e.logits && !e.logits_bf16) {
            s = sr_seterr(SR_ERR_STATE, "model %s has no logits output; --eval-mc needs them",
                          r->prog->name ? r->prog->name : "?");
            break;
        }
        for (int j = 0; j < rows && s == SR_OK; j++) {
            int lc = mc->ctx_len[ex[j]], lm = mc->comp_len[comp[j]];
            size_t p0 = (size_t)j * T + (size_t)(lc - 1 - cut[j]); /* predicts the completion's first token */
            for (int a = 0; a < lm && s == SR_OK; a += MC_ROWS) {
                int np = lm - a < MC_ROWS ? lm - a : MC_ROWS;
                s = fetch_logits(r, &e, p0 + (size_t)a, np, out);
                for (int p = 0; p < np && s == SR_OK; p++)
                    loss[comp[j]] += token_loss(out, p, np, Vl, tp, nv, mc->tok[mc->comp[comp[j]] + a + p]);
            }
        }
    }
    /* the last stage's sums to every pipeline rank, every data rank's to all */
    if (s == SR_OK && r->pipe) s = sr_comm_allreduce_double(r->grid.pp_comm, loss, (int)nc);
    if (s == SR_OK && r->grid.dp > 1) s = sr_comm_allreduce_double(r->grid.dp_comm, loss, (int)nc);
    if (s == SR_OK && r->rank0) {
        FILE *f = r->mc_out;
        int right = 0, right_norm = 0, n_cut = 0;
        for (int x = 0; x < ne; x++) {
            int64_t a = mc->first[x], n = mc->first[x + 1] - a;
            int best = 0, best_norm = 0;
            for (int c = 1; c < n; c++) { /* the first of equal losses */
                if (loss[a + c] < loss[a + best]) best = c;
                if (loss[a + c] / mc->comp_len[a + c] < loss[a + best_norm] / mc->comp_len[a + best_norm]) best_norm = c;
            }
            int longest = 0;
            for (int c = 0; c < n; c++) longest = mc->comp_len[a + c] > longest ? mc->comp_len[a + c] : longest;
            n_cut += mc->ctx_len[x] + longest - 1 > T;
            right += best == mc->label[x];
            right_norm += best_norm == mc->label[x];
            if (f) {
                fprintf(f, "{\"step\":%ld,\"example\":%d,\"label\":%d,\"pred\":%d,\"pred_norm\":%d,\"losses\":[", step, x,
                        mc->label[x], best, best_norm);
                for (int c = 0; c < n; c++) fprintf(f, "%s%.9g", c ? "," : "", loss[a + c]);
                fprintf(f, "],\"tokens\":[");
                for (int c = 0; c < n; c++) fprintf(f, "%s%d", c ? "," : "", mc->comp_len[a + c]);
                fprintf(f, "]}\n");
            }
        }
        if (f && fflush(f) != 0) s = sr_seterr(SR_ERR_IO, "cannot write --eval-mc-out %s: %s", o->eval_mc_out, strerror(errno));
        if (s == SR_OK) {
            char cuts[96] = "";
            if (n_cut > 0) snprintf(cuts, sizeof cuts, " (%d with contexts cut from the left to fit --seq %d)", n_cut, T);
            rt_info(r, "step %ld: %s: acc_norm %.4f (%d/%d), acc %.4f (%d/%d)%s", step, o->eval_mc,
                    (double)right_norm / ne, right_norm, ne, (double)right / ne, right, ne, cuts);
            if (r->log) {
                fprintf(r->log, "{\"step\":%ld,\"mc_acc_norm\":%.9g,\"mc_acc\":%.9g,\"mc_examples\":%d}\n", step,
                        (double)right_norm / ne, (double)right / ne, ne);
                fflush(r->log);
            }
        }
    }
    free(loss);
    free(out);
    free(comp);
    free(ex);
    free(cut);
    return s;
}

/* an evaluation: the validation loss (--val-data), the multiple-choice
 * accuracy (--eval-mc) */
static sr_status run_eval(run *r, long step)
{
    SR_CHECK(rt_params_settle(r));
    if (r->have_val) {
        double vl;
        SR_CHECK(evaluate(r, &vl));
        rt_info(r, "step %ld: val loss %.6f", step, vl);
        if (r->log) {
            fprintf(r->log, "{\"step\":%ld,\"val_loss\":%.9g}\n", step, (double)(float)vl);
            fflush(r->log);
        }
    }
    if (r->have_mc) SR_CHECK(mc_eval(r, step));
    return SR_OK;
}

static void fmt_eta(char *buf, size_t cap, double s)
{
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
}

static void progress(run *r, long k, float loss, float lr, double norm, double tok_s, double ms,
                     double elapsed)
{
    if (r->o.quiet || !r->rank0) return;
    long done = k + 1 - r->start_step, total = r->o.steps - r->start_step;
    char eta[32];
    fmt_eta(eta, sizeof eta, elapsed / (double)done * (double)(total - done));
    if (r->tty) {
        fprintf(stderr, "\rstep %ld/%ld | loss %.4f | %.0f tok/s | ETA %s\033[K", k + 1, r->o.steps,
                (double)loss, tok_s, eta);
        fflush(stderr);
        r->line_open = 1;
        return;
    }
    long every = total > 20 ? total / 20 : 1;
    if (done == 1 || done == total || done % every == 0)
        fprintf(stderr, "step %ld/%ld | loss %.6f | lr %.3e | norm %.4f | %.0f tok/s | %.1f ms | ETA %s\n",
                k + 1, r->o.steps, (double)loss, (double)lr, norm, tok_s, ms, eta);
}


/* Sequence parallelism: the tensor ranks' gradients of a replicated
 * parameter used on sequence shards (tp_partial_grads) are summed once, after
 * the data-parallel reduction (sums commute, and no bucket is then in flight
 * on the arena). With ZeRO-1 only this rank's shard is reduced and read; the
 * tensor peers hold the same shard, so every rank issues the same calls. */
static sr_status sum_tp_partial_grads(run *r, long k)
{
    if (r->grid.tp == 1) return SR_OK;
    sr_comm_set_step(r->grid.tp_comm, k);
    for (int s = 0; s < r->nsegs; s++)
        if (r->segs[s].tp_partial)
            SR_CHECK(sr_comm_allreduce(r->grid.tp_comm, r->gopt + r->segs[s].so, r->segs[s].n,
                                       "sequence-parallel parameter gradient", NULL));
    return SR_OK;
}

/* Data parallelism: after the microbatches, every rank holds the average
 * gradient (each microbatch's loss was scaled by 1/(M*dp) and the ranks'
 * gradients are summed), or with ZeRO-1 its shard of it. The buckets were
 * launched during the last backward (sr_dp). The loss is averaged over the
 * ranks too. */
static sr_status sync_grads(run *r, long k, double *loss_sum, double t_bwd_end)
{
    /* a tied parameter's copies are summed over the pipeline after the
     * all-reduce (in flight since the backward; both sums are linear); with
     * ZeRO-1 before its buckets' reduce-scatter (held until now), whose
     * slices differ between the pipeline ranks' arenas */
    if (r->pipe && (!r->dp || r->gshard)) SR_CHECK(rt_pipe_sync_grads(r));
    if (!r->dp) return sum_tp_partial_grads(r, k);
    SR_CHECK(sr_dp_finish(r->dp));
    if (r->pipe && !r->gshard) SR_CHECK(rt_pipe_sync_grads(r));
    double hidden, total;
    sr_dp_overlap(r->dp, &hidden, &total, t_bwd_end);
    r->comm_hidden_us += hidden;
    r->comm_total_us += total;
    SR_CHECK(sr_comm_allreduce_double(r->grid.dp_comm, loss_sum, 1));
    *loss_sum /= r->grid.dp;
    return sum_tp_partial_grads(r, k);
}

/* ZeRO-1: every parameter gathered, before anything but a training
 * forward (whose param_needed hooks wait bucket by bucket) reads them */
sr_status rt_params_settle(run *r)
{
    return r->gshard ? sr_dp_gather_settle(r->dp) : SR_OK;
}

/* Global-norm clipping and AdamW on this rank's segments: all of the arena,
 * or with ZeRO-1 its slices, whose gather to the other ranks is started. */
static sr_status optimizer_step(run *r, long k, float lr, double *norm_out)
{
    const sr_program *prog = r->prog;
    const opts *o = &r->o;
    SR_CHECK(rt_params_settle(r)); /* the last update's gathers, waited for by the forward */
    /* squares of split parameters are summed over the tensor group; the
     * replicated ones are the same on every tensor rank and count once */
    double sq[2] = {0, 0};
    for (int s = 0; s < r->nsegs; s++) {
        const rt_seg *g = &r->segs[s];
        if (rt_pipe_owns(r, g->param)) /* a tied copy counts once, by its owner */
            sq[prog->params[g->param].split_dim >= 0] += r->be->sumsq(r->gopt + g->so, g->n);
    }
    if (r->pipe) SR_CHECK(sr_comm_allreduce_double(r->grid.pp_comm, sq, 2)); /* each counted by its owner */
    if (r->gshard) SR_CHECK(sr_comm_allreduce_double(r->grid.dp_comm, sq, 2));
    if (r->grid.tp > 1) SR_CHECK(sr_comm_allreduce_double(r->grid.tp_comm, &sq[1], 1));
    double norm = sqrt(sq[0] + sq[1]);
    /* an inf or NaN gradient under a finite loss: AdamW would write NaN into
     * the parameters, and the next checkpoint would save them as the latest.
     * Every rank holds the same norm, so all stop here together. */
    if (!isfinite(norm))
        return sr_seterr(SR_ERR_STATE, "the gradient norm became %g at step %ld (the loss was finite): the "
                         "parameters were left as before the step; lower --lr, or look at this step's batch "
                         "(--dump-batches)", norm, k);
    if (o->grad_clip > 0) {
        /* torch.nn.utils.clip_grad_norm_: coefficient in float32, applied when < 1 */
        float coef = o->grad_clip / ((float)norm + 1e-6f);
        if (coef < 1.0f) r->be->scale(r->gopt, coef, r->shard_n);
    }
    for (int s = 0; s < r->nsegs; s++) {
        const rt_seg *g = &r->segs[s];
        r->be->adamw(r->params + g->at, r->gopt + g->so, r->m + g->so, r->v + g->so, g->n, lr, o->beta1,
                     o->beta2, o->eps, prog->params[g->param].decay ? o->weight_decay : 0.0f, k + 1);
    }
    /* ZeRO-1: the others' slices arrive while the next forward runs */
    if (r->gshard) SR_CHECK(sr_dp_gather_start(r->dp, r->params));
    *norm_out = norm;
    return SR_OK;
}

/* The optimizer's segments: every parameter held, or with ZeRO-1 the parts
 * of them in this rank's slices of the buckets (counted, then filled). */
static sr_status make_segments(run *r)
{
    const sr_program *prog = r->prog;
    for (int pass = 0; pass < 2; pass++) {
        r->nsegs = 0;
        for (int j = 0;; j++) {
            int64_t lo = 0, n = r->n_alloc, at = 0;
            if (!r->gshard ? j > 0 : !sr_dp_slice(r->dp, j, &lo, &n, &at)) break;
            for (int i = 0; i < prog->n_params; i++) {
                int64_t o = r->poff[i], a = o > lo ? o : lo, b = o + prog->params[i].numel;
                if (b > lo + n) b = lo + n;
                if (o < 0 || b <= a) continue;
                if (pass) {
                    int tpp = 0;
                    for (int q = 0; q < prog->n_tp_partial_grads; q++) tpp |= prog->tp_partial_grads[q] == i;
                    r->segs[r->nsegs] = (rt_seg){i, tpp, a, b - a, at + (a - lo)};
                }
                r->nsegs++;
            }
        }
        if (pass == 0 && !(r->segs = malloc(sizeof(rt_seg) * ((size_t)r->nsegs + 1))))
            return sr_seterr(SR_ERR_NOMEM, "out of memory");
    }
    return SR_OK;
}

static uint64_t mix(uint64_t h, uint64_t x)
{
    h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdULL;
}

static uint64_t mix_str(uint64_t h, const char *s)
{
    for (; s && *s; s++) h = mix(h, (unsigned char)*s);
    return mix(h, 0);
}

/* The start-up handshake: every rank hashes what decides the collectives and
 * transfers it will issue (the program: its parameters, stages and degrees;
 * the flags that shape a step) and compares with rank 0's before step 0, so
 * different binaries or flags are one clear error instead of a hang. */
static sr_status handshake(run *r)
{
    if (r->grid.world == 1) return SR_OK;
    const sr_program *prog = r->prog;
    const opts *o = &r->o;
    uint64_t h = mix_str(1469598103934665603ULL, prog->name);
    h = mix(h, (uint64_t)prog->n_params);
    h = mix(h, (uint64_t)prog->n_param_floats);
    for (int i = 0; i < prog->n_params; i++) h = mix(mix_str(h, prog->params[i].name), (uint64_t)prog->params[i].numel);
    h = mix(h, (uint64_t)prog->n_stages);
    h = mix(h, (uint64_t)prog->tp);
    h = mix(h, (uint64_t)prog->recompute * 2 + (uint64_t)prog->sequence_parallel);
    for (int j = 0; j < prog->n_tp_partial_grads; j++) h = mix(h, (uint64_t)prog->tp_partial_grads[j]);
    long step_shape[] = {o->steps, o->batch, o->seq, o->microbatches, o->dp, o->tp, o->pp, o->zero, o->eval_every,
                    o->save_every, o->eval_batches, o->sample, o->sample_every, (long)(o->bucket_mb * 1000)};
    for (size_t i = 0; i < sizeof step_shape / sizeof step_shape[0]; i++) h = mix(h, (uint64_t)step_shape[i]);
    h = mix_str(h, o->schedule);
    h = mix(h, (uint64_t)(o->val_data != NULL));
    h = mix(mix(h, (uint64_t)(o->eval_mc != NULL)), (uint64_t)o->eval_mc_examples);
    /* rank 0's hash to everyone, 16 bits a float (exact), then agree */
    float mine[4], root[4];
    for (int k = 0; k < 4; k++) mine[k] = root[k] = (float)((h >> (16 * k)) & 0xffff);
    SR_CHECK(sr_comm_broadcast(r->grid.world_comm, root, 4, 0, "start-up handshake", NULL));
    double differ = memcmp(mine, root, sizeof mine) != 0;
    SR_CHECK(sr_comm_allreduce_double(r->grid.world_comm, &differ, 1));
    if (differ > 0)
        return sr_seterr(SR_ERR_USAGE, "%d rank%s run a different program or different flags than rank 0 "
                         "(start-up handshake); run the same binary with the same flags on every rank",
                         (int)differ, differ > 1 ? "s" : "");
    return SR_OK;
}

/* --comm-stats: what rank 0's communicators moved, to check against the plan;
 * a FILE with %r in it: every rank's, %r replaced by its rank (pipeline
 * stages and vocabulary shards move different amounts) */
static sr_status write_comm_stats(run *r, long steps)
{
    static const char *ops[6] = {"allreduce", "reduce_scatter", "allgather", "broadcast", "send", "recv"};
    sr_comm *groups[3] = {r->grid.dp_comm, r->grid.tp_comm, r->grid.pp_comm};
    const char *pat = r->o.comm_stats, *at = strstr(pat, "%r");
    if (!at && !r->rank0) return SR_OK;
    char path[4096];
    if (at) snprintf(path, sizeof path, "%.*s%d%s", (int)(at - pat), pat, r->grid.rank, at + 2);
    else snprintf(path, sizeof path, "%s", pat);
    FILE *f = fopen(path, "w");
    if (!f) {
        sr_status st = sr_seterr(SR_ERR_IO, "--comm-stats: cannot write %s: %s", path, strerror(errno));
        if (!r->rank0) fprintf(stderr, "%s: rank %d: error: %s\n", r->argv0, r->grid.rank, sr_errmsg());
        return st;
    }
    fprintf(f, "steps %ld\n", steps);
    if (r->be->peak_bytes) fprintf(f, "peak_bytes %lld\n", (long long)r->be->peak_bytes());
    /* the pipeline's channels (NCCL) count as the pipeline group */
    for (int g = 0; g < 3; g++) {
        if (!groups[g]) continue;
        sr_comm_stats st = *sr_comm_get_stats(groups[g]);
        for (int j = 0; j < SR_PP_NCHAN && groups[g] == r->grid.pp_comm; j++)
            for (int k = 0; r->grid.pp_chan[j] && k < 6; k++) {
                st.calls[k] += sr_comm_get_stats(r->grid.pp_chan[j])->calls[k];
                st.bytes[k] += sr_comm_get_stats(r->grid.pp_chan[j])->bytes[k];
            }
        for (int k = 0; k < 6; k++)
            if (st.calls[k])
                fprintf(f, "%s %s calls %lld bytes %lld\n", sr_comm_name(groups[g]), ops[k],
                        (long long)st.calls[k], (long long)st.bytes[k]);
    }
    if (fclose(f) != 0) return sr_seterr(SR_ERR_IO, "--comm-stats: cannot write %s", path);
    return SR_OK;
}

/* -------------------------------------------------------------------------- */
/* Stopping early: preemption (SIGTERM, Slurm's --signal), Ctrl-C (SIGINT) and --time-limit */

enum { RT_STOP_NONE, RT_STOP_SIGNAL, RT_STOP_SIGNAL_ELSEWHERE, RT_STOP_TIME };

/* the first SIGTERM, SIGUSR1 or SIGINT asks for a stop after the step under
 * way (the handler only records it); a second one acts as if none were
 * installed */
static volatile sig_atomic_t stop_signal;
enum { N_STOP_SIGNALS = 3 };
static const int stop_signals[N_STOP_SIGNALS] = {SIGTERM, SIGUSR1, SIGINT};

static void on_stop_signal(int sig)
{
    if (stop_signal) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    stop_signal = sig;
}

/* the handlers are installed for the training loop only when there is a
 * checkpoint to save; without one a signal ends the run as before */
static int catches_stop_signals(const opts *o)
{
    return o->save != NULL;
}

static void catch_stop_signals(struct sigaction old[N_STOP_SIGNALS])
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* reads, writes and waits go on after the handler */
    for (int i = 0; i < N_STOP_SIGNALS; i++) {
        sigaction(stop_signals[i], NULL, &old[i]);
        /* an ignored SIGINT stays ignored (a shell's background job, nohup) */
        if (stop_signals[i] == SIGINT && old[i].sa_handler == SIG_IGN) continue;
        sigaction(stop_signals[i], &sa, NULL);
    }
}

static void release_stop_signals(const struct sigaction old[N_STOP_SIGNALS])
{
    for (int i = 0; i < N_STOP_SIGNALS; i++) sigaction(stop_signals[i], &old[i], NULL);
}

/* After a step: stop when a rank was signalled, or when one more step and a
 * checkpoint (need_s seconds, at the last ones' pace) would end past
 * --time-limit. The reasons are summed over the world, so that every rank
 * stops after the same step (mpirun, Slurm or a user may signal some ranks
 * only, or each a little later). */
static sr_status stop_after_step(run *r, double need_s)
{
    const opts *o = &r->o;
    if (!catches_stop_signals(o) && o->time_limit <= 0) return SR_OK; /* no handler, no limit: no collective */
    double why[2] = {stop_signal != 0,
                     o->time_limit > 0 && now_s() - r->t_start + need_s > 60.0 * o->time_limit};
    if (r->have_grid && r->grid.world > 1) SR_CHECK(sr_comm_allreduce_double(r->grid.world_comm, why, 2));
    if (why[0] > 0) r->stopped = stop_signal ? RT_STOP_SIGNAL : RT_STOP_SIGNAL_ELSEWHERE;
    else if (why[1] > 0) r->stopped = RT_STOP_TIME;
    return SR_OK;
}

/* rank 0's line for a run that stopped early, --quiet or not: the run did not finish */
static void report_stop(run *r, long end, int saved)
{
    if (!r->rank0) return;
    const opts *o = &r->o;
    char why[96];
    if (r->stopped == RT_STOP_SIGNAL)
        snprintf(why, sizeof why, "%s", stop_signal == SIGUSR1 ? "SIGUSR1" : stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
    else if (r->stopped == RT_STOP_SIGNAL_ELSEWHERE) snprintf(why, sizeof why, "a signal to another rank");
    else snprintf(why, sizeof why, "--time-limit %g (one more step would end past it)", (double)o->time_limit);
    if (r->line_open) fputc('\n', stderr);
    r->line_open = 0;
    if (saved)
        fprintf(stderr, "%s: stopped by %s after step %ld of %ld: checkpoint %s/step-%08ld; resume with "
                "--load %s\n", r->argv0, why, end, o->steps, o->save, end, o->save);
    else
        fprintf(stderr, "%s: stopped by %s after step %ld of %ld (no --save: nothing saved)\n", r->argv0,
                why, end, o->steps);
}

static sr_status sample(run *r, long step);

static sr_status train(run *r)
{
    const opts *o = &r->o;
    const sr_program *prog = r->prog;
    int M = o->microbatches, T = o->seq;
    double t_begin = now_s();
    long last_saved = -1, last_eval = -1;
    double save_s = 0; /* how long the last --save-every checkpoint took */
    long end = o->steps > r->start_step ? o->steps : r->start_step; /* earlier if stopped */
    /* the starting point of the validation curve */
    if ((r->have_val || r->have_mc) && o->eval_every > 0 && r->start_step == 0 && o->steps > 0) {
        SR_CHECK(run_eval(r, 0));
        last_eval = 0;
    }
    for (long k = r->start_step; k < o->steps; k++) {
        double t0 = now_s();
        float lr = lr_at(o, k);
        r->be->zero(r->grads, r->n_alloc);
        r->loss_w = loss_weight(&r->train, k, o->batch, T);
        double loss_sum = 0, t_bwd_end = 0;
        if (r->pipe) SR_CHECK(rt_pipe_step(r, k, &loss_sum, &t_bwd_end));
        for (int mb = 0; mb < M && !r->pipe; mb++) {
            int first = rt_first_seq(r, mb);
            SR_CHECK(sr_data_batch(&r->train, k, o->batch, T, first, r->B, r->h_inputs, r->h_targets));
            push_tokens(r, r->B);
            if (r->batches) rt_record_batch(r, k, first);
            sr_exec e;
            rt_exec_init(r, &e, r->B, o->dropout, k);
            e.train = 1; /* backward follows */
            e.row0 = (int64_t)first * T;
            if (r->dp) {
                sr_dp_begin(r->dp, mb == M - 1, k);
                e.grad_ready = sr_dp_grad_ready;
                if (r->gshard) e.param_needed = sr_dp_param_needed;
                e.user = r->dp;
            }
            sr_trace_begin(r->trace, SR_TRACK_COMPUTE, "forward");
            prog->forward(&e);
            sr_trace_end(r->trace, SR_TRACK_COMPUTE);
            loss_sum += e.loss;
            sr_trace_begin(r->trace, SR_TRACK_COMPUTE, "backward");
            if (prog->backward) prog->backward(&e);
            sr_trace_end(r->trace, SR_TRACK_COMPUTE);
            t_bwd_end = sr_trace_now_us();
        }
        SR_CHECK(sync_grads(r, k, &loss_sum, t_bwd_end));
        float loss = (float)(loss_sum / M * r->loss_w);
        if (!isfinite(loss)) {
            /* a device error of the step (its first, recorded) is what happened, not the NaN it left */
            SR_CHECK(r->be->sync());
            return sr_seterr(SR_ERR_STATE, "the loss became %g at step %ld; lower --lr or set --grad-clip",
                             (double)loss, k);
        }
        if (o->dump_grads && k == r->start_step) SR_CHECK(rt_agree(r, rt_dump_grads(r, k), "--dump-grads"));
        sr_trace_begin(r->trace, SR_TRACK_COMPUTE, "optimizer");
        double norm = 0; /* set by optimizer_step when it succeeds; gcc -O3 cannot tell */
        SR_CHECK(optimizer_step(r, k, lr, &norm));
        sr_trace_end(r->trace, SR_TRACK_COMPUTE);
        double t1 = now_s();
        double ms = (t1 - t0) * 1e3, tok_s = (double)o->batch * T / (t1 - t0 > 0 ? t1 - t0 : 1e-9);
        if (r->log) {
            fprintf(r->log, "{\"step\":%ld,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,"
                    "\"tokens_per_s\":%.9g,\"ms\":%.9g}\n",
                    k, (double)loss, (double)lr, norm, tok_s, ms);
            fflush(r->log);
        }
        if (k == r->start_step && r->be->note) { /* what the backend chose in the first step */
            const char *note = r->be->note();
            if (note && *note) rt_info(r, "%s", note);
        }
        progress(r, k, loss, lr, norm, tok_s, ms, t1 - t_begin);
        if ((r->have_val || r->have_mc) && o->eval_every > 0 && (k + 1) % o->eval_every == 0) {
            SR_CHECK(run_eval(r, k + 1));
            last_eval = k + 1;
        }
        if (o->sample > 0 && o->sample_every > 0 && (k + 1) % o->sample_every == 0 && k + 1 < o->steps) {
            SR_CHECK(rt_params_settle(r)); /* as for an evaluation; the last step's sample is --sample's */
            SR_CHECK(sample(r, k + 1));
        }
        if (o->save && o->save_every > 0 && (k + 1) % o->save_every == 0) {
            double ts = now_s();
            SR_CHECK(rt_checkpoint(r, k + 1));
            save_s = now_s() - ts;
            last_saved = k + 1;
        }
        /* the stop's own checkpoint will take about as long as the last one did */
        if (k + 1 < o->steps) SR_CHECK(stop_after_step(r, t1 - t0 + save_s));
        if (r->stopped) {
            end = k + 1;
            break;
        }
    }
    SR_CHECK(rt_params_settle(r)); /* what follows (and sampling, after train) reads them whole */
    /* a device error of the last step (its loss was read before the backward
     * ran) ends the run with that error, on every rank, not with exit 0 */
    SR_CHECK(rt_agree(r, r->be->sync(), "the device work of the last step"));
    if (o->comm_stats) SR_CHECK(write_comm_stats(r, end - r->start_step)); /* training traffic only */
    if (r->dp && r->comm_total_us > 0)
        rt_info(r, "gradient %s: %.1f ms in flight, %.0f%% of it hidden behind backward; "
                "exposed wait %.2f ms per step", r->gshard ? "reduce-scatter (ZeRO-1)" : "all-reduce",
             r->comm_total_us / 1e3, 100.0 * r->comm_hidden_us / r->comm_total_us,
             (r->comm_total_us - r->comm_hidden_us) / 1e3 / (double)(end - r->start_step > 0 ? end - r->start_step : 1));
    if (r->gshard && end > r->start_step) {
        double wait, flight;
        sr_dp_gather_stats(r->dp, &wait, &flight);
        rt_info(r, "parameter all-gather (ZeRO-1): %.1f ms in flight, %.0f%% of it hidden behind the next "
                "forward; exposed wait %.2f ms per step", flight / 1e3,
                flight > 0 ? 100.0 * (1.0 - (wait < flight ? wait : flight) / flight) : 100.0,
                wait / 1e3 / (double)(end - r->start_step));
    }
    rt_pipe_report(r);
    /* stopped early: the checkpoint only; the resumed run evaluates and exports at its end */
    if ((r->have_val || r->have_mc) && last_eval != end && !r->stopped) SR_CHECK(run_eval(r, end));
    int trained = o->steps > r->start_step;
    if (o->save && last_saved != end && (trained || !r->loaded)) SR_CHECK(rt_checkpoint(r, end));
    if (r->stopped) {
        report_stop(r, end, o->save != NULL);
        return SR_OK;
    }
    if (o->export_dir) SR_CHECK(rt_export(r, o->export_dir));
    return SR_OK;
}

/* -------------------------------------------------------------------------- */
/* Sampling                                                                    */

typedef struct cand {
    float logit;
    int id;
} cand;

static int cmp_cand(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id - y->id;
}

/* One token from logits (V): greedy at temperature 0, else softmax of
 * logits/temperature over the top-k candidates, then over the fewest most
 * likely of them whose probabilities add up to top_p (the one that crosses
 * it kept, as Hugging Face's TopPLogitsWarper), drawn with uniform u. */
static int pick(const float *logits, int V, float temp, int top_k, float top_p, float u, cand *c)
{
    int best = 0;
    for (int j = 1; j < V; j++)
        if (logits[j] > logits[best]) best = j;
    if (temp <= 0) return best;
    for (int j = 0; j < V; j++) {
        c[j].logit = logits[j];
        c[j].id = j;
    }
    int n = V;
    if ((top_k > 0 && top_k < V) || top_p < 1) qsort(c, (size_t)V, sizeof *c, cmp_cand);
    if (top_k > 0 && top_k < V) n = top_k;
    double mx = logits[best], z = 0;
    for (int j = 0; j < n; j++) z += exp(((double)c[j].logit - mx) / temp);
    if (top_p < 1) { /* the nucleus: n cut to the prefix that reaches top_p of z */
        double keep = 0;
        int m = 0;
        while (m < n && keep < (double)top_p * z) keep += exp(((double)c[m++].logit - mx) / temp);
        n = m > 0 ? m : 1;
        z = keep;
    }
    double acc = 0, target = (double)u * z;
    for (int j = 0; j < n; j++) {
        acc += exp(((double)c[j].logit - mx) / temp);
        if (target < acc) return c[j].id;
    }
    return c[n - 1].id;
}

/* The end-of-text token: the tokenizer's, else GPT-2's 50256 for its vocabulary
 * (50257, padded or not); -1 when neither is known. *from (if given) says which */
static int known_eot(const run *r, const char **from)
{
    int nv = sr_classes(r->prog), tok = r->tok ? sr_tok_eot(r->tok) : -1;
    if (from) *from = tok >= 0 ? "the tokenizer's end of text" : "GPT-2's <|endoftext|>";
    return tok >= 0 ? tok : nv >= 50257 && nv <= 50304 ? 50256 : -1;
}

/* --sample tokens from the model as it is; step >= 0: a sample while training
 * (--sample-every), printed under a line naming the step */
static sr_status sample(run *r, long step)
{
    const opts *o = &r->o;
    const sr_program *prog = r->prog;
    int V = prog->vocab, T = o->seq, nv = sr_classes(prog); /* V - nv columns pad */
    int byte_model = nv == 256;
    /* the prompt's tokens: through the tokenizer, or bytes (open_tokenizer
     * refused a prompt that has neither) */
    int32_t *pt = NULL;
    size_t pn = 0;
    if (o->prompt && r->tok) {
        SR_CHECK(sr_tok_encode(r->tok, o->prompt, strlen(o->prompt), &pt, &pn));
    } else if (o->prompt && (pt = malloc(strlen(o->prompt) + 1)) != NULL) {
        for (const unsigned char *p = (const unsigned char *)o->prompt; *p; p++) pt[pn++] = *p;
    }
    int32_t *toks = malloc(((pn ? pn : 1) + (size_t)o->sample) * sizeof *toks);
    cand *c = malloc((size_t)V * sizeof *c);
    float *row = malloc(2 * (size_t)V * sizeof *row); /* the row, then this rank's part */
    if (!toks || !c || !row || (o->prompt && !pt)) {
        free(pt);
        free(toks);
        free(c);
        free(row);
        return sr_seterr(SR_ERR_NOMEM, "out of memory for sampling");
    }
    size_t n = pn;
    if (pn) {
        memcpy(toks, pt, pn * sizeof *toks);
    } else {
        /* <|endoftext|> starts GPT-2 vocabularies as in llm.c; byte models a newline */
        int eot = known_eot(r, NULL);
        toks[n++] = eot >= 0 ? eot : byte_model ? '\n' : (nv >= 50257 ? 50256 : 0);
    }
    free(pt);
    sr_status s = SR_OK;
    for (int i = 0; i < o->sample; i++) {
        size_t w = n < (size_t)T ? n : (size_t)T;
        memset(r->h_inputs, 0, (size_t)T * sizeof *r->h_inputs);
        memset(r->h_targets, 0, (size_t)T * sizeof *r->h_targets);
        memcpy(r->h_inputs, toks + n - w, w * sizeof *toks);
        push_tokens(r, 1);
        sr_exec e;
        rt_exec_init(r, &e, 1, 0.0f, o->steps);
        int last;
        s = forward_whole(r, &e, &last);
        if (s != SR_OK) break;
        double tok = -1; /* -1: no logits */
        if (last && (e.logits || e.logits_bf16)) {
            s = fetch_logits(r, &e, w - 1, 1, row);
            if (s != SR_OK) break;
            float u = sr_rand_uniform(o->seed, SAMPLE_STREAM, (uint64_t)i);
            tok = pick(row, nv, o->temperature, o->top_k, o->top_p, u, c);
        }
        /* the last stage picks; every pipeline rank learns the token (the others add 0) */
        if (r->pipe) {
            if (!last) tok = 0;
            s = sr_comm_allreduce_double(r->grid.pp_comm, &tok, 1);
            if (s != SR_OK) break;
        }
        if (tok < 0) {
            s = sr_seterr(SR_ERR_STATE, "model %s has no logits output; it cannot sample",
                          prog->name ? prog->name : "?");
            break;
        }
        toks[n++] = (int32_t)tok;
    }
    if (s == SR_OK && r->rank0) {
        if (r->line_open) {
            fputc('\n', stderr);
            r->line_open = 0;
        }
        if (step >= 0) printf("--- sample at step %ld ---\n", step);
        if (r->tok) {
            for (size_t i = 0; i < n; i++) {
                size_t len;
                const char *piece = sr_tok_piece(r->tok, toks[i], &len);
                fwrite(piece, 1, len, stdout);
            }
            putchar('\n');
        } else if (byte_model) {
            for (size_t i = 0; i < n; i++) putchar(toks[i]);
            putchar('\n');
        } else {
            for (size_t i = 0; i < n; i++) printf("%s%d", i ? " " : "", toks[i]);
            printf("\n");
        }
        fflush(stdout);
    }
    free(toks);
    free(c);
    free(row);
    return s;
}

/* -------------------------------------------------------------------------- */
/* Entry point                                                                 */

static void set_threads(int n)
{
    if (n <= 0) return;
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
    /* OpenBLAS stays on one thread: the kernels parallelize with OpenMP
     * around their BLAS calls (see kernels.c) */
}

/* JSON Lines records: how many, and how much of the stream the loss sees */
static void report_records(run *r, const sr_data *d, const char *path)
{
    for (int i = 0; i < d->n_parts; i++) report_records(r, &d->parts[i], d->parts[i].path); /* a blend's */
    if (!d->records || d->n_parts) return;
    rt_info(r, "data: %s: %lld records, %lld tokens, %lld of them loss targets (%.1f%%)%s", path,
            (long long)d->records, (long long)d->n_tokens, (long long)d->n_loss,
            100.0 * (double)d->n_loss / (double)(d->n_tokens > 0 ? d->n_tokens : 1),
            r->tok ? "" : "; any text read as bytes (no tokenizer)");
}

/* --eod-mask-loss 1: the end-of-text token (--eod-token, else known_eot), masked
 * after in both data sets */
static sr_status mask_eod(run *r)
{
    const opts *o = &r->o;
    if (!o->eod_mask_loss) return SR_OK;
    const char *from = "--eod-token";
    int nv = sr_classes(r->prog), id = o->eod_token >= 0 ? o->eod_token : known_eot(r, &from);
    if (id < 0)
        return sr_seterr(SR_ERR_USAGE, "--eod-mask-loss: no end-of-text token is known for this "
                         "model's vocabulary of %d%s: give --eod-token ID", nv,
                         r->tok ? " (its tokenizer has none)" : " (no tokenizer)");
    if (id >= nv)
        return sr_seterr(SR_ERR_USAGE, "--eod-token %d is outside the model's vocabulary of %d", id, nv);
    if (r->have_train) sr_data_mask_eod(&r->train, id);
    if (r->have_val) sr_data_mask_eod(&r->val, id);
    rt_info(r, "data: --eod-mask-loss: no loss on the token after token %d (%s)", id, from);
    return SR_OK;
}

/* --tokenizer, else the one beside --init's parameters (a Hugging Face model
 * directory has one) or in --load's checkpoint (saved with it); 'none': no
 * tokenizer. */
static sr_status open_tokenizer(run *r)
{
    const opts *o = &r->o;
    int nv = sr_classes(r->prog);
    char found[4200];
    const char *p = o->tokenizer;
    /* where the weights come from (the two exclude each other): a file, a
     * directory, or a checkpoint root, whose latest step is looked in */
    const char *from = o->load ? o->load : strcmp(o->init, "random") != 0 ? o->init : NULL;
    if (!p && from && !(p = sr_tok_find(from, found, sizeof found))) {
        char *step = NULL;
        if (rt_resolve_ckpt(from, &step) == SR_OK) p = sr_tok_find(step, found, sizeof found);
        free(step); /* a bad checkpoint is reported when it is loaded */
    }
    int beside = !o->tokenizer && p;
    if (p && strcmp(p, "none") != 0) {
        SR_CHECK(sr_tok_load(p, &r->tok));
        if (sr_tok_size(r->tok) > nv)
            return sr_seterr(SR_ERR_ARG, "tokenizer %s has %d tokens, more than the model's "
                             "vocabulary of %d; it is another model's%s", sr_tok_path(r->tok),
                             sr_tok_size(r->tok), nv,
                             beside ? " (found with the --init or --load files; --tokenizer none uses none)" : "");
        rt_info(r, "tokenizer: %s (%s, %d tokens)", sr_tok_path(r->tok), sr_tok_kind(r->tok),
                sr_tok_size(r->tok));
    }
    if (o->prompt && *o->prompt && nv != 256 && !(r->tok && sr_tok_can_encode(r->tok)))
        return sr_seterr(SR_ERR_USAGE, "--prompt needs a tokenizer that encodes for this model's "
                         "vocabulary of %d: pass --tokenizer (tokenizer.json or vocab.json + "
                         "merges.txt, or their directory)", nv);
    return SR_OK;
}

/* --eval-mc FILE: its examples, each completion short enough to follow at
 * least one context token within --seq */
static sr_status open_mc(run *r)
{
    const char *path = r->o.eval_mc;
    int nv = sr_classes(r->prog);
    SR_CHECK(sr_mc_open(path, r->tok, nv, &r->mc));
    r->have_mc = 1;
    const sr_mc *mc = &r->mc;
    if (mc->from_text && !r->tok && nv != 256)
        return sr_seterr(SR_ERR_USAGE, "--eval-mc %s is text (JSON Lines) for a vocabulary of %d: pass --tokenizer "
                         "(its bytes are tokens only for a byte-level model)", path, nv);
    for (int i = 0; i < mc->n; i++)
        for (int64_t k = mc->first[i]; k < mc->first[i + 1]; k++)
            if (mc->comp_len[k] > r->o.seq)
                return sr_seterr(SR_ERR_USAGE, "--eval-mc %s example %d: completion %d has %d tokens, more than "
                                 "--seq %d leaves after one context token", path, i, (int)(k - mc->first[i]),
                                 mc->comp_len[k], r->o.seq);
    return SR_OK;
}

static sr_status setup(run *r)
{
    const sr_program *prog = r->prog;
    opts *o = &r->o;
    SR_CHECK(check_program(prog));
    set_threads(o->threads);
    r->be = prog->backend ? prog->backend : &sr_backend_host;
    /* checkpoints hold whole tensors: their layout */
    r->full = calloc((size_t)prog->n_params + 1, sizeof *r->full);
    if (!r->full) return sr_seterr(SR_ERR_NOMEM, "out of memory");
    for (int i = 0; i < prog->n_params; i++) {
        sr_param_desc *f = &r->full[i];
        *f = prog->params[i];
        for (int k = 0; k < f->ndim; k++) f->dims[k] = f->full_dims[k] > 0 ? f->full_dims[k] : f->dims[k];
        f->numel = sr_param_full_numel(&prog->params[i]);
        f->offset = r->n_full;
        f->split_dim = -1;
        r->n_full += f->numel;
    }
    SR_CHECK(sr_host_isa_check()); /* before any host kernel runs, whatever the backend */
    SR_CHECK(r->be->init(r->grid.local_rank));
    r->B = o->batch / (o->dp * o->microbatches);
    r->tty = isatty(fileno(stderr));

    /* data first: a wrong file name should fail before minutes of loading */
    SR_CHECK(open_tokenizer(r));
    if (o->data) {
        SR_CHECK(sr_data_open(&r->train, o->data, sr_classes(prog), r->tok));
        r->have_train = 1;
        SR_CHECK(sr_data_check(&r->train, o->batch, o->seq));
    }
    if (o->val_data) {
        SR_CHECK(sr_data_open(&r->val, o->val_data, sr_classes(prog), r->tok));
        r->have_val = 1;
        SR_CHECK(sr_data_check(&r->val, o->batch, o->seq));
    }
    if (o->eval_mc) SR_CHECK(open_mc(r));
    if (r->have_train && !r->train.is_bin && !r->train.records && !r->tok && sr_classes(prog) != 256)
        rt_info(r, "note: %s is read as raw bytes (token ids 0-255) for a vocabulary of %d; to "
                "tokenize text, pass --tokenizer", o->data, sr_classes(prog));
    report_records(r, &r->train, o->data);
    report_records(r, &r->val, o->val_data);
    SR_CHECK(mask_eod(r));

    /* the parameters this rank holds: all, or its pipeline stages' */
    SR_CHECK(rt_param_layout(r));
    int64_t n = r->n_local;
    int dp = r->grid.dp;
    r->n_alloc = n;
    r->shard_n = n;
    if (o->zero && dp > 1) {
        /* ZeRO-1: the arenas padded to a multiple of dp; rank d updates slice d
         * of every bucket (sr_dp), 1/dp of them */
        r->n_alloc = (n + dp - 1) / dp * dp;
        r->shard_n = r->n_alloc / dp;
        r->gshard = r->be->alloc(sizeof(float) * (size_t)r->shard_n);
        if (!r->gshard) return sr_seterr(SR_ERR_NOMEM, "out of memory");
    }
    r->params = r->be->alloc(sizeof(float) * (size_t)r->n_alloc);
    r->grads = r->be->alloc(sizeof(float) * (size_t)r->n_alloc);
    r->gopt = r->gshard ? r->gshard : r->grads;
    r->m = r->be->alloc(sizeof(float) * (size_t)r->shard_n);
    r->v = r->be->alloc(sizeof(float) * (size_t)r->shard_n);
    if (!r->params || !r->grads || !r->m || !r->v)
        return sr_seterr(SR_ERR_NOMEM, "cannot allocate %.1f MB for parameters, gradients and "
                         "optimizer state", (8.0 * (double)r->n_alloc + 8.0 * (double)r->shard_n) / 1e6);
    if (prog->n_stages > 1) SR_CHECK(rt_pipe_init(r));
    if (dp > 1)
        SR_CHECK(sr_dp_init(&r->dp, prog, r->poff, r->n_alloc, r->grid.dp_comm, r->grads, r->gshard,
                            (int64_t)((double)o->bucket_mb * 1e6), r->trace));
    for (int i = 0; r->gshard && r->pipe && i < prog->n_params; i++)
        if (rt_pipe_tied(r, i)) sr_dp_hold(r->dp, i); /* summed over the pipeline first (sync_grads) */
    if (r->gshard && r->be->params_arrived) sr_dp_on_gathered(r->dp, r->be->params_arrived);
    SR_CHECK(make_segments(r));
    size_t w = prog->work_bytes(r->B, o->seq), w1 = prog->work_bytes(1, o->seq);
    r->work_size = w > w1 ? w : w1;
    size_t tok_bytes = (size_t)(r->B > 1 ? r->B : 1) * o->seq * sizeof(int32_t);
    /* a pipeline runs from its own per-stage workspaces (pipeline.c) */
    r->work = prog->n_stages > 1 ? NULL : r->be->alloc(r->work_size);
    r->inputs = r->be->alloc(tok_bytes);
    r->targets = r->be->alloc(tok_bytes);
    r->h_inputs = malloc(tok_bytes);
    r->h_targets = malloc(tok_bytes);
    if ((!r->work && !r->pipe) || !r->inputs || !r->targets || !r->h_inputs || !r->h_targets)
        return sr_seterr(SR_ERR_NOMEM, "cannot allocate %.1f MB of activations for %d x %d "
                         "sequences; raise --microbatches or lower --seq",
                         (double)r->work_size / 1e6, r->B, o->seq);

    if (o->load) SR_CHECK(rt_load_checkpoint(r));
    else if (strcmp(o->init, "random") == 0) SR_CHECK(rt_init_random(r));
    else SR_CHECK(rt_init_from(r, o->init));
    /* after --load, which may have set the seed: the order is the seed's */
    if (r->have_train && o->shuffle) sr_data_shuffle(&r->train, o->seed);

    if (o->steps > r->start_step && !r->have_train)
        return sr_seterr(SR_ERR_USAGE, "no training data: pass --data FILE (or --steps 0)");
    if (o->dump_grads && o->steps <= r->start_step)
        return sr_seterr(SR_ERR_USAGE, "--dump-grads needs at least one training step");
    if (!o->quiet) {
        /* every rank reports its own memory: ZeRO-1 divides the optimizer state by dp */
        int copy = prog->param_copy_bytes;
        fprintf(stderr, "rank %d (dp %d/%d): parameters %.2f MiB, gradients %.2f MiB, optimizer state "
                "%.2f MiB, activations %.2f MiB%s\n", r->grid.rank, r->grid.dp_rank, dp,
                (4.0 * (double)r->n_alloc + copy * (double)n) / 1048576.0, 4.0 * (double)r->n_alloc / 1048576.0,
                8.0 * (double)r->shard_n / 1048576.0,
                (double)(r->pipe ? rt_pipe_activation_bytes(r) : r->work_size) / 1048576.0,
                copy == 2 ? " (the parameters in fp32 and a bf16 copy)" : "");
    }
    if (o->dump_batches) {
        char path[4096];
        snprintf(path, sizeof path, "%s/batches-rank%d.txt", o->dump_batches, r->grid.rank);
        mkdir(o->dump_batches, 0777);
        r->batches = fopen(path, "w");
        if (!r->batches) return sr_seterr(SR_ERR_IO, "--dump-batches: cannot write %s: %s", path, strerror(errno));
    }
    if (o->log && r->rank0) {
        r->log = fopen(o->log, r->loaded ? "a" : "w"); /* a resumed run continues its log */
        if (!r->log) return sr_seterr(SR_ERR_IO, "cannot open log file %s: %s", o->log, strerror(errno));
    }
    if (o->eval_mc_out && o->eval_mc && r->rank0) {
        r->mc_out = fopen(o->eval_mc_out, "a"); /* every evaluation's, resumed runs' too */
        if (!r->mc_out) return sr_seterr(SR_ERR_IO, "cannot open --eval-mc-out %s: %s", o->eval_mc_out, strerror(errno));
    }
    char files[48] = "", pass[48] = "";
    const sr_data *td = &r->train;
    if (td->n_parts) snprintf(files, sizeof files, " in %d sources", td->n_parts);
    else if (td->n_files > 1) snprintf(files, sizeof files, " in %d files", td->n_files);
    if (r->have_train && !td->n_parts)
        snprintf(pass, sizeof pass, " (%lld batches per pass)",
                 (long long)sr_data_batches_per_epoch(td, o->batch, o->seq));
    if (r->have_train)
        rt_info(r, "%s: %lld parameters; batch %d x %d over %d data rank%s in %d microbatch%s; steps "
             "%ld..%ld; %s has %lld tokens%s%s",
             prog->name ? prog->name : "model", (long long)r->n_full, o->batch, o->seq, dp, dp == 1 ? "" : "s",
             o->microbatches, o->microbatches == 1 ? "" : "es", r->start_step, o->steps,
             td->n_parts ? "the data blend" : o->data, (long long)td->n_tokens, files, pass);
    for (int i = 0; i < r->train.n_parts; i++) { /* how often a run reads each source (Megatron prints epochs) */
        const sr_data *p = &r->train.parts[i];
        double share = (double)r->train.share[i] / (double)r->train.share_sum;
        int64_t win = sr_data_part_windows(p, o->seq);
        rt_info(r, "data: %.1f%% of the sequences from %s: %lld tokens, %lld sequences a pass; steps %ld..%ld "
                "read %.2f passes", 100.0 * share, p->path, (long long)p->n_tokens, (long long)win, r->start_step,
                o->steps, share * (double)(o->steps - r->start_step) * o->batch / (double)win);
    }
    return SR_OK;
}

static void cleanup(run *r)
{
    sr_tok_free(r->tok);
    if (r->log) fclose(r->log);
    if (r->mc_out) fclose(r->mc_out);
    if (r->batches) fclose(r->batches);
    if (r->have_train) sr_data_close(&r->train);
    if (r->have_val) sr_data_close(&r->val);
    if (r->have_mc) sr_mc_close(&r->mc);
    if (r->be) {
        void *bufs[] = {r->params, r->grads, r->m, r->v, r->work, r->inputs, r->targets, r->gshard};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            if (bufs[i]) r->be->free(bufs[i]);
    }
    free(r->h_inputs);
    free(r->h_targets);
    free(r->full);
    free(r->poff);
    free(r->segs);
    sr_dp_free(r->dp);
    rt_pipe_free(r);
    if (r->trace) {
        sr_status s = sr_trace_close(r->trace);
        if (s != SR_OK) fprintf(stderr, "%s: warning: %s\n", r->argv0, sr_errmsg());
    }
    if (r->have_grid) sr_grid_free(&r->grid);
    sr_tp_release();
}

int sr_main(const sr_program *prog, int argc, char **argv)
{
    run r;
    memset(&r, 0, sizeof r);
    r.t_start = now_s();
    r.loss_w = 1.0;
    r.prog = prog;
    r.argv0 = argc > 0 && argv[0] ? argv[0] : (prog && prog->name ? prog->name : "shardc-program");
    opts defaults;
    set_defaults(&defaults, prog);
    r.o = defaults;
    sr_status s = sr_comm_init(&argc, &argv);
    if (s != SR_OK) {
        /* MPI is not up: every rank fails alike, the first one says why */
        if (sr_comm_world_rank() == 0) fprintf(stderr, "%s: error: %s\n", r.argv0, sr_errmsg());
        return s == SR_ERR_USAGE ? 2 : 1;
    }
    r.rank0 = sr_comm_world_rank() == 0;
    s = parse_flags(&r.o, r.given, argc, argv);
    if (s == SR_OK && (r.o.help || r.o.version)) {
        if (r.rank0 && r.o.help) print_help(prog, &defaults, r.argv0);
        else if (r.rank0)
            printf("%s: model %s from %s, libshardrt %s\n", r.argv0, prog->name ? prog->name : "?",
                   prog->source ? prog->source : "?", SR_VERSION);
        sr_comm_finalize();
        return 0;
    }
    if (s == SR_OK && !r.o.dp) { /* the data-parallel degree the world leaves */
        int world = sr_comm_world_size(), mp = r.o.tp * r.o.pp;
        r.o.dp = world >= mp && world % mp == 0 ? world / mp : 1;
    }
    if (s == SR_OK) s = check_opts(&r.o, r.given, prog);
    if (s == SR_OK && r.rank0) warn_idle_flags(&r);
    /* the flag wins over the environment (read once, here) */
    int comm_env = 0;
    const char *env = getenv("SHARDC_COMM");
    if (s == SR_OK && !rt_flag_given(r.given, "comm") && env && *env) {
        r.o.comm = env;
        comm_env = 1;
    }
    sr_comm_backend cb = SR_COMM_MPI;
    if (s == SR_OK) s = parse_comm(&r.o, prog, comm_env, &cb);
    /* every rank computes the same answer to these: no agreement needed */
    if (s == SR_OK) {
        const sr_backend *be = prog->backend ? prog->backend : &sr_backend_host;
        s = sr_grid_init_device(&r.grid, r.o.dp, r.o.tp, r.o.pp, cb, be->device, (double)r.o.comm_timeout);
        r.have_grid = s == SR_OK;
        /* where a program can choose (device memory), say what moves it */
        if (s == SR_OK && be->device && r.grid.world > 1) {
            rt_info(&r, "communication: %s", cb == SR_COMM_NCCL ? "NCCL (one GPU per rank)"
                    : "MPI, device buffers staged through page-locked host memory (--comm mpi)");
        }
    }
    if (s == SR_OK) s = sr_trace_open(&r.trace, r.o.trace, r.grid.rank, r.grid.world);
    if (s == SR_OK) s = rt_agree(&r, setup(&r), "setting up");
    if (s == SR_OK) s = handshake(&r);
    struct sigaction old_handlers[N_STOP_SIGNALS];
    int catching = s == SR_OK && catches_stop_signals(&r.o);
    if (catching) catch_stop_signals(old_handlers);
    if (s == SR_OK) s = train(&r);
    if (catching) release_stop_signals(old_handlers);
    if (s == SR_OK && r.o.sample > 0 && !r.stopped) s = sample(&r, -1); /* every rank: the forward is collective */
    if (r.line_open) fputc('\n', stderr);
    int code = s == SR_OK ? (r.stopped ? 3 : 0) : s == SR_ERR_USAGE ? 2 : 1;
    /* rank 0 speaks for all about errors every rank shares (flags, files);
     * the others speak when their failure is their own */
    if (s != SR_OK && (r.rank0 || s == SR_ERR_COMM || s == SR_ERR_NOMEM)) {
        if (r.have_grid && r.grid.world > 1 && !r.rank0)
            fprintf(stderr, "%s: %s%s\n", r.argv0, strncmp(sr_errmsg(), "rank ", 5) ? "error: " : "",
                    sr_errmsg()); /* the comm layer's messages start with their rank */
        else
            fprintf(stderr, "%s: error: %s\n", r.argv0, sr_errmsg());
        if (s == SR_ERR_USAGE) fprintf(stderr, "try %s --help\n", r.argv0);
    }
    /* a rank stuck after a failed collective would block MPI_Finalize */
    int abort_all = s == SR_ERR_COMM && r.have_grid && r.grid.world > 1;
    cleanup(&r);
    if (abort_all) sr_comm_abort(code);
    sr_comm_finalize();
    return code;
}
