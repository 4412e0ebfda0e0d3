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

// ai.kiln.ConcatElementwise: a FusedElementwise whose X0 is the Concat of its first `parts`
// inputs along `axis` (attributes `x0_parts`, `x0_axis`); the chain's inputs 1, 2, ... are the
// node's inputs parts, parts + 1, ... (`operands` count X0 as input 0).
struct ConcatParts {
  int64_t parts = 1, axis = 0;
  // The chain's input count for a node of `num_inputs` inputs.
  size_t chain_inputs(size_t num_inputs) const { return num_inputs - static_cast<size_t>(parts) + 1; }
};
// Reads and checks x0_parts (1 to num_inputs) and x0_axis (0 to rank - 1).
Result<ConcatParts> decode_concat_parts(const Node& n, size_t num_inputs, int64_t rank);

}  // namespace kiln::ir
