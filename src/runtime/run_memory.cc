// Choosing, per run, between recording (first run of a signature), the arena, and the heap; and
// learning from how the run went.
#include "runtime/run_memory.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace kiln::runtime {
namespace {

void append_tensor(const Tensor& t, std::vector<int64_t>& sig) {
  sig.push_back(static_cast<int64_t>(t.dtype()));
  sig.push_back(t.rank());
  sig.insert(sig.end(), t.shape().begin(), t.shape().end());
}

// Everything about the inputs that the sizes of a run's tensors may depend on, short of their data.
void signature_of(const std::vector<const Value*>& inputs, bool outputs_released,
                  std::vector<int64_t>& sig) {
  sig.clear();
  sig.push_back(outputs_released);
  for (const Value* v : inputs) {
    if (!v) {
      sig.push_back(-1);
      continue;
    }
    sig.push_back(static_cast<int64_t>(v->kind));
    sig.push_back(v->has_element);
    if (v->is_tensor() || (v->is_optional() && v->element_kind == Value::Kind::kTensor)) {
      append_tensor(v->tensor, sig);
    } else {
      sig.push_back(static_cast<int64_t>(v->sequence.size()));
      for (const Tensor& t : v->sequence) append_tensor(t, sig);
    }
  }
}

bool overlaps(const Tensor& a, const Tensor& b) {
  auto* pa = static_cast<const std::byte*>(a.raw_data());
  auto* pb = static_cast<const std::byte*>(b.raw_data());
  return pa && pb && pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

// The caller's tensor for an output, if a kernel may write it in place: numeric, 64-byte aligned
// and a whole number of 64-byte lines (the arena's rounding, which kernels may write up to), and
// sharing no byte with an input or another output.
ArenaAllocator::Bound writable_output(const std::vector<Value>& outputs, size_t i,
                                      const std::vector<const Value*>& inputs) {
  const Value& v = outputs[i];
  const Tensor& t = v.tensor;
  if (!v.is_tensor() || !t.defined() || t.dtype() == DType::kString || !t.raw_data() ||
      reinterpret_cast<uintptr_t>(t.raw_data()) % 64 != 0 || t.nbytes() == 0 || t.nbytes() % 64 != 0)
    return {};
  for (size_t j = 0; j < outputs.size(); ++j)
    if (j != i && outputs[j].is_tensor() && overlaps(t, outputs[j].tensor)) return {};
  for (const Value* in : inputs) {
    if (!in) continue;
    if (overlaps(t, in->tensor)) return {};
    for (const Tensor& e : in->sequence)
      if (overlaps(t, e)) return {};
  }
  return {std::shared_ptr<void>(t.owner(), const_cast<void*>(t.raw_data())), static_cast<int64_t>(t.nbytes())};
}

}  // namespace

RunMemory::RunMemory() = default;

RunMemory::~RunMemory() {
  stop();
  if (buffer_) buffer_->release();
}

RunMemory::Entry& RunMemory::entry_for(const std::vector<int64_t>& signature) {
  for (auto& e : entries_)
    if (e->signature == signature) return *e;
  if (entries_.size() >= kMaxSignatures) {
    auto oldest =
        std::min_element(entries_.begin(), entries_.end(),
                         [](const auto& a, const auto& b) { return a->last_used < b->last_used; });
    entries_.erase(oldest);
  }
  entries_.push_back(std::make_unique<Entry>());
  entries_.back()->signature = signature;
  return *entries_.back();
}

bool RunMemory::ensure_buffer(const MemoryPlan& plan) {
  const int64_t bytes = plan.summary.arena_bytes;
  const size_t slots = plan.offsets.size();
  if (buffer_ && buffer_->data_bytes() >= bytes && buffer_->slots() >= slots) return true;
  int64_t want_bytes = bytes;
  size_t want_slots = slots;
  if (buffer_) {
    want_bytes = std::max(want_bytes, buffer_->data_bytes());
    want_slots = std::max(want_slots, buffer_->slots());
    buffer_->release();
  }
  buffer_ = ArenaBuffer::create(want_bytes, want_slots);
  return buffer_ != nullptr;
}

void RunMemory::begin(const std::vector<const Value*>& inputs, const std::vector<Value>* into) {
  stop();
  const bool outputs_released = into != nullptr;
  if (!enabled_) {
    current_ = nullptr;
    mode_ = Mode::kHeap;
    return;
  }
  signature_of(inputs, outputs_released, signature_);
  Entry& e = entry_for(signature_);
  current_ = &e;
  e.last_used = ++clock_;
  TensorAllocator* allocator = nullptr;
  mode_ = Mode::kHeap;
  if (e.heap_only) {
    // Runs of this signature differ among themselves: the heap serves them.
  } else if (!e.plan) {
    recording_ = std::make_unique<RecordingAllocator>();
    allocator = recording_.get();
    mode_ = Mode::kRecording;
  } else if (ensure_buffer(*e.plan)) {
    const size_t given = into ? into->size() : 0;
    if (into_.size() < given) into_.resize(given);
    for (size_t i = 0; i < into_.size(); ++i) into_[i] = i < given ? writable_output(*into, i, inputs) : ArenaAllocator::Bound{};
    arena_.start(e.plan.get(), buffer_, &into_);
    allocator = &arena_;
    mode_ = Mode::kArena;
  }
  previous_ = set_thread_tensor_allocator(allocator);
  installed_ = true;
}

void RunMemory::note_outputs(const std::vector<Value>& outputs) {
  if (mode_ != Mode::kRecording || !recording_) return;
  if (into_.size() < outputs.size()) into_.resize(outputs.size());  // now, so that arena runs allocate nothing
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i].is_tensor() && outputs[i].tensor.raw_data())
      recording_->trace().mark_output(outputs[i].tensor.raw_data(), static_cast<int32_t>(i));
}

void RunMemory::stop() {
  if (!installed_) return;
  set_thread_tensor_allocator(previous_);
  installed_ = false;
}

namespace {

// Replaces a tensor in the arena by a heap copy.
void move_out(const RunMemory& memory, Tensor& t) {
  if (t.defined() && t.raw_data() && memory.in_arena(t.raw_data())) t = t.clone();
}

}  // namespace

void RunMemory::finish(std::vector<Value>* outputs, bool succeeded) {
  stop();
  if (outputs && buffer_) {
    for (Value& v : *outputs) {
      move_out(*this, v.tensor);
      for (Tensor& t : v.sequence) move_out(*this, t);
    }
  }
  if (!current_) return;
  Entry& e = *current_;
  // A tensor still in the arena now was kept by someone past the run (a kernel's cache): it keeps
  // the buffer, and the next run gets a new one.
  const bool escaped = buffer_ && buffer_->references() > 1;
  if (escaped) {
    buffer_->release();
    buffer_ = nullptr;
  }
  switch (mode_) {
    case Mode::kRecording: {
      std::vector<AllocationRecord> records = recording_->trace().close();
      recording_.reset();
      ++stats_.recorded_runs;
      if (succeeded) {
        e.plan = std::make_unique<MemoryPlan>(plan_memory(records));
        ++e.recordings;
        ensure_buffer(*e.plan);  // now, so that the next run allocates nothing
      }
      break;
    }
    case Mode::kArena:
      ++stats_.arena_runs;
      stats_.in_place_outputs += arena_.bound();
      for (ArenaAllocator::Bound& b : into_) b.storage.reset();
      if (arena_.strays() > 0 || escaped) {
        ++stats_.stray_runs;
        // Record again; a signature that keeps straying is left to the heap.
        if (e.recordings >= kMaxRecordings) e.heap_only = true;
        stats_.plan = e.plan->summary;
        e.plan.reset();
      }
      arena_.start(nullptr, nullptr);
      break;
    case Mode::kHeap:
      break;
  }
  if (e.plan) stats_.plan = e.plan->summary;
}

}  // namespace kiln::runtime
