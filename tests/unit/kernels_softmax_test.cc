// Softmax and LogSoftmax's float32 row path (8 lanes, masked tails) against the formula in double,
// over rows of 1 to 1000 values spread over +-30, last axis and legacy coerced axis, 1 and 2 threads.
#include <gtest/gtest.h>

#include <cmath>

#include "pass_test_util.h"

namespace kiln {
namespace {

TEST(SoftmaxKernels, FloatRowsMatchDoubleFormula) {
  for (const bool log : {false, true})
    for (const Shape& shape : {Shape{1, 1}, Shape{3, 7}, Shape{2, 8}, Shape{5, 9}, Shape{4, 33}, Shape{2, 3, 1000}})
      for (int opset : {11, 17}) {
        test::Builder b(opset);
        b.input("x", shape);
        // Legacy Softmax coerces at axis 1: for rank 3 that is the last two dims as one row.
        b.add(log ? "LogSoftmax" : "Softmax", {"x"}, {"y"}, {test::attr_i("axis", opset < 13 ? 1 : -1)});
        b.output("y");
        const Tensor x = b.random(shape, -30, 30);
        const int64_t len = opset < 13 ? x.numel() / shape[0] : shape.back();
        const std::vector<Value> out = test::run_model(b.m, {x});
        ASSERT_EQ(out.size(), 1u);
        const float* y = out[0].tensor.data<float>();
        for (int64_t r = 0; r < x.numel() / len; ++r) {
          const float* xr = x.data<float>() + r * len;
          double mx = xr[0], sum = 0;
          for (int64_t i = 0; i < len; ++i) mx = std::max<double>(mx, xr[i]);
          for (int64_t i = 0; i < len; ++i) sum += std::exp(xr[i] - mx);
          for (int64_t i = 0; i < len; ++i) {
            const double want = log ? xr[i] - mx - std::log(sum) : std::exp(xr[i] - mx) / sum;
            ASSERT_NEAR(y[r * len + i], want, 2e-6 * std::max(1.0, std::fabs(want)))
                << (log ? "LogSoftmax " : "Softmax ") << shape_str(shape) << " opset " << opset << " row " << r << " i " << i;
          }
        }
      }
}

// A middle axis: the column path, 8 columns at a time, the last ones masked.
TEST(SoftmaxKernels, MiddleAxisMatchesDoubleFormula) {
  for (const bool log : {false, true})
    for (const Shape& shape : {Shape{1, 16, 2100}, Shape{2, 5, 3, 7}, Shape{3, 1, 9}}) {
      test::Builder b(17);
      b.input("x", shape);
      b.add(log ? "LogSoftmax" : "Softmax", {"x"}, {"y"}, {test::attr_i("axis", 1)});
      b.output("y");
      const Tensor x = b.random(shape, -30, 30);
      const std::vector<Value> out = test::run_model(b.m, {x});
      ASSERT_EQ(out.size(), 1u);
      const int64_t len = shape[1], inner = x.numel() / shape[0] / len;
      for (int64_t o = 0; o < shape[0]; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          const float* xc = x.data<float>() + o * len * inner + i;
          double mx = xc[0], sum = 0;
          for (int64_t r = 0; r < len; ++r) mx = std::max<double>(mx, xc[r * inner]);
          for (int64_t r = 0; r < len; ++r) sum += std::exp(xc[r * inner] - mx);
          for (int64_t r = 0; r < len; ++r) {
            const double v = xc[r * inner];
            const double want = log ? v - mx - std::log(sum) : std::exp(v - mx) / sum;
            ASSERT_NEAR(out[0].tensor.data<float>()[o * len * inner + r * inner + i], want,
                        2e-6 * std::max(1.0, std::fabs(want)))
                << shape_str(shape) << (log ? " LogSoftmax" : " Softmax");
          }
        }
    }
}

}  // namespace
}  // namespace kiln
