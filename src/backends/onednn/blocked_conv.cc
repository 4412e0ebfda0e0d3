// ai.kiln.BlockedConv through oneDNN's convolution_forward, run in kiln's blocked layout itself:
// a blocked X [N, Cb, H, W, 8] and Y, Z [N, Mb, OH, OW, 8] are oneDNN's nChw8c, dense weights
// W[m/8, c/8, kh, kw, c%8, m%8] are OIhw8i8o, grouped ones (groups of whole blocks, W[m/8,
// c/8/groups, ...]) gOIhw8i8o, and depthwise W[c/8, kh, kw, c%8] are Goihw8g (o = i = 1), so no
// activation is reordered at run time. The conv is given the padded channel counts (Cb·8 in,
// Mb·8 out): the padding lanes of X and W are zero, so the sums are exact and the output padding
// lanes come out as act(0) (zeroed after when that is not 0). The plain-input stem (X plain NCHW,
// C <= 8) is an nchw source of C channels. Semantics: docs/ops.md.
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "backends/backend.h"
#include "backends/onednn/onednn_util.h"
#include "kernels/kiln/nchwc/blocked_layout.h"
#include "kernels/ref/conv_util.h"

namespace kiln::backends::onednn {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using nchwc::kBlock;

// The geometry of one run, checked against W's blocked layout and the attributes.
struct ConvShape {
  int64_t n = 0, ic = 0, h = 0, w = 0;  // ic: padded (Cb·8), or the plain stem's C
  int64_t oc = 0, oh = 0, ow = 0;       // oc: padded (Mb·8)
  int64_t kh = 1, kw = 1;
  memory::dims strides, dilates, pad_l, pad_r;  // dilates in oneDNN's sense (ONNX's - 1)
  bool plain = false, has_bias = false, has_z = false;

  bool same_primitive(const ConvShape& o) const {
    return n == o.n && ic == o.ic && h == o.h && w == o.w && oc == o.oc && kh == o.kh &&
           kw == o.kw && plain == o.plain && has_bias == o.has_bias && has_z == o.has_z;
  }
};

class OneDnnBlockedConv : public Kernel {
 public:
  OneDnnBlockedConv(const ir::Node& node, int64_t opset, kiln_ops::Activation act)
      : opset_(opset),
        act_(act),
        groups_(std::max<int64_t>(node.attr_int("group", 1), 1)),
        depthwise_(groups_ != 1 && groups_ == node.attr_int("channels", -1)),
        residual_first_(node.attr_int("residual_before_activation", 0) != 0),
        channels_(node.attr_int("channels", -1)) {}

  // W is kept where the runtime holds it and read when a primitive is built (the input shape is
  // not known before the first run); when oneDNN takes kiln's layout as it is, nothing is copied.
  Status prepare(const std::vector<const Tensor*>& constants, std::vector<bool>&) override {
    w_constant_ = constants.size() > 1 && constants[1] != nullptr;
    constants_ = constants;
    return Status::ok();
  }

  Status run(KernelContext& ctx) override {
    if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1))
      return ctx.error("BlockedConv needs X and W");
    auto s = shape_of(ctx);
    if (!s) return ctx.error(s.status().message());
    const Shape y_shape{s->n, s->oc / kBlock, s->oh, s->ow, kBlock};
    if (s->has_z && ctx.input(3).shape() != y_shape)
      return ctx.error("residual Z must be float32 of the result's shape " + shape_str(y_shape) +
                       ", got " + shape_str(ctx.input(3).shape()));
    try {
      if (!built_ || !s->same_primitive(shape_) || s->strides != shape_.strides ||
          s->dilates != shape_.dilates || s->pad_l != shape_.pad_l || s->pad_r != shape_.pad_r) {
        build(*s);
        weights_ready_ = false;
      }
    } catch (const dnnl::error& e) {
      built_ = false;
      return error_of(ctx, "to build the convolution", e);
    }
    if (reference_) return run_kiln(ctx);
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, y_shape));
    try {
      const float* w = ctx.input(1).data<float>();
      if (!weights_ready_ || !w_constant_) {
        prepare_weights(w);
        weights_ready_ = true;
      }
      set_arg_data(args_, DNNL_ARG_SRC, ctx.input(0).data<float>());
      if (!reordered_) set_arg_data(args_, DNNL_ARG_WEIGHTS, w);
      if (s->has_bias) set_arg_data(args_, DNNL_ARG_BIAS, ctx.input(2).data<float>());
      if (s->has_z) set_arg_data(args_, z_arg_, ctx.input(3).data<float>());
      set_arg_data(args_, DNNL_ARG_DST, y->data<float>());
      execute(ctx, primitive_, args_);
    } catch (const dnnl::error& e) {
      built_ = false;
      return error_of(ctx, "to run the convolution", e);
    }
    zero_padding_lanes(*y);
    return Status::ok();
  }

 private:
  Result<ConvShape> shape_of(const KernelContext& ctx) const {
    const Tensor& x = ctx.input(0);
    const Tensor& w = ctx.input(1);
    ConvShape s;
    if (x.dtype() != DType::kFloat32 || w.dtype() != DType::kFloat32)
      return Status::error("X and W must be float32");
    if (x.rank() == 4) {  // the plain stem: one block of C lanes
      s.plain = true;
      if (x.dim(1) < 1 || x.dim(1) > kBlock || groups_ != 1)
        return Status::error("a plain NCHW X may have 1 to 8 channels (group 1), got " +
                             shape_str(x.shape()));
    } else if (x.rank() != 5 || x.dim(4) != kBlock) {
      return Status::error("X must be blocked [N, C/8, H, W, 8] or plain NCHW, got " +
                           shape_str(x.shape()));
    }
    s.n = x.dim(0);
    s.ic = s.plain ? x.dim(1) : x.dim(1) * kBlock;
    s.h = x.dim(2);
    s.w = x.dim(3);
    const int64_t cb = s.plain ? 1 : x.dim(1);
    if (depthwise_) {
      if (w.rank() != 4 || w.dim(0) != cb || w.dim(3) != kBlock)
        return Status::error("depthwise W must be [" + std::to_string(cb) + ", KH, KW, 8], got " +
                             shape_str(w.shape()));
      if (ctx.node.attr_int("group", 1) != channels_ || nchwc::blocks_of(channels_) != cb)
        return Status::error("group must equal channels and fill X's channel blocks");
      s.oc = s.ic;
      s.kh = w.dim(1);
      s.kw = w.dim(2);
    } else {
      if (w.rank() != 6 || w.dim(1) * groups_ != cb || w.dim(0) % groups_ != 0 || w.dim(4) != kBlock ||
          w.dim(5) != kBlock)
        return Status::error("W must be [M/8, " + std::to_string(cb) + " / " + std::to_string(groups_) +
                             ", KH, KW, 8, 8], got " + shape_str(w.shape()));
      s.oc = w.dim(0) * kBlock;
      s.kh = w.dim(2);
      s.kw = w.dim(3);
    }
    if (channels_ <= s.oc - kBlock || channels_ > s.oc)
      return Status::error("channels " + std::to_string(channels_) + " does not fit " +
                           std::to_string(s.oc / kBlock) + " output blocks");
    KILN_ASSIGN_OR_RETURN(conv_util::Geometry g,
                          conv_util::read_geometry(ctx.node, {s.h, s.w}, {s.kh, s.kw}));
    if (g.kernel != Shape{s.kh, s.kw})
      return Status::error("kernel_shape " + shape_str(g.kernel) + " differs from W " +
                           shape_str(w.shape()));
    KILN_RETURN_IF_ERROR(
        conv_util::compute_output(g, ctx.node.attr_string("auto_pad", "NOTSET"), false));
    if (g.out[0] < 1 || g.out[1] < 1 || s.n < 1)
      return Status::error("the convolution has an empty output");
    s.oh = g.out[0];
    s.ow = g.out[1];
    s.strides = {g.strides[0], g.strides[1]};
    s.dilates = {g.dilations[0] - 1, g.dilations[1] - 1};
    s.pad_l = {g.pads[0], g.pads[1]};
    s.pad_r = {g.pads[2], g.pads[3]};
    s.has_bias = ctx.has_input(2) && ctx.input(2).defined();
    if (s.has_bias && (ctx.input(2).dtype() != DType::kFloat32 || ctx.input(2).numel() != s.oc))
      return Status::error("B must be float32 with " + std::to_string(s.oc) +
                           " values (output blocks x 8), got " + shape_str(ctx.input(2).shape()));
    s.has_z = ctx.has_input(3) && ctx.input(3).defined();
    if (s.has_z && ctx.input(3).dtype() != DType::kFloat32)
      return Status::error("residual Z must be float32");
    return s;
  }

  // W as kiln lays it out, over the padded channel counts (the stem's: 8 input lanes).
  memory::desc user_weights_desc(const ConvShape& s) const {
    if (depthwise_) return {{s.oc, 1, 1, s.kh, s.kw}, memory::data_type::f32, tag::Goihw8g};
    if (groups_ > 1)
      return {{groups_, s.oc / groups_, s.ic / groups_, s.kh, s.kw}, memory::data_type::f32, tag::gOIhw8i8o};
    return {{s.oc, s.plain ? kBlock : s.ic, s.kh, s.kw}, memory::data_type::f32, tag::OIhw8i8o};
  }

  void build(const ConvShape& s) {
    built_ = false;
    const auto f32 = memory::data_type::f32;
    const memory::desc src({s.n, s.ic, s.h, s.w}, f32, s.plain ? tag::nchw : tag::nChw8c);
    const memory::desc dst({s.n, s.oc, s.oh, s.ow}, f32, tag::nChw8c);
    const memory::desc bias = s.has_bias ? memory::desc({s.oc}, f32, tag::a) : memory::desc();
    dnnl::post_ops ops;
    int z_index = -1;
    if (s.has_z && residual_first_)
      z_index = ops.len(), ops.append_binary(dnnl::algorithm::binary_add, dst);
    append_activation(act_, ops);  // accepts() declined what it cannot express
    if (s.has_z && !residual_first_)
      z_index = ops.len(), ops.append_binary(dnnl::algorithm::binary_add, dst);
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    user_weights_ = user_weights_desc(s);
    auto make = [&](const memory::desc& weights) {
      const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference,
                                              dnnl::algorithm::convolution_direct, src, weights,
                                              bias, dst, s.strides, s.dilates, s.pad_l, s.pad_r);
      return dnnl::convolution_forward::primitive_desc(d, attr, engine());
    };
    // kiln's weight layout itself where an implementation takes it (no copy); else the layout
    // oneDNN prefers, reordered into once per primitive (the stem's always: its C differs).
    dnnl::convolution_forward::primitive_desc pd;
    bool took_user = false;
    if (!s.plain) {
      try {
        pd = make(user_weights_);
        took_user = true;
      } catch (const dnnl::error&) {
      }
    }
    if (!took_user) {
      const memory::dims dims =
          groups_ > 1 ? user_weights_.dims() : memory::dims{s.oc, s.ic, s.kh, s.kw};
      pd = make(memory::desc(dims, f32, tag::any));
    }
    // oneDNN's reference loop (what 2.6 picks for fcn's dilation-4 3x3s: a forced run of fcn took
    // minutes) is never worth running: kiln's kernel runs such a shape instead.
    reference_ = std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
    primitive_ = dnnl::convolution_forward(pd);
    reordered_ = !took_user || pd.weights_desc() != user_weights_;
    weights_ = reordered_ ? memory(pd.weights_desc(), engine()) : memory();
    args_.clear();
    args_[DNNL_ARG_SRC] = memory(src, engine(), DNNL_MEMORY_NONE);
    args_[DNNL_ARG_DST] = memory(dst, engine(), DNNL_MEMORY_NONE);
    args_[DNNL_ARG_WEIGHTS] =
        reordered_ ? weights_ : memory(user_weights_, engine(), DNNL_MEMORY_NONE);
    if (s.has_bias) args_[DNNL_ARG_BIAS] = memory(bias, engine(), DNNL_MEMORY_NONE);
    z_arg_ = DNNL_ARG_ATTR_MULTIPLE_POST_OP(z_index) | DNNL_ARG_SRC_1;
    if (s.has_z) args_[z_arg_] = memory(dst, engine(), DNNL_MEMORY_NONE);
    shape_ = s;
    built_ = true;
  }

  // Reorders W (kiln's layout) into the primitive's, when it wants another one. The stem's C < 8
  // input channels are the first C of W's 8 lanes: W goes to plain oihw first, whose first C
  // input channels are then a strided sub-memory.
  void prepare_weights(const float* w) {
    if (!reordered_) return;
    memory user(user_weights_, engine(), const_cast<float*>(w));
    if (!shape_.plain || shape_.ic == kBlock) {
      dnnl::reorder(user, weights_).execute(stream(), user, weights_);
    } else {
      const memory::desc plain_md(user_weights_.dims(), memory::data_type::f32, tag::oihw);
      memory plain(plain_md, engine());
      dnnl::reorder(user, plain).execute(stream(), user, plain);
      const memory::desc sub =
          plain_md.submemory_desc({shape_.oc, shape_.ic, shape_.kh, shape_.kw}, {0, 0, 0, 0});
      memory first(sub, engine(), plain.get_data_handle());
      dnnl::reorder(first, weights_).execute(stream(), first, weights_);
    }
    stream().wait();
  }

  // kiln's own kernel on this node, for the shapes oneDNN runs only as a reference loop.
  Status run_kiln(KernelContext& ctx) {
    if (!kiln_) {
      const KernelDef* own = KernelRegistry::global().own("ai.kiln", "BlockedConv");
      if (!own) return ctx.error("oneDNN has only a reference loop for this convolution, and kiln no kernel");
      KILN_ASSIGN_OR_RETURN(kiln_, own->create(ctx.node, opset_));
      std::vector<bool> absorbed(constants_.size(), false);  // the runtime keeps them for us
      KILN_RETURN_IF_ERROR(kiln_->prepare(constants_, absorbed));
    }
    return kiln_->run(ctx);
  }

  // The lanes past `channels` hold act(0) (or act(0) + 0): zero them when that is not 0.
  void zero_padding_lanes(Tensor& y) const {
    const int64_t first = channels_ % kBlock;
    if (first == 0 || act_(0.0) == 0.0) return;
    const int64_t mb = y.dim(1), pixels = y.dim(2) * y.dim(3);
    float* yd = y.data<float>();
    for (int64_t n = 0; n < y.dim(0); ++n) {
      float* block = yd + ((n * mb + mb - 1) * pixels) * kBlock;
      for (int64_t p = 0; p < pixels; ++p)
        std::memset(block + p * kBlock + first, 0, (kBlock - first) * sizeof(float));
    }
  }

  const int64_t opset_;
  const kiln_ops::Activation act_;
  const int64_t groups_;  // the node's group: 1, channels (depthwise), or groups of whole blocks
  const bool depthwise_, residual_first_;
  const int64_t channels_;
  bool w_constant_ = false;
  std::vector<const Tensor*> constants_;  // as prepare() got them: the runtime keeps them
  bool reference_ = false;                // the primitive built is oneDNN's reference loop
  std::unique_ptr<Kernel> kiln_;          // kiln's kernel, made when reference_ first holds
  // The primitive of the last input shape; rebuilt when the shape changes.
  bool built_ = false, reordered_ = false, weights_ready_ = false;
  ConvShape shape_;
  memory::desc user_weights_;
  dnnl::convolution_forward primitive_;
  memory weights_;  // W in the primitive's layout, when reordered_
  Args args_;
  int z_arg_ = 0;
};

Result<std::unique_ptr<Kernel>> create(const ir::Node& node, int64_t opset) {
  auto act = kiln_ops::read_activation(node, "activation", "activation_params");
  if (!act) return Status::error(node.describe() + ": " + act.status().message());
  return std::unique_ptr<Kernel>(std::make_unique<OneDnnBlockedConv>(node, opset, *act));
}

// Float32 operands and an activation oneDNN's post-ops express; any group the layout pass makes
// (1, depthwise, groups of whole blocks).
bool accepts(const ir::Node& node, const std::vector<const ir::TypeInfo*>& types) {
  return given_inputs_float32(node, types, 4) && activation_expressible(node) &&
         node.attr_int("channels", -1) > 0;
}

const KernelRegistrar kRegistrar("ai.kiln", "BlockedConv", "onednn_conv", create, kName, accepts);

}  // namespace
}  // namespace kiln::backends::onednn
