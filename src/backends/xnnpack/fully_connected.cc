// The XNNPACK fully connected operator (xnn_*_fully_connected_nc_f32) for float32 MatMul, Gemm,
// ai.kiln.FusedGemm and ai.kiln.FusedMatMul whose weight B is a 2-D initializer. XNNPACK packs the
// weights (and bias) when the operator is created, so that happens once, in prepare(); a run only
// binds the rows of A (its leading dims flattened) and the output. Gemm's alpha and beta are folded
// into the packed weights and bias; the ai.kiln epilogue is taken only where it is XNNPACK's
// output clamp (none, Relu, Clip). Semantics: docs/ops.md.
//
// The product is cut by output columns into one operator a core (each packs only its columns of
// B, so the weights are not duplicated), which kiln's pool runs single-threaded: XNNPACK's
// pthreadpool is not used, whose threads spin for milliseconds after each call and took a core
// from kiln's next kernel.
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/xnnpack/library.h"
#include "backends/xnnpack/node_checks.h"
#include "core/thread_pool.h"
#include "kernels/kernel.h"

namespace kiln::backends::xnnpack {
namespace {

constexpr size_t kNoInput = static_cast<size_t>(-1);

// How a node's operands map onto XNNPACK's y = clamp(x W + bias): the differences between the four
// ops, read once from the node.
struct FcSpec {
  bool gemm = false;     // Gemm / FusedGemm: A is exactly 2-D, the bias broadcasts along rows
  bool trans_b = false;  // B is [N, K] (Gemm's transB) rather than [K, N]
  float alpha = 1.0f, beta = 1.0f;
  size_t bias = kNoInput;  // the bias input's index, when the node gives one
  Clamp clamp;
};

FcSpec read_spec(const ir::Node& node, const Clamp& clamp) {
  FcSpec s;
  s.clamp = clamp;
  s.gemm = node.op_type == "Gemm" || node.op_type == "FusedGemm";
  if (s.gemm) {
    s.trans_b = node.attr_int("transB", 0) != 0;
    s.alpha = node.attr_float("alpha", 1.0f);
    s.beta = node.attr_float("beta", 1.0f);
  }
  if (node.op_type != "MatMul" && !is_absent(node, 2)) s.bias = 2;
  return s;
}

// Whether a Gemm bias of `shape` is one value per output column (or one for all): the broadcasts
// XNNPACK's per-channel bias can express. A per-row C ([M, 1], [M, N]) is not.
bool is_row_bias(const Shape& shape, int64_t n) {
  if (shape.size() > 2) return false;
  for (size_t i = 0; i + 1 < shape.size(); ++i)
    if (shape[i] != 1) return false;
  return shape.empty() || shape.back() == 1 || shape.back() == n;
}

// N bias values from the bias tensor, scaled by beta (1 for FusedMatMul), or an error.
Result<std::vector<float>> bias_values(const FcSpec& spec, const Tensor& c, int64_t n) {
  if (c.dtype() != DType::kFloat32) return Status::error("the bias must be float32");
  const bool fits = spec.gemm ? is_row_bias(c.shape(), n) : c.numel() == n;
  if (!fits || (c.numel() != 1 && c.numel() != n))
    return Status::error("a bias of shape " + shape_str(c.shape()) + " is not " +
                         std::to_string(n) + " per-column values");
  std::vector<float> out(static_cast<size_t>(n));
  const float* cd = c.data<float>();
  for (int64_t j = 0; j < n; ++j) out[j] = spec.beta * cd[c.numel() == 1 ? 0 : j];
  return out;
}

// Not reentrant, as the Session running it is not (session.h): the operators bind one run's
// buffers at a time.
class FullyConnected : public Kernel {
 public:
  explicit FullyConnected(FcSpec spec) : spec_(spec) {}

  // Creates the operator now when B (and the bias) are fixed initializers; otherwise each run
  // creates it from that run's inputs (correct, but packing every run).
  Status prepare(const std::vector<const Tensor*>& constants,
                 std::vector<bool>& absorbed) override {
    const Tensor* b = constants.size() > 1 ? constants[1] : nullptr;
    const Tensor* c = spec_.bias < constants.size() ? constants[spec_.bias] : nullptr;
    if (b == nullptr || (spec_.bias != kNoInput && c == nullptr)) return Status::ok();
    KILN_RETURN_IF_ERROR(create(*b, c));
    absorbed[1] = true;  // XNNPACK keeps its own packed copy of both
    if (c != nullptr) absorbed[spec_.bias] = true;
    fixed_ = true;
    return Status::ok();
  }

  Status run(KernelContext& ctx) override {
    if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1))
      return ctx.error("needs inputs A and B");
    if (!fixed_) {
      const bool has_c =
          spec_.bias != kNoInput && ctx.has_input(spec_.bias) && ctx.input(spec_.bias).defined();
      const Status s = create(ctx.input(1), has_c ? &ctx.input(spec_.bias) : nullptr);
      if (!s.is_ok()) return ctx.error(s.message());
    }
    const Tensor& a = ctx.input(0);
    if (a.dtype() != DType::kFloat32)
      return ctx.error(std::string("A must be float32, is ") + dtype_name(a.dtype()));
    if (a.rank() < 2 || (spec_.gemm && a.rank() != 2))
      return ctx.error("A of shape " + shape_str(a.shape()) +
                       (spec_.gemm ? " is not 2-D" : " has rank below 2"));
    if (a.shape().back() != k_)
      return ctx.error("A of shape " + shape_str(a.shape()) + " does not have " +
                       std::to_string(k_) + " columns, as B needs");
    Shape out_shape(a.shape().begin(), a.shape().end() - 1);
    out_shape.push_back(n_);
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, out_shape));
    const int64_t rows = a.numel() / k_;
    if (rows == 0) return Status::ok();
    // The input and output pointers change every run, so setup cannot be skipped; XNNPACK's
    // setup only records them and the tiling for `rows`.
    std::vector<Status> failed(slices_.size());
    auto run_slice = [&](size_t i) {
      const Slice& slice = slices_[i];
      Status s =
          check(xnn_setup_fully_connected_nc_f32(slice.op.get(), static_cast<size_t>(rows),
                                                 a.data<float>(), y->data<float>() + slice.first,
                                                 /*threadpool=*/nullptr),
                "xnn_setup_fully_connected_nc_f32");
      if (s.is_ok()) s = check(xnn_run_operator(slice.op.get(), nullptr), "xnn_run_operator");
      failed[i] = s;
    };
    run_parts(ctx.pool, static_cast<int64_t>(slices_.size()),
              [&](int64_t i) { run_slice(static_cast<size_t>(i)); });
    for (const Status& s : failed)
      if (!s.is_ok()) return ctx.error(s.message());
    return Status::ok();
  }

 private:
  // Creates the operator from B and the bias C (null when absent), folding in alpha and beta.
  Status create(const Tensor& b, const Tensor* c) {
    KILN_RETURN_IF_ERROR(initialize());
    if (b.dtype() != DType::kFloat32 || b.rank() != 2)
      return Status::error("B must be a 2-D float32 tensor, is " +
                           std::string(dtype_name(b.dtype())) + " " + shape_str(b.shape()));
    const int64_t k = spec_.trans_b ? b.dim(1) : b.dim(0), n = spec_.trans_b ? b.dim(0) : b.dim(1);
    if (k <= 0 || n <= 0) return Status::error("B of shape " + shape_str(b.shape()) + " is empty");
    std::vector<float> scaled;
    const float* w = b.data<float>();
    if (spec_.alpha != 1.0f) {
      scaled.assign(w, w + b.numel());
      for (float& v : scaled) v *= spec_.alpha;
      w = scaled.data();
    }
    std::vector<float> bias;
    if (c != nullptr && spec_.beta != 0.0f) {
      KILN_ASSIGN_OR_RETURN(bias, bias_values(spec_, *c, n));
    }
    // One slice of columns a core, in multiples of 16 (XNNPACK's widest output tile). The
    // session's thread count is not known yet; a session with fewer threads runs them in turn.
    constexpr int64_t kStep = 16;
    const int64_t steps = (n + kStep - 1) / kStep;
    const int64_t count = std::clamp<int64_t>(ThreadPool::default_threads(), 1, steps);
    slices_.clear();
    std::vector<float> columns;  // a slice's columns of a [K, N] B, made contiguous
    for (int64_t i = 0; i < count; ++i) {
      const auto [first, last] = part_range(n, kStep, count, i);
      const float* kernel = w + first * k;  // B [N, K]: the slice's rows
      if (!spec_.trans_b) {
        columns.resize(static_cast<size_t>(k * (last - first)));
        for (int64_t r = 0; r < k; ++r)
          std::copy(w + r * n + first, w + r * n + last, columns.begin() + r * (last - first));
        kernel = columns.data();
      }
      xnn_operator_t op = nullptr;
      KILN_RETURN_IF_ERROR(
          check(xnn_create_fully_connected_nc_f32(
                    static_cast<size_t>(k), static_cast<size_t>(last - first), /*input_stride=*/k,
                    /*output_stride=*/n, kernel, bias.empty() ? nullptr : bias.data() + first,
                    spec_.clamp.min, spec_.clamp.max,
                    spec_.trans_b ? 0 : XNN_FLAG_TRANSPOSE_WEIGHTS, &op),
                "xnn_create_fully_connected_nc_f32"));
      slices_.push_back(Slice{Operator(op), first});
    }
    k_ = k, n_ = n;
    return Status::ok();
  }

  // The operator of output columns [first, first + its output channels).
  struct Slice {
    Operator op;
    int64_t first = 0;
  };

  const FcSpec spec_;
  bool fixed_ = false;  // slices_ were created from fixed initializers in prepare()
  std::vector<Slice> slices_;
  int64_t k_ = 0, n_ = 0;
};

// Whether `node` is one the operator computes exactly: float32 operands of known types, B a 2-D
// weight of static shape, A not transposed, the bias one value per column, no residual input, and
// an epilogue XNNPACK's clamp expresses.
bool accepts(const ir::Node& node, const std::vector<const ir::TypeInfo*>& types) {
  if (!is_float32_input(node, types, 0) || !is_float32_input(node, types, 1)) return false;
  if (!is_absent(node, 3) || !epilogue_clamp(node)) return false;
  const auto b = static_shape(types, 1);
  if (!b || b->size() != 2 || (*b)[0] <= 0 || (*b)[1] <= 0) return false;
  const FcSpec spec = read_spec(node, Clamp{});
  if (spec.gemm && node.attr_int("transA", 0) != 0) return false;
  if (!spec.gemm && known_rank(types, 0) < 2) return false;  // rank 1 A is a vector product
  if (spec.bias == kNoInput) return true;
  const auto c = static_shape(types, spec.bias);
  const int64_t n = spec.trans_b ? (*b)[0] : (*b)[1];
  if (!is_float32_input(node, types, spec.bias) || !c) return false;
  if (spec.gemm) return is_row_bias(*c, n);
  int64_t numel = 1;
  for (int64_t d : *c) numel *= d;
  return numel == n;
}

Result<std::unique_ptr<Kernel>> create_kernel(const ir::Node& node, int64_t) {
  const auto clamp = epilogue_clamp(node);
  if (!clamp) return Status::error("the epilogue is not one XNNPACK's output clamp expresses");
  return std::unique_ptr<Kernel>(std::make_unique<FullyConnected>(read_spec(node, *clamp)));
}

const KernelRegistrar kMatMul("", "MatMul", "xnnpack_fully_connected", create_kernel, kName,
                              accepts);
const KernelRegistrar kGemm("", "Gemm", "xnnpack_fully_connected", create_kernel, kName, accepts);
const KernelRegistrar kFusedGemm("ai.kiln", "FusedGemm", "xnnpack_fully_connected", create_kernel,
                                 kName, accepts);
const KernelRegistrar kFusedMatMul("ai.kiln", "FusedMatMul", "xnnpack_fully_connected",
                                   create_kernel, kName, accepts);

}  // namespace
}  // namespace kiln::backends::xnnpack
