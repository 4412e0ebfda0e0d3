// A model's graph input or output as users see it (Model::inputs(), Session::inputs()).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/value.h"

namespace kiln {

// Dims of -1 are dynamic, named in dim_names ("" when the model gives no name).
struct IoInfo {
  std::string name;
  Value::Kind kind = Value::Kind::kTensor;
  DType dtype = DType::kUndefined;
  bool has_shape = false;
  std::vector<int64_t> dims;
  std::vector<std::string> dim_names;
};

}  // namespace kiln
