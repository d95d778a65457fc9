/* ir.c: the IR's tables, the verifier run between passes, and dumps.
 *
 * The IR is an SSA graph: each IrValue is defined once (by an op, or as a
 * model input or parameter) and ops appear in Ir.ops in a valid execution
 * order. ir_verify checks exactly that, plus the op table's arities and that
 * every backward gradient rule writes some gradient.
 */
#include "shardc.h"

const OpInfo ir_ops[OP__COUNT] = {
#define X(id, nm, nin, nk, naux, shp, shd, fwd, bwd, ff, fb, cf, cb) {nm, nin, nk, naux, fwd, bwd, ff, fb, cf, cb},
#include "ops.def"
#undef X
};

int ir_op_lookup(const char *name)
{
    for (int i = 0; i < OP__COUNT; i++)
        if (!strcmp(ir_ops[i].name, name)) return i;
    return -1;
}

IrValue *ir_value(Ir *ir, int id)
{
    if (id < 0 || id >= ir->values.n) sx_ice("bad value id %d", id);
    return ir->values.v[id];
}

IrOp *ir_op(Ir *ir, int id)
{
    if (id < 0 || id >= ir->ops.n) sx_ice("bad op id %d", id);
    return ir->ops.v[id];
}

int ir_bwd_writes(const IrBwd *c, int d)
{
    if (c->kind == BWD_ALLREDUCE) return c->dout == d;
    if (c->kind != BWD_RULE) return 0;
    for (int k = 0; k < 4; k++)
        if (c->din[k] == d) return 1;
    return 0;
}

/* ops becomes the op list: ids renumbered, and the defs of their outputs and aux buffers */
void ir_set_ops(Ir *ir, Vec ops)
{
    ir->ops = ops;
    for (int i = 0; i < ir->ops.n; i++) {
        IrOp *op = ir->ops.v[i];
        op->id = i;
        ir_value(ir, op->out)->def = i;
        for (int a = 0; a < ir_ops[op->kind].naux; a++) ir_value(ir, op->aux[a])->def = i;
    }
}

int ir_new_value(Ir *ir, ValKind k, DType t, const Shape *s)
{
    IrValue *v = sx_alloc(sizeof *v);
    v->id = ir->values.n;
    v->kind = k;
    v->dtype = t;
    v->shape = *s;
    v->def = -1;
    v->param = -1;
    v->input = -1;
    v->primal = -1;
    v->grad = -1;
    v->slot = -1;
    vec_push(&ir->values, v);
    return v->id;
}

/* every value defined once, before its uses; arities as in ops.def */
int ir_verify(const Ir *ir, const char *after)
{
    Ir *m = (Ir *)ir;
    int nv = ir->values.n;
    char *defined = calloc((size_t)nv + 1, 1);
    if (!defined) sx_ice("out of memory");
    for (int i = 0; i < nv; i++) {
        IrValue *v = ir->values.v[i];
        if (v->id != i) sx_ice("after %s: value %d has id %d", after, i, v->id);
        if (v->kind == VK_INPUT || v->kind == VK_PARAM) defined[i] = 1;
    }
    for (int i = 0; i < ir->ops.n; i++) {
        IrOp *op = ir->ops.v[i];
        if (op->id != i) sx_ice("after %s: op %d has id %d", after, i, op->id);
        if ((int)op->kind < 0 || op->kind >= OP__COUNT) sx_ice("after %s: op %d has kind %d", after, i, op->kind);
        const OpInfo *oi = &ir_ops[op->kind];
        if (oi->nin >= 0 && op->nin != oi->nin)
            sx_ice("after %s: op %d (%s) has %d inputs, table says %d", after, i, oi->name, op->nin, oi->nin);
        for (int k = 0; k < op->nin; k++) {
            int v = op->in[k];
            if (v < 0 || v >= nv) sx_ice("after %s: op %d (%s) input %d is %d", after, i, oi->name, k, v);
            if (!defined[v]) sx_ice("after %s: op %d (%s) uses %%%d before its definition", after, i, oi->name, v);
        }
        int outs[3] = {op->out, op->aux[0], op->aux[1]};
        for (int k = 0; k < 1 + oi->naux; k++) {
            int v = outs[k];
            if (v < 0 || v >= nv) sx_ice("after %s: op %d (%s) output %d is %d", after, i, oi->name, k, v);
            if (defined[v]) sx_ice("after %s: %%%d is defined twice", after, v);
            if (ir_value(m, v)->def != i) sx_ice("after %s: %%%d's def is %d, not %d", after, v, ir_value(m, v)->def, i);
            defined[v] = 1;
        }
    }
    if (ir->output < 0 || ir->output >= nv || !defined[ir->output])
        sx_ice("after %s: the model output %%%d is undefined", after, ir->output);
    for (int j = 0; j < ir->bwd.n; j++) { /* a gradient rule writes at least one gradient (codegen emits each) */
        const IrBwd *b = ir->bwd.v[j];
        int any = 0;
        for (int k = 0; k < 4; k++) {
            if (b->din[k] >= nv) sx_ice("after %s: backward step %d writes %%%d", after, j, b->din[k]);
            any |= b->din[k] >= 0;
        }
        if (b->kind == BWD_RULE && !any) sx_ice("after %s: backward step %d writes no gradient", after, j);
    }
    free(defined);
    return 0;
}

static const char *dtn(DType t) { return t == DT_I32 ? "i32" : t == DT_BF16 ? "bf16" : "f32"; }

static char *sh_str(Sharding s)
{
    static const char *ax[3] = {"data", "tensor", "pipeline"};
    if (s.kind == SH_SPLIT) return sx_fmt(" @split(%d, %s)", s.dim, ax[s.axis]);
    if (s.kind == SH_PARTIAL) return sx_fmt(" @partial(%s)", ax[s.axis]);
    return "";
}

void ir_dump(const Ir *ir, FILE *f)
{
    Ir *m = (Ir *)ir;
    fprintf(f, "model %s(", ir->model_name);
    for (int i = 0; i < ir->ninputs; i++) {
        IrValue *v = ir_value(m, ir->inputs[i]);
        fprintf(f, "%s%%%d %s: %s%s", i ? ", " : "", v->id, v->name, dtn(v->dtype), shape_str(&v->shape, ir));
    }
    fprintf(f, ")\n");
    for (int i = 0; i < ir->params.n; i++) {
        IrParam *p = ir->params.v[i];
        fprintf(f, "  param %%%d %s: %s%s%s\n", p->value, p->name, dtn(ir_value(m, p->value)->dtype),
                shape_str(&p->shape, ir), sh_str(p->sh));
    }
    for (int i = 0; i < ir->ops.n; i++) {
        IrOp *op = ir->ops.v[i];
        IrValue *o = ir_value(m, op->out);
        fprintf(f, "  %%%d: %s%s = %s(", o->id, dtn(o->dtype), shape_str(&o->shape, ir), ir_ops[op->kind].name);
        for (int k = 0; k < op->nin; k++) fprintf(f, "%s%%%d", k ? ", " : "", op->in[k]);
        for (int k = 0; k < op->nk; k++) fprintf(f, "%s%g", op->nin || k ? ", " : "", op->k[k]);
        fprintf(f, ")%s", sh_str(o->sh));
        for (int a = 0; a < ir_ops[op->kind].naux; a++) {
            IrValue *x = ir_value(m, op->aux[a]);
            fprintf(f, "  aux %%%d%s", x->id, shape_str(&x->shape, ir));
        }
        fprintf(f, "    # %s:%d %s\n", op->loc.file, op->loc.line, op->scope && *op->scope ? op->scope : "");
    }
    fprintf(f, "  return %%%d\n", ir->output);
}

int64_t ir_param_count(const Ir *ir)
{
    int64_t n = 0;
    for (int i = 0; i < ir->params.n; i++) {
        IrParam *p = ir->params.v[i];
        n += shape_numel(&p->shape).c;
    }
    return n;
}

static char *grouped(int64_t n)
{
    char raw[32], out[48];
    snprintf(raw, sizeof raw, "%lld", (long long)n);
    int len = (int)strlen(raw), o = 0;
    for (int i = 0; i < len; i++) {
        if (i && (len - i) % 3 == 0) out[o++] = ',';
        out[o++] = raw[i];
    }
    out[o] = 0;
    return sx_strdup(out);
}

void ir_print_params(const Ir *ir, FILE *f)
{
    int wn = 9, ws = 5;
    for (int i = 0; i < ir->params.n; i++) {
        IrParam *p = ir->params.v[i];
        int a = (int)strlen(p->name), b = (int)strlen(shape_str(&p->shape, ir));
        if (a > wn) wn = a;
        if (b > ws) ws = b;
    }
    fprintf(f, "%-*s  %-*s  %15s\n", wn, "parameter", ws, "shape", "count");
    for (int i = 0; i < ir->params.n; i++) {
        IrParam *p = ir->params.v[i];
        fprintf(f, "%-*s  %-*s  %15s%s\n", wn, p->name, ws, shape_str(&p->shape, ir),
                grouped(shape_numel(&p->shape).c), sh_str(p->sh));
    }
    int64_t n = ir_param_count(ir);
    fprintf(f, "total: %s parameters in %d tensors (%.1f MiB as f32)\n", grouped(n), ir->params.n,
            (double)n * 4.0 / (1024.0 * 1024.0));
}
