// Folds an inference BatchNormalization into the Conv, ConvTranspose or Gemm before it: the
// per-channel scale gamma/sqrt(var+eps) goes into the weights, the shift into the bias. Exact in
// real arithmetic.
// One that follows no such op (DenseNet's BN-ReLU-Conv, a BN after a Concat or an input)
// becomes the same scale and shift as Mul and Add by per-channel constants, which the
// elementwise fusions then merge with what is around it.
#include <algorithm>
#include <cmath>

#include "passes/graph_edit.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

const Tensor* f32_constant(const ir::Graph& g, const ir::Node& n, size_t i) {
  if (!n.has_input(i)) return nullptr;
  const Tensor* t = constant_value(g, n.inputs[i]);
  return t && t->dtype() == DType::kFloat32 ? t : nullptr;
}

// Per-channel scale and shift of a BatchNormalization in inference, or nullopt.
struct Affine {
  std::vector<double> scale, shift;
};
std::optional<Affine> bn_affine(const ir::Graph& g, const ir::Node& bn, int64_t opset) {
  if (bn.inputs.size() != 5 || bn.outputs.empty()) return std::nullopt;
  for (size_t i = 1; i < bn.outputs.size(); ++i)
    if (!bn.outputs[i].empty()) return std::nullopt;  // training outputs read
  if (bn.attr_int("training_mode", 0) != 0 || (opset < 9 && bn.attr_int("spatial", 1) == 0) ||
      (opset < 7 && bn.attr_int("is_test", 0) == 0))
    return std::nullopt;
  const Tensor* p[4];
  for (size_t i = 0; i < 4; ++i) {
    p[i] = f32_constant(g, bn, i + 1);
    if (!p[i] || p[i]->rank() != 1 || p[i]->numel() != p[0]->numel()) return std::nullopt;
  }
  const double eps = bn.attr_float("epsilon", 1e-5f);
  Affine a;
  for (int64_t c = 0; c < p[0]->numel(); ++c) {
    const double s =
        p[0]->data<float>()[c] / std::sqrt(static_cast<double>(p[3]->data<float>()[c]) + eps);
    a.scale.push_back(s);
    a.shift.push_back(p[1]->data<float>()[c] - p[2]->data<float>()[c] * s);
  }
  return a;
}

class FoldBatchNorm : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    int64_t folded = 0;
    const int64_t opset = model.opset("");
    // Types before any edit: once a fold has renamed a producer's output to the BN's, the graph
    // defines that value twice until the BN goes, and inference would fail.
    const ValueTypes* types = nullptr;
    if (std::any_of(model.graph.nodes.begin(), model.graph.nodes.end(),
                    [](const ir::Node& n) { return n.op_type == "BatchNormalization"; }))
      types = &ctx.types();
    auto rank_of = [&](const std::string& value) { return types ? types->rank(value) : std::nullopt; };
    for_each_graph(model.graph, [&](ir::Graph& g) {
      const auto uses = use_counts(g);
      std::map<std::string, size_t> producer;
      for (size_t k = 0; k < g.nodes.size(); ++k)
        for (const auto& o : g.nodes[k].outputs) producer[o] = k;
      std::vector<bool> drop(g.nodes.size(), false);
      for (size_t k = 0; k < g.nodes.size(); ++k) {
        const ir::Node& bn = g.nodes[k];
        if (bn.op_type != "BatchNormalization" || !bn.domain.empty() || !bn.has_input(0)) continue;
        auto it = producer.find(bn.inputs[0]);
        auto u = uses.find(bn.inputs[0]);
        if (it == producer.end() || u == uses.end() || u->second != 1 ||
            is_graph_output(g, bn.inputs[0]))
          continue;
        ir::Node& p = g.nodes[it->second];
        if (!p.domain.empty() || p.outputs.size() != 1 || drop[it->second]) continue;
        auto affine = bn_affine(g, bn, opset);
        if (!affine) continue;
        bool ok = false;
        if (p.op_type == "Conv")
          ok = fold_conv(g, p, *affine);
        else if (p.op_type == "ConvTranspose")
          ok = fold_conv_transpose(g, p, *affine);
        else if (p.op_type == "Gemm")
          ok = fold_gemm(g, p, *affine);
        else if (p.op_type == "MatMul" && opset >= 11 && rank_of(p.inputs[0]) == 2)
          ok = matmul_to_gemm(g, p, *affine);
        if (!ok) continue;
        p.outputs[0] = bn.outputs[0];
        drop[k] = true;
        ++folded;
      }
      std::vector<ir::Node> kept;
      for (size_t k = 0; k < g.nodes.size(); ++k) {
        if (drop[k]) continue;
        ir::Node& bn = g.nodes[k];
        if (bn.op_type == "BatchNormalization" && bn.domain.empty() && bn.has_input(0)) {
          const std::optional<int64_t> rank = rank_of(bn.inputs[0]);
          auto affine = rank && *rank >= 2 ? bn_affine(g, bn, opset) : std::nullopt;
          if (affine) {
            for (ir::Node& step : scale_shift(g, bn, *affine, *rank)) kept.push_back(std::move(step));
            ++folded;
            continue;
          }
        }
        kept.push_back(std::move(g.nodes[k]));
      }
      g.nodes = std::move(kept);
    });
    return folded;
  }

 private:
  // Conv weights [M, C/group, k...]: output channel m scales by scale[m].
  static bool fold_conv(ir::Graph& g, ir::Node& conv, const Affine& a) {
    const Tensor* w = f32_constant(g, conv, 1);
    const int64_t m = static_cast<int64_t>(a.scale.size());
    if (!w || w->rank() < 1 || w->dim(0) != m) return false;
    Tensor nw = w->clone();
    const int64_t per = m ? w->numel() / m : 0;
    for (int64_t o = 0; o < m; ++o)
      for (int64_t i = 0; i < per; ++i)
        nw.data<float>()[o * per + i] =
            static_cast<float>(w->data<float>()[o * per + i] * a.scale[o]);
    return set_weights_and_bias(g, conv, std::move(nw), a);
  }

  // ConvTranspose weights [C, M/group, k...]: input channel c feeds the outputs of its group,
  // (c / (C/group)) * M/group + j for j < M/group; each scales by that output's scale.
  static bool fold_conv_transpose(ir::Graph& g, ir::Node& ct, const Affine& a) {
    const Tensor* w = f32_constant(g, ct, 1);
    const int64_t m = static_cast<int64_t>(a.scale.size()), group = ct.attr_int("group", 1);
    if (!w || w->rank() < 2 || group < 1 || w->dim(1) * group != m || w->dim(0) % group != 0) return false;
    const int64_t c = w->dim(0), mg = w->dim(1), cg = c / group;
    const int64_t per = c * mg ? w->numel() / (c * mg) : 0;  // taps
    Tensor nw = w->clone();
    for (int64_t ci = 0; ci < c; ++ci)
      for (int64_t j = 0; j < mg; ++j) {
        const double s = a.scale[(ci / cg) * mg + j];
        float* d = nw.data<float>() + (ci * mg + j) * per;
        for (int64_t t = 0; t < per; ++t) d[t] = static_cast<float>(d[t] * s);
      }
    return set_weights_and_bias(g, ct, std::move(nw), a);
  }

  // The folded weights nw as the node's input 1, and its bias (input 2, [M] or none) scaled and
  // shifted; false, with nothing changed, when the bias is not a constant [M].
  static bool set_weights_and_bias(ir::Graph& g, ir::Node& conv, Tensor nw, const Affine& a) {
    const int64_t m = static_cast<int64_t>(a.scale.size());
    const Tensor* b = conv.has_input(2) ? f32_constant(g, conv, 2) : nullptr;
    if (conv.has_input(2) && (!b || b->rank() != 1 || b->numel() != m)) return false;
    auto nb = Tensor::make(DType::kFloat32, {m});
    if (!nb) return false;
    for (int64_t o = 0; o < m; ++o)
      nb->data<float>()[o] =
          static_cast<float>((b ? b->data<float>()[o] : 0.0) * a.scale[o] + a.shift[o]);
    const std::string wn = fresh_name(g, conv.inputs[1] + "_bnfold");
    g.initializers[wn] = std::move(nw);
    const std::string bname = fresh_name(g, conv.inputs[1] + "_bnfold_bias");
    g.initializers[bname] = std::move(*nb);
    conv.inputs[1] = wn;
    conv.inputs.resize(3);
    conv.inputs[2] = bname;
    return true;
  }

  // A 2-D MatMul with constant weights [K, N] is a Gemm without C: the fold then adds one.
  static bool matmul_to_gemm(ir::Graph& g, ir::Node& mm, const Affine& a) {
    const Tensor* w = f32_constant(g, mm, 1);
    if (!w || w->rank() != 2 || mm.inputs.size() != 2) return false;
    ir::Node gemm = mm;
    gemm.op_type = "Gemm";
    gemm.attrs.clear();
    if (!fold_gemm(g, gemm, a)) return false;
    mm = std::move(gemm);
    return true;
  }

  // y = x * scale + shift with both shaped [C, 1, ...] to broadcast over x's rank `rank` dims
  // (N, C, spatial...): the BN as two nodes.
  static std::vector<ir::Node> scale_shift(ir::Graph& g, const ir::Node& bn, const Affine& a, int64_t rank) {
    Shape shape(static_cast<size_t>(rank - 1), 1);
    shape[0] = static_cast<int64_t>(a.scale.size());
    auto constant = [&](const std::vector<double>& v, const char* what) {
      Tensor t = Tensor::make(DType::kFloat32, shape).value();
      for (size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = static_cast<float>(v[i]);
      const std::string name = fresh_name(g, bn.inputs[1] + what);
      g.initializers[name] = std::move(t);
      return name;
    };
    ir::Node mul, add;
    mul.op_type = "Mul";
    mul.name = fresh_name(g, bn.name + "_scale");
    mul.inputs = {bn.inputs[0], constant(a.scale, "_bn_scale")};
    mul.outputs = {fresh_name(g, bn.outputs[0] + "_scaled")};
    add.op_type = "Add";
    add.name = fresh_name(g, bn.name + "_shift");
    add.inputs = {mul.outputs[0], constant(a.shift, "_bn_shift")};
    add.outputs = {bn.outputs[0]};
    return {std::move(mul), std::move(add)};
  }

  // Gemm Y = alpha*A*op(B) + beta*C with Y [M, N]: column n scales by scale[n].
  static bool fold_gemm(ir::Graph& g, ir::Node& gemm, const Affine& a) {
    const Tensor* w = f32_constant(g, gemm, 1);
    const int64_t n = static_cast<int64_t>(a.scale.size());
    if (!w || w->rank() != 2) return false;
    const bool trans_b = gemm.attr_int("transB", 0) != 0;
    if ((trans_b ? w->dim(0) : w->dim(1)) != n) return false;
    const Tensor* c = gemm.has_input(2) ? f32_constant(g, gemm, 2) : nullptr;
    if (gemm.has_input(2)) {
      // C must be the same for every row: a scalar, [N] or [1, N].
      if (!c || !(c->numel() == 1 ||
                  (c->numel() == n && (c->rank() == 1 || (c->rank() == 2 && c->dim(0) == 1)))))
        return false;
    }
    const double beta = gemm.attr_float("beta", 1.0f);
    Tensor nw = w->clone();
    float* d = nw.data<float>();
    const int64_t rows = w->dim(0), cols = w->dim(1);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k)
        d[r * cols + k] = static_cast<float>(d[r * cols + k] * a.scale[trans_b ? r : k]);
    auto nc = Tensor::make(DType::kFloat32, {n});
    if (!nc) return false;
    for (int64_t j = 0; j < n; ++j) {
      const double cj = c ? c->data<float>()[c->numel() == 1 ? 0 : j] * beta : 0.0;
      nc->data<float>()[j] = static_cast<float>(cj * a.scale[j] + a.shift[j]);
    }
    const std::string wn = fresh_name(g, gemm.inputs[1] + "_bnfold");
    g.initializers[wn] = std::move(nw);
    const std::string cn = fresh_name(g, gemm.inputs[1] + "_bnfold_bias");
    g.initializers[cn] = std::move(*nc);
    gemm.inputs[1] = wn;
    gemm.inputs.resize(3);
    gemm.inputs[2] = cn;
    for (auto& at : gemm.attrs)
      if (at.name == "beta") at.f = 1.0f;
    return true;
  }
};

}  // namespace

KILN_REGISTER_PASS(FoldBatchNorm, "fold-batchnorm", 1, kSimplify, 70, true);

}  // namespace kiln::passes
