#include "kiln/image_input.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>

#include "kernels/ref/image_decode.h"
#include "kiln/value_io.h"

namespace kiln {

bool is_image_file(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* e : {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".ppm", ".pgm", ".tif", ".tiff"})
    if (ext == e) return true;
  return false;
}

namespace {

// Where output pixel o of `out` pixels samples an axis of `in`: the two source pixels and the
// weight of the second (half-pixel centres, clamped at the edges).
struct Tap {
  int64_t a, b;
  float w;
};
std::vector<Tap> taps(int64_t in, int64_t out) {
  std::vector<Tap> t(static_cast<size_t>(out));
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  for (int64_t o = 0; o < out; ++o) {
    const double x = std::clamp((static_cast<double>(o) + 0.5) * scale - 0.5, 0.0, static_cast<double>(in - 1));
    const int64_t a = static_cast<int64_t>(std::floor(x));
    t[static_cast<size_t>(o)] = {a, std::min(a + 1, in - 1), static_cast<float>(x - static_cast<double>(a))};
  }
  return t;
}

}  // namespace

Result<Tensor> read_image_input(const std::string& path, const ImageInput& how) {
  const int64_t h = how.height, w = how.width, c = how.channels;
  if (h <= 0 || w <= 0 || h > (1 << 15) || w > (1 << 15) || (c != 1 && c != 3))
    return Status::invalid_argument(path + ": an image input needs a size of 1 to 32768 and 1 or 3 channels, got " +
                                    std::to_string(c) + " x " + std::to_string(h) + " x " + std::to_string(w));
  for (const std::vector<float>* v : {&how.mean, &how.std})
    if (v->size() != 1 && static_cast<int64_t>(v->size()) != c)
      return Status::invalid_argument("--mean and --std take one value or one per channel (" + std::to_string(c) + ")");
  for (float s : how.std)
    if (!(s != 0.0f && std::isfinite(s))) return Status::invalid_argument("--std values must be finite and non-zero");
  KILN_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  Image img;
  if (!decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &img))
    return Status::invalid_argument(path + ": not an image kiln decodes (JPEG, PNG, WebP, BMP, PNM, baseline TIFF)");
  KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::make(DType::kFloat32, how.channels_last ? Shape{1, h, w, c} : Shape{1, c, h, w}));
  const std::vector<Tap> ty = taps(img.height, h), tx = taps(img.width, w);
  // Channel k of source pixel (y, x), in [0, 1]: RGB, or luma.
  auto at = [&](int64_t y, int64_t x, int64_t k) -> float {
    const uint8_t* p = img.rgb.data() + (y * img.width + x) * 3;
    const float v = c == 3 ? p[k] : 0.299f * p[0] + 0.587f * p[1] + 0.114f * p[2];
    return v / 255.0f;
  };
  float* out = t.data<float>();
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t k = 0; k < c; ++k) {
        const Tap &vy = ty[static_cast<size_t>(y)], &vx = tx[static_cast<size_t>(x)];
        const float top = at(vy.a, vx.a, k) * (1 - vx.w) + at(vy.a, vx.b, k) * vx.w;
        const float bottom = at(vy.b, vx.a, k) * (1 - vx.w) + at(vy.b, vx.b, k) * vx.w;
        const float v = top * (1 - vy.w) + bottom * vy.w;
        const float mean = how.mean[how.mean.size() == 1 ? 0 : static_cast<size_t>(k)];
        const float sd = how.std[how.std.size() == 1 ? 0 : static_cast<size_t>(k)];
        out[how.channels_last ? (y * w + x) * c + k : (k * h + y) * w + x] = (v - mean) / sd;
      }
  return t;
}

}  // namespace kiln
