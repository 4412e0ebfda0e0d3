// Reshape(x) to [rows, K] -> Gemm(B, C) -> Reshape back to [..., N] becomes
// Reshape(x) to [..., K] -> MatMul(B) -> Add(C): torch writes nn.Linear on a flattened view this
// way (nn.MultiheadAttention's out_proj). Keeping the real leading axes lets later passes follow
// them (attention fusion, transpose cancelling) and the Add fuse into the MatMul epilogue.
#include "passes/graph_edit.h"
#include "passes/graph_index.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

std::optional<std::vector<int64_t>> int64_values(const Tensor* t) {
  if (!t || t->dtype() != DType::kInt64 || t->rank() != 1) return std::nullopt;
  return std::vector<int64_t>(t->data<int64_t>(), t->data<int64_t>() + t->numel());
}

// The shape [..., N] the Gemm output is reshaped to, when its leading entries only regroup the
// rows: no 0 (copy a dim of the 2-D input), at most one -1, and the last entry exactly N.
bool restores_rows(const std::vector<int64_t>& shape, int64_t n) {
  if (shape.size() < 2 || shape.back() != n) return false;
  int unknown = 0;
  for (size_t i = 0; i + 1 < shape.size(); ++i) {
    if (shape[i] == 0 || shape[i] < -1) return false;
    unknown += shape[i] == -1;
  }
  return unknown <= 1;
}

Tensor transposed(const Tensor& b) {
  Tensor t = Tensor::make(DType::kFloat32, {b.dim(1), b.dim(0)}).value();
  for (int64_t i = 0; i < b.dim(0); ++i)
    for (int64_t j = 0; j < b.dim(1); ++j)
      t.data<float>()[j * b.dim(0) + i] = b.data<float>()[i * b.dim(1) + j];
  return t;
}

class GemmToMatMul : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext&) override {
    ir::Graph& g = model.graph;
    return rewrite_until_done(
        g, [&g](const GraphIndex& idx, const ir::Node& n) { return try_rewrite(g, idx, n); });
  }

 private:
  // Rewrites the pattern around `gemm` when it matches.
  static bool try_rewrite(ir::Graph& g, const GraphIndex& idx, const ir::Node& gemm) {
    if (!is_onnx_op(&gemm, "Gemm") || gemm.inputs.size() < 2 || gemm.outputs.size() != 1)
      return false;
    if (gemm.attr_int("transA", 0) != 0 || gemm.attr_float("alpha", 1) != 1 ||
        gemm.attr_float("beta", 1) != 1)
      return false;
    const ir::Node* flatten = idx.producer(gemm.inputs[0]);
    const ir::Node* restore = idx.sole_consumer(gemm.outputs[0]);
    if (!is_onnx_op(flatten, "Reshape") || !is_onnx_op(restore, "Reshape") ||
        restore->inputs[0] != gemm.outputs[0] || !idx.sole_consumer(gemm.inputs[0]))
      return false;
    const Tensor* b = idx.constant(gemm.inputs[1]);
    if (!b || b->dtype() != DType::kFloat32 || b->rank() != 2) return false;
    const bool trans_b = gemm.attr_int("transB", 0) != 0;
    const int64_t k = trans_b ? b->dim(1) : b->dim(0), n = trans_b ? b->dim(0) : b->dim(1);
    const Tensor* c = gemm.has_input(2) ? idx.constant(gemm.inputs[2]) : nullptr;
    if (gemm.has_input(2)) {
      // C must add the same row to every row: N values, or one.
      if (!c || c->dtype() != DType::kFloat32 || (c->numel() != n && c->numel() != 1)) return false;
      if (c->rank() > 2 || (c->rank() == 2 && c->dim(0) != 1)) return false;
    }
    auto shape = int64_values(idx.constant(restore->inputs[1]));
    if (!shape || !restores_rows(*shape, n) || restore->attr_int("allowzero", 0) != 0) return false;
    rewrite(g, gemm, *flatten, *restore, *b, trans_b, k, c, *shape);
    return true;
  }

  static void rewrite(ir::Graph& g, const ir::Node& gemm, const ir::Node& flatten,
                      const ir::Node& restore, const Tensor& b, bool trans_b, int64_t k,
                      const Tensor* c, std::vector<int64_t> shape) {
    const std::string flat = gemm.inputs[0], product = gemm.outputs[0], out = restore.outputs[0];
    shape.back() = k;
    const std::string shape_name = fresh_name(g, flat + "_shape");
    g.initializers[shape_name] =
        Tensor::make(DType::kInt64, {static_cast<int64_t>(shape.size())}).value();
    std::copy(shape.begin(), shape.end(), g.initializers[shape_name].data<int64_t>());
    std::string weight = gemm.inputs[1];
    if (trans_b) {
      weight = fresh_name(g, weight + "_t");
      g.initializers[weight] = transposed(b);
    }
    std::string bias;
    if (c) {
      bias = gemm.inputs[2];
      if (c->rank() > 1) {
        bias = fresh_name(g, bias + "_row");
        g.initializers[bias] = c->reshaped({c->numel()});
      }
    }
    ir::Node matmul;
    matmul.name = gemm.name;
    matmul.op_type = "MatMul";
    matmul.inputs = {flat, weight};
    matmul.outputs = {c ? product : out};
    std::vector<ir::Node> added = {std::move(matmul)};
    if (c) {
      ir::Node add;
      add.name = gemm.name + "_bias";
      add.op_type = "Add";
      add.inputs = {product, bias};
      add.outputs = {out};
      added.push_back(std::move(add));
    }
    std::vector<ir::Node> kept;
    for (auto& n : g.nodes) {
      if (&n == &restore) continue;
      if (&n == &flatten) {
        ir::Node f = std::move(n);
        f.inputs.resize(2);
        f.inputs[1] = shape_name;
        f.attrs.clear();
        kept.push_back(std::move(f));
        continue;
      }
      if (&n == &gemm) {
        for (auto& a : added) kept.push_back(std::move(a));
        continue;
      }
      kept.push_back(std::move(n));
    }
    g.nodes = std::move(kept);
    forget_value_info(g, {flat, product});
  }
};

}  // namespace

KILN_REGISTER_PASS(GemmToMatMul, "gemm-to-matmul", 1, kSimplify, 65, true);

}  // namespace kiln::passes
