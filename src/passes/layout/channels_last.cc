// -O3 layout pass "channels-last": models that switch to channels-last for a few ops and back
// (ConvNeXt runs each block's LayerNorm and MLP on NHWC between NCHW depthwise convs; models
// ported from Keras run NHWC between the convs) leave, once nchwc-layout has blocked the convs,
// chains like ReorderFromBlocked -> Transpose(NHWC) -> ... -> Transpose(NCHW) -> elementwise
// residual -> ReorderToBlocked: four full passes over memory to move data between three layouts.
// This pass
//  1. moves Transposes down through elementwise ops: E(T(a), b, c) = T(E(a, T^-1(b), c')), the
//     constant c permuted here and T^-1(b) the value a Transpose made b from, or a new Transpose;
//     through a Concat the same way, its axis permuted; through a Split, one Transpose a part
//     (8-bit convs' outputs concatenated or split on their way to the next 8-bit conv);
//  2. folds a Transpose to NHWC after a ReorderFromBlocked, and one to NCHW before a
//     ReorderToBlocked, into the reorder (its channels_last attribute: one pass, not two);
//  3. drops Transposes that undo each other.
// ConvNeXt's residual stream then stays NHWC, and each block's reorders read and write it
// directly. The result is kept only when it has fewer Transposes and reorders than the graph had
// (moving Transposes alone can add some, an inverse for each plain operand).
#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "kernels/cpu/strided_copy.h"
#include "passes/graph_edit.h"
#include "passes/graph_index.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

using Perm = std::vector<int64_t>;
const Perm kToNhwc = {0, 2, 3, 1}, kToNchw = {0, 3, 1, 2};

bool is_perm(const Perm& p) {
  std::vector<bool> seen(p.size(), false);
  for (int64_t a : p) {
    if (a < 0 || a >= static_cast<int64_t>(p.size()) || seen[static_cast<size_t>(a)]) return false;
    seen[static_cast<size_t>(a)] = true;
  }
  return true;
}

Perm inverse(const Perm& p) {
  Perm q(p.size());
  for (size_t j = 0; j < p.size(); ++j) q[static_cast<size_t>(p[j])] = static_cast<int64_t>(j);
  return q;
}

// Node n (Concat, Split) read on its input before Transpose p rather than after: its `axis`
// (default 0) becomes p[axis]. False, n unchanged, where the axis is out of range.
bool permute_axis(ir::Node& n, const Perm& p) {
  const int64_t r = static_cast<int64_t>(p.size()), k = n.attr_int("axis", 0);
  if (k < -r || k >= r) return false;
  std::erase_if(n.attrs, [](const ir::Attribute& a) { return a.name == "axis"; });
  n.attrs.push_back(ir::Attribute::of_int("axis", p[static_cast<size_t>(k < 0 ? k + r : k)]));
  return true;
}

// The perm of a standard Transpose with an explicit, valid one, or empty.
Perm transpose_perm(const ir::Node* n) {
  if (!is_onnx_op(n, "Transpose") || n->inputs.size() != 1 || n->outputs.size() != 1) return {};
  Perm p = n->attr_ints("perm");
  return is_perm(p) ? p : Perm{};
}

bool is_reorder(const ir::Node& n, const char* op) {
  return n.domain == "ai.kiln" && n.op_type == op && !n.attr_int("channels_last", 0);
}

// Ops whose output element i is a function of element i of each input (numpy-broadcast), so
// permuting every input permutes the output the same way. Inputs other than those broadcast
// (Clip's bounds, PRelu's one-way slope) keep such ops out.
bool elementwise(const ir::Node& n) {
  if (n.outputs.size() != 1) return false;
  if (n.domain == "ai.kiln")
    return (n.op_type == "FusedElementwise" && !n.has_attr("x0_parts")) || n.op_type == "QLinearLookup";
  if (n.domain == "com.microsoft")
    return n.op_type == "QLinearAdd" || n.op_type == "QLinearMul" || n.op_type == "QLinearSigmoid";
  if (!n.domain.empty()) return false;
  // QuantizeLinear and DequantizeLinear too (quantization_parameter).
  static const std::set<std::string> nary = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Sum",
                                             "QuantizeLinear", "DequantizeLinear"};
  static const std::set<std::string> unary = {
      "Relu", "Sigmoid", "Tanh",  "Erf",        "Neg",       "Abs",       "Sqrt",
      "Exp",  "Log",     "Gelu",  "Reciprocal", "Softplus",  "HardSwish", "HardSigmoid",
      "Elu",  "Selu",    "LeakyRelu", "Identity"};
  return nary.count(n.op_type) || (unary.count(n.op_type) && n.inputs.size() == 1);
}

// Whether input i of elementwise op n is a quantization parameter (a scale or zero point of
// QuantizeLinear, DequantizeLinear, QLinearAdd, QLinearMul, QLinearSigmoid), not data: those do not broadcast
// (per-axis ones follow `axis`), so only one-value ones, the same in any layout, let n move.
bool quantization_parameter(const ir::Node& n, size_t i) {
  if (n.op_type == "QuantizeLinear" || n.op_type == "DequantizeLinear") return i > 0;
  if (n.op_type == "QLinearAdd" || n.op_type == "QLinearMul") return i != 0 && i != 3;
  if (n.op_type == "QLinearSigmoid") return i > 0;
  return false;
}

// Whether input i of elementwise op n holds values that follow no position of the data, so that
// any layout reads it as it is: QLinearLookup's table (indexed by codes).
bool position_free(const ir::Node& n, size_t i) { return n.domain == "ai.kiln" && n.op_type == "QLinearLookup" && i == 1; }

// The Transposes and reorders whose count the pass lowers: each a full pass over its tensor.
bool moves_data(const ir::Node& n) {
  return is_onnx_op(&n, "Transpose") ||
         (n.domain == "ai.kiln" && n.op_type.rfind("Reorder", 0) == 0);
}

// c (rank <= rank of p, numpy-aligned to the right) permuted by p: out dim j is c's dim p[j]
// (the Transpose kernel's strided copy).
Result<Tensor> permuted(const Tensor& c, const Perm& p) {
  const size_t r = p.size();
  Shape in(r - static_cast<size_t>(c.rank()), 1);
  in.insert(in.end(), c.shape().begin(), c.shape().end());
  Shape out(r), in_strides(r, 1), strides(r);
  for (size_t j = r; j-- > 1;) in_strides[j - 1] = in_strides[j] * in[j];
  for (size_t j = 0; j < r; ++j) {
    out[j] = in[static_cast<size_t>(p[j])];
    strides[j] = in_strides[static_cast<size_t>(p[j])];
  }
  KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::make(c.dtype(), out));
  KILN_RETURN_IF_ERROR(copy_strided(c, 0, strides, &t, nullptr));
  return t;
}

class ChannelsLast : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    const int before = layout_moves(model.graph);
    if (before == 0 || !ctx.types().inferred) return int64_t{0};
    types_ = &ctx.types();
    // Two trials: the folds alone (never worse), and the folds after moving every Transpose
    // down (better where the moves meet their inverses, worse where they add some). The one
    // with fewer data movements is kept.
    std::optional<ir::Graph> best;
    int fewest = before;
    for (const bool move : {false, true}) {
      ir::Graph g = model.graph;  // initializers share their storage
      added_.clear();
      inverses_.clear();
      permuted_.clear();
      if (move)
        rewrite_until_done(g, [&g, this](const GraphIndex& idx, const ir::Node& n) {
          return sink(g, idx, n);
        });
      rewrite_until_done(g, [&g](const GraphIndex& idx, const ir::Node& n) {
        return fold_into_reorder(g, idx, n) || cancel_pair(g, idx, n) || cancel_around(g, idx, n);
      });
      drop_unread(g);
      drop_unread_initializers(g, permuted_);
      const int moves = layout_moves(g);
      if (moves < fewest) fewest = moves, best = std::move(g);
    }
    if (!best) return int64_t{0};
    model.graph = std::move(*best);
    return int64_t{before - fewest};
  }

 private:
  static int layout_moves(const ir::Graph& g) {
    return static_cast<int>(std::count_if(g.nodes.begin(), g.nodes.end(), moves_data));
  }

  std::optional<int64_t> rank(const std::string& v) const {
    auto it = added_.find(v);
    if (it != added_.end()) return it->second;
    return types_->rank(v);
  }

  // Moves Transpose `t` below the elementwise op or Concat that alone reads it, or below the
  // 8-bit global pool (pool_of_nchw) or the Split that alone reads it.
  bool sink(ir::Graph& g, const GraphIndex& idx, const ir::Node& t) {
    const Perm p = transpose_perm(&t);
    if (p.empty() || inverses_.count(t.outputs[0]) || !idx.single_use(t.outputs[0]) ||
        is_graph_output(g, t.outputs[0]))
      return false;
    const ir::Node* e = idx.sole_consumer(t.outputs[0]);
    if (e && p == kToNchw && pool_of_nchw(*e)) return sink_below_pool(g, t, *e);
    if (e && is_onnx_op(e, "Split") && e->inputs[0] == t.outputs[0]) return sink_below_split(g, t, *e);
    const bool concat = e && is_onnx_op(e, "Concat") && e->outputs.size() == 1;
    if (!e || !(elementwise(*e) || concat) || e->outputs[0].empty()) return false;
    const Perm q = inverse(p);
    const int64_t r = static_cast<int64_t>(p.size());
    for (size_t i = 0; i < e->inputs.size(); ++i) {
      const std::string& in = e->inputs[i];
      if (in.empty() || position_free(*e, i)) continue;  // an omitted optional input, a table
      const Tensor* c = in == t.outputs[0] ? nullptr : idx.constant(in);
      if (quantization_parameter(*e, i) && (!c || c->numel() != 1)) return false;
      if (c ? c->rank() > r || (c->numel() != 1 && c->dtype() != DType::kFloat32)
            : in != t.outputs[0] && transpose_perm(idx.producer(in)) != p && rank(in) != r)
        return false;
    }
    std::vector<ir::Node> put;
    std::map<std::string, std::string> becomes;  // each input of e -> what the moved op reads
    ir::Node moved = *e;
    // Concat of T(a), T(b), ... along k = T(Concat of a, b, ... along p[k])
    if (concat && !permute_axis(moved, p)) return false;
    for (size_t i = 0; i < moved.inputs.size(); ++i) {
      std::string& in = moved.inputs[i];
      if (in.empty() || position_free(moved, i)) continue;
      auto known = becomes.find(in);
      if (known != becomes.end()) {
        in = known->second;
        continue;
      }
      std::string& to = becomes[in];
      if (in == t.outputs[0]) {
        to = t.inputs[0];
      } else if (const Tensor* c = idx.constant(in); c && c->numel() == 1) {
        to = in;  // one value broadcasts alike in any layout
      } else if (c) {
        auto t = permuted(*c, q);
        if (!t) return false;  // no memory for the copy: the Transpose stays
        to = fresh_name(g, in + "_perm");
        g.initializers[to] = std::move(t).value();
        permuted_.insert(in);
      } else if (transpose_perm(idx.producer(in)) == p) {
        to = idx.producer(in)->inputs[0];
      } else {
        to = fresh_name(g, in + "_untransposed");
        put.push_back(transpose(g, in, to, q));
        inverses_.insert(to);
      }
      in = to;
    }
    const std::string out = e->outputs[0];
    moved.outputs[0] = fresh_name(g, out + "_untransposed");
    added_[moved.outputs[0]] = r;
    put.push_back(moved);
    put.push_back(transpose(g, moved.outputs[0], out, p));
    std::vector<NodeReplacement> found{{{&t, e}, std::move(put)}};
    replace_nodes(g, found);
    return true;
  }

  // An 8-bit global average pool on NCHW X (ONNX Runtime's QLinearGlobalAveragePool): it reads
  // channels-last X as well (channels_last), and its output of one pixel a channel is cheap to
  // transpose. A squeeze-excitation's pool sits between 8-bit convs that run channels-last: with
  // the Transpose into it moved to its output, the ones around the excitation's 1x1 convs cancel.
  static bool pool_of_nchw(const ir::Node& n) {
    return n.domain == "com.microsoft" && n.op_type == "QLinearGlobalAveragePool" && n.outputs.size() == 1 &&
           !n.attr_int("channels_last", 0);
  }
  bool sink_below_pool(ir::Graph& g, const ir::Node& t, const ir::Node& pool) {
    ir::Node moved = pool;
    moved.inputs[0] = t.inputs[0];
    std::erase_if(moved.attrs, [](const ir::Attribute& a) { return a.name == "channels_last"; });
    moved.attrs.push_back(ir::Attribute::of_int("channels_last", 1));
    const std::string out = pool.outputs[0];
    moved.outputs[0] = fresh_name(g, out + "_untransposed");
    added_[moved.outputs[0]] = static_cast<int64_t>(kToNchw.size());
    std::vector<NodeReplacement> found{{{&t, &pool}, {moved, transpose(g, moved.outputs[0], out, kToNchw)}}};
    replace_nodes(g, found);
    return true;
  }

  // Split of T(x) along k = Split of x along p[k], each part transposed (a YOLO C2f block's halves:
  // their Transposes then cancel against those of the 8-bit convs reading them).
  bool sink_below_split(ir::Graph& g, const ir::Node& t, const ir::Node& split) {
    const Perm p = transpose_perm(&t);
    const int64_t r = static_cast<int64_t>(p.size());
    for (const std::string& o : split.outputs)
      if (o.empty() || is_graph_output(g, o)) return false;
    ir::Node moved = split;
    if (!permute_axis(moved, p)) return false;
    moved.inputs[0] = t.inputs[0];
    std::vector<ir::Node> put;
    for (std::string& o : moved.outputs) {
      const std::string part = fresh_name(g, o + "_untransposed");
      added_[part] = r;
      put.push_back(transpose(g, part, o, p));
      o = part;
    }
    put.insert(put.begin(), std::move(moved));
    std::vector<NodeReplacement> found{{{&t, &split}, std::move(put)}};
    replace_nodes(g, found);
    return true;
  }

  ir::Node transpose(const ir::Graph& g, const std::string& in, const std::string& out,
                     const Perm& p) {
    ir::Node n = make_node(fresh_name(g, out + "_transpose"), "Transpose", {in}, {out});
    n.attrs.push_back(ir::Attribute::of_ints("perm", p));
    added_[out] = static_cast<int64_t>(p.size());
    return n;
  }

  // ReorderFromBlocked -> Transpose to NHWC becomes one ReorderFromBlocked writing NHWC; a
  // Transpose to NCHW read by a ReorderToBlocked is read by a ReorderToBlocked of NHWC instead.
  static bool fold_into_reorder(ir::Graph& g, const GraphIndex& idx, const ir::Node& n) {
    if (is_reorder(n, "ReorderToBlocked") && transpose_perm(idx.producer(n.inputs[0])) == kToNchw) {
      ir::Node r = n;
      r.inputs[0] = idx.producer(n.inputs[0])->inputs[0];
      std::erase_if(r.attrs, [](const ir::Attribute& a) { return a.name == "channels_last"; });
      r.attrs.push_back(ir::Attribute::of_int("channels_last", 1));
      std::vector<NodeReplacement> found{{{&n}, {r}}};
      replace_nodes(g, found);
      return true;
    }
    const ir::Node* from = n.inputs.size() == 1 ? idx.producer(n.inputs[0]) : nullptr;
    if (transpose_perm(&n) != kToNhwc || !from || !is_reorder(*from, "ReorderFromBlocked"))
      return false;
    ir::Node r = *from;
    r.name = fresh_name(g, n.outputs[0] + "_from_nchwc");
    r.outputs = n.outputs;
    std::erase_if(r.attrs, [](const ir::Attribute& a) { return a.name == "channels_last"; });
    r.attrs.push_back(ir::Attribute::of_int("channels_last", 1));
    std::vector<NodeReplacement> found{{{&n}, {r}}};
    replace_nodes(g, found);
    return true;
  }

  // Transpose(q) of Transpose(p) where q undoes p: its readers read p's input.
  static bool cancel_pair(ir::Graph& g, const GraphIndex& idx, const ir::Node& n) {
    const Perm q = transpose_perm(&n);
    const ir::Node* first = q.empty() ? nullptr : idx.producer(n.inputs[0]);
    const Perm p = transpose_perm(first);
    if (p.empty() || p.size() != q.size() || inverse(p) != q || is_graph_output(g, n.outputs[0]))
      return false;
    const std::string from = n.outputs[0], to = first->inputs[0];
    std::vector<NodeReplacement> found{{{&n}, {}}};
    replace_nodes(g, found);
    rename_uses(g, from, to);
    return true;
  }

  // Transpose(q) of E(Transpose(p)(x), c...), q undoing p, E elementwise on one value and
  // one-value constants, read only by the Transpose(q): E(x, c...) in its place. (sink() leaves
  // these where a Transpose was another's inverse: a residual's 8-bit skip path, T_nchw ->
  // DequantizeLinear -> T_nhwc -> Add.)
  static bool cancel_around(ir::Graph& g, const GraphIndex& idx, const ir::Node& n) {
    const Perm q = transpose_perm(&n);
    const ir::Node* e = q.empty() ? nullptr : idx.producer(n.inputs[0]);
    if (!e || !elementwise(*e) || !idx.single_use(e->outputs[0]) || is_graph_output(g, e->outputs[0])) return false;
    const ir::Node* first = nullptr;
    for (size_t i = 0; i < e->inputs.size(); ++i) {
      const std::string& in = e->inputs[i];
      if (in.empty() || position_free(*e, i)) continue;
      const Tensor* c = idx.constant(in);
      if (c ? c->numel() != 1 || c->rank() > static_cast<int64_t>(q.size()) : first != nullptr) return false;
      if (!c) first = idx.producer(in);
    }
    const Perm p = transpose_perm(first);
    if (p.empty() || p.size() != q.size() || inverse(p) != q || is_graph_output(g, n.outputs[0])) return false;
    ir::Node moved = *e;
    for (std::string& in : moved.inputs)
      if (in == first->outputs[0]) in = first->inputs[0];
    moved.outputs[0] = n.outputs[0];
    std::vector<NodeReplacement> found{{{e, &n}, {moved}}};
    replace_nodes(g, found);
    return true;
  }

  // Transposes and reorders that nothing reads any more, and the value infos of what they wrote.
  static void drop_unread(ir::Graph& g) {
    for (size_t count = 0; count != g.nodes.size();) {
      count = g.nodes.size();
      const auto uses = use_counts(g);
      g.nodes.erase(std::remove_if(g.nodes.begin(), g.nodes.end(),
                                   [&](const ir::Node& n) {
                                     return moves_data(n) && n.outputs.size() == 1 &&
                                            !uses.count(n.outputs[0]);
                                   }),
                    g.nodes.end());
    }
    // The value infos of values no node writes any more (the Transposes that went).
    std::set<std::string> written;
    for (const ir::Node& n : g.nodes) written.insert(n.outputs.begin(), n.outputs.end());
    std::erase_if(g.value_info, [&](const ir::ValueInfo& vi) {
      return !written.count(vi.name) && !g.initializers.count(vi.name) && !is_graph_input(g, vi.name);
    });
  }

  const ValueTypes* types_ = nullptr;     // the model's, as the pass found it
  std::map<std::string, int64_t> added_;  // ranks of the values this pass made
  std::set<std::string> inverses_;        // outputs of the T^-1 it added: never moved themselves
  std::set<std::string> permuted_;        // constants whose permuted copies readers took
};

}  // namespace

// After nchwc-layout (10), whose reorders it folds Transposes into.
KILN_REGISTER_PASS(ChannelsLast, "channels-last", 3, kLayout, 15, false);

}  // namespace kiln::passes
