// Splitting a tensor into slices along an axis and stacking/concatenating slices back: shared by
// the sequence ops and the control-flow ops' scan inputs and outputs.
#pragma once

#include <vector>

#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln {

// Joins tensors along `axis`; with `new_axis` they are stacked along a new axis instead.
Result<Tensor> join_tensors(const std::vector<Tensor>& parts, int64_t axis, bool new_axis);
// Slice `index` of `t` along `axis`, without that axis (keep_axis=false) or with it as size 1.
Result<Tensor> take_slice(const Tensor& t, int64_t axis, int64_t index, bool keep_axis);
// Slices [begin, end) of `t` along `axis`.
Result<Tensor> take_range(const Tensor& t, int64_t axis, int64_t begin, int64_t end);

}  // namespace kiln
