// The ai.kiln norm kernels' float32 fast path (vectorised rows over the thread pool) against
// layer normalization computed in double from docs/ops.md: LayerNorm, RMSNorm, SkipLayerNorm
// (bias, S output, broadcast skip on the general path), EmbedLayerNorm; row lengths that are
// and are not multiples of 8, one row to many, 1 and 2 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kiln/session.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

using test::attr_f;
using test::attr_i;

std::vector<Value> run(test::Builder& b, const std::vector<Tensor>& feeds, int threads) {
  SessionOptions opts;
  opts.threads = threads;
  auto s = Session::create(std::make_shared<const ir::Model>(b.m), opts);
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  if (!s.is_ok()) return {};
  std::vector<Value> in;
  for (const auto& t : feeds) in.push_back(Value::of(t));
  auto out = (*s)->run(in);
  EXPECT_TRUE(out.is_ok()) << out.status().message();
  return out.is_ok() ? std::move(out).value() : std::vector<Value>{};
}

// LayerNorm (or RMS norm when `rms`) of each row of `len` values, in double.
std::vector<double> norm_rows(const std::vector<double>& x, int64_t len, double eps,
                              const float* gamma, const float* beta, bool rms = false) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / len; ++r) {
    const double* xr = x.data() + r * len;
    double mean = 0, var = 0;
    if (!rms) {
      for (int64_t i = 0; i < len; ++i) mean += xr[i];
      mean /= len;
    }
    for (int64_t i = 0; i < len; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    const double inv = 1.0 / std::sqrt(var / len + eps);
    for (int64_t i = 0; i < len; ++i)
      y[r * len + i] = (xr[i] - mean) * inv * (gamma ? gamma[i] : 1.0) + (beta ? beta[i] : 0.0);
  }
  return y;
}

void expect_close(const Tensor& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got.data<float>()[i], want[i], 1e-5 * std::max(1.0, std::fabs(want[i])))
        << what << " element " << i;
}

std::vector<double> as_double(const Tensor& t) {
  return std::vector<double>(t.data<float>(), t.data<float>() + t.numel());
}

const std::vector<Shape> kShapes = {{1, 1}, {3, 7}, {2, 5, 8}, {4, 33}, {128, 768}, {2, 64, 100}};

TEST(NormKernels, LayerNormAndRmsNorm) {
  for (const Shape& shape : kShapes)
    for (bool rms : {false, true})
      for (int threads : {1, 2}) {
        const int64_t len = shape.back();
        test::Builder b;
        b.m.opsets["ai.kiln"] = 1;
        b.input("x", shape);
        b.weight("scale", {len});
        b.weight("bias", {len});
        const std::vector<std::string> in = rms ? std::vector<std::string>{"x", "scale"}
                                                : std::vector<std::string>{"x", "scale", "bias"};
        b.add(rms ? "RMSNorm" : "LayerNorm", in, {"y"}, {attr_f("epsilon", 1e-3f)}).domain =
            "ai.kiln";
        b.output("y");
        // An offset mean (3) checks that the variance is taken about the mean, not from sum x^2.
        const Tensor x = b.random(shape, 2, 4);
        const auto y = run(b, {x}, threads);
        ASSERT_EQ(y.size(), 1u);
        const float* gamma = b.m.graph.initializers["scale"].data<float>();
        const float* beta = rms ? nullptr : b.m.graph.initializers["bias"].data<float>();
        expect_close(y[0].tensor, norm_rows(as_double(x), len, 1e-3f, gamma, beta, rms),
                     std::string(rms ? "RMSNorm " : "LayerNorm ") + shape_str(shape) + " threads " +
                         std::to_string(threads));
      }
}

TEST(NormKernels, LayerNormOverTwoAxes) {
  test::Builder b;
  b.m.opsets["ai.kiln"] = 1;
  b.input("x", {3, 4, 5});
  b.weight("scale", {5});  // broadcast over the 4 x 5 normalised dims
  b.add("LayerNorm", {"x", "scale"}, {"y"}, {attr_i("axis", 1)}).domain = "ai.kiln";
  b.output("y");
  const Tensor x = b.random({3, 4, 5});
  std::vector<float> gamma(20);
  for (int i = 0; i < 20; ++i) gamma[i] = b.m.graph.initializers["scale"].data<float>()[i % 5];
  const auto y = run(b, {x}, 1);
  ASSERT_EQ(y.size(), 1u);
  expect_close(y[0].tensor, norm_rows(as_double(x), 20, 1e-5f, gamma.data(), nullptr), "axis 1");
}

// The standard LayerNormalization (opset 17, which the fusion keeps standard) takes the same fast
// rows when only Y is wanted, and the reference when Mean and InvStdDev are too; both agree with
// the formula.
TEST(NormKernels, StandardLayerNormalization) {
  for (bool stats : {false, true})
    for (const Shape& shape : kShapes) {
      const int64_t len = shape.back();
      test::Builder b(17);
      b.input("x", shape);
      b.weight("scale", {len});
      b.weight("bias", {len});
      std::vector<std::string> outs = {"y"};
      if (stats) outs = {"y", "mean", "inv"};
      b.add("LayerNormalization", {"x", "scale", "bias"}, outs, {attr_f("epsilon", 1e-3f)});
      for (const auto& o : outs) b.output(o);
      const Tensor x = b.random(shape, 2, 4);
      const auto y = run(b, {x}, 2);
      ASSERT_EQ(y.size(), outs.size());
      expect_close(y[0].tensor,
                   norm_rows(as_double(x), len, 1e-3f, b.m.graph.initializers["scale"].data<float>(),
                             b.m.graph.initializers["bias"].data<float>()),
                   "LayerNormalization " + shape_str(shape) + (stats ? " with statistics" : ""));
    }
}

TEST(NormKernels, SkipLayerNorm) {
  for (const Shape& shape : kShapes)
    for (int variant = 0; variant < 3; ++variant)  // 0: bias and S; 1: neither; 2: skip broadcast
      for (int threads : {1, 2}) {
        const int64_t len = shape.back();
        test::Builder b;
        b.m.opsets["ai.kiln"] = 1;
        b.input("a", shape);
        const Shape skip_shape = variant == 2 ? Shape{len} : shape;
        b.input("skip", skip_shape);
        b.weight("gamma", {len});
        b.weight("beta", {len});
        b.weight("bias", {len});
        std::vector<std::string> in = {"a", "skip", "gamma", "beta"};
        std::vector<std::string> out = {"y"};
        if (variant == 0) in.push_back("bias"), out.push_back("s");
        b.add("SkipLayerNorm", in, out, {attr_f("epsilon", 1e-5f)}).domain = "ai.kiln";
        for (const auto& o : out) b.output(o);
        const Tensor a = b.random(shape), skip = b.random(skip_shape);
        const auto y = run(b, {a, skip}, threads);
        ASSERT_EQ(y.size(), out.size());
        // S as the op rounds it: (a + skip) + bias in float.
        std::vector<double> s(static_cast<size_t>(a.numel()));
        const float* bias = b.m.graph.initializers["bias"].data<float>();
        for (int64_t i = 0; i < a.numel(); ++i) {
          float v = a.data<float>()[i] + skip.data<float>()[variant == 2 ? i % len : i];
          if (variant == 0) v += bias[i % len];
          s[i] = v;
        }
        const std::string what = "SkipLayerNorm " + shape_str(shape) + " variant " +
                                 std::to_string(variant) + " threads " + std::to_string(threads);
        expect_close(y[0].tensor,
                     norm_rows(s, len, 1e-5f, b.m.graph.initializers["gamma"].data<float>(),
                               b.m.graph.initializers["beta"].data<float>()),
                     what);
        if (variant == 0) expect_close(y[1].tensor, s, what + " S");
      }
}

TEST(NormKernels, EmbedLayerNorm) {
  for (int64_t e : {8, 13, 768})
    for (bool segment : {false, true})
      for (int threads : {1, 2}) {
        const int64_t batch = 2, seq = 50, vocab = 30;
        test::Builder b;
        b.m.opsets["ai.kiln"] = 1;
        b.input_dims("ids", {test::num(batch), test::num(seq)}, DType::kInt64);
        b.weight("word", {vocab, e});
        b.weight("pos", {seq + 3, e});
        b.weight("seg", {2, e});
        b.weight("gamma", {e});
        b.weight("beta", {e});
        std::vector<std::string> in = {
            "ids", segment ? "seg_ids" : "", "word", "pos", segment ? "seg" : "", "gamma", "beta"};
        if (segment) b.input_dims("seg_ids", {test::num(batch), test::num(seq)}, DType::kInt64);
        b.add("EmbedLayerNorm", in, {"y"}).domain = "ai.kiln";
        b.output("y");
        Tensor ids = Tensor::make(DType::kInt64, {batch, seq}).value();
        Tensor seg_ids = Tensor::make(DType::kInt64, {batch, seq}).value();
        for (int64_t i = 0; i < batch * seq; ++i) {
          ids.data<int64_t>()[i] = (i * 7) % vocab - (i % 5 == 0 ? vocab : 0);  // some negative
          seg_ids.data<int64_t>()[i] = i % 2;
        }
        std::vector<Tensor> feeds = {ids};
        if (segment) feeds.push_back(seg_ids);
        const auto y = run(b, feeds, threads);
        ASSERT_EQ(y.size(), 1u);
        auto& init = b.m.graph.initializers;
        std::vector<double> s(static_cast<size_t>(batch * seq * e));
        for (int64_t t = 0; t < batch * seq; ++t) {
          int64_t id = ids.data<int64_t>()[t];
          if (id < 0) id += vocab;
          for (int64_t i = 0; i < e; ++i) {
            float v = init["word"].data<float>()[id * e + i] +
                      init["pos"].data<float>()[(t % seq) * e + i];
            if (segment) v += init["seg"].data<float>()[seg_ids.data<int64_t>()[t] * e + i];
            s[t * e + i] = v;
          }
        }
        expect_close(
            y[0].tensor,
            norm_rows(s, e, 1e-12f, init["gamma"].data<float>(), init["beta"].data<float>()),
            "EmbedLayerNorm E " + std::to_string(e) + (segment ? " segment" : "") + " threads " +
                std::to_string(threads));
      }
}

}  // namespace
}  // namespace kiln
