// The pipeline: simplification passes iterate together to a fixed point, then fusion, layout and
// final passes run once each, then the simplifications again when those changed anything.
// Records what ran in the model's metadata.
#include <algorithm>
#include <chrono>

#include "core/cpu_features.h"
#include "ir/topological_order.h"
#include "passes/graph_edit.h"
#include "passes/pass.h"

namespace kiln {
namespace passes {

PassRegistry& PassRegistry::global() {
  static PassRegistry registry;
  return registry;
}

void PassRegistry::add(PassInfo info) { passes_.push_back(std::move(info)); }

std::vector<const PassInfo*> PassRegistry::sorted() const {
  std::vector<const PassInfo*> out;
  for (const auto& p : passes_) out.push_back(&p);
  std::stable_sort(out.begin(), out.end(), [](const PassInfo* a, const PassInfo* b) {
    return a->stage != b->stage ? a->stage < b->stage : a->order < b->order;
  });
  return out;
}

namespace {

// Simplifications feed each other (folding exposes dead code exposes more folding); this bounds
// the rounds on a model where they would keep finding work.
constexpr int kMaxSimplifyRounds = 8;

// The metadata entry that marks a model `kiln optimize` saved, with the level it ran.
constexpr const char* kOptimizationLevelKey = "kiln.optimization_level";

void fix_dims(ir::Graph& g, const std::map<std::string, int64_t>& dims) {
  auto fix = [&](std::vector<ir::ValueInfo>& list) {
    for (auto& v : list)
      for (auto& d : v.type.shape) {
        auto it = dims.find(d.symbol);
        if (!d.symbol.empty() && it != dims.end()) {
          d.value = it->second;
          d.symbol.clear();
        }
      }
  };
  fix(g.inputs);
  fix(g.outputs);
  fix(g.value_info);
}

}  // namespace
}  // namespace passes

std::vector<std::pair<std::string, int>> list_passes() {
  std::vector<std::pair<std::string, int>> out;
  for (const auto* p : passes::PassRegistry::global().sorted()) out.emplace_back(p->name, p->level);
  return out;
}

Result<OptimizeReport> optimize(ir::Model& model, const OptimizeOptions& options) {
  using namespace passes;
  // Passes choose layouts and kernels for the ISA level in use: a bad KILN_ISA is an error.
  if (const std::string e = isa_env_error(); !e.empty()) return Status::error(e);
  OptimizeReport report;
  report.nodes_before = count_nodes(model.graph);
  // Passes follow producer-to-consumer chains: a cycle would send them round it forever.
  KILN_RETURN_IF_ERROR(ir::sort_topologically(model.graph).with_context("the model's graph"));
  if (!options.fixed_dims.empty()) fix_dims(model.graph, options.fixed_dims);
  std::vector<const PassInfo*> enabled;
  for (const PassInfo* p : PassRegistry::global().sorted())
    if (p->level <= options.level && !options.disabled.count(p->name) &&
        (p->portable || !options.portable))
      enabled.push_back(p);
  for (const std::string& name : options.disabled) {
    bool known = false;
    for (const PassInfo* p : PassRegistry::global().sorted()) known |= p->name == name;
    if (!known) return Status::error("--disable names an unknown pass '" + name + "'");
  }
  // One report row per pass and phase, in the order they first ran; the clean-up round after
  // fusion gets rows of its own.
  std::vector<PassReport> rows;
  std::string phase;
  PassContext ctx(model, options);
  auto run_pass = [&](const PassInfo* p) -> Result<int64_t> {
    const std::string key = p->name + phase;
    auto it =
        std::find_if(rows.begin(), rows.end(), [&](const PassReport& r) { return r.name == key; });
    if (it == rows.end()) {
      rows.push_back(PassReport{key, 0, count_nodes(model.graph), 0, 0});
      it = rows.end() - 1;
    }
    PassReport& row = *it;
    const auto t0 = std::chrono::steady_clock::now();
    auto rewrites = p->create()->run(model, ctx);
    if (rewrites && *rewrites > 0) ctx.invalidate();
    else ctx.invalidate_indexes();
    row.ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!rewrites) return rewrites.status().with_context("pass " + p->name);
    row.rewrites += *rewrites;
    row.nodes_after = count_nodes(model.graph);
    return rewrites;
  };
  auto simplify = [&]() -> Status {
    for (int round = 0; round < kMaxSimplifyRounds; ++round) {
      int64_t changed = 0;
      for (const PassInfo* p : enabled) {
        if (p->stage != Stage::kSimplify) continue;
        KILN_ASSIGN_OR_RETURN(int64_t n, run_pass(p));
        changed += n;
      }
      if (changed == 0) break;
    }
    return Status::ok();
  };
  KILN_RETURN_IF_ERROR(simplify());
  // The fusions leave dead nodes behind (qlinear-lookup a SiLU's QLinearSigmoid and QLinearMul),
  // which the layout passes would count as readers: a Transpose read by a dead node too cannot
  // move. They go before the layout stage.
  const auto dead_code = std::find_if(enabled.begin(), enabled.end(), [](const PassInfo* p) { return p->name == "dead-code"; });
  bool layout_started = false;
  int64_t rewritten = 0;
  for (const PassInfo* p : enabled) {
    if (p->stage == Stage::kSimplify) continue;
    if (p->stage >= Stage::kLayout && !layout_started && dead_code != enabled.end()) {
      layout_started = true;
      KILN_RETURN_IF_ERROR(run_pass(*dead_code).status());
    }
    KILN_ASSIGN_OR_RETURN(int64_t n, run_pass(p));
    rewritten += n;
  }
  // Fusions leave dead producers behind (the Shape chains that sized what they absorbed) and
  // constants to fold; the simplifications clean up after them.
  if (rewritten > 0) {
    phase = " (clean-up)";
    KILN_RETURN_IF_ERROR(simplify());
  }
  std::string applied;
  for (const PassInfo* p : enabled) {
    int64_t n = 0;
    for (const auto& r : rows) n += r.name == p->name || r.name == p->name + phase ? r.rewrites : 0;
    if (n > 0) applied += (applied.empty() ? "" : ",") + p->name;
  }
  report.passes = std::move(rows);
  report.nodes_after = count_nodes(model.graph);
  report.type_inferences = ctx.inferences();
  auto set_meta = [&](const std::string& key, const std::string& value) {
    for (auto& kv : model.metadata)
      if (kv.first == key) {
        kv.second = value;
        return;
      }
    model.metadata.emplace_back(key, value);
  };
  set_meta("kiln.version", "0.1.0");
  set_meta(kOptimizationLevelKey,
           std::to_string(options.level) + (options.portable ? " portable" : ""));
  set_meta("kiln.passes", applied);
  return report;
}

bool is_optimized(const ir::Model& model) {
  for (const auto& kv : model.metadata)
    if (kv.first == passes::kOptimizationLevelKey) return true;
  return false;
}

Result<bool> optimize_unless_saved(ir::Model& model, int level) {
  if (is_optimized(model) || level <= 0) return false;
  OptimizeOptions options;
  options.level = level;
  KILN_RETURN_IF_ERROR(optimize(model, options).status());
  return true;
}

}  // namespace kiln
