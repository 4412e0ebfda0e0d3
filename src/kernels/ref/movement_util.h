// Small helpers shared by the reference shape and data-movement kernels (shape_ops.cc, slice.cc,
// gather.cc, ...): input checks with node-named errors, int-list inputs, multi-index iteration.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/kernel_util.h"

namespace kiln::movement {

// Inputs [0, count) are present tensors; optional inputs past them are checked where read.
inline Status require_inputs(const KernelContext& ctx, size_t count) {
  if (ctx.num_inputs() < count)
    return ctx.error("expected at least " + std::to_string(count) + " inputs, got " +
                     std::to_string(ctx.num_inputs()));
  for (size_t i = 0; i < count; ++i) {
    if (!ctx.has_input(i)) return ctx.error("input " + std::to_string(i) + " is missing");
    if (!ctx.value(i).is_tensor())
      return ctx.error("input " + std::to_string(i) + " must be a tensor");
  }
  return Status::ok();
}

// True when optional input i is present; an error when it is present but not a tensor.
inline Result<bool> optional_input(const KernelContext& ctx, size_t i) {
  if (!ctx.has_input(i)) return false;
  if (!ctx.value(i).is_tensor())
    return ctx.error("input " + std::to_string(i) + " must be a tensor");
  return true;
}

// An int32/int64 input as int64 values (a Shape: inline, no allocation, for up to 8 of them).
inline Result<Shape> read_ints(const KernelContext& ctx, size_t i, const char* what) {
  const Tensor& t = ctx.input(i);
  Shape v;
  if (t.dtype() == DType::kInt64) {
    v.assign(t.data<int64_t>(), t.data<int64_t>() + t.numel());
  } else if (t.dtype() == DType::kInt32) {
    v.assign(t.data<int32_t>(), t.data<int32_t>() + t.numel());
  } else {
    return ctx.error(std::string("input '") + what + "': expected an int32 or int64 tensor, got " +
                     dtype_name(t.dtype()));
  }
  return v;
}

// A single int32/int64 value of input i.
inline Result<int64_t> read_int(const KernelContext& ctx, size_t i, const char* what) {
  KILN_ASSIGN_OR_RETURN(Shape v, read_ints(ctx, i, what));
  if (v.size() != 1)
    return ctx.error(std::string("input '") + what + "' must hold one value, got shape " +
                     shape_str(ctx.input(i).shape()));
  return v[0];
}

inline Result<int64_t> axis_of(const KernelContext& ctx, int64_t axis, int64_t rank) {
  auto r = normalize_axis(axis, rank);
  if (!r) return ctx.error(r.status().message());
  return r;
}

// Axes normalised to [0, rank), rejecting out-of-range and repeated ones.
inline Result<Shape> axes_of(const KernelContext& ctx, const Shape& axes, int64_t rank) {
  Shape out;
  for (int64_t a : axes) {
    KILN_ASSIGN_OR_RETURN(int64_t n, axis_of(ctx, a, rank));
    if (std::find(out.begin(), out.end(), n) != out.end())
      return ctx.error("axis " + std::to_string(a) + " is repeated");
    out.push_back(n);
  }
  return out;
}

// Advances a row-major multi-index over `shape`; false after the last index.
template <typename Index>  // Shape or std::vector<int64_t>
bool next_index(Index& idx, const Shape& shape) {
  for (size_t d = shape.size(); d-- > 0;) {
    if (++idx[d] < shape[d]) return true;
    idx[d] = 0;
  }
  return false;
}

inline int64_t product(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= s[i];
  return p;
}

// Fills every element of `dst` from `src`: for each output multi-index, in row-major order,
// source_offset(idx) gives the row-major element offset in `src`, or -1 to leave the element as
// it is. Works for every element type (strings included); src and dst must have the same dtype.
template <typename F>
Status gather_by_index(const Tensor& src, Tensor* dst, F&& source_offset) {
  if (dst->numel() == 0) return Status::ok();
  return visit_any(src.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* in = src.data<T>();
    T* out = dst->data<T>();
    Shape idx(dst->rank(), 0);
    int64_t i = 0;
    do {
      const int64_t s = source_offset(idx);
      if (s >= 0) out[i] = in[s];
      ++i;
    } while (next_index(idx, dst->shape()));
    return Status::ok();
  });
}

// Sets every element of `dst` to element `offset` of `src` (same dtype).
inline Status fill_from(const Tensor& src, int64_t offset, Tensor* dst) {
  return visit_any(src.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T v = src.data<T>()[offset];
    T* out = dst->data<T>();
    for (int64_t i = 0; i < dst->numel(); ++i) out[i] = v;
    return Status::ok();
  });
}

}  // namespace kiln::movement
