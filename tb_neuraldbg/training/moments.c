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
