// A small thread pool of the weight kernels' own: helpers that spin briefly between products.
//
// Why not ATen's parallel_for (OpenMP): a decode step calls about 120 products of 20-60 µs each,
// with small single-threaded operators between them. libgomp lets a finished helper spin only
// 100 rounds before it sleeps on a futex once the process has more OpenMP threads than CPUs
// (every Python thread that ever ran a parallel region keeps a team of its own, and the engine
// runs on its own thread), so each product paid a wake-up: the embedded model's 30 layers of
// int4 products at one row took 8.1 ms on two threads from the engine's thread against 3.1 ms on
// one (docs/compiled-decode.md). These helpers instead spin, yielding the core to any other
// runnable thread, for up to `spin_us` after their last part, and only then sleep on a condition
// variable.
//
// Parts are numbered 0 .. parts-1 and taken by whichever thread is free, the caller included. One
// caller at a time: a second thread that finds the pool busy runs all its parts itself, in order.
// Which thread computes a part never changes its result: callers split work so that every output
// element is computed by one part, whatever the number of parts.

#pragma once

#include <immintrin.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace kernel_pool {

class Pool {
 public:
  using Fn = void (*)(void* ctx, int part);

  // The process's pool: one thread per CPU this process may run on, started on first use
  // (re-made in a forked child).
  static Pool& get() {
    static Pool* pool = new Pool();   // never destroyed: helpers may outlive static teardown
    if (pool->pid_ != getpid()) pool->start(pool->want_);
    return *pool;
  }

  // Threads a product may use: helpers + the caller.
  int threads() const { return static_cast<int>(helpers_.size()) + 1; }

  // Use n threads in all (n ≥ 1), stopping or starting helpers; spin_us ≥ 0.
  void configure(int n, int64_t spin_us) {
    std::lock_guard<std::mutex> busy(busy_);
    spin_ns_.store(spin_us * 1000);
    if (n != threads() || pid_ != getpid()) start(n);
  }

  // fn(ctx, p) for every p in [0, parts); returns when all are done. Parts are taken in turn by
  // whoever is free, the caller included, so a helper that is asleep or off its core delays
  // nothing: the caller takes its parts.
  void run(int parts, Fn fn, void* ctx) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (parts <= 1 || threads() == 1 || !busy.owns_lock()) {
      for (int p = 0; p < std::max(parts, 1); ++p) fn(ctx, p);
      return;
    }
    fn_ = fn;
    ctx_ = ctx;
    parts = std::min(parts, 0xffff);
    done_.store(0, std::memory_order_relaxed);
    const uint64_t gen = (work_.load() >> 32) + 1;
    work_.store(gen << 32 | uint64_t(parts) << 16); // seq_cst: pairs with sleepers_ below
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> lk(m_);
      cv_.notify_all();
    }
    take_parts(gen);
    for (int spin = 0; done_.load(std::memory_order_acquire) != parts; ++spin) {
      _mm_pause();
      if ((spin & 255) == 255) sched_yield();
    }
  }

 private:
  Pool() { start(cpus()); }

  static int cpus() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
    return std::max(1u, std::thread::hardware_concurrency());
  }

  void start(int n) {
    if (pid_ == getpid()) {                         // stop this process's helpers
      {
        std::lock_guard<std::mutex> lk(m_);
        stop_.store(true);
        cv_.notify_all();
      }
      for (auto& t : helpers_) t.join();
    } else {
      for (auto& t : helpers_) t.detach();          // a fork's copies: those threads are gone
    }
    helpers_.clear();
    stop_.store(false);
    pid_ = getpid();
    want_ = n;
    for (int i = 1; i < n; ++i) helpers_.emplace_back([this] { helper(); });
  }

  // Take and run parts of generation gen until none is left (none if gen is over).
  void take_parts(uint64_t gen) {
    uint64_t v = work_.load(std::memory_order_acquire);
    for (;;) {
      if ((v >> 32) != gen || (v & 0xffff) >= ((v >> 16) & 0xffff)) return;
      if (!work_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel)) continue;
      fn_(ctx_, static_cast<int>(v & 0xffff));
      done_.fetch_add(1, std::memory_order_release);
      v = work_.load(std::memory_order_acquire);
    }
  }

  void helper() {
    uint64_t seen = work_.load() >> 32;
    for (;;) {
      uint64_t now = work_.load(std::memory_order_acquire) >> 32;
      const auto t0 = std::chrono::steady_clock::now();
      for (int spin = 0; now == seen && !stop_.load(std::memory_order_relaxed); ++spin) {
        _mm_pause();
        if ((spin & 63) == 63) {
          if (std::chrono::steady_clock::now() - t0 > std::chrono::nanoseconds(spin_ns_.load())) {
            std::unique_lock<std::mutex> lk(m_);
            sleepers_.fetch_add(1);                 // seq_cst: pairs with work_ in run()
            cv_.wait(lk, [&] { return (work_.load() >> 32) != seen || stop_.load(); });
            sleepers_.fetch_sub(1);
          } else {
            sched_yield();                          // let another runnable thread have the core
          }
        }
        now = work_.load(std::memory_order_acquire) >> 32;
      }
      if (stop_.load()) return;
      seen = now;
      take_parts(now);
    }
  }

  std::vector<std::thread> helpers_;
  std::mutex busy_;                 // one caller at a time
  std::mutex m_;                    // sleeping helpers
  std::condition_variable cv_;
  std::atomic<uint64_t> work_{0};   // generation << 32 | parts << 16 | next part to take
  std::atomic<int> done_{0};        // parts finished in this generation
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> spin_ns_{2'000'000};
  Fn fn_ = nullptr;
  void* ctx_ = nullptr;
  int want_ = 1;
  pid_t pid_ = 0;
};

// f(b0, b1) over [0, n) cut into at most the pool's threads contiguous ranges of at least
// about `grain` items or more each (one range, on the calling thread, when n ≤ grain).
template <class F>
void parallel_for(int64_t n, int64_t grain, const F& f) {
  Pool& pool = Pool::get();
  grain = std::max<int64_t>(grain, 1);
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(pool.threads(), (n + grain - 1) / grain));
  if (parts == 1) {
    f(int64_t(0), n);
    return;
  }
  struct Ctx { const F* f; int64_t n, parts; } ctx{&f, n, parts};
  pool.run(static_cast<int>(parts), [](void* c, int p) {
    const auto& k = *static_cast<Ctx*>(c);
    const int64_t b0 = k.n * p / k.parts, b1 = k.n * (p + 1) / k.parts;
    (*k.f)(b0, b1);
  }, &ctx);
}

}  // namespace kernel_pool
