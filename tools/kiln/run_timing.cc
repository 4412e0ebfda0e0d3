#include "run_timing.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace kiln::cli {

Result<std::vector<double>> time_runs(Session& session, const std::vector<Value>& inputs,
                                      int warmup, int iters, bool progress) {
  std::vector<Value> outputs;
  for (int i = 0; i < warmup; ++i) {
    KILN_RETURN_IF_ERROR(session.run_into(inputs, outputs));
    if (progress) std::fprintf(stderr, "\rwarmup %d/%d", i + 1, warmup);
  }
  std::vector<double> times;
  times.reserve(iters);
  for (int i = 0; i < iters; ++i) {
    const auto t = std::chrono::steady_clock::now();
    Status r = session.run_into(inputs, outputs);
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count());
    KILN_RETURN_IF_ERROR(r);
    if (progress) std::fprintf(stderr, "\rrun %d/%d, last %.2f ms   ", i + 1, iters, times.back());
  }
  if (progress) std::fprintf(stderr, "\r%*s\r", 40, "");
  return times;
}

double median(std::vector<double> times) {
  if (times.empty()) return 0;
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

}  // namespace kiln::cli
