// Resize's float32 path for images (nearest and linear over the last two axes, computed in float)
// against the same Resize run in double by the separable reference (a float64 copy of the input):
// up and down, integer and fractional scales, sizes given instead of scales, every coordinate
// transformation mode and nearest mode, 3-D and 4-D inputs. Nearest resizes of 8-bit and integer
// tensors (a gather) against the float path and against plain loops.
#include <gtest/gtest.h>

#include <cmath>

#include "pass_test_util.h"

namespace kiln {
namespace {

// Resize of x (float) as it is, or cast to `as` (an ONNX type number) and the result cast back.
std::vector<float> run_resize(const Shape& in, const std::vector<float>& scales, const std::vector<int64_t>& sizes,
                              const std::vector<ir::Attribute>& attrs, int64_t as, const Tensor& x) {
  test::Builder b(19);
  b.input("x", in);
  std::string src = "x";
  const bool in_double = as != 1;
  if (in_double) {
    b.add("Cast", {"x"}, {"xd"}, {test::attr_i("to", as)});
    src = "xd";
  }
  std::vector<std::string> inputs = {src, ""};
  if (!scales.empty()) {
    b.floats("scales", {static_cast<int64_t>(scales.size())}, scales);
    inputs.push_back("scales");
  } else {
    b.ints("sizes", sizes);
    inputs.push_back("");
    inputs.push_back("sizes");
  }
  b.add("Resize", inputs, {"r"}, attrs);
  std::string out = "r";
  if (in_double) {
    b.add("Cast", {"r"}, {"rf"}, {test::attr_i("to", 1)});
    out = "rf";
  }
  b.output(out);
  ir::Model m = b.m;
  const std::vector<Value> y = test::run_model(m, {x});
  if (y.size() != 1) return {};
  return std::vector<float>(y[0].tensor.data<float>(), y[0].tensor.data<float>() + y[0].tensor.numel());
}

TEST(ResizeKernels, FloatImagePathMatchesDoubleReference) {
  const char* coords[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"};
  const char* nearest[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  int trial = 0;
  for (const char* mode : {"nearest", "linear"})
    for (const char* coord : coords)
      for (const Shape& in : {Shape{1, 3, 5, 7}, Shape{2, 4, 9}, Shape{1, 2, 16, 16}}) {
        ++trial;
        std::vector<ir::Attribute> attrs = {test::attr_s("mode", mode), test::attr_s("coordinate_transformation_mode", coord)};
        if (std::string(mode) == "nearest") attrs.push_back(test::attr_s("nearest_mode", nearest[trial % 4]));
        const size_t r = in.size();
        std::vector<float> scales(r, 1.0f);
        std::vector<int64_t> sizes(in.begin(), in.end());
        const bool by_sizes = trial % 3 == 0;
        scales[r - 2] = trial % 2 ? 2.0f : 0.6f;
        scales[r - 1] = trial % 2 ? 1.75f : 3.0f;
        sizes[r - 2] = in[r - 2] * 2 + 1;
        sizes[r - 1] = std::max<int64_t>(1, in[r - 1] / 2);
        test::Builder rng;
        const Tensor x = rng.random(in, -2, 2);
        const auto fast = run_resize(in, by_sizes ? std::vector<float>{} : scales, sizes, attrs, 1, x);
        const auto ref = run_resize(in, by_sizes ? std::vector<float>{} : scales, sizes, attrs, 11, x);
        ASSERT_EQ(fast.size(), ref.size()) << mode << " " << coord << " " << shape_str(in);
        ASSERT_FALSE(fast.empty());
        for (size_t i = 0; i < ref.size(); ++i)
          ASSERT_NEAR(fast[i], ref[i], 1e-6 * std::max(1.0f, std::fabs(ref[i])))
              << mode << " " << coord << " " << shape_str(in) << (by_sizes ? " sizes" : " scales") << " element " << i;
      }
}

// Codes 0..127 (exact in every type below) for the integer resizes.
Tensor codes(const Shape& shape) {
  Tensor t = Tensor::make(DType::kFloat32, shape).value();
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>((i * 37 + 11) % 128);
  return t;
}

TEST(ResizeKernels, NearestOfIntegerTypesMatchesTheFloatPath) {
  const char* coords[] = {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"};
  const char* nearest[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  for (int64_t type : {2, 3, 6, 7})  // uint8, int8, int32, int64
    for (int trial = 0; trial < 8; ++trial) {
      const Shape in = trial % 2 ? Shape{1, 3, 5, 7} : Shape{2, 4, 9};
      const size_t r = in.size();
      std::vector<float> scales(r, 1.0f);
      scales[r - 2] = trial % 4 < 2 ? 2.0f : 0.6f;
      scales[r - 1] = trial % 4 < 2 ? 1.5f : 3.0f;
      std::vector<ir::Attribute> attrs = {test::attr_s("mode", "nearest"),
                                          test::attr_s("coordinate_transformation_mode", coords[trial % 4]),
                                          test::attr_s("nearest_mode", nearest[(trial / 2) % 4])};
      const Tensor x = codes(in);
      const auto want = run_resize(in, scales, {}, attrs, 1, x);
      const auto got = run_resize(in, scales, {}, attrs, type, x);
      ASSERT_FALSE(want.empty());
      ASSERT_EQ(got, want) << "type " << type << " trial " << trial;
    }
}

TEST(ResizeKernels, NearestOfThreeAxesMatchesPlainLoops) {
  // asymmetric + floor: output index o reads input floor(o / scale) on every axis.
  const Shape in = {2, 3, 4, 5};
  const std::vector<float> scales = {1.0f, 2.0f, 1.5f, 2.0f};
  const Tensor x = codes(in);
  const auto got = run_resize(in, scales, {}, {test::attr_s("mode", "nearest"),
                                                test::attr_s("coordinate_transformation_mode", "asymmetric"),
                                                test::attr_s("nearest_mode", "floor")}, 2, x);
  const int64_t oc = 6, oh = 6, ow = 10;
  ASSERT_EQ(got.size(), static_cast<size_t>(2 * oc * oh * ow));
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < oc; ++c)
      for (int64_t h = 0; h < oh; ++h)
        for (int64_t w = 0; w < ow; ++w) {
          const int64_t ic = c / 2, ih = static_cast<int64_t>(std::floor(h / 1.5)), iw = w / 2;
          ASSERT_EQ(got[((n * oc + c) * oh + h) * ow + w], x.data<float>()[((n * 3 + ic) * 4 + ih) * 5 + iw])
              << n << " " << c << " " << h << " " << w;
        }
}

}  // namespace
}  // namespace kiln
