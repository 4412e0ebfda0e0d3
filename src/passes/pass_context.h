// What every pass of one optimize() call shares: the options, and the analyses passes ask for —
// value types from shape inference and each graph's producer/consumer index — computed once and
// kept until a rewrite changes the model (DESIGN.md habit 13). The pass manager invalidates them
// after every pass that rewrote something; a pass that rewrites and then asks again within its
// own run calls invalidate() itself (the rule rewriter of passes/pattern.h does). Graph indexes
// point into a graph's node list, which passes rebuild even when they find nothing to rewrite:
// the manager drops them after every pass, and an index whose graph's node list moved is rebuilt.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "ir/graph.h"
#include "ir/op_schema.h"
#include "kiln/optimize.h"
#include "passes/graph_index.h"

namespace kiln::passes {

// The inferred types of a model's values: initializers, inputs, intermediates and outputs of the
// top-level graph and of every subgraph (ONNX value names are unique across a model), and the
// small integer values (shapes, sizes) of the top-level graph. Inferred on a copy of the model,
// so the model keeps the value_info it declared; when that declared information contradicts
// inference, inference runs again without it.
struct ValueTypes {
  std::map<std::string, ir::TypeInfo> types;
  std::map<std::string, ir::Dims> values;
  bool inferred = false;  // false: inference failed even without declared value_info

  // The value's type, or nullptr when unknown.
  const ir::TypeInfo* find(const std::string& value) const;
  // A tensor value's type, or nullptr when unknown or not a tensor.
  const ir::TypeInfo* tensor(const std::string& value) const;
  // The rank of a tensor value whose rank is known.
  std::optional<int64_t> rank(const std::string& value) const;
};

class PassContext {
 public:
  PassContext(ir::Model& model, const OptimizeOptions& options) : model_(model), options_(options) {}
  PassContext(const PassContext&) = delete;
  PassContext& operator=(const PassContext&) = delete;

  const OptimizeOptions& options() const { return options_; }

  // Inferred on first use after a change.
  const ValueTypes& types();
  // The index of `g`, the model's graph or one of its subgraphs, built on first use after a change.
  const GraphIndex& index(const ir::Graph& g);
  // The model changed: every analysis is recomputed when next asked for.
  void invalidate();
  // Only the graph indexes are dropped (the types stay): after a pass that rewrote nothing.
  void invalidate_indexes() { indexes_.clear(); }
  // How many times types() ran shape inference (for tests and the optimize report).
  int64_t inferences() const { return inferences_; }

 private:
  ir::Model& model_;
  const OptimizeOptions& options_;
  std::optional<ValueTypes> types_;
  struct CachedIndex {
    const ir::Node* nodes = nullptr;  // the graph's node list when the index was built
    size_t count = 0;
    std::unique_ptr<GraphIndex> index;
  };
  std::map<const ir::Graph*, CachedIndex> indexes_;
  int64_t inferences_ = 0;
};

}  // namespace kiln::passes
