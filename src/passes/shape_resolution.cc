// Shape resolution (top-level graph): shape computations (Shape -> Gather -> Concat ...) whose
// value inference knows, fully or symbolically, become constants, so shape subgraphs die while
// named dims stay dynamic: Reshape gets 0 (copy) and -1, Expand 1, Slice ends INT64_MAX.
#include <limits>

#include "ir/shape_inference.h"
#include "passes/graph_edit.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

using ir::Dim;
using ir::Dims;

bool is_symbolic(const Dim& d) { return !d.known() && !d.symbol.empty(); }

// An int64 (or int32) 1-D or 0-D tensor holding `v`; nullopt for other types.
std::optional<Tensor> make_int_tensor(DType dtype, bool scalar, const std::vector<int64_t>& v) {
  if (dtype != DType::kInt64 && dtype != DType::kInt32) return std::nullopt;
  if (scalar && v.size() != 1) return std::nullopt;
  Shape shape = scalar ? Shape{} : Shape{static_cast<int64_t>(v.size())};
  auto t = Tensor::make(dtype, shape);
  if (!t) return std::nullopt;
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::kInt64) {
      t->data<int64_t>()[i] = v[i];
    } else {
      if (v[i] > std::numeric_limits<int32_t>::max() || v[i] < std::numeric_limits<int32_t>::min())
        return std::nullopt;
      t->data<int32_t>()[i] = static_cast<int32_t>(v[i]);
    }
  }
  return std::move(*t);
}

class ShapeResolution : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    // Values from a failed inference are not trusted.
    types_ = &ctx.types();
    if (!types_->inferred) return 0;
    ir::Graph& g = model.graph;
    names_.clear();
    for (const auto& [name, t] : g.initializers) names_.insert(name);
    for (const auto& vi : g.inputs) names_.insert(vi.name);
    for (const auto& n : g.nodes)
      for (const auto& o : n.outputs) names_.insert(o);

    int64_t rewrites = 0;
    // Operand rewrites first (they need the symbolic value and the consumer's context), then
    // fully known values become initializers.
    for (auto& n : g.nodes) {
      if (!n.domain.empty()) continue;
      if (n.op_type == "Reshape")
        rewrites += resolve_reshape(g, n);
      else if (n.op_type == "Expand")
        rewrites += resolve_expand(g, n);
      else if (n.op_type == "Slice")
        rewrites += resolve_slice(g, n);
    }
    rewrites += materialize_known(g);
    return rewrites;
  }

 private:
  const ValueTypes* types_ = nullptr;
  std::set<std::string> names_;

  const ir::TypeInfo* type_of(const std::string& name) const { return types_->tensor(name); }
  const Dims* value_of(const ir::Graph& g, const std::string& name) const {
    if (name.empty() || constant_value(g, name)) return nullptr;  // constants need no resolving
    auto it = types_->values.find(name);
    return it == types_->values.end() ? nullptr : &it->second;
  }

  std::string fresh_name(const std::string& base) {
    std::string name = base + "_resolved";
    for (int i = 1; names_.count(name); ++i) name = base + "_resolved" + std::to_string(i);
    names_.insert(name);
    return name;
  }

  // Points input `i` of `n` at a new int64 initializer holding `v`.
  bool replace_input(ir::Graph& g, ir::Node& n, size_t i, const std::vector<int64_t>& v) {
    const ir::TypeInfo* t = type_of(n.inputs[i]);
    const DType dt = t ? t->dtype : DType::kInt64;
    auto tensor = make_int_tensor(dt, false, v);
    if (!tensor) return false;
    const std::string name = fresh_name(n.inputs[i]);
    g.initializers[name] = std::move(*tensor);
    n.inputs[i] = name;
    return true;
  }

  int64_t resolve_reshape(ir::Graph& g, ir::Node& n) {
    if (!n.has_input(1)) return 0;
    const Dims* v = value_of(g, n.inputs[1]);
    const ir::TypeInfo* data = type_of(n.inputs[0]);
    if (!v || !data || !data->has_shape) return 0;
    const bool allowzero = n.attr_int("allowzero", 0) != 0;
    const Dims& in = data->shape;
    std::vector<int64_t> out;
    int unresolved = 0;
    bool has_zero = false, has_copy = false;
    for (size_t i = 0; i < v->size(); ++i) {
      const Dim& d = (*v)[i];
      if (d.known()) {
        out.push_back(d.value);
        has_zero |= d.value == 0;
      } else if (!allowzero && is_symbolic(d) && i < in.size() && ir::same_dim(in[i], d)) {
        out.push_back(0);
        has_copy = true;
      } else {
        out.push_back(-1);
        ++unresolved;
      }
    }
    // Nothing symbolic to resolve would mean the value is fully known: materialize_known does it.
    if (unresolved > 1 || (!has_copy && unresolved == 0)) return 0;
    if (allowzero && has_zero && unresolved) return 0;  // -1 with a literal 0 is invalid there
    return replace_input(g, n, 1, out) ? 1 : 0;
  }

  // Expand broadcasts: a shape entry equal to the input's own dim there may as well be 1.
  int64_t resolve_expand(ir::Graph& g, ir::Node& n) {
    if (!n.has_input(1)) return 0;
    const Dims* v = value_of(g, n.inputs[1]);
    const ir::TypeInfo* data = type_of(n.inputs[0]);
    if (!v || !data || !data->has_shape) return 0;
    const Dims& in = data->shape;
    std::vector<int64_t> out;
    bool resolved = false;
    const size_t rank = std::max(in.size(), v->size());
    for (size_t k = 0; k < v->size(); ++k) {
      const Dim& d = (*v)[k];
      if (d.known()) {
        out.push_back(d.value);
        continue;
      }
      const size_t pos = rank - v->size() + k;  // aligned from the right
      const size_t off = rank - in.size();
      if (pos < off || !is_symbolic(d) || !ir::same_dim(in[pos - off], d)) return 0;
      out.push_back(1);
      resolved = true;
    }
    return resolved && replace_input(g, n, 1, out) ? 1 : 0;
  }

  // Slice ends equal to the dim's own size (Shape(x)[k]) take everything: INT64_MAX.
  int64_t resolve_slice(ir::Graph& g, ir::Node& n) {
    if (!n.has_input(2)) return 0;
    const Dims* ends = value_of(g, n.inputs[2]);
    const ir::TypeInfo* data = type_of(n.inputs[0]);
    if (!ends || !data || !data->has_shape) return 0;
    const int64_t rank = static_cast<int64_t>(data->shape.size());
    std::vector<int64_t> axes;
    if (n.has_input(3)) {
      const Tensor* a = constant_value(g, n.inputs[3]);
      if (!a || a->numel() != static_cast<int64_t>(ends->size())) return 0;
      for (int64_t k = 0; k < a->numel(); ++k) {
        int64_t ax = a->dtype() == DType::kInt64   ? a->data<int64_t>()[k]
                     : a->dtype() == DType::kInt32 ? a->data<int32_t>()[k]
                                                   : rank;
        if (ax < 0) ax += rank;
        if (ax < 0 || ax >= rank) return 0;
        axes.push_back(ax);
      }
    } else {
      for (size_t k = 0; k < ends->size(); ++k) axes.push_back(static_cast<int64_t>(k));
    }
    if (n.has_input(4)) {  // with a negative step, INT64_MAX would mean something else
      const Tensor* s = constant_value(g, n.inputs[4]);
      if (!s || s->dtype() != DType::kInt64) return 0;
      for (int64_t k = 0; k < s->numel(); ++k)
        if (s->data<int64_t>()[k] <= 0) return 0;
    }
    std::vector<int64_t> out;
    bool resolved = false;
    for (size_t k = 0; k < ends->size(); ++k) {
      const Dim& d = (*ends)[k];
      if (d.known()) {
        out.push_back(d.value);
      } else if (k < axes.size() && is_symbolic(d) && ir::same_dim(data->shape[axes[k]], d)) {
        out.push_back(std::numeric_limits<int64_t>::max());
        resolved = true;
      } else {
        return 0;
      }
    }
    return resolved && replace_input(g, n, 2, out) ? 1 : 0;
  }

  // Node outputs whose every element inference knows become initializers.
  int64_t materialize_known(ir::Graph& g) {
    int64_t made = 0;
    std::vector<std::pair<std::string, std::string>> renames;
    for (const auto& n : g.nodes) {
      for (const auto& o : n.outputs) {
        if (o.empty() || is_graph_output(g, o) || g.initializers.count(o)) continue;
        auto it = types_->values.find(o);
        const ir::TypeInfo* t = type_of(o);
        if (it == types_->values.end() || !t || !t->has_shape || t->shape.size() > 1) continue;
        std::vector<int64_t> v;
        bool known = true;
        for (const Dim& d : it->second) {
          known = known && d.known();
          v.push_back(d.value);
        }
        if (!known) continue;
        if (t->shape.size() == 1 &&
            (!t->shape[0].known() || t->shape[0].value != static_cast<int64_t>(v.size())))
          continue;
        auto tensor = make_int_tensor(t->dtype, t->shape.empty(), v);
        if (!tensor) continue;
        const std::string name = fresh_name(o);
        g.initializers[name] = std::move(*tensor);
        renames.emplace_back(o, name);
      }
    }
    for (const auto& [from, to] : renames) {
      rename_uses(g, from, to);
      ++made;
    }
    return made;
  }
};

}  // namespace

KILN_REGISTER_PASS(ShapeResolution, "shape-resolution", 1, kSimplify, 30, true);

}  // namespace kiln::passes
