/* sched_sim.c: the pipeline schedule simulator's bubble (runtime/schedule.c,
 * sr_sched_simulate) and peak in-flight microbatches per rank, next to the
 * closed-form theory (sr_sched_bubble_theory), for every schedule at the
 * given p and m, at several backward/forward cost ratios.
 *   cc -O2 -Iruntime/include bench/sched_sim.c BUILD/libshardrt.a -lm -o sched_sim
 *   ./sched_sim [p m v]          (default 4 8 2; v is the interleaved schedule's chunks)
 * Output: Markdown table rows. */
#include <stdio.h>
#include <stdlib.h>

#include "sr_schedule.h"

int main(int argc, char **argv)
{
    int p = argc > 1 ? atoi(argv[1]) : 4, m = argc > 2 ? atoi(argv[2]) : 8, vi = argc > 3 ? atoi(argv[3]) : 2;
    static const double ratio[] = {1.0, 2.0, 3.0};
    static const struct { sr_sched_kind k; int interleaved; } rows[] = {
        {SR_SCHED_GPIPE, 0}, {SR_SCHED_1F1B, 0}, {SR_SCHED_INTERLEAVED, 1}, {SR_SCHED_ZBH1, 0}};
    printf("p = %d, m = %d (interleaved: v = %d); costs per microbatch and stage: forward 1, backward r\n\n", p, m, vi);
    printf("| schedule | theory | simulated r=1 | simulated r=2 | simulated r=3 | peak in flight per rank (r=2) |\n");
    printf("|---|---:|---:|---:|---:|---|\n");
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int v = rows[i].interleaved ? vi : 1;
        sr_schedule s;
        if (sr_sched_build(&s, rows[i].k, p, m, v) != SR_OK) {
            printf("| %s | cannot build: %s |\n", sr_sched_name(rows[i].k), sr_errmsg());
            continue;
        }
        printf("| %s%s | %.1f%% |", sr_sched_name(rows[i].k), v > 1 ? " (v=2)" : "",
               100.0 * sr_sched_bubble_theory(rows[i].k, p, m, v));
        int *peak = calloc((size_t)p, sizeof(int));
        for (int k = 0; k < 3; k++)
            printf(" %.1f%% |", 100.0 * sr_sched_simulate(&s, 1.0, ratio[k], k == 1 ? peak : NULL));
        printf(" ");
        for (int r = 0; r < p; r++) printf("%s%d", r ? ", " : "", peak[r]);
        printf("%s |\n", v > 1 ? " (mb, chunk) pairs" : "");
        free(peak);
        sr_sched_free(&s);
    }
    return 0;
}
