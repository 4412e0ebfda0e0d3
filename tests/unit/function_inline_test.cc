// Model-local functions run by inlining: results checked against the arithmetic done by hand.
#include <gtest/gtest.h>

#include "ir/graph.h"
#include "kiln/session.h"

namespace kiln {
namespace {

ir::Node node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
              const std::string& domain = "") {
  ir::Node n;
  n.op_type = op;
  n.domain = domain;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

TEST(FunctionInline, NestedCallsAndAttributeReferencesRun) {
  auto m = std::make_shared<ir::Model>();
  m->opsets[""] = 17;
  m->opsets["custom"] = 1;
  // custom.Scaled(x) = x * alpha, with alpha taken from the caller's attribute "scale".
  ir::Function scaled{"Scaled", "custom", {"x"}, {"y"}, {"scale"}, {}, {{"", 17}}, ""};
  ir::Node leaky = node("LeakyRelu", {"x"}, {"y"});
  ir::Attribute ref;
  ref.name = "alpha";
  ref.type = ir::Attribute::Type::kFloat;
  ref.ref_attr_name = "scale";
  leaky.attrs.push_back(ref);
  scaled.nodes.push_back(leaky);
  // custom.AddScaled(a, b) = Scaled(a + b) with scale 0.5; "t" is a body-local name.
  ir::Function add_scaled{"AddScaled", "custom", {"a", "b"}, {"c"}, {}, {}, {{"", 17}}, ""};
  add_scaled.nodes.push_back(node("Add", {"a", "b"}, {"t"}));
  ir::Node call = node("Scaled", {"t"}, {"c"}, "custom");
  ir::Attribute scale;
  scale.name = "scale";
  scale.type = ir::Attribute::Type::kFloat;
  scale.f = 0.5f;
  call.attrs.push_back(scale);
  add_scaled.nodes.push_back(call);
  m->functions = {scaled, add_scaled};
  m->graph.inputs = {{"p", ir::TypeInfo::tensor(DType::kFloat32, {3}), ""},
                     {"q", ir::TypeInfo::tensor(DType::kFloat32, {3}), ""}};
  m->graph.outputs = {{"r", ir::TypeInfo::tensor(DType::kFloat32, {3}), ""}};
  m->graph.nodes.push_back(node("AddScaled", {"p", "q"}, {"t"}, "custom"));  // "t" again: no clash
  m->graph.nodes.push_back(node("Neg", {"t"}, {"r"}));

  auto session = Session::create(m);
  ASSERT_TRUE(session.is_ok()) << session.status().message();
  Tensor p = Tensor::make(DType::kFloat32, {3}).value(), q = Tensor::make(DType::kFloat32, {3}).value();
  const float pv[] = {1, -4, 2}, qv[] = {2, 1, -5};
  for (int i = 0; i < 3; ++i) p.data<float>()[i] = pv[i], q.data<float>()[i] = qv[i];
  auto out = (*session)->run({Value::of(p), Value::of(q)});
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  for (int i = 0; i < 3; ++i) {
    const float s = pv[i] + qv[i];
    EXPECT_FLOAT_EQ((*out)[0].tensor.data<float>()[i], -(s >= 0 ? s : 0.5f * s)) << i;
  }
}

}  // namespace
}  // namespace kiln
