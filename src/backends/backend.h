// Backends: the libraries a node's kernel can come from. kiln's own kernels are the backend
// "kiln"; a third-party library (src/backends/NAME/, built where its Debian package is
// installed) registers its kernels under its own name, each saying which nodes it takes
// (KernelDef::accepts). This is the narrow interface the runtime and the tuner ask.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/function_ref.h"
#include "kernels/kernel.h"

namespace kiln::backends {

inline constexpr const char* kKiln = kKilnBackend;

// Every backend that registered a kernel, kiln included.
std::set<std::string> registered();

// The named variants of kiln's kernels (KernelDef::variant), as tuning choices name them
// ("kiln.direct"). Not backends: the tuner times them per node beside kiln's own kernel; a
// session may force one (SessionOptions::backend) to test or compare it.
std::set<std::string> variants();

// The version of the library behind `backend` as it reports it at run time ("kiln 0.1.0" for kiln's
// own kernels and their variants; "" for a backend that registered none): part of the tuning
// cache's key, so that a timing taken with one library version is not reused with another.
std::string version(const std::string& backend);

// Registers a third-party backend's version function, once, at namespace scope in its source:
//   static const VersionRegistrar kVersion("openblas", [] { return std::string(...); });
struct VersionRegistrar {
  VersionRegistrar(const char* backend, std::string (*version)());
};

// Whether `t` is known to be a float32 tensor.
bool is_float32(const ir::TypeInfo* t);

// Whether each input of `node` among the first `count` that is given (named) has a type known to
// be float32: what a float backend's accepts() asks before taking a node.
bool given_inputs_float32(const ir::Node& node, const std::vector<const ir::TypeInfo*>& types,
                          size_t count);

// Part i of `count` near-equal parts of [0, extent), each bound a multiple of `step` but the
// last end: [first, last). How a library's kernel cuts a product into one slice a thread of
// kiln's pool, so that the library starts no threads of its own.
std::pair<int64_t, int64_t> part_range(int64_t extent, int64_t step, int64_t count, int64_t i);

// Runs fn(i) for each i in [0, count) on `pool`'s threads, or in turn on this one when `pool` is
// null.
void run_parts(ThreadPool* pool, int64_t count, FunctionRef<void(int64_t)> fn);

// The input types of `node` as `graph` knows them (an initializer's, or its value info's); null
// where unknown.
std::vector<const ir::TypeInfo*> input_types(const ir::Node& node, const ir::Graph& graph,
                                             std::vector<ir::TypeInfo>& storage);

// The kernels that can run `node`: kiln's own first, then kiln's variants and each other
// backend's kernel that accept it.
std::vector<const KernelDef*> candidates(const ir::Node& node,
                                         const std::vector<const ir::TypeInfo*>& input_types);

// The kernel choice (KernelDef::choice: a backend, or one of kiln's variants) each node should
// run with. `forced` ("--backend") applies to every node when it is not kiln; otherwise a node
// takes the choice `chosen` holds for its key (what tuning picked and the model's metadata
// recorded), else kiln.
struct Assignment {
  std::string forced = kKiln;
  std::map<std::string, std::string> chosen;  // node_key -> choice
  const std::string& backend_for(const ir::Node& node) const;
};

// A node's key in Assignment::chosen and the tuning report: its first named output, which no
// other node of the graph writes (node names may be empty or repeated).
std::string node_key(const ir::Node& node);

// The kernel to run `node` with: the one `choice` names when it accepts the node, else kiln's
// own (the fallback a forced or recorded choice gets for what it cannot run); null when there is
// none.
const KernelDef* choose(const ir::Node& node, const std::vector<const ir::TypeInfo*>& input_types,
                        const std::string& choice);

}  // namespace kiln::backends
