// A persistent worker pool and `parallel_for` over a batch.
//
// * The calling thread always takes part, so `num_threads() == 1` means "no workers".
// * Work smaller than two grains runs inline on the caller: small batches never pay for a
//   wake-up.
// * Calls from several threads at once are safe: only one job uses the workers at a time;
//   a caller that finds them busy runs its whole range inline instead of waiting.
// * After fork() the child gets a fresh, empty pool (the parent's threads do not exist
//   there); workers are started again lazily.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#endif

namespace rlblocks {

class ThreadPool {
 public:
  using RangeFn = std::function<void(std::int64_t, std::int64_t)>;

  static ThreadPool& instance() {
    static ThreadPool* pool = [] {
      auto* p = new ThreadPool();  // never destroyed: workers may outlive static dtors
#if defined(__unix__) || defined(__APPLE__)
      pthread_atfork(nullptr, nullptr, [] { ThreadPool::instance().after_fork_in_child(); });
#endif
      return p;
    }();
    return *pool;
  }

  int num_threads() const { return requested_.load(std::memory_order_relaxed); }

  void set_num_threads(int n) {
    if (n < 1) n = 1;
    std::lock_guard<std::mutex> dispatch(state_->dispatch);
    requested_.store(n, std::memory_order_relaxed);
    stop_workers(*state_);
  }

  // Calls fn(begin, end) on disjoint chunks covering [0, n). Chunks hold at least `grain`
  // items. fn must not throw for valid input; if it does, the first exception is rethrown
  // here after all chunks finished.
  void parallel_for(std::int64_t n, std::int64_t grain, const RangeFn& fn) {
    if (n <= 0) return;
    grain = std::max<std::int64_t>(grain, 1);
    const std::int64_t max_tasks = std::min<std::int64_t>(num_threads(), n / grain);
    if (max_tasks <= 1) {
      fn(0, n);
      return;
    }
    State& st = *state_;
    std::unique_lock<std::mutex> dispatch(st.dispatch, std::try_to_lock);
    if (!dispatch.owns_lock()) {  // another caller holds the workers: do it ourselves
      fn(0, n);
      return;
    }
    ensure_workers(st, static_cast<int>(max_tasks) - 1);
    {
      std::lock_guard<std::mutex> lk(st.mu);
      st.fn = &fn;
      st.n = n;
      st.num_tasks = max_tasks;
      st.error = nullptr;
      st.pending.store(max_tasks - 1, std::memory_order_relaxed);
      // Published last: a worker that claims a task through next_task sees the job above.
      st.next_task.store(1, std::memory_order_release);  // task 0 is the caller's
      ++st.generation;
    }
    st.wake.notify_all();
    run_task(st, 0);
    for (;;) {  // help with unclaimed tasks, then wait for the rest
      const std::int64_t t = st.next_task.fetch_add(1, std::memory_order_acq_rel);
      if (t >= max_tasks) break;
      run_task(st, t);
      st.pending.fetch_sub(1, std::memory_order_acq_rel);
    }
    {
      std::unique_lock<std::mutex> lk(st.mu);
      st.done.wait(lk, [&] { return st.pending.load(std::memory_order_acquire) == 0; });
      st.fn = nullptr;
    }
    if (st.error) std::rethrow_exception(st.error);
  }

 private:
  struct State {
    std::mutex dispatch;  // one job at a time
    std::mutex mu;
    std::condition_variable wake, done;
    std::vector<std::thread> workers;
    const RangeFn* fn = nullptr;
    std::int64_t n = 0, num_tasks = 0;
    std::atomic<std::int64_t> next_task{0}, pending{0};
    std::uint64_t generation = 0;
    bool stopping = false;
    std::exception_ptr error;
  };

  ThreadPool() : requested_(static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))), state_(new State()) {}

  static void run_task(State& st, std::int64_t t) {
    const std::int64_t begin = st.n * t / st.num_tasks;
    const std::int64_t end = st.n * (t + 1) / st.num_tasks;
    try {
      (*st.fn)(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lk(st.mu);
      if (!st.error) st.error = std::current_exception();
    }
  }

  static void worker_loop(State* st) {
    std::uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(st->mu);
        st->wake.wait(lk, [&] { return st->stopping || st->generation != seen; });
        if (st->stopping) return;
        seen = st->generation;
      }
      for (;;) {
        const std::int64_t t = st->next_task.fetch_add(1, std::memory_order_acq_rel);
        if (t >= st->num_tasks) break;
        run_task(*st, t);
        if (st->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
          std::lock_guard<std::mutex> lk(st->mu);
          st->done.notify_all();
        }
      }
    }
  }

  // Requires st.dispatch held.
  void ensure_workers(State& st, int wanted) {
    const int limit = num_threads() - 1;
    wanted = std::min(wanted, limit);
    while (static_cast<int>(st.workers.size()) < wanted) {
      st.workers.emplace_back(worker_loop, &st);
    }
  }

  // Requires st.dispatch held.
  static void stop_workers(State& st) {
    {
      std::lock_guard<std::mutex> lk(st.mu);
      st.stopping = true;
    }
    st.wake.notify_all();
    for (auto& w : st.workers) w.join();
    st.workers.clear();
    std::lock_guard<std::mutex> lk(st.mu);
    st.stopping = false;
  }

  void after_fork_in_child() {
    // The old state's threads and lock owners are gone in this process: leak it.
    state_ = new State();
  }

  std::atomic<int> requested_;
  State* state_;
};

inline void parallel_for(std::int64_t n, std::int64_t grain, const ThreadPool::RangeFn& fn) {
  ThreadPool::instance().parallel_for(n, grain, fn);
}

// Items per chunk so that each chunk moves at least `min_bytes` (keeps wake-ups worth it).
inline std::int64_t grain_for_bytes(std::int64_t bytes_per_item, std::int64_t min_bytes = 256 * 1024) {
  return std::max<std::int64_t>(1, min_bytes / std::max<std::int64_t>(1, bytes_per_item));
}

}  // namespace rlblocks
