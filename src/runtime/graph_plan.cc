// Compiling a graph into steps (topological order, kernel choice, liveness) and running it.
#include "runtime/graph_plan.h"

#include <algorithm>
#include <queue>

#include "core/thread_pool.h"

namespace kiln::runtime {

const Value* Frame::find(const std::string& name) const {
  for (const Frame* f = this; f; f = f->parent) {
    const int s = f->plan->slot_index(name);
    if (s >= 0) {
      const Value& v = (*f->slots)[s];
      // A slot that is still empty belongs to a value not computed (or already freed) there.
      if (v.kind != Value::Kind::kTensor || v.tensor.defined()) return &v;
    }
  }
  return nullptr;
}

namespace {

// Inputs of a node plus what its subgraphs read from outside: all must exist before it runs.
std::vector<std::string> node_dependencies(const ir::Node& n) {
  std::vector<std::string> deps;
  for (const auto& i : n.inputs)
    if (!i.empty()) deps.push_back(i);
  for (const auto& a : n.attrs) {
    if (a.g)
      for (const auto& name : ir::free_names(*a.g)) deps.push_back(name);
    for (const auto& sg : a.graphs)
      for (const auto& name : ir::free_names(*sg)) deps.push_back(name);
  }
  return deps;
}

// The initializer called `name` when no caller can replace it (it is not also a graph input).
const Tensor* fixed_constant(const ir::Graph& g, const std::string& name) {
  auto it = g.initializers.find(name);
  if (name.empty() || it == g.initializers.end()) return nullptr;
  for (const auto& v : g.inputs)
    if (v.name == name) return nullptr;
  return &it->second;
}

}  // namespace

int GraphPlan::slot(const std::string& name) {
  auto [it, inserted] = slot_of_.emplace(name, static_cast<int>(slot_names_.size()));
  if (inserted) slot_names_.push_back(name);
  return it->second;
}

Result<std::unique_ptr<GraphPlan>> GraphPlan::compile(const ir::Graph& g, const ir::Model& model,
                                                      const std::set<std::string>& outer) {
  auto plan = std::make_unique<GraphPlan>();
  plan->graph_ = &g;
  std::set<std::string> available;  // values defined before any node runs
  for (const auto& v : g.inputs) {
    plan->input_slots_.push_back(plan->slot(v.name));
    available.insert(v.name);
  }
  for (const auto& [name, t] : g.initializers) {
    plan->constants_.emplace_back(plan->slot(name), Value::of(t));
    available.insert(name);
  }
  // Producer of each value, for the topological sort; a value written twice is an error.
  std::unordered_map<std::string, size_t> producer;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs) {
      if (o.empty()) continue;
      if (available.count(o) || !producer.emplace(o, i).second)
        return Status::error("value '" + o + "' is produced more than once (second time by " +
                             g.nodes[i].describe() + ")");
    }
  // Kahn's algorithm, keeping the model's order among ready nodes.
  std::vector<std::vector<size_t>> users(g.nodes.size());
  std::vector<int> pending(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const auto& dep : node_dependencies(g.nodes[i])) {
      auto it = producer.find(dep);
      if (it != producer.end()) {
        users[it->second].push_back(i);
        ++pending[i];
      } else if (!available.count(dep) && !outer.count(dep)) {
        return Status::error(g.nodes[i].describe() + " reads '" + dep +
                             "', which no node, input or initializer of the graph defines");
      }
    }
  }
  std::priority_queue<size_t, std::vector<size_t>, std::greater<>> ready;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (pending[i] == 0) ready.push(i);
  std::vector<size_t> order;
  while (!ready.empty()) {
    size_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (size_t u : users[i])
      if (--pending[u] == 0) ready.push(u);
  }
  if (order.size() != g.nodes.size()) {
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (pending[i] > 0) return Status::error("the graph has a cycle through " + g.nodes[i].describe());
  }

  std::set<std::string> inner_outer = outer;  // what subgraphs of this graph may read
  for (const auto& name : available) inner_outer.insert(name);
  for (const auto& [name, i] : producer) inner_outer.insert(name);

  for (size_t i : order) {
    const ir::Node& n = g.nodes[i];
    Step step;
    step.node = &n;
    step.opset = model.opset(n.domain);
    if (step.opset == 0 && n.domain.empty()) step.opset = 1;
    auto defs = KernelRegistry::global().find(n.domain, n.op_type);
    if (defs.empty())
      return Status::error(n.describe() + ": operator " + (n.domain.empty() ? "" : n.domain + ".") +
                           n.op_type + " is not supported");
    auto kernel = defs.front()->create(n, step.opset);
    if (!kernel) return kernel.status().with_context(n.describe());
    step.kernel = std::move(kernel).value();
    std::vector<const Tensor*> constants;
    for (const auto& in : n.inputs) constants.push_back(fixed_constant(g, in));
    std::vector<bool> absorbed(constants.size(), false);
    KILN_RETURN_IF_ERROR(step.kernel->prepare(constants, absorbed).with_context(n.describe()));
    for (const auto& in : n.inputs) step.inputs.push_back(in.empty() ? -1 : plan->slot(in));
    for (const auto& out : n.outputs) step.outputs.push_back(out.empty() ? -1 : plan->slot(out));
    for (const auto& a : n.attrs) {
      std::vector<const ir::Graph*> bodies;
      if (a.g) bodies.push_back(a.g.get());
      for (const auto& sg : a.graphs) bodies.push_back(sg.get());
      for (const ir::Graph* body : bodies) {
        auto sub = compile(*body, model, inner_outer);
        if (!sub) return sub.status().with_context(n.describe() + ", subgraph '" + a.name + "'");
        for (const auto& name : ir::free_names(*body)) plan->slot(name);  // keep outer values named here
        step.subplans[body] = std::move(sub).value();
      }
    }
    plan->steps_.push_back(std::move(step));
  }
  for (const auto& o : g.outputs) {
    if (!producer.count(o.name) && !available.count(o.name) && !outer.count(o.name))
      return Status::error("graph output '" + o.name + "' is not produced by any node");
    plan->output_slots_.push_back(plan->slot(o.name));
  }
  // Values this graph reads from enclosing frames get slots filled at the start of each run.
  for (const auto& name : ir::free_names(g)) plan->outer_refs_.emplace_back(plan->slot(name), name);

  // Liveness: free each value after its last reader, unless it is a graph output.
  std::vector<int> last_use(plan->slot_names_.size(), -1);
  for (size_t s = 0; s < plan->steps_.size(); ++s) {
    for (int in : plan->steps_[s].inputs)
      if (in >= 0) last_use[in] = static_cast<int>(s);
    for (const auto& dep : node_dependencies(*plan->steps_[s].node))
      last_use[plan->slot(dep)] = static_cast<int>(s);
  }
  last_use.resize(plan->slot_names_.size(), -1);
  for (int o : plan->output_slots_) last_use[o] = -2;
  for (size_t v = 0; v < last_use.size(); ++v)
    if (last_use[v] >= 0) plan->steps_[last_use[v]].free_after.push_back(static_cast<int>(v));
  return plan;
}

class GraphPlan::StepRunner : public SubgraphRunner {
 public:
  StepRunner(const Step& step, const Frame* frame, ThreadPool* pool)
      : step_(step), frame_(frame), pool_(pool) {}
  Result<std::vector<Value>> run(const ir::Graph& body, std::vector<Value> inputs) override {
    auto it = step_.subplans.find(&body);
    if (it == step_.subplans.end()) return Status::error("subgraph was not compiled with its node");
    return it->second->run(std::move(inputs), frame_, pool_);
  }

 private:
  const Step& step_;
  const Frame* frame_;
  ThreadPool* pool_;
};

namespace {

ir::TypeInfo type_of(const Value* v) {
  if (!v || (v->is_tensor() && !v->tensor.defined())) return {};
  if (v->is_tensor()) return ir::TypeInfo::tensor(v->tensor.dtype(), v->tensor.shape());
  ir::TypeInfo t;
  t.kind = v->is_sequence() ? ir::TypeInfo::Kind::kSequence : ir::TypeInfo::Kind::kOptional;
  return t;
}

}  // namespace

Result<std::vector<Value>> GraphPlan::run(std::vector<Value> inputs, const Frame* outer, ThreadPool* pool,
                                          std::vector<StepRecord>* records) const {
  std::vector<Value> slots(slot_names_.size());
  for (const auto& [s, v] : constants_) slots[s] = v;
  for (const auto& [s, name] : outer_refs_) {
    const Value* v = outer ? outer->find(name) : nullptr;
    if (!v) return Status::error("value '" + name + "' is not available in an enclosing graph");
    slots[s] = *v;
  }
  if (inputs.size() > input_slots_.size())
    return Status::error("graph '" + graph_->name + "' takes " + std::to_string(input_slots_.size()) +
                         " inputs, got " + std::to_string(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) slots[input_slots_[i]] = std::move(inputs[i]);
  Frame frame{this, &slots, outer};
  if (records) records->reserve(records->size() + steps_.size());
  for (const Step& step : steps_) {
    std::vector<const Value*> in;
    in.reserve(step.inputs.size());
    for (size_t k = 0; k < step.inputs.size(); ++k) {
      const int s = step.inputs[k];
      const Value* v = s < 0 ? nullptr : &slots[s];
      if (v && v->is_tensor() && !v->tensor.defined()) {
        // Unfed optional graph input or an output a kernel left empty.
        if (!step.node->inputs[k].empty() &&
            std::find(input_slots_.begin(), input_slots_.end(), s) == input_slots_.end())
          return Status::error(step.node->describe() + ": input '" + step.node->inputs[k] +
                               "' was not computed");
        v = nullptr;
      }
      in.push_back(v);
    }
    StepRunner sub(step, &frame, pool);
    KernelContext ctx(*step.node, step.opset, std::move(in), pool, &sub);
    StepRecord* rec = nullptr;
    if (records) {
      rec = &records->emplace_back();
      rec->node = step.node;
      rec->opset = step.opset;
      rec->start = std::chrono::steady_clock::now();
    }
    Status st = step.kernel->run(ctx);
    if (rec) {
      rec->end = std::chrono::steady_clock::now();
      for (size_t k = 0; k < ctx.num_inputs(); ++k)
        rec->inputs.push_back(type_of(ctx.has_input(k) ? &ctx.value(k) : nullptr));
      for (const Value& v : ctx.outputs) rec->outputs.push_back(type_of(&v));
    }
    if (!st.is_ok()) {
      const std::string& m = st.message();
      if (m.rfind("node '", 0) == 0) return st;
      return st.with_context(step.node->describe());
    }
    for (size_t k = 0; k < step.outputs.size(); ++k)
      if (step.outputs[k] >= 0) slots[step.outputs[k]] = std::move(ctx.outputs[k]);
    for (int s : step.free_after) slots[s] = Value();
  }
  std::vector<Value> outputs;
  outputs.reserve(output_slots_.size());
  for (int s : output_slots_) outputs.push_back(slots[s]);
  return outputs;
}

}  // namespace kiln::runtime
