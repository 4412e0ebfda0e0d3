// Embedding fusion (-O2): LayerNorm(word[ids] + position[arange(seq)] (+ segment[segment_ids]))
// becomes ai.kiln.EmbedLayerNorm, which takes the positions from the ids' shape. BERT exports
// compute those positions from Shape(input_ids) (Range, or a Slice of a position_ids buffer);
// the fused op needs neither, so no Shape node stays while batch and seq stay dynamic.
#include <optional>

#include "ir/op_schema.h"
#include "passes/graph_edit.h"
#include "passes/graph_index.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

using Types = std::map<std::string, ir::TypeInfo>;
using Values = std::map<std::string, ir::Dims>;

const ir::TypeInfo* shaped(const Types& types, const std::string& v) {
  auto it = types.find(v);
  return it != types.end() && it->second.kind == ir::TypeInfo::Kind::kTensor && it->second.has_shape
             ? &it->second
             : nullptr;
}

std::optional<std::vector<int64_t>> ints_of(const GraphIndex& idx, const std::string& v) {
  const Tensor* t = idx.constant(v);
  if (!t || (t->dtype() != DType::kInt64 && t->dtype() != DType::kInt32)) return std::nullopt;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < t->numel(); ++i)
    out.push_back(t->dtype() == DType::kInt64 ? t->data<int64_t>()[i] : t->data<int32_t>()[i]);
  return out;
}

// Whether the one integer `v` holds equals dim `seq` (a constant, or a size taken from a Shape).
bool equals_dim(const GraphIndex& idx, const Values& values, const std::string& v,
                const ir::Dim& seq) {
  if (auto c = ints_of(idx, v)) return c->size() == 1 && seq.known() && (*c)[0] == seq.value;
  auto it = values.find(v);
  return it != values.end() && it->second.size() == 1 && ir::same_dim(it->second[0], seq);
}

// When `v` holds 0, 1, ..., n-1 as [n] or [1, n], the value holding n: Range(0, n, 1), optionally
// unsqueezed at axis 0, or a Slice [0, n) of a constant [1, L] buffer counting from 0 (Hugging
// Face's position_ids).
std::optional<std::string> positions_limit(const GraphIndex& idx, const std::string& v) {
  const ir::Node* n = idx.producer(v);
  if (is_onnx_op(n, "Unsqueeze")) {
    std::vector<int64_t> axes = n->attr_ints("axes");
    if (n->has_input(1)) axes = ints_of(idx, n->inputs[1]).value_or(std::vector<int64_t>{});
    if (axes != std::vector<int64_t>{0}) return std::nullopt;
    n = idx.producer(n->inputs[0]);
    if (!is_onnx_op(n, "Range")) return std::nullopt;
  }
  if (is_onnx_op(n, "Range") && n->inputs.size() == 3 &&
      ints_of(idx, n->inputs[0]) == std::vector<int64_t>{0} &&
      ints_of(idx, n->inputs[2]) == std::vector<int64_t>{1})
    return n->inputs[1];
  if (is_onnx_op(n, "Slice") && n->inputs.size() >= 4) {
    const Tensor* buf = idx.constant(n->inputs[0]);
    if (!buf || buf->dtype() != DType::kInt64 || buf->rank() != 2 || buf->dim(0) != 1)
      return std::nullopt;
    for (int64_t i = 0; i < buf->numel(); ++i)
      if (buf->data<int64_t>()[i] != i) return std::nullopt;
    auto axes = ints_of(idx, n->inputs[3]);
    const bool unit_step =
        !n->has_input(4) || ints_of(idx, n->inputs[4]) == std::vector<int64_t>{1};
    if (ints_of(idx, n->inputs[1]) == std::vector<int64_t>{0} && axes && axes->size() == 1 &&
        ((*axes)[0] == 1 || (*axes)[0] == -1) && unit_step)
      return n->inputs[2];
  }
  return std::nullopt;
}

// Gather(table, indices) on axis 0 of a float32 [rows, width] constant.
const ir::Node* table_lookup(const GraphIndex& idx, const std::string& v, int64_t width) {
  const ir::Node* n = idx.producer(v);
  if (!is_onnx_op(n, "Gather") || n->inputs.size() != 2 || n->attr_int("axis", 0) != 0)
    return nullptr;
  const Tensor* t = idx.constant(n->inputs[0]);
  if (!t || t->dtype() != DType::kFloat32 || t->rank() != 2 || t->dim(1) != width) return nullptr;
  return n;
}

struct Match {
  std::vector<const ir::Node*> absorbed;  // the Adds, the lookups and the normalisation
  std::string ids, segment_ids, word, position, segment;
  std::optional<Tensor> position_table;  // a folded position slice, stored under `position`
};

// The summands of an Add tree whose inner sums are read only by the tree.
void summands(const GraphIndex& idx, const std::string& v, std::vector<std::string>& out,
              std::vector<const ir::Node*>& adds, int depth = 0) {
  const ir::Node* n = idx.producer(v);
  if (depth < 3 && is_onnx_op(n, "Add") && n->inputs.size() == 2 && idx.single_use(v)) {
    adds.push_back(n);
    for (const auto& i : n->inputs) summands(idx, i, out, adds, depth + 1);
    return;
  }
  out.push_back(v);
}

std::optional<Match> match(const GraphIndex& idx, const Types& types, const Values& values,
                           const ir::Node& ln) {
  std::vector<std::string> terms;
  Match m;
  if (ln.domain == "ai.kiln" && ln.op_type == "SkipLayerNorm") {
    if (ln.inputs.size() > 4 || ln.outputs.size() != 1 || ln.inputs.size() < 3) return std::nullopt;
    for (int i = 0; i < 2; ++i) summands(idx, ln.inputs[static_cast<size_t>(i)], terms, m.absorbed);
  } else if (is_onnx_op(&ln, "LayerNormalization")) {
    for (size_t i = 1; i < ln.outputs.size(); ++i)
      if (!ln.outputs[i].empty()) return std::nullopt;
    const ir::Node* add = idx.producer(ln.inputs[0]);
    if (!is_onnx_op(add, "Add") || !idx.single_use(ln.inputs[0])) return std::nullopt;
    summands(idx, ln.inputs[0], terms, m.absorbed);
  } else {
    return std::nullopt;
  }
  const ir::TypeInfo* y = shaped(types, ln.outputs[0]);
  if (!y || y->dtype != DType::kFloat32 || y->shape.size() != 3 || !y->shape[2].known())
    return std::nullopt;
  if (ln.attr_int("axis", -1) != -1 && ln.attr_int("axis", -1) != 2) return std::nullopt;
  const int64_t width = y->shape[2].value;
  // Scale and bias (inputs 1, 2 of LayerNormalization; 2, 3 of SkipLayerNorm) are [E] vectors.
  const size_t at = ln.domain.empty() ? 1 : 2;
  if (ln.attr_int("stash_type", 1) != 1 || !ln.has_input(at)) return std::nullopt;
  for (size_t i = at; i < at + 2 && i < ln.inputs.size(); ++i) {
    if (ln.inputs[i].empty()) continue;
    const ir::TypeInfo* t = shaped(types, ln.inputs[i]);
    const Tensor* c = idx.constant(ln.inputs[i]);
    const bool vector =
        (t && t->dtype == DType::kFloat32 && t->shape.size() == 1 &&
         ir::same_dim(t->shape[0], y->shape[2])) ||
        (c && c->dtype() == DType::kFloat32 && c->rank() == 1 && c->dim(0) == width);
    if (!vector) return std::nullopt;
  }
  if (terms.size() < 2 || terms.size() > 3) return std::nullopt;
  std::vector<const ir::Node*> tokens;
  const ir::Node* position = nullptr;
  const Tensor* folded = nullptr;  // with seq fixed, constant folding leaves position[0:seq]
  for (const auto& t : terms) {
    if (const Tensor* c = idx.constant(t)) {
      const bool slice = c->dtype() == DType::kFloat32 && c->rank() >= 2 && c->rank() <= 3 &&
                         c->shape().back() == width && (c->rank() == 2 || c->dim(0) == 1);
      if (!slice || folded) return std::nullopt;
      folded = c;
      continue;
    }
    const ir::Node* lookup = idx.single_use(t) ? table_lookup(idx, t, width) : nullptr;
    if (!lookup) return std::nullopt;
    m.absorbed.push_back(lookup);
    const ir::TypeInfo* it = shaped(types, lookup->inputs[1]);
    if (positions_limit(idx, lookup->inputs[1])) {
      if (position) return std::nullopt;
      position = lookup;
    } else if (it && it->shape.size() == 2 && dtype_is_integer(it->dtype)) {
      tokens.push_back(lookup);
    } else {
      return std::nullopt;
    }
  }
  if (!!position == !!folded || tokens.empty() || tokens.size() + 1 != terms.size())
    return std::nullopt;
  // Every id tensor is [batch, seq] alike, and the positions count seq.
  const ir::TypeInfo* ids = shaped(types, tokens[0]->inputs[1]);
  for (const ir::Node* t : tokens) {
    const ir::TypeInfo* s = shaped(types, t->inputs[1]);
    if (!ir::same_dim(s->shape[0], ids->shape[0]) || !ir::same_dim(s->shape[1], ids->shape[1]))
      return std::nullopt;
  }
  if (position &&
      !equals_dim(idx, values, *positions_limit(idx, position->inputs[1]), ids->shape[1]))
    return std::nullopt;
  // A folded slice holds exactly seq rows: the fused op must not accept a longer sequence.
  if (folded && !(ids->shape[1].known() && folded->dim(folded->rank() - 2) == ids->shape[1].value))
    return std::nullopt;
  // The larger table holds the words.
  if (tokens.size() == 2 &&
      idx.constant(tokens[1]->inputs[0])->dim(0) > idx.constant(tokens[0]->inputs[0])->dim(0))
    std::swap(tokens[0], tokens[1]);
  m.ids = tokens[0]->inputs[1];
  m.word = tokens[0]->inputs[0];
  if (position) {
    m.position = position->inputs[0];
  } else {
    m.position_table = folded->reshaped({folded->dim(folded->rank() - 2), width});
  }
  if (tokens.size() == 2) {
    m.segment_ids = tokens[1]->inputs[1];
    m.segment = tokens[1]->inputs[0];
  }
  m.absorbed.push_back(&ln);
  return m;
}

class EmbedLayerNormFusion : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    ir::Graph& g = model.graph;
    bool any = false;
    for (const auto& n : g.nodes) any |= is_onnx_op(&n, "Gather");
    if (!any) return 0;
    const ValueTypes& vt = ctx.types();
    if (!vt.inferred) return 0;
    const Types& types = vt.types;
    const Values& values = vt.values;
    const int64_t fused = rewrite_until_done(g, [&](const GraphIndex& idx, const ir::Node& n) {
      auto m = match(idx, types, values, n);
      if (m) rewrite(g, n, *m);
      return m.has_value();
    });
    if (fused > 0 && !model.opsets.count("ai.kiln")) model.opsets["ai.kiln"] = 1;
    return fused;
  }

 private:
  static void rewrite(ir::Graph& g, const ir::Node& ln, const Match& m) {
    const size_t at = ln.domain.empty() ? 1 : 2;
    std::string position = m.position;
    if (m.position_table) {
      position = fresh_name(g, ln.outputs[0] + "_positions");
      g.initializers[position] = *m.position_table;
    }
    ir::Node f;
    f.name = (ln.name.empty() ? ln.outputs[0] : ln.name) + "_EmbedLayerNorm";
    f.op_type = "EmbedLayerNorm";
    f.domain = "ai.kiln";
    f.inputs = {m.ids,
                m.segment_ids,
                m.word,
                position,
                m.segment,
                ln.inputs[at],
                ln.inputs.size() > at + 1 ? ln.inputs[at + 1] : ""};
    while (f.inputs.back().empty()) f.inputs.pop_back();
    f.outputs = {ln.outputs[0]};
    f.attrs.push_back(ir::Attribute::of_float("epsilon", ln.attr_float("epsilon", 1e-5f)));
    std::vector<ir::Node> kept;
    for (auto& n : g.nodes) {
      if (&n == &ln)
        kept.push_back(std::move(f));
      else if (std::find(m.absorbed.begin(), m.absorbed.end(), &n) == m.absorbed.end())
        kept.push_back(std::move(n));
    }
    g.nodes = std::move(kept);
  }
};

}  // namespace

KILN_REGISTER_PASS(EmbedLayerNormFusion, "embed-layer-norm", 2, kFuse, 15, false);

}  // namespace kiln::passes
