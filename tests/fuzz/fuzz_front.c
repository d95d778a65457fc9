/* fuzz_front.c: a libFuzzer target over the whole shardc front end.
 *
 * Every input is one .model file ("fuzz.model"): it is lexed, parsed, its
 * imports loaded (`use "nn"` finds the source tree's stdlib), names resolved,
 * the config evaluated, the model elaborated with every shape inferred and
 * the parallel layout checked -- exactly `shardc check`, minus the driver.
 * The front end must never crash, hang, leak or trip a sanitizer, whatever
 * the input: a user error is a diagnostic, an internal error (sx_ice) aborts
 * and is a bug the fuzzer reports.
 *
 * Built two ways (tests/fuzz/fuzz.cmake):
 *   fuzz_front        clang -fsanitize=fuzzer,address,undefined (libFuzzer's main)
 *   fuzz_replay_asan  the system compiler with -fsanitize=address,undefined and
 *                     tests/fuzz/replay.c as main: replays files, no libFuzzer
 *
 * Environment:
 *   SHARDC_FUZZ_VERBOSE=1  keep the compiler's diagnostics (default: discarded)
 *   SHARDC_FUZZ_BACK=1     also run the back end (autodiff, memory plan) on
 *                          inputs the front end accepts
 *
 * The diagnostics are discarded by pointing the C library's `stderr` at
 * /dev/null rather than by dup2() on descriptor 2: libFuzzer's own output and
 * the sanitizers' reports go to descriptor 2 (or to libFuzzer's private copy
 * of the original stderr FILE), so they stay visible.
 */
#include "shardc.h"

#include <stdint.h>

#ifndef SHARDC_FUZZ_STDLIB_DIR
#error "compile with -DSHARDC_FUZZ_STDLIB_DIR=\"<source>/stdlib\""
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static FILE *devnull;
static int run_back;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    devnull = fopen("/dev/null", "w");
    if (!devnull) {
        perror("fuzz_front: /dev/null");
        abort();
    }
    const char *v = getenv("SHARDC_FUZZ_VERBOSE");
    if (!(v && *v && strcmp(v, "0"))) stderr = devnull;
    const char *b = getenv("SHARDC_FUZZ_BACK");
    run_back = b && *b && strcmp(b, "0");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!devnull) LLVMFuzzerInitialize(NULL, NULL);
    static Program prog;
    Program *P = &prog;
    sx_reset();
    memset(P, 0, sizeof *P);
    P->ir.output = -1;
    vec_push(&P->search_dirs, (void *)SHARDC_FUZZ_STDLIB_DIR);
    sx_set_max_errors(20);
    if (sema_load_text(P, "fuzz.model", (const char *)data, size) == 0 &&
        drv_front(P, NULL, devnull) == 0 && run_back)
        drv_back(P, NULL, devnull);
    fflush(devnull);
    /* free the arena now, so that every input starts and ends with nothing */
    sx_reset();
    memset(P, 0, sizeof *P);
    return 0;
}
