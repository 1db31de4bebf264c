// 4-bit weight-only matrix product on AVX-512-bf16: y [M, N] = x [M, K] · Wᵀ, W in groups of 32.
//
// Weights are 4-bit codes q (0..15) with, per output column and group of 32 inputs, a bf16
// scale s and zero z: w = (q - 8) · s + z (the convention of PyTorch's int4 kernels). The
// product is computed factored per group g:
//
//     y[m, n] = Σ_g ( s[g, n] · Σ_{k∈g} x[m, k] · (q[n, k] - 8)  +  z[g, n] · Σ_{k∈g} x[m, k] )
//
// The inner sums run on vdpbf16ps (bf16 pairs multiplied exactly, summed in fp32): each code is
// turned into a bf16 number in registers (see widen_codes), so the weights are read once, as
// 4-bit codes, for every group of four rows. Above kTileRows rows (a prompt's), a column block's
// codes are widened once into a tile of bf16 that every group of four rows reads: the same
// numbers into the same instructions, without the five widening operations per eight products
// (1,024 rows on the embedded model's four shapes, 2-core EPYC: 332-357 → 356-383 GFLOP/s, the
// per-layer products 21.2 → 19.5 ms).
//
// Layout (built by engine/model/quant/int4_kernel.py from the codes):
//   codes  uint8 [N/32, K/2, 32]: for column block b and input pair i, byte 2j+e holds column
//          32b+j's code of input 2i+e in its low nibble and column 32b+16+j's in its high nibble.
//   sz     bf16  [N/32, K/32, 2, 32]: the block's 32 scales, then its 32 zeros, per group.
//
// Batch invariance: every output element goes through the same instructions in the same order
// whatever M is and whichever rows share its register block (rows are blocked by 4, the rest
// by 3, 2 or 1 with the same per-row sequence), and threads split column blocks only. So a row's
// bits depend on that row alone.

#include <ATen/core/Tensor.h>
#include <ATen/EmptyTensor.h>  // at::detail::empty_cpu: ATen/ops/empty.h cost ~0.8 s more to compile
#include <torch/library.h>

#include <immintrin.h>

#include <cstdint>
#include <vector>

#include "kernel_pool.h"

namespace {

constexpr int64_t kCols = 32;   // output columns per block (two zmm of fp32)
constexpr int64_t kGroup = 32;  // inputs per scale group
// Least work per thread, in row × input products per column (times 32 columns a block):
// a one-row product of K = 576 inputs splits from 8 column blocks (256 columns) up.
constexpr int64_t kPartWork = int64_t(1) << 12;
constexpr int64_t kTileRows = 128;  // above this many rows, a column block's codes are widened once:
// below it the tile's store and reload cost more than the widening saves (64 rows: 1.56 against
// 1.64 ms a layer; 256 rows: 6.10 against 5.73)

#define TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

struct Problem {
  const uint16_t* x;    // [M, K] bf16 bits
  const uint8_t* w;     // codes, layout above
  const uint16_t* sz;   // scales and zeros, layout above
  const float* xsum;    // [M, K/32] per-group sums of x
  uint16_t* y;          // [M, N] bf16 bits
  int64_t K, N;
};

TARGET static inline __m512 widen(const uint16_t* p) {  // 16 bf16 → 16 fp32 (exact)
  return _mm512_castsi512_ps(_mm512_slli_epi32(
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}

// One input pair's 32 bytes of codes → the bf16 numbers 1 + q/16 of columns 0-15 (wa) and
// 16-31 (wb), input pairs interleaved: (c << 3) & 0x78 | 0x3F80 and (c >> 1) & 0x78 | 0x3F80
// (ternary logic A&B | C, 0xEA).
TARGET static inline void widen_codes(const uint8_t* q, __m512bh& wa, __m512bh& wb) {
  const __m512i nibble = _mm512_set1_epi16(0x78);     // q << 3 lands here
  const __m512i one = _mm512_set1_epi16(0x3F80);      // bf16 1.0
  const __m512i c = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
  wa = (__m512bh)_mm512_ternarylogic_epi32(_mm512_slli_epi16(c, 3), nibble, one, 0xEA);
  wb = (__m512bh)_mm512_ternarylogic_epi32(_mm512_srli_epi16(c, 1), nibble, one, 0xEA);
}

// R rows (m0 .. m0+R-1) of one column block b.
//
// A code q becomes the bf16 1 + q/16 by placing it in the top 4 of the 7 mantissa bits
// (0x3F80 | q << 3; one shift and one bitwise select, no table). Each product with a bf16
// activation is exact in fp32, and over a group
//     Σ x·(q - 8) = 16 · Σ x·(1 + q/16) - 24 · Σ x,
// so a group adds 16·s · D + (z - 24·s) · Σx to the output, D being the vdpbf16ps sum. The
// sum runs in two chains (even and odd input pairs) so that 16 vdpbf16ps are in flight for
// four rows, then the chains are added: the same order for every row.
template <int R>
TARGET static inline void rows_block(const Problem& p, int64_t m0, int64_t b, const uint16_t* tile) {
  const int64_t groups = p.K / kGroup;
  const uint8_t* w = p.w + b * (p.K / 2) * kCols;
  const uint16_t* sz = p.sz + b * groups * 2 * kCols;
  const __m512 sixteen = _mm512_set1_ps(16.0f), twenty_four = _mm512_set1_ps(24.0f);
  const uint16_t* xr[R];
  for (int r = 0; r < R; ++r) xr[r] = p.x + (m0 + r) * p.K;
  __m512 out[R][2];
  for (int r = 0; r < R; ++r) out[r][0] = out[r][1] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512 acc[2][R][2];
    for (int h = 0; h < 2; ++h)
      for (int r = 0; r < R; ++r) acc[h][r][0] = acc[h][r][1] = _mm512_setzero_ps();
    const uint8_t* wg = w + g * (kGroup / 2) * kCols;
#pragma GCC unroll 16
    for (int i = 0; i < kGroup / 2; ++i) {
      __m512bh wa, wb;
      if (tile) {
        const uint16_t* tp = tile + (g * (kGroup / 2) + i) * 2 * kCols;
        wa = (__m512bh)_mm512_loadu_si512(tp);
        wb = (__m512bh)_mm512_loadu_si512(tp + kCols);
      } else {
        widen_codes(wg + i * kCols, wa, wb);
      }
      const int h = i & 1;
      for (int r = 0; r < R; ++r) {
        int32_t pair;
        __builtin_memcpy(&pair, xr[r] + g * kGroup + 2 * i, 4);
        const __m512bh xb = (__m512bh)_mm512_set1_epi32(pair);
        acc[h][r][0] = _mm512_dpbf16_ps(acc[h][r][0], xb, wa);
        acc[h][r][1] = _mm512_dpbf16_ps(acc[h][r][1], xb, wb);
      }
    }
    const uint16_t* s = sz + g * 2 * kCols;
    const __m512 s0 = widen(s), s1 = widen(s + 16);
    const __m512 z0 = _mm512_fnmadd_ps(twenty_four, s0, widen(s + 32));
    const __m512 z1 = _mm512_fnmadd_ps(twenty_four, s1, widen(s + 48));
    const __m512 t0 = _mm512_mul_ps(sixteen, s0), t1 = _mm512_mul_ps(sixteen, s1);
    for (int r = 0; r < R; ++r) {
      const __m512 xs = _mm512_set1_ps(p.xsum[(m0 + r) * groups + g]);
      out[r][0] = _mm512_fmadd_ps(_mm512_add_ps(acc[0][r][0], acc[1][r][0]), t0, out[r][0]);
      out[r][1] = _mm512_fmadd_ps(_mm512_add_ps(acc[0][r][1], acc[1][r][1]), t1, out[r][1]);
      out[r][0] = _mm512_fmadd_ps(xs, z0, out[r][0]);
      out[r][1] = _mm512_fmadd_ps(xs, z1, out[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    uint16_t* yr = p.y + (m0 + r) * p.N + b * kCols;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(yr), (__m256i)_mm512_cvtneps_pbh(out[r][0]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(yr + 16), (__m256i)_mm512_cvtneps_pbh(out[r][1]));
  }
}

// Σ of each group of 32 inputs of each row, in fp32 (pairs on vdpbf16ps against ones, then a
// fixed reduction of 16 lanes): [M, K/32].
TARGET static void group_sums(const uint16_t* x, int64_t M, int64_t K, float* out) {
  const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3F80);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t g = 0; g < K / kGroup; ++g) {
      const __m512bh v = (__m512bh)_mm512_loadu_si512(x + m * K + g * kGroup);
      out[m * (K / kGroup) + g] = _mm512_reduce_add_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), v, ones));
    }
}

TARGET static void run(const Problem& p, int64_t M, int64_t b0, int64_t b1) {
  std::vector<uint16_t> tile(M > kTileRows ? p.K * kCols : 0);  // K/2 pairs × 64 bf16
  uint16_t* t = M > kTileRows ? tile.data() : nullptr;
  for (int64_t b = b0; b < b1; ++b) {
    if (t) {
      const uint8_t* w = p.w + b * (p.K / 2) * kCols;
      for (int64_t i = 0; i < p.K / 2; ++i) {
        __m512bh wa, wb;
        widen_codes(w + i * kCols, wa, wb);
        _mm512_storeu_si512(t + i * 2 * kCols, (__m512i)wa);
        _mm512_storeu_si512(t + i * 2 * kCols + kCols, (__m512i)wb);
      }
    }
    int64_t m = 0;
    for (; m + 4 <= M; m += 4) rows_block<4>(p, m, b, t);
    switch (M - m) {
      case 3: rows_block<3>(p, m, b, t); break;
      case 2: rows_block<2>(p, m, b, t); break;
      case 1: rows_block<1>(p, m, b, t); break;
      default: break;
    }
  }
}

bool cpu_ok() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512bf16");
}

at::Tensor int4_mm(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& sz) {
  TORCH_CHECK(cpu_ok(), "int4_mm: this CPU lacks AVX-512-bf16");
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kBFloat16 && x.is_contiguous() && x.is_cpu(),
              "int4_mm: x must be a contiguous 2-D bf16 CPU tensor");
  TORCH_CHECK(codes.dim() == 3 && codes.scalar_type() == at::kByte && codes.is_contiguous() &&
              codes.size(2) == kCols, "int4_mm: codes must be uint8 [N/32, K/2, 32]");
  const int64_t M = x.size(0), K = x.size(1), blocks = codes.size(0), N = blocks * kCols;
  TORCH_CHECK(K % kGroup == 0 && codes.size(1) * 2 == K,
              "int4_mm: x has ", K, " inputs, codes hold ", codes.size(1) * 2);
  TORCH_CHECK(sz.scalar_type() == at::kBFloat16 && sz.is_contiguous() &&
              sz.numel() == blocks * (K / kGroup) * 2 * kCols,
              "int4_mm: sz must be bf16 [N/32, K/32, 2, 32]");
  at::Tensor y = at::detail::empty_cpu({M, N}, at::kBFloat16);
  if (M == 0) return y;
  std::vector<float> xsum(M * (K / kGroup));
  const auto* xp = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  group_sums(xp, M, K, xsum.data());
  const Problem p{xp, codes.data_ptr<uint8_t>(),
                  reinterpret_cast<const uint16_t*>(sz.data_ptr<at::BFloat16>()), xsum.data(),
                  reinterpret_cast<uint16_t*>(y.data_ptr<at::BFloat16>()), K, N};
  // Enough work per task that a small product stays on the calling thread.
  const int64_t per_block = M * K;
  const int64_t grain = std::max<int64_t>(1, kPartWork / std::max<int64_t>(per_block, 1));
  kernel_pool::parallel_for(blocks, grain, [&](int64_t b0, int64_t b1) { run(p, M, b0, b1); });
  return y;
}

// ---- int8 weights, one scale per output column: y[m, n] = s[n] · Σ_k x[m, k] · q[n, k] ----
//
// Layout (engine/model/quant/int4_kernel.py, pack_int8):
//   codes  int8 [N/32, K/2, 64]: for column block b and input pair i, byte 2j+e holds column
//          32b+j's code of input 2i+e.
// A column block's codes are first widened to bf16 (exact: |q| ≤ 127 needs 7 bits) into a tile
// of K/2 × 128 bytes (36 KB at K = 576: it stays in L1), then every row multiplies against the
// tile on vdpbf16ps, four rows at a time, two chains (even and odd input pairs) as above. The
// widening is paid once per block whatever M is, so many rows cost about what the bf16 product
// costs while the codes are half its bytes; each row's sums run in the same order for any M.

TARGET static inline __m512bh widen_pairs(const int8_t* q) {  // 32 codes → 32 bf16 (exact)
  const __m512 a = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))));
  const __m512 b = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16))));
  return _mm512_cvtne2ps_pbh(b, a);
}

// R rows against one column block. With a tile (tile != nullptr) the block's codes were widened
// once; without (a single row group: M ≤ 4), they are widened here, into the same values.
template <int R>
TARGET static inline void rows_block8(const uint16_t* x, int64_t K, const int8_t* w,
                                      const uint16_t* tile, __m512 scale0, __m512 scale1,
                                      uint16_t* y, int64_t N) {
  __m512 acc[2][R][2];
  for (int h = 0; h < 2; ++h)
    for (int r = 0; r < R; ++r) acc[h][r][0] = acc[h][r][1] = _mm512_setzero_ps();
  for (int64_t i = 0; i < K / 2; i += 2) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const int64_t ii = i + h;
      const __m512bh wa = tile ? (__m512bh)_mm512_loadu_si512(tile + ii * 64) : widen_pairs(w + ii * 64);
      const __m512bh wb = tile ? (__m512bh)_mm512_loadu_si512(tile + ii * 64 + 32) : widen_pairs(w + ii * 64 + 32);
      for (int r = 0; r < R; ++r) {
        int32_t pair;
        __builtin_memcpy(&pair, x + r * K + 2 * ii, 4);
        const __m512bh xb = (__m512bh)_mm512_set1_epi32(pair);
        acc[h][r][0] = _mm512_dpbf16_ps(acc[h][r][0], xb, wa);
        acc[h][r][1] = _mm512_dpbf16_ps(acc[h][r][1], xb, wb);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m512 o0 = _mm512_mul_ps(_mm512_add_ps(acc[0][r][0], acc[1][r][0]), scale0);
    const __m512 o1 = _mm512_mul_ps(_mm512_add_ps(acc[0][r][1], acc[1][r][1]), scale1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + r * N), (__m256i)_mm512_cvtneps_pbh(o0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + r * N + 16), (__m256i)_mm512_cvtneps_pbh(o1));
  }
}

constexpr int64_t kDirectRows = 8;   // up to this many rows, widen in the loop (no tile)

TARGET static void run8(const uint16_t* x, const int8_t* codes, const uint16_t* scales,
                        uint16_t* y, int64_t M, int64_t K, int64_t N, int64_t b0, int64_t b1) {
  std::vector<uint16_t> tile(M > kDirectRows ? K * kCols : 0);  // K/2 pairs × 64 bf16
  uint16_t* t = M > kDirectRows ? tile.data() : nullptr;
  for (int64_t b = b0; b < b1; ++b) {
    const int8_t* w = codes + b * (K / 2) * 64;
    if (t)
      for (int64_t i = 0; i < K / 2; ++i) {
        _mm512_storeu_si512(t + i * 64, (__m512i)widen_pairs(w + i * 64));
        _mm512_storeu_si512(t + i * 64 + 32, (__m512i)widen_pairs(w + i * 64 + 32));
      }
    const __m512 s0 = widen(scales + b * kCols), s1 = widen(scales + b * kCols + 16);
    uint16_t* yb = y + b * kCols;
    int64_t m = 0;
    for (; m + 4 <= M; m += 4) rows_block8<4>(x + m * K, K, w, t, s0, s1, yb + m * N, N);
    switch (M - m) {
      case 3: rows_block8<3>(x + m * K, K, w, t, s0, s1, yb + m * N, N); break;
      case 2: rows_block8<2>(x + m * K, K, w, t, s0, s1, yb + m * N, N); break;
      case 1: rows_block8<1>(x + m * K, K, w, t, s0, s1, yb + m * N, N); break;
      default: break;
    }
  }
}

at::Tensor int8_mm(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales) {
  TORCH_CHECK(cpu_ok(), "int8_mm: this CPU lacks AVX-512-bf16");
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kBFloat16 && x.is_contiguous() && x.is_cpu(),
              "int8_mm: x must be a contiguous 2-D bf16 CPU tensor");
  TORCH_CHECK(codes.dim() == 3 && codes.scalar_type() == at::kChar && codes.is_contiguous() &&
              codes.size(2) == 2 * kCols, "int8_mm: codes must be int8 [N/32, K/2, 64]");
  const int64_t M = x.size(0), K = x.size(1), blocks = codes.size(0), N = blocks * kCols;
  TORCH_CHECK(K % 4 == 0 && codes.size(1) * 2 == K,
              "int8_mm: x has ", K, " inputs, codes hold ", codes.size(1) * 2);
  TORCH_CHECK(scales.scalar_type() == at::kBFloat16 && scales.is_contiguous() && scales.numel() == N,
              "int8_mm: scales must be bf16 [N]");
  at::Tensor y = at::detail::empty_cpu({M, N}, at::kBFloat16);
  if (M == 0) return y;
  const auto* xp = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  const auto* sp = reinterpret_cast<const uint16_t*>(scales.data_ptr<at::BFloat16>());
  auto* yp = reinterpret_cast<uint16_t*>(y.data_ptr<at::BFloat16>());
  const int8_t* cp = codes.data_ptr<int8_t>();
  const int64_t grain = std::max<int64_t>(1, kPartWork / std::max<int64_t>(M * K, 1));
  kernel_pool::parallel_for(blocks, grain, [&](int64_t b0, int64_t b1) {
    run8(xp, cp, sp, yp, M, K, N, b0, b1);
  });
  return y;
}

bool int4_available() { return cpu_ok(); }

int64_t set_threads(int64_t threads, int64_t spin_us) {
  TORCH_CHECK(threads >= 1 && spin_us >= 0, "set_threads: threads >= 1 and spin_us >= 0 expected");
  kernel_pool::Pool::get().configure(static_cast<int>(threads), spin_us);
  return kernel_pool::Pool::get().threads();
}

int64_t get_threads() { return kernel_pool::Pool::get().threads(); }

// The pool for other libraries of the engine (the compiled step's attention operator): its
// entry point's address, handed over once, so that one pool serves every kernel of a step.
extern "C" void playground_pool_parallel_for(int64_t n, int64_t grain,
                                             void (*fn)(void* ctx, int64_t b0, int64_t b1),
                                             void* ctx) {
  kernel_pool::parallel_for(n, grain, [&](int64_t b0, int64_t b1) { fn(ctx, b0, b1); });
}

int64_t pool_entry() { return reinterpret_cast<int64_t>(&playground_pool_parallel_for); }

}  // namespace

TORCH_LIBRARY(playground_int4, m) {
  m.def("int4_mm(Tensor x, Tensor codes, Tensor sz) -> Tensor");
  m.def("int8_mm(Tensor x, Tensor codes, Tensor scales) -> Tensor");
  m.def("available() -> bool", &int4_available);
  m.def("set_threads(int threads, int spin_us) -> int", &set_threads);
  m.def("threads() -> int", &get_threads);
  m.def("pool_entry() -> int", &pool_entry);
}

TORCH_LIBRARY_IMPL(playground_int4, CPU, m) {
  m.impl("int4_mm", &int4_mm);
  m.impl("int8_mm", &int8_mm);
}
