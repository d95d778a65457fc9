/* pipeline.c: cutting the model into pipeline stages.
 *
 * Needs: the forward IR (op->stage = repetition of the @pipeline repeat, -1
 * outside it) and the backward program.
 * Guarantees: Ir.nstages = pp * virtual_stages stages, each a contiguous,
 * non-empty run of repetitions: the ops before the repeat (embedding) go to
 * the first stage, the ops after it (final norm, head, loss) to the last.
 * The cut is balanced by the cost model (forward + backward FLOPs of each
 * op from the op table): the partition minimizes the most expensive stage,
 * so an uneven split gives the extra layers to the stages without the head.
 * Every op and backward step knows its stage; each boundary carries exactly
 * one activation forward and its gradient back (the residual stream); a
 * value that would have to skip a stage is a user error. No layer is ever
 * dropped: every repetition lands in exactly one stage.
 */
#include "shardc.h"

/* FLOPs of one op's forward (bwd = 0) or backward (bwd = 1) at batch B and
 * sequence T, from the op table's arithmetic over template operands */
double ir_op_flops(const Ir *ir, const IrOp *op, int bwd, long B, long T)
{
    const char *e = bwd ? ir_ops[op->kind].flops_bwd : ir_ops[op->kind].flops_fwd;
    if (!e || !*e) return 0;
    long syms[SX_MAXSYM] = {B, T, 1, 1};
    if (ir->seq_sym > 0) syms[ir->seq_sym] = T / ir->seq_tp; /* sequence parallelism's T_tp */
    Dim n = shape_numel(&((IrValue *)ir->values.v[op->out])->shape);
    double total = 0, term = 1;
    for (const char *p = e;;) {
        double x = 0;
        if (*p == '$') {
            Dim d;
            if (p[1] == 's' && p[2] >= '0' && p[2] <= '3') {
                d = op->sz[p[2] - '0'];
                p += 3;
            } else if (p[1] == 'n') {
                d = n;
                p += 2;
            } else {
                sx_ice("bad FLOPs operand in '%s'", e);
            }
            x = (double)d.c;
            for (int i = 0; i < SX_MAXSYM; i++)
                for (int k = 0; k < d.p[i]; k++) x *= (double)syms[i];
        } else if (*p >= '0' && *p <= '9') {
            char *end;
            x = strtod(p, &end);
            p = end;
        } else {
            sx_ice("bad FLOPs expression '%s'", e);
        }
        term *= x;
        if (*p == '*') {
            p++;
            continue;
        }
        total += term;
        term = 1;
        if (*p == '+') {
            p++;
            continue;
        }
        if (*p) sx_ice("bad FLOPs expression '%s'", e);
        break;
    }
    return total;
}

static int stage_of_block(const int *first, int S, int block)
{
    int s = 0;
    while (s + 1 < S && first[s + 1] <= block) s++;
    return s;
}

int pp_partition(Program *P)
{
    Ir *ir = &P->ir;
    int S = P->layout.pp * P->layout.virtual_stages;
    if (P->layout.pp <= 1) S = 1;
    ir->nstages = S;
    ir->pp = S > 1 ? P->layout.pp : 1;
    ir->stages = sx_alloc(sizeof(IrStage) * (size_t)S);
    ir->split_backward = S > 1 && !strcmp(P->layout.schedule, "zb-h1");
    for (int i = 0; i < ir->ops.n; i++) ((IrOp *)ir->ops.v[i])->pstage = 0;
    for (int j = 0; j < ir->bwd.n; j++) ((IrBwd *)ir->bwd.v[j])->pstage = 0;
    for (int s = 0; s < S; s++) ir->stages[s].act_in = ir->stages[s].act_out = -1;
    if (S == 1) return 0;
    int L = P->layout_repeats;
    /* costs: the blocks, and what comes before (embedding) and after (head) */
    double *c = sx_alloc(sizeof(double) * (size_t)(L + 1)), pre = 0, post = 0;
    int seen_block = 0;
    long T = 128;
    const Const *seq = sema_find_const(&P->train, "seq");
    if (seq && !seq->is_float && !seq->is_str && seq->i > 0) T = (long)seq->i;
    for (int i = 0; i < ir->ops.n; i++) {
        IrOp *op = ir->ops.v[i];
        if (op->recomp) continue;
        double f = ir_op_flops(ir, op, 0, 1, T) + ir_op_flops(ir, op, 1, 1, T);
        if (op->stage >= 0) {
            c[op->stage] += f;
            seen_block = 1;
        } else if (!seen_block) {
            pre += f;
        } else {
            post += f;
        }
    }
    /* best[k][j]: the smallest possible most expensive stage when stages
     * 0..k hold blocks 0..j-1; cut[k][j] remembers the start of stage k */
    double *pref = sx_alloc(sizeof(double) * (size_t)(L + 1));
    for (int j = 0; j < L; j++) pref[j + 1] = pref[j] + c[j];
    double *best = sx_alloc(sizeof(double) * (size_t)(S * (L + 1)));
    int *cut = sx_alloc(sizeof(int) * (size_t)(S * (L + 1)));
#define BEST(k, j) best[(k) * (L + 1) + (j)]
#define CUT(k, j) cut[(k) * (L + 1) + (j)]
    for (int k = 0; k < S; k++)
        for (int j = 0; j <= L; j++) BEST(k, j) = 1e300;
    for (int j = 1; j <= L; j++) BEST(0, j) = pre + pref[j] + (S == 1 ? post : 0);
    for (int k = 1; k < S; k++)
        for (int j = k + 1; j <= L; j++)
            for (int i = k; i < j; i++) {
                double stage = pref[j] - pref[i] + (k == S - 1 ? post : 0);
                double worst = BEST(k - 1, i) > stage ? BEST(k - 1, i) : stage;
                if (worst < BEST(k, j)) {
                    BEST(k, j) = worst;
                    CUT(k, j) = i;
                }
            }
    int *first = sx_alloc(sizeof(int) * (size_t)(S + 1));
    first[S] = L;
    for (int k = S - 1, j = L; k > 0; k--) {
        first[k] = CUT(k, j);
        j = first[k];
    }
    first[0] = 0;
    for (int k = 0; k < S; k++) {
        IrStage *st = &ir->stages[k];
        st->first_block = first[k];
        st->nblocks = first[k + 1] - first[k];
        st->cost = pref[first[k + 1]] - pref[first[k]] + (k == 0 ? pre : 0) + (k == S - 1 ? post : 0);
        if (st->nblocks < 1) sx_ice("stage %d got no layer", k);
    }
#undef BEST
#undef CUT
    /* every op's stage */
    seen_block = 0;
    for (int i = 0; i < ir->ops.n; i++) {
        IrOp *op = ir->ops.v[i];
        if (op->stage >= 0) {
            op->pstage = stage_of_block(first, S, op->stage);
            seen_block = 1;
        } else {
            op->pstage = seen_block ? S - 1 : 0;
        }
    }
    /* boundaries: one activation from each stage to the next */
    for (int i = 0; i < ir->ops.n; i++) {
        IrOp *op = ir->ops.v[i];
        for (int k = 0; k < op->nin; k++) {
            IrValue *v = ir_value(ir, op->in[k]);
            if (v->def < 0) continue; /* inputs and parameters are on every stage */
            int from = ir_op(ir, v->def)->pstage, to = op->pstage;
            if (from == to) continue;
            if (to != from + 1) {
                sx_error(&op->loc, "pipeline stage %d uses %%%d %s from stage %d: a pipeline cut may "
                         "only pass values to the next stage", to, v->id, shape_str(&v->shape, ir), from);
                return 1;
            }
            IrStage *a = &ir->stages[from], *b = &ir->stages[to];
            if (a->act_out >= 0 && a->act_out != v->id) {
                sx_error(&op->loc, "the pipeline cut after stage %d would pass two values (%%%d and "
                         "%%%d); each cut passes one activation (the residual stream)", from, a->act_out, v->id);
                return 1;
            }
            if (v->dtype == DT_I32) {
                sx_error(&op->loc, "the pipeline cut after stage %d would pass an integer tensor", from);
                return 1;
            }
            a->act_out = b->act_in = v->id;
        }
    }
    for (int s = 0; s + 1 < S; s++)
        if (ir->stages[s].act_out < 0) sx_ice("stage %d passes nothing to stage %d", s, s + 1);
    /* backward steps run in their op's stage; a sum of a parameter's
     * gradient over the tensor group goes with the stage that computes it */
    for (int j = 0; j < ir->bwd.n; j++) {
        IrBwd *b = ir->bwd.v[j];
        if (b->fwd >= 0) {
            b->pstage = ir_op(ir, b->fwd)->pstage;
            continue;
        }
        int st = 0;
        for (int k = 0; k < j; k++) {
            IrBwd *w = ir->bwd.v[k];
            for (int d = 0; d < 4; d++)
                if (w->din[d] == b->dout && w->pstage > st) st = w->pstage;
        }
        b->pstage = st;
    }
    return 0;
}

void pp_dump(const Program *P, FILE *f)
{
    const Ir *ir = &P->ir;
    if (ir->nstages <= 1) return;
    double worst = 0;
    for (int s = 0; s < ir->nstages; s++)
        if (ir->stages[s].cost > worst) worst = ir->stages[s].cost;
    fprintf(f, "pipeline: %d layers in %d stages (pipeline=%d x %d virtual), balanced by FLOPs:\n",
            P->layout_repeats, ir->nstages, P->layout.pp, P->layout.virtual_stages);
    for (int s = 0; s < ir->nstages; s++) {
        const IrStage *st = &ir->stages[s];
        fprintf(f, "  stage %d (rank %d): layers %d..%d (%d)%s%s  %.0f%% of the busiest\n", s,
                s % P->layout.pp, st->first_block, st->first_block + st->nblocks - 1, st->nblocks,
                s == 0 ? " + embedding" : "", s == ir->nstages - 1 ? " + head and loss" : "",
                worst > 0 ? 100.0 * st->cost / worst : 100.0);
    }
}
