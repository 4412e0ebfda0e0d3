// The arena buffer's hand-made reference count and control-block slots, and the two allocators.
#include "runtime/arena.h"

#include <cstdlib>
#include <new>

#if defined(__SANITIZE_ADDRESS__)
#define KILN_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_ASAN 1
#endif
#endif
#ifdef KILN_ASAN
#include <sanitizer/asan_interface.h>
// A released tensor's bytes are poisoned until they are handed out again, so that AddressSanitizer
// reports a kernel reading a tensor after its release as it would for heap memory.
#define KILN_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define KILN_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define KILN_POISON(p, n) ((void)(p), (void)(n))
#define KILN_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace kiln::runtime {

// The control block of a tensor handed out lives in its slot; freeing it gives up the tensor's
// reference to the buffer. It is the last thing shared_ptr touches, so the buffer may go with it.
template <typename T>
struct ArenaBuffer::SlotAllocator {
  using value_type = T;
  ArenaBuffer* buffer;
  size_t slot;
  SlotAllocator(ArenaBuffer* b, size_t s) : buffer(b), slot(s) {}
  template <typename U>
  SlotAllocator(const SlotAllocator<U>& o) : buffer(o.buffer), slot(o.slot) {}  // NOLINT: rebind
  T* allocate(size_t n) {
    static_assert(sizeof(T) <= kControlBytes && alignof(T) <= 16,
                  "control block does not fit its slot");
    (void)n;  // always 1: shared_ptr allocates one control block
    return reinterpret_cast<T*>(buffer->slots_[slot].control);
  }
  void deallocate(T*, size_t) { buffer->unref(); }
  template <typename U>
  bool operator==(const SlotAllocator<U>& o) const {
    return buffer == o.buffer && slot == o.slot;
  }
};

struct ArenaBuffer::SlotDeleter {
  ArenaBuffer* buffer;
  size_t slot;
  void operator()(void*) const { buffer->died(slot); }
};

ArenaBuffer* ArenaBuffer::create(int64_t data_bytes, size_t slots) {
  data_bytes = std::max<int64_t>((data_bytes + 63) / 64 * 64, 64);
  void* data = std::aligned_alloc(64, static_cast<size_t>(data_bytes));
  if (!data) return nullptr;
  auto* b = new (std::nothrow) ArenaBuffer(static_cast<std::byte*>(data), data_bytes, slots);
  if (!b) std::free(data);
  return b;
}

ArenaBuffer::ArenaBuffer(std::byte* data, int64_t data_bytes, size_t slots)
    : data_(data), data_bytes_(data_bytes), slots_(slots) {
  KILN_POISON(data_, data_bytes_);
}

ArenaBuffer::~ArenaBuffer() {
  KILN_UNPOISON(data_, data_bytes_);
  std::free(data_);
}

std::shared_ptr<void> ArenaBuffer::hand_out(size_t slot, int64_t offset, int64_t bytes) {
  Slot& s = slots_[slot];
  s.offset = offset;
  s.bytes = bytes;
  KILN_UNPOISON(data_ + offset, bytes);
  s.live.store(true, std::memory_order_relaxed);
  refs_.fetch_add(1, std::memory_order_relaxed);
  return std::shared_ptr<void>(data_ + offset, SlotDeleter{this, slot},
                               SlotAllocator<char>(this, slot));
}

void ArenaBuffer::died(size_t slot) {
  Slot& s = slots_[slot];
  KILN_POISON(data_ + s.offset, s.bytes);
  s.live.store(false, std::memory_order_release);
}

void ArenaBuffer::unref() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

std::vector<AllocationRecord> AllocationTrace::close() {
  std::lock_guard<std::mutex> lock(mu_);
  open_ = false;
  return std::move(records_);
}

void AllocationTrace::mark_output(const void* data, int32_t output) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t k = 0; k < records_.size(); ++k)
    if (data_[k] == data && records_[k].death < 0) {
      if (records_[k].output < 0) records_[k].output = output;
      return;
    }
}

std::shared_ptr<void> RecordingAllocator::allocate(size_t bytes) {
  void* p = std::aligned_alloc(64, bytes);
  if (!p) return {};
  AllocationTrace& t = *trace_;
  size_t index;
  {
    std::lock_guard<std::mutex> lock(t.mu_);
    index = t.records_.size();
    t.records_.push_back({static_cast<int64_t>(bytes), t.clock_++, -1, -1});
    t.data_.push_back(p);
  }
  return std::shared_ptr<void>(p, [trace = trace_, index](void* q) {
    std::free(q);
    std::lock_guard<std::mutex> lock(trace->mu_);
    if (trace->open_) trace->records_[index].death = trace->clock_++;
  });
}

std::shared_ptr<void> ArenaAllocator::allocate(size_t bytes) {
  const size_t k = next_++;
  if (!plan_ || k >= plan_->offsets.size() ||
      (static_cast<int64_t>(bytes) + 63) / 64 * 64 != plan_->bytes[k]) {
    ++strays_;
    return {};
  }
  if (plan_->offsets[k] < 0) return {};  // an output, or another tensor the run does not release
  if (outputs_ && plan_->output[k] >= 0 && static_cast<size_t>(plan_->output[k]) < outputs_->size()) {
    const Bound& o = (*outputs_)[static_cast<size_t>(plan_->output[k])];
    if (o.storage && o.bytes == plan_->bytes[k]) {
      ++bound_;
      return o.storage;
    }
  }
  for (int32_t i = plan_->overlapped_begin[k]; i < plan_->overlapped_begin[k + 1]; ++i) {
    if (buffer_->live(plan_->overlapped[i])) {
      ++strays_;
      return {};
    }
  }
  return buffer_->hand_out(k, plan_->offsets[k], plan_->bytes[k]);
}

}  // namespace kiln::runtime
