// Session: a loaded model, its compiled plan and its thread pool; checks inputs before running.
#include "kiln/session.h"

#include <chrono>

#include "core/thread_pool.h"
#include "kiln/optimize.h"
#include "ir/function_inline.h"
#include "ir/gradient.h"
#include "onnx/model_io.h"
#include "runtime/graph_plan.h"
#include "runtime/step_cost.h"

namespace kiln {

struct Session::Impl {
  std::shared_ptr<const ir::Model> model;
  std::unique_ptr<runtime::GraphPlan> plan;
  std::unique_ptr<ThreadPool> pool;
  std::vector<IoInfo> inputs, outputs;
  std::vector<size_t> input_positions;  // index of each user input among the graph's inputs
};

namespace {

IoInfo io_info(const ir::ValueInfo& v) {
  IoInfo io;
  io.name = v.name;
  io.dtype = v.type.dtype;
  switch (v.type.kind) {
    case ir::TypeInfo::Kind::kSequence: io.kind = Value::Kind::kSequence; break;
    case ir::TypeInfo::Kind::kOptional: io.kind = Value::Kind::kOptional; break;
    default: io.kind = Value::Kind::kTensor; break;
  }
  io.has_shape = v.type.has_shape;
  for (const auto& d : v.type.shape) {
    io.dims.push_back(d.known() ? d.value : -1);
    io.dim_names.push_back(d.symbol);
  }
  return io;
}

Status check_input(const IoInfo& io, const Value& v) {
  const std::string what = "input '" + io.name + "'";
  if (io.kind == Value::Kind::kTensor) {
    if (!v.is_tensor() || !v.tensor.defined()) return Status::error(what + " must be a tensor");
    const Tensor& t = v.tensor;
    if (io.dtype != DType::kUndefined && t.dtype() != io.dtype)
      return Status::error(what + " must be " + dtype_name(io.dtype) + ", got " + dtype_name(t.dtype()));
    if (io.has_shape) {
      if (t.rank() != static_cast<int64_t>(io.dims.size()))
        return Status::error(what + " must have rank " + std::to_string(io.dims.size()) + ", got shape " +
                             shape_str(t.shape()));
      for (size_t i = 0; i < io.dims.size(); ++i)
        if (io.dims[i] >= 0 && t.dim(i) != io.dims[i])
          return Status::error(what + " dimension " + std::to_string(i) + " must be " +
                               std::to_string(io.dims[i]) + ", got shape " + shape_str(t.shape()));
    }
  } else if (io.kind == Value::Kind::kSequence && !v.is_sequence()) {
    return Status::error(what + " must be a sequence");
  }
  return Status::ok();
}

}  // namespace

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

Result<std::unique_ptr<Session>> Session::load(const std::string& path, const SessionOptions& options) {
  KILN_ASSIGN_OR_RETURN(ir::Model m, onnx_io::load_model(path));
  bool optimized_before = false;
  for (const auto& [key, value] : m.metadata) optimized_before |= key == "kiln.optimization_level";
  if (options.optimize_level > 0 && !optimized_before) {
    OptimizeOptions oo;
    oo.level = options.optimize_level;
    auto report = optimize(m, oo);
    if (!report) return report.status().with_context(path + ": optimizing at load (optimize_level 0 skips it)");
  }
  auto s = create(std::make_shared<const ir::Model>(std::move(m)), options);
  if (!s) return s.status().with_context(path);
  return s;
}

Result<std::unique_ptr<Session>> Session::create(std::shared_ptr<const ir::Model> model,
                                                 const SessionOptions& options) {
  if (!model->functions.empty()) {
    // Calls of model-local functions are replaced by their bodies; the session runs the copy.
    auto inlined = std::make_shared<ir::Model>(*model);
    KILN_RETURN_IF_ERROR(ir::inline_functions(*inlined));
    model = std::move(inlined);
  }
  if (ir::has_gradient_nodes(model->graph)) {
    // Gradient nodes become explicit derivative nodes; the session keeps and runs the copy.
    auto expanded = std::make_shared<ir::Model>(*model);
    KILN_RETURN_IF_ERROR(ir::expand_gradients(expanded->graph, expanded->opset("")));
    model = std::move(expanded);
  }
  auto impl = std::make_unique<Impl>();
  impl->model = model;
  KILN_ASSIGN_OR_RETURN(impl->plan, runtime::GraphPlan::compile(model->graph, *model, {}));
  impl->pool = std::make_unique<ThreadPool>(options.threads);
  const ir::Graph& g = model->graph;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    if (g.initializers.count(g.inputs[i].name)) continue;
    impl->inputs.push_back(io_info(g.inputs[i]));
    impl->input_positions.push_back(i);
  }
  for (const auto& o : g.outputs) impl->outputs.push_back(io_info(o));
  return std::unique_ptr<Session>(new Session(std::move(impl)));
}

const std::vector<IoInfo>& Session::inputs() const { return impl_->inputs; }
const std::vector<IoInfo>& Session::outputs() const { return impl_->outputs; }
const ir::Model& Session::model() const { return *impl_->model; }
int Session::threads() const { return impl_->pool->threads(); }

namespace {

// The graph's inputs in order: the user's values, checked, and initializers for the rest.
Result<std::vector<Value>> feeds_for(const ir::Graph& g, const std::vector<IoInfo>& ios,
                                     const std::vector<size_t>& positions, const std::vector<Value>& inputs) {
  if (inputs.size() != ios.size())
    return Status::error("the model takes " + std::to_string(ios.size()) + " inputs, got " +
                         std::to_string(inputs.size()));
  std::vector<Value> feeds(g.inputs.size());
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    auto it = g.initializers.find(g.inputs[i].name);
    if (it != g.initializers.end()) feeds[i] = Value::of(it->second);
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    KILN_RETURN_IF_ERROR(check_input(ios[k], inputs[k]));
    feeds[positions[k]] = inputs[k];
  }
  return feeds;
}

}  // namespace

Result<std::vector<Value>> Session::run(const std::vector<Value>& inputs) {
  KILN_ASSIGN_OR_RETURN(std::vector<Value> feeds,
                        feeds_for(impl_->model->graph, impl_->inputs, impl_->input_positions, inputs));
  return impl_->plan->run(std::move(feeds), nullptr, impl_->pool.get());
}

Result<std::vector<Value>> Session::run_profiled(const std::vector<Value>& inputs, RunProfile* profile) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::vector<runtime::StepRecord> records;
  auto feeds = feeds_for(impl_->model->graph, impl_->inputs, impl_->input_positions, inputs);
  if (!feeds) return feeds.status();
  auto outputs = impl_->plan->run(std::move(feeds).value(), nullptr, impl_->pool.get(), &records);
  const auto t1 = Clock::now();
  if (!outputs) return outputs;
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
