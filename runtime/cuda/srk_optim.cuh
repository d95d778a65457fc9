/* srk_optim.cuh: the optimizer's kernels (fp32 master weights and state):
 * fused AdamW, the sum of squares for the global gradient norm, scale.
 * The backend (backend.cu) calls them through sr_backend_cuda.
 */
#ifndef SRK_OPTIM_CUH
#define SRK_OPTIM_CUH

#include "srk_common.cuh"

enum { SQ_BLOCKS = 256, SQ_THREADS = 512 };

/* torch.optim.AdamW as sr_adamw_step: decay first, bias corrections from the host */
static __global__ void adamw_kernel(float *p, const float *g, float *m, float *v, long n, float beta1, float beta2, float eps,
                             float step_size, float bc2_sqrt, float decay)
{
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float gi = g[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float pi = p[i] * decay;
        p[i] = pi - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
    }
}

/* part (gridDim.x) = per-block sums of x^2 in double; the grid size depends on n only */
static __global__ void sumsq_part_kernel(double *part, const float *x, long n)
{
    double s = 0.0;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        double xi = x[i];
        s += xi * xi;
    }
    s = srk_block_sum_d(s);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}
static __global__ void sumsq_finish_kernel(double *out, const double *part, int nparts)
{
    double s = 0.0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) s += part[i];
    s = srk_block_sum_d(s);
    if (threadIdx.x == 0) out[0] = s;
}

static inline int srk_sumsq_blocks(long n)
{
    long b = (n + SQ_THREADS * 8 - 1) / (SQ_THREADS * 8);
    return (int)(b < 1 ? 1 : b > (long)SQ_BLOCKS ? (long)SQ_BLOCKS : b);
}

#endif /* SRK_OPTIM_CUH */
