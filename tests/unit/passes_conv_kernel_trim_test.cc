// conv-kernel-trim: kernel taps that read only padding are cut, the pads shrunk to match; the
// outputs stay those of the plain loops over the whole kernel.
#include <gtest/gtest.h>

#include "pass_test_util.h"

namespace kiln {
namespace {

using test::attr_i;
using test::attr_ints;
using test::Builder;

const ir::Attribute* find_attr(const ir::Node& n, const std::string& name) {
  for (const ir::Attribute& a : n.attrs)
    if (a.name == name) return &a;
  return nullptr;
}

// A 3x3 conv over a 7x6 map at dilations (dh, dw), pads (dh, dw) each side, group `group`.
Builder dilated(int64_t dh, int64_t dw, int64_t group = 1) {
  Builder b(17);
  b.input("x", {1, 4, 7, 6});
  b.weight("w", {8, 4 / group, 3, 3});
  b.weight("b", {8});
  b.add("Conv", {"x", "w", "b"}, {"y"},
        {attr_ints("dilations", {dh, dw}), attr_ints("pads", {dh, dw, dh, dw}), attr_i("group", group)});
  b.output("y");
  return b;
}

TEST(ConvKernelTrim, TapsThatReadOnlyPaddingGo) {
  // Dilation 7 on 7 rows: only the middle kernel row reads the input; dilation 3 on 6 columns:
  // every column does (the outer ones for some pixels), so the columns stay.
  Builder b = dilated(7, 3);
  const ir::Model after = test::check_pass(b, "conv-kernel-trim", {"Conv"}, {{1, 4, 7, 6}});
  const ir::Node& conv = after.graph.nodes[0];
  ASSERT_NE(find_attr(conv, "kernel_shape"), nullptr);
  EXPECT_EQ(find_attr(conv, "kernel_shape")->ints, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(find_attr(conv, "pads")->ints, (std::vector<int64_t>{0, 3, 0, 3}));
  EXPECT_EQ(after.graph.initializers.at(conv.inputs[1]).shape(), (Shape{8, 4, 1, 3}));
}

TEST(ConvKernelTrim, GroupedAndBothAxes) {
  Builder b = dilated(9, 8, 2);
  const ir::Model after = test::check_pass(b, "conv-kernel-trim", {"Conv"}, {{1, 4, 7, 6}});
  EXPECT_EQ(find_attr(after.graph.nodes[0], "kernel_shape")->ints, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(find_attr(after.graph.nodes[0], "pads")->ints, (std::vector<int64_t>{0, 0, 0, 0}));
}

TEST(ConvKernelTrim, KernelsThatReadTheInputStay) {
  test::expect_no_rewrite(dilated(2, 3).m, "conv-kernel-trim");
}

}  // namespace
}  // namespace kiln
