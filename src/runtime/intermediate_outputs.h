// A model that also returns what its nodes compute in between: for the accuracy comparer's
// per-layer report and for the tuner, which replays each node on the values it really sees.
#pragma once

#include "ir/graph.h"

namespace kiln::runtime {

// A copy of `m` whose main graph also outputs every value its nodes write (after the original
// outputs), except values that shape inference says are not tensors.
ir::Model with_intermediate_outputs(const ir::Model& m);

}  // namespace kiln::runtime
