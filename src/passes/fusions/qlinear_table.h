// 8-bit data through an elementwise op of that data alone: the op is then a function of the
// input's code, so its 256 answers are a table (ai.kiln.QLinearLookup). Shared by the
// qlinear-table fusion and the quantizer, which lets such ops carry 8-bit data between convs.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "ir/graph.h"
#include "passes/graph_index.h"
#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln::passes {

// Whether `n` is an elementwise op (LeakyRelu, Tanh, HardSwish, Max with a bound, ...) with one
// input that is not a constant and one-value constants for the others, so that its output is a
// function of that input's element alone; `constant` gives a value's constant tensor or null.
// Casts, the quantization ops themselves and the clamps the 8-bit ops absorb (Relu, Clip) are not.
bool is_code_function(const ir::Node& n, const std::function<const Tensor*(const std::string&)>& constant);

// The 256 answers of Q(op(DQ(code))) over the codes of `x_type` (op null: Q(DQ(code)), a
// requantization), each step by kiln's own kernel on the nodes' constant inputs; nullopt where a
// kernel refuses. Bit for bit what the unfused nodes compute.
std::optional<Tensor> code_table(const ir::Model& model, const GraphIndex& idx, DType x_type, const ir::Node& dq,
                                 const ir::Node* op, const ir::Node& q);

// Runs kiln's own kernel of `n` on `inputs` (null: absent); its first output.
Result<Tensor> run_kernel(const ir::Model& model, const ir::Node& n, const std::vector<const Tensor*>& inputs);

}  // namespace kiln::passes
