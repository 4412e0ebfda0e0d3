// read_image_input (kiln quantize's calibration images): a PPM written here, read back at its own
// size (the pixels scaled and normalized exactly), upsampled (bilinear, half-pixel centres, against
// the formula), in either layout and as luma; a corrupt file is an error naming it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "kiln/image_input.h"
#include "kiln/value_io.h"

namespace kiln {
namespace {

// A 2x2 RGB image: pixel (y, x) channel k = 40 * (2y + x) + 10k.
std::string write_ppm() {
  std::string bytes = "P6\n2 2\n255\n";
  for (int p = 0; p < 4; ++p)
    for (int k = 0; k < 3; ++k) bytes.push_back(static_cast<char>(40 * p + 10 * k));
  const std::string path = (std::filesystem::temp_directory_path() / "kiln_image_input_test.ppm").string();
  EXPECT_TRUE(write_file(path, bytes).is_ok());
  return path;
}

float pixel(int y, int x, int k) { return static_cast<float>(40 * (2 * y + x) + 10 * k) / 255.0f; }

TEST(ImageInput, ScaledNormalizedAndLaidOut) {
  const std::string path = write_ppm();
  ImageInput how;
  how.height = how.width = 2;
  how.mean = {0.1f, 0.2f, 0.3f};
  how.std = {0.5f};
  auto t = read_image_input(path, how);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  ASSERT_EQ(t->shape(), (Shape{1, 3, 2, 2}));
  for (int k = 0; k < 3; ++k)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 2; ++x)
        EXPECT_FLOAT_EQ(t->data<float>()[(k * 2 + y) * 2 + x], (pixel(y, x, k) - how.mean[k]) / 0.5f);
  how.channels_last = true;
  auto hwc = read_image_input(path, how);
  ASSERT_TRUE(hwc.is_ok());
  ASSERT_EQ(hwc->shape(), (Shape{1, 2, 2, 3}));
  EXPECT_FLOAT_EQ(hwc->data<float>()[(1 * 2 + 0) * 3 + 2], (pixel(1, 0, 2) - 0.3f) / 0.5f);
  how = ImageInput{};
  how.height = how.width = 2;
  how.channels = 1;
  auto luma = read_image_input(path, how);
  ASSERT_TRUE(luma.is_ok());
  EXPECT_NEAR(luma->data<float>()[3], 0.299f * pixel(1, 1, 0) + 0.587f * pixel(1, 1, 1) + 0.114f * pixel(1, 1, 2), 1e-6);
}

TEST(ImageInput, UpsampledBilinearlyWithHalfPixelCentres) {
  const std::string path = write_ppm();
  ImageInput how;
  how.height = 4, how.width = 3;
  auto t = read_image_input(path, how);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  // Output o of n samples source (o + 0.5) * in / n - 0.5, clamped to [0, in - 1].
  auto src = [](int o, int n) { return std::clamp((o + 0.5) * 2 / n - 0.5, 0.0, 1.0); };
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 3; ++x) {
      const double sy = src(y, 4), sx = src(x, 3);
      const double want = (1 - sy) * ((1 - sx) * pixel(0, 0, 1) + sx * pixel(0, 1, 1)) +
                          sy * ((1 - sx) * pixel(1, 0, 1) + sx * pixel(1, 1, 1));
      EXPECT_NEAR(t->data<float>()[(1 * 4 + y) * 3 + x], want, 1e-6) << y << ", " << x;
    }
}

TEST(ImageInput, BadFilesAndOptionsAreErrors) {
  const std::string path = (std::filesystem::temp_directory_path() / "kiln_image_input_bad.png").string();
  ASSERT_TRUE(write_file(path, "not a png").is_ok());
  ImageInput how;
  how.height = how.width = 8;
  auto bad = read_image_input(path, how);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find(path), std::string::npos);
  how.std = {0.0f};
  EXPECT_FALSE(read_image_input(write_ppm(), how).is_ok());
  EXPECT_TRUE(is_image_file("a/b.JPG") && is_image_file("x.png") && !is_image_file("x.npy"));
}

}  // namespace
}  // namespace kiln
