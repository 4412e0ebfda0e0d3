// Expands Gradient nodes into reverse-mode derivative nodes (see gradient.h). Broadcast operands
// get their gradient summed back to their own shape: statically when shapes allow, otherwise
// with Shape/Compress-computed axes.
#include "ir/gradient.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/float_convert.h"

namespace kiln::ir {

namespace {

constexpr const char* kTrainingDomain = "ai.onnx.preview.training";

bool is_gradient(const Node& n) { return n.op_type == "Gradient" && n.domain == kTrainingDomain; }

using DimsOpt = std::optional<std::vector<Dim>>;  // nullopt: rank unknown

struct ValueType {
  DType dtype = DType::kUndefined;
  DimsOpt dims;
};

void collect_names(const Graph& g, std::set<std::string>& out) {
  out.insert(g.name);
  for (const auto& v : g.inputs) out.insert(v.name);
  for (const auto& v : g.outputs) out.insert(v.name);
  for (const auto& v : g.value_info) out.insert(v.name);
  for (const auto& [name, t] : g.initializers) out.insert(name);
  for (const auto& n : g.nodes) {
    out.insert(n.name);
    out.insert(n.inputs.begin(), n.inputs.end());
    out.insert(n.outputs.begin(), n.outputs.end());
    for (const auto& a : n.attrs) {
      if (a.g) collect_names(*a.g, out);
      for (const auto& sg : a.graphs) collect_names(*sg, out);
    }
  }
}

// A prefix no existing name starts with, so every generated name is fresh.
std::string unique_prefix(const Graph& g) {
  std::set<std::string> names;
  collect_names(g, names);
  for (int k = 0;; ++k) {
    const std::string p = "__grad" + std::to_string(k) + "__";
    auto it = names.lower_bound(p);
    if (it == names.end() || it->compare(0, p.size(), p) != 0) return p;
  }
}

bool same_dim(const Dim& a, const Dim& b) {
  if (a.known() && b.known()) return a.value == b.value;
  return !a.known() && !b.known() && !a.symbol.empty() && a.symbol == b.symbol;
}
bool is_one(const Dim& d) { return d.known() && d.value == 1; }

DimsOpt broadcast_dims(const DimsOpt& a, const DimsOpt& b) {
  if (!a || !b) return std::nullopt;
  const size_t r = std::max(a->size(), b->size());
  std::vector<Dim> out(r);
  for (size_t i = 0; i < r; ++i) {
    const bool ha = i + a->size() >= r, hb = i + b->size() >= r;
    if (!ha) {
      out[i] = (*b)[i + b->size() - r];
      continue;
    }
    if (!hb) {
      out[i] = (*a)[i + a->size() - r];
      continue;
    }
    const Dim& da = (*a)[i + a->size() - r];
    const Dim& db = (*b)[i + b->size() - r];
    if (is_one(da))
      out[i] = db;
    else if (is_one(db) || same_dim(da, db))
      out[i] = da;
    else if (da.known())
      out[i] = da;  // a valid model broadcasts to the non-1 known dim
    else if (db.known())
      out[i] = db;
    // else: unknown, left as the default Dim
  }
  return out;
}

ValueType declared_type(const TypeInfo& t) {
  ValueType v;
  if (t.kind != TypeInfo::Kind::kTensor) return v;
  v.dtype = t.dtype;
  if (t.has_shape) v.dims = t.shape;
  return v;
}

Result<Tensor> filled(DType dtype, double value) {
  KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::make(dtype, {1}));
  switch (dtype) {
    case DType::kFloat32:
      *t.data<float>() = static_cast<float>(value);
      break;
    case DType::kFloat64:
      *t.data<double>() = value;
      break;
    case DType::kFloat16:
      *t.data<uint16_t>() = float_to_half(static_cast<float>(value));
      break;
    case DType::kBFloat16:
      *t.data<uint16_t>() = float_to_bfloat16(static_cast<float>(value));
      break;
    case DType::kInt32:
      *t.data<int32_t>() = static_cast<int32_t>(value);
      break;
    case DType::kInt64:
      *t.data<int64_t>() = static_cast<int64_t>(value);
      break;
    default:
      return Status::error(std::string("cannot differentiate values of type ") + dtype_name(dtype));
  }
  return t;
}


Tensor int64_tensor(const std::vector<int64_t>& v, bool scalar) {
  Tensor t =
      Tensor::make(DType::kInt64, scalar ? Shape{} : Shape{static_cast<int64_t>(v.size())}).value();
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

// Builds the derivative nodes of one Gradient node; commits nothing until done.
class Expander {
 public:
  Expander(const Graph& g, const Node& grad, int64_t opset)
      : g_(g), grad_(grad), opset_(opset), prefix_(unique_prefix(g)) {}

  Status run();

  std::vector<Node> nodes;
  std::map<std::string, Tensor> initializers;

 private:
  std::string emit(const std::string& op, std::vector<std::string> inputs,
                   std::vector<Attribute> attrs, const std::string& hint) {
    Node n;
    n.name = prefix_ + "n" + std::to_string(counter_);
    n.op_type = op;
    n.inputs = std::move(inputs);
    n.attrs = std::move(attrs);
    const std::string out = prefix_ + std::to_string(counter_++) + "_" + hint;
    n.outputs = {out};
    nodes.push_back(std::move(n));
    return out;
  }
  std::string constant(Tensor t, const std::string& hint) {
    const std::string name = prefix_ + std::to_string(counter_++) + "_" + hint;
    initializers.emplace(name, std::move(t));
    return name;
  }
  const ValueType& type_of(const std::string& name) {
    static const ValueType kUnknown;
    auto it = types_.find(name);
    return it == types_.end() ? kUnknown : it->second;
  }
  void infer_types(const std::vector<size_t>& order);
  Result<std::string> reduce_to(const std::string& grad, const DimsOpt& grad_dims,
                                const std::string& target, const Node& n);
  Result<std::string> sum(const std::string& value);
  Status backprop(const Node& n, const std::string& g);
  void contribute(const std::string& value, const std::string& g) {
    if (depends_.count(value)) contrib_[value].push_back(g);
  }

  const Graph& g_;
  const Node& grad_;
  int64_t opset_;
  std::string prefix_;
  int counter_ = 0;
  std::map<std::string, ValueType> types_;
  std::set<std::string> depends_;  // values that depend on some x (the xs included)
  std::map<std::string, std::vector<std::string>> contrib_;
};

void Expander::infer_types(const std::vector<size_t>& order) {
  for (const auto* list : {&g_.inputs, &g_.value_info, &g_.outputs})
    for (const auto& v : *list) {
      ValueType t = declared_type(v.type);
      ValueType& cur = types_[v.name];
      if (cur.dtype == DType::kUndefined) cur.dtype = t.dtype;
      if (!cur.dims) cur.dims = t.dims;
    }
  for (const auto& [name, t] : g_.initializers) {
    std::vector<Dim> dims;
    for (int64_t d : t.shape()) dims.push_back(Dim{d, ""});
    types_[name] = ValueType{t.dtype(), dims};
  }
  for (size_t i : order) {
    const Node& n = g_.nodes[i];
    if (!n.domain.empty() || n.outputs.size() != 1 || n.inputs.empty()) continue;
    ValueType out;
    const ValueType a = type_of(n.inputs[0]);
    const ValueType b = n.inputs.size() > 1 ? type_of(n.inputs[1]) : ValueType{};
    const std::string& op = n.op_type;
    if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
      out.dtype = a.dtype != DType::kUndefined ? a.dtype : b.dtype;
      out.dims = broadcast_dims(a.dims, b.dims);
    } else if (op == "Neg" || op == "Identity") {
      out = a;
    } else if (op == "MatMul") {
      out.dtype = a.dtype != DType::kUndefined ? a.dtype : b.dtype;
      if (a.dims && b.dims && a.dims->size() >= 2 && b.dims->size() >= 2) {
        DimsOpt ba = std::vector<Dim>(a.dims->begin(), a.dims->end() - 2);
        DimsOpt bb = std::vector<Dim>(b.dims->begin(), b.dims->end() - 2);
        out.dims = broadcast_dims(ba, bb);
        out.dims->push_back((*a.dims)[a.dims->size() - 2]);
        out.dims->push_back(b.dims->back());
      }
    } else {
      continue;
    }
    ValueType& cur = types_[n.outputs[0]];  // declared facts win; inference fills the gaps
    if (cur.dtype == DType::kUndefined) cur.dtype = out.dtype;
    if (!cur.dims) cur.dims = out.dims;
  }
}

// Sums `grad` (whose shape is the broadcast result, grad_dims) down to the shape of `target`.
Result<std::string> Expander::reduce_to(const std::string& grad, const DimsOpt& grad_dims,
                                        const std::string& target, const Node& n) {
  const DimsOpt& tdims = type_of(target).dims;
  if (grad_dims && tdims && tdims->size() <= grad_dims->size()) {
    const size_t rg = grad_dims->size(), lead = rg - tdims->size();
    std::vector<int64_t> axes;
    bool known = true;
    for (size_t i = 0; i < rg; ++i) {
      if (i < lead) {
        axes.push_back(static_cast<int64_t>(i));
        continue;
      }
      const Dim& td = (*tdims)[i - lead];
      const Dim& gd = (*grad_dims)[i];
      if (same_dim(td, gd) || is_one(gd)) continue;  // an output dim of 1 means an input dim of 1
      if (is_one(td))
        axes.push_back(static_cast<int64_t>(i));
      else
        known = false;
    }
    if (known) {
      if (axes.empty()) return grad;
      std::string r;
      if (opset_ >= 13) {
        r = emit("ReduceSum", {grad, constant(int64_tensor(axes, false), "axes")},
                 {Attribute::of_int("keepdims", 1)}, "sum");
      } else {
        r = emit("ReduceSum", {grad}, {Attribute::of_ints("axes", axes), Attribute::of_int("keepdims", 1)}, "sum");
      }
      if (lead > 0) r = emit("Reshape", {r, emit("Shape", {target}, {}, "shape")}, {}, "reshaped");
      return r;
    }
  }
  if (opset_ < 13)
    return Status::error(
        n.describe() + ": cannot sum the gradient of '" + target +
        "' back to its shape: the shapes are not known statically and the model's opset (" +
        std::to_string(opset_) + ") is below 13");
  // Axes where the target, left-padded with 1s to the gradient's rank, differs from the gradient.
  const std::string sg = emit("Shape", {grad}, {}, "gshape");
  const std::string st = emit("Shape", {target}, {}, "tshape");
  const std::string rdiff = emit(
      "Sub", {emit("Shape", {sg}, {}, "grank"), emit("Shape", {st}, {}, "trank")}, {}, "rdiff");
  const std::string pad =
      emit("ConstantOfShape", {rdiff}, {Attribute::of_tensor("value", int64_tensor({1}, false))}, "pad");
  Attribute axis0 = Attribute::of_int("axis", 0);
  const std::string padded = emit("Concat", {pad, st}, {axis0}, "padded");
  const std::string mask = emit("Not", {emit("Equal", {padded, sg}, {}, "eq")}, {}, "mask");
  const std::string idx =
      emit("Range",
           {constant(int64_tensor({0}, true), "zero"), emit("Size", {sg}, {}, "rank"),
            constant(int64_tensor({1}, true), "one")},
           {}, "idx");
  const std::string axes = emit("Compress", {idx, mask}, {axis0}, "axes");
  const std::string r = emit("ReduceSum", {grad, axes},
                             {Attribute::of_int("keepdims", 1), Attribute::of_int("noop_with_empty_axes", 1)}, "sum");
  return emit("Reshape", {r, st}, {}, "reshaped");
}

// The total gradient of a value: its contributions added up.
Result<std::string> Expander::sum(const std::string& value) {
  auto it = contrib_.find(value);
  if (it == contrib_.end() || it->second.empty()) return std::string();
  std::string total = it->second[0];
  for (size_t k = 1; k < it->second.size(); ++k)
    total = emit("Add", {total, it->second[k]}, {}, "acc");
  it->second = {total};
  return total;
}

Status Expander::backprop(const Node& n, const std::string& g) {
  const std::string& op = n.op_type;
  const DimsOpt& gdims = type_of(n.outputs[0]).dims;
  auto binary_input = [&](size_t k, const std::string& full) -> Status {
    if (!depends_.count(n.inputs[k])) return Status::ok();
    KILN_ASSIGN_OR_RETURN(std::string r, reduce_to(full, gdims, n.inputs[k], n));
    contribute(n.inputs[k], r);
    return Status::ok();
  };
  auto need = [&](size_t k) { return depends_.count(n.inputs[k]) > 0; };
  if (op == "Identity") {
    contribute(n.inputs[0], g);
  } else if (op == "Neg") {
    if (need(0)) contribute(n.inputs[0], emit("Neg", {g}, {}, "neg"));
  } else if (op == "Add" || op == "Sub") {
    KILN_RETURN_IF_ERROR(binary_input(0, g));
    if (need(1))
      KILN_RETURN_IF_ERROR(binary_input(1, op == "Add" ? g : emit("Neg", {g}, {}, "neg")));
  } else if (op == "Mul") {
    if (need(0)) KILN_RETURN_IF_ERROR(binary_input(0, emit("Mul", {g, n.inputs[1]}, {}, "mul")));
    if (need(1)) KILN_RETURN_IF_ERROR(binary_input(1, emit("Mul", {g, n.inputs[0]}, {}, "mul")));
  } else if (op == "Div") {
    // d(a/b)/da = 1/b; d(a/b)/db = -a/b^2 = -(a/b)/b.
    if (need(0)) KILN_RETURN_IF_ERROR(binary_input(0, emit("Div", {g, n.inputs[1]}, {}, "div")));
    if (need(1)) {
      const std::string gy = emit("Mul", {g, n.outputs[0]}, {}, "gy");
      KILN_RETURN_IF_ERROR(
          binary_input(1, emit("Neg", {emit("Div", {gy, n.inputs[1]}, {}, "gyb")}, {}, "neg")));
    }
  } else if (op == "MatMul") {
    const DimsOpt& ad = type_of(n.inputs[0]).dims;
    const DimsOpt& bd = type_of(n.inputs[1]).dims;
    if (!ad || !bd || ad->size() < 2 || bd->size() < 2)
      return Status::error(n.describe() +
                           ": the gradient of MatMul needs both operands of known rank >= 2");
    auto swap_last = [](size_t rank) {
      std::vector<int64_t> perm(rank);
      for (size_t i = 0; i < rank; ++i) perm[i] = static_cast<int64_t>(i);
      std::swap(perm[rank - 1], perm[rank - 2]);
      return perm;
    };
    // Shape of g @ b^T (or a^T @ g): the output's batch dims and the operand's matrix dims.
    auto product_dims = [&](const DimsOpt& operand) -> DimsOpt {
      if (!gdims || gdims->size() < 2) return std::nullopt;
      std::vector<Dim> d(gdims->begin(), gdims->end() - 2);
      d.insert(d.end(), operand->end() - 2, operand->end());
      return d;
    };
    if (need(0)) {
      const std::string bt =
          emit("Transpose", {n.inputs[1]}, {Attribute::of_ints("perm", swap_last(bd->size()))}, "bt");
      const std::string full = emit("MatMul", {g, bt}, {}, "ga");
      KILN_ASSIGN_OR_RETURN(std::string r, reduce_to(full, product_dims(ad), n.inputs[0], n));
      contribute(n.inputs[0], r);
    }
    if (need(1)) {
      const std::string at =
          emit("Transpose", {n.inputs[0]}, {Attribute::of_ints("perm", swap_last(ad->size()))}, "at");
      const std::string full = emit("MatMul", {at, g}, {}, "gb");
      KILN_ASSIGN_OR_RETURN(std::string r, reduce_to(full, product_dims(bd), n.inputs[1], n));
      contribute(n.inputs[1], r);
    }
  }
  return Status::ok();
}

Status Expander::run() {
  const std::vector<std::string> xs = grad_.attr_strings("xs");
  const std::string y = grad_.attr_string("y", "");
  KILN_CHECK(!xs.empty(), grad_.describe() + ": attribute 'xs' is missing or empty");
  KILN_CHECK(!y.empty(), grad_.describe() + ": attribute 'y' is missing");
  KILN_CHECK(grad_.outputs.size() <= xs.size(),
             grad_.describe() + ": has " + std::to_string(grad_.outputs.size()) +
                 " outputs but 'xs' names only " + std::to_string(xs.size()));
  const std::set<std::string> x_set(xs.begin(), xs.end());

  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < g_.nodes.size(); ++i)
    for (const auto& o : g_.nodes[i].outputs)
      if (!o.empty()) producer.emplace(o, i);
  std::set<std::string> defined;
  for (const auto& v : g_.inputs) defined.insert(v.name);
  for (const auto& [name, t] : g_.initializers) defined.insert(name);
  KILN_CHECK(producer.count(y) || defined.count(y),
             grad_.describe() + ": 'y' names '" + y + "', which the graph does not define");
  for (const auto& x : xs)
    KILN_CHECK(producer.count(x) || defined.count(x),
               grad_.describe() + ": 'xs' names '" + x + "', which the graph does not define");

  // The nodes y is computed from, in topological order; the xs are leaves.
  std::vector<size_t> order;
  std::vector<int> state(g_.nodes.size(), 0);    // 0 new, 1 on the stack, 2 done
  std::vector<std::pair<size_t, size_t>> stack;  // (node, next input)
  auto visit_value = [&](const std::string& v) -> Status {
    if (x_set.count(v)) return Status::ok();
    auto it = producer.find(v);
    if (it == producer.end() || state[it->second] == 2) return Status::ok();
    if (state[it->second] == 1)
      return Status::error(grad_.describe() + ": the graph has a cycle through " +
                           g_.nodes[it->second].describe());
    state[it->second] = 1;
    stack.emplace_back(it->second, 0);
    return Status::ok();
  };
  KILN_RETURN_IF_ERROR(visit_value(y));
  while (!stack.empty()) {
    auto& [i, k] = stack.back();
    const Node& n = g_.nodes[i];
    if (k < n.inputs.size()) {
      const std::string& in = n.inputs[k++];
      if (!in.empty()) KILN_RETURN_IF_ERROR(visit_value(in));
      continue;
    }
    state[i] = 2;
    order.push_back(i);
    stack.pop_back();
  }

  // Of those, the nodes that depend on an x: the path the derivative flows along.
  depends_ = x_set;
  std::vector<size_t> path;
  for (size_t i : order) {
    const Node& n = g_.nodes[i];
    const bool dep = std::any_of(n.inputs.begin(), n.inputs.end(),
                                 [&](const auto& in) { return depends_.count(in); });
    if (!dep) continue;
    static const std::set<std::string> kSupported = {"Add", "Sub",      "Mul",   "Div",
                                                     "Neg", "Identity", "MatMul"};
    if (!n.domain.empty() || !kSupported.count(n.op_type))
      return Status::error(
          grad_.describe() + ": cannot differentiate through " + n.describe() + ": operator " +
          (n.domain.empty() ? "" : n.domain + ".") + n.op_type +
          " has no gradient rule (supported: Add, Sub, Mul, Div, Neg, Identity, MatMul)");
    if (n.outputs.size() != 1 ||
        n.inputs.size() != (n.op_type == "Neg" || n.op_type == "Identity" ? 1u : 2u))
      return Status::error(grad_.describe() + ": " + n.describe() +
                           " has an unexpected number of inputs or outputs");
    for (const auto& o : n.outputs) depends_.insert(o);
    path.push_back(i);
  }
  infer_types(order);

  // Seed: dy/dy = ones shaped like y.
  if (depends_.count(y)) {
    const DType dt = type_of(y).dtype;
    KILN_CHECK(dt != DType::kUndefined,
               grad_.describe() + ": the element type of '" + y + "' is not known");
    auto one = filled(dt, 1.0);
    if (!one) return one.status().with_context(grad_.describe());
    contrib_[y].push_back(emit("ConstantOfShape", {emit("Shape", {y}, {}, "yshape")},
                               {Attribute::of_tensor("value", *one)}, "seed"));
  }
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    const Node& n = g_.nodes[*it];
    KILN_ASSIGN_OR_RETURN(std::string g, sum(n.outputs[0]));
    if (g.empty()) continue;
    KILN_RETURN_IF_ERROR(backprop(n, g));
  }
  for (size_t k = 0; k < grad_.outputs.size(); ++k) {
    const std::string& out = grad_.outputs[k];
    if (out.empty()) continue;
    KILN_ASSIGN_OR_RETURN(std::string g, sum(xs[k]));
    Node id;
    id.name = prefix_ + "out" + std::to_string(k);
    id.outputs = {out};
    if (g.empty()) {  // y does not depend on this x
      const DType dt = type_of(xs[k]).dtype;
      KILN_CHECK(dt != DType::kUndefined,
                 grad_.describe() + ": the element type of '" + xs[k] + "' is not known");
      auto zero = filled(dt, 0.0);
      if (!zero) return zero.status().with_context(grad_.describe());
      id.op_type = "ConstantOfShape";
      id.inputs = {emit("Shape", {xs[k]}, {}, "xshape")};
      id.attrs = {Attribute::of_tensor("value", *zero)};
    } else {
      id.op_type = "Identity";
      id.inputs = {g};
    }
    nodes.push_back(std::move(id));
  }
  return Status::ok();
}

}  // namespace

bool has_gradient_nodes(const Graph& graph) {
  return std::any_of(graph.nodes.begin(), graph.nodes.end(), is_gradient);
}

Status expand_gradients(Graph& graph, int64_t onnx_opset) {
  // Expand into a copy so that a failure leaves the graph as it was.
  Graph out = graph;
  for (size_t i = 0; i < out.nodes.size();) {
    if (!is_gradient(out.nodes[i])) {
      ++i;
      continue;
    }
    const Node grad = out.nodes[i];
    Expander e(out, grad, onnx_opset);
    KILN_RETURN_IF_ERROR(e.run());
    for (auto& [name, t] : e.initializers) out.initializers.emplace(name, std::move(t));
    // In place of the Gradient node, so a model-ordered graph stays in order.
    out.nodes.erase(out.nodes.begin() + static_cast<std::ptrdiff_t>(i));
    out.nodes.insert(out.nodes.begin() + static_cast<std::ptrdiff_t>(i), e.nodes.begin(),
                     e.nodes.end());
    i += e.nodes.size();
  }
  graph = std::move(out);
  return Status::ok();
}

}  // namespace kiln::ir
