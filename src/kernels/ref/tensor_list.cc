// Axis-wise slicing and joining of tensors of any element type.
#include "kernels/ref/tensor_list.h"

#include <cstring>
#include <string>

namespace kiln {
namespace {

// Copies n elements; strings are copied as objects, the rest as bytes.
void copy_elements(Tensor& dst, int64_t dst_off, const Tensor& src, int64_t src_off, int64_t n) {
  if (src.dtype() == DType::kString) {
    for (int64_t i = 0; i < n; ++i) dst.data<std::string>()[dst_off + i] = src.data<std::string>()[src_off + i];
    return;
  }
  const size_t e = dtype_size(src.dtype());
  std::memcpy(static_cast<char*>(dst.raw_data()) + dst_off * e,
              static_cast<const char*>(src.raw_data()) + src_off * e, n * e);
}

int64_t prod(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= s[i];
  return p;
}

}  // namespace

Result<Tensor> join_tensors(const std::vector<Tensor>& parts, int64_t axis, bool new_axis) {
  if (parts.empty()) return Status::error("nothing to join");
  const Shape& first = parts[0].shape();
  const int64_t rank = static_cast<int64_t>(first.size()) + (new_axis ? 1 : 0);
  if (axis < -rank || axis >= rank) return Status::error("axis " + std::to_string(axis) + " out of range");
  if (axis < 0) axis += rank;
  int64_t total = 0;
  for (const Tensor& p : parts) {
    if (p.dtype() != parts[0].dtype()) return Status::error("cannot join tensors of different types");
    if (p.rank() != static_cast<int64_t>(first.size()))
      return Status::error("cannot join tensors of shapes " + shape_str(first) + " and " + shape_str(p.shape()));
    for (size_t d = 0; d < first.size(); ++d)
      if ((new_axis || static_cast<int64_t>(d) != axis) && p.dim(d) != first[d])
        return Status::error("cannot join tensors of shapes " + shape_str(first) + " and " + shape_str(p.shape()));
    total += new_axis ? 1 : p.dim(axis);
  }
  Shape out_shape = first;
  if (new_axis) out_shape.insert(out_shape.begin() + axis, total);
  else out_shape[axis] = total;
  KILN_ASSIGN_OR_RETURN(Tensor out, Tensor::make(parts[0].dtype(), out_shape));
  const int64_t outer = prod(out_shape, 0, axis);
  const int64_t inner = prod(out_shape, axis + 1, out_shape.size());
  int64_t offset = 0;  // position along the axis
  for (const Tensor& p : parts) {
    const int64_t len = new_axis ? 1 : p.dim(axis);
    for (int64_t o = 0; o < outer; ++o)
      copy_elements(out, (o * total + offset) * inner, p, o * len * inner, len * inner);
    offset += len;
  }
  return out;
}

Result<Tensor> take_range(const Tensor& t, int64_t axis, int64_t begin, int64_t end) {
  if (axis < 0 || axis >= t.rank()) return Status::error("axis " + std::to_string(axis) + " out of range");
  if (begin < 0 || end > t.dim(axis) || begin > end) return Status::error("slice out of range");
  Shape s = t.shape();
  s[axis] = end - begin;
  KILN_ASSIGN_OR_RETURN(Tensor out, Tensor::make(t.dtype(), s));
  const int64_t outer = prod(t.shape(), 0, axis), inner = prod(t.shape(), axis + 1, t.shape().size());
  const int64_t len = end - begin;
  for (int64_t o = 0; o < outer; ++o)
    copy_elements(out, o * len * inner, t, (o * t.dim(axis) + begin) * inner, len * inner);
  return out;
}

Result<Tensor> take_slice(const Tensor& t, int64_t axis, int64_t index, bool keep_axis) {
  KILN_ASSIGN_OR_RETURN(Tensor out, take_range(t, axis, index, index + 1));
  if (keep_axis) return out;
  Shape s = t.shape();
  s.erase(s.begin() + axis);
  return out.reshaped(s);
}

}  // namespace kiln
