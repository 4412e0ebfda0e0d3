// kiln::tune (kiln/tune.h): one reference run of the model with kiln's own kernels keeps every
// value a node reads and writes; each node that more than one backend takes is then replayed on
// those values with each candidate kernel, which is checked against kiln's output and timed.
//
// A candidate runs the node exactly as the graph has it (same inputs, same layout, same output),
// so whatever conversion a library needs (XNNPACK's NHWC, a weight format) happens inside its
// kernel and is part of its time: a choice that needs a reorder wins only with the reorder paid.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <thread>
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
constexpr int kQuietMs = 20;  // pause before a candidate (time_candidate)
// The whole-model check runs each configuration about this long (TuneOptions::model_rounds to 61
// runs): the median of n run-for-run ratios moves by about their spread (10 % and more on this
// project's machines) over sqrt(n), and telling 3 % from that takes tens of rounds.
constexpr double kModelCheckMs = 3000;
constexpr int kMaxModelRounds = 61;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The value at v.size() / divisor of `v` sorted (`v` not empty): divisor 2 gives the median (the
// upper one of an even count), 4 the lower quartile.
double ranked(std::vector<double> v, size_t divisor) {
  std::nth_element(v.begin(), v.begin() + v.size() / divisor, v.end());
  return v[v.size() / divisor];
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
  t.backend = def.choice();
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
  // Lets the threads of the candidate timed before go to sleep first (libgomp's spin for a
  // while after each parallel region): a kernel timed while they spin shares the cores with
  // them. Without this pause, every kiln BlockedConv of mobilenet_v2, timed right after the
  // previous node's oneDNN candidate, took ~2x its time in the model.
  std::this_thread::sleep_for(std::chrono::milliseconds(kQuietMs));
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
  t.median_us = ranked(std::move(us), 2);
  return t;
}

// The fastest candidate that agreed with kiln's own kernel, another backend only when it beats
// kiln's by `min_gain`; kiln's own kernel (the reference, never rejected) otherwise.
std::string fastest(const std::vector<CandidateTiming>& candidates, double min_gain) {
  double own = -1;
  for (const CandidateTiming& c : candidates)
    if (c.backend == backends::kKiln && c.rejected.empty()) own = c.median_us;
  std::string winner = backends::kKiln;
  double best = own < 0 ? -1 : own * (1 - min_gain);
  for (const CandidateTiming& c : candidates)
    if (c.rejected.empty() && c.backend != backends::kKiln && (best < 0 || c.median_us < best)) {
      best = c.median_us;
      winner = c.backend;
    }
  return winner;
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

// The reference run's values of `n`'s inputs and outputs into `v`; its constant inputs from the
// graph, as Values kept in `constant_values` (which `v` points into) and as the tensors prepare()
// gets. False when the run did not keep an input (one that is not a tensor).
bool node_values(const ir::Node& n, const ir::Graph& g,
                 const std::unordered_map<std::string, Value>& values,
                 std::vector<Value>& constant_values, NodeValues& v) {
  constant_values.assign(n.inputs.size(), Value());
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const std::string& in = n.inputs[i];
    auto init = g.initializers.find(in);
    const bool fixed = init != g.initializers.end() &&
                       std::none_of(g.inputs.begin(), g.inputs.end(),
                                    [&](const ir::ValueInfo& x) { return x.name == in; });
    v.constant.push_back(fixed);
    v.constants.push_back(fixed ? &init->second : nullptr);
    if (fixed) {
      constant_values[i] = Value::of(init->second);
      v.inputs.push_back(&constant_values[i]);
      continue;
    }
    auto it = in.empty() ? values.end() : values.find(in);
    if (!in.empty() && it == values.end()) return false;
    v.inputs.push_back(it == values.end() ? nullptr : &it->second);
  }
  for (const std::string& out : n.outputs) {
    auto it = values.find(out);
    v.outputs.push_back(out.empty() || it == values.end() ? nullptr : &it->second);
  }
  return true;
}

// Milliseconds of one run of `session`.
Result<double> run_ms(Session& session, const std::vector<Value>& inputs,
                      std::vector<Value>& outputs) {
  const auto t0 = Clock::now();
  KILN_RETURN_IF_ERROR(session.run_into(inputs, outputs));
  return ms_since(t0);
}

using Choices = std::map<std::string, std::string>;

// The configurations the whole-model check compares: kiln only; all the choices; when they name
// several backends, each backend's alone; and each backend wherever it runs a node correctly (as
// forcing it would), so that the kept configuration is never slower than a single backend.
std::vector<std::pair<std::string, Choices>> model_configs(
    const Choices& choices, const std::map<std::string, Choices>& all) {
  std::vector<std::pair<std::string, Choices>> configs{{backends::kKiln, {}}};
  if (!choices.empty()) configs.emplace_back("mix", choices);
  std::map<std::string, Choices> by_backend;
  for (const auto& [node, backend] : choices) by_backend[backend][node] = backend;
  if (by_backend.size() > 1)
    for (auto& [backend, only] : by_backend) configs.emplace_back("mix: " + backend, only);
  for (const auto& [backend, nodes] : all)
    if (nodes != choices) configs.emplace_back("all: " + backend, nodes);
  return configs;
}

// The whole-model check (TuneReport::model_timings): the configurations timed in alternating
// rounds; the fastest one's choices stay in report.choices.
Status check_whole_model(const ir::Model& model, const std::vector<Value>& inputs, int threads,
                         const TuneOptions& options, const std::map<std::string, Choices>& all,
                         TuneReport& report) {
  const auto configs = model_configs(report.choices, all);
  SessionOptions so;
  so.threads = threads;
  std::vector<std::unique_ptr<Session>> sessions;
  for (const auto& [name, choices] : configs) {
    auto m = std::make_shared<ir::Model>(model);
    runtime::record_choices(*m, choices);
    KILN_ASSIGN_OR_RETURN(auto s, Session::create(m, so));
    sessions.push_back(std::move(s));
  }
  // One run of each configuration in turn, round after round, so that a machine's drifts (this
  // VM's phases last seconds) hit them all alike; the order is shuffled each round. Each timed
  // run follows an untimed one of the same configuration, as in a deployment's loop: run right
  // after another configuration, it shared the cores with that one's library threads, still
  // spinning (OpenMP's, for milliseconds). Timed at once, kiln's kernels alone read 1.06x
  // slower than oneDNN everywhere on mobilenet_v2, where the model ran 1.23x slower on oneDNN
  // (Zen 4). With 3 rounds of ~200 ms of one configuration each, identical configurations of
  // bert_base differed by up to 18%; this way, by 1-2%.
  std::vector<Value> outputs;
  double own_ms = 0;
  for (size_t c = 0; c < configs.size(); ++c)
    for (int i = 0; i < 2; ++i) {
      KILN_ASSIGN_OR_RETURN(double ms, run_ms(*sessions[c], inputs, outputs));
      if (c == 0) own_ms = ms;
    }
  const int rounds =
      std::clamp(static_cast<int>(kModelCheckMs / std::max(own_ms, 1e-3)),
                 std::max(options.model_rounds, 1),
                 std::max(options.model_rounds, kMaxModelRounds));
  std::vector<std::vector<double>> runs(configs.size());
  std::vector<size_t> order(configs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937 shuffle_rng(1);
  for (int round = 0; round < rounds; ++round) {
    std::shuffle(order.begin(), order.end(), shuffle_rng);
    for (size_t c : order) {
      KILN_RETURN_IF_ERROR(run_ms(*sessions[c], inputs, outputs).status());  // see above
      KILN_ASSIGN_OR_RETURN(double ms, run_ms(*sessions[c], inputs, outputs));
      runs[c].push_back(ms);
    }
  }
  size_t best = 0;
  for (size_t c = 0; c < configs.size(); ++c) {
    ModelTiming t{configs[c].first};
    std::vector<double> ratios;
    for (int round = 0; round < rounds; ++round) {
      ratios.push_back(runs[c][round] / runs[0][round]);
      t.faster_rounds += runs[c][round] < runs[0][round] ? 1 : 0;
    }
    t.rounds = rounds;
    t.vs_kiln = ranked(std::move(ratios), 2);
    // Shown: the lower quartile (noise on this machine only adds time, so the fast runs say most
    // about the configuration itself; the quartile, not the minimum, so that one lucky run does
    // not decide).
    t.ms = ranked(runs[c], 4);
    report.model_timings.push_back(t);
    // Like a node's, another configuration must beat kiln's by min_gain: the rounds are noisy,
    // and kiln's kernels alone bring no other library's threads. Judged run for run (vs_kiln),
    // not by the quartiles: by those, resnet50 kept OpenBLAS for its classifier while, run for
    // run, it took 0.983x kiln's time and was the faster in 17 rounds of 31 (Zen 4).
    if (t.vs_kiln < report.model_timings[best].vs_kiln && t.vs_kiln < 1 - options.min_gain)
      best = c;
  }
  report.kept = configs[best].first;
  report.choices = configs[best].second;
  return Status::ok();
}

// The cache key of the whole-model decision: every tuned node's key with its choice (64-bit
// FNV-1a of them, to keep the file readable).
std::string model_key(const std::vector<std::string>& node_keys, const Choices& choices) {
  uint64_t h = 1469598103934665603ull;
  auto add = [&](const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
  };
  for (const std::string& k : node_keys) add(k);
  for (const auto& [node, backend] : choices) add(node + "=" + backend);
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return std::string("whole model ") + hex;
}

// Decides between the configurations: from the cache when it knows this set of choices, else by
// timing them (and remembering the outcome).
Status decide_whole_model(const ir::Model& model, const std::vector<Value>& inputs, int threads,
                          const TuneOptions& options, const std::vector<std::string>& node_keys,
                          const std::map<std::string, Choices>& all, runtime::TuningCache& cache,
                          TuneReport& report) {
  const std::string key = model_key(node_keys, report.choices);
  if (const std::string* kept = cache.find(key)) {
    for (const auto& [name, choices] : model_configs(report.choices, all))
      if (name == *kept) {
        report.kept = name;
        report.choices = choices;
        report.kept_from_cache = true;
        return Status::ok();
      }
  }
  KILN_RETURN_IF_ERROR(check_whole_model(model, inputs, threads, options, all, report));
  std::vector<CandidateTiming> timings;
  for (const ModelTiming& t : report.model_timings)
    timings.push_back(CandidateTiming{t.config, t.ms * 1000, ""});
  cache.put(key, report.kept, timings);
  return Status::ok();
}

}  // namespace

Result<TuneReport> tune(const ir::Model& model, const std::vector<Value>& inputs,
                        const TuneOptions& options) {
  const auto start = Clock::now();
  TuneReport report;
  KILN_ASSIGN_OR_RETURN(runtime::TuningCache cache, runtime::TuningCache::load(options.cache_path));
  std::shared_ptr<ThreadPool> pool = ThreadPool::with_threads(options.threads);
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
  std::vector<std::string> node_keys;  // each tuned node's cache key
  std::map<std::string, Choices> all;  // per backend: every node it runs correctly

  for (const auto& [node, candidates] : tunable) {
    const ir::Node& n = *node;
    NodeTuning nt;
    nt.key = backends::node_key(n);
    nt.op_type = (n.domain.empty() ? "" : n.domain + ".") + n.op_type;
    nt.winner = backends::kKiln;
    NodeValues v;
    std::vector<Value> constant_values;
    // Skips a node reading a value the reference run did not keep (not a tensor).
    if (!node_values(n, g, values, constant_values, v)) continue;
    nt.shapes = shapes_of(v);
    std::vector<std::string> names;
    for (const KernelDef* d : candidates) names.push_back(d->choice());
    const std::string key = runtime::tuning_key(n, v.inputs, v.constant, pool->threads(), names);
    node_keys.push_back(key);
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
      nt.winner = fastest(nt.candidates, options.min_gain);
      cache.put(key, nt.winner, nt.candidates);
      ++report.timed;
    }
    if (nt.winner != backends::kKiln) report.choices[nt.key] = nt.winner;
    for (const std::string& b : names) {
      const bool rejected = std::any_of(
          nt.candidates.begin(), nt.candidates.end(),
          [&](const CandidateTiming& c) { return c.backend == b && !c.rejected.empty(); });
      if (b != backends::kKiln && !rejected && !nt.over_budget) all[b][nt.key] = b;
    }
    report.nodes.push_back(std::move(nt));
  }
  values.clear();
  if (!report.choices.empty() || !all.empty())
    KILN_RETURN_IF_ERROR(
        decide_whole_model(model, inputs, pool->threads(), options, node_keys, all, cache, report));
  KILN_RETURN_IF_ERROR(cache.save());
  report.seconds = ms_since(start) / 1000;
  return report;
}

void record_backend_choices(ir::Model& model, const std::map<std::string, std::string>& choices) {
  runtime::record_choices(model, choices);
}

}  // namespace kiln
