// Which registered kernel runs a node (backend.h).
#include "backends/backend.h"

#include <algorithm>
#include <map>

#include "core/thread_pool.h"

namespace kiln::backends {
namespace {

std::map<std::string, std::string (*)()>& versions() {
  static std::map<std::string, std::string (*)()> v;
  return v;
}

}  // namespace

VersionRegistrar::VersionRegistrar(const char* backend, std::string (*version)()) {
  versions()[backend] = version;
}

std::string version(const std::string& backend) {
  if (backend == kKiln || variants().count(backend)) return std::string("kiln ") + KILN_VERSION;
  auto it = versions().find(backend);
  return it == versions().end() ? "" : it->second();
}

std::set<std::string> registered() {
  std::set<std::string> names;
  for (const KernelDef* d : KernelRegistry::global().all()) names.insert(d->backend);
  return names;
}

std::set<std::string> variants() {
  std::set<std::string> names;
  for (const KernelDef* d : KernelRegistry::global().all())
    if (!d->variant.empty()) names.insert(d->choice());
  return names;
}

bool is_float32(const ir::TypeInfo* t) {
  return t != nullptr && t->kind == ir::TypeInfo::Kind::kTensor && t->dtype == DType::kFloat32;
}

bool given_inputs_float32(const ir::Node& node, const std::vector<const ir::TypeInfo*>& types,
                          size_t count) {
  for (size_t i = 0; i < count && i < node.inputs.size(); ++i) {
    if (node.inputs[i].empty()) continue;
    if (i >= types.size() || !is_float32(types[i])) return false;
  }
  return true;
}

std::pair<int64_t, int64_t> part_range(int64_t extent, int64_t step, int64_t count, int64_t i) {
  const int64_t steps = (extent + step - 1) / step;
  return {std::min(extent, steps * i / count * step),
          std::min(extent, steps * (i + 1) / count * step)};
}

void run_parts(ThreadPool* pool, int64_t count, FunctionRef<void(int64_t)> fn) {
  if (pool == nullptr) {
    for (int64_t i = 0; i < count; ++i) fn(i);
    return;
  }
  pool->parallel_for(count, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) fn(i);
  });
}

std::vector<const ir::TypeInfo*> input_types(const ir::Node& node, const ir::Graph& graph,
                                             std::vector<ir::TypeInfo>& storage) {
  storage.clear();
  storage.reserve(node.inputs.size());  // pointers into it stay valid
  std::vector<const ir::TypeInfo*> types;
  for (const std::string& in : node.inputs) {
    auto init = graph.initializers.find(in);
    const ir::ValueInfo* vi = in.empty() ? nullptr : graph.find_value_info(in);
    if (init != graph.initializers.end()) {
      storage.push_back(ir::TypeInfo::tensor(init->second.dtype(), init->second.shape()));
      types.push_back(&storage.back());
    } else {
      types.push_back(vi ? &vi->type : nullptr);
    }
  }
  return types;
}

std::vector<const KernelDef*> candidates(const ir::Node& node,
                                         const std::vector<const ir::TypeInfo*>& input_types) {
  std::vector<const KernelDef*> out, others;
  for (const KernelDef* d : KernelRegistry::global().find(node.domain, node.op_type)) {
    if (d->backend == kKiln && d->variant.empty())
      out.push_back(d);
    else if (d->accepts && d->accepts(node, input_types))
      others.push_back(d);
  }
  out.insert(out.end(), others.begin(), others.end());
  return out;
}

std::string node_key(const ir::Node& node) {
  for (const std::string& o : node.outputs)
    if (!o.empty()) return o;
  return node.name;
}

const std::string& Assignment::backend_for(const ir::Node& node) const {
  if (forced != kKiln || chosen.empty()) return forced;
  auto it = chosen.find(node_key(node));
  return it == chosen.end() ? forced : it->second;
}

const KernelDef* choose(const ir::Node& node, const std::vector<const ir::TypeInfo*>& input_types,
                        const std::string& choice) {
  const KernelDef* own = nullptr;
  for (const KernelDef* d : candidates(node, input_types)) {
    if (d->choice() == choice) return d;
    if (!own && d->choice() == kKiln) own = d;
  }
  return own;
}

}  // namespace kiln::backends
