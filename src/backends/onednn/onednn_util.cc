// Shared pieces of the oneDNN backend (onednn_util.h), and the backend's version.
#include "backends/onednn/onednn_util.h"

#include <omp.h>

#include "backends/backend.h"
#include "core/cpu_features.h"
#include "core/thread_pool.h"

namespace kiln::backends::onednn {

namespace {

// oneDNN follows kiln's ISA level (KILN_ISA, --isa): capped before its first primitive, the only
// time it can be.
void cap_isa() {
  const IsaLevel level = cpu_features().level();
  if (level == detected_cpu_features().level()) return;
  (void)dnnl::set_max_cpu_isa(level == IsaLevel::kAvx2      ? dnnl::cpu_isa::avx2
                              : level == IsaLevel::kAvxVnni ? dnnl::cpu_isa::avx2_vnni
                              : level == IsaLevel::kAvx512  ? dnnl::cpu_isa::avx512_core
                                                            : dnnl::cpu_isa::avx512_core_vnni);
}

}  // namespace

const dnnl::engine& engine() {
  static const dnnl::engine e = [] {
    cap_isa();
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

void set_threads(const KernelContext& ctx) {
  const int want = ctx.pool ? ctx.pool->threads() : 1;
  if (omp_get_max_threads() != want) omp_set_num_threads(want);
}

void set_arg_data(Args& args, int arg, const float* data) {
  args.at(arg).set_data_handle(const_cast<float*>(data));
}

void execute(const KernelContext& ctx, const dnnl::primitive& p, Args& args) {
  set_threads(ctx);
  p.execute(stream(), args);
  stream().wait();
}

void execute_on_this_thread(const dnnl::primitive& p, Args& args) {
  // Restored after: primitives created later on this thread get the count they expect.
  const SingleThreaded one_thread;
  p.execute(stream(), args);
  stream().wait();
}

SingleThreaded::SingleThreaded() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
SingleThreaded::~SingleThreaded() { omp_set_num_threads(saved_); }

Status error_of(const KernelContext& ctx, const char* doing, const dnnl::error& e) {
  return ctx.error(std::string("oneDNN failed ") + doing + ": " + e.what());
}

namespace {

bool append_unclamped(const kiln_ops::Activation& act, dnnl::post_ops& ops) {
  using K = kiln_ops::Activation::Kind;
  using A = dnnl::algorithm;
  const float p0 = static_cast<float>(act.p0), p1 = static_cast<float>(act.p1);
  switch (act.kind) {
    case K::kNone:
      return true;
    case K::kRelu:
      ops.append_eltwise(1.0f, A::eltwise_relu, 0.0f, 0.0f);
      return true;
    case K::kLeakyRelu:
      ops.append_eltwise(1.0f, A::eltwise_relu, p0, 0.0f);
      return true;
    // clip is min(max(x, alpha), beta), kiln's Clip with its two bounds.
    case K::kClip:
      ops.append_eltwise(1.0f, A::eltwise_clip, p0, p1);
      return true;
    case K::kSigmoid:
      ops.append_eltwise(1.0f, A::eltwise_logistic, 0.0f, 0.0f);
      return true;
    // oneDNN 2.6 has no hardsigmoid: alpha·x + beta, then clipped to [0, 1].
    case K::kHardSigmoid:
      ops.append_eltwise(1.0f, A::eltwise_linear, p0, p1);
      ops.append_eltwise(1.0f, A::eltwise_clip, 0.0f, 1.0f);
      return true;
    // hardswish is x · relu6(x + 3) / 6 = x · max(0, min(1, x/6 + 1/2)).
    case K::kHardSwish:
      ops.append_eltwise(1.0f, A::eltwise_hardswish, 0.0f, 0.0f);
      return true;
    case K::kSilu:
      ops.append_eltwise(1.0f, A::eltwise_swish, 1.0f, 0.0f);
      return true;
    case K::kGelu:
      ops.append_eltwise(1.0f, A::eltwise_gelu_erf, 0.0f, 0.0f);
      return true;
    case K::kGeluTanh:
      ops.append_eltwise(1.0f, A::eltwise_gelu_tanh, 0.0f, 0.0f);
      return true;
    case K::kTanh:
      ops.append_eltwise(1.0f, A::eltwise_tanh, 0.0f, 0.0f);
      return true;
  }
  return false;
}

}  // namespace

bool append_activation(const kiln_ops::Activation& act, dnnl::post_ops& ops) {
  if (!append_unclamped(act, ops)) return false;
  if (act.clamped())
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, static_cast<float>(act.lo),
                       static_cast<float>(act.hi));
  return true;
}

bool activation_expressible(const ir::Node& node) {
  auto act = kiln_ops::read_activation(node, "activation", "activation_params");
  if (!act) return false;
  dnnl::post_ops ops;
  return append_activation(*act, ops);
}

dnnl::memory::dims dims_of(const Shape& s) { return dnnl::memory::dims(s.begin(), s.end()); }

namespace {

// The library's own report (the loaded libdnnl, not the headers kiln was built with).
std::string version() {
  const dnnl_version_t* v = dnnl::version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + " (" + (v->hash ? v->hash : "") + ")";
}

const VersionRegistrar kVersion(kName, version);

}  // namespace
}  // namespace kiln::backends::onednn
