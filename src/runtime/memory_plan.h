// The static memory plan of one input-shape signature: every tensor allocation a run made, in
// order, with its size and lifetime, placed at an offset of one arena so that tensors whose
// lifetimes overlap never share bytes (greedy by size, as TFLite's and ONNX Runtime's planners do).
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::runtime {

// One Tensor::make of a recorded run. Times are ticks of one clock that advances at every
// allocation and every release, so lifetimes are half-open intervals [birth, death).
struct AllocationRecord {
  int64_t bytes = 0;
  int64_t birth = 0;
  int64_t death = -1;  // -1: still alive when the run ended (an output, or kept by someone)
  int32_t output = -1;  // the graph output it held when the run ended (a run_into), or -1
};

struct MemoryPlan {
  // Per allocation, in the order of the run: offset in the arena, or -1 to take it from the heap
  // (those that outlived the run).
  std::vector<int64_t> offsets;
  std::vector<int64_t> bytes;
  // Per allocation, the graph output it held in the recorded run, or -1: a run_into may hand it
  // the caller's tensor for that output instead of arena bytes.
  std::vector<int32_t> output;
  // Per allocation k, the allocations before it whose bytes it reuses:
  // overlapped[overlapped_begin[k] .. overlapped_begin[k+1]). Each must be released before k is
  // handed out; a run that strays from the recorded one is caught by checking that.
  std::vector<int32_t> overlapped_begin, overlapped;
  struct Summary {
    int64_t arena_bytes = 0;      // the arena's size: the peak of the plan
    int64_t peak_live_bytes = 0;  // most bytes alive at once (a lower bound for any plan)
    int64_t total_bytes = 0;      // all arena allocations added up, as if none were reused
    int64_t allocations = 0;      // all of the run's, arena and heap
    int64_t heap_bytes = 0;       // allocations that outlived the run
    int64_t heap_allocations = 0;
  } summary;
};

// Places every allocation that was released during the run; sizes are rounded up to 64 bytes.
MemoryPlan plan_memory(const std::vector<AllocationRecord>& records);

}  // namespace kiln::runtime
