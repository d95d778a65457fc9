/* srk_attention_mma.cuh: causal attention on bf16 tensor cores through
 * mma.sync.m16n8k16 with every tile in registers, the way FlashAttention-2
 * does it: scores, the online softmax, probabilities and the output
 * accumulators never leave registers (srk_attention_tc.cuh's wmma kernels
 * round-trip each score tile through shared memory, because a wmma
 * fragment's layout is unspecified; mma.sync's is documented in the PTX
 * ISA). Operands come from shared memory with ldmatrix (.trans for the
 * products whose B operand is stored row-major).
 *
 * Blocks of 4 warps: 64 query rows (forward, dq) or 64 key rows (dk, dv),
 * 16 per warp; tiles of 64 keys (or queries) in shared memory, rows padded
 * by 8 elements (16-byte rows for ldmatrix, no bank conflicts); the tiles a
 * block streams (K, V; or Q, dO, lse, delta) arrive by cp.async into two
 * buffers, the next tile in flight while this one is multiplied. Head sizes
 * 32 and 64; 128 would need more registers than a thread has and stays
 * on the wmma kernels. Exponentials in base 2 (scores pre-scaled by
 * log2 e); lse is kept in base e, as the other paths keep it.
 *
 * Selected by SHARDC_CUDA_ATTN=mma. Off by default until
 * scripts/gpu-check.sh has measured it on a GPU (it has not yet): the
 * emulator checks the algorithm and the fragment layouts, not the
 * hardware's reading of them.
 *
 * The emulator (and SRK_MMA_PORTABLE=1 under nvcc) runs mma and ldmatrix as
 * warp shuffles that implement the PTX ISA's fragment layouts element by
 * element, so the CPU tests check these kernels' indexing against the
 * documented layouts; under nvcc the same functions are one instruction.
 */
#ifndef SRK_ATTENTION_MMA_CUH
#define SRK_ATTENTION_MMA_CUH

#if defined(SR_CUDA_EMULATION) || defined(SRK_MMA_PORTABLE)
#define SRK_MMA_SHUFFLES 1
#else
#define SRK_MMA_SHUFFLES 0
#endif

namespace srk_mma {
enum { TILE = 64, WARPS = 4, THREADS = 128 };
static_assert((int)TILE == (int)srk_tc::TILE, "the launchers use srk_tc's grid of tiles");
constexpr float LOG2E = 1.4426950408889634f;

template <int HD>
struct Lay {
    static constexpr int LDH = HD + 8; /* bf16 tile rows: srk_tc::load_tile's layout */
    static constexpr size_t tile = (size_t)TILE * LDH * sizeof(bf16);
    /* the streamed tiles twice (cp.async fills one while the other is multiplied) */
    static constexpr size_t fwd = 5 * tile;                                     /* Q, 2 x (K, V) */
    static constexpr size_t bwd_q = 6 * tile;                                   /* Q, dO, 2 x (K, V) */
    static constexpr size_t bwd_kv = 6 * tile + 4 * TILE * sizeof(float);       /* K, V, 2 x (Q, dO, lse, delta) */
};

/* two floats as a bf16 pair: lo in the low half (the lower column index) */
__device__ __forceinline__ uint32_t pack(float lo, float hi)
{
    return (uint32_t)__bfloat16_as_ushort(__float2bfloat16(lo)) |
           ((uint32_t)__bfloat16_as_ushort(__float2bfloat16(hi)) << 16);
}

/* the bf16 in the low 16 bits of x */
__device__ __forceinline__ float bf16_bits(uint32_t x) { return __uint_as_float(x << 16); }

#if SRK_MMA_SHUFFLES
/* The words lanes pass each other in the emulated mma and ldmatrix:
 * from(i, lane) is lane's mine[i], asked for by every lane in the same
 * order. The emulator gathers them all at once (one warp barrier, at
 * which it checks that all 32 lanes make the same call: `what` at the
 * caller's line); SRK_MMA_PORTABLE under nvcc shuffles one word per call. */
struct Lanes {
#ifdef SR_CUDA_EMULATION
    uint32_t all[32 * emu::EMU_GATHER_MAX];
    int n;
    Lanes(const uint32_t *mine, int n_, const char *what, EMU_HERE) : n(n_)
    {
        emu::warp_gather(all, mine, n_, emu::Site{what, emu_file, emu_line, 0xffffffffu, true});
    }
    uint32_t from(int i, int lane) const { return all[lane * n + i]; }
#else
    const uint32_t *mine;
    __device__ Lanes(const uint32_t *m, int, const char *) : mine(m) {}
    __device__ uint32_t from(int i, int lane) const { return __shfl_sync(0xffffffffu, mine[i], lane); }
#endif
};
#endif

/* d (16x8 f32) += a (16x16 bf16, row) @ b (16x8 bf16, col). Per lane, with
 * g = lane / 4 and t = lane % 4 (PTX ISA, mma.m16n8k16 fragments):
 *   a[0] = A[g][2t..2t+1]   a[1] = A[g+8][2t..]   a[2] = A[g][2t+8..]   a[3] = A[g+8][2t+8..]
 *   b[0] = B[2t..2t+1][g]   b[1] = B[2t+8..2t+9][g]
 *   d[0..1] = D[g][2t..2t+1]   d[2..3] = D[g+8][2t..2t+1] */
__device__ __forceinline__ void mma(float *d, const uint32_t *a, uint32_t b0, uint32_t b1)
{
#if SRK_MMA_SHUFFLES
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const uint32_t mine[6] = {a[0], a[1], a[2], a[3], b0, b1};
    Lanes x(mine, 6, "mma.sync");
    for (int src = 0; src < 4; src++) {
        /* lane 4g+src holds columns 2src, 2src+1, 2src+8, 2src+9 of rows g and g+8 of A;
         * lane 4n+src the same rows (k) of column n of B */
        uint32_t ar[4], bc0[2], bc1[2];
        for (int i = 0; i < 4; i++) ar[i] = x.from(i, 4 * g + src);
        for (int i = 0; i < 2; i++) {
            bc0[i] = x.from(4 + i, 4 * (2 * t) + src);
            bc1[i] = x.from(4 + i, 4 * (2 * t + 1) + src);
        }
        for (int half = 0; half < 2; half++) /* k = 2src + 8half + {0, 1} */
            for (int e = 0; e < 2; e++) {
                int sh = 16 * e;
                float x0 = bf16_bits(ar[2 * half] >> sh), x1 = bf16_bits(ar[2 * half + 1] >> sh);
                float y0 = bf16_bits(bc0[half] >> sh), y1 = bf16_bits(bc1[half] >> sh);
                d[0] += x0 * y0, d[1] += x0 * y1, d[2] += x1 * y0, d[3] += x1 * y1;
            }
    }
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* r[i] = row lane/4, columns 2(lane%4)..+1 of 8x8 matrix i (TRANS: of its
 * transpose), matrix i's row j at the address lane 8i+j gives (ldmatrix.x4) */
template <bool TRANS>
__device__ __forceinline__ void ldsm(uint32_t *r, const bf16 *p)
{
#if SRK_MMA_SHUFFLES
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if ((uintptr_t)p & 15) __trap(); /* ldmatrix's rows are 16-byte aligned (.aligned): fail where the GPU would */
    uint64_t pw = (uint64_t)(uintptr_t)p;
    const uint32_t mine[2] = {(uint32_t)pw, (uint32_t)(pw >> 32)};
    Lanes x(mine, 2, "ldmatrix");
    auto row = [&](int src) { return (const bf16 *)(uintptr_t)((uint64_t)x.from(1, src) << 32 | x.from(0, src)); };
    for (int i = 0; i < 4; i++) {
        if (!TRANS) {
            r[i] = *(const uint32_t *)(row(8 * i + g) + 2 * t);
        } else {
            const bf16 *row0 = row(8 * i + 2 * t), *row1 = row(8 * i + 2 * t + 1);
            r[i] = (uint32_t)__bfloat16_as_ushort(row0[g]) | ((uint32_t)__bfloat16_as_ushort(row1[g]) << 16);
        }
    }
#else
    unsigned s = (unsigned)__cvta_generic_to_shared(p);
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(s));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(s));
#endif
}

/* cp.async (sm_80): global to shared memory without a trip through
 * registers, so the next tile's loads are in flight while this tile is
 * multiplied. A thread's copies since its last commit form a group;
 * wait<N> returns once all but its N newest groups have landed (its own
 * copies only: a __syncthreads after the wait publishes everyone's). The
 * emulator queues the copies and lands them at the wait, the latest a GPU
 * may, so a read before the wait shows in the CPU tests. */
template <int BYTES>
__device__ __forceinline__ void cp_async(void *dst, const void *src)
{
#ifdef SR_CUDA_EMULATION
    emu::cp_async(dst, src, BYTES);
#else
    static_assert(BYTES == 4 || BYTES == 16, "cp.async.ca of 4 bytes or .cg of 16");
    unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    if (BYTES == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(src) : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit(void)
{
#ifdef SR_CUDA_EMULATION
    emu::cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait(void)
{
#ifdef SR_CUDA_EMULATION
    emu::cp_async_wait(N);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

/* srk_tc::load_tile's tile (rows r0.. of src, zero past T) with the copies
 * in flight: 16-byte cp.async where the rows allow (vec), else plain
 * element copies through registers (landed when the call returns); rows
 * past T are zeroed by plain stores. The caller commits and waits. */
template <int HD>
__device__ __forceinline__ void load_tile_async(bf16 *dst, const bf16 *src, int r0, int T, int C, int vec)
{
    constexpr int LDH = Lay<HD>::LDH;
    if (!vec) {
        srk_tc::load_tile<HD>(dst, src, r0, T, C, vec);
        return;
    }
    for (int e = threadIdx.x; e < TILE * HD / 8; e += THREADS) {
        int r = e / (HD / 8), c8 = e - r * (HD / 8);
        bf16 *d = dst + r * LDH + c8 * 8;
        if (r0 + r < T) {
            cp_async<16>(d, src + (size_t)(r0 + r) * C + c8 * 8);
        } else {
            uint4 z;
            z.x = z.y = z.z = z.w = 0u;
            *(uint4 *)d = z;
        }
    }
}

/* the key tile at c0 (K, then V, (64, LDH) each) into buffer i of KV: in flight until committed and waited */
template <int HD>
__device__ __forceinline__ void load_kv_async(bf16 *KV, int i, const bf16 *k, const bf16 *v, int c0, int T, int LQ,
                                              int vec)
{
    constexpr int LDH = Lay<HD>::LDH;
    bf16 *Kn = KV + i * 2 * TILE * LDH;
    load_tile_async<HD>(Kn, k, c0, T, LQ, vec);
    load_tile_async<HD>(Kn + TILE * LDH, v, c0, T, LQ, vec);
}

/* The two ways this file feeds ldmatrix.x4 from a row-major tile X (ld LDH):
 *  a_at: the A fragment of the 16x16 block at X (rows 0..15, columns 0..15);
 *        with TRANS it is also the B fragments of two n8 tiles (columns
 *        0..7 in r[0..1], 8..15 in r[2..3]) when X holds B row-major (k, n);
 *  b_at: the B fragments of two n8 tiles when X holds B^T row-major (n, k):
 *        rows 0..7 of X in r[0..1], rows 8..15 in r[2..3], k = columns 0..15. */
template <int LDH>
__device__ __forceinline__ const bf16 *a_at(const bf16 *X)
{
    int lane = threadIdx.x & 31;
    return X + ((lane & 7) + 8 * ((lane >> 3) & 1)) * LDH + 8 * (lane >> 4);
}
template <int LDH>
__device__ __forceinline__ const bf16 *b_at(const bf16 *X)
{
    int lane = threadIdx.x & 31;
    return X + ((lane & 7) + 8 * (lane >> 4)) * LDH + 8 * ((lane >> 3) & 1);
}

/* s (16 x 64, as 8 n8 tiles) = A (16 x HD, fragments a) @ X^T, X a (64, HD) tile */
template <int HD>
__device__ __forceinline__ void rows_times_tile(float (*s)[4], const uint32_t (*a)[4], const bf16 *X)
{
    constexpr int LDH = Lay<HD>::LDH;
    for (int j = 0; j < 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
    for (int kk = 0; kk < HD / 16; kk++)
        for (int np = 0; np < 4; np++) {
            uint32_t b[4];
            ldsm<false>(b, b_at<LDH>(X + np * 16 * LDH + kk * 16));
            mma(s[2 * np], a[kk], b[0], b[1]);
            mma(s[2 * np + 1], a[kk], b[2], b[3]);
        }
}

/* acc (16 x HD, as HD/8 n8 tiles) += P (16 x 64, the accumulator tiles p rounded to bf16) @ X, X a (64, HD) tile */
template <int HD>
__device__ __forceinline__ void probs_times_tile(float (*acc)[4], const float (*p)[4], const bf16 *X)
{
    constexpr int LDH = Lay<HD>::LDH;
    for (int kk = 0; kk < 4; kk++) {
        /* an accumulator pair (columns 16kk..16kk+15) is an A fragment */
        uint32_t a[4] = {pack(p[2 * kk][0], p[2 * kk][1]), pack(p[2 * kk][2], p[2 * kk][3]),
                         pack(p[2 * kk + 1][0], p[2 * kk + 1][1]), pack(p[2 * kk + 1][2], p[2 * kk + 1][3])};
        for (int dp = 0; dp < HD / 16; dp++) {
            uint32_t b[4];
            ldsm<true>(b, a_at<LDH>(X + kk * 16 * LDH + dp * 16));
            mma(acc[2 * dp], a, b[0], b[1]);
            mma(acc[2 * dp + 1], a, b[2], b[3]);
        }
    }
}

/* the A fragments of rows 0..15 (all HD columns) of a tile */
template <int HD>
__device__ __forceinline__ void load_rows(uint32_t (*a)[4], const bf16 *X)
{
    for (int kk = 0; kk < HD / 16; kk++) ldsm<false>(a[kk], a_at<Lay<HD>::LDH>(X + kk * 16));
}

/* grad rows row0 + g, row0 + g + 8 (< T) += acc (fresh: =) */
template <int HD, class TD>
__device__ __forceinline__ void flush(TD *grad, size_t base, int row0, int T, int C, const float (*acc)[4], int fresh)
{
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    for (int hr = 0; hr < 2; hr++) {
        int r = row0 + g + 8 * hr;
        if (r >= T) continue;
        TD *dst = grad + base + (size_t)r * C + 2 * t;
        for (int j = 0; j < HD / 8; j++) {
            srk_put(&dst[8 * j], acc[j][2 * hr], fresh);
            srk_put(&dst[8 * j + 1], acc[j][2 * hr + 1], fresh);
        }
    }
}

/* The causal mask per element costs compares and selects next to each exponential; in the tiles
 * below the diagonal (at T = 1024, 120 of the 136 a head's blocks see) every key comes before every row,
 * so the helpers below take FULL = true there and leave the mask out (the same values: the mask
 * keeps them all). */

/* keys up to last_key against rows first_row..last_row: every key before every row, all rows < T */
__device__ __forceinline__ bool tile_full(int last_key, int first_row, int last_row, int T)
{
    return last_key <= first_row && last_row < T;
}

/* a lane's scores s (16 rows from i0 by 8 n8 tiles of keys from c0) scaled to base 2, -inf where
 * the key is after the row or past T */
template <bool FULL>
__device__ __forceinline__ void scores_masked(float (*s)[4], int c0, int i0, int T, float sl2)
{
    int t = threadIdx.x & 3;
    for (int hr = 0; hr < 2; hr++)
        for (int j = 0; j < 8; j++)
            for (int e = 0; e < 2; e++) {
                int key = c0 + 8 * j + 2 * t + e, i = i0 + 8 * hr;
                s[j][2 * hr + e] = FULL || (key <= i && key < T) ? s[j][2 * hr + e] * sl2 : -INFINITY;
            }
}

/* dS = P (dP - delta) scale for the dq kernel's rows i0, i0 + 8 (lse2: lse in base 2) and keys from c0 */
template <bool FULL>
__device__ __forceinline__ void ds_rows(float (*dp)[4], const float (*s)[4], int c0, int i0, int T, float sl2,
                                        const float *lse2, const float *delta, float scale)
{
    int t = threadIdx.x & 3;
    for (int j = 0; j < 8; j++)
        for (int e = 0; e < 4; e++) {
            int hr = e >> 1, i = i0 + 8 * hr, key = c0 + 8 * j + 2 * t + (e & 1);
            float p = FULL || (i < T && key <= i) ? exp2f(s[j][e] * sl2 - lse2[hr]) : 0.0f;
            dp[j][e] = p * (dp[j][e] - delta[hr]) * scale;
        }
}

/* P^T in st and dS^T in dpt for the dk/dv kernel's keys k0, k0 + 8 and queries from r0 (ls: lse in
 * base e, dls: delta, by query column) */
template <bool FULL>
__device__ __forceinline__ void pt_dst(float (*st)[4], float (*dpt)[4], int k0, int r0, int T, float sl2,
                                       const float *ls, const float *dls, float scale)
{
    int t = threadIdx.x & 3;
    for (int j = 0; j < 8; j++)
        for (int e = 0; e < 4; e++) {
            int key = k0 + 8 * (e >> 1), c = 8 * j + 2 * t + (e & 1), i = r0 + c;
            float l2 = ls[c] * LOG2E;
            float p = FULL || (i < T && key <= i) ? exp2f(st[j][e] * sl2 - l2) : 0.0f;
            st[j][e] = p;                                 /* P^T */
            dpt[j][e] = p * (dpt[j][e] - dls[c]) * scale; /* dS^T */
        }
}

/* ---- forward -------------------------------------------------------------------------------- */
template <int HD, class TO>
__global__ void __launch_bounds__(THREADS) fwd_kernel(TO *out, TO *out_copy, float *lse, const bf16 *q, const bf16 *k,
                                                      const bf16 *v, int T, int C, int LQ, int NH, float scale,
                                                      int vec)
{
#if SRK_TC_DEVICE
    // grid (ceil(T/64), NH, B), the last query tiles (the most keys) first; warp w owns rows r0 + 16w .. +15
    constexpr int LDH = Lay<HD>::LDH;
    SR_EXTERN_SHARED(char, smc);
    bf16 *Qs = (bf16 *)smc, *KV = Qs + TILE * LDH; // (64, LDH) each: Q, then K and V of buffer 0, of buffer 1
    int b = blockIdx.z, h = blockIdx.y, r0 = (gridDim.x - 1 - blockIdx.x) * TILE;
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int qw = r0 + 16 * w; /* this lane's rows: qw + g, qw + g + 8 */
    size_t base = (size_t)b * T * C + (size_t)h * HD, bi = (size_t)b * T * LQ + (size_t)h * HD;
    float sl2 = scale * LOG2E;
    int kend = min(T, r0 + TILE);
    load_tile_async<HD>(Qs, q + bi, r0, T, LQ, vec);
    load_kv_async<HD>(KV, 0, k + bi, v + bi, 0, T, LQ, vec);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    uint32_t qa[HD / 16][4];
    load_rows<HD>(qa, Qs + 16 * w * LDH);
    float o[HD / 8][4], s[8][4];
    for (int j = 0; j < HD / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}; /* base-2 running max, this lane's part of the sum */
    for (int c0 = 0, it = 0; c0 < kend; c0 += TILE, it++) {
        /* this tile landed (every thread's copies), and nobody reads the other buffer any more */
        cp_async_wait<0>();
        __syncthreads();
        const bf16 *Ks = KV + (it & 1) * 2 * TILE * LDH, *Vs = Ks + TILE * LDH;
        if (c0 + TILE < kend) { /* the next tile's copies fly while this one is multiplied */
            load_kv_async<HD>(KV, ~it & 1, k + bi, v + bi, c0 + TILE, T, LQ, vec);
            cp_async_commit();
        }
        if (c0 > qw + 15) continue; /* all in this warp's future */
        rows_times_tile<HD>(s, qa, Ks);
        if (tile_full(c0 + TILE - 1, qw, qw + 15, T)) scores_masked<true>(s, c0, qw + g, T, sl2);
        else scores_masked<false>(s, c0, qw + g, T, sl2);
        for (int hr = 0; hr < 2; hr++) {
            float mx = -INFINITY;
            for (int j = 0; j < 8; j++)
                for (int e = 0; e < 2; e++) mx = fmaxf(mx, s[j][2 * hr + e]);
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1)); /* the 4 lanes of a row */
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            float mnew = fmaxf(m[hr], mx);
            float corr = mnew == -INFINITY ? 1.0f : exp2f(m[hr] - mnew);
            float sum = 0.0f;
            for (int j = 0; j < 8; j++)
                for (int e = 0; e < 2; e++) {
                    float p = mnew == -INFINITY ? 0.0f : exp2f(s[j][2 * hr + e] - mnew);
                    s[j][2 * hr + e] = p;
                    sum += p;
                }
            l[hr] = l[hr] * corr + sum;
            m[hr] = mnew;
            for (int j = 0; j < HD / 8; j++) o[j][2 * hr] *= corr, o[j][2 * hr + 1] *= corr;
        }
        probs_times_tile<HD>(o, s, Vs);
    }
    for (int hr = 0; hr < 2; hr++) {
        float sum = l[hr];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        int i = qw + g + 8 * hr;
        if (i >= T) continue;
        float inv = 1.0f / sum;
        size_t row = base + (size_t)i * C + 2 * t;
        for (int j = 0; j < HD / 8; j++)
            for (int e = 0; e < 2; e++) {
                TO x = srk_to<TO>(o[j][2 * hr + e] * inv);
                out[row + 8 * j + e] = x;
                out_copy[row + 8 * j + e] = x;
            }
        if (t == 0) lse[((size_t)b * NH + h) * T + i] = m[hr] / LOG2E + logf(sum);
    }
#else
    __trap(); /* bf16 mma.sync needs sm_80; the host never launches this there */
#endif
}

/* ---- backward: dk, dv by key tiles ---------------------------------------------------------- */
template <int HD, class TDK, class TDV>
__global__ void __launch_bounds__(THREADS) bwd_kv_kernel(TDK *dk, TDV *dv, const bf16 *dout, const bf16 *q,
                                                         const bf16 *k, const bf16 *v, const float *lse,
                                                         const float *delta, int T, int C, int LQ, int NH, float scale,
                                                         int vec,
                                                         int fresh)
{
#if SRK_TC_DEVICE
    // grid (ceil(T/64), NH, B); warp w owns keys c0 + 16w .. +15 and the queries i >= them (fresh: bit 1 dk, 2 dv)
    constexpr int LDH = Lay<HD>::LDH;
    SR_EXTERN_SHARED(char, smc);
    /* K, V; then Q and dO of buffer 0, of buffer 1; then lse and delta of buffer 0, of buffer 1 */
    bf16 *Ks = (bf16 *)smc, *Vs = Ks + TILE * LDH, *QG = Vs + TILE * LDH;
    float *LD = (float *)(QG + 4 * TILE * LDH);
    int b = blockIdx.z, h = blockIdx.y, c0 = blockIdx.x * TILE;
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
    int kw = c0 + 16 * w; /* this lane's keys: kw + g, kw + g + 8 */
    size_t base = (size_t)b * T * C + (size_t)h * HD, bi = (size_t)b * T * LQ + (size_t)h * HD;
    const float *lse_bh = lse + ((size_t)b * NH + h) * T, *del_bh = delta + ((size_t)b * NH + h) * T;
    float sl2 = scale * LOG2E;
    /* the query tile at r0 (Q, dO, lse, delta) into buffer i: in flight until the next wait */
    auto fetch = [&](int r0, int i) {
        bf16 *Qn = QG + i * 2 * TILE * LDH;
        float *ln = LD + i * 2 * TILE;
        load_tile_async<HD>(Qn, q + bi, r0, T, LQ, vec);
        load_tile_async<HD>(Qn + TILE * LDH, dout + base, r0, T, C, vec);
        for (int r = threadIdx.x; r < TILE; r += THREADS) {
            if (r0 + r < T) {
                cp_async<4>(&ln[r], &lse_bh[r0 + r]);
                cp_async<4>(&ln[TILE + r], &del_bh[r0 + r]);
            } else {
                ln[r] = ln[TILE + r] = 0.0f;
            }
        }
        cp_async_commit();
    };
    load_tile_async<HD>(Ks, k + bi, c0, T, LQ, vec);
    load_tile_async<HD>(Vs, v + bi, c0, T, LQ, vec);
    fetch(c0, 0);
    cp_async_wait<0>();
    __syncthreads();
    uint32_t ka[HD / 16][4], va[HD / 16][4];
    load_rows<HD>(ka, Ks + 16 * w * LDH);
    load_rows<HD>(va, Vs + 16 * w * LDH);
    float dka[HD / 8][4], dva[HD / 8][4], st[8][4], dpt[8][4];
    for (int j = 0; j < HD / 8; j++)
        for (int e = 0; e < 4; e++) dka[j][e] = dva[j][e] = 0.0f;
    for (int r0 = c0, it = 0; r0 < T; r0 += TILE, it++) {
        /* this tile landed (every thread's copies), and nobody reads the other buffer any more */
        cp_async_wait<0>();
        __syncthreads();
        const bf16 *Qs = QG + (it & 1) * 2 * TILE * LDH, *Gs = Qs + TILE * LDH;
        const float *ls = LD + (it & 1) * 2 * TILE, *dls = ls + TILE; /* lse (base e) and delta */
        if (r0 + TILE < T) fetch(r0 + TILE, ~it & 1);
        rows_times_tile<HD>(st, ka, Qs);  /* S^T (16 keys, 64 queries) */
        rows_times_tile<HD>(dpt, va, Gs); /* dP^T = V dO^T */
        if (tile_full(kw + 15, r0, r0 + TILE - 1, T)) pt_dst<true>(st, dpt, kw + g, r0, T, sl2, ls, dls, scale);
        else pt_dst<false>(st, dpt, kw + g, r0, T, sl2, ls, dls, scale);
        probs_times_tile<HD>(dva, st, Gs);  /* dV += P^T dO */
        probs_times_tile<HD>(dka, dpt, Qs); /* dK += dS^T Q */
    }
    if (dk) flush<HD>(dk, bi, kw, T, LQ, dka, fresh >> 1 & 1);
    if (dv) flush<HD>(dv, bi, kw, T, LQ, dva, fresh >> 2 & 1);
#else
    __trap(); /* bf16 mma.sync needs sm_80; the host never launches this there */
#endif
}

/* ---- backward: dq by query tiles ------------------------------------------------------------- */
template <int HD, class TDQ>
__global__ void __launch_bounds__(THREADS) bwd_q_kernel(TDQ *dq, const bf16 *dout, const bf16 *q, const bf16 *k,
                                                        const bf16 *v, const float *lse, const float *delta, int T,
                                                        int C, int LQ, int NH, float scale, int vec, int fresh)
{
#if SRK_TC_DEVICE
    // grid (ceil(T/64), NH, B), the last query tiles first; warp w owns rows r0 + 16w .. +15, keys j <= i
    // (fresh: bit 0 dq)
    constexpr int LDH = Lay<HD>::LDH;
    SR_EXTERN_SHARED(char, smc);
    bf16 *Qs = (bf16 *)smc, *Gs = Qs + TILE * LDH, *KV = Gs + TILE * LDH; // then K and V of buffer 0, of buffer 1
    int b = blockIdx.z, h = blockIdx.y, r0 = (gridDim.x - 1 - blockIdx.x) * TILE;
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
    int qw = r0 + 16 * w;
    size_t base = (size_t)b * T * C + (size_t)h * HD, bi = (size_t)b * T * LQ + (size_t)h * HD;
    float sl2 = scale * LOG2E;
    int kend = min(T, r0 + TILE);
    load_tile_async<HD>(Qs, q + bi, r0, T, LQ, vec);
    load_tile_async<HD>(Gs, dout + base, r0, T, C, vec);
    load_kv_async<HD>(KV, 0, k + bi, v + bi, 0, T, LQ, vec);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    uint32_t qa[HD / 16][4], ga[HD / 16][4];
    load_rows<HD>(qa, Qs + 16 * w * LDH);
    load_rows<HD>(ga, Gs + 16 * w * LDH);
    float lrow[2], drow[2];
    for (int hr = 0; hr < 2; hr++) {
        int i = qw + g + 8 * hr;
        lrow[hr] = i < T ? lse[((size_t)b * NH + h) * T + i] * LOG2E : 0.0f;
        drow[hr] = i < T ? delta[((size_t)b * NH + h) * T + i] : 0.0f;
    }
    float dqa[HD / 8][4], s[8][4], dp[8][4];
    for (int j = 0; j < HD / 8; j++) dqa[j][0] = dqa[j][1] = dqa[j][2] = dqa[j][3] = 0.0f;
    for (int c0 = 0, it = 0; c0 < kend; c0 += TILE, it++) {
        /* this tile landed (every thread's copies), and nobody reads the other buffer any more */
        cp_async_wait<0>();
        __syncthreads();
        const bf16 *Ks = KV + (it & 1) * 2 * TILE * LDH, *Vs = Ks + TILE * LDH;
        if (c0 + TILE < kend) {
            load_kv_async<HD>(KV, ~it & 1, k + bi, v + bi, c0 + TILE, T, LQ, vec);
            cp_async_commit();
        }
        if (c0 > qw + 15) continue;
        rows_times_tile<HD>(s, qa, Ks);  /* S (16 queries, 64 keys) */
        rows_times_tile<HD>(dp, ga, Vs); /* dP = dO V^T */
        if (tile_full(c0 + TILE - 1, qw, qw + 15, T)) ds_rows<true>(dp, s, c0, qw + g, T, sl2, lrow, drow, scale);
        else ds_rows<false>(dp, s, c0, qw + g, T, sl2, lrow, drow, scale); /* dS */
        probs_times_tile<HD>(dqa, dp, Ks); /* dQ += dS K */
    }
    flush<HD>(dq, bi, qw, T, LQ, dqa, fresh & 1);
#else
    __trap(); /* bf16 mma.sync needs sm_80; the host never launches this there */
#endif
}

template <int HD, class TO>
static void launch_fwd(TO *out, TO *copy, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int B, int T, int C,
                       int LQ, int NH, float scale)
{
    int vec = srk_tc::tiles_vec(C, LQ, q, k, v);
    size_t smem = Lay<HD>::fwd;
    SRK_SMEM_AT_LEAST((fwd_kernel<HD, TO>), smem);
    dim3 grid = srk_tc::tile_grid(B, T, NH);
    SR_LAUNCH((fwd_kernel<HD, TO>), grid, THREADS, smem, srk_ctx.stream, out, copy, lse, q, k, v, T, C, LQ, NH, scale,
              vec);
    srk_ctx.attn_tc_launches++, srk_ctx.attn_mma_launches++;
}

template <int HD, class TDQ, class TDK, class TDV>
static void launch_bwd(TDQ *dq, TDK *dk, TDV *dv, const bf16 *g, const bf16 *q, const bf16 *k, const bf16 *v,
                       const float *lse, const float *delta, int B, int T, int C, int LQ, int NH, float scale,
                       int fresh)
{
    int vec = srk_tc::tiles_vec(C, LQ, q, k, v, g);
    dim3 grid = srk_tc::tile_grid(B, T, NH);
    if (dk || dv) {
        size_t smem = Lay<HD>::bwd_kv;
        SRK_SMEM_AT_LEAST((bwd_kv_kernel<HD, TDK, TDV>), smem);
        SR_LAUNCH((bwd_kv_kernel<HD, TDK, TDV>), grid, THREADS, smem, srk_ctx.stream, dk, dv, g, q, k, v, lse, delta, T,
                  C, LQ, NH, scale, vec, fresh);
    }
    if (dq) {
        size_t smem = Lay<HD>::bwd_q;
        SRK_SMEM_AT_LEAST((bwd_q_kernel<HD, TDQ>), smem);
        SR_LAUNCH((bwd_q_kernel<HD, TDQ>), grid, THREADS, smem, srk_ctx.stream, dq, g, q, k, v, lse, delta, T, C, LQ,
                  NH, scale, vec, fresh);
    }
    srk_ctx.attn_tc_launches++, srk_ctx.attn_mma_launches++;
}
} /* namespace srk_mma */

#endif /* SRK_ATTENTION_MMA_CUH */
