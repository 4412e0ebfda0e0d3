// The fast-path registry of fast_path.h: one predicate per (domain, op), collected at start-up.
#include "kernels/fast_path.h"

#include <map>
#include <string>
#include <utility>

namespace kiln {
namespace {

std::map<std::pair<std::string, std::string>, FastPath>& registry() {
  static std::map<std::pair<std::string, std::string>, FastPath> r;
  return r;
}

}  // namespace

FastPathRegistrar::FastPathRegistrar(const char* domain, const char* op_type, FastPath fast) {
  registry()[{ir::normalize_domain(domain), op_type}] = std::move(fast);
}

bool runs_fast_path(const std::string& backend, const FastPathQuery& q) {
  if (backend != kKilnBackend) return true;
  auto it = registry().find({ir::normalize_domain(q.node.domain), q.node.op_type});
  if (it != registry().end()) return it->second(q);
  return ir::normalize_domain(q.node.domain) == "ai.kiln";
}

}  // namespace kiln
