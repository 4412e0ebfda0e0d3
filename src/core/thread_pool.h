// A persistent pool of worker threads for data-parallel loops.
//
// Waiting: idle workers spin for a short while (kSpin, ~60 us) watching for the next job, then
// sleep on a futex, so back-to-back short ops (a transformer layer's dozen kernels) wake them in
// well under a microsecond while an idle pool costs no CPU. The caller waits for the last chunk the
// same way.
//
// Work: a loop is cut into chunks, and thread t (the caller is 0) owns the t-th of T equal shares,
// the same share of every loop, so that a thread mostly reads what it wrote in the loop before
// and claims from a cache line of its own. A thread claims from its own share's front with one
// compare-and-swap, guided (half of what is left, so the last claims are single chunks), then
// from the back of the others' shares until none is left: the threads finish together even when
// one is slowed. On a VM whose vCPUs the host sometimes places apart (a cache line's round trip
// 330 ns instead of 60), mobilenet_v2 ran 10-15% faster this way than with one shared counter.
//
// Thread safety: parallel_for may be called from any number of threads at once. One call at a time
// owns the workers; a call that arrives while another owns them runs its loop inline on its own
// thread (never waits, never deadlocks), as does a nested call from inside a task. So sessions
// that share a pool (ThreadPool::shared(), what sessions use by default) never put more than the
// pool's threads plus one per extra caller on the cores.
// Tasks must not throw.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "core/function_ref.h"

namespace kiln {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // total threads including the caller; <= 0 means all cores
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over [0, n) split into chunks of at least `grain` items; returns when all
  // are done.
  void parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn);

  // Calls fn once on each of the pool's threads, the caller included, and returns true; or, when
  // the workers are taken (another caller's loop, or a call from inside a task), once on the
  // calling thread only, and returns false. For sizing thread-local scratch before a loop whose
  // chunks may land on any thread (core/thread_scratch.h).
  bool on_every_thread(FunctionRef<void()> fn);

  // Unique to this pool for the process's life (never reused, unlike its address).
  uint64_t id() const { return id_; }

  static int default_threads();

  // The process-wide pool of default_threads() threads, created on first use and kept for the
  // process's life; sessions made without an explicit thread count share it.
  static std::shared_ptr<ThreadPool> shared();

  // A pool of `threads` threads: the shared one when that is its count (or `threads` <= 0), else a
  // new one. Sessions asking for one thread a core thus share the same workers: each session
  // with a pool of its own brought its own worker threads, and in a process that alternates
  // sessions (kiln bench --backends, the tuner's whole-model check) the same model's time then
  // varied 5-10% from session to session on this 2-vCPU VM, 1-2% on the shared pool.
  static std::shared_ptr<ThreadPool> with_threads(int threads);

 private:
  void worker_loop(int self);
  // Runs chunks of job `gen` on thread `self` (0: the caller) until none is left to claim.
  void run_chunks(int self, uint32_t gen);
  // Takes chunks of job `gen` off the front or the back of `range`; false when it has none left.
  static bool claim(std::atomic<uint64_t>& range, uint32_t gen, bool from_front, int64_t& first,
                    int64_t& count);
  // Blocks until `word` differs from `seen`: spins up to spin_ns_, then sleeps on it. The waker
  // must call wake() after changing it.
  void wait_for_change(const std::atomic<uint32_t>& word, uint32_t seen,
                       std::atomic<int>& sleepers);
  static void wake(std::atomic<uint32_t>& word, std::atomic<int>& sleepers, int count);

  std::vector<std::thread> workers_;
  const uint64_t id_;
  int64_t spin_ns_ = 0;  // 0 when the pool has more threads than the machine has cores

  // Each value one thread writes and another then reads costs a cache line's trip between cores
  // (50-330 ns on the 2-vCPU VM), a few of them every loop: so what a worker reads when a job
  // starts shares job_seq_'s line, which it watches, and what callers alone write (busy_, gen_)
  // has a line of its own.
  //
  // The job: written by the owning caller before ranges_ are published and job_seq_ bumped,
  // stable until it returns. done_ counts chunks finished over every job (never reset, which
  // would take its line back from the worker that wrote it last): the job is done at done_target_.
  alignas(64) std::atomic<uint32_t> job_seq_{0};  // bumped per job (and at stop): workers' futex
  std::atomic<int> workers_sleeping_{0};
  std::atomic<bool> stop_{false};
  const FunctionRef<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 0;
  uint32_t done_target_ = 0;
  // Each thread's unclaimed chunks of the job: (job generation << 32) | (begin << 16) | end. A
  // claim succeeds only for the current generation, so a late worker can never run a chunk of a
  // finished job. One cache line each: the owner's claims stay on its own core.
  struct alignas(64) Range {
    std::atomic<uint64_t> word{0};
  };
  std::unique_ptr<Range[]> ranges_;
  alignas(64) std::atomic<uint32_t> done_{0};  // chunks finished, over every job
  std::atomic<int> caller_sleeping_{0};
  alignas(64) std::atomic<bool> busy_{false};  // a caller owns the workers
  uint32_t gen_ = 0;        // the owning caller's job counter
  uint32_t done_base_ = 0;  // done_ when the last job finished (read without a trip to done_'s line)
};

}  // namespace kiln
