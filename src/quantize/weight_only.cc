// Weight-only quantization of MatMul (`kiln quantize --weight-only`): each MatMul with a constant
// float32 2-D weight W [K, N] keeps float activations and gets its weight in
//  - 8 bits: int8 per column (symmetric, max|w| / 127) behind a DequantizeLinear with axis 1,
//    standard QDQ that every runtime loads (kiln folds it back into float weights at load);
//  - 4 bits: ONNX Runtime's com.microsoft.MatMulNBits, blocks of block_size values along K with a
//    scale each (symmetric: codes round(w / scale) within +-7, stored + 8, MatMulNBits' default
//    zero point), 1/8 of the float weight's bytes.
// Activations stay float, so only the model's size and the weights' precision change.
#include <algorithm>
#include <cmath>

#include "passes/graph_edit.h"
#include "quantize/quantize_internal.h"

namespace kiln::quantize {
namespace {

// W [K, N] as MatMulNBits' B uint8 [N, k_blocks, block / 2] (two codes a byte, low first) and
// scales float32 [N * k_blocks].
std::pair<Tensor, Tensor> pack_4bit(const Tensor& w, int64_t block) {
  const int64_t k = w.dim(0), n = w.dim(1), blocks = (k + block - 1) / block;
  Tensor b = Tensor::make(DType::kUInt8, {n, blocks, block / 2}).value();  // zeros: code 0 past K
  Tensor scales = Tensor::make(DType::kFloat32, {n * blocks}).value();
  const float* wd = w.data<float>();
  uint8_t* bd = b.data<uint8_t>();
  for (int64_t j = 0; j < n; ++j)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t k0 = blk * block, k1 = std::min(k, k0 + block);
      float top = 0;
      for (int64_t q = k0; q < k1; ++q)
        if (std::isfinite(wd[q * n + j])) top = std::max(top, std::fabs(wd[q * n + j]));
      const float s = top > 0 ? top / 7 : 1.0f;
      scales.data<float>()[j * blocks + blk] = s;
      uint8_t* codes = bd + (j * blocks + blk) * (block / 2);
      for (int64_t q = k0; q < k1; ++q) {
        const float v = std::isfinite(wd[q * n + j]) ? std::nearbyint(wd[q * n + j] / s) : 0.0f;
        const auto code = static_cast<uint8_t>(std::clamp(v, -7.0f, 7.0f) + 8.0f);
        codes[(q - k0) / 2] |= static_cast<uint8_t>(code << (4 * ((q - k0) % 2)));
      }
    }
  return {std::move(b), std::move(scales)};
}

}  // namespace

Status write_weight_only(ir::Model& model, const QuantizeOptions& options, QuantizeReport* report) {
  ir::Graph& g = model.graph;
  const int bits = options.weight_only_bits;
  const int64_t block = options.block_size;
  if (bits != 4 && bits != 8) return Status::invalid_argument("weight-only quantization takes 4 or 8 bits");
  if (bits == 4 && (block < 16 || (block & (block - 1)) != 0))
    return Status::invalid_argument("--block-size must be a power of two >= 16, got " + std::to_string(block));
  std::vector<ir::Node> nodes;
  std::set<std::string> replaced;
  for (ir::Node& n : g.nodes) {
    const Tensor* w = n.domain.empty() && n.op_type == "MatMul" && n.inputs.size() == 2
                          ? passes::constant_value(g, n.inputs[1])
                          : nullptr;
    if (!w || w->dtype() != DType::kFloat32 || w->rank() != 2 || asked_float(options, n)) {
      nodes.push_back(std::move(n));
      continue;
    }
    const std::string base = n.inputs[1], stem = n.name.empty() ? n.outputs[0] : n.name;
    report->weight_bytes_before += w->nbytes();
    ++report->quantized_nodes;
    replaced.insert(base);
    if (bits == 8) {
      QuantizedWeight q = quantize_weight(*w, 1, true, 127.0f);
      const std::string qn = passes::fresh_name(g, base + "_quantized"), sn = passes::fresh_name(g, base + "_scale"),
                        zn = passes::fresh_name(g, base + "_zero_point"), dn = passes::fresh_name(g, base + "_dequantized");
      report->weight_bytes_after += q.q.nbytes() + q.scale.nbytes();
      g.initializers[qn] = std::move(q.q), g.initializers[sn] = std::move(q.scale), g.initializers[zn] = std::move(q.zero_point);
      ir::Node dq = passes::make_node(stem + "_weight_DequantizeLinear", "DequantizeLinear", {qn, sn, zn}, {dn});
      dq.attrs.push_back(ir::Attribute::of_int("axis", 1));
      nodes.push_back(std::move(dq));
      n.inputs[1] = dn;
      nodes.push_back(std::move(n));
      continue;
    }
    auto [b, scales] = pack_4bit(*w, block);
    report->weight_bytes_after += b.nbytes() + scales.nbytes();
    const std::string bn = passes::fresh_name(g, base + "_4bit"), sn = passes::fresh_name(g, base + "_scales");
    g.initializers[bn] = std::move(b), g.initializers[sn] = std::move(scales);
    ir::Node mm = passes::make_node(stem + "_MatMulNBits", "MatMulNBits", {n.inputs[0], bn, sn}, n.outputs, "com.microsoft");
    mm.attrs = {ir::Attribute::of_int("K", w->dim(0)), ir::Attribute::of_int("N", w->dim(1)), ir::Attribute::of_int("bits", 4),
                ir::Attribute::of_int("block_size", block)};
    nodes.push_back(std::move(mm));
    model.opsets.emplace("com.microsoft", 1);
  }
  g.nodes = std::move(nodes);
  passes::drop_unread_initializers(g, replaced);
  return Status::ok();
}

}  // namespace kiln::quantize
