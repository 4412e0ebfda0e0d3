// Shared by the quantization tests: a small CNN to quantize, a calibration reader over samples
// held in a vector, and the cosine of two float tensors.
#pragma once

#include <cmath>
#include <memory>
#include <vector>

#include "kiln/quantize.h"
#include "pass_test_util.h"

namespace kiln::test {

// conv3x3 -> Relu -> MaxPool -> conv1x1 -> + (residual) -> Relu -> GlobalAveragePool -> Flatten -> Gemm.
inline ir::Model small_cnn(int64_t opset) {
  Builder b(opset);
  b.input("x", {1, 8, 12, 12});
  b.conv("x", "c1", 8, 16);
  b.add("Relu", {"c1"}, {"r1"});
  b.add("MaxPool", {"r1"}, {"p1"}, {attr_ints("kernel_shape", {3, 3}), attr_ints("pads", {1, 1, 1, 1})});
  b.conv("p1", "c2", 16, 8, 1);
  b.add("Add", {"c2", "x"}, {"s"});
  b.add("Relu", {"s"}, {"r2"});
  b.add("GlobalAveragePool", {"r2"}, {"g"});
  b.add("Flatten", {"g"}, {"f"});
  b.weight("fc_w", {10, 8});
  b.weight("fc_b", {10});
  b.add("Gemm", {"f", "fc_w", "fc_b"}, {"y"}, {attr_i("transB", 1)});
  b.output("y");
  return b.m;
}

// Options with the speed check off (QuantizeOptions::check_speed): the tests that check what the
// quantizer writes, which the check's timings could change (they depend on the machine and the
// build: under ASan, a small bert block's int8 projections ran slower than float).
inline QuantizeOptions untimed() {
  QuantizeOptions o;
  o.check_speed = false;
  return o;
}

// m quantized by --dynamic (kiln's form unless `portable`, rows of row_bits), untimed.
inline Model dynamically_quantized(const ir::Model& m, int row_bits = 8, bool reduce_range = false) {
  Model model(std::make_shared<ir::Model>(m));
  QuantizeOptions o = untimed();
  o.dynamic = true;
  o.dynamic_row_bits = row_bits;
  o.reduce_range = reduce_range;
  auto report = model.quantize({}, o);
  EXPECT_TRUE(report.is_ok()) << report.status().message();
  return model;
}

// `count` samples of `shape`, each b.random(shape, lo, hi) in turn.
inline std::vector<Tensor> random_samples(Builder& b, int count, const Shape& shape, float lo = -1, float hi = 1) {
  std::vector<Tensor> xs;
  for (int i = 0; i < count; ++i) xs.push_back(b.random(shape, lo, hi));
  return xs;
}

inline CalibrationReader samples_of(std::vector<Tensor>& xs) {
  auto next = std::make_shared<size_t>(0);
  return [&xs, next]() -> Result<std::optional<std::vector<Tensor>>> {
    if (*next >= xs.size()) return std::optional<std::vector<Tensor>>();
    return std::optional<std::vector<Tensor>>(std::vector<Tensor>{xs[(*next)++]});
  };
}

inline float cosine(const Tensor& a, const Tensor& b) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double p = a.data<float>()[i], q = b.data<float>()[i];
    ab += p * q, aa += p * p, bb += q * q;
  }
  return static_cast<float>(ab / std::sqrt(aa * bb));
}

}  // namespace kiln::test
