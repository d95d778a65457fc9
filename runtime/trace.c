/* trace.c: Chrome trace JSON per rank; see sr_trace.h. */
#include "sr_trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sr_json.h"

#define MAX_DEPTH 32
#define NTRACKS 3

typedef struct span {
    double t0, t1;
    int track;
    char name[48];
    char arg[48];
} span;

struct sr_trace {
    char *path;
    int rank;
    span *spans;
    int64_t n, cap;
    /* open spans per track */
    double open_t0[NTRACKS][MAX_DEPTH];
    char open_name[NTRACKS][MAX_DEPTH][48];
    int depth[NTRACKS];
};

static double t_origin = -1;
static double t_origin_real; /* the same instant on the wall clock */

static double mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

double sr_trace_now_us(void)
{
    if (t_origin < 0) {
        struct timespec ts;
        t_origin = mono_us();
        clock_gettime(CLOCK_REALTIME, &ts);
        t_origin_real = (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
    }
    return mono_us() - t_origin;
}

sr_status sr_trace_open(sr_trace **out, const char *dir, int rank, int world)
{
    (void)world;
    *out = NULL;
    sr_trace_now_us();
    if (!dir) return SR_OK;
    sr_trace *t = calloc(1, sizeof *t);
    size_t n = strlen(dir) + 40;
    if (!t || !(t->path = malloc(n))) {
        free(t);
        return sr_seterr(SR_ERR_NOMEM, "out of memory for the trace");
    }
    snprintf(t->path, n, "%s/trace-rank%d.json", dir, rank);
    mkdir(dir, 0777); /* like --save, the directory is made if missing */
    t->rank = rank;
    /* fail now, not after the run, if the file cannot be written */
    FILE *f = fopen(t->path, "w");
    if (!f) {
        sr_status s = sr_seterr(SR_ERR_IO, "--trace: cannot write %s (does the directory %s exist?)",
                                t->path, dir);
        free(t->path);
        free(t);
        return s;
    }
    fclose(f);
    *out = t;
    return SR_OK;
}

void sr_trace_span(sr_trace *t, int track, const char *name, double t0, double t1, const char *arg)
{
    if (!t || track < 0 || track >= NTRACKS) return;
    if (t->n == t->cap) {
        int64_t cap = t->cap ? t->cap * 2 : 4096;
        span *s = realloc(t->spans, sizeof(span) * (size_t)cap);
        if (!s) return; /* tracing degrades, the run goes on */
        t->spans = s;
        t->cap = cap;
    }
    span *s = &t->spans[t->n++];
    s->t0 = t0;
    s->t1 = t1 < t0 ? t0 : t1;
    s->track = track;
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->arg, sizeof s->arg, "%s", arg ? arg : "");
}

void sr_trace_begin(sr_trace *t, int track, const char *name)
{
    if (!t || track < 0 || track >= NTRACKS || t->depth[track] >= MAX_DEPTH) return;
    int d = t->depth[track]++;
    t->open_t0[track][d] = sr_trace_now_us();
    snprintf(t->open_name[track][d], 48, "%s", name);
}

void sr_trace_end(sr_trace *t, int track)
{
    if (!t || track < 0 || track >= NTRACKS || t->depth[track] <= 0) return;
    int d = --t->depth[track];
    sr_trace_span(t, track, t->open_name[track][d], t->open_t0[track][d], sr_trace_now_us(), NULL);
}

double sr_trace_busy_us(const sr_trace *t, int track, double t0, double t1)
{
    if (!t) return 0;
    /* union of the spans' intervals clipped to [t0, t1]: spans on one track
     * nest or follow each other, so count only outermost ones */
    double busy = 0, cover_end = -1;
    /* spans are recorded at their end; sort a copy of the starts */
    int64_t n = 0;
    double (*iv)[2] = malloc(sizeof(double[2]) * (size_t)(t->n + 1));
    if (!iv) return 0;
    for (int64_t i = 0; i < t->n; i++) {
        const span *s = &t->spans[i];
        if (s->track != track || s->t1 <= t0 || s->t0 >= t1) continue;
        iv[n][0] = s->t0 < t0 ? t0 : s->t0;
        iv[n][1] = s->t1 > t1 ? t1 : s->t1;
        n++;
    }
    for (int64_t i = 1; i < n; i++) { /* insertion sort by start */
        double a = iv[i][0], b = iv[i][1];
        int64_t j = i - 1;
        while (j >= 0 && iv[j][0] > a) {
            iv[j + 1][0] = iv[j][0];
            iv[j + 1][1] = iv[j][1];
            j--;
        }
        iv[j + 1][0] = a;
        iv[j + 1][1] = b;
    }
    for (int64_t i = 0; i < n; i++) {
        double a = iv[i][0] > cover_end ? iv[i][0] : cover_end;
        if (iv[i][1] > a) busy += iv[i][1] - a;
        if (iv[i][1] > cover_end) cover_end = iv[i][1];
    }
    free(iv);
    return busy;
}

sr_status sr_trace_close(sr_trace *t)
{
    if (!t) return SR_OK;
    static const char *tracks[NTRACKS] = {"compute", "communication", "pipeline p2p"};
    FILE *f = fopen(t->path, "w");
    sr_status st = SR_OK;
    if (!f) {
        st = sr_seterr(SR_ERR_IO, "--trace: cannot write %s", t->path);
    } else {
        /* where time 0 was on clocks the ranks share, so that `shardc
         * timeline` can put all ranks on one clock */
        char host[256] = "";
        gethostname(host, sizeof host - 1);
        fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"host\":");
        sr_json_write_string(f, host);
        fprintf(f, ",\"clock_origin_monotonic_us\":%.3f,\"clock_origin_realtime_us\":%.3f},"
                   "\"traceEvents\":[\n", t_origin, t_origin_real);
        fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}",
                t->rank, t->rank);
        for (int k = 0; k < NTRACKS; k++)
            fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
                    t->rank, k, tracks[k]);
        for (int64_t i = 0; i < t->n; i++) {
            const span *s = &t->spans[i];
            fprintf(f, ",\n{\"name\":");
            sr_json_write_string(f, s->name);
            fprintf(f, ",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f", t->rank, s->track,
                    s->t0, s->t1 - s->t0);
            if (s->arg[0]) {
                fprintf(f, ",\"args\":{\"info\":");
                sr_json_write_string(f, s->arg);
                fprintf(f, "}");
            }
            fprintf(f, "}");
        }
        fprintf(f, "\n]}\n");
        if (fclose(f) != 0) st = sr_seterr(SR_ERR_IO, "--trace: cannot write %s", t->path);
    }
    free(t->spans);
    free(t->path);
    free(t);
    return st;
}
