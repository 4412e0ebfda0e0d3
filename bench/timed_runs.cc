#include "timed_runs.h"

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace kiln::bench {

bool cold_from_env() {
  const char* env = std::getenv("KILN_BENCH_COLD");
  return env != nullptr && std::string(env) == "1";
}

void evict_caches() {
  static std::vector<char> junk(64 << 20);
  static char v = 0;
  ++v;
  for (size_t i = 0; i < junk.size(); i += 64) junk[i] = v;
  benchmark::ClobberMemory();
}

}  // namespace kiln::bench
