// The per-node backend choices a tuned model carries: in its metadata under "kiln.backends", a
// JSON object from each tuned node's key (backends::node_key) to the backend that runs it. A
// session loading the model compiles those nodes with those backends, without timing again.
#pragma once

#include <map>
#include <string>

#include "ir/graph.h"
#include "kiln/status.h"

namespace kiln::runtime {

inline constexpr const char* kBackendChoicesKey = "kiln.backends";

using BackendChoices = std::map<std::string, std::string>;  // node key -> backend

// The choices recorded in `model`'s metadata (none when absent); malformed JSON is an error.
Result<BackendChoices> recorded_choices(const ir::Model& model);

// Replaces the choices recorded in `model`'s metadata (removes the entry when `choices` is empty).
void record_choices(ir::Model& model, const BackendChoices& choices);

}  // namespace kiln::runtime
