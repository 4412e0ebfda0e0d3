// Schemas of linear algebra: MatMul and its quantized forms, Gemm, Einsum, the recurrent layers
// (RNN, GRU, LSTM) and Det.
#include <algorithm>
#include <cctype>
#include <map>

#include "ir/schemas/common.h"

namespace kiln::ir::schemas::linalg {

bool has_rank(const TypeInfo& t) { return t.kind == TypeInfo::Kind::kTensor && t.has_shape; }

Outputs infer_matmul(InferContext& ctx) {
  const std::string& op = ctx.node.op_type;
  const size_t ai = 0, bi = op == "QLinearMatMul" ? 3 : 1;
  const TypeInfo& a = ctx.input(ai);
  const TypeInfo& b = ctx.input(bi);
  DType dt = a.dtype;
  if (op == "MatMulInteger") dt = DType::kInt32;
  if (op == "QLinearMatMul") dt = ctx.input(7).dtype != DType::kUndefined ? ctx.input(7).dtype : a.dtype;
  if (!has_rank(a) || !has_rank(b)) return one(tensor_type_unranked(dt));
  if (a.shape.empty() || b.shape.empty()) return ctx.error("MatMul inputs must not be scalars");
  Dims as = a.shape, bs = b.shape;
  const bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), known_dim(1));
  if (b1) bs.push_back(known_dim(1));
  const Dim& ka = as.back();
  const Dim& kb = bs[bs.size() - 2];
  if (ka.known() && kb.known() && ka.value != kb.value)
    return ctx.error("inner dims differ: " + dims_str(a.shape) + " x " + dims_str(b.shape));
  TypeInfo ab = tensor_type(dt, Dims(as.begin(), as.end() - 2));
  TypeInfo bb = tensor_type(dt, Dims(bs.begin(), bs.end() - 2));
  auto batch = broadcast_shapes({&ab, &bb});
  if (!batch) return ctx.error(batch.status().message());
  Dims out = std::move(**batch);
  if (!a1) out.push_back(as[as.size() - 2]);
  if (!b1) out.push_back(bs.back());
  return one(tensor_type(dt, std::move(out)));
}

Cost cost_matmul(const InferContext& ctx, const std::vector<TypeInfo>& outs) {
  const TypeInfo& a = ctx.input(0);
  const double k = has_rank(a) && !a.shape.empty() && a.shape.back().known() ? static_cast<double>(a.shape.back().value) : 0;
  return Cost{2 * numel_or_zero(outs[0]) * k, io_bytes(ctx, outs), 0};
}

Outputs infer_gemm(InferContext& ctx) {
  const TypeInfo& a = ctx.input(0);
  const TypeInfo& b = ctx.input(1);
  Dim m = unknown_dim(), n = unknown_dim();
  const bool ta = ctx.node.attr_int("transA", 0) != 0, tb = ctx.node.attr_int("transB", 0) != 0;
  if (has_rank(a)) {
    if (a.shape.size() != 2) return ctx.error("A must be 2-D, got " + dims_str(a.shape));
    m = a.shape[ta ? 1 : 0];
  }
  if (has_rank(b)) {
    if (b.shape.size() != 2) return ctx.error("B must be 2-D, got " + dims_str(b.shape));
    n = b.shape[tb ? 0 : 1];
  }
  if (has_rank(a) && has_rank(b)) {
    const Dim& ka = a.shape[ta ? 0 : 1];
    const Dim& kb = b.shape[tb ? 1 : 0];
    if (ka.known() && kb.known() && ka.value != kb.value)
      return ctx.error("inner dims differ: " + dims_str(a.shape) + " x " + dims_str(b.shape));
  }
  return one(tensor_type(a.dtype, {m, n}));
}

Cost cost_gemm(const InferContext& ctx, const std::vector<TypeInfo>& outs) {
  const TypeInfo& a = ctx.input(0);
  const bool ta = ctx.node.attr_int("transA", 0) != 0;
  const double k = has_rank(a) && a.shape.size() == 2 && a.shape[ta ? 0 : 1].known() ? static_cast<double>(a.shape[ta ? 0 : 1].value) : 0;
  const double mn = numel_or_zero(outs[0]);
  return Cost{2 * mn * k + (ctx.has_input(2) ? 2 * mn : 0), io_bytes(ctx, outs), 0};
}

struct EinsumSpec {
  std::vector<std::string> terms;
  std::string out;
  bool explicit_out = false;
};

EinsumSpec parse_einsum(std::string eq) {
  eq.erase(std::remove_if(eq.begin(), eq.end(), [](unsigned char c) { return std::isspace(c); }), eq.end());
  EinsumSpec s;
  std::string lhs = eq;
  const size_t arrow = eq.find("->");
  if (arrow != std::string::npos) {
    lhs = eq.substr(0, arrow);
    s.out = eq.substr(arrow + 2);
    s.explicit_out = true;
  }
  size_t start = 0;
  for (;;) {
    const size_t comma = lhs.find(',', start);
    s.terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return s;
}

// Label -> dim, and the broadcast dims an ellipsis stands for.
struct EinsumDims {
  std::map<char, Dim> labels;
  Dims ellipsis;
  bool ok = true;
};

Result<EinsumDims> einsum_dims(InferContext& ctx, const EinsumSpec& s) {
  EinsumDims e;
  std::vector<TypeInfo> ell;
  if (s.terms.size() != ctx.num_inputs()) return ctx.error("equation has " + std::to_string(s.terms.size()) + " operands, node has " + std::to_string(ctx.num_inputs()));
  for (size_t i = 0; i < s.terms.size(); ++i) {
    const TypeInfo& t = ctx.input(i);
    if (!has_rank(t)) {
      e.ok = false;
      continue;
    }
    const std::string& term = s.terms[i];
    const size_t dots = term.find("...");
    const size_t letters = term.size() - (dots == std::string::npos ? 0 : 3);
    if (t.shape.size() < letters || (dots == std::string::npos && t.shape.size() != letters))
      return ctx.error("operand " + std::to_string(i) + " of shape " + dims_str(t.shape) + " does not fit '" + term + "'");
    const size_t ne = t.shape.size() - letters;
    size_t k = 0;
    for (size_t c = 0; c < term.size(); ++c) {
      if (term[c] == '.') {
        ell.push_back(tensor_type(t.dtype, Dims(t.shape.begin() + k, t.shape.begin() + k + ne)));
        k += ne;
        c += 2;
        continue;
      }
      const Dim& d = t.shape[k++];
      auto it = e.labels.find(term[c]);
      if (it == e.labels.end()) e.labels[term[c]] = d;
      else if (it->second.known() && d.known() && it->second.value != d.value) {
        if (it->second.value == 1) it->second = d;
        else if (d.value != 1) return ctx.error(std::string("label '") + term[c] + "' has dims " + std::to_string(it->second.value) + " and " + std::to_string(d.value));
      } else if (!it->second.known()) {
        it->second = dim_merge(it->second, d);
      }
    }
  }
  std::vector<const TypeInfo*> ep;
  for (const auto& t : ell) ep.push_back(&t);
  if (!ep.empty()) {
    auto b = broadcast_shapes(ep);
    if (!b) return ctx.error(b.status().message());
    e.ellipsis = **b;
  }
  return e;
}

Outputs infer_einsum(InferContext& ctx) {
  const DType dt = ctx.input(0).dtype;
  const EinsumSpec s = parse_einsum(ctx.node.attr_string("equation", ""));
  KILN_ASSIGN_OR_RETURN(EinsumDims e, einsum_dims(ctx, s));
  if (!e.ok) return one(tensor_type_unranked(dt));
  std::string out = s.out;
  if (!s.explicit_out) {
    std::map<char, int> count;
    bool dots = false;
    for (const auto& t : s.terms)
      for (char c : t) {
        if (c == '.') dots = true;
        else ++count[c];
      }
    out = dots ? "..." : "";
    for (const auto& [c, n] : count)
      if (n == 1) out += c;
  }
  Dims shape;
  for (size_t c = 0; c < out.size(); ++c) {
    if (out[c] == '.') {
      shape.insert(shape.end(), e.ellipsis.begin(), e.ellipsis.end());
      c += 2;
      continue;
    }
    auto it = e.labels.find(out[c]);
    if (it == e.labels.end()) return ctx.error(std::string("output label '") + out[c] + "' is not an input label");
    shape.push_back(it->second);
  }
  return one(tensor_type(dt, std::move(shape)));
}

Cost cost_einsum(const InferContext& ctx, const std::vector<TypeInfo>& outs) {
  InferContext& c = const_cast<InferContext&>(ctx);
  auto e = einsum_dims(c, parse_einsum(ctx.node.attr_string("equation", "")));
  double f = 2;
  if (e && e->ok) {
    for (const auto& [l, d] : e->labels) f *= d.known() ? static_cast<double>(d.value) : 0;
    for (const Dim& d : e->ellipsis) f *= d.known() ? static_cast<double>(d.value) : 0;
  }
  return Cost{f, io_bytes(ctx, outs), 0};
}

Outputs infer_rnn(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  const DType dt = x.dtype;
  const bool batch_first = ctx.node.attr_int("layout", 0) != 0;
  const Dim dirs = known_dim(ctx.node.attr_string("direction", "forward") == "bidirectional" ? 2 : 1);
  Dim hidden = ctx.node.has_attr("hidden_size") ? known_dim(ctx.node.attr_int("hidden_size", 0)) : unknown_dim();
  if (!hidden.known() && has_rank(ctx.input(2)) && ctx.input(2).shape.size() == 3) hidden = ctx.input(2).shape[2];
  Dim seq = unknown_dim(), batch = unknown_dim();
  if (has_rank(x)) {
    if (x.shape.size() != 3) return ctx.error("X must be 3-D, got " + dims_str(x.shape));
    seq = x.shape[batch_first ? 1 : 0];
    batch = x.shape[batch_first ? 0 : 1];
  }
  TypeInfo y = tensor_type(dt, batch_first ? Dims{batch, seq, dirs, hidden} : Dims{seq, dirs, batch, hidden});
  TypeInfo h = tensor_type(dt, batch_first ? Dims{batch, dirs, hidden} : Dims{dirs, batch, hidden});
  std::vector<TypeInfo> outs{y, h};
  if (ctx.node.op_type == "LSTM") outs.push_back(h);
  return outs;
}

Cost cost_rnn(const InferContext& ctx, const std::vector<TypeInfo>& outs) {
  const double gates = ctx.node.op_type == "LSTM" ? 4 : ctx.node.op_type == "GRU" ? 3 : 1;
  const TypeInfo& x = ctx.input(0);
  const TypeInfo& r = ctx.input(2);
  double f = 0;
  if (auto xs = x.static_shape(); xs && xs->size() == 3) {
    if (auto rs = r.static_shape(); rs && rs->size() == 3) {
      const double h = static_cast<double>((*rs)[2]), dirs = static_cast<double>((*rs)[0]);
      f = 2 * gates * h * (static_cast<double>((*xs)[2]) + h) * static_cast<double>((*xs)[0] * (*xs)[1]) * dirs;
    }
  }
  return Cost{f, io_bytes(ctx, outs), 0};
}

Outputs infer_det(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!has_rank(x)) return one(tensor_type_unranked(x.dtype));
  if (x.shape.size() < 2) return ctx.error("Det needs a rank 2 or more input");
  return one(shaped_like(x, Dims(x.shape.begin(), x.shape.end() - 2)));
}

KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_matmul, .cost = cost_matmul, .broadcast = Broadcast::kMultidirectional}),
                        "MatMul", "MatMulInteger", "QLinearMatMul");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_gemm, .cost = cost_gemm, .broadcast = Broadcast::kUnidirectional}), "Gemm");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_einsum, .cost = cost_einsum}), "Einsum");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_rnn, .cost = cost_rnn}), "RNN", "GRU", "LSTM");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_det}), "Det");

}  // namespace kiln::ir::schemas::linalg
