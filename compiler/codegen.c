/* codegen.c: what the two code generators (codegen_host.c, codegen_cuda.c)
 * decide alike about the backward program and the pipeline boundaries. One
 * copy here, so that a host program and a CUDA program built from the same
 * IR cannot disagree on which collectives a backward issues, where the
 * data-parallel grad_ready hook fires, or how large a boundary transfer is.
 *
 * Needs: the backward program (autodiff.c, recompute.c) and the stage cut
 * (pipeline.c).
 * Guarantees: functions of the IR only; cg_emit_tp_partial_grads writes one
 * C (and C++) definition that both back ends reference from sr_program.
 */
#include "shardc.h"

int cg_step_sum(const IrBwd *b)
{
    return b->kind == BWD_ALLREDUCE && b->fwd < 0;
}

int *cg_last_grad_steps(Ir *ir)
{
    int *last = sx_alloc(sizeof(int) * (size_t)(ir->params.n + 1));
    for (int i = 0; i < ir->params.n; i++) last[i] = -1;
    for (int j = 0; j < ir->bwd.n; j++) {
        IrBwd *b = ir->bwd.v[j];
        if (cg_step_sum(b)) continue; /* after the step's last backward, not in it */
        int gs[5] = {b->din[0], b->din[1], b->din[2], b->din[3], b->kind == BWD_ALLREDUCE ? b->dout : -1};
        for (int k = 0; k < 5; k++) {
            if (gs[k] < 0) continue;
            IrValue *pv = ir_value(ir, ir_value(ir, gs[k])->primal);
            if (pv->kind == VK_PARAM) last[pv->param] = j;
        }
    }
    return last;
}

int cg_emit_tp_partial_grads(Ir *ir, FILE *f)
{
    int n = 0;
    fprintf(f, "\n/* sequence parallelism: parameter gradients the runtime sums over the tensor group\n"
               " * once per step, after the microbatches */\n");
    fprintf(f, "static const int tp_partial_grads[] = {");
    for (int j = 0; j < ir->bwd.n; j++) {
        IrBwd *b = ir->bwd.v[j];
        if (cg_step_sum(b)) fprintf(f, "%s%d", n++ ? ", " : "", ir_value(ir, ir_value(ir, b->dout)->primal)->param);
    }
    fprintf(f, "%s};\n", n ? "" : "-1");
    return n;
}

int64_t cg_row_floats(Ir *ir, int id, int tp)
{
    Dim n = shape_numel(&ir_value(ir, id)->shape);
    /* split along the sequence: B * T/tp tokens of n.c floats = n.c/tp per token */
    if (ir->seq_sym > 0 && n.p[0] == 1 && n.p[ir->seq_sym] == 1 && !n.p[1] && n.c % tp == 0) return n.c / tp;
    if (n.p[0] != 1 || n.p[1] != 1) sx_ice("boundary activation %%%d is not per token", id);
    return n.c;
}
