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

#include "shardrt.h"
#include "sr_ckpt.h"
#include "sr_data.h"
#include "sr_json.h"
#include "sr_program.h"

#define PRAGMA_(x) _Pragma(#x)
#ifdef _OPENMP
#define OMP(x) PRAGMA_(omp x)
#else
#define OMP(x)
#endif

/* Present when OpenBLAS is linked; a weak reference keeps the runtime
 * linkable against any BLAS. */
#if defined(__GNUC__)
extern void openblas_set_num_threads(int n) __attribute__((weak));
#endif

/* Hugging Face GPT-2 files name tensors with or without this prefix. */
#define HF_PREFIX "transformer."
/* RNG stream of the sampler; parameter streams are 1..n_params. */
#define SAMPLE_STREAM 0x53414d504c45ULL
/* M_PI is not ISO C */
#define PI 3.14159265358979323846

/* -------------------------------------------------------------------------- */
/* Flags                                                                       */

typedef struct opts {
    const char *data, *val_data, *lr_schedule, *init, *load, *save, *log, *prompt,
        *dump_grads;
    long steps;
    int batch, seq, microbatches, warmup, save_every, eval_every, eval_batches, sample,
        top_k, threads;
    float lr, min_lr, weight_decay, beta1, beta2, eps, grad_clip, dropout, temperature;
    unsigned long long seed;
    int quiet, help, version;
} opts;

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
    {"data", F_STR, O(data), "FILE", "training tokens: llm.c .bin, or any file as raw bytes"},
    {"val-data", F_STR, O(val_data), "FILE", "validation tokens (same formats)"},
    {"steps", F_LONG, O(steps), "N", "optimizer steps in total (a resumed run continues to N)"},
    {"batch", F_INT, O(batch), "G", "sequences per optimizer step (global batch)"},
    {"seq", F_INT, O(seq), "T", "sequence length"},
    {"microbatches", F_INT, O(microbatches), "M", "gradient accumulation: G/M sequences at a time"},
    {"lr", F_FLOAT, O(lr), "F", "peak learning rate"},
    {"lr-schedule", F_STR, O(lr_schedule), "S", "constant | cosine (after warmup)"},
    {"warmup", F_INT, O(warmup), "N", "linear warmup steps"},
    {"min-lr", F_FLOAT, O(min_lr), "F", "final learning rate of the cosine schedule"},
    {"weight-decay", F_FLOAT, O(weight_decay), "F", "AdamW decoupled weight decay (>= 2-D tensors)"},
    {"beta1", F_FLOAT, O(beta1), "F", "AdamW beta1"},
    {"beta2", F_FLOAT, O(beta2), "F", "AdamW beta2"},
    {"eps", F_FLOAT, O(eps), "F", "AdamW epsilon"},
    {"grad-clip", F_FLOAT, O(grad_clip), "F", "clip the global gradient norm to F (0 = off)"},
    {"dropout", F_FLOAT, O(dropout), "P", "dropout probability during training"},
    {"seed", F_U64, O(seed), "N", "seed of initialization, dropout and sampling"},
    {"init", F_STR, O(init), "random|PATH", "random, or parameters from a model.safetensors (or its directory)"},
    {"load", F_STR, O(load), "DIR", "resume from a checkpoint (root with 'latest', or a step directory)"},
    {"save", F_STR, O(save), "DIR", "write checkpoints to DIR/step-NNNNNNNN"},
    {"save-every", F_INT, O(save_every), "N", "checkpoint every N steps (0 = only at the end)"},
    {"eval-every", F_INT, O(eval_every), "N", "validation loss every N steps (0 = only at the end)"},
    {"eval-batches", F_INT, O(eval_batches), "N", "validation batches per evaluation"},
    {"log", F_STR, O(log), "FILE", "append one JSON line per step and per evaluation"},
    {"sample", F_INT, O(sample), "N", "after training, generate N tokens"},
    {"temperature", F_FLOAT, O(temperature), "F", "sampling temperature (0 = greedy)"},
    {"top-k", F_INT, O(top_k), "K", "sample from the K most likely tokens (0 = all)"},
    {"prompt", F_STR, O(prompt), "TEXT", "sampling prompt (byte-level models)"},
    {"threads", F_INT, O(threads), "N", "CPU threads (0 = OpenMP/OpenBLAS default)"},
    {"dump-grads", F_STR, O(dump_grads), "FILE", "write the first step's gradients (before clipping) as safetensors"},
    {"quiet", F_BOOL, O(quiet), NULL, "print only errors and samples"},
    {"help", F_BOOL, O(help), NULL, "show this help"},
    {"version", F_BOOL, O(version), NULL, "show the model and runtime versions"},
};
#define N_FLAGS ((int)(sizeof flags / sizeof flags[0]))

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
    o->init = "random";
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

static int flag_given(const char *given, const char *name)
{
    for (int j = 0; j < N_FLAGS; j++)
        if (strcmp(flags[j].name, name) == 0) return given[j];
    return 0;
}

static sr_status check_opts(const opts *o, const sr_program *prog)
{
#define NEED(cond, ...) \
    do { if (!(cond)) return sr_seterr(SR_ERR_USAGE, __VA_ARGS__); } while (0)
    NEED(o->steps >= 0, "--steps must be >= 0 (got %ld)", o->steps);
    NEED(o->batch >= 1, "--batch must be >= 1 (got %d)", o->batch);
    NEED(o->seq >= 1, "--seq must be >= 1 (got %d)", o->seq);
    NEED(prog->max_seq <= 0 || o->seq <= prog->max_seq,
         "--seq %d is longer than the model's %d positions", o->seq, prog->max_seq);
    NEED(o->microbatches >= 1, "--microbatches must be >= 1 (got %d)", o->microbatches);
    NEED(o->batch % o->microbatches == 0,
         "--batch %d is not divisible by --microbatches %d", o->batch, o->microbatches);
    NEED((long long)o->batch * o->seq <= INT_MAX / 2, "--batch x --seq = %lld tokens is too large",
         (long long)o->batch * o->seq);
    NEED(o->lr >= 0, "--lr must be >= 0 (got %g)", (double)o->lr);
    NEED(o->min_lr >= 0, "--min-lr must be >= 0 (got %g)", (double)o->min_lr);
    NEED(strcmp(o->lr_schedule, "constant") == 0 || strcmp(o->lr_schedule, "cosine") == 0,
         "--lr-schedule must be constant or cosine (got '%s')", o->lr_schedule);
    NEED(o->warmup >= 0, "--warmup must be >= 0 (got %d)", o->warmup);
    NEED(o->weight_decay >= 0, "--weight-decay must be >= 0 (got %g)", (double)o->weight_decay);
    NEED(o->beta1 >= 0 && o->beta1 < 1, "--beta1 must be in [0, 1) (got %g)", (double)o->beta1);
    NEED(o->beta2 >= 0 && o->beta2 < 1, "--beta2 must be in [0, 1) (got %g)", (double)o->beta2);
    NEED(o->eps > 0, "--eps must be > 0 (got %g)", (double)o->eps);
    NEED(o->grad_clip >= 0, "--grad-clip must be >= 0 (got %g)", (double)o->grad_clip);
    NEED(o->dropout >= 0 && o->dropout < 1, "--dropout must be in [0, 1) (got %g)", (double)o->dropout);
    NEED(o->save_every >= 0, "--save-every must be >= 0 (got %d)", o->save_every);
    NEED(o->eval_every >= 0, "--eval-every must be >= 0 (got %d)", o->eval_every);
    NEED(o->eval_batches >= 1, "--eval-batches must be >= 1 (got %d)", o->eval_batches);
    NEED(o->sample >= 0, "--sample must be >= 0 (got %d)", o->sample);
    NEED(o->temperature >= 0, "--temperature must be >= 0 (got %g)", (double)o->temperature);
    NEED(o->top_k >= 0, "--top-k must be >= 0 (got %d)", o->top_k);
    NEED(o->threads >= 0, "--threads must be >= 0 (got %d)", o->threads);
    NEED(!o->prompt || prog->vocab == 256,
         "--prompt needs a byte-level model (vocab 256); this model's vocab is %d", prog->vocab);
    NEED(!(o->load && o->init && strcmp(o->init, "random") != 0),
         "--init and --load cannot be combined (--load restores the parameters)");
    NEED(o->init && *o->init, "--init needs 'random' or a path");
    NEED(!o->data || *o->data, "--data needs a file name");
    NEED(!o->save || *o->save, "--save needs a directory");
#undef NEED
    return SR_OK;
}

static void print_help(const sr_program *prog, const opts *d, const char *argv0)
{
    printf("usage: %s [flags]\n", argv0);
    printf("Trains %s (built by shardc from %s): %d parameter tensors, %lld floats, vocab %d.\n\n",
           prog->name ? prog->name : "model", prog->source ? prog->source : "?", prog->n_params,
           (long long)prog->n_param_floats, prog->vocab);
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
        case F_INT: snprintf(def, sizeof def, " (default %d)", *(const int *)p); break;
        case F_FLOAT: snprintf(def, sizeof def, " (default %g)", (double)*(const float *)p); break;
        case F_U64: snprintf(def, sizeof def, " (default %llu)", *(const unsigned long long *)p); break;
        case F_BOOL: break;
        }
        printf("  %-26s %s%s\n", left, f->help, def);
    }
    printf("\nExit status: 0 ok, 1 error, 2 usage error.\n");
}

/* -------------------------------------------------------------------------- */
/* Run state                                                                   */

typedef struct run {
    const sr_program *prog;
    opts o;
    char given[N_FLAGS];
    const char *argv0;
    int B;                      /* sequences per microbatch: G / M */
    float *params, *grads, *m, *v;
    char *work;
    size_t work_size;
    int32_t *inputs, *targets;  /* (B, T) */
    sr_data train, val;
    int have_train, have_val;
    FILE *log;
    long start_step;
    int loaded;                 /* state came from --load */
    int tty, line_open;         /* progress line on a terminal, not yet ended */
} run;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Info lines go to stderr so stdout carries only samples. */
static void info(run *r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void info(run *r, const char *fmt, ...)
{
    if (r->o.quiet) return;
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

static void *alloc_floats(int64_t n)
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
/* Initialization                                                              */

/* N(0, std^2) by Box-Muller: elements 2k and 2k+1 share the uniforms with
 * counters 2k and 2k+1 of stream (param index + 1), so any slice of a tensor
 * can be initialized alone and matches the whole. */
static void init_normal(float *p, int64_t n, float std, uint64_t seed, uint64_t stream)
{
    const double two_pi = 6.283185307179586476925286766559;
    OMP(parallel for if(n >= 65536))
    for (int64_t k = 0; k < (n + 1) / 2; k++) {
        double u1 = 1.0 - (double)sr_rand_uniform(seed, stream, (uint64_t)(2 * k)); /* (0, 1] */
        double u2 = (double)sr_rand_uniform(seed, stream, (uint64_t)(2 * k + 1));
        double rad = sqrt(-2.0 * log(u1));
        p[2 * k] = (float)(std * rad * cos(two_pi * u2));
        if (2 * k + 1 < n) p[2 * k + 1] = (float)(std * rad * sin(two_pi * u2));
    }
}

static void init_random(run *r)
{
    const sr_program *prog = r->prog;
    for (int i = 0; i < prog->n_params; i++) {
        const sr_param_desc *d = &prog->params[i];
        float *p = r->params + d->offset;
        switch (d->init) {
        case SR_INIT_ZEROS: sr_zero(p, (long)d->numel); break;
        case SR_INIT_ONES:
            for (int64_t j = 0; j < d->numel; j++) p[j] = 1.0f;
            break;
        case SR_INIT_NORMAL:
            init_normal(p, d->numel, d->std, r->o.seed, (uint64_t)i + 1);
            break;
        }
    }
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static char *path_join(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *p = malloc(la + lb + 2);
    if (!p) return NULL;
    memcpy(p, a, la);
    size_t n = la;
    if (n == 0 || p[n - 1] != '/') p[n++] = '/';
    memcpy(p + n, b, lb + 1);
    return p;
}

/* Reads the first line of a small text file, trailing whitespace removed. */
static sr_status read_line(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f) return sr_seterr(SR_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    if (!fgets(buf, (int)cap, f)) buf[0] = '\0';
    fclose(f);
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ')) buf[--n] = '\0';
    return SR_OK;
}

/* A checkpoint root (with `latest`) or a step directory -> the step directory. */
static sr_status resolve_ckpt(const char *dir, char **out)
{
    *out = NULL;
    if (!is_dir(dir)) {
        if (access(dir, F_OK) != 0)
            return sr_seterr(SR_ERR_IO, "cannot load checkpoint %s: %s", dir, strerror(errno));
        return sr_seterr(SR_ERR_IO, "cannot load checkpoint %s: not a directory", dir);
    }
    char *latest = path_join(dir, "latest");
    if (!latest) return sr_seterr(SR_ERR_NOMEM, "out of memory");
    if (is_file(latest)) {
        char name[512];
        sr_status s = read_line(latest, name, sizeof name);
        if (s == SR_OK && (name[0] == '\0' || strchr(name, '/')))
            s = sr_seterr(SR_ERR_FORMAT, "%s does not name a step directory; fix or delete it", latest);
        if (s == SR_OK) {
            *out = path_join(dir, name);
            if (!*out) s = sr_seterr(SR_ERR_NOMEM, "out of memory");
            else if (!is_dir(*out)) {
                s = sr_seterr(SR_ERR_IO, "%s names %s, which does not exist", latest, *out);
                free(*out);
                *out = NULL;
            }
        }
        free(latest);
        return s;
    }
    free(latest);
    char *model = path_join(dir, "model.safetensors");
    if (!model) return sr_seterr(SR_ERR_NOMEM, "out of memory");
    int ok = is_file(model);
    free(model);
    if (!ok)
        return sr_seterr(SR_ERR_FORMAT,
                         "%s is not a checkpoint: it has neither a 'latest' file nor "
                         "model.safetensors",
                         dir);
    *out = strdup(dir);
    return *out ? SR_OK : sr_seterr(SR_ERR_NOMEM, "out of memory");
}

/* Loads every program parameter from a safetensors file into arena. */
static sr_status load_tensors(run *r, const char *path, float *arena, const char *suffix,
                              const char *prefix)
{
    sr_st_file f;
    SR_CHECK(sr_st_open(&f, path));
    sr_status s = SR_OK;
    for (int i = 0; i < r->prog->n_params && s == SR_OK; i++) {
        const sr_param_desc *d = &r->prog->params[i];
        char *name = malloc(strlen(d->name) + strlen(suffix) + 1);
        if (!name) {
            s = sr_seterr(SR_ERR_NOMEM, "out of memory");
            break;
        }
        strcpy(name, d->name);
        strcat(name, suffix);
        s = sr_st_load(&f, name, prefix, d->ndim, d->dims, arena + d->offset);
        free(name);
    }
    sr_st_close(&f);
    return s;
}

static sr_status init_from(run *r, const char *path)
{
    char *file = NULL;
    sr_status s = SR_OK;
    if (is_dir(path)) {
        char *step = NULL;
        SR_CHECK(resolve_ckpt(path, &step));
        file = path_join(step, "model.safetensors");
        free(step);
    } else {
        file = strdup(path);
    }
    if (!file) return sr_seterr(SR_ERR_NOMEM, "out of memory");
    s = load_tensors(r, file, r->params, "", HF_PREFIX);
    if (s == SR_OK) info(r, "initialized parameters from %s", file);
    free(file);
    return s;
}

/* --load: parameters, optimizer state and the step. */
static sr_status load_checkpoint(run *r)
{
    char *dir = NULL;
    SR_CHECK(resolve_ckpt(r->o.load, &dir));
    char *state_path = path_join(dir, "state.json");
    char *model = path_join(dir, "model.safetensors");
    char *optim = path_join(dir, "optimizer.safetensors");
    sr_json *st = NULL;
    sr_status s = (state_path && model && optim) ? SR_OK : sr_seterr(SR_ERR_NOMEM, "out of memory");
    if (s == SR_OK) s = sr_json_parse_file(state_path, &st);
    int64_t step = 0;
    if (s == SR_OK && (!sr_json_int64(sr_json_get(st, "step"), &step) || step < 0))
        s = sr_seterr(SR_ERR_FORMAT, "%s has no valid \"step\"; the checkpoint is damaged", state_path);
    if (s == SR_OK) {
        const char *name = sr_json_string(sr_json_get(st, "model"));
        if (name && r->prog->name && strcmp(name, r->prog->name) != 0)
            s = sr_seterr(SR_ERR_STATE, "checkpoint %s was saved by model '%s', this program is '%s'",
                          dir, name, r->prog->name);
    }
    if (s == SR_OK) s = load_tensors(r, model, r->params, "", NULL);
    if (s == SR_OK) s = load_tensors(r, optim, r->m, ".exp_avg", NULL);
    if (s == SR_OK) s = load_tensors(r, optim, r->v, ".exp_avg_sq", NULL);
    if (s == SR_OK) {
        uint64_t seed;
        /* the run's seed continues unless the user chose another */
        if (!flag_given(r->given, "seed") && sr_json_uint64(sr_json_get(st, "seed"), &seed))
            r->o.seed = seed;
        int64_t b = 0, t = 0;
        if (sr_json_int64(sr_json_get(st, "batch"), &b) && sr_json_int64(sr_json_get(st, "seq"), &t) &&
            (b != r->o.batch || t != r->o.seq))
            info(r, "note: %s was trained with --batch %lld --seq %lld; continuing with --batch %d "
                 "--seq %d changes the data order",
                 dir, (long long)b, (long long)t, r->o.batch, r->o.seq);
        r->start_step = (long)step;
        r->loaded = 1;
        info(r, "resumed from %s at step %ld", dir, r->start_step);
    }
    sr_json_free(st);
    free(state_path);
    free(model);
    free(optim);
    free(dir);
    return s;
}

/* -------------------------------------------------------------------------- */
/* Checkpoints                                                                 */

static sr_status mkdir_p(const char *path)
{
    char *p = strdup(path);
    if (!p) return sr_seterr(SR_ERR_NOMEM, "out of memory");
    sr_status s = SR_OK;
    for (char *c = p + 1;; c++) {
        if (*c == '/' || *c == '\0') {
            char save = *c;
            *c = '\0';
            if (mkdir(p, 0777) != 0 && errno != EEXIST)
                s = sr_seterr(SR_ERR_IO, "cannot create directory %s: %s", p, strerror(errno));
            else if (!is_dir(p))
                s = sr_seterr(SR_ERR_IO, "cannot create directory %s: a file is in the way", p);
            *c = save;
            if (s != SR_OK || save == '\0') break;
        }
    }
    free(p);
    return s;
}

/* Removes a directory we created and the plain files in it. */
static void remove_flat_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char *p = path_join(dir, e->d_name);
            if (p) unlink(p);
            free(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

static void fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd); /* best effort: some file systems refuse directory fsync */
        close(fd);
    }
}

static sr_status write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) return sr_seterr(SR_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    int ok = fputs(text, f) >= 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int e = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (!ok) return sr_seterr(SR_ERR_IO, "cannot write %s: %s", path, strerror(e));
    return SR_OK;
}

static sr_status write_arena(run *r, const char *path, const float *arena, const char *suffix,
                             long step)
{
    int n = r->prog->n_params;
    sr_st_entry *e = calloc((size_t)n + 1, sizeof *e);
    char **names = calloc((size_t)n + 1, sizeof *names);
    sr_status s = (e && names) ? SR_OK : sr_seterr(SR_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n && s == SR_OK; i++) {
        const sr_param_desc *d = &r->prog->params[i];
        names[i] = malloc(strlen(d->name) + strlen(suffix) + 1);
        if (!names[i]) {
            s = sr_seterr(SR_ERR_NOMEM, "out of memory");
            break;
        }
        strcpy(names[i], d->name);
        strcat(names[i], suffix);
        e[i].name = names[i];
        e[i].ndim = d->ndim;
        e[i].dims = d->dims;
        e[i].data = arena + d->offset;
    }
    char stepbuf[32];
    snprintf(stepbuf, sizeof stepbuf, "%ld", step);
    const char *meta[] = {"model", r->prog->name ? r->prog->name : "", "step", stepbuf};
    if (s == SR_OK) s = sr_st_write(path, e, n, meta, 2);
    for (int i = 0; names && i < n; i++) free(names[i]);
    free(names);
    free(e);
    return s;
}

static char *state_json(run *r, long step)
{
    const opts *o = &r->o;
    sr_buf b;
    sr_buf_init(&b);
    sr_buf_printf(&b, "{\n  \"step\": %ld,\n  \"tokens\": %lld,\n  \"seed\": %llu,\n", step,
                  (long long)step * o->batch * o->seq, o->seed);
    sr_buf_printf(&b, "  \"batch\": %d,\n  \"seq\": %d,\n  \"microbatches\": %d,\n", o->batch,
                  o->seq, o->microbatches);
    sr_buf_printf(&b, "  \"steps\": %ld,\n  \"lr\": ", o->steps);
    sr_buf_json_float(&b, o->lr);
    sr_buf_puts(&b, ",\n  \"min_lr\": ");
    sr_buf_json_float(&b, o->min_lr);
    sr_buf_puts(&b, ",\n  \"lr_schedule\": ");
    sr_buf_json_string(&b, o->lr_schedule);
    sr_buf_printf(&b, ",\n  \"warmup\": %d,\n  \"weight_decay\": ", o->warmup);
    sr_buf_json_float(&b, o->weight_decay);
    sr_buf_puts(&b, ",\n  \"beta1\": ");
    sr_buf_json_float(&b, o->beta1);
    sr_buf_puts(&b, ",\n  \"beta2\": ");
    sr_buf_json_float(&b, o->beta2);
    sr_buf_puts(&b, ",\n  \"eps\": ");
    sr_buf_json_float(&b, o->eps);
    sr_buf_puts(&b, ",\n  \"grad_clip\": ");
    sr_buf_json_float(&b, o->grad_clip);
    sr_buf_puts(&b, ",\n  \"dropout\": ");
    sr_buf_json_float(&b, o->dropout);
    sr_buf_puts(&b, ",\n  \"data\": ");
    sr_buf_json_string(&b, o->data);
    sr_buf_puts(&b, ",\n  \"val_data\": ");
    sr_buf_json_string(&b, o->val_data);
    sr_buf_puts(&b, ",\n  \"model\": ");
    sr_buf_json_string(&b, r->prog->name);
    sr_buf_puts(&b, ",\n  \"source\": ");
    sr_buf_json_string(&b, r->prog->source);
    sr_buf_puts(&b, ",\n  \"runtime\": \"libshardrt " SR_VERSION "\"\n}\n");
    if (b.failed) {
        sr_buf_free(&b);
        return NULL;
    }
    return b.data;
}

/* Writes DIR/step-NNNNNNNN atomically: everything goes to a temporary
 * directory that is fsync'ed and renamed into place; only then is DIR/latest
 * replaced (temp file + rename). Any failure leaves the old latest as it was. */
static sr_status save_checkpoint(run *r, long step)
{
    const char *root = r->o.save;
    char name[64], tmpname[96], oldname[96], latest_tmp[64];
    snprintf(name, sizeof name, "step-%08ld", step);
    snprintf(tmpname, sizeof tmpname, ".tmp-%s-%ld", name, (long)getpid());
    snprintf(oldname, sizeof oldname, ".old-%s-%ld", name, (long)getpid());
    snprintf(latest_tmp, sizeof latest_tmp, ".latest.tmp-%ld", (long)getpid());
    SR_CHECK(mkdir_p(root));
    char *final = path_join(root, name), *tmp = path_join(root, tmpname);
    char *old = path_join(root, oldname), *ltmp = path_join(root, latest_tmp);
    char *latest = path_join(root, "latest");
    char *f_model = tmp ? path_join(tmp, "model.safetensors") : NULL;
    char *f_optim = tmp ? path_join(tmp, "optimizer.safetensors") : NULL;
    char *f_state = tmp ? path_join(tmp, "state.json") : NULL;
    char *f_config = tmp ? path_join(tmp, "config.json") : NULL;
    char *state = state_json(r, step);
    sr_status s = SR_OK;
    int made_tmp = 0;
    if (!final || !tmp || !old || !ltmp || !latest || !f_model || !f_optim || !f_state ||
        !f_config || !state) {
        s = sr_seterr(SR_ERR_NOMEM, "out of memory while saving a checkpoint");
        goto out;
    }
    if (access(final, F_OK) == 0 && !is_dir(final)) {
        s = sr_seterr(SR_ERR_IO, "cannot save checkpoint: %s exists and is not a directory; "
                      "move it away", final);
        goto out;
    }
    if (is_dir(tmp)) remove_flat_dir(tmp); /* left over by a crashed run with our pid */
    if (mkdir(tmp, 0777) != 0) {
        s = sr_seterr(SR_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
        goto out;
    }
    made_tmp = 1;
    s = write_arena(r, f_model, r->params, "", step);
    if (s == SR_OK) {
        /* optimizer state: NAME.exp_avg then NAME.exp_avg_sq, as torch names them */
        int n = r->prog->n_params;
        sr_st_entry *e = calloc(2 * (size_t)n + 1, sizeof *e);
        char **names = calloc(2 * (size_t)n + 1, sizeof *names);
        if (!e || !names) s = sr_seterr(SR_ERR_NOMEM, "out of memory");
        for (int i = 0; i < 2 * n && s == SR_OK; i++) {
            const sr_param_desc *d = &r->prog->params[i / 2];
            const char *suf = i % 2 ? ".exp_avg_sq" : ".exp_avg";
            names[i] = malloc(strlen(d->name) + strlen(suf) + 1);
            if (!names[i]) {
                s = sr_seterr(SR_ERR_NOMEM, "out of memory");
                break;
            }
            strcpy(names[i], d->name);
            strcat(names[i], suf);
            e[i].name = names[i];
            e[i].ndim = d->ndim;
            e[i].dims = d->dims;
            e[i].data = (i % 2 ? r->v : r->m) + d->offset;
        }
        char stepbuf[32];
        snprintf(stepbuf, sizeof stepbuf, "%ld", step);
        const char *meta[] = {"step", stepbuf};
        if (s == SR_OK) s = sr_st_write(f_optim, e, 2 * n, meta, 1);
        for (int i = 0; names && i < 2 * n; i++) free(names[i]);
        free(names);
        free(e);
    }
    if (s == SR_OK) s = write_text(f_state, state);
    if (s == SR_OK) {
        const char *cfg = r->prog->config_json ? r->prog->config_json : "{}";
        size_t n = strlen(cfg);
        char *c = malloc(n + 2);
        if (!c) s = sr_seterr(SR_ERR_NOMEM, "out of memory");
        else {
            memcpy(c, cfg, n);
            c[n] = '\n';
            c[n + 1] = '\0';
            if (n && cfg[n - 1] == '\n') c[n] = '\0';
            s = write_text(f_config, c);
            free(c);
        }
    }
    if (s != SR_OK) goto out;
    fsync_dir(tmp);
    if (is_dir(final)) {
        /* re-saving a step: move the old copy aside so the rename can land */
        if (rename(final, old) != 0) {
            s = sr_seterr(SR_ERR_IO, "cannot replace %s: %s", final, strerror(errno));
            goto out;
        }
    }
    if (rename(tmp, final) != 0) {
        s = sr_seterr(SR_ERR_IO, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
        if (is_dir(old)) rename(old, final);
        goto out;
    }
    made_tmp = 0;
    if (is_dir(old)) remove_flat_dir(old);
    fsync_dir(root);
    char line[80];
    snprintf(line, sizeof line, "%s\n", name);
    s = write_text(ltmp, line);
    if (s == SR_OK && rename(ltmp, latest) != 0)
        s = sr_seterr(SR_ERR_IO, "cannot update %s: %s", latest, strerror(errno));
    if (s != SR_OK) unlink(ltmp);
    else fsync_dir(root);
    if (s == SR_OK) info(r, "saved checkpoint %s", final);
out:
    if (made_tmp) remove_flat_dir(tmp);
    free(final);
    free(tmp);
    free(old);
    free(ltmp);
    free(latest);
    free(f_model);
    free(f_optim);
    free(f_state);
    free(f_config);
    free(state);
    return s;
}

/* -------------------------------------------------------------------------- */
/* Training                                                                    */

static float lr_at(const opts *o, long k)
{
    if (k < o->warmup) return (float)((double)o->lr * (double)(k + 1) / (double)o->warmup);
    if (strcmp(o->lr_schedule, "cosine") == 0) {
        long span = o->steps - o->warmup;
        double frac = (double)(k - o->warmup) / (double)(span > 1 ? span : 1);
        if (frac > 1) frac = 1; /* past --steps (a longer resumed run): stay at min_lr */
        return (float)(o->min_lr + 0.5 * ((double)o->lr - o->min_lr) * (1.0 + cos(PI * frac)));
    }
    return o->lr;
}

static void exec_init(run *r, sr_exec *e, int B, float dropout, long step)
{
    memset(e, 0, sizeof *e);
    e->B = B;
    e->T = r->o.seq;
    e->params = r->params;
    e->grads = r->grads;
    e->work = r->work;
    e->inputs = r->inputs;
    e->targets = r->targets;
    e->dloss = 1.0f / (float)r->o.microbatches;
    e->dropout = dropout;
    e->seed = r->o.seed;
    e->step = (uint64_t)step;
}

static sr_status evaluate(run *r, double *out)
{
    const opts *o = &r->o;
    int64_t E = sr_data_batches_per_epoch(&r->val, o->batch, o->seq);
    int64_t nb = o->eval_batches < E ? o->eval_batches : E; /* no batch counted twice */
    double sum = 0;
    for (int64_t b = 0; b < nb; b++)
        for (int mb = 0; mb < o->microbatches; mb++) {
            SR_CHECK(sr_data_batch(&r->val, b, o->batch, o->seq, mb * r->B, r->B, r->inputs, r->targets));
            sr_exec e;
            exec_init(r, &e, r->B, 0.0f, b);
            e.row0 = (int64_t)mb * r->B * o->seq;
            r->prog->forward(&e);
            sum += e.loss;
        }
    *out = sum / (double)(nb * o->microbatches);
    return SR_OK;
}

static sr_status run_eval(run *r, long step)
{
    double vl;
    SR_CHECK(evaluate(r, &vl));
    info(r, "step %ld: val loss %.6f", step, vl);
    if (r->log) {
        fprintf(r->log, "{\"step\":%ld,\"val_loss\":%.9g}\n", step, (double)(float)vl);
        fflush(r->log);
    }
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
    if (r->o.quiet) return;
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

static sr_status dump_grads(run *r, long step)
{
    sr_status s = write_arena(r, r->o.dump_grads, r->grads, "", step);
    if (s == SR_OK) info(r, "wrote the gradients of step %ld to %s", step, r->o.dump_grads);
    return s;
}

static sr_status train(run *r)
{
    const opts *o = &r->o;
    const sr_program *prog = r->prog;
    int M = o->microbatches, T = o->seq;
    double t_begin = now_s();
    long last_saved = -1, last_eval = -1;
    for (long k = r->start_step; k < o->steps; k++) {
        double t0 = now_s();
        float lr = lr_at(o, k);
        sr_zero(r->grads, (long)prog->n_param_floats);
        double loss_sum = 0;
        for (int mb = 0; mb < M; mb++) {
            SR_CHECK(sr_data_batch(&r->train, k, o->batch, T, mb * r->B, r->B, r->inputs, r->targets));
            sr_exec e;
            exec_init(r, &e, r->B, o->dropout, k);
            e.row0 = (int64_t)mb * r->B * T;
            prog->forward(&e);
            loss_sum += e.loss;
            if (prog->backward) prog->backward(&e);
        }
        float loss = (float)(loss_sum / M);
        if (!isfinite(loss))
            return sr_seterr(SR_ERR_STATE, "the loss became %g at step %ld; lower --lr or set --grad-clip",
                             (double)loss, k);
        if (o->dump_grads && k == r->start_step) SR_CHECK(dump_grads(r, k));
        double sq = 0;
        for (int i = 0; i < prog->n_params; i++)
            sq += sr_sumsq(r->grads + prog->params[i].offset, (long)prog->params[i].numel);
        double norm = sqrt(sq);
        if (o->grad_clip > 0) {
            /* torch.nn.utils.clip_grad_norm_: coefficient in float32, applied when < 1 */
            float coef = o->grad_clip / ((float)norm + 1e-6f);
            if (coef < 1.0f) sr_scale_fwd(r->grads, r->grads, coef, (long)prog->n_param_floats);
        }
        for (int i = 0; i < prog->n_params; i++) {
            const sr_param_desc *d = &prog->params[i];
            sr_adamw_step(r->params + d->offset, r->grads + d->offset, r->m + d->offset,
                          r->v + d->offset, (long)d->numel, lr, o->beta1, o->beta2, o->eps,
                          d->decay ? o->weight_decay : 0.0f, k + 1);
        }
        double t1 = now_s();
        double ms = (t1 - t0) * 1e3, tok_s = (double)o->batch * T / (t1 - t0 > 0 ? t1 - t0 : 1e-9);
        if (r->log) {
            fprintf(r->log, "{\"step\":%ld,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,"
                    "\"tokens_per_s\":%.9g,\"ms\":%.9g}\n",
                    k, (double)loss, (double)lr, norm, tok_s, ms);
            fflush(r->log);
        }
        progress(r, k, loss, lr, norm, tok_s, ms, t1 - t_begin);
        if (r->have_val && o->eval_every > 0 && (k + 1) % o->eval_every == 0) {
            SR_CHECK(run_eval(r, k + 1));
            last_eval = k + 1;
        }
        if (o->save && o->save_every > 0 && (k + 1) % o->save_every == 0) {
            SR_CHECK(save_checkpoint(r, k + 1));
            last_saved = k + 1;
        }
    }
    long end = o->steps > r->start_step ? o->steps : r->start_step;
    if (r->have_val && last_eval != end) SR_CHECK(run_eval(r, end));
    int trained = o->steps > r->start_step;
    if (o->save && last_saved != end && (trained || !r->loaded)) SR_CHECK(save_checkpoint(r, end));
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
 * logits/temperature over the top-k candidates, drawn with uniform u. */
static int pick(const float *logits, int V, float temp, int top_k, float u, cand *c)
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
    if (top_k > 0 && top_k < V) {
        qsort(c, (size_t)V, sizeof *c, cmp_cand);
        n = top_k;
    }
    double mx = logits[best], z = 0;
    for (int j = 0; j < n; j++) z += exp(((double)c[j].logit - mx) / temp);
    double acc = 0, target = (double)u * z;
    for (int j = 0; j < n; j++) {
        acc += exp(((double)c[j].logit - mx) / temp);
        if (target < acc) return c[j].id;
    }
    return c[n - 1].id;
}

static sr_status sample(run *r)
{
    const opts *o = &r->o;
    const sr_program *prog = r->prog;
    int V = prog->vocab, T = o->seq;
    int byte_model = V == 256;
    size_t plen = o->prompt ? strlen(o->prompt) : 1;
    if (plen == 0) plen = 1;
    int32_t *toks = malloc((plen + (size_t)o->sample) * sizeof *toks);
    cand *c = malloc((size_t)V * sizeof *c);
    if (!toks || !c) {
        free(toks);
        free(c);
        return sr_seterr(SR_ERR_NOMEM, "out of memory for sampling");
    }
    size_t n = 0;
    if (o->prompt && *o->prompt) {
        for (const unsigned char *p = (const unsigned char *)o->prompt; *p; p++) toks[n++] = *p;
    } else {
        /* byte models start at a newline; GPT-2 vocabularies at <|endoftext|> as llm.c does */
        toks[n++] = byte_model ? '\n' : (V >= 50257 ? 50256 : 0);
    }
    sr_status s = SR_OK;
    for (int i = 0; i < o->sample; i++) {
        size_t w = n < (size_t)T ? n : (size_t)T;
        memset(r->inputs, 0, (size_t)T * sizeof *r->inputs);
        memset(r->targets, 0, (size_t)T * sizeof *r->targets);
        memcpy(r->inputs, toks + n - w, w * sizeof *toks);
        sr_exec e;
        exec_init(r, &e, 1, 0.0f, o->steps);
        prog->forward(&e);
        if (!e.logits) {
            s = sr_seterr(SR_ERR_STATE, "model %s has no logits output; it cannot sample",
                          prog->name ? prog->name : "?");
            break;
        }
        float u = sr_rand_uniform(o->seed, SAMPLE_STREAM, (uint64_t)i);
        toks[n++] = pick(e.logits + (w - 1) * (size_t)V, V, o->temperature, o->top_k, u, c);
    }
    if (s == SR_OK) {
        if (r->line_open) {
            fputc('\n', stderr);
            r->line_open = 0;
        }
        if (byte_model) {
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
#if defined(__GNUC__)
    if (openblas_set_num_threads) openblas_set_num_threads(n);
#endif
}

static sr_status setup(run *r)
{
    const sr_program *prog = r->prog;
    opts *o = &r->o;
    SR_CHECK(check_program(prog));
    set_threads(o->threads);
    r->B = o->batch / o->microbatches;
    r->tty = isatty(fileno(stderr));

    /* data first: a wrong file name should fail before minutes of loading */
    if (o->data) {
        SR_CHECK(sr_data_open(&r->train, o->data, prog->vocab));
        r->have_train = 1;
        SR_CHECK(sr_data_check(&r->train, o->batch, o->seq));
    }
    if (o->val_data) {
        SR_CHECK(sr_data_open(&r->val, o->val_data, prog->vocab));
        r->have_val = 1;
        SR_CHECK(sr_data_check(&r->val, o->batch, o->seq));
    }

    int64_t n = prog->n_param_floats;
    r->params = alloc_floats(n);
    r->grads = alloc_floats(n);
    r->m = alloc_floats(n);
    r->v = alloc_floats(n);
    if (!r->params || !r->grads || !r->m || !r->v)
        return sr_seterr(SR_ERR_NOMEM, "cannot allocate %.1f MB for parameters, gradients and "
                         "optimizer state", 16.0 * (double)n / 1e6);
    size_t w = prog->work_bytes(r->B, o->seq), w1 = prog->work_bytes(1, o->seq);
    r->work_size = w > w1 ? w : w1;
    r->work = alloc_floats((int64_t)((r->work_size + 3) / 4));
    r->inputs = malloc((size_t)r->B * o->seq * sizeof(int32_t));
    r->targets = malloc((size_t)r->B * o->seq * sizeof(int32_t));
    if (!r->work || !r->inputs || !r->targets)
        return sr_seterr(SR_ERR_NOMEM, "cannot allocate %.1f MB of activations for %d x %d "
                         "sequences; raise --microbatches or lower --seq",
                         (double)r->work_size / 1e6, r->B, o->seq);

    if (o->load) SR_CHECK(load_checkpoint(r));
    else if (strcmp(o->init, "random") == 0) init_random(r);
    else SR_CHECK(init_from(r, o->init));

    if (o->steps > r->start_step && !r->have_train)
        return sr_seterr(SR_ERR_USAGE, "no training data: pass --data FILE (or --steps 0)");
    if (o->dump_grads && o->steps <= r->start_step)
        return sr_seterr(SR_ERR_USAGE, "--dump-grads needs at least one training step");
    if (o->log) {
        r->log = fopen(o->log, r->loaded ? "a" : "w"); /* a resumed run continues its log */
        if (!r->log) return sr_seterr(SR_ERR_IO, "cannot open log file %s: %s", o->log, strerror(errno));
    }
    if (r->have_train)
        info(r, "%s: %lld parameters; batch %d x %d in %d microbatch%s; steps %ld..%ld; %s has %lld "
             "tokens (%lld batches per pass)",
             prog->name ? prog->name : "model", (long long)n, o->batch, o->seq, o->microbatches,
             o->microbatches == 1 ? "" : "es", r->start_step, o->steps, o->data,
             (long long)r->train.n_tokens,
             (long long)sr_data_batches_per_epoch(&r->train, o->batch, o->seq));
    return SR_OK;
}

static void cleanup(run *r)
{
    if (r->log) fclose(r->log);
    if (r->have_train) sr_data_close(&r->train);
    if (r->have_val) sr_data_close(&r->val);
    free(r->params);
    free(r->grads);
    free(r->m);
    free(r->v);
    free(r->work);
    free(r->inputs);
    free(r->targets);
}

int sr_main(const sr_program *prog, int argc, char **argv)
{
    run r;
    memset(&r, 0, sizeof r);
    r.prog = prog;
    r.argv0 = argc > 0 && argv[0] ? argv[0] : (prog && prog->name ? prog->name : "shardc-program");
    opts defaults;
    set_defaults(&defaults, prog);
    r.o = defaults;
    sr_status s = parse_flags(&r.o, r.given, argc, argv);
    if (s == SR_OK && r.o.help) {
        print_help(prog, &defaults, r.argv0);
        return 0;
    }
    if (s == SR_OK && r.o.version) {
        printf("%s: model %s from %s, libshardrt %s\n", r.argv0, prog->name ? prog->name : "?",
               prog->source ? prog->source : "?", SR_VERSION);
        return 0;
    }
    if (s == SR_OK) s = check_opts(&r.o, prog);
    if (s == SR_OK) s = setup(&r);
    if (s == SR_OK) s = train(&r);
    if (s == SR_OK && r.o.sample > 0) s = sample(&r);
    if (r.line_open) fputc('\n', stderr);
    cleanup(&r);
    if (s == SR_OK) return 0;
    fprintf(stderr, "%s: error: %s\n", r.argv0, sr_errmsg());
    if (s == SR_ERR_USAGE) {
        fprintf(stderr, "try %s --help\n", r.argv0);
        return 2;
    }
    return 1;
}
