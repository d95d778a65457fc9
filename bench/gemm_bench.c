/* gemm_bench.c: OpenBLAS cblas_sgemm throughput by transpose case, one
 * thread, row-major, at the GPT block's shapes: which (transA, transB)
 * combinations run at the machine's rate. Found while profiling the host
 * backend (bench/RESULTS.md, training speed): forward matmuls (NoTrans,
 * NoTrans) ran at half the rate of the backward ones.
 *   cc -O2 bench/gemm_bench.c -lopenblas -o gemm_bench && ./gemm_bench [M N K reps]
 * OPENBLAS_CORETYPE=... selects another kernel set for comparison. */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int M = argc > 1 ? atoi(argv[1]) : 512, N = argc > 2 ? atoi(argv[2]) : 2304;
    int K = argc > 3 ? atoi(argv[3]) : 768, reps = argc > 4 ? atoi(argv[4]) : 7;
    openblas_set_num_threads(1);
    size_t big = (size_t)(M > K ? M : K) * (size_t)(N > K ? N : K);
    float *A = malloc(big * 4), *B = malloc(big * 4), *C = malloc(big * 4);
    for (size_t i = 0; i < big; i++) A[i] = B[i] = C[i] = (float)(i % 13) * 0.01f;
    printf("%s, 1 thread, C(%d,%d) = op(A) op(B), K=%d\n", openblas_get_corename(), M, N, K);
    const CBLAS_TRANSPOSE tr[2] = {CblasNoTrans, CblasTrans};
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int beta = 0; beta < 2; beta++) {
                int lda = ta ? M : K, ldb = tb ? K : N;
                double best = 1e30, t[64];
                for (int r = 0; r < reps + 1 && r < 64; r++) {
                    double t0 = now();
                    cblas_sgemm(CblasRowMajor, tr[ta], tr[tb], M, N, K, 1.0f, A, lda, B, ldb, (float)beta, C, N);
                    t[r] = now() - t0;
                    if (r > 0 && t[r] < best) best = t[r];
                }
                printf("  A %s, B %s, beta %d: %6.1f GFLOP/s (best of %d)\n", ta ? "T" : "N", tb ? "T" : "N",
                       beta, 2.0 * M * N * K / best / 1e9, reps);
            }
    return 0;
}
