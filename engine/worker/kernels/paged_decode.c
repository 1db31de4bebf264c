/* Paged decode attention on the CPU, batch-invariant by construction.
 *
 * One query token per row attends to the keys and values of its own sequence, read straight
 * from the paged KV pool through the row's block table (no gather, no padding, no mask):
 *
 *     out[r, h] = sum_t softmax_t(scale * q[r, h] . K[r, t]) * V[r, t]      t < lens[r]
 *
 * Work items are (row, KV head) pairs; each is computed by one thread, start to end, in a fixed
 * order that depends only on the row's own query, keys and length. So a row's result has the
 * same bits whatever else is in the batch, whatever the thread count: the property the engine
 * needs for greedy answers that don't change with the neighbours (see docs/compiled-decode.md).
 *
 * Arithmetic is fp32: keys, values and queries are widened from the pool's storage (bf16, fp16
 * or fp32) into rows of head_dim floats padded to 16 lanes; a score is a dot product of 16-lane
 * vectors summed in a fixed tree (hsum16), the softmax subtracts the row's maximum and uses a
 * polynomial exp (exp_neg), each output lane sums probability times value in the order of the
 * keys. The compiler may vectorize the maximum and the sum (reassociation is allowed); their
 * order then depends on the row's length only. A prefill chunk's queries (one shared table) run
 * the same arithmetic. The output is rounded to bf16 for bf16 pools, else written as fp32.
 *
 * Layouts (all contiguous, element strides):
 *   q       [rows, heads, D]                    storage type T
 *   k, v    [slots, kv_heads, D] per layer      storage type T; slot = block * bs + offset
 *   table   rows x table_stride int64 block ids (stride 0: every row shares one table), each
 *           table table_width blocks long
 *   lens    [rows] int64 keys each row attends to (its own token included)
 *   out     [rows, heads, D] bf16 for a bf16 pool, else float
 *
 * Build: see FLAGS in decode_attention.py; target_clones picks AVX-512, AVX2 or plain code at
 * load time, so one build runs on any x86-64 CPU.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_D 256
#define MAX_G 16

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CLONES
#endif

static inline float bf16_to_float(uint16_t x) {
    uint32_t bits = (uint32_t)x << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {                                 /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) { man <<= 1; exp--; }
            bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000 | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Round to nearest even, as PyTorch's float -> bf16 cast does (NaN stays a quiet NaN). */
static inline uint16_t float_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

/* kind: 0 fp32, 1 bf16, 2 fp16 */
static inline void widen(const void *src, int64_t index, int d, int kind, float *dst) {
    if (kind == 0) {
        memcpy(dst, (const float *)src + index, (size_t)d * sizeof(float));
    } else if (kind == 1) {
        const uint16_t *s = (const uint16_t *)src + index;
        for (int i = 0; i < d; i++) dst[i] = bf16_to_float(s[i]);
    } else {
        const uint16_t *s = (const uint16_t *)src + index;
        for (int i = 0; i < d; i++) dst[i] = half_to_float(s[i]);
    }
}

typedef float v16f __attribute__((vector_size(64)));

#define LANES 16
#define PAD(d) (((d) + LANES - 1) / LANES * LANES)

typedef float v8f __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));
typedef float v2f __attribute__((vector_size(8)));

/* Sum of a vector's 16 lanes, always in the same tree order: halves added lane by lane, down to
 * one (lane i + 8 onto lane i, then i + 4, i + 2, i + 1). */
static inline float hsum16(v16f a) {
    v8f b = __builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7)
          + __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15);
    v4f c = __builtin_shufflevector(b, b, 0, 1, 2, 3) + __builtin_shufflevector(b, b, 4, 5, 6, 7);
    v2f e = __builtin_shufflevector(c, c, 0, 1) + __builtin_shufflevector(c, c, 2, 3);
    return e[0] + e[1];
}

/* Widen the first n keys and values of one KV head of a sequence into row-major fp32 rows of
 * PAD(d) floats (lanes past d zero): key t at kf + t * PAD(d), value t at vf + t * PAD(d).
 * Returns -3 (nothing read) when the table points outside the pool's slots. */
CLONES
static int stage(const void *k, const void *v, const int64_t *table, int64_t n, int64_t bs,
                 int64_t slots, int kv_heads, int kh, int d, int kind, float *kf, float *vf) {
    int dp = PAD(d);
    for (int64_t b = 0; b < (n + bs - 1) / bs; b++)
        if (table[b] < 0 || (table[b] + 1) * bs > slots) return -3;
    for (int64_t t0 = 0; t0 < n; t0 += bs) {              /* block by block: no division */
        int64_t slot = table[t0 / bs] * bs, end = n - t0 < bs ? n : t0 + bs;
        int64_t next = t0 + bs < n ? table[t0 / bs + 1] * bs : -1;
        for (int64_t t = t0; t < end; t++, slot++) {
            int64_t at = (slot * kv_heads + kh) * d;
            if (next >= 0) {                   /* the next block lies elsewhere: fetch it early */
                int64_t ahead = ((next + t - t0) * kv_heads + kh) * d * (kind ? 2 : 4);
                for (int line = 0; line < d * (kind ? 2 : 4); line += 64) {
                    __builtin_prefetch((const char *)k + ahead + line);
                    __builtin_prefetch((const char *)v + ahead + line);
                }
            }
            widen(k, at, d, kind, kf + t * dp);
            widen(v, at, d, kind, vf + t * dp);
            for (int i = d; i < dp; i++) kf[t * dp + i] = vf[t * dp + i] = 0.0f;
        }
    }
    return 0;
}

/* exp(x) for x <= 0 (a softmax's shifted scores), written so a loop of it vectorizes: 2^n times
 * a degree-6 polynomial of the remainder r = x - n ln 2, |r| <= ln 2 / 2 (ln 2 split in two parts
 * for an exact product; coefficients 1/k!). Within 2 ulp of expf; 0 below -87 (no denormals). */
static inline float exp_neg(float x) {
    float n = __builtin_rintf(x * 1.44269504088896341f);
    float r = x - n * 0.693145751953125f;
    r = r - n * 1.428606765330187e-06f;
    float p = 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t e = ((int32_t)(x < -87.0f ? -127.0f : n) + 127) << 23;
    float scale;
    memcpy(&scale, &e, sizeof scale);
    return x < -87.0f ? 0.0f : p * scale;
}

/* The G query heads of one row (widened, qf[G][PAD(d)], lanes past d zero) against the first n
 * staged keys and values: out[G][d]. scores holds G * n floats, zeros n zeros. Each score is a
 * dot product over PAD(d) / 16 vectors summed by hsum16, each output lane accumulates the values
 * in the order of t: the operations and their order depend on the query, the n keys and values,
 * and n only. */
CLONES
static void attend(const float *qf, const float *kf, const float *vf, int64_t n, int g_count,
                   int d, float scale, float *out, float *scores, const float *zeros) {
    int dp = PAD(d), chunks = dp / LANES;
    v16f acc[MAX_G * MAX_D / LANES];
    float total[MAX_G];
    for (int64_t t = 0; t < n; t++) {
        const float *key = kf + t * dp;
        for (int g = 0; g < g_count; g++) {
            v16f dot = {0};
            for (int c = 0; c < chunks; c++) {
                v16f x, y;
                memcpy(&x, qf + g * dp + c * LANES, sizeof x);
                memcpy(&y, key + c * LANES, sizeof y);
                dot += x * y;
            }
            scores[g * n + t] = hsum16(dot) * scale;
        }
    }
    for (int g = 0; g < g_count; g++) {
        float *s = scores + g * n, m = -INFINITY, sum = 0.0f;
        for (int64_t t = 0; t < n; t++) m = s[t] > m ? s[t] : m;
        for (int64_t t = 0; t < n; t++) s[t] = exp_neg(s[t] - m);
        for (int64_t t = 0; t < n; t++) sum += s[t];
        total[g] = sum;
    }
    /* Values: each output vector accumulates p * v over t in order, four heads at a time in
     * registers (a missing fourth head reads the zero row past the scores). */
    for (int c = 0; c < chunks; c++)
        for (int g0 = 0; g0 < g_count; g0 += 4) {
            const float *p0 = scores + g0 * n, *p[4];
            for (int j = 0; j < 4; j++) p[j] = g0 + j < g_count ? p0 + j * n : zeros;
            v16f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
            for (int64_t t = 0; t < n; t++) {
                v16f y;
                memcpy(&y, vf + t * dp + c * LANES, sizeof y);
                a0 += p[0][t] * y;
                a1 += p[1][t] * y;
                a2 += p[2][t] * y;
                a3 += p[3][t] * y;
            }
            v16f got[4] = {a0, a1, a2, a3};
            for (int j = 0; j < 4 && g0 + j < g_count; j++) acc[(g0 + j) * chunks + c] = got[j];
        }
    for (int g = 0; g < g_count; g++) {
        float lanes[MAX_D];
        memcpy(lanes, acc + g * chunks, sizeof(float) * (size_t)dp);
        for (int i = 0; i < d; i++) out[g * d + i] = lanes[i] / total[g];
    }
}

/* Returns 0; -1 when a size is out of range (nothing computed), -2 when out of memory, -3 when
 * a block table points outside the pool's `slots` rows, -4 when a length is beyond its table's
 * table_width blocks. out: [rows, heads, d], bf16 (rounded to nearest even) for a bf16 pool,
 * else fp32.
 *
 * table_stride > 0: every row has its own table (a decode step); work items are (row, KV head),
 * each staging its row's keys. table_stride == 0: all rows are queries of one sequence sharing
 * one table (a prefill chunk or a verification pass, lens rising); each KV head's keys are
 * staged once and every row attends to its first lens[r] of them, with the same arithmetic a
 * decode step of that row would do. */
int paged_decode_attention(const void *q, const void *k, const void *v, const int64_t *table,
                           int64_t table_stride, int64_t table_width, const int64_t *lens,
                           int64_t rows, int heads, int kv_heads, int d, int64_t bs, int64_t slots,
                           int kind, float scale, int threads, void *out) {
    if (d <= 0 || d > MAX_D || kv_heads <= 0 || heads % kv_heads || heads / kv_heads > MAX_G
        || bs <= 0 || kind < 0 || kind > 2)
        return -1;
    int g_count = heads / kv_heads;
    int64_t longest = 0;
    for (int64_t r = 0; r < rows; r++) {
        if (lens[r] <= 0) return -1;
        if (lens[r] > table_width * bs) return -4;
        longest = lens[r] > longest ? lens[r] : longest;
    }
    int dp = PAD(d), shared = table_stride == 0, failed = 0;
    size_t stage_floats = (size_t)longest * dp * 2;       /* kf and vf of one KV head */
    float *staged = NULL;
    if (shared) {                                          /* every KV head, staged once */
        staged = malloc(sizeof(float) * stage_floats * (size_t)kv_heads);
        if (!staged) return -2;
#pragma omp parallel for num_threads(threads > 0 ? threads : 1) schedule(static)
        for (int kh = 0; kh < kv_heads; kh++) {
            float *kt = staged + stage_floats * kh;
            int rc = stage(k, v, table, longest, bs, slots, kv_heads, kh, d, kind, kt,
                           kt + (size_t)longest * dp);
            if (rc) {
#pragma omp atomic write
                failed = rc;
            }
        }
        if (failed) {
            free(staged);
            return failed;
        }
    }
#pragma omp parallel num_threads(threads > 0 ? threads : 1)
    {
        float qf[MAX_G * MAX_D];
        memset(qf, 0, sizeof qf);                          /* lanes past d stay zero */
        float *scores = calloc((size_t)(g_count + 1) * (size_t)longest, sizeof(float));
        float *own = shared ? NULL : malloc(sizeof(float) * stage_floats);
        if (!scores || (!shared && !own)) {
#pragma omp atomic write
            failed = -2;
        }
#pragma omp for schedule(static)
        for (int64_t w = 0; w < rows * kv_heads; w++) {
            if (!scores || (!shared && !own)) continue;
            int64_t r = w / kv_heads, n = lens[r];
            int kh = (int)(w % kv_heads);
            float *kt = shared ? staged + stage_floats * kh : own;
            int64_t vr_at = (shared ? longest : n) * dp;
            if (!shared) {
                int rc = stage(k, v, table + r * table_stride, n, bs, slots, kv_heads, kh, d, kind,
                               kt, kt + vr_at);
                if (rc) {
#pragma omp atomic write
                    failed = rc;
                    continue;
                }
            }
            int64_t at = (r * heads + (int64_t)kh * g_count) * d;
            for (int g = 0; g < g_count; g++) widen(q, at + (int64_t)g * d, d, kind, qf + g * dp);
            float row_out[MAX_G * MAX_D];
            attend(qf, kt, kt + vr_at, n, g_count, d, scale, row_out, scores,
                   scores + (size_t)g_count * longest);
            if (kind == 1)
                for (int i = 0; i < g_count * d; i++)
                    ((uint16_t *)out)[at + i] = float_to_bf16(row_out[i]);
            else
                memcpy((float *)out + at, row_out, sizeof(float) * (size_t)g_count * d);
        }
        free(scores);
        free(own);
    }
    free(staged);
    return failed;
}
