// kiln::compare_models and compare_values: tolerance rule, output matching errors, and the
// per-layer walk that names the first tensor where model B leaves model A.
#include "kiln/compare.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "pass_test_util.h"

namespace kiln {
namespace {

using test::Builder;

// y = Relu(MatMul(x, w) * scale) + bias, every intermediate named: h1, h2, h3.
Builder chain(float scale) {
  Builder b;
  b.input("x", {2, 4});
  b.weight("w", {4, 3});
  b.weight("bias", {3});
  b.scalar("scale", scale);
  b.add("MatMul", {"x", "w"}, {"h1"});
  b.add("Mul", {"h1", "scale"}, {"h2"});
  b.add("Relu", {"h2"}, {"h3"});
  b.add("Add", {"h3", "bias"}, {"y"});
  b.output("y");
  return b;
}

std::vector<Value> feeds(Builder& b) { return {Value::of(b.random({2, 4}))}; }

CompareOptions per_layer() {
  CompareOptions o;
  o.per_layer = true;
  return o;
}

Tensor floats(std::vector<float> v) {
  Tensor t = Tensor::make(DType::kFloat32, {static_cast<int64_t>(v.size())}).value();
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

TEST(Compare, IdenticalModelsAgreeEverywhere) {
  Builder a = chain(2.5f);
  auto r = compare_models(a.m, a.m, feeds(a), per_layer(), 1);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->ok);
  ASSERT_EQ(r->outputs.size(), 1u);
  EXPECT_EQ(r->outputs[0].name, "y");
  EXPECT_EQ(r->outputs[0].max_abs, 0);
  EXPECT_EQ(r->outputs[0].numel, 6);
  EXPECT_FALSE(r->first_divergence.has_value());
  std::vector<std::string> names;
  for (const auto& d : r->layers) {
    names.push_back(d.name);
    EXPECT_EQ(d.max_abs, 0) << d.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"h1", "h2", "h3", "y"}));
}

TEST(Compare, ChangedConstantIsTheFirstDivergence) {
  Builder a = chain(2.5f);
  Builder b = a;
  b.m.graph.initializers["scale"] = Tensor::scalar<float>(DType::kFloat32, 2.0f);
  // Listed backwards in both files: "first" must follow the data flow, not the node list.
  std::reverse(a.m.graph.nodes.begin(), a.m.graph.nodes.end());
  std::reverse(b.m.graph.nodes.begin(), b.m.graph.nodes.end());
  const std::vector<Value> in = feeds(a);
  auto r = compare_models(a.m, b.m, in, per_layer(), 1);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_FALSE(r->ok);
  EXPECT_FALSE(r->outputs[0].ok);
  ASSERT_TRUE(r->first_divergence.has_value());
  const TensorDiff& d = *r->first_divergence;
  EXPECT_EQ(d.name, "h2");
  EXPECT_EQ(d.producer_a, "Mul1 (Mul)");
  EXPECT_EQ(d.producer_b, "Mul1 (Mul)");
  // Independent reference: h2 differs by h1 * 0.5, and relatively by 0.5 / 2.5 wherever h1 != 0.
  const float* x = in[0].tensor.data<float>();
  const float* w = a.m.graph.initializers["w"].data<float>();
  double want_abs = 0;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      double h1 = 0;
      for (int k = 0; k < 4; ++k) h1 += double(x[i * 4 + k]) * w[k * 3 + j];
      want_abs = std::max(want_abs, std::fabs(h1) * 0.5);
    }
  EXPECT_NEAR(d.max_abs, want_abs, 1e-5);
  EXPECT_NEAR(d.max_rel, 0.2, 1e-5);
  EXPECT_EQ(d.mismatches, 6);
  ASSERT_EQ(r->layers.size(), 4u);
  EXPECT_EQ(r->layers[0].name, "h1");
  EXPECT_TRUE(r->layers[0].ok);
}

TEST(Compare, TensorsOnlyInAAreSkippedAndFusedOutputCompares) {
  Builder a = chain(2.5f);
  // B folds the scale into the weight: one MatMul writes h2 (the last tensor it replaces), and
  // renames Relu's output, so h1 and h3 exist only in A.
  Builder b;
  b.m = a.m;
  Tensor w2 = a.m.graph.initializers["w"].clone();
  for (int64_t i = 0; i < w2.numel(); ++i) w2.data<float>()[i] *= 2.5f;
  b.m.graph.initializers["w2"] = w2;
  b.m.graph.nodes.clear();
  b.add("MatMul", {"x", "w2"}, {"h2"});
  b.add("Relu", {"h2"}, {"relu_out"});
  b.add("Add", {"relu_out", "bias"}, {"y"});
  auto r = compare_models(a.m, b.m, feeds(a), per_layer(), 1);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->ok);
  EXPECT_FALSE(r->first_divergence.has_value());
  ASSERT_EQ(r->layers.size(), 2u);
  EXPECT_EQ(r->layers[0].name, "h2");
  EXPECT_EQ(r->layers[0].producer_a, "Mul1 (Mul)");
  EXPECT_EQ(r->layers[0].producer_b, "MatMul0 (MatMul)");
  EXPECT_TRUE(r->layers[0].ok);
  EXPECT_LT(r->layers[0].max_abs, 1e-5);
  EXPECT_EQ(r->layers[1].name, "y");
}

TEST(Compare, OutputCountMismatchIsAnError) {
  Builder a = chain(2.5f);
  Builder b = a;
  b.output("h3");
  auto r = compare_models(a.m, b.m, feeds(a), {}, 1);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("model A has 1 outputs, model B has 2"), std::string::npos)
      << r.status().message();
}

TEST(Compare, OutputShapeMismatchNamesTheOutputs) {
  Builder a = chain(2.5f);
  Builder b = a;
  b.ints("flat", {-1});
  b.add("Reshape", {"y", "flat"}, {"y_flat"});
  b.m.graph.outputs[0].name = "y_flat";
  auto r = compare_models(a.m, b.m, feeds(a), {}, 1);
  ASSERT_FALSE(r.is_ok());
  const std::string m = r.status().message();
  EXPECT_NE(m.find("output 0 ('y' in A, 'y_flat' in B)"), std::string::npos) << m;
  EXPECT_NE(m.find("shape differs: A [2,3], B [6]"), std::string::npos) << m;
}

TEST(Compare, OutputsMatchByPositionAndReportDifferentNames) {
  Builder a = chain(2.5f);
  Builder b = a;
  b.add("Identity", {"y"}, {"out"});
  b.m.graph.outputs[0].name = "out";
  auto r = compare_models(a.m, b.m, feeds(a), {}, 1);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->ok);
  EXPECT_EQ(r->outputs[0].name, "y");
  EXPECT_EQ(r->outputs[0].name_b, "out");
  EXPECT_EQ(r->outputs[0].producer_b, "Identity4 (Identity)");
}

TEST(Compare, ToleranceIsAllcloseWithAAsReference) {
  CompareOptions o;
  o.rtol = 1e-3;
  o.atol = 0;
  // |a-b| <= rtol*|a|: 0.5 <= 1 passes, 2 > 1 fails; the relative error is taken against a.
  auto pass = compare_values(Value::of(floats({1000})), Value::of(floats({1000.5f})), o);
  ASSERT_TRUE(pass.is_ok());
  EXPECT_TRUE(pass->ok);
  EXPECT_DOUBLE_EQ(pass->max_abs, 0.5);
  EXPECT_DOUBLE_EQ(pass->max_ref, 1000);
  auto f = compare_values(Value::of(floats({1000, 1})), Value::of(floats({1002, 1})), o);
  ASSERT_TRUE(f.is_ok());
  EXPECT_FALSE(f->ok);
  EXPECT_EQ(f->mismatches, 1);
  EXPECT_DOUBLE_EQ(f->max_rel, 0.002);
  o.atol = 3;  // now the absolute term covers it
  EXPECT_TRUE(compare_values(Value::of(floats({1000})), Value::of(floats({1002})), o)->ok);
}

TEST(Compare, NanAgreesOnlyWithNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  CompareOptions o;
  auto same = compare_values(Value::of(floats({nan, 1, inf})), Value::of(floats({nan, 1, inf})), o);
  ASSERT_TRUE(same.is_ok());
  EXPECT_TRUE(same->ok);
  EXPECT_EQ(same->max_abs, 0);
  auto differ = compare_values(Value::of(floats({nan, 1})), Value::of(floats({1, 1})), o);
  ASSERT_TRUE(differ.is_ok());
  EXPECT_FALSE(differ->ok);
  EXPECT_EQ(differ->mismatches, 1);
  EXPECT_TRUE(std::isinf(differ->max_abs));
  o.rtol = 1;  // even a huge tolerance does not let a finite value match infinity
  EXPECT_FALSE(compare_values(Value::of(floats({inf})), Value::of(floats({1e30f})), o)->ok);
}

TEST(Compare, IntegersCompareExactly) {
  CompareOptions o;
  o.atol = 10;
  auto r = compare_values(Value::of(test::int64s({1, 2, (int64_t{1} << 60) + 1})),
                          Value::of(test::int64s({1, 3, int64_t{1} << 60})), o);
  ASSERT_TRUE(r.is_ok());
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->mismatches, 2);  // 2 vs 3, and 2^60+1 vs 2^60, which doubles cannot tell apart
  EXPECT_DOUBLE_EQ(r->max_abs, 1);
  auto dtype = compare_values(Value::of(test::int64s({1})), Value::of(floats({1})), o);
  ASSERT_FALSE(dtype.is_ok());
  EXPECT_NE(dtype.status().message().find("dtype differs: A int64, B float32"), std::string::npos)
      << dtype.status().message();
}

}  // namespace
}  // namespace kiln
