/* shard.c: the parallel layout and sharding propagation over the mesh.
 *
 * shard_layout (before elaboration) needs: the evaluated parallel section and
 * the layout flags. Guarantees: dp, tp, pp, microbatches >= 1, a known
 * schedule, and dp*tp*pp equal to the declared world size when one is declared.
 *
 * shard_check (after elaboration) needs: the forward IR with declared
 * parameter shardings. Guarantees: every value has a sharding over the tensor
 * axis (replicated, split, or partial sum); every op's inputs are in a
 * sharding its rule accepts, with the collective each mismatch needs recorded
 * in Program.collectives (all-reduce for a partial sum, all-gather for a
 * split); layouts that cannot be sharded are user errors with the numbers:
 * heads not divisible by tp, a row-split weight fed by a replicated input,
 * fewer layers than pipeline stages, a global batch not divisible by
 * dp*microbatches.
 */
#include "shardc.h"

static const char *schedules[] = {"gpipe", "1f1b", "interleaved", "zb-h1", NULL};

static int layout_int(Program *P, const char *name, int dflt, int cli, sx_loc *loc)
{
    const Const *c = sema_find_const(&P->parallel, name);
    if (c) *loc = c->loc;
    if (cli > 0) return cli;
    if (!c) return dflt;
    if (c->is_float || c->is_str || c->i < 1 || c->i > 1 << 20) {
        sx_error(&c->loc, "parallel %s must be a positive integer", name);
        return dflt;
    }
    return (int)c->i;
}

int shard_layout(Program *P)
{
    Layout *L = &P->layout;
    L->dp = layout_int(P, "data", 1, L->cli_dp, &L->loc_dp);
    L->tp = layout_int(P, "tensor", 1, L->cli_tp, &L->loc_tp);
    L->pp = layout_int(P, "pipeline", 1, L->cli_pp, &L->loc_pp);
    L->microbatches = layout_int(P, "microbatches", 1, L->cli_mb, &L->loc_mb);
    sx_loc vl = {0};
    L->virtual_stages = layout_int(P, "virtual_stages", 1, L->cli_vs, &vl);
    sx_loc wl = {0};
    L->world = layout_int(P, "world", 0, 0, &wl);
    L->loc_world = wl;
    const Const *rc = sema_find_const(&P->parallel, "recompute");
    L->recompute = 0;
    const Const *sp = sema_find_const(&P->parallel, "sequence_parallel");
    if (sp && (sp->is_str || sp->is_float || (sp->i != 0 && sp->i != 1)))
        sx_error(&sp->loc, "parallel sequence_parallel must be 0 or 1");
    L->sequence_parallel = L->cli_sp || (sp && !sp->is_str && !sp->is_float && sp->i == 1);
    if (L->sequence_parallel && L->tp == 1)
        sx_error(sp ? &sp->loc : NULL, "sequence parallelism splits activations over the tensor ranks: it "
                 "needs tensor > 1");
    if (rc && (!rc->is_str || (strcmp(rc->s, "block") && strcmp(rc->s, "none"))))
        sx_error(&rc->loc, "parallel recompute must be \"block\" or \"none\"");
    else if (rc)
        L->recompute = !strcmp(rc->s, "block");
    if (L->cli_recompute >= 0) L->recompute = L->cli_recompute;
    const Const *s = sema_find_const(&P->parallel, "schedule");
    L->schedule = L->cli_sched ? L->cli_sched : "1f1b";
    if (s) {
        L->loc_sched = s->loc;
        if (!s->is_str) sx_error(&s->loc, "parallel schedule must be a string such as \"1f1b\"");
        else if (!L->cli_sched) L->schedule = s->s;
    }
    int known = 0;
    for (int i = 0; schedules[i]; i++) known |= !strcmp(schedules[i], L->schedule);
    if (!known) {
        if (s && !L->cli_sched)
            sx_error(&s->loc, "unknown pipeline schedule \"%s\" (use gpipe, 1f1b, interleaved or zb-h1)",
                     L->schedule);
        else
            sx_error(NULL, "unknown pipeline schedule \"%s\" (use gpipe, 1f1b, interleaved or zb-h1)",
                     L->schedule);
    }
    if (L->world) {
        long long prod = (long long)L->dp * L->tp * L->pp;
        if (prod != L->world)
            sx_error(&L->loc_world, "the mesh data=%d x tensor=%d x pipeline=%d has %lld devices, "
                     "but world = %d", L->dp, L->tp, L->pp, prod, L->world);
    }
    return sx_error_count() ? 1 : 0;
}

/* ---- propagation ------------------------------------------------------------ */

typedef struct ShardCtx {
    Program *P;
    IrOp *op;
    Sharding in[4];
    IrValue *inv[4];
    Sharding out;
    int tp;
} ShardCtx;

static Sharding repl(void) { Sharding s = {SH_REPL, 0, 0, 0}; return s; }
static Sharding split(int dim, int groups) { Sharding s = {SH_SPLIT, dim, 1, groups}; return s; }
static Sharding partial(void) { Sharding s = {SH_PARTIAL, 0, 1, 0}; return s; }

/* make input i replicated by recording the collective that does it */
static void resolve(ShardCtx *c, int i)
{
    if (c->in[i].kind == SH_REPL) return;
    Collective *col = sx_alloc(sizeof *col);
    col->op = c->op->id;
    col->input = i;
    col->value = c->op->in[i];
    col->kind = c->in[i].kind == SH_PARTIAL ? 0 : 1;
    col->axis = c->in[i].axis;
    vec_push(&c->P->collectives, col);
    c->in[i] = repl();
}

/* the sequence dimension (dim 1 of a [B, T, ...] activation) */
static int seq_dim(const ShardCtx *c, int i)
{
    const IrValue *v = c->inv[i];
    return v->shape.nd >= 2 && v->shape.d[1].c == 1 && v->shape.d[1].p[1] == 1 && !v->shape.d[1].p[0];
}

/* sequence parallelism: a partial sum outside attention and the MLP is
 * reduce-scattered along the sequence (Megatron-SP) instead of all-reduced */
static void soft_resolve(ShardCtx *c, int i)
{
    if (c->in[i].kind == SH_PARTIAL && c->P->layout.sequence_parallel && seq_dim(c, i)) {
        Collective *col = sx_alloc(sizeof *col);
        col->op = c->op->id;
        col->input = i;
        col->value = c->op->in[i];
        col->kind = 2;
        col->dim = 1;
        col->axis = 1;
        vec_push(&c->P->collectives, col);
        c->in[i] = split(1, 1);
        return;
    }
    resolve(c, i);
}

/* a replicated operand cut to this rank's part of dim d (no communication) */
static void slice_input(ShardCtx *c, int i, int d)
{
    Collective *col = sx_alloc(sizeof *col);
    col->op = c->op->id;
    col->input = i;
    col->value = c->op->in[i];
    col->kind = 3;
    col->dim = d;
    col->axis = 1;
    vec_push(&c->P->collectives, col);
    c->in[i] = split(d, 1);
}

static int is_split_last(const ShardCtx *c, int i)
{
    return c->in[i].kind == SH_SPLIT && c->in[i].dim == c->inv[i]->shape.nd - 1;
}

static const char *in_name(ShardCtx *c, int i)
{
    IrValue *v = c->inv[i];
    if (v->kind == VK_PARAM) return ((IrParam *)c->P->ir.params.v[v->param])->name;
    return sx_fmt("%%%d", v->id);
}

static int row_error(ShardCtx *c, int w)
{
    sx_error(&c->op->loc, "row-split weight %s is fed by %s input; a row-parallel layer needs "
             "its input split along the last dimension (the output of a column-parallel layer)",
             in_name(c, w), c->in[0].kind == SH_PARTIAL ? "a partial-sum" : "a replicated");
    IrParam *p = c->P->ir.params.v[c->inv[w]->param];
    if (p->shard_loc.file) sx_note(&p->shard_loc, "the weight is split here");
    return -1;
}

static int shard_matmul(ShardCtx *c)
{
    if (c->in[0].kind == SH_PARTIAL) resolve(c, 0);
    Sharding b = c->in[1];
    if (b.kind == SH_SPLIT && b.dim == 1) {          /* column-parallel */
        if (c->in[0].kind != SH_REPL) resolve(c, 0);
        c->out = split(c->inv[0]->shape.nd - 1, b.groups);
    } else if (b.kind == SH_SPLIT && b.dim == 0) {   /* row-parallel */
        if (!is_split_last(c, 0)) return row_error(c, 1);
        c->out = partial();
    } else {
        if (is_split_last(c, 0)) resolve(c, 0);
        c->out = c->in[0]; /* a batch-dim split passes through */
    }
    return 0;
}

static int shard_matmul_t(ShardCtx *c)
{
    if (c->in[0].kind == SH_PARTIAL) resolve(c, 0);
    Sharding b = c->in[1];
    if (b.kind == SH_SPLIT && b.dim == 0) {          /* vocab-parallel head */
        if (c->in[0].kind != SH_REPL) resolve(c, 0);
        c->out = split(c->inv[0]->shape.nd - 1, 1);
    } else if (b.kind == SH_SPLIT && b.dim == 1) {
        if (!is_split_last(c, 0)) return row_error(c, 1);
        c->out = partial();
    } else {
        if (is_split_last(c, 0)) resolve(c, 0);
        c->out = c->in[0];
    }
    return 0;
}

static int shard_elementwise(ShardCtx *c)
{
    Sharding a = c->in[0], b = c->in[1];
    int off = c->inv[0]->shape.nd - c->inv[1]->shape.nd; /* b aligns with a's trailing dims */
    if (a.kind == SH_PARTIAL && b.kind == SH_PARTIAL && c->op->kind != OP_MUL) {
        c->out = a;
        return 0;
    }
    if (a.kind == SH_PARTIAL) { soft_resolve(c, 0); a = c->in[0]; }
    if (b.kind == SH_PARTIAL) { soft_resolve(c, 1); b = c->in[1]; }
    /* sequence-split + replicated positions: each rank takes its positions */
    if (a.kind == SH_SPLIT && b.kind == SH_REPL && a.dim >= off && a.dim == 1 && c->P->layout.sequence_parallel) {
        slice_input(c, 1, a.dim - off);
        b = c->in[1];
    }
    if (a.kind == SH_SPLIT && b.kind == SH_SPLIT && a.dim == b.dim + off && a.groups == b.groups) {
        c->out = a;
        return 0;
    }
    if (a.kind == SH_SPLIT && b.kind == SH_REPL && a.dim < off) { /* b broadcast along the split dim */
        c->out = a;
        return 0;
    }
    resolve(c, 0);
    resolve(c, 1);
    c->out = repl();
    return 0;
}

static int shard_same(ShardCtx *c)
{
    /* scaling is linear: a partial sum stays partial; others are nonlinear */
    if (c->in[0].kind == SH_PARTIAL && c->op->kind != OP_SCALE) soft_resolve(c, 0);
    /* dropout's random numbers are keyed by the element's place in the whole
     * tensor: split along the sequence it has a kernel that knows that place;
     * split otherwise it runs whole (documented fallback), so every layout
     * drops exactly the single-rank elements */
    if (c->op->kind == OP_DROPOUT && c->in[0].kind == SH_SPLIT && c->inv[0]->shape.nd == 3 &&
        ((c->in[0].dim == 1 && c->P->layout.sequence_parallel) || (c->in[0].dim == 2 && c->in[0].groups <= 1))) {
        /* a kernel that knows each element's place: sequence- or feature-split */
    } else if (c->op->kind == OP_DROPOUT && c->in[0].kind == SH_SPLIT) {
        resolve(c, 0);
    }
    c->out = c->in[0];
    return 0;
}

static int shard_none(ShardCtx *c)
{
    c->out = repl();
    return 0;
}

/* normalization and softmax work on whole rows: the last dim must be whole */
static int shard_rowwise(ShardCtx *c)
{
    if (c->in[0].kind == SH_PARTIAL) soft_resolve(c, 0);
    if (is_split_last(c, 0)) resolve(c, 0);
    for (int i = 1; i < c->op->nin; i++) {
        if (c->in[i].kind != SH_REPL) {
            sx_error(&c->op->loc, "the weights of '%s' must be replicated, but %s is split",
                     ir_ops[c->op->kind].name, in_name(c, i));
            return -1;
        }
    }
    c->out = c->in[0];
    return 0;
}

static int shard_embedding(ShardCtx *c)
{
    Sharding w = c->in[0];
    if (w.kind == SH_SPLIT && w.dim == 0) c->out = partial();            /* vocab-parallel */
    else if (w.kind == SH_SPLIT) c->out = split(c->inv[1]->shape.nd, 1); /* hidden split */
    else c->out = repl();
    return 0;
}

static int shard_attention(ShardCtx *c)
{
    long long nh = (long long)c->op->k[0];
    int all_split = 1;
    for (int i = 0; i < 3; i++) {
        if (c->in[i].kind == SH_PARTIAL) resolve(c, i);
        all_split &= is_split_last(c, i) && c->in[i].groups <= 1;
    }
    if (all_split) {
        if (nh % c->tp) {
            sx_error(&c->op->loc, "attention is split by heads over tensor=%d, but n_head=%lld is not "
                     "divisible by %d", c->tp, nh, c->tp);
            return -1;
        }
        c->out = c->in[0];
        return 0;
    }
    for (int i = 0; i < 3; i++) resolve(c, i);
    c->out = repl();
    return 0;
}

/* An op that works within each of k0 heads of its input's last dimension
 * (rope rotates pairs inside a head; repeat_kv copies whole key/value heads
 * to the query heads that read them): a split of whole heads (a
 * column-parallel projection's output) stays split, a split inside heads is
 * an error (as for attention; Megatron would replicate too few key/value
 * heads), and a split sequence or a partial sum is made whole first. */
static int shard_heads(ShardCtx *c)
{
    long long nh = (long long)c->op->k[0];
    if (is_split_last(c, 0) && c->in[0].groups <= 1) {
        if (nh % c->tp) {
            if (c->op->kind == OP_REPEAT_KV)
                sx_error(&c->op->loc, "grouped-query attention: %lld key/value heads split over tensor=%d (%lld is "
                         "not divisible by %d); use a tensor degree that divides the key/value heads", nh, c->tp,
                         nh, c->tp);
            else
                sx_error(&c->op->loc, "'%s' on %lld heads split over tensor=%d: a rank would hold part of a head "
                         "(%lld is not divisible by %d)", ir_ops[c->op->kind].name, nh, c->tp, nh, c->tp);
            return -1;
        }
        c->out = c->in[0];
        return 0;
    }
    resolve(c, 0);
    c->out = repl();
    return 0;
}

static int shard_slice(ShardCtx *c)
{
    int n = (int)c->op->k[1];
    if (c->in[0].kind == SH_PARTIAL) resolve(c, 0);
    if (is_split_last(c, 0)) {
        if (c->in[0].groups == n) {
            c->out = split(c->in[0].dim, 1);
            return 0;
        }
        resolve(c, 0);
    }
    c->out = c->in[0];
    return 0;
}

static int shard_transpose(ShardCtx *c)
{
    int d1 = (int)c->op->k[0], d2 = (int)c->op->k[1];
    c->out = c->in[0];
    if (c->out.kind == SH_SPLIT) {
        if (c->out.dim == d1) c->out.dim = d2;
        else if (c->out.dim == d2) c->out.dim = d1;
    }
    return 0;
}

static int shard_reshape(ShardCtx *c)
{
    if (c->in[0].kind != SH_REPL) resolve(c, 0);
    c->out = repl();
    return 0;
}

static int shard_cross_entropy(ShardCtx *c)
{
    /* vocab-parallel cross-entropy: a split last dim is combined inside the op */
    if (c->in[0].kind == SH_PARTIAL) resolve(c, 0);
    if (c->in[0].kind == SH_SPLIT && !is_split_last(c, 0)) resolve(c, 0);
    c->out = repl();
    return 0;
}

typedef int (*ShardFn)(ShardCtx *);
static const ShardFn shard_rules[OP__COUNT] = {
#define X(id, nm, nin, nk, naux, shp, shd, fwd, bwd, ...) shd,
#include "ops.def"
#undef X
};

int shard_check(Program *P)
{
    Ir *ir = &P->ir;
    Layout *L = &P->layout;
    for (int i = 0; i < ir->params.n; i++) {
        IrParam *p = ir->params.v[i];
        ir_value(ir, p->value)->sh = p->sh;
    }
    if (L->tp > 1) {
        /* a value downstream of an error is not checked again: no cascades */
        char *bad = sx_alloc((size_t)ir->values.n + 1);
        for (int i = 0; i < ir->ops.n; i++) {
            IrOp *op = ir->ops.v[i];
            int skip = 0;
            for (int k = 0; k < op->nin; k++) skip |= bad[op->in[k]];
            if (skip) {
                bad[op->out] = 1;
                continue;
            }
            ShardCtx c;
            memset(&c, 0, sizeof c);
            c.P = P;
            c.op = op;
            c.tp = L->tp;
            for (int k = 0; k < op->nin; k++) {
                c.inv[k] = ir_value(ir, op->in[k]);
                c.in[k] = c.inv[k]->sh;
            }
            int errs = sx_error_count();
            if (shard_rules[op->kind](&c)) {
                bad[op->out] = 1;
                if (op->user_loc.file && sx_error_count() > errs)
                    sx_note(&op->user_loc, "in instance %s", op->scope);
                continue;
            }
            ir_value(ir, op->out)->sh = c.out;
        }
        IrValue *out = ir_value(ir, ir->output);
        if (out->sh.kind != SH_REPL) {
            sx_error(&ir->model_loc, "the model's result is %s over the tensor axis; it must be replicated",
                     out->sh.kind == SH_PARTIAL ? "a partial sum" : "split");
        }
    }
    /* pipeline: the @pipeline repeat is cut into stages */
    if (L->pp > 1) {
        if (!P->layout_repeats)
            sx_error(L->loc_pp.file ? &L->loc_pp : &ir->model_loc,
                     "pipeline=%d needs a repeat marked @pipeline to cut into stages", L->pp);
        else if ((long long)P->layout_repeats < (long long)L->pp * L->virtual_stages)
            sx_error(&P->layout_repeat_loc, "%d layers cannot fill pipeline=%d stages%s: each stage "
                     "needs at least one layer", P->layout_repeats, L->pp,
                     L->virtual_stages > 1 ? sx_fmt(" x %d virtual stages", L->virtual_stages) : "");
    }
    if (L->virtual_stages > 1 && strcmp(L->schedule, "interleaved"))
        sx_error(&L->loc_sched, "virtual_stages=%d needs the interleaved schedule, not \"%s\"",
                 L->virtual_stages, L->schedule);
    const Const *batch = sema_find_const(&P->train, "batch");
    if (batch && !batch->is_float && !batch->is_str) {
        long long per = (long long)L->dp * L->microbatches;
        if (batch->i < 1)
            sx_error(&batch->loc, "batch must be positive, got %lld", batch->i);
        else if (batch->i % per)
            sx_error(&batch->loc, "global batch %lld is not divisible by data=%d x microbatches=%d = %lld",
                     batch->i, L->dp, L->microbatches, per);
    } else if (batch) {
        sx_error(&batch->loc, "batch must be an integer");
    }
    return sx_error_count() ? 1 : 0;
}

void shard_dump(const Program *P, FILE *f)
{
    Ir *ir = (Ir *)&P->ir;
    fprintf(f, "collectives for tensor=%d (%d):\n", P->layout.tp, P->collectives.n);
    for (int i = 0; i < P->collectives.n; i++) {
        Collective *c = P->collectives.v[i];
        IrOp *op = ir_op(ir, c->op);
        IrValue *v = ir_value(ir, c->value);
        Dim n = shape_numel(&v->shape);
        fprintf(f, "  %-10s %%%d %s before %s (%s:%d %s)  %s x 4 bytes\n",
                c->kind == 0 ? "all-reduce" : c->kind == 1 ? "all-gather" : c->kind == 2 ? "reduce-scatter" : "slice", v->id, shape_str(&v->shape, ir),
                ir_ops[op->kind].name, op->loc.file, op->loc.line, op->scope, dim_str(n, ir));
    }
}

/* ---- tensor-parallel lowering ---------------------------------------------------
 *
 * shard_lower needs: shard_check's shardings and collectives (tp > 1).
 * Guarantees: every recorded collective is an op of the IR (an all-reduce of
 * a partial sum, an all-gather of a split) placed right before its consumer;
 * vocab-parallel embeddings and cross-entropies use their parallel kernels;
 * every value has its LOCAL shape (a split dimension divided by tp), every
 * op's sizes are recomputed from local shapes, and split attention runs
 * n_head / tp heads. Parameters keep their full shape in IrParam.shape for
 * checkpoints; their values are local.
 */
static int new_collective(Program *P, Vec *ops, IrOp *user, Collective *c)
{
    Ir *ir = &P->ir;
    IrValue *v = ir_value(ir, c->value);
    IrOp *op = sx_alloc(sizeof *op);
    static const OpKind kinds[4] = {OP_TP_ALLREDUCE, OP_TP_ALLGATHER, OP_TP_REDUCE_SCATTER, OP_TP_SLICE};
    op->kind = op->wrote = kinds[c->kind];
    op->nin = 1;
    op->in[0] = c->value;
    op->loc = user->loc;
    op->scope = user->scope;
    op->user_loc = user->user_loc;
    /* the collective belongs to its consumer's block: recomputed with it, cut
     * into its pipeline stage (a zeroed rgroup would be @recompute block 0) */
    op->stage = user->stage;
    op->rgroup = user->rgroup;
    op->aux[0] = op->aux[1] = -1;
    if (c->kind >= 1) {
        op->k[0] = c->kind == 1 ? v->sh.dim : c->dim;
        op->k[1] = P->layout.tp;
        op->nk = 2;
    }
    Shape s = v->shape; /* logical shape */
    op->out = ir_new_value(ir, VK_OP, v->dtype, &s);
    IrValue *o = ir_value(ir, op->out);
    o->sh = c->kind >= 2 ? split(c->dim, 1) : repl();
    vec_push(ops, op);
    return op->out;
}

int shard_lower(Program *P)
{
    Ir *ir = &P->ir;
    int tp = P->layout.tp;
    if (tp <= 1) return 0;
    /* 1. collectives as ops, one per (value, kind), before the first consumer */
    Vec ops = {0};
    int *made = sx_alloc(sizeof(int) * 4 * (size_t)(ir->values.n + 1));
    int nv0 = ir->values.n;
    for (int i = 0; i < 4 * nv0; i++) made[i] = -1;
    for (int i = 0; i < ir->ops.n; i++) {
        IrOp *op = ir->ops.v[i];
        for (int k = 0; k < P->collectives.n; k++) {
            Collective *c = P->collectives.v[k];
            if (c->op != op->id) continue;
            int *slot = &made[4 * c->value + c->kind];
            if (*slot < 0) *slot = new_collective(P, &ops, op, c);
            op->in[c->input] = *slot;
        }
        IrValue *w = op->nin ? ir_value(ir, op->in[0]) : NULL;
        if (op->kind == OP_EMBEDDING && w->sh.kind == SH_SPLIT && w->sh.dim == 0) op->kind = OP_EMBEDDING_VP;
        if (op->kind == OP_CROSS_ENTROPY && w->sh.kind == SH_SPLIT) op->kind = OP_CROSS_ENTROPY_VP;
        if (op->kind == OP_ATTENTION && w->sh.kind == SH_SPLIT) op->k[0] /= tp;
        if ((op->kind == OP_ROPE || op->kind == OP_REPEAT_KV) && w->sh.kind == SH_SPLIT) op->k[0] /= tp;
        if (op->kind == OP_DROPOUT && w->sh.kind == SH_SPLIT && w->sh.dim == 1) op->kind = OP_DROPOUT_SEQ;
        if (op->kind == OP_DROPOUT && w->sh.kind == SH_SPLIT && w->sh.dim == 2) op->kind = OP_DROPOUT_COL;
        vec_push(&ops, op);
    }
    ir_set_ops(ir, ops);
    /* 2. local shapes of split values; the sequence split over tp ranks is
     * a symbol of its own, T / tp */
    if (P->layout.sequence_parallel) {
        if (ir->nsym >= SX_MAXSYM) sx_ice("no symbol left for the local sequence");
        ir->seq_sym = ir->nsym++;
        ir->seq_tp = tp;
        ir->symname[ir->seq_sym] = sx_fmt("%s_tp", ir->symname[1]);
    }
    for (int i = 0; i < ir->values.n; i++) {
        IrValue *v = ir->values.v[i];
        if (v->sh.kind != SH_SPLIT) continue;
        Dim *d = &v->shape.d[v->sh.dim];
        if (ir->seq_sym > 0 && d->c == 1 && d->p[1] == 1 && !d->p[0]) {
            d->p[1] = 0;
            d->p[ir->seq_sym] = 1;
            continue;
        }
        int sym = 0;
        for (int k = 0; k < SX_MAXSYM; k++) sym |= d->p[k];
        if (sym || d->c % tp) {
            sx_error(&ir->model_loc, "cannot split %s over tensor=%d: dimension %d is %s",
                     shape_str(&v->shape, ir), tp, v->sh.dim, dim_str(*d, ir));
            return 1;
        }
        d->c /= tp;
    }
    /* 3. sizes from local shapes */
    for (int i = 0; i < ir->ops.n; i++) {
        IrOp *op = ir->ops.v[i];
        int touches = ir_value(ir, op->out)->sh.kind != SH_REPL || op->kind == OP_TP_ALLREDUCE ||
                      op->kind == OP_TP_ALLGATHER || op->kind == OP_TP_REDUCE_SCATTER || op->kind == OP_TP_SLICE;
        for (int k = 0; k < op->nin; k++) touches |= ir_value(ir, op->in[k])->sh.kind != SH_REPL;
        if (!touches) continue;
        Shape out, aux[2];
        if (shape_rerun(P, op, &out, aux))
            sx_ice("op %d (%s) does not accept its local shapes", op->id, ir_ops[op->kind].name);
        IrValue *o = ir_value(ir, op->out);
        if (!shape_eq(&out, &o->shape))
            sx_ice("op %d (%s): local output %s, expected %s", op->id, ir_ops[op->kind].name,
                   shape_str(&out, ir), shape_str(&o->shape, ir));
        for (int a = 0; a < ir_ops[op->kind].naux; a++) ir_value(ir, op->aux[a])->shape = aux[a];
    }
    return sx_error_count() ? 1 : 0;
}
