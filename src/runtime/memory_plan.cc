// Greedy-by-size placement ("Efficient Memory Management for Deep Neural Net Inference",
// Pisarchyk and Lee 2020; TFLite's ArenaPlanner): the largest tensors are placed first, each in the
// smallest gap between the tensors already placed whose lifetimes overlap its own.
#include "runtime/memory_plan.h"

#include <algorithm>
#include <numeric>

namespace kiln::runtime {
namespace {

int64_t round_up(int64_t bytes) { return std::max<int64_t>((bytes + 63) / 64 * 64, 64); }

bool lifetimes_overlap(const AllocationRecord& a, const AllocationRecord& b) {
  return a.birth < b.death && b.birth < a.death;
}

}  // namespace

MemoryPlan plan_memory(const std::vector<AllocationRecord>& records) {
  const size_t n = records.size();
  MemoryPlan plan;
  plan.offsets.assign(n, -1);
  plan.bytes.resize(n);
  plan.output.resize(n);
  plan.summary.allocations = static_cast<int64_t>(n);
  std::vector<size_t> order;
  for (size_t k = 0; k < n; ++k) {
    plan.bytes[k] = round_up(records[k].bytes);
    plan.output[k] = records[k].output;
    if (records[k].death < 0) {
      plan.summary.heap_bytes += plan.bytes[k];
      ++plan.summary.heap_allocations;
    } else {
      order.push_back(k);
      plan.summary.total_bytes += plan.bytes[k];
    }
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return plan.bytes[a] > plan.bytes[b]; });

  std::vector<size_t> placed, conflicts;
  for (size_t k : order) {
    conflicts.clear();
    for (size_t j : placed)
      if (lifetimes_overlap(records[j], records[k])) conflicts.push_back(j);
    std::sort(conflicts.begin(), conflicts.end(),
              [&](size_t a, size_t b) { return plan.offsets[a] < plan.offsets[b]; });
    int64_t best = -1, best_gap = 0, end = 0;
    for (size_t j : conflicts) {
      const int64_t gap = plan.offsets[j] - end;
      if (gap >= plan.bytes[k] && (best < 0 || gap < best_gap)) {
        best = end;
        best_gap = gap;
      }
      end = std::max(end, plan.offsets[j] + plan.bytes[j]);
    }
    plan.offsets[k] = best >= 0 ? best : end;
    plan.summary.arena_bytes = std::max(plan.summary.arena_bytes, plan.offsets[k] + plan.bytes[k]);
    placed.push_back(k);
  }

  // Who reuses whose bytes: a sweep over the placed allocations in the order of their offsets.
  std::vector<std::vector<int32_t>> reused(n);
  std::sort(placed.begin(), placed.end(),
            [&](size_t a, size_t b) { return plan.offsets[a] < plan.offsets[b]; });
  for (size_t i = 0; i < placed.size(); ++i) {
    const size_t a = placed[i];
    const int64_t a_end = plan.offsets[a] + plan.bytes[a];
    for (size_t m = i + 1; m < placed.size() && plan.offsets[placed[m]] < a_end; ++m) {
      const size_t b = placed[m];
      reused[std::max(a, b)].push_back(static_cast<int32_t>(std::min(a, b)));
    }
  }
  plan.overlapped_begin.reserve(n + 1);
  for (size_t k = 0; k < n; ++k) {
    plan.overlapped_begin.push_back(static_cast<int32_t>(plan.overlapped.size()));
    plan.overlapped.insert(plan.overlapped.end(), reused[k].begin(), reused[k].end());
  }
  plan.overlapped_begin.push_back(static_cast<int32_t>(plan.overlapped.size()));

  // The most bytes alive at once, from the births and deaths in time order.
  std::vector<std::pair<int64_t, int64_t>> events;  // (tick, +bytes or -bytes)
  for (size_t k : placed) {
    events.emplace_back(records[k].birth, plan.bytes[k]);
    events.emplace_back(records[k].death, -plan.bytes[k]);
  }
  std::sort(events.begin(), events.end());
  int64_t live = 0;
  for (const auto& [tick, delta] : events) {
    live += delta;
    plan.summary.peak_live_bytes = std::max(plan.summary.peak_live_bytes, live);
  }
  return plan;
}

}  // namespace kiln::runtime
