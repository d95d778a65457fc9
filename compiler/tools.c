/* tools.c: what the commands share besides the passes: --config files,
 * where the stdlib is, and running a compiler. Used by the driver, `shardc
 * plan` and the CUDA builder. */
#define _XOPEN_SOURCE 700 /* readlink */
#include "shardc.h"

#include <sys/wait.h>
#include <unistd.h>

#include "sr_json.h"

#ifndef SHARDC_STDLIB_DIR
#define SHARDC_STDLIB_DIR ""
#endif
#ifndef SHARDC_INSTALL_STDLIB_DIR
#define SHARDC_INSTALL_STDLIB_DIR ""
#endif

/* the members of a --config object as overrides: numbers, strings,
 * booleans and nulls; a nested object's members under dotted names
 * (rope_scaling.factor) */
static void add_json_overrides(Program *P, const sr_json *obj, const char *prefix, const char *path)
{
    for (int i = 0; i < obj->n; i++) {
        const sr_json *it = &obj->items[i];
        const char *name = sx_fmt("%s%s", prefix, it->key);
        if (it->type == SR_JSON_OBJECT) {
            add_json_overrides(P, it, sx_fmt("%s.", name), path);
            continue;
        }
        if (it->type == SR_JSON_ARRAY) continue;
        Override *o = sx_alloc(sizeof *o);
        o->name = name;
        o->value = it->type == SR_JSON_BOOL ? (it->boolean ? "true" : "false")
                   : it->type == SR_JSON_NULL ? NULL /* checked against the constants by sema */
                                              : sx_strdup(it->str);
        o->origin = sx_strdup(path);
        /* --set given later on the command line wins: insert before them */
        vec_push(&P->overrides, NULL);
        int k = P->overrides.n - 1;
        while (k > 0 && ((Override *)P->overrides.v[k - 1])->origin[0] == '-') {
            P->overrides.v[k] = P->overrides.v[k - 1];
            k--;
        }
        P->overrides.v[k] = o;
    }
}

/* --config FILE.json: an object such as Hugging Face's config.json */
int drv_load_json_config(Program *P, const char *path)
{
    sr_json *j = NULL;
    if (sr_json_parse_file(path, &j) != SR_OK) {
        fprintf(stderr, "shardc: error: --config: %s\n", sr_errmsg());
        return -1;
    }
    if (j->type != SR_JSON_OBJECT) {
        fprintf(stderr, "shardc: error: --config %s: expected a JSON object, got %s\n", path,
                sr_json_type_name(j->type));
        sr_json_free(j);
        return -1;
    }
    add_json_overrides(P, j, "", path);
    sr_json_free(j);
    return 0;
}

/* the stdlib: $SHARDC_STDLIB, the source tree's, the installed one, then
 * next to the executable */
void drv_add_stdlib_dirs(Program *P)
{
    const char *env = getenv("SHARDC_STDLIB");
    if (env && *env) vec_push(&P->search_dirs, sx_strdup(env));
    if (*SHARDC_STDLIB_DIR) vec_push(&P->search_dirs, SHARDC_STDLIB_DIR);
    if (*SHARDC_INSTALL_STDLIB_DIR) vec_push(&P->search_dirs, SHARDC_INSTALL_STDLIB_DIR);
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            vec_push(&P->search_dirs, sx_fmt("%s/../stdlib", exe));
            vec_push(&P->search_dirs, sx_fmt("%s/../share/shardc/stdlib", exe));
        }
    }
}

/* runs a command (argv), returns its exit status; the command line is shown
 * when SHARDC_VERBOSE is set */
int drv_run_cmd(char **argv)
{
    if (getenv("SHARDC_VERBOSE")) {
        for (char **a = argv; *a; a++) fprintf(stderr, "%s%s", a == argv ? "" : " ", *a);
        fputc('\n', stderr);
    }
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        execvp(argv[0], argv);
        fprintf(stderr, "shardc: error: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}


int drv_usage_error(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "shardc: error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\ntry 'shardc %s --help'\n", cmd);
    return 2;
}
