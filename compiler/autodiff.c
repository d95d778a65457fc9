/* autodiff.c: reverse-mode automatic differentiation of the forward IR.
 *
 * Needs: a verified forward IR whose output is a scalar (the loss).
 * Guarantees: a gradient value for exactly the values that lie on a path
 * from a parameter to the output; Ir.bwd lists, in reverse forward order,
 * one backward step per forward op whose output needs a gradient, naming
 * the gradient it reads and the input gradients it accumulates into (the op
 * table's BWD rule). Every gradient accumulates (+=): a value used by several
 * ops (the tied embedding, a residual) collects all contributions without
 * explicit additions. Nothing here is specific to a model.
 */
#include "shardc.h"

unsigned ad_template_uses(const char *t)
{
    unsigned u = 0;
    for (const char *p = t; (p = strchr(p, '$')); p++) {
        if (p[1] >= '0' && p[1] <= '3') u |= 1u << (p[1] - '0');
        else if (p[1] == 'o') u |= 1u << 4;
        else if (p[1] == 'a' && (p[2] == '0' || p[2] == '1')) u |= 1u << (5 + p[2] - '0');
        else if (!strncmp(p + 1, "dims", 4) && p[5] >= '0' && p[5] <= '3') u |= 1u << (p[5] - '0');
    }
    return u;
}

static int new_grad(Ir *ir, int primal)
{
    IrValue *p = ir_value(ir, primal);
    int g = ir_new_value(ir, VK_GRAD, DT_F32, &p->shape);
    IrValue *gv = ir_value(ir, g);
    gv->primal = primal;
    gv->sh = p->sh;
    ir_value(ir, primal)->grad = g;
    return g;
}

/* an op computed on split or partial tensors: each tensor rank holds part
 * of its result, so the gradient it sends to a replicated input is partial */
static int split_op(Ir *ir, const IrOp *op)
{
    if (ir_value(ir, op->out)->sh.kind != SH_REPL) return 1;
    for (int k = 0; k < op->nin; k++)
        if (ir_value(ir, op->in[k])->sh.kind != SH_REPL) return 1;
    return 0;
}

/* Tensor parallelism in the backward: the gradient of a replicated value
 * that feeds a split computation (the input of a column-parallel layer, the
 * final norm's output before a vocab-parallel head) is a partial sum on each
 * rank; it is summed over the tensor group (Megatron's "f" all-reduce) before
 * anything reads it, or, read only by an all-gather's backward, reduce-scattered
 * by it (IrBwd.rs). A replicated contribution to such a gradient is added
 * on rank 0 only, so the sum counts it once. */
static void tensor_parallel_grads(Program *P)
{
    Ir *ir = &P->ir;
    int nv = ir->values.n;
    char *partial = sx_alloc((size_t)nv + 1);
    for (int j = 0; j < ir->bwd.n; j++) {
        IrBwd *b = ir->bwd.v[j];
        IrOp *op = ir_op(ir, b->fwd);
        if (!split_op(ir, op)) continue;
        for (int k = 0; k < op->nin; k++)
            if (b->din[k] >= 0 && ir_value(ir, op->in[k])->sh.kind == SH_REPL) partial[op->in[k]] = 1;
    }
    Vec out = {0};
    for (int j = 0; j < ir->bwd.n; j++) {
        IrBwd *b = ir->bwd.v[j];
        IrOp *op = ir_op(ir, b->fwd);
        /* the sum comes right before the gradient is first read. The
         * gradient of an all-gather's output (sequence parallelism: the
         * sequence-split activation gathered for a column-parallel layer)
         * is read only by the all-gather's rule, which keeps this rank's
         * block: the sum and the slice are one reduce-scatter (Megatron's
         * "g-bar"), (n-1)/n S bytes instead of 2(n-1)/n S */
        if (partial[op->out] && op->kind == OP_TP_ALLGATHER && b->kind == BWD_RULE && b->din[0] >= 0) {
            b->rs = 1;
        } else if (partial[op->out]) {
            IrBwd *ar = sx_alloc(sizeof *ar);
            ar->kind = BWD_ALLREDUCE;
            ar->fwd = op->id;
            ar->dout = b->dout;
            for (int k = 0; k < 4; k++) ar->din[k] = -1;
            vec_push(&out, ar);
        }
        if (!split_op(ir, op))
            for (int k = 0; k < op->nin; k++)
                if (b->din[k] >= 0 && partial[op->in[k]]) b->gate |= 1u << k;
        vec_push(&out, b);
    }
    /* parameters: once per step, before the optimizer; the gradient arena
     * accumulates over microbatches, so a sum in every microbatch's
     * backward would count the earlier ones tp times */
    for (int i = 0; i < ir->params.n; i++) {
        IrParam *p = ir->params.v[i];
        IrValue *v = ir_value(ir, p->value);
        if (!partial[p->value] || v->grad < 0) continue;
        IrBwd *ar = sx_alloc(sizeof *ar);
        ar->kind = BWD_ALLREDUCE;
        ar->fwd = -1;
        ar->dout = v->grad;
        for (int k = 0; k < 4; k++) ar->din[k] = -1;
        vec_push(&out, ar);
    }
    ir->bwd = out;
}

int ad_differentiate(Program *P)
{
    Ir *ir = &P->ir;
    IrValue *out = ir_value(ir, ir->output);
    if (out->shape.nd != 0 || out->dtype == DT_I32) {
        sx_error(&ir->model_loc, "to train, the model must return a scalar loss; '%s' returns %s",
                 ir->model_name, shape_str(&out->shape, ir));
        return 1;
    }
    int nv = ir->values.n;
    /* forward: which values depend on a parameter */
    char *dep = sx_alloc((size_t)nv);
    for (int i = 0; i < ir->params.n; i++) dep[((IrParam *)ir->params.v[i])->value] = 1;
    for (int i = 0; i < ir->ops.n; i++) {
        IrOp *op = ir->ops.v[i];
        for (int k = 0; k < op->nin; k++)
            if (dep[op->in[k]] && ir_value(ir, op->in[k])->dtype != DT_I32) dep[op->out] = 1;
    }
    /* backward: which values reach the output */
    char *live = sx_alloc((size_t)nv);
    live[ir->output] = 1;
    for (int i = ir->ops.n - 1; i >= 0; i--) {
        IrOp *op = ir->ops.v[i];
        if (!live[op->out]) continue;
        for (int k = 0; k < op->nin; k++) live[op->in[k]] = 1;
    }
    if (!dep[ir->output]) {
        sx_error(&ir->model_loc, "the loss of '%s' does not depend on any parameter: nothing to train",
                 ir->model_name);
        return 1;
    }
    for (int i = 0; i < ir->params.n; i++) {
        IrParam *p = ir->params.v[i];
        if (!live[p->value])
            sx_warn(&p->loc, "parameter %s does not affect the loss; it will not change", p->name);
    }
    ir->seed = new_grad(ir, ir->output);
    for (int i = ir->ops.n - 1; i >= 0; i--) {
        IrOp *op = ir->ops.v[i];
        IrValue *o = ir_value(ir, op->out);
        if (o->grad < 0 || !dep[op->out]) continue;
        const OpInfo *oi = &ir_ops[op->kind];
        if (!*oi->bwd) sx_ice("op %s has a differentiable output but no gradient rule", oi->name);
        IrBwd *b = sx_alloc(sizeof *b);
        b->fwd = op->id;
        b->dout = o->grad;
        for (int k = 0; k < 4; k++) b->din[k] = -1;
        for (int k = 0; k < op->nin; k++) {
            int x = op->in[k];
            IrValue *xv = ir_value(ir, x);
            if (!dep[x] || xv->dtype == DT_I32) continue;
            if (xv->grad < 0) new_grad(ir, x);
            b->din[k] = ir_value(ir, x)->grad;
        }
        vec_push(&ir->bwd, b);
    }
    if (P->layout.tp > 1) tensor_parallel_grads(P);
    return 0;
}

void ad_dump(const Ir *ir, FILE *f)
{
    Ir *m = (Ir *)ir;
    fprintf(f, "backward (seed %%%d = dloss):\n", ir->seed);
    for (int i = 0; i < ir->bwd.n; i++) {
        IrBwd *b = ir->bwd.v[i];
        if (b->kind == BWD_ALLREDUCE) {
            IrValue *g = ir_value(m, b->dout);
            fprintf(f, "  all-reduce(tensor) %%%d %s  (d%%%d)%s\n", g->id, shape_str(&g->shape, ir), g->primal,
                    b->fwd < 0 ? " once per step" : "");
            continue;
        }
        if (b->kind == BWD_FORWARD) {
            fprintf(f, "  recompute %%%d = %s (as %%%d)\n", b->op->out, ir_ops[b->op->kind].name,
                    ir_op(m, b->fwd)->out);
            continue;
        }
        IrOp *op = ir_op(m, b->fwd);
        fprintf(f, "  %s.grad(%%%d)%s", ir_ops[op->kind].name, b->dout, b->rs ? " reduce-scatter(tensor)" : "");
        const char *sep = " -> ";
        for (int k = 0; k < op->nin; k++)
            if (b->din[k] >= 0) {
                IrValue *g = ir_value(m, b->din[k]);
                IrValue *pv = ir_value(m, g->primal);
                fprintf(f, "%s%%%d += d%%%d%s%s%s", sep, g->id, pv->id, pv->kind == VK_PARAM ? " " : "",
                        pv->kind == VK_PARAM ? pv->name : "", (b->gate >> k) & 1 ? " (tensor rank 0)" : "");
                sep = ", ";
            }
        fprintf(f, "    # %s:%d %s\n", op->loc.file, op->loc.line, op->scope);
    }
}
