// A zero Pad of the spatial axes feeding a Conv or an AveragePool becomes the consumer's own pads:
// Conv pads with zeros, and AveragePool counting its pads (count_include_pad = 1) averages the
// padded zeros as the explicit Pad made it do. torchvision's Inception v3 exports each of its
// 3x3 average pools (padding 1) as Pad then AveragePool: the Pad cut the blocked region, and
// the pool ran on plain loops, a fifth of the model's time. Exact; top-level graph only.
#include <algorithm>
#include <optional>

#include "passes/fusions/epilogue_match.h"
#include "passes/graph_edit.h"
#include "passes/graph_index.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

// The spatial pads [begins..., ends...] of a constant-mode zero Pad of a rank-`rank` tensor
// that leaves N and C alone, or nullopt.
std::optional<std::vector<int64_t>> spatial_zero_pads(const ir::Node& pad, const GraphIndex& idx, int64_t opset,
                                                      int64_t rank) {
  if (pad.attr_string("mode", "constant") != "constant") return std::nullopt;
  std::vector<int64_t> pads;
  if (opset >= 11) {
    if (pad.inputs.size() < 2 || !pad.has_input(1) || (pad.inputs.size() > 3 && pad.has_input(3)))
      return std::nullopt;  // axes (opset 18) not handled
    const Tensor* p = idx.constant(pad.inputs[1]);
    if (!p || p->dtype() != DType::kInt64) return std::nullopt;
    pads.assign(p->data<int64_t>(), p->data<int64_t>() + p->numel());
    if (pad.inputs.size() > 2 && pad.has_input(2) && epilogue::scalar_constant(idx, pad.inputs[2]) != 0.0) return std::nullopt;
  } else {
    pads = pad.attr_ints("pads");
    if (pad.attr_float("value", 0.0f) != 0.0f) return std::nullopt;
  }
  if (static_cast<int64_t>(pads.size()) != 2 * rank) return std::nullopt;
  std::vector<int64_t> spatial;
  for (int64_t side = 0; side < 2; ++side)
    for (int64_t a = 0; a < rank; ++a) {
      const int64_t p = pads[static_cast<size_t>(side * rank + a)];
      if (p < 0 || (a < 2 && p != 0)) return std::nullopt;
      if (a >= 2) spatial.push_back(p);
    }
  return spatial;
}

class PadFusion : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext&) override {
    ir::Graph& g = model.graph;
    return rewrite_until_done(g, [&](const GraphIndex& idx, const ir::Node& pad) {
      if (!is_onnx_op(&pad, "Pad") || pad.outputs.size() != 1 || !pad.has_input(0) ||
          is_graph_output(g, pad.outputs[0]))
        return false;
      const ir::Node* user = idx.sole_consumer(pad.outputs[0]);
      const bool conv = is_onnx_op(user, "Conv"), pool = is_onnx_op(user, "AveragePool");
      if ((!conv && !pool) || user->inputs[0] != pad.outputs[0] ||
          user->attr_string("auto_pad", "NOTSET") != "NOTSET")
        return false;
      const size_t axes = user->attr_ints("kernel_shape").size();
      if (axes == 0) return false;
      const auto added = spatial_zero_pads(pad, idx, model.opset(""), static_cast<int64_t>(axes) + 2);
      if (!added) return false;
      std::vector<int64_t> pads = user->attr_ints("pads");
      if (pads.empty()) pads.assign(2 * axes, 0);
      if (pads.size() != 2 * axes) return false;
      bool own_pads = false;
      for (int64_t p : pads) own_pads |= p != 0;
      // A pool that does not count its own pads would average them apart from the Pad's zeros;
      // ceil_mode's extra windows would count differently too.
      if (pool && ((own_pads && user->attr_int("count_include_pad", 0) == 0) || user->attr_int("ceil_mode", 0) != 0))
        return false;
      for (size_t i = 0; i < pads.size(); ++i) pads[i] += (*added)[i];
      ir::Node& u = *std::find_if(g.nodes.begin(), g.nodes.end(), [&](const ir::Node& n) { return &n == user; });
      std::erase_if(u.attrs, [](const ir::Attribute& a) { return a.name == "pads" || a.name == "count_include_pad"; });
      u.attrs.push_back(ir::Attribute::of_ints("pads", pads));
      if (pool) u.attrs.push_back(ir::Attribute::of_int("count_include_pad", 1));
      u.inputs[0] = pad.inputs[0];
      return true;
    });
  }
};

}  // namespace

KILN_REGISTER_PASS(PadFusion, "pad-fusion", 1, kSimplify, 45, true);

}  // namespace kiln::passes
