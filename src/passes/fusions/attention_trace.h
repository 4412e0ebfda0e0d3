// What attention fusion traces: the logical axes a Q, K or V operand carries through Transpose and
// Reshape, and the walk from an attention operand back to its projection MatMul (+ bias).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "ir/op_schema.h"
#include "passes/graph_index.h"

namespace kiln::passes::attention {

// Matching follows the axes, not the exporter's node order: the projection output [A0, A1, E]
// is split into E = H x D, and every Transpose and Reshape between it and the attention MatMuls
// is replayed on groups of these logical axes. BERT ends with Q as [A0][H][A1][D]; torchvision's
// MultiheadAttention (sequence first) with Q as [A1 H][A0][D]. Both are the same attention.
enum Atom : int { kA0 = 0, kA1 = 1, kH = 2, kD = 3 };
using Group = std::vector<int>;
using Layout = std::vector<Group>;

using Types = std::map<std::string, const ir::TypeInfo*>;
using Values = std::map<std::string, ir::Dims>;

// The shaped tensor type of `v`, or nullptr.
const ir::TypeInfo* type_of(const Types& types, const std::string& v);

// Mul/Div of `n` by a scalar constant: the other operand and the factor, or nullopt.
std::optional<std::pair<std::string, double>> scaling(const GraphIndex& idx, const ir::Node* n);

// One of Q, K, V: the nodes between the attention and the [A0, A1, E] value they start from, and
// the projection that value comes from where there is one the fusion can take in.
struct Branch {
  std::string operand;                 // where `path` starts: [A0, A1, E], the heads unsplit
  std::string x;                       // with a projection: hidden states, [A0, A1, E_in]
  const Tensor* w = nullptr;           // null: no projection; else [E_in, cols], float32 or int8
  const Tensor* w_scale = nullptr;     // a DynamicQuantMatMul projection's: one or cols values
  int64_t row_bits = 8;                // and its rows' (its row_bits)
  const Tensor* bias = nullptr;        // cols values, or nullptr
  int64_t begin = 0, end = 0;          // the columns of w this branch uses
  std::vector<const ir::Node*> path;   // from the projection output to the operand, in order
  std::vector<const ir::Node*> roots;  // MatMul (or DynamicQuantMatMul), bias Add, Slice/Split
  double scale = 1;
};

// Walks back from an attention operand through Transpose, Reshape and scalar scalings (when
// allowed) to its `operand`, then on to a projection MatMul(x, W) [+ bias], or kiln's
// DynamicQuantMatMul(x, W, W_scale [, bias]) [+ bias] (int8 W), optionally sliced or split on its
// last axis. Without such a projection (ONNX Runtime's int8 MatMulIntegerToFloat, say), w is null.
Branch trace_branch(const GraphIndex& idx, const Types& types, const Values& values, std::string v,
                    bool allow_scale);

// Replays one Transpose or Reshape (or a scaling, which keeps the layout) on a layout; `size`
// holds the sizes of the four atoms.
bool apply(const ir::Node& n, const Types& types, const ir::Dim* size, Layout& layout);

}  // namespace kiln::passes::attention
