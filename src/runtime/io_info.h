// A graph's inputs and outputs as users see them (kiln::IoInfo), for Model and Session alike.
#pragma once

#include <vector>

#include "ir/graph.h"
#include "kiln/io_info.h"

namespace kiln::runtime {

IoInfo io_info(const ir::ValueInfo& v);
// The graph inputs that are not initializers, in graph order.
std::vector<IoInfo> user_inputs(const ir::Graph& g);
std::vector<IoInfo> graph_outputs(const ir::Graph& g);

}  // namespace kiln::runtime
