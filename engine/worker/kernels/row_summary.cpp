// What the sampler hands back for each row of a step, in one pass over the row:
// playground_sampling::row_summary(scored, probs, chosen, k) -> float64 [N, 3 + 2k]
//   [:, 0]          the row's token: chosen[r] where it is >= 0 (a sampled row's draw), else
//                   the first index of the row's largest score (torch.argmax's index)
//   [:, 1]          probs at that token
//   [:, 2]          1.0 if every score is finite, else 0.0
//   [:, 3:3+k]      the indices of the k largest probabilities, largest first (equal values:
//                   the lower index first)
//   [:, 3+k:3+2k]   those probabilities
// Every value is selected, none computed, so the numbers are the bits of the inputs.
//
// Why: on the CPU the sampler's argmax, top-k, finite check and the packing of the results for
// one transfer were about 30 small PyTorch operations a step. Right after a decode step has
// streamed the weights through the caches, each costs several times its warm time: about
// 0.25 ms of a 3.5-4.5 ms batch-1 step (engine/worker/kernels/row_summary.py).

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/EmptyTensor.h>  // at::detail::empty_cpu: ATen/ops/empty.h cost ~0.8 s more to compile
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace {

// x86-64's baseline SSE2 does four values at a time below; other CPUs run the plain loops.
#if defined(__SSE2__)
#include <emmintrin.h>
#define PG_SSE2 1
#else
#define PG_SSE2 0
#endif

// The largest of x[0:n] (NaN never wins) and whether every value is finite.
void max_and_finite(const float* x, int64_t n, float* best, bool* finite) {
  float out = -INFINITY;
  bool special = false;
  int64_t j = 0;
#if PG_SSE2
  __m128 m0 = _mm_set1_ps(-INFINITY), m1 = m0;
  const __m128i expo = _mm_set1_epi32(0x7f800000);
  __m128i sp = _mm_setzero_si128();
  for (; j + 8 <= n; j += 8) {
    const __m128 a = _mm_loadu_ps(x + j), b = _mm_loadu_ps(x + j + 4);
    m0 = _mm_max_ps(a, m0);                  // a > m ? a : m: a NaN keeps m
    m1 = _mm_max_ps(b, m1);
    sp = _mm_or_si128(sp, _mm_cmpeq_epi32(_mm_and_si128(_mm_castps_si128(a), expo), expo));
    sp = _mm_or_si128(sp, _mm_cmpeq_epi32(_mm_and_si128(_mm_castps_si128(b), expo), expo));
  }
  float lanes[8];
  _mm_storeu_ps(lanes, m0);
  _mm_storeu_ps(lanes + 4, m1);
  for (float v : lanes) out = v > out ? v : out;
  special = _mm_movemask_epi8(sp) != 0;
#endif
  for (; j < n; ++j) {
    const float v = x[j];
    out = v > out ? v : out;
    special = special || !std::isfinite(v);
  }
  *best = out;
  *finite = !special;
}

// The first index of x[0:n] holding v (n when none does).
int64_t first_equal(const float* x, int64_t n, float v) {
  int64_t j = 0;
#if PG_SSE2
  const __m128 t = _mm_set1_ps(v);
  for (; j + 8 <= n; j += 8) {
    const int hit = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(x + j), t)) |
                    _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(x + j + 4), t)) << 4;
    if (hit) return j + __builtin_ctz(hit);
  }
#endif
  for (; j < n; ++j)
    if (x[j] == v) return j;
  return n;
}

// Whether any of p[j0:j1] is above floor.
bool any_above(const float* p, int64_t j0, int64_t j1, float floor) {
  int64_t j = j0;
#if PG_SSE2
  const __m128 f = _mm_set1_ps(floor);
  for (; j + 8 <= j1; j += 8)
    if (_mm_movemask_ps(_mm_or_ps(_mm_cmpgt_ps(_mm_loadu_ps(p + j), f),
                                  _mm_cmpgt_ps(_mm_loadu_ps(p + j + 4), f))))
      return true;
#endif
  for (; j < j1; ++j)
    if (p[j] > floor) return true;
  return false;
}

constexpr int64_t kBlock = 64;   // probabilities checked against the k-th at once

void summarize(const float* x, const float* p, int64_t V, int64_t k, int64_t chosen,
               double* out) {
  // argmax of x: its largest value, then the first index holding it (torch.argmax's; a row
  // with NaN or inf is reported through the finite flag, whatever the index)
  float best;
  bool finite;
  max_and_finite(x, V, &best, &finite);
  int64_t at = first_equal(x, V, best);
  if (at == V) at = 0;                       // all NaN: index 0
  // the k largest probabilities: a list kept sorted, largest first; a later equal value never
  // displaces an earlier one. Once the list is full, a block is scanned only if one of its
  // values is above the k-th.
  double* ids = out + 3;
  double* vals = out + 3 + k;
  int64_t n = 0;
  float floor = -INFINITY;                   // the k-th value once the list is full
  for (int64_t j0 = 0; j0 < V; j0 += kBlock) {
    const int64_t j1 = j0 + kBlock < V ? j0 + kBlock : V;
    if (n == k && !any_above(p, j0, j1, floor)) continue;
    for (int64_t j = j0; j < j1; ++j) {
      const float v = p[j];
      if (n == k && !(v > floor)) continue;
      int64_t i = n < k ? n++ : k - 1;
      while (i > 0 && v > vals[i - 1]) {
        vals[i] = vals[i - 1];
        ids[i] = ids[i - 1];
        --i;
      }
      vals[i] = v;
      ids[i] = static_cast<double>(j);
      if (n == k) floor = static_cast<float>(vals[k - 1]);
    }
  }
  if (chosen >= 0) at = chosen;
  out[0] = static_cast<double>(at);
  out[1] = p[at];
  out[2] = finite ? 1.0 : 0.0;
}

at::Tensor row_summary(const at::Tensor& scored, const at::Tensor& probs,
                       const at::Tensor& chosen, int64_t k) {
  TORCH_CHECK(scored.dim() == 2 && scored.scalar_type() == at::kFloat && scored.is_cpu() &&
                  scored.is_contiguous(),
              "row_summary: scored must be a contiguous float32 [N, V] CPU tensor");
  TORCH_CHECK(probs.sizes() == scored.sizes() && probs.scalar_type() == at::kFloat &&
                  probs.is_cpu() && probs.is_contiguous(),
              "row_summary: probs must be a contiguous float32 CPU tensor shaped like scored");
  const int64_t N = scored.size(0), V = scored.size(1);
  TORCH_CHECK(V >= 1 && k >= 1 && k <= V, "row_summary: need 1 <= k <= V, got k = ", k,
              ", V = ", V);
  TORCH_CHECK(chosen.dim() == 1 && chosen.size(0) == N && chosen.scalar_type() == at::kLong &&
                  chosen.is_cpu() && chosen.is_contiguous(),
              "row_summary: chosen must be a contiguous int64 [N] CPU tensor");
  const int64_t* c = chosen.data_ptr<int64_t>();
  for (int64_t r = 0; r < N; ++r)
    TORCH_CHECK(c[r] < V, "row_summary: chosen[", r, "] = ", c[r], " is not below V = ", V);
  at::Tensor out = at::detail::empty_cpu({N, 3 + 2 * k}, at::kDouble);
  const float* x = scored.data_ptr<float>();
  const float* p = probs.data_ptr<float>();
  double* o = out.data_ptr<double>();
  at::parallel_for(0, N, 4, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      summarize(x + r * V, p + r * V, V, k, c[r], o + r * (3 + 2 * k));
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(playground_sampling, m) {
  m.def("row_summary(Tensor scored, Tensor probs, Tensor chosen, int k) -> Tensor");
}

TORCH_LIBRARY_IMPL(playground_sampling, CPU, m) { m.impl("row_summary", &row_summary); }
