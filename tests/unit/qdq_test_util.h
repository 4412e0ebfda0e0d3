// Builders of QDQ test models, as ONNX Runtime's quantize_static writes them (passes_qdq_test.cc,
// passes_qdq_matmul_test.cc).
#pragma once

#include <string>

#include "pass_test_util.h"

namespace kiln::qdq_test {

// DQ(name_q) with the given parts, as the quantizer writes a weight or bias.
inline void dequantized_constant(test::Builder& b, const std::string& name, Tensor q, Tensor s, Tensor z, int64_t axis) {
  auto& init = b.m.graph.initializers;
  init[name + "_q"] = std::move(q), init[name + "_s"] = std::move(s), init[name + "_z"] = std::move(z);
  b.add("DequantizeLinear", {name + "_q", name + "_s", name + "_z"}, {name}, {test::attr_i("axis", axis)});
}

// Q then DQ of `x` with scale s and u8 zero point z: what each quantized tensor looks like.
inline void qdq(test::Builder& b, const std::string& x, const std::string& q, const std::string& dq, float s, int z) {
  auto& init = b.m.graph.initializers;
  init[q + "_s"] = test::scalar_of(DType::kFloat32, s), init[q + "_z"] = test::scalar_of(DType::kUInt8, z);
  b.add("QuantizeLinear", {x, q + "_s", q + "_z"}, {q});
  b.add("DequantizeLinear", {q, q + "_s", q + "_z"}, {dq});
}

}  // namespace kiln::qdq_test
