/* timeline.c: `shardc timeline DIR -o timeline.svg`: a Gantt chart of one
 * training step from the Chrome traces a run wrote with --trace DIR.
 *
 * Needs: DIR/trace-rank<R>.json as runtime/trace.c writes them: an object
 * with a traceEvents array whose complete events ("ph":"X") carry name, tid
 * (0 compute, 1 collectives, 2 pipeline send/recv), ts and dur in
 * microseconds, and for pipeline work args.info "mb N" or "mb N chunk C".
 * Gives: a standalone SVG, one row per rank (its compute lane and a thin
 * communication lane below), time on the x axis with a scale, boxes coloured
 * by kind with the microbatch on each, idle time left empty, a legend, and
 * per row the measured bubble: idle / pipeline makespan, the makespan running
 * from the first forward to the last backward of the step over all ranks
 * (the definition sr_sched_simulate uses).
 *
 * A step on a rank ends where its "optimizer" span ends; traces without one
 * are drawn whole. Each trace counts time from its own start, so the rows are
 * put on one clock with the origins a trace may record in its top-level
 * "otherData": clock_origin_monotonic_us (CLOCK_MONOTONIC, exact between
 * ranks of one host, named by "host") or else clock_origin_realtime_us (the
 * wall clock, as good as the hosts' time sync). Without them the rows line up
 * only as well as the ranks started together, and the picture says so.
 *
 * One entry point, timeline_main; everything else is static. Exit 0 with the
 * picture written, 1 for missing or malformed traces, 2 on a usage error.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "shardc.h"
#include "sr_json.h"

int timeline_main(int argc, char **argv);

/* span kinds, value by value; each has a colour and a legend entry */
enum {
    K_FWD = 0,  /* forward */
    K_BWD = 1,  /* full backward */
    K_BIN = 2,  /* backward for the input gradient (zb-h1 "B") */
    K_BWT = 3,  /* backward for the weight gradient (zb-h1 "W") */
    K_COMM = 4, /* send, recv, wait, collectives */
    K_OPT = 5,  /* optimizer step */
    K_OTHER = 6 /* anything else (evaluation, checkpoint, ...) */
};
#define NKIND 7
static const char *const kind_label[NKIND] = {"forward", "backward", "B (input grad)",
                                              "W (weight grad)", "communication", "optimizer",
                                              "other"};
static const char *const kind_class[NKIND] = {"forward", "backward", "backward-input",
                                              "backward-weight", "comm", "optimizer", "other"};
static const char *const kind_fill[NKIND] = {"#4c78a8", "#f58518", "#72b7b2", "#54a24b",
                                             "#9d9da1", "#b279a2", "#d8d8d8"};
static const char *const kind_text[NKIND] = {"#ffffff", "#000000", "#000000", "#ffffff",
                                             "#000000", "#ffffff", "#000000"};

typedef struct tspan {
    double t0, t1;   /* microseconds */
    int kind, lane;  /* lane 0: compute track, 1: communication tracks */
    int mb, chunk;   /* -1 when args.info does not say */
    char name[48];
    char info[64];
} tspan;

typedef struct trank {
    int rank;
    char *path;
    tspan *s;
    int n, cap;
    double *opt_end; /* ends of the optimizer spans, ascending */
    int nopt;
    double lo, hi;   /* the chosen step's window on this rank */
    int has_mono, has_real;
    double mono, real; /* the trace's time 0 on the shared clocks (us) */
    char host[128];
} trank;

typedef struct tl {
    trank *r;
    int n, cap;
} tl;

static int uerr(const char *fmt, const char *arg)
{
    return drv_usage_error("timeline", fmt, arg);
}

static int fail(const char *msg)
{
    fprintf(stderr, "shardc: error: %s\n", msg);
    return 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: shardc timeline DIR [-o FILE.svg] [--step N] [--width PX]\n"
            "\n"
            "Draws one training step of the traces in DIR (the run's --trace DIR:\n"
            "trace-rank<R>.json per rank) as a Gantt chart: a row per rank, boxes coloured\n"
            "by kind with the microbatch on each, idle time left empty, and the measured\n"
            "bubble of every rank. Open the SVG in a browser.\n"
            "\n"
            "  -o FILE.svg    output (default timeline.svg; - for stdout)\n"
            "  --step N       the step to draw, counted from 0 (default: the last one)\n"
            "  --width PX     picture width in pixels (default 1200)\n"
            "  -h, --help     show this help\n"
            "\n"
            "Exit 0 with the picture written, 1 if a trace is missing or malformed,\n"
            "2 on a usage error.\n");
}

/* ---- reading ------------------------------------------------------------- */

static int classify(const char *name, int tid)
{
    if (!strcmp(name, "forward")) return K_FWD;
    if (!strcmp(name, "backward")) return K_BWD;
    if (!strcmp(name, "backward-input")) return K_BIN;
    if (!strcmp(name, "backward-weight")) return K_BWT;
    if (!strcmp(name, "optimizer")) return K_OPT;
    static const char *const comm[] = {"send", "recv", "wait", "all-reduce", "reduce-scatter",
                                       "all-gather", "broadcast", "barrier", NULL};
    for (int i = 0; comm[i]; i++)
        if (!strcmp(name, comm[i])) return K_COMM;
    return tid != 0 ? K_COMM : K_OTHER;
}

/* "mb 3 chunk 1" -> 3, 1; absent parts stay -1 */
static void parse_info(const char *info, int *mb, int *chunk)
{
    const char *p;
    *mb = *chunk = -1;
    if ((p = strstr(info, "mb ")) && (p == info || p[-1] == ' ')) *mb = atoi(p + 3);
    if ((p = strstr(info, "chunk ")) && (p == info || p[-1] == ' ')) *chunk = atoi(p + 6);
}

static int num(const sr_json *j, double *out)
{
    if (!j || j->type != SR_JSON_NUMBER || !isfinite(j->number)) return 0;
    *out = j->number;
    return 1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Reads one trace into r; 0 or 1 with the message in err. */
static int read_trace(trank *r, char *err, size_t errn)
{
    sr_json *root;
    if (sr_json_parse_file(r->path, &root) != SR_OK) {
        snprintf(err, errn, "%s", sr_errmsg());
        return 1;
    }
    const sr_json *ev = root->type == SR_JSON_ARRAY ? root : sr_json_get(root, "traceEvents");
    if (!ev || ev->type != SR_JSON_ARRAY) {
        snprintf(err, errn, "%s: no traceEvents array (not a Chrome trace written by --trace)",
                 r->path);
        sr_json_free(root);
        return 1;
    }
    const sr_json *od = sr_json_get(root, "otherData");
    r->has_mono = num(sr_json_get(od, "clock_origin_monotonic_us"), &r->mono);
    r->has_real = num(sr_json_get(od, "clock_origin_realtime_us"), &r->real);
    const char *host = sr_json_string(sr_json_get(od, "host"));
    snprintf(r->host, sizeof r->host, "%s", host ? host : "");
    int bad = 0;
    for (int i = 0; i < ev->n && !bad; i++) {
        const sr_json *e = &ev->items[i];
        const char *ph = sr_json_string(sr_json_get(e, "ph"));
        if (e->type != SR_JSON_OBJECT) {
            snprintf(err, errn, "%s: traceEvents[%d] is %s, not an object", r->path, i,
                     sr_json_type_name(e->type));
            bad = 1;
            break;
        }
        if (!ph || strcmp(ph, "X")) continue; /* metadata, instants, ... */
        const char *name = sr_json_string(sr_json_get(e, "name"));
        double ts, dur, tid = 0;
        if (!name || !num(sr_json_get(e, "ts"), &ts) || !num(sr_json_get(e, "dur"), &dur) ||
            dur < 0 || (sr_json_get(e, "tid") && !num(sr_json_get(e, "tid"), &tid))) {
            snprintf(err, errn,
                     "%s: traceEvents[%d] is a complete event without a name, a number ts, a "
                     "number dur >= 0 or a number tid",
                     r->path, i);
            bad = 1;
            break;
        }
        if (r->n == r->cap) {
            int cap = r->cap ? 2 * r->cap : 256;
            tspan *s = realloc(r->s, sizeof *s * (size_t)cap);
            if (!s) {
                snprintf(err, errn, "out of memory reading %s", r->path);
                bad = 1;
                break;
            }
            r->s = s;
            r->cap = cap;
        }
        tspan *s = &r->s[r->n++];
        memset(s, 0, sizeof *s);
        s->t0 = ts;
        s->t1 = ts + dur;
        s->lane = tid != 0;
        s->kind = classify(name, (int)tid);
        snprintf(s->name, sizeof s->name, "%s", name);
        const char *info = sr_json_string(sr_json_get(sr_json_get(e, "args"), "info"));
        snprintf(s->info, sizeof s->info, "%s", info ? info : "");
        parse_info(s->info, &s->mb, &s->chunk);
    }
    sr_json_free(root);
    if (bad) return 1;
    for (int i = 0; i < r->n; i++)
        if (r->s[i].kind == K_OPT) r->nopt++;
    r->opt_end = malloc(sizeof(double) * (size_t)(r->nopt + 1));
    if (!r->opt_end) {
        snprintf(err, errn, "out of memory reading %s", r->path);
        return 1;
    }
    r->nopt = 0;
    for (int i = 0; i < r->n; i++)
        if (r->s[i].kind == K_OPT) r->opt_end[r->nopt++] = r->s[i].t1;
    qsort(r->opt_end, (size_t)r->nopt, sizeof(double), cmp_double);
    return 0;
}

/* "trace-rank12.json" -> 12, else -1 */
static int rank_of(const char *file)
{
    const char *pre = "trace-rank";
    size_t n = strlen(pre);
    if (strncmp(file, pre, n)) return -1;
    char *end;
    errno = 0;
    long v = strtol(file + n, &end, 10);
    if (end == file + n || errno || v < 0 || v > 1000000 || strcmp(end, ".json")) return -1;
    return (int)v;
}

static int add_rank(tl *t, int rank, const char *path)
{
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 16;
        trank *r = realloc(t->r, sizeof *r * (size_t)cap);
        if (!r) return 1;
        t->r = r;
        t->cap = cap;
    }
    trank *r = &t->r[t->n];
    memset(r, 0, sizeof *r);
    r->rank = rank;
    if (!(r->path = malloc(strlen(path) + 1))) return 1;
    strcpy(r->path, path);
    t->n++;
    return 0;
}

static int cmp_rank(const void *a, const void *b)
{
    return ((const trank *)a)->rank - ((const trank *)b)->rank;
}

/* Finds DIR's traces (or takes DIR itself when it is one file). */
static int find_traces(tl *t, const char *dir, char *err, size_t errn)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        snprintf(err, errn, "cannot read trace directory %s: %s", dir, strerror(errno));
        return 1;
    }
    if (S_ISREG(st.st_mode)) {
        const char *base = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
        int rk = rank_of(base);
        if (add_rank(t, rk < 0 ? 0 : rk, dir)) goto nomem;
        return 0;
    }
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errn, "cannot read trace directory %s: %s", dir, strerror(errno));
        return 1;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        int rk = rank_of(de->d_name);
        if (rk < 0) continue;
        size_t n = strlen(dir) + strlen(de->d_name) + 2;
        char *path = malloc(n);
        if (!path) {
            closedir(d);
            goto nomem;
        }
        snprintf(path, n, "%s/%s", dir, de->d_name);
        int e = add_rank(t, rk, path);
        free(path);
        if (e) {
            closedir(d);
            goto nomem;
        }
    }
    closedir(d);
    if (t->n == 0) {
        snprintf(err, errn, "no trace-rank*.json files in %s (run the program with --trace %s)",
                 dir, dir);
        return 1;
    }
    qsort(t->r, (size_t)t->n, sizeof *t->r, cmp_rank);
    return 0;
nomem:
    snprintf(err, errn, "out of memory listing %s", dir);
    return 1;
}

static void tl_free(tl *t)
{
    for (int i = 0; i < t->n; i++) {
        free(t->r[i].path);
        free(t->r[i].s);
        free(t->r[i].opt_end);
    }
    free(t->r);
}

/* Puts every rank on one clock when the traces say where their time 0 was;
 * returns a phrase for the picture. */
static const char *align_clocks(tl *t)
{
    int mono = 1, real = 1;
    for (int i = 0; i < t->n; i++) {
        mono &= t->r[i].has_mono && t->r[i].host[0] && !strcmp(t->r[i].host, t->r[0].host);
        real &= t->r[i].has_real;
    }
    if (t->n == 1) return "";
    if (!mono && !real) return "; rank clocks not aligned (traces without clock origins)";
    double base = INFINITY;
    for (int i = 0; i < t->n; i++) {
        double o = mono ? t->r[i].mono : t->r[i].real;
        if (o < base) base = o;
    }
    for (int i = 0; i < t->n; i++) {
        trank *r = &t->r[i];
        double d = (mono ? r->mono : r->real) - base;
        for (int k = 0; k < r->n; k++) {
            r->s[k].t0 += d;
            r->s[k].t1 += d;
        }
        for (int k = 0; k < r->nopt; k++) r->opt_end[k] += d;
    }
    return mono ? "; ranks on one clock (monotonic, one host)"
                : "; ranks on one clock (wall clock: as good as the hosts' time sync)";
}

/* ---- measuring ----------------------------------------------------------- */

static int in_step(const trank *r, const tspan *s) { return s->t0 >= r->lo && s->t0 < r->hi; }

static int is_pipeline(int kind) { return kind <= K_BWT; }

static int cmp_iv(const void *a, const void *b)
{
    const double *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* busy time of the rank's pipeline compute inside [a, b]: the union of its
 * forward/backward spans, nested ones counted once */
static double busy_in(const trank *r, double a, double b)
{
    double (*iv)[2] = malloc(sizeof(double[2]) * (size_t)(r->n + 1));
    if (!iv) return 0;
    int n = 0;
    for (int i = 0; i < r->n; i++) {
        const tspan *s = &r->s[i];
        if (!in_step(r, s) || !is_pipeline(s->kind) || s->lane) continue;
        double x = s->t0 < a ? a : s->t0, y = s->t1 > b ? b : s->t1;
        if (y <= x) continue;
        iv[n][0] = x;
        iv[n][1] = y;
        n++;
    }
    qsort(iv, (size_t)n, sizeof iv[0], cmp_iv);
    double busy = 0, end = a;
    for (int i = 0; i < n; i++) {
        double x = iv[i][0] > end ? iv[i][0] : end;
        if (iv[i][1] > x) busy += iv[i][1] - x;
        if (iv[i][1] > end) end = iv[i][1];
    }
    free(iv);
    return busy;
}

/* ---- drawing ------------------------------------------------------------- */

static void xml_text(sr_buf *b, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': sr_buf_puts(b, "&amp;"); break;
        case '<': sr_buf_puts(b, "&lt;"); break;
        case '>': sr_buf_puts(b, "&gt;"); break;
        case '"': sr_buf_puts(b, "&quot;"); break;
        case '\'': sr_buf_puts(b, "&apos;"); break;
        default:
            /* control characters are not allowed in XML 1.0 */
            if ((unsigned char)*s >= 0x20 || *s == '\t' || *s == '\n') sr_buf_append(b, s, 1);
        }
    }
}

/* 1, 2 or 5 times a power of ten, about span/target */
static double nice_step(double span, int target)
{
    double raw = span / target;
    if (!(raw > 0)) return 1;
    double mag = pow(10, floor(log10(raw)));
    double f = raw / mag;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

typedef struct geom {
    double W, left, right, top, lane_h, comm_h, stride;
    double T0, T1, unit; /* window (us) and the axis unit in us */
    const char *uname;
} geom;

static double xof(const geom *g, double t)
{
    return g->left + (t - g->T0) / (g->T1 - g->T0) * (g->W - g->left - g->right);
}

static void draw_box(sr_buf *b, const geom *g, const tspan *s, double y, double h)
{
    double x0 = xof(g, s->t0), x1 = xof(g, s->t1);
    double w = x1 - x0 < 0.5 ? 0.5 : x1 - x0; /* a zero-length span stays visible */
    double dur = s->t1 - s->t0;
    sr_buf_printf(b, "<rect class=\"box %s\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" "
                     "fill=\"%s\" stroke=\"#ffffff\" stroke-width=\"0.5\"><title>",
                  kind_class[s->kind], x0, y, w, h, kind_fill[s->kind]);
    xml_text(b, s->name);
    if (s->info[0]) {
        sr_buf_puts(b, " ");
        xml_text(b, s->info);
    }
    sr_buf_printf(b, ": %.3f %s</title></rect>\n", dur / g->unit, g->uname);
    if (s->mb < 0 || s->lane) return;
    char label[32];
    if (s->chunk >= 0) snprintf(label, sizeof label, "%d.%d", s->mb, s->chunk);
    else snprintf(label, sizeof label, "%d", s->mb);
    /* the number fits the box: smaller type in narrow boxes */
    double fs = w / (0.62 * (double)strlen(label) + 0.3);
    if (fs > 11) fs = 11;
    if (fs < 3) fs = 3;
    sr_buf_printf(b, "<text class=\"mb\" x=\"%.2f\" y=\"%.2f\" font-size=\"%.1f\" fill=\"%s\" "
                     "text-anchor=\"middle\" dominant-baseline=\"central\">%s</text>\n",
                  x0 + w / 2, y + h / 2, fs, kind_text[s->kind], label);
}

static void draw(sr_buf *b, const tl *t, const geom *g, const char *title, const double *bubble,
                 double mean_bubble, const int *present, const char *clocks)
{
    int nr = t->n;
    double rows_h = nr * g->stride;
    double axis_y = g->top + rows_h;
    double H = axis_y + 92;
    double plot_w = g->W - g->left - g->right;
    sr_buf_printf(b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                     "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                     "viewBox=\"0 0 %.0f %.0f\" font-family=\"Helvetica, Arial, sans-serif\" "
                     "font-size=\"12\">\n",
                  g->W, H, g->W, H);
    sr_buf_printf(b, "<rect class=\"background\" x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" "
                     "fill=\"#ffffff\"/>\n",
                  g->W, H);
    sr_buf_printf(b, "<text class=\"title\" x=\"%.0f\" y=\"22\" font-size=\"15\" "
                     "font-weight=\"bold\">",
                  g->left);
    xml_text(b, title);
    sr_buf_printf(b, "</text>\n<text class=\"subtitle\" x=\"%.0f\" y=\"38\" font-size=\"11\" "
                     "fill=\"#555555\">mean bubble %.1f%% (idle / pipeline makespan, first forward "
                     "to last backward over all ranks)%s</text>\n",
                  g->left, 100 * mean_bubble, clocks);

    /* grid and time axis */
    double span = (g->T1 - g->T0) / g->unit;
    double step = nice_step(span, 10);
    sr_buf_puts(b, "<g class=\"axis\" stroke=\"#dddddd\" stroke-width=\"1\">\n");
    for (double v = 0; v <= span * (1 + 1e-9); v += step) {
        double x = g->left + v / span * plot_w;
        sr_buf_printf(b, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", x, g->top - 4,
                      x, axis_y + 4);
    }
    sr_buf_puts(b, "</g>\n");
    sr_buf_printf(b, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#333333\"/>\n",
                  g->left, axis_y + 4, g->left + plot_w, axis_y + 4);
    for (double v = 0; v <= span * (1 + 1e-9); v += step) {
        double x = g->left + v / span * plot_w;
        sr_buf_printf(b, "<text class=\"tick\" x=\"%.2f\" y=\"%.2f\" font-size=\"10\" "
                         "text-anchor=\"middle\" fill=\"#333333\">%g</text>\n",
                      x, axis_y + 17, v);
    }
    sr_buf_printf(b, "<text class=\"axis-label\" x=\"%.2f\" y=\"%.2f\" font-size=\"11\" "
                     "text-anchor=\"middle\" fill=\"#333333\">time in the step (%s)</text>\n",
                  g->left + plot_w / 2, axis_y + 32, g->uname);

    /* rows */
    for (int i = 0; i < nr; i++) {
        const trank *r = &t->r[i];
        double y = g->top + i * g->stride;
        sr_buf_printf(b, "<text class=\"rank\" x=\"%.0f\" y=\"%.2f\" font-size=\"12\" "
                         "text-anchor=\"end\" dominant-baseline=\"central\">rank %d</text>\n",
                      g->left - 8, y + g->lane_h / 2, r->rank);
        sr_buf_printf(b, "<rect class=\"lane\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" "
                         "fill=\"#f6f6f6\" stroke=\"#e0e0e0\"/>\n",
                      g->left, y, plot_w, g->lane_h);
        sr_buf_printf(b, "<rect class=\"lane comm-lane\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
                         "height=\"%.2f\" fill=\"#fbfbfb\" stroke=\"#eeeeee\"/>\n",
                      g->left, y + g->lane_h + 2, plot_w, g->comm_h);
        /* communication first so that compute stays on top where they meet */
        for (int pass = 1; pass >= 0; pass--)
            for (int k = 0; k < r->n; k++) {
                const tspan *s = &r->s[k];
                if (!in_step(r, s) || s->lane != pass) continue;
                if (pass) draw_box(b, g, s, y + g->lane_h + 2, g->comm_h);
                else draw_box(b, g, s, y, g->lane_h);
            }
        if (bubble[i] >= 0)
            sr_buf_printf(b, "<text class=\"bubble\" x=\"%.2f\" y=\"%.2f\" font-size=\"12\" "
                             "dominant-baseline=\"central\">bubble %.1f%%</text>\n",
                          g->W - g->right + 10, y + g->lane_h / 2, 100 * bubble[i]);
        else
            sr_buf_printf(b, "<text class=\"bubble\" x=\"%.2f\" y=\"%.2f\" font-size=\"12\" "
                             "dominant-baseline=\"central\" fill=\"#777777\">bubble n/a</text>\n",
                          g->W - g->right + 10, y + g->lane_h / 2);
    }

    /* legend */
    double lx = g->left, ly = axis_y + 52;
    sr_buf_puts(b, "<g class=\"legend\">\n");
    for (int k = 0; k < NKIND; k++) {
        if (k == K_OTHER && !present[k]) continue;
        sr_buf_printf(b, "<rect class=\"legend-key\" x=\"%.2f\" y=\"%.2f\" width=\"14\" "
                         "height=\"14\" fill=\"%s\"/>\n"
                         "<text class=\"legend-label\" x=\"%.2f\" y=\"%.2f\" font-size=\"11\" "
                         "dominant-baseline=\"central\">%s</text>\n",
                      lx, ly, kind_fill[k], lx + 19, ly + 7, kind_label[k]);
        lx += 19 + 7.0 * (double)strlen(kind_label[k]) + 18;
    }
    sr_buf_printf(b, "<text class=\"legend-note\" x=\"%.2f\" y=\"%.2f\" font-size=\"10\" "
                     "fill=\"#555555\">numbers: microbatch (.chunk); thin lane: communication; "
                     "empty space: idle</text>\n",
                  g->left, ly + 30);
    sr_buf_puts(b, "</g>\n</svg>\n");
}

/* ---- the command --------------------------------------------------------- */

static int pos_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) return 1;
    *out = v;
    return 0;
}

int timeline_main(int argc, char **argv)
{
    const char *dir = NULL, *out = "timeline.svg";
    long step = -1, width = 1200;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "-o") || !strcmp(a, "--step") || !strcmp(a, "--width")) {
            if (i + 1 >= argc) return uerr("option '%s' needs a value", a);
            val = argv[++i];
        } else if (!strncmp(a, "--step=", 7) || !strncmp(a, "--width=", 8)) {
            val = strchr(a, '=') + 1;
        }
        if (val && !strncmp(a, "-o", 2)) {
            out = val;
        } else if (val && !strncmp(a, "--step", 6)) {
            if (pos_int(val, 0, 1L << 30, &step))
                return uerr("--step expects a step number >= 0, got '%s'", val);
        } else if (val) {
            if (pos_int(val, 200, 100000, &width))
                return uerr("--width expects pixels between 200 and 100000, got '%s'", val);
        } else if (a[0] == '-' && a[1]) {
            return uerr("unknown option '%s'", a);
        } else if (dir) {
            return uerr("one trace directory expected, got a second: '%s'", a);
        } else {
            dir = a;
        }
    }
    if (!dir) return uerr("%s", "missing the trace directory (shardc timeline DIR -o FILE.svg)");

    tl t = {0};
    char err[1024];
    int rc = 1;
    double *bubble = NULL;
    sr_buf b;
    sr_buf_init(&b);
    if (find_traces(&t, dir, err, sizeof err)) goto done;
    for (int i = 0; i < t.n; i++)
        if (read_trace(&t.r[i], err, sizeof err)) goto done;
    const char *clocks = align_clocks(&t);

    /* the step: bounded by optimizer spans where every rank has them */
    int nsteps = t.r[0].nopt;
    for (int i = 1; i < t.n; i++)
        if (t.r[i].nopt < nsteps) nsteps = t.r[i].nopt;
    if (nsteps > 0) {
        if (step >= nsteps) {
            snprintf(err, sizeof err, "--step %ld: the traces in %s hold steps 0 to %d", step, dir,
                     nsteps - 1);
            goto done;
        }
        if (step < 0) step = nsteps - 1;
    } else if (step > 0) {
        snprintf(err, sizeof err, "--step %ld: the traces in %s have no optimizer spans, so only "
                 "the whole trace (step 0) can be drawn", step, dir);
        goto done;
    }
    for (int i = 0; i < t.n; i++) {
        trank *r = &t.r[i];
        r->lo = nsteps > 0 && step > 0 ? r->opt_end[step - 1] : -INFINITY;
        r->hi = nsteps > 0 ? r->opt_end[step] : INFINITY;
    }

    /* windows: the drawing covers every span of the step, the bubble the
     * pipeline part of it */
    geom g = {(double)width, 70, 105, 58, 26, 9, 50, INFINITY, -INFINITY, 1, "us"};
    double P0 = INFINITY, P1 = -INFINITY;
    int present[NKIND] = {0}, nspans = 0;
    for (int i = 0; i < t.n; i++)
        for (int k = 0; k < t.r[i].n; k++) {
            const tspan *s = &t.r[i].s[k];
            if (!in_step(&t.r[i], s)) continue;
            nspans++;
            present[s->kind] = 1;
            if (s->t0 < g.T0) g.T0 = s->t0;
            if (s->t1 > g.T1) g.T1 = s->t1;
            if (is_pipeline(s->kind) && !s->lane) {
                if (s->t0 < P0) P0 = s->t0;
                if (s->t1 > P1) P1 = s->t1;
            }
        }
    if (nspans == 0) {
        snprintf(err, sizeof err, "the traces in %s hold no spans to draw", dir);
        goto done;
    }
    if (!(g.T1 > g.T0)) g.T1 = g.T0 + 1;
    double len = g.T1 - g.T0;
    if (len >= 2e6) g.unit = 1e6, g.uname = "s";
    else if (len >= 2e3) g.unit = 1e3, g.uname = "ms";

    bubble = malloc(sizeof(double) * (size_t)t.n);
    if (!bubble) {
        snprintf(err, sizeof err, "out of memory drawing the timeline");
        goto done;
    }
    double mean = 0;
    int nb = 0;
    for (int i = 0; i < t.n; i++) {
        bubble[i] = P1 > P0 ? 1 - busy_in(&t.r[i], P0, P1) / (P1 - P0) : -1;
        if (bubble[i] >= 0) mean += bubble[i], nb++;
    }
    mean = nb ? mean / nb : 0;

    char title[512];
    if (nsteps > 0)
        snprintf(title, sizeof title, "%s: step %ld, %d rank%s, %.4g %s", dir, step, t.n,
                 t.n == 1 ? "" : "s", len / g.unit, g.uname);
    else
        snprintf(title, sizeof title, "%s: whole trace, %d rank%s, %.4g %s", dir, t.n,
                 t.n == 1 ? "" : "s", len / g.unit, g.uname);
    draw(&b, &t, &g, title, bubble, mean, present, clocks);
    if (sr_buf_status(&b) != SR_OK) {
        snprintf(err, sizeof err, "out of memory drawing the timeline");
        goto done;
    }
    FILE *f = strcmp(out, "-") ? fopen(out, "w") : stdout;
    if (!f) {
        snprintf(err, sizeof err, "cannot write %s: %s", out, strerror(errno));
        goto done;
    }
    size_t wrote = fwrite(b.data, 1, b.len, f);
    int cerr = f == stdout ? fflush(f) : fclose(f);
    if (wrote != b.len || cerr != 0) {
        snprintf(err, sizeof err, "cannot write %s: %s", out, strerror(errno));
        goto done;
    }
    if (strcmp(out, "-"))
        printf("wrote %s: %d rank%s, %s %ld, mean bubble %.1f%%\n", out, t.n, t.n == 1 ? "" : "s",
               nsteps > 0 ? "step" : "whole trace, step", nsteps > 0 ? step : 0, 100 * mean);
    rc = 0;
done:
    if (rc) fail(err);
    sr_buf_free(&b);
    free(bubble);
    tl_free(&t);
    return rc;
}
