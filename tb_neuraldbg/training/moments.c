/* One pass over a float32 CPU tensor for every statistic a full step takes
 * of it: min, max, sum, sum of squares, non-zeros, non-finite values, NaNs,
 * and (batched, dim 0 the batch) the units that are zero in every sample.
 *
 * Why C: torch has no op that takes several of these in one read, and each
 * of its reductions is a pass over memory (50-130 us a megabyte of a freshly
 * written activation on the project's VM): five of them made the bulk of a
 * full step's cost. See cpu_kernel.py, which compiles this file at first use
 * and falls back to torch's ops where it cannot.
 *
 * Plain C99 with no headers but the C library's: no Python or torch headers,
 * so it compiles in under a second. The loops are written for the compiler
 * to vectorise (`omp simd` reductions: float lanes without -ffast-math, so
 * NaN and inf keep their meaning); on x86-64 an AVX2 copy is chosen at run
 * time when the CPU has it (the baseline copy is SSE2). Sums accumulate in
 * float lanes within a block and in double across blocks.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define BLOCK 4096
#define HIST_MAX_BINS 256

typedef struct {
    double sum, sumsq;
    float lo, hi;
    int64_t nonzero, nonfinite, nans;
} acc_t;

/* One loop over a block; `EXTRA` runs on each value `v` at index `i`. */
#define LOOP(EXTRA) \
    _Pragma("omp simd reduction(min:lo) reduction(max:hi) reduction(+:s,q,nz,bad,nans)") \
    for (int64_t i = 0; i < n; i++) { \
        float v = x[i]; \
        lo = v < lo ? v : lo; \
        hi = v > hi ? v : hi; \
        s += v; \
        q += v * v; \
        nz += v != 0.f; \
        bad += !(fabsf(v) <= FLT_MAX); \
        nans += v != v; \
        EXTRA \
    }

/* The body of one block: `alive` (or NULL) gets a 1 where a value is not 0
 * (two loops: the one without it vectorises better). */
#define PASS_BODY \
    { \
        float lo = INFINITY, hi = -INFINITY, s = 0.f, q = 0.f; \
        int nz = 0, bad = 0, nans = 0; \
        if (alive) { \
            LOOP(alive[i] |= v != 0.f;) \
        } else { \
            LOOP() \
        } \
        a->lo = lo < a->lo ? lo : a->lo; \
        a->hi = hi > a->hi ? hi : a->hi; \
        a->sum += s; \
        a->sumsq += q; \
        a->nonzero += nz; \
        a->nonfinite += bad; \
        a->nans += nans; \
    }

static void pass_base(const float *restrict x, int64_t n, int32_t *restrict alive, acc_t *a) PASS_BODY

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2,fma"))) static void pass_avx2(const float *restrict x, int64_t n,
                                                           int32_t *restrict alive, acc_t *a) PASS_BODY
#endif

typedef void (*pass_fn)(const float *restrict, int64_t, int32_t *restrict, acc_t *);

static pass_fn choose(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return pass_avx2;
#endif
    return pass_base;
}

/* out: [min, max, sum, L2 norm, non-zeros, non-finite, dead units].
 * units > 0: x is [n / units, units] (units must divide n) and `alive`
 * holds `units` bytes of scratch; dead units is -1 otherwise. min and max
 * are NaN when a value is NaN (as torch.aminmax gives them). Returns 0, or
 * -1 for arguments it does not take. */
int nd_moments_f32(const float *x, int64_t n, int64_t units, int32_t *alive, double *out) {
    static pass_fn pass = 0;
    if (!pass) pass = choose();
    if (n <= 0 || (units > 0 && (n % units != 0 || !alive))) return -1;
    acc_t a = {0.0, 0.0, INFINITY, -INFINITY, 0, 0, 0};
    if (units > 0) {
        memset(alive, 0, (size_t)units * sizeof(int32_t));
        for (int64_t r = 0; r < n; r += units)
            for (int64_t j = 0; j < units; j += BLOCK)
                pass(x + r + j, units - j < BLOCK ? units - j : BLOCK, alive + j, &a);
    } else {
        for (int64_t i = 0; i < n; i += BLOCK) pass(x + i, n - i < BLOCK ? n - i : BLOCK, 0, &a);
    }
    int64_t dead = -1;
    if (units > 0) {
        dead = 0;
        for (int64_t j = 0; j < units; j++) dead += !alive[j];
    }
    out[0] = a.nans ? NAN : (double)a.lo;
    out[1] = a.nans ? NAN : (double)a.hi;
    out[2] = a.sum;
    out[3] = sqrt(a.sumsq);
    out[4] = (double)a.nonzero;
    out[5] = (double)a.nonfinite;
    out[6] = (double)dead;
    return 0;
}

/* A histogram of `n` values `stride` floats apart, in two passes (bounds,
 * then bins), as stats.histogram lays it out: out[0..bins) the counts over
 * [min, max] in equal bins, out[bins] 0 (no non-finite value), then min,
 * max, sum and sum of squares. The bin of a value is computed as torch's
 * path computes it (float32: (v - min) * (float)(bins / width), clamped,
 * truncated), so both give the same counts. Returns 1 without touching
 * `out` when a value is not finite (torch's general path handles those),
 * -1 for arguments it does not take. */
int nd_hist_f32(const float *x, int64_t n, int64_t stride, int64_t bins, double *out) {
    if (n <= 0 || stride <= 0 || bins <= 0 || bins > HIST_MAX_BINS) return -1;
    float lo = INFINITY, hi = -INFINITY;
    double s = 0.0, q = 0.0;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i += BLOCK) {
        int64_t m = n - i < BLOCK ? n - i : BLOCK;
        const float *p = x + i * stride;
        float bs = 0.f, bq = 0.f, blo = lo, bhi = hi;
        int bb = 0;
        if (stride == 1) {
            _Pragma("omp simd reduction(min:blo) reduction(max:bhi) reduction(+:bs,bq,bb)")
            for (int64_t k = 0; k < m; k++) {
                float v = p[k];
                blo = v < blo ? v : blo;
                bhi = v > bhi ? v : bhi;
                bs += v;
                bq += v * v;
                bb += !(fabsf(v) <= FLT_MAX);
            }
        } else {
            for (int64_t k = 0; k < m; k++) {
                float v = p[k * stride];
                blo = v < blo ? v : blo;
                bhi = v > bhi ? v : bhi;
                bs += v;
                bq += v * v;
                bb += !(fabsf(v) <= FLT_MAX);
            }
        }
        lo = blo;
        hi = bhi;
        bad += bb;
        s += bs;
        q += bq;
    }
    if (bad) return 1;
    double width = (double)hi - (double)lo;
    if (width < 1e-30) width = 1e-30;
    float scale = (float)((double)bins / width), top = (float)(bins - 1);
    /* Bin indices a chunk at a time (a loop that vectorises), counted into
     * four interleaved sub-histograms (neighbouring values often share a
     * bin: one counter would wait for its own previous increment). */
    int32_t idx[1024];
    int64_t sub[4][HIST_MAX_BINS];
    memset(sub, 0, sizeof sub);
    for (int64_t i = 0; i < n; i += 1024) {
        int64_t m = n - i < 1024 ? n - i : 1024;
        const float *p = x + i * stride;
        if (stride == 1) {
            _Pragma("omp simd")
            for (int64_t k = 0; k < m; k++) {
                float t = (p[k] - lo) * scale;
                idx[k] = (int32_t)(t < 0.f ? 0.f : (t > top ? top : t));
            }
        } else {
            for (int64_t k = 0; k < m; k++) {
                float t = (p[k * stride] - lo) * scale;
                idx[k] = (int32_t)(t < 0.f ? 0.f : (t > top ? top : t));
            }
        }
        int64_t k = 0;
        for (; k + 4 <= m; k += 4) {
            sub[0][idx[k]]++;
            sub[1][idx[k + 1]]++;
            sub[2][idx[k + 2]]++;
            sub[3][idx[k + 3]]++;
        }
        for (; k < m; k++) sub[0][idx[k]]++;
    }
    for (int64_t j = 0; j < bins; j++) out[j] = (double)(sub[0][j] + sub[1][j] + sub[2][j] + sub[3][j]);
    out[bins] = 0.0;
    out[bins + 1] = lo;
    out[bins + 2] = hi;
    out[bins + 3] = s;
    out[bins + 4] = q;
    return 0;
}

/* L2 norms of `count` float32 arrays (`ptrs[i]`, `lens[i]` values each) into
 * out[i]: the norms of many small gradients in one call, where torch's
 * _foreach_norm costs about 3 us of dispatch a tensor on the CPU. */
int nd_norms_f32(const uint64_t *ptrs, const int64_t *lens, int64_t count, double *out) {
    for (int64_t t = 0; t < count; t++) {
        const float *x = (const float *)(uintptr_t)ptrs[t];
        int64_t n = lens[t];
        double q = 0.0;
        for (int64_t i = 0; i < n; i += BLOCK) {
            int64_t m = n - i < BLOCK ? n - i : BLOCK;
            const float *p = x + i;
            float bq = 0.f;
            _Pragma("omp simd reduction(+:bq)")
            for (int64_t k = 0; k < m; k++) bq += p[k] * p[k];
            q += bq;
        }
        out[t] = sqrt(q);
    }
    return 0;
}

/* The sum of n float32 values (float lanes within a block, double across
 * blocks, as the moments' sum): the non-finite flag of an output gradient,
 * in one read where torch's sum, switched to one thread and back, costs
 * 10-40 us more on a small tensor. */
#define SUM_BODY \
    { \
        double s = 0.0; \
        for (int64_t i = 0; i < n; i += BLOCK) { \
            int64_t m = n - i < BLOCK ? n - i : BLOCK; \
            const float *p = x + i; \
            float bs = 0.f; \
            _Pragma("omp simd reduction(+:bs)") \
            for (int64_t k = 0; k < m; k++) bs += p[k]; \
            s += bs; \
        } \
        return s; \
    }

static double sum_base(const float *restrict x, int64_t n) SUM_BODY

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2,fma"))) static double sum_avx2(const float *restrict x, int64_t n) SUM_BODY
#endif

double nd_sum_f32(const float *x, int64_t n) {
    static double (*sum)(const float *restrict, int64_t) = 0;
    if (!sum) {
        sum = sum_base;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        if (choose() == pass_avx2) sum = sum_avx2;
#endif
    }
    return sum(x, n);
}
