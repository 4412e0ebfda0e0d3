// One-hot products become row lookups: MatMul(Cast(Equal(x, iota)), W), with iota the constant
// 0, 1, ..., K-1 on its last axis, x integer with last dim 1 and W a float32 constant [K, N], is
// W's row x for each x (jax.nn.one_hot or tf.one_hot followed by a dense layer: magika's byte
// embedding, 2048 x 257 x 64, was an Equal, a Cast and a 67 MFLOP MatMul). It becomes
//   Squeeze(Gather([W; 0], Clip(x, -1, K)), axis -2)
// where the appended zero row K is what an x outside [0, K) selects (its one-hot row is all
// zeros): Clip sends it to K or to -1, which Gather reads as the last row. Exact, except that a
// non-finite weight no longer turns the other rows' 0 * w into NaN. Opset 13 and later (integer
// Clip, Squeeze's axes as an input). A pattern rule (passes/pattern.h), subgraphs included.
#include <algorithm>
#include <cstring>

#include "passes/graph_edit.h"
#include "passes/pass.h"
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

using P = Pattern;

// An int32/int64 constant holding 0, 1, ..., K-1 along its last axis, every other dim 1.
bool is_iota(const Tensor& t) {
  if ((t.dtype() != DType::kInt64 && t.dtype() != DType::kInt32) || t.rank() == 0 || t.numel() < 1) return false;
  for (int64_t d = 0; d + 1 < t.rank(); ++d)
    if (t.dim(d) != 1) return false;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t v = t.dtype() == DType::kInt64 ? t.data<int64_t>()[i] : t.data<int32_t>()[i];
    if (v != i) return false;
  }
  return true;
}

bool is_float32_matrix(const Tensor& t) { return t.dtype() == DType::kFloat32 && t.rank() == 2; }

Tensor integer_scalar(DType t, int64_t v) {
  return t == DType::kInt64 ? Tensor::scalar<int64_t>(DType::kInt64, v)
                            : Tensor::scalar<int32_t>(DType::kInt32, static_cast<int32_t>(v));
}

Rule one_hot_rule() {
  const P equal = P::op("Equal", {P::value("x"), P::constant(is_iota, "iota")}).commutative();
  const P cast = P::op("Cast", {equal}).where([](const ir::Node& n) {
    return n.attr_int("to", 0) == static_cast<int64_t>(DType::kFloat32);
  });
  return {"one-hot-gather", P::op("MatMul", {cast, P::constant(is_float32_matrix, "w")}),
          [](const Match& m, RuleContext& rc) -> std::optional<std::vector<ir::Node>> {
            const std::string& x = m.value("x");
            const Tensor& iota = m.constant("iota");
            const Tensor& w = m.constant("w");
            const int64_t k = iota.numel(), n = w.dim(1);
            const ir::TypeInfo* t = rc.ctx.types().tensor(x);
            // x [..., 1] of iota's type and at least its rank: the one-hot is x's shape with K last.
            if (w.dim(0) != k || !t || t->dtype != iota.dtype() || !t->has_shape || t->shape.empty() ||
                static_cast<int64_t>(t->shape.size()) < iota.rank() || !t->shape.back().known() ||
                t->shape.back().value != 1)
              return std::nullopt;
            const std::string base = m.root->name.empty() ? m.root->outputs[0] : m.root->name;
            const std::string table = rc.fresh_name(base + "_rows");
            Tensor padded = Tensor::make(DType::kFloat32, {k + 1, n}).value();
            std::memcpy(padded.data<float>(), w.data<float>(), static_cast<size_t>(k * n) * sizeof(float));
            std::fill_n(padded.data<float>() + k * n, n, 0.0f);
            rc.graph.initializers[table] = std::move(padded);
            const std::string lo = rc.fresh_name(base + "_below"), hi = rc.fresh_name(base + "_above");
            rc.graph.initializers[lo] = integer_scalar(iota.dtype(), -1);
            rc.graph.initializers[hi] = integer_scalar(iota.dtype(), k);
            const std::string axes = rc.fresh_name(base + "_axes");
            Tensor axis = Tensor::make(DType::kInt64, {1}).value();
            axis.data<int64_t>()[0] = -2;
            rc.graph.initializers[axes] = std::move(axis);
            const std::string index = rc.fresh_name(base + "_index"), rows = rc.fresh_name(base + "_gathered");
            return std::vector<ir::Node>{make_node(base + "_Clip", "Clip", {x, lo, hi}, {index}),
                                         make_node(base + "_Gather", "Gather", {table, index}, {rows}),
                                         make_node(base + "_Squeeze", "Squeeze", {rows, axes}, m.root->outputs)};
          }};
}

class OneHotGather : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    if (model.opset("") < 13) return int64_t{0};
    static const std::vector<Rule> rules = {one_hot_rule()};
    return apply_rules(model, ctx, rules);
  }
};

}  // namespace

KILN_REGISTER_PASS(OneHotGather, "one-hot-gather", 1, kSimplify, 57, true);

}  // namespace kiln::passes
