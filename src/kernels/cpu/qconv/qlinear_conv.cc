// QLinearConv: the 8-bit conv of qconv.h where it applies (2-D or 1-D, group 1 or depthwise,
// constant 8-bit weights and zero points, constant scales and zero points), packed once in
// prepare; every other node, and a run whose X is not the type prepared for, takes the reference
// (kernels/ref/conv.cc). ai.kiln.QLinearConv is the same with a table (input 9) its codes go
// through (qlinear-conv-lookup), looked up over Y once the conv has written it (look_up_bytes:
// VBMI's or AVX2's vector lookup; a gather by code in each tile's store cost AVX2's int8
// efficientnet_b0 8 % and AVX-512 without VBMI 20 %, and the VBMI lookup called by each store
// more than the pass after). Or, with inputs 10 to 16 (QLinearAdd's A_scale, A_zero_point, B,
// B_scale, B_zero_point, C_scale, C_zero_point: qlinear-conv-residual), the conv's codes are
// QLinearAdd's A and Y is its C: the tile's store adds B (qconv.h, Requantize::add) where the
// tile is of group 1 and channels-last; else QLinearAdd's rows run over the codes once the conv
// has written them. And ai.kiln's X may be float32, NCHW whatever channels_last says of Y: the
// conv's staging quantizes it as QuantizeLinear(X, x_scale, x_zero_point) would (qconv.h), the
// QuantizeLinear and Transpose before an image model's first conv in one pass over X. And ai.kiln's
// `activation` (qdq-fusion's Q(act(Conv(DQ(x), DQ(w), DQ(b))))) runs on the sums' float values in
// the tile's store, before Y's quantization (Requantize::activation). (A SiLU as a table of 8-bit
// codes first quantized the conv's output over its whole range, -17 to 20 in yolox's first layer,
// where SiLU squashes everything below -4 to ~0.) And ai.kiln's without y_scale and y_zero_point
// writes Y float32: x_scale w_scale (sum + bias), a QDQ conv whose output goes on in float (a
// TensorRT-style model's, before its residual add).
#include <memory>
#include <optional>

#include "kernels/cpu/lookup_table.h"
#include "kernels/cpu/qconv/qconv.h"
#include "kernels/cpu/qconv/qlinear_conv.h"
#include "kernels/cpu/qlinear_binary.h"
#include "kernels/fast_path.h"
#include "kernels/kiln/epilogue_activation.h"
#include "kernels/kernel_util.h"
#include "kernels/ref/elementwise_util.h"
#include "kernels/ref/conv.h"
#include "kernels/ref/conv_util.h"
#include "kernels/ref/quantize.h"

namespace kiln {
namespace {

bool float_scale(const Tensor* t) { return t && t->dtype() == DType::kFloat32; }

// Whether W is not its s8 codes as they stand (u8, or zero points off 0): the kernel subtracts the
// zero points, and the differences may pass s8.
bool shifted_weights(const Tensor& w, const Tensor* wz) { return w.dtype() != DType::kInt8 || (wz && !all_zero(*wz)); }

}  // namespace

bool qlinear_conv_tileable(const ir::Node& node, const std::vector<const Tensor*>& c) {
  auto at = [&](size_t i) { return i < c.size() ? c[i] : nullptr; };
  auto named = [&](size_t i) { return i < node.inputs.size() && !node.inputs[i].empty(); };
  const Tensor *w = at(3), *xs = at(1), *xz = at(2), *ws = at(4), *wz = at(5), *ys = at(6), *yz = at(7), *b = at(8);
  if (!w || !dtype_is_8bit_integer(w->dtype()) || (w->rank() != 4 && w->rank() != 3)) return false;
  // Group 1, or depthwise: one filter a channel.
  const int64_t group = node.attr_int("group", 1);
  if (group != 1 && (group != w->dim(0) || w->dim(1) != 1)) return false;
  // ai.kiln's without y_scale (and y_zero_point) writes the float sums: Y float32.
  const bool float_y = node.domain == "ai.kiln" && !named(6);
  if (!float_scale(xs) || xs->numel() != 1 || !float_scale(ws) || (ws->numel() != 1 && ws->numel() != w->dim(0)))
    return false;
  if (float_y ? named(7) : !float_scale(ys) || ys->numel() != 1) return false;
  // W's zero points: none (u8 0), or one or one a filter of W's type.
  if (wz && (wz->dtype() != w->dtype() || (wz->numel() != 1 && wz->numel() != w->dim(0)))) return false;
  // A zero point or bias fed at run time (named, not constant) leaves the node on the reference.
  if ((!xz && named(2)) || (!wz && named(5)) || (!yz && named(7)) || (!b && named(8))) return false;
  // 16-bit weights (W less zero points past s8, below) sum exactly in int32 over at most
  // 2^31 / 255^2 products a window.
  if (shifted_weights(*w, wz) && w->numel() / w->dim(0) > (int64_t{1} << 31) / (255 * 255)) return false;
  auto scalar_8bit = [](const Tensor* z) {
    return !z || (z->numel() == 1 && (z->dtype() == DType::kUInt8 || z->dtype() == DType::kInt8));
  };
  return scalar_8bit(xz) && scalar_8bit(yz) && (!b || (b->dtype() == DType::kInt32 && b->numel() == w->dim(0)));
}

namespace {

// ONNX's QLinearConv, and ONNX Runtime's com.microsoft.QLinearConv, whose channels_last
// attribute makes X and Y channels-last (qlinear-nhwc writes it; then the node must be tiled).
class QLinearConvKernel : public Kernel {
 public:
  explicit QLinearConvKernel(const ir::Node& node)
      : node_(node), channels_last_(!node.domain.empty() && node.attr_int("channels_last", 0) != 0) {}

  Status prepare(const std::vector<const Tensor*>& c, std::vector<bool>&) override {
    residual_ = node_.domain == "ai.kiln" && node_.inputs.size() > 12 && !node_.inputs[12].empty();
    if (node_.domain == "ai.kiln") {
      KILN_ASSIGN_OR_RETURN(activation_, kiln_ops::read_activation(node_, "activation", "activation_params"));
    }
    const bool activated = activation_.kind != kiln_ops::Activation::Kind::kNone || activation_.clamped();
    const bool has_table = node_.domain == "ai.kiln" && node_.inputs.size() > 9 && !node_.inputs[9].empty();
    if (has_table) {  // the table: a constant of Y's type (qlinear-conv-lookup)
      const Tensor* t = c.size() > 9 ? c[9] : nullptr;
      if (!t || t->numel() != 256 || !dtype_is_8bit_integer(t->dtype())) return Status::ok();
      table_.assign(static_cast<const uint8_t*>(t->raw_data()), static_cast<const uint8_t*>(t->raw_data()) + 256);
      table_type_ = t->dtype();
    }
    if (!qlinear_conv_tileable(node_, c)) return Status::ok();
    const Tensor *w = c[3], *xz = c[2], *yz = c.size() > 7 ? c[7] : nullptr;
    x_type_ = xz ? xz->dtype() : DType::kUInt8;
    y_type_ = node_.inputs.size() < 7 || node_.inputs[6].empty() ? DType::kFloat32 : yz ? yz->dtype() : x_type_;
    if (y_type_ == DType::kFloat32 && residual_) return Status::ok();  // (a residual add of codes)
    const bool depthwise = node_.attr_int("group", 1) != 1;
    filters_ = w->dim(0), channels_ = depthwise ? filters_ : w->dim(1), w_rank_ = w->rank();
    kernel_h_ = w->rank() == 4 ? w->dim(2) : 1, kernel_w_ = w->dim(w->rank() - 1);
    qconv::Geometry g;
    g.filters = filters_, g.channels = channels_, g.kernel_h = kernel_h_, g.kernel_w = kernel_w_;
    if (const std::vector<int64_t> s = node_.attr_ints("strides"); s.size() == 2) g.stride_h = s[0], g.stride_w = s[1];
    if (const std::vector<int64_t> d = node_.attr_ints("dilations"); d.size() == 2) g.dilation_h = d[0], g.dilation_w = d[1];
    // W less its zero points: s8 as most quantizers write it (zero points 0) and where the
    // difference stays within s8; else (u8 weights of a TFLite model, ONNX Runtime's QUInt8
    // ones: zero points near 128, a few values past s8) on AVX-512 VNNI s8 weights and a part
    // per filter (Requantize::window_weight), elsewhere 16-bit values for the 16-bit tiles.
    std::vector<int8_t> narrow;
    const int8_t* wd = w->data<int8_t>();
    const Tensor* wz = c.size() > 5 ? c[5] : nullptr;
    if (shifted_weights(*w, wz)) {
      const int64_t per_filter = w->numel() / filters_;
      std::vector<int16_t> wide(static_cast<size_t>(w->numel()));
      bool fits = true;
      for (int64_t i = 0; i < w->numel(); ++i) {
        const int64_t f = i / per_filter;
        const double z = wz ? load_as_double(wz->dtype(), wz->raw_data(), wz->numel() == 1 ? 0 : f) : 0;
        const int v = static_cast<int>(load_as_double(w->dtype(), w->raw_data(), i) - z);
        wide[static_cast<size_t>(i)] = static_cast<int16_t>(v);
        fits = fits && v >= -128 && v <= 127;
      }
      if (!fits) {
        // On AVX-512 VNNI, W - 128 (u8 W) or W (s8) fits s8, and the tile adds the rest times the
        // window's sum of X (Requantize::window_weight): vpdpbusd, not the 16-bit ymm tiles.
        const int off = w->dtype() == DType::kUInt8 ? 128 : 0;
        narrow.resize(static_cast<size_t>(w->numel()));
        for (int64_t i = 0; i < w->numel(); ++i)
          narrow[static_cast<size_t>(i)] = static_cast<int8_t>(load_as_double(w->dtype(), w->raw_data(), i) - off);
        if (!depthwise && qconv::best_direct_tile(narrow.data(), w->numel()) == qconv::Tile::kAvx512Vnni) {
          rq_.window_weight.resize(static_cast<size_t>(filters_));
          for (int64_t m = 0; m < filters_; ++m) {  // (W - wz) - (W - off) = off - wz, the filter's
            const size_t first = static_cast<size_t>(m * per_filter);
            rq_.window_weight[static_cast<size_t>(m)] = wide[first] - narrow[first];
          }
          packed_ = qconv::PackedWeights::pack(narrow.data(), g, qconv::Tile::kAvx512Vnni);
          return finish_prepare(c, activated, has_table, depthwise);
        }
        packed_ = qconv::PackedWeights::pack_wide(wide.data(), g, depthwise ? qconv::Tile::kDepthwise : qconv::Tile::kAvx2);
        return finish_prepare(c, activated, has_table, depthwise);
      }
      narrow.assign(wide.begin(), wide.end());
      wd = narrow.data();
    }
    qconv::Tile tile =
        depthwise ? qconv::best_depthwise_tile(wd, w->numel(), g, activated) : qconv::best_tile(wd, w->numel(), g);
    if (tile == qconv::Tile::kWinogradAvx2 && qconv::winograd_u_bytes(g) > qconv::kWinogradCachedBytes) {
      // U may stream from memory: the direct tile's weights, and W for U on a run Winograd pays on.
      tile = qconv::best_direct_tile(wd, w->numel());
      winograd_source_.assign(wd, wd + w->numel());
      winograd_geometry_ = g;
    }
    packed_ = qconv::PackedWeights::pack(wd, g, tile);
    return finish_prepare(c, activated, has_table, depthwise);
  }

  // prepare's rest, W packed: the zero point's term joins the bias; the scales multiply in
  // QLinearConv's order.
  Status finish_prepare(const std::vector<const Tensor*>& c, bool activated, bool has_table, bool depthwise) {
    const Tensor *xs = c[1], *xz = c[2], *ws = c[4], *ys = c[6], *yz = c.size() > 7 ? c[7] : nullptr;
    const Tensor* b = c.size() > 8 ? c[8] : nullptr;
    const int32_t zx = xz ? static_cast<int32_t>(load_as_double(xz->dtype(), xz->raw_data(), 0)) : 0;
    const int32_t zx_u8 = zx + (x_type_ == DType::kInt8 ? 128 : 0);
    x_zero_point_ = zx;
    if (has_table && table_type_ != y_type_) return Status::ok();
    if (residual_) {  // QLinearAdd's scales and zero points: constants (else the node is not ready)
      const size_t scales[] = {10, 13, 15}, zeros[] = {11, 14, 16};
      float* scale_of[] = {&add_.as, &add_.bs, &add_.cs};
      float* zero_of[] = {&add_.az, &add_.bz, &add_.cz};
      for (int k = 0; k < 3; ++k) {
        const Tensor* z = zeros[k] < c.size() ? c[zeros[k]] : nullptr;
        if (!z && zeros[k] < node_.inputs.size() && !node_.inputs[zeros[k]].empty()) return Status::ok();
        auto scale = per_tensor_parameter(scales[k] < c.size() ? c[scales[k]] : nullptr, scales[k], true, y_type_);
        auto zero = per_tensor_parameter(z, zeros[k], false, y_type_);
        if (!scale || !zero) return Status::ok();
        *scale_of[k] = *scale, *zero_of[k] = *zero;
      }
      add_.lo = y_type_ == DType::kInt8 ? -128.0f : 0.0f, add_.hi = y_type_ == DType::kInt8 ? 127.0f : 255.0f;
      add_.multiply = false;
      if (!depthwise && channels_last_ && !activated)
        rq_.add = {add_, qlinear_binary_method(add_, y_type_ == DType::kInt8)};
    }
    rq_.output = y_type_ == DType::kFloat32 ? qconv::Output::kFloat
                 : y_type_ == DType::kInt8  ? qconv::Output::kS8
                                            : qconv::Output::kU8;
    rq_.zero_point = yz ? static_cast<int32_t>(load_as_double(yz->dtype(), yz->raw_data(), 0)) : 0;
    rq_.lo = y_type_ == DType::kInt8 ? -128 : 0, rq_.hi = y_type_ == DType::kInt8 ? 127 : 255;
    rq_.bias.resize(static_cast<size_t>(filters_));
    rq_.scale.resize(static_cast<size_t>(filters_));
    const float x_scale = xs->data<float>()[0], y_scale = ys ? ys->data<float>()[0] : 1.0f;  // (float Y: none)
    x_scale_ = x_scale;
    for (int64_t m = 0; m < filters_; ++m) {
      const size_t i = static_cast<size_t>(m);
      // sum over the window of W less its zero point: the packed weights' and window_weight's.
      const int32_t window = rq_.window_weight.empty() ? 0 : rq_.window_weight[i] * static_cast<int32_t>(channels_ * kernel_h_ * kernel_w_);
      rq_.bias[i] = (b ? b->data<int32_t>()[m] : 0) - zx_u8 * (packed_.filter_sums()[i] + window);
      // With an activation, the sums' float values first (Requantize::activation).
      rq_.scale[i] = x_scale * ws->data<float>()[ws->numel() == 1 ? 0 : m] / (activated ? 1.0f : y_scale);
    }
    if (activated) rq_.activation = &activation_, rq_.inverse_y_scale = 1.0f / y_scale;
    ready_ = true;
    return Status::ok();
  }

  Status run(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    // ai.kiln's float32 X (qlinear-conv-quantize-input): NCHW, quantized as the tile stages it.
    const bool quantize_x = node_.domain == "ai.kiln" && x.dtype() == DType::kFloat32;
    const bool x_last = channels_last_ && !quantize_x;
    const int64_t c_axis = x_last ? x.rank() - 1 : 1;
    const bool fits =
        ready_ && (x.dtype() == x_type_ || quantize_x) && x.rank() == w_rank_ && x.dim(c_axis) == channels_;
    if (!fits && (channels_last_ || node_.domain == "ai.kiln"))
      return ctx.error(std::string(node_.domain != "ai.kiln" ? "channels-last QLinearConv"
                                   : residual_ ? "ai.kiln.QLinearConv (QLinearAdd's scales and zero points constant)"
                                               : "ai.kiln.QLinearConv (any table of Y's type, constant)") +
                       " needs constant 8-bit weights and zero points, group 1 or depthwise, "
                       "scalar scales and zero points, and X of their type (ai.kiln's: or float32 NCHW) with " +
                       std::to_string(channels_) + " channels; got X " + shape_str(x.shape()) + " " +
                       dtype_name(x.dtype()));
    if (!fits) return qlinear_conv_reference(ctx);
    if (x.shape() != geometry_of_) KILN_RETURN_IF_ERROR(read_geometry(ctx, x_last));
    const qconv::Geometry& g = geometry_;
    const Shape& y_shape = y_shape_;
    const Tensor* residual = residual_ ? &ctx.input(12) : nullptr;
    if (residual && (residual->dtype() != y_type_ || residual->shape() != y_shape))
      return ctx.error("the residual B (input 12) must be " + std::string(dtype_name(y_type_)) + " " +
                       shape_str(y_shape) + " as Y is, got " + dtype_name(residual->dtype()) + " " +
                       shape_str(residual->shape()));
    // The store reads each residual code where it then writes Y's: Y may take R's storage.
    KILN_ASSIGN_OR_RETURN(Tensor * y, rq_.add ? ctx.make_output_over_input(0, {12}, y_type_, y_shape)
                                              : ctx.make_output_for_overwrite(0, y_type_, y_shape));
    if (y->numel() == 0) return Status::ok();
    const bool winograd = !winograd_source_.empty() && qconv::winograd_pays(g);
    if (winograd && !winograd_)  // (run() is not reentrant)
      winograd_ = qconv::PackedWeights::pack(winograd_source_.data(), winograd_geometry_, qconv::Tile::kWinogradAvx2);
    const qconv::PackedWeights& packed = winograd ? *winograd_ : packed_;
    if (!qconv::tile_fits(packed.tile(), g))  // the strides and dilations prepare read are the node's
      return ctx.error("QLinearConv: the packed weights' tile does not take this geometry");
    qconv::conv(g, x.raw_data(), x_type_ == DType::kInt8, x_last, x_zero_point_, packed, rq_, y->raw_data(),
                channels_last_, ctx.pool, rq_.add ? residual->raw_data() : nullptr, quantize_x ? &x_scale_ : nullptr);
    if (residual && !rq_.add)  // the add the store does not do, over the codes while in cache
      qlinear_binary_same_shape(add_, y_type_ == DType::kInt8, y->raw_data(), residual->raw_data(), y->raw_data(),
                                y->numel(), ctx.pool);
    uint8_t* codes = static_cast<uint8_t*>(y->raw_data());
    if (!table_.empty())
      ew::run_range(ctx, y->numel(), [&](int64_t b, int64_t e) { look_up_bytes(table_.data(), codes + b, codes + b, e - b); });
    return Status::ok();
  }

 private:
  // geometry_ and y_shape_ of X's shape, from the node's attributes (run() is not reentrant).
  Status read_geometry(KernelContext& ctx, bool x_last) {
    const Tensor& x = ctx.input(0);
    const int64_t s0 = x_last ? 1 : 2;  // the first spatial axis
    const Shape in = w_rank_ == 4 ? Shape{x.dim(s0), x.dim(s0 + 1)} : Shape{x.dim(s0)};
    const Shape kernel = w_rank_ == 4 ? Shape{kernel_h_, kernel_w_} : Shape{kernel_w_};
    auto geo = conv_util::read_geometry(ctx.node, in, kernel);
    if (!geo) return ctx.error(geo.status().message());
    const Status out = conv_util::compute_output(*geo, ctx.node.attr_string("auto_pad", "NOTSET"), false);
    if (!out.ok()) return ctx.error(out.message());
    const conv_util::Geo3 g3 = conv_util::to_geo3(*geo);
    qconv::Geometry& g = geometry_;
    g.batch = x.dim(0), g.channels = channels_, g.in_h = g3.in[1], g.in_w = g3.in[2];
    g.filters = filters_, g.out_h = g3.out[1], g.out_w = g3.out[2];
    g.kernel_h = g3.k[1], g.kernel_w = g3.k[2], g.stride_h = g3.s[1], g.stride_w = g3.s[2];
    g.dilation_h = g3.d[1], g.dilation_w = g3.d[2], g.pad_top = g3.pb[1], g.pad_left = g3.pb[2];
    y_shape_ = {g.batch};
    if (!channels_last_) y_shape_.push_back(filters_);
    y_shape_.insert(y_shape_.end(), geo->out.begin(), geo->out.end());
    if (channels_last_) y_shape_.push_back(filters_);
    geometry_of_ = x.shape();
    return Status::ok();
  }

  ir::Node node_;  // a copy: prepare reads its inputs and group
  bool channels_last_;
  bool ready_ = false;
  DType x_type_ = DType::kUInt8, y_type_ = DType::kUInt8;
  int64_t filters_ = 0, channels_ = 0, kernel_h_ = 1, kernel_w_ = 1, w_rank_ = 0;
  int32_t x_zero_point_ = 0;
  float x_scale_ = 0;  // a float X's quantization (ai.kiln's)
  qconv::PackedWeights packed_;
  // Where Winograd's U outgrows the caches (qconv.h, winograd_pays), packed_ is the direct tile's,
  // and U is packed from a copy of W at the first run of enough tiles to pay for it.
  std::vector<int8_t> winograd_source_;
  qconv::Geometry winograd_geometry_;
  std::optional<qconv::PackedWeights> winograd_;
  qconv::Requantize rq_;
  // The geometry of the X shape of the last run, read again only when the shape changes: read
  // from the attributes on every run it took ~1 us of the caller's a node (its vectors), while
  // the pool's worker waited.
  Shape geometry_of_;
  qconv::Geometry geometry_;
  Shape y_shape_;
  std::vector<uint8_t> table_;  // ai.kiln.QLinearConv's
  bool residual_ = false;       // ai.kiln.QLinearConv's inputs 10 to 16, QLinearAdd's parameters in add_
  QLinearBinaryParams add_{};
  DType table_type_ = DType::kUInt8;
  kiln_ops::Activation activation_;  // ai.kiln's, which rq_.activation points to when it has one
};

Result<std::unique_ptr<Kernel>> make_kernel(const ir::Node& node, int64_t) {
  return std::unique_ptr<Kernel>(std::make_unique<QLinearConvKernel>(node));
}
// X, x_scale, W, w_scale, y_scale and the int32 bias.
const std::vector<DtypeConstraint> kQLinearConvTypes = {
    {0, {DType::kUInt8, DType::kInt8}}, {1, {DType::kFloat32}}, {3, {DType::kUInt8, DType::kInt8}}, {4, {DType::kFloat32}}, {6, {DType::kFloat32}}, {8, {DType::kInt32}}};
const KernelRegistrar kQLinearConv("", "QLinearConv", "ref", make_kernel, kQLinearConvTypes);
const KernelRegistrar kMsQLinearConv("com.microsoft", "QLinearConv", "ref", make_kernel, kQLinearConvTypes);
// ai.kiln's X may be float32 too (NCHW, quantized while staged).
const std::vector<DtypeConstraint> kKilnQLinearConvTypes = {
    {0, {DType::kUInt8, DType::kInt8, DType::kFloat32}}, {1, {DType::kFloat32}}, {3, {DType::kUInt8, DType::kInt8}},
    {4, {DType::kFloat32}}, {6, {DType::kFloat32}}, {8, {DType::kInt32}}};
const KernelRegistrar kKilnQLinearConv("ai.kiln", "QLinearConv", "ref", make_kernel, kKilnQLinearConvTypes);

// The tile's nodes (prepare may still find a zero point or scale it cannot take).
bool tiled(const FastPathQuery& q) { return qlinear_conv_tileable(q.node, q.constants); }

}  // namespace

KILN_REGISTER_FAST_PATH("", "QLinearConv", tiled);
KILN_REGISTER_FAST_PATH("com.microsoft", "QLinearConv", tiled);
KILN_REGISTER_FAST_PATH("ai.kiln", "QLinearConv", tiled);

}  // namespace kiln
