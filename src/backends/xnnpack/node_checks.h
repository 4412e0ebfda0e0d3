// What the XNNPACK kernels' accepts() functions ask of a node: known float32 operands, static
// weight shapes, and an epilogue that XNNPACK's output clamp can express.
#pragma once

#include <limits>
#include <optional>
#include <vector>

#include "ir/graph.h"

namespace kiln::backends::xnnpack {

// XNNPACK applies an activation only as a clamp of the output to [min, max].
struct Clamp {
  float min = -std::numeric_limits<float>::infinity();
  float max = std::numeric_limits<float>::infinity();
};

// The clamp equal to the node's ai.kiln epilogue (attributes `activation`, `activation_params`):
// none, Relu = [0, inf), Clip(min, max), each narrowed by the activation's clamp; nullopt for any
// other activation, malformed attributes, or a clamp XNNPACK rejects (min not below max).
std::optional<Clamp> epilogue_clamp(const ir::Node& node);

// True when input i of `node` is given and known to be a float32 tensor.
bool is_float32_input(const ir::Node& node, const std::vector<const ir::TypeInfo*>& types,
                      size_t i);

// True when input i of `node` is absent (not named).
bool is_absent(const ir::Node& node, size_t i);

// Input i's shape when every dim of it is known, else nullopt.
std::optional<Shape> static_shape(const std::vector<const ir::TypeInfo*>& types, size_t i);

// Input i's rank when known, else -1.
int64_t known_rank(const std::vector<const ir::TypeInfo*>& types, size_t i);

}  // namespace kiln::backends::xnnpack
