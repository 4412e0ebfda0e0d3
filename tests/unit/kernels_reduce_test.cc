// The float32 Reduce path over consecutive axes (kernels/ref/reduce.cc) against plain double
// loops: rows long enough for its eight accumulators and their tails, columns, the middle axes
// of a 4-D tensor, keepdims both ways, NaN propagating through Max and Min, at 1 and 2 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "pass_test_util.h"

namespace kiln {
namespace {

using test::attr_i;
using test::attr_ints;

// out[o, i] over r of x viewed as [outer, red, inner], in double.
std::vector<double> expected(const std::string& op, const std::vector<float>& x, int64_t outer, int64_t red,
                             int64_t inner) {
  std::vector<double> out(outer * inner);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double a = op == "ReduceMax" ? -INFINITY : op == "ReduceMin" ? INFINITY : 0.0;
      for (int64_t r = 0; r < red; ++r) {
        const double v = x[(o * red + r) * inner + i];
        if (op == "ReduceMax") a = std::isnan(v) || std::isnan(a) ? NAN : std::max(a, v);
        else if (op == "ReduceMin") a = std::isnan(v) || std::isnan(a) ? NAN : std::min(a, v);
        else a += op == "ReduceSumSquare" ? v * v : v;
      }
      out[o * inner + i] = op == "ReduceMean" ? a / static_cast<double>(red) : a;
    }
  return out;
}

TEST(ReduceKernel, ConsecutiveAxesMatchPlainLoops) {
  struct Case {
    Shape shape;
    std::vector<int64_t> axes;
    int64_t outer, red, inner;
  };
  const Case cases[] = {{{3, 100}, {1}, 3, 100, 1},           // rows: 12 groups of 8 and a tail of 4
                        {{2, 7, 13}, {2}, 14, 13, 1},         // rows shorter than two groups
                        {{4, 37, 5}, {1}, 4, 37, 5},          // columns
                        {{2, 3, 9, 4}, {1, 2}, 2, 27, 4},     // two middle axes
                        {{5, 64}, {-2, -1}, 1, 320, 1},       // every axis, by negative indices
                        {{300, 260}, {1}, 300, 260, 1}};      // large enough to run over the pool
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceSumSquare"})
    for (const Case& c : cases)
      for (bool keepdims : {false, true})
        for (bool nan : {false, true}) {
          if (nan && std::string(op) != "ReduceMax" && std::string(op) != "ReduceMin") continue;
          SCOPED_TRACE(std::string(op) + " " + shape_str(c.shape) + " keepdims " + std::to_string(keepdims));
          test::Builder b(13);  // axes an attribute except for ReduceSum
          b.input("x", c.shape);
          std::vector<ir::Attribute> attrs = {attr_i("keepdims", keepdims)};
          std::vector<std::string> in = {"x"};
          if (std::string(op) == "ReduceSum") {
            b.ints("axes", c.axes);
            in.push_back("axes");
          } else {
            attrs.push_back(attr_ints("axes", c.axes));
          }
          b.add(op, in, {"y"}, attrs);
          b.output("y");
          Tensor x = b.random(c.shape, -2, 2);
          if (nan) x.data<float>()[x.numel() / 2] = NAN;
          std::vector<float> xs(x.data<float>(), x.data<float>() + x.numel());
          const std::vector<double> want = expected(op, xs, c.outer, c.red, c.inner);
          const std::vector<Value> got = test::run_model(b.m, {x});
          ASSERT_EQ(got.size(), 1u);
          ASSERT_EQ(got[0].tensor.numel(), static_cast<int64_t>(want.size()));
          for (size_t i = 0; i < want.size(); ++i) {
            const float g = got[0].tensor.data<float>()[i];
            if (std::isnan(want[i])) {
              EXPECT_TRUE(std::isnan(g)) << "element " << i;
              continue;
            }
            ASSERT_NEAR(g, want[i], 1e-5 * std::max(1.0, std::fabs(want[i])) * std::sqrt(c.red)) << "element " << i;
          }
        }
}

}  // namespace
}  // namespace kiln
