// Thread-local scratch sized before a parallel loop on every thread that may run its chunks.
// A thread_local buffer grows the first time its thread needs it, and which threads run a loop's
// chunks changes from run to run, so that first time could come in any run, not only the first.
// A kernel that keeps such buffers reserves their sizes before the loop with a
// ScratchReservation: the first time a calling thread needs a size on a pool, every thread of the
// pool grows its buffers (ThreadPool::on_every_thread); runs after that allocate nothing,
// whichever threads their chunks land on.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "core/thread_pool.h"

namespace kiln {

// What one calling thread has had a pool's threads reserve for one use site: keep one per site
// and calling thread (`thread_local ScratchReservation<N> r;`). Sizes are in whatever unit the
// site's grow function takes.
template <size_t N>
class ScratchReservation {
 public:
  // Unless every size is within what this reservation already made on `pool`, calls grow(sizes)
  // on every thread of the pool with the largest sizes asked for so far. grow must leave the
  // thread's buffers at least that large. With no pool the loop runs on the calling thread,
  // whose first run sizes them: nothing to do.
  template <typename Grow>
  void ensure(ThreadPool* pool, const std::array<int64_t, N>& sizes, Grow&& grow) {
    if (pool == nullptr) return;
    bool covered = pool->id() == pool_id_;
    for (size_t i = 0; i < N; ++i) covered = covered && sizes[i] <= reserved_[i];
    if (covered) return;
    if (pool->id() != pool_id_) reserved_ = {};
    for (size_t i = 0; i < N; ++i) reserved_[i] = std::max(reserved_[i], sizes[i]);
    const std::array<int64_t, N> want = reserved_;
    // When the workers were taken, only this thread grew: try again next time.
    pool_id_ = pool->on_every_thread([&] { grow(want); }) ? pool->id() : 0;
  }

 private:
  uint64_t pool_id_ = 0;  // ThreadPool::id() of the pool reserved on; 0: none
  std::array<int64_t, N> reserved_{};
};

}  // namespace kiln
