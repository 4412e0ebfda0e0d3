// A compiled graph: nodes in execution order with a kernel each, values in numbered slots, and
// the step after which each value is dead and freed. Subgraphs (If/Loop/Scan bodies) are compiled
// once, with the node that owns them, and run in a frame that can see the enclosing graphs' values.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/backend.h"
#include "ir/graph.h"
#include "kernels/kernel.h"
#include "kiln/session.h"

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
  const std::vector<const Value*>* values;  // per slot: its value in this run, or null
  const Frame* parent;
  const Value* find(const std::string& name) const;
};

class GraphPlan {
 public:
  // `outer` names the values visible from enclosing graphs (empty for the main graph). `owned` is
  // `graph` itself when the caller owns the model and lets the plan drop the data of initializers
  // that kernels absorbed from it too (else null: only the plan's references go). Each node runs
  // the kernel `assignment` chooses for it where that kernel takes the node, else kiln's own
  // (backends/backend.h).
  static Result<std::unique_ptr<GraphPlan>> compile(const ir::Graph& graph, const ir::Model& model,
                                                    const std::set<std::string>& outer,
                                                    ir::Graph* owned = nullptr,
                                                    const backends::Assignment& assignment = {});
  ~GraphPlan();

  // (node key: its first output, backend) of this graph's nodes in plan order: whose kernel runs
  // each.
  std::vector<std::pair<std::string, std::string>> node_backends() const;

  // This graph's nodes whose kernel runs the plain reference loop (kernels/fast_path.h), judged
  // on `typed`: the same graph with its value types inferred.
  std::vector<ReferenceNode> reference_nodes(const ir::Graph& typed, const ir::Model& model) const;

  // Runs with inputs[i] the value of graph input i (null, or fewer inputs: not fed; an input that
  // has an initializer then takes it). The caller keeps the inputs alive through the run. outputs
  // gets one value per graph output. With `records`, appends one per step. Reuses its own
  // bookkeeping run after run, so that it allocates nothing itself (kernels allocate through
  // Tensor::make).
  Status run(const std::vector<const Value*>& inputs, std::vector<Value>& outputs, const Frame* outer,
             ThreadPool* pool, std::vector<StepRecord>* records = nullptr) const;
  // The same, with the inputs and outputs in vectors of their own (subgraph runs).
  Result<std::vector<Value>> run(std::vector<Value> inputs, const Frame* outer, ThreadPool* pool,
                                 std::vector<StepRecord>* records = nullptr) const;

  // An initializer whose data the plan dropped: every kernel reading it absorbed it when prepared
  // (or nothing reads it), so only its type and shape are left; dropped as soon as the last reader
  // was prepared. `graph` is this plan's graph or a subgraph's.
  struct Released {
    const ir::Graph* graph;
    std::string name;
    int64_t bytes;
  };
  // This plan's and its subplans'.
  std::vector<Released> released() const;

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
    std::string backend;       // whose kernel it is (KernelDef::choice: "kiln.direct" for a variant)
    std::vector<int> inputs;   // slot per input, -1 when omitted
    std::vector<int> outputs;  // slot per output, -1 when unnamed
    std::vector<int> free_after;
    // Per input: whether the kernel may write over its storage (KernelContext::donate_inputs): a
    // value this graph computes, read by no later step, not an output, and no other input of this
    // node. Checked again at run time: a computed value (not a constant or a graph input).
    std::vector<bool> donated;
    std::map<const ir::Graph*, std::unique_ptr<GraphPlan>> subplans;
  };
  // What a run needs besides the plan, kept from run to run.
  struct Scratch {
    std::vector<Value> slots;         // the values steps computed
    std::vector<const Value*> where;  // per slot: its value in this run (computed, input, constant), or null
    std::vector<const Value*> args;   // the running step's inputs
    std::vector<Value> outs;          // the running step's outputs
    std::vector<bool> donated;        // the running step's inputs it may write over
  };
  class StepRunner;

  int slot(const std::string& name);
  // Leaves initializer `name` its type and shape only, in the plan and in `owned` (see compile).
  void drop_data(const std::string& name, ir::Graph* owned);
  Status execute(Scratch& s, const std::vector<const Value*>& inputs, std::vector<Value>& outputs,
                 const Frame* outer, ThreadPool* pool, std::vector<StepRecord>* records) const;

  const ir::Graph* graph_ = nullptr;
  std::unordered_map<std::string, int> slot_of_;
  std::vector<std::string> slot_names_;
  std::vector<int> input_slots_;
  std::vector<bool> is_input_slot_;
  std::vector<int> output_slots_;
  std::vector<bool> output_moves_;  // per output: the last to read its slot, so it may take the value
  std::vector<std::pair<int, Value>> constants_;  // initializers
  std::vector<Released> released_;
  static constexpr int64_t kTrimBytes = int64_t{32} << 20;
  int64_t dropped_since_trim_ = 0;
  std::vector<std::pair<int, std::string>> outer_refs_;  // slots filled from enclosing frames
  std::vector<Step> steps_;
  std::vector<int> computed_slots_;  // the steps' outputs' slots: the only ones a run fills
  mutable Scratch scratch_;
  mutable std::atomic<bool> busy_{false};  // a run already uses scratch_ (a re-entered plan does not)
};

}  // namespace kiln::runtime
