// Image decoding shared by the ImageDecoder kernel and kiln quantize's calibration images: BMP,
// PNM and baseline TIFF decoded here; JPEG, PNG and WebP through Debian's libjpeg, libpng and
// libwebp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln {

// Decoded pixels, always 8-bit RGB, row-major.
struct Image {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> rgb;
};

// Decodes the n bytes at d (the format found from their content); false when they are none of
// the formats, corrupt, or larger than 2^28 pixels.
bool decode_image(const uint8_t* d, size_t n, Image* img);

}  // namespace kiln
