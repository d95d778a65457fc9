/* blend_seek.c: the cost of a data blend's rule (runtime/data.c): a run
 * started at step k walks the counts of the k*G sequences before it, once;
 * then each step's batch. One batch at step k, then step k + 1's.
 * Usage: blend_seek "W1 FILE1 W2 FILE2 ..." STEP (G 512, T 64; vocabulary 256:
 * files read as bytes). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>

#include "sr_data.h"
#include "sr_trace.h"

/* seconds, from the runtime's monotonic clock */
static double now(void) { return sr_trace_now_us() * 1e-6; }

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s DATA STEP\n", argv[0]);
        return 2;
    }
    enum { G = 512, T = 64 };
    static int32_t in[G * T], tg[G * T];
    sr_data d;
    long step = atol(argv[2]);
    if (sr_data_open(&d, argv[1], 256, NULL) != SR_OK) {
        fprintf(stderr, "%s\n", sr_errmsg());
        return 1;
    }
    double t0 = now();
    sr_status s = sr_data_batch(&d, step, G, T, 0, G, in, tg);
    double t1 = now();
    if (s == SR_OK) s = sr_data_batch(&d, step + 1, G, T, 0, G, in, tg);
    double t2 = now();
    if (s != SR_OK) {
        fprintf(stderr, "%s\n", sr_errmsg());
        return 1;
    }
    printf("%s: walk to step %ld (%ld sequences): %.3f s; the next step's batch: %.3f ms\n", argv[1], step,
           step * G, t1 - t0, (t2 - t1) * 1e3);
    sr_data_close(&d);
    return 0;
}
