// -O2 fusion of a squeeze-and-excitation block (GlobalAveragePool -> 1x1 Conv -> activation ->
// 1x1 Conv -> Sigmoid or HardSigmoid -> Mul with the block input) into ai.kiln.SqueezeExcite.
// Runs before conv-epilogue, which would otherwise take the two Convs.
#include "ir/shape_inference.h"
#include "passes/fusions/epilogue_match.h"
#include "passes/graph_edit.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

using namespace epilogue;

// A Conv reading `v` that is a plain matrix-vector product on a [N, C, 1, ...] input: group 1,
// every kernel dim 1, no padding; its weight maps `in_ch` channels to some count (returned).
std::optional<int64_t> pointwise_conv(const ir::Node* n, const std::string& v, const Types& types,
                                      size_t rank, int64_t in_ch) {
  if (!n || !n->domain.empty() || n->op_type != "Conv" || n->inputs.size() < 2 ||
      n->inputs.size() > 3 || n->inputs[0] != v || !n->has_input(1) || n->outputs.size() != 1 ||
      n->inputs[1] == v || (n->has_input(2) && n->inputs[2] == v))
    return std::nullopt;
  if (n->attr_int("group", 1) != 1) return std::nullopt;
  for (int64_t p : n->attr_ints("pads"))
    if (p != 0) return std::nullopt;
  for (int64_t k : n->attr_ints("kernel_shape"))
    if (k != 1) return std::nullopt;
  auto w = types.of(n->inputs[1]);
  if (!w || w->dtype != DType::kFloat32) return std::nullopt;
  auto ws = w->static_shape();
  if (!ws || ws->size() != rank || (*ws)[1] != in_ch) return std::nullopt;
  for (size_t i = 2; i < rank; ++i)
    if ((*ws)[i] != 1) return std::nullopt;
  if (n->has_input(2)) {
    auto b = types.of(n->inputs[2]);
    auto bs = b ? b->static_shape() : std::nullopt;
    if (!bs || b->dtype != DType::kFloat32 || bs->size() != 1 || (*bs)[0] != (*ws)[0])
      return std::nullopt;
  }
  return (*ws)[0];
}

class SqueezeExcite : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    if (!has_op(model.graph, {"GlobalAveragePool"})) return int64_t{0};
    return fuse_sweep(model, ctx, [](const ir::Graph& g, const GraphIndex& idx, const Types& types,
                                const ir::Node& n, Rewrites& rw) {
      if (n.domain.empty() && n.op_type == "GlobalAveragePool") fuse(g, idx, types, n, rw);
    });
  }

 private:
  static void fuse(const ir::Graph& g, const GraphIndex& idx, const Types& types,
                   const ir::Node& pool, Rewrites& rw) {
    if (pool.inputs.size() != 1 || pool.outputs.size() != 1 || pool.inputs[0].empty()) return;
    const std::string& x = pool.inputs[0];
    auto tx = types.of(x);
    if (!tx || tx->dtype != DType::kFloat32 || !tx->has_shape || tx->shape.size() < 3 ||
        !tx->shape[1].known())
      return;
    const size_t rank = tx->shape.size();
    const int64_t channels = tx->shape[1].value;
    std::vector<const ir::Node*> nodes{&pool};
    const ir::Node* c1 = sole_consumer(idx, pool.outputs[0], rw.drop);
    auto reduced = pointwise_conv(c1, pool.outputs[0], types, rank, channels);
    if (!reduced) return;
    nodes.push_back(c1);
    std::string v = c1->outputs[0];
    auto act = match_activation(g, idx, v, rw.drop);
    if (act) {
      nodes.insert(nodes.end(), act->nodes.begin(), act->nodes.end());
      v = act->output;
    }
    const ir::Node* c2 = sole_consumer(idx, v, rw.drop);
    auto expanded = pointwise_conv(c2, v, types, rank, *reduced);
    if (!expanded || *expanded != channels) return;
    nodes.push_back(c2);
    auto gate = match_activation(g, idx, c2->outputs[0], rw.drop);
    if (!gate || gate->nodes.size() != 1 ||
        (gate->act.name != "Sigmoid" && gate->act.name != "HardSigmoid"))
      return;
    nodes.push_back(gate->nodes[0]);
    const ir::Node* mul = sole_consumer(idx, gate->output, rw.drop);
    if (!mul || !mul->domain.empty() || mul->op_type != "Mul" || mul->inputs.size() != 2 ||
        mul->outputs.size() != 1)
      return;
    const std::string other = mul->inputs[0] == gate->output ? mul->inputs[1] : mul->inputs[0];
    if (other != x) return;
    nodes.push_back(mul);

    ir::Node f;
    f.name = c1->name.empty() ? pool.name : c1->name;
    f.op_type = "SqueezeExcite";
    f.domain = "ai.kiln";
    f.inputs = {x, c1->inputs[1], c1->has_input(2) ? c1->inputs[2] : "", c2->inputs[1],
                c2->has_input(2) ? c2->inputs[2] : ""};
    trim_inputs(f);
    f.outputs = {mul->outputs[0]};
    if (act) add_activation_attrs(f, act->act);
    add_activation_attrs(f, gate->act, "gate", "gate_params");
    rw.replace(nodes, std::move(f));
  }
};

}  // namespace

KILN_REGISTER_PASS(SqueezeExcite, "squeeze-excite", 2, kFuse, 40, false);

}  // namespace kiln::passes
