// Tensor storage: make zeroes it; make_for_overwrite leaves it to the writer, and under
// KILN_POISON_UNWRITTEN=1 (scripts/run_tests.sh sets it for every stage) fills it with NaN so
// that a kernel which misses an element fails its comparison instead of passing on stale zeros.
#include "kiln/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace kiln {
namespace {

TEST(Tensor, MakeZeroesStorageEvenWhenPoisoned) {
  auto t = Tensor::make(DType::kFloat32, {3, 5});
  ASSERT_TRUE(t) << t.status().message();
  for (int64_t i = 0; i < t->numel(); ++i) EXPECT_EQ(t->data<float>()[i], 0.0f) << i;
}

TEST(Tensor, MakeForOverwriteIsPoisonedWhenAsked) {
  const char* v = std::getenv("KILN_POISON_UNWRITTEN");
  if (v == nullptr || v[0] != '1') GTEST_SKIP() << "KILN_POISON_UNWRITTEN=1 is not set";
  auto t = Tensor::make_for_overwrite(DType::kFloat32, {7, 3});
  ASSERT_TRUE(t) << t.status().message();
  for (int64_t i = 0; i < t->numel(); ++i) EXPECT_TRUE(std::isnan(t->data<float>()[i])) << i;
}

TEST(Tensor, MakeForOverwriteChecksShapes) {
  EXPECT_FALSE(Tensor::make_for_overwrite(DType::kFloat32, {-1, 3}));
  EXPECT_FALSE(Tensor::make_for_overwrite(DType::kFloat32, {int64_t{1} << 40, int64_t{1} << 40}));
}

}  // namespace
}  // namespace kiln
