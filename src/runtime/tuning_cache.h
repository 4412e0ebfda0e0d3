// The tuning cache (TensorRT's timing cache, TVM's tuning records): the backend that won each
// timed node, keyed by everything the timing depended on, kept in a JSON file across models and
// runs. A key that no longer matches (another CPU, thread count, library version, shape) is simply
// not found, and the node is timed again.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/status.h"
#include "kiln/tune.h"

namespace kiln::runtime {

// What a node's timing depended on: its op and attributes; its inputs' dtypes and shapes, and
// which are constants (prepacked at compile time); the thread count; the CPU model; and the
// candidate backends with their library versions.
std::string tuning_key(const ir::Node& node, const std::vector<const Value*>& inputs,
                       const std::vector<bool>& constant, int threads,
                       const std::vector<std::string>& backends);

class TuningCache {
 public:
  // The decisions in `path`: none when the file does not exist yet; a file that is not a tuning
  // cache is an error naming it. "" gives a cache that is never saved.
  static Result<TuningCache> load(const std::string& path);
  // Writes the decisions back to the file they came from (replacing it whole).
  Status save() const;

  // The backend that won for `key`, or null.
  const std::string* find(const std::string& key) const;
  void put(const std::string& key, const std::string& winner,
           const std::vector<CandidateTiming>& timings);
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string winner;
    std::map<std::string, double> median_us;  // per backend timed and correct
  };
  std::string path_;
  std::map<std::string, Entry> entries_;
};

}  // namespace kiln::runtime
