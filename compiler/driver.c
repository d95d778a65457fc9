/* driver.c: the shardc command line and the pass list.
 *
 * The passes run in one place (run_front, run_back), with the IR verifier
 * between them and --dump=PASS printing the IR after any of them.
 */
#include "shardc.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codegen_cuda.h"
#include "plan.h"
#include "sr_json.h"

int timeline_main(int argc, char **argv);
int tokenize_main(int argc, char **argv);


typedef struct Opts {
    const char *cmd;
    const char *file;
    const char *out;
    const char *dump;
    const char *backend;
    const char *emit_src;
    const char *cuda_arch;
    int fp32;          /* --precision fp32 (CUDA; the host backend is fp32) */
    int cuda_emulate;  /* build the CUDA program against the CPU emulator */
    int params;
    int max_errors;
} Opts;

static const char *prog_name = "shardc";

static void usage_main(FILE *f)
{
    fprintf(f,
            "usage: shardc COMMAND FILE.model [options]\n"
            "\n"
            "shardc compiles a model and its parallel layout into a training program.\n"
            "\n"
            "commands:\n"
            "  check     parse, resolve, infer every shape and check the parallel layout\n"
            "  build     compile to a training program (C + libshardrt)\n"
            "  plan      memory, FLOPs, communication and bubble per rank; --search for layouts\n"
            "  timeline  draw a run's pipeline traces (--trace DIR) as an SVG Gantt chart\n"
            "  tokenize  text files into an llm.c token file with a byte-level BPE tokenizer\n"
            "\n"
            "options:\n"
            "  -h, --help      show this help (shardc COMMAND --help for a command's options)\n"
            "  --version       print the version\n");
}

static void usage_cmd(FILE *f, const char *cmd)
{
    if (!strcmp(cmd, "check")) {
        fprintf(f,
                "usage: shardc check FILE.model [options]\n"
                "\n"
                "Parses FILE.model and its imports, resolves names, infers the shape of every\n"
                "tensor and checks the parallel layout. Exit 0 if the file is good, 1 with\n"
                "diagnostics if not, 2 on a usage error.\n"
                "\n");
    } else {
        fprintf(f,
                "usage: shardc build FILE.model -o BIN [options]\n"
                "\n"
                "Compiles FILE.model into the training program BIN.\n"
                "\n"
                "  -o BIN               output program\n"
                "  --backend host|cuda  code generator: host (C + OpenBLAS + MPI), or cuda (CUDA +\n"
                "                       cuBLASLt + NCCL, built with nvcc; one rank per GPU)\n"
                "  --precision bf16|fp32  cuda: bf16 compute with fp32 master weights (default), or fp32\n"
                "  --cuda-arch 80,90    cuda: GPU architectures to build for\n"
                "  --cuda-emulate       cuda: build against the CPU emulator instead of nvcc (testing)\n"
                "  --emit-src DIR       keep the generated source in DIR\n"
                "\n");
    }
    fprintf(f,
            "  --set NAME=VALUE     override a constant of the config (or parallel/train) section\n"
            "  --config FILE.json   override config constants from a JSON object (a nested\n"
            "                       object sets dotted names: rope_scaling.factor)\n"
            "                       (a Hugging Face config.json works; unknown keys are ignored)\n"
            "  --params             list every parameter with its name, shape and count\n"
            "  --dp N, --tp N, --pp N, --microbatches M, --schedule S, --virtual-stages V\n"
            "                       the layout, instead of the file's parallel section (build\n"
            "                       compiles tensor and pipeline splits into the program)\n"
            "  --recompute block|none  build: recompute each block's activations in the backward\n"
            "  --sequence-parallel  with --tp: split activations outside attention and MLP along the\n"
            "                       sequence (reduce-scatter and all-gather instead of all-reduce)\n"
            "  --dump=PASS          print the IR after PASS (shape, shard; build: autodiff, pipeline,\n"
            "                       memplan)\n"
            "  -I DIR               also look for imported modules in DIR\n"
            "  --max-errors N       stop after N errors (default 50)\n"
            "  -h, --help           show this help\n");
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "%s: error: ", prog_name);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\ntry '%s --help'\n", prog_name);
    return 2;
}

static int parse_pos_int(const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < 1 || v > (1 << 20)) return -1;
    *out = (int)v;
    return 0;
}

#ifndef SHARDC_RUNTIME_INCLUDE
#define SHARDC_RUNTIME_INCLUDE ""
#endif
#ifndef SHARDC_RUNTIME_LIB
#define SHARDC_RUNTIME_LIB ""
#endif
#ifndef SHARDC_CC
#define SHARDC_CC "mpicc"
#endif
#ifndef SHARDC_MPI_LIBS
#define SHARDC_MPI_LIBS ""
#endif
#ifndef SHARDC_RUNTIME_EXTRA_LIBS
#define SHARDC_RUNTIME_EXTRA_LIBS ""
#endif

static int file_exists(const char *p) { return access(p, R_OK) == 0; }

/* shardc build: back end, C source, then the system C compiler */
static int build(Program *P, const Opts *o)
{
    if (!o->out) {
        fprintf(stderr, "shardc: error: build needs an output: -o BIN\ntry 'shardc build --help'\n");
        return 2;
    }
    { /* the output's directory, before minutes of compiling end in a linker's error */
        const char *slash = strrchr(o->out, '/');
        char *odir = slash ? sx_fmt("%.*s", (int)(slash - o->out) + (slash == o->out), o->out) : ".";
        struct stat st;
        const char *why = stat(odir, &st) != 0     ? "does not exist; create it first"
                          : !S_ISDIR(st.st_mode)   ? "is not a directory"
                          : access(odir, W_OK) != 0 ? "is not writable"
                                                    : NULL;
        if (why) {
            fprintf(stderr, "shardc: error: -o %s: %s %s\n", o->out, odir, why);
            return 2;
        }
    }
    if (drv_back(P, o->dump, stdout)) return 1;
    /* the cut is the compiler's decision: show it (uneven splits included) */
    if (P->ir.nstages > 1 && !(o->dump && !strcmp(o->dump, "pipeline"))) pp_dump(P, stderr);
    const char *dir = o->emit_src;
    char tmpl[] = "/tmp/shardc-XXXXXX";
    if (!dir) {
        dir = mkdtemp(tmpl);
        if (!dir) {
            fprintf(stderr, "shardc: error: cannot make a temporary directory: %s\n", strerror(errno));
            return 1;
        }
    } else if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "shardc: error: --emit-src %s: %s\n", dir, strerror(errno));
        return 1;
    }
    const char *base = strrchr(o->out, '/') ? strrchr(o->out, '/') + 1 : o->out;
    if (o->backend && !strcmp(o->backend, "cuda")) {
        /* CUDA: one .cu file, built by nvcc (or against the CPU emulator) */
        char *cu = sx_fmt("%s/%s.cu", dir, base);
        FILE *cf = fopen(cu, "w");
        int crc = !cf || cg_cuda(P, cf, o->file, !o->fp32);
        if (cf && fclose(cf) != 0) crc = 1;
        if (!cf) fprintf(stderr, "shardc: error: cannot write %s: %s\n", cu, strerror(errno));
        if (!crc) crc = drv_build_cuda(P, cu, o->out, o->cuda_arch, o->cuda_emulate);
        if (!o->emit_src) {
            unlink(cu);
            rmdir(dir);
        }
        return crc ? 1 : 0;
    }
    char *csrc = sx_fmt("%s/%s.c", dir, base);
    FILE *f = fopen(csrc, "w");
    if (!f) {
        fprintf(stderr, "shardc: error: cannot write %s: %s\n", csrc, strerror(errno));
        return 1;
    }
    int rc = cg_host(P, f, o->file);
    if (fclose(f) != 0 && !rc) {
        fprintf(stderr, "shardc: error: cannot write %s\n", csrc);
        rc = 1;
    }
    if (rc) return rc;
    const char *inc = getenv("SHARDC_RUNTIME_INCLUDE") ? getenv("SHARDC_RUNTIME_INCLUDE") : SHARDC_RUNTIME_INCLUDE;
    const char *lib = getenv("SHARDC_RUNTIME_LIB") ? getenv("SHARDC_RUNTIME_LIB") : SHARDC_RUNTIME_LIB;
    if (!file_exists(lib)) {
        fprintf(stderr, "shardc: error: the runtime library %s is missing (build it, or set "
                "SHARDC_RUNTIME_LIB)\n", lib);
        return 1;
    }
    const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : SHARDC_CC;
    /* a compiler other than the MPI wrapper does not add MPI: libshardrt's */
    int plain_cc = strcmp(cc, SHARDC_CC) != 0;
    char *argv[40];
    int n = 0;
    argv[n++] = (char *)cc;
    argv[n++] = "-std=c11";
    argv[n++] = "-O2";
    argv[n++] = "-Wall";
    argv[n++] = "-Wextra";
    argv[n++] = "-Werror";
    argv[n++] = "-fopenmp";
    argv[n++] = sx_fmt("-I%s", inc);
    argv[n++] = csrc;
    argv[n++] = (char *)lib;
    /* the runtime's own dependencies (NCCL where it was built with it) */
    char *extra = sx_strdup(SHARDC_RUNTIME_EXTRA_LIBS);
    for (char *tok = strtok(extra, " "); tok && n < 24; tok = strtok(NULL, " ")) argv[n++] = tok;
    char *mpi = sx_strdup(plain_cc ? SHARDC_MPI_LIBS : "");
    for (char *tok = strtok(mpi, " "); tok && n < 32; tok = strtok(NULL, " ")) argv[n++] = tok;
    argv[n++] = "-lopenblas";
    argv[n++] = "-lm";
    argv[n++] = "-o";
    argv[n++] = (char *)o->out;
    argv[n] = NULL;
    int st = drv_run_cmd(argv);
    if (st != 0) {
        fprintf(stderr, "shardc: error: the C compiler failed on %s (exit %d)%s\n", csrc, st,
                o->emit_src ? "" : "; keep the source with --emit-src DIR");
        return 1;
    }
    if (!o->emit_src) {
        unlink(csrc);
        rmdir(dir);
    }
    return 0;
}

int main(int argc, char **argv)
{
    Opts o;
    memset(&o, 0, sizeof o);
    o.max_errors = 50;
    Program *P = sx_alloc(sizeof *P);
    P->ir.output = -1;
    P->layout.cli_recompute = -1;
    if (argc < 2) {
        usage_main(stderr);
        return 2;
    }
    const char *a1 = argv[1];
    if (!strcmp(a1, "-h") || !strcmp(a1, "--help")) {
        usage_main(stdout);
        return 0;
    }
    if (!strcmp(a1, "--version")) {
        printf("shardc %s\n", SHARDC_VERSION);
        return 0;
    }
    if (!strcmp(a1, "plan")) return plan_main(argc - 1, argv + 1);
    if (!strcmp(a1, "timeline")) return timeline_main(argc - 1, argv + 1);
    if (!strcmp(a1, "tokenize")) return tokenize_main(argc - 1, argv + 1);
    if (strcmp(a1, "check") && strcmp(a1, "build"))
        return usage_error(a1[0] == '-' ? "unknown option '%s'" : "unknown command '%s'", a1);
    o.cmd = a1;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        /* options with a value accept `--opt v` and `--opt=v` */
#define TAKE(name)                                                                   \
    (!strcmp(a, name) ? (i + 1 < argc ? (val = argv[++i], 1)                          \
                                      : (usage_error("option '%s' needs a value", a), -1)) \
     : (!strncmp(a, name "=", strlen(name) + 1) ? (val = a + strlen(name) + 1, 1) : 0))
        int t;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage_cmd(stdout, o.cmd);
            return 0;
        } else if (!strcmp(a, "--params")) {
            o.params = 1;
        } else if ((t = TAKE("--set"))) {
            if (t < 0) return 2;
            const char *eq = strchr(val, '=');
            if (!eq || eq == val) return usage_error("--set expects NAME=VALUE, got '%s'", val);
            Override *ov = sx_alloc(sizeof *ov);
            ov->name = sx_strndup(val, (size_t)(eq - val));
            ov->value = sx_strdup(eq + 1);
            ov->origin = "--set";
            vec_push(&P->overrides, ov);
        } else if ((t = TAKE("--config"))) {
            if (t < 0) return 2;
            if (drv_load_json_config(P, val)) return 1;
        } else if ((t = TAKE("--dump"))) {
            if (t < 0) return 2;
            if (strcmp(val, "shape") && strcmp(val, "shard") && strcmp(val, "autodiff") &&
                strcmp(val, "pipeline") && strcmp(val, "memplan"))
                return usage_error("unknown pass '%s' for --dump (use shape, shard, autodiff, pipeline or "
                                   "memplan)", val);
            o.dump = val;
        } else if ((t = TAKE("-I"))) {
            if (t < 0) return 2;
            vec_push(&P->search_dirs, (void *)val);
        } else if ((t = TAKE("--max-errors"))) {
            if (t < 0) return 2;
            if (parse_pos_int(val, &o.max_errors)) return usage_error("bad --max-errors value '%s'", val);
        } else if ((t = TAKE("--dp")) || (t = TAKE("--tp")) || (t = TAKE("--pp")) ||
                   (t = TAKE("--microbatches")) || (t = TAKE("--virtual-stages"))) {
            if (t < 0) return 2;
            int v;
            if (parse_pos_int(val, &v)) return usage_error("expected a positive integer, got '%s'", val);
            const char *nm = argv[i][0] == '-' ? argv[i] : argv[i - 1];
            if (!strncmp(nm, "--dp", 4)) P->layout.cli_dp = v;
            else if (!strncmp(nm, "--tp", 4)) P->layout.cli_tp = v;
            else if (!strncmp(nm, "--pp", 4)) P->layout.cli_pp = v;
            else if (!strncmp(nm, "--virtual-stages", 16)) P->layout.cli_vs = v;
            else P->layout.cli_mb = v;
        } else if ((t = TAKE("--schedule"))) {
            if (t < 0) return 2;
            P->layout.cli_sched = val;
        } else if (!strcmp(a, "--sequence-parallel")) {
            P->layout.cli_sp = 1;
        } else if ((t = TAKE("--recompute"))) {
            if (t < 0) return 2;
            if (strcmp(val, "block") && strcmp(val, "none"))
                return usage_error("--recompute takes block or none, got '%s'", val);
            P->layout.cli_recompute = !strcmp(val, "block");
        } else if (!strcmp(o.cmd, "build") && (t = TAKE("-o"))) {
            if (t < 0) return 2;
            o.out = val;
        } else if (!strcmp(o.cmd, "build") && (t = TAKE("--backend"))) {
            if (t < 0) return 2;
            if (strcmp(val, "host") && strcmp(val, "cuda"))
                return usage_error("unknown backend '%s' (use host or cuda)", val);
            o.backend = val;
        } else if (!strcmp(o.cmd, "build") && (t = TAKE("--precision"))) {
            if (t < 0) return 2;
            if (strcmp(val, "bf16") && strcmp(val, "fp32"))
                return usage_error("unknown precision '%s' (use bf16 or fp32)", val);
            o.fp32 = !strcmp(val, "fp32");
        } else if (!strcmp(o.cmd, "build") && (t = TAKE("--cuda-arch"))) {
            if (t < 0) return 2;
            o.cuda_arch = val;
        } else if (!strcmp(o.cmd, "build") && !strcmp(a, "--cuda-emulate")) {
            o.cuda_emulate = 1;
        } else if (!strcmp(o.cmd, "build") && (t = TAKE("--emit-src"))) {
            if (t < 0) return 2;
            o.emit_src = val;
        } else if (a[0] == '-' && a[1]) {
            return usage_error("unknown option '%s'", a);
        } else if (!o.file) {
            o.file = a;
        } else {
            return usage_error("unexpected argument '%s' (one .model file at a time)", a);
        }
#undef TAKE
    }
    if (!o.file) return usage_error("%s: no .model file given", o.cmd);
    if (!strcmp(o.cmd, "check") && o.dump && strcmp(o.dump, "shape") && strcmp(o.dump, "shard"))
        return usage_error("--dump=%s is a pass of build: use shardc build --dump=...", o.dump);
    sx_set_max_errors(o.max_errors);
    drv_add_stdlib_dirs(P);
    int rc = sema_load(P, o.file) || drv_front(P, o.dump, stdout);
    if (!rc && o.params) ir_print_params(&P->ir, stdout);
    if (!rc && !strcmp(o.cmd, "build")) rc = build(P, &o);
    int nerr = sx_error_count();
    if (nerr > 1) fprintf(stderr, "%d errors\n", nerr);
    sx_arena_free();
    return rc == 2 ? 2 : rc ? 1 : 0;
}
