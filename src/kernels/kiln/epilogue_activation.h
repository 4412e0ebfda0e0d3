// The activation and residual tail shared by the ai.kiln epilogue kernels (FusedConv, FusedGemm,
// FusedMatMul, SqueezeExcite): reading the activation attributes and applying them with the fast
// GEMM's write-out (gemm_epilogue: float on 8 lanes, as the activation ops' fast paths compute),
// after the product or inside it. Semantics: docs/ops.md.
#pragma once

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/gemm/epilogue.h"
#include "kernels/kernel.h"

namespace kiln::kiln_ops {

struct Activation {
  enum class Kind {
    kNone,
    kRelu,
    kClip,
    kLeakyRelu,
    kSigmoid,
    kHardSigmoid,
    kHardSwish,
    kSilu,
    kGelu,
    kGeluTanh,
    kTanh
  };
  Kind kind = Kind::kNone;
  double p0 = 0, p1 = 0;
  // A clamp of the activation's result: a Clip the fusion absorbed after it (tf2onnx's
  // Max(LeakyRelu(x), -0.4)); [-inf, inf] when there is none.
  double lo = -HUGE_VAL, hi = HUGE_VAL;

  bool clamped() const { return lo > -HUGE_VAL || hi < HUGE_VAL; }

  static double sigmoid(double x) {
    if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
    const double e = std::exp(x);
    return e / (1.0 + e);
  }

  double operator()(double x) const { return std::min(std::max(unclamped(x), lo), hi); }

  double unclamped(double x) const {
    switch (kind) {
      case Kind::kNone:
        return x;
      case Kind::kRelu:
        return x > 0 ? x : 0.0;
      case Kind::kClip:
        return std::min(std::max(x, p0), p1);
      case Kind::kLeakyRelu:
        return x >= 0 ? x : p0 * x;
      case Kind::kSigmoid:
        return sigmoid(x);
      case Kind::kHardSigmoid:
        return std::max(0.0, std::min(1.0, p0 * x + p1));
      case Kind::kHardSwish:
        return x * std::max(0.0, std::min(1.0, x / 6.0 + 0.5));
      case Kind::kSilu:
        return x * sigmoid(x);
      case Kind::kGelu:
        return 0.5 * x * (1.0 + std::erf(x / M_SQRT2));
      case Kind::kGeluTanh: {
        const double k = std::sqrt(2.0 / M_PI);
        return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
      }
      case Kind::kTanh:
        return std::tanh(x);
    }
    return x;
  }
};

// The activation named by attribute `name_attr` (absent or "": none) with its parameters, and
// the clamp after it from the floats attribute `<name_attr>_clip` ([lo, hi]; absent: none).
inline Result<Activation> read_activation(const ir::Node& node, const char* name_attr,
                                          const char* params_attr) {
  using K = Activation::Kind;
  struct Known {
    const char* name;
    K kind;
    size_t params;
  };
  static const Known kKnown[] = {{"Relu", K::kRelu, 0},
                                 {"Clip", K::kClip, 2},
                                 {"LeakyRelu", K::kLeakyRelu, 1},
                                 {"Sigmoid", K::kSigmoid, 0},
                                 {"HardSigmoid", K::kHardSigmoid, 2},
                                 {"HardSwish", K::kHardSwish, 0},
                                 {"Silu", K::kSilu, 0},
                                 {"Gelu", K::kGelu, 0},
                                 {"GeluTanh", K::kGeluTanh, 0},
                                 {"Tanh", K::kTanh, 0}};
  const std::string name = node.attr_string(name_attr, "");
  const std::vector<float> params = node.attr_floats(params_attr);
  const std::string clip_attr = std::string(name_attr) + "_clip";
  const std::vector<float> clip = node.attr_floats(clip_attr);
  if (name.empty()) {
    if (!params.empty() || !clip.empty())
      return Status::error(std::string(params.empty() ? clip_attr : params_attr) +
                           " given without " + name_attr);
    return Activation{};
  }
  if (!clip.empty() && (clip.size() != 2 || !(clip[0] <= clip[1])))
    return Status::error(clip_attr + " must be two bounds [lo, hi] with lo <= hi");
  for (const Known& k : kKnown) {
    if (name != k.name) continue;
    if (params.size() != k.params)
      return Status::error(std::string(params_attr) + " of " + name + " must have " +
                           std::to_string(k.params) + " values, got " +
                           std::to_string(params.size()));
    Activation a;
    a.kind = k.kind;
    if (!params.empty()) a.p0 = params[0];
    if (params.size() > 1) a.p1 = params[1];
    if (!clip.empty()) a.lo = clip[0], a.hi = clip[1];
    return a;
  }
  return Status::error(std::string("unknown ") + name_attr + " '" + name + "'");
}

// `act` as the fast GEMM's fused tail (computed there in float, to a few ulp), with no residual.
inline gemm::Epilogue gemm_epilogue(const Activation& act) {
  using K = Activation::Kind;
  using G = gemm::Epilogue::Activation;
  gemm::Epilogue e;
  switch (act.kind) {
    case K::kNone: e.activation = G::kNone; break;
    case K::kRelu: e.activation = G::kRelu; break;
    case K::kClip: e.activation = G::kClip; break;
    case K::kLeakyRelu: e.activation = G::kLeakyRelu; break;
    case K::kSigmoid: e.activation = G::kSigmoid; break;
    case K::kHardSigmoid: e.activation = G::kHardSigmoid; break;
    case K::kHardSwish: e.activation = G::kHardSwish; break;
    case K::kSilu: e.activation = G::kSilu; break;
    case K::kGelu: e.activation = G::kGelu; break;
    case K::kGeluTanh: e.activation = G::kGeluTanh; break;
    case K::kTanh: e.activation = G::kTanh; break;
  }
  e.p0 = static_cast<float>(act.p0);
  e.p1 = static_cast<float>(act.p1);
  e.lo = static_cast<float>(act.lo);
  e.hi = static_cast<float>(act.hi);
  return e;
}

// The node's epilogue attributes and residual (input z_index, which must be float32 of the
// result's shape y_shape when given) as the fast GEMM's tail, the residual read as one row.
inline Result<gemm::Epilogue> read_epilogue(KernelContext& ctx, const Shape& y_shape, size_t z_index) {
  auto act = read_activation(ctx.node, "activation", "activation_params");
  if (!act) return ctx.error(act.status().message());
  gemm::Epilogue e = gemm_epilogue(*act);
  if (ctx.has_input(z_index) && ctx.input(z_index).defined()) {
    const Tensor& z = ctx.input(z_index);
    if (z.dtype() != DType::kFloat32 || z.shape() != y_shape)
      return ctx.error("residual input must be float32 of the result's shape " +
                       shape_str(y_shape) + ", got " + shape_str(z.shape()));
    e.residual = z.data<float>();
    e.ld_residual = z.numel();
    e.residual_first = ctx.node.attr_int("residual_before_activation", 0) != 0;
  }
  return e;
}

// The tail of FusedConv/FusedGemm/FusedMatMul on the float32 result `y` (bias already added):
// y = act(y + z) when residual_before_activation is 1, else act(y) + z; z is input z_index when
// given and must have y's shape. Over the pool, 8 lanes at a time (a scalar loop in double took
// 4 ms of a 1-channel 640 x 640 segmentation head's sigmoid).
inline Status apply_epilogue(KernelContext& ctx, Tensor& y, size_t z_index) {
  KILN_ASSIGN_OR_RETURN(const gemm::Epilogue e, read_epilogue(ctx, y.shape(), z_index));
  const int64_t n = y.numel();
  if (e.empty() || n == 0) return Status::ok();
  constexpr int64_t kChunk = 16384;
  float* yd = y.data<float>();
  auto run = [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t j0 = c * kChunk;
      gemm::apply_epilogue(e, yd + j0, n, 0, j0, 1, std::min(kChunk, n - j0));
    }
  };
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  if (ctx.pool && chunks > 1) ctx.pool->parallel_for(chunks, 1, run);
  else run(0, chunks);
  return Status::ok();
}

// Runs the registered reference kernel of a standard ONNX op (Conv, Gemm, MatMul) on `inputs`
// with the fused node's attributes, so the fused op computes exactly what the op it replaced did.
class StandardOp {
 public:
  static Result<StandardOp> create(const char* op_type, const ir::Node& node) {
    const KernelDef* def = nullptr;
    for (const KernelDef* d : KernelRegistry::global().find("", op_type))
      if (d->name == "ref" && !def) def = d;
    if (!def) return Status::error(std::string("no reference kernel for ") + op_type);
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> k, def->create(node, kOpset));
    StandardOp op;
    op.kernel_ = std::shared_ptr<Kernel>(std::move(k));
    return op;
  }

  // Output 0 of the op, run on the given inputs (nullptr: omitted). The inner op writes into this
  // op's own output list, kept across runs so that a run allocates nothing; so one StandardOp runs
  // one request at a time, as its kernel does.
  Result<Tensor> run(KernelContext& ctx, std::initializer_list<const Value*> inputs) {
    KernelContext inner(ctx.node, kOpset, inputs.begin(), inputs.size(), outputs_, ctx.pool,
                        nullptr);
    inner.outputs.resize(1);
    KILN_RETURN_IF_ERROR(kernel_->run(inner));
    if (inner.outputs.empty() || !inner.outputs[0].is_tensor() ||
        !inner.outputs[0].tensor.defined())
      return ctx.error("the inner op produced no tensor");
    Tensor y = std::move(inner.outputs[0].tensor);
    inner.outputs[0] = Value();  // holds no tensor between runs
    return y;
  }

 private:
  static constexpr int64_t kOpset = 21;
  std::shared_ptr<Kernel> kernel_;
  std::vector<Value> outputs_;
};

}  // namespace kiln::kiln_ops
