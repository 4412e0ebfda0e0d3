#include "runtime/tuning_cache.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "backends/backend.h"
#include "core/cpu_features.h"
#include "onnx/model_io.h"

namespace kiln::runtime {
namespace {

constexpr const char* kFormat = "kiln-tuning-cache-1";

std::string attribute_str(const ir::Attribute& a) {
  using T = ir::Attribute::Type;
  std::string s = a.name + "=";
  switch (a.type) {
    case T::kFloat:
      return s + std::to_string(a.f);
    case T::kInt:
      return s + std::to_string(a.i);
    case T::kString:
      return s + a.s;
    case T::kFloats:
      for (float f : a.floats) s += std::to_string(f) + ",";
      return s;
    case T::kInts:
      for (int64_t i : a.ints) s += std::to_string(i) + ",";
      return s;
    case T::kStrings:
      for (const auto& x : a.strings) s += x + ",";
      return s;
    case T::kTensor:
      return s + dtype_name(a.t.dtype()) + shape_str(a.t.shape());
    default:
      return s + "type" + std::to_string(static_cast<int>(a.type));
  }
}

}  // namespace

std::string tuning_key(const ir::Node& node, const std::vector<const Value*>& inputs,
                       const std::vector<bool>& constant, int threads,
                       const std::vector<std::string>& backends) {
  std::string k = (node.domain.empty() ? "" : node.domain + ".") + node.op_type;
  for (const ir::Attribute& a : node.attrs) k += " " + attribute_str(a);
  k += " |";
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Value* v = inputs[i];
    if (!v || !v->is_tensor()) {
      k += " -";
      continue;
    }
    k += std::string(" ") + dtype_name(v->tensor.dtype()) + shape_str(v->tensor.shape()) +
         (constant[i] ? "c" : "");
  }
  // The ISA level too: KILN_ISA=avx2 on an AVX-512 CPU times other kernels than its default.
  k += " | threads " + std::to_string(threads) + " | " + cpu_features().model + " | " + isa_name(cpu_features().level());
  for (const std::string& b : backends) k += " | " + backends::version(b);
  return k;
}

Result<TuningCache> TuningCache::load(const std::string& path) {
  TuningCache cache;
  cache.path_ = path;
  std::error_code ec;
  if (path.empty() || !std::filesystem::exists(path, ec)) return cache;
  KILN_ASSIGN_OR_RETURN(std::string text, onnx_io::read_file(path));
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("format", "") != kFormat || !j.contains("entries") ||
      !j["entries"].is_object())
    return Status::error(path + ": not a kiln tuning cache (expected a JSON object with format '" +
                         kFormat + "' and entries)");
  for (const auto& [key, e] : j["entries"].items()) {
    if (!e.is_object() || !e.contains("winner") || !e["winner"].is_string())
      return Status::error(path + ": the entry '" + key + "' names no winner");
    Entry entry;
    entry.winner = e["winner"].get<std::string>();
    if (e.contains("median_us") && e["median_us"].is_object())
      for (const auto& [b, us] : e["median_us"].items())
        if (us.is_number()) entry.median_us[b] = us.get<double>();
    cache.entries_[key] = std::move(entry);
  }
  return cache;
}

Status TuningCache::save() const {
  if (path_.empty()) return Status::ok();
  nlohmann::json entries = nlohmann::json::object();
  for (const auto& [key, e] : entries_)
    entries[key] = {{"winner", e.winner}, {"median_us", e.median_us}};
  const nlohmann::json j = {{"format", kFormat}, {"entries", entries}};
  return onnx_io::write_file(path_,
                             j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace));
}

const std::string* TuningCache::find(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second.winner;
}

void TuningCache::put(const std::string& key, const std::string& winner,
                      const std::vector<CandidateTiming>& timings) {
  Entry& e = entries_[key];
  e.winner = winner;
  e.median_us.clear();
  for (const CandidateTiming& t : timings)
    if (t.rejected.empty()) e.median_us[t.backend] = t.median_us;
}

}  // namespace kiln::runtime
