// XNNPACK's process-wide state: its initialization and the threadpools kernels share.
//
// XNNPACK runs its parallel loops on a pthreadpool, not on kiln's ThreadPool. A second set of
// threads is acceptable because the two never compete for long: while a library kernel runs, kiln's
// workers have no task and yield their cores after a few microseconds (core/thread_pool.cc), as
// they do under oneDNN's OpenMP threads (backends/onednn). One pool per thread count is
// created lazily and kept, so that sessions with the same count share it instead of each spawning
// threads.
#include "backends/xnnpack/library.h"

#include <map>
#include <mutex>
#include <string>

#include "core/thread_pool.h"

namespace kiln::backends::xnnpack {
namespace {

const char* status_name(xnn_status s) {
  switch (s) {
    case xnn_status_success:
      return "success";
    case xnn_status_uninitialized:
      return "uninitialized";
    case xnn_status_invalid_parameter:
      return "invalid parameter";
    case xnn_status_invalid_state:
      return "invalid state";
    case xnn_status_unsupported_parameter:
      return "unsupported parameter";
    case xnn_status_unsupported_hardware:
      return "unsupported hardware";
    case xnn_status_out_of_memory:
      return "out of memory";
  }
  return "unknown status";
}

// Owns the pools for the life of the process; destroyed at exit, after every session.
struct Pools {
  std::mutex mu;
  std::map<int, std::unique_ptr<pthreadpool, void (*)(pthreadpool_t)>> by_threads;
};

}  // namespace

void OperatorDeleter::operator()(xnn_operator_t op) const { xnn_delete_operator(op); }

Status initialize() {
  static const xnn_status status = xnn_initialize(/*allocator=*/nullptr);
  return check(status, "xnn_initialize");
}

pthreadpool_t threadpool(int threads) {
  if (threads <= 1) return nullptr;
  static Pools pools;
  std::lock_guard<std::mutex> lock(pools.mu);
  auto it = pools.by_threads.find(threads);
  if (it == pools.by_threads.end())
    it = pools.by_threads
             .emplace(threads,
                      std::unique_ptr<pthreadpool, void (*)(pthreadpool_t)>(
                          pthreadpool_create(static_cast<size_t>(threads)), pthreadpool_destroy))
             .first;
  return it->second.get();  // null if creation failed: XNNPACK then runs on the caller
}

pthreadpool_t threadpool_for(const KernelContext& ctx) {
  return threadpool(ctx.pool ? ctx.pool->threads() : 1);
}

Status check(xnn_status status, const char* call) {
  if (status == xnn_status_success) return Status::ok();
  return Status::error(std::string(call) + " failed: " + status_name(status));
}

}  // namespace kiln::backends::xnnpack
