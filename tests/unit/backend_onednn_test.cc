// The oneDNN backend (src/backends/onednn): each of its kernels against kiln's own on the same
// model, run once with SessionOptions::backend "kiln" and once with "onednn" (at -O0, so the
// nodes stay as given), and checked to have run on oneDNN (node_backends), so that a node the
// backend silently declined fails the test. BlockedConv models are standard Convs that -O3 turns
// into BlockedConvs; Gemm reuses the shared GemmCase and its double-loop expectation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend_run.h"
#include "gemm_test_case.h"
#include "kiln/optimize.h"
#include "onnx/model_io.h"
#include "pass_test_util.h"

#ifdef KILN_WITH_ONEDNN

namespace kiln {
namespace {

using test::attr_f;
using test::attr_i;
using test::attr_ints;
using test::attr_s;
using test::Builder;

using test::run_with;

// Runs m on both backends and expects the same outputs within 1e-4 of their scale, and every
// node of type `op` to have run on oneDNN.
void expect_same(const ir::Model& m, const std::vector<Tensor>& feeds, const std::string& op,
                 const std::string& what) {
  int ops = 0;
  for (const ir::Node& n : m.graph.nodes) ops += n.op_type == op;
  ASSERT_GT(ops, 0) << what << ": the model has no " << op;
  auto want = run_with(m, feeds, "kiln");
  ASSERT_TRUE(want.is_ok()) << what << ": " << want.status().message();
  auto got = run_with(m, feeds, "onednn");
  ASSERT_TRUE(got.is_ok()) << what << ": " << got.status().message();
  for (const ir::Node& n : m.graph.nodes) {
    if (n.op_type != op) continue;
    for (const auto& [node, backend] : got->backends) {
      if (node != n.name) continue;
      EXPECT_EQ(backend, "onednn") << what << ": node " << node;
    }
  }
  ASSERT_EQ(got->outputs.size(), want->outputs.size());
  for (size_t o = 0; o < want->outputs.size(); ++o) {
    const Tensor& w = want->outputs[o].tensor;
    const Tensor& g = got->outputs[o].tensor;
    ASSERT_EQ(g.shape(), w.shape()) << what;
    double scale = 1, diff = 0;
    for (int64_t i = 0; i < w.numel(); ++i)
      scale = std::max(scale, std::fabs(double(w.data<float>()[i])));
    for (int64_t i = 0; i < w.numel(); ++i)
      diff = std::max(diff, std::fabs(double(g.data<float>()[i]) - w.data<float>()[i]));
    EXPECT_LE(diff, 1e-4 * scale) << what << " output " << o;
  }
}

// Conv x -> y with a bias: c channels in, m out, k x k.
void conv(Builder& b, const std::string& x, const std::string& y, int64_t c, int64_t m, int64_t k,
          std::vector<ir::Attribute> attrs, int64_t group = 1) {
  b.weight(y + "_w", {m, c / group, k, k});
  b.weight(y + "_b", {m});
  attrs.push_back(attr_i("group", group));
  b.add("Conv", {x, y + "_w", y + "_b"}, {y}, std::move(attrs));
}

// b's model at -O3 (BlockedConvs), compared on both backends: as built, and with one image (the
// oneDNN kernel slices several images by image, one by output channel blocks).
void expect_blocked_same(Builder& b, const Shape& input, const std::string& what) {
  for (int64_t batch : {input[0], int64_t{1}}) {
    ir::Model m = b.m;
    m.graph.inputs[0].type.shape[0].value = batch;
    Shape shape = input;
    shape[0] = batch;
    auto r = optimize(m, OptimizeOptions{});
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    expect_same(m, {b.random(shape)}, "BlockedConv", what + " batch " + std::to_string(batch));
  }
}

ir::Attribute pads(int64_t p) { return attr_ints("pads", {p, p, p, p}); }

TEST(OneDnn, BlockedConvDense3x3Strides1And2WithPads) {
  for (int64_t c : {12, 16, 20})
    for (int64_t stride : {1, 2}) {
      Builder b;
      b.input("x", {2, c, 11, 9});
      conv(b, "x", "a", c, 20, 3, {pads(1), attr_ints("strides", {stride, stride})});
      b.add("Relu", {"a"}, {"r"});
      conv(b, "r", "y", 20, 8, 1, {});  // the layout pass converts chains, not a lone conv
      b.output("y");
      expect_blocked_same(b, {2, c, 11, 9},
                          "c=" + std::to_string(c) + " stride=" + std::to_string(stride));
    }
}

TEST(OneDnn, BlockedConvPointwiseDilatedAndClip) {
  Builder b;
  b.input("x", {2, 20, 10, 10});
  conv(b, "x", "a", 20, 13, 1, {});
  b.scalar("lo", 0.0f);
  b.scalar("hi", 0.5f);
  b.add("Clip", {"a", "lo", "hi"}, {"ac"});
  // Dilation 2, uneven pads.
  conv(b, "ac", "d", 13, 24, 3, {attr_ints("dilations", {2, 2}), attr_ints("pads", {2, 1, 1, 2})});
  b.output("d");
  expect_blocked_same(b, {2, 20, 10, 10}, "pointwise then dilated");
}

// tf2onnx's Max(LeakyRelu(conv), -0.4): the Clip becomes the activation's clamp, a second
// eltwise post-op.
TEST(OneDnn, BlockedConvClampedLeakyRelu) {
  Builder b;
  b.input("x", {1, 16, 9, 9});
  conv(b, "x", "a", 16, 24, 3, {pads(1)});
  b.add("LeakyRelu", {"a"}, {"l"}, {attr_f("alpha", 0.3f)});
  b.scalar("lo", -0.4f);
  b.add("Clip", {"l", "lo"}, {"c"});
  conv(b, "c", "y", 24, 16, 1, {});
  b.output("y");
  expect_blocked_same(b, {1, 16, 9, 9}, "clamped LeakyRelu");
}

TEST(OneDnn, BlockedConvDepthwise) {
  for (int64_t c : {20, 24})
    for (int64_t stride : {1, 2}) {
      Builder b;
      b.input("x", {2, c, 12, 12});
      conv(b, "x", "a", c, c, 3, {pads(1)});  // a dense one first, so the input is blocked
      conv(b, "a", "d", c, c, 3, {pads(1), attr_ints("strides", {stride, stride})}, c);
      b.add("Relu", {"d"}, {"y"});
      b.output("y");
      expect_blocked_same(b, {2, c, 12, 12},
                          "c=" + std::to_string(c) + " stride=" + std::to_string(stride));
    }
}

// Grouped convs of whole blocks (ResNeXt's and RegNet's, as the layout pass makes them: 8 and 16
// channels a group; 4 a group become 8-channel groups with block-diagonal weights), with a stride
// and a residual: oneDNN's grouped weights are kiln's layout (gOIhw8i8o).
TEST(OneDnn, BlockedConvGrouped) {
  for (int64_t per_group : {4, 8, 16})
    for (int64_t stride : {1, 2}) {
      Builder b;
      b.input("x", {2, 32, 10, 9});
      conv(b, "x", "a", 32, 32, 1, {});
      conv(b, "a", "g", 32, 32, 3, {pads(1), attr_ints("strides", {stride, stride})}, 32 / per_group);
      conv(b, "g", "p", 32, 32, 1, {});
      b.add("Add", {"p", "g"}, {"s"});
      b.add("Relu", {"s"}, {"y"});
      b.output("y");
      expect_blocked_same(b, {2, 32, 10, 9},
                          std::to_string(per_group) + " a group, stride " + std::to_string(stride));
    }
}

// A 3x3 at dilation 4 (fcn_resnet50's layer4) has only oneDNN's reference loop in oneDNN 2.6,
// which took minutes on fcn: kiln's kernel runs it inside the oneDNN node, with the same result.
TEST(OneDnn, BlockedConvDilation4RunsKilnsKernelOverOneDnnsReference) {
  Builder b;
  b.input("x", {2, 16, 12, 12});
  conv(b, "x", "a", 16, 16, 3, {pads(4), attr_ints("dilations", {4, 4})});
  b.add("Relu", {"a"}, {"r"});
  conv(b, "r", "y", 16, 16, 3, {pads(1)});
  b.output("y");
  expect_blocked_same(b, {2, 16, 12, 12}, "dilation 4");
}

// The RGB stem: a 7x7/2 conv reading the plain 3-channel input.
TEST(OneDnn, BlockedConvPlainStem) {
  Builder b;
  b.input("x", {2, 3, 32, 30});
  conv(b, "x", "a", 3, 16, 7, {pads(3), attr_ints("strides", {2, 2})});
  b.add("Relu", {"a"}, {"r"});
  conv(b, "r", "y", 16, 16, 1, {});
  b.output("y");
  expect_blocked_same(b, {2, 3, 32, 30}, "stem");
}

// act(R) + Z and act(R + Z), with 12 channels (a half-padded block).
TEST(OneDnn, BlockedConvResidualBothOrders) {
  for (bool before : {false, true}) {
    Builder b;
    b.input("x", {2, 12, 9, 9});
    conv(b, "x", "a", 12, 12, 3, {pads(1)});
    conv(b, "a", "c", 12, 12, 3, {pads(1)});
    if (before) {
      b.add("Add", {"c", "a"}, {"s"});
      b.add("Relu", {"s"}, {"y"});
    } else {
      b.add("Relu", {"c"}, {"r"});
      b.add("Add", {"r", "a"}, {"y"});
    }
    b.output("y");
    expect_blocked_same(b, {2, 12, 9, 9}, before ? "act(R + Z)" : "act(R) + Z");
  }
}

// Sigmoid(0) is not 0: the padding lanes must still come out zero (a following conv reads them).
TEST(OneDnn, BlockedConvSigmoidKeepsPaddingLanesZero) {
  Builder b;
  b.input("x", {1, 12, 8, 8});
  conv(b, "x", "a", 12, 12, 3, {pads(1)});
  b.add("Sigmoid", {"a"}, {"s"});
  conv(b, "s", "c", 12, 10, 1, {});
  b.output("c");
  expect_blocked_same(b, {1, 12, 8, 8}, "sigmoid");
}

// Gemm with transA / transB, alpha, beta and each broadcast of C, against double loops.
TEST(OneDnn, GemmMatchesLoops) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const Shape& c_shape : test::GemmCase::c_shapes()) {
        const test::GemmCase g(ta, tb, c_shape);
        auto r = run_with(g.b.m, {g.a}, "onednn");
        ASSERT_TRUE(r.is_ok()) << r.status().message();
        ASSERT_EQ(r->backends.size(), 1u);
        EXPECT_EQ(r->backends[0].second, "onednn") << g.describe();
        const std::vector<double> want = g.expected();
        const Tensor& y = r->outputs[0].tensor;
        ASSERT_EQ(y.numel(), static_cast<int64_t>(want.size()));
        for (int64_t i = 0; i < y.numel(); ++i)
          ASSERT_NEAR(y.data<float>()[i], want[i], 1e-4 * std::max(1.0, std::fabs(want[i])))
              << g.describe() << " element " << i;
      }
}

// Gemm whose B and C are inputs (not packed): alpha goes to oneDNN's output scale, C after it.
TEST(OneDnn, GemmWithComputedOperands) {
  for (const Shape& c_shape : {Shape{6}, Shape{5, 1}}) {
    Builder b;
    b.input("a", {5, 7});
    b.input("w", {6, 7});
    b.input("c", c_shape);
    b.add("Gemm", {"a", "w", "c"}, {"y"},
          {attr_i("transB", 1), attr_f("alpha", 0.75f), attr_f("beta", -1.5f)});
    b.output("y");
    expect_same(b.m, {b.random({5, 7}), b.random({6, 7}), b.random(c_shape)}, "Gemm",
                "C " + shape_str(c_shape));
  }
}

// MatMul: a constant 2-D B (packed) under batched A, and a batched broadcast one computed at run
// time.
TEST(OneDnn, MatMulPackedAndBatched) {
  {
    Builder b;
    b.input("a", {2, 5, 70});
    b.weight("w", {70, 45});
    b.add("MatMul", {"a", "w"}, {"y"});
    b.output("y");
    expect_same(b.m, {b.random({2, 5, 70})}, "MatMul", "packed B");
  }
  {
    Builder b;
    b.input("a", {2, 3, 5, 7});
    b.input("w", {3, 7, 4});
    b.add("MatMul", {"a", "w"}, {"y"});
    b.output("y");
    expect_same(b.m, {b.random({2, 3, 5, 7}), b.random({3, 7, 4})}, "MatMul", "batched B");
  }
}

ir::Attribute floats(const std::string& name, std::vector<float> v) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::Attribute::Type::kFloats;
  a.floats = std::move(v);
  return a;
}

// FusedGemm and FusedMatMul with each activation oneDNN expresses and the residual both ways.
TEST(OneDnn, FusedGemmAndFusedMatMul) {
  struct Act {
    std::string name;
    std::vector<float> params, clip;  // clip: activation_clip, or none
  };
  const std::vector<Act> acts = {
      {"Relu", {}},
      {"LeakyRelu", {0.1f}, {-0.05f, 0.4f}},
      {"Gelu", {}, {-0.1f, 1.0f}},
      {"Clip", {-0.2f, 0.3f}},
      {"LeakyRelu", {0.1f}},
      {"Sigmoid", {}},
      {"HardSigmoid", {0.2f, 0.5f}},
      {"HardSwish", {}},
      {"Silu", {}},
      {"Gelu", {}},
      {"GeluTanh", {}},
      {"Tanh", {}}};
  for (const auto& [act, params, clip] : acts)
    for (int64_t before : {0, 1}) {
      const std::string what = act + (clip.empty() ? "" : " clamped") +
                               " residual_before_activation=" + std::to_string(before);
      std::vector<ir::Attribute> epilogue{attr_s("activation", act),
                                          attr_i("residual_before_activation", before)};
      if (!params.empty()) epilogue.push_back(floats("activation_params", params));
      if (!clip.empty()) epilogue.push_back(floats("activation_clip", clip));
      {
        Builder b;
        b.m.opsets["ai.kiln"] = 1;
        b.input("a", {9, 16});
        b.input("z", {9, 24});
        b.weight("w", {24, 16});
        b.weight("c", {24});
        auto attrs = epilogue;
        attrs.push_back(attr_i("transB", 1));
        attrs.push_back(attr_f("alpha", 0.5f));
        b.add("FusedGemm", {"a", "w", "c", "z"}, {"y"}, attrs).domain = "ai.kiln";
        b.output("y");
        expect_same(b.m, {b.random({9, 16}, -3, 3), b.random({9, 24})}, "FusedGemm", what);
      }
      {
        Builder b;
        b.m.opsets["ai.kiln"] = 1;
        b.input("a", {2, 5, 16});
        b.input("z", {2, 5, 24});
        b.weight("w", {16, 24});
        b.weight("bias", {1, 24});
        b.add("FusedMatMul", {"a", "w", "bias", "z"}, {"y"}, epilogue).domain = "ai.kiln";
        b.output("y");
        expect_same(b.m, {b.random({2, 5, 16}, -3, 3), b.random({2, 5, 24})}, "FusedMatMul", what);
      }
    }
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_ONEDNN
