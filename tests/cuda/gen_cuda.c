/* gen_cuda.c: a small driver for the CUDA back end's tests: runs the
 * compiler's passes on a .model file and writes the CUDA source (cg_cuda),
 * optionally the host C source (cg_host) of the same program, and optionally
 * builds the CUDA source (drv_build_cuda). It stands in for
 * `shardc build --backend cuda` so these tests do not depend on the driver.
 *
 *   gen_cuda FILE.model [--cuda OUT.cu] [--host OUT.c] [--bf16] [--tp N] [--pp N]
 *            [--microbatches M] [--recompute] [--sequence-parallel] [--set NAME=VALUE] [-I DIR]
 *            [--build BIN [--emulate] [--arch 80,90]]
 */
#include "codegen_cuda.h"

#ifndef GEN_STDLIB_DIR
#define GEN_STDLIB_DIR ""
#endif

static int usage(void)
{
    fprintf(stderr, "usage: gen_cuda FILE.model [--cuda OUT.cu] [--host OUT.c] [--bf16] [--tp N] [--pp N] "
                    "[--microbatches M] [--recompute] [--sequence-parallel] [--set N=V] [-I DIR] [--build BIN [--emulate] [--arch LIST]]\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *cu = NULL, *c = NULL, *bin = NULL, *arch = NULL;
    int bf16 = 0, emulate = 0;
    Program *P = sx_alloc(sizeof *P);
    P->ir.output = -1;
    P->layout.cli_recompute = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--bf16")) bf16 = 1;
        else if (!strcmp(a, "--emulate")) emulate = 1;
        else if (!strcmp(a, "--recompute")) P->layout.cli_recompute = 1;
        else if (!strcmp(a, "--sequence-parallel")) P->layout.cli_sp = 1;
        else if (i + 1 < argc && !strcmp(a, "--pp")) P->layout.cli_pp = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--microbatches")) P->layout.cli_mb = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--schedule")) P->layout.cli_sched = argv[++i];
        else if (i + 1 < argc && !strcmp(a, "--cuda")) cu = argv[++i];
        else if (i + 1 < argc && !strcmp(a, "--host")) c = argv[++i];
        else if (i + 1 < argc && !strcmp(a, "--build")) bin = argv[++i];
        else if (i + 1 < argc && !strcmp(a, "--arch")) arch = argv[++i];
        else if (i + 1 < argc && !strcmp(a, "-I")) vec_push(&P->search_dirs, argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--tp")) P->layout.cli_tp = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--set")) {
            const char *v = argv[++i], *eq = strchr(v, '=');
            if (!eq) return usage();
            Override *o = sx_alloc(sizeof *o);
            o->name = sx_strndup(v, (size_t)(eq - v));
            o->value = sx_strdup(eq + 1);
            o->origin = "--set";
            vec_push(&P->overrides, o);
        } else if (a[0] != '-' && !model) model = a;
        else return usage();
    }
    if (!model) return usage();
    const char *env = getenv("SHARDC_STDLIB");
    if (env && *env) vec_push(&P->search_dirs, (void *)env);
    if (*GEN_STDLIB_DIR) vec_push(&P->search_dirs, GEN_STDLIB_DIR);
    if (sema_load(P, model) || drv_front(P, NULL, stdout) || drv_back(P, NULL, stdout)) return 1;
    if (c) {
        FILE *f = fopen(c, "w");
        if (!f || cg_host(P, f, model) || fclose(f)) return 1;
    }
    if (cu) {
        FILE *f = fopen(cu, "w");
        if (!f || cg_cuda(P, f, model, bf16) || fclose(f)) return 1;
        if (bin && drv_build_cuda(P, cu, bin, arch, emulate)) return 1;
    }
    sx_arena_free();
    return 0;
}
