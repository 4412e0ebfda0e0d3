// Kernel of ai.kiln.BlockedConv: FusedConv's semantics on the blocked NCHWc layout (X blocked,
// or plain with at most 8 channels), weights already reordered by the nchwc-layout pass. Checks
// the operands, then runs one path: Winograd (blocked_conv_winograd*.cc) for the 3x3s it takes at
// prepare, the depthwise kernel, or the dense direct kernel (AVX-512 when the CPU has it, on
// weights paired at prepare; else AVX2; the depthwise kernel likewise). Semantics: docs/ops.md.
#include "kernels/kiln/nchwc/blocked_conv.h"

#include <algorithm>
#include <array>
#include <cstdlib>

#include "core/cpu_features.h"
#include "kernels/kernel_util.h"
#include "kernels/kiln/nchwc/blocked_conv_dense_prep.h"
#include "kernels/kiln/nchwc/blocked_conv_winograd.h"
#include "kernels/kiln/nchwc/blocked_layout.h"
#include "kernels/ref/conv_util.h"

namespace kiln::nchwc {
namespace {

// The dense direct path: the AVX-512 kernel on weights paired once (prepare), or per run when W
// is not a constant; the AVX2 kernel on W itself without AVX-512 (or at KILN_ISA=avx2).
class DenseDirect {
 public:
  DenseDirect() : avx512_(cpu_features().has_avx512()) {}

  // W [Mb, Cb / groups, KH, KW, 8, 8] paired group by group (each group's output blocks are its
  // own). Groups of one output block stay unpaired: a pair would be half zeros, no faster than
  // the AVX2 kernel on the block itself.
  void prepare(const std::vector<const Tensor*>& constants, std::vector<bool>& absorbed, int64_t groups) {
    if (!avx512_ || constants.size() < 2 || constants[1] == nullptr) return;
    const Tensor& w = *constants[1];
    if (w.dtype() != DType::kFloat32 || w.rank() != 6 || w.dim(4) != kBlock || w.dim(5) != kBlock ||
        w.dim(0) % groups != 0 || (groups > 1 && w.dim(0) / groups < 2))
      return;  // not dense weights (run() reports it), or groups of one block
    dims_ = {w.dim(0) / groups, w.dim(1), w.dim(2) * w.dim(3)};
    group_floats_ = paired_weights_floats(dims_[0], dims_[1], dims_[2]);
    float* out = paired_.get(groups * group_floats_);
    const int64_t w_group = dims_[0] * dims_[1] * dims_[2] * kBlock * kBlock;
    for (int64_t g = 0; g < groups; ++g)
      pair_dense_weights(w.data<float>() + g * w_group, dims_[0], dims_[1], dims_[2], out + g * group_floats_);
    paired_ready_ = true;
    absorbed[1] = true;
  }

  // Group g's paired weights (prepare), or null.
  const float* group_paired(int64_t g) const { return paired_ready_ ? paired_.data() + g * group_floats_ : nullptr; }

  // w: W's data, null when prepare absorbed it.
  Status run(const BlockedConvShape& s, const float* x, const float* w, const BlockedEpilogue& e,
             float* y, ThreadPool* pool) const {
    if (!avx512_) {
      blocked_conv_dense_avx2(s, x, w, e, y, pool);
      return Status::ok();
    }
    const float* paired = paired_.data();
    if (!paired_ready_) {
      thread_local AlignedBuffer per_run;
      const int64_t taps = s.kh * s.kw;
      float* p = per_run.get(paired_weights_floats(s.mb, s.cb, taps));
      pair_dense_weights(w, s.mb, s.cb, taps, p);
      paired = p;
    } else if (dims_ != std::array<int64_t, 3>{s.mb, s.cb, s.kh * s.kw}) {
      return Status::error("dense weights prepared for a different convolution");
    }
    blocked_conv_dense_avx512(s, x, paired, e, y, pool);
    return Status::ok();
  }

  bool absorbs() const { return paired_ready_; }
  // Whether the AVX-512 kernels run (the depthwise path follows the same switch).
  bool avx512() const { return avx512_; }

 private:
  bool avx512_ = false, paired_ready_ = false;
  std::array<int64_t, 3> dims_{};  // mb, cb, taps of the paired weights (of one group)
  int64_t group_floats_ = 0;
  AlignedBuffer paired_;
};

class BlockedConv : public Kernel {
 public:
  // avx2_depthwise: a depthwise conv runs the AVX2 kernel even where the AVX-512 one would.
  BlockedConv(kiln_ops::Activation act, const ir::Node& node, bool winograd_allowed, bool avx2_depthwise)
      : act_(act), groups_(node.attr_int("group", 1)), depthwise_(is_depthwise(node)),
        avx2_depthwise_(avx2_depthwise), winograd_(node, winograd_allowed) {}

  static bool is_depthwise(const ir::Node& node) {
    const int64_t groups = node.attr_int("group", 1);
    return groups != 1 && groups == node.attr_int("channels", -1);
  }

  Status prepare(const std::vector<const Tensor*>& constants, std::vector<bool>& absorbed) override {
    KILN_RETURN_IF_ERROR(winograd_.prepare(constants, absorbed));  // the 3x3s it pays for
    if ((!winograd_.ready() || winograd_.keeps_dense()) && !depthwise_) dense_.prepare(constants, absorbed, groups_);
    return Status::ok();
  }

  Status run(KernelContext& ctx) override {
    if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1))
      return ctx.error("BlockedConv needs X and W");
    // X is blocked, or a plain NCHW tensor of at most 8 channels: one block of C lanes.
    const Tensor& xt = ctx.input(0);
    int64_t plain_channels = 0;
    BlockedDims xd;
    if (xt.dtype() == DType::kFloat32 && xt.rank() == 4) {
      plain_channels = xt.dim(1);
      if (plain_channels < 1 || plain_channels > kBlock)
        return ctx.error("a plain NCHW X may have 1 to 8 channels, got " + shape_str(xt.shape()));
      xd = BlockedDims{xt.dim(0), 1, xt.dim(2), xt.dim(3)};
    } else {
      auto d = blocked_dims(xt, "X");
      if (!d) return ctx.error(d.status().message());
      xd = *d;
    }
    auto sr = shape_of(ctx, xd, ctx.input(1));
    if (!sr) return ctx.error(sr.status().message());
    sr->plain_channels = plain_channels;
    if (plain_channels > 0 && sr->depthwise)
      return ctx.error("a depthwise BlockedConv needs a blocked X");
    const Shape y_shape{sr->n, sr->mb, sr->oh, sr->ow, kBlock};
    const bool winograd = winograd_.takes(*sr, ctx.pool);
    const BlockedConvShape s = winograd ? *sr : along_rows(*sr);
    BlockedEpilogue e;
    e.act = act_;
    e.residual_first = ctx.node.attr_int("residual_before_activation", 0) != 0;
    if (ctx.has_input(2) && ctx.input(2).defined()) {
      const Tensor& b = ctx.input(2);
      if (b.dtype() != DType::kFloat32 || b.numel() != s.mb * kBlock)
        return ctx.error("B must be float32 with " + std::to_string(s.mb * kBlock) +
                         " values (output blocks x 8), got " + shape_str(b.shape()));
      e.bias = b.data<float>();
    }
    if (ctx.has_input(3) && ctx.input(3).defined()) {
      const Tensor& z = ctx.input(3);
      if (z.dtype() != DType::kFloat32 || z.shape() != y_shape)
        return ctx.error("residual Z must be float32 of the result's shape " + shape_str(y_shape) +
                         ", got " + shape_str(z.shape()));
      e.z = z.data<float>();
    }
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, y_shape));
    const float* x = ctx.input(0).data<float>();
    if (winograd) return winograd_.run(s, x, e, y->data<float>(), ctx.pool);
    if (s.depthwise) {
      (dense_.avx512() && !avx2_depthwise_ ? blocked_conv_depthwise_avx512 : blocked_conv_depthwise_avx2)(
          s, x, ctx.input(1).data<float>(), e, y->data<float>(), ctx.pool);
      return Status::ok();
    }
    if (groups_ != 1) {
      run_groups(s, x, dense_.absorbs() ? nullptr : ctx.input(1).data<float>(), e, y->data<float>(), ctx.pool);
      return Status::ok();
    }
    const float* w = dense_.absorbs() ? nullptr : ctx.input(1).data<float>();
    return dense_.run(s, x, w, e, y->data<float>(), ctx.pool);
  }

 private:
  // Groups of whole blocks (regnet's and resnext's 8- to 32-channel groups): each group, in each
  // image, is a dense convolution of its own input blocks into its own output blocks, W in the
  // dense layout [Mb, Cb / groups, ...] (w; null when prepare paired it for the AVX-512 kernel);
  // the (image, group) pairs run over the pool.
  void run_groups(const BlockedConvShape& s, const float* x, const float* w, const BlockedEpilogue& e, float* y,
                  ThreadPool* pool) const {
    BlockedConvShape one = s;
    one.n = 1;
    one.cb = s.cb / groups_;
    one.mb = s.mb / groups_;
    one.channels = one.mb * kBlock;
    const int64_t x_group = one.cb * s.h * s.w * kBlock, y_group = one.mb * s.oh * s.ow * kBlock;
    const int64_t w_group = one.mb * one.cb * s.kh * s.kw * kBlock * kBlock;
    auto run = [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t image = i / groups_, g = i % groups_;
        const int64_t y_at = image * s.mb * s.oh * s.ow * kBlock + g * y_group;
        BlockedEpilogue eg = e;
        if (e.bias) eg.bias = e.bias + g * one.mb * kBlock;
        if (e.z) eg.z = e.z + y_at;
        const float* xg = x + image * s.cb * s.h * s.w * kBlock + g * x_group;
        if (const float* paired = dense_.group_paired(g))
          blocked_conv_dense_avx512(one, xg, paired, eg, y + y_at, nullptr);
        else
          blocked_conv_dense_avx2(one, xg, w + g * w_group, eg, y + y_at, nullptr);
      }
    };
    if (pool) pool->parallel_for(s.n * groups_, 1, run);
    else run(0, s.n * groups_);
  }

  // A convolution down a column (W = 1, a KW = 1 kernel: tf2onnx's 1-D convs, [N, C, L, 1]) as
  // the same convolution along a row: X, W and Y have the same memory either way, and the
  // kernels' register tiles run along rows, which here have one pixel each.
  static BlockedConvShape along_rows(BlockedConvShape s) {
    if (s.w != 1 || s.ow != 1 || s.kw != 1 || s.pl != 0 || s.h == 1) return s;
    std::swap(s.h, s.w);
    std::swap(s.oh, s.ow);
    std::swap(s.kh, s.kw);
    std::swap(s.sh, s.sw);
    std::swap(s.dh, s.dw);
    std::swap(s.pt, s.pl);
    return s;
  }

  // The geometry, checked against W's blocked layout and the attributes.
  static Result<BlockedConvShape> shape_of(const KernelContext& ctx, const BlockedDims& x,
                                           const Tensor& w) {
    const ir::Node& node = ctx.node;
    BlockedConvShape s;
    s.n = x.n;
    s.cb = x.cb;
    s.h = x.h;
    s.w = x.w;
    s.channels = node.attr_int("channels", -1);
    const int64_t group = node.attr_int("group", 1);
    s.depthwise = group != 1 && group == s.channels;
    if (w.dtype() != DType::kFloat32) return Status::error("W must be float32");
    if (group != 1 && !s.depthwise) {
      // Groups of whole blocks: W dense over one group's input blocks.
      if (group < 1 || x.cb % group != 0 || w.rank() != 6 || w.dim(1) * group != x.cb || w.dim(0) % group != 0 ||
          w.dim(4) != kBlock || w.dim(5) != kBlock || w.dim(0) * kBlock != s.channels)
        return Status::error("grouped W must be [M/8, " + std::to_string(x.cb) + "/group, KH, KW, 8, 8] with " +
                             std::to_string(group) + " groups of whole 8-channel blocks of X's " +
                             std::to_string(x.cb) + " and of the " + std::to_string(s.channels) +
                             " output channels, got " + shape_str(w.shape()));
      s.mb = w.dim(0);
    } else if (s.depthwise) {
      if (w.rank() != 4 || w.dim(0) != x.cb || w.dim(3) != kBlock)
        return Status::error("depthwise W must be [" + std::to_string(x.cb) +
                             ", KH, KW, 8] for X's channel blocks, got " + shape_str(w.shape()));
      if (group != s.channels || blocks_of(group) != x.cb)
        return Status::error("group " + std::to_string(group) + " must equal channels " +
                             std::to_string(s.channels) + " and fill X's " +
                             std::to_string(x.cb) + " channel blocks (only depthwise groups)");
      s.mb = x.cb;
    } else {
      if (w.rank() != 6 || w.dim(1) != x.cb || w.dim(4) != kBlock || w.dim(5) != kBlock)
        return Status::error("W must be [M/8, " + std::to_string(x.cb) +
                             ", KH, KW, 8, 8] for X's channel blocks, got " + shape_str(w.shape()));
      s.mb = w.dim(0);
    }
    if (s.channels <= (s.mb - 1) * kBlock || s.channels > s.mb * kBlock)
      return Status::error("channels " + std::to_string(s.channels) + " does not fit " +
                           std::to_string(s.mb) + " output blocks");
    const int64_t kh = w.dim(s.depthwise ? 1 : 2), kw = w.dim(s.depthwise ? 2 : 3);
    KILN_ASSIGN_OR_RETURN(conv_util::Geometry g,
                          conv_util::read_geometry(node, {x.h, x.w}, {kh, kw}));
    if (g.kernel != Shape{kh, kw})
      return Status::error("kernel_shape " + shape_str(g.kernel) + " differs from W " +
                           shape_str(w.shape()));
    KILN_RETURN_IF_ERROR(
        conv_util::compute_output(g, node.attr_string("auto_pad", "NOTSET"), false));
    s.kh = kh;
    s.kw = kw;
    s.sh = g.strides[0];
    s.sw = g.strides[1];
    s.dh = g.dilations[0];
    s.dw = g.dilations[1];
    s.pt = g.pads[0];
    s.pl = g.pads[1];
    s.oh = g.out[0];
    s.ow = g.out[1];
    return s;
  }

  kiln_ops::Activation act_;
  int64_t groups_;
  bool depthwise_, avx2_depthwise_;
  BlockedConvWinograd winograd_;
  DenseDirect dense_;
};

template <bool winograd_allowed, bool avx2_depthwise = false>
Result<std::unique_ptr<Kernel>> create(const ir::Node& node, int64_t) {
  auto act = kiln_ops::read_activation(node, "activation", "activation_params");
  if (!act) return Status::error(node.describe() + ": " + act.status().message());
  return std::unique_ptr<Kernel>(std::make_unique<BlockedConv>(*act, node, winograd_allowed, avx2_depthwise));
}

const KernelRegistrar kRegistrar("ai.kiln", "BlockedConv", "blocked", create<true>);

// A variant of kiln's own kernel for the tuner (KernelDef::variant, runtime/tuner.cc): the direct
// kernel on the 3x3s Winograd would take, timed against Winograd on the node's real shapes.
const KernelVariantRegistrar kDirect(
    "ai.kiln", "BlockedConv", "direct", create<false>,
    [](const ir::Node& node, const std::vector<const ir::TypeInfo*>& types) {
      // Dense 3x3 weights [Mb, Cb, 3, 3, 8, 8] (kernel_shape may be absent) on a blocked X.
      const ir::TypeInfo* x = types.size() > 1 ? types[0] : nullptr;
      const ir::TypeInfo* w = types.size() > 1 ? types[1] : nullptr;
      return BlockedConvWinograd::fits_node(node) && x && x->has_shape && x->shape.size() == 5 &&
             w && w->has_shape && w->shape.size() == 6 && w->shape[2].value == 3 &&
             w->shape[3].value == 3;
    });

// Another: a depthwise conv on the AVX2 kernel on a CPU with AVX-512, where the AVX-512 kernel
// runs by default (its stride-1 3- and 5-wide kernels; the others run the AVX2 kernel anyway).
// On Zen 4, whose AVX-512 units are 256 bits wide, the AVX2 kernel is the faster one on
// mobilenet's 3x3s (1.05-1.2x) and the slower on efficientnet's SiLU and 5x5 layers (0.7-0.8x).
const KernelVariantRegistrar kAvx2Depthwise(
    "ai.kiln", "BlockedConv", "avx2", create<true, true>,
    [](const ir::Node& node, const std::vector<const ir::TypeInfo*>& types) {
      // Depthwise W [Cb, KH, KW, 8] with KW 3 or 5, stride and dilation 1 along the rows.
      const ir::TypeInfo* w = types.size() > 1 ? types[1] : nullptr;
      if (!cpu_features().has_avx512() || !BlockedConv::is_depthwise(node) || !w || !w->has_shape ||
          w->shape.size() != 4 || (w->shape[2].value != 3 && w->shape[2].value != 5))
        return false;
      auto ones = [&](const char* name) {
        const std::vector<int64_t> v = node.attr_ints(name);
        return std::all_of(v.begin(), v.end(), [](int64_t e) { return e == 1; });
      };
      return ones("strides") && ones("dilations");
    });

}  // namespace
}  // namespace kiln::nchwc
