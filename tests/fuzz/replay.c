/* replay.c: a main for fuzz_front.c without libFuzzer.
 *
 *   fuzz_replay_asan [--fork] [--ext=.model] [--timeout=SECONDS] PATH...
 *
 * Runs LLVMFuzzerTestOneInput once on every file named, and on every regular
 * file directly inside every directory named (sorted by name; names starting
 * with '.' are skipped). --ext=SUFFIX limits the directories named after it
 * to files ending in SUFFIX (--ext= lifts the limit). Built with
 * -fsanitize=address,undefined it replays the regression corpus with leak
 * checking at exit; a crash, a sanitizer report, an abort (an internal
 * compiler error) or an input running past the timeout (default 10 s) ends
 * the run with the name of the input that did it. With --fork every input
 * runs in a child process of its own (leak checking included), the run goes
 * on after a failure and ends with the list of the inputs that failed.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<sanitizer/common_interface_defs.h>) && \
    (defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__))
#include <sanitizer/common_interface_defs.h>
#define HAVE_DEATH_CALLBACK 1
#endif
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *current = "(none)";
static int orig_stderr = 2;
static FILE *errf; /* the real stderr: the harness may silence `stderr` */

static void say_current(const char *what)
{
    /* async-signal-safe: write(2) only */
    const char *a = "replay: ", *b = " while running ";
    (void)!write(orig_stderr, a, strlen(a));
    (void)!write(orig_stderr, what, strlen(what));
    (void)!write(orig_stderr, b, strlen(b));
    (void)!write(orig_stderr, current, strlen(current));
    (void)!write(orig_stderr, "\n", 1);
}

static void on_death(void) { say_current("died"); }

static void on_signal(int sig)
{
    say_current(sig == SIGALRM ? "timeout" : sig == SIGABRT ? "abort (internal compiler error?)"
                                                            : "fatal signal");
    signal(sig, SIG_DFL);
    if (sig == SIGALRM) {
        signal(SIGABRT, SIG_DFL);
        sig = SIGABRT;
    }
    raise(sig);
}

static int run_file(const char *path, unsigned timeout)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(errf, "replay: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fprintf(errf, "replay: out of memory reading %s\n", path);
            fclose(f);
            return -1;
        }
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) free(buf);
        buf = nb;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        fprintf(errf, "replay: cannot read %s\n", path);
        free(buf);
        return -1;
    }
    /* an exact-size copy, so that ASan sees any read past the input's end */
    uint8_t *data = malloc(n ? n : 1);
    if (!data) {
        free(buf);
        return -1;
    }
    memcpy(data, buf, n);
    free(buf);
    current = path;
    alarm(timeout);
    LLVMFuzzerTestOneInput(data, n);
    alarm(0);
    current = "(none)";
    free(data);
    return 0;
}

static int use_fork;
static int nfailed;
static char *failed[64];

/* run_file in a child process; a failure is recorded, not fatal */
static int run_one(const char *path, unsigned timeout)
{
    if (!use_fork) return run_file(path, timeout);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(errf, "replay: fork: %s\n", strerror(errno));
        return run_file(path, timeout);
    }
    if (pid == 0) exit(run_file(path, timeout) == 0 ? 0 : 3); /* exit, not _exit: LSan runs */
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 3) return -1; /* unreadable: reported by the child */
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        if (WIFSIGNALED(st))
            fprintf(errf, "replay: FAILED %s (signal %d)\n", path, WTERMSIG(st));
        else
            fprintf(errf, "replay: FAILED %s (exit %d)\n", path, WEXITSTATUS(st));
        if (nfailed < 64) failed[nfailed] = strdup(path);
        nfailed++;
    }
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

/* every regular file in dir (not recursive), sorted; returns files run or -1 */
static int run_dir(const char *dir, const char *ext, unsigned timeout)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(errf, "replay: cannot open directory %s: %s\n", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (ext && *ext && !ends_with(e->d_name, ext)) continue;
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        char *p = malloc(len);
        if (!p) break;
        snprintf(p, len, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) != 0 || !S_ISREG(st.st_mode)) {
            free(p);
            continue;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof *names);
            if (!nn) {
                free(p);
                break;
            }
            names = nn;
        }
        names[n++] = p;
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_str);
    int ran = 0, bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (run_one(names[i], timeout) == 0) ran++;
        else bad = 1;
        free(names[i]);
    }
    free(names);
    return bad ? -1 : ran;
}

int main(int argc, char **argv)
{
    orig_stderr = dup(2);
    if (orig_stderr < 0) orig_stderr = 2;
    errf = fdopen(orig_stderr, "w");
    if (!errf) errf = stderr;
    setvbuf(errf, NULL, _IONBF, 0);
#ifdef HAVE_DEATH_CALLBACK
    __sanitizer_set_death_callback(on_death);
#else
    (void)on_death;
#endif
    signal(SIGABRT, on_signal);
    signal(SIGALRM, on_signal);
    LLVMFuzzerInitialize(&argc, &argv);
    const char *ext = NULL;
    unsigned timeout = 10;
    int total = 0, errors = 0, paths = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strncmp(a, "--ext=", 6)) {
            ext = a + 6;
            continue;
        }
        if (!strcmp(a, "--fork")) {
            use_fork = 1;
            continue;
        }
        if (!strncmp(a, "--timeout=", 10)) {
            timeout = (unsigned)strtoul(a + 10, NULL, 10);
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: %s [--fork] [--ext=SUFFIX] [--timeout=SECONDS] FILE|DIR...\n", argv[0]);
            return 0;
        }
        paths++;
        struct stat st;
        if (stat(a, &st) != 0) {
            fprintf(errf, "replay: %s: %s\n", a, strerror(errno));
            errors++;
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            int r = run_dir(a, ext, timeout);
            if (r < 0) errors++;
            else total += r;
        } else if (run_one(a, timeout) == 0) {
            total++;
        } else {
            errors++;
        }
    }
    if (!paths) {
        fprintf(errf, "usage: %s [--fork] [--ext=SUFFIX] [--timeout=SECONDS] FILE|DIR...\n", argv[0]);
        return 2;
    }
    printf("replayed %d inputs%s\n", total, errors ? " (some could not be read)" : "");
    if (nfailed) {
        fprintf(errf, "replay: %d input(s) FAILED:\n", nfailed);
        for (int i = 0; i < nfailed && i < 64; i++) {
            fprintf(errf, "  %s\n", failed[i]);
            free(failed[i]);
        }
        return 1;
    }
    return errors ? 1 : 0;
}
