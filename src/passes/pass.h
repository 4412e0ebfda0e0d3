// The pass interface. A pass rewrites a Model and says how many rewrites it made, asking the
// PassContext for the analyses it needs; it registers itself from its own file with
// KILN_REGISTER_PASS, giving its place in the pipeline.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/optimize.h"
#include "kiln/status.h"
#include "passes/pass_context.h"

namespace kiln::passes {

// Pipeline stages, in order. Simplifications iterate together to a fixed point.
enum class Stage { kSimplify = 0, kFuse = 1, kLayout = 2, kFinal = 3 };

class Pass {
 public:
  virtual ~Pass() = default;
  // Rewrites the model; returns the number of rewrites made. The analyses in `ctx` describe the
  // model as the pass finds it; the manager invalidates them after a pass that rewrote.
  virtual Result<int64_t> run(ir::Model& model, PassContext& ctx) = 0;
};

struct PassInfo {
  std::string name;
  int level;          // the lowest -O level that runs it
  Stage stage;
  int order;          // position within its stage
  bool portable;      // true when it only ever produces standard ONNX ops
  std::unique_ptr<Pass> (*create)();
};

class PassRegistry {
 public:
  static PassRegistry& global();
  void add(PassInfo info);
  // Every pass, sorted by stage then order.
  std::vector<const PassInfo*> sorted() const;

 private:
  std::vector<PassInfo> passes_;
};

struct PassRegistrar {
  explicit PassRegistrar(PassInfo info) { PassRegistry::global().add(std::move(info)); }
};

}  // namespace kiln::passes

// Usage, in the pass's file: KILN_REGISTER_PASS(DeadCodeElimination, "dead-code", 1, kSimplify, 90, true);
#define KILN_REGISTER_PASS(Class, name, level, stage, order, portable)                          \
  static const ::kiln::passes::PassRegistrar KILN_CONCAT(kiln_pass_registrar_, __LINE__)(      \
      ::kiln::passes::PassInfo{name, level, ::kiln::passes::Stage::stage, order, portable,      \
                               []() -> std::unique_ptr<::kiln::passes::Pass> {                \
                                 return std::make_unique<Class>();                              \
                               }})
