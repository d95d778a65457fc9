/* shape.c: elaboration and shape inference.
 *
 * Needs: a program that passed sema (names resolved, constants evaluated).
 * Guarantees: the model instantiated with every block call inlined under its
 * hierarchical instance name; every parameter in Ir.params with a constant
 * shape, its initializer and declared sharding; every op in Ir.ops with
 * inputs of the types and shapes its rule accepts, its output and aux
 * values shaped over the model's symbolic dims (batch, sequence). Shape
 * mismatches are user errors showing both shapes.
 *
 * Block instantiation needs concrete shapes (a block's dims unify with its
 * arguments'), so elaboration, shape inference and lowering to the forward
 * IR are one walk here rather than three.
 */
#include "shardc.h"
#include "shardrt.h" /* SR_ROPE_MAX_HEAD */

#include <math.h>

/* ---- dims and shapes ---------------------------------------------------- */

Dim dim_const(int64_t c)
{
    Dim d;
    memset(&d, 0, sizeof d);
    d.c = c;
    return d;
}

static Dim dim_sym(int s)
{
    Dim d = dim_const(1);
    d.p[s] = 1;
    return d;
}

static int dim_is_const(Dim d)
{
    for (int i = 0; i < SX_MAXSYM; i++)
        if (d.p[i]) return 0;
    return 1;
}

int dim_eq(Dim a, Dim b) { return a.c == b.c && !memcmp(a.p, b.p, sizeof a.p); }

static int dim_mul(Dim a, Dim b, Dim *r)
{
    Dim o;
    if (__builtin_mul_overflow(a.c, b.c, &o.c) || o.c > SX_INT_MAX) return -1;
    for (int i = 0; i < SX_MAXSYM; i++) {
        if (a.p[i] + b.p[i] > 8) return -1;
        o.p[i] = (uint8_t)(a.p[i] + b.p[i]);
    }
    *r = o;
    return 0;
}

/* a / b when exact (b's symbols all in a, constants divide) */
static int dim_div(Dim a, Dim b, Dim *r)
{
    if (b.c == 0 || a.c % b.c) return -1;
    Dim o;
    o.c = a.c / b.c;
    for (int i = 0; i < SX_MAXSYM; i++) {
        if (a.p[i] < b.p[i]) return -1;
        o.p[i] = (uint8_t)(a.p[i] - b.p[i]);
    }
    *r = o;
    return 0;
}

Dim shape_numel(const Shape *s)
{
    Dim n = dim_const(1);
    for (int i = 0; i < s->nd; i++)
        if (dim_mul(n, s->d[i], &n)) return dim_const(-1);
    return n;
}

int shape_eq(const Shape *a, const Shape *b)
{
    if (a->nd != b->nd) return 0;
    for (int i = 0; i < a->nd; i++)
        if (!dim_eq(a->d[i], b->d[i])) return 0;
    return 1;
}

char *dim_str(Dim d, const Ir *ir)
{
    char buf[256];
    size_t n = 0;
    buf[0] = 0;
    if (d.c != 1 || dim_is_const(d)) n += (size_t)snprintf(buf, sizeof buf, "%lld", (long long)d.c);
    for (int i = 0; i < SX_MAXSYM; i++)
        for (int k = 0; k < d.p[i] && n < sizeof buf - 32; k++)
            n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", n ? "*" : "",
                                  ir && ir->symname[i] ? ir->symname[i] : "?");
    return sx_strdup(buf);
}

char *shape_str(const Shape *s, const Ir *ir)
{
    char *r = "[";
    for (int i = 0; i < s->nd; i++) r = sx_fmt("%s%s%s", r, i ? ", " : "", dim_str(s->d[i], ir));
    return sx_fmt("%s]", r);
}

static const char *dtype_name(DType t) { return t == DT_I32 ? "i32" : t == DT_BF16 ? "bf16" : "f32"; }

static char *type_str(const IrValue *v, const Ir *ir)
{
    return sx_fmt("%s%s", dtype_name(v->dtype), shape_str(&v->shape, ir));
}

/* ---- values of the elaborator ------------------------------------------- */

enum { V_NONE = 0, V_INT, V_FLOAT, V_STR, V_DIM, V_TENSOR };

typedef struct Val {
    int k;
    long long i;
    double f;
    const char *s;
    Dim d;
    int t; /* V_TENSOR: IR value id */
} Val;

typedef struct Bind {
    const char *name;
    Val v;
} Bind;

typedef struct Frame {
    Vec binds;          /* Bind* */
    const char *prefix; /* instance path, "" at the model */
    Node *block;
    int stage;          /* repeat index of the pipeline repeat, -1 outside */
    const sx_loc *inst_loc; /* where this instance was created, NULL at the model */
    const sx_loc *user_loc; /* the outermost such call in the main file */
    int rgroup;             /* the @recompute block this code is in, -1 if none */
} Frame;

typedef struct Elab {
    Program *P;
    Ir *ir;
    const char **inst_tab; /* instance paths used so far: an open-addressing set (nested */
    size_t inst_cap, inst_n; /* repeats claim hundreds of thousands before MAX_OPS stops them) */
    int next_rgroup;    /* @recompute blocks numbered so far */
    int recompute_next; /* the instance being called is marked @recompute */
    int depth;
    int expr_depth, too_deep;
    int too_big;
} Elab;

static Val verr(void) { Val v; memset(&v, 0, sizeof v); return v; }
static Val vint(long long i) { Val v = verr(); v.k = V_INT; v.i = i; return v; }
static Val vflt(double f) { Val v = verr(); v.k = V_FLOAT; v.f = f; return v; }
static Val vten(int t) { Val v = verr(); v.k = V_TENSOR; v.t = t; return v; }

static Bind *frame_find(Frame *f, const char *name)
{
    for (int i = f->binds.n - 1; i >= 0; i--) {
        Bind *b = f->binds.v[i];
        if (!strcmp(b->name, name)) return b;
    }
    return NULL;
}

static void frame_set(Frame *f, const char *name, Val v)
{
    Bind *b = frame_find(f, name);
    if (!b) {
        b = sx_alloc(sizeof *b);
        b->name = name;
        vec_push(&f->binds, b);
    }
    b->v = v;
}

static const char *val_kind_name(int k)
{
    switch (k) {
    case V_INT: return "an integer";
    case V_FLOAT: return "a float";
    case V_STR: return "a string";
    case V_DIM: return "a symbolic dimension";
    case V_TENSOR: return "a tensor";
    default: return "nothing";
    }
}

/* ---- IR construction ---------------------------------------------------- */

static IrValue *val_of(Elab *E, Val v) { return ir_value(E->ir, v.t); }

static IrOp *new_op(Elab *E, OpKind k, const sx_loc *loc, Frame *f)
{
    IrOp *op = sx_alloc(sizeof *op);
    op->id = E->ir->ops.n;
    op->uid = op->id;
    op->kind = op->wrote = k;
    op->loc = *loc;
    op->scope = f->prefix;
    op->rgroup = f->rgroup;
    if (f->user_loc) op->user_loc = *f->user_loc;
    op->stage = f->stage;
    op->out = op->aux[0] = op->aux[1] = -1;
    vec_push(&E->ir->ops, op);
    return op;
}

/* ---- shape rules (named in ops.def) --------------------------------------- */

typedef struct ShapeCtx {
    Elab *E;
    IrOp *op;
    IrValue *in[4];
    Val k[SX_MAXDIM + 2];
    int nk;
    const sx_loc *loc;
    Node *call;
    Shape out;
    DType out_t;
    Shape aux[2];
    int rerun; /* shape_rerun: k holds the op's stored constants, not the written arguments */
} ShapeCtx;

#define IR_ (c->E->ir)

static int need_float(ShapeCtx *c, int i, const char *what)
{
    if (c->in[i]->dtype == DT_I32) {
        Node *a = c->call && i < c->call->args.n ? c->call->args.v[i] : NULL;
        sx_error(a ? &a->loc : c->loc, "%s of '%s' must be a float tensor, got %s", what,
                 ir_ops[c->op->kind].name, type_str(c->in[i], IR_));
        return -1;
    }
    return 0;
}

static int need_rank(ShapeCtx *c, int i, int lo, int hi, const char *what)
{
    int nd = c->in[i]->shape.nd;
    if (nd < lo || nd > hi) {
        Node *a = c->call && i < c->call->args.n ? c->call->args.v[i] : NULL;
        if (lo == hi)
            sx_error(a ? &a->loc : c->loc, "%s of '%s' must have %d dimension%s, got %s", what,
                     ir_ops[c->op->kind].name, lo, lo == 1 ? "" : "s", type_str(c->in[i], IR_));
        else
            sx_error(a ? &a->loc : c->loc, "%s of '%s' must have at least %d dimension%s, got %s",
                     what, ir_ops[c->op->kind].name, lo, lo == 1 ? "" : "s",
                     type_str(c->in[i], IR_));
        return -1;
    }
    return 0;
}

static Dim last_dim(IrValue *v) { return v->shape.d[v->shape.nd - 1]; }

static Dim rows_of(IrValue *v)
{
    Dim n = shape_numel(&v->shape), r = n;
    if (v->shape.nd && dim_div(n, last_dim(v), &r)) return n;
    return r;
}

static int mismatch(ShapeCtx *c, const char *what, IrValue *a, IrValue *b)
{
    sx_error(c->loc, "shape mismatch in '%s': %s (%s and %s)", ir_ops[c->op->kind].name, what,
             type_str(a, IR_), type_str(b, IR_));
    return -1;
}

static int shape_matmul(ShapeCtx *c)
{
    if (need_float(c, 0, "the first argument") || need_float(c, 1, "the second argument") ||
        need_rank(c, 0, 1, SX_MAXDIM, "the first argument") ||
        need_rank(c, 1, 2, 2, "the second argument"))
        return -1;
    IrValue *a = c->in[0], *b = c->in[1];
    if (!dim_eq(last_dim(a), b->shape.d[0]))
        return mismatch(c, "inner dimensions differ", a, b);
    c->out = a->shape;
    c->out.d[c->out.nd - 1] = b->shape.d[1];
    c->op->sz[0] = rows_of(a);
    c->op->sz[1] = last_dim(a);
    c->op->sz[2] = b->shape.d[1];
    return 0;
}

static int shape_matmul_t(ShapeCtx *c)
{
    if (need_float(c, 0, "the first argument") || need_float(c, 1, "the second argument") ||
        need_rank(c, 0, 1, SX_MAXDIM, "the first argument") ||
        need_rank(c, 1, 2, 2, "the second argument"))
        return -1;
    IrValue *a = c->in[0], *b = c->in[1];
    if (!dim_eq(last_dim(a), b->shape.d[1]))
        return mismatch(c, "inner dimensions differ (matmul_t multiplies by the transpose)", a, b);
    c->out = a->shape;
    c->out.d[c->out.nd - 1] = b->shape.d[0];
    c->op->sz[0] = rows_of(a);
    c->op->sz[1] = last_dim(a);
    c->op->sz[2] = b->shape.d[0];
    return 0;
}

/* b's shape must be a suffix of a's; out has a's shape */
static int shape_broadcast(ShapeCtx *c)
{
    if (need_float(c, 0, "the left operand") || need_float(c, 1, "the right operand")) return -1;
    IrValue *a = c->in[0], *b = c->in[1];
    int ok = b->shape.nd <= a->shape.nd;
    for (int i = 0; ok && i < b->shape.nd; i++)
        ok = dim_eq(a->shape.d[a->shape.nd - b->shape.nd + i], b->shape.d[i]);
    if (!ok)
        return mismatch(c, "the right shape must equal the left one or its trailing dimensions", a, b);
    c->out = a->shape;
    c->op->sz[0] = shape_numel(&b->shape);
    return 0;
}

static int shape_same(ShapeCtx *c)
{
    if (need_float(c, 0, "the argument")) return -1;
    c->out = c->in[0]->shape;
    if (c->op->kind == OP_SCALE) {
        if (c->k[0].k != V_INT && c->k[0].k != V_FLOAT) {
            sx_error(c->loc, "scale factor must be a number, got %s", val_kind_name(c->k[0].k));
            return -1;
        }
        c->op->k[0] = c->k[0].k == V_INT ? (double)c->k[0].i : c->k[0].f;
        c->op->nk = 1;
    }
    if (c->op->kind == OP_SOFTMAX) {
        if (need_rank(c, 0, 1, SX_MAXDIM, "the argument")) return -1;
        c->op->sz[1] = last_dim(c->in[0]);
    }
    if (c->op->kind == OP_DROPOUT) {
        /* element index = row * per_row + i, rows counted over batch*sequence */
        Dim bt, per;
        Dim n = shape_numel(&c->in[0]->shape);
        if (dim_mul(dim_sym(0), IR_->nsym > 1 ? dim_sym(1) : dim_const(1), &bt) || dim_div(n, bt, &per)) {
            sx_error(c->loc, "dropout needs a tensor with the batch and sequence dimensions, got %s",
                     type_str(c->in[0], IR_));
            return -1;
        }
        c->op->sz[0] = per;
    }
    return 0;
}

static int shape_embedding(ShapeCtx *c)
{
    if (need_float(c, 0, "the table") || need_rank(c, 0, 2, 2, "the table")) return -1;
    IrValue *w = c->in[0], *idx = c->in[1];
    if (idx->dtype != DT_I32) {
        sx_error(c->loc, "the indices of 'embedding' must be an i32 tensor, got %s", type_str(idx, IR_));
        return -1;
    }
    if (idx->shape.nd >= SX_MAXDIM) {
        sx_error(c->loc, "too many dimensions");
        return -1;
    }
    c->out = idx->shape;
    c->out.d[c->out.nd++] = w->shape.d[1];
    c->op->sz[0] = shape_numel(&idx->shape);
    c->op->sz[1] = w->shape.d[1];
    c->op->sz[2] = w->shape.d[0]; /* rows of this rank's table (vocab-parallel) */
    return 0;
}

static int shape_arange(ShapeCtx *c)
{
    Val n = c->k[0];
    if (n.k == V_INT) {
        if (n.i <= 0) {
            sx_error(c->loc, "arange needs a positive length, got %lld", n.i);
            return -1;
        }
        n.d = dim_const(n.i);
    } else if (n.k != V_DIM) {
        sx_error(c->loc, "arange needs a length (an integer or a dimension), got %s", val_kind_name(n.k));
        return -1;
    }
    c->out.nd = 1;
    c->out.d[0] = n.d;
    c->out_t = DT_I32;
    return 0;
}

static int num_arg(ShapeCtx *c, int i, double *out, const char *what)
{
    if (c->k[i].k == V_INT) *out = (double)c->k[i].i;
    else if (c->k[i].k == V_FLOAT) *out = c->k[i].f;
    else {
        sx_error(c->loc, "%s of '%s' must be a number, got %s", what, ir_ops[c->op->kind].name,
                 val_kind_name(c->k[i].k));
        return -1;
    }
    return 0;
}

static int int_arg(ShapeCtx *c, int i, long long *out, const char *what)
{
    if (c->k[i].k != V_INT) {
        sx_error(c->loc, "%s of '%s' must be an integer, got %s", what, ir_ops[c->op->kind].name,
                 val_kind_name(c->k[i].k));
        return -1;
    }
    *out = c->k[i].i;
    return 0;
}

static int shape_norm(ShapeCtx *c)
{
    int nw = c->op->kind == OP_LAYERNORM ? 2 : 1;
    if (need_float(c, 0, "the input") || need_rank(c, 0, 1, SX_MAXDIM, "the input")) return -1;
    Dim C = last_dim(c->in[0]);
    for (int i = 1; i <= nw; i++) {
        if (need_float(c, i, i == 1 ? "the weight" : "the bias")) return -1;
        if (c->in[i]->shape.nd != 1 || !dim_eq(c->in[i]->shape.d[0], C))
            return mismatch(c, i == 1 ? "the weight must have the input's last dimension"
                                      : "the bias must have the input's last dimension",
                            c->in[0], c->in[i]);
    }
    double eps;
    if (num_arg(c, 0, &eps, "epsilon")) return -1;
    if (!(eps > 0)) {
        sx_error(c->loc, "epsilon of '%s' must be positive, got %g", ir_ops[c->op->kind].name, eps);
        return -1;
    }
    c->op->k[0] = eps;
    c->op->nk = 1;
    c->out = c->in[0]->shape;
    Dim N = rows_of(c->in[0]);
    c->aux[0].nd = c->aux[1].nd = 1;
    c->aux[0].d[0] = c->aux[1].d[0] = N;
    c->op->sz[0] = N;
    c->op->sz[1] = C;
    return 0;
}

/* C, the last dimension of an op's input, must be a constant that splits
 * into nh heads (attention, rope, repeat_kv) */
static int split_heads(ShapeCtx *c, Dim C, long long nh)
{
    const char *op = ir_ops[c->op->kind].name;
    if (!dim_is_const(C)) {
        sx_error(c->loc, "the channel dimension of '%s' must be a constant, got %s", op, dim_str(C, IR_));
        return -1;
    }
    if (nh <= 0 || C.c % nh) {
        sx_error(c->loc, "'%s': %lld channels do not split into %lld heads (%lld is not divisible by %lld)", op,
                 (long long)C.c, nh, (long long)C.c, nh);
        return -1;
    }
    return 0;
}

/* causal attention's heads, aux (B, NH, T, T) and sizes (B, T, C, NH), once c->out is set */
static void attention_sizes(ShapeCtx *c, Dim C, long long nh)
{
    c->op->k[0] = (double)nh;
    c->op->nk = 1;
    Shape *a = &c->aux[0];
    a->nd = 4;
    a->d[0] = c->out.d[0];
    a->d[1] = dim_const(nh);
    a->d[2] = c->out.d[1];
    a->d[3] = c->out.d[1];
    c->op->sz[0] = c->out.d[0];
    c->op->sz[1] = c->out.d[1];
    c->op->sz[2] = C;
    c->op->sz[3] = dim_const(nh);
}

static int shape_attention(ShapeCtx *c)
{
    for (int i = 0; i < 3; i++) {
        static const char *nm[3] = {"q", "k", "v"};
        if (need_float(c, i, nm[i]) || need_rank(c, i, 3, 3, nm[i])) return -1;
    }
    if (!shape_eq(&c->in[0]->shape, &c->in[1]->shape)) return mismatch(c, "q and k differ", c->in[0], c->in[1]);
    if (!shape_eq(&c->in[0]->shape, &c->in[2]->shape)) return mismatch(c, "q and v differ", c->in[0], c->in[2]);
    long long nh;
    if (int_arg(c, 0, &nh, "the number of heads")) return -1;
    Dim C = c->in[0]->shape.d[2];
    if (split_heads(c, C, nh)) return -1;
    c->out = c->in[0]->shape;
    attention_sizes(c, C, nh);
    return 0;
}

/* $attention_qkv(qkv, n_head): causal_attention of q, k, v packed along the
 * last dimension of one (B, T, 3C) tensor (qkvpack.c makes it from three
 * slices); the output, aux and sizes are causal_attention's */
static int shape_attention_qkv(ShapeCtx *c)
{
    if (need_float(c, 0, "qkv") || need_rank(c, 0, 3, 3, "qkv")) return -1;
    long long nh;
    if (int_arg(c, 0, &nh, "the number of heads")) return -1;
    Dim L = last_dim(c->in[0]);
    if (!dim_is_const(L) || L.c % 3) {
        sx_error(c->loc, "'$attention_qkv': the last dimension %s is not q|k|v", dim_str(L, IR_));
        return -1;
    }
    Dim C = dim_const(L.c / 3);
    if (split_heads(c, C, nh)) return -1;
    c->out = c->in[0]->shape;
    c->out.d[2] = C;
    attention_sizes(c, C, nh);
    return 0;
}

/* rope(x, n_head[, theta[, rope_type, factor, low_freq_factor,
 * high_freq_factor, original_max_position_embeddings]]): x [.., T, C],
 * positions along T, C in n_head heads of an even size; theta defaults to
 * 10000 (Llama 2's; Llama 3 uses 500000); rope_type "llama3" with the four
 * numbers after it is Llama 3.1's frequency scaling, "default" none (the
 * members of Hugging Face's rope_scaling). Sizes: rows, T, C, heads (a
 * rank's heads at tp > 1). */
static int shape_rope(ShapeCtx *c)
{
    if (need_float(c, 0, "the input") || need_rank(c, 0, 2, SX_MAXDIM, "the input")) return -1;
    if (!c->rerun && c->nk != 1 && c->nk != 2 && c->nk != 7) {
        sx_error(c->loc, "'rope' takes the input, the number of heads, optionally theta (the base of the "
                 "wavelengths, default 10000) and after it optionally the scaling: rope_type (\"default\" or "
                 "\"llama3\"), factor, low_freq_factor, high_freq_factor, original_max_position_embeddings; got %d "
                 "arguments after the input", c->nk);
        return -1;
    }
    long long nh;
    double theta = 10000.0, factor = 1.0, low = 1.0, high = 4.0, orig = 8192.0;
    if (int_arg(c, 0, &nh, "the number of heads") || (c->nk >= 2 && num_arg(c, 1, &theta, "theta"))) return -1;
    if (c->rerun) { /* stored: heads, theta, factor (1 for "default"), low, high, original max */
        factor = c->op->k[2], low = c->op->k[3], high = c->op->k[4], orig = c->op->k[5];
    } else if (c->nk == 7) {
        if (c->k[2].k != V_STR || (strcmp(c->k[2].s, "default") && strcmp(c->k[2].s, "llama3"))) {
            sx_error(c->loc, "rope_type of 'rope' must be \"default\" or \"llama3\" (Llama 3.1's scaling), got %s%s%s",
                     c->k[2].k == V_STR ? "\"" : "", c->k[2].k == V_STR ? c->k[2].s : val_kind_name(c->k[2].k),
                     c->k[2].k == V_STR ? "\"" : "");
            return -1;
        }
        if (num_arg(c, 3, &factor, "the scaling factor") || num_arg(c, 4, &low, "low_freq_factor") ||
            num_arg(c, 5, &high, "high_freq_factor") || num_arg(c, 6, &orig, "original_max_position_embeddings"))
            return -1;
        if (!strcmp(c->k[2].s, "default")) factor = 1.0; /* the numbers are then unused, as in transformers */
    }
    Dim C = last_dim(c->in[0]);
    if (split_heads(c, C, nh)) return -1;
    if ((C.c / nh) % 2) {
        sx_error(c->loc, "'rope': %lld channels in %lld heads are heads of %lld, an odd size; rope pairs channel i "
                 "of a head with channel i + size/2", (long long)C.c, nh, (long long)(C.c / nh));
        return -1;
    }
    if (C.c / nh > SR_ROPE_MAX_HEAD) {
        sx_error(c->loc, "'rope': heads of %lld channels; the runtime rotates heads of at most %d",
                 (long long)(C.c / nh), SR_ROPE_MAX_HEAD);
        return -1;
    }
    if (!(theta > 1.0)) {
        sx_error(c->loc, "theta of 'rope' must be greater than 1, got %g", theta);
        return -1;
    }
    if (!(factor >= 1.0) || !(low > 0.0) || !(high > low) || !(orig >= 1.0)) {
        sx_error(c->loc, "'rope' scaling needs factor >= 1, 0 < low_freq_factor < high_freq_factor and "
                 "original_max_position_embeddings >= 1, got %g, %g, %g, %g", factor, low, high, orig);
        return -1;
    }
    c->op->k[0] = (double)nh;
    c->op->k[1] = theta;
    c->op->k[2] = factor;
    c->op->k[3] = low;
    c->op->k[4] = high;
    c->op->k[5] = orig;
    c->op->nk = 6;
    c->out = c->in[0]->shape;
    c->op->sz[0] = rows_of(c->in[0]);
    c->op->sz[1] = c->in[0]->shape.d[c->in[0]->shape.nd - 2];
    c->op->sz[2] = C;
    c->op->sz[3] = dim_const(nh);
    return 0;
}

/* repeat_kv(x, n_kv_head, n_rep): x [.., C] in n_kv_head heads -> [.., C *
 * n_rep], head g repeated n_rep times (grouped-query attention: query head h
 * reads key/value head h / n_rep). Sizes: rows, heads (a rank's at tp > 1),
 * head size, n_rep. */
static int shape_repeat_kv(ShapeCtx *c)
{
    long long nkv, rep;
    if (c->nk == 2 && c->k[1].k == V_FLOAT) { /* n_head / n_kv_head in the stdlib's LlamaAttention */
        sx_error(c->loc, "'repeat_kv': %g repetitions; the query heads must be a whole multiple of the key/value "
                 "heads", c->k[1].f);
        return -1;
    }
    if (need_float(c, 0, "the input") || need_rank(c, 0, 1, SX_MAXDIM, "the input") ||
        int_arg(c, 0, &nkv, "the number of key/value heads") || int_arg(c, 1, &rep, "the repetitions"))
        return -1;
    Dim C = last_dim(c->in[0]);
    if (split_heads(c, C, nkv)) return -1;
    if (rep < 1 || rep > SX_INT_MAX / C.c) {
        sx_error(c->loc, "'repeat_kv': the repetitions must be at least 1, got %lld", rep);
        return -1;
    }
    c->op->k[0] = (double)nkv;
    c->op->k[1] = (double)rep;
    c->op->nk = 2;
    c->out = c->in[0]->shape;
    c->out.d[c->out.nd - 1] = dim_const(C.c * rep);
    c->op->sz[0] = rows_of(c->in[0]);
    c->op->sz[1] = dim_const(nkv);
    c->op->sz[2] = dim_const(C.c / nkv);
    c->op->sz[3] = dim_const(rep);
    return 0;
}

static int shape_slice(ShapeCtx *c)
{
    long long i, n;
    if (need_float(c, 0, "the input") || need_rank(c, 0, 1, SX_MAXDIM, "the input") ||
        int_arg(c, 0, &i, "the chunk index") || int_arg(c, 1, &n, "the number of chunks"))
        return -1;
    Dim L = last_dim(c->in[0]);
    if (n <= 0 || !dim_is_const(L) || L.c % n) {
        sx_error(c->loc, "'slice': the last dimension %s does not split into %lld equal chunks",
                 dim_str(L, IR_), n);
        return -1;
    }
    if (i < 0 || i >= n) {
        sx_error(c->loc, "'slice': chunk %lld out of range 0..%lld", i, n - 1);
        return -1;
    }
    c->out = c->in[0]->shape;
    c->out.d[c->out.nd - 1] = dim_const(L.c / n);
    c->op->k[0] = (double)i;
    c->op->k[1] = (double)n;
    c->op->nk = 2;
    c->op->sz[0] = rows_of(c->in[0]);
    c->op->sz[1] = dim_const(n);
    c->op->sz[2] = dim_const(L.c / n);
    c->op->sz[3] = dim_const(i);
    return 0;
}

static int shape_transpose(ShapeCtx *c)
{
    long long d1, d2;
    if (need_float(c, 0, "the input") || int_arg(c, 0, &d1, "the first dimension") ||
        int_arg(c, 1, &d2, "the second dimension"))
        return -1;
    int nd = c->in[0]->shape.nd;
    if (d1 < 0) d1 += nd;
    if (d2 < 0) d2 += nd;
    if (d1 < 0 || d1 >= nd || d2 < 0 || d2 >= nd) {
        sx_error(c->loc, "'transpose': dimensions out of range for %s", type_str(c->in[0], IR_));
        return -1;
    }
    c->out = c->in[0]->shape;
    Dim t = c->out.d[d1];
    c->out.d[d1] = c->out.d[d2];
    c->out.d[d2] = t;
    c->op->k[0] = (double)d1;
    c->op->k[1] = (double)d2;
    c->op->nk = 2;
    c->op->sz[0] = dim_const(nd);
    c->op->sz[1] = dim_const(d1);
    c->op->sz[2] = dim_const(d2);
    return 0;
}

static int shape_reshape(ShapeCtx *c)
{
    if (need_float(c, 0, "the input")) return -1;
    if (c->nk < 1 || c->nk > SX_MAXDIM) {
        sx_error(c->loc, "'reshape' takes 1 to %d dimensions", SX_MAXDIM);
        return -1;
    }
    c->out.nd = c->nk;
    for (int i = 0; i < c->nk; i++) {
        if (c->k[i].k == V_INT && c->k[i].i > 0) c->out.d[i] = dim_const(c->k[i].i);
        else if (c->k[i].k == V_DIM) c->out.d[i] = c->k[i].d;
        else {
            sx_error(c->loc, "'reshape': dimension %d must be a positive integer or a dimension", i + 1);
            return -1;
        }
    }
    if (!dim_eq(shape_numel(&c->out), shape_numel(&c->in[0]->shape))) {
        sx_error(c->loc, "'reshape' from %s to %s changes the number of elements",
                 shape_str(&c->in[0]->shape, IR_), shape_str(&c->out, IR_));
        return -1;
    }
    return 0;
}

static int shape_cross_entropy(ShapeCtx *c)
{
    if (need_float(c, 0, "the logits") || need_rank(c, 0, 2, SX_MAXDIM, "the logits")) return -1;
    IrValue *lg = c->in[0], *tg = c->in[1];
    if (tg->dtype != DT_I32) {
        sx_error(c->loc, "the targets of 'cross_entropy' must be an i32 tensor, got %s", type_str(tg, IR_));
        return -1;
    }
    int ok = tg->shape.nd == lg->shape.nd - 1;
    for (int i = 0; ok && i < tg->shape.nd; i++) ok = dim_eq(tg->shape.d[i], lg->shape.d[i]);
    if (!ok) return mismatch(c, "the targets must have the logits' shape without the last dimension", lg, tg);
    /* cross_entropy(logits, targets, classes): the logits' last columns from
     * `classes` on pad the vocabulary (to divide it over tensor ranks, as
     * Megatron and llm.c pad GPT-2's 50257 to 50304); the softmax leaves
     * them out, so the loss is the unpadded model's. Without it: none. */
    long long nv = 0;
    if (c->nk > 1) {
        sx_error(c->loc, "'cross_entropy' takes the logits, the targets and at most one number (the classes "
                 "that are not padding), got %d numbers", c->nk);
        return -1;
    }
    if (c->nk == 1) {
        if (int_arg(c, 0, &nv, "the number of classes")) return -1;
        Dim V = last_dim(lg);
        /* checked on the whole logits; the vocab-parallel op (shard.c) sees a
         * rank's columns and keeps the count of the whole vocabulary */
        if (c->op->kind == OP_CROSS_ENTROPY) {
            if (!dim_is_const(V) || nv < 1 || nv > V.c) {
                sx_error(c->loc, "'cross_entropy': %lld classes for logits of %s columns; the classes must be "
                         "between 1 and the columns (the rest is padding)", nv, dim_str(V, IR_));
                return -1;
            }
            if (nv == V.c) nv = 0; /* no padding: the program without the argument */
        }
        c->op->k[0] = (double)nv;
        c->op->nk = nv ? 1 : 0;
    }
    c->out.nd = 0;
    c->aux[0].nd = 1;
    c->aux[0].d[0] = rows_of(lg);
    c->op->sz[0] = rows_of(lg);
    c->op->sz[1] = last_dim(lg);
    c->op->sz[2] = dim_const(nv); /* 0: every column is a class */
    return 0;
}

/* a tensor-parallel all-reduce: any element type, same shape */
static int shape_same_any(ShapeCtx *c)
{
    c->out = c->in[0]->shape;
    c->out_t = c->in[0]->dtype;
    return 0;
}

/* (outer, dim, inner) sizes around dimension d of s */
static void split_sizes(ShapeCtx *c, const Shape *s, int d, Dim dd)
{
    Dim outer = dim_const(1), inner = dim_const(1);
    for (int i = 0; i < d; i++) dim_mul(outer, s->d[i], &outer);
    for (int i = d + 1; i < s->nd; i++) dim_mul(inner, s->d[i], &inner);
    c->op->sz[0] = outer;
    c->op->sz[1] = dd;
    c->op->sz[2] = inner;
}

/* the dimension d of a split tensor, whole again: the sequence symbol T/tp
 * becomes T, a constant is multiplied by tp */
static Dim unsplit(ShapeCtx *c, Dim d, int tp)
{
    Ir *ir = c->E->ir;
    if (ir->seq_sym > 0 && d.p[ir->seq_sym] == 1 && d.c == 1) {
        Dim w = dim_const(1);
        w.p[1] = 1;
        return w;
    }
    d.c *= tp;
    return d;
}

/* all-gather of dim k0 split over k1 ranks: (outer, local, inner) sizes */
static int shape_gather(ShapeCtx *c)
{
    int d = (int)c->op->k[0], tp = (int)c->op->k[1];
    c->out = c->in[0]->shape;
    split_sizes(c, &c->out, d, c->out.d[d]);
    c->out.d[d] = unsplit(c, c->out.d[d], tp);
    return 0;
}

/* reduce-scatter or slice of dim k0 (the sequence T, or a constant) over k1
 * ranks: the output keeps this rank's part; sizes (outer, local, inner) */
static int shape_scatter(ShapeCtx *c)
{
    int d = (int)c->op->k[0], tp = (int)c->op->k[1];
    Ir *ir = c->E->ir;
    c->out = c->in[0]->shape;
    Dim w = c->out.d[d], l;
    if (w.c == 1 && w.p[1] == 1 && ir->seq_sym > 0) {
        l = dim_const(1);
        l.p[ir->seq_sym] = 1;
    } else if (w.c % tp == 0 && !w.p[0] && !w.p[1]) {
        l = dim_const(w.c / tp);
    } else {
        sx_ice("cannot scatter %s over %d ranks", dim_str(w, ir), tp);
    }
    c->out.d[d] = l;
    split_sizes(c, &c->out, d, l);
    return 0;
}

/* dropout on a (B, T/tp, C) tensor split along the sequence */
static int shape_dropout_seq(ShapeCtx *c)
{
    c->out = c->in[0]->shape;
    if (c->out.nd != 3) sx_ice("sequence-parallel dropout on %d dimensions", c->out.nd);
    c->op->sz[0] = c->out.d[0];
    c->op->sz[1] = c->out.d[1];
    c->op->sz[2] = c->out.d[2];
    return 0;
}

typedef int (*ShapeFn)(ShapeCtx *);
static const ShapeFn shape_rules[OP__COUNT] = {
#define X(id, nm, nin, nk, naux, shp, shd, fwd, bwd, ...) shp,
#include "ops.def"
#undef X
};

/* Re-runs op's shape rule on its inputs' current shapes (the tensor-parallel
 * lowering makes them local): updates the size operands, returns the output
 * and aux shapes. Constant arguments come back from op->k. */
int shape_rerun(Program *P, IrOp *op, Shape *out, Shape aux[2])
{
    Elab E;
    memset(&E, 0, sizeof E);
    E.P = P;
    E.ir = &P->ir;
    ShapeCtx c;
    memset(&c, 0, sizeof c);
    c.E = &E;
    c.op = op;
    c.loc = &op->loc;
    c.out_t = DT_F32;
    c.nk = op->nk;
    c.rerun = 1;
    for (int i = 0; i < op->nin; i++) c.in[i] = ir_value(&P->ir, op->in[i]);
    for (int i = 0; i < op->nk; i++) {
        double x = op->k[i];
        c.k[i] = (x == (double)(long long)x && op->kind != OP_SCALE && op->kind != OP_LAYERNORM &&
                  op->kind != OP_RMSNORM) ? vint((long long)x) : vflt(x);
    }
    if (shape_rules[op->kind](&c)) return -1;
    *out = c.out;
    aux[0] = c.aux[0];
    aux[1] = c.aux[1];
    return 0;
}

/* ---- expressions -------------------------------------------------------- */

static Val eval(Elab *E, Frame *f, Node *n);
static Val instantiate(Elab *E, Frame *caller, Node *inst);

/* emit op `k` over tensor inputs and constant args; returns the output */
static Val emit_op(Elab *E, Frame *f, OpKind k, Val *ins, int nin, Val *ks, int nk,
                   const sx_loc *loc, Node *call)
{
    ShapeCtx c;
    memset(&c, 0, sizeof c);
    c.E = E;
    c.loc = loc;
    c.call = call;
    c.nk = nk;
    c.out_t = DT_F32;
    for (int i = 0; i < nk; i++) c.k[i] = ks[i];
    IrOp *op = new_op(E, k, loc, f);
    op->nin = nin;
    for (int i = 0; i < nin; i++) {
        op->in[i] = ins[i].t;
        c.in[i] = val_of(E, ins[i]);
    }
    c.op = op;
    if (shape_rules[k](&c)) {
        if (f->user_loc) sx_note(f->user_loc, "in instance %s", f->prefix);
        E->ir->ops.n--; /* drop the op; the error is reported */
        return verr();
    }
    if (k == OP_REPEAT_KV && op->k[1] == 1.0) {
        E->ir->ops.n--; /* one repetition is the input itself (multi-head attention) */
        return ins[0];
    }
    op->out = ir_new_value(E->ir, VK_OP, c.out_t, &c.out);
    ir_value(E->ir, op->out)->def = op->id;
    for (int a = 0; a < ir_ops[k].naux; a++) {
        op->aux[a] = ir_new_value(E->ir, VK_AUX, DT_F32, &c.aux[a]);
        ir_value(E->ir, op->aux[a])->def = op->id;
    }
    return vten(op->out);
}

static Val eval_call(Elab *E, Frame *f, Node *n)
{
    int k = ir_op_lookup(n->name);
    if (k < 0) {
        /* constant functions */
        int want = (!strcmp(n->name, "min") || !strcmp(n->name, "max")) ? 2 : 1;
        if (n->args.n != want) {
            sx_error(&n->loc, "'%s' takes %d argument%s, got %d", n->name, want, want == 1 ? "" : "s",
                     n->args.n);
            return verr();
        }
        Val a[2];
        for (int i = 0; i < n->args.n && i < 2; i++) {
            a[i] = eval(E, f, n->args.v[i]);
            if (!a[i].k) return verr();
            if (a[i].k != V_INT && a[i].k != V_FLOAT) {
                sx_error(&((Node *)n->args.v[i])->loc, "'%s' needs a number, got %s", n->name,
                         val_kind_name(a[i].k));
                return verr();
            }
        }
        double x = a[0].k == V_INT ? (double)a[0].i : a[0].f;
        if (!strcmp(n->name, "sqrt")) {
            if (x < 0) {
                sx_error(&n->loc, "sqrt of a negative number (%g)", x);
                return verr();
            }
            return vflt(sqrt(x));
        }
        if (!strcmp(n->name, "int")) {
            if (!(fabs(x) < (double)SX_INT_MAX)) {
                sx_error(&n->loc, "int() of %g is out of range", x);
                return verr();
            }
            return vint((long long)x);
        }
        if (!strcmp(n->name, "float")) return vflt(x);
        double y = a[1].k == V_INT ? (double)a[1].i : a[1].f;
        int mn = !strcmp(n->name, "min");
        if (a[0].k == V_INT && a[1].k == V_INT)
            return vint(mn ? (a[0].i < a[1].i ? a[0].i : a[1].i) : (a[0].i > a[1].i ? a[0].i : a[1].i));
        return vflt(mn ? fmin(x, y) : fmax(x, y));
    }
    const OpInfo *oi = &ir_ops[k];
    Val ins[4], ks[SX_MAXDIM + 2];
    int nk = n->args.n - oi->nin;
    if (nk > SX_MAXDIM + 2) nk = SX_MAXDIM + 2;
    for (int i = 0; i < n->args.n; i++) {
        Node *an = n->args.v[i];
        Val v = eval(E, f, an);
        if (!v.k) return verr();
        if (i < oi->nin) {
            if (v.k != V_TENSOR) {
                sx_error(&an->loc, "argument %d of '%s' must be a tensor, got %s", i + 1, n->name,
                         val_kind_name(v.k));
                return verr();
            }
            ins[i] = v;
        } else if (i - oi->nin < SX_MAXDIM + 2) {
            if (v.k == V_TENSOR) {
                sx_error(&an->loc, "argument %d of '%s' must be a constant, got a tensor", i + 1, n->name);
                return verr();
            }
            ks[i - oi->nin] = v;
        }
    }
    return emit_op(E, f, (OpKind)k, ins, oi->nin, ks, nk, &n->loc, n);
}

static Val eval_binop(Elab *E, Frame *f, Node *n)
{
    Val a = eval(E, f, n->lhs), b = eval(E, f, n->rhs);
    if (!a.k || !b.k) return verr();
    int op = n->op;
    if (a.k == V_STR || b.k == V_STR) {
        sx_error(&n->loc, "operator '%c' needs numbers or tensors, not strings", op);
        return verr();
    }
    if (a.k == V_TENSOR || b.k == V_TENSOR) {
        if (a.k == V_TENSOR && b.k == V_TENSOR) {
            if (op == '/' || op == '%') {
                sx_error(&n->loc, "operator '%c' is not defined between tensors", op);
                return verr();
            }
            /* commutative ops put the larger operand on the left for broadcasting */
            if ((op == '+' || op == '*') && val_of(E, a)->shape.nd < val_of(E, b)->shape.nd) {
                Val t = a;
                a = b;
                b = t;
            }
            Val ins[2] = {a, b};
            return emit_op(E, f, op == '+' ? OP_ADD : op == '-' ? OP_SUB : OP_MUL, ins, 2, NULL, 0,
                           &n->loc, NULL);
        }
        Val t = a.k == V_TENSOR ? a : b, s = a.k == V_TENSOR ? b : a;
        if (s.k != V_INT && s.k != V_FLOAT) {
            sx_error(&n->loc, "cannot combine a tensor with %s", val_kind_name(s.k));
            return verr();
        }
        double x = s.k == V_INT ? (double)s.i : s.f;
        if (op == '*' || (op == '/' && a.k == V_TENSOR)) {
            if (op == '/') {
                if (x == 0) {
                    sx_error(&n->loc, "division of a tensor by zero");
                    return verr();
                }
                x = 1.0 / x;
            }
            Val ks[1] = {vflt(x)};
            return emit_op(E, f, OP_SCALE, &t, 1, ks, 1, &n->loc, NULL);
        }
        sx_error(&n->loc, "operator '%c' between a tensor and a number is not supported (use * or /)", op);
        return verr();
    }
    if (a.k == V_DIM || b.k == V_DIM) {
        Dim da = a.k == V_DIM ? a.d : dim_const(a.i), db = b.k == V_DIM ? b.d : dim_const(b.i);
        if (a.k == V_FLOAT || b.k == V_FLOAT || (op != '*' && op != '/')) {
            sx_error(&n->loc, "a symbolic dimension can only be multiplied or divided by integers "
                     "and dimensions");
            return verr();
        }
        Val r = verr();
        r.k = V_DIM;
        if (op == '*' ? dim_mul(da, db, &r.d) : dim_div(da, db, &r.d)) {
            sx_error(&n->loc, "%s %c %s is not a whole dimension", dim_str(da, E->ir), op,
                     dim_str(db, E->ir));
            return verr();
        }
        if (dim_is_const(r.d)) return vint(r.d.c);
        return r;
    }
    Val r = verr();
    int k = sema_arith(op, a.k == V_FLOAT, a.i, a.f, b.k == V_FLOAT, b.i, b.f, &r.i, &r.f, &n->loc);
    if (k < 0) return verr();
    r.k = k ? V_FLOAT : V_INT;
    return r;
}

static Val lookup_name(Elab *E, Frame *f, Node *n)
{
    Bind *b = frame_find(f, n->name);
    if (b) return b->v; /* a poisoned name (its definition failed) is verr, silently */
    const Const *c = sema_find_const(&E->P->config, n->name);
    if (c) {
        if (c->is_str) { Val v = verr(); v.k = V_STR; v.s = c->s; return v; }
        return c->is_float ? vflt(c->f) : vint(c->i);
    }
    if (strchr(n->name, '.')) {
        /* parameter of an instance: prefix.label.path */
        const char *full = *f->prefix ? sx_fmt("%s.%s", f->prefix, n->name) : n->name;
        for (int i = 0; i < E->ir->params.n; i++) {
            IrParam *p = E->ir->params.v[i];
            if (!strcmp(p->name, full)) return vten(p->value);
        }
        sx_error(&n->loc, "no parameter named '%s' (looked for %s)", n->name, full);
        return verr();
    }
    sx_error(&n->loc, "'%s' is not defined here", n->name);
    return verr();
}

#define MAX_OPS 200000    /* a model larger than this is a runaway repeat */
#define MAX_EXPR_DEPTH 400 /* deeper expressions would exhaust the stack */

static Val eval_node(Elab *E, Frame *f, Node *n);

static Val eval(Elab *E, Frame *f, Node *n)
{
    if (E->expr_depth >= MAX_EXPR_DEPTH) {
        if (!E->too_deep++ && !sx_error_count())
            sx_error(&n->loc, "expression nested more than %d levels deep; split it with assignments",
                     MAX_EXPR_DEPTH);
        return verr();
    }
    E->expr_depth++;
    Val v = eval_node(E, f, n);
    E->expr_depth--;
    return v;
}

static Val eval_node(Elab *E, Frame *f, Node *n)
{
    switch (n->kind) {
    case N_NUM: return n->op == 'i' ? vint(n->ival) : vflt(n->fval);
    case N_STR: { Val v = verr(); v.k = V_STR; v.s = n->name; return v; }
    case N_NAME: return lookup_name(E, f, n);
    case N_NEG: {
        Val a = eval(E, f, n->lhs);
        if (a.k == V_INT) return vint(-a.i);
        if (a.k == V_FLOAT) return vflt(-a.f);
        if (a.k == V_TENSOR) {
            Val ks[1] = {vflt(-1.0)};
            return emit_op(E, f, OP_SCALE, &a, 1, ks, 1, &n->loc, NULL);
        }
        if (a.k) sx_error(&n->loc, "cannot negate %s", val_kind_name(a.k));
        return verr();
    }
    case N_BINOP: return eval_binop(E, f, n);
    case N_CALL: return eval_call(E, f, n);
    case N_INST: return instantiate(E, f, n);
    default:
        sx_error(&n->loc, "unexpected expression");
        return verr();
    }
}

/* ---- types: binding a value to a declared type -------------------------- */

static int dtype_of(const char *name, DType *t)
{
    if (!strcmp(name, "f32")) *t = DT_F32;
    else if (!strcmp(name, "bf16")) *t = DT_BF16;
    else if (!strcmp(name, "i32")) *t = DT_I32;
    else return -1;
    return 0;
}

/* evaluates a type's dims into `s`; unbound names become new dims bound to
 * `actual` (when given) or new model symbols (when `new_syms`) */
static int bind_type(Elab *E, Frame *f, Node *type, const IrValue *actual, const sx_loc *argloc,
                     const char *what, Shape *s, DType *t, int new_syms)
{
    if (type->ival != TY_TENSOR) sx_ice("bind_type on a scalar type");
    if (dtype_of(type->name, t)) {
        sx_error(&type->loc, "unknown element type '%s' (use f32, bf16 or i32)", type->name);
        return -1;
    }
    int nd = type->args.n, dots = -1;
    for (int i = 0; i < nd; i++)
        if (((Node *)type->args.v[i])->kind == N_DOTS) {
            if (i != 0) {
                sx_error(&((Node *)type->args.v[i])->loc, "'..' may only stand first in a shape");
                return -1;
            }
            dots = i;
        }
    int lead = 0;
    if (actual) {
        int fixed = nd - (dots >= 0);
        if (actual->dtype != *t && !(actual->dtype != DT_I32 && *t != DT_I32)) {
            sx_error(argloc, "%s must be %s, got %s%s", what, type->name,
                     dtype_name(actual->dtype), shape_str(&actual->shape, E->ir));
            sx_note(&type->loc, "declared here");
            return -1;
        }
        if (dots >= 0 ? actual->shape.nd < fixed : actual->shape.nd != fixed) {
            sx_error(argloc, "%s must have %s%d dimension%s, got %s%s", what,
                     dots >= 0 ? "at least " : "", fixed, fixed == 1 ? "" : "s",
                     dtype_name(actual->dtype), shape_str(&actual->shape, E->ir));
            sx_note(&type->loc, "declared here");
            return -1;
        }
        lead = actual->shape.nd - fixed;
        s->nd = actual->shape.nd;
        for (int i = 0; i < lead; i++) s->d[i] = actual->shape.d[i];
    } else {
        if (dots >= 0) {
            sx_error(&type->loc, "'..' needs an argument to take its dimensions from");
            return -1;
        }
        s->nd = nd;
        if (nd > SX_MAXDIM) {
            sx_error(&type->loc, "at most %d dimensions", SX_MAXDIM);
            return -1;
        }
    }
    int j = lead;
    for (int i = 0; i < nd; i++) {
        Node *dn = type->args.v[i];
        if (dn->kind == N_DOTS) continue;
        Dim want;
        int have_want = 1;
        if (dn->kind == N_NAME && !strchr(dn->name, '.') && !frame_find(f, dn->name) &&
            !sema_find_const(&E->P->config, dn->name)) {
            /* a new dimension name */
            if (actual) {
                Val v = verr();
                Dim ad = actual->shape.d[j];
                if (dim_is_const(ad)) v = vint(ad.c);
                else { v.k = V_DIM; v.d = ad; }
                frame_set(f, dn->name, v);
                want = ad;
            } else if (new_syms) {
                if (E->ir->nsym >= SX_MAXSYM) {
                    sx_error(&dn->loc, "too many symbolic dimensions (at most %d)", SX_MAXSYM);
                    return -1;
                }
                int sym = E->ir->nsym++;
                E->ir->symname[sym] = dn->name;
                Val v = verr();
                v.k = V_DIM;
                v.d = dim_sym(sym);
                frame_set(f, dn->name, v);
                want = v.d;
            } else {
                sx_error(&dn->loc, "unknown dimension '%s'", dn->name);
                return -1;
            }
        } else {
            Val v = eval(E, f, dn);
            if (v.k == V_INT) {
                if (v.i <= 0) {
                    sx_error(&dn->loc, "a dimension must be positive, got %lld", v.i);
                    return -1;
                }
                want = dim_const(v.i);
            } else if (v.k == V_DIM) {
                want = v.d;
            } else {
                if (v.k) sx_error(&dn->loc, "a dimension must be an integer, got %s", val_kind_name(v.k));
                return -1;
            }
        }
        if (actual && have_want && !dim_eq(want, actual->shape.d[j])) {
            Shape decl = actual->shape;
            decl.d[j] = want;
            sx_error(argloc, "shape mismatch: %s has shape %s, expected %s (dimension %d is %s, not %s)",
                     what, shape_str(&actual->shape, E->ir), shape_str(&decl, E->ir), j + 1,
                     dim_str(actual->shape.d[j], E->ir), dim_str(want, E->ir));
            sx_note(&type->loc, "declared here");
            return -1;
        }
        s->d[j++] = want;
    }
    return 0;
}

/* ---- parameters ----------------------------------------------------------- */

static int axis_of(const char *name)
{
    if (!strcmp(name, "data")) return 0;
    if (!strcmp(name, "tensor")) return 1;
    if (!strcmp(name, "pipeline")) return 2;
    return -1;
}

static int axis_degree(const Layout *L, int axis) { return axis == 0 ? L->dp : axis == 1 ? L->tp : L->pp; }
static const char *axis_name(int axis) { return axis == 0 ? "data" : axis == 1 ? "tensor" : "pipeline"; }

static void param_annots(Elab *E, Frame *f, Node *st, IrParam *p)
{
    if (st->annots.n > 1) {
        Node *second = st->annots.v[1];
        sx_error(&second->loc, "%s has more than one sharding annotation; a parameter is split one way",
                 p->name);
        return;
    }
    for (int i = 0; i < st->annots.n; i++) {
        Node *an = st->annots.v[i];
        int dim = -1, axis = 1;
        const char *nm = an->name;
        int groups = 1;
        if (!strcmp(nm, "column") || !strcmp(nm, "row") || !strcmp(nm, "vocab") ||
            !strcmp(nm, "replicated")) {
            if (!strcmp(nm, "column") && an->args.n == 1) {
                /* @column(3): the output is 3 equal chunks (q|k|v), each split */
                Val g = eval(E, f, an->args.v[0]);
                if (g.k != V_INT || g.i < 1 || g.i > (1 << 20)) {
                    if (g.k) sx_error(&an->loc, "@column(groups): groups must be an integer from 1 to %d", 1 << 20);
                    continue;
                }
                groups = (int)g.i;
            } else if (an->args.n) {
                sx_error(&an->loc, "@%s takes no arguments%s", nm,
                         strcmp(nm, "column") ? "" : " (or one: the number of output groups)");
                continue;
            }
            if (!strcmp(nm, "replicated")) {
                p->sh.kind = SH_REPL;
                continue;
            }
            /* weights are stored [in, out]: column splits out (last), row splits in
             * (first); vocab splits the rows of an embedding table */
            dim = !strcmp(nm, "column") ? p->shape.nd - 1 : 0;
            p->vocab = !strcmp(nm, "vocab");
            if (p->shape.nd == 0 && strcmp(nm, "replicated")) {
                sx_error(&an->loc, "@%s on %s, which has no dimensions to split", nm, p->name);
                continue;
            }
        } else if (!strcmp(nm, "split")) {
            if (an->args.n != 2) {
                sx_error(&an->loc, "@split takes a dimension and a mesh axis: @split(1, tensor)");
                continue;
            }
            Node *an0 = an->args.v[0], *an1 = an->args.v[1];
            Val d = eval(E, f, an0);
            if (d.k != V_INT) {
                if (d.k) sx_error(&an0->loc, "@split: the dimension must be an integer");
                continue;
            }
            dim = (int)(d.i < 0 ? d.i + p->shape.nd : d.i);
            if (an1->kind != N_NAME || (axis = axis_of(an1->name)) < 0) {
                sx_error(&an1->loc, "@split: the axis must be data, tensor or pipeline");
                continue;
            }
            if (d.i < -p->shape.nd || d.i >= p->shape.nd) {
                sx_error(&an0->loc, "@split: dimension %lld out of range for %s, which has %d",
                         d.i, p->name, p->shape.nd);
                continue;
            }
        } else {
            sx_error(&an->loc, "unknown parameter annotation '@%s' (use @column, @row, @vocab, "
                     "@split(dim, axis) or @replicated)", nm);
            continue;
        }
        if (axis != 1) {
            sx_error(&an->loc, "parameters can be split over the tensor axis only (got %s)",
                     axis_name(axis));
            continue;
        }
        p->sh.kind = SH_SPLIT;
        p->sh.dim = dim;
        p->sh.axis = axis;
        p->sh.groups = groups;
        p->shard_loc = an->loc;
        int deg = axis_degree(&E->P->layout, axis);
        int64_t size = p->shape.d[dim].c;
        if (size % groups) {
            sx_error(&an->loc, "@column(%d): dimension %d of %s has size %lld, not divisible into "
                     "%d groups", groups, dim, p->name, (long long)size, groups);
        } else if (deg > 1 && (size / groups) % deg) {
            sx_error(&an->loc, "cannot split %s over %s=%d: dimension %d has size %lld%s, "
                     "which is not divisible by %d", p->name, axis_name(axis), deg, dim,
                     (long long)(size / groups), groups > 1 ? " per group" : "", deg);
            if (f->inst_loc) sx_note(f->inst_loc, "in instance %s", f->prefix);
            const Layout *L = &E->P->layout;
            const sx_loc *dl = axis == 0 ? &L->loc_dp : axis == 1 ? &L->loc_tp : &L->loc_pp;
            int cli = axis == 0 ? L->cli_dp : axis == 1 ? L->cli_tp : L->cli_pp;
            if (dl->file && !cli) sx_note(dl, "the %s degree is set here", axis_name(axis));
            if (!strcmp(nm, "vocab")) {
                int64_t pad = (size + deg - 1) / deg * deg;
                sx_note(&an->loc, "pad the vocabulary: a table of %lld rows, with the loss told the real size, "
                        "cross_entropy(logits, targets, %lld), leaves the %lld padding row%s out (Megatron's "
                        "--make-vocab-size-divisible-by; examples/gpt2.model: --set make_vocab_size_divisible_by=128)",
                        (long long)pad, (long long)size, (long long)(pad - size), pad - size == 1 ? "" : "s");
            }
        }
    }
}

static void declare_param_body(Elab *E, Frame *f, Node *st);

static void declare_param(Elab *E, Frame *f, Node *st)
{
    int before = sx_error_count();
    declare_param_body(E, f, st);
    if (sx_error_count() > before && !frame_find(f, st->name)) frame_set(f, st->name, verr());
}

static void declare_param_body(Elab *E, Frame *f, Node *st)
{
    IrParam *p = sx_alloc(sizeof *p);
    p->name = *f->prefix ? sx_fmt("%s.%s", f->prefix, st->name) : st->name;
    p->loc = st->loc;
    if (st->type->ival != TY_TENSOR) {
        sx_error(&st->type->loc, "a parameter must have a tensor type such as f32[%s]", "C");
        return;
    }
    DType t;
    if (bind_type(E, f, st->type, NULL, &st->loc, "parameter", &p->shape, &t, 0)) return;
    if (t == DT_I32) {
        sx_error(&st->type->loc, "a parameter must be a float tensor (f32 or bf16)");
        return;
    }
    if (shape_numel(&p->shape).c < 0 || shape_numel(&p->shape).c > ((int64_t)1 << 40)) {
        sx_error(&st->type->loc, "parameter %s is too large (%s elements)", p->name, shape_str(&p->shape, E->ir));
        return;
    }
    for (int i = 0; i < p->shape.nd; i++)
        if (!dim_is_const(p->shape.d[i])) {
            sx_error(&st->type->loc, "parameter %s has a symbolic dimension %s; parameter shapes "
                     "must be constants", p->name, dim_str(p->shape.d[i], E->ir));
            return;
        }
    for (int i = 0; i < E->ir->params.n; i++) {
        IrParam *o = E->ir->params.v[i];
        if (!strcmp(o->name, p->name)) {
            sx_error(&st->loc, "parameter %s is declared twice", p->name);
            sx_note(&o->loc, "first declared here");
            return;
        }
    }
    Node *in = st->init;
    if (!strcmp(in->name, "zeros")) p->init = 0;
    else if (!strcmp(in->name, "ones")) p->init = 1;
    else {
        p->init = 2;
        if (in->args.n != 1) return; /* reported by sema */
        Val s = eval(E, f, in->args.v[0]);
        if (s.k != V_INT && s.k != V_FLOAT) {
            if (s.k) sx_error(&in->loc, "normal(std): std must be a number, got %s", val_kind_name(s.k));
            return;
        }
        p->std = s.k == V_INT ? (double)s.i : s.f;
        if (!(p->std >= 0) || !isfinite(p->std)) {
            sx_error(&in->loc, "normal(std): std must be >= 0, got %g", p->std);
            return;
        }
    }
    p->decay = p->shape.nd >= 2;
    p->sh.kind = SH_REPL;
    param_annots(E, f, st, p);
    p->value = ir_new_value(E->ir, VK_PARAM, t, &p->shape);
    IrValue *v = ir_value(E->ir, p->value);
    v->param = E->ir->params.n;
    v->name = p->name;
    vec_push(&E->ir->params, p);
    frame_set(f, st->name, vten(p->value));
}

/* ---- blocks ------------------------------------------------------------- */

static Node *find_block(Program *P, const char *name)
{
    for (int m = 0; m < P->modules.n; m++) {
        Module *mod = P->modules.v[m];
        for (int i = 0; i < mod->items.n; i++) {
            Node *it = mod->items.v[i];
            if (it->kind == N_BLOCK && !strcmp(it->name, name)) return it;
        }
    }
    return NULL;
}

/* runs a block body in frame `f`; returns the returned value */
static Val run_body(Elab *E, Frame *f, Node *blk)
{
    for (int i = 0; i < blk->body.n; i++) {
        Node *st = blk->body.v[i];
        switch (st->kind) {
        case N_PARAM:
            declare_param(E, f, st);
            break;
        case N_ASSIGN: {
            Val v = eval(E, f, st->init);
            if (!v.k) return verr();
            frame_set(f, st->name, v);
            break;
        }
        case N_RETURN: {
            Val v = eval(E, f, st->init);
            if (!v.k) return verr();
            if (blk->type && blk->type->ival != TY_TENSOR) {
                const char *t = blk->type->name;
                int okk = (!strcmp(t, "int") && v.k == V_INT) || (!strcmp(t, "float") && (v.k == V_FLOAT || v.k == V_INT)) ||
                          (!strcmp(t, "str") && v.k == V_STR) || (!strcmp(t, "dim") && (v.k == V_DIM || v.k == V_INT));
                if (!okk) {
                    sx_error(&st->loc, "'%s' is declared to return %s, returns %s", blk->name, t, val_kind_name(v.k));
                    return verr();
                }
            }
            if (blk->type) {
                if (blk->type->ival == TY_TENSOR) {
                    if (v.k != V_TENSOR) {
                        sx_error(&st->loc, "'%s' must return a tensor, returns %s", blk->name,
                                 val_kind_name(v.k));
                        return verr();
                    }
                    Shape s;
                    DType t;
                    if (bind_type(E, f, blk->type, val_of(E, v), &st->init->loc, "the returned value",
                                  &s, &t, 0))
                        return verr();
                }
            }
            return v;
        }
        default:
            sx_ice("statement kind %d", st->kind);
        }
    }
    return verr();
}

static int bind_formal(Elab *E, Frame *f, Node *formal, Val v, const sx_loc *argloc, Node *blk)
{
    Node *ty = formal->type;
    const char *what = sx_fmt("argument '%s' of '%s'", formal->name, blk->name);
    if (ty->ival == TY_TENSOR) {
        if (v.k != V_TENSOR) {
            sx_error(argloc, "%s must be a tensor, got %s", what, val_kind_name(v.k));
            return -1;
        }
        Shape s;
        DType t;
        if (bind_type(E, f, ty, val_of(E, v), argloc, what, &s, &t, 0)) return -1;
    } else if (!strcmp(ty->name, "int")) {
        if (v.k != V_INT) {
            sx_error(argloc, "%s must be an integer, got %s", what, val_kind_name(v.k));
            return -1;
        }
    } else if (!strcmp(ty->name, "float")) {
        if (v.k == V_INT) v = vflt((double)v.i);
        if (v.k != V_FLOAT) {
            sx_error(argloc, "%s must be a number, got %s", what, val_kind_name(v.k));
            return -1;
        }
    } else if (!strcmp(ty->name, "str")) {
        if (v.k != V_STR) {
            sx_error(argloc, "%s must be a string, got %s", what, val_kind_name(v.k));
            return -1;
        }
    } else if (!strcmp(ty->name, "dim")) {
        if (v.k != V_DIM && v.k != V_INT) {
            sx_error(argloc, "%s must be a dimension, got %s", what, val_kind_name(v.k));
            return -1;
        }
    } else {
        sx_error(&ty->loc, "unknown type '%s' (use int, float, str, dim, or a tensor type like f32[B, T])",
                 ty->name);
        return -1;
    }
    frame_set(f, formal->name, v);
    return 0;
}

static Val call_block(Elab *E, Frame *caller, Node *inst, Node *blk, const char *prefix, Val *first,
                      int stage)
{
    if (E->depth > 64) {
        sx_error(&inst->loc, "blocks nest more than 64 deep (is '%s' recursive?)", blk->name);
        return verr();
    }
    Frame f;
    memset(&f, 0, sizeof f);
    f.prefix = prefix;
    f.block = blk;
    f.stage = stage;
    f.inst_loc = &inst->loc;
    f.user_loc = caller->user_loc ? caller->user_loc : &inst->loc;
    f.rgroup = caller->rgroup;
    if (E->recompute_next && caller->rgroup < 0) f.rgroup = E->next_rgroup++; /* a new @recompute block */
    /* positional, then keyword, then defaults */
    Val vals[64];
    int have[64];
    const sx_loc *locs[64];
    if (blk->args.n > 64) return verr(); /* reported by sema */
    int nf = blk->args.n;
    memset(have, 0, sizeof have);
    int npos = 0;
    for (int i = 0; i < inst->args.n; i++) {
        Node *a = inst->args.v[i];
        int slot;
        Node *ex = a;
        if (a->kind == N_KWARG) {
            slot = -1;
            for (int j = 0; j < nf; j++)
                if (!strcmp(((Node *)blk->args.v[j])->name, a->name)) slot = j;
            ex = a->init;
        } else {
            slot = npos++;
        }
        if (slot < 0 || slot >= nf) return verr(); /* reported by sema */
        vals[slot] = (i == 0 && first) ? *first : eval(E, caller, ex);
        if (!vals[slot].k) return verr();
        have[slot] = 1;
        locs[slot] = &ex->loc;
    }
    E->depth++;
    for (int j = 0; j < nf; j++) {
        Node *formal = blk->args.v[j];
        if (!have[j]) {
            if (!formal->init) {
                E->depth--;
                return verr();
            }
            vals[j] = eval(E, &f, formal->init);
            if (!vals[j].k) {
                E->depth--;
                return verr();
            }
            locs[j] = &formal->init->loc;
        }
        if (bind_formal(E, &f, formal, vals[j], locs[j], blk)) {
            E->depth--;
            return verr();
        }
    }
    Val r = run_body(E, &f, blk);
    E->depth--;
    return r;
}

static size_t path_hash(const char *s)
{
    unsigned long long h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)h;
}

/* the slot of path in a table of cap (a power of two) entries: its own, or the empty one it would take */
static size_t path_slot(const char **tab, size_t cap, const char *path)
{
    size_t i = path_hash(path) & (cap - 1);
    while (tab[i] && strcmp(tab[i], path)) i = (i + 1) & (cap - 1);
    return i;
}

static int claim_instance(Elab *E, const char *path, const sx_loc *loc)
{
    if (2 * (E->inst_n + 1) > E->inst_cap) { /* at most half full */
        size_t cap = E->inst_cap ? 2 * E->inst_cap : 256;
        const char **tab = sx_alloc(cap * sizeof *tab);
        for (size_t i = 0; i < E->inst_cap; i++)
            if (E->inst_tab[i]) tab[path_slot(tab, cap, E->inst_tab[i])] = E->inst_tab[i];
        E->inst_tab = tab;
        E->inst_cap = cap;
    }
    size_t i = path_slot(E->inst_tab, E->inst_cap, path);
    if (E->inst_tab[i]) {
        sx_error(loc, "instance name '%s' is used twice; each instance needs its own name", path);
        return -1;
    }
    E->inst_tab[i] = path;
    E->inst_n++;
    return 0;
}

static Val instantiate(Elab *E, Frame *caller, Node *inst)
{
    Node *blk = find_block(E->P, inst->name);
    if (!blk) return verr(); /* reported by sema */
    const char *path = *caller->prefix ? sx_fmt("%s.%s", caller->prefix, inst->label) : inst->label;
    if (claim_instance(E, path, &inst->loc)) return verr();
    int pipeline = 0, recompute = 0;
    for (int i = 0; i < inst->annots.n; i++) {
        Node *an = inst->annots.v[i];
        if (!strcmp(an->name, "pipeline")) pipeline = 1;
        else if (!strcmp(an->name, "recompute")) recompute = 1;
        else
            sx_error(&an->loc, "unknown instance annotation '@%s' (use @pipeline or @recompute)", an->name);
        if (an->args.n) sx_error(&an->loc, "@%s takes no arguments", an->name);
    }
    /* @recompute turns recomputation on unless the command line says otherwise */
    if (recompute && E->P->layout.cli_recompute < 0) E->P->layout.recompute = 1;
    if (!inst->count) {
        if (pipeline) sx_error(&inst->loc, "@pipeline marks a repeat whose repetitions may be cut "
                               "into pipeline stages; '%s' is not a repeat", inst->label);
        E->recompute_next = recompute;
        Val r = call_block(E, caller, inst, blk, path, NULL, caller->stage);
        E->recompute_next = 0;
        return r;
    }
    Val n = eval(E, caller, inst->count);
    if (n.k != V_INT) {
        if (n.k) sx_error(&inst->count->loc, "repeat count must be an integer, got %s", val_kind_name(n.k));
        return verr();
    }
    if (n.i < 1 || n.i > 100000) {
        sx_error(&inst->count->loc, "repeat count must be between 1 and 100000, got %lld", n.i);
        return verr();
    }
    if (inst->args.n < 1 || ((Node *)inst->args.v[0])->kind == N_KWARG) {
        sx_error(&inst->loc, "a repeated block takes the running value as its first argument");
        return verr();
    }
    if (pipeline) {
        if (E->P->layout_repeats) {
            sx_error(&inst->loc, "a second repeat marked @pipeline; the pipeline cuts one repeat");
            sx_note(&E->P->layout_repeat_loc, "the first is here");
            return verr();
        }
        if (caller->stage >= 0) {
            sx_error(&inst->loc, "@pipeline inside a repeat that is already cut into stages");
            return verr();
        }
        E->P->layout_repeats = (int)n.i;
        E->P->layout_repeat_loc = inst->loc;
    }
    Val x = eval(E, caller, inst->args.v[0]);
    if (!x.k) return verr();
    for (long long i = 0; i < n.i; i++) {
        E->recompute_next = recompute; /* each repetition is its own block */
        int before = E->ir->ops.n;
        Val y = call_block(E, caller, inst, blk, sx_fmt("%s.%lld", path, i), &x,
                           pipeline ? (int)i : caller->stage);
        E->recompute_next = 0;
        if (!y.k) return verr();
        /* every repetition adds as many ops as the first: a repeat that will cross the limit is
         * refused after its first, with its numbers, not after elaborating (and timing) the ops up
         * to it */
        long long per = E->ir->ops.n - before;
        if (E->ir->ops.n + per * (n.i - 1 - i) > MAX_OPS) {
            if (!E->too_big++)
                sx_error(&inst->loc, "the model grows past %d ops: %lld repetitions of '%s' at %lld ops each "
                         "(repeats nested too deep or too long?)", MAX_OPS, n.i, blk->name, per);
            return verr();
        }
        if (x.k == V_TENSOR && (y.k != V_TENSOR || !shape_eq(&val_of(E, x)->shape, &val_of(E, y)->shape))) {
            sx_error(&inst->loc, "a repeated block must return a value shaped like its first "
                     "argument: '%s' takes %s and returns %s", blk->name,
                     type_str(val_of(E, x), E->ir), y.k == V_TENSOR ? type_str(val_of(E, y), E->ir)
                                                                    : val_kind_name(y.k));
            return verr();
        }
        x = y;
    }
    return x;
}

/* ---- the model -------------------------------------------------------------- */

int shape_elaborate(Program *P)
{
    Elab E;
    memset(&E, 0, sizeof E);
    E.P = P;
    E.ir = &P->ir;
    Node *m = P->model;
    P->ir.model_name = m->name;
    P->ir.model_loc = m->loc;
    Frame f;
    memset(&f, 0, sizeof f);
    f.prefix = "";
    f.block = m;
    f.stage = -1;
    f.rgroup = -1;
    for (int i = 0; i < m->args.n; i++) {
        Node *a = m->args.v[i];
        if (a->type->ival != TY_TENSOR) {
            sx_error(&a->loc, "model inputs must be tensors, e.g. idx: i32[B, T]");
            return 1;
        }
        if (a->init) sx_error(&a->init->loc, "model inputs take no default");
        Shape s;
        DType t;
        if (bind_type(&E, &f, a->type, NULL, &a->loc, "model input", &s, &t, 1)) return 1;
        if (P->ir.ninputs >= 4) {
            sx_error(&a->loc, "a model takes at most 4 inputs");
            return 1;
        }
        int v = ir_new_value(&P->ir, VK_INPUT, t, &s);
        ir_value(&P->ir, v)->input = P->ir.ninputs;
        ir_value(&P->ir, v)->name = a->name;
        P->ir.inputs[P->ir.ninputs++] = v;
        frame_set(&f, a->name, vten(v));
    }
    Val r = run_body(&E, &f, m);
    if (sx_error_count()) return 1;
    if (r.k != V_TENSOR) {
        sx_error(&m->loc, "the model must return a tensor (its loss), returns %s", val_kind_name(r.k));
        return 1;
    }
    P->ir.output = r.t;
    return 0;
}
