// Chunks are claimed from a shared counter so uneven work balances across threads.
#include "core/thread_pool.h"

#include <algorithm>

namespace kiln {
namespace {
thread_local bool t_in_pool_task = false;
}

int ThreadPool::default_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = default_threads();
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_chunks = std::min<int64_t>((n + grain - 1) / grain, threads() * 4);
  if (workers_.empty() || max_chunks <= 1 || t_in_pool_task) {
    fn(0, n);
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  job_ = &fn;
  job_n_ = n;
  job_chunk_ = (n + max_chunks - 1) / max_chunks;
  job_chunks_ = (n + job_chunk_ - 1) / job_chunk_;
  next_chunk_ = 0;
  chunks_done_ = 0;
  ++generation_;
  lock.unlock();
  wake_.notify_all();
  t_in_pool_task = true;
  for (;;) {
    lock.lock();
    if (next_chunk_ >= job_chunks_) break;
    int64_t c = next_chunk_++;
    lock.unlock();
    fn(c * job_chunk_, std::min(n, (c + 1) * job_chunk_));
    lock.lock();
    ++chunks_done_;
    lock.unlock();
  }
  t_in_pool_task = false;
  done_.wait(lock, [&] { return chunks_done_ == job_chunks_; });
  job_ = nullptr;
}

void ThreadPool::worker_loop(int) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || (generation_ != seen && job_ != nullptr); });
    if (stop_) return;
    seen = generation_;
    t_in_pool_task = true;
    while (job_ && next_chunk_ < job_chunks_) {
      int64_t c = next_chunk_++;
      const auto* fn = job_;
      int64_t n = job_n_, chunk = job_chunk_;
      lock.unlock();
      (*fn)(c * chunk, std::min(n, (c + 1) * chunk));
      lock.lock();
      if (++chunks_done_ == job_chunks_) done_.notify_all();
    }
    t_in_pool_task = false;
  }
}

}  // namespace kiln
