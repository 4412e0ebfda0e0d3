// Attention fusion's tracing (attention_trace.h): operand layouts as groups of logical axes, and
// the walk from a Q/K/V operand back to its projection.
#include "passes/fusions/attention_trace.h"

#include <algorithm>
#include <tuple>

namespace kiln::passes::attention {

const ir::TypeInfo* type_of(const Types& types, const std::string& v) {
  auto it = types.find(v);
  return it == types.end() || !it->second || it->second->kind != ir::TypeInfo::Kind::kTensor ||
                 !it->second->has_shape
             ? nullptr
             : it->second;
}

// A float32 constant holding one element.
static std::optional<double> scalar_constant(const GraphIndex& idx, const std::string& v) {
  const Tensor* t = idx.constant(v);
  // Rank <= 1 so that the scaling cannot broadcast its operand to a higher rank.
  if (!t || t->dtype() != DType::kFloat32 || t->numel() != 1 || t->rank() > 1) return std::nullopt;
  return static_cast<double>(t->data<float>()[0]);
}

// Mul/Div of `n` by a scalar constant: the other operand and the factor, or nullopt.
std::optional<std::pair<std::string, double>> scaling(const GraphIndex& idx, const ir::Node* n) {
  if (!n || !n->domain.empty() || n->inputs.size() != 2) return std::nullopt;
  if (n->op_type == "Div") {
    auto c = scalar_constant(idx, n->inputs[1]);
    if (!c || *c == 0) return std::nullopt;
    return std::make_pair(n->inputs[0], 1.0 / *c);
  }
  if (n->op_type != "Mul") return std::nullopt;
  for (int i = 0; i < 2; ++i)
    if (auto c = scalar_constant(idx, n->inputs[i])) return std::make_pair(n->inputs[1 - i], *c);
  return std::nullopt;
}

// The integers of a constant or of a value shape inference worked out (Shape-derived sizes).
static std::optional<std::vector<int64_t>> int_values(const GraphIndex& idx, const Values& values,
                                                      const std::string& v) {
  if (const Tensor* t = idx.constant(v)) {
    if (t->dtype() != DType::kInt64 && t->dtype() != DType::kInt32) return std::nullopt;
    std::vector<int64_t> out;
    for (int64_t i = 0; i < t->numel(); ++i)
      out.push_back(t->dtype() == DType::kInt64 ? t->data<int64_t>()[i] : t->data<int32_t>()[i]);
    return out;
  }
  auto it = values.find(v);
  if (it == values.end()) return std::nullopt;
  std::vector<int64_t> out;
  for (const auto& d : it->second) {
    if (!d.known()) return std::nullopt;
    out.push_back(d.value);
  }
  return out;
}

static std::optional<std::pair<int64_t, int64_t>> last_axis_range(
    const ir::Node& n, const GraphIndex& idx, const Types& types, const Values& values,
    const std::string& out, int64_t cols) {
  const ir::TypeInfo* in = type_of(types, n.inputs[0]);
  if (!in) return std::nullopt;
  const int64_t rank = static_cast<int64_t>(in->shape.size());
  auto is_last = [&](int64_t axis) { return axis == -1 || axis == rank - 1; };
  if (n.op_type == "Slice") {
    if (n.inputs.size() < 3) return std::nullopt;
    auto starts = int_values(idx, values, n.inputs[1]);
    auto ends = int_values(idx, values, n.inputs[2]);
    auto axes = n.has_input(3) ? int_values(idx, values, n.inputs[3]) : std::vector<int64_t>{0};
    auto steps = n.has_input(4) ? int_values(idx, values, n.inputs[4]) : std::vector<int64_t>{1};
    if (!starts || !ends || !axes || !steps) return std::nullopt;
    if (starts->size() != 1 || ends->size() != 1 || axes->size() != 1 || steps->size() != 1)
      return std::nullopt;
    if (!is_last((*axes)[0]) || (*steps)[0] != 1) return std::nullopt;
    auto clamp = [&](int64_t v) { return std::clamp(v < 0 ? v + cols : v, int64_t{0}, cols); };
    const int64_t b = clamp((*starts)[0]), e = clamp((*ends)[0]);
    if (b >= e) return std::nullopt;
    return std::make_pair(b, e);
  }
  if (n.op_type == "Split") {
    if (!is_last(n.attr_int("axis", 0))) return std::nullopt;
    std::vector<int64_t> sizes = n.attr_ints("split");
    if (n.has_input(1)) {
      auto s = int_values(idx, values, n.inputs[1]);
      if (!s) return std::nullopt;
      sizes = *s;
    }
    const int64_t parts = static_cast<int64_t>(n.outputs.size());
    if (sizes.empty()) {
      if (n.has_attr("num_outputs") || cols % parts != 0) return std::nullopt;
      sizes.assign(static_cast<size_t>(parts), cols / parts);
    }
    int64_t b = 0;
    for (size_t i = 0; i < sizes.size() && i < n.outputs.size(); ++i) {
      if (n.outputs[i] == out) return std::make_pair(b, b + sizes[i]);
      b += sizes[i];
    }
  }
  return std::nullopt;
}

// kiln's DynamicQuantMatMul with nothing after its bias (no epilogue attributes or residual;
// row_bits alone).
static bool is_dynamic_quant_projection(const ir::Node* n) {
  return n && n->domain == "ai.kiln" && n->op_type == "DynamicQuantMatMul" && n->inputs.size() >= 3 &&
         n->inputs.size() <= 4 && n->outputs.size() == 1 &&
         std::all_of(n->attrs.begin(), n->attrs.end(), [](const ir::Attribute& a) { return a.name == "row_bits"; });
}

// The projection `b.operand` comes from, filled into b (x, w, w_scale, bias, columns, roots), or
// false.
static bool find_projection(const GraphIndex& idx, const Types& types, const Values& values, Branch& b) {
  std::string v = b.operand;
  const ir::Node* n = idx.producer(v);
  const ir::Node* cut = nullptr;
  if (is_onnx_op(n, "Slice") || is_onnx_op(n, "Split")) {
    cut = n;
    v = n->inputs[0];
    n = idx.producer(v);
  }
  if (is_onnx_op(n, "Add")) {
    for (int i = 0; i < 2 && !b.bias; ++i) {
      const ir::Node* mm = idx.producer(n->inputs[1 - i]);
      if ((is_onnx_op(mm, "MatMul") || is_dynamic_quant_projection(mm)) && idx.constant(n->inputs[i])) {
        b.bias = idx.constant(n->inputs[i]);
        b.roots.push_back(n);
        n = mm;
      }
    }
    if (!b.bias) return false;
  }
  const bool int8 = is_dynamic_quant_projection(n);
  if (!int8 && !is_onnx_op(n, "MatMul")) return false;
  b.roots.push_back(n);
  b.w = idx.constant(n->inputs[1]);
  b.x = n->inputs[0];
  if (!b.w || b.w->dtype() != (int8 ? DType::kInt8 : DType::kFloat32) || b.w->rank() != 2) return false;
  const int64_t cols = b.w->dim(1);
  if (int8) {
    b.w_scale = idx.constant(n->inputs[2]);
    b.row_bits = n->attr_int("row_bits", 8);
    if (!b.w_scale || b.w_scale->dtype() != DType::kFloat32 || (b.w_scale->numel() != 1 && b.w_scale->numel() != cols))
      return false;
    if (n->inputs.size() > 3 && !n->inputs[3].empty()) {  // its own bias, and no Add after it
      if (b.bias) return false;
      b.bias = idx.constant(n->inputs[3]);
      if (!b.bias) return false;
    }
  }
  if (b.bias) {
    // Rank <= 3: the bias must not broadcast the [A0, A1, cols] projection to a higher rank.
    if (b.bias->dtype() != DType::kFloat32 || b.bias->numel() != cols || b.bias->rank() > 3 ||
        b.bias->shape().back() != cols)
      return false;
  }
  b.end = cols;
  if (cut) {
    auto r = last_axis_range(*cut, idx, types, values, b.operand, cols);
    if (!r) return false;
    std::tie(b.begin, b.end) = *r;
    b.roots.push_back(cut);
  }
  return true;
}

Branch trace_branch(const GraphIndex& idx, const Types& types, const Values& values, std::string v,
                    bool allow_scale) {
  Branch b;
  std::vector<const ir::Node*> rev;
  for (const ir::Node* n = idx.producer(v);; n = idx.producer(v)) {
    if (is_onnx_op(n, "Transpose") || is_onnx_op(n, "Reshape")) {
      rev.push_back(n);
      v = n->inputs[0];
      continue;
    }
    if (auto s = allow_scale ? scaling(idx, n) : std::nullopt) {
      b.scale *= s->second;
      rev.push_back(n);
      v = s->first;
      continue;
    }
    break;
  }
  b.operand = v;
  b.path.assign(rev.rbegin(), rev.rend());
  if (!find_projection(idx, types, values, b)) {
    Branch unprojected;
    unprojected.operand = b.operand;
    unprojected.path = std::move(b.path);
    unprojected.scale = b.scale;
    return unprojected;
  }
  return b;
}

// Whether a Reshape output dim is one the atoms cannot name: unknown, or a symbol none of the
// four atom sizes has (exporters name dims they could not infer, "unk__29" for batch x heads).
// A Reshape keeps the element count, so one such dim is whatever the other dims leave.
static bool opaque(const ir::Dim& d, const ir::Dim* size) {
  return !d.known() && std::none_of(size, size + 4, [&](const ir::Dim& a) { return ir::same_dim(d, a); });
}

// Whether `atoms` (consecutive, row-major) can form one output dim `want`.
static bool group_fits(const ir::Dim& want, const Group& atoms, const ir::Dim* size) {
  if (opaque(want, size)) return true;  // the one opaque dim takes the rest
  if (atoms.size() == 1 && ir::same_dim(want, size[atoms[0]])) return true;
  if (!want.known()) return false;
  int64_t p = 1;
  for (int a : atoms) {
    if (!size[a].known()) return false;
    p *= size[a].value;
  }
  return p == want.value;
}

// Splits the atoms (in order) into out.size() consecutive non-empty groups matching `out`.
static bool partition(const Group& atoms, const std::vector<ir::Dim>& out, size_t ai, size_t oi,
                      const ir::Dim* size, Layout& result) {
  if (oi == out.size()) return ai == atoms.size();
  for (size_t e = ai + 1; e <= atoms.size(); ++e) {
    Group g(atoms.begin() + static_cast<long>(ai), atoms.begin() + static_cast<long>(e));
    if (!group_fits(out[oi], g, size)) continue;
    result.push_back(g);
    if (partition(atoms, out, e, oi + 1, size, result)) return true;
    result.pop_back();
  }
  return false;
}

// Replays one Transpose or Reshape (or a scaling, which keeps the layout) on a layout.
bool apply(const ir::Node& n, const Types& types, const ir::Dim* size, Layout& layout) {
  if (n.op_type == "Transpose") {
    std::vector<int64_t> perm = n.attr_ints("perm");
    if (perm.empty())
      for (int64_t i = static_cast<int64_t>(layout.size()) - 1; i >= 0; --i) perm.push_back(i);
    if (perm.size() != layout.size()) return false;
    Layout out;
    for (int64_t p : perm) {
      if (p < 0 || p >= static_cast<int64_t>(layout.size())) return false;
      out.push_back(layout[static_cast<size_t>(p)]);
    }
    layout = std::move(out);
    return true;
  }
  if (n.op_type == "Reshape") {
    const ir::TypeInfo* t = type_of(types, n.outputs[0]);
    if (!t) return false;
    int unknown = 0;
    for (const auto& d : t->shape) unknown += opaque(d, size);
    if (unknown > 1) return false;
    Group atoms;
    for (const auto& g : layout) atoms.insert(atoms.end(), g.begin(), g.end());
    Layout out;
    if (!partition(atoms, t->shape, 0, 0, size, out)) return false;
    layout = std::move(out);
    return true;
  }
  return n.op_type == "Mul" || n.op_type == "Div";
}

}  // namespace kiln::passes::attention
