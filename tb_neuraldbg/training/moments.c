/* One pass over a float32 CPU tensor (or a bfloat16 or float16 one: a CPU
 * autocast's activations, read as the floats they hold) for every
 * statistic a full step takes of it: min, max, sum, sum of squares,
 * non-zeros, non-finite values, NaNs, (batched, dim 0 the batch) the units
 * that are zero in every sample, and (a bounded activation's: tanh,
 * sigmoid, hardtanh...) the saturated values.
 *
 * Why C: torch has no op that takes several of these in one read, and each
 * of its reductions is a pass over memory (50-130 us a megabyte of a freshly
 * written activation on the project's VM): five of them made the bulk of a
 * full step's cost. See cpu_kernel.py, which calls it and falls back to
 * torch's ops where it cannot, and kernel_build.py, which compiles this file
 * at first use.
 *
 * Plain C99 with no headers but the C library's (and OpenMP's, for reads
 * in parts on torch's intra-op threads: see run_parts): no Python or torch
 * headers, so it compiles in under a second. The loops are written for the compiler
 * to vectorise (`omp simd` over arrays of independent lanes: no
 * -ffast-math, so NaN and inf keep their meaning); on x86-64 an AVX2 copy
 * is chosen at run time when the CPU has it (the baseline copy is SSE2).
 * Sums accumulate in float lanes within a block and in double across
 * blocks. A pass is bound by the adds' latency on data in cache, not by
 * memory: the lanes (16 or 32 a reduction, against 8 for one AVX register)
 * made it 1.6x faster for the moments, 2-4x for a sum or sum of squares,
 * on 32,768 values in cache on the project's VM.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define BLOCK 4096
#define HIST_MAX_BINS 256

/* Lanes of independent accumulators: one vector register a reduction is a
 * chain of dependent adds (4 cycles each), so a single one runs at a
 * quarter of the machine's speed on data in cache. The moments keep five
 * reductions in 16 lanes (two AVX registers each: ten of the sixteen);
 * a plain sum or sum of squares keeps 32 (four registers). */
#define LANES 16
#define WIDE 32

typedef struct {
    double sum, sumsq;
    float lo, hi;
    int64_t nonzero, saturated;
} acc_t;

/* A bounded activation's flat ends, as stats.saturated tests them: a value
 * is saturated where max(d, sign * d) >= half, d = v - mid; sign -1: |v -
 * mid| >= half (both ends), +1: v >= mid (half 0: the top end only). In
 * float32, as torch's ops compute it on a float32 tensor (on a bfloat16 or
 * float16 one, mid, half and d rounded to its type: ROUND, nd_moments_bf16),
 * so that both count the same values; a NaN is never saturated, an inf
 * always. */
typedef struct {
    float mid, half, sign;
} bounds_t;

/* One value `v` into lane `j`; `EXTRA` runs with it (index `i + j`). */
#define STEP(EXTRA) \
    lo[j] = v < lo[j] ? v : lo[j]; \
    hi[j] = v > hi[j] ? v : hi[j]; \
    s[j] += v; \
    q[j] += v * v; \
    nz[j] += v != 0.f; \
    EXTRA

/* The saturation test of `v` into lane `j` (`mid`, `half`, `sign` of a bounds_t). */
#define SATURATED \
    { \
        float d = ROUND(v - mid); /* (no comma: this is a macro's argument) */ \
        float e = sign * d; \
        ns[j] += (d > e ? d : e) >= half; \
    }

/* One loop over a block in LANES lanes, the tail in the first lanes. The
 * non-finite values are not counted here: one makes the sum NaN or
 * infinite, and then count_nonfinite counts them exactly (two fewer
 * reductions a value on every healthy tensor). `ns` stays 0 unless EXTRA
 * counts saturated values (SATURATED). */
#define LOOP(EXTRA) \
    { \
        float lo[LANES], hi[LANES], s[LANES], q[LANES]; \
        int32_t nz[LANES], ns[LANES]; \
        for (int j = 0; j < LANES; j++) { \
            lo[j] = INFINITY; \
            hi[j] = -INFINITY; \
            s[j] = q[j] = 0.f; \
            nz[j] = ns[j] = 0; \
        } \
        int64_t i = 0; \
        for (; i + LANES <= n; i += LANES) { \
            _Pragma("omp simd") \
            for (int j = 0; j < LANES; j++) { \
                float v = LOAD(i + j); \
                STEP(EXTRA) \
            } \
        } \
        for (int j = 0; i + j < n; j++) { \
            float v = LOAD(i + j); \
            STEP(EXTRA) \
        } \
        double bs = 0.0, bq = 0.0; \
        for (int j = 0; j < LANES; j++) { \
            a->lo = lo[j] < a->lo ? lo[j] : a->lo; \
            a->hi = hi[j] > a->hi ? hi[j] : a->hi; \
            bs += s[j]; \
            bq += q[j]; \
            a->nonzero += nz[j]; \
            a->saturated += ns[j]; \
        } \
        a->sum += bs; \
        a->sumsq += bq; \
    }

/* The body of one block: `alive` (or NULL) gets a 1 where a value is not 0,
 * `b` (or NULL) counts the saturated values (a loop for each: the fewer
 * reductions one has, the better it vectorises). */
#define PASS_BODY \
    { \
        if (b) { \
            const float mid = b->mid, half = b->half, sign = b->sign; \
            if (alive) { \
                LOOP(alive[i + j] |= v != 0.f; SATURATED) \
            } else { \
                LOOP(SATURATED) \
            } \
        } else if (alive) { \
            LOOP(alive[i + j] |= v != 0.f;) \
        } else { \
            LOOP() \
        } \
    }

/* A float's bits, and the float of bits (no conversion). */
static inline uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* bfloat16 (a CPU autocast's activations): the top half of a float32, so
 * its value is exact as a float; a float rounded to it as torch rounds
 * (to nearest, ties to even: c10::BFloat16), for the saturation test of a
 * bfloat16 tensor, which torch's ops compute in bfloat16. (A NaN read from
 * a bfloat16 has its low 16 bits zero: it stays a NaN.) */
static inline float bf16_value(uint16_t h) { return bits_float((uint32_t)h << 16); }

static inline float bf16_round(float f) {
    const uint32_t u = float_bits(f);
    return bits_float((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}

/* float16 (IEEE half: a CPU autocast to float16, a model cast to it): its
 * value as a float, exact, without a branch or a library call (the loops
 * vectorise; GCC does not vectorise a _Float16 conversion): c10::Half's
 * fp16_ieee_to_fp32_value. Normal values move their exponent (a float
 * product by a power of two, exact); subnormal ones are a magic-number
 * difference; inf and NaN map to inf and NaN. */
static inline float f16_value(uint16_t h) {
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t two_w = w + w;
    const float normal = bits_float((two_w >> 4) + (0xe0u << 23)) * 0x1.0p-112f;
    const float subnormal = bits_float((two_w >> 17) | (126u << 23)) - 0.5f;
    /* (selected through a mask: a conditional expression here kept GCC 12
     * from vectorising the loops) */
    const uint32_t tiny = 0u - (uint32_t)(two_w < (1u << 27));
    return bits_float((w & 0x80000000u) | (float_bits(subnormal) & tiny) | (float_bits(normal) & ~tiny));
}

/* A float rounded to float16 (to nearest, ties to even, as c10::Half
 * rounds), as a float: 10 bits of significand kept in the normal range;
 * below it (2^-14) a multiple of 2^-24; from 65520 (half an ulp over
 * float16's largest) inf. The saturation test of a float16 tensor, which
 * torch's ops compute in float16. (The subnormal sum is exact whether or
 * not the compiler fuses its product and add: the product is exact.) */
static inline float f16_round(float f) {
    const float a = fabsf(f);
    const uint32_t u = float_bits(f), sign = u & 0x80000000u;
    const uint32_t normal = (u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u;
    const float subnormal = ((a * 0x1.0p24f + 0x1.0p23f) - 0x1.0p23f) * 0x1.0p-24f;
    const uint32_t tiny = 0u - (uint32_t)(a < 0x1.0p-14f);
    const uint32_t huge = 0u - (uint32_t)(a >= 65520.0f); /* (a NaN is not: it stays one) */
    const uint32_t r = ((sign | float_bits(subnormal)) & tiny) | (normal & ~tiny);
    return bits_float(((sign | 0x7f800000u) & huge) | (r & ~huge));
}

/* The kinds of values the kernel reads, and their sizes in bytes. */
enum { F32 = 0, BF16 = 1, F16 = 2 };
#define KIND_SIZE(kind) ((kind) == F32 ? 4 : 2)

/* Value `i` of `x`, of a kind. */
static inline float value_at(const void *x, int kind, int64_t i) {
    if (kind == F32) return ((const float *)x)[i];
    const uint16_t h = ((const uint16_t *)x)[i];
    return kind == BF16 ? bf16_value(h) : f16_value(h);
}

/* A pass over values of type T (float32: LOAD and ROUND as they are;
 * bfloat16 and float16: read as floats, the saturation test rounded to the
 * tensor's type). */
#define PASS(NAME, ATTR, T) \
    ATTR static void NAME(const void *xv, int64_t n, int32_t *restrict alive, const bounds_t *b, acc_t *a) { \
        const T *restrict x = (const T *)xv; \
        PASS_BODY \
    }

#define LOAD(k) x[k]
#define ROUND(f) (f)
PASS(pass_base, , float)
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
PASS(pass_avx2, __attribute__((target("avx2,fma"))), float)
#endif
#undef LOAD
#undef ROUND
#define LOAD(k) bf16_value(x[k])
#define ROUND(f) bf16_round(f)
PASS(pass_bf16_base, , uint16_t)
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
PASS(pass_bf16_avx2, __attribute__((target("avx2,fma"))), uint16_t)
#endif
#undef LOAD
#undef ROUND
#define LOAD(k) f16_value(x[k])
#define ROUND(f) f16_round(f)
PASS(pass_f16_base, , uint16_t)
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
PASS(pass_f16_avx2, __attribute__((target("avx2,fma"))), uint16_t)
#endif
#undef LOAD
#undef ROUND

typedef void (*pass_fn)(const void *, int64_t, int32_t *restrict, const bounds_t *, acc_t *);

static int has_avx2(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

/* The pass over values of a kind for this CPU. */
static pass_fn choose(int kind) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    static const pass_fn avx2[3] = {pass_avx2, pass_bf16_avx2, pass_f16_avx2};
    if (has_avx2()) return avx2[kind];
#endif
    static const pass_fn base[3] = {pass_base, pass_bf16_base, pass_f16_base};
    return base[kind];
}

/* The non-finite values and the NaNs among the `n` at `x` of a kind (a
 * second pass, only over a tensor that has one, or whose sums overflowed). */
static void count_nonfinite(const void *x, int kind, int64_t n, int64_t *nonfinite, int64_t *nans) {
    int64_t bad = 0, nan = 0;
    for (int64_t i = 0; i < n; i++) {
        float v = value_at(x, kind, i);
        bad += !(fabsf(v) <= FLT_MAX);
        nan += v != v;
    }
    *nonfinite = bad;
    *nans = nan;
}

/* The values of one read (`units > 0`: rows of `units` values, whose
 * non-zero places go to `alive`) into `a`, in the blocks every copy of the
 * read takes: the same blocks whether one core reads them or two. */
static void read_blocks(pass_fn pass, const void *x, int esize, int64_t n, int64_t units, int32_t *alive,
                        const bounds_t *b, acc_t *a) {
    const char *c = (const char *)x; /* (`esize` bytes a value) */
    if (units > 0) {
        for (int64_t r = 0; r < n; r += units)
            for (int64_t j = 0; j < units; j += BLOCK)
                pass(c + (r + j) * esize, units - j < BLOCK ? units - j : BLOCK, alive + j, b, a);
    } else {
        for (int64_t i = 0; i < n; i += BLOCK) pass(c + i * esize, n - i < BLOCK ? n - i : BLOCK, 0, b, a);
    }
}

/* CPU time that threads other than the caller's spent in the kernel's
 * reads so far (what benchmarks count as the writer's own, beside its
 * threads'): nanoseconds, added atomically. */
static int64_t helper_ns = 0;

#ifdef _OPENMP
static int64_t thread_cpu_ns(void) {
    struct timespec t;
    return clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) == 0 ? (int64_t)t.tv_sec * 1000000000 + t.tv_nsec : 0;
}
#endif

/* A read of megabytes is bound by one core's memory bandwidth (about
 * 10 GB/s on the project's VM): from PART_MIN values a part (1 MB), it is
 * cut into parts read by the intra-op threads torch's own ops run on (the
 * calling thread's OpenMP team: its threads wait, spinning, for the next op;
 * a thread of the kernel's own would have to share a core with one, and was
 * slower than one core under OpenMP's default wait policy). 4 MB of a fresh
 * activation on two cores: 372 -> 241 us (benchmarks/reads_in_parts.py). */
#define PART_MIN (1 << 18)
#define MAX_PARTS 64

/* 0 when the library's OpenMP is not torch's (kernel_build.py checks): one core. */
static int parts_enabled = 1;

void nd_set_parts_enabled(int on) { __atomic_store_n(&parts_enabled, on, __ATOMIC_RELAXED); }

/* The address of omp_get_max_threads as this library bound it (NULL: built
 * without OpenMP), for kernel_build.py to compare with torch's. */
void *nd_openmp_entry(void) {
#ifdef _OPENMP
    return (void *)&omp_get_max_threads;
#else
    return 0;
#endif
}

/* How many parts a read may be cut into, at most `want`: one per thread of
 * the caller's team (torch's intra-op threads); 1 without OpenMP, inside a
 * parallel region, or when disabled. */
static int team_parts(int64_t want) {
#ifdef _OPENMP
    if (want < 2 || !__atomic_load_n(&parts_enabled, __ATOMIC_RELAXED) || omp_in_parallel()) return 1;
    int64_t t = omp_get_max_threads();
    return (int)(want < t ? want : t);
#else
    (void)want;
    return 1;
#endif
}

/* The parts of a read of `n` values: PART_MIN values at least a part. */
static int parts_for(int64_t n) {
    int64_t want = n / PART_MIN;
    return team_parts(want < MAX_PARTS ? want : MAX_PARTS);
}

typedef void (*part_fn)(void *ctx, int part, int parts);

/* fn(ctx, p, parts) for every p in [0, parts): on the team when there are
 * several (however many threads it turns out to have), else here. */
static void run_parts(part_fn fn, void *ctx, int parts) {
#ifdef _OPENMP
    if (parts > 1) {
        int64_t ns = 0;
        /* (no num_threads clause: as torch's own regions, so that its
         * thread pool is reused as it is; pytorch/pytorch#32008) */
#pragma omp parallel reduction(+ : ns)
        {
            int t = omp_get_thread_num(), nt = omp_get_num_threads();
            int64_t t0 = t ? thread_cpu_ns() : 0;
            for (int p = t; p < parts; p += nt) fn(ctx, p, parts);
            if (t) ns += thread_cpu_ns() - t0;
        }
        __atomic_fetch_add(&helper_ns, ns, __ATOMIC_RELAXED);
        return;
    }
#endif
    for (int p = 0; p < parts; p++) fn(ctx, p, parts);
}

typedef struct {
    pass_fn pass;
    const void *x;
    int esize;
    int64_t n, units;
    int32_t *alive, *scratch; /* the first part's `alive`, the others' */
    const bounds_t *bounds;
    acc_t acc[MAX_PARTS];
} moments_job;

/* Part p of the read: whole rows (batched) or whole blocks, so that every
 * block is the one a single read takes. */
static void moments_part(void *ctx, int p, int parts) {
    moments_job *j = (moments_job *)ctx;
    int64_t piece = j->units > 0 ? j->units : BLOCK, pieces = (j->n + piece - 1) / piece;
    int64_t lo = pieces * p / parts * piece, hi = p + 1 == parts ? j->n : pieces * (p + 1) / parts * piece;
    int32_t *alive = j->units > 0 ? (p ? j->scratch + (p - 1) * j->units : j->alive) : 0;
    if (hi > lo)
        read_blocks(j->pass, (const char *)j->x + lo * j->esize, j->esize, hi - lo, j->units, alive, j->bounds,
                    &j->acc[p]);
}

/* The read in parts (each batched part with its own `alive` scratch, OR-ed
 * into the caller's after), their accumulators added in order. */
static void read_in_parts(pass_fn pass, const void *x, int esize, int64_t n, int64_t units, int32_t *alive,
                          const bounds_t *b, int parts, acc_t *a) {
    moments_job j;
    j.pass = pass, j.x = x, j.esize = esize, j.n = n, j.units = units, j.alive = alive, j.scratch = 0, j.bounds = b;
    if (units > 0) {
        int64_t rows = n / units;
        parts = rows < parts ? (int)rows : parts;
        if (parts < 2 || !(j.scratch = (int32_t *)calloc((size_t)(parts - 1) * (size_t)units, sizeof(int32_t)))) {
            read_blocks(pass, x, esize, n, units, alive, b, a);
            return;
        }
    }
    for (int p = 0; p < parts; p++) j.acc[p] = *a;
    run_parts(moments_part, &j, parts);
    *a = j.acc[0];
    for (int p = 1; p < parts; p++) {
        a->lo = j.acc[p].lo < a->lo ? j.acc[p].lo : a->lo;
        a->hi = j.acc[p].hi > a->hi ? j.acc[p].hi : a->hi;
        a->sum += j.acc[p].sum;
        a->sumsq += j.acc[p].sumsq;
        a->nonzero += j.acc[p].nonzero;
        a->saturated += j.acc[p].saturated;
    }
    if (j.scratch) {
        for (int p = 1; p < parts; p++) {
            const int32_t *theirs = j.scratch + (p - 1) * units;
            for (int64_t k = 0; k < units; k++) alive[k] |= theirs[k];
        }
        free(j.scratch);
    }
}

/* out: [min, max, sum, L2 norm, non-zeros, non-finite, dead units,
 * saturated values]. units > 0: x is [n / units, units] (units must divide
 * n) and `alive` holds `units` bytes of scratch; dead units is -1 otherwise.
 * `bounds` (or NULL: saturated is -1): [mid, half, sign] of bounds_t. min
 * and max are NaN when a value is NaN (as torch.aminmax gives them).
 * Returns 0, or -1 for arguments it does not take. */
static int moments(pass_fn pass, const void *x, int kind, int64_t n, int64_t units, int32_t *alive,
                   const bounds_t *bp, double *out);

/* Bounds in the type's values: a top end at +inf (a bound beyond the
 * type's largest value, rounded to it) counts the values that are +inf, as
 * torch's `x >= inf` does; `v - inf` would be NaN for them. */
static bounds_t at_inf(bounds_t b) {
    if (b.sign > 0 && b.mid == INFINITY) b.mid = 0.f, b.half = INFINITY;
    return b;
}

int nd_moments_f32(const float *x, int64_t n, int64_t units, int32_t *alive, const float *bounds, double *out) {
    static pass_fn pass = 0;
    if (!pass) pass = choose(F32);
    bounds_t b;
    if (bounds) b.mid = bounds[0], b.half = bounds[1], b.sign = bounds[2], b = at_inf(b);
    return moments(pass, x, F32, n, units, alive, bounds ? &b : 0, out);
}

/* The moments of 16-bit values of a kind (their bit patterns), whose
 * saturated ones are tested as torch's ops test a tensor of that type:
 * they cast a Python number to the tensor's type first, so `mid` and
 * `half` are rounded to it (`round`), and the distance too (ROUND). */
static int moments_16(pass_fn pass, int kind, float (*round)(float), const uint16_t *x, int64_t n, int64_t units,
                      int32_t *alive, const float *bounds, double *out) {
    bounds_t b;
    if (bounds) b.mid = round(bounds[0]), b.half = round(bounds[1]), b.sign = bounds[2], b = at_inf(b);
    return moments(pass, x, kind, n, units, alive, bounds ? &b : 0, out);
}

/* nd_moments_f32 of bfloat16 values (`x`: their 16-bit patterns). */
int nd_moments_bf16(const uint16_t *x, int64_t n, int64_t units, int32_t *alive, const float *bounds, double *out) {
    static pass_fn pass = 0;
    if (!pass) pass = choose(BF16);
    return moments_16(pass, BF16, bf16_round, x, n, units, alive, bounds, out);
}

/* nd_moments_f32 of float16 values (their 16-bit patterns). */
int nd_moments_f16(const uint16_t *x, int64_t n, int64_t units, int32_t *alive, const float *bounds, double *out) {
    static pass_fn pass = 0;
    if (!pass) pass = choose(F16);
    return moments_16(pass, F16, f16_round, x, n, units, alive, bounds, out);
}

static int moments(pass_fn pass, const void *x, int kind, int64_t n, int64_t units, int32_t *alive,
                   const bounds_t *bp, double *out) {
    if (n <= 0 || (units > 0 && (n % units != 0 || !alive))) return -1;
    const int esize = KIND_SIZE(kind);
    acc_t a = {0.0, 0.0, INFINITY, -INFINITY, 0, 0};
    if (units > 0) memset(alive, 0, (size_t)units * sizeof(int32_t));
    int parts = parts_for(n * esize / 4); /* (parts of PART_MIN * 4 bytes) */
    if (parts > 1)
        read_in_parts(pass, x, esize, n, units, alive, bp, parts, &a);
    else
        read_blocks(pass, x, esize, n, units, alive, bp, &a);
    /* A NaN or an inf makes the sum NaN or infinite (finite values whose
     * sum overflows too: then the count says 0). */
    int64_t nonfinite = 0, nans = 0;
    if (!isfinite(a.sum)) count_nonfinite(x, kind, n, &nonfinite, &nans);
    int64_t dead = -1;
    if (units > 0) {
        dead = 0;
        for (int64_t j = 0; j < units; j++) dead += !alive[j];
    }
    out[0] = nans ? NAN : (double)a.lo;
    out[1] = nans ? NAN : (double)a.hi;
    out[2] = a.sum;
    out[3] = sqrt(a.sumsq);
    out[4] = (double)a.nonzero;
    out[5] = (double)nonfinite;
    out[6] = (double)dead;
    out[7] = bp ? (double)a.saturated : -1.0;
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
static void bin_values(const void *x, int kind, int64_t n, int64_t stride, int64_t bins, float lo, float hi,
                       double *out);

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
    bin_values(x, F32, n, stride, bins, lo, hi, out);
    out[bins + 3] = s;
    out[bins + 4] = q;
    return 0;
}

/* count_bins' bin of value `V` (clamped to [0, top], truncated) into idx[k]. */
#define BIN_OF(V) \
    { \
        float t = ((V) - lo) * scale; \
        idx[k] = (int32_t)(t < 0.f ? 0.f : (t > top ? top : t)); \
    }

/* The bins of n finite float32 values (every `stride`-th; bfloat16 or
 * float16 ones: contiguous) from `x`, added into counts[0:bins]: (v - lo)
 * * scale, clamped to [0, bins - 1], truncated. */
static void count_bins(const void *xv, int kind, int64_t n, int64_t stride, float lo, float scale, int64_t bins,
                       int64_t *counts) {
    /* Bin indices a chunk at a time (a loop that vectorises), counted into
     * four interleaved sub-histograms (neighbouring values often share a
     * bin: one counter would wait for its own previous increment). */
    int32_t idx[1024];
    int64_t sub[4][HIST_MAX_BINS];
    const float top = (float)(bins - 1);
    memset(sub, 0, sizeof sub);
    for (int64_t i = 0; i < n; i += 1024) {
        int64_t m = n - i < 1024 ? n - i : 1024;
        const float *p = kind == F32 ? (const float *)xv + i * stride : 0;
        const uint16_t *h = kind == F32 ? 0 : (const uint16_t *)xv + i; /* (contiguous) */
        if (kind == BF16) {
            _Pragma("omp simd") for (int64_t k = 0; k < m; k++) BIN_OF(bf16_value(h[k]))
        } else if (kind == F16) {
            _Pragma("omp simd") for (int64_t k = 0; k < m; k++) BIN_OF(f16_value(h[k]))
        } else if (stride == 1) {
            _Pragma("omp simd") for (int64_t k = 0; k < m; k++) BIN_OF(p[k])
        } else {
            for (int64_t k = 0; k < m; k++) BIN_OF(p[k * stride])
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
    for (int64_t j = 0; j < bins; j++) counts[j] += sub[0][j] + sub[1][j] + sub[2][j] + sub[3][j];
}

typedef struct {
    const void *x;
    int kind;
    int64_t n, stride, bins;
    float lo, scale;
    int64_t *counts; /* `parts` rows of `bins` */
} bins_job;

static void bins_part(void *ctx, int p, int parts) {
    bins_job *j = (bins_job *)ctx;
    int64_t lo = j->n * p / parts, hi = j->n * (p + 1) / parts;
    if (hi > lo)
        count_bins((const char *)j->x + lo * j->stride * KIND_SIZE(j->kind), j->kind, hi - lo, j->stride, j->lo,
                   j->scale, j->bins, j->counts + p * j->bins);
}

/* The bins of n finite values of a kind (float32 every `stride`-th;
 * bfloat16, float16 contiguous) whose min and max are `lo` and `hi`, into
 * out[0:bins]; out[bins] = 0 (no non-finite value), out[bins + 1],
 * out[bins + 2] = lo, hi. From 2 MB, in parts on torch's threads (as the
 * moments: run_parts), each with its own counts, added after: the same
 * counts as one pass. */
static void bin_values(const void *x, int kind, int64_t n, int64_t stride, int64_t bins, float lo, float hi,
                       double *out) {
    double width = (double)hi - (double)lo;
    if (width < 1e-30) width = 1e-30;
    float scale = (float)((double)bins / width);
    int parts = parts_for(n * KIND_SIZE(kind) / 4);
    int64_t one[HIST_MAX_BINS];
    int64_t *counts = parts > 1 ? (int64_t *)calloc((size_t)parts * (size_t)bins, sizeof(int64_t)) : 0;
    if (counts) {
        bins_job j = {x, kind, n, stride, bins, lo, scale, counts};
        run_parts(bins_part, &j, parts);
        for (int p = 1; p < parts; p++)
            for (int64_t k = 0; k < bins; k++) counts[k] += counts[p * bins + k];
    } else {
        memset(one, 0, sizeof one);
        count_bins(x, kind, n, stride, lo, scale, bins, one);
        counts = one;
    }
    for (int64_t k = 0; k < bins; k++) out[k] = (double)counts[k];
    if (counts != one) free(counts);
    out[bins] = 0.0;
    out[bins + 1] = lo;
    out[bins + 2] = hi;
}

/* nd_hist_f32 of n contiguous finite values whose min, max, sum and sum of
 * squares a full step's moments have just read (`known`: those four): the
 * binning pass only. -1 for arguments it does not take. */
static int hist_known(const void *x, int kind, int64_t n, int64_t bins, const double *known, double *out) {
    if (n <= 0 || bins <= 0 || bins > HIST_MAX_BINS) return -1;
    bin_values(x, kind, n, 1, bins, (float)known[0], (float)known[1], out);
    out[bins + 3] = known[2];
    out[bins + 4] = known[3];
    return 0;
}

int nd_hist_known_f32(const float *x, int64_t n, int64_t bins, const double *known, double *out) {
    return hist_known(x, F32, n, bins, known, out);
}

/* nd_hist_known_f32 of bfloat16 values (a CPU autocast's activation, whose
 * moments nd_moments_bf16 has just read), binned as the floats they hold:
 * the counts torch's path gives after its float32 copy. */
int nd_hist_known_bf16(const uint16_t *x, int64_t n, int64_t bins, const double *known, double *out) {
    return hist_known(x, BF16, n, bins, known, out);
}

/* nd_hist_known_bf16 of float16 values. */
int nd_hist_known_f16(const uint16_t *x, int64_t n, int64_t bins, const double *known, double *out) {
    return hist_known(x, F16, n, bins, known, out);
}

/* The sum of `EXPR` (of each value `v`, read from `p` by `IN`) over the
 * `m` values of one block at `p`, in WIDE lanes of type `T`: NaN and inf
 * propagate. */
#define WIDE_BLOCK(T, IN, EXPR) \
    { \
        T acc[WIDE]; \
        for (int j = 0; j < WIDE; j++) acc[j] = 0; \
        int64_t i = 0; \
        for (; i + WIDE <= m; i += WIDE) { \
            _Pragma("omp simd") \
            for (int j = 0; j < WIDE; j++) { \
                T v = IN(p[i + j]); \
                acc[j] += EXPR; \
            } \
        } \
        for (int j = 0; i + j < m; j++) { \
            T v = IN(p[i + j]); \
            acc[j] += EXPR; \
        } \
        double b = 0.0; \
        for (int j = 0; j < WIDE; j++) b += acc[j]; \
        return b; \
    }
#define AS_IS(v) (v)

/* The squares of a block add up in float lanes: from memory a third faster
 * than double lanes (the conversions), and exact enough. A block whose float
 * sum is not a normal number well above float32's smallest is added again in
 * double: a square that overflowed (a finite gradient of 1.8e19 or more:
 * exploding, not non-finite) or that underflowed (values of 1e-19 or less:
 * a vanishing gradient must not read as exactly 0), or a NaN or an inf (the
 * double sum is non-finite too). A bfloat16 value's square is exact in a
 * float (8 significant bits: 16 in the square). */
#define SUMSQ_FLOOR 1e-28f

/* Blocks of `x` summed by `BLOCK_FN` (then, for a block that `REDO` says
 * needs it, by `AGAIN`), in double across blocks. */
#define BLOCKED(BLOCK_FN, REDO, AGAIN) \
    { \
        double t = 0.0; \
        for (int64_t i0 = 0; i0 < n; i0 += BLOCK) { \
            int64_t m = n - i0 < BLOCK ? n - i0 : BLOCK; \
            double b = BLOCK_FN(x + i0, m); \
            if (REDO) b = AGAIN(x + i0, m); \
            t += b; \
        } \
        return t; \
    }
#define SQUARES_LOST !(b >= SUMSQ_FLOOR && b <= FLT_MAX)

typedef double (*sum_fn)(const float *restrict, int64_t);
typedef double (*sumsq_fn)(const void *, int64_t); /* (of values of a kind) */

/* A sum of squares of values of type T (SQF, SQD: its blocks' in float and
 * in double lanes) for an instruction set (ATTR). */
#define SUMSQ(NAME, ATTR, T, SQF, SQD) \
    ATTR static double NAME(const void *xv, int64_t n) { \
        const T *restrict x = (const T *)xv; \
        BLOCKED(SQF, SQUARES_LOST, SQD) \
    }

/* A sum and a sum of squares of float32 values, sums of squares of
 * bfloat16 and float16 ones (the gradients of a model trained in them),
 * for an instruction set (ATTR). A float16 value's square is exact in a
 * float too (11 significant bits: 22 in the square). */
#define SUMS(SUFFIX, ATTR) \
    ATTR static double block_sum_##SUFFIX(const float *restrict p, int64_t m) WIDE_BLOCK(float, AS_IS, v) \
    ATTR static double block_sqf_##SUFFIX(const float *restrict p, int64_t m) WIDE_BLOCK(float, AS_IS, v * v) \
    ATTR static double block_sqd_##SUFFIX(const float *restrict p, int64_t m) WIDE_BLOCK(double, AS_IS, v * v) \
    ATTR static double block_sqf_bf16_##SUFFIX(const uint16_t *restrict p, int64_t m) \
        WIDE_BLOCK(float, bf16_value, v * v) \
    ATTR static double block_sqd_bf16_##SUFFIX(const uint16_t *restrict p, int64_t m) \
        WIDE_BLOCK(double, bf16_value, v * v) \
    ATTR static double block_sqf_f16_##SUFFIX(const uint16_t *restrict p, int64_t m) \
        WIDE_BLOCK(float, f16_value, v * v) \
    ATTR static double block_sqd_f16_##SUFFIX(const uint16_t *restrict p, int64_t m) \
        WIDE_BLOCK(double, f16_value, v * v) \
    ATTR static double sum_##SUFFIX(const float *restrict x, int64_t n) \
        BLOCKED(block_sum_##SUFFIX, 0, block_sum_##SUFFIX) \
    SUMSQ(sumsq_##SUFFIX, ATTR, float, block_sqf_##SUFFIX, block_sqd_##SUFFIX) \
    SUMSQ(sumsq_bf16_##SUFFIX, ATTR, uint16_t, block_sqf_bf16_##SUFFIX, block_sqd_bf16_##SUFFIX) \
    SUMSQ(sumsq_f16_##SUFFIX, ATTR, uint16_t, block_sqf_f16_##SUFFIX, block_sqd_f16_##SUFFIX)

SUMS(base, )
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
SUMS(avx2, __attribute__((target("avx2,fma"))))
#endif

static sum_fn choose_sum(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (has_avx2()) return sum_avx2;
#endif
    return sum_base;
}

/* The sum of squares of values of a kind for this CPU. */
static sumsq_fn choose_sumsq(int kind) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    static const sumsq_fn avx2[3] = {sumsq_avx2, sumsq_bf16_avx2, sumsq_f16_avx2};
    if (has_avx2()) return avx2[kind];
#endif
    static const sumsq_fn base[3] = {sumsq_base, sumsq_bf16_base, sumsq_f16_base};
    return base[kind];
}

static sumsq_fn sumsq[3] = {0, 0, 0}; /* by kind */

/* The L2 norms of `count` arrays of values of a kind into out[i]. */
static void norms_of(const uint64_t *ptrs, const int64_t *lens, int64_t count, int kind, double *out) {
    sumsq_fn f = sumsq[kind]; /* (chosen by the first call that needs it; a concurrent one chooses the same) */
    if (!f) sumsq[kind] = f = choose_sumsq(kind);
    for (int64_t t = 0; t < count; t++) out[t] = sqrt(f((const void *)(uintptr_t)ptrs[t], lens[t]));
}

/* L2 norms of `count` float32 arrays (`ptrs[i]`, `lens[i]` values each) into
 * out[i]: the norms of many small gradients in one call, where torch's
 * _foreach_norm costs about 3 us of dispatch a tensor on the CPU. A finite
 * gradient has a finite norm (float squares, as torch's float32 norm takes
 * them, overflow from 1.8e19 a value and would make an exploding gradient
 * read as a non-finite one: such a block is added again in double). */
int nd_norms_f32(const uint64_t *ptrs, const int64_t *lens, int64_t count, double *out) {
    norms_of(ptrs, lens, count, F32, out);
    return 0;
}

/* nd_norms_f32 of bfloat16 arrays (a model trained in bfloat16), whose
 * squares add up in float as a float32 array's: torch's _foreach_norm of
 * them rounds each norm to bfloat16 (3 significant digits), these do not. */
int nd_norms_bf16(const uint64_t *ptrs, const int64_t *lens, int64_t count, double *out) {
    norms_of(ptrs, lens, count, BF16, out);
    return 0;
}

/* nd_norms_bf16 of float16 arrays. */
int nd_norms_f16(const uint64_t *ptrs, const int64_t *lens, int64_t count, double *out) {
    norms_of(ptrs, lens, count, F16, out);
    return 0;
}

typedef struct {
    const uint64_t *ptrs;
    const int64_t *lens;
    int64_t count, cut;
    int kind;
    double *out;
} norms_job;

static void norms_part(void *ctx, int p, int parts) {
    (void)parts;
    norms_job *j = (norms_job *)ctx;
    if (p == 0)
        norms_of(j->ptrs, j->lens, j->cut, j->kind, j->out);
    else
        norms_of(j->ptrs + j->cut, j->lens + j->cut, j->count - j->cut, j->kind, j->out + j->cut);
}

double nd_helper_seconds(void) { return (double)__atomic_load_n(&helper_ns, __ATOMIC_RELAXED) * 1e-9; }

/* The norms of arrays of values of a kind (0 float32, 1 bfloat16, 2
 * float16: nd_norms_f32, nd_norms_bf16, nd_norms_f16) in two parts, arrays
 * [0, cut) and [cut, count), read by two of torch's intra-op threads (see
 * run_parts): a read of tens of megabytes (an MLP's gradients) is bound by
 * one core's memory bandwidth. Returns 1 when it was all read here (no
 * OpenMP, one thread), 0 when in two parts, -1 for a kind it does not
 * take. */
int nd_norms2(const uint64_t *ptrs, const int64_t *lens, int64_t count, int64_t cut, int kind, double *out) {
    if (kind != F32 && kind != BF16 && kind != F16) return -1;
    if (cut <= 0 || cut >= count) return norms_of(ptrs, lens, count, kind, out), 1;
    norms_of(ptrs, lens, 0, kind, out); /* (chooses the sum before the team reads it) */
    norms_job j = {ptrs, lens, count, cut, kind, out};
    int parts = team_parts(2);
    if (parts == 2)
        run_parts(norms_part, &j, 2);
    else
        norms_of(ptrs, lens, count, kind, out);
    return parts == 2 ? 0 : 1;
}

/* The sum of n float32 values: the non-finite flag of an output gradient,
 * in one read where torch's sum, switched to one thread and back, costs
 * 10-40 us more on a small tensor. */
double nd_sum_f32(const float *x, int64_t n) {
    static sum_fn sum = 0;
    if (!sum) sum = choose_sum();
    return sum(x, n);
}

/* 1 when every one of n float32 values is finite (its exponent is not all
 * ones), else 0: the step's check of what it computed anyway, without a
 * torch op (a cat, an isfinite, an all: 0.1-0.7 ms in situ, where their code
 * has gone cold since the last step, against microseconds here). */
int nd_finite_f32(const float *x, int64_t n) {
    const uint32_t *b = (const uint32_t *)x;
    uint32_t bad = 0;
#pragma omp simd reduction(| : bad)
    for (int64_t i = 0; i < n; i++) bad |= (uint32_t)((b[i] & 0x7f800000u) == 0x7f800000u);
    return bad ? 0 : 1;
}
