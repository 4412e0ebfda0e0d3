// Which QLinearConv nodes the 8-bit conv tile runs (qlinear_conv.cc), for the passes that choose
// their layout by it.
#pragma once

#include <vector>

#include "ir/graph.h"
#include "kiln/tensor.h"

namespace kiln {

// Whether QLinearConv `node` (ONNX's or com.microsoft's) takes the tile, its constant inputs as
// Kernel::prepare receives them (null where not constant): group 1 or depthwise, 1-D or 2-D, 8-bit
// weights with constant zero points (one, or one a filter), scalar X and Y scales and zero
// points, an int32 bias per filter.
bool qlinear_conv_tileable(const ir::Node& node, const std::vector<const Tensor*>& constants);

}  // namespace kiln
