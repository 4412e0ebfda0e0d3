// A model input made from an image file, as a vision model's preprocessing makes it: decoded
// (JPEG, PNG, WebP, BMP, PNM, TIFF), resized, scaled to [0, 1], normalized per channel and laid
// out as the input wants. kiln quantize reads calibration images through it (--calib DIR with
// --mean/--std/--layout).
#pragma once

#include <string>
#include <vector>

#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln {

struct ImageInput {
  int64_t height = 0, width = 0;  // the size the image is resized to
  int64_t channels = 3;           // 3: RGB; 1: luma (ITU-R 601-2)
  bool channels_last = false;     // [1, H, W, C] instead of [1, C, H, W]
  // value = (pixel / 255 - mean[c]) / std[c], one value for every channel or one per channel.
  std::vector<float> mean = {0.0f}, std = {1.0f};
};

// The image file at `path` as a float32 tensor [1, C, H, W] (or [1, H, W, C]): resized with
// bilinear interpolation (half-pixel centres) straight to H x W, the aspect ratio not kept; an
// error naming the file where it is not an image kiln decodes.
Result<Tensor> read_image_input(const std::string& path, const ImageInput& how);

// Whether `path` names an image file by its extension (.jpg, .jpeg, .png, .webp, .bmp, .ppm,
// .pgm, .tif, .tiff).
bool is_image_file(const std::string& path);

}  // namespace kiln
