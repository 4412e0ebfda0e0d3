// Removes ops that change nothing, judged by inferred types and shapes (Cast to the same type,
// reshapes to the same shape, identity Transpose/Pad/Slice, x+0, x*1 ...), and shortens chains:
// reshape-like ops feeding a Reshape, Transpose of a Transpose. Top-level graph only.
#include "ir/shape_inference.h"
#include "passes/graph_edit.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

using ir::Dims;

bool is_reshape_like(const ir::Node& n) {
  return n.domain.empty() && (n.op_type == "Reshape" || n.op_type == "Flatten" ||
                              n.op_type == "Squeeze" || n.op_type == "Unsqueeze");
}

std::optional<std::vector<int64_t>> int_values(const Tensor* t) {
  if (!t) return std::nullopt;
  std::vector<int64_t> v(static_cast<size_t>(t->numel()));
  for (int64_t i = 0; i < t->numel(); ++i) {
    if (t->dtype() == DType::kInt64)
      v[i] = t->data<int64_t>()[i];
    else if (t->dtype() == DType::kInt32)
      v[i] = t->data<int32_t>()[i];
    else
      return std::nullopt;
  }
  return v;
}

// Every element equals `x` (numeric types only).
bool all_equal(const Tensor& t, double x) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v;
    switch (t.dtype()) {
      case DType::kFloat32:
        v = t.data<float>()[i];
        break;
      case DType::kFloat64:
        v = t.data<double>()[i];
        break;
      case DType::kInt64:
        v = static_cast<double>(t.data<int64_t>()[i]);
        break;
      case DType::kInt32:
        v = t.data<int32_t>()[i];
        break;
      default:
        return false;
    }
    if (v != x) return false;
  }
  return true;
}

class RedundantOps : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    types_ = &ctx.types();
    if (!types_->inferred) return 0;
    opset_ = model.opset("");
    return simplify(model.graph);
  }

 private:
  const ValueTypes* types_ = nullptr;
  int64_t opset_ = 0;

  const ir::TypeInfo* ranked(const std::string& name) const {
    const ir::TypeInfo* t = types_->tensor(name);
    return t && t->has_shape ? t : nullptr;
  }
  // Provably the same type and shape.
  bool same_type(const std::string& a, const std::string& b) const {
    const ir::TypeInfo* x = ranked(a);
    const ir::TypeInfo* y = ranked(b);
    if (!x || !y || x->dtype != y->dtype || x->dtype == DType::kUndefined ||
        x->shape.size() != y->shape.size())
      return false;
    for (size_t i = 0; i < x->shape.size(); ++i)
      if (!ir::same_dim(x->shape[i], y->shape[i])) return false;
    return true;
  }

  int64_t simplify(ir::Graph& g) {
    std::map<std::string, size_t> producer;
    std::map<std::string, std::string> alias;  // removed output -> the value readers now read
    std::vector<bool> drop(g.nodes.size(), false);
    int64_t rewrites = 0;
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      ir::Node& n = g.nodes[k];
      for (auto& in : n.inputs) {
        auto it = alias.find(in);
        if (it != alias.end()) in = it->second;
      }
      if (n.domain.empty() && n.outputs.size() >= 1 && !n.outputs[0].empty()) {
        if (rewire(g, n, producer)) ++rewrites;
        if (!is_graph_output(g, n.outputs[0])) {
          if (auto src = passthrough(g, n, producer)) {
            alias[n.outputs[0]] = *src;
            drop[k] = true;
            ++rewrites;
            continue;
          }
        }
      }
      for (size_t i = 0; i < n.outputs.size(); ++i)
        if (!n.outputs[i].empty()) producer[n.outputs[i]] = k;
    }
    if (alias.empty()) return rewrites;
    std::vector<ir::Node> kept;
    for (size_t k = 0; k < g.nodes.size(); ++k)
      if (!drop[k]) kept.push_back(std::move(g.nodes[k]));
    g.nodes = std::move(kept);
    for (const auto& [from, to] : alias) rename_uses(g, from, to);  // subgraph reads
    return rewrites;
  }

  const ir::Node* producer_of(const ir::Graph& g, const std::map<std::string, size_t>& producer,
                              const std::string& v) const {
    auto it = producer.find(v);
    return it == producer.end() ? nullptr : &g.nodes[it->second];
  }

  // A constant Reshape target that spells the input's own shape: each entry the same known dim
  // or 0 (copy), and at most one -1, which then stands for the one remaining dim.
  bool reshape_keeps_shape(const ir::Graph& g, const ir::Node& n) const {
    const ir::TypeInfo* t = ranked(n.inputs[0]);
    auto shape = n.has_input(1) ? int_values(constant_value(g, n.inputs[1])) : std::nullopt;
    if (!t || !shape || shape->size() != t->shape.size()) return false;
    const bool allowzero = n.attr_int("allowzero", 0) != 0;
    int wildcards = 0;
    for (size_t i = 0; i < shape->size(); ++i) {
      const int64_t d = (*shape)[i];
      if (d == -1)
        ++wildcards;
      else if (d == 0 && !allowzero)
        continue;
      else if (!t->shape[i].known() || t->shape[i].value != d)
        return false;
    }
    return wildcards <= 1;
  }

  // The value `n`'s first output always equals, when `n` changes nothing; nullopt otherwise.
  std::optional<std::string> passthrough(const ir::Graph& g, const ir::Node& n,
                                         const std::map<std::string, size_t>& producer) const {
    if (n.inputs.empty() || n.inputs[0].empty()) return std::nullopt;
    const std::string& op = n.op_type;
    const std::string& x = n.inputs[0];
    const std::string& y = n.outputs[0];
    for (size_t i = 1; i < n.outputs.size(); ++i)
      if (!n.outputs[i].empty()) return std::nullopt;
    if (op == "Cast" || op == "Expand" || is_reshape_like(n)) {
      if (same_type(x, y) || (op == "Reshape" && reshape_keeps_shape(g, n))) return x;
      // A chain of reshapes back to the shape it started from.
      if (is_reshape_like(n))
        for (const ir::Node* p = producer_of(g, producer, x);
             p && is_reshape_like(*p) && p->has_input(0);
             p = producer_of(g, producer, p->inputs[0]))
          if (same_type(p->inputs[0], y)) return p->inputs[0];
      return std::nullopt;
    }
    if (op == "Transpose") {
      const ir::TypeInfo* t = ranked(x);
      std::vector<int64_t> perm = n.attr_ints("perm");
      if (!n.has_attr("perm") && t && t->shape.size() <= 1) return x;
      for (size_t i = 0; i < perm.size(); ++i)
        if (perm[i] != static_cast<int64_t>(i)) return std::nullopt;
      return n.has_attr("perm") ? std::optional<std::string>(x) : std::nullopt;
    }
    if (op == "Slice") {
      // Step 1 everywhere and an output as long as the input: the slice is everything.
      if (n.has_input(4)) {
        auto steps = int_values(constant_value(g, n.inputs[4]));
        if (!steps) return std::nullopt;
        for (int64_t s : *steps)
          if (s != 1) return std::nullopt;
      }
      return same_type(x, y) ? std::optional<std::string>(x) : std::nullopt;
    }
    if (op == "Pad") {
      std::optional<std::vector<int64_t>> pads;
      if (opset_ >= 11) {
        if (!n.has_input(1)) return std::nullopt;
        pads = int_values(constant_value(g, n.inputs[1]));
      } else {
        pads = n.attr_ints("pads");
      }
      if (!pads) return std::nullopt;
      for (int64_t p : *pads)
        if (p != 0) return std::nullopt;
      return x;
    }
    if ((op == "Add" || op == "Sub" || op == "Mul" || op == "Div") && n.inputs.size() == 2) {
      const double neutral = op == "Add" || op == "Sub" ? 0.0 : 1.0;
      const bool commutes = op == "Add" || op == "Mul";
      for (int side = commutes ? 0 : 1; side < 2; ++side) {
        const Tensor* c = constant_value(g, n.inputs[side]);
        const std::string& other = n.inputs[1 - side];
        if (c && all_equal(*c, neutral) && same_type(other, y)) return other;
      }
    }
    return std::nullopt;
  }

  // Rewires `n` past a producer it makes redundant; true when it did.
  bool rewire(ir::Graph& g, ir::Node& n, const std::map<std::string, size_t>& producer) const {
    if (n.inputs.empty()) return false;
    const ir::Node* p = producer_of(g, producer, n.inputs[0]);
    if (!p || !p->has_input(0)) return false;
    if (n.op_type == "Reshape" && is_reshape_like(*p) && n.has_input(1)) {
      // Reshape reinterprets the data in order: earlier reshapes don't matter, unless a 0 in the
      // shape copies a dim of the intermediate.
      auto shape = int_values(constant_value(g, n.inputs[1]));
      if (!shape) return false;
      if (n.attr_int("allowzero", 0) == 0)
        for (int64_t d : *shape)
          if (d == 0) return false;
      n.inputs[0] = p->inputs[0];
      return true;
    }
    if (n.op_type == "Transpose" && p->op_type == "Transpose" && p->domain.empty()) {
      std::vector<int64_t> p1 = p->attr_ints("perm"), p2 = n.attr_ints("perm");
      if (!p->has_attr("perm") || !n.has_attr("perm") || p1.size() != p2.size()) return false;
      std::vector<int64_t> c(p2.size());
      for (size_t j = 0; j < p2.size(); ++j) {
        if (p2[j] < 0 || p2[j] >= static_cast<int64_t>(p1.size())) return false;
        c[j] = p1[static_cast<size_t>(p2[j])];
      }
      n.inputs[0] = p->inputs[0];
      for (auto& a : n.attrs)
        if (a.name == "perm") a.ints = c;
      return true;  // an identity result is removed by passthrough right after
    }
    if (n.op_type == "Unsqueeze" && p->op_type == "Unsqueeze" && p->domain.empty())
      return merge_unsqueeze(g, n, *p);
    return false;
  }

  std::optional<std::vector<int64_t>> unsqueeze_axes(const ir::Graph& g, const ir::Node& n) const {
    if (opset_ < 13) return n.has_attr("axes") ? std::optional(n.attr_ints("axes")) : std::nullopt;
    return n.has_input(1) ? int_values(constant_value(g, n.inputs[1])) : std::nullopt;
  }

  // Unsqueeze(Unsqueeze(x, a1), a2) is one Unsqueeze of x: a2 names final positions, a1's
  // positions land on the final positions a2 left free, in order.
  bool merge_unsqueeze(ir::Graph& g, ir::Node& n, const ir::Node& p) const {
    auto a1 = unsqueeze_axes(g, p), a2 = unsqueeze_axes(g, n);
    const ir::TypeInfo* t = ranked(p.inputs[0]);
    if (!a1 || !a2 || !t) return false;
    const int64_t r1 = static_cast<int64_t>(t->shape.size() + a1->size());
    const int64_t r2 = r1 + static_cast<int64_t>(a2->size());
    std::vector<bool> inserted2(static_cast<size_t>(r2), false),
        out(static_cast<size_t>(r2), false);
    for (int64_t a : *a2) {
      if (a < 0) a += r2;
      if (a < 0 || a >= r2 || inserted2[a]) return false;
      inserted2[a] = out[a] = true;
    }
    std::vector<int64_t> kept;  // final positions of the intermediate's dims
    for (int64_t k = 0; k < r2; ++k)
      if (!inserted2[k]) kept.push_back(k);
    for (int64_t a : *a1) {
      if (a < 0) a += r1;
      if (a < 0 || a >= r1 || out[kept[a]]) return false;
      out[kept[a]] = true;
    }
    std::vector<int64_t> axes;
    for (int64_t k = 0; k < r2; ++k)
      if (out[k]) axes.push_back(k);
    if (opset_ < 13) {
      n.inputs[0] = p.inputs[0];
      for (auto& at : n.attrs)
        if (at.name == "axes") at.ints = axes;
      return true;
    }
    auto made = Tensor::make(DType::kInt64, {static_cast<int64_t>(axes.size())});
    if (!made) return false;
    Tensor tensor = std::move(*made);
    for (size_t i = 0; i < axes.size(); ++i) tensor.data<int64_t>()[i] = axes[i];
    n.inputs[0] = p.inputs[0];
    std::string name = n.outputs[0] + "_axes";
    for (int i = 1; g.initializers.count(name) || is_graph_input(g, name); ++i)
      name = n.outputs[0] + "_axes" + std::to_string(i);
    g.initializers[name] = std::move(tensor);
    n.inputs[1] = name;
    return true;
  }
};

}  // namespace

KILN_REGISTER_PASS(RedundantOps, "redundant-ops", 1, kSimplify, 50, true);

}  // namespace kiln::passes
