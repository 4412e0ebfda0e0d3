// Tensor: an element type, a shape and shared, 64-byte aligned storage.
// Copies share storage (like a shared_ptr); clone() makes a deep copy.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/shape.h"
#include "kiln/status.h"

namespace kiln {

// The largest single tensor kiln allocates. A model asking for more (a hostile ConstantOfShape,
// a corrupt dim) gets an error instead of an allocation that would take the machine down.
inline constexpr int64_t kMaxTensorBytes = int64_t{8} << 30;

// The limit in force: kMaxTensorBytes, or less when the environment variable
// KILN_MAX_TENSOR_BYTES says so (read once, at first use; the fuzzer sets it to stay under its
// own memory limit).
int64_t tensor_byte_limit();
// An error naming the shape, type and limit when `numel` elements of `dtype` exceed the limit.
Status check_tensor_size(DType dtype, const Shape& shape, int64_t numel);

// Number of elements of a shape, or an error on a negative dim or on overflow.
Result<int64_t> shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[1,3,224,224]"

// Where Tensor::make takes storage from on the thread that installed it. The runtime installs one
// while a graph runs (its activation arena); elsewhere, and on threads without one, storage comes
// from the heap. Thread safety: allocate() is only called on the installing thread; the owners it
// returns may be released on any thread.
class TensorAllocator {
 public:
  virtual ~TensorAllocator() = default;
  // 64-byte aligned storage of at least `bytes` bytes, kept alive by the returned owner (not
  // necessarily zeroed), or an empty pointer to take it from the heap instead.
  virtual std::shared_ptr<void> allocate(size_t bytes) = 0;
};
// Installs `allocator` for Tensor::make on the calling thread (nullptr: the heap) and returns the
// one it replaces, for the caller to put back.
TensorAllocator* set_thread_tensor_allocator(TensorAllocator* allocator);

class Tensor {
 public:
  Tensor() = default;

  // Zero-initialised storage (empty strings for kString). Fails on bad or oversized shapes.
  static Result<Tensor> make(DType dtype, Shape shape);
  // Like make, but the numeric storage is left as the allocator hands it over (stale arena bytes),
  // for a writer that sets every element: zeroing first is a serial pass over memory as large as
  // the output. With KILN_POISON_UNWRITTEN=1 in the environment it is filled with NaN bytes (0xFF)
  // instead, so that tests catch an element the writer missed.
  static Result<Tensor> make_for_overwrite(DType dtype, Shape shape);
  // A view of memory someone else owns; `owner` keeps it alive. With data == nullptr, a tensor
  // with a type and shape but no data (an initializer whose data a kernel absorbed).
  static Tensor wrap(DType dtype, Shape shape, void* data, std::shared_ptr<void> owner);
  template <typename T>
  static Tensor scalar(DType dtype, T v) {
    Tensor t = make(dtype, {}).value();
    *t.data<T>() = v;
    return t;
  }

  bool defined() const { return dtype_ != DType::kUndefined; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_[i]; }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }

  void* raw_data() { return data_; }
  const void* raw_data() const { return data_; }
  // What keeps the storage alive (may be null for a wrap() of memory kept alive elsewhere).
  const std::shared_ptr<void>& owner() const { return owner_; }
  template <typename T>
  T* data() {
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(data_);
  }

  // Same storage, another shape with the same element count.
  Tensor reshaped(Shape shape) const;
  Tensor clone() const;

 private:
  DType dtype_ = DType::kUndefined;
  Shape shape_;
  int64_t numel_ = 0;
  std::shared_ptr<void> owner_;
  void* data_ = nullptr;
};

}  // namespace kiln
