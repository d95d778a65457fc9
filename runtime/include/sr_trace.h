/* sr_trace.h: Chrome trace JSON per rank (chrome://tracing and Perfetto open
 * it). Spans are complete events ("ph":"X") on tracks (threads in the
 * viewer): compute on one, communication on another, so overlap is visible.
 * A span opened inside another on the same track nests in the viewer
 * because it lies inside the other's time range.
 */
#ifndef SR_TRACE_H
#define SR_TRACE_H

#include <stdint.h>

#include "shardrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* tracks, value by value */
enum {
    SR_TRACK_COMPUTE = 0, /* forward, backward, optimizer */
    SR_TRACK_COMM = 1,    /* collectives from launch to completion */
    SR_TRACK_P2P = 2      /* pipeline sends and receives */
};

typedef struct sr_trace sr_trace;

/* dir NULL: tracing off, *t = NULL and every other call is a no-op */
sr_status sr_trace_open(sr_trace **t, const char *dir, int rank, int world);
double sr_trace_now_us(void); /* microseconds since the trace's start */
void sr_trace_begin(sr_trace *t, int track, const char *name);
void sr_trace_end(sr_trace *t, int track);
/* a finished span; `arg` (may be NULL) shows as args.info */
void sr_trace_span(sr_trace *t, int track, const char *name, double t0_us, double t1_us,
                   const char *arg);
/* writes DIR/trace-rank<R>.json and frees */
sr_status sr_trace_close(sr_trace *t);
/* total busy microseconds on a track between t0 and t1 (for bubble and
 * overlap figures) */
double sr_trace_busy_us(const sr_trace *t, int track, double t0_us, double t1_us);

#ifdef __cplusplus
}
#endif
#endif /* SR_TRACE_H */
