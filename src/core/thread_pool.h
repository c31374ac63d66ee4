// A fixed set of worker threads that run one job at a time together with the caller.
// Decode steps issue a few hundred small parallel ops per token, so dispatch must cost
// well under a microsecond: workers spin on a generation counter while jobs keep coming
// and fall back to sleeping on a condition variable when idle.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pagoda {

class ThreadPool {
 public:
  // `n_threads` counts the calling thread; 0 means one per hardware thread.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(thread_index, n_threads) on every thread, the caller as index 0, and returns
  // when all have finished. Not reentrant: fn must not call run() again.
  void run(const std::function<void(int, int)>& fn);

  // Splits [0, n) into chunks of `grain` handed out dynamically (so a slow core does not
  // hold the others back) and calls fn(begin, end) for each chunk.
  template <typename F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (n_threads_ == 1 || n <= grain) {
      fn(int64_t{0}, n);
      return;
    }
    std::atomic<int64_t> next{0};
    run([&](int, int) {
      for (;;) {
        const int64_t b = next.fetch_add(grain, std::memory_order_relaxed);
        if (b >= n) break;
        fn(b, b + grain < n ? b + grain : n);
      }
    });
  }

 private:
  void worker_main(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> sleepers_{0};
  std::mutex mu_;
  std::condition_variable cv_;
};

// Number of hardware threads this process may use (affinity-aware).
int hardware_threads();

}  // namespace pagoda
