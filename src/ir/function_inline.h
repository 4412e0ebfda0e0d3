// Model-local functions (ONNX FunctionProto) are run by inlining: each call node is replaced by
// the function's body, with its values renamed apart and attribute references resolved.
#pragma once

#include "ir/graph.h"
#include "kiln/status.h"

namespace kiln::ir {

// Replaces every call of a model-local function, in the main graph and in subgraphs, by its body.
// Calls nested inside function bodies are inlined too, up to kMaxGraphNesting levels.
Status inline_functions(Model& model);

}  // namespace kiln::ir
