// Tensor storage: aligned allocation with size checks before anything is allocated.
#include "kiln/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace kiln {

Result<int64_t> shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return Status::error("negative dimension " + std::to_string(d) + " in shape " + shape_str(shape));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      return Status::error("shape " + shape_str(shape) + " overflows the element count");
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t tensor_byte_limit() {
  static const int64_t limit = [] {
    const char* env = std::getenv("KILN_MAX_TENSOR_BYTES");
    const long long v = env ? std::strtoll(env, nullptr, 10) : 0;
    return v > 0 && v < kMaxTensorBytes ? static_cast<int64_t>(v) : kMaxTensorBytes;
  }();
  return limit;
}

Status check_tensor_size(DType dtype, const Shape& shape, int64_t numel) {
  const int64_t elem = dtype == DType::kString ? static_cast<int64_t>(sizeof(std::string))
                                               : std::max<int64_t>(static_cast<int64_t>(dtype_size(dtype)), 1);
  if (numel <= tensor_byte_limit() / elem) return Status::ok();
  const double gib = double(int64_t{1} << 30);
  return Status::error("tensor of shape " + shape_str(shape) + " and type " + dtype_name(dtype) + " needs " +
                       std::to_string(static_cast<double>(numel) * elem / gib) + " GiB, over the limit of " +
                       std::to_string(tensor_byte_limit() / gib) + " GiB");
}

namespace {
thread_local TensorAllocator* t_allocator = nullptr;
}

TensorAllocator* set_thread_tensor_allocator(TensorAllocator* allocator) {
  TensorAllocator* previous = t_allocator;
  t_allocator = allocator;
  return previous;
}

namespace {
// What a tensor of `bytes` gets: whole 64-byte lines, at least one.
size_t storage_bytes(size_t bytes) { return std::max<size_t>((bytes + 63) / 64 * 64, 64); }
}  // namespace

Result<Tensor> Tensor::make(DType dtype, Shape shape) {
  KILN_ASSIGN_OR_RETURN(Tensor t, make_for_overwrite(dtype, std::move(shape)));
  if (t.dtype_ != DType::kString) std::memset(t.data_, 0, storage_bytes(t.nbytes()));
  return t;
}

Result<Tensor> Tensor::make_for_overwrite(DType dtype, Shape shape) {
  KILN_ASSIGN_OR_RETURN(int64_t n, shape_numel(shape));
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = n;
  KILN_RETURN_IF_ERROR(check_tensor_size(dtype, t.shape_, n));
  if (dtype == DType::kString) {
    auto* strings = new std::string[n ? n : 1];
    t.owner_ = std::shared_ptr<std::string>(strings, std::default_delete<std::string[]>());
    t.data_ = strings;
    return t;
  }
  const size_t elem = dtype_size(dtype);
  if (elem == 0) return Status::error(std::string("cannot allocate a tensor of type ") + dtype_name(dtype));
  const size_t bytes = storage_bytes(n * elem);
  if (t_allocator) t.owner_ = t_allocator->allocate(bytes);
  if (!t.owner_) {
    void* p = std::aligned_alloc(64, bytes);
    if (!p) return Status::error("out of memory allocating " + std::to_string(bytes) + " bytes");
    t.owner_ = std::shared_ptr<void>(p, std::free);
  }
  t.data_ = t.owner_.get();
  static const bool poison = [] {
    const char* v = std::getenv("KILN_POISON_UNWRITTEN");
    return v != nullptr && v[0] == '1';
  }();
  if (poison) std::memset(t.data_, 0xFF, bytes);
  return t;
}

Tensor Tensor::wrap(DType dtype, Shape shape, void* data, std::shared_ptr<void> owner) {
  Tensor t;
  t.dtype_ = dtype;
  t.numel_ = shape_numel(shape).value();
  t.shape_ = std::move(shape);
  t.data_ = data;
  t.owner_ = std::move(owner);
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::clone() const {
  if (!defined()) return Tensor();
  Tensor t = make(dtype_, shape_).value();
  if (dtype_ == DType::kString) {
    for (int64_t i = 0; i < numel_; ++i) t.data<std::string>()[i] = data<std::string>()[i];
  } else if (numel_) {
    std::memcpy(t.data_, data_, nbytes());
  }
  return t;
}

}  // namespace kiln
