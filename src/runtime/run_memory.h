// Tensor storage for a session's runs. The first run of each input-shape signature takes its
// tensors from the heap and records them; its memory plan then serves every later run of that
// signature from one arena, so that a steady-state run allocates no tensor. Plans are kept for the
// last kMaxSignatures signatures; the arena grows to the largest of them (one run at a time needs
// one). Thread safety: one run at a time, as a Session.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/value.h"
#include "runtime/arena.h"
#include "runtime/memory_plan.h"

namespace kiln::runtime {

struct MemoryStats {
  MemoryPlan::Summary plan;   // the plan of the last run's signature (zeros before one is recorded)
  int64_t arena_runs = 0;     // runs served from the arena
  int64_t recorded_runs = 0;  // runs recorded for a plan (from the heap)
  int64_t stray_runs = 0;     // runs that strayed from their plan (partly from the heap)
  int64_t in_place_outputs = 0;  // outputs written straight into run_into's tensors
};

class RunMemory {
 public:
  static constexpr size_t kMaxSignatures = 8;
  // A signature whose runs stray from what was recorded this often stays on the heap.
  static constexpr int kMaxRecordings = 3;

  RunMemory();
  ~RunMemory();
  RunMemory(const RunMemory&) = delete;
  RunMemory& operator=(const RunMemory&) = delete;

  // Disabled, every run takes its tensors from the heap and nothing is recorded.
  void set_enabled(bool enabled) { enabled_ = enabled; }

  // Before a run on `inputs` (one per graph input, null when not fed): installs this thread's
  // tensor allocator. `into`, when given, holds the tensors the caller copies the run's outputs
  // into (run_into) before finish(): the outputs then live in the arena, and a planned run writes
  // those of the caller's tensors that it can (see ArenaAllocator) in place.
  void begin(const std::vector<const Value*>& inputs, const std::vector<Value>* into);
  // After a run, while its outputs are alive: a recorded run notes which allocation became
  // which output.
  void note_outputs(const std::vector<Value>& outputs);
  // Puts back the thread's previous allocator: what is allocated next comes from the heap.
  void stop();
  // After stop(), with everything of the run but `outputs` released: an output left in the arena
  // is moved to the heap (it outlives the run), and a run that `succeeded` is learnt from (a plan
  // from a recorded run, a new recording after one that strayed from its plan).
  void finish(std::vector<Value>* outputs, bool succeeded);
  // True when `p` points into the arena.
  bool in_arena(const void* p) const { return buffer_ && buffer_->contains(p); }

  const MemoryStats& stats() const { return stats_; }

 private:
  struct Entry {
    std::vector<int64_t> signature;
    std::unique_ptr<MemoryPlan> plan;  // null until recorded
    int recordings = 0;
    bool heap_only = false;  // strayed too often: dynamic beyond its input shapes
    uint64_t last_used = 0;
  };

  Entry& entry_for(const std::vector<int64_t>& signature);
  bool ensure_buffer(const MemoryPlan& plan);

  std::vector<std::unique_ptr<Entry>> entries_;
  std::vector<int64_t> signature_;  // scratch, reused run after run
  Entry* current_ = nullptr;
  uint64_t clock_ = 0;
  ArenaBuffer* buffer_ = nullptr;  // our reference; null until a plan needs it
  std::unique_ptr<RecordingAllocator> recording_;
  ArenaAllocator arena_;
  std::vector<ArenaAllocator::Bound> into_;  // per output, the caller's storage; reused run after run
  enum class Mode { kHeap, kRecording, kArena } mode_ = Mode::kHeap;
  TensorAllocator* previous_ = nullptr;
  bool installed_ = false;
  bool enabled_ = true;
  MemoryStats stats_;
};

}  // namespace kiln::runtime
