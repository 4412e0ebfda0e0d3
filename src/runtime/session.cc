// Session: a loaded model, its compiled plan and its thread pool; checks inputs before running.
#include "kiln/session.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "backends/backend.h"
#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "ir/function_inline.h"
#include "ir/gradient.h"
#include "ir/shape_inference.h"
#include "kiln/model.h"
#include "kiln/optimize.h"
#include "runtime/backend_choices.h"
#include "runtime/graph_plan.h"
#include "runtime/io_info.h"
#include "runtime/run_memory.h"
#include "runtime/step_cost.h"

namespace kiln {

struct Session::Impl {
  std::shared_ptr<const ir::Model> model;
  std::unique_ptr<runtime::GraphPlan> plan;
  std::shared_ptr<ThreadPool> pool;  // ThreadPool::shared() unless options.threads asks for a count
  std::vector<IoInfo> inputs, outputs;
  std::vector<size_t> input_positions;  // index of each user input among the graph's inputs
  std::vector<Value> defaults;          // per graph input: its initializer, when it has one
  // Kept from run to run so that a run allocates nothing of its own:
  std::vector<const Value*> feeds;  // per graph input: this run's value
  std::vector<Value> results;       // the plan's outputs, before run_into copies them out
  runtime::RunMemory memory;
  MemoryInfo weights;  // the weight and plan figures, fixed at create

  Status bind_feeds(const std::vector<Value>& user_inputs);
  // Runs the plan on `user_inputs`; into the existing `outputs` when `into` (run_into).
  Status execute(const std::vector<Value>& user_inputs, std::vector<Value>& outputs, bool into,
                 std::vector<runtime::StepRecord>* records);
};

namespace {

Status check_input(const IoInfo& io, const Value& v) {
  // Built only for an error: a run that is fine allocates nothing here.
  auto what = [&] { return "input '" + io.name + "'"; };
  if (io.kind == Value::Kind::kTensor) {
    if (!v.is_tensor() || !v.tensor.defined()) return Status::invalid_argument(what() + " must be a tensor");
    const Tensor& t = v.tensor;
    if (io.dtype != DType::kUndefined && t.dtype() != io.dtype)
      return Status::invalid_argument(what() + " must be " + dtype_name(io.dtype) + ", got " + dtype_name(t.dtype()));
    if (io.has_shape) {
      if (t.rank() != static_cast<int64_t>(io.dims.size()))
        return Status::invalid_argument(what() + " must have rank " + std::to_string(io.dims.size()) + ", got shape " +
                             shape_str(t.shape()));
      for (size_t i = 0; i < io.dims.size(); ++i)
        if (io.dims[i] >= 0 && t.dim(i) != io.dims[i])
          return Status::invalid_argument(what() + " dimension " + std::to_string(i) + " must be " +
                               std::to_string(io.dims[i]) + ", got shape " + shape_str(t.shape()));
    }
  } else if (io.kind == Value::Kind::kSequence && !v.is_sequence()) {
    return Status::invalid_argument(what() + " must be a sequence");
  }
  return Status::ok();
}

}  // namespace

std::vector<std::string> available_backends() {
  std::vector<std::string> out{backends::kKiln};
  for (const std::string& b : backends::registered())
    if (b != backends::kKiln) out.push_back(b);
  return out;
}

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

namespace {

// Heap bytes in use, where the C library says (for the size of what compiling a plan allocates).
int64_t heap_in_use() {
#ifdef __GLIBC__
  const struct mallinfo2 m = mallinfo2();
  return static_cast<int64_t>(m.uordblks + m.hblkhd);
#else
  return 0;
#endif
}

// Gives the pages of freed heap memory back to the system. The weights dropped after prepacking
// sit between allocations that stay (their prepacked copies), where malloc would keep them.
void return_free_memory() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

}  // namespace

Result<std::unique_ptr<Session>> Session::load(const std::string& path, const SessionOptions& options) {
  KILN_ASSIGN_OR_RETURN(Model loaded, Model::load(path));
  std::shared_ptr<ir::Model> m = std::move(loaded.ir_);  // nobody else holds it
  auto optimized = optimize_unless_saved(*m, options.optimize_level);
  if (!optimized)
    return optimized.status()
        .with_default_code(StatusCode::kInvalidModel)
        .with_context(path + ": optimizing at load (optimize_level 0 skips it)");
  // The weights the passes replaced were freed mid-heap; hand those pages back before compiling
  // allocates packed weights, or they add to the peak (70 MB on vit_b_16).
  if (*optimized) return_free_memory();
  auto s = create_owned(std::move(m), options);
  if (!s) return s.status().with_context(path);
  return s;
}

Result<std::unique_ptr<Session>> Session::create(const Model& model, const SessionOptions& options) {
  return create(model.share(), options);
}

Result<std::unique_ptr<Session>> Session::create(std::shared_ptr<const ir::Model> model,
                                                 const SessionOptions& options) {
  // Calls of model-local functions are replaced by their bodies, gradient nodes by explicit
  // derivative nodes: on a copy, which the session keeps and runs.
  if (!model->functions.empty() || ir::has_gradient_nodes(model->graph))
    return create_owned(std::make_shared<ir::Model>(*model), options);
  return create_shared(std::move(model), nullptr, options);
}

Result<std::unique_ptr<Session>> Session::create_owned(std::shared_ptr<ir::Model> model,
                                                       const SessionOptions& options) {
  if (!model->functions.empty()) KILN_RETURN_IF_ERROR(ir::inline_functions(*model));
  if (ir::has_gradient_nodes(model->graph))
    KILN_RETURN_IF_ERROR(ir::expand_gradients(model->graph, model->opset("")));
  // Another backend takes a node by its inputs' types: give every value one where the model's
  // types infer (a model that was not optimized at load may carry none).
  bool other_backends = options.backend != backends::kKiln;
  for (const auto& [key, value] : model->metadata)
    other_backends |= key == runtime::kBackendChoicesKey;
  if (other_backends) (void)ir::infer_shapes(*model);
  ir::Model* owned = model.get();
  return create_shared(std::move(model), owned, options);
}

// `owned`, when set, is `model` itself, which this session alone holds and may change.
Result<std::unique_ptr<Session>> Session::create_shared(std::shared_ptr<const ir::Model> model, ir::Model* owned,
                                                        const SessionOptions& options) {
  if (const std::string e = isa_env_error(); !e.empty()) return Status::invalid_argument(e);
  const std::set<std::string> known = backends::registered(), variants = backends::variants();
  if (!known.count(options.backend) && !variants.count(options.backend)) {
    auto list = [](const std::set<std::string>& names) {
      std::string s;
      for (const std::string& b : names) s += (s.empty() ? "" : ", ") + b;
      return s;
    };
    return Status::invalid_argument("unknown backend '" + options.backend + "' (this build has: " + list(known) +
                         "; and kiln's kernel variants " + list(variants) + ")");
  }
  backends::Assignment assignment;
  assignment.forced = options.backend;
  KILN_ASSIGN_OR_RETURN(assignment.chosen, runtime::recorded_choices(*model));
  auto impl = std::make_unique<Impl>();
  impl->model = model;
  const ir::Graph& g = model->graph;
  for (const auto& [name, t] : g.initializers) impl->weights.weight_bytes += static_cast<int64_t>(t.nbytes());
  const int64_t heap_before = heap_in_use();
  // A model this session owns loses the data of the weights kernels absorbed, as they go.
  KILN_ASSIGN_OR_RETURN(
      impl->plan,
      runtime::GraphPlan::compile(g, *model, {}, owned ? &owned->graph : nullptr, assignment));
  const int64_t heap_after = heap_in_use();
  if (owned)
    for (const auto& r : impl->plan->released())
      if (r.graph == &g) impl->weights.released_weight_bytes += r.bytes;
  // What compiling allocated, the weights it freed on the way counted back in.
  impl->weights.plan_bytes = std::max<int64_t>(heap_after - heap_before + impl->weights.released_weight_bytes, 0);
  if (impl->weights.released_weight_bytes > 0) return_free_memory();
  impl->memory.set_enabled(options.memory_arena);
  impl->pool = ThreadPool::with_threads(options.threads);
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    auto it = g.initializers.find(g.inputs[i].name);
    impl->defaults.push_back(it == g.initializers.end() ? Value() : Value::of(it->second));
    if (it == g.initializers.end()) impl->input_positions.push_back(i);
  }
  impl->inputs = runtime::user_inputs(g);
  impl->feeds.resize(g.inputs.size());
  impl->outputs = runtime::graph_outputs(g);
  return std::unique_ptr<Session>(new Session(std::move(impl)));
}

const std::vector<IoInfo>& Session::inputs() const { return impl_->inputs; }
const std::vector<IoInfo>& Session::outputs() const { return impl_->outputs; }
const ir::Model& Session::model() const { return *impl_->model; }
int Session::threads() const { return impl_->pool->threads(); }
std::vector<ReferenceNode> Session::reference_nodes() const { return reference_nodes({}); }

std::vector<ReferenceNode> Session::reference_nodes(const std::vector<Value>& inputs) const {
  // Judged on inferred types: a model run as loaded may carry none for its inner values.
  ir::Model typed = *impl_->model;
  for (size_t k = 0; k < inputs.size() && k < impl_->input_positions.size(); ++k)
    if (inputs[k].is_tensor() && inputs[k].tensor.defined()) {
      ir::TypeInfo& t = typed.graph.inputs[impl_->input_positions[k]].type;
      t = ir::TypeInfo::tensor(inputs[k].tensor.dtype(), inputs[k].tensor.shape());
    }
  (void)ir::infer_shapes(typed);
  return impl_->plan->reference_nodes(typed.graph, typed);
}

std::vector<std::pair<std::string, std::string>> Session::node_backends() const {
  return impl_->plan->node_backends();
}

MemoryInfo Session::memory_info() const {
  MemoryInfo info = impl_->weights;
  const runtime::MemoryStats m = impl_->memory.stats();
  info.arena_bytes = m.plan.arena_bytes;
  info.peak_live_bytes = m.plan.peak_live_bytes;
  info.activation_bytes = m.plan.total_bytes + m.plan.heap_bytes;
  info.activations = m.plan.allocations;
  info.output_bytes = m.plan.heap_bytes;
  info.arena_runs = m.arena_runs;
  info.recorded_runs = m.recorded_runs;
  info.stray_runs = m.stray_runs;
  info.in_place_outputs = m.in_place_outputs;
  return info;
}

// The graph's inputs in order: the user's values, checked, and initializers for the rest.
Status Session::Impl::bind_feeds(const std::vector<Value>& user_inputs) {
  if (user_inputs.size() != inputs.size())
    return Status::invalid_argument("the model takes " + std::to_string(inputs.size()) + " inputs, got " +
                         std::to_string(user_inputs.size()));
  for (size_t i = 0; i < defaults.size(); ++i) feeds[i] = &defaults[i];
  for (size_t k = 0; k < user_inputs.size(); ++k) {
    KILN_RETURN_IF_ERROR(check_input(inputs[k], user_inputs[k]));
    feeds[input_positions[k]] = &user_inputs[k];
  }
  return Status::ok();
}

namespace {

// Output `from` into `to`, in place when `to` is a tensor of the same type and shape.
void copy_output(const Value& from, Value& to) {
  const Tensor& src = from.tensor;
  Tensor& dst = to.tensor;
  const bool in_place = from.is_tensor() && to.is_tensor() && src.defined() && dst.defined() &&
                        src.dtype() == dst.dtype() && src.shape() == dst.shape() &&
                        (dst.raw_data() || dst.nbytes() == 0);
  if (!in_place) {
    to = from;
    if (from.is_tensor()) to.tensor = src.clone();
  } else if (src.dtype() == DType::kString) {
    for (int64_t i = 0; i < src.numel(); ++i) dst.data<std::string>()[i] = src.data<std::string>()[i];
  } else if (src.nbytes() && dst.raw_data() != src.raw_data()) {
    std::memmove(dst.raw_data(), src.raw_data(), src.nbytes());
  }
}

// A result in the storage of another output's tensor, whose own result is elsewhere, would be
// overwritten by that output's copy before its own: it is copied out first. (A run whose
// allocations strayed from the recorded ones can leave such a result; see ArenaAllocator.)
void copy_crossed_results(std::vector<Value>& results, const std::vector<Value>& outs) {
  for (size_t j = 0; j < results.size(); ++j) {
    const auto* p = static_cast<const std::byte*>(results[j].tensor.raw_data());
    if (!results[j].is_tensor() || !p) continue;
    for (size_t i = 0; i < results.size() && i < outs.size(); ++i) {
      const auto* q = static_cast<const std::byte*>(outs[i].tensor.raw_data());
      if (i == j || !q || results[i].tensor.raw_data() == q) continue;
      if (p >= q && p < q + outs[i].tensor.nbytes()) {
        results[j].tensor = results[j].tensor.clone();
        break;
      }
    }
  }
}

}  // namespace

Status Session::Impl::execute(const std::vector<Value>& user_inputs, std::vector<Value>& outs, bool into,
                              std::vector<runtime::StepRecord>* records) {
  KILN_RETURN_IF_ERROR(bind_feeds(user_inputs));
  memory.begin(feeds, into ? &outs : nullptr);
  struct Stop {  // the thread's allocator goes back even if a kernel throws (std::bad_alloc)
    runtime::RunMemory& m;
    ~Stop() { m.stop(); }
  } stop{memory};
  Status st = plan->run(feeds, into ? results : outs, nullptr, pool.get(), records);
  memory.stop();
  if (into) {
    if (st.is_ok()) {
      memory.note_outputs(results);
      copy_crossed_results(results, outs);
      outs.resize(results.size());
      for (size_t i = 0; i < results.size(); ++i) copy_output(results[i], outs[i]);
    }
    for (Value& v : results) v = Value();
  }
  memory.finish(into ? nullptr : &outs, st.is_ok());
  return st;
}

Result<std::vector<Value>> Session::run(const std::vector<Value>& inputs) {
  std::vector<Value> outputs;
  KILN_RETURN_IF_ERROR(impl_->execute(inputs, outputs, false, nullptr));
  return outputs;
}

Status Session::run_into(const std::vector<Value>& inputs, std::vector<Value>& outputs) {
  return impl_->execute(inputs, outputs, true, nullptr);
}

Result<std::vector<Value>> Session::run_profiled(const std::vector<Value>& inputs, RunProfile* profile) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::vector<runtime::StepRecord> records;
  std::vector<Value> outputs;
  KILN_RETURN_IF_ERROR(impl_->execute(inputs, outputs, false, &records));
  const auto t1 = Clock::now();
  auto us = [](Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); };
  profile->wall_us = us(t1 - t0);
  profile->nodes.clear();
  profile->nodes.reserve(records.size());
  for (const runtime::StepRecord& r : records) {
    NodeTiming& t = profile->nodes.emplace_back();
    t.node = r.node->name;
    t.op_type = r.node->op_type;
    t.domain = r.node->domain;
    t.start_us = us(r.start - t0);
    t.dur_us = us(r.end - r.start);
    t.flops = runtime::step_flops(r);
    t.input_shapes = runtime::shapes_str(r.inputs);
  }
  return outputs;
}

}  // namespace kiln
