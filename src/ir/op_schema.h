// Op schemas: what kiln knows about an operator besides its kernels — static shape and type
// inference, a cost estimate, and properties passes ask about (elementwise, broadcasting).
// A schema is registered once, in the file that defines it, with KILN_REGISTER_OP_SCHEMA.
#pragma once

#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/status.h"

namespace kiln::ir {

using Dims = std::vector<Dim>;

// Work of one node (or a model): floating-point operations (a multiply-add counts 2) and bytes
// read plus written. `unknown_nodes` counts nodes left out because a shape was not known.
struct Cost {
  double flops = 0;
  double bytes = 0;
  int64_t unknown_nodes = 0;
  Cost& operator+=(const Cost& o) {
    flops += o.flops;
    bytes += o.bytes;
    unknown_nodes += o.unknown_nodes;
    return *this;
  }
};

// Types of a subgraph's outputs and the cost of one run of it.
struct SubgraphResult {
  std::vector<TypeInfo> outputs;
  Cost cost;
};

// What an InferFn sees of one node: its input types and, where known, input values. Built by
// infer_shapes for each node in turn; not shared across threads.
struct InferContext {
  const Node& node;
  int64_t opset = 0;  // version of the node's domain in the model
  std::vector<TypeInfo> inputs;  // one per node input; kUnknown when absent or not inferred
  std::vector<const Tensor*> constants;  // an input's value when it is constant, else nullptr
  // Small integer tensors (shapes, sizes, axes) as dims, symbolic where they come from a Shape.
  std::vector<std::optional<Dims>> values;
  // Filled by InferFns: the values of small integer outputs and constant outputs.
  std::vector<std::optional<Dims>> output_values;
  std::vector<Tensor> output_constants;
  // Inference of a subgraph (If/Loop/Scan bodies) in the scope of this node.
  std::function<Result<SubgraphResult>(const Graph&, const std::vector<TypeInfo>&)> subgraph;
  Cost subgraph_cost;  // set by control-flow InferFns: the cost of the bodies per run of the node

  InferContext(const Node& n, int64_t op) : node(n), opset(op) {}

  size_t num_inputs() const { return inputs.size(); }
  bool has_input(size_t i) const { return node.has_input(i); }
  const TypeInfo& input(size_t i) const;  // a kUnknown type when i is out of range
  const Tensor* constant(size_t i) const { return i < constants.size() ? constants[i] : nullptr; }
  // The value of input i as dims (rank 0 or 1 integer tensors only).
  std::optional<Dims> dims_value(size_t i) const;
  // The value of input i as integers, when every element is known.
  std::optional<std::vector<int64_t>> int_values(size_t i) const;
  // A constant scalar (any numeric type) as a double.
  std::optional<double> scalar_value(size_t i) const;
  void set_output_value(size_t i, Dims v);
  Status error(const std::string& message) const;
};

using InferFn = Result<std::vector<TypeInfo>> (*)(InferContext& ctx);
using CostFn = Cost (*)(const InferContext& ctx, const std::vector<TypeInfo>& outputs);

enum class Broadcast : uint8_t { kNone, kMultidirectional, kUnidirectional };

struct OpSchema {
  std::string domain = {};   // "" for the default ONNX domain; both set by the registrar
  std::string op_type = {};
  InferFn infer = nullptr;
  // nullptr: flops_per_element per output element when elementwise, else no flops; bytes are the
  // inputs plus the outputs.
  CostFn cost = nullptr;
  bool elementwise = false;  // output element i depends only on input elements i (after broadcast)
  Broadcast broadcast = Broadcast::kNone;
  double flops_per_element = 1;
};

// All schemas, collected at start-up from the registrars in their files; read-only afterwards,
// so lookups are safe from any thread.
class OpSchemaRegistry {
 public:
  static OpSchemaRegistry& global();
  void add(OpSchema schema);
  const OpSchema* find(const std::string& domain, const std::string& op_type) const;
  std::vector<const OpSchema*> all() const;

 private:
  std::map<std::pair<std::string, std::string>, std::unique_ptr<OpSchema>> schemas_;
};

struct OpSchemaRegistrar {
  OpSchemaRegistrar(const char* domain, std::initializer_list<const char*> op_types, OpSchema schema);
};

// ---- helpers for InferFns and CostFns ----

TypeInfo tensor_type(DType dtype, Dims shape);
TypeInfo tensor_type_unranked(DType dtype);
TypeInfo sequence_type(TypeInfo elem);
TypeInfo optional_type(TypeInfo elem);
Dim known_dim(int64_t v);
Dim unknown_dim();
// Same value, or the same symbol: provably equal.
bool same_dim(const Dim& a, const Dim& b);
Dim dim_mul(const Dim& a, const Dim& b);
Dim dim_add(const Dim& a, const Dim& b);
// Dims of two equal-by-construction extents: the known or named one; unknown when they disagree.
Dim dim_merge(const Dim& a, const Dim& b);
// The type both could be (If branches, Loop iterations): what agrees, unknown elsewhere.
TypeInfo type_union(const TypeInfo& a, const TypeInfo& b);
// Broadcasts the shapes of tensor types by numpy's rule; an error when two known dims clash.
// nullopt when some rank is unknown.
Result<std::optional<Dims>> broadcast_shapes(const std::vector<const TypeInfo*>& types);
// Axis in [-rank, rank) to [0, rank).
Result<int64_t> normalize_axis(int64_t axis, int64_t rank, const Node& node);
std::optional<int64_t> type_numel(const TypeInfo& t);
double type_bytes(const TypeInfo& t);  // 0 when the shape is not static
double io_bytes(const InferContext& ctx, const std::vector<TypeInfo>& outputs);
int64_t rank_of(const TypeInfo& t);  // -1 when unknown
std::string dims_str(const Dims& d);  // "[batch,seq,768]"

// Cost of a node with its default rule (OpSchema::cost == nullptr).
Cost default_cost(const OpSchema& schema, const InferContext& ctx, const std::vector<TypeInfo>& outputs);

}  // namespace kiln::ir

// Registers a schema for one or more op types of a domain, at namespace scope in its own file:
//   KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_relu, .elementwise = true}), "Relu");
#define KILN_REGISTER_OP_SCHEMA(domain, schema, ...)                                            \
  static const ::kiln::ir::OpSchemaRegistrar KILN_CONCAT(kiln_op_schema_registrar_, __COUNTER__)( \
      domain, {__VA_ARGS__}, schema)
