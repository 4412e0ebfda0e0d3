// kiln::tune (kiln/tune.h): one reference run of the model with kiln's own kernels keeps every
// value a node reads and writes; each node that more than one backend takes is then replayed on
// those values with each candidate kernel, which is checked against kiln's output and timed.
//
// A candidate runs the node exactly as the graph has it (same inputs, same layout, same output),
// so whatever conversion a library needs (XNNPACK's NHWC, a weight format) happens inside its
// kernel and is part of its time: a choice that needs a reorder wins only with the reorder paid.
#include <algorithm>
#include <chrono>
#include <memory>
#include <unordered_map>

#include "backends/backend.h"
#include "core/thread_pool.h"
#include "ir/shape_inference.h"
#include "kiln/compare.h"
#include "kiln/session.h"
#include "kiln/tune.h"
#include "runtime/backend_choices.h"
#include "runtime/intermediate_outputs.h"
#include "runtime/tuning_cache.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMinRuns = 3;   // timed runs of a candidate, at least (after one warm-up run)
constexpr int kMaxRuns = 15;  // and at most

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Hands a kernel's outputs the buffers of its previous run, as the session's arena would, so that
// a candidate's time is not its first touches of fresh heap pages.
class ReusingAllocator : public TensorAllocator {
 public:
  std::shared_ptr<void> allocate(size_t bytes) override {
    for (auto& [size, buffer] : buffers_)
      if (size >= bytes && buffer.use_count() == 1) return buffer;
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) return nullptr;
    buffers_.emplace_back(bytes, std::shared_ptr<void>(p, std::free));
    return buffers_.back().second;
  }

 private:
  std::vector<std::pair<size_t, std::shared_ptr<void>>> buffers_;
};

// One node's inputs as the reference run saw them, and its outputs there.
struct NodeValues {
  std::vector<const Value*> inputs;  // null for an omitted optional input
  std::vector<bool> constant;        // input i is an initializer the kernel may prepack
  std::vector<const Tensor*> constants;
  std::vector<const Value*> outputs;
};

// Runs `def`'s kernel for `node` on `values`: once to check against the reference outputs, then
// timed until kMaxRuns or (at least kMinRuns and) `budget_ms`.
CandidateTiming time_candidate(const KernelDef& def, const ir::Node& node, int64_t opset,
                               const NodeValues& values, ThreadPool* pool, double budget_ms,
                               const TuneOptions& options) {
  CandidateTiming t;
  t.backend = def.backend;
  auto kernel = def.create(node, opset);
  if (!kernel) {
    t.rejected = kernel.status().message();
    return t;
  }
  std::vector<bool> absorbed(values.constants.size(), false);
  Status st = (*kernel)->prepare(values.constants, absorbed);
  if (!st.is_ok()) {
    t.rejected = st.message();
    return t;
  }
  ReusingAllocator allocator;
  TensorAllocator* previous = set_thread_tensor_allocator(&allocator);
  std::vector<Value> outputs;
  auto run = [&]() {
    KernelContext ctx(node, opset, values.inputs.data(), values.inputs.size(), outputs, pool,
                      nullptr);
    return (*kernel)->run(ctx);
  };
  st = run();
  CompareOptions co;
  co.rtol = options.rtol;
  co.atol = options.atol;
  for (size_t i = 0; st.is_ok() && i < values.outputs.size() && i < outputs.size(); ++i) {
    if (!values.outputs[i]) continue;
    auto diff = compare_values(*values.outputs[i], outputs[i], co);
    if (!diff)
      st = diff.status();
    else if (!diff->ok)
      st = Status::error("disagrees with kiln's own kernel (max abs error " +
                         std::to_string(diff->max_abs) + ")");
  }
  std::vector<double> us;
  const auto t0 = Clock::now();
  while (st.is_ok() && static_cast<int>(us.size()) < kMaxRuns &&
         (static_cast<int>(us.size()) < kMinRuns || ms_since(t0) < budget_ms)) {
    const auto r0 = Clock::now();
    st = run();
    us.push_back(ms_since(r0) * 1000);
  }
  outputs.clear();
  set_thread_tensor_allocator(previous);
  if (!st.is_ok()) {
    t.rejected = st.message();
    return t;
  }
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  t.median_us = us[us.size() / 2];
  return t;
}

std::string shapes_of(const NodeValues& v) {
  std::string s;
  for (const Value* in : v.inputs)
    s += (s.empty() ? "" : " ") +
         (in && in->is_tensor() ? shape_str(in->tensor.shape()) : std::string("-"));
  return s;
}

// The reference run: every value of the main graph by name (graph inputs and what nodes wrote).
Result<std::unordered_map<std::string, Value>> reference_values(const ir::Model& model,
                                                                const std::vector<Value>& inputs,
                                                                int threads) {
  SessionOptions so;
  so.threads = threads;
  // kiln's own kernels everywhere, whatever choices the model records: they are the reference.
  ir::Model run = runtime::with_intermediate_outputs(model);
  runtime::record_choices(run, {});
  auto probe = std::make_shared<const ir::Model>(std::move(run));
  KILN_ASSIGN_OR_RETURN(auto session, Session::create(probe, so));
  KILN_ASSIGN_OR_RETURN(std::vector<Value> outs, session->run(inputs));
  std::unordered_map<std::string, Value> values;
  for (size_t i = 0; i < session->inputs().size() && i < inputs.size(); ++i)
    values[session->inputs()[i].name] = inputs[i];
  for (size_t i = 0; i < probe->graph.outputs.size() && i < outs.size(); ++i)
    values[probe->graph.outputs[i].name] = std::move(outs[i]);
  return values;
}

}  // namespace

Result<TuneReport> tune(const ir::Model& model, const std::vector<Value>& inputs,
                        const TuneOptions& options) {
  const auto start = Clock::now();
  TuneReport report;
  KILN_ASSIGN_OR_RETURN(runtime::TuningCache cache, runtime::TuningCache::load(options.cache_path));
  std::shared_ptr<ThreadPool> pool =
      options.threads > 0 ? std::make_shared<ThreadPool>(options.threads) : ThreadPool::shared();
  // The types backends decide by, as a session compiling the model will see them.
  ir::Model typed = model;
  (void)ir::infer_shapes(typed);
  const ir::Graph& g = typed.graph;
  std::vector<std::pair<const ir::Node*, std::vector<const KernelDef*>>> tunable;
  for (const ir::Node& n : g.nodes) {
    std::vector<ir::TypeInfo> storage;
    auto candidates = backends::candidates(n, backends::input_types(n, g, storage));
    if (candidates.size() > 1) tunable.emplace_back(&n, std::move(candidates));
  }
  if (tunable.empty()) return report;
  KILN_ASSIGN_OR_RETURN(auto values, reference_values(model, inputs, pool->threads()));

  for (const auto& [node, candidates] : tunable) {
    const ir::Node& n = *node;
    NodeTuning nt;
    nt.key = backends::node_key(n);
    nt.op_type = (n.domain.empty() ? "" : n.domain + ".") + n.op_type;
    nt.winner = backends::kKiln;
    NodeValues v;
    bool complete = true;
    for (const std::string& in : n.inputs) {
      auto init = g.initializers.find(in);
      bool fixed = init != g.initializers.end() &&
                   std::none_of(g.inputs.begin(), g.inputs.end(),
                                [&](const ir::ValueInfo& x) { return x.name == in; });
      auto it = in.empty() || fixed ? values.end() : values.find(in);
      if (!in.empty() && !fixed && it == values.end()) complete = false;
      v.inputs.push_back(it == values.end() ? nullptr : &it->second);
      v.constant.push_back(fixed);
    }
    if (!complete) continue;  // a value the reference run did not keep (not a tensor)
    // Constants as Values the kernels can read, and as the tensors prepare() gets.
    std::vector<Value> constant_values(n.inputs.size());
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (!v.constant[i]) {
        v.constants.push_back(nullptr);
        continue;
      }
      const Tensor& t = g.initializers.at(n.inputs[i]);
      constant_values[i] = Value::of(t);
      v.inputs[i] = &constant_values[i];
      v.constants.push_back(&t);
    }
    for (const std::string& out : n.outputs) {
      auto it = values.find(out);
      v.outputs.push_back(out.empty() || it == values.end() ? nullptr : &it->second);
    }
    nt.shapes = shapes_of(v);
    std::vector<std::string> names;
    for (const KernelDef* d : candidates) names.push_back(d->backend);
    const std::string key = runtime::tuning_key(n, v.inputs, v.constant, pool->threads(), names);
    const std::string* known = cache.find(key);
    if (known && std::find(names.begin(), names.end(), *known) != names.end()) {
      nt.winner = *known;
      nt.cached = true;
      ++report.cache_hits;
    } else if (ms_since(start) > options.total_budget_s * 1000) {
      nt.over_budget = true;
    } else {
      int64_t opset = typed.opset(n.domain);
      if (opset == 0 && n.domain.empty()) opset = 1;
      const double budget = options.node_budget_ms / static_cast<double>(candidates.size());
      for (const KernelDef* d : candidates)
        nt.candidates.push_back(time_candidate(*d, n, opset, v, pool.get(), budget, options));
      // kiln's own kernel is the reference: it is the fallback when every other is rejected.
      double best = -1;
      for (const CandidateTiming& c : nt.candidates)
        if (c.rejected.empty() && (best < 0 || c.median_us < best)) {
          best = c.median_us;
          nt.winner = c.backend;
        }
      cache.put(key, nt.winner, nt.candidates);
      ++report.timed;
    }
    if (nt.winner != backends::kKiln) report.choices[nt.key] = nt.winner;
    report.nodes.push_back(std::move(nt));
  }
  KILN_RETURN_IF_ERROR(cache.save());
  report.seconds = ms_since(start) / 1000;
  return report;
}

void record_backend_choices(ir::Model& model, const std::map<std::string, std::string>& choices) {
  runtime::record_choices(model, choices);
}

}  // namespace kiln
