// One ONNX Gemm case shared by the Gemm kernel tests (kiln's own, each backend's): Y = 0.5 *
// op(A) op(W) + 2 * C, with W and C weights, and its expected value from double loops written
// here from the ONNX definition.
#pragma once

#include <string>
#include <vector>

#include "pass_test_util.h"

namespace kiln::test {

struct GemmCase {
  static constexpr int64_t kM = 9, kK = 33, kN = 40;
  // C absent, [N], [1, N], [M, 1], [M, N]: each way C broadcasts.
  static std::vector<Shape> c_shapes() { return {{}, {kN}, {1, kN}, {kM, 1}, {kM, kN}}; }

  bool ta, tb;
  Shape c_shape;
  Builder b;
  Tensor a;  // A [M, K], or [K, M] with transA: the model's input

  GemmCase(bool trans_a, bool trans_b, Shape c) : ta(trans_a), tb(trans_b), c_shape(std::move(c)) {
    b.input("a", ta ? Shape{kK, kM} : Shape{kM, kK});
    b.weight("w", tb ? Shape{kN, kK} : Shape{kK, kN});
    std::vector<std::string> in{"a", "w"};
    if (!c_shape.empty()) b.weight("c", c_shape), in.push_back("c");
    b.add(
        "Gemm", in, {"y"},
        {attr_i("transA", ta), attr_i("transB", tb), attr_f("alpha", 0.5f), attr_f("beta", 2.0f)});
    b.output("y");
    a = b.random(ta ? Shape{kK, kM} : Shape{kM, kK});
  }

  std::string describe() const {
    return "ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) + " C " + shape_str(c_shape);
  }

  // Y [M, N] row-major, in double.
  std::vector<double> expected() const {
    const float* ad = a.data<float>();
    const float* w = b.m.graph.initializers.at("w").data<float>();
    std::vector<double> y(kM * kN);
    for (int64_t i = 0; i < kM; ++i)
      for (int64_t j = 0; j < kN; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < kK; ++p)
          acc +=
              double(ta ? ad[p * kM + i] : ad[i * kK + p]) * (tb ? w[j * kK + p] : w[p * kN + j]);
        y[i * kN + j] = 0.5 * acc;
        if (c_shape.empty()) continue;
        const float* c = b.m.graph.initializers.at("c").data<float>();
        const int64_t ci = c_shape.size() == 1 ? j
                           : c_shape[0] == 1   ? j
                           : c_shape[1] == 1   ? i
                                               : i * kN + j;
        y[i * kN + j] += 2.0 * c[ci];
      }
    return y;
  }
};

}  // namespace kiln::test
