/* memplan.c: the static memory plan of the training step.
 *
 * Needs: the forward IR, the backward program (autodiff) and the stage of
 * every op and step (pipeline.c; one stage without a pipeline).
 * Guarantees: in each stage, every activation, aux buffer and activation
 * gradient gets a workspace slot such that no two values whose lifetimes
 * overlap share one; lifetimes run over one timeline per stage (forward
 * ops, then backward steps, and with a pipeline the weight-gradient pass
 * again, which zb-h1 runs separately), so a value saved for the backward
 * stays alive until its last reader. Slots hold values of one element count
 * (a monomial in the symbolic dims), so the plan is decided here and only
 * evaluated for the run's B and T at start-up: no allocation happens inside
 * the training step. With a pipeline, a rank holds several microbatches
 * between their forward and backward, but runs one pass (a forward, a
 * backward, a W) at a time: values that live across the end of a pass
 * (saved for the backward, the sent activation, the loss) get slots of
 * their own, one set per microbatch in flight; the rest share one scratch
 * set per rank. Without a pipeline every slot is one plan (nkept = nslots).
 * Parameters, their gradients, the model inputs and the pipeline boundary
 * buffers (received activations, received and sent gradients) live outside
 * the workspace.
 */
#include <limits.h>

#include "shardc.h"

int mp_home(const Ir *ir, const IrValue *v)
{
    if (v->kind == VK_OP || v->kind == VK_AUX) return ((IrOp *)ir->ops.v[v->def])->pstage;
    if (v->kind != VK_GRAD) return -1;
    const IrValue *p = ir->values.v[v->primal];
    if (p->kind == VK_PARAM || p->kind == VK_INPUT) return -1;
    int s = ((IrOp *)ir->ops.v[p->def])->pstage;
    /* the gradient of a boundary activation is a runtime buffer */
    if (ir->stages[s].act_out == p->id) return -1;
    return s;
}

static void touch(int *first, int *last, int v, int t)
{
    if (first[v] < 0 || t < first[v]) first[v] = t;
    if (t > last[v]) last[v] = t;
}

/* times of the steps that read and write each value in stage s */
void mp_timeline(Ir *ir, int s, int *first, int *last, int ends[2])
{
    int t = 0;
    ends[1] = INT_MAX;
    for (int i = 0; i < ir->values.n; i++) first[i] = last[i] = -1;
    for (int i = 0; i < ir->ops.n; i++) {
        IrOp *op = ir->ops.v[i];
        if (op->pstage != s || op->recomp) continue;
        for (int k = 0; k < op->nin; k++) touch(first, last, op->in[k], t);
        touch(first, last, op->out, t);
        for (int a = 0; a < ir_ops[op->kind].naux; a++) touch(first, last, op->aux[a], t);
        t++;
    }
    /* the loss is read after the forward; the logits too, for sampling */
    if (s == ir->nstages - 1) {
        touch(first, last, ir->output, t);
        for (int i = 0; i < ir->ops.n; i++) {
            IrOp *op = ir->ops.v[i];
            if (op->kind == OP_CROSS_ENTROPY || op->kind == OP_CROSS_ENTROPY_VP) touch(first, last, op->in[0], t);
        }
        if (ir->seed >= 0 && ir->bwd.n) touch(first, last, ir->seed, t);
    }
    if (s < ir->nstages - 1) touch(first, last, ir->stages[s].act_out, t); /* sent after forward */
    ends[0] = t++;
    /* the backward, and for zb-h1 its B pass then its W pass, each with the
     * steps the generated code runs in it (cg_step_runs): a value only B
     * reads dies in B, what W reads stays alive until W */
    int split = ir->nstages > 1 && ir->split_backward;
    for (int pass = 0; pass < 1 + split; pass++) {
        int mode = !split ? BW_FULL : pass ? BW_WEIGHT : BW_INPUT;
        if (pass) ends[1] = t;
        for (int j = 0; j < ir->bwd.n; j++, t++) {
            IrBwd *b = ir->bwd.v[j];
            if (b->pstage != s || !cg_step_runs(ir, b, mode)) continue;
            if (b->kind == BWD_ALLREDUCE) {
                touch(first, last, b->dout, t);
                continue;
            }
            IrOp *op = BWD_OP(ir, b);
            if (b->kind == BWD_FORWARD) {
                for (int k = 0; k < op->nin; k++) touch(first, last, op->in[k], t);
                touch(first, last, op->out, t);
                for (int a = 0; a < ir_ops[op->kind].naux; a++) touch(first, last, op->aux[a], t);
                continue;
            }
            unsigned u = ad_template_uses(cg_bwd_template(b, op, 0));
            for (int k = 0; k < op->nin; k++)
                if (u & (1u << k)) touch(first, last, op->in[k], t);
            if (u & (1u << 4)) touch(first, last, op->out, t);
            for (int a = 0; a < 2; a++)
                if (u & (1u << (5 + a))) touch(first, last, op->aux[a], t);
            touch(first, last, b->dout, t);
            for (int k = 0; k < 4; k++) /* W leaves the activation gradients out */
                if (b->din[k] >= 0 && mode != BW_WEIGHT) touch(first, last, b->din[k], t);
        }
    }
    /* at dropout rate 0 a viewed gradient is read from d(out)'s storage (gradalias.c) */
    for (int d = 0; ir->rate0_view && d < ir->values.n; d++) {
        int o = ir->rate0_view[d];
        if (o >= 0 && last[d] > last[o]) last[o] = last[d];
    }
}

/* greedy, values by start time: each takes a free slot of its size among
 * those from ns on (one whose last value ended before it starts) or a new
 * one; with `kept`, only the values with kept[i] == want; returns the slot
 * count */
static int assign(Ir *ir, const int *order, int n, const int *first, const int *last, const char *kept, int want,
                  Dim *size, int *busy_until, int ns)
{
    int base = ns;
    for (int i = 0; i < n; i++) {
        IrValue *v = ir->values.v[order[i]];
        if (kept && kept[v->id] != want) continue;
        Dim el = shape_numel(&v->shape);
        int sl = -1;
        for (int k = base; k < ns && sl < 0; k++)
            if (busy_until[k] < first[v->id] && dim_eq(size[k], el)) sl = k;
        if (sl < 0) {
            sl = ns++;
            size[sl] = el;
        }
        busy_until[sl] = last[v->id];
        v->slot = sl;
    }
    return ns;
}

static void plan_stage(Ir *ir, int s)
{
    int nv = ir->values.n, ends[2];
    int *first = sx_alloc(sizeof(int) * (size_t)nv), *last = sx_alloc(sizeof(int) * (size_t)nv);
    mp_timeline(ir, s, first, last, ends);
    int *order = sx_alloc(sizeof(int) * (size_t)nv);
    int n = 0;
    for (int i = 0; i < nv; i++) {
        IrValue *v = ir->values.v[i];
        if (mp_home(ir, v) == s && first[i] >= 0) order[n++] = i;
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
    IrStage *st = &ir->stages[s];
    if (ir->nstages == 1) {
        st->nslots = st->nkept = assign(ir, order, n, first, last, NULL, 0, size, busy_until, 0);
    } else {
        /* kept: alive at the end of a pass (its first touch before it, its
         * last at or after it) */
        char *kept = sx_alloc((size_t)nv);
        for (int i = 0; i < n; i++) {
            int v = order[i];
            for (int e = 0; e < 2; e++) kept[v] |= first[v] < ends[e] && last[v] >= ends[e];
        }
        st->nkept = assign(ir, order, n, first, last, kept, 1, size, busy_until, 0);
        /* a value of one pass may also use a gap in a kept slot: the slot
         * is the microbatch's own (in the backward, mostly gradients in the
         * room of saved values that have died) */
        int *head = sx_alloc(sizeof(int) * (size_t)(st->nkept + 1)), *next = sx_alloc(sizeof(int) * (size_t)nv);
        for (int k = 0; k < st->nkept; k++) head[k] = -1;
        for (int i = 0; i < n; i++) {
            int v = order[i], k = ((IrValue *)ir->values.v[v])->slot;
            if (!kept[v]) continue;
            next[v] = head[k];
            head[k] = v;
        }
        for (int i = 0; i < n; i++) {
            IrValue *v = ir->values.v[order[i]];
            if (kept[v->id]) continue;
            Dim el = shape_numel(&v->shape);
            for (int k = 0; k < st->nkept && !kept[v->id]; k++) {
                if (!dim_eq(size[k], el)) continue;
                int clash = 0;
                for (int u = head[k]; u >= 0 && !clash; u = next[u])
                    clash = first[u] <= last[v->id] && first[v->id] <= last[u];
                if (clash) continue;
                v->slot = k;
                next[v->id] = head[k];
                head[k] = v->id;
                kept[v->id] = 2; /* placed */
            }
        }
        st->nslots = assign(ir, order, n, first, last, kept, 0, size, busy_until, st->nkept);
    }
    st->slot_elems = size;
}

int mp_plan(Program *P)
{
    Ir *ir = &P->ir;
    if (ir->nstages < 1 || !ir->stages) sx_ice("memplan before the pipeline partition");
    for (int i = 0; i < ir->values.n; i++) ((IrValue *)ir->values.v[i])->slot = -1;
    for (int s = 0; s < ir->nstages; s++) plan_stage(ir, s);
    ir->nslots = ir->stages[0].nslots;
    ir->slot_elems = ir->stages[0].slot_elems;
    return 0;
}

void mp_dump(const Ir *ir, FILE *f)
{
    for (int s = 0; s < ir->nstages; s++) {
        const IrStage *st = &ir->stages[s];
        fprintf(f, "workspace%s: %d slots\n", ir->nstages > 1 ? sx_fmt(" of stage %d", s) : "", st->nslots);
        for (int k = 0; k < st->nslots; k++) {
            fprintf(f, "  slot %d%s: %s x 4 bytes:", k, k >= st->nkept ? " (scratch)" : "",
                    dim_str(st->slot_elems[k], ir));
            for (int i = 0; i < ir->values.n; i++) {
                IrValue *v = ir->values.v[i];
                if (v->slot == k && mp_home(ir, v) == s) fprintf(f, " %%%d", v->id);
            }
            fprintf(f, "\n");
        }
    }
}
