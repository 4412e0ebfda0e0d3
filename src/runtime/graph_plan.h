// A compiled graph: nodes in execution order with a kernel each, values in numbered slots, and
// the step after which each value is dead and freed. Subgraphs (If/Loop/Scan bodies) are compiled
// once, with the node that owns them, and run in a frame that can see the enclosing graphs' values.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "kernels/kernel.h"

namespace kiln {
class ThreadPool;
}

namespace kiln::runtime {

class GraphPlan;

// What a profiled run records of one step of the main graph (a subgraph's steps count in the time
// of the node that runs them): when its kernel ran, and the types it saw, for its cost.
struct StepRecord {
  const ir::Node* node = nullptr;
  int64_t opset = 0;
  std::chrono::steady_clock::time_point start, end;
  std::vector<ir::TypeInfo> inputs, outputs;  // kUnknown for an omitted one
};

// The values of one running graph, and the frame of the graph around it.
struct Frame {
  const GraphPlan* plan;
  const std::vector<Value>* slots;
  const Frame* parent;
  const Value* find(const std::string& name) const;
};

class GraphPlan {
 public:
  // `outer` names the values visible from enclosing graphs (empty for the main graph).
  static Result<std::unique_ptr<GraphPlan>> compile(const ir::Graph& graph, const ir::Model& model,
                                                    const std::set<std::string>& outer);

  // Runs with `inputs` in the order of the graph's inputs (for the main graph, a missing trailing
  // input that has an initializer takes the initializer). With `records`, appends one per step.
  Result<std::vector<Value>> run(std::vector<Value> inputs, const Frame* outer, ThreadPool* pool,
                                 std::vector<StepRecord>* records = nullptr) const;

  const ir::Graph& graph() const { return *graph_; }
  // Slot of a named value, or -1.
  int slot_index(const std::string& name) const {
    auto it = slot_of_.find(name);
    return it == slot_of_.end() ? -1 : it->second;
  }

 private:
  struct Step {
    const ir::Node* node = nullptr;
    int64_t opset = 0;
    std::unique_ptr<Kernel> kernel;
    std::vector<int> inputs;   // slot per input, -1 when omitted
    std::vector<int> outputs;  // slot per output, -1 when unnamed
    std::vector<int> free_after;
    std::map<const ir::Graph*, std::unique_ptr<GraphPlan>> subplans;
  };
  class StepRunner;

  int slot(const std::string& name);

  const ir::Graph* graph_ = nullptr;
  std::unordered_map<std::string, int> slot_of_;
  std::vector<std::string> slot_names_;
  std::vector<int> input_slots_;
  std::vector<int> output_slots_;
  std::vector<std::pair<int, Value>> constants_;  // initializers
  std::vector<std::pair<int, std::string>> outer_refs_;  // slots filled from enclosing frames
  std::vector<Step> steps_;
};

}  // namespace kiln::runtime
