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
 * Arithmetic is fp32, on keys and values read in place from the pool (nothing is copied):
 * sixteen lanes at a time are widened from the storage type (bf16, fp16 or fp32) in registers.
 * bf16 rows whose head_dim is a multiple of 32 use the "pair layout" (load_pair): 32 values read
 * as 16 words give their even and odd elements by a shift and a mask, with no lane moves; the
 * query is widened the same way, the output put back in order. A score is a dot product of
 * 16-lane vectors, each vector's lanes summed in a fixed tree, sixteen keys at once (reduce16);
 * the softmax subtracts the row's maximum and uses a polynomial exp (exp_neg); each output lane
 * sums probability times value in the order of the keys. The softmax's sum runs in sixteen lanes
 * and a fixed tree (softmax_row); every order depends on the row's length only. A
 * prefill chunk's queries (one shared table) run the same arithmetic. The output is rounded to
 * bf16 for bf16 pools, else written as fp32. Keys and values are prefetched sixteen keys ahead.
 *
 * Layouts (all contiguous, element strides):
 *   q       [rows, heads, D]                    storage type T
 *   k, v    [slots, kv_heads, D] per layer      storage type T; slot = block * bs + offset
 *   table   rows x table_stride int64 block ids (stride 0: every row shares one table), each
 *           table table_width blocks long
 *   lens    [rows] int64 keys each row attends to (its own token included)
 *   out     [rows, heads, D] bf16 for a bf16 pool, else float
 *
 * Build: see build_flags() in decode_attention.py: code for the CPU's x86-64 level (ONE_TARGET
 * defined), or, where that level is unknown, target_clones picking AVX-512, AVX2 or plain code
 * at load time, so that one build runs on any x86-64 CPU.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_D 256
#define MAX_G 16

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(ONE_TARGET)
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

/* Sixteen lanes of storage type `kind` at element `index`, widened to fp32; only the first
 * `count` are read (the rest are zero), so a head_dim that is not a multiple of 16 never reads
 * past its row. bf16 widens exactly (a shift), fp16 through half_to_float. */
static inline __attribute__((always_inline)) v16f load16(const void *src, int64_t index, int kind, int count) {
    v16f r = {0};
    if (count == LANES && kind == 1) {
        typedef uint16_t v16h __attribute__((vector_size(32)));
        typedef uint32_t v16u __attribute__((vector_size(64)));
        v16h h;
        memcpy(&h, (const uint16_t *)src + index, sizeof h);
        v16u w = __builtin_convertvector(h, v16u) << 16;
        memcpy(&r, &w, sizeof r);
    } else if (count == LANES && kind == 0) {
        memcpy(&r, (const float *)src + index, sizeof r);
    } else {
        float lanes[LANES] = {0};
        widen(src, index, count, kind, lanes);
        memcpy(&r, lanes, sizeof r);
    }
    return r;
}

/* Thirty-two bf16 values at element `index`, widened to fp32 as two vectors without moving
 * lanes: `even` holds elements 0, 2, ..., 30 and `odd` elements 1, 3, ..., 31 (a bf16 is the
 * upper half of its float: shift the low element up, mask the high one). The "pair layout" of a
 * bf16 row whose length is a multiple of 32: vector 2c is chunk c's even elements, 2c + 1 its odd
 * ones. */
static inline __attribute__((always_inline)) void load_pair(const void *src, int64_t index,
                                                            v16f *even, v16f *odd) {
    typedef uint32_t v16u __attribute__((vector_size(64)));
    v16u w, lo, hi;
    memcpy(&w, (const uint16_t *)src + index, sizeof w);
    lo = w << 16;
    hi = w & 0xffff0000u;
    memcpy(even, &lo, sizeof lo);
    memcpy(odd, &hi, sizeof hi);
}

/* Row vector c (of PAD(d) / 16) of the row at element `index`: in the pair layout (`pairs`) half
 * of chunk c / 2, else elements 16c .. 16c + 15 (the last `last` of them only). */
static inline __attribute__((always_inline)) void load_row(const void *src, int64_t index,
                                                           int chunks, int last, int kind,
                                                           int pairs, v16f *dst) {
    if (pairs)
        for (int c = 0; c < chunks; c += 2) load_pair(src, index + c * LANES, dst + c, dst + c + 1);
    else
        for (int c = 0; c < chunks; c++)
            dst[c] = load16(src, index + c * LANES, kind, c == chunks - 1 ? last : LANES);
}

/* The sums of sixteen vectors' lanes, as one vector: lane j is a[j]'s sum. Four levels of
 * pairwise shuffles and adds; every vector's lanes are summed in the same tree (lane i + 8 onto
 * i, then i + 4, i + 2, i + 1), so a score does not depend on the other fifteen. */
static inline __attribute__((always_inline)) v16f reduce16(const v16f *a) {
    v16f b[8], c[4], e[2];
    for (int i = 0; i < 8; i++)
        b[i] = __builtin_shufflevector(a[2 * i], a[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7,
                                       16, 17, 18, 19, 20, 21, 22, 23)
             + __builtin_shufflevector(a[2 * i], a[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15,
                                       24, 25, 26, 27, 28, 29, 30, 31);
    for (int i = 0; i < 4; i++)
        c[i] = __builtin_shufflevector(b[2 * i], b[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11,
                                       16, 17, 18, 19, 24, 25, 26, 27)
             + __builtin_shufflevector(b[2 * i], b[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15,
                                       20, 21, 22, 23, 28, 29, 30, 31);
    for (int i = 0; i < 2; i++)
        e[i] = __builtin_shufflevector(c[2 * i], c[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13,
                                       16, 17, 20, 21, 24, 25, 28, 29)
             + __builtin_shufflevector(c[2 * i], c[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15,
                                       18, 19, 22, 23, 26, 27, 30, 31);
    return __builtin_shufflevector(e[0], e[1], 0, 2, 4, 6, 8, 10, 12, 14,
                                   16, 18, 20, 22, 24, 26, 28, 30)
         + __builtin_shufflevector(e[0], e[1], 1, 3, 5, 7, 9, 11, 13, 15,
                                   17, 19, 21, 23, 25, 27, 29, 31);
}

/* Element offset of each of the first n tokens' rows (KV head 0) in a layer's pool, read from
 * the block table. Returns -3 (nothing else done) when a block lies outside the pool's slots. */
static int offsets(const int64_t *table, int64_t n, int64_t bs, int64_t slots, int kv_heads,
                   int d, int64_t *off) {
    for (int64_t b = 0; b * bs < n; b++)
        if (table[b] < 0 || (table[b] + 1) * bs > slots) return -3;
    for (int64_t b = 0; b * bs < n; b++) {                 /* block by block: no division */
        int64_t slot = table[b] * bs, end = n - b * bs < bs ? n - b * bs : bs;
        for (int64_t j = 0; j < end; j++) off[b * bs + j] = (slot + j) * kv_heads * d;
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

/* A row's softmax numerators in place: s[t] = exp(s[t] - max), t < n; returns their sum. Its own
 * function (never inlined): the one-row and the two-row paths run the very same code. The
 * maximum is exact in any order; the sum is written out in sixteen lanes (lane l adds s[l],
 * s[l + 16], ... in order; the last, partial vector's missing lanes add zero), then the lanes in
 * a fixed tree, so its order depends on n only. The file is built without reassociation and
 * without contracting a multiply and an add (FLAGS in decode_attention.py): with either, the
 * compiler chose the order per inlined copy, and attend2 gave a row other bits than attend. */
CLONES
__attribute__((noinline)) static float softmax_row(float *s, int64_t n) {
    typedef int32_t v16i __attribute__((vector_size(64)));
    const v16f zero = {0};
    v16f m = zero - INFINITY, acc = zero, x;
    int64_t full = n / LANES * LANES;
    for (int64_t t0 = 0; t0 < full; t0 += LANES) {
        memcpy(&x, s + t0, sizeof x);
        v16i gt = x > m;
        m = (v16f)(((v16i)x & gt) | ((v16i)m & ~gt));
    }
    float lanes[LANES], mx = -INFINITY;
    memcpy(lanes, &m, sizeof lanes);
    for (int l = 0; l < LANES; l++) mx = lanes[l] > mx ? lanes[l] : mx;
    for (int64_t t = full; t < n; t++) mx = s[t] > mx ? s[t] : mx;
    for (int64_t t = 0; t < n; t++) s[t] = exp_neg(s[t] - mx);
    for (int64_t t0 = 0; t0 < full; t0 += LANES) {
        memcpy(&x, s + t0, sizeof x);
        acc += x;
    }
    float tail[LANES] = {0};
    memcpy(tail, s + full, sizeof(float) * (size_t)(n - full));
    memcpy(&x, tail, sizeof x);
    acc += x;
    memcpy(lanes, &acc, sizeof lanes);
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++) lanes[l] += lanes[l + w];
    return lanes[0];
}

/* Ask for the cache lines of one row of K and of V (`bytes` each, from byte `at`). */
static inline __attribute__((always_inline)) void prefetch_rows(const void *k, const void *v,
                                                                int64_t at, int bytes) {
    for (int line = 0; line < bytes; line += 64) {
        __builtin_prefetch((const char *)k + at + line);
        __builtin_prefetch((const char *)v + at + line);
    }
}

/* One key row's dot products with a row's G query heads (qf: G rows of chunks * 16 floats, in
 * the keys' layout), as vector g * 16 + j of dots: lane sums of 16-lane products over the row's
 * chunks in order. */
static inline __attribute__((always_inline)) void key_dots(const v16f *qv, const v16f *kc,
                                                           int chunks, int g_count, int j,
                                                           v16f *dots) {
    for (int g = 0; g < g_count; g++) {
        v16f dot = {0};
        for (int c = 0; c < chunks; c++) dot += qv[g * chunks + c] * kc[c];
        dots[g * LANES + j] = dot;
    }
}

/* The scores of a block of sixteen keys from t0 (the first m real, the other dot vectors zeroed)
 * for G heads: each head's sixteen dots summed in reduce16's tree, times scale, into
 * s + g * stride + t0 (stride a multiple of 16). */
static inline __attribute__((always_inline)) void block_scores(v16f *dots, int m, int g_count,
                                                               float scale, float *s,
                                                               int64_t stride, int64_t t0) {
    for (int g = 0; g < g_count; g++) {
        for (int j = m; j < LANES; j++) dots[g * LANES + j] = (v16f){0};
        v16f sc = reduce16(dots + g * LANES) * scale;
        memcpy(s + g * stride + t0, &sc, sizeof sc);
    }
}

/* a[4j + c] += p[j][t] * y[c] for G heads (d = 64: four value vectors). */
static inline __attribute__((always_inline)) void add_values(v16f *a, const float *const p[4],
                                                             int64_t t, const v16f y[4], int G) {
    for (int j = 0; j < G; j++) {
        float w = p[j][t];
        a[j * 4] += w * y[0];
        a[j * 4 + 1] += w * y[1];
        a[j * 4 + 2] += w * y[2];
        a[j * 4 + 3] += w * y[3];
    }
}

/* Values for d = 64 and G (1 to 4) query heads: p[j][t] * v[t] summed over t in order, the
 * 4G accumulators in registers, each value row widened once (G is a constant where it is
 * inlined, so each G gets its own unrolled loop). */
static inline __attribute__((always_inline)) void values_fixed(const float *const p[4],
        const void *v, const int64_t *off, int64_t at, int64_t n, int kind, int pairs, int G,
        v16f acc[16]) {
    v16f a[16] = {0};
    for (int64_t t = 0; t < n; t++) {
        v16f y[4];
        load_row(v, off[t] + at, 4, LANES, kind, pairs, y);
        add_values(a, p, t, y, G);
    }
    for (int i = 0; i < 4 * G; i++) acc[i] = a[i];
}

/* values_fixed for two rows of n0 and n1 keys: each value row widened once for both, each row's
 * 4G accumulators summed in key order exactly as values_fixed sums them for that row alone. */
static inline __attribute__((always_inline)) void values_two(const float *const p0[4],
        const float *const p1[4], const void *v, const int64_t *off, int64_t at, int64_t n0,
        int64_t n1, int kind, int pairs, int G, v16f acc0[16], v16f acc1[16]) {
    v16f a[16] = {0}, b[16] = {0};
    int64_t both = n0 < n1 ? n0 : n1;
    for (int64_t t = 0; t < both; t++) {
        v16f y[4];
        load_row(v, off[t] + at, 4, LANES, kind, pairs, y);
        add_values(a, p0, t, y, G);
        add_values(b, p1, t, y, G);
    }
    for (int64_t t = both; t < n0; t++) {      /* the longer row's last keys */
        v16f y[4];
        load_row(v, off[t] + at, 4, LANES, kind, pairs, y);
        add_values(a, p0, t, y, G);
    }
    for (int64_t t = both; t < n1; t++) {
        v16f y[4];
        load_row(v, off[t] + at, 4, LANES, kind, pairs, y);
        add_values(b, p1, t, y, G);
    }
    for (int i = 0; i < 4 * G; i++) {
        acc0[i] = a[i];
        acc1[i] = b[i];
    }
}

/* The output of G heads: each accumulated lane divided by its head's total, put back in element
 * order (the pair layout's lanes interleave: vector c lane i is element 32 (c / 2) + 2i + c % 2). */
static inline __attribute__((always_inline)) void finish(const v16f *acc, const float *total,
        int g_count, int d, int chunks, int pairs, float *out) {
    int dp = chunks * LANES;
    for (int g = 0; g < g_count; g++) {
        float lanes[MAX_D];
        memcpy(lanes, acc + g * chunks, sizeof(float) * (size_t)dp);
        if (pairs)
            for (int c = 0; c < chunks; c++)
                for (int i = 0; i < LANES; i++)
                    out[g * d + (c / 2) * 32 + 2 * i + (c & 1)] = lanes[c * LANES + i] / total[g];
        else
            for (int i = 0; i < d; i++) out[g * d + i] = lanes[i] / total[g];
    }
}

/* One (row, KV head) pair: the G query heads of the row (widened, qf[G][PAD(d)], lanes past d
 * zero) against the row's first n keys and values of KV head kh, read in place from the pool
 * (token t's row for head 0 at element off[t]): out[G][d]. scores holds G rows of PAD(n) floats
 * plus one of zeros, dots 16 * G vectors. A score is the dot product of 16-lane vectors over
 * PAD(d) / 16 vectors summed in reduce16's tree (sixteen keys at a time); the softmax
 * subtracts the maximum, exp_neg, sums; each output lane sums probability times value in the
 * order of the keys. The operations and their order depend on the query, the n keys and values,
 * and n only. */
static inline __attribute__((always_inline)) void attend_body(const float *qf, const void *k,
        const void *v, const int64_t *off, int64_t n, int kh, int g_count, int d, int kind,
        int pairs, float scale, float *out, float *scores, v16f *dots) {
    int dp = PAD(d), chunks = dp / LANES, last = d - (chunks - 1) * LANES;
    int64_t at = (int64_t)kh * d, stride = PAD(n), esize = kind ? 2 : 4;
    const float *zeros = scores + (size_t)g_count * stride;
    v16f qv[MAX_G * MAX_D / LANES];      /* the queries as vectors: a local the stores to dots
                                           * can't alias, so they stay in registers */
    memcpy(qv, qf, sizeof(v16f) * (size_t)(g_count * chunks));
    for (int64_t t = 0; t < n && t < LANES; t++)        /* the first sixteen keys, all at once */
        prefetch_rows(k, v, (off[t] + at) * esize, d * esize);
    for (int64_t t0 = 0; t0 < n; t0 += LANES) {
        int m = n - t0 < LANES ? (int)(n - t0) : LANES;
        for (int j = 0; j < m; j++) {
            int64_t t = t0 + j;
            if (t + LANES < n)                     /* sixteen keys ahead: this head's K and V */
                prefetch_rows(k, v, (off[t + LANES] + at) * esize, d * esize);
            v16f kc[MAX_D / LANES];
            load_row(k, off[t] + at, chunks, last, kind, pairs, kc);
            key_dots(qv, kc, chunks, g_count, j, dots);
        }
        block_scores(dots, m, g_count, scale, scores, stride, t0);
    }
    float total[MAX_G];
    for (int g = 0; g < g_count; g++) total[g] = softmax_row(scores + g * stride, n);
    v16f acc[MAX_G * MAX_D / LANES];
    if (chunks == 4 && last == LANES) {
        /* d = 64: up to four heads at a time, every value row read once per four heads */
        for (int g0 = 0; g0 < g_count; g0 += 4) {
            const float *p[4];
            int gq = g_count - g0 < 4 ? g_count - g0 : 4;
            for (int j = 0; j < 4; j++) p[j] = g0 + j < g_count ? scores + (g0 + j) * stride : zeros;
            v16f got[16];
            switch (gq) {
                case 1: values_fixed(p, v, off, at, n, kind, pairs, 1, got); break;
                case 2: values_fixed(p, v, off, at, n, kind, pairs, 2, got); break;
                case 3: values_fixed(p, v, off, at, n, kind, pairs, 3, got); break;
                default: values_fixed(p, v, off, at, n, kind, pairs, 4, got); break;
            }
            for (int j = 0; j < gq; j++)
                for (int c = 0; c < 4; c++) acc[(g0 + j) * chunks + c] = got[j * 4 + c];
        }
    } else {
        /* any d: chunk by chunk, four heads at a time (the same sums, in the same order) */
        for (int c = 0; c < chunks; c++)
            for (int g0 = 0; g0 < g_count; g0 += 4) {
                const float *p[4];
                for (int j = 0; j < 4; j++)
                    p[j] = g0 + j < g_count ? scores + (g0 + j) * stride : zeros;
                v16f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
                int count = c == chunks - 1 ? last : LANES;
                for (int64_t t = 0; t < n; t++) {
                    v16f y, other;
                    if (pairs)
                        load_pair(v, off[t] + at + (c & ~1) * LANES, c & 1 ? &other : &y,
                                  c & 1 ? &y : &other);
                    else
                        y = load16(v, off[t] + at + c * LANES, kind, count);
                    a0 += p[0][t] * y;
                    a1 += p[1][t] * y;
                    a2 += p[2][t] * y;
                    a3 += p[3][t] * y;
                }
                v16f got[4] = {a0, a1, a2, a3};
                for (int j = 0; j < 4 && g0 + j < g_count; j++) acc[(g0 + j) * chunks + c] = got[j];
            }
    }
    finish(acc, total, g_count, d, chunks, pairs, out);
}

/* Two query rows of one sequence (one table), n0 and n1 keys, d = 64, at most four query heads
 * per KV head: each K and V row is read once for both. Every row's operations and their order
 * are attend()'s for that row alone (the same dot products, reduce16 trees, softmax_row, value
 * sums in key order and finish), so its result has the same bits; only the loads are shared. */
static inline __attribute__((always_inline)) void attend2_body(const float *qf0,
        const float *qf1, const void *k, const void *v, const int64_t *off, int64_t n0,
        int64_t n1, int kh, int g_count, int kind, int pairs, float scale, float *out0,
        float *out1, float *scores, v16f *dots) {
    const int d = 64, chunks = 4;
    int64_t at = (int64_t)kh * d, n = n0 > n1 ? n0 : n1, stride = PAD(n), esize = kind ? 2 : 4;
    float *s0 = scores, *s1 = scores + (size_t)g_count * stride;
    const float *zeros = scores + (size_t)2 * g_count * stride;
    v16f q0[MAX_G * 4], q1[MAX_G * 4];     /* as in attend: locals, kept in registers */
    memcpy(q0, qf0, sizeof(v16f) * (size_t)(g_count * chunks));
    memcpy(q1, qf1, sizeof(v16f) * (size_t)(g_count * chunks));
    v16f *d0 = dots, *d1 = dots + LANES * g_count;
    for (int64_t t = 0; t < n && t < LANES; t++)
        prefetch_rows(k, v, (off[t] + at) * esize, d * esize);
    for (int64_t t0 = 0; t0 < n; t0 += LANES) {
        int m0 = n0 - t0 <= 0 ? 0 : n0 - t0 < LANES ? (int)(n0 - t0) : LANES;
        int m1 = n1 - t0 <= 0 ? 0 : n1 - t0 < LANES ? (int)(n1 - t0) : LANES;
        int m = m0 > m1 ? m0 : m1;
        for (int j = 0; j < m; j++) {
            int64_t t = t0 + j;
            if (t + LANES < n)
                prefetch_rows(k, v, (off[t + LANES] + at) * esize, d * esize);
            v16f kc[4];
            load_row(k, off[t] + at, chunks, LANES, kind, pairs, kc);
            if (j < m0) key_dots(q0, kc, chunks, g_count, j, d0);
            if (j < m1) key_dots(q1, kc, chunks, g_count, j, d1);
        }
        if (m0) block_scores(d0, m0, g_count, scale, s0, stride, t0);
        if (m1) block_scores(d1, m1, g_count, scale, s1, stride, t0);
    }
    float total0[MAX_G], total1[MAX_G];
    for (int g = 0; g < g_count; g++) {
        total0[g] = softmax_row(s0 + g * stride, n0);
        total1[g] = softmax_row(s1 + g * stride, n1);
    }
    const float *p0[4], *p1[4];
    for (int j = 0; j < 4; j++) {
        p0[j] = j < g_count ? s0 + j * stride : zeros;
        p1[j] = j < g_count ? s1 + j * stride : zeros;
    }
    v16f acc0[16], acc1[16];
    switch (g_count) {
        case 1: values_two(p0, p1, v, off, at, n0, n1, kind, pairs, 1, acc0, acc1); break;
        case 2: values_two(p0, p1, v, off, at, n0, n1, kind, pairs, 2, acc0, acc1); break;
        case 3: values_two(p0, p1, v, off, at, n0, n1, kind, pairs, 3, acc0, acc1); break;
        default: values_two(p0, p1, v, off, at, n0, n1, kind, pairs, 4, acc0, acc1); break;
    }
    finish(acc0, total0, g_count, d, chunks, pairs, out0);
    finish(acc1, total1, g_count, d, chunks, pairs, out1);
}

/* attend and attend2 with the query heads per KV head (1 to 4) a constant where they are
 * compiled: the loops over heads unroll and a row's queries stay in registers across the keys
 * instead of being read from memory for every key (a 1,024-row prefill: 19.1 -> 16.9 ms a layer;
 * a 32-row decode step at 1,000 keys: 1.32 -> 1.20 ms).
 * The same operations in the same order as the general body, so the same bits. */
CLONES
static void attend(const float *qf, const void *k, const void *v, const int64_t *off, int64_t n,
                   int kh, int g_count, int d, int kind, int pairs, float scale, float *out,
                   float *scores, v16f *dots) {
    if (d == 64) switch (g_count) {
        case 1: attend_body(qf, k, v, off, n, kh, 1, 64, kind, pairs, scale, out, scores, dots); return;
        case 2: attend_body(qf, k, v, off, n, kh, 2, 64, kind, pairs, scale, out, scores, dots); return;
        case 3: attend_body(qf, k, v, off, n, kh, 3, 64, kind, pairs, scale, out, scores, dots); return;
        case 4: attend_body(qf, k, v, off, n, kh, 4, 64, kind, pairs, scale, out, scores, dots); return;
    }
    attend_body(qf, k, v, off, n, kh, g_count, d, kind, pairs, scale, out, scores, dots);
}

CLONES
static void attend2(const float *qf0, const float *qf1, const void *k, const void *v,
                    const int64_t *off, int64_t n0, int64_t n1, int kh, int g_count, int kind,
                    int pairs, float scale, float *out0, float *out1, float *scores, v16f *dots) {
    switch (g_count) {
        case 1: attend2_body(qf0, qf1, k, v, off, n0, n1, kh, 1, kind, pairs, scale, out0, out1, scores, dots); return;
        case 2: attend2_body(qf0, qf1, k, v, off, n0, n1, kh, 2, kind, pairs, scale, out0, out1, scores, dots); return;
        case 3: attend2_body(qf0, qf1, k, v, off, n0, n1, kh, 3, kind, pairs, scale, out0, out1, scores, dots); return;
        default: attend2_body(qf0, qf1, k, v, off, n0, n1, kh, 4, kind, pairs, scale, out0, out1, scores, dots); return;
    }
}

/* Returns 0; -1 when a size is out of range (nothing computed), -2 when out of memory, -3 when
 * a block table points outside the pool's `slots` rows, -4 when a length is beyond its table's
 * table_width blocks. out: [rows, heads, d], bf16 (rounded to nearest even) for a bf16 pool,
 * else fp32.
 *
 * table_stride > 0: every row has its own table (a decode step); work items are (row, KV head),
 * each reading its row's table. table_stride == 0: all rows are queries of one sequence sharing
 * one table (a prefill chunk or a verification pass, lens rising); the keys' offsets are read
 * once and every row attends to its first lens[r] keys, with the same arithmetic a decode step
 * of that row would do. */
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
    int dp = PAD(d), shared = table_stride == 0, failed = 0, pairs = kind == 1 && d % 32 == 0;
    int64_t *shared_off = NULL;
    if (shared) {                            /* one table: every row's keys at the same offsets */
        shared_off = malloc(sizeof(int64_t) * (size_t)longest);
        if (!shared_off) return -2;
        int rc = offsets(table, longest, bs, slots, kv_heads, d, shared_off);
        if (rc) {
            free(shared_off);
            return rc;
        }
    }
    /* Work items are (group, KV head): a group is two consecutive rows of one sequence (the same
     * table: a prefill chunk, or a verification pass) when d = 64 and at most four query heads
     * share a KV head, else one row. attend2 gives each row attend()'s bits for it alone. */
    int two = dp == 64 && d == 64 && g_count <= 4;
    int64_t *first = malloc(sizeof(int64_t) * (size_t)(rows + 1)), groups = 0;
    if (!first) {
        free(shared_off);
        return -2;
    }
    for (int64_t r = 0; r < rows; groups++) {
        first[groups] = r;
        int pair = two && r + 1 < rows;
        if (pair && !shared) {               /* the same table up to the longer row's blocks */
            int64_t need = (lens[r] > lens[r + 1] ? lens[r] : lens[r + 1]) + bs - 1;
            pair = memcmp(table + r * table_stride, table + (r + 1) * table_stride,
                          sizeof(int64_t) * (size_t)(need / bs)) == 0;
        }
        r += pair ? 2 : 1;
    }
    first[groups] = rows;
#pragma omp parallel num_threads(threads > 0 ? threads : 1)
    {
        float qf[2][MAX_G * MAX_D];                        /* lanes past d are zero */
        float *scores = calloc((size_t)(2 * g_count + 1) * (size_t)PAD(longest), sizeof(float));
        v16f *dots = aligned_alloc(64, sizeof(v16f) * LANES * 2 * (size_t)g_count);
        int64_t *own = shared ? NULL : malloc(sizeof(int64_t) * (size_t)longest);
        int ok = scores && dots && (shared || own);
        if (!ok) {
#pragma omp atomic write
            failed = -2;
        }
#pragma omp for schedule(dynamic, 1)   /* rows of rising lengths: equal counts are unequal work */
        for (int64_t w = 0; w < groups * kv_heads; w++) {
            if (!ok) continue;
            int64_t r0 = first[w / kv_heads], nr = first[w / kv_heads + 1] - r0, n = lens[r0];
            if (nr == 2 && lens[r0 + 1] > n) n = lens[r0 + 1];
            int kh = (int)(w % kv_heads);
            const int64_t *off = shared_off;
            if (!shared) {
                int rc = offsets(table + r0 * table_stride, n, bs, slots, kv_heads, d, own);
                if (rc) {
#pragma omp atomic write
                    failed = rc;
                    continue;
                }
                off = own;
            }
            float row_out[2][MAX_G * MAX_D];
            for (int64_t i = 0; i < nr; i++) {
                int64_t at = ((r0 + i) * heads + (int64_t)kh * g_count) * d;
                for (int g = 0; g < g_count; g++) {     /* in the keys' layout (load_row) */
                    v16f row[MAX_D / LANES];
                    load_row(q, at + (int64_t)g * d, dp / LANES, d - dp + LANES, kind, pairs, row);
                    memcpy(qf[i] + g * dp, row, sizeof(float) * (size_t)dp);
                }
            }
            if (nr == 2)
                attend2(qf[0], qf[1], k, v, off, lens[r0], lens[r0 + 1], kh, g_count, kind, pairs,
                        scale, row_out[0], row_out[1], scores, dots);
            else
                attend(qf[0], k, v, off, lens[r0], kh, g_count, d, kind, pairs, scale, row_out[0],
                       scores, dots);
            for (int64_t i = 0; i < nr; i++) {
                int64_t at = ((r0 + i) * heads + (int64_t)kh * g_count) * d;
                if (kind == 1)
                    for (int j = 0; j < g_count * d; j++)
                        ((uint16_t *)out)[at + j] = float_to_bf16(row_out[i][j]);
                else
                    memcpy((float *)out + at, row_out[i], sizeof(float) * (size_t)g_count * d);
            }
        }
        free(scores);
        free(dots);
        free(own);
    }
    free(first);
    free(shared_off);
    return failed;
}
