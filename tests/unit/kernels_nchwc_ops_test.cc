// The blocked non-conv kernels (BlockedSqueezeExcite, the blocked pools, the reorders) against
// the reference kernels of the ops they stand for: each case runs x -> ReorderToBlocked ->
// blocked op -> ReorderFromBlocked and compares with the plain op on x, on 1 and 2 threads,
// and checks that the blocked result's padding lanes are zero.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/session.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

using test::attr_i;
using test::attr_ints;
using test::attr_floats;

Result<std::vector<Value>> run(const ir::Model& m, const std::vector<Tensor>& feeds, int threads) {
  SessionOptions o;
  o.threads = threads;
  KILN_ASSIGN_OR_RETURN(auto s, Session::create(std::make_shared<const ir::Model>(m), o));
  std::vector<Value> in;
  for (const Tensor& t : feeds) in.push_back(Value::of(t));
  return s->run(in);
}

// `plain` computes y from x (and further inputs) with the standard op; `blocked` is the same
// model with the op replaced by its blocked form between two reorders. Outputs: y, and in
// `blocked` also "yb", the blocked result.
void expect_same(const test::Builder& plain, const test::Builder& blocked,
                 const std::vector<Tensor>& feeds, int64_t channels, float tol) {
  auto want = run(plain.m, feeds, 1);
  ASSERT_TRUE(want.is_ok()) << want.status().message();
  for (int threads : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    auto got = run(blocked.m, feeds, threads);
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    const Tensor& w = (*want)[0].tensor;
    const Tensor& g = (*got)[0].tensor;
    ASSERT_EQ(g.shape(), w.shape());
    for (int64_t i = 0; i < w.numel(); ++i) {
      const float a = w.data<float>()[i], b = g.data<float>()[i];
      ASSERT_EQ(std::isnan(a), std::isnan(b)) << "element " << i << ": " << a << " vs " << b;
      if (!std::isnan(a)) {
        ASSERT_NEAR(b, a, tol * std::max(1.0f, std::fabs(a))) << "element " << i;
      }
    }
    const Tensor& yb = (*got)[1].tensor;
    for (int64_t i = 0; i < yb.numel(); ++i) {
      const int64_t channel = i / (yb.dim(2) * yb.dim(3) * 8) % yb.dim(1) * 8 + i % 8;
      if (channel >= channels) {
        ASSERT_EQ(yb.data<float>()[i], 0.0f) << "padding lane " << i;
      }
    }
  }
}

// x [n, c, h, w] -> ReorderToBlocked -> op(xb, extra inputs...) -> yb -> ReorderFromBlocked -> y.
test::Builder blocked_model(const std::string& op, int64_t c, std::vector<std::string> extra,
                            std::vector<ir::Attribute> attrs) {
  test::Builder b;
  b.m.opsets["ai.kiln"] = 1;
  b.add("ReorderToBlocked", {"x"}, {"xb"}).domain = "ai.kiln";
  extra.insert(extra.begin(), "xb");
  b.add(op, extra, {"yb"}, std::move(attrs)).domain = "ai.kiln";
  b.add("ReorderFromBlocked", {"yb"}, {"y"}, {attr_i("channels", c)}).domain = "ai.kiln";
  b.output("y");
  b.output("yb");
  return b;
}

struct SeCase {
  int64_t n, c, r, h, w;
  const char* act;
  const char* gate;
  bool biases;
  bool constant_weights;  // initializers (prepare packs them) or graph inputs (packed per run)
};

TEST(BlockedKernels, SqueezeExciteMatchesReference) {
  const SeCase cases[] = {
      {1, 32, 8, 17, 19, "Silu", "Sigmoid", true, true},
      {2, 13, 5, 9, 7, "Relu", "HardSigmoid", true, true},   // C % 8 != 0, batch 2
      {1, 13, 3, 6, 5, "Silu", "Sigmoid", false, true},      // no biases
      {2, 20, 7, 5, 11, "Silu", "Sigmoid", true, false},     // weights fed at run time
      {1, 1152, 48, 7, 7, "Silu", "Sigmoid", true, true},    // efficientnet's last stage
      {1, 96, 4, 56, 56, "Silu", "Sigmoid", true, true},     // efficientnet's widest plane
      {1, 8, 1, 1, 1, "", "Sigmoid", true, true},            // 1x1 plane, no activation
      {1, 37, 41, 3, 2, "Relu", "HardSigmoid", true, true},  // R > C
  };
  for (const SeCase& k : cases) {
    SCOPED_TRACE(::testing::Message() << "SE n" << k.n << " c" << k.c << " r" << k.r << " " << k.h
                                      << "x" << k.w << " const " << k.constant_weights);
    std::vector<ir::Attribute> attrs{test::attr_s("gate", k.gate)};
    if (std::string(k.gate) == "HardSigmoid")
      attrs.push_back(attr_floats("gate_params", {0.2f, 0.5f}));
    if (*k.act) attrs.push_back(test::attr_s("activation", k.act));
    std::vector<std::string> in{"w1", k.biases ? "b1" : "", "w2", k.biases ? "b2" : ""};
    test::Builder plain;
    plain.m.opsets["ai.kiln"] = 1;
    std::vector<std::string> plain_in = in;
    plain_in.insert(plain_in.begin(), "x");
    plain.add("SqueezeExcite", plain_in, {"y"}, attrs).domain = "ai.kiln";
    plain.output("y");
    test::Builder blocked = blocked_model("BlockedSqueezeExcite", k.c, in, attrs);
    const Shape xs{k.n, k.c, k.h, k.w};
    std::vector<Tensor> feeds{plain.random(xs)};
    std::vector<std::pair<std::string, Tensor>> weights{{"w1", plain.random({k.r, k.c, 1, 1})},
                                                        {"w2", plain.random({k.c, k.r, 1, 1})}};
    if (k.biases) {
      weights.emplace_back("b1", plain.random({k.r}));
      weights.emplace_back("b2", plain.random({k.c}));
    }
    for (test::Builder* b : {&plain, &blocked}) {
      b->input("x", xs);
      for (const auto& [name, t] : weights)
        if (k.constant_weights)
          b->m.graph.initializers[name] = t;
        else
          b->input(name, t.shape());
    }
    if (!k.constant_weights)
      for (const auto& [name, t] : weights) feeds.push_back(t);
    expect_same(plain, blocked, feeds, k.c, 2e-5f);
  }
}

struct PoolCase {
  const char* op;  // MaxPool, AveragePool or GlobalAveragePool
  int64_t n, c, h, w, k, s, pad;
  int64_t ceil_mode = 0, count_include_pad = 0;
};

TEST(BlockedKernels, PoolsMatchReference) {
  const PoolCase cases[] = {
      {"MaxPool", 1, 64, 112, 112, 3, 2, 1},  // resnet's stem pool
      {"MaxPool", 2, 13, 9, 10, 3, 2, 1},
      {"MaxPool", 1, 5, 7, 7, 2, 2, 0, 1},  // ceil mode: a last window past the edge
      {"MaxPool", 1, 9, 4, 5, 5, 1, 2},     // window wider than the input
      {"AveragePool", 2, 11, 8, 9, 3, 1, 1},
      {"AveragePool", 1, 11, 8, 9, 3, 2, 1, 0, 1},  // count_include_pad
      {"AveragePool", 1, 16, 7, 7, 2, 2, 0, 1},
      {"GlobalAveragePool", 1, 1280, 7, 7, 0, 0, 0},
      {"GlobalAveragePool", 2, 13, 15, 17, 0, 0, 0},
      {"GlobalAveragePool", 1, 3, 1, 1, 0, 0, 0},
  };
  for (const PoolCase& k : cases) {
    SCOPED_TRACE(::testing::Message() << k.op << " n" << k.n << " c" << k.c << " " << k.h << "x"
                                      << k.w << " k" << k.k << " s" << k.s << " p" << k.pad);
    std::vector<ir::Attribute> attrs;
    if (std::string(k.op) != "GlobalAveragePool") {
      attrs = {attr_ints("kernel_shape", {k.k, k.k}), attr_ints("strides", {k.s, k.s}),
               attr_ints("pads", {k.pad, k.pad, k.pad, k.pad}), attr_i("ceil_mode", k.ceil_mode)};
      if (std::string(k.op) == "AveragePool")
        attrs.push_back(attr_i("count_include_pad", k.count_include_pad));
    }
    test::Builder plain;
    plain.add(k.op, {"x"}, {"y"}, attrs);
    plain.output("y");
    test::Builder blocked = blocked_model(std::string("Blocked") + k.op, k.c, {}, attrs);
    const Shape xs{k.n, k.c, k.h, k.w};
    plain.input("x", xs);
    blocked.input("x", xs);
    expect_same(plain, blocked, {plain.random(xs)}, k.c, 1e-5f);
  }
}

// NaN inputs: a max window whose first value is NaN gives NaN, later NaNs are skipped, in the
// reference's tap order, at the edges and inside.
TEST(BlockedKernels, MaxPoolNaNLikeReference) {
  const Shape xs{1, 9, 7, 9};
  const std::vector<ir::Attribute> attrs{attr_ints("kernel_shape", {3, 3}),
                                         attr_ints("strides", {1, 1}),
                                         attr_ints("pads", {1, 1, 1, 1})};
  test::Builder plain;
  plain.add("MaxPool", {"x"}, {"y"}, attrs);
  plain.output("y");
  plain.input("x", xs);
  test::Builder blocked = blocked_model("BlockedMaxPool", xs[1], {}, attrs);
  blocked.input("x", xs);
  Tensor x = plain.random(xs);
  for (int64_t i = 0; i < x.numel(); i += 7) x.data<float>()[i] = std::nanf("");
  expect_same(plain, blocked, {x}, xs[1], 0.0f);
}

// The reorders alone round-trip exactly, over odd sizes (row ends not a multiple of 8 pixels).
TEST(BlockedKernels, ReorderRoundTrip) {
  for (const Shape& xs : {Shape{1, 3, 224, 224}, Shape{2, 13, 7, 9}, Shape{1, 1, 1, 1},
                          Shape{1, 40, 28, 28}, Shape{3, 8, 5, 3}}) {
    SCOPED_TRACE(shape_str(xs));
    test::Builder b;
    b.m.opsets["ai.kiln"] = 1;
    b.add("ReorderToBlocked", {"x"}, {"yb"}).domain = "ai.kiln";
    b.add("ReorderFromBlocked", {"yb"}, {"y"}, {attr_i("channels", xs[1])}).domain = "ai.kiln";
    b.input("x", xs);
    b.output("y");
    b.output("yb");
    test::Builder identity;
    identity.add("Identity", {"x"}, {"y"});
    identity.input("x", xs);
    identity.output("y");
    expect_same(identity, b, {b.random(xs)}, xs[1], 0.0f);
  }
}

}  // namespace
}  // namespace kiln
