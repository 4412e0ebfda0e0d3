// Tensor storage: aligned allocation with size checks before anything is allocated.
#include "kiln/tensor.h"

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

Result<Tensor> Tensor::make(DType dtype, Shape shape) {
  KILN_ASSIGN_OR_RETURN(int64_t n, shape_numel(shape));
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = n;
  if (dtype == DType::kString) {
    if (n > kMaxTensorBytes / static_cast<int64_t>(sizeof(std::string)))
      return Status::error("string tensor of shape " + shape_str(t.shape_) + " is too large");
    auto* strings = new std::string[n ? n : 1];
    t.owner_ = std::shared_ptr<std::string>(strings, std::default_delete<std::string[]>());
    t.data_ = strings;
    return t;
  }
  const size_t elem = dtype_size(dtype);
  if (elem == 0) return Status::error(std::string("cannot allocate a tensor of type ") + dtype_name(dtype));
  if (n > kMaxTensorBytes / static_cast<int64_t>(elem))
    return Status::error("tensor of shape " + shape_str(t.shape_) + " and type " + dtype_name(dtype) +
                         " needs " + std::to_string(static_cast<double>(n) * elem / (1 << 30)) +
                         " GiB, over the limit of " + std::to_string(kMaxTensorBytes / double(int64_t{1} << 30)) + " GiB");
  const size_t bytes = ((n * elem + 63) / 64) * 64;
  void* p = std::aligned_alloc(64, bytes ? bytes : 64);
  if (!p) return Status::error("out of memory allocating " + std::to_string(bytes) + " bytes");
  std::memset(p, 0, bytes ? bytes : 64);
  t.owner_ = std::shared_ptr<void>(p, std::free);
  t.data_ = p;
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
