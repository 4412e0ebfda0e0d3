// Where a run's tensors get their storage: RecordingAllocator takes it from the heap and records
// each allocation's size and lifetime (the input of plan_memory); ArenaAllocator serves a later
// run of the same shapes from one ArenaBuffer at the planned offsets, allocating nothing.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "kiln/tensor.h"
#include "runtime/memory_plan.h"

namespace kiln::runtime {

// Activation memory, and one tensor control block per allocation slot so that a tensor handed out
// costs no heap allocation. Counted by hand: the runtime holds one reference and each tensor handed
// out another, and whoever lets go last frees it — a tensor kept past its run stays valid.
// Thread safety: hand_out on one thread at a time; tensors may be released on any thread.
class ArenaBuffer {
 public:
  // nullptr when the memory is not there.
  static ArenaBuffer* create(int64_t data_bytes, size_t slots);
  ArenaBuffer(const ArenaBuffer&) = delete;
  ArenaBuffer& operator=(const ArenaBuffer&) = delete;

  int64_t data_bytes() const { return data_bytes_; }
  size_t slots() const { return slots_.size(); }
  bool contains(const void* p) const {
    auto* b = static_cast<const std::byte*>(p);
    return b >= data_ && b < data_ + data_bytes_;
  }
  // True while the tensor handed out in `slot` is alive.
  bool live(size_t slot) const { return slots_[slot].live.load(std::memory_order_acquire); }
  // An owner for `bytes` at `offset`; `slot` must not be live.
  std::shared_ptr<void> hand_out(size_t slot, int64_t offset, int64_t bytes);
  // References: the runtime's one plus a live tensor's each.
  int64_t references() const { return refs_.load(std::memory_order_acquire); }
  // Gives up the runtime's reference.
  void release() { unref(); }

 private:
  static constexpr size_t kControlBytes = 64;  // a shared_ptr control block with our deleter
  struct Slot {
    alignas(16) unsigned char control[kControlBytes];
    std::atomic<bool> live{false};
    int64_t offset = 0, bytes = 0;
  };
  template <typename T>
  struct SlotAllocator;
  struct SlotDeleter;

  ArenaBuffer(std::byte* data, int64_t data_bytes, size_t slots);
  ~ArenaBuffer();
  void unref();
  void died(size_t slot);

  std::byte* data_;
  int64_t data_bytes_;
  std::vector<Slot> slots_;
  std::atomic<int64_t> refs_{1};
};

// The allocations of a run, as plan_memory wants them. Thread safety: allocations are recorded on
// the running thread, releases on any.
class AllocationTrace {
 public:
  // Stops recording: releases after this are not the run's.
  std::vector<AllocationRecord> close();
  // Notes that the live allocation at `data`, if any, holds graph output `output` (the first
  // output noted keeps it: an output aliasing another).
  void mark_output(const void* data, int32_t output);

 private:
  friend class RecordingAllocator;
  std::mutex mu_;
  std::vector<AllocationRecord> records_;
  std::vector<const void*> data_;  // per record, its storage
  int64_t clock_ = 0;
  bool open_ = true;
};

// Heap storage, each allocation recorded in the trace with its lifetime.
class RecordingAllocator : public TensorAllocator {
 public:
  RecordingAllocator() : trace_(std::make_shared<AllocationTrace>()) {}
  std::shared_ptr<void> allocate(size_t bytes) override;
  AllocationTrace& trace() { return *trace_; }

 private:
  std::shared_ptr<AllocationTrace> trace_;  // shared with the deleters of the tensors it made
};

// The k-th allocation of a run gets the k-th allocation of the plan, when its size is the one
// recorded and every earlier tensor whose bytes it reuses has been released; anything else (a run
// that strays from the recorded one: data-dependent shapes, another If branch) goes to the heap.
// So a stray run is slower, never wrong.
//
// An allocation that held graph output j in the recorded run gets outputs[j], when the caller of
// run_into gave a tensor of exactly its bytes: the kernel then writes the caller's tensor in place
// (a segmentation model's 22 MB output was copied out after every run, single-threaded: 7 % of
// lraspp's time). Should it not hold output j this run, run_into still copies output j in.
class ArenaAllocator : public TensorAllocator {
 public:
  struct Bound {
    std::shared_ptr<void> storage;  // null: the caller's tensor for this output cannot be used
    int64_t bytes = 0;
  };
  void start(const MemoryPlan* plan, ArenaBuffer* buffer, const std::vector<Bound>* outputs = nullptr) {
    plan_ = plan;
    buffer_ = buffer;
    outputs_ = outputs;
    next_ = 0;
    strays_ = 0;
    bound_ = 0;
  }
  std::shared_ptr<void> allocate(size_t bytes) override;
  // Allocations that did not match the plan, this run.
  int64_t strays() const { return strays_; }
  // Allocations given a caller's output tensor, this run.
  int64_t bound() const { return bound_; }

 private:
  const MemoryPlan* plan_ = nullptr;
  ArenaBuffer* buffer_ = nullptr;
  const std::vector<Bound>* outputs_ = nullptr;
  size_t next_ = 0;
  int64_t strays_ = 0;
  int64_t bound_ = 0;
};

}  // namespace kiln::runtime
