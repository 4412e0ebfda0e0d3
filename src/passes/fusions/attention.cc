// Multi-head attention fusion (-O2): Q/K/V projections, the head split, scaled Q·K^T, an optional
// additive mask, Softmax and the product with V, up to the merged heads, become one
// ai.kiln.MultiHeadAttention with a merged QKV weight (docs/ops.md); projections that
// `kiln quantize --dynamic` made DynamicQuantMatMuls merge into its int8 form (W_scale). Where the
// projections cannot merge (ONNX Runtime's int8 MatMulIntegerToFloat, one X per operand), the
// rest becomes ai.kiln.ScaledDotProductAttention on the projected Q, K and V.
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "ir/op_schema.h"
#include "passes/fusions/attention_trace.h"
#include "passes/graph_edit.h"
#include "passes/graph_index.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

using namespace attention;

struct Match {
  std::set<const ir::Node*> nodes;  // absorbed
  std::string x, mask, end;         // `end` carries the merged heads, [A0,A1,E] or [A0*A1,E]
  bool projected = true;            // x and the merged projection; else x, k, v are Q, K and V
  std::string k, v;
  bool end_is_2d = false;
  bool seq_first = false;
  bool zero_nan_rows = false;  // the probabilities pass a Where(IsNaN(P), 0, P) guard
  int64_t heads = 0, hidden = 0;
  double scale = 1;
  Tensor w, bias, w_scale;  // w_scale: the int8 W's (DynamicQuantMatMul projections), else undefined
  int64_t row_bits = 8;     // and their rows'
  std::string name;                  // the Softmax's
  // P·V's MatMul: the fused node goes where it was, after whatever computes Q, K, V and the mask.
  const ir::Node* anchor = nullptr;
};

// The scores MatMul under optional scalings, or nullptr.
const ir::Node* scores_matmul(const GraphIndex& idx, std::string v,
                              std::vector<const ir::Node*>& nodes, double& scale) {
  for (const ir::Node* n = idx.producer(v);; n = idx.producer(v)) {
    if (is_onnx_op(n, "MatMul")) {
      nodes.push_back(n);
      return n;
    }
    auto s = scaling(idx, n);
    if (!s) return nullptr;
    scale *= s->second;
    nodes.push_back(n);
    v = s->first;
  }
}

// torch's scaled_dot_product_attention export guards the probabilities P against the NaN rows
// of fully masked queries: Where(IsNaN(P), 0, P). The guard's two nodes, when they are all that
// reads P, or nothing.
std::vector<const ir::Node*> nan_guard(const GraphIndex& idx, const std::string& p) {
  const auto& readers = idx.consumers(p);
  if (readers.size() != 2) return {};
  const ir::Node* isnan = readers[0];
  const ir::Node* where = readers[1];
  if (!is_onnx_op(isnan, "IsNaN")) std::swap(isnan, where);
  if (!is_onnx_op(isnan, "IsNaN") || !is_onnx_op(where, "Where") || where->inputs.size() != 3 ||
      where->inputs[0] != isnan->outputs[0] || where->inputs[2] != p ||
      idx.consumers(isnan->outputs[0]).size() != 1)
    return {};
  const Tensor* zero = idx.constant(where->inputs[1]);
  // One element of rank <= 1, so that it cannot broadcast P to a higher rank.
  if (!zero || zero->dtype() != DType::kFloat32 || zero->numel() != 1 || zero->rank() > 1 ||
      zero->data<float>()[0] != 0.0f)
    return {};
  return {isnan, where};
}

// The branches' columns side by side: of their weights (float32 or int8, as theirs), biases
// (zeros for none) or int8 weights' scales (one value repeated over the columns).
enum class Part { kWeight, kBias, kScale };
Result<Tensor> merge_columns(const std::vector<const Branch*>& bs, int64_t rows, Part part) {
  int64_t cols = 0;
  for (const Branch* b : bs) cols += b->end - b->begin;
  const DType type = part == Part::kWeight ? bs[0]->w->dtype() : DType::kFloat32;
  if (part != Part::kWeight) rows = 1;
  KILN_ASSIGN_OR_RETURN(Tensor out, Tensor::make(type, part == Part::kWeight ? Shape{rows, cols} : Shape{cols}));
  const size_t size = dtype_size(type);
  char* o = static_cast<char*>(out.raw_data());
  int64_t at = 0;
  for (const Branch* b : bs) {
    const int64_t width = b->end - b->begin;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < width; ++c) {
        char* to = o + static_cast<size_t>(r * cols + at + c) * size;
        if (part == Part::kWeight) {
          const char* w = static_cast<const char*>(b->w->raw_data());
          std::memcpy(to, w + static_cast<size_t>(r * b->w->dim(1) + b->begin + c) * size, size);
          continue;
        }
        const Tensor* t = part == Part::kBias ? b->bias : b->w_scale;
        const float v = !t ? 0.0f : t->data<float>()[t->numel() == 1 ? 0 : b->begin + c];
        std::memcpy(to, &v, size);
      }
    at += width;
  }
  return out;
}

std::optional<Match> match(const ir::Graph& g, const GraphIndex& idx, const Types& types,
                           const Values& values, const ir::Node& sm, int64_t opset) {
  if (sm.inputs.empty() || sm.outputs.empty()) return std::nullopt;
  const ir::TypeInfo* st = type_of(types, sm.inputs[0]);
  if (!st || st->dtype != DType::kFloat32) return std::nullopt;
  // Before opset 13 the default axis is 1 and the input is coerced to 2-D there; on the last
  // axis both versions normalise the same way.
  const int64_t axis = sm.attr_int("axis", opset < 13 ? 1 : -1);
  if (axis != -1 && axis != static_cast<int64_t>(st->shape.size()) - 1) return std::nullopt;
  Match m;
  m.name = sm.name;
  m.nodes.insert(&sm);
  // Softmax(scale * Q·K^T [+ mask]), the mask added after the scaling.
  std::vector<const ir::Node*> score_nodes;
  const ir::Node* qk = nullptr;
  const ir::Node* add = idx.producer(sm.inputs[0]);
  if (is_onnx_op(add, "Add") && add->inputs.size() == 2) {
    for (int i = 0; i < 2 && !qk; ++i) {
      score_nodes.clear();
      m.scale = 1;
      qk = scores_matmul(idx, add->inputs[i], score_nodes, m.scale);
      if (qk) m.mask = add->inputs[1 - i];
    }
    if (qk) score_nodes.push_back(add);
  }
  if (!qk) {
    score_nodes.clear();
    m.scale = 1;
    qk = scores_matmul(idx, sm.inputs[0], score_nodes, m.scale);
  }
  if (!qk) return std::nullopt;
  std::string probs = sm.outputs[0];
  const std::vector<const ir::Node*> guard = nan_guard(idx, probs);
  if (!guard.empty()) {
    m.zero_nan_rows = true;
    m.nodes.insert(guard.begin(), guard.end());
    probs = guard[1]->outputs[0];
  }
  const auto& pv_readers = idx.consumers(probs);
  if (pv_readers.size() != 1 || !is_onnx_op(pv_readers[0], "MatMul") ||
      pv_readers[0]->inputs[0] != probs)
    return std::nullopt;
  const ir::Node* pv = pv_readers[0];
  m.anchor = pv;
  const Branch q = trace_branch(idx, types, values, qk->inputs[0], true);
  const Branch k = trace_branch(idx, types, values, qk->inputs[1], true);
  const Branch v = trace_branch(idx, types, values, pv->inputs[1], false);
  m.scale *= q.scale * k.scale;
  // The three projections merge when they read one X, have the same kind of W (float32, or int8
  // from DynamicQuantMatMul: each column's result is the same either way, as every column
  // quantizes the same X row by row, to the same row_bits) and E columns each.
  m.projected = q.w && k.w && v.w && q.x == k.x && q.x == v.x && q.w->dtype() == k.w->dtype() &&
                q.w->dtype() == v.w->dtype() && q.row_bits == k.row_bits && q.row_bits == v.row_bits &&
                q.w->dim(0) == k.w->dim(0) &&
                q.w->dim(0) == v.w->dim(0) && q.end - q.begin == k.end - k.begin &&
                q.end - q.begin == v.end - v.begin;
  const ir::TypeInfo* qt = type_of(types, qk->inputs[0]);
  if (!qt || qt->shape.empty()) return std::nullopt;
  const ir::Dim d = qt->shape.back();
  if (!d.known() || d.value <= 0) return std::nullopt;
  const ir::TypeInfo* xt = nullptr;
  if (m.projected) {
    m.x = q.x;
    xt = type_of(types, m.x);
    m.hidden = q.end - q.begin;
  } else {
    // Q, K and V as they come, [A0, A1, E] each, the same shape.
    m.x = q.operand, m.k = k.operand, m.v = v.operand;
    xt = type_of(types, m.x);
    if (!xt || xt->shape.size() != 3 || !xt->shape[2].known()) return std::nullopt;
    for (const std::string& o : {m.k, m.v}) {
      const ir::TypeInfo* ot = type_of(types, o);
      if (!ot || ot->dtype != DType::kFloat32 || ot->shape.size() != 3) return std::nullopt;
      for (size_t i = 0; i < 3; ++i)
        if (!ir::same_dim(ot->shape[i], xt->shape[i])) return std::nullopt;
    }
    m.hidden = xt->shape[2].value;
  }
  if (!xt || xt->dtype != DType::kFloat32 || xt->shape.size() != 3) return std::nullopt;
  if (m.hidden % d.value != 0) return std::nullopt;
  m.heads = m.hidden / d.value;
  const ir::Dim size[4] = {xt->shape[0], xt->shape[1], ir::known_dim(m.heads), d};
  const Layout start = {{kA0}, {kA1}, {kH, kD}};
  Layout lq = start, lk = start, lv = start;
  for (const ir::Node* n : q.path)
    if (!apply(*n, types, size, lq)) return std::nullopt;
  for (const ir::Node* n : k.path)
    if (!apply(*n, types, size, lk)) return std::nullopt;
  for (const ir::Node* n : v.path)
    if (!apply(*n, types, size, lv)) return std::nullopt;
  // Q = [batch groups][seq][D], K^T = [batch groups][D][seq], V = [batch groups][seq][D]; the
  // batch groups hold H and the other outer axis, the same way in all three.
  if (lq.size() < 3 || lq.back() != Group{kD} || lq[lq.size() - 2].size() != 1) return std::nullopt;
  const int seq = lq[lq.size() - 2][0];
  if (seq != kA0 && seq != kA1) return std::nullopt;
  const int batch = seq == kA0 ? kA1 : kA0;
  Layout bg(lq.begin(), lq.end() - 2);
  std::multiset<int> batch_atoms;
  for (const auto& grp : bg) batch_atoms.insert(grp.begin(), grp.end());
  if (batch_atoms != std::multiset<int>{batch, kH}) return std::nullopt;
  auto with = [&](Group a, Group b) {
    Layout l = bg;
    l.push_back(std::move(a));
    l.push_back(std::move(b));
    return l;
  };
  if (lk != with({kD}, {seq}) || lv != with({seq}, {kD})) return std::nullopt;
  m.seq_first = seq == kA0;
  // The mask must broadcast to the scores [batch, H, seq, seq] without growing them.
  if (!m.mask.empty()) {
    if (m.seq_first || bg != Layout{{kA0}, {kH}}) return std::nullopt;
    const ir::TypeInfo* mt = type_of(types, m.mask);
    if (!mt || mt->dtype != DType::kFloat32 || mt->shape.size() > 4) return std::nullopt;
    const ir::Dim want[4] = {size[kA0], size[kH], size[kA1], size[kA1]};
    const size_t off = 4 - mt->shape.size();
    for (size_t i = 0; i < mt->shape.size(); ++i) {
      const ir::Dim& md = mt->shape[i];
      if ((md.known() && md.value == 1) || ir::same_dim(md, want[off + i])) continue;
      // The key axis may stay unproven: a mask that grew it would have broken P·V's inner dim,
      // so the original fails then too (and the kernel reports it).
      const bool key_axis = off + i == 3;
      if (!key_axis || (md.known() && want[3].known())) return std::nullopt;
    }
  }
  // From P·V on, follow the single readers until the heads are merged back in order.
  Layout lo = with({seq}, {kD});
  std::string out = pv->outputs[0];
  m.nodes.insert(pv);
  for (;;) {
    if (lo == Layout{{kA0}, {kA1}, {kH, kD}}) break;
    if (lo == Layout{{kA0, kA1}, {kH, kD}}) {
      m.end_is_2d = true;
      break;
    }
    // One Transpose or Reshape carries the data on; other readers (Shape nodes sizing the
    // merge) must die with the pattern, which the check below makes sure of.
    const ir::Node* n = nullptr;
    for (const ir::Node* r : idx.consumers(out)) {
      if (!(is_onnx_op(r, "Transpose") || is_onnx_op(r, "Reshape")) || r->inputs[0] != out)
        continue;
      if (n) return std::nullopt;
      n = r;
    }
    if (!n) return std::nullopt;
    if (!apply(*n, types, size, lo)) return std::nullopt;
    m.nodes.insert(n);
    out = n->outputs[0];
  }
  m.end = out;
  for (const Branch* b : {&q, &k, &v}) {
    m.nodes.insert(b->path.begin(), b->path.end());
    if (m.projected) m.nodes.insert(b->roots.begin(), b->roots.end());
  }
  m.nodes.insert(score_nodes.begin(), score_nodes.end());
  // Every value the pattern computes, but the end, is read only inside it or by nodes that die
  // with it (the Shape chains that fed its Reshapes).
  std::set<const ir::Node*> dead = m.nodes;
  for (bool grew = true; grew;) {
    grew = false;
    for (const auto& n : g.nodes) {
      if (dead.count(&n) || n.outputs.empty()) continue;
      bool unused = true;
      for (const auto& a : n.attrs) unused &= !a.g && a.graphs.empty();
      for (const auto& o : n.outputs) {
        if (o.empty()) continue;
        if (o == m.x || o == m.k || o == m.v || o == m.mask || o == m.end || is_graph_output(g, o))
          unused = false;
        const auto& cs = idx.consumers(o);
        if (idx.use_count(o) != static_cast<int>(cs.size())) unused = false;
        for (const ir::Node* c : cs) unused &= dead.count(c) > 0;
        if (!unused) break;
      }
      if (unused) grew = dead.insert(&n).second;
    }
  }
  for (const ir::Node* n : m.nodes)
    for (const auto& o : n->outputs) {
      if (o.empty() || o == m.end) continue;
      if (is_graph_output(g, o) || idx.use_count(o) != static_cast<int>(idx.consumers(o).size()))
        return std::nullopt;
      for (const ir::Node* c : idx.consumers(o))
        if (!dead.count(c)) return std::nullopt;
    }
  m.nodes = std::move(dead);
  if (!m.projected) return m;
  auto w = merge_columns({&q, &k, &v}, q.w->dim(0), Part::kWeight);
  auto bias = merge_columns({&q, &k, &v}, 1, Part::kBias);
  if (!w || !bias) return std::nullopt;
  m.w = std::move(w).value();
  m.bias = std::move(bias).value();
  if (q.w_scale) {
    auto scale = merge_columns({&q, &k, &v}, 1, Part::kScale);
    if (!scale) return std::nullopt;
    m.w_scale = std::move(scale).value();
    m.row_bits = q.row_bits;
  }
  return m;
}

std::string fresh_name(const ir::Graph& g, const Types& types, const std::string& base) {
  std::string name = base;
  for (int i = 1; types.count(name) || g.initializers.count(name); ++i)
    name = base + "_" + std::to_string(i);
  return name;
}

// The input of the Transpose(perm 1,0,2) producing `v`, or "".
std::string untransposed(const ir::Graph& g, const std::string& v) {
  for (const auto& n : g.nodes)
    if (!n.outputs.empty() && n.outputs[0] == v)
      return is_onnx_op(&n, "Transpose") && n.attr_ints("perm") == std::vector<int64_t>{1, 0, 2}
                 ? n.inputs[0]
                 : "";
  return "";
}

// The fused node's inputs, its initializers added: X, W, B [, mask [, W_scale]] of
// MultiHeadAttention, or Q, K, V [, mask] of ScaledDotProductAttention.
std::vector<std::string> fused_inputs(ir::Graph& g, Types& types, const Match& m, const std::string& base) {
  if (!m.projected) {
    std::vector<std::string> in = {m.x, m.k, m.v};
    if (!m.mask.empty()) in.push_back(m.mask);
    return in;
  }
  const std::string w = fresh_name(g, types, base + "/qkv_weight");
  g.initializers[w] = m.w;
  const std::string b = fresh_name(g, types, base + "/qkv_bias");
  g.initializers[b] = m.bias;
  std::vector<std::string> in = {m.x, w, b};
  if (!m.mask.empty()) in.push_back(m.mask);
  if (m.w_scale.defined()) {
    const std::string s = fresh_name(g, types, base + "/qkv_weight_scale");
    g.initializers[s] = m.w_scale;
    in.resize(4);
    in.push_back(s);
  }
  return in;
}

void rewrite(ir::Graph& g, Types& types, const Match& m) {
  const std::string base = m.name.empty() ? m.end : m.name;
  ir::Node mha;
  mha.op_type = m.projected ? "MultiHeadAttention" : "ScaledDotProductAttention";
  mha.name = base + "/" + mha.op_type;
  mha.domain = "ai.kiln";
  mha.inputs = fused_inputs(g, types, m, base);
  mha.attrs = {ir::Attribute::of_int("num_heads", m.heads),
               ir::Attribute::of_float("scale", static_cast<float>(m.scale))};
  // torchvision's batch_first attention transposes X to [seq, batch, E] first. Reading X
  // untransposed and transposing the output instead lets transpose-cancel drop this Transpose with
  // the one that restores batch_first after the output projection.
  const std::string batch_first_x = m.projected && m.seq_first && !m.end_is_2d ? untransposed(g, m.x) : "";
  if (m.seq_first && batch_first_x.empty()) mha.attrs.push_back(ir::Attribute::of_int("seq_first", 1));
  if (m.zero_nan_rows) mha.attrs.push_back(ir::Attribute::of_int("zero_nan_rows", 1));
  if (m.row_bits != 8) mha.attrs.push_back(ir::Attribute::of_int("row_bits", m.row_bits));
  std::vector<ir::Node> added;
  if (!batch_first_x.empty()) {
    mha.inputs[0] = batch_first_x;
    const std::string out = fresh_name(g, types, base + "/attention_batch_first");
    mha.outputs = {out};
    ir::Node t = make_node(base + "/attention_seq_first", "Transpose", {out}, {m.end});
    t.attrs = {ir::Attribute::of_ints("perm", {1, 0, 2})};
    added = {std::move(mha), std::move(t)};
  } else if (m.end_is_2d) {
    // [A0, A1, E] -> [A0*A1, E]: the same elements in the same order.
    const std::string out = fresh_name(g, types, base + "/attention_output");
    mha.outputs = {out};
    const std::string shape = fresh_name(g, types, base + "/attention_output_shape");
    Tensor s = Tensor::make(DType::kInt64, {2}).value();
    s.data<int64_t>()[0] = -1;
    s.data<int64_t>()[1] = m.hidden;
    g.initializers[shape] = s;
    added = {std::move(mha), make_node(base + "/attention_merge", "Reshape", {out, shape}, {m.end})};
  } else {
    mha.outputs = {m.end};
    added = {std::move(mha)};
  }
  for (const auto& n : added)
    for (const auto& o : n.outputs) types.emplace(o, nullptr);
  std::vector<ir::Node> kept;
  for (auto& n : g.nodes) {
    if (&n == m.anchor)
      for (auto& a : added) kept.push_back(std::move(a));
    if (!m.nodes.count(&n)) kept.push_back(std::move(n));
  }
  g.nodes = std::move(kept);
  // The Transpose into [seq, batch, E] goes when nothing else reads it.
  if (!batch_first_x.empty() && use_counts(g)[m.x] == 0)
    std::erase_if(g.nodes,
                  [&](const ir::Node& n) { return !n.outputs.empty() && n.outputs[0] == m.x; });
}

class AttentionFusion : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    // Only the main graph: attention inside If/Loop bodies is left as it is.
    ir::Graph& g = model.graph;
    bool any = false;
    for (const auto& n : g.nodes) any |= is_onnx_op(&n, "Softmax");
    if (!any) return 0;
    // The types of the values guide matching, and shape-derived integers (torchvision's slice
    // offsets) are read from inference as well.
    const ValueTypes& inferred = ctx.types();
    if (!inferred.inferred) return 0;
    const Values& values = inferred.values;
    Types types;
    for (const auto& [name, t] : inferred.types) types.emplace(name, &t);
    const int64_t fused = rewrite_until_done(g, [&](const GraphIndex& idx, const ir::Node& n) {
      if (!is_onnx_op(&n, "Softmax")) return false;
      auto m = match(g, idx, types, values, n, model.opset(""));
      if (m) rewrite(g, types, *m);
      return m.has_value();
    });
    if (fused == 0) return 0;
    if (!model.opsets.count("ai.kiln")) model.opsets["ai.kiln"] = 1;
    // Value infos of the values the fusion removed go with them.
    std::set<std::string> produced;
    for (const auto& n : g.nodes) produced.insert(n.outputs.begin(), n.outputs.end());
    for (const auto& kv : g.initializers) produced.insert(kv.first);
    std::erase_if(g.value_info, [&](const ir::ValueInfo& vi) { return !produced.count(vi.name); });
    return fused;
  }
};

}  // namespace

KILN_REGISTER_PASS(AttentionFusion, "attention-fusion", 2, kFuse, 20, false);

}  // namespace kiln::passes
