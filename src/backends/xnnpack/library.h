// What every XNNPACK kernel needs from the library: one-time initialization, the shared
// pthreadpool for a thread count, an owning operator handle, and XNNPACK status codes turned into
// kiln errors naming the failed call.
#pragma once

#include <pthreadpool.h>
#include <xnnpack.h>

#include <memory>

#include "kernels/kernel.h"

namespace kiln::backends::xnnpack {

inline constexpr const char* kName = "xnnpack";

// Deletes an XNNPACK operator (xnn_delete_operator) when the kernel holding it goes.
struct OperatorDeleter {
  void operator()(xnn_operator_t op) const;
};
using Operator = std::unique_ptr<xnn_operator, OperatorDeleter>;

// xnn_initialize, called once per process (later calls return the first call's outcome).
// Thread-safe.
Status initialize();

// The pthreadpool of `threads` threads, created on first use and kept for the process; null for
// one thread (XNNPACK then runs on the caller). Thread-safe; sessions with the same thread count
// share a pool, and pthreadpool serializes the parallel loops submitted to it, so they take turns.
pthreadpool_t threadpool(int threads);

// The threadpool for the session running `ctx`: as many threads as kiln's pool.
pthreadpool_t threadpool_for(const KernelContext& ctx);

// Ok, or "<call> failed: <status name>" for a non-success XNNPACK status.
Status check(xnn_status status, const char* call);

}  // namespace kiln::backends::xnnpack
