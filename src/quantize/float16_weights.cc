// 16-bit float weight storage (`kiln quantize --precision fp16|bf16`): each float32 weight becomes
// a float16 (or bfloat16) initializer and a Cast back to float32, standard ONNX that every runtime
// loads. The file holds half the bytes; kiln folds the Casts when it loads the model (F16C
// converts a whole weight at a time) and runs the float kernels on the widened values, so the
// cost is the rounding of each weight to 16 bits, which the accuracy guard then measures.
#include <cmath>

#include "core/float_convert.h"
#include "passes/graph_edit.h"
#include "quantize/quantize_internal.h"

namespace kiln::quantize {
namespace {

// Smaller float tensors (biases, norms' scales, shape-like constants) stay float32: they weigh
// little and some are read as shapes or scales.
constexpr int64_t kMinValues = 1024;
constexpr float kFloat16Max = 65504.0f;

// Why `w` stays float32 in `to`, or "" when it can go.
std::string why_float32(const Tensor& w, DType to) {
  if (to != DType::kFloat16) return "";
  const float* d = w.data<float>();
  float top = 0;
  for (int64_t i = 0; i < w.numel(); ++i)
    if (std::isfinite(d[i])) top = std::max(top, std::fabs(d[i]));
  return top > kFloat16Max ? "values beyond float16's range (max |w| " + std::to_string(top) + ")" : "";
}

}  // namespace

Status write_16bit_weights(ir::Model& model, DType to, const QuantizeOptions& options, QuantizeReport* report) {
  ir::Graph& g = model.graph;
  // Initializers some node asked to keep in float keep their bits.
  std::set<std::string> asked;
  for (const ir::Node& n : g.nodes)
    if (asked_float(options, n)) asked.insert(n.inputs.begin(), n.inputs.end());
  std::vector<std::string> names;
  for (const auto& [name, t] : g.initializers)
    if (t.dtype() == DType::kFloat32 && t.numel() >= kMinValues && passes::constant_value(g, name)) names.push_back(name);
  std::vector<ir::Node> widen;
  for (const std::string& name : names) {
    const Tensor w = g.initializers.at(name);
    report->weight_bytes_before += w.nbytes();
    const std::string why = asked.count(name) ? "asked to stay float" : why_float32(w, to);
    if (!why.empty()) {
      report->kept_float.push_back(name + ": " + why);
      report->weight_bytes_after += w.nbytes();
      continue;
    }
    Tensor narrow = Tensor::make_for_overwrite(to, w.shape()).value();
    to == DType::kFloat16 ? floats_to_halves(w.data<float>(), narrow.data<uint16_t>(), w.numel())
                          : floats_to_bfloat16s(w.data<float>(), narrow.data<uint16_t>(), w.numel());
    report->weight_bytes_after += narrow.nbytes();
    const std::string stored = passes::fresh_name(g, name + (to == DType::kFloat16 ? "_fp16" : "_bf16"));
    g.initializers.erase(name);
    g.initializers[stored] = std::move(narrow);
    ir::Node cast = passes::make_node(stored + "_widen", "Cast", {stored}, {name});
    cast.attrs.push_back(ir::Attribute::of_int("to", static_cast<int64_t>(DType::kFloat32)));
    widen.push_back(std::move(cast));
    ++report->quantized_tensors;
  }
  g.nodes.insert(g.nodes.begin(), std::make_move_iterator(widen.begin()), std::make_move_iterator(widen.end()));
  return Status::ok();
}

}  // namespace kiln::quantize
