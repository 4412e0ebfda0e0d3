// Sibling convs become one: 1-D and 3-D Convs reading the same X with the same attributes, group
// 1 and constant float32 weights (an STFT's real and imaginary filter banks) become one Conv
// over their weights (and biases) stacked, whose output channels a Split hands back, so that X
// is laid out and packed once and the product is one GEMM of all the filters (log-mel front
// end: two 257-filter convs over the same second of audio). 2-D convs are left to the
// nchwc-layout pass, which runs them blocked, where a Split would cut the region. Exact: every
// output channel is the same sum of the same products. Top-level graph only.
#include <algorithm>
#include <map>
#include <set>

#include "passes/graph_edit.h"
#include "passes/graph_index.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

// Attributes of plain values (ints, floats, strings), equal name by name.
bool same_attrs(const ir::Node& a, const ir::Node& b) {
  if (a.attrs.size() != b.attrs.size()) return false;
  for (const ir::Attribute& x : a.attrs) {
    const ir::Attribute* y = nullptr;
    for (const ir::Attribute& c : b.attrs)
      if (c.name == x.name) y = &c;
    if (!y || y->type != x.type || y->i != x.i || y->f != x.f || y->s != x.s || y->ints != x.ints ||
        y->floats != x.floats || y->strings != x.strings || x.g || !x.graphs.empty())
      return false;
  }
  return true;
}

// A Conv this pass may stack: group 1, W a float32 constant of rank 3 or 5, B absent or a
// float32 constant of W's output channels, one output.
bool stackable(const ir::Node& n, const GraphIndex& idx) {
  if (!n.domain.empty() || n.op_type != "Conv" || n.outputs.size() != 1 || n.inputs.size() < 2 ||
      n.inputs.size() > 3 || !n.has_input(0) || n.attr_int("group", 1) != 1)
    return false;
  const Tensor* w = idx.constant(n.inputs[1]);
  if (!w || w->dtype() != DType::kFloat32 || (w->rank() != 3 && w->rank() != 5) || w->dim(0) == 0) return false;
  if (!n.has_input(2)) return true;
  const Tensor* b = idx.constant(n.inputs[2]);
  return b && b->dtype() == DType::kFloat32 && b->rank() == 1 && b->dim(0) == w->dim(0);
}

bool same_filters(const Tensor& a, const Tensor& b) {
  return a.rank() == b.rank() && Shape(a.shape().begin() + 1, a.shape().end()) == Shape(b.shape().begin() + 1, b.shape().end());
}

class SiblingConvs : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext&) override {
    ir::Graph& g = model.graph;
    const GraphIndex idx(g);
    // Groups of stackable convs by X, in graph order; the first of a group leads it.
    std::map<std::string, std::vector<const ir::Node*>> by_input;
    for (const ir::Node& n : g.nodes)
      if (stackable(n, idx)) {
        auto& group = by_input[n.inputs[0]];
        if (group.empty() || (same_attrs(*group[0], n) &&
                              same_filters(*idx.constant(group[0]->inputs[1]), *idx.constant(n.inputs[1]))))
          group.push_back(&n);
      }
    std::map<const ir::Node*, std::vector<ir::Node>> replace;  // the leader -> the new nodes
    std::set<const ir::Node*> gone;
    int64_t rewrites = 0;
    for (const auto& [x, group] : by_input) {
      if (group.size() < 2) continue;
      const Tensor& w0 = *idx.constant(group[0]->inputs[1]);
      int64_t m = 0;
      for (const ir::Node* n : group) m += idx.constant(n->inputs[1])->dim(0);
      Shape ws = w0.shape();
      ws[0] = m;
      Tensor w = Tensor::make(DType::kFloat32, ws).value(), b = Tensor::make(DType::kFloat32, {m}).value();
      std::vector<int64_t> sizes;
      int64_t at = 0;
      for (const ir::Node* n : group) {
        const Tensor& wn = *idx.constant(n->inputs[1]);
        std::copy_n(wn.data<float>(), wn.numel(), w.data<float>() + at * (wn.numel() / wn.dim(0)));
        if (n->has_input(2)) std::copy_n(idx.constant(n->inputs[2])->data<float>(), wn.dim(0), b.data<float>() + at);
        sizes.push_back(wn.dim(0));
        at += wn.dim(0);
      }
      const ir::Node& lead = *group[0];
      // New names from the lead's output, unique in the graph: the initializers join it at once,
      // and the stacked output is the only pending name, different for every lead.
      const std::string base = lead.outputs[0];
      const std::string wn = fresh_name(g, base + "_stacked_w");
      g.initializers[wn] = std::move(w);
      const std::string bn = fresh_name(g, base + "_stacked_b");
      g.initializers[bn] = std::move(b);
      ir::Node conv = lead;
      conv.name = base + "_stacked";
      conv.inputs = {x, wn, bn};
      conv.outputs = {fresh_name(g, base + "_stacked")};
      ir::Node split = make_node(base + "_split", "Split", {conv.outputs[0]}, {});
      split.attrs.push_back(ir::Attribute::of_int("axis", 1));
      if (model.opset("") >= 13) {
        const std::string sn = fresh_name(g, base + "_split_sizes");
        Tensor st = Tensor::make(DType::kInt64, {static_cast<int64_t>(sizes.size())}).value();
        std::copy(sizes.begin(), sizes.end(), st.data<int64_t>());
        g.initializers[sn] = std::move(st);
        split.inputs.push_back(sn);
      } else {
        split.attrs.push_back(ir::Attribute::of_ints("split", sizes));
      }
      for (const ir::Node* n : group) {
        split.outputs.push_back(n->outputs[0]);
        gone.insert(n);
      }
      replace[&lead] = {std::move(conv), std::move(split)};
      ++rewrites;
    }
    if (rewrites == 0) return int64_t{0};
    std::vector<ir::Node> out;
    for (ir::Node& n : g.nodes) {
      auto r = replace.find(&n);
      if (r != replace.end()) out.insert(out.end(), r->second.begin(), r->second.end());
      else if (!gone.count(&n)) out.push_back(std::move(n));
    }
    g.nodes = std::move(out);
    return rewrites;
  }
};

}  // namespace

KILN_REGISTER_PASS(SiblingConvs, "sibling-convs", 2, kFuse, 44, true);

}  // namespace kiln::passes
