#include "runtime/backend_choices.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace kiln::runtime {

Result<BackendChoices> recorded_choices(const ir::Model& model) {
  BackendChoices out;
  for (const auto& [key, value] : model.metadata) {
    if (key != kBackendChoicesKey) continue;
    const auto j = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object())
      return Status::error(std::string("metadata '") + kBackendChoicesKey +
                           "' is not a JSON object of node -> backend");
    for (const auto& [node, backend] : j.items()) {
      if (!backend.is_string())
        return Status::error(std::string("metadata '") + kBackendChoicesKey + "': node '" + node +
                             "' names no backend");
      out[node] = backend.get<std::string>();
    }
  }
  return out;
}

void record_choices(ir::Model& model, const BackendChoices& choices) {
  auto& md = model.metadata;
  md.erase(std::remove_if(md.begin(), md.end(),
                          [](const auto& kv) { return kv.first == kBackendChoicesKey; }),
           md.end());
  if (choices.empty()) return;
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [node, backend] : choices) j[node] = backend;
  // Names that are not UTF-8 are written with U+FFFD: those nodes will simply run kiln's own
  // kernel.
  md.emplace_back(kBackendChoicesKey,
                  j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace kiln::runtime
