// The XNNPACK backend (src/backends/xnnpack): its fully connected and convolution kernels checked
// against double loops written here from the ONNX and docs/ops.md definitions, with each node's
// backend asserted, so that a node the backend silently declined fails; and the nodes it cannot
// express (transposed A, a per-row C, grouped convs, other activations) run kiln's own kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backend_run.h"
#include "gemm_test_case.h"
#include "onnx/model_io.h"
#include "pass_test_util.h"

#ifdef KILN_WITH_XNNPACK

namespace kiln {
namespace {

using test::attr_i;
using test::attr_ints;
using test::attr_s;

using test::Ran;

// Runs m with the XNNPACK backend forced (test::run_with).
Result<Ran> run_xnnpack(const ir::Model& m, const std::vector<Tensor>& feeds, int threads = 2) {
  return test::run_with(m, feeds, "xnnpack", threads);
}

const float* f32(const Tensor& t) { return t.data<float>(); }
const float* weight(const test::Builder& b, const std::string& name) {
  return f32(b.m.graph.initializers.at(name));
}

// y = a [m, k] x w [k, n] (or w [n, k] transposed) in double, row-major.
std::vector<double> product(const float* a, const float* w, int64_t m, int64_t k, int64_t n,
                            bool trans_w = false) {
  std::vector<double> y(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p)
        y[i * n + j] += double(a[i * k + p]) * w[trans_w ? j * k + p : p * n + j];
  return y;
}

// Within 1e-4 of the expected value's scale (at least 1).
void expect_near(const Tensor& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_NEAR(f32(got)[i], want[i], 1e-4 * std::max(1.0, std::fabs(want[i])))
        << what << " element " << i;
}

void expect_backend(const Ran& r, const std::string& backend, const std::string& what) {
  ASSERT_EQ(r.backends.size(), 1u) << what;
  EXPECT_EQ(r.backends[0].second, backend) << what;
}

ir::Node& add_kiln(test::Builder& b, const std::string& op, std::vector<std::string> in,
                   std::vector<ir::Attribute> attrs) {
  b.m.opsets["ai.kiln"] = 1;
  ir::Node& node = b.add(op, std::move(in), {"y"}, std::move(attrs));
  node.domain = "ai.kiln";
  return node;
}

TEST(XnnpackBackend, IsRegisteredWithItsPackageVersion) {
  EXPECT_TRUE(backends::registered().count("xnnpack"));
  EXPECT_EQ(backends::version("xnnpack").rfind("XNNPACK ", 0), 0u) << backends::version("xnnpack");
}

// MatMul of a 3-D A (its leading dims become rows) by a constant W, on 1 and 2 threads.
TEST(XnnpackBackend, MatMulWith3dAMatchesLoops) {
  for (int64_t m : {1, 5, 37})
    for (int threads : {1, 2}) {
      const int64_t k = 70, n = 45;
      test::Builder b;
      b.input("a", {2, m, k});
      b.weight("w", {k, n});
      b.add("MatMul", {"a", "w"}, {"y"});
      b.output("y");
      const Tensor a = b.random({2, m, k});
      auto r = run_xnnpack(b.m, {a}, threads);
      ASSERT_TRUE(r.is_ok()) << r.status().message();
      const std::string what = "m=" + std::to_string(m) + " threads=" + std::to_string(threads);
      expect_backend(*r, "xnnpack", what);
      EXPECT_EQ(r->outputs[0].tensor.shape(), (Shape{2, m, n})) << what;
      expect_near(r->outputs[0].tensor, product(f32(a), weight(b, "w"), 2 * m, k, n), what);
    }
}

// A weight that is also a graph input is no fixed constant to the compile step (a caller could
// override it), so the kernel creates its operator each run instead of in prepare(): the same
// result.
TEST(XnnpackBackend, MatMulWithWeightAlsoAGraphInputCreatesItsOperatorPerRun) {
  const int64_t m = 3, k = 8, n = 5;
  test::Builder b;
  b.input("a", {m, k});
  b.input("w", {k, n});
  b.weight("w", {k, n});
  b.add("MatMul", {"a", "w"}, {"y"});
  b.output("y");
  const Tensor a = b.random({m, k});
  auto r = run_xnnpack(b.m, {a});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  expect_backend(*r, "xnnpack", "w also an input");
  expect_near(r->outputs[0].tensor, product(f32(a), weight(b, "w"), m, k, n), "w also an input");
}

// Gemm (alpha 0.5 and beta 2, folded into the packed weights and bias) with each C: a per-column
// or absent C runs XNNPACK; a per-row C ([M, 1], [M, N]) and transA run kiln's own, still right.
TEST(XnnpackBackend, GemmMatchesLoopsAndDeclinesWhatItCannotExpress) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const Shape& c_shape : test::GemmCase::c_shapes()) {
        const test::GemmCase g(ta, tb, c_shape);
        auto r = run_xnnpack(g.b.m, {g.a});
        ASSERT_TRUE(r.is_ok()) << r.status().message();
        const bool per_row = c_shape.size() == 2 && c_shape[0] != 1;
        expect_backend(*r, ta || per_row ? "kiln" : "xnnpack", g.describe());
        expect_near(r->outputs[0].tensor, g.expected(), g.describe());
      }
}

// FusedGemm (transB, bias [1, N]) and FusedMatMul (3-D A, bias [N]) with no activation, Relu and
// Clip: XNNPACK's output clamp.
TEST(XnnpackBackend, FusedGemmAndMatMulClampEpiloguesMatchLoops) {
  struct Act {
    const char* name;
    std::vector<float> params;
    double lo, hi;
  };
  const std::vector<Act> acts = {{"", {}, -INFINITY, INFINITY},
                                 {"Relu", {}, 0, INFINITY},
                                 {"Clip", {-0.5f, 0.75f}, -0.5, 0.75}};
  const int64_t m = 13, k = 33, n = 21;
  for (const Act& act : acts)
    for (bool fused_matmul : {false, true}) {
      test::Builder b;
      b.input("a", fused_matmul ? Shape{1, m, k} : Shape{m, k});
      b.weight("w", fused_matmul ? Shape{k, n} : Shape{n, k});
      b.weight("c", fused_matmul ? Shape{n} : Shape{1, n});
      std::vector<ir::Attribute> attrs;
      if (*act.name) attrs.push_back(attr_s("activation", act.name));
      if (!act.params.empty()) {
        ir::Attribute p;
        p.name = "activation_params";
        p.type = ir::Attribute::Type::kFloats;
        p.floats = act.params;
        attrs.push_back(p);
      }
      if (!fused_matmul) attrs.push_back(attr_i("transB", 1));
      add_kiln(b, fused_matmul ? "FusedMatMul" : "FusedGemm", {"a", "w", "c"}, attrs);
      b.output("y");
      const Tensor a = b.random(fused_matmul ? Shape{1, m, k} : Shape{m, k});
      auto r = run_xnnpack(b.m, {a});
      const std::string what = std::string(fused_matmul ? "FusedMatMul " : "FusedGemm ") + act.name;
      ASSERT_TRUE(r.is_ok()) << r.status().message();
      expect_backend(*r, "xnnpack", what);
      std::vector<double> want = product(f32(a), weight(b, "w"), m, k, n, !fused_matmul);
      for (int64_t i = 0; i < m * n; ++i)
        want[i] = std::min(std::max(want[i] + weight(b, "c")[i % n], act.lo), act.hi);
      expect_near(r->outputs[0].tensor, want, what);
    }
}

// An activation that is no clamp (Sigmoid), or a residual input, runs kiln's own FusedGemm.
TEST(XnnpackBackend, FusedGemmWithOtherEpilogueRunsKilns) {
  for (bool residual : {false, true}) {
    test::Builder b;
    b.input("a", {4, 6});
    b.weight("w", {6, 3});
    b.weight("z", {4, 3});
    add_kiln(
        b, "FusedGemm",
        residual ? std::vector<std::string>{"a", "w", "", "z"} : std::vector<std::string>{"a", "w"},
        {attr_s("activation", residual ? "Relu" : "Sigmoid")});
    b.output("y");
    auto r = run_xnnpack(b.m, {b.random({4, 6})});
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    expect_backend(*r, "kiln", residual ? "residual" : "Sigmoid");
  }
}

// One 2-D convolution: NCHW input, weights [M, C/group, kh, kw], an optional bias and a clamp.
struct ConvCase {
  int64_t n, c, h, w, m, kh, kw, stride, dilation, group;
  std::vector<int64_t> pads;  // ONNX order: top, left, bottom, right
  bool bias = true;
  std::string activation = "";  // "", "Relu" or "Clip" (to [-0.5, 0.5])
  std::string auto_pad = "";

  std::string describe() const {
    return "x [" + std::to_string(n) + "," + std::to_string(c) + "," + std::to_string(h) + "," +
           std::to_string(w) + "] w " + std::to_string(m) + "x" + std::to_string(kh) + "x" +
           std::to_string(kw) + " s" + std::to_string(stride) + " d" + std::to_string(dilation) +
           " g" + std::to_string(group) + " pads " + shape_str(pads) + " " + activation + " " +
           auto_pad;
  }

  test::Builder model() const {
    test::Builder b;
    b.input("x", {n, c, h, w});
    b.weight("w", {m, c / group, kh, kw});
    std::vector<std::string> in{"x", "w"};
    if (bias) b.weight("b", {m}), in.push_back("b");
    std::vector<ir::Attribute> attrs = {attr_ints("strides", {stride, stride}),
                                        attr_ints("dilations", {dilation, dilation}),
                                        attr_i("group", group)};
    if (auto_pad.empty())
      attrs.push_back(attr_ints("pads", pads));
    else
      attrs.push_back(attr_s("auto_pad", auto_pad));
    if (activation.empty()) {
      b.add("Conv", in, {"y"}, attrs);
    } else {
      attrs.push_back(attr_s("activation", activation));
      if (activation == "Clip") {
        ir::Attribute p;
        p.name = "activation_params";
        p.type = ir::Attribute::Type::kFloats;
        p.floats = {-0.5f, 0.5f};
        attrs.push_back(p);
      }
      add_kiln(b, "FusedConv", in, attrs);
    }
    b.output("y");
    return b;
  }

  // Y [n, m, oh, ow] from the ONNX Conv definition, in double.
  std::vector<double> expected(const test::Builder& b, const Tensor& x) const {
    const int64_t ekh = (kh - 1) * dilation + 1, ekw = (kw - 1) * dilation + 1;
    const int64_t oh = (h + pads[0] + pads[2] - ekh) / stride + 1;
    const int64_t ow = (w + pads[1] + pads[3] - ekw) / stride + 1;
    const int64_t cg = c / group, mg = m / group;
    const float* xd = f32(x);
    const float* wd = weight(b, "w");
    std::vector<double> y(n * m * oh * ow);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t o = 0; o < m; ++o)
        for (int64_t oy = 0; oy < oh; ++oy)
          for (int64_t ox = 0; ox < ow; ++ox) {
            double acc = bias ? weight(b, "b")[o] : 0.0;
            for (int64_t ci = 0; ci < cg; ++ci)
              for (int64_t ky = 0; ky < kh; ++ky)
                for (int64_t kx = 0; kx < kw; ++kx) {
                  const int64_t iy = oy * stride - pads[0] + ky * dilation;
                  const int64_t ix = ox * stride - pads[1] + kx * dilation;
                  if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                  const int64_t ch = (o / mg) * cg + ci;
                  acc += double(xd[((i * c + ch) * h + iy) * w + ix]) *
                         wd[((o * cg + ci) * kh + ky) * kw + kx];
                }
            if (activation == "Relu") acc = std::max(acc, 0.0);
            if (activation == "Clip") acc = std::min(std::max(acc, -0.5), 0.5);
            y[((i * m + o) * oh + oy) * ow + ox] = acc;
          }
    return y;
  }
};

TEST(XnnpackBackend, ConvMatchesLoops) {
  // n, c, h, w, m, kh, kw, stride, dilation, group, pads (t, l, b, r), bias, activation, auto_pad
  const std::vector<ConvCase> cases = {
      {1, 3, 9, 11, 5, 3, 3, 1, 1, 1, {1, 0, 2, 1}},               // 3x3 s1, asymmetric pads
      {1, 5, 10, 9, 7, 3, 3, 2, 1, 1, {0, 1, 1, 0}},               // 3x3 s2, asymmetric pads
      {1, 7, 6, 5, 3, 1, 1, 1, 1, 1, {0, 0, 0, 0}, false},         // 1x1, no bias
      {1, 6, 8, 8, 6, 3, 3, 1, 1, 6, {1, 1, 1, 1}},                // depthwise
      {1, 4, 9, 7, 8, 3, 3, 2, 1, 4, {1, 1, 1, 1}},                // depthwise, 2 per channel
      {1, 3, 12, 10, 4, 3, 3, 1, 2, 1, {2, 2, 2, 2}},              // dilation 2
      {2, 3, 7, 8, 5, 3, 3, 1, 1, 1, {1, 1, 1, 1}},                // batch 2
      {2, 5, 7, 7, 5, 5, 5, 1, 2, 5, {4, 3, 4, 5}},                // depthwise 5x5 d2 batch 2
      {1, 3, 8, 8, 6, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Relu"},  // FusedConv Relu
      {2, 5, 6, 9, 3, 3, 2, 2, 1, 1, {0, 1, 1, 0}, true, "Clip"},  // FusedConv Clip
      {1, 3, 7, 7, 4, 2, 2, 1, 1, 1, {1, 1, 0, 0}, true, "", "SAME_LOWER"},  // SAME, stride 1
      {1, 3, 7, 7, 4, 2, 2, 1, 1, 1, {0, 0, 1, 1}, true, "", "SAME_UPPER"},
  };
  for (const ConvCase& cc : cases) {
    test::Builder b = cc.model();
    const Tensor x = b.random({cc.n, cc.c, cc.h, cc.w});
    auto r = run_xnnpack(b.m, {x});
    ASSERT_TRUE(r.is_ok()) << cc.describe() << ": " << r.status().message();
    expect_backend(*r, "xnnpack", cc.describe());
    expect_near(r->outputs[0].tensor, cc.expected(b, x), cc.describe());
  }
}

// Convs XNNPACK's kernel does not take run kiln's own: group 2 of 4 channels (neither dense nor
// depthwise), SAME padding with stride 2 (pads that depend on the input size), a Sigmoid epilogue.
TEST(XnnpackBackend, ConvsItCannotExpressRunKilns) {
  const std::vector<ConvCase> cases = {
      {1, 4, 6, 6, 4, 3, 3, 1, 1, 2, {1, 1, 1, 1}},
      {1, 3, 7, 7, 4, 3, 3, 2, 1, 1, {1, 1, 1, 1}, true, "", "SAME_UPPER"},
      {1, 3, 6, 6, 2, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Sigmoid"},
  };
  for (const ConvCase& cc : cases) {
    test::Builder b = cc.model();
    const Tensor x = b.random({cc.n, cc.c, cc.h, cc.w});
    auto r = run_xnnpack(b.m, {x});
    ASSERT_TRUE(r.is_ok()) << cc.describe() << ": " << r.status().message();
    expect_backend(*r, "kiln", cc.describe());
    if (cc.auto_pad.empty() && cc.activation.empty())
      expect_near(r->outputs[0].tensor, cc.expected(b, x), cc.describe());
  }
}

// A wrong input at run time is an error naming the problem, not a crash.
TEST(XnnpackBackend, WrongChannelCountIsAnError) {
  test::Builder b;
  b.input_dims("x", {test::num(1), test::sym("c"), test::num(5), test::num(5)});
  b.weight("w", {2, 3, 3, 3});
  b.add("Conv", {"x", "w"}, {"y"}, {attr_ints("pads", {1, 1, 1, 1})});
  b.output("y");
  auto r = run_xnnpack(b.m, {b.random({1, 4, 5, 5})});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("channels"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_XNNPACK
