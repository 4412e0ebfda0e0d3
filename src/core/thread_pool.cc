// The pool's waits spin briefly, then sleep on a futex (Linux; std::atomic::wait elsewhere).
// Memory order: a job's fields are written before the threads' ranges are stored (release) and read
// only after a successful claim (acquire). Every sleeper counts itself in a `sleepers` counter
// before its last look at the word it sleeps on, and every waker changes the word before it reads
// the counter, all seq_cst: so either the sleeper sees the change or the waker sees the sleeper.
#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <climits>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace kiln {
namespace {

thread_local bool t_in_pool_task = false;

// How long a waiter spins before it sleeps: long enough to span the gap between two short ops
// (tens of microseconds), short enough that an idle pool sleeps at once to a human.
constexpr int64_t kSpinNs = 60'000;
constexpr int64_t kPauseOnlyNs = 5'000;        // the first part of the spin, without yielding
constexpr int64_t kContendedYieldNs = 20'000;  // a yield this long: another thread wants the core
// Chunks a loop is cut into per thread, at most: claimed guided (run_chunks), most of them only
// at the end. With 4, the caller of mobilenet_v2's 55 loops a run waited 0.18-0.25 ms at their
// ends for the worker's last chunk; with 64, 0.13-0.15 ms (measured with one shared counter).
constexpr int64_t kChunksPerThread = 64;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(_M_X64)
  _mm_pause();
#endif
}

void futex_wait(const std::atomic<uint32_t>& word, uint32_t seen) {
#if defined(__linux__)
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(&word), FUTEX_WAIT_PRIVATE, seen, nullptr,
          nullptr, 0);
#else
  word.wait(seen);
#endif
}

void futex_wake(std::atomic<uint32_t>& word, int count) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, count, nullptr,
          nullptr, 0);
#else
  (void)count;
  word.notify_all();
#endif
}

constexpr uint64_t pack(uint32_t gen, uint64_t begin, uint64_t end) {
  return (uint64_t{gen} << 32) | (begin << 16) | end;
}

}  // namespace

int ThreadPool::default_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

std::shared_ptr<ThreadPool> ThreadPool::shared() {
  static const std::shared_ptr<ThreadPool> pool = std::make_shared<ThreadPool>(0);
  return pool;
}

std::shared_ptr<ThreadPool> ThreadPool::with_threads(int threads) {
  return threads <= 0 || threads == default_threads() ? shared()
                                                      : std::make_shared<ThreadPool>(threads);
}

namespace {
std::atomic<uint64_t> g_next_pool_id{1};
}

ThreadPool::ThreadPool(int threads) : id_(g_next_pool_id.fetch_add(1)) {
  if (threads <= 0) threads = default_threads();
  // Spinning only pays when every thread can have a core of its own.
  spin_ns_ = threads <= default_threads() ? kSpinNs : 0;
  ranges_ = std::make_unique<Range[]>(static_cast<size_t>(threads));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  job_seq_.fetch_add(1);
  futex_wake(job_seq_, INT_MAX);
  for (auto& t : workers_) t.join();
}

void ThreadPool::wait_for_change(const std::atomic<uint32_t>& word, uint32_t seen,
                                 std::atomic<int>& sleepers) {
  if (spin_ns_ > 0) {
    // After the first few microseconds the spin yields between looks: a thread woken onto this
    // core (the caller, when the scheduler put this worker on the caller's core) gets it back
    // at once instead of after the whole spin. A yield that gave the core away for a while
    // means the core is wanted: then sleep at once, as a thread that spins loses its place in
    // the scheduler's queue to the ones that sleep.
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    for (int i = 1;; ++i) {
      if (word.load(std::memory_order_acquire) != seen) return;
      if (i % 64 != 0) {
        cpu_relax();
        continue;
      }
      const auto now = Clock::now();
      if (now - t0 > std::chrono::nanoseconds(spin_ns_)) break;
      if (now - t0 < std::chrono::nanoseconds(kPauseOnlyNs)) continue;
      std::this_thread::yield();
      if (Clock::now() - now > std::chrono::nanoseconds(kContendedYieldNs)) break;
    }
  }
  for (;;) {
    sleepers.fetch_add(1);
    if (word.load() == seen) futex_wait(word, seen);
    sleepers.fetch_sub(1);
    if (word.load(std::memory_order_acquire) != seen) return;
  }
}

void ThreadPool::wake(std::atomic<uint32_t>& word, std::atomic<int>& sleepers, int count) {
  if (sleepers.load() > 0) futex_wake(word, count);
}

bool ThreadPool::claim(std::atomic<uint64_t>& range, uint32_t gen, bool from_front, int64_t& first,
                       int64_t& count) {
  uint64_t w = range.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t begin = (w >> 16) & 0xffff, end = w & 0xffff;
    if (static_cast<uint32_t>(w >> 32) != gen || begin >= end) return false;
    // Guided: half of what is left, so claims are few while much is left and single chunks at
    // the end, where they even out the threads' finishing times.
    const uint64_t take = std::max<uint64_t>(1, (end - begin) / 2);
    const uint64_t claimed = from_front ? w + (take << 16) : w - take;
    if (range.compare_exchange_weak(w, claimed, std::memory_order_acq_rel,
                                    std::memory_order_acquire)) {
      first = static_cast<int64_t>(from_front ? begin : end - take);
      count = static_cast<int64_t>(take);
      return true;
    }
  }
}

void ThreadPool::run_chunks(int self, uint32_t gen) {
  const int n_threads = threads();
  int64_t finished = 0, first = 0, count = 0;
  uint32_t target = 0;
  // Own share first, from its front; then the others' from their backs, so that a thread keeps
  // to the same part of every loop (and of the data the last loop wrote) unless it runs ahead.
  for (int k = 0; k < n_threads; ++k) {
    std::atomic<uint64_t>& range = ranges_[(self + k) % n_threads].word;
    while (claim(range, gen, k == 0, first, count)) {
      // Chunks [first, first + count) of job `gen` are ours and unfinished: the job's fields stay.
      const int64_t begin = first * chunk_;
      (*fn_)(begin, std::min(n_, begin + count * chunk_));
      finished += count;
      target = done_target_;  // read while the job is unfinished: it may be the next job's after
    }
  }
  if (finished > 0 && done_.fetch_add(static_cast<uint32_t>(finished)) + static_cast<uint32_t>(finished) == target)
    wake(done_, caller_sleeping_, 1);
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_chunks =
      std::min<int64_t>({(n + grain - 1) / grain, int64_t{threads()} * kChunksPerThread, 0xffff});
  // Nested calls, and calls while another thread owns the workers, run inline.
  if (workers_.empty() || max_chunks <= 1 || t_in_pool_task ||
      busy_.exchange(true, std::memory_order_acquire)) {
    fn(0, n);
    return;
  }
  chunk_ = (n + max_chunks - 1) / max_chunks;
  const uint32_t chunks = static_cast<uint32_t>((n + chunk_ - 1) / chunk_);
  fn_ = &fn;
  n_ = n;
  // done_ as the last job left it (all of its chunks counted: its caller waited for that).
  const uint32_t target = done_base_ + chunks;
  done_target_ = target;
  const uint32_t gen = ++gen_;
  // Thread t's share is the t-th of T equal parts, the same part of every loop.
  const uint64_t t_count = static_cast<uint64_t>(threads());
  for (uint64_t t = 0; t < t_count; ++t)
    ranges_[t].word.store(pack(gen, chunks * t / t_count, chunks * (t + 1) / t_count),
                          std::memory_order_release);
  job_seq_.fetch_add(1);
  wake(job_seq_, workers_sleeping_, static_cast<int>(chunks) - 1);
  t_in_pool_task = true;
  run_chunks(0, gen);
  t_in_pool_task = false;
  for (uint32_t d = done_.load(std::memory_order_acquire); d != target;
       d = done_.load(std::memory_order_acquire))
    wait_for_change(done_, d, caller_sleeping_);
  done_base_ = target;
  busy_.store(false, std::memory_order_release);
}

bool ThreadPool::on_every_thread(FunctionRef<void()> fn) {
  const int64_t n = threads();
  std::atomic<int64_t> started{0};
  bool everywhere = true;  // written only by the inline case, which runs alone
  // n chunks of one: parallel_for splits n items of grain 1 into n chunks, one in each thread's
  // share.
  parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    fn();
    if (end - begin > 1) {  // run inline, all chunks on this thread
      everywhere = false;
      return;
    }
    // Held until every chunk is taken, so that no thread takes two: each of the n threads runs
    // exactly one.
    started.fetch_add(1);
    while (started.load(std::memory_order_acquire) < n) {
      cpu_relax();
      std::this_thread::yield();
    }
  });
  return everywhere;
}

void ThreadPool::worker_loop(int self) {
  // Not job_seq_'s value now: a job, or the destructor, may have bumped it before this thread ran.
  uint32_t seen = 0;
  for (;;) {
    wait_for_change(job_seq_, seen, workers_sleeping_);
    seen = job_seq_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    t_in_pool_task = true;
    run_chunks(self,
               static_cast<uint32_t>(ranges_[self].word.load(std::memory_order_acquire) >> 32));
    t_in_pool_task = false;
  }
}

}  // namespace kiln
