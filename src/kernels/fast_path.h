// Which nodes kiln's own kernels run on a fast path (vectorized, threaded, blocked, or through the
// packed GEMM) rather than a plain reference loop, so that `kiln profile` and `kiln info
// --kernels` can show a user at once why a model is slow. A kernel whose op has a fast path for
// some nodes says which, in its own file, with KILN_REGISTER_FAST_PATH; a standard op with no
// such registration runs its reference loop everywhere. ai.kiln ops and third-party backends'
// kernels are fast paths unless their op registers otherwise (FusedConv runs Conv's kernel).
#pragma once

#include <functional>
#include <vector>

#include "ir/graph.h"
#include "kernels/kernel.h"

namespace kiln {

// What compile time knows of a node: its domain's opset in the model, its inputs' types (null
// when unknown) and its constant inputs (null where an input is not a fixed initializer).
struct FastPathQuery {
  const ir::Node& node;
  int64_t opset;
  const std::vector<const ir::TypeInfo*>& types;
  const std::vector<const Tensor*>& constants;

  // Input i's element type is known to be `t`.
  bool input_is(size_t i, DType t) const { return i < types.size() && types[i] != nullptr && types[i]->dtype == t; }
  // Input i's rank, or -1 when unknown.
  int64_t rank(size_t i) const {
    return i < types.size() && types[i] != nullptr && types[i]->has_shape ? static_cast<int64_t>(types[i]->shape.size()) : -1;
  }
  // Input i's element count when its whole shape is known, else -1.
  int64_t numel(size_t i) const {
    if (i >= types.size() || types[i] == nullptr || !types[i]->has_shape) return -1;
    int64_t n = 1;
    for (const ir::Dim& d : types[i]->shape) {
      if (!d.known()) return -1;
      n *= d.value;
    }
    return n;
  }
  // Input i's last dim (1 for a scalar) when known, else -1.
  int64_t last_dim(size_t i) const {
    if (i >= types.size() || types[i] == nullptr || !types[i]->has_shape) return -1;
    if (types[i]->shape.empty()) return 1;
    const ir::Dim& d = types[i]->shape.back();
    return d.known() ? d.value : -1;
  }
  // Whether output i is named (wanted).
  bool wants_output(size_t i) const { return i < node.outputs.size() && !node.outputs[i].empty(); }
};

// Whether the node runs fast.
using FastPath = std::function<bool(const FastPathQuery& q)>;

struct FastPathRegistrar {
  FastPathRegistrar(const char* domain, const char* op_type, FastPath fast);
};

// Whether the kernel of `backend` (KernelDef::backend) chosen for the queried node runs it on a
// fast path.
bool runs_fast_path(const std::string& backend, const FastPathQuery& q);

// For ops every node of which is fast: data movement by memcpy-like loops, shape ops that move
// no data.
inline bool always_fast(const FastPathQuery&) { return true; }
// For ops whose float32 nodes all run fast.
inline bool float32_input(const FastPathQuery& q) { return q.input_is(0, DType::kFloat32); }

}  // namespace kiln

// Usage, beside the kernel: KILN_REGISTER_FAST_PATH("", "Softmax", [](const FastPathQuery& q) {...});
#define KILN_REGISTER_FAST_PATH(domain, op_type, fn) \
  static const ::kiln::FastPathRegistrar KILN_CONCAT(kiln_fast_path_registrar_, __LINE__)(domain, op_type, fn)
