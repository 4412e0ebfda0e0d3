// Compiling a graph into steps (topological order, kernel choice, liveness) and running it.
#include "runtime/graph_plan.h"

#include <malloc.h>

#include <algorithm>

#include "backends/backend.h"
#include "kernels/fast_path.h"
#include "core/thread_pool.h"
#include "ir/op_schema.h"
#include "ir/topological_order.h"

namespace kiln::runtime {

const Value* Frame::find(const std::string& name) const {
  for (const Frame* f = this; f; f = f->parent) {
    const int s = f->plan->slot_index(name);
    if (s >= 0) {
      // A slot that is still empty belongs to a value not computed (or already freed) there.
      const Value* v = (*f->values)[s];
      if (v && (v->kind != Value::Kind::kTensor || v->tensor.defined())) return v;
    }
  }
  return nullptr;
}

namespace {

// The initializer called `name` when no caller can replace it (it is not also a graph input).
// "float32[1,3,224,224] -": each input's type, "-" for an omitted or unknown one.
std::string types_str(const std::vector<const ir::TypeInfo*>& types) {
  std::string s;
  for (const ir::TypeInfo* t : types) {
    if (!s.empty()) s += ' ';
    if (!t || t->kind == ir::TypeInfo::Kind::kUnknown) s += '-';
    else s += std::string(dtype_name(t->dtype)) + (t->has_shape ? ir::dims_str(t->shape) : "[?]");
  }
  return s;
}

// "group=32 kernel_shape=[3,3] mode=linear": a node's attributes as a user would write them.
std::string attributes_str(const ir::Node& n) {
  using T = ir::Attribute::Type;
  std::string s;
  for (const ir::Attribute& a : n.attrs) {
    std::string v;
    auto list = [&](const auto& xs) {
      std::string l = "[";
      for (size_t i = 0; i < xs.size(); ++i) l += (i ? "," : "") + std::to_string(xs[i]);
      return l + "]";
    };
    switch (a.type) {
      case T::kInt: v = std::to_string(a.i); break;
      case T::kFloat: v = std::to_string(a.f); break;
      case T::kString: v = a.s; break;
      case T::kInts: v = list(a.ints); break;
      case T::kFloats: v = list(a.floats); break;
      case T::kStrings:
        for (const auto& x : a.strings) v += (v.empty() ? "" : ",") + x;
        v = "[" + v + "]";
        break;
      default: v = "<" + std::to_string(static_cast<int>(a.type)) + ">"; break;
    }
    s += (s.empty() ? "" : " ") + a.name + "=" + v;
  }
  return s;
}

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
                                                      const std::set<std::string>& outer,
                                                      ir::Graph* owned,
                                                      const backends::Assignment& assignment) {
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
  KILN_ASSIGN_OR_RETURN(std::vector<size_t> order, ir::topological_order(g, outer));
  std::set<std::string> produced;
  for (const auto& n : g.nodes) produced.insert(n.outputs.begin(), n.outputs.end());
  produced.erase("");

  std::set<std::string> inner_outer = outer;  // what subgraphs of this graph may read
  for (const auto& name : available) inner_outer.insert(name);
  inner_outer.insert(produced.begin(), produced.end());

  // Initializers no caller can replace, with the number of node inputs not yet prepared that read
  // them. Data read at run time (by a kernel that did not absorb it, a subgraph, as a graph output)
  // stays; the rest goes as soon as its last reader is prepared, so that compiling never holds a
  // weight and its prepacked copy for longer than it takes to make the copy.
  std::unordered_map<std::string, int> unprepared_readers;
  std::set<std::string> kept;
  for (const auto& [name, t] : g.initializers)
    if (fixed_constant(g, name)) unprepared_readers[name] = 0;
  for (const auto& n : g.nodes) {
    for (const auto& in : n.inputs) {
      auto it = unprepared_readers.find(in);
      if (it != unprepared_readers.end()) ++it->second;
    }
    for (const auto& a : n.attrs) {
      if (a.g)
        for (const auto& name : ir::free_names(*a.g)) kept.insert(name);
      for (const auto& sg : a.graphs)
        for (const auto& name : ir::free_names(*sg)) kept.insert(name);
    }
  }
  for (const auto& o : g.outputs) kept.insert(o.name);

  for (size_t i : order) {
    const ir::Node& n = g.nodes[i];
    Step step;
    step.node = &n;
    step.opset = model.opset(n.domain);
    if (step.opset == 0 && n.domain.empty()) step.opset = 1;
    std::vector<ir::TypeInfo> type_storage;
    const std::vector<const ir::TypeInfo*> types = backends::input_types(n, g, type_storage);
    const KernelDef* def = backends::choose(n, types, assignment.backend_for(n));
    if (!def)
      return Status::not_implemented(n.describe() + ": operator " + (n.domain.empty() ? "" : n.domain + ".") +
                           n.op_type + " is not supported");
    if (const std::string why = def->dtype_mismatch(n, types); !why.empty())
      return Status::invalid_model(n.describe() + ": " + why);
    step.backend = def->choice();
    auto kernel = def->create(n, step.opset);
    if (!kernel) return kernel.status().with_context(n.describe());
    step.kernel = std::move(kernel).value();
    std::vector<const Tensor*> constants;
    for (const auto& in : n.inputs) constants.push_back(fixed_constant(g, in));
    std::vector<bool> absorbed(constants.size(), false);
    KILN_RETURN_IF_ERROR(step.kernel->prepare(constants, absorbed).with_context(n.describe()));
    absorbed.resize(constants.size(), false);
    for (size_t k = 0; k < constants.size(); ++k) {
      if (!constants[k]) continue;
      if (!absorbed[k]) kept.insert(n.inputs[k]);
      if (--unprepared_readers[n.inputs[k]] == 0 && !kept.count(n.inputs[k])) plan->drop_data(n.inputs[k], owned);
    }
    for (const auto& in : n.inputs) step.inputs.push_back(in.empty() ? -1 : plan->slot(in));
    for (const auto& out : n.outputs) step.outputs.push_back(out.empty() ? -1 : plan->slot(out));
    for (const auto& a : n.attrs) {
      std::vector<const ir::Graph*> bodies;
      if (a.g) bodies.push_back(a.g.get());
      for (const auto& sg : a.graphs) bodies.push_back(sg.get());
      for (const ir::Graph* body : bodies) {
        // An owned model's subgraphs are owned too: the same objects, reached through a const path.
        auto sub = compile(*body, model, inner_outer,
                           owned ? const_cast<ir::Graph*>(body) : nullptr, assignment);
        if (!sub) return sub.status().with_context(n.describe() + ", subgraph '" + a.name + "'");
        for (const auto& name : ir::free_names(*body)) plan->slot(name);  // keep outer values named here
        step.subplans[body] = std::move(sub).value();
      }
    }
    plan->steps_.push_back(std::move(step));
  }
  for (const auto& o : g.outputs) {
    if (!produced.count(o.name) && !available.count(o.name) && !outer.count(o.name))
      return Status::invalid_model("graph output '" + o.name + "' is not produced by any node");
    plan->output_slots_.push_back(plan->slot(o.name));
  }
  for (size_t i = 0; i < plan->output_slots_.size(); ++i)
    plan->output_moves_.push_back(std::find(plan->output_slots_.begin() + i + 1, plan->output_slots_.end(),
                                            plan->output_slots_[i]) == plan->output_slots_.end());
  // Values this graph reads from enclosing frames get slots filled at the start of each run.
  for (const auto& name : ir::free_names(g)) plan->outer_refs_.emplace_back(plan->slot(name), name);

  // Liveness: free each value after its last reader, unless it is a graph output.
  std::vector<int> last_use(plan->slot_names_.size(), -1);
  for (size_t s = 0; s < plan->steps_.size(); ++s) {
    for (int in : plan->steps_[s].inputs)
      if (in >= 0) last_use[in] = static_cast<int>(s);
    for (const auto& dep : ir::node_dependencies(*plan->steps_[s].node))
      last_use[plan->slot(dep)] = static_cast<int>(s);
  }
  last_use.resize(plan->slot_names_.size(), -1);
  for (int o : plan->output_slots_) last_use[o] = -2;
  for (size_t v = 0; v < last_use.size(); ++v)
    if (last_use[v] >= 0) plan->steps_[last_use[v]].free_after.push_back(static_cast<int>(v));
  // The inputs each step's kernel may write over (Step::donated). A node that runs subgraphs may
  // read its inputs through them too: it is given none.
  std::vector<bool> constant_slot(plan->slot_names_.size(), false);
  for (const auto& c : plan->constants_) constant_slot[c.first] = true;
  for (const auto& r : plan->outer_refs_) constant_slot[r.first] = true;
  for (int s : plan->input_slots_) constant_slot[s] = true;
  for (Step& step : plan->steps_) {
    step.donated.assign(step.inputs.size(), false);
    if (!step.subplans.empty()) continue;
    for (size_t k = 0; k < step.inputs.size(); ++k) {
      const int in = step.inputs[k];
      step.donated[k] = in >= 0 && !constant_slot[in] &&
                        std::find(step.free_after.begin(), step.free_after.end(), in) != step.free_after.end() &&
                        std::count(step.inputs.begin(), step.inputs.end(), in) == 1;
    }
  }

  for (const Step& step : plan->steps_)
    for (int out : step.outputs)
      if (out >= 0) plan->computed_slots_.push_back(out);
  plan->is_input_slot_.assign(plan->slot_names_.size(), false);
  for (int s : plan->input_slots_) plan->is_input_slot_[s] = true;
  for (const auto& [name, readers] : unprepared_readers)
    if (readers == 0 && !kept.count(name)) plan->drop_data(name, owned);  // read by no node
  plan->scratch_.slots.resize(plan->slot_names_.size());
  plan->scratch_.where.resize(plan->slot_names_.size());
  return plan;
}

std::vector<ReferenceNode> GraphPlan::reference_nodes(const ir::Graph& typed, const ir::Model& model) const {
  std::vector<ReferenceNode> out;
  for (const Step& step : steps_) {
    const ir::Node& n = *step.node;
    std::vector<ir::TypeInfo> storage;
    const std::vector<const ir::TypeInfo*> types = backends::input_types(n, typed, storage);
    std::vector<const Tensor*> constants;
    for (const auto& in : n.inputs) constants.push_back(fixed_constant(typed, in));
    if (runs_fast_path(step.backend, FastPathQuery{n, model.opset(n.domain), types, constants})) continue;
    out.push_back({n.name, n.op_type, n.domain, types_str(types), attributes_str(n)});
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> GraphPlan::node_backends() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Step& step : steps_) out.emplace_back(backends::node_key(*step.node), step.backend);
  return out;
}

GraphPlan::~GraphPlan() = default;

void GraphPlan::drop_data(const std::string& name, ir::Graph* owned) {
  for (auto& [slot, v] : constants_) {
    if (slot_names_[slot] != name) continue;
    const Tensor& t = v.tensor;
    if (!v.is_tensor() || !t.defined() || !t.raw_data()) return;
    const Tensor shape_only = Tensor::wrap(t.dtype(), t.shape(), nullptr, nullptr);
    released_.push_back({graph_, name, static_cast<int64_t>(t.nbytes())});
    v = Value::of(shape_only);
    if (!owned) return;
    auto it = owned->initializers.find(name);
    if (it != owned->initializers.end()) it->second = shape_only;
    // The freed weight sits between allocations that stay (prepacked copies), where glibc keeps
    // its pages; handing them back every so often keeps compiling from adding to the peak.
    dropped_since_trim_ += released_.back().bytes;
    if (dropped_since_trim_ >= kTrimBytes) {
      dropped_since_trim_ = 0;
#ifdef __GLIBC__
      malloc_trim(0);
#endif
    }
    return;
  }
}

std::vector<GraphPlan::Released> GraphPlan::released() const {
  std::vector<Released> all = released_;
  for (const Step& step : steps_)
    for (const auto& [body, sub] : step.subplans) {
      auto inner = sub->released();
      all.insert(all.end(), inner.begin(), inner.end());
    }
  return all;
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
  std::vector<const Value*> in(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) in[i] = &inputs[i];
  std::vector<Value> outputs;
  KILN_RETURN_IF_ERROR(run(in, outputs, outer, pool, records));
  return outputs;
}

Status GraphPlan::run(const std::vector<const Value*>& inputs, std::vector<Value>& outputs, const Frame* outer,
                      ThreadPool* pool, std::vector<StepRecord>* records) const {
  if (inputs.size() > input_slots_.size())
    return Status::error("graph '" + graph_->name + "' takes " + std::to_string(input_slots_.size()) +
                         " inputs, got " + std::to_string(inputs.size()));
  // The kept scratch, unless a run of this plan is already under way further up the stack.
  bool idle = false;
  std::unique_ptr<Scratch> own;
  Scratch* s = &scratch_;
  if (!busy_.compare_exchange_strong(idle, true)) {
    own = std::make_unique<Scratch>();
    own->slots.resize(slot_names_.size());
    own->where.resize(slot_names_.size());
    s = own.get();
  }
  Status st = execute(*s, inputs, outputs, outer, pool, records);
  // Whatever happened, the run lets go of every value it made: nothing outlives it but outputs.
  // (Only the steps' outputs' slots hold any: a model's slots are mostly its weights'.)
  for (int slot : computed_slots_) s->slots[slot] = Value();
  for (Value& v : s->outs) v = Value();
  if (!own) busy_.store(false);
  return st;
}

Status GraphPlan::execute(Scratch& s, const std::vector<const Value*>& inputs, std::vector<Value>& outputs,
                          const Frame* outer, ThreadPool* pool, std::vector<StepRecord>* records) const {
  std::fill(s.where.begin(), s.where.end(), nullptr);
  for (const auto& [slot, v] : constants_) s.where[slot] = &v;
  for (const auto& [slot, name] : outer_refs_) {
    const Value* v = outer ? outer->find(name) : nullptr;
    if (!v) return Status::error("value '" + name + "' is not available in an enclosing graph");
    s.where[slot] = v;
  }
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i]) s.where[input_slots_[i]] = inputs[i];
  Frame frame{this, &s.where, outer};
  if (records) records->reserve(records->size() + steps_.size());
  for (const Step& step : steps_) {
    s.args.resize(step.inputs.size());
    s.donated.resize(step.inputs.size());
    for (size_t k = 0; k < step.inputs.size(); ++k) {
      const int slot = step.inputs[k];
      const Value* v = slot < 0 ? nullptr : s.where[slot];
      if (slot >= 0 && (!v || (v->is_tensor() && !v->tensor.defined()))) {
        // Unfed optional graph input or an output a kernel left empty.
        if (!is_input_slot_[slot])
          return Status::error(step.node->describe() + ": input '" + step.node->inputs[k] + "' was not computed");
        v = nullptr;
      }
      s.args[k] = v;
      s.donated[k] = step.donated[k] && v == &s.slots[slot];
    }
    StepRunner sub(step, &frame, pool);
    KernelContext ctx(*step.node, step.opset, s.args.data(), s.args.size(), s.outs, pool, &sub);
    ctx.donate_inputs(&s.donated);
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
    for (size_t k = 0; k < step.outputs.size() && k < s.outs.size(); ++k) {
      const int slot = step.outputs[k];
      if (slot < 0) continue;
      s.slots[slot] = std::move(s.outs[k]);
      s.where[slot] = &s.slots[slot];
    }
    for (int slot : step.free_after) {
      s.slots[slot] = Value();
      s.where[slot] = nullptr;
    }
  }
  outputs.resize(output_slots_.size());
  for (size_t i = 0; i < output_slots_.size(); ++i) {
    const int slot = output_slots_[i];
    const Value* v = s.where[slot];
    if (!v)
      outputs[i] = Value();
    else if (v == &s.slots[slot] && output_moves_[i])
      outputs[i] = std::move(s.slots[slot]);
    else
      outputs[i] = *v;
  }
  return Status::ok();
}

}  // namespace kiln::runtime
