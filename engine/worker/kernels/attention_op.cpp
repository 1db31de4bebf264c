// The compiled decode step's paged attention as a C++ operator: the op
// playground_attention::paged_decode_attention writes a step's new keys and values into one
// layer's pool and calls the C kernel of paged_decode.c (engine/worker/kernels/decode_attention.py
// loads that library and hands its entry point over once, with set_kernel).
//
// Why C++: the same op written in Python (engine/worker/compiled/attention_op.py) paid about
// 8 µs of interpreter, index_copy_ and ctypes work per call on top of the kernel (18.7 against
// 10.3 µs for one row of 100 keys), 30 calls a step. The arithmetic is the C kernel's, so the
// results are the same bits.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/EmptyTensor.h>  // at::detail::empty_cpu: ATen/ops/empty.h cost ~0.8 s more to compile
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

// paged_decode.c's entry point (see its comment for the arguments and return codes).
using Kernel = int (*)(const void* q, const void* k, const void* v, const int64_t* table,
                       int64_t table_stride, int64_t table_width, const int64_t* lens,
                       int64_t rows, int heads, int kv_heads, int d, int64_t bs, int64_t slots,
                       int kind, float scale, int threads, void* out);

std::atomic<Kernel> g_kernel{nullptr};

// The int4 library's thread pool (engine/model/quant/kernel_pool.h), when it is loaded: rows of
// a step are split over its threads, each row computed by one thread start to end (the same
// bits as on one thread). Without it the kernel runs on at::get_num_threads() OpenMP threads.
using PoolFor = void (*)(int64_t n, int64_t grain, void (*fn)(void*, int64_t, int64_t), void*);
std::atomic<PoolFor> g_pool{nullptr};

int64_t set_pool(int64_t address) {
  g_pool.store(reinterpret_cast<PoolFor>(address));
  return address;
}

// Row boundaries of up to kSegments segments of about equal work (a row costs its keys plus
// kRowCost for what it does whatever its length): segment s is rows [bound[s], bound[s + 1]),
// some possibly empty. Which thread computes a row never changes its bits.
constexpr int64_t kSegments = 64, kRowCost = 16;

std::vector<int64_t> segments(const int64_t* lens, int64_t rows) {
  int64_t total = 0;
  for (int64_t r = 0; r < rows; ++r) total += std::max<int64_t>(lens[r], 0) + kRowCost;
  const int64_t n = std::min(rows, kSegments);
  std::vector<int64_t> bound{0};
  int64_t done = 0, r = 0;
  for (int64_t s = 1; s < n; ++s) {
    const int64_t target = total * s / n;
    while (r < rows && done + std::max<int64_t>(lens[r], 0) + kRowCost <= target)
      done += std::max<int64_t>(lens[r++], 0) + kRowCost;
    bound.push_back(r);
  }
  bound.push_back(rows);
  return bound;
}

int64_t set_kernel(int64_t address) {
  g_kernel.store(reinterpret_cast<Kernel>(address));
  return address;
}

// pool[slots[b]] = x[b] for each row b: a copy of each row's kv_heads × d values (what
// index_copy_ does, without its dispatch: two of these per layer and step).
void write_slots(const at::Tensor& pool, const at::Tensor& slots, const at::Tensor& x) {
  const int64_t rows = x.size(0), row = pool.size(1) * pool.size(2), n = pool.size(0);
  TORCH_CHECK(slots.scalar_type() == at::kLong && slots.dim() == 1 && slots.size(0) == rows &&
              x.size(1) == pool.size(1) && x.size(2) == pool.size(2),
              "paged_decode_attention: slots must be int64 [B], k and v [B, kv_heads, d]");
  if (!x.is_contiguous() || !slots.is_contiguous()) {
    pool.index_copy_(0, slots, x);
    return;
  }
  const int64_t* s = slots.data_ptr<int64_t>();
  const size_t bytes = static_cast<size_t>(row) * x.element_size();
  auto* dst = static_cast<char*>(pool.data_ptr());
  const auto* src = static_cast<const char*>(x.data_ptr());
  for (int64_t b = 0; b < rows; ++b) {
    TORCH_CHECK(s[b] >= 0 && s[b] < n, "paged_decode_attention: slots: ", s[b],
                " is outside the pool's ", n, " slots");
    std::memcpy(dst + s[b] * bytes, src + b * bytes, bytes);
  }
}

at::Tensor paged_decode_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& k_pool, const at::Tensor& v_pool,
                                  const at::Tensor& slots, const at::Tensor& blocks,
                                  const at::Tensor& lens, int64_t block_size, double scale) {
  const Kernel kernel = g_kernel.load();
  TORCH_CHECK(kernel != nullptr, "paged_decode_attention: the C kernel is not loaded");
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3, "paged_decode_attention: q, k and v "
              "must be [B, heads, d]");
  const auto dtype = q.scalar_type();
  TORCH_CHECK(dtype == at::kBFloat16 || dtype == at::kHalf,
              "paged_decode_attention: q must be bf16 or fp16");
  TORCH_CHECK(k_pool.scalar_type() == dtype && v_pool.scalar_type() == dtype &&
              k_pool.is_contiguous() && v_pool.is_contiguous() && k_pool.dim() == 3,
              "paged_decode_attention: k_pool and v_pool must be contiguous [slots, kv_heads, d] "
              "in q's dtype");
  TORCH_CHECK(blocks.scalar_type() == at::kLong && blocks.dim() == 2 && blocks.is_contiguous(),
              "paged_decode_attention: blocks must be contiguous int64 [B, W]");
  const int64_t rows = q.size(0), heads = q.size(1), d = q.size(2);
  TORCH_CHECK(lens.scalar_type() == at::kLong && lens.is_contiguous() && lens.numel() == rows &&
              blocks.size(0) == rows, "paged_decode_attention: lens must be contiguous int64 [B]");
  write_slots(k_pool, slots, k.to(dtype));
  write_slots(v_pool, slots, v.to(dtype));
  const at::Tensor qc = q.contiguous();
  at::Tensor out = at::detail::empty_cpu({rows, heads, d},
                                         dtype == at::kBFloat16 ? at::kBFloat16 : at::kFloat);
  const int64_t width = blocks.size(1);
  const int kind = dtype == at::kBFloat16 ? 1 : 2;
  const int64_t out_row = heads * d * out.element_size(), q_row = heads * d * qc.element_size();
  struct Part {
    Kernel kernel; const char* q; const void *kp, *vp; const int64_t *table, *lens; int64_t width;
    int heads, kv_heads, d; int64_t bs, slots; int kind; float scale; char* out;
    int64_t q_row, out_row; std::atomic<int> rc; const int64_t* bound = nullptr;
  } part{kernel, static_cast<const char*>(qc.data_ptr()), k_pool.data_ptr(), v_pool.data_ptr(),
         blocks.data_ptr<int64_t>(), lens.data_ptr<int64_t>(), width, static_cast<int>(heads),
         static_cast<int>(k_pool.size(1)), static_cast<int>(d), block_size, k_pool.size(0), kind,
         static_cast<float>(scale), static_cast<char*>(out.data_ptr()), q_row, out_row, {0}};
  const PoolFor pool = g_pool.load();
  int rc;
  if (pool != nullptr && rows > 1) {
    // The pool cuts [0, n) into one contiguous range per thread. A prompt's rows attend to 1,
    // 2, ... keys, so equal counts of rows are unequal work (the first half of a chunk that
    // starts the prompt is a third of the second's, and one thread waited for the other): the
    // rows are cut instead into segments of about equal work, the pool's ranges into those.
    const std::vector<int64_t> bound = segments(lens.data_ptr<int64_t>(), rows);
    part.bound = bound.data();
    pool(static_cast<int64_t>(bound.size()) - 1, 1, [](void* c, int64_t s0, int64_t s1) {
      auto& p = *static_cast<Part*>(c);
      const int64_t b0 = p.bound[s0], b1 = p.bound[s1];
      if (b1 <= b0) return;
      const int r = p.kernel(p.q + b0 * p.q_row, p.kp, p.vp, p.table + b0 * p.width, p.width,
                             p.width, p.lens + b0, b1 - b0, p.heads, p.kv_heads, p.d, p.bs,
                             p.slots, p.kind, p.scale, 1, p.out + b0 * p.out_row);
      if (r != 0) p.rc.store(r);
    }, &part);
    rc = part.rc.load();
  } else {
    rc = kernel(qc.data_ptr(), k_pool.data_ptr(), v_pool.data_ptr(), blocks.data_ptr<int64_t>(),
                width, width, lens.data_ptr<int64_t>(), rows, static_cast<int>(heads),
                static_cast<int>(k_pool.size(1)), static_cast<int>(d), block_size,
                k_pool.size(0), kind, static_cast<float>(scale),
                pool != nullptr ? 1 : at::get_num_threads(), out.data_ptr());
  }
  TORCH_CHECK(rc != -1, "paged_decode_attention: sizes the kernel does not take (head_dim over "
              "256, more than 16 query heads per KV head, or a length below 1)");
  TORCH_CHECK(rc != -2, "paged_decode_attention: out of memory for the attention scores");
  TORCH_CHECK(rc != -3, "paged_decode_attention: a block table points outside the KV pool");
  TORCH_CHECK(rc != -4, "paged_decode_attention: lens: a length beyond its table's ",
              width * block_size, " slots");
  TORCH_CHECK(rc == 0, "paged_decode_attention: error ", rc);
  return out.scalar_type() == dtype ? out : out.to(dtype);
}

}  // namespace

TORCH_LIBRARY(playground_attention, m) {
  m.def("paged_decode_attention(Tensor q, Tensor k, Tensor v, Tensor(a!) k_pool, "
        "Tensor(b!) v_pool, Tensor slots, Tensor blocks, Tensor lens, int block_size, "
        "float scale) -> Tensor");
  m.def("set_kernel(int address) -> int", &set_kernel);
  m.def("set_pool(int address) -> int", &set_pool);
}

TORCH_LIBRARY_IMPL(playground_attention, CPU, m) {
  m.impl("paged_decode_attention", &paged_decode_attention);
}
