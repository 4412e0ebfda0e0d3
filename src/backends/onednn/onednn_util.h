// What the oneDNN backend's kernels share (Debian's libdnnl-dev, C++ API): the CPU engine, a
// stream, the thread count, the float32 check of accepts(), dnnl::error as a Status, and
// kiln's epilogue activations as oneDNN eltwise post-ops.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/kernel.h"
#include "kernels/kiln/epilogue_activation.h"

namespace kiln::backends::onednn {

inline constexpr const char* kName = "onednn";

// The one CPU engine of the process; primitives and memories are created on it.
const dnnl::engine& engine();

// A stream on engine() for the calling thread: streams are cheap but not meant to be shared
// between threads running at once.
dnnl::stream& stream();

// Debian builds oneDNN on OpenMP (DNNL_CPU_RUNTIME = OMP), which takes its thread count from the
// calling thread's OpenMP setting, not from kiln's pool: so before each primitive runs, the
// calling thread's count is set to the session's (ctx.pool->threads()). kiln's workers sit idle
// meanwhile and yield their cores (core/thread_pool.cc), as with OpenBLAS.
void set_threads(const KernelContext& ctx);

// A primitive's arguments, by DNNL_ARG_*: memories built once, pointed at each run's data.
using Args = std::unordered_map<int, dnnl::memory>;

// Points argument `arg` at `data` (oneDNN takes non-const handles, also for what it only reads).
// Not called bind: with a std::unordered_map argument, argument-dependent lookup would find
// std::bind, a better match for a float*, and silently call that instead.
void set_arg_data(Args& args, int arg, const float* data);

// Runs `p` on the session's thread count (set_threads) and waits for it.
void execute(const KernelContext& ctx, const dnnl::primitive& p, Args& args);

// Runs `p` on the calling thread alone and waits for it: for the slices kiln's pool runs, so that
// OpenMP starts no threads of its own (they would spin after the call, taking a core from kiln's
// next kernel). `p` must have been created in a SingleThreaded scope.
void execute_on_this_thread(const dnnl::primitive& p, Args& args);

// While it lives, the calling thread's OpenMP count is 1. oneDNN fixes a primitive's thread count
// when the primitive is created, so slices' primitives are created inside one.
class SingleThreaded {
 public:
  SingleThreaded();
  ~SingleThreaded();
  SingleThreaded(const SingleThreaded&) = delete;
  SingleThreaded& operator=(const SingleThreaded&) = delete;

 private:
  int saved_;
};

// `e` (what oneDNN threw) as an error naming the node and what was being done.
Status error_of(const KernelContext& ctx, const char* doing, const dnnl::error& e);

// Appends `act` to `ops` as eltwise post-ops computing it exactly as docs/ops.md defines it (up
// to float rounding); false when oneDNN has no such activation (the node is then declined).
bool append_activation(const kiln_ops::Activation& act, dnnl::post_ops& ops);

// Whether the node's `activation` attribute is one append_activation can express.
bool activation_expressible(const ir::Node& node);

// The dims of a kiln shape as oneDNN's.
dnnl::memory::dims dims_of(const Shape& s);

}  // namespace kiln::backends::onednn
