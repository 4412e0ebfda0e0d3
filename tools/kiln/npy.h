// NumPy .npy files (format 1.0-3.0, little-endian, C order) <-> tensors, for users' inputs and outputs.
#pragma once

#include <string>

#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln::cli {

Result<Tensor> parse_npy(const std::string& bytes);
Result<std::string> serialize_npy(const Tensor& t);

}  // namespace kiln::cli
