// The work of one step of a profiled run, by its op schema's cost rule on the shapes it ran with.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/graph_plan.h"

namespace kiln::runtime {

// FLOPs (a multiply-add counts 2); 0 for an op without arithmetic, -1 when the op has no schema or
// an input or output is not a tensor.
int64_t step_flops(const StepRecord& record);

// "[1,3,224,224] [64,3,7,7]": one shape per input, "-" for an omitted one, "?" for a non-tensor.
std::string shapes_str(const std::vector<ir::TypeInfo>& types);

}  // namespace kiln::runtime
