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
 * or fp32), each key's dot product accumulates in its own vector lane in the order of head_dim,
 * the softmax subtracts the row's maximum, and the output is written as fp32. The compiler may
 * vectorize the maximum and the sum (reassociation is allowed); their order then depends on the
 * row's length only. A prefill chunk's queries (one shared table) run the same arithmetic.
 *
 * Layouts (all contiguous, element strides):
 *   q       [rows, heads, D]                    storage type T
 *   k, v    [slots, kv_heads, D] per layer      storage type T; slot = block * bs + offset
 *   table   rows x table_stride int64 block ids (stride 0: every row shares one table)
 *   lens    [rows] int64 keys each row attends to (its own token included)
 *   out     [rows, heads, D] float
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

typedef float v8f __attribute__((vector_size(32)));

static inline v8f load8(const float *p) {
    v8f x;
    memcpy(&x, p, sizeof x);
    return x;
}

#define CHUNK 16   /* keys scored together: two 8-wide vectors, one key per lane */

/* Scores of up to CHUNK keys (key j's widened row in column j of kt[d][CHUNK]) for one query:
 * out[j] = sum over i of q[i] * kt[i][j], accumulated in order i = 0, 1, ..., d - 1. Each key
 * has its own lane, so its score comes out of the same sequence of operations wherever it sits
 * in the chunk, in the sequence or in the batch. */
static inline void score_chunk(const float *qv, const float *kt, int d, float scale, float *out) {
    v8f lo = {0}, hi = {0};
    for (int i = 0; i < d; i++) {
        v8f x = {qv[i], qv[i], qv[i], qv[i], qv[i], qv[i], qv[i], qv[i]};
        lo += x * load8(kt + i * CHUNK);
        hi += x * load8(kt + i * CHUNK + 8);
    }
    lo *= scale;
    hi *= scale;
    memcpy(out, &lo, sizeof lo);
    memcpy(out + 8, &hi, sizeof hi);
}

/* Widen and lay out the first n keys and values of one KV head of a sequence: key t into column
 * t % CHUNK of the chunk kt[t / CHUNK][d][CHUNK] (columns past n zero), value t into vr[t][d].
 * Returns -3 (nothing read) when the table points outside the pool's slots. */
CLONES
static int stage(const void *k, const void *v, const int64_t *table, int64_t n, int64_t bs,
                 int64_t slots, int kv_heads, int kh, int d, int kind, float *kt, float *vr) {
    float row[MAX_D];
    for (int64_t b = 0; b < (n + bs - 1) / bs; b++)
        if (table[b] < 0 || (table[b] + 1) * bs > slots) return -3;
    int64_t padded = (n + CHUNK - 1) / CHUNK * CHUNK;
    for (int64_t t = 0; t < padded; t++) {
        float *col = kt + (t / CHUNK) * d * CHUNK + t % CHUNK;
        if (t >= n) {
            for (int i = 0; i < d; i++) col[i * CHUNK] = 0.0f;
            continue;
        }
        int64_t at = ((table[t / bs] * bs + t % bs) * kv_heads + kh) * d;
        widen(k, at, d, kind, row);
        for (int i = 0; i < d; i++) col[i * CHUNK] = row[i];
        widen(v, at, d, kind, vr + t * d);
    }
    return 0;
}

/* The G query heads of one row (widened, qf[G][d]) against the first n staged keys and values:
 * out[G][d]. scores holds G * n floats. The operations and their order depend on the query, the
 * n keys and values, and n only. */
CLONES
static void attend(const float *qf, const float *kt, const float *vr, int64_t n, int g_count,
                   int d, float scale, float *out, float *scores) {
    float acc[MAX_G * MAX_D], chunk[CHUNK], total[MAX_G];
    for (int64_t t0 = 0; t0 < n; t0 += CHUNK) {
        int c = n - t0 < CHUNK ? (int)(n - t0) : CHUNK;
        for (int g = 0; g < g_count; g++) {
            score_chunk(qf + g * d, kt + (t0 / CHUNK) * d * CHUNK, d, scale, chunk);
            memcpy(scores + g * n + t0, chunk, sizeof(float) * (size_t)c);
        }
    }
    for (int g = 0; g < g_count; g++) {
        float *s = scores + g * n, m = -INFINITY, sum = 0.0f;
        for (int64_t t = 0; t < n; t++) m = s[t] > m ? s[t] : m;
        for (int64_t t = 0; t < n; t++) {
            s[t] = expf(s[t] - m);
            sum += s[t];
        }
        total[g] = sum;
    }
    memset(acc, 0, sizeof(float) * (size_t)g_count * d);
    for (int64_t t = 0; t < n; t++) {
        const float *row = vr + t * d;
        for (int g = 0; g < g_count; g++) {
            float p = scores[g * n + t], *a = acc + g * d;
            for (int i = 0; i < d; i++) a[i] += p * row[i];
        }
    }
    for (int g = 0; g < g_count; g++)
        for (int i = 0; i < d; i++) out[g * d + i] = acc[g * d + i] / total[g];
}

/* Returns 0; -1 when a size is out of range (nothing computed), -2 when out of memory, -3 when
 * a block table points outside the pool's `slots` rows.
 *
 * table_stride > 0: every row has its own table (a decode step); work items are (row, KV head),
 * each staging its row's keys. table_stride == 0: all rows are queries of one sequence sharing
 * one table (a prefill chunk or a verification pass, lens rising); each KV head's keys are
 * staged once and every row attends to its first lens[r] of them, with the same arithmetic a
 * decode step of that row would do. */
int paged_decode_attention(const void *q, const void *k, const void *v, const int64_t *table,
                           int64_t table_stride, const int64_t *lens, int64_t rows, int heads,
                           int kv_heads, int d, int64_t bs, int64_t slots, int kind, float scale,
                           int threads, float *out) {
    if (d <= 0 || d > MAX_D || kv_heads <= 0 || heads % kv_heads || heads / kv_heads > MAX_G
        || bs <= 0 || kind < 0 || kind > 2)
        return -1;
    int g_count = heads / kv_heads;
    int64_t longest = 0;
    for (int64_t r = 0; r < rows; r++) {
        if (lens[r] <= 0) return -1;
        longest = lens[r] > longest ? lens[r] : longest;
    }
    int64_t padded = (longest + CHUNK - 1) / CHUNK * CHUNK;
    int shared = table_stride == 0, failed = 0;
    size_t stage_floats = (size_t)padded * d * 2;         /* kt and vr of one KV head */
    float *staged = NULL;
    if (shared) {                                          /* every KV head, staged once */
        staged = malloc(sizeof(float) * stage_floats * (size_t)kv_heads);
        if (!staged) return -2;
#pragma omp parallel for num_threads(threads > 0 ? threads : 1) schedule(static)
        for (int kh = 0; kh < kv_heads; kh++) {
            float *kt = staged + stage_floats * kh;
            int rc = stage(k, v, table, longest, bs, slots, kv_heads, kh, d, kind, kt,
                           kt + (size_t)padded * d);
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
        float *scores = malloc(sizeof(float) * (size_t)g_count * (size_t)longest);
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
            int64_t vr_at = (shared ? padded : (n + CHUNK - 1) / CHUNK * CHUNK) * d;
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
            for (int g = 0; g < g_count; g++) widen(q, at + (int64_t)g * d, d, kind, qf + g * d);
            attend(qf, kt, kt + vr_at, n, g_count, d, scale, out + at, scores);
        }
        free(scores);
        free(own);
    }
    free(staged);
    return failed;
}
