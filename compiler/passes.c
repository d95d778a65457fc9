/* passes.c: the pass list, in one place (as QBE keeps it).
 *
 * The front end runs on a loaded program: resolve, elaborate with shapes,
 * shard; the IR verifier runs after each pass that changes the IR, and
 * `dump` names the pass after which the IR is printed.
 */
#include "shardc.h"

int drv_front(Program *P, const char *dump, FILE *out)
{
    if (sx_error_count()) return 1;
    if (sema_check(P)) return 1;
    if (shard_layout(P)) return 1;
    if (shape_elaborate(P)) return 1;
    ir_verify(&P->ir, "shape");
    if (dump && !strcmp(dump, "shape")) ir_dump(&P->ir, out);
    if (shard_check(P)) return 1;
    if (dump && !strcmp(dump, "shard")) shard_dump(P, out);
    if (shard_lower(P)) return 1;
    ir_verify(&P->ir, "shard");
    if (dump && !strcmp(dump, "shard")) ir_dump(&P->ir, out);
    return 0;
}

/* the back end: fold slices into attention, differentiate, recompute, cut the
 * pipeline, alias gradients, fuse the loss's backward into its forward, plan
 * memory (code generation is the caller's) */
int drv_back(Program *P, const char *dump, FILE *out)
{
    if (qp_pack(P)) return 1;
    ir_verify(&P->ir, "qkvpack");
    if (ad_differentiate(P)) return 1;
    ir_verify(&P->ir, "autodiff");
    if (dump && !strcmp(dump, "autodiff")) {
        ir_dump(&P->ir, out);
        ad_dump(&P->ir, out);
    }
    if (rc_recompute(P)) return 1;
    ir_verify(&P->ir, "recompute");
    if (pp_partition(P)) return 1;
    if (dump && !strcmp(dump, "pipeline")) pp_dump(P, out);
    if (ga_alias(P)) return 1;
    ir_verify(&P->ir, "gradalias");
    if (lf_fuse(P)) return 1;
    ir_verify(&P->ir, "lossfuse");
    if (mp_plan(P)) return 1;
    if (dump && !strcmp(dump, "memplan")) mp_dump(&P->ir, out);
    return 0;
}
