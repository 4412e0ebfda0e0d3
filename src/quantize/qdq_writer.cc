// Writing a quantization plan as QDQ ONNX (quantize_internal.h):
//  - each activation t: t_quantized = QuantizeLinear(t, s, z), t_dequantized = DequantizeLinear
//    of it, and every reader of t reads t_dequantized. When t is a Relu's output and z is u8 0,
//    the Relu goes: QuantizeLinear's clamp at code 0 is the Relu (exact), and QuantizeLinear reads
//    the Relu's input, so that DQ -> Conv -> Q, the form runtimes fuse, is what remains;
//  - weights: int8, symmetric (zero point 0), scale max|w| / 127 (63 with reduce_range) per
//    output channel (or per tensor), behind a DequantizeLinear with that axis;
//  - biases: int32 at the accumulator's scale x_scale * w_scale (per channel), zero point 0.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "passes/fusions/epilogue_match.h"
#include "passes/graph_edit.h"
#include "passes/graph_index.h"
#include "quantize/quantize_internal.h"

namespace kiln::quantize {
namespace {

using passes::fresh_name;
using passes::make_node;

// The channel of element i of a tensor of `shape` along `axis`.
int64_t channel_of(const Shape& shape, int64_t axis, int64_t i) {
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  return (i / inner) % shape[static_cast<size_t>(axis)];
}

}  // namespace

QuantizedWeight quantize_weight(const Tensor& w, int64_t axis, bool per_channel, float levels) {
  const int64_t channels = per_channel ? w.dim(axis) : 1;
  std::vector<float> top(static_cast<size_t>(channels), 0.0f);
  const float* d = w.data<float>();
  for (int64_t i = 0; i < w.numel(); ++i) {
    float& t = top[static_cast<size_t>(per_channel ? channel_of(w.shape(), axis, i) : 0)];
    if (std::isfinite(d[i])) t = std::max(t, std::fabs(d[i]));
  }
  QuantizedWeight r;
  const Shape param_shape = per_channel ? Shape{channels} : Shape{};
  r.scale = Tensor::make(DType::kFloat32, param_shape).value();
  r.zero_point = Tensor::make(DType::kInt8, param_shape).value();  // zeros
  for (int64_t c = 0; c < channels; ++c)
    r.scale.data<float>()[c] = top[static_cast<size_t>(c)] > 0 ? top[static_cast<size_t>(c)] / levels : 1.0f;
  r.q = Tensor::make(DType::kInt8, w.shape()).value();
  for (int64_t i = 0; i < w.numel(); ++i) {
    const float s = r.scale.data<float>()[per_channel ? channel_of(w.shape(), axis, i) : 0];
    const float v = std::isfinite(d[i]) ? std::nearbyint(d[i] / s) : 0.0f;
    r.q.data<int8_t>()[i] = static_cast<int8_t>(std::clamp(v, -levels, levels));
  }
  return r;
}

namespace {

// bias / (x_scale * w_scale[c]), rounded, in int32; the scales as the 8-bit conv expects them.
QuantizedWeight quantize_bias(const Tensor& b, float x_scale, const Tensor& w_scale) {
  QuantizedWeight r;
  const int64_t n = b.numel();
  r.q = Tensor::make(DType::kInt32, {n}).value();
  r.scale = Tensor::make(DType::kFloat32, {n}).value();
  r.zero_point = Tensor::make(DType::kInt32, {n}).value();
  constexpr double kLimit = std::numeric_limits<int32_t>::max();
  for (int64_t c = 0; c < n; ++c) {
    const float s = x_scale * w_scale.data<float>()[w_scale.numel() == 1 ? 0 : c];
    r.scale.data<float>()[c] = s;
    const double v = std::nearbyint(static_cast<double>(b.data<float>()[c]) / s);
    r.q.data<int32_t>()[c] = static_cast<int32_t>(std::isfinite(v) ? std::clamp(v, -kLimit, kLimit) : 0.0);
  }
  return r;
}

class Writer {
 public:
  explicit Writer(ir::Graph& g) : g_(g) {}

  // The initializers of a quantized constant and the DequantizeLinear of them; its output's name.
  std::string dequantized(const std::string& base, QuantizedWeight w, int64_t axis) {
    const std::string q = fresh_name(g_, base + "_quantized");
    g_.initializers[q] = std::move(w.q);
    const std::string s = fresh_name(g_, base + "_scale");
    g_.initializers[s] = std::move(w.scale);
    const std::string z = fresh_name(g_, base + "_zero_point");
    g_.initializers[z] = std::move(w.zero_point);
    const std::string out = fresh_name(g_, base + "_dequantized");
    ir::Node dq = make_node(out, "DequantizeLinear", {q, s, z}, {out});
    if (g_.initializers.at(s).rank() == 1) dq.attrs.push_back(ir::Attribute::of_int("axis", axis));
    added_.push_back(std::move(dq));
    return out;
  }

  // Q and DQ of activation t; the Relu or Clip producing it goes when Q's saturation does its
  // clamp (passes/fusions/epilogue_match.h). True when it went.
  bool activation(const std::string& t, const QuantParams& p, bool is_signed, std::string* dequantized) {
    const std::string s = fresh_name(g_, t + "_scale");
    g_.initializers[s] = Tensor::scalar<float>(DType::kFloat32, p.scale);
    const std::string z = fresh_name(g_, t + "_zero_point");
    g_.initializers[z] = is_signed ? Tensor::scalar<int8_t>(DType::kInt8, static_cast<int8_t>(p.zero_point))
                                   : Tensor::scalar<uint8_t>(DType::kUInt8, static_cast<uint8_t>(p.zero_point));
    const std::string q = fresh_name(g_, t + "_quantized"), dq = fresh_name(g_, t + "_dequantized");
    *dequantized = dq;
    passes::rename_uses(g_, t, dq);
    std::string source = t;
    const ir::Node* clamp = producer(t);
    const auto bounds = clamp ? passes::epilogue::clamp_bounds(passes::GraphIndex(g_), *clamp) : std::nullopt;
    const bool drop = bounds && !passes::is_graph_output(g_, t) && single_reader(clamp->inputs[0]) &&
                      passes::epilogue::clamp_is_saturation(bounds->first, bounds->second, p.scale, p.zero_point,
                                                            is_signed ? DType::kInt8 : DType::kUInt8);
    if (drop) {
      source = clamp->inputs[0];
      dropped_.insert(t);
    }
    added_.push_back(make_node(q, "QuantizeLinear", {source, s, z}, {q}));
    added_.push_back(make_node(dq, "DequantizeLinear", {q, s, z}, {dq}));
    return drop;
  }

  // Appends what was added, without the dropped clamps.
  void finish() {
    std::erase_if(g_.nodes, [&](const ir::Node& n) { return n.outputs.size() == 1 && dropped_.count(n.outputs[0]); });
    for (ir::Node& n : added_) g_.nodes.push_back(std::move(n));
    added_.clear();
  }

 private:
  const ir::Node* producer(const std::string& v) const {
    for (const ir::Node& n : g_.nodes)
      if (std::find(n.outputs.begin(), n.outputs.end(), v) != n.outputs.end()) return &n;
    return nullptr;
  }
  bool single_reader(const std::string& v) const {
    const auto uses = passes::use_counts(g_);
    auto it = uses.find(v);
    return it != uses.end() && it->second == 1;
  }

  ir::Graph& g_;
  std::vector<ir::Node> added_;
  std::set<std::string> dropped_;  // outputs of the clamps that went
};

}  // namespace

Status write_qdq(ir::Model& model, const Plan& plan, const std::map<std::string, QuantParams>& params,
                 const QuantizeOptions& options, QuantizeReport* report,
                 std::map<std::string, std::string>* dequantized) {
  ir::Graph& g = model.graph;
  Writer writer(g);
  std::set<std::string> replaced;  // float weights and biases, dropped at the end unless read elsewhere
  // Weights and biases first: their readers are the plan's node indices, which stay valid until
  // finish() appends and erases.
  for (const QuantizedNode& qn : plan.nodes) {
    const std::string x = g.nodes[qn.node].inputs[0];
    const QuantParams& xp = params.at(x);
    const std::string w_name = g.nodes[qn.node].inputs[qn.weight_input];
    const Tensor* w = passes::constant_value(g, w_name);
    if (!w) return Status::error("quantize: the weights " + w_name + " are not constant");
    QuantizedWeight qw = quantize_weight(*w, qn.weight_axis, options.per_channel, options.reduce_range ? 63.0f : 127.0f);
    replaced.insert(w_name);
    const Tensor w_scale = qw.scale;
    g.nodes[qn.node].inputs[qn.weight_input] = writer.dequantized(w_name, std::move(qw), qn.weight_axis);
    if (qn.bias_input >= 0) {
      const std::string b_name = g.nodes[qn.node].inputs[static_cast<size_t>(qn.bias_input)];
      const Tensor* b = passes::constant_value(g, b_name);
      if (!b) return Status::error("quantize: the bias " + b_name + " is not constant");
      replaced.insert(b_name);
      g.nodes[qn.node].inputs[static_cast<size_t>(qn.bias_input)] =
          writer.dequantized(b_name, quantize_bias(*b, xp.scale, w_scale), 0);
    }
  }
  for (const std::string& t : plan.points)
    report->removed_clamps += writer.activation(t, params.at(t), options.signed_activations, &(*dequantized)[t]);
  report->quantized_tensors = static_cast<int64_t>(plan.points.size());
  writer.finish();
  passes::drop_unread_initializers(g, replaced);
  return Status::ok();
}

}  // namespace kiln::quantize
