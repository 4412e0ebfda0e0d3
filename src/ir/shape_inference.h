// Static shape and type inference over a whole model, and the cost estimate built on it.
#pragma once

#include <map>
#include <string>

#include "ir/graph.h"
#include "ir/op_schema.h"
#include "kiln/status.h"

namespace kiln::ir {

// Walks the graph in order (subgraphs included) and records the inferred type of every value:
// intermediates in graph.value_info, graph outputs in graph.outputs (merged with what the model
// declared). Unknown stays unknown; a clash between two known facts (declared vs inferred, or two
// inputs that cannot broadcast) is an error naming the node.
Status infer_shapes(Model& model);
// The same, also returning the small integer values found in the top-level graph (shapes, sizes,
// axes as dims, symbolic where they come from a Shape), by value name; passes use it to resolve
// shape computations.
Status infer_shapes(Model& model, std::map<std::string, Dims>* values);

// FLOPs and bytes of one run of the model, with the named dynamic dims bound (e.g. batch=1,
// seq=128). Nodes whose shapes stay unknown are counted in Cost::unknown_nodes. Loop bodies count
// once per known trip, If counts its costlier branch.
Result<Cost> estimate_cost(const Model& model, const std::map<std::string, int64_t>& dim_bindings);

}  // namespace kiln::ir
