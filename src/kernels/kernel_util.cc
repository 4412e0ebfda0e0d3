// Broadcasting and small readers shared by kernels.
#include "kernels/kernel_util.h"

#include <algorithm>

namespace kiln {

Result<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      return Status::error("shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Result<Shape> broadcast_shapes(const std::vector<Shape>& shapes) {
  Shape out;
  for (const Shape& s : shapes) {
    KILN_ASSIGN_OR_RETURN(out, broadcast_shapes(out, s));
  }
  return out;
}

Shape strides_of(const Shape& shape) {
  Shape s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

Shape broadcast_strides(const Shape& in_shape, const Shape& out_shape) {
  const size_t r = out_shape.size(), off = r - in_shape.size();
  const Shape in_strides = strides_of(in_shape);
  Shape out(r, 0);
  for (size_t i = off; i < r; ++i) out[i] = in_shape[i - off] == 1 ? 0 : in_strides[i - off];
  return out;
}

namespace {

// broadcast_offsets into any vector-like container.
template <typename Offsets>
void fill_broadcast_offsets(const Shape& in_shape, const Shape& out_shape, Offsets& offsets) {
  const Shape bs = broadcast_strides(in_shape, out_shape);
  int64_t n = 1;
  for (int64_t d : out_shape) n *= d;
  offsets.resize(n);
  Shape idx(out_shape.size(), 0);
  int64_t cur = 0;
  for (int64_t i = 0; i < n; ++i) {
    offsets[i] = cur;
    for (size_t d = out_shape.size(); d-- > 0;) {
      if (++idx[d] < out_shape[d]) {
        cur += bs[d];
        break;
      }
      cur -= bs[d] * (out_shape[d] - 1);
      idx[d] = 0;
    }
  }
}

}  // namespace

std::vector<int64_t> broadcast_offsets(const Shape& in_shape, const Shape& out_shape) {
  std::vector<int64_t> offsets;
  fill_broadcast_offsets(in_shape, out_shape, offsets);
  return offsets;
}

Shape broadcast_offsets_small(const Shape& in_shape, const Shape& out_shape) {
  Shape offsets;
  fill_broadcast_offsets(in_shape, out_shape, offsets);
  return offsets;
}

Result<int64_t> normalize_axis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return Status::error("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

Result<std::vector<int64_t>> read_int64s(const Tensor& t) {
  std::vector<int64_t> v(t.numel());
  if (t.dtype() == DType::kInt64) {
    std::copy(t.data<int64_t>(), t.data<int64_t>() + t.numel(), v.begin());
  } else if (t.dtype() == DType::kInt32) {
    std::copy(t.data<int32_t>(), t.data<int32_t>() + t.numel(), v.begin());
  } else {
    return Status::error(std::string("expected an int32 or int64 tensor, got ") + dtype_name(t.dtype()));
  }
  return v;
}

Result<double> read_scalar(const Tensor& t) {
  if (t.numel() != 1)
    return Status::error("expected a single value, got shape " + shape_str(t.shape()));
  if (t.dtype() == DType::kString || t.dtype() == DType::kUndefined)
    return Status::error(std::string("expected a numeric scalar, got ") + dtype_name(t.dtype()));
  return load_as_double(t.dtype(), t.raw_data(), 0);
}

bool all_zero(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (load_as_double(t.dtype(), t.raw_data(), i) != 0) return false;
  return true;
}

Result<Tensor> to_float32(const Tensor& t) {
  if (t.dtype() == DType::kFloat32) return t;
  KILN_ASSIGN_OR_RETURN(Tensor out, Tensor::make(DType::kFloat32, t.shape()));
  for (int64_t i = 0; i < t.numel(); ++i)
    out.data<float>()[i] = static_cast<float>(load_as_double(t.dtype(), t.raw_data(), i));
  return out;
}

Result<Tensor> cast_float_to(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  KILN_ASSIGN_OR_RETURN(Tensor out, Tensor::make(dtype, t.shape()));
  for (int64_t i = 0; i < t.numel(); ++i)
    store_from_double(dtype, out.raw_data(), i, load_as_double(t.dtype(), t.raw_data(), i));
  return out;
}

}  // namespace kiln
