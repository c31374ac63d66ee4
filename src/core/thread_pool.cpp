#include "core/thread_pool.h"

#include <sched.h>

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PAGODA_CPU_RELAX() _mm_pause()
#else
#define PAGODA_CPU_RELAX() ((void)0)
#endif

namespace pagoda {
namespace {

// Busy-waits politely: a few hundred pause instructions (a partner thread on another
// core answers within that), then yields the core each round, so that when the machine
// is oversubscribed the thread we wait for gets to run instead of us spinning through
// its time slice.
class Backoff {
 public:
  void wait() {
    if (++n_ < 256) {
      PAGODA_CPU_RELAX();
    } else {
      sched_yield();
    }
  }

 private:
  int n_ = 0;
};

}  // namespace

int hardware_threads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads > 0 ? n_threads : hardware_threads()) {
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_main(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    // Publishing under the mutex pairs with the sleepers' predicate check, so a worker
    // that is about to sleep cannot miss this generation.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (sleepers_.load(std::memory_order_acquire) > 0) cv_.notify_all();
  fn(0, n_threads_);
  Backoff backoff;
  while (pending_.load(std::memory_order_acquire) != 0) backoff.wait();
  job_ = nullptr;
}

void ThreadPool::worker_main(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin for a while (a decode step issues jobs back to back), then sleep.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    if (gen == seen) {
      const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(2000);
      int iter = 0;
      Backoff backoff;
      while ((gen = generation_.load(std::memory_order_acquire)) == seen) {
        backoff.wait();
        if ((++iter & 255) == 0 && std::chrono::steady_clock::now() > spin_until) break;
      }
      if (gen == seen) {
        std::unique_lock<std::mutex> lock(mu_);
        sleepers_.fetch_add(1, std::memory_order_acq_rel);
        cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        sleepers_.fetch_sub(1, std::memory_order_acq_rel);
        gen = generation_.load(std::memory_order_acquire);
      }
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    (*job_)(index, n_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace pagoda
