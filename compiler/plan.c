/* plan.c: `shardc plan`: what a model costs under a parallel layout.
 *
 * Needs: a program through drv_front and drv_back: the forward IR with its
 * shardings, lowered for tensor parallelism (collectives as ops, local
 * shapes), the backward program with its gradient sums, the pipeline
 * partition (op->pstage) and the memory plan of every stage.
 * Gives, for every distinct rank role (pipeline stages that differ): bytes
 * of weights, gradients and optimizer state (ZeRO stages 0-3) and of peak
 * activations under the schedule and recomputation; FLOPs of a step (model
 * and hardware, and the matmul subset); every collective and send/recv with
 * its group, size and count and the bytes each rank sends; the pipeline
 * bubble, a step time from the cost model and the MFU. `--search` ranks
 * every layout of N GPUs. The models are documented in docs/plan.md; this
 * file changes nothing in the IR.
 *
 * One entry point, plan_main (plan.h); everything else is static. Results
 * live in malloc'd memory so that --search can sx_reset() the arena between
 * layouts.
 */
#include "shardc.h"

#include <ctype.h>
#include <math.h>
#include <unistd.h>

#include "plan.h"
#include "sr_json.h"
#include "sr_schedule.h"


/* ---- hardware ------------------------------------------------------------ */

#define GiB (1024.0 * 1024.0 * 1024.0)

typedef struct Gpu {
    const char *name;
    double peak_bf16, peak_fp32; /* dense FLOP/s */
    double mem;                  /* bytes; 0: the host's memory */
} Gpu;

static const Gpu gpus[] = {
    {"h100", 989e12, 67e12, 80 * GiB},  /* H100 SXM */
    {"h200", 989e12, 67e12, 141e9},     /* H200 SXM: 141 GB HBM3e */
    {"a100", 312e12, 19.5e12, 80 * GiB},/* A100 SXM 80GB */
    {"cpu", 100e9, 100e9, 0},           /* the host backend: a documented guess */
    {NULL, 0, 0, 0},
};

enum { OPT_FLOPS_PER_PARAM = 14 }; /* AdamW update 12 + gradient-norm 2 */

/* ---- options -------------------------------------------------------------- */

enum { MAXSET = 256, MAXINC = 16 };

typedef struct Opts {
    const char *file;
    const char *sets[MAXSET];
    int nset;
    const char *config_json;
    const char *inc[MAXINC];
    int ninc;
    int dp, tp, pp, mb, vs;
    const char *sched;
    int zero, rc, bf16;        /* rc: --recompute, -1 when not given (the model's own setting) */
    double pbytes[3];          /* --param-bytes W,G,O; [0] = 0: the precision's own (state_bytes) */
    int backend;               /* --backend: 0 host, 1 cuda; -1 not given (cuda under bf16) */
    int sp;             /* --sequence-parallel */
    long long batch, seq;
    int gpus;
    const Gpu *gpu;
    double gpu_mem, eff;
    int gpn;
    double intra_bw, intra_lat, inter_bw, inter_lat, bucket_mb;
    int search, json, top, max_errors;
} Opts;

/* ---- results (malloc'd: they outlive the arena) ---------------------------- */

enum { G_DATA, G_TENSOR, G_PIPE };
enum { C_AR, C_RS, C_AG, C_SEND, C_RECV };
enum { PH_FWD, PH_BWD, PH_RC, PH_STEP };
static const char *group_name[] = {"data", "tensor", "pipeline"};
static const char *coll_name[] = {"all-reduce", "reduce-scatter", "all-gather", "send", "recv"};
static const char *phase_name[] = {"forward", "backward", "recompute", "step"};

#define MAXCOLL 32
/* floats per message of the tied-gradient sum (runtime/pipeline.c) */
#define TIED_CHUNK 1048576.0
typedef struct Coll {
    char what[40];
    int group, kind, phase, n; /* n: ranks in the group */
    double size;               /* bytes of one call's full buffer */
    double calls;              /* per step */
    double behind;             /* FLOPs of the GEMM each call runs during (0: none) */
} Coll;

typedef struct Dev {
    double params, arena;      /* parameter elements on a rank; the runtime's padded arena */
    int ntensors, layers;
    double work, saved, rc_keep; /* bytes per microbatch: workspace, saved for backward, kept
                                  * with recomputation (largest chunk's, chunks' mean) */
    double scratch;            /* the rank's scratch: the workspace slots no value of which
                                * outlives a pass (one set per rank; in work, not per microbatch) */
    double m_bound;            /* pipeline boundary buffers */
    double m_act_saved;        /* activations if waiting microbatches kept only saved values */
    double inflight;           /* microbatches of saved activations held at the peak */
    double ff, bf, rf;         /* FLOPs per microbatch on a rank: forward, backward, recompute */
    double m_params, m_grads, m_opt, m_act, m_other, total;
    double zs[4][3];           /* ZeRO stage z: params, grads, optimizer bytes */
    Coll coll[MAXCOLL];
    int ncoll;
    double t_f, t_b, t_r, t_tp, t_p2p, t_mb, t_dp, t_dp_exposed, t_embed, t_opt;
    double t_tp_hidden;        /* of t_tp, what runs during weight-gradient GEMMs (overlap_flops) */
} Dev;

typedef struct Plan {
    int dp, tp, pp, v, m, world, zero, rc, bf16;
    double wb, gb, ob;         /* bytes per parameter: weights, gradients, optimizer state */
    double gath;               /* bytes per element of ZeRO's parameter all-gather */
    int cuda;                  /* the CUDA backend's program (its parameter layout) */
    double palign;             /* elements a parameter tensor is aligned to in the arena */
    int sp;                    /* sequence parallelism (tp > 1) */
    char sched[16];
    long long G, T;
    double B;
    int ok, fits;
    char reason[400];
    double nparams;
    double f_fwd, f_bwd, f_rc, f_opt, mm, mm_rc; /* per step, whole model */
    double model_flops, hw_flops;
    double bubble, t_pipe, t_compute, t_bubble, t_comm, step, mfu, tok_s;
    double peak, budget, max_total;
    int max_dev;
    double memplan_ws;         /* Ir's workspace at (B, T), 4-byte elements, before tp */
    int R, ndev;
    Dev *dev;
} Plan;

/* ---- formatting ---------------------------------------------------------- */

static char fbuf[64][48];
static int fnext;
static char *fslot(void) { return fbuf[fnext++ & 63]; }

static const char *fmt_bytes(double b)
{
    static const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int i = 0;
    while (fabs(b) >= 1024.0 && i < 5) b /= 1024.0, i++;
    char *s = fslot();
    if (i == 0) snprintf(s, 48, "%.0f B", b);
    else snprintf(s, 48, "%.1f %s", b, u[i]);
    return s;
}

static const char *fmt_si(double x, const char *unit)
{
    static const char *p[] = {"", "K", "M", "G", "T", "P", "E", "Z"};
    int i = 0;
    while (fabs(x) >= 1000.0 && i < 7) x /= 1000.0, i++;
    char *s = fslot();
    snprintf(s, 48, x >= 100 || i == 0 ? "%.0f %s%s" : "%.2f %s%s", x, p[i], unit);
    return s;
}

static const char *fmt_count(double x)
{
    char *s = fslot();
    if (x >= 1e12) snprintf(s, 48, "%.2f trillion", x / 1e12);
    else if (x >= 1e9) snprintf(s, 48, "%.2f billion", x / 1e9);
    else if (x >= 1e6) snprintf(s, 48, "%.2f million", x / 1e6);
    else snprintf(s, 48, "%.0f", x);
    return s;
}

static const char *fmt_time(double t)
{
    char *s = fslot();
    if (t >= 1.0) snprintf(s, 48, "%.3f s", t);
    else if (t >= 1e-3) snprintf(s, 48, "%.2f ms", t * 1e3);
    else snprintf(s, 48, "%.1f us", t * 1e6);
    return s;
}

static const char *fmt_int(double x)
{
    char tmp[40], *s = fslot();
    snprintf(tmp, sizeof tmp, "%.0f", x);
    int n = (int)strlen(tmp), neg = tmp[0] == '-', o = 0;
    for (int i = 0; i < n; i++) {
        s[o++] = tmp[i];
        int left = n - i - 1;
        if (left > 0 && left % 3 == 0 && !(neg && i == 0)) s[o++] = ',';
    }
    s[o] = 0;
    return s;
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 32) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void json_num(FILE *f, double x)
{
    if (!isfinite(x)) fputs("null", f);
    else if (x == floor(x) && fabs(x) < 9e15) fprintf(f, "%.0f", x);
    else fprintf(f, "%.17g", x);
}

/* ---- FLOPs templates (ops.def) -------------------------------------------- */

static double dim_val(Dim d, const double *sym)
{
    double x = (double)d.c;
    for (int i = 0; i < SX_MAXSYM; i++)
        for (int k = 0; k < d.p[i]; k++) x *= sym[i];
    return x;
}

typedef struct Tpl {
    const char *p;
    const Ir *ir;
    const IrOp *op;
    const double *sym;
    int bad;
} Tpl;

static double tpl_expr(Tpl *t);

static double tpl_atom(Tpl *t)
{
    while (*t->p == ' ') t->p++;
    if (*t->p == '(') {
        t->p++;
        double v = tpl_expr(t);
        while (*t->p == ' ') t->p++;
        if (*t->p == ')') t->p++;
        else t->bad = 1;
        return v;
    }
    if (*t->p == '-') {
        t->p++;
        return -tpl_atom(t);
    }
    if (*t->p == '$') {
        const char *q = t->p + 1;
        IrValue *out = t->op->out >= 0 ? ((Ir *)t->ir)->values.v[t->op->out] : NULL;
        if ((q[0] == 's' || q[0] == 'k') && q[1] >= '0' && q[1] <= '3') {
            t->p += 3;
            return q[0] == 's' ? dim_val(t->op->sz[q[1] - '0'], t->sym) : t->op->k[q[1] - '0'];
        }
        if ((q[0] == 'n' || q[0] == 'N') && out) {
            t->p += 2;
            Dim n = shape_numel(&out->shape);
            double x = dim_val(n, t->sym);
            if (q[0] == 'N' && out->shape.nd) x /= dim_val(out->shape.d[out->shape.nd - 1], t->sym);
            return x;
        }
        t->bad = 1;
        t->p++;
        return 0;
    }
    if (isdigit((unsigned char)*t->p) || *t->p == '.') {
        char *end;
        double v = strtod(t->p, &end);
        t->p = end;
        return v;
    }
    t->bad = 1;
    if (*t->p) t->p++;
    return 0;
}

static double tpl_term(Tpl *t)
{
    double v = tpl_atom(t);
    for (;;) {
        while (*t->p == ' ') t->p++;
        if (*t->p == '*') t->p++, v *= tpl_atom(t);
        else if (*t->p == '/') {
            t->p++;
            double d = tpl_atom(t);
            v = d ? v / d : 0;
        } else return v;
    }
}

static double tpl_expr(Tpl *t)
{
    double v = tpl_term(t);
    for (;;) {
        while (*t->p == ' ') t->p++;
        if (*t->p == '+') t->p++, v += tpl_term(t);
        else if (*t->p == '-') t->p++, v -= tpl_term(t);
        else return v;
    }
}

static double tpl_eval(const char *s, const Ir *ir, const IrOp *op, const double *sym)
{
    if (!s || !*s) return 0;
    Tpl t = {s, ir, op, sym, 0};
    double v = tpl_expr(&t);
    if (t.bad || *t.p) sx_ice("bad FLOPs template \"%s\" of op %s", s, ir_ops[op->kind].name);
    return v;
}

/* the matrix-product part of an op's FLOPs (Megatron's count): matmuls whole,
 * attention's QK^T and AV products (the first term of its ops.def row) */
static const char *mm_tpl(const IrOp *op, int bwd)
{
    switch (op->kind) {
    case OP_MATMUL:
    case OP_MATMUL_T:
        return bwd ? ir_ops[op->kind].flops_bwd : ir_ops[op->kind].flops_fwd;
    case OP_ATTENTION:
    case OP_ATTENTION_QKV: return bwd ? "8*$s0*$s1*$s1*$s2" : "4*$s0*$s1*$s1*$s2";
    default: return NULL;
    }
}

/* ---- the analysis of one layout ---------------------------------------------- */

typedef struct Ana {
    Program *P;
    Ir *ir;
    const Opts *o;
    Plan *pl;
    double sym[SX_MAXSYM];
    int C;                 /* chunks: pp * virtual stages */
    int *chunk;            /* op -> chunk */
    int *lchunk;           /* layer (repetition of the @pipeline repeat) -> chunk */
    int *maxc;             /* value -> the last chunk that reads it, -1 */
    double *bnd;           /* chunk boundary c -> bytes passed from chunk c to c + 1 */
    int *nbnd;             /* ... and how many values */
    char *pdev;            /* [param * pp + device]: the device's ops read the parameter */
    int *bwd_of;           /* op -> its backward step, -1 */
    double *ff, *bf, *mf, *mb; /* op -> FLOPs per microbatch on a rank */
    char *split;           /* op -> computed on split or partial tensors (tp parts make the whole) */
    int *slots;            /* [rank * v + chunk]: the runtime's pool (sr_sched_slot_peaks); NULL: pp = 1 */
    double eb;             /* bytes of an activation element */
    double pb, gb, ob;     /* bytes per parameter: weights, gradients, optimizer */
} Ana;

/* the chunk whose workspace holds v, -1 outside every workspace (as
 * memplan.c: parameters, their gradients, inputs, and the boundary buffers:
 * a received activation and the gradient of a sent one) */
static int home(Ana *A, const IrValue *v)
{
    if (v->kind == VK_OP || v->kind == VK_AUX) return v->def >= 0 ? A->chunk[v->def] : -1;
    if (v->kind != VK_GRAD) return -1;
    const IrValue *p = A->ir->values.v[v->primal];
    if ((p->kind != VK_OP && p->kind != VK_AUX) || p->def < 0) return -1;
    int c = A->chunk[p->def];
    return A->maxc[p->id] > c ? -1 : c;
}

/* elements of a value on a rank: after shard_lower, shapes are local */
static double val_elems(Ana *A, int id)
{
    IrValue *v = A->ir->values.v[id];
    return dim_val(shape_numel(&v->shape), A->sym);
}

static double val_bytes(Ana *A, int id)
{
    IrValue *v = A->ir->values.v[id];
    return val_elems(A, id) * (v->dtype == DT_I32 ? 4.0 : A->eb);
}

static int dev_of(Ana *A, int op) { return A->chunk[op] % A->pl->pp; }

/* is backward step b on device d? (a parameter's gradient sum: where it is read) */
static int bwd_on(Ana *A, const IrBwd *b, int d)
{
    if (b->fwd >= 0) return dev_of(A, b->fwd) == d;
    IrValue *p = A->ir->values.v[((IrValue *)A->ir->values.v[b->dout])->primal];
    return p->kind == VK_PARAM && A->pdev[(size_t)p->param * A->pl->pp + d];
}

static void add_coll_behind(Dev *D, const char *what, int group, int kind, int phase, int n, double size,
                            double calls, double behind)
{
    if (calls <= 0 || n < 2) return;
    for (int i = 0; i < D->ncoll; i++) {
        Coll *c = &D->coll[i];
        if (c->group == group && c->kind == kind && c->phase == phase && c->size == size && c->behind == behind &&
            !strcmp(c->what, what)) {
            c->calls += calls;
            return;
        }
    }
    if (D->ncoll == MAXCOLL) sx_ice("too many kinds of collectives");
    Coll *c = &D->coll[D->ncoll++];
    snprintf(c->what, sizeof c->what, "%s", what);
    c->group = group;
    c->kind = kind;
    c->phase = phase;
    c->n = n;
    c->size = size;
    c->calls = calls;
    c->behind = behind;
}
static void add_coll(Dev *D, const char *what, int group, int kind, int phase, int n, double size, double calls)
{
    add_coll_behind(D, what, group, kind, phase, n, size, calls, 0);
}

/* FLOPs per microbatch on a rank of the weight-gradient GEMM that the CUDA
 * backend runs backward step j's tensor-group sum during (cg_wgrad_overlap;
 * not in zb-h1's split passes), or 0 */
static double overlap_flops(Ana *A, int j)
{
    const Plan *pl = A->pl;
    if (!pl->cuda || (pl->pp > 1 && !strcmp(pl->sched, "zb-h1")) || !cg_wgrad_overlap(A->ir, j)) return 0;
    /* the matmul's backward is two GEMMs of one cost: input and weight gradient */
    return A->bf[((IrBwd *)A->ir->bwd.v[j - 1])->fwd] / 2;
}

/* activations of chunk c, per microbatch: the workspace of the compiler's
 * plan of that stage (built with --recompute block when the plan has it:
 * its clones and lifetimes are the program's), what is saved for the
 * backward (live across the forward/backward boundary of memplan.c's
 * timeline), and what block recomputation would keep: the values made
 * outside the repeat and the inputs of each repetition (Megatron's). With a
 * pipeline the slots from nkept on are scratch, shared by the microbatches
 * (memplan.c) */
typedef struct Act {
    double work, scratch, saved, rc_keep;
} Act;

static void chunk_activations(Ana *A, int c, Act *X)
{
    Ir *ir = A->ir;
    int nv = ir->values.n, ends[2];
    int *first = sx_alloc(sizeof(int) * (size_t)nv), *last = sx_alloc(sizeof(int) * (size_t)nv);
    mp_timeline(ir, c, first, last, ends);
    int boundary = ends[0];
    const IrStage *st = &ir->stages[c];
    X->work = X->scratch = 0;
    for (int k = 0; k < st->nslots; k++) { /* slots of 4-byte elements, 64-byte aligned */
        double b = (double)(((int64_t)ceil(dim_val(st->slot_elems[k], A->sym) * A->eb) + 63) & ~(int64_t)63);
        X->work += b;
        if (k >= st->nkept) X->scratch += b;
    }
    char *binput = sx_alloc((size_t)nv);
    for (int i = 0; i < ir->ops.n; i++) {
        IrOp *op = ir->ops.v[i];
        if (op->stage < 0 || op->recomp || A->chunk[i] != c) continue;
        for (int k = 0; k < op->nin; k++) {
            IrValue *x = ir->values.v[op->in[k]];
            if (x->def >= 0 && ((IrOp *)ir->ops.v[x->def])->stage != op->stage && x->dtype != DT_I32)
                binput[x->id] = 1;
        }
    }
    X->saved = X->rc_keep = 0;
    for (int i = 0; i < nv; i++) {
        IrValue *v = ir->values.v[i];
        if (home(A, v) != c) continue;
        int live = first[i] >= 0 && first[i] < boundary && last[i] > boundary;
        double b = val_bytes(A, i);
        if (live) X->saved += b;
        int outside = v->kind != VK_GRAD && ((IrOp *)ir->ops.v[v->def])->stage < 0;
        if (binput[i] || (live && outside)) X->rc_keep += b;
    }
}

static void dev_analyze(Ana *A, int d, Dev *D)
{
    Ir *ir = A->ir;
    Plan *pl = A->pl;
    const Opts *o = A->o;
    int tp = pl->tp, m = pl->m;
    memset(D, 0, sizeof *D);
    /* parameters: those read by the device's ops, in declaration order */
    double *arena_lo = sx_alloc(sizeof(double) * (size_t)(ir->params.n + 1));
    int np = 0;
    for (int i = 0; i < ir->params.n; i++) {
        if (!A->pdev[(size_t)i * pl->pp + d]) continue;
        IrParam *p = ir->params.v[i];
        double n = val_elems(A, p->value); /* this rank's part */
        D->params += n;
        arena_lo[np] = D->arena;
        np++;
        D->arena += ceil(n / pl->palign) * pl->palign;
        D->ntensors++;
    }
    /* a parameter held by several pipeline ranks (a tied embedding): its
     * holders alone sum its gradient, point to point (runtime/pipeline.c;
     * Megatron's embedding group): the others send theirs to the owner (the
     * lowest), which receives them into a buffer of TIED_CHUNK at most,
     * adds them and sends the sum back, all in messages of TIED_CHUNK */
    double tied_buf = 0;
    for (int i = 0; i < ir->params.n && pl->pp > 1; i++) {
        int owner = -1, others = 0;
        for (int s = 0; s < pl->pp; s++)
            if (A->pdev[(size_t)i * pl->pp + s]) {
                if (owner < 0) owner = s;
                else others++;
            }
        if (!others || !A->pdev[(size_t)i * pl->pp + d]) continue;
        double n = val_elems(A, ((IrParam *)ir->params.v[i])->value);
        double full = floor(n / TIED_CHUNK), rest = n - full * TIED_CHUNK, peers = d == owner ? others : 1;
        for (int k = 0; k < 2; k++) { /* the owner receives then sends, the others send then receive */
            int kind = (d == owner) == (k == 0) ? C_RECV : C_SEND;
            add_coll(D, "tied parameter gradient", G_PIPE, kind, PH_STEP, 2, TIED_CHUNK * A->gb, full * peers);
            if (rest > 0) add_coll(D, "tied parameter gradient", G_PIPE, kind, PH_STEP, 2, rest * A->gb, peers);
        }
        if (d == owner && (n < TIED_CHUNK ? n : TIED_CHUNK) * A->gb > tied_buf)
            tied_buf = (n < TIED_CHUNK ? n : TIED_CHUNK) * A->gb;
    }
    arena_lo[np] = D->arena;
    for (int r = 0; r < pl->R; r++)
        if (A->lchunk[r] % pl->pp == d) D->layers++;
    /* FLOPs per microbatch on a rank */
    for (int i = 0; i < ir->ops.n; i++) {
        if (dev_of(A, i) != d) continue;
        IrOp *op = ir->ops.v[i];
        if (op->recomp) D->rf += A->ff[i]; /* a clone: the forward again, in the backward */
        else {
            D->ff += A->ff[i];
            D->bf += A->bf[i];
        }
    }
    /* activations at the peak: the workspace plan is static per stage, so
     * every microbatch in flight holds the kept part of a workspace of its
     * own (the runtime's pool), with its boundary buffers (the received
     * activation and the gradient sent back, the gradient received for the
     * sent one) and its token ids; the rank holds one scratch, its stages'
     * largest; with v chunks, units of one chunk's microbatch */
    int pp = pl->pp, v = pl->v;
    /* the runtime's pool of each of the rank's chunks: the most microbatches
     * its schedule holds there at once (sr_sched_slot_peaks, as the
     * executor sizes it) */
    static const int one = 1;
    const int *peak = A->slots ? A->slots + (size_t)d * (size_t)v : &one;
    double work = 0, keep = 0, units = 0, tok = 2.0 * pl->B * (double)pl->T * 4.0;
    for (int c = d, k = 0; c < A->C; c += pp, k++) {
        Act X;
        chunk_activations(A, c, &X);
        D->work += X.work / v;
        D->saved += X.saved / v;
        D->rc_keep += (pl->rc ? X.saved : X.rc_keep) / v; /* the program's, when built so */
        work += (X.work - X.scratch) / v;
        keep += X.saved / v;
        if (X.scratch > D->scratch) D->scratch = X.scratch;
        double bio = 0, n = peak[k] > 0 ? peak[k] : 1;
        if (c > 0) bio += 2 * A->bnd[c - 1];
        if (c < A->C - 1) bio += A->bnd[c];
        units += n;
        D->m_act += n * (X.work - X.scratch);
        D->m_bound += n * bio;
    }
    D->inflight = units / v;
    D->m_act += D->scratch;
    D->m_other = units * tok + D->m_bound;
    /* what a runtime that keeps only the saved values of the waiting
     * microbatches would hold (Megatron's; the static plan's is above) */
    D->m_act_saved = work + D->scratch + (units - 1) * keep;
    /* a pipeline rank holds its stages' parameters only, in an arena of its
     * own (64-byte aligned tensors: the runtime's whole allocation); the
     * owner of a tied parameter its receive buffer */
    double resident = pp > 1 ? D->arena : D->params;
    D->m_other += tied_buf;
    if (pp > 1) D->m_other += tok; /* and the run's token buffers, for evaluation and sampling */
    /* model states, and the same under every ZeRO stage */
    int dp = pl->dp;
    for (int z = 0; z < 4; z++) {
        D->zs[z][0] = resident * A->pb / (z >= 3 ? dp : 1);
        D->zs[z][1] = resident * A->gb / (z >= 2 ? dp : 1);
        D->zs[z][2] = resident * A->ob / (z >= 1 ? dp : 1);
    }
    D->m_params = D->zs[pl->zero][0];
    D->m_grads = D->zs[pl->zero][1];
    D->m_opt = D->zs[pl->zero][2];
    if (pl->zero == 1 && dp > 1) D->m_other += ceil(D->arena / dp) * A->gb; /* the gradient shard */
    D->total = D->m_params + D->m_grads + D->m_opt + D->m_act + D->m_other;

    /* tensor-parallel collectives: ops of the lowered IR (shard_lower), the
     * backward's gradient sums (autodiff), and the two inside the
     * vocab-parallel cross-entropy (runtime/tp.c: an all-gather of the row
     * maxima, an all-reduce of the sums and target logits; 4-byte floats).
     * A collective's size is its whole (gathered, or not yet scattered)
     * buffer. Sequence parallelism replaces an all-reduce by a
     * reduce-scatter forward whose backward all-gathers the gradient
     * (sr_tp_reduce_scatter_bwd); an all-gather's backward reduce-scatters
     * the gathered value's gradient, a partial sum where a column-parallel
     * layer reads that value (IrBwd.rs, sr_tp_allgather_bwd_rs: autodiff
     * folds the sum and the slice into one collective). */
    double ceb = A->eb; /* bytes of a communicated activation element */
    if (tp > 1) {
        for (int i = 0; i < ir->ops.n; i++) {
            IrOp *op = ir->ops.v[i];
            if (dev_of(A, i) != d) continue;
            int ph = op->recomp ? PH_RC : PH_FWD; /* a clone: recomputation repeats the forward's */
            if (op->kind == OP_TP_ALLREDUCE || op->kind == OP_TP_ALLGATHER || op->kind == OP_TP_REDUCE_SCATTER) {
                IrValue *x = ir->values.v[op->in[0]];
                IrOp *def = x->def >= 0 ? ir->ops.v[x->def] : NULL;
                const char *what = op->kind == OP_TP_ALLGATHER ? "split activation"
                                   : !def ? "partial sum"
                                   : def->kind == OP_MATMUL || def->kind == OP_MATMUL_T ? "row-parallel output"
                                   : def->kind == OP_EMBEDDING_VP ? "vocab-parallel embedding"
                                                                  : "partial sum";
                if (op->kind == OP_TP_ALLGATHER && pl->sp && x->sh.kind == SH_SPLIT && x->sh.dim == 1)
                    what = "sequence-split activation";
                int kind = op->kind == OP_TP_ALLREDUCE ? C_AR : op->kind == OP_TP_ALLGATHER ? C_AG : C_RS;
                double S = val_elems(A, kind == C_RS ? op->in[0] : op->out) * ceb;
                add_coll(D, what, G_TENSOR, kind, ph, tp, S, m);
                const IrBwd *b = A->bwd_of[i] >= 0 ? ir->bwd.v[A->bwd_of[i]] : NULL;
                if (kind == C_RS && b && b->din[0] >= 0)
                    add_coll(D, sx_fmt("%s grad", what), G_TENSOR, C_AG, PH_BWD, tp, S, m);
                if (kind == C_AG && b && b->rs && b->din[0] >= 0)
                    add_coll_behind(D, sx_fmt("%s grad", what), G_TENSOR, C_RS, PH_BWD, tp, S, m,
                                    overlap_flops(A, A->bwd_of[i]));
            } else if (op->kind == OP_CROSS_ENTROPY_VP) {
                double N = dim_val(op->sz[0], A->sym);
                add_coll(D, "cross-entropy row maxima", G_TENSOR, C_AG, ph, tp, N * tp * 4.0, m);
                add_coll(D, "cross-entropy sums", G_TENSOR, C_AR, ph, tp, 2 * N * 4.0, m);
            }
        }
        for (int j = 0; j < ir->bwd.n; j++) {
            IrBwd *b = ir->bwd.v[j];
            if (b->kind != BWD_ALLREDUCE || !bwd_on(A, b, d)) continue;
            IrValue *g = ir->values.v[b->dout];
            IrValue *x = ir->values.v[g->primal];
            /* a parameter's: once per step, after the microbatches (runtime/train.c);
             * with sequence parallelism those of the parameters used on
             * sequence parts (sr_program.tp_partial_grads) */
            int par = x->kind == VK_PARAM, sliced = 0;
            for (int k = 0; k < ir->ops.n && !par; k++) {
                IrOp *u = ir->ops.v[k];
                sliced |= u->kind == OP_TP_SLICE && u->in[0] == x->id;
            }
            const char *what = par ? (pl->sp ? "sequence-parallel param grad" : "replicated parameter grad")
                               : sliced ? "sequence-sliced input grad"
                                        : "column-parallel input grad";
            add_coll_behind(D, what, G_TENSOR, C_AR, par ? PH_STEP : PH_BWD, tp,
                            val_elems(A, b->dout) * (par ? A->gb : ceb), par ? 1 : m, par ? 0 : overlap_flops(A, j));
        }
    }
    /* pipeline: the values that cross each chunk boundary, each way */
    for (int c = d; pl->pp > 1 && c < A->C; c += pl->pp) {
        double *bnd = A->bnd;
        int *nbnd = A->nbnd;
        if (c < A->C - 1 && nbnd[c]) {
            add_coll(D, "activation", G_PIPE, C_SEND, PH_FWD, 2, bnd[c] / nbnd[c], (double)nbnd[c] * m);
            add_coll(D, "activation grad", G_PIPE, C_RECV, PH_BWD, 2, bnd[c] / nbnd[c], (double)nbnd[c] * m);
        }
        if (c > 0 && nbnd[c - 1]) {
            add_coll(D, "activation", G_PIPE, C_RECV, PH_FWD, 2, bnd[c - 1] / nbnd[c - 1], (double)nbnd[c - 1] * m);
            add_coll(D, "activation grad", G_PIPE, C_SEND, PH_BWD, 2, bnd[c - 1] / nbnd[c - 1],
                     (double)nbnd[c - 1] * m);
        }
    }
    /* data parallel: the gradients of the device's parameters */
    if (dp > 1) {
        double eg = A->gb;
        /* buckets as the runtime cuts them: reverse declaration order */
        double limit = o->bucket_mb * 1e6 / eg, hi = -1;
        int nb = 0;
        for (int k = np - 1; k >= 0; k--) {
            double end = arena_lo[k + 1];
            if (nb == 0 || hi - arena_lo[k] > limit) {
                nb++;
                hi = end;
            }
        }
        if (nb == 0) nb = 1;
        if (pl->zero == 0) {
            add_coll(D, "gradients (bucketed)", G_DATA, C_AR, PH_BWD, dp, D->arena * eg / nb, nb);
        } else {
            /* ZeRO 1 and 2 reduce-scatter the same buckets (padded to dp equal
             * slices) and gather the parameters per bucket after the step,
             * waited for by the next forward as it needs them */
            double nalloc = ceil(D->arena / dp) * dp;
            add_coll(D, "gradients (bucketed)", G_DATA, C_RS, PH_BWD, dp, nalloc * eg / nb, nb);
            if (pl->zero < 3)
                add_coll(D, "parameters", G_DATA, C_AG, PH_FWD, dp, nalloc * pl->gath / nb, nb);
            else add_coll(D, "parameters (per tensor)", G_DATA, C_AG, PH_FWD, dp,
                          nalloc * pl->gath / D->ntensors, 2.0 * D->ntensors);
        }
    }
}

/* ---- cost model ---------------------------------------------------------- */

static void link_of(const Opts *o, const Plan *pl, int group, double *bw, double *lat)
{
    int intra;
    if (group == G_TENSOR) intra = pl->tp <= o->gpn;
    else if (group == G_DATA) intra = pl->tp * pl->dp <= o->gpn;
    else intra = pl->world <= o->gpn;
    *bw = (intra ? o->intra_bw : o->inter_bw) * 1e9;
    *lat = (intra ? o->intra_lat : o->inter_lat) * 1e-6;
}

/* ring algorithm: bytes a rank sends for one call of buffer S over n ranks */
static double sent_factor(int kind, int n)
{
    switch (kind) {
    case C_AR: return 2.0 * (n - 1) / n;
    case C_RS:
    case C_AG: return (double)(n - 1) / n;
    case C_SEND: return 1.0;
    default: return 0.0;
    }
}

/* bytes the runtime's counters record for one call (sr_comm_stats.bytes) */
static double payload(const Coll *c) { return c->kind == C_AG ? c->size / c->n : c->size; }

static double coll_time(const Opts *o, const Plan *pl, const Coll *c, double calls)
{
    double bw, lat;
    link_of(o, pl, c->group, &bw, &lat);
    double steps = c->kind == C_AR ? 2.0 * (c->n - 1) : c->kind == C_SEND ? 1.0 : c->kind == C_RECV ? 0.0 : c->n - 1;
    return calls * (steps * lat + sent_factor(c->kind, c->n) * c->size / bw);
}

static void cost(const Opts *o, Plan *pl)
{
    double F = pl->peak * o->eff;
    double tmax = 0, dpx = 0, emb = 0, opt = 0;
    for (int d = 0; d < pl->ndev; d++) {
        Dev *D = &pl->dev[d];
        D->t_f = D->ff / F;
        D->t_b = D->bf / F;
        D->t_r = D->rf / F;
        double t_dp = 0, t_last = 0, t_ag = 0, t_ag1 = 0;
        for (int i = 0; i < D->ncoll; i++) {
            Coll *c = &D->coll[i];
            double per_mb = c->calls / pl->m;
            if (c->group == G_TENSOR) {
                D->t_tp += coll_time(o, pl, c, per_mb);
                double t1 = coll_time(o, pl, c, 1), g = c->behind / F;
                D->t_tp_hidden += per_mb * (t1 < g ? t1 : g);
            } else if (c->group == G_PIPE && c->phase == PH_STEP) D->t_embed += coll_time(o, pl, c, c->calls);
            else if (c->group == G_PIPE) D->t_p2p += coll_time(o, pl, c, per_mb);
            else if (c->kind == C_AG) {
                t_ag += coll_time(o, pl, c, c->calls);
                t_ag1 = coll_time(o, pl, c, 1);
            } else {
                t_dp += coll_time(o, pl, c, c->calls);
                t_last = coll_time(o, pl, c, 1);
            }
        }
        D->t_mb = D->t_f + D->t_b + D->t_r + D->t_tp - D->t_tp_hidden + D->t_p2p;
        D->t_dp = t_dp + t_ag;
        /* the gradient reduction (all-reduce or ZeRO's reduce-scatter)
         * overlaps the last microbatch's backward except its last bucket;
         * ZeRO 1 and 2's parameter gather, launched after the step, the
         * next step's first forward except the bucket it needs first (ZeRO-3
         * gathers during forward and backward, hidden behind them) */
        double hidden = D->t_b + D->t_r;
        D->t_dp_exposed = t_dp - hidden > t_last ? t_dp - hidden : t_last;
        if (pl->zero == 3) {
            double h3 = (D->t_f + D->t_b + D->t_r) * pl->m;
            D->t_dp_exposed += t_ag > h3 ? t_ag - h3 : 0;
        } else if (t_ag > 0) {
            D->t_dp_exposed += t_ag - D->t_f > t_ag1 ? t_ag - D->t_f : t_ag1;
        }
        D->t_opt = OPT_FLOPS_PER_PARAM * D->params / (pl->zero >= 1 ? pl->dp : 1) / F;
        if (D->t_mb > tmax) tmax = D->t_mb;
        if (D->t_dp_exposed > dpx) dpx = D->t_dp_exposed;
        if (D->t_embed > emb) emb = D->t_embed;
        if (D->t_opt > opt) opt = D->t_opt;
    }
    int p = pl->pp, m = pl->m, v = pl->v;
    double b = 0;
    if (p > 1) {
        if (!strcmp(pl->sched, "interleaved")) b = (p - 1.0) / ((double)v * m + p - 1);
        else if (!strcmp(pl->sched, "zb-h1")) /* with m < p the first backward comes late */
            b = m >= p ? (p - 1.0) / (3.0 * m + p - 1) : (2.0 * p - m - 1) / (2.0 * p + 2.0 * m - 1);
        else b = (p - 1.0) / ((double)m + p - 1);
    }
    pl->bubble = b;
    pl->t_pipe = m * tmax / (1 - b);
    double cmax = 0; /* compute alone, slowest device */
    for (int d = 0; d < pl->ndev; d++) {
        Dev *D = &pl->dev[d];
        double c = (D->t_f + D->t_b + D->t_r) * m;
        if (c > cmax) cmax = c;
    }
    pl->t_compute = cmax;
    pl->t_bubble = pl->t_pipe * b;
    pl->step = pl->t_pipe + dpx + emb + opt;
    pl->t_comm = pl->step - pl->t_compute - pl->t_bubble - opt;
    pl->mfu = pl->model_flops / (pl->step * pl->world * pl->peak);
    pl->tok_s = (double)pl->G * (double)pl->T / pl->step;
}

/* Bytes per parameter of the model states as the generated program holds
 * them. fp32: 4 + 4 + 8 (Adam m, v). bf16, the CUDA backend's mixed
 * precision (Megatron-LM's "bf16 parameters, fp32 gradients"): weights 6,
 * the fp32 master and its bf16 copy; gradients 4, accumulated and reduced in
 * fp32; optimizer 8, Adam m and v. ZeRO stage 1 divides the optimizer
 * column: here m and v, the masters stay whole on every rank, and the
 * parameter all-gather after the step moves them (4 bytes). --param-bytes
 * W,G,O models another runtime, e.g. the ZeRO paper's 2 + 2 + 12 (16-bit
 * weights and gradients, the master copy with the optimizer state), whose
 * gather moves the W-byte weights. */
static void state_bytes(const Opts *o, Plan *pl)
{
    pl->wb = o->pbytes[0] > 0 ? o->pbytes[0] : o->bf16 ? 6.0 : 4.0;
    pl->gb = o->pbytes[0] > 0 ? o->pbytes[1] : 4.0;
    pl->ob = o->pbytes[0] > 0 ? o->pbytes[2] : 8.0;
    pl->gath = pl->wb < 4.0 ? pl->wb : 4.0;
}

/* evaluates layout (dp, tp, pp from the compiled program; m, schedule, v given) */
static void evaluate(Program *P, const Opts *o, int m, const char *sched, int v, Plan *pl)
{
    Ir *ir = &P->ir;
    memset(pl, 0, sizeof *pl);
    pl->dp = P->layout.dp;
    pl->tp = P->layout.tp;
    pl->pp = P->layout.pp;
    pl->world = pl->dp * pl->tp * pl->pp;
    pl->m = m;
    pl->v = v;
    snprintf(pl->sched, sizeof pl->sched, "%s", sched);
    pl->zero = o->zero;
    pl->rc = P->layout.recompute; /* --recompute, else the model's parallel section or @recompute */
    pl->bf16 = o->bf16;
    state_bytes(o, pl);
    /* each backend's code generator aligns the arena's tensors its own way
     * (cg_param_layout: host 64 bytes, CUDA 256 for cuBLASLt and vector loads) */
    pl->cuda = o->backend >= 0 ? o->backend : o->bf16;
    pl->palign = pl->cuda ? 64.0 : 16.0;
    pl->sp = ir->seq_sym > 0;
    pl->R = P->layout_repeats;
    pl->ok = 1;
    const Const *cb = sema_find_const(&P->train, "batch"), *cs = sema_find_const(&P->train, "seq");
    pl->G = o->batch ? o->batch : cb && !cb->is_str && !cb->is_float ? cb->i : 0;
    pl->T = o->seq ? o->seq : cs && !cs->is_str && !cs->is_float ? cs->i : 0;
    if (pl->G <= 0 || pl->T <= 0) {
        pl->ok = 0;
        snprintf(pl->reason, sizeof pl->reason, "no %s: give the train section a `%s` or pass %s",
                 pl->G <= 0 ? "global batch" : "sequence length", pl->G <= 0 ? "batch" : "seq",
                 pl->G <= 0 ? "--batch G" : "--seq T");
        return;
    }
    if (pl->sp && pl->T % pl->tp) {
        pl->ok = 0;
        snprintf(pl->reason, sizeof pl->reason, "sequence %lld is not divisible by tensor=%d (sequence parallelism "
                 "splits it)", pl->T, pl->tp);
        return;
    }
    if (pl->G % ((long long)pl->dp * m)) {
        pl->ok = 0;
        snprintf(pl->reason, sizeof pl->reason, "global batch %lld is not divisible by data=%d x microbatches=%d",
                 pl->G, pl->dp, m);
        return;
    }
    if (pl->pp > 1 && pl->R < pl->pp * v) {
        pl->ok = 0;
        snprintf(pl->reason, sizeof pl->reason, "%d layers cannot fill pipeline=%d x %d virtual stages", pl->R,
                 pl->pp, v);
        return;
    }
    if (v > 1 && strcmp(sched, "interleaved")) {
        pl->ok = 0;
        snprintf(pl->reason, sizeof pl->reason, "virtual stages need the interleaved schedule");
        return;
    }
    int *slots = NULL;
    if (pl->pp > 1) { /* the runtime's schedule: its refusals (the interleaved schedule's m, say), its pools */
        sr_schedule sc;
        int kind = sr_sched_parse(sched);
        if (kind < 0 || sr_sched_build(&sc, (sr_sched_kind)kind, pl->pp, m, v) != SR_OK) {
            pl->ok = 0;
            snprintf(pl->reason, sizeof pl->reason, "%s", kind < 0 ? "unknown pipeline schedule" : sr_errmsg());
            return;
        }
        slots = sx_alloc(sizeof(int) * (size_t)pl->pp * (size_t)v);
        for (int r = 0; r < pl->pp; r++)
            if (sr_sched_slot_peaks(&sc, r, slots + (size_t)r * (size_t)v) != SR_OK) sx_ice("plan: %s", sr_errmsg());
        sr_sched_free(&sc);
    }
    pl->B = (double)pl->G / ((double)pl->dp * m);
    pl->peak = o->bf16 ? o->gpu->peak_bf16 : o->gpu->peak_fp32;
    pl->budget = o->gpu_mem;
    if (pl->budget <= 0) { /* cpu: the host's memory, shared by the ranks of a node */
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        int per_node = pl->world < o->gpn ? pl->world : o->gpn;
        pl->budget = pages > 0 && psz > 0 ? (double)pages * (double)psz / per_node : 0;
    }

    Ana A;
    memset(&A, 0, sizeof A);
    A.P = P;
    A.ir = ir;
    A.o = o;
    A.pl = pl;
    A.slots = slots;
    for (int i = 0; i < SX_MAXSYM; i++) A.sym[i] = 1;
    A.sym[0] = pl->B;
    if (ir->nsym > 1) A.sym[1] = (double)pl->T;
    if (pl->sp) A.sym[ir->seq_sym] = (double)(pl->T / ir->seq_tp); /* a rank's part of the sequence */
    A.eb = o->bf16 ? 2.0 : 4.0;
    A.pb = pl->wb;
    A.gb = pl->gb;
    A.ob = pl->ob;
    int nops = ir->ops.n;
    A.C = pl->pp * v;
    A.chunk = sx_alloc(sizeof(int) * (size_t)(nops + 1));
    A.bwd_of = sx_alloc(sizeof(int) * (size_t)(nops + 1));
    A.ff = sx_alloc(sizeof(double) * (size_t)(nops + 1));
    A.bf = sx_alloc(sizeof(double) * (size_t)(nops + 1));
    A.mf = sx_alloc(sizeof(double) * (size_t)(nops + 1));
    A.mb = sx_alloc(sizeof(double) * (size_t)(nops + 1));
    A.split = sx_alloc((size_t)nops + 1);
    /* chunks: the compiler's pipeline stages (pipeline.c cut pp x v) */
    int R = pl->R, C = A.C;
    if (ir->nstages != C || !ir->stages)
        sx_ice("the back end cut %d pipeline stages, the layout has %d", ir->nstages, C);
    int *lchunk = sx_alloc(sizeof(int) * (size_t)(R + 1));
    for (int c = 0, r = 0; c < C && R; c++)
        for (int k = 0; k < ir->stages[c].nblocks && r < R; k++) lchunk[r++] = c;
    for (int i = 0; i < nops; i++) {
        A.bwd_of[i] = -1;
        A.chunk[i] = ((IrOp *)ir->ops.v[i])->pstage;
    }
    /* what crosses each chunk boundary: values read in a later chunk */
    A.maxc = sx_alloc(sizeof(int) * (size_t)(ir->values.n + 1));
    A.bnd = sx_alloc(sizeof(double) * (size_t)(C + 1));
    A.nbnd = sx_alloc(sizeof(int) * (size_t)(C + 1));
    for (int i = 0; i < ir->values.n; i++) A.maxc[i] = -1;
    for (int i = 0; i < nops; i++) {
        IrOp *op = ir->ops.v[i];
        for (int k = 0; k < op->nin; k++)
            if (A.chunk[i] > A.maxc[op->in[k]]) A.maxc[op->in[k]] = A.chunk[i];
    }
    for (int i = 0; i < ir->values.n; i++) {
        IrValue *x = ir->values.v[i];
        if (x->kind != VK_OP || x->def < 0) continue;
        for (int c = A.chunk[x->def]; c < A.maxc[i]; c++) {
            A.bnd[c] += val_bytes(&A, i);
            A.nbnd[c]++;
        }
    }
    for (int j = 0; j < ir->bwd.n; j++) {
        IrBwd *b = ir->bwd.v[j];
        if (b->kind == BWD_RULE) A.bwd_of[b->fwd] = j;
    }
    A.lchunk = lchunk;
    A.pdev = sx_alloc((size_t)ir->params.n * (size_t)pl->pp + 1);
    for (int i = 0; i < nops; i++) {
        IrOp *op = ir->ops.v[i];
        for (int k = 0; k < op->nin; k++) {
            IrValue *x = ir->values.v[op->in[k]];
            if (x->kind == VK_PARAM) A.pdev[(size_t)x->param * pl->pp + A.chunk[i] % pl->pp] = 1;
        }
    }
    for (int i = 0; i < ir->params.n; i++) { /* one no op reads stays on rank 0 (cg_param_layout) */
        int any = 0;
        for (int s = 0; s < pl->pp; s++) any |= A.pdev[(size_t)i * pl->pp + s];
        if (!any) A.pdev[(size_t)i * pl->pp] = 1;
    }
    for (int i = 0; i < nops && pl->tp > 1; i++) {
        IrOp *op = ir->ops.v[i];
        int sp = ((IrValue *)ir->values.v[op->out])->sh.kind != SH_REPL;
        for (int k = 0; k < op->nin; k++) sp |= ((IrValue *)ir->values.v[op->in[k]])->sh.kind != SH_REPL;
        A.split[i] = (char)sp;
    }
    /* FLOPs, per microbatch and whole model; then per step */
    double ff = 0, bf = 0, rf = 0, mf = 0, mb = 0, mr = 0;
    for (int i = 0; i < nops; i++) {
        IrOp *op = ir->ops.v[i];
        A.ff[i] = tpl_eval(ir_ops[op->kind].flops_fwd, ir, op, A.sym);
        A.bf[i] = A.bwd_of[i] >= 0 ? tpl_eval(ir_ops[op->kind].flops_bwd, ir, op, A.sym) : 0;
        A.mf[i] = tpl_eval(mm_tpl(op, 0), ir, op, A.sym);
        A.mb[i] = A.bwd_of[i] >= 0 ? tpl_eval(mm_tpl(op, 1), ir, op, A.sym) : 0;
        double whole = A.split[i] ? pl->tp : 1; /* the model's FLOPs: every part once */
        if (op->recomp) { /* a clone (recompute.c): hardware FLOPs, not the model's */
            rf += A.ff[i] * whole;
            mr += A.mf[i] * whole;
            continue;
        }
        ff += A.ff[i] * whole;
        bf += A.bf[i] * whole;
        mf += A.mf[i] * whole;
        mb += A.mb[i] * whole;
    }
    double per = (double)m * pl->dp;
    pl->nparams = (double)ir_param_count(ir);
    pl->f_fwd = ff * per;
    pl->f_bwd = bf * per;
    pl->f_rc = rf * per;
    pl->f_opt = OPT_FLOPS_PER_PARAM * pl->nparams;
    pl->mm = (mf + mb) * per;
    pl->mm_rc = pl->mm + mr * per;
    pl->model_flops = pl->f_fwd + pl->f_bwd + pl->f_opt;
    pl->hw_flops = pl->model_flops + pl->f_rc;
    /* the memory plan's own workspace, for reference (4-byte elements, whole model) */
    for (int s = 0; s < ir->nslots; s++)
        pl->memplan_ws += (double)(((int64_t)(dim_val(ir->slot_elems[s], A.sym) * 4.0) + 63) & ~(int64_t)63);
    pl->ndev = pl->pp;
    pl->dev = calloc((size_t)pl->pp, sizeof(Dev));
    if (!pl->dev) {
        fprintf(stderr, "shardc: out of memory\n");
        exit(1);
    }
    for (int d = 0; d < pl->pp; d++) dev_analyze(&A, d, &pl->dev[d]);
    pl->max_total = 0;
    for (int d = 0; d < pl->pp; d++)
        if (pl->dev[d].total > pl->max_total) {
            pl->max_total = pl->dev[d].total;
            pl->max_dev = d;
        }
    pl->fits = pl->budget <= 0 || pl->max_total <= pl->budget;
    cost(o, pl);
}

/* ---- loading ------------------------------------------------------------------ */

static void add_override(Program *P, const char *name, const char *value, const char *origin)
{
    Override *ov = sx_alloc(sizeof *ov);
    ov->name = sx_strdup(name);
    ov->value = sx_strdup(value);
    ov->origin = origin;
    vec_push(&P->overrides, ov);
}


/* sp: sequence parallelism as --sequence-parallel and the file say (-1), or
 * off (0) or on (1) as --search tries it */
static Program *load(const Opts *o, int dp, int tp, int pp, int mb, const char *sched, int v, int sp, int search)
{
    Program *P = sx_alloc(sizeof *P);
    P->ir.output = -1;
    if (o->config_json && drv_load_json_config(P, o->config_json)) return NULL;
    for (int i = 0; i < o->nset; i++) {
        const char *eq = strchr(o->sets[i], '=');
        add_override(P, sx_strndup(o->sets[i], (size_t)(eq - o->sets[i])), eq + 1, "--set");
    }
    if (o->batch) add_override(P, "batch", sx_fmt("%lld", o->batch), "--batch");
    if (o->seq) add_override(P, "seq", sx_fmt("%lld", o->seq), "--seq");
    if (search) add_override(P, "virtual_stages", "1", "--search");
    if (sp == 0) add_override(P, "parallel.sequence_parallel", "0", "--search");
    P->layout.cli_dp = dp;
    P->layout.cli_tp = tp;
    P->layout.cli_pp = pp;
    P->layout.cli_mb = mb;
    P->layout.cli_recompute = o->rc; /* the program built so: its clones and memory plan */
    P->layout.cli_sp = sp == 1 || (sp < 0 && o->sp);
    P->layout.cli_sched = sched;
    for (int i = 0; i < o->ninc; i++) vec_push(&P->search_dirs, (void *)o->inc[i]);
    drv_add_stdlib_dirs(P);
    sx_set_max_errors(o->max_errors);
    if (sema_load(P, o->file) || drv_front(P, NULL, stdout)) return NULL;
    /* virtual stages from the command line, checked here: the back end's
     * pipeline partition cuts pp x v stages */
    Layout *L = &P->layout;
    if (v) L->virtual_stages = v;
    if (L->virtual_stages > 1 && strcmp(L->schedule, "interleaved")) {
        sx_error(NULL, "--virtual-stages %d needs the interleaved schedule, not \"%s\"", L->virtual_stages,
                 L->schedule);
        return NULL;
    }
    if (L->pp > 1 && P->layout_repeats < L->pp * L->virtual_stages) {
        sx_error(&P->layout_repeat_loc, "%d layers cannot fill pipeline=%d stages x %d virtual stages",
                 P->layout_repeats, L->pp, L->virtual_stages);
        return NULL;
    }
    if (drv_back(P, NULL, stdout)) return NULL;
    /* batch and sequence, and under sequence parallelism the lowering's
     * third, a rank's part of the sequence (T_tp = T / tp) */
    if (P->ir.nsym - (P->ir.seq_sym > 0) > 2) {
        sx_error(&P->ir.model_loc, "shardc plan knows two symbolic dims (batch, sequence); %s has %d",
                 P->ir.model_name, P->ir.nsym - (P->ir.seq_sym > 0));
        return NULL;
    }
    return P;
}

/* ---- output: human ------------------------------------------------------------- */

static const char *role_name(const Plan *pl, int lo, int hi, char *buf, size_t n)
{
    if (pl->pp == 1) snprintf(buf, n, "every rank");
    else if (lo == hi)
        snprintf(buf, n, "stage %d%s", lo, lo == 0 ? " (first)" : lo == pl->pp - 1 ? " (last)" : "");
    else snprintf(buf, n, "stages %d-%d", lo, hi);
    return buf;
}

/* same work and traffic (memory may differ by the microbatches in flight) */
static int dev_same(const Dev *a, const Dev *b)
{
    if (a->params != b->params || a->layers != b->layers || a->ff != b->ff || a->bf != b->bf ||
        a->work != b->work || a->ncoll != b->ncoll)
        return 0;
    for (int i = 0; i < a->ncoll; i++)
        if (a->coll[i].calls != b->coll[i].calls || a->coll[i].size != b->coll[i].size) return 0;
    return 1;
}

/* roles: runs of stages that do the same (the first and the last stand
 * alone); a role's memory is its worst stage's, `worst` */
static int roles(const Plan *pl, int *lo, int *hi, int *worst)
{
    int n = 0;
    for (int d = 0; d < pl->ndev; d++) {
        if (n && d != pl->ndev - 1 && lo[n - 1] != 0 && dev_same(&pl->dev[hi[n - 1]], &pl->dev[d])) {
            hi[n - 1] = d;
            if (pl->dev[d].total > pl->dev[worst[n - 1]].total) worst[n - 1] = d;
            continue;
        }
        lo[n] = hi[n] = worst[n] = d;
        n++;
    }
    return n;
}

static void row(const char *label, int nr, const char **vals)
{
    printf("  %-30s", label);
    for (int i = 0; i < nr; i++) printf(" %22s", vals[i]);
    printf("\n");
}

static void print_human(const Opts *o, const Program *P, const Plan *pl)
{
    int *lo = malloc(sizeof(int) * (size_t)pl->ndev * 3), *hi = lo + pl->ndev, *wst = hi + pl->ndev;
    int nr = roles(pl, lo, hi, wst);
    const char *v[64];
    char names[64][40];
    if (nr > 64) nr = 64;
    printf("%s  %s\n", P->ir.model_name, o->file);
    printf("  parameters   %s%s\n", fmt_int(pl->nparams),
           pl->nparams >= 1e6 ? sx_fmt(" (%s)", fmt_count(pl->nparams)) : "");
    printf("  batch        %lld sequences x %lld tokens = %s tokens per step; microbatch %g x %d per data rank\n",
           pl->G, pl->T, fmt_int((double)pl->G * pl->T), pl->B, pl->m);
    printf("  layout       data %d x tensor %d%s x pipeline %d = %d GPU%s", pl->dp, pl->tp,
           pl->sp ? " (sequence parallel)" : "", pl->pp, pl->world, pl->world > 1 ? "s" : "");
    if (pl->pp > 1) printf("; schedule %s%s", pl->sched, pl->v > 1 ? sx_fmt(" x %d virtual", pl->v) : "");
    printf("; ZeRO %d; recompute %s; %s\n", pl->zero, pl->rc ? "block" : "none",
           pl->bf16 ? "bf16 mixed precision" : "fp32");
    printf("  hardware     %s: %s/s %s peak x %.2f; %s per GPU; %d per node\n", o->gpu->name,
           fmt_si(pl->peak, "FLOP"), pl->bf16 ? "bf16" : "fp32", o->eff, fmt_bytes(pl->budget), o->gpn);
    printf("  links        in a node %.0f GB/s, %.0f us; between nodes %.0f GB/s, %.0f us\n", o->intra_bw,
           o->intra_lat, o->inter_bw, o->inter_lat);

    printf("\n%-32s", "memory per rank");
    for (int r = 0; r < nr; r++) {
        role_name(pl, lo[r], hi[r], names[r], sizeof names[r]);
        printf(" %22s", names[r]);
    }
    printf("\n");
#define ROW(label, expr)                                  \
    do {                                                  \
        for (int r = 0; r < nr; r++) {                    \
            const Dev *D = &pl->dev[wst[r]];              \
            (void)D;                                      \
            v[r] = (expr);                                \
        }                                                 \
        row(label, nr, v);                                \
    } while (0)
    ROW("ranks", fmt_int((double)(hi[r] - lo[r] + 1) * pl->dp * pl->tp));
    ROW("layers", fmt_int(D->layers));
    ROW("parameters (per rank)", fmt_int(D->params));
    ROW(o->pbytes[0] > 0 ? "weights" : pl->bf16 ? "weights (fp32, bf16 copy)" : "weights", fmt_bytes(D->m_params));
    ROW("gradients", fmt_bytes(D->m_grads));
    ROW(o->pbytes[0] > 0 ? "optimizer state" : "optimizer (Adam m, v)", fmt_bytes(D->m_opt));
    ROW("activations (peak)", fmt_bytes(D->m_act));
    ROW("  workspace per microbatch", fmt_bytes(D->work));
    int scr = 0;
    for (int r = 0; r < nr; r++) scr |= pl->dev[wst[r]].scratch > 0;
    if (scr) ROW("    of it scratch (per rank)", fmt_bytes(D->scratch));
    ROW("  saved for the backward", fmt_bytes(D->saved));
    ROW("  microbatches in flight", sx_fmt("%g", D->inflight));
    if (pl->pp > 1) ROW("  (only saved values waiting)", fmt_bytes(D->m_act_saved));
    ROW(pl->pp > 1 ? "other (tokens, boundaries)" : "other (token buffers)", fmt_bytes(D->m_other));
    ROW("total", fmt_bytes(D->total));
    ROW("of the budget", pl->budget > 0 ? sx_fmt("%.1f%%%s", 100 * D->total / pl->budget,
                                                 D->total > pl->budget ? " OVER" : "")
                                        : "-");
    printf("\nmodel states by ZeRO stage (data %d)\n", pl->dp);
    static const char *zl[4] = {"stage 0 (none)", "stage 1 (optimizer)", "stage 2 (+ gradients)",
                                "stage 3 (+ weights)"};
    for (int z = 0; z < 4; z++)
        ROW(sx_fmt("%s%s", zl[z], z == pl->zero ? " *" : ""),
            sx_fmt("%s = %s", fmt_bytes(D->zs[z][0] + D->zs[z][1] + D->zs[z][2]),
                   fmt_si(D->zs[z][0] + D->zs[z][1] + D->zs[z][2], "B")));

    printf("\nFLOPs per step                         model        hardware\n");
    printf("  %-30s %14s %15s\n", "total", fmt_si(pl->model_flops, "FLOP"), fmt_si(pl->hw_flops, "FLOP"));
    double tok = (double)pl->G * pl->T;
    printf("  %-30s %14s %15s\n", "per token", fmt_si(pl->model_flops / tok, "FLOP"), fmt_si(pl->hw_flops / tok, "FLOP"));
    printf("  %-30s %14s %15s\n", "matmul (Megatron's count)", fmt_si(pl->mm, "FLOP"), fmt_si(pl->mm_rc, "FLOP"));
    printf("  %-30s %14s %15s\n", "forward", fmt_si(pl->f_fwd, "FLOP"), fmt_si(pl->f_fwd, "FLOP"));
    printf("  %-30s %14s %15s\n", "backward", fmt_si(pl->f_bwd, "FLOP"), fmt_si(pl->f_bwd, "FLOP"));
    printf("  %-30s %14s %15s\n", "recomputation", "-", fmt_si(pl->f_rc, "FLOP"));
    printf("  %-30s %14s %15s\n", "optimizer", fmt_si(pl->f_opt, "FLOP"), fmt_si(pl->f_opt, "FLOP"));

    printf("\ncommunication per step, per rank\n");
    printf("  %-24s %-14s %-15s %-9s %-30s %11s %9s %11s\n", "role", "op", "group", "phase", "what", "size", "calls",
           "sent");
    for (int r = 0; r < nr; r++) {
        const Dev *D = &pl->dev[wst[r]];
        double tot = 0;
        for (int i = 0; i < D->ncoll; i++) {
            const Coll *c = &D->coll[i];
            double sent = sent_factor(c->kind, c->n) * c->size * c->calls;
            tot += sent;
            printf("  %-24s %-14s %-15s %-9s %-30s %11s %9s %11s\n", i ? "" : names[r], coll_name[c->kind],
                   sx_fmt("%s (%d)", group_name[c->group], c->n), phase_name[c->phase], c->what,
                   fmt_bytes(c->size), fmt_int(c->calls), fmt_bytes(sent));
        }
        if (!D->ncoll) printf("  %-24s none\n", names[r]);
        else printf("  %-24s %-86s %11s\n", "", "each rank sends", fmt_bytes(tot));
    }

    printf("\nstep time (cost model: docs/plan.md)\n");
    const Dev *S = &pl->dev[0];
    for (int d = 1; d < pl->ndev; d++)
        if (pl->dev[d].t_mb > S->t_mb) S = &pl->dev[d];
    printf("  %-30s %s (forward %s, backward %s, recompute %s, tensor comm %s%s, send/recv %s)\n",
           "slowest stage, per microbatch", fmt_time(S->t_mb), fmt_time(S->t_f), fmt_time(S->t_b),
           fmt_time(S->t_r), fmt_time(S->t_tp),
           S->t_tp_hidden > 0 ? sx_fmt(" of which %s during weight gradients", fmt_time(S->t_tp_hidden)) : "",
           fmt_time(S->t_p2p));
    printf("  %-30s %s\n", "compute", fmt_time(pl->t_compute));
    if (pl->pp > 1)
        printf("  %-30s %s (%.1f%% of the pipeline; theory %s)\n", "pipeline bubble", fmt_time(pl->t_bubble),
               100 * pl->bubble,
               !strcmp(pl->sched, "interleaved") ? "(p-1)/(v*m+p-1)"
               : !strcmp(pl->sched, "zb-h1")     ? "(p-1)/(3m+p-1)"
                                                 : "(p-1)/(m+p-1)");
    printf("  %-30s %s\n", "exposed communication", fmt_time(pl->t_comm));
    printf("  %-30s %s\n", "step", fmt_time(pl->step));
    printf("  %-30s %s tokens/s\n", "throughput", fmt_int(pl->tok_s));
    printf("  %-30s %.1f%%\n", "MFU", 100 * pl->mfu);
    if (pl->budget > 0 && !pl->fits)
        printf("\ndoes not fit: %s needs %s, the budget is %s per GPU\n",
               role_name(pl, pl->max_dev, pl->max_dev, names[0], sizeof names[0]), fmt_bytes(pl->max_total),
               fmt_bytes(pl->budget));
#undef ROW
    free(lo);
}

/* ---- output: JSON ---------------------------------------------------------------- */

/* a JSON writer: commas and indentation by nesting level */
typedef struct Json {
    FILE *f;
    int depth;
    int items[16];  /* items written at each level */
    char lines[16]; /* one item per line at this level */
} Json;

static void j_item(Json *j, const char *key)
{
    int d = j->depth;
    if (j->items[d]++) fputc(',', j->f);
    if (j->lines[d]) fprintf(j->f, "\n%*s", 2 * d, "");
    else if (j->items[d] > 1) fputc(' ', j->f);
    if (key) {
        json_str(j->f, key);
        fputs(": ", j->f);
    }
}

static void j_open(Json *j, const char *key, char brace, int lines)
{
    j_item(j, key);
    fputc(brace, j->f);
    j->depth++;
    j->items[j->depth] = 0;
    j->lines[j->depth] = (char)lines;
}

static void j_close(Json *j, char brace)
{
    int multi = j->lines[j->depth] && j->items[j->depth];
    j->depth--;
    if (multi) fprintf(j->f, "\n%*s", 2 * j->depth, "");
    fputc(brace, j->f);
    if (!j->depth) fputc('\n', j->f);
}

static void j_num(Json *j, const char *key, double x)
{
    j_item(j, key);
    json_num(j->f, x);
}

static void j_str(Json *j, const char *key, const char *s)
{
    j_item(j, key);
    json_str(j->f, s);
}

static void j_bool(Json *j, const char *key, int b)
{
    j_item(j, key);
    fputs(b ? "true" : "false", j->f);
}

/* numbers: name, (double) value pairs up to a NULL name; j_fields adds them
 * to the open object, j_obj makes them an object of their own */
static void j_vfields(Json *j, va_list ap)
{
    for (const char *n; (n = va_arg(ap, const char *));) j_num(j, n, va_arg(ap, double));
}

static void j_fields(Json *j, ...)
{
    va_list ap;
    va_start(ap, j);
    j_vfields(j, ap);
    va_end(ap);
}

static void j_obj(Json *j, const char *key, ...)
{
    va_list ap;
    va_start(ap, key);
    j_open(j, key, '{', 0);
    j_vfields(j, ap);
    j_close(j, '}');
    va_end(ap);
}

static void json_layout(Json *j, const Plan *pl)
{
    j_open(j, "layout", '{', 0);
    j_num(j, "dp", pl->dp);
    j_num(j, "tp", pl->tp);
    j_num(j, "sequence_parallel", pl->sp);
    j_num(j, "pp", pl->pp);
    j_num(j, "world", pl->world);
    j_num(j, "microbatches", pl->m);
    j_str(j, "schedule", pl->sched);
    j_num(j, "virtual_stages", pl->v);
    j_num(j, "zero", pl->zero);
    j_str(j, "recompute", pl->rc ? "block" : "none");
    j_str(j, "precision", pl->bf16 ? "bf16" : "fp32");
    j_str(j, "backend", pl->cuda ? "cuda" : "host");
    j_close(j, '}');
}

static void print_json(FILE *f, const Opts *o, const Program *P, const Plan *pl)
{
    Json J = {f, 0, {0}, {0}}, *j = &J;
    double tok = (double)pl->G * pl->T, wb = pl->wb, gb = pl->gb, ob = pl->ob, np = pl->nparams;
    j_open(j, NULL, '{', 1);
    j_num(j, "shardc_plan", 1);
    j_str(j, "model", P->ir.model_name);
    j_str(j, "file", o->file);
    json_layout(j, pl);
    j_obj(j, "batch", "global", (double)pl->G, "seq", (double)pl->T, "microbatch", pl->B, "tokens_per_step", tok,
          NULL);
    j_obj(j, "hardware", "peak_flops", pl->peak, "efficiency", o->eff, "memory", pl->budget, "gpus_per_node",
          (double)o->gpn, "intra_node_bandwidth", o->intra_bw * 1e9, "intra_node_latency", o->intra_lat * 1e-6,
          "inter_node_bandwidth", o->inter_bw * 1e9, "inter_node_latency", o->inter_lat * 1e-6, NULL);
    j_str(j, "gpu", o->gpu->name);
    j_open(j, "parameters", '{', 0);
    j_num(j, "total", np);
    j_obj(j, "bytes_per_parameter", "weights", wb, "gradients", gb, "optimizer", ob, NULL);
    j_num(j, "weights_bytes", np * wb);
    j_num(j, "gradients_bytes", np * gb);
    j_num(j, "optimizer_bytes", np * ob);
    j_num(j, "model_states_bytes", np * (wb + gb + ob));
    j_close(j, '}');
    j_obj(j, "flops", "model_per_step", pl->model_flops, "hardware_per_step", pl->hw_flops, "model_per_token",
          pl->model_flops / tok, "hardware_per_token", pl->hw_flops / tok, "matmul_per_step", pl->mm,
          "matmul_hardware_per_step", pl->mm_rc, "forward_per_step", pl->f_fwd, "backward_per_step", pl->f_bwd,
          "recompute_per_step", pl->f_rc, "optimizer_per_step", pl->f_opt, NULL);
    j_num(j, "memplan_workspace_bytes", pl->memplan_ws);
    j_open(j, "roles", '[', 1);
    int *lo = malloc(sizeof(int) * (size_t)pl->ndev * 3), *hi = lo + pl->ndev, *wst = hi + pl->ndev;
    int nr = roles(pl, lo, hi, wst);
    for (int r = 0; r < nr; r++) {
        const Dev *D = &pl->dev[wst[r]];
        char nm[40];
        j_open(j, NULL, '{', 1);
        j_str(j, "name", role_name(pl, lo[r], hi[r], nm, sizeof nm));
        j_open(j, "stages", '[', 0);
        j_num(j, NULL, lo[r]);
        j_num(j, NULL, hi[r]);
        j_close(j, ']');
        j_num(j, "worst_stage", wst[r]);
        j_num(j, "ranks", (double)(hi[r] - lo[r] + 1) * pl->dp * pl->tp);
        j_num(j, "layers", D->layers);
        j_num(j, "parameters", D->params);
        j_open(j, "memory", '{', 0);
        j_fields(j, "weights", D->m_params, "gradients", D->m_grads, "optimizer", D->m_opt, "activations",
              D->m_act, "other", D->m_other, "total", D->total, "budget", pl->budget, "workspace_per_microbatch",
              D->work, "scratch", D->scratch, "saved_per_microbatch", D->saved, "recompute_saved_per_microbatch",
              D->rc_keep,
              /* Megatron's count: saved activations only, each rank its own stages' model states */
              "in_flight", D->inflight, "boundary_buffers", D->m_bound, "activations_saved_only", D->m_act_saved,
              "total_saved_only", D->total - D->m_act + D->m_act_saved,
              NULL);
        j_bool(j, "fits", pl->budget <= 0 || D->total <= pl->budget);
        j_open(j, "zero_stages", '[', 0);
        for (int z = 0; z < 4; z++)
            j_obj(j, NULL, "stage", (double)z, "weights", D->zs[z][0], "gradients", D->zs[z][1], "optimizer",
                  D->zs[z][2], "model_states", D->zs[z][0] + D->zs[z][1] + D->zs[z][2], NULL);
        j_close(j, ']');
        j_close(j, '}');
        j_obj(j, "flops_per_microbatch", "forward", D->ff, "backward", D->bf, "recompute", D->rf, NULL);
        j_obj(j, "time", "forward", D->t_f, "backward", D->t_b, "recompute", D->t_r, "tensor_comm", D->t_tp,
              "tensor_comm_hidden", D->t_tp_hidden,
              "send_recv", D->t_p2p, "per_microbatch", D->t_mb, "data_comm", D->t_dp, "data_comm_exposed",
              D->t_dp_exposed, NULL);
        j_open(j, "collectives", '[', 1);
        double calls[3][5], bytes[3][5], sent = 0;
        memset(calls, 0, sizeof calls);
        memset(bytes, 0, sizeof bytes);
        for (int i = 0; i < D->ncoll; i++) {
            const Coll *c = &D->coll[i];
            double sb = sent_factor(c->kind, c->n) * c->size * c->calls;
            j_open(j, NULL, '{', 0);
            j_str(j, "op", coll_name[c->kind]);
            j_str(j, "group", group_name[c->group]);
            j_num(j, "group_size", c->n);
            j_str(j, "phase", phase_name[c->phase]);
            j_str(j, "what", c->what);
            j_fields(j, "bytes", c->size, "calls_per_step", c->calls, "payload_bytes_per_step",
                  payload(c) * c->calls, "sent_bytes_per_step", sb, "seconds_per_step", coll_time(o, pl, c, c->calls),
                  "gemm_flops_during_each", c->behind, NULL);
            j_close(j, '}');
            calls[c->group][c->kind] += c->calls;
            bytes[c->group][c->kind] += payload(c) * c->calls;
            sent += sb;
        }
        j_close(j, ']');
        /* the runtime's sr_comm_stats, communicator by communicator, op by op */
        static const char *ops6[6] = {"allreduce", "reduce_scatter", "allgather", "broadcast", "send", "recv"};
        static const int kind6[6] = {C_AR, C_RS, C_AG, -1, C_SEND, C_RECV};
        j_open(j, "comm_counters", '{', 0);
        j_open(j, "ops", '[', 0);
        for (int k = 0; k < 6; k++) j_str(j, NULL, ops6[k]);
        j_close(j, ']');
        for (int g = 0; g < 3; g++) {
            j_open(j, group_name[g], '{', 0);
            for (int w = 0; w < 2; w++) {
                j_open(j, w ? "bytes" : "calls", '[', 0);
                for (int k = 0; k < 6; k++) j_num(j, NULL, kind6[k] < 0 ? 0 : w ? bytes[g][kind6[k]] : calls[g][kind6[k]]);
                j_close(j, ']');
            }
            j_close(j, '}');
        }
        j_close(j, '}');
        j_num(j, "sent_bytes_per_step", sent);
        j_close(j, '}');
    }
    free(lo);
    j_close(j, ']');
    j_open(j, "stages", '[', 1); /* every stage's memory, for the runtime's per-rank peaks */
    for (int d = 0; d < pl->ndev; d++)
        j_obj(j, NULL, "stage", (double)d, "parameters", pl->dev[d].params, "activations", pl->dev[d].m_act, "total",
              pl->dev[d].total, NULL);
    j_close(j, ']');
    j_obj(j, "time", "bubble_fraction", pl->bubble, "compute", pl->t_compute, "bubble", pl->t_bubble, "exposed_comm",
          pl->t_comm, "step", pl->step, "tokens_per_second", pl->tok_s, "mfu", pl->mfu, NULL);
    j_num(j, "max_memory", pl->max_total);
    j_bool(j, "fits", pl->fits);
    j_close(j, '}');
}

/* ---- --search ---------------------------------------------------------------- */

typedef struct Cand {
    Plan pl;
    int status; /* 0 ok, 1 does not fit, 2 invalid */
} Cand;

static int cand_cmp(const void *a, const void *b)
{
    const Cand *x = a, *y = b;
    if (x->status != y->status) return x->status - y->status;
    if (x->status == 0 && x->pl.step != y->pl.step) return x->pl.step < y->pl.step ? -1 : 1;
    if (x->status == 1 && x->pl.max_total != y->pl.max_total) return x->pl.max_total < y->pl.max_total ? -1 : 1;
    if (x->pl.m != y->pl.m) return x->pl.m - y->pl.m;
    return 0;
}

/* the first error the front end printed, without its location */
static void first_error(FILE *tmp, char *out, size_t n)
{
    char line[1024];
    out[0] = 0;
    rewind(tmp);
    while (fgets(line, sizeof line, tmp)) {
        char *e = strstr(line, "error: ");
        if (!e) continue;
        e += 7;
        e[strcspn(e, "\n")] = 0;
        snprintf(out, n, "%s", e);
        return;
    }
    snprintf(out, n, "rejected by the compiler");
}

static void push(Cand **v, int *n, int *cap, const Cand *c)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        *v = realloc(*v, sizeof(Cand) * (size_t)*cap);
        if (!*v) {
            fprintf(stderr, "shardc: out of memory\n");
            exit(1);
        }
    }
    (*v)[(*n)++] = *c;
}

static void layout_str(const Plan *pl, char *buf, size_t n)
{
    const char *sp = pl->sp ? " sp" : "";
    if (pl->pp > 1)
        snprintf(buf, n, "dp %d tp %d%s pp %d mb %d %s%s", pl->dp, pl->tp, sp, pl->pp, pl->m, pl->sched,
                 pl->v > 1 ? sx_fmt(" v%d", pl->v) : "");
    else snprintf(buf, n, "dp %d tp %d%s pp %d mb %d", pl->dp, pl->tp, sp, pl->pp, pl->m);
}

static int search(const Opts *o)
{
    int N = o->gpus;
    Cand *cs = NULL;
    int nc = 0, cap = 0;
    char model[128] = "";
    long long G = 0, T = 0;
    double budget = o->gpu_mem;
    for (int tp = 1; tp <= N; tp++) {
        if (N % tp) continue;
        for (int pp = 1; pp <= N / tp; pp++) {
            if ((N / tp) % pp) continue;
            int dp = N / tp / pp;
            /* the compiler per (dp, tp, pp), with and without sequence
             * parallelism when tp > 1 (unless --sequence-parallel asks for
             * it), and per number of virtual stages (the pipeline partition
             * depends on it), diagnostics kept aside */
            int sp0 = tp > 1 && o->sp, sp1 = tp > 1;
            for (int sp = sp0; sp <= sp1; sp++)
            for (int v = 1, vmax = 1; v <= vmax; v++) {
                sx_reset();
                fflush(stderr);
                FILE *tmp = tmpfile();
                int saved = dup(2);
                if (tmp) dup2(fileno(tmp), 2);
                Program *P = load(o, dp, tp, pp, 1, v > 1 ? "interleaved" : "1f1b", v, sp, 1);
                fflush(stderr);
                if (tmp) {
                    dup2(saved, 2);
                    close(saved);
                }
                Cand c;
                memset(&c, 0, sizeof c);
                if (!P) {
                    if (v == 1 && sp == sp0) { /* the layout itself is invalid */
                        c.status = 2;
                        c.pl.dp = dp, c.pl.tp = tp, c.pl.pp = pp, c.pl.v = 1;
                        snprintf(c.pl.sched, sizeof c.pl.sched, "-");
                        if (tmp) first_error(tmp, c.pl.reason, sizeof c.pl.reason);
                        else snprintf(c.pl.reason, sizeof c.pl.reason, "rejected by the compiler");
                        push(&cs, &nc, &cap, &c);
                    }
                    if (tmp) fclose(tmp);
                    continue;
                }
                if (tmp) fclose(tmp);
                if (pp > 1) vmax = P->layout_repeats / pp;
                if (!*model) snprintf(model, sizeof model, "%s", P->ir.model_name);
                const Const *cb = sema_find_const(&P->train, "batch"), *cq = sema_find_const(&P->train, "seq");
                G = o->batch ? o->batch : cb ? cb->i : 0;
                T = o->seq ? o->seq : cq ? cq->i : 0;
                long long per = G > 0 ? G / dp : 0;
                static const char *sch[] = {"gpipe", "1f1b", "zb-h1", "interleaved"};
                for (long long m = 1; m <= per; m++) {
                    if (per % m) continue;
                    for (int k = v > 1 ? 3 : 0; k < (pp == 1 ? 1 : v > 1 ? 4 : 3); k++) {
                        if (k == 3 && m % pp) continue; /* interleaving needs m divisible by pp */
                        memset(&c, 0, sizeof c);
                        evaluate(P, o, (int)m, pp > 1 ? sch[k] : "none", v, &c.pl);
                        c.status = !c.pl.ok ? 2 : !c.pl.fits ? 1 : 0;
                        if (c.pl.ok) budget = c.pl.budget;
                        free(c.pl.dev); /* the summary is enough here */
                        c.pl.dev = NULL;
                        if (c.pl.ok) push(&cs, &nc, &cap, &c);
                    }
                }
            }
        }
    }
    sx_reset();
    qsort(cs, (size_t)nc, sizeof *cs, cand_cmp);
    int nok = 0, noom = 0, nbad = 0;
    for (int i = 0; i < nc; i++) {
        if (cs[i].status == 0) nok++;
        else if (cs[i].status == 1) noom++;
        else nbad++;
    }
    if (o->json) {
        Json J = {stdout, 0, {0}, {0}}, *j = &J;
        j_open(j, NULL, '{', 1);
        j_num(j, "shardc_plan_search", 1);
        j_str(j, "file", o->file);
        j_str(j, "model", model);
        j_num(j, "gpus", N);
        j_str(j, "gpu", o->gpu->name);
        j_num(j, "memory", budget);
        j_num(j, "batch", (double)G);
        j_num(j, "seq", (double)T);
        j_open(j, "layouts", '[', 1);
        for (int i = 0; i < nc; i++) {
            const Plan *pl = &cs[i].pl;
            j_open(j, NULL, '{', 0);
            j_num(j, "rank", cs[i].status ? 0 : i + 1);
            j_str(j, "status", cs[i].status == 0 ? "ok" : cs[i].status == 1 ? "out of memory" : "invalid");
            json_layout(j, pl);
            if (cs[i].status < 2) {
                j_num(j, "step", pl->step);
                j_num(j, "mfu", pl->mfu);
                j_num(j, "bubble_fraction", pl->bubble);
                j_num(j, "max_memory", pl->max_total);
            }
            if (cs[i].status == 1)
                j_str(j, "reason", sx_fmt("needs %s on stage %d, more than %s", fmt_bytes(pl->max_total), pl->max_dev,
                                          fmt_bytes(pl->budget)));
            else if (cs[i].status) j_str(j, "reason", pl->reason);
            j_close(j, '}');
        }
        j_close(j, ']');
        j_close(j, '}');
    } else {
        printf("%s  %s: every layout of %d GPUs (%s, %s per GPU), batch %lld x seq %lld\n", model, o->file, N,
               o->gpu->name, fmt_bytes(budget), G, T);
        printf("ZeRO %d, recompute %s, %s; ranked by estimated step time\n\n", o->zero,
               o->rc < 0 ? "as the model says" : o->rc ? "block" : "none", o->bf16 ? "bf16" : "fp32");
        printf("  %4s  %-36s %12s %7s %8s %12s\n", "rank", "layout", "step", "MFU", "bubble", "memory");
        int shown = 0;
        for (int i = 0; i < nc && cs[i].status == 0; i++) {
            if (o->top && shown >= o->top) break;
            char ls[96];
            layout_str(&cs[i].pl, ls, sizeof ls);
            printf("  %4d  %-36s %12s %6.1f%% %7.1f%% %12s\n", i + 1, ls, fmt_time(cs[i].pl.step),
                   100 * cs[i].pl.mfu, 100 * cs[i].pl.bubble, fmt_bytes(cs[i].pl.max_total));
            shown++;
        }
        if (nok > shown) printf("  ... and %d more (--top 0 lists all)\n", nok - shown);
        if (!nok) printf("  (none)\n");
        if (noom) {
            printf("\ndo not fit in %s (%d):\n", fmt_bytes(budget), noom);
            int k = 0;
            for (int i = 0; i < nc; i++) {
                if (cs[i].status != 1) continue;
                if (o->top && k++ >= o->top) {
                    printf("  ... and %d more\n", noom - o->top);
                    break;
                }
                char ls[96];
                layout_str(&cs[i].pl, ls, sizeof ls);
                printf("  %-36s needs %s on stage %d\n", ls, fmt_bytes(cs[i].pl.max_total), cs[i].pl.max_dev);
            }
        }
        if (nbad) {
            printf("\ninvalid (%d):\n", nbad);
            for (int i = 0; i < nc; i++) {
                if (cs[i].status != 2) continue;
                printf("  dp %d tp %d pp %d%-18s %s\n", cs[i].pl.dp, cs[i].pl.tp, cs[i].pl.pp, "", cs[i].pl.reason);
            }
        }
    }
    free(cs);
    return nok ? 0 : 1;
}

/* ---- the command line ---------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: shardc plan FILE.model [options]\n"
            "\n"
            "Prints what a training step costs under a parallel layout, for every\n"
            "distinct rank role: memory (weights, gradients, optimizer state by ZeRO\n"
            "stage, peak activations), FLOPs, every collective and send/recv, the\n"
            "pipeline bubble, an estimated step time and the MFU. The models are in\n"
            "docs/plan.md. Exit 0 with a plan, 1 on errors in the file, 2 on usage errors.\n"
            "\n"
            "layout:\n"
            "  --dp N, --tp N, --pp N     mesh degrees (default: the parallel section)\n"
            "  --gpus N                   world size; data = N / (tp * pp) unless --dp is given\n"
            "  --microbatches M           microbatches per step and data rank\n"
            "  --schedule S               gpipe, 1f1b, interleaved or zb-h1\n"
            "  --virtual-stages V         model chunks per stage (interleaved)\n"
            "  --zero 0|1|2|3             ZeRO stage (memory and communication)\n"
            "  --recompute none|block     recompute each repeated block in the backward (default: as\n"
            "                             the model says, as shardc build)\n"
            "  --sequence-parallel        with --tp > 1: activations outside attention and the MLP split\n"
            "                             along the sequence (--search: tried both ways unless given)\n"
            "  --precision fp32|bf16      fp32 (weights 4 + gradients 4 + Adam 8 bytes per parameter),\n"
            "                             or bf16 mixed as the CUDA backend runs it (6 + 4 + 8: fp32\n"
            "                             weights and a bf16 copy, fp32 gradients)\n"
            "  --backend host|cuda       the program's parameter layout (tensors aligned to 64 or 256\n"
            "                             bytes); default cuda under --precision bf16, else host\n"
            "  --param-bytes W,G,O        bytes per parameter of weights, gradients and optimizer state\n"
            "                             instead (another runtime's: the ZeRO paper's 2,2,12)\n"
            "  --batch G, --seq T         global batch and sequence (default: the train section)\n"
            "hardware and cost model:\n"
            "  --gpu h100|h200|a100|cpu   peak FLOP/s and memory (default h100)\n"
            "  --gpu-mem BYTES            memory per GPU (suffixes: GB, GiB, MB, MiB, TB, TiB)\n"
            "  --efficiency E             fraction of peak FLOP/s reached (default 0.5)\n"
            "  --gpus-per-node N          (default 8)\n"
            "  --intra-bw GBPS, --intra-lat US   link in a node (default 450 GB/s, 5 us)\n"
            "  --inter-bw GBPS, --inter-lat US   link between nodes (default 50 GB/s, 10 us)\n"
            "  --bucket-mb MB             gradient all-reduce bucket (default 25, the runtime's)\n"
            "output:\n"
            "  --search                   rank every layout of --gpus N by estimated step time\n"
            "  --top N                    --search: show the N best (default 20; 0: all)\n"
            "  --json                     machine-readable output\n"
            "the file:\n"
            "  --set NAME=VALUE           override a constant (config, parallel or train)\n"
            "  --config FILE.json         override config constants from a JSON object (a\n"
            "                             nested object sets dotted names: rope_scaling.factor)\n"
            "  -I DIR                     also look for imported modules in DIR\n"
            "  --max-errors N             stop after N errors (default 50)\n"
            "  -h, --help                 show this help\n");
}

static int uerr(const char *fmt, const char *arg)
{
    return drv_usage_error("plan", fmt, arg);
}

static int pos_int(const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < 1 || v > (1 << 20)) return -1;
    *out = (int)v;
    return 0;
}

static int pos_num(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !(v > 0) || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

static int parse_bytes(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v > 0)) return -1;
    static const struct { const char *u; double m; } units[] = {
        {"", 1}, {"B", 1}, {"K", 1e3}, {"KB", 1e3}, {"KiB", 1024.0}, {"M", 1e6}, {"MB", 1e6},
        {"MiB", 1048576.0}, {"G", 1e9}, {"GB", 1e9}, {"GiB", GiB}, {"T", 1e12}, {"TB", 1e12},
        {"TiB", GiB * 1024}, {NULL, 0}};
    for (int i = 0; units[i].u; i++)
        if (!strcmp(end, units[i].u)) {
            *out = v * units[i].m;
            return 0;
        }
    return -1;
}

/* "W,G,O": three positive byte counts per parameter */
static int parse_pbytes(const char *s, double out[3])
{
    for (int k = 0; k < 3; k++) {
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (end == s || errno || !(v > 0) || !isfinite(v) || v > 64 || *end != (k < 2 ? ',' : '\0')) return -1;
        out[k] = v;
        s = end + 1;
    }
    return 0;
}

int plan_main(int argc, char **argv)
{
    Opts o;
    memset(&o, 0, sizeof o);
    o.gpu = &gpus[0];
    o.rc = -1;
    o.backend = -1;
    o.eff = 0.5;
    o.gpn = 8;
    o.intra_bw = 450;
    o.intra_lat = 5;
    o.inter_bw = 50;
    o.inter_lat = 10;
    o.bucket_mb = 25;
    o.top = 20;
    o.max_errors = 50;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        /* options with a value accept `--opt v` and `--opt=v` */
#define TAKE(name)                                                                            \
    (!strcmp(a, name) ? (i + 1 < argc ? (val = argv[++i], 1) : (uerr("option '%s' needs a value", a), -1)) \
     : (!strncmp(a, name "=", strlen(name) + 1) ? (val = a + strlen(name) + 1, 1) : 0))
#define INT_OPT(name, field)                                                          \
    else if ((t = TAKE(name))) {                                                      \
        if (t < 0) return 2;                                                          \
        if (pos_int(val, &n)) return uerr("expected a positive integer, got '%s'", val); \
        field = n;                                                                    \
    }
#define NUM_OPT(name, field)                                                          \
    else if ((t = TAKE(name))) {                                                      \
        if (t < 0) return 2;                                                          \
        if (pos_num(val, &field)) return uerr("expected a positive number, got '%s'", val); \
    }
        int t, n;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) o.json = 1;
        else if (!strcmp(a, "--search")) o.search = 1;
        else if (!strcmp(a, "--sequence-parallel")) o.sp = 1;
        else if ((t = TAKE("--set"))) {
            if (t < 0) return 2;
            const char *eq = strchr(val, '=');
            if (!eq || eq == val) return uerr("--set expects NAME=VALUE, got '%s'", val);
            if (o.nset == MAXSET) return uerr("too many --set options (%s)", val);
            o.sets[o.nset++] = val;
        } else if ((t = TAKE("--config"))) {
            if (t < 0) return 2;
            o.config_json = val;
        } else if ((t = TAKE("-I"))) {
            if (t < 0) return 2;
            if (o.ninc == MAXINC) return uerr("too many -I directories (%s)", val);
            o.inc[o.ninc++] = val;
        }
        INT_OPT("--dp", o.dp)
        INT_OPT("--tp", o.tp)
        INT_OPT("--pp", o.pp)
        INT_OPT("--microbatches", o.mb)
        INT_OPT("--virtual-stages", o.vs)
        INT_OPT("--gpus", o.gpus)
        INT_OPT("--gpus-per-node", o.gpn)
        INT_OPT("--max-errors", o.max_errors)
        INT_OPT("--batch", o.batch)
        INT_OPT("--seq", o.seq)
        NUM_OPT("--intra-bw", o.intra_bw)
        NUM_OPT("--inter-bw", o.inter_bw)
        NUM_OPT("--intra-lat", o.intra_lat)
        NUM_OPT("--inter-lat", o.inter_lat)
        NUM_OPT("--bucket-mb", o.bucket_mb)
        else if ((t = TAKE("--top"))) {
            if (t < 0) return 2;
            if (!strcmp(val, "0")) o.top = 0;
            else if (pos_int(val, &o.top)) return uerr("bad --top value '%s'", val);
        } else if ((t = TAKE("--schedule"))) {
            if (t < 0) return 2;
            o.sched = val;
        } else if ((t = TAKE("--zero"))) {
            if (t < 0) return 2;
            if (strlen(val) != 1 || val[0] < '0' || val[0] > '3') return uerr("--zero takes 0, 1, 2 or 3, got '%s'", val);
            o.zero = val[0] - '0';
        } else if ((t = TAKE("--recompute"))) {
            if (t < 0) return 2;
            if (!strcmp(val, "none")) o.rc = 0;
            else if (!strcmp(val, "block") || !strcmp(val, "full")) o.rc = 1;
            else return uerr("--recompute takes none or block, got '%s'", val);
        } else if ((t = TAKE("--precision"))) {
            if (t < 0) return 2;
            if (strcmp(val, "fp32") && strcmp(val, "bf16")) return uerr("--precision takes fp32 or bf16, got '%s'", val);
            o.bf16 = !strcmp(val, "bf16");
        } else if ((t = TAKE("--backend"))) {
            if (t < 0) return 2;
            if (strcmp(val, "host") && strcmp(val, "cuda")) return uerr("--backend takes host or cuda, got '%s'", val);
            o.backend = !strcmp(val, "cuda");
        } else if ((t = TAKE("--param-bytes"))) {
            if (t < 0) return 2;
            if (parse_pbytes(val, o.pbytes))
                return uerr("--param-bytes takes three positive numbers W,G,O (e.g. 2,2,12), got '%s'", val);
        } else if ((t = TAKE("--gpu"))) {
            if (t < 0) return 2;
            const Gpu *g = gpus;
            while (g->name && strcmp(g->name, val)) g++;
            if (!g->name) return uerr("unknown --gpu '%s' (use h100, h200, a100 or cpu)", val);
            o.gpu = g;
        } else if ((t = TAKE("--gpu-mem"))) {
            if (t < 0) return 2;
            if (parse_bytes(val, &o.gpu_mem)) return uerr("bad --gpu-mem '%s' (bytes, or e.g. 80GiB)", val);
        } else if ((t = TAKE("--efficiency"))) {
            if (t < 0) return 2;
            if (pos_num(val, &o.eff) || o.eff > 1) return uerr("--efficiency takes a number in (0, 1], got '%s'", val);
        } else if (a[0] == '-' && a[1]) {
            return uerr("unknown option '%s'", a);
        } else if (!o.file) {
            o.file = a;
        } else {
            return uerr("unexpected argument '%s' (one .model file at a time)", a);
        }
#undef TAKE
#undef INT_OPT
#undef NUM_OPT
    }
    if (!o.file) return uerr("%s: no .model file given", "plan");
    if (o.gpu_mem <= 0) o.gpu_mem = o.gpu->mem; /* 0 for the cpu: see evaluate */
    if (o.backend == 0 && o.bf16)
        return uerr("--precision bf16 is the CUDA backend's (the host runs fp32): drop --backend %s", "host");
    if (o.search) {
        if (!o.gpus) return uerr("%s needs --gpus N", "--search");
        if (o.dp || o.tp || o.pp || o.mb || o.sched || o.vs)
            return uerr("%s chooses the layout itself: drop --dp, --tp, --pp, --microbatches, --schedule, "
                        "--virtual-stages", "--search");
        int st = search(&o);
        sx_arena_free();
        return st;
    }
    if (o.gpus) {
        int tp = o.tp ? o.tp : 1, pp = o.pp ? o.pp : 1;
        if (!o.dp) {
            if (o.gpus % (tp * pp))
                return uerr("%s", sx_fmt("--gpus %d is not divisible by tensor %d x pipeline %d", o.gpus, tp, pp));
            o.dp = o.gpus / (tp * pp);
        } else if (o.dp * tp * pp != o.gpus)
            return uerr("%s", sx_fmt("--gpus %d but data %d x tensor %d x pipeline %d = %d", o.gpus, o.dp, tp, pp,
                                     o.dp * tp * pp));
    }
    Program *P = load(&o, o.dp, o.tp, o.pp, o.mb, o.sched, o.vs, -1, 0);
    int rc = 1;
    if (P) {
        Layout *L = &P->layout;
        int v = L->virtual_stages;
        if (o.gpus && L->dp * L->tp * L->pp != o.gpus)
            sx_error(NULL, "--gpus %d but the layout has data %d x tensor %d x pipeline %d", o.gpus, L->dp, L->tp,
                     L->pp);
        if (!sx_error_count()) {
            Plan pl;
            evaluate(P, &o, L->microbatches, L->pp > 1 ? L->schedule : "none", L->pp > 1 ? v : 1, &pl);
            if (!pl.ok) sx_error(NULL, "%s", pl.reason);
            else {
                if (o.json) print_json(stdout, &o, P, &pl);
                else print_human(&o, P, &pl);
                rc = 0;
            }
            free(pl.dev);
        }
    }
    int nerr = sx_error_count();
    if (nerr > 1) fprintf(stderr, "%d errors\n", nerr);
    sx_arena_free();
    return rc;
}
