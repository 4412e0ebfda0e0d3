// Reverse-mode differentiation as a graph rewrite: each ai.onnx.preview.training Gradient node
// becomes standard ONNX nodes that compute dy/dx from the forward nodes the graph already has,
// so no kernel ever needs to see the whole graph.
#pragma once

#include <cstdint>

#include "ir/graph.h"
#include "kiln/status.h"

namespace kiln::ir {

// True when the graph (top level) holds a Gradient node of ai.onnx.preview.training.
bool has_gradient_nodes(const Graph& graph);

// Replaces every Gradient node of the top-level graph by explicit nodes. Supports Add, Sub, Mul,
// Div, Neg, Identity and MatMul (operands of rank >= 2) on the path from xs to y, with
// broadcasting. `onnx_opset` is the model's default-domain opset: the generated ReduceSum takes
// its axes as an attribute below 13 and as an input from 13 on; operand shapes that are not
// known statically can be reduced only from 13 on. On error the graph is left unchanged.
Status expand_gradients(Graph& graph, int64_t onnx_opset = 13);

}  // namespace kiln::ir
