// Concat and Split (kernels/ref/concat_split.cc) against a plain loop over every output index:
// axis 0, a middle axis (rows interleaved) and the last, float and int64 elements and bool's and
// u8's single bytes, an empty part among them, one and two threads, and tensors large enough to
// be cut into pieces over the pool.
#include <gtest/gtest.h>

#include "pass_test_util.h"

namespace kiln {
namespace {

template <typename T>
void check(DType dt, const std::vector<Shape>& shapes, int64_t axis, int threads) {
  test::Builder b(13);
  std::vector<std::string> names;
  std::vector<Tensor> feeds;
  int64_t next = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    names.push_back("x" + std::to_string(i));
    b.m.graph.inputs.push_back(ir::ValueInfo{names.back(), ir::TypeInfo::tensor(dt, shapes[i]), ""});
    Tensor t = Tensor::make(dt, shapes[i]).value();
    for (int64_t k = 0; k < t.numel(); ++k) t.data<T>()[k] = static_cast<T>((next++ * 7919) % 1000);
    feeds.push_back(std::move(t));
  }
  b.add("Concat", names, {"y"}, {test::attr_i("axis", axis)});
  b.m.graph.outputs.push_back(ir::ValueInfo{"y", ir::TypeInfo::tensor(dt), ""});
  SessionOptions opts;
  opts.threads = threads;
  const std::vector<Value> got = test::run_model(b.m, feeds, opts);
  ASSERT_EQ(got.size(), 1u);
  const Tensor& y = got[0].tensor;
  // Element (outer o, position p along the axis, inner k) comes from the input p falls in.
  Shape out = shapes[0];
  out[axis] = 0;
  for (const Shape& s : shapes) out[axis] += s[axis];
  ASSERT_EQ(y.shape(), out);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= out[d];
  for (size_t d = axis + 1; d < out.size(); ++d) inner *= out[d];
  for (int64_t o = 0; o < outer; ++o) {
    int64_t p = 0;
    for (size_t i = 0; i < shapes.size(); ++i)
      for (int64_t a = 0; a < shapes[i][axis]; ++a, ++p)
        for (int64_t k = 0; k < inner; ++k) {
          const T want = feeds[i].data<T>()[(o * shapes[i][axis] + a) * inner + k];
          ASSERT_EQ(y.data<T>()[(o * out[axis] + p) * inner + k], want)
              << "input " << i << " outer " << o << " at " << a << " inner " << k << " threads " << threads;
        }
  }
}

TEST(Concat, AgreesWithPlainLoopOverThePool) {
  for (int threads : {1, 2}) {
    // A DB text detector's channel Concat of four maps (1 MB): pieces over the pool.
    check<float>(DType::kFloat32, {{1, 24, 80, 40}, {1, 24, 80, 40}, {1, 0, 80, 40}, {1, 16, 80, 40}}, 1, threads);
    check<float>(DType::kFloat32, {{3, 5, 7000}, {3, 2, 7000}}, 1, threads);  // rows interleaved
    check<int64_t>(DType::kInt64, {{2, 3, 9000}, {2, 3, 11}}, 2, threads);   // the last axis
    check<int64_t>(DType::kInt64, {{70000}, {5}}, 0, threads);
    check<bool>(DType::kBool, {{2, 300001}, {2, 3}}, 1, threads);
  }
}

// Split of x (`shape`) along `axis` into `sizes` (given as the input, opset 13), against a plain
// loop: every output element is x's at its place in x.
template <typename T>
void check_split(DType dt, const Shape& shape, int64_t axis, const std::vector<int64_t>& sizes, int threads) {
  test::Builder b(13);
  b.m.graph.inputs.push_back(ir::ValueInfo{"x", ir::TypeInfo::tensor(dt, shape), ""});
  Tensor x = Tensor::make(dt, shape).value();
  for (int64_t k = 0; k < x.numel(); ++k) x.data<T>()[k] = static_cast<T>((k * 7919) % 251);
  b.ints("sizes", sizes);
  std::vector<std::string> outs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    outs.push_back("y" + std::to_string(i));
    b.m.graph.outputs.push_back(ir::ValueInfo{outs.back(), ir::TypeInfo::tensor(dt), ""});
  }
  b.add("Split", {"x", "sizes"}, outs, {test::attr_i("axis", axis)});
  SessionOptions opts;
  opts.threads = threads;
  const std::vector<Value> got = test::run_model(b.m, {x}, opts);
  ASSERT_EQ(got.size(), sizes.size());
  int64_t outer = 1, inner = 1, start = 0;
  for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  for (size_t i = 0; i < sizes.size(); ++i) {
    const Tensor& y = got[i].tensor;
    ASSERT_EQ(y.numel(), outer * sizes[i] * inner) << "output " << i;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t a = 0; a < sizes[i]; ++a)
        for (int64_t k = 0; k < inner; ++k)
          ASSERT_EQ(y.data<T>()[(o * sizes[i] + a) * inner + k], x.data<T>()[(o * shape[axis] + start + a) * inner + k])
              << "output " << i << " outer " << o << " at " << a << " inner " << k << " threads " << threads;
    start += sizes[i];
  }
}

TEST(Split, AgreesWithPlainLoopOverThePool) {
  for (int threads : {1, 2}) {
    // A YOLO C2f block's halves, 8-bit codes NCHW and channels-last, and float.
    check_split<uint8_t>(DType::kUInt8, {1, 128, 40, 40}, 1, {64, 64}, threads);
    check_split<uint8_t>(DType::kUInt8, {1, 40, 40, 96}, 3, {32, 0, 64}, threads);
    check_split<float>(DType::kFloat32, {2, 5, 30000}, 1, {2, 3}, threads);
    check_split<int64_t>(DType::kInt64, {70005}, 0, {70000, 5}, threads);
  }
}

}  // namespace
}  // namespace kiln
