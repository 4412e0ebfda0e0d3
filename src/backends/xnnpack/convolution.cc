// The XNNPACK 2-D convolution (xnn_*_convolution2d_nhwc_f32) for float32 ONNX Conv and
// ai.kiln.FusedConv in NCHW, with constant weights, group 1 or depthwise. XNNPACK works in NHWC,
// so the kernel transposes the input in and the output back: that cost is part of the kernel's
// time on purpose, so that timing it against kiln's own NCHW kernels compares whole costs. The
// weights are repacked to XNNPACK's [group, out, kh, kw, in] layout and packed by XNNPACK once,
// in prepare(); the ai.kiln epilogue is taken only where it is the output clamp (none, Relu, Clip).
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/xnnpack/library.h"
#include "backends/xnnpack/node_checks.h"
#include "core/thread_pool.h"
#include "kernels/kernel.h"
#include "kernels/ref/conv_util.h"

namespace kiln::backends::xnnpack {
namespace {

// The window of a 2-D convolution, as XNNPACK's create call takes it.
struct Window {
  int64_t kernel[2] = {0, 0}, strides[2] = {1, 1}, dilations[2] = {1, 1};
  int64_t pad_begin[2] = {0, 0}, pad_end[2] = {0, 0};  // [height, width]

  int64_t out(int64_t in, int i) const {
    const int64_t span = in + pad_begin[i] + pad_end[i] - ((kernel[i] - 1) * dilations[i] + 1);
    return span < 0 ? 0 : span / strides[i] + 1;
  }
};

// The window of `node` for weights of spatial size `kernel`. Pads come from the attributes, or for
// auto_pad SAME_* from the kernel alone, which holds only with stride 1 (accepts() checks): other
// strides make SAME's pads depend on the input size, fixed only at run time.
Result<Window> read_window(const ir::Node& node, const Shape& kernel) {
  KILN_ASSIGN_OR_RETURN(conv_util::Geometry g,
                        conv_util::read_geometry(node, /*in=*/Shape{1, 1}, kernel));
  if (g.kernel != kernel)
    return Status::error("kernel_shape " + shape_str(g.kernel) + " does not match the weights' " +
                         shape_str(kernel));
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  if (same && (g.strides[0] != 1 || g.strides[1] != 1))
    return Status::error("auto_pad " + auto_pad + " with strides other than 1");
  if (same)
    g.in = {g.kernel[0] * g.dilations[0], g.kernel[1] * g.dilations[1]};  // any size will do
  KILN_RETURN_IF_ERROR(conv_util::compute_output(g, auto_pad, /*ceil_mode=*/false));
  Window w;
  for (int i = 0; i < 2; ++i) {
    w.kernel[i] = g.kernel[i], w.strides[i] = g.strides[i], w.dilations[i] = g.dilations[i];
    w.pad_begin[i] = g.pads[i], w.pad_end[i] = g.pads[i + 2];
    for (int64_t v : {w.kernel[i], w.strides[i], w.dilations[i], w.pad_begin[i], w.pad_end[i]})
      if (v > std::numeric_limits<uint32_t>::max())
        return Status::error("a window value of " + std::to_string(v) +
                             " is too large for XNNPACK");
  }
  return w;
}

// ONNX weights [M, C/group, kh, kw] into XNNPACK's [group, M/group, kh, kw, C/group]: the group
// index folds into M's, so only the input channel moves innermost.
std::vector<float> to_xnnpack_layout(const Tensor& w) {
  const int64_t m = w.dim(0), cg = w.dim(1), taps = w.dim(2) * w.dim(3);
  const float* src = w.data<float>();
  std::vector<float> dst(static_cast<size_t>(w.numel()));
  for (int64_t o = 0; o < m; ++o)
    for (int64_t c = 0; c < cg; ++c)
      for (int64_t t = 0; t < taps; ++t)
        dst[(o * taps + t) * cg + c] = src[(o * cg + c) * taps + t];
  return dst;
}

// [planes, inner] into [inner, planes] per batch image: NCHW <-> NHWC (planes = C, inner = H*W,
// or the reverse), split over kiln's pool by output rows.
void transpose_images(const float* src, float* dst, int64_t batch, int64_t planes, int64_t inner,
                      ThreadPool* pool) {
  auto rows = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / inner, i = r % inner;
      const float* s = src + b * planes * inner + i;
      float* d = dst + r * planes;
      for (int64_t p = 0; p < planes; ++p) d[p] = s[p * inner];
    }
  };
  if (pool != nullptr && batch * inner * planes >= (1 << 15))
    pool->parallel_for(batch * inner, /*grain=*/64, rows);
  else
    rows(0, batch * inner);
}

// Not reentrant, as the Session running it is not (session.h): the operator (and scratch) binds
// one run's buffers at a time.
class Convolution : public Kernel {
 public:
  Convolution(const ir::Node& node, Clamp clamp) : node_(node), clamp_(clamp) {
    bias_given_ = !is_absent(node, 2);
  }

  // Creates the operator now when W (and B) are fixed initializers; otherwise each run creates it
  // from that run's inputs (correct, but packing every run).
  Status prepare(const std::vector<const Tensor*>& constants,
                 std::vector<bool>& absorbed) override {
    const Tensor* w = constants.size() > 1 ? constants[1] : nullptr;
    const Tensor* b = bias_given_ && constants.size() > 2 ? constants[2] : nullptr;
    if (w == nullptr || (bias_given_ && b == nullptr)) return Status::ok();
    KILN_RETURN_IF_ERROR(create(*w, b));
    absorbed[1] = true;  // XNNPACK keeps its own packed copy of both
    if (b != nullptr) absorbed[2] = true;
    fixed_ = true;
    return Status::ok();
  }

  Status run(KernelContext& ctx) override {
    if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1))
      return ctx.error("needs inputs X and W");
    if (!fixed_) {
      const Status s =
          create(ctx.input(1), bias_given_ && ctx.has_input(2) ? &ctx.input(2) : nullptr);
      if (!s.is_ok()) return ctx.error(s.message());
    }
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kFloat32 || x.rank() != 4)
      return ctx.error("X must be a 4-D float32 tensor, is " + std::string(dtype_name(x.dtype())) +
                       " " + shape_str(x.shape()));
    const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
    if (c != in_channels_)
      return ctx.error("X has " + std::to_string(c) + " channels, the weights take " +
                       std::to_string(in_channels_));
    const int64_t oh = window_.out(h, 0), ow = window_.out(w, 1);
    KILN_ASSIGN_OR_RETURN(
        Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, {n, out_channels_, oh, ow}));
    if (y->numel() == 0) return Status::ok();
    nhwc_in_.resize(static_cast<size_t>(x.numel()));
    nhwc_out_.resize(static_cast<size_t>(y->numel()));
    transpose_images(x.data<float>(), nhwc_in_.data(), n, c, h * w, ctx.pool);
    pthreadpool_t pool = threadpool_for(ctx);
    Status s = check(xnn_setup_convolution2d_nhwc_f32(op_.get(), n, h, w, nhwc_in_.data(),
                                                      nhwc_out_.data(), pool),
                     "xnn_setup_convolution2d_nhwc_f32");
    if (s.is_ok()) s = check(xnn_run_operator(op_.get(), pool), "xnn_run_operator");
    if (!s.is_ok()) return ctx.error(s.message());
    transpose_images(nhwc_out_.data(), y->data<float>(), n, oh * ow, out_channels_, ctx.pool);
    return Status::ok();
  }

 private:
  // Creates the operator from W [M, C/group, kh, kw] and bias B [M] (null when absent).
  Status create(const Tensor& w, const Tensor* b) {
    KILN_RETURN_IF_ERROR(initialize());
    if (w.dtype() != DType::kFloat32 || w.rank() != 4 || w.numel() == 0)
      return Status::error("W must be a non-empty 4-D float32 tensor, is " +
                           std::string(dtype_name(w.dtype())) + " " + shape_str(w.shape()));
    const int64_t group = node_.attr_int("group", 1), m = w.dim(0), cg = w.dim(1);
    if (group < 1 || m % group != 0 || (group != 1 && cg != 1))
      return Status::error("group " + std::to_string(group) + " with weights " +
                           shape_str(w.shape()) + " is neither a dense nor a depthwise conv");
    if (b != nullptr && (b->dtype() != DType::kFloat32 || b->numel() != m))
      return Status::error("B must hold " + std::to_string(m) + " float32 values, is " +
                           shape_str(b->shape()));
    KILN_ASSIGN_OR_RETURN(window_, read_window(node_, {w.dim(2), w.dim(3)}));
    const std::vector<float> packed = to_xnnpack_layout(w);
    const Window& v = window_;
    auto u32 = [](int64_t x) { return static_cast<uint32_t>(x); };
    xnn_operator_t op = nullptr;
    KILN_RETURN_IF_ERROR(
        check(xnn_create_convolution2d_nhwc_f32(
                  u32(v.pad_begin[0]), u32(v.pad_end[1]), u32(v.pad_end[0]), u32(v.pad_begin[1]),
                  u32(v.kernel[0]), u32(v.kernel[1]), u32(v.strides[0]), u32(v.strides[1]),
                  u32(v.dilations[0]), u32(v.dilations[1]), u32(group), cg, m / group,
                  /*input_channel_stride=*/group * cg, /*output_channel_stride=*/m, packed.data(),
                  b ? b->data<float>() : nullptr, clamp_.min, clamp_.max, /*flags=*/0, &op),
              "xnn_create_convolution2d_nhwc_f32"));
    op_.reset(op);
    in_channels_ = group * cg, out_channels_ = m;
    return Status::ok();
  }

  const ir::Node node_;  // a copy: the window is read from it when W is known
  const Clamp clamp_;
  bool bias_given_ = false;
  bool fixed_ = false;  // op_ was created from fixed initializers in prepare()
  Operator op_;
  Window window_;
  int64_t in_channels_ = 0, out_channels_ = 0;
  std::vector<float> nhwc_in_, nhwc_out_;  // kept between runs: steady state allocates nothing
};

// Whether `node` is a conv the operator computes exactly: float32 X of rank 4 and W a 4-D weight
// of static shape, group 1 or depthwise (one input channel per group), a window XNNPACK takes, a
// bias of M values, no residual, and an epilogue XNNPACK's clamp expresses.
bool accepts(const ir::Node& node, const std::vector<const ir::TypeInfo*>& types) {
  if (!is_float32_input(node, types, 0) || !is_float32_input(node, types, 1)) return false;
  if (known_rank(types, 0) != 4 || !is_absent(node, 3) || !epilogue_clamp(node)) return false;
  const auto w = static_shape(types, 1);
  if (!w || w->size() != 4) return false;
  for (int64_t d : *w)
    if (d <= 0) return false;
  const int64_t group = node.attr_int("group", 1);
  if (group < 1 || (*w)[0] % group != 0 || (group != 1 && (*w)[1] != 1)) return false;
  if (!read_window(node, {(*w)[2], (*w)[3]})) return false;
  if (is_absent(node, 2)) return true;
  const auto b = static_shape(types, 2);
  return is_float32_input(node, types, 2) && b && b->size() == 1 && (*b)[0] == (*w)[0];
}

Result<std::unique_ptr<Kernel>> create_kernel(const ir::Node& node, int64_t) {
  const auto clamp = epilogue_clamp(node);
  if (!clamp) return Status::error("the epilogue is not one XNNPACK's output clamp expresses");
  return std::unique_ptr<Kernel>(std::make_unique<Convolution>(node, *clamp));
}

const KernelRegistrar kConv("", "Conv", "xnnpack_convolution", create_kernel, kName, accepts);
const KernelRegistrar kFusedConv("ai.kiln", "FusedConv", "xnnpack_convolution", create_kernel,
                                 kName, accepts);

}  // namespace
}  // namespace kiln::backends::xnnpack
