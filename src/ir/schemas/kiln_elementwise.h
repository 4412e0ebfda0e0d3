// The step list of ai.kiln.FusedElementwise (docs/ops.md): which ops a step may be, how many
// float params each takes, and the decoding of a node's attributes into steps. Shared by the op's
// schema, its kernel and the elementwise-fusion pass so the three agree on one encoding.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/status.h"

namespace kiln::ir {

// clang-format off
enum class EltwiseOp : uint8_t {
  // binary: the running value and one operand
  kAdd, kSub, kMul, kDiv, kPow, kMax, kMin,
  // unary
  kRelu, kSigmoid, kTanh, kExp, kLog, kSqrt, kNeg, kAbs, kReciprocal, kErf, kSoftplus,
  kClip, kLeakyRelu, kHardSigmoid, kHardSwish, kElu,
};
// clang-format on

struct EltwiseOpInfo {
  const char* name;  // the ONNX op it replays
  EltwiseOp op;
  bool binary;
  int params;  // floats taken from `params`, in step order
};

// Every step op, binary ones first.
std::span<const EltwiseOpInfo> eltwise_ops();
// The step op named `name` (an ONNX op name), or nullptr.
const EltwiseOpInfo* eltwise_op_info(const std::string& name);

struct EltwiseStep {
  EltwiseOp op;
  bool binary = false;
  int64_t operand = -1;  // binary: the node input holding the other operand; -1: the running value
  bool swapped = false;  // binary: the running value is the right operand (b op v, not v op b)
  float p0 = 0, p1 = 0;  // the step's params (Clip min/max, alpha, beta)
};

// Decodes and checks the `ops`, `operands`, `swapped` and `params` attributes of a
// FusedElementwise node with `num_inputs` inputs; the error says which attribute is wrong.
Result<std::vector<EltwiseStep>> decode_fused_elementwise(const Node& n, size_t num_inputs);

}  // namespace kiln::ir
