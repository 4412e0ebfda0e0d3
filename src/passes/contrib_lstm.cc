// ONNX Runtime's com.microsoft.DynamicQuantizeLSTM (what its dynamic quantizer writes for an
// LSTM) becomes a standard LSTM on its weights dequantized once here: W [D, input, 4H] and R
// [D, H, 4H] of int8/uint8 with per-direction or per-column scales and zero points become float
// W [D, 4H, input] and R [D, 4H, H]. ONNX Runtime also quantizes the activations at every step,
// to 8 bits; the recurrent kernel finds the dequantized weights' codes and rounds the activations
// to 16 bits (kernels/cpu/rnn/coded_rows.h). Needs constant weights, scales and zero points; -O1,
// portable.
#include "passes/graph_edit.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

// Inputs of DynamicQuantizeLSTM after LSTM's eight (X, W, R, B, sequence_lens, initial_h,
// initial_c, P).
constexpr size_t kWScale = 8, kWZero = 9, kRScale = 10, kRZero = 11;

// q [D, K, N] dequantized and transposed to [D, N, K]: (q[d, k, n] - zero) * scale, with scale
// and zero of shape [D] or [D, N]. nullopt when the shapes or types do not fit.
std::optional<Tensor> dequantize_transposed(const Tensor& q, const Tensor& scale, const Tensor& zero) {
  if (q.rank() != 3 || (q.dtype() != DType::kInt8 && q.dtype() != DType::kUInt8)) return std::nullopt;
  const int64_t dirs = q.dim(0), k = q.dim(1), n = q.dim(2);
  const bool per_column = scale.numel() == dirs * n && scale.rank() == 2;
  if (scale.dtype() != DType::kFloat32 || zero.dtype() != q.dtype() || zero.numel() != scale.numel() ||
      (!per_column && scale.numel() != dirs))
    return std::nullopt;
  auto out = Tensor::make(DType::kFloat32, {dirs, n, k});
  if (!out) return std::nullopt;
  const bool s8 = q.dtype() == DType::kInt8;
  auto at = [&](const Tensor& t, int64_t i) -> float {
    return s8 ? static_cast<float>(t.data<int8_t>()[i]) : static_cast<float>(t.data<uint8_t>()[i]);
  };
  float* w = out->data<float>();
  for (int64_t d = 0; d < dirs; ++d)
    for (int64_t j = 0; j < n; ++j) {
      const int64_t p = per_column ? d * n + j : d;
      const float s = scale.data<float>()[p], z = at(zero, p);
      for (int64_t i = 0; i < k; ++i) w[(d * n + j) * k + i] = (at(q, (d * k + i) * n + j) - z) * s;
    }
  return std::move(out).value();
}

bool lower(ir::Graph& g, ir::Node& n) {
  if (n.domain != "com.microsoft" || n.op_type != "DynamicQuantizeLSTM" || n.inputs.size() < 12) return false;
  const Tensor* t[12] = {};
  for (size_t i : {size_t{1}, size_t{2}, kWScale, kWZero, kRScale, kRZero}) {
    t[i] = n.has_input(i) ? constant_value(g, n.inputs[i]) : nullptr;
    if (!t[i]) return false;
  }
  auto w = dequantize_transposed(*t[1], *t[kWScale], *t[kWZero]);
  auto r = dequantize_transposed(*t[2], *t[kRScale], *t[kRZero]);
  if (!w || !r) return false;
  const std::string w_name = fresh_name(g, n.inputs[1] + "_dequantized");
  g.initializers[w_name] = std::move(*w);
  const std::string r_name = fresh_name(g, n.inputs[2] + "_dequantized");
  g.initializers[r_name] = std::move(*r);
  n.domain.clear();
  n.op_type = "LSTM";
  n.inputs.resize(8);
  n.inputs[1] = w_name;
  n.inputs[2] = r_name;
  while (!n.inputs.empty() && n.inputs.back().empty()) n.inputs.pop_back();
  return true;
}

class ContribLstm : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext&) override {
    int64_t lowered = 0;
    for_each_graph(model.graph, [&](ir::Graph& g) {
      for (ir::Node& n : g.nodes) lowered += lower(g, n);
    });
    return lowered;
  }
};

}  // namespace

KILN_REGISTER_PASS(ContribLstm, "contrib-lstm", 1, kSimplify, 5, true);

}  // namespace kiln::passes
