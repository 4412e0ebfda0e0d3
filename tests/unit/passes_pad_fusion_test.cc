// pad-fusion: a zero Pad of the spatial axes goes into the Conv or AveragePool it feeds; the
// outputs stay those of the explicit Pad.
#include <gtest/gtest.h>

#include "pass_test_util.h"

namespace kiln {
namespace {

using test::attr_i;
using test::attr_ints;
using test::Builder;

// x [1, 3, 6, 5] -> Pad(pads, value) -> `op` (3x3, its own pads `own`, count_include_pad `cip`).
Builder padded(const std::string& op, std::vector<int64_t> pads, float value = 0.0f,
               std::vector<int64_t> own = {0, 0, 0, 0}, int64_t cip = 0) {
  Builder b(17);
  b.input("x", {1, 3, 6, 5});
  b.ints("pads", std::move(pads));
  b.scalar("value", value);
  b.add("Pad", {"x", "pads", "value"}, {"p"});
  std::vector<ir::Attribute> attrs = {attr_ints("kernel_shape", {3, 3}), attr_ints("pads", own)};
  if (op == "Conv") {
    b.weight("w", {4, 3, 3, 3});
    b.add("Conv", {"p", "w"}, {"y"}, attrs);
  } else {
    attrs.push_back(attr_i("count_include_pad", cip));
    b.add("AveragePool", {"p"}, {"y"}, attrs);
  }
  b.output("y");
  return b;
}

TEST(PadFusion, ZeroSpatialPadGoesIntoThePoolAndTheConv) {
  Builder pool = padded("AveragePool", {0, 0, 1, 2, 0, 0, 1, 0});
  test::check_pass(pool, "pad-fusion", {"Pad", "AveragePool"}, {{1, 3, 6, 5}});
  ir::Model m = pool.m;
  test::run_passes(m, {"pad-fusion", "dead-code"});
  EXPECT_EQ(test::op_types(m), (std::vector<std::string>{"AveragePool"}));
  // A pool that counts its own pads adds the Pad's to them.
  Builder counted = padded("AveragePool", {0, 0, 1, 1, 0, 0, 1, 1}, 0.0f, {1, 0, 0, 1}, 1);
  test::check_pass(counted, "pad-fusion", {"Pad", "AveragePool"}, {{1, 3, 6, 5}});
  Builder conv = padded("Conv", {0, 0, 2, 1, 0, 0, 0, 1}, 0.0f, {1, 1, 1, 1});
  test::check_pass(conv, "pad-fusion", {"Pad", "Conv"}, {{1, 3, 6, 5}});
}

TEST(PadFusion, PadsTheConsumerCannotTakeStay) {
  for (Builder b : {padded("Conv", {0, 1, 1, 1, 0, 0, 1, 1}),        // pads the channels
                    padded("Conv", {0, 0, 1, 1, 0, 0, 1, 1}, 0.5f),  // not zero
                    padded("AveragePool", {0, 0, 1, 1, 0, 0, 1, 1}, 0.0f, {1, 1, 1, 1}, 0),  // own pads uncounted
                    padded("Conv", {0, 0, -1, 0, 0, 0, 0, 0})})     // crops
    test::expect_no_rewrite(b.m, "pad-fusion");
}

}  // namespace
}  // namespace kiln
