/* codegen_host.c: C source for the host backend (C + OpenBLAS + libshardrt).
 *
 * Needs: the forward IR, the backward program and the memory plan.
 * Guarantees: one C file defining the program's sr_program (parameter table,
 * train defaults, config) with forward and backward functions per block
 * instance, each kernel call expanded from the op table's templates, with a
 * comment pointing back to the .model line and shapes on every buffer. The
 * file compiles with -Wall -Wextra -Werror. Activation gradients are zeroed
 * right before their first accumulation; parameter gradients are the
 * runtime's (zeroed once per optimizer step, so microbatches accumulate).
 */
#include "shardc.h"

#include <math.h>

typedef struct Gen {
    Program *P;
    Ir *ir;
    FILE *f;
    ParamLayout L;      /* where the parameters live */
    int64_t *param_off; /* float offset of each parameter in the arena of the stage being emitted */
    char *zeroed;       /* activation gradients already zeroed in this backward */
    int stage;          /* the pipeline stage being emitted */
    int mode;           /* backward: BW_FULL, BW_INPUT (zb-h1 B) or BW_WEIGHT (zb-h1 W) */
    Vec fnames;         /* char*: every function name used in the file */
} Gen;



static char *shape_comment(Gen *g, const IrValue *v) { return shape_str(&v->shape, g->ir); }

/* a parameter (P) or its gradient (G) in the arena of the stage's rank */
static char *param_buf(Gen *g, const char *arena, int param)
{
    if (g->param_off[param] < 0)
        sx_ice("stage %d reads parameter %d, which its pipeline rank does not hold", g->stage, param);
    return sx_fmt("%s(%lld)", arena, (long long)g->param_off[param]);
}

/* the C expression of a value's own buffer */
static char *buf_own(Gen *g, int id)
{
    IrValue *v = ir_value(g->ir, id);
    switch (v->kind) {
    case VK_INPUT:
        return v->input == 0 ? "e->inputs" : "e->targets";
    case VK_PARAM:
        return param_buf(g, "P", v->param);
    case VK_GRAD: {
        IrValue *p = ir_value(g->ir, v->primal);
        if (p->kind == VK_PARAM) return param_buf(g, "G", p->param);
        break;
    }
    default:
        break;
    }
    if (g->ir->nstages > 1) { /* pipeline boundaries are the runtime's buffers */
        const IrStage *st = &g->ir->stages[g->stage];
        if (id == st->act_in) return "e->act_in";
        if (v->kind == VK_GRAD && v->primal == st->act_in) return "e->act_in_grad";
        if (v->kind == VK_GRAD && v->primal == st->act_out) return "e->act_out_grad";
    }
    if (v->slot < 0) sx_ice("value %%%d has no workspace slot", id);
    return sx_fmt("%s(%d)", v->dtype == DT_I32 ? "I" : "F", v->slot);
}


static char *buf_cb(void *g, int id);
/* the C expression of a value's buffer (at dropout rate 0 some gradients are another's) */
static char *buf(Gen *g, int id) { return cg_view_buf(g->ir, id, buf_own(g, id), buf_cb, g); }
static char *buf_cb(void *g, int id) { return buf(g, id); }

/* expands a template of ops.def (compiler/codegen.c) */
static char *expand(Gen *g, const char *t, IrOp *op, const IrBwd *b)
{
    CgExpander x = {g->ir, g, buf_cb, "(const long[]){", "}", 0, "NULL", "NULL", g->mode, 0};
    return cg_expand(&x, t, op, b);
}

/* the function a block instance's code goes to: the scope up to the repeat
 * index ("transformer.h.3"), else its first two components */
static void emit_value_comment(Gen *g, IrOp *op)
{
    IrValue *o = ir_value(g->ir, op->out);
    fprintf(g->f, "    /* %s:%d  %s  %%%d %s%s */\n", cg_src_file(op->loc.file), op->loc.line,
            ir_ops[op->kind].name, o->id, o->dtype == DT_I32 ? "i32" : "f32", shape_comment(g, o));
}

static void open_fn(Gen *g, const char *name)
{
    fprintf(g->f, "static void %s(sr_exec *e)\n{\n", name);
    cg_emit_syms(g->f, g->ir, g->P->layout.tp, "e->B", "e->T");
}

/* ---- the pieces of the forward and backward walks (cg_emit_forward/backward) ---- */
static void h_open_fn(void *gp, const char *name) { open_fn(gp, name); }

static int h_op(void *gp, int i)
{
    Gen *g = gp;
    IrOp *op = g->ir->ops.v[i];
    emit_value_comment(g, op);
    const CgFusedLoss *fl = cg_fused_loss(g->ir, op);
    if (fl) {
        fprintf(g->f, "    if (e->train) /* backward follows: the gradient goes over the logits (lossfuse.c) */\n");
        fprintf(g->f, "        %s;\n    else\n    ", expand(g, fl->host_fwd_bwd, op, NULL));
    }
    fprintf(g->f, "    %s;\n", expand(g, ir_ops[op->kind].fwd, op, NULL));
    return 1;
}

static void h_recompute(void *gp, IrOp *op)
{
    Gen *g = gp;
    fprintf(g->f, "    /* %s:%d  recompute %s */\n", cg_src_file(op->loc.file), op->loc.line, ir_ops[op->kind].name);
    fprintf(g->f, "    %s;\n", expand(g, ir_ops[op->kind].fwd, op, NULL));
}

static void h_allreduce(void *gp, IrOp *op, IrBwd *b)
{
    Gen *g = gp;
    IrValue *dv = ir_value(g->ir, b->dout);
    (void)op;
    fprintf(g->f, "    sr_tp_allreduce(e, %s, %s, %s); /* d%%%d summed over the tensor group */\n", buf(g, b->dout),
            buf(g, b->dout), cg_cdim(g->ir, shape_numel(&dv->shape)), dv->primal);
}

static void h_begin_step(void *gp, IrOp *op, IrBwd *b)
{
    Gen *g = gp;
    (void)b;
    fprintf(g->f, "    /* %s:%d  d %s */\n", cg_src_file(op->loc.file), op->loc.line, ir_ops[op->kind].name);
}

static void h_zero(void *gp, IrOp *op, int d)
{
    Gen *g = gp;
    IrValue *dv = ir_value(g->ir, d);
    (void)op;
    fprintf(g->f, "    sr_zero(%s, %s); /* d%%%d %s */\n", buf(g, d), cg_cdim(g->ir, shape_numel(&dv->shape)),
            dv->primal, shape_comment(g, dv));
}

static void h_step(void *gp, IrOp *op, IrBwd *b, unsigned fresh)
{
    (void)fresh; /* the host templates take no $z */
    Gen *g = gp;
    fprintf(g->f, "    %s;\n", expand(g, cg_bwd_template(b, op, 0), op, b));
}

static CgEmit host_emit(Gen *g)
{
    CgEmit x = {g, g->f, h_open_fn, h_op, h_recompute, h_allreduce, h_begin_step, h_zero, h_step, 0, NULL, NULL};
    return x;
}

/* one pipeline stage (the whole model without a pipeline): its workspace
 * plan, forward, backward (and zb-h1's two halves of it) */
static void emit_stage(Gen *g, int s, int logits)
{
    Ir *ir = g->ir;
    FILE *f = g->f;
    const IrStage *st = &ir->stages[s];
    int last = s == ir->nstages - 1;
    g->stage = s;
    g->param_off = g->L.off[s % g->L.nranks]; /* its pipeline rank's arena */
    fprintf(f, "/* ---- stage %d", s);
    if (ir->nstages > 1)
        fprintf(f, ": layers %d..%d%s%s", st->first_block, st->first_block + st->nblocks - 1,
                s == 0 ? ", embedding" : "", last ? ", head and loss" : "");
    fprintf(f, " ---- */\n\n");
    cg_emit_slots_head(f, st, s);
    fprintf(f, "#undef F\n#undef I\n");
    cg_emit_slot_macro(f, st, s, "F", "float");
    cg_emit_slot_macro(f, st, s, "I", "int32_t");
    /* the plan: offsets of the slots for this run's B and T */
    fprintf(f, "static size_t plan%d(int B, int T)\n{\n    size_t o = 0;\n    (void)B;\n    (void)T;\n", s);
    for (int k = 0; k < st->nslots; k++) {
        Dim d = st->slot_elems[k];
        cg_emit_plan_cut(f, st, k);
        fprintf(f, "    off%d[%d] = o; o += ((size_t)%lld", s, k, (long long)d.c);
        for (int i = 0; i < SX_MAXSYM; i++)
            for (int r = 0; r < d.p[i]; r++)
                fprintf(f, " * (size_t)%s", i == 0 ? "B" : i == 1 ? "T" : sx_fmt("(T / %d)", g->P->layout.tp));
        fprintf(f, " * 4 + 63) & ~(size_t)63;\n");
    }
    cg_emit_plan_tail(f, st, s);

    Vec fcalls = {0};
    CgEmit x = host_emit(g);
    cg_emit_forward(&x, g->ir, g->stage, &g->fnames, &fcalls);
    fprintf(f, "static void stage%d_forward(sr_exec *e)\n{\n    replan%d(e->B, e->T);\n", s, s);
    for (int i = 0; i < fcalls.n; i++) fprintf(f, "    %s(e);\n", (char *)fcalls.v[i]);
    if (last) {
        fprintf(f, "    e->loss = %s[0];\n", buf(g, ir->output));
        fprintf(f, "    e->logits = %s;\n", buf(g, logits));
    } else {
        fprintf(f, "    e->act_out = %s;\n", buf(g, st->act_out));
    }
    fprintf(f, "}\n\n");
    static const char *suffix[3] = {"backward", "backward_input", "backward_weight"};
    for (int mode = 0; mode < (ir->nstages > 1 ? 3 : 1); mode++) {
        Vec bcalls = {0};
        g->mode = mode;
        cg_emit_backward(&x, g->ir, g->stage, mode, g->zeroed, &g->fnames, &bcalls);
        fprintf(f, "static void stage%d_%s(sr_exec *e)\n{\n    replan%d(e->B, e->T);\n", s, suffix[mode], s);
        if (last && mode != BW_WEIGHT) fprintf(f, "    %s[0] = e->dloss; /* d loss */\n", buf(g, ir->seed));
        if (last && mode != BW_WEIGHT && ir->fused_loss >= 0) { /* a forward not told it trains */
            fprintf(f, "    if (!e->train) { /* the loss's gradient, which a training forward writes (lossfuse.c) */\n");
            cg_emit_syms(f, ir, g->P->layout.tp, "e->B", "e->T");
            IrOp *loss = ir->ops.v[ir->fused_loss];
            fprintf(f, "    %s;\n    }\n", expand(g, cg_fused_loss(ir, loss)->host_over, loss, NULL));
        }
        for (int i = 0; i < bcalls.n; i++) fprintf(f, "    %s(e);\n", (char *)bcalls.v[i]);
        fprintf(f, "}\n\n");
    }
    g->mode = BW_FULL;
}

int cg_host(Program *P, FILE *f, const char *source_path)
{
    Gen g;
    memset(&g, 0, sizeof g);
    g.P = P;
    g.ir = &P->ir;
    g.f = f;
    Ir *ir = &P->ir;
    cg_param_layout(P, 16, &g.L); /* 64-byte aligned tensors */
    g.param_off = g.L.global;
    g.zeroed = sx_alloc((size_t)ir->values.n + 1);
    int vocab = 0, classes = 0, max_seq = 0, logits = -1;
    if (cg_training_head(P, &vocab, &classes, &max_seq, &logits)) return 1;

    fprintf(f, "/* Generated by shardc %s from %s. Do not edit: edit the .model file.\n", SHARDC_VERSION, source_path);
    fprintf(f, " * Model %s: %d parameter tensors, %lld parameters; %d ops forward, %d backward;\n",
            ir->model_name, ir->params.n, (long long)ir_param_count(ir), ir->ops.n, ir->bwd.n);
    fprintf(f, " * %d pipeline stage%s, workspaces planned at compile time (sizes in %s, %s). */\n",
            ir->nstages, ir->nstages == 1 ? "" : "s", ir->symname[0], ir->symname[1]);
    fprintf(f, "#include <stddef.h>\n#include <stdint.h>\n\n#include \"sr_program.h\"\n\n");
    fprintf(f, "#define P(o) (e->params + (o))\n#define G(o) (e->grads + (o))\n\n");
    for (int s = 0; s < ir->nstages; s++) emit_stage(&g, s, logits);
    int *nused = cg_emit_param_tables(f, P, g.L.global);
    int npartial = cg_emit_tp_partial_grads(ir, f);
    fprintf(f, "\nstatic const sr_stage stages[%d] = {\n", ir->nstages);
    for (int st = 0; st < ir->nstages; st++) {
        const IrStage *sg = &ir->stages[st];
        int64_t rin = 0, rout = 0;
        if (sg->act_in >= 0) rin = cg_row_floats(ir, sg->act_in, P->layout.tp);
        if (sg->act_out >= 0) rout = cg_row_floats(ir, sg->act_out, P->layout.tp);
        int multi = ir->nstages > 1;
        fprintf(f, "    {work_bytes%d, stage%d_forward, stage%d_backward, %s, %s, %lld, %lld, %d, %d, %d, stage%d_params%s},\n",
                st, st, st, multi ? sx_fmt("stage%d_backward_input", st) : "NULL",
                multi ? sx_fmt("stage%d_backward_weight", st) : "NULL", (long long)rin, (long long)rout,
                sg->first_block, sg->nblocks, nused[st], st,
                sg->nkept < sg->nslots ? sx_fmt(", scratch_bytes%d, 0", st) : ", NULL, 0"); /* float boundaries */
    }
    fprintf(f, "};\n\n");
    if (g.L.nranks > 1) { /* each pipeline rank's own arena */
        int R = g.L.nranks, n = ir->params.n;
        fprintf(f, "static const int64_t rank_param_floats[%d] = {", R);
        for (int r = 0; r < R; r++) fprintf(f, "%s%lld", r ? ", " : "", (long long)g.L.n[r]);
        fprintf(f, "};\nstatic const int64_t rank_param_offsets[%d] = {\n", R * n);
        for (int r = 0; r < R; r++) {
            fprintf(f, "    /* pipeline rank %d */", r);
            for (int i = 0; i < n; i++)
                fprintf(f, "%s%lld", !i ? "\n    " : i % 16 ? ", " : ",\n    ", (long long)g.L.off[r][i]);
            fprintf(f, ",\n");
        }
        fprintf(f, "};\n\n");
    }
    fprintf(f, "static const sr_program program = {\n    .name = ");
    cg_emit_cstr(f, ir->model_name);
    fprintf(f, ",\n    .source = ");
    cg_emit_cstr(f, source_path);
    fprintf(f, ",\n    .n_params = %d,\n    .params = params,\n    .n_param_floats = %lld,\n", ir->params.n,
            (long long)g.L.nglobal);
    if (g.L.nranks > 1)
        fprintf(f, "    .rank_param_floats = rank_param_floats,\n    .rank_param_offsets = rank_param_offsets,\n");
    fprintf(f, "    .vocab = %d,\n    .max_seq = %d,\n    .tp = %d,\n", vocab, max_seq, P->layout.tp);
    if (classes) fprintf(f, "    .classes = %d, /* the rest of vocab pads */\n", classes);
    fprintf(f, "    .work_bytes = work_bytes0,\n    .forward = stage0_forward,\n    .backward = stage0_backward,\n");
    fprintf(f, "    .recompute = %d,\n", P->layout.recompute);
    fprintf(f, "    .split_backward = %d,\n", ir->split_backward);
    fprintf(f, "    .sequence_parallel = %d,\n", P->layout.sequence_parallel && P->layout.tp > 1);
    fprintf(f, "    .n_tp_partial_grads = %d,\n    .tp_partial_grads = tp_partial_grads,\n", npartial);
    fprintf(f, "    .pp = %d,\n    .virtual_stages = %d,\n    .n_stages = %d,\n    .stages = stages,\n",
            ir->nstages > 1 ? P->layout.pp : 1, ir->nstages > 1 ? P->layout.virtual_stages : 1, ir->nstages);
    fprintf(f, "    .defaults = {\n");
    cg_emit_defaults(f, P, max_seq, "        .", ",");
    fprintf(f, "    },\n");
    fprintf(f, "    .config_json = ");
    cg_emit_cstr(f, cg_config_json(P));
    fprintf(f, ",\n};\n\nint main(int argc, char **argv) { return sr_main(&program, argc, argv); }\n");
    return 0;
}
