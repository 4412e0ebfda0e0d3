// Checks shared by the XNNPACK kernels' accepts(): a node is only taken when it is certain to run,
// since a kernel that fails at run time has no way back to kiln's own.
#include "backends/xnnpack/node_checks.h"

#include <algorithm>
#include <cmath>

#include "backends/backend.h"
#include "kernels/kiln/epilogue_activation.h"

namespace kiln::backends::xnnpack {

std::optional<Clamp> epilogue_clamp(const ir::Node& node) {
  auto act = kiln_ops::read_activation(node, "activation", "activation_params");
  if (!act) return std::nullopt;
  using K = kiln_ops::Activation::Kind;
  Clamp c;
  switch (act->kind) {
    case K::kNone:
      break;
    case K::kRelu:
      c.min = 0.0f;
      break;
    case K::kClip:
      c.min = static_cast<float>(act->p0), c.max = static_cast<float>(act->p1);
      break;
    default:
      return std::nullopt;
  }
  // A clamp after a clamp is one clamp on the intersection, where the two overlap.
  c.min = std::max(c.min, static_cast<float>(act->lo));
  c.max = std::min(c.max, static_cast<float>(act->hi));
  // NaN fails this too; XNNPACK's create calls reject min >= max.
  if (!(c.min < c.max)) return std::nullopt;
  return c;
}

bool is_float32_input(const ir::Node& node, const std::vector<const ir::TypeInfo*>& types,
                      size_t i) {
  return i < node.inputs.size() && !node.inputs[i].empty() && i < types.size() &&
         is_float32(types[i]);
}

bool is_absent(const ir::Node& node, size_t i) {
  return i >= node.inputs.size() || node.inputs[i].empty();
}

std::optional<Shape> static_shape(const std::vector<const ir::TypeInfo*>& types, size_t i) {
  if (i >= types.size() || types[i] == nullptr || !types[i]->has_shape) return std::nullopt;
  return types[i]->static_shape();
}

int64_t known_rank(const std::vector<const ir::TypeInfo*>& types, size_t i) {
  if (i >= types.size() || types[i] == nullptr || !types[i]->has_shape) return -1;
  return static_cast<int64_t>(types[i]->shape.size());
}

}  // namespace kiln::backends::xnnpack
