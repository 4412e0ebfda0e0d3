// Helpers every kernel family uses: type dispatch, broadcasting, axes, reading shape-like inputs.
#pragma once

#include <string>
#include <type_traits>
#include <vector>

#include "core/float_convert.h"
#include "kernels/kernel.h"

namespace kiln {

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) with the C++ type of a numeric dtype (float, double, int8..int64,
// uint8..uint64). Returns an error for other types (float16, bool, string, ...).
template <typename F>
Status visit_numeric(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32: return f(TypeTag<float>{});
    case DType::kFloat64: return f(TypeTag<double>{});
    case DType::kInt8: return f(TypeTag<int8_t>{});
    case DType::kInt16: return f(TypeTag<int16_t>{});
    case DType::kInt32: return f(TypeTag<int32_t>{});
    case DType::kInt64: return f(TypeTag<int64_t>{});
    case DType::kUInt8: return f(TypeTag<uint8_t>{});
    case DType::kUInt16: return f(TypeTag<uint16_t>{});
    case DType::kUInt32: return f(TypeTag<uint32_t>{});
    case DType::kUInt64: return f(TypeTag<uint64_t>{});
    default: return Status::error(std::string("unsupported element type ") + dtype_name(t));
  }
}

// Like visit_numeric, plus bool (as bool), float16/bfloat16/float8/int4 (as their structs in
// kiln/dtype.h) and string: for kernels that only move elements around.
template <typename F>
Status visit_any(DType t, F&& f) {
  switch (t) {
    case DType::kBool: return f(TypeTag<bool>{});
    case DType::kFloat16: return f(TypeTag<Float16>{});
    case DType::kBFloat16: return f(TypeTag<BFloat16>{});
    case DType::kFloat8E4M3FN: return f(TypeTag<Float8E4M3FN>{});
    case DType::kFloat8E4M3FNUZ: return f(TypeTag<Float8E4M3FNUZ>{});
    case DType::kFloat8E5M2: return f(TypeTag<Float8E5M2>{});
    case DType::kFloat8E5M2FNUZ: return f(TypeTag<Float8E5M2FNUZ>{});
    case DType::kUInt4: return f(TypeTag<UInt4>{});
    case DType::kInt4: return f(TypeTag<Int4>{});
    case DType::kString: return f(TypeTag<std::string>{});
    default: return visit_numeric(t, std::forward<F>(f));
  }
}

// Numpy-style broadcast of two shapes, or an error naming both.
Result<Shape> broadcast_shapes(const Shape& a, const Shape& b);
Result<Shape> broadcast_shapes(const std::vector<Shape>& shapes);

// Row-major strides (in elements).
Shape strides_of(const Shape& shape);

// For each element of `out_shape` (row-major), the offset of the matching element of an input
// of shape `in_shape` broadcast to it. Precomputed once; used by elementwise kernels.
std::vector<int64_t> broadcast_offsets(const Shape& in_shape, const Shape& out_shape);
// The same in a Shape, which holds up to 8 offsets without allocating: for a few matrices of a
// batch, not the elements of a tensor.
Shape broadcast_offsets_small(const Shape& in_shape, const Shape& out_shape);

// Strides of `in_shape` aligned to the rank of `out_shape`, 0 on broadcast dims.
Shape broadcast_strides(const Shape& in_shape, const Shape& out_shape);

// Axis in [-rank, rank) to [0, rank), or an error.
Result<int64_t> normalize_axis(int64_t axis, int64_t rank);

// The values of an int32/int64 tensor (e.g. a shape, axes, pads input) as int64.
Result<std::vector<int64_t>> read_int64s(const Tensor& t);
// The single value of a scalar (or 1-element) tensor of any numeric type, as double.
Result<double> read_scalar(const Tensor& t);
// Whether every value of a numeric tensor is 0 (zero points that subtract nothing).
bool all_zero(const Tensor& t);

// Float copy of a float16/bfloat16/float32/float64 tensor (same shape), for kernels that compute
// in float and write back with `cast_float_to`.
Result<Tensor> to_float32(const Tensor& t);
Result<Tensor> cast_float_to(const Tensor& t, DType dtype);

}  // namespace kiln
