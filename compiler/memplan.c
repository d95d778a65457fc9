/* memplan.c: the static memory plan of the training step.
 *
 * Needs: the forward IR and the backward program (autodiff).
 * Guarantees: every activation, aux buffer and activation gradient gets a
 * workspace slot such that no two values whose lifetimes overlap share one;
 * lifetimes run over one timeline, forward ops then backward steps, so a
 * value saved for the backward stays alive until its last backward reader.
 * Slots hold values of one element count (a monomial in the symbolic dims),
 * so the plan is decided here and only evaluated for the run's B and T at
 * start-up: no allocation happens inside the training step. Parameters,
 * their gradients and the model inputs live outside the workspace.
 */
#include "shardc.h"

static int in_workspace(const Ir *ir, const IrValue *v)
{
    if (v->kind == VK_OP || v->kind == VK_AUX) return 1;
    if (v->kind == VK_GRAD) {
        const IrValue *p = ir->values.v[v->primal];
        return p->kind != VK_PARAM;
    }
    return 0;
}

static void touch(int *first, int *last, int v, int t)
{
    if (first[v] < 0 || t < first[v]) first[v] = t;
    if (t > last[v]) last[v] = t;
}

int mp_plan(Program *P)
{
    Ir *ir = &P->ir;
    int nv = ir->values.n, nf = ir->ops.n;
    int *first = sx_alloc(sizeof(int) * (size_t)nv), *last = sx_alloc(sizeof(int) * (size_t)nv);
    for (int i = 0; i < nv; i++) first[i] = last[i] = -1;
    for (int t = 0; t < nf; t++) {
        IrOp *op = ir->ops.v[t];
        for (int k = 0; k < op->nin; k++) touch(first, last, op->in[k], t);
        touch(first, last, op->out, t);
        for (int a = 0; a < ir_ops[op->kind].naux; a++) touch(first, last, op->aux[a], t);
    }
    touch(first, last, ir->output, nf); /* the loss is read after the forward */
    for (int i = 0; i < ir->ops.n; i++) {
        IrOp *op = ir->ops.v[i];
        if (op->kind == OP_CROSS_ENTROPY || op->kind == OP_CROSS_ENTROPY_VP)
            touch(first, last, op->in[0], nf); /* logits, for sampling */
    }
    if (ir->seed >= 0 && ir->bwd.n) touch(first, last, ir->seed, nf);
    for (int j = 0; j < ir->bwd.n; j++) {
        IrBwd *b = ir->bwd.v[j];
        int t = nf + j;
        if (b->kind == BWD_ALLREDUCE) {
            touch(first, last, b->dout, t);
            continue;
        }
        IrOp *op = ir->ops.v[b->fwd];
        unsigned u = ad_template_uses(ir_ops[op->kind].bwd);
        for (int k = 0; k < op->nin; k++)
            if (u & (1u << k)) touch(first, last, op->in[k], t);
        if (u & (1u << 4)) touch(first, last, op->out, t);
        for (int a = 0; a < 2; a++)
            if (u & (1u << (5 + a))) touch(first, last, op->aux[a], t);
        touch(first, last, b->dout, t);
        for (int k = 0; k < 4; k++)
            if (b->din[k] >= 0) touch(first, last, b->din[k], t);
    }
    /* greedy: values by start time; reuse a free slot of the same size */
    int *order = sx_alloc(sizeof(int) * (size_t)nv);
    int n = 0;
    for (int i = 0; i < nv; i++) {
        IrValue *v = ir->values.v[i];
        v->slot = -1;
        if (in_workspace(ir, v) && first[i] >= 0) order[n++] = i;
    }
    for (int i = 1; i < n; i++) { /* insertion sort by start, stable */
        int x = order[i], j = i - 1;
        while (j >= 0 && first[order[j]] > first[x]) {
            order[j + 1] = order[j];
            j--;
        }
        order[j + 1] = x;
    }
    Dim *size = sx_alloc(sizeof(Dim) * (size_t)(n + 1));
    int *busy_until = sx_alloc(sizeof(int) * (size_t)(n + 1));
    int ns = 0;
    for (int i = 0; i < n; i++) {
        IrValue *v = ir->values.v[order[i]];
        Dim el = shape_numel(&v->shape);
        int s = -1;
        for (int k = 0; k < ns && s < 0; k++)
            if (busy_until[k] < first[v->id] && dim_eq(size[k], el)) s = k;
        if (s < 0) {
            s = ns++;
            size[s] = el;
        }
        busy_until[s] = last[v->id];
        v->slot = s;
    }
    ir->nslots = ns;
    ir->slot_elems = size;
    return 0;
}

void mp_dump(const Ir *ir, FILE *f)
{
    fprintf(f, "workspace: %d slots\n", ir->nslots);
    for (int s = 0; s < ir->nslots; s++) {
        fprintf(f, "  slot %d: %s x 4 bytes:", s, dim_str(ir->slot_elems[s], ir));
        for (int i = 0; i < ir->values.n; i++) {
            IrValue *v = ir->values.v[i];
            if (v->slot == s) fprintf(f, " %%%d", v->id);
        }
        fprintf(f, "\n");
    }
}
