// The host kernels' threads: the caller and helpers take work items from one counter;
// TORCH_PJRT_KERNEL_THREADS threads in all (default: one per core).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kernels {

class Pool {
 public:
  static Pool& get() {
    static Pool* pool = [] {
      const char* e = std::getenv("TORCH_PJRT_KERNEL_THREADS");
      int threads = e && *e ? std::atoi(e) : static_cast<int>(std::thread::hardware_concurrency());
      return new Pool(std::max(threads, 1) - 1);  // leaked: helpers run until the process ends
    }();
    return *pool;
  }

  // fn(i) for every i in [0, n), spread over the threads; returns when all are done. The caller works too
  // and waits only for the helpers that joined the job: one that wakes after every item is taken leaves it
  // alone, so a small job does not wait for a sleeping helper to wake up.
  void run(int64_t n, const std::function<void(int64_t)>& fn) {
    // one job at a time; a forked child has no helpers
    if (helpers_.empty() || n <= 1 || getpid() != pid_) {
      for (int64_t i = 0; i < n; ++i) fn(i);
      return;
    }
    std::lock_guard<std::mutex> one(run_mu_);
    {
      std::lock_guard<std::mutex> g(mu_);
      fn_ = &fn;
      n_ = n;
      next_.store(0);
      ++generation_;
    }
    wake_.notify_all();
    work(fn, n);
    std::unique_lock<std::mutex> g(mu_);
    // every item is taken (work returned): a helper not yet joined finds the job closed
    done_.wait(g, [&] { return joined_ == 0; });
    fn_ = nullptr;
  }

 private:
  explicit Pool(int helpers) : pid_(getpid()) {
    for (int i = 0; i < helpers; ++i) helpers_.emplace_back([this] { loop(); });
    for (auto& t : helpers_) t.detach();
  }
  void work(const std::function<void(int64_t)>& fn, int64_t n) {
    for (int64_t i; (i = next_.fetch_add(1)) < n;) fn(i);
  }
  void loop() {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int64_t)>* fn;
      int64_t n;
      {
        std::unique_lock<std::mutex> g(mu_);
        wake_.wait(g, [&] { return generation_ != seen; });
        seen = generation_;
        if (!fn_ || next_.load() >= n_) continue;  // finished (or being finished) without this helper
        fn = fn_;
        n = n_;
        ++joined_;
      }
      work(*fn, n);
      std::lock_guard<std::mutex> g(mu_);
      if (--joined_ == 0) done_.notify_one();
    }
  }

  const pid_t pid_;
  std::vector<std::thread> helpers_;
  std::mutex run_mu_, mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
  int joined_ = 0;  // helpers inside the current job
  uint64_t generation_ = 0;
};

// fn(i) for i in [0, n): on the kernels' threads, or on this one when the whole call is small (a small
// model's attention or softmax: handing work to a helper and waiting for it would cost more than the work)
template <class F>
void spread(bool small, int64_t n, const F& fn) {
  if (small) {
    for (int64_t i = 0; i < n; ++i) fn(i);
  } else {
    Pool::get().run(n, fn);
  }
}

}  // namespace kernels
