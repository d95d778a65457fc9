/* state.c: a run's parameters and optimizer state: random initialization,
 * --init from a safetensors file, checkpoints (--save, --load) and
 * --dump-grads. Files always hold whole logical tensors under their program
 * names, whatever the layout that wrote them, so any layout reads what any
 * other wrote.
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
#include <unistd.h>

#include "run.h"
#include "sr_ckpt.h"
#include "sr_json.h"
#include "sr_tp.h"

#define PRAGMA_(x) _Pragma(#x)
#ifdef _OPENMP
#define OMP(x) PRAGMA_(omp x)
#else
#define OMP(x)
#endif

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

/* element gi of that same sequence, alone: a tensor-parallel shard draws
 * exactly the numbers of its place in the full tensor */
static float normal_at(int64_t gi, float std, uint64_t seed, uint64_t stream)
{
    const double two_pi = 6.283185307179586476925286766559;
    int64_t k = gi / 2;
    double u1 = 1.0 - (double)sr_rand_uniform(seed, stream, (uint64_t)(2 * k));
    double u2 = (double)sr_rand_uniform(seed, stream, (uint64_t)(2 * k + 1));
    double rad = sqrt(-2.0 * log(u1));
    return (float)(std * rad * (gi % 2 ? sin(two_pi * u2) : cos(two_pi * u2)));
}

/* Where this rank keeps each parameter (r->poff, r->n_local): the whole
 * model at the descriptor's offsets, or with a pipeline the compiler's
 * layout of this pipeline rank's arena, checked here. */
sr_status rt_param_layout(run *r)
{
    const sr_program *prog = r->prog;
    int n = prog->n_params, pp = r->grid.pp, me = r->grid.pp_rank;
    r->poff = malloc(sizeof(int64_t) * ((size_t)n + 1));
    if (!r->poff) return sr_seterr(SR_ERR_NOMEM, "out of memory");
    if (prog->n_stages <= 1) {
        for (int i = 0; i < n; i++) r->poff[i] = prog->params[i].offset;
        r->n_local = prog->n_param_floats;
        return SR_OK;
    }
    const int64_t *off = prog->rank_param_offsets, *len = prog->rank_param_floats;
    int ok = off && len;
    for (int i = 0; i < n && ok; i++) {
        int held = 0;
        for (int rk = 0; rk < pp; rk++) {
            int64_t o = off[(int64_t)rk * n + i];
            ok = ok && o >= -1 && (o < 0 || o + prog->params[i].numel <= len[rk]);
            held += o >= 0;
        }
        ok = ok && held > 0; /* every parameter lives somewhere, to be saved */
        for (int s = me; s < prog->n_stages && ok; s += pp) /* and where its stages run */
            for (int k = 0; k < prog->stages[s].n_params; k++)
                ok = ok && off[(int64_t)me * n + prog->stages[s].params[k]] >= 0;
    }
    if (!ok)
        return sr_seterr(SR_ERR_STATE, "the program's parameter layout of the pipeline ranks is inconsistent; "
                         "rebuild it with shardc");
    for (int i = 0; i < n; i++) r->poff[i] = off[(int64_t)me * n + i];
    r->n_local = len[me];
    return SR_OK;
}

sr_status rt_init_random(run *r)
{
    const sr_program *prog = r->prog;
    float *hp = rt_host_view(r, r->params, r->n_alloc);
    if (!hp) return sr_seterr(SR_ERR_NOMEM, "out of memory while initializing");
    for (int i = 0; i < prog->n_params; i++) {
        const sr_param_desc *d = &prog->params[i];
        if (r->poff[i] < 0) continue; /* another pipeline rank's */
        float *p = hp + r->poff[i];
        switch (d->init) {
        case SR_INIT_ZEROS: sr_zero(p, (long)d->numel); break;
        case SR_INIT_ONES:
            for (int64_t j = 0; j < d->numel; j++) p[j] = 1.0f;
            break;
        case SR_INIT_NORMAL:
            if (d->split_dim < 0) {
                init_normal(p, d->numel, d->std, r->o.seed, (uint64_t)i + 1);
            } else {
                int rank = r->grid.tp_rank;
                OMP(parallel for if(d->numel >= 65536))
                for (int64_t j = 0; j < d->numel; j++)
                    p[j] = normal_at(sr_param_global_index(d, rank, j), d->std, r->o.seed, (uint64_t)i + 1);
            }
            break;
        }
    }
    rt_host_done(r, hp, r->params, r->n_alloc, 1);
    return SR_OK;
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
sr_status rt_resolve_ckpt(const char *dir, char **out)
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
static sr_status load_tensors_host(run *r, const sr_st_file *f, float *arena, const char *suffix,
                                   const char *prefix);

/* full tensors (host, full layout) -> this rank's shards of the
 * parameters it holds (host, its layout) */
static void scatter_full(run *r, float *full, float *local)
{
    for (int i = 0; i < r->prog->n_params; i++) {
        const sr_param_desc *d = &r->prog->params[i];
        if (r->poff[i] >= 0) sr_param_shard(d, r->grid.tp_rank, full + r->full[i].offset, local + r->poff[i], 1);
    }
}

/* this rank's shards (backend memory, its layout) -> whole tensors on the
 * host of world rank 0 (the full layout): split tensors are gathered over
 * the tensor group, and with a pipeline each tensor comes from the pipeline
 * rank that owns it. Collective over the tensor and pipeline groups of data
 * rank 0; other data ranks return at once (only world rank 0 writes). */
static sr_status gather_full(run *r, const float *dev, float *full)
{
    if (r->grid.dp_rank != 0) return SR_OK;
    float *h = rt_host_view(r, dev, r->n_local);
    float *tmp = NULL;
    int tp = r->grid.tp;
    sr_status s = h ? SR_OK : sr_seterr(SR_ERR_NOMEM, "out of memory while gathering parameters");
    for (int i = 0; i < r->prog->n_params && s == SR_OK; i++) {
        const sr_param_desc *d = &r->prog->params[i];
        float *dst = full + r->full[i].offset;
        if (!rt_pipe_owns(r, i)) continue; /* the owner sends it */
        if (d->split_dim < 0 || tp == 1) {
            sr_param_shard(d, 0, dst, h + r->poff[i], 0);
            continue;
        }
        free(tmp);
        tmp = malloc(sizeof(float) * (size_t)d->numel * (size_t)tp);
        if (!tmp) {
            s = sr_seterr(SR_ERR_NOMEM, "out of memory while gathering %s", d->name);
            break;
        }
        s = sr_comm_allgather(r->grid.tp_comm, h + r->poff[i], tmp, d->numel, d->name, NULL);
        for (int k = 0; k < tp && s == SR_OK; k++) sr_param_shard(d, k, dst, tmp + (int64_t)k * d->numel, 0);
    }
    free(tmp);
    rt_host_done(r, h, (float *)dev, r->n_local, 0);
    /* whole tensors to pipeline rank 0, in parameter order (so blocking
     * transfers cannot deadlock); only the tensor rank 0 column */
    for (int i = 0; r->pipe && r->grid.tp_rank == 0 && i < r->prog->n_params && s == SR_OK; i++) {
        int own = rt_pipe_owner(r, i), me = r->grid.pp_rank;
        const sr_param_desc *f = &r->full[i];
        if (own == 0 || (me != 0 && me != own)) continue;
        int tag = i & 0x3fff; /* MPI guarantees tags up to 32767 */
        if (me == own) s = sr_comm_send(r->grid.pp_comm, full + f->offset, f->numel, 0, tag, f->name, NULL);
        else s = sr_comm_recv(r->grid.pp_comm, full + f->offset, f->numel, own, tag, f->name, NULL);
    }
    return s;
}

/* parameters of the open file (whole tensors) into an arena of backend memory */
static sr_status load_tensors(run *r, const sr_st_file *f, float *arena, const char *suffix,
                              const char *prefix)
{
    float *full = rt_alloc_floats(r->n_full);
    float *h = full ? rt_host_view(r, arena, r->n_local) : NULL;
    sr_status s = h ? SR_OK : sr_seterr(SR_ERR_NOMEM, "out of memory while loading %s", f->path);
    if (s == SR_OK) s = load_tensors_host(r, f, full, suffix, prefix);
    if (s == SR_OK) scatter_full(r, full, h);
    if (h) rt_host_done(r, h, arena, r->n_local, s == SR_OK);
    free(full);
    return s;
}

/* tensors that Hugging Face files hold beside the parameters: attention mask
 * and rotary frequency buffers */
static int is_buffer_name(const char *name)
{
    static const char *ends[] = {".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq"};
    size_t n = strlen(name);
    for (size_t k = 0; k < sizeof ends / sizeof ends[0]; k++) {
        size_t e = strlen(ends[k]);
        if (n >= e && !strcmp(name + n - e, ends[k])) return 1;
    }
    return 0;
}

/* --init: every tensor of the file must be a parameter of the program (or
 * a buffer): one that is not, such as an untied lm_head.weight loaded into a
 * model whose head is the embedding, would be dropped silently */
static sr_status check_all_used(run *r, const sr_st_file *f, const char *prefix)
{
    char *used = calloc((size_t)f->n + 1, 1);
    if (!used) return sr_seterr(SR_ERR_NOMEM, "out of memory");
    for (int i = 0; i < r->prog->n_params; i++) {
        const sr_st_tensor *t = sr_st_find_alias(f, r->full[i].name, prefix);
        if (t) used[t - f->tensors] = 1;
    }
    int n = 0, first = -1;
    for (int k = 0; k < f->n; k++)
        if (!used[k] && !is_buffer_name(f->tensors[k].name) && n++ == 0) first = k;
    free(used);
    if (!n) return SR_OK;
    return sr_seterr(SR_ERR_STATE, "%s has %d tensor%s this model has no parameter for, such as '%s'; it was "
                     "saved from a different model (%s)", f->path, n, n == 1 ? "" : "s", f->tensors[first].name,
                     strstr(f->tensors[first].name, "lm_head") ? "an untied output head: build a model whose "
                     "head is its own parameter, such as examples/llama.model" : "check its config.json");
}

static sr_status load_tensors_host(run *r, const sr_st_file *f, float *arena, const char *suffix,
                                   const char *prefix)
{
    sr_status s = SR_OK;
    for (int i = 0; i < r->prog->n_params && s == SR_OK; i++) {
        const sr_param_desc *d = &r->full[i]; /* files hold whole tensors */
        if (r->poff[i] < 0) continue;         /* another pipeline rank reads it */
        char *name = malloc(strlen(d->name) + strlen(suffix) + 1);
        if (!name) {
            s = sr_seterr(SR_ERR_NOMEM, "out of memory");
            break;
        }
        strcpy(name, d->name);
        strcat(name, suffix);
        /* --init (prefix): a padded vocabulary takes a file without the padding (Hugging Face's
         * GPT-2 at 50257 rows into 50304) */
        int64_t rows = prefix && sr_classes(r->prog) != r->prog->vocab && d->ndim >= 1 &&
                               d->dims[0] == r->prog->vocab ? sr_classes(r->prog) : 0;
        int padded = 0;
        s = sr_st_load_rows(f, name, prefix, d->ndim, d->dims, rows, arena + d->offset, &padded);
        if (s == SR_OK && padded)
            rt_info(r, "%s: %lld rows from %s, padded with zeros to %lld (the vocabulary's padding)", d->name,
                    (long long)rows, f->path, (long long)d->dims[0]);
        free(name);
    }
    if (s == SR_OK && prefix) s = check_all_used(r, f, prefix); /* after the missing ones, more specific */
    return s;
}

sr_status rt_init_from(run *r, const char *path)
{
    char *file = NULL;
    sr_status s = SR_OK;
    int dir = is_dir(path);
    char *one = dir ? path_join(path, "model.safetensors") : NULL;
    char *index = dir ? path_join(path, "model.safetensors.index.json") : NULL;
    if (index && is_file(index) && one && !is_file(one)) { /* a sharded Hugging Face checkpoint */
        file = index;
        index = NULL;
    } else if (dir) {
        char *step = NULL;
        s = rt_resolve_ckpt(path, &step);
        file = s == SR_OK ? path_join(step, "model.safetensors") : NULL;
        free(step);
    } else {
        file = strdup(path);
    }
    free(one);
    free(index);
    if (s != SR_OK) return s;
    if (!file) return sr_seterr(SR_ERR_NOMEM, "out of memory");
    sr_st_file f;
    size_t len = strlen(file);
    s = len > 5 && !strcmp(file + len - 5, ".json") ? sr_st_open_index(&f, file) : sr_st_open(&f, file);
    if (s == SR_OK) {
        s = load_tensors(r, &f, r->params, "", HF_PREFIX);
        sr_st_close(&f);
    }
    if (s == SR_OK) rt_info(r, "initialized parameters from %s", file);
    free(file);
    return s;
}

/* optimizer state is stored whole; with ZeRO-1 this rank keeps its shard */
static sr_status load_opt_state(run *r, const sr_st_file *f, const char *suffix, float *dst)
{
    if (!r->gshard) return load_tensors(r, f, dst, suffix, NULL);
    float *full = rt_alloc_floats(r->n_full), *local = rt_alloc_floats(r->n_alloc);
    sr_status s = full && local ? SR_OK : sr_seterr(SR_ERR_NOMEM, "out of memory while loading %s", f->path);
    if (s == SR_OK) s = load_tensors_host(r, f, full, suffix, NULL);
    if (s == SR_OK) {
        scatter_full(r, full, local);
        int64_t lo, n, at;
        for (int j = 0; sr_dp_slice(r->dp, j, &lo, &n, &at); j++)
            r->be->h2d(dst + at, local + lo, sizeof(float) * (size_t)n);
    }
    free(full);
    free(local);
    return s;
}

/* --load: parameters, optimizer state and the step. */
sr_status rt_load_checkpoint(run *r)
{
    char *dir = NULL;
    SR_CHECK(rt_resolve_ckpt(r->o.load, &dir));
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
    /* each file opened once (an open checks the data's checksum: a pass over the file) */
    sr_st_file fm, fo;
    int open_m = 0, open_o = 0;
    if (s == SR_OK && (s = sr_st_open(&fm, model)) == SR_OK) open_m = 1;
    if (s == SR_OK) s = load_tensors(r, &fm, r->params, "", NULL);
    if (s == SR_OK && (s = sr_st_open(&fo, optim)) == SR_OK) open_o = 1;
    if (s == SR_OK) s = load_opt_state(r, &fo, ".exp_avg", r->m);
    if (s == SR_OK) s = load_opt_state(r, &fo, ".exp_avg_sq", r->v);
    if (open_m) sr_st_close(&fm);
    if (open_o) sr_st_close(&fo);
    if (s == SR_OK) {
        uint64_t seed;
        /* the run's seed continues unless the user chose another */
        if (!rt_flag_given(r->given, "seed") && sr_json_uint64(sr_json_get(st, "seed"), &seed))
            r->o.seed = seed;
        int64_t b = 0, t = 0;
        if (sr_json_int64(sr_json_get(st, "batch"), &b) && sr_json_int64(sr_json_get(st, "seq"), &t) &&
            (b != r->o.batch || t != r->o.seq))
            rt_info(r, "note: %s was trained with --batch %lld --seq %lld; continuing with --batch %d "
                 "--seq %d changes the data order",
                 dir, (long long)b, (long long)t, r->o.batch, r->o.seq);
        int64_t sh = 0;
        if (sr_json_int64(sr_json_get(st, "shuffle"), &sh) && sh != r->o.shuffle)
            rt_info(r, "note: %s was trained with --shuffle %lld; continuing with --shuffle %d changes "
                    "the data order", dir, (long long)sh, r->o.shuffle);
        r->start_step = (long)step;
        r->loaded = 1;
        rt_info(r, "resumed from %s at step %ld", dir, r->start_step);
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

static sr_status write_arena_host(run *r, const char *path, const float *arena, const char *suffix,
                                  long step, int cut_vocab);

/* an arena of backend memory to a safetensors file of whole tensors: the
 * gather is collective over the tensor group, world rank 0 writes */
static sr_status write_arena(run *r, const char *path, const float *arena, const char *suffix,
                             long step, int cut_vocab)
{
    float *full = rt_alloc_floats(r->n_full);
    sr_status s = full ? SR_OK : sr_seterr(SR_ERR_NOMEM, "out of memory while writing %s", path);
    s = rt_agree(r, s, path); /* no rank enters the gather alone */
    if (s == SR_OK) s = gather_full(r, arena, full);
    if (s == SR_OK && r->rank0) s = write_arena_host(r, path, full, suffix, step, cut_vocab);
    free(full);
    return s;
}

/* step < 0: no step in the metadata. cut_vocab: the @vocab tables of a padded
 * vocabulary without their padding rows (the rows past the real size). */
static sr_status write_arena_host(run *r, const char *path, const float *arena, const char *suffix,
                                  long step, int cut_vocab)
{
    int n = r->prog->n_params, V = r->prog->vocab, nv = sr_classes(r->prog);
    sr_st_entry *e = calloc((size_t)n + 1, sizeof *e);
    char **names = calloc((size_t)n + 1, sizeof *names);
    int64_t (*dims)[4] = calloc((size_t)n + 1, sizeof *dims); /* sr_param_desc.dims */
    sr_status s = (e && names && dims) ? SR_OK : sr_seterr(SR_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n && s == SR_OK; i++) {
        const sr_param_desc *d = &r->full[i];
        names[i] = malloc(strlen(d->name) + strlen(suffix) + 1);
        if (!names[i]) {
            s = sr_seterr(SR_ERR_NOMEM, "out of memory");
            break;
        }
        strcpy(names[i], d->name);
        strcat(names[i], suffix);
        memcpy(dims[i], d->dims, sizeof dims[i]);
        if (cut_vocab && nv < V && d->vocab && d->dims[0] == V) dims[i][0] = nv;
        e[i].name = names[i];
        e[i].ndim = d->ndim;
        e[i].dims = dims[i];
        e[i].data = arena + d->offset;
    }
    char stepbuf[32];
    snprintf(stepbuf, sizeof stepbuf, "%ld", step);
    const char *meta[] = {"model", r->prog->name ? r->prog->name : "", "step", stepbuf};
    if (s == SR_OK) s = sr_st_write(path, e, n, meta, step >= 0 ? 2 : 1);
    for (int i = 0; names && i < n; i++) free(names[i]);
    free(names);
    free(dims);
    free(e);
    return s;
}

/* the model's config constants as config.json, one line */
static sr_status write_config(run *r, const char *path)
{
    const char *cfg = r->prog->config_json ? r->prog->config_json : "{}";
    size_t n = strlen(cfg);
    char *c = malloc(n + 2);
    if (!c) return sr_seterr(SR_ERR_NOMEM, "out of memory");
    memcpy(c, cfg, n);
    c[n] = '\n';
    c[n + 1] = '\0';
    if (n && cfg[n - 1] == '\n') c[n] = '\0';
    sr_status s = write_text(path, c);
    free(c);
    return s;
}

static char *state_json(run *r, long step)
{
    const opts *o = &r->o;
    sr_buf b;
    sr_buf_init(&b);
    sr_buf_printf(&b, "{\n  \"step\": %ld,\n  \"tokens\": %lld,\n  \"seed\": %llu,\n", step,
                  (long long)step * o->batch * o->seq, o->seed);
    sr_buf_printf(&b, "  \"batch\": %d,\n  \"seq\": %d,\n  \"microbatches\": %d,\n  \"shuffle\": %d,\n",
                  o->batch, o->seq, o->microbatches, o->shuffle);
    sr_buf_printf(&b, "  \"steps\": %ld,\n  \"lr\": ", o->steps);
    sr_buf_json_float(&b, o->lr);
    sr_buf_puts(&b, ",\n  \"min_lr\": ");
    sr_buf_json_float(&b, o->min_lr);
    sr_buf_puts(&b, ",\n  \"lr_schedule\": ");
    sr_buf_json_string(&b, o->lr_schedule);
    sr_buf_printf(&b, ",\n  \"warmup\": %d,\n  \"decay_steps\": %d,\n  \"weight_decay\": ", o->warmup,
                  o->decay_steps);
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

/* The run's tokenizer files, copied into the checkpoint under the names
 * sr_tok_find knows (so --load finds the tokenizer as --init finds one beside
 * Hugging Face weights). */
static sr_status copy_tokenizer(run *r, const char *dir)
{
    if (!r->tok) return SR_OK;
    const char *src[2], *name[2];
    int n = sr_tok_files(r->tok, src, name);
    sr_status s = SR_OK;
    for (int i = 0; i < n && s == SR_OK; i++) {
        char *to = path_join(dir, name[i]);
        FILE *in = fopen(src[i], "rb"), *out = to ? fopen(to, "wb") : NULL;
        if (!to || !in || !out) {
            s = sr_seterr(SR_ERR_IO, "cannot copy the tokenizer %s into the checkpoint (%s): %s",
                          src[i], to ? to : "?", strerror(errno));
        } else {
            char buf[65536];
            size_t k;
            while (s == SR_OK && (k = fread(buf, 1, sizeof buf, in)) > 0)
                if (fwrite(buf, 1, k, out) != k)
                    s = sr_seterr(SR_ERR_IO, "cannot write %s: %s", to, strerror(errno));
            if (s == SR_OK && (ferror(in) || fflush(out) != 0 || fsync(fileno(out)) != 0))
                s = sr_seterr(SR_ERR_IO, "cannot copy the tokenizer %s to %s", src[i], to);
        }
        if (in) fclose(in);
        if (out && fclose(out) != 0 && s == SR_OK) s = sr_seterr(SR_ERR_IO, "cannot write %s", to);
        free(to);
    }
    return s;
}

/* a step directory's name as save_checkpoint writes it: "step-" and at least 8 digits */
static int step_dir_name(const char *name, long *step)
{
    if (strncmp(name, "step-", 5) != 0 || strlen(name + 5) < 8 || strlen(name + 5) > 18) return 0;
    for (const char *c = name + 5; *c; c++)
        if (*c < '0' || *c > '9') return 0;
    *step = strtol(name + 5, NULL, 10);
    return 1;
}

/* dir holds no directory (a checkpoint's files are flat): nothing of anyone
 * else's is removed with it */
static int only_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int flat = 1;
    struct dirent *e;
    while (flat && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char *p = path_join(dir, e->d_name);
        struct stat sb;
        flat = p && lstat(p, &sb) == 0 && !S_ISDIR(sb.st_mode);
        free(p);
    }
    closedir(d);
    return flat;
}

static int cmp_long_desc(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x < y) - (x > y);
}

/* --keep-last N, after a save of `saved` (already the latest): the step
 * directories of root other than the N highest-numbered and the one just
 * saved are removed. Only names this program writes are looked at; one that
 * cannot be removed whole (a file of the user's in it) stays, with a warning:
 * pruning must not fail a run or lose what it cannot account for. */
static void prune_checkpoints(run *r, const char *root, long saved)
{
    int keep = r->o.keep_last;
    DIR *d = keep > 0 ? opendir(root) : NULL;
    if (!d) return;
    long *steps = NULL, st;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!step_dir_name(e->d_name, &st)) continue;
        if (n == cap) {
            long *grown = realloc(steps, sizeof *steps * (cap = cap ? 2 * cap : 16));
            if (!grown) break; /* out of memory: prune what was listed */
            steps = grown;
        }
        steps[n++] = st;
    }
    closedir(d);
    if (steps) qsort(steps, n, sizeof *steps, cmp_long_desc);
    for (size_t i = (size_t)keep; i < n; i++) {
        if (steps[i] == saved) continue;
        char name[64];
        snprintf(name, sizeof name, "step-%08ld", steps[i]);
        char *p = path_join(root, name);
        if (!p || !is_dir(p)) {
            free(p);
            continue;
        }
        if (only_files(p)) remove_flat_dir(p);
        if (is_dir(p)) fprintf(stderr, "%s: warning: --keep-last %d: cannot remove %s (a directory in it?); "
                               "left in place\n", r->argv0, keep, p);
        else rt_info(r, "removed checkpoint %s (--keep-last %d)", p, keep);
        free(p);
    }
    free(steps);
}

/* Writes DIR/step-NNNNNNNN atomically: everything goes to a temporary
 * directory that is fsync'ed and renamed into place; only then is DIR/latest
 * replaced (temp file + rename). Any failure leaves the old latest as it was. */
/* writes whole tensors fp (parameters), fm, fv (AdamW moments), host
 * memory in the full layout; world rank 0 only */
static sr_status save_checkpoint(run *r, long step, const float *fp, const float *fm, const float *fv)
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
    s = write_arena_host(r, f_model, fp, "", step, 0);
    if (s == SR_OK) {
        /* optimizer state: NAME.exp_avg then NAME.exp_avg_sq, as torch names them */
        int n = r->prog->n_params;
        sr_st_entry *e = calloc(2 * (size_t)n + 1, sizeof *e);
        char **names = calloc(2 * (size_t)n + 1, sizeof *names);
        if (!e || !names) s = sr_seterr(SR_ERR_NOMEM, "out of memory");
        for (int i = 0; i < 2 * n && s == SR_OK; i++) {
            const sr_param_desc *d = &r->full[i / 2]; /* whole tensors */
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
            e[i].data = (i % 2 ? fv : fm) + d->offset;
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
    if (s == SR_OK) s = write_config(r, f_config);
    if (s == SR_OK) s = copy_tokenizer(r, tmp);
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
    if (s == SR_OK) rt_info(r, "saved checkpoint %s", final);
    if (s == SR_OK) prune_checkpoints(r, root, step);
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

/* Every rank has to learn whether a step that one rank did alone (writing a
 * checkpoint) failed, or the others would run on into a hang. */
sr_status rt_agree(run *r, sr_status s, const char *what)
{
    if (!r->have_grid || r->grid.world == 1) return s;
    double bad = s != SR_OK;
    sr_status c = sr_comm_allreduce_double(r->grid.world_comm, &bad, 1);
    if (c != SR_OK) return c;
    if (s == SR_OK && bad > 0) return sr_seterr(SR_ERR_STATE, "%s failed on another rank (see its message)", what);
    return s;
}

/* Checkpoints hold whole logical tensors whatever the layout: with ZeRO-1 the
 * optimizer state is gathered first. Rank 0 writes; all agree on the result. */
sr_status rt_checkpoint(run *r, long step)
{
    float *m = r->m, *v = r->v, *fm = NULL, *fv = NULL;
    SR_CHECK(rt_params_settle(r));
    /* parameters a failed device step left (NaN, or half updated) are not saved as the latest */
    SR_CHECK(rt_agree(r, r->be->sync(), "the device work before the checkpoint"));
    sr_status s = SR_OK;
    if (r->gshard) {
        fm = r->be->alloc(sizeof(float) * (size_t)r->n_alloc);
        fv = r->be->alloc(sizeof(float) * (size_t)r->n_alloc);
        if (!fm || !fv) s = sr_seterr(SR_ERR_NOMEM, "out of memory while gathering the optimizer state");
        s = rt_agree(r, s, "gathering the optimizer state");
        if (s == SR_OK) s = sr_dp_gather(r->dp, m, fm, "optimizer state");
        if (s == SR_OK) s = sr_dp_gather(r->dp, v, fv, "optimizer state");
        r->m = fm;
        r->v = fv;
    }
    /* whole tensors on world rank 0's host: collective over the tensor and pipeline groups */
    float *hp = NULL, *hm = NULL, *hv = NULL;
    if (s == SR_OK) {
        hp = rt_alloc_floats(r->n_full);
        hm = rt_alloc_floats(r->n_full);
        hv = rt_alloc_floats(r->n_full);
        if (!hp || !hm || !hv) s = sr_seterr(SR_ERR_NOMEM, "out of memory while saving a checkpoint");
        s = rt_agree(r, s, "gathering the checkpoint");
    }
    if (s == SR_OK) s = gather_full(r, r->params, hp);
    if (s == SR_OK) s = gather_full(r, r->m, hm);
    if (s == SR_OK) s = gather_full(r, r->v, hv);
    if (s == SR_OK && r->rank0) s = save_checkpoint(r, step, hp, hm, hv);
    free(hp);
    free(hm);
    free(hv);
    r->m = m;
    r->v = v;
    if (fm) r->be->free(fm);
    if (fv) r->be->free(fv);
    return rt_agree(r, s, "saving the checkpoint");
}


/* --export DIR: the parameters as a Hugging Face model directory: whole
 * tensors under the model's names, a padded vocabulary's padding rows cut
 * (HF's models know only the real size), config.json and the tokenizer.
 * Each file is written under a temporary name and renamed. */
sr_status rt_export(run *r, const char *dir)
{
    const sr_program *prog = r->prog;
    char *model = path_join(dir, "model.safetensors"), *tmp = path_join(dir, ".model.safetensors.tmp");
    char *config = path_join(dir, "config.json");
    sr_status s = model && tmp && config ? SR_OK : sr_seterr(SR_ERR_NOMEM, "out of memory while exporting");
    if (s == SR_OK && r->rank0) s = mkdir_p(dir);
    s = rt_agree(r, s, "--export");
    if (s == SR_OK) s = write_arena(r, tmp, r->params, "", -1, 1); /* collective gather */
    if (r->rank0) {
        if (s == SR_OK && rename(tmp, model) != 0)
            s = sr_seterr(SR_ERR_IO, "cannot rename %s to %s: %s", tmp, model, strerror(errno));
        if (s != SR_OK && tmp) unlink(tmp);
        if (s == SR_OK) s = write_config(r, config);
        if (s == SR_OK) s = copy_tokenizer(r, dir);
        int cut = 0;
        for (int i = 0; i < prog->n_params; i++) cut |= r->full[i].vocab && sr_classes(prog) < prog->vocab;
        if (s == SR_OK)
            rt_info(r, "exported %s: model.safetensors (%d tensors%s), config.json%s", dir, prog->n_params,
                    cut ? ", the vocabulary's padding rows cut" : "", r->tok ? ", the tokenizer" : "");
    }
    free(model);
    free(tmp);
    free(config);
    return rt_agree(r, s, "--export");
}

/* --dump-grads: the first step's gradients, before clipping */
sr_status rt_dump_grads(run *r, long step)
{
    sr_status s = write_arena(r, r->o.dump_grads, r->grads, "", step, 0);
    if (s == SR_OK) rt_info(r, "wrote the gradients of step %ld to %s", step, r->o.dump_grads);
    return s;
}
