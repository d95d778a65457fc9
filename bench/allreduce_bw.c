/* allreduce_bw.c: all-reduce bus bandwidth of libshardrt's host
 * communication layer (sr_comm_allreduce, MPI backend, in place, blocking),
 * next to this machine's memcpy bandwidth measured in the same program.
 *
 *   mpirun -np N ./allreduce_bw [--min BYTES] [--max BYTES] [--iters K]
 *
 * Sizes double from --min (1 KB) to --max (256 MB). Each size: warm-up
 * calls, then K timed calls (default: 512 MB / size, clamped to 5..1000);
 * the time of a call is the slowest rank's average. As nccl-tests define
 * them: algbw = bytes / time, busbw = algbw * 2(n-1)/n (the bandwidth a
 * ring all-reduce needs from each link, comparable across rank counts).
 * GB = 1e9 bytes. The sums are checked once per size. For reference, the
 * same sizes through a plain blocking MPI_Allreduce (Open MPI's tuned
 * algorithms, no timeout, no layer) in the last column.
 *
 * memcpy: rank 0 alone (the others wait in a sleeping barrier), then every
 * rank at once (per-rank figure), over the largest size; GB/s counts the
 * bytes copied once (the memory traffic is twice that: read + write).
 */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sr_comm.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(int rank, const char *what)
{
    fprintf(stderr, "rank %d: allreduce_bw: %s: %s\n", rank, what, sr_errmsg());
    sr_comm_abort(1);
    return 1;
}

/* best of `reps` timed memcpy calls of `bytes`, in GB/s */
static double memcpy_gbs(char *dst, const char *src, size_t bytes, int reps)
{
    double best = 0;
    memcpy(dst, src, bytes); /* warm-up */
    for (int i = 0; i < reps; i++) {
        double t0 = now();
        memcpy(dst, src, bytes);
        double t = now() - t0;
        double gbs = (double)bytes / t / 1e9;
        if (gbs > best) best = gbs;
    }
    return best;
}

int main(int argc, char **argv)
{
    if (sr_comm_init(&argc, &argv) != SR_OK) {
        fprintf(stderr, "allreduce_bw: %s\n", sr_errmsg());
        return 1;
    }
    long long min_b = 1024, max_b = 256LL << 20;
    int iters_opt = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--min")) min_b = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--max")) max_b = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--iters")) iters_opt = atoi(argv[i + 1]);
    }
    if (min_b < 4) min_b = 4;
    if (max_b < min_b) max_b = min_b;
    if (max_b > 4LL * INT_MAX) max_b = 4LL * INT_MAX; /* the reference MPI_Allreduce takes an int */

    int size = sr_comm_world_size();
    sr_grid g;
    if (sr_grid_init(&g, size, 1, 1, SR_COMM_MPI, 600) != SR_OK) return fail(sr_comm_world_rank(), "grid");
    int rank = g.rank;
    sr_comm *c = g.world_comm;

    size_t max_n = (size_t)(max_b / 4);
    float *buf = malloc(max_n * sizeof(float));
    if (!buf) return fail(rank, "out of memory");
    memset(buf, 0, max_n * sizeof(float));

    /* memcpy bandwidth */
    size_t mbytes = max_n * sizeof(float);
    char *src = malloc(mbytes), *dst = malloc(mbytes);
    if (!src || !dst) return fail(rank, "out of memory for memcpy buffers");
    memset(src, 1, mbytes);
    memset(dst, 0, mbytes);
    double alone = 0, together = 0, together_min = 0;
    if (sr_comm_barrier(c) != SR_OK) return fail(rank, "barrier");
    if (rank == 0) alone = memcpy_gbs(dst, src, mbytes, 5);
    if (sr_comm_barrier(c) != SR_OK) return fail(rank, "barrier");
    together = memcpy_gbs(dst, src, mbytes, 5);
    MPI_Allreduce(&together, &together_min, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    free(src);
    free(dst);

    if (rank == 0) {
        printf("# all-reduce bus bandwidth: sr_comm_allreduce (MPI backend, float32 sum, in place), %d ranks\n", size);
        printf("# memcpy %.0f MB: rank 0 alone %.2f GB/s; all %d ranks at once: %.2f GB/s per rank (slowest)\n",
               (double)mbytes / 1e6, alone, size, together_min);
        printf("| size (B) | floats | iters | time (us) | algbw (GB/s) | busbw (GB/s) | check | "
               "MPI_Allreduce busbw (GB/s) |\n");
        printf("|---:|---:|---:|---:|---:|---:|:---|---:|\n");
        fflush(stdout);
    }

    for (long long bytes = min_b; bytes <= max_b; bytes *= 2) {
        int64_t n = bytes / 4;
        int iters = iters_opt > 0 ? iters_opt : (int)((512LL << 20) / bytes);
        if (iters_opt <= 0) iters = iters < 5 ? 5 : iters > 1000 ? 1000 : iters;
        int warm = bytes >= (16LL << 20) ? 2 : 5;
        memset(buf, 0, (size_t)n * sizeof(float)); /* zeros: the sums stay finite */
        for (int i = 0; i < warm; i++)
            if (sr_comm_allreduce(c, buf, n, "warm-up", NULL) != SR_OK) return fail(rank, "all-reduce");
        if (sr_comm_barrier(c) != SR_OK) return fail(rank, "barrier");
        double t0 = now();
        for (int i = 0; i < iters; i++)
            if (sr_comm_allreduce(c, buf, n, "timed", NULL) != SR_OK) return fail(rank, "all-reduce");
        double t = (now() - t0) / iters, tmax = 0;
        MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

        /* reference: plain blocking MPI_Allreduce, same sizes and counts */
        for (int i = 0; i < warm; i++)
            MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = now();
        for (int i = 0; i < iters; i++)
            MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double traw = (now() - t0) / iters, trawmax = 0;
        MPI_Allreduce(&traw, &trawmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

        /* correctness: rank r contributes r+1 */
        for (int64_t i = 0; i < n; i++) buf[i] = (float)(rank + 1);
        if (sr_comm_allreduce(c, buf, n, "check", NULL) != SR_OK) return fail(rank, "all-reduce");
        float want = (float)(size * (size + 1) / 2);
        int ok = buf[0] == want && buf[n / 2] == want && buf[n - 1] == want, all_ok = 0;
        MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);

        double algbw = (double)bytes / tmax / 1e9;
        double busbw = algbw * 2.0 * (size - 1) / size;
        double rawbus = (double)bytes / trawmax / 1e9 * 2.0 * (size - 1) / size;
        if (rank == 0) {
            printf("| %lld | %lld | %d | %.1f | %.3f | %.3f | %s | %.3f |\n", bytes, (long long)n,
                   iters, tmax * 1e6, algbw, busbw, all_ok ? "ok" : "WRONG", rawbus);
            fflush(stdout);
        }
    }
    free(buf);
    sr_grid_free(&g);
    sr_comm_finalize();
    return 0;
}
