// Runs two models on the same inputs and measures how far B's outputs (and, per layer, the
// intermediate tensors both graphs name) are from A's.
#include "kiln/compare.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

#include "core/float_convert.h"
#include "ir/graph.h"
#include "ir/shape_inference.h"
#include "ir/topological_order.h"
#include "kiln/session.h"
#include "runtime/intermediate_outputs.h"

namespace kiln {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Running maxima over the elements of one or more tensors.
struct ErrorStats {
  double max_abs = 0, max_rel = 0, max_ref = 0;
  int64_t mismatches = 0, numel = 0;
};

// numpy.isclose(b, a) with a as the reference, plus NaN == NaN; infinities agree only with the
// same infinity (numpy's rule: |inf - x| <= rtol * inf would otherwise pass anything).
void add_float(ErrorStats& s, double a, double b, const CompareOptions& o) {
  if (std::isfinite(a)) s.max_ref = std::max(s.max_ref, std::fabs(a));
  if (a == b || (std::isnan(a) && std::isnan(b))) return;
  if (std::isnan(a) || std::isnan(b) || std::isinf(a) || std::isinf(b)) {
    s.max_abs = s.max_rel = kInf;
    ++s.mismatches;
    return;
  }
  const double d = std::fabs(a - b);
  s.max_abs = std::max(s.max_abs, d);
  if (a != 0) s.max_rel = std::max(s.max_rel, d / std::fabs(a));
  if (!(d <= o.atol + o.rtol * std::fabs(a))) ++s.mismatches;
}

// Integers and bools: exact, but the size of the difference is still reported.
void add_exact(ErrorStats& s, double a, double b, bool same) {
  s.max_ref = std::max(s.max_ref, std::fabs(a));
  if (same) return;
  ++s.mismatches;
  const double d = std::fabs(a - b);
  s.max_abs = std::max(s.max_abs, d);
  if (a != 0) s.max_rel = std::max(s.max_rel, d / std::fabs(a));
}

void add_tensor(ErrorStats& s, const Tensor& a, const Tensor& b, const CompareOptions& o) {
  const DType t = a.dtype();
  const int64_t n = a.numel();
  s.numel += n;
  if (t == DType::kFloat32) {
    const float *x = a.data<float>(), *y = b.data<float>();
    for (int64_t i = 0; i < n; ++i) add_float(s, x[i], y[i], o);
  } else if (t == DType::kComplex64 || t == DType::kComplex128) {
    // Real and imaginary parts compare as floats of their own.
    const DType part = t == DType::kComplex64 ? DType::kFloat32 : DType::kFloat64;
    for (int64_t i = 0; i < 2 * n; ++i)
      add_float(s, load_as_double(part, a.raw_data(), i), load_as_double(part, b.raw_data(), i), o);
  } else if (dtype_is_float(t)) {
    for (int64_t i = 0; i < n; ++i)
      add_float(s, load_as_double(t, a.raw_data(), i), load_as_double(t, b.raw_data(), i), o);
  } else if (t == DType::kString) {
    const std::string *x = a.data<std::string>(), *y = b.data<std::string>();
    for (int64_t i = 0; i < n; ++i) s.mismatches += x[i] != y[i];
  } else {
    // Bytes decide equality: int64 values above 2^53 are not exact as doubles.
    const size_t w = dtype_size(t);
    const auto *x = static_cast<const unsigned char*>(a.raw_data()),
               *y = static_cast<const unsigned char*>(b.raw_data());
    for (int64_t i = 0; i < n; ++i)
      add_exact(s, load_as_double(t, x, i), load_as_double(t, y, i),
                std::memcmp(x + i * w, y + i * w, w) == 0);
  }
}

const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::kTensor:
      return "tensor";
    case Value::Kind::kSequence:
      return "sequence";
    case Value::Kind::kOptional:
      return "optional";
    case Value::Kind::kMap:
      return "map";
  }
  return "?";
}

Status check_same_type(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    return Status::error(std::string("dtype differs: A ") + dtype_name(a.dtype()) + ", B " +
                         dtype_name(b.dtype()));
  if (a.shape() != b.shape())
    return Status::error("shape differs: A " + shape_str(a.shape()) + ", B " +
                         shape_str(b.shape()));
  return Status::ok();
}

Status add_value(ErrorStats& s, const Value& a, const Value& b, const CompareOptions& o) {
  if (a.kind != b.kind)
    return Status::error(std::string("kind differs: A is a ") + kind_name(a.kind) + ", B a " +
                         kind_name(b.kind));
  const bool seq = a.is_sequence() || (a.is_optional() && a.element_kind == Value::Kind::kSequence);
  if (a.is_optional()) {
    if (a.has_element != b.has_element)
      return Status::error(std::string("A's optional is ") + (a.has_element ? "full" : "empty") +
                           ", B's is " + (b.has_element ? "full" : "empty"));
    if (!a.has_element) return Status::ok();
    if (a.element_kind != b.element_kind)
      return Status::error("the optionals hold different kinds");
  }
  if (seq) {
    if (a.sequence.size() != b.sequence.size())
      return Status::error("sequence length differs: A " + std::to_string(a.sequence.size()) +
                           ", B " + std::to_string(b.sequence.size()));
    if (a.is_map_sequence() != b.is_map_sequence())
      return Status::error("one sequence holds maps, the other tensors");
    for (size_t i = 0; i < a.sequence_keys.size() && i < b.sequence_keys.size(); ++i) {
      const Tensor &ka = a.sequence_keys[i], &kb = b.sequence_keys[i];
      Status st = check_same_type(ka, kb);
      if (!st.is_ok()) return st.with_context("the keys of map " + std::to_string(i));
      const bool same = ka.dtype() == DType::kString
                            ? std::equal(ka.data<std::string>(), ka.data<std::string>() + ka.numel(), kb.data<std::string>())
                            : std::memcmp(ka.raw_data(), kb.raw_data(), ka.nbytes()) == 0;
      if (!same) return Status::error("the keys of map " + std::to_string(i) + " differ");
    }
    for (size_t i = 0; i < a.sequence.size(); ++i) {
      Status st = check_same_type(a.sequence[i], b.sequence[i]);
      if (!st.is_ok()) return st.with_context("sequence element " + std::to_string(i));
      add_tensor(s, a.sequence[i], b.sequence[i], o);
    }
    return Status::ok();
  }
  if (!a.tensor.defined() || !b.tensor.defined())
    return a.tensor.defined() == b.tensor.defined() ? Status::ok()
                                                    : Status::error("one side was not computed");
  KILN_RETURN_IF_ERROR(check_same_type(a.tensor, b.tensor));
  add_tensor(s, a.tensor, b.tensor, o);
  return Status::ok();
}

std::string describe_producer(const ir::Node& n) {
  const std::string op = n.domain.empty() ? n.op_type : n.domain + "." + n.op_type;
  return n.name.empty() ? op : n.name + " (" + op + ")";
}

// Producer of every value the main graph's nodes write, described for reports.
std::unordered_map<std::string, std::string> producers(const ir::Graph& g) {
  std::unordered_map<std::string, std::string> by_name;
  for (const ir::Node& n : g.nodes)
    for (const auto& o : n.outputs)
      if (!o.empty()) by_name.emplace(o, describe_producer(n));
  return by_name;
}

// Runs `m` as given; `which` ("model A") prefixes errors.
Result<std::vector<Value>> run_as_given(ir::Model m, const std::vector<Value>& inputs, int threads,
                                        const std::string& which) {
  SessionOptions so;
  so.threads = threads;
  auto session = Session::create(std::make_shared<const ir::Model>(std::move(m)), so);
  if (!session) return session.status().with_context(which);
  auto outs = (*session)->run(inputs);
  if (!outs) return outs.status().with_context(which);
  return outs;
}

TensorDiff to_diff(const std::string& name, const ErrorStats& s) {
  TensorDiff d;
  d.name = name;
  d.max_abs = s.max_abs;
  d.max_rel = s.max_rel;
  d.max_ref = s.max_ref;
  d.mismatches = s.mismatches;
  d.numel = s.numel;
  d.ok = s.mismatches == 0;
  return d;
}

}  // namespace

Result<TensorDiff> compare_values(const Value& a, const Value& b, const CompareOptions& options) {
  ErrorStats s;
  KILN_RETURN_IF_ERROR(add_value(s, a, b, options));
  return to_diff("", s);
}

Result<CompareReport> compare_models(const ir::Model& a, const ir::Model& b,
                                     const std::vector<Value>& inputs,
                                     const CompareOptions& options, int threads) {
  const ir::Graph &ga = a.graph, &gb = b.graph;
  const size_t n_out = ga.outputs.size();
  if (n_out != gb.outputs.size())
    return Status::error("model A has " + std::to_string(n_out) + " outputs, model B has " +
                         std::to_string(gb.outputs.size()) + "; outputs are matched by position");

  // With per_layer, each run holds every intermediate of its model at once (graph outputs are
  // never freed): memory is about the sum of all activations, which a huge model may not afford.
  ir::Model run_a = options.per_layer ? runtime::with_intermediate_outputs(a) : a;
  ir::Model run_b = options.per_layer ? runtime::with_intermediate_outputs(b) : b;
  // Value name -> position among the run's outputs.
  std::unordered_map<std::string, size_t> index_a, index_b;
  for (size_t k = 0; k < run_a.graph.outputs.size(); ++k)
    index_a.emplace(run_a.graph.outputs[k].name, k);
  for (size_t k = 0; k < run_b.graph.outputs.size(); ++k)
    index_b.emplace(run_b.graph.outputs[k].name, k);
  KILN_ASSIGN_OR_RETURN(std::vector<Value> va,
                        run_as_given(std::move(run_a), inputs, threads, "model A"));
  KILN_ASSIGN_OR_RETURN(std::vector<Value> vb,
                        run_as_given(std::move(run_b), inputs, threads, "model B"));
  if (va.size() < n_out || vb.size() < n_out)
    return Status::error("a model returned fewer outputs than it declares");

  const auto prod_a = producers(ga), prod_b = producers(gb);
  auto producer_of = [](const std::unordered_map<std::string, std::string>& p,
                        const std::string& name) {
    auto it = p.find(name);
    return it == p.end() ? std::string() : it->second;
  };

  CompareReport report;
  for (size_t k = 0; k < n_out; ++k) {
    const std::string &na = ga.outputs[k].name, &nb = gb.outputs[k].name;
    ErrorStats s;
    Status st = add_value(s, va[k], vb[k], options);
    if (!st.is_ok())
      return st.with_context("output " + std::to_string(k) + " ('" + na + "'" +
                             (na == nb ? "" : " in A, '" + nb + "' in B") + ")");
    TensorDiff d = to_diff(na, s);
    if (na != nb) d.name_b = nb;
    d.producer_a = producer_of(prod_a, na);
    d.producer_b = producer_of(prod_b, nb);
    report.ok &= d.ok;
    report.outputs.push_back(std::move(d));
  }
  if (!options.per_layer) return report;

  auto not_computed = [](const Value& v) { return v.is_tensor() && !v.tensor.defined(); };
  // Dependency order, so that "first" divergence means first in data flow even when the file lists
  // nodes out of order (A already ran, so its graph has one).
  KILN_ASSIGN_OR_RETURN(std::vector<size_t> order_a, ir::topological_order(ga, {}));
  for (size_t i : order_a) {
    for (const auto& name : ga.nodes[i].outputs) {
      if (name.empty() || !prod_b.count(name)) continue;
      auto ia = index_a.find(name), ib = index_b.find(name);
      if (ia == index_a.end() || ib == index_b.end()) continue;  // skipped as not a tensor
      Value &x = va[ia->second], &y = vb[ib->second];
      ErrorStats s;
      const bool comparable =
          !not_computed(x) && !not_computed(y) && add_value(s, x, y, options).is_ok();
      // Compared as they come: dropping them now lets memory fall as the walk goes on.
      x = Value();
      y = Value();
      if (!comparable) {
        report.layers_skipped.push_back(name);
        continue;
      }
      TensorDiff d = to_diff(name, s);
      d.producer_a = producer_of(prod_a, name);
      d.producer_b = producer_of(prod_b, name);
      if (!d.ok && !report.first_divergence) report.first_divergence = d;
      report.layers.push_back(std::move(d));
    }
  }
  return report;
}

}  // namespace kiln
