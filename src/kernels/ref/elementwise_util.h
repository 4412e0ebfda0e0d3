// Small helpers shared by the elementwise reference kernels (unary, activations, binary,
// variadic, where, cast): broadcast iteration, input checks, well-defined numeric casts, and the
// float32 map on 8 lanes the common activations take.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/vec_math_avx2.h"
#include "kernels/kernel_util.h"

namespace kiln::ew {

// float16 and bfloat16: computed in float and stored back.
inline bool is_half_float(DType t) { return t == DType::kFloat16 || t == DType::kBFloat16; }
inline bool is_std_float(DType t) { return t == DType::kFloat32 || t == DType::kFloat64; }
// The four float types ordinary math ops accept.
inline bool is_math_float(DType t) { return is_std_float(t) || is_half_float(t); }

// Checks that the node has at least `min` and at most `max` inputs, all of them tensors,
// the first `min` of them present.
inline Status check_inputs(const KernelContext& ctx, size_t min, size_t max) {
  if (ctx.num_inputs() < min || ctx.num_inputs() > max) {
    std::string want =
        min == max ? std::to_string(min) : std::to_string(min) + " to " + std::to_string(max);
    return ctx.error("expected " + want + " inputs, got " + std::to_string(ctx.num_inputs()));
  }
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) {
      if (i < min) return ctx.error("input " + std::to_string(i) + " is required");
      continue;
    }
    if (!ctx.value(i).is_tensor() || !ctx.input(i).defined())
      return ctx.error("input " + std::to_string(i) + " must be a tensor");
  }
  return Status::ok();
}

inline Status check_same_dtype(const KernelContext& ctx, size_t a, size_t b) {
  DType ta = ctx.input(a).dtype(), tb = ctx.input(b).dtype();
  if (ta != tb)
    return ctx.error("inputs " + std::to_string(a) + " and " + std::to_string(b) +
                     " must have the same type, got " + dtype_name(ta) + " and " + dtype_name(tb));
  return Status::ok();
}

// Walks a broadcast a row (the output's last dim) at a time: f(first, base, len, step) with the output index of the row's first element, each input's offset there and its step
// along the row (0: broadcast, 1: contiguous), so that the caller's loop over a row vectorizes.
template <size_t N, typename F>
void for_each_broadcast_row(const Shape& out, const std::array<const Shape*, N>& in, F&& f) {
  const size_t r = out.size();
  int64_t n = 1;
  for (int64_t d : out) n *= d;
  if (n == 0) return;
  std::array<int64_t, N> base{}, step{};
  if (r == 0) {
    f(int64_t{0}, base, int64_t{1}, step);
    return;
  }
  std::array<Shape, N> st;
  for (size_t k = 0; k < N; ++k) st[k] = broadcast_strides(*in[k], out);
  const int64_t len = out[r - 1];
  for (size_t k = 0; k < N; ++k) step[k] = st[k][r - 1];
  Shape idx(r, 0);
  for (int64_t i = 0; i < n; i += len) {
    f(i, base, len, step);
    for (size_t d = r - 1; d-- > 0;) {  // the outer index (dims 0..r-2), like an odometer
      if (++idx[d] < out[d]) {
        for (size_t k = 0; k < N; ++k) base[k] += st[k][d];
        break;
      }
      for (size_t k = 0; k < N; ++k) base[k] -= st[k][d] * (out[d] - 1);
      idx[d] = 0;
    }
  }
}

// One row of a binary op for for_each_broadcast_row: out[j] = f(a[j * sa], b[j * sb]), the steps
// as constants in each branch so that each loop vectorizes.
template <typename A, typename B, typename O, typename F>
void binary_row(const A* a, int64_t sa, const B* b, int64_t sb, O* out, int64_t len, F&& f) {
  if (sa && sb) for (int64_t j = 0; j < len; ++j) out[j] = f(a[j], b[j]);
  else if (sa) for (int64_t j = 0; j < len; ++j) out[j] = f(a[j], b[0]);
  else if (sb) for (int64_t j = 0; j < len; ++j) out[j] = f(a[0], b[j]);
  else for (int64_t j = 0; j < len; ++j) out[j] = f(a[0], b[0]);
}

// Calls f(out_index, offsets) for every element of `out` in row-major order, where offsets[k]
// is the element of input k (of shape *in[k], numpy-broadcast to `out`). Shapes must broadcast.
template <size_t N, typename F>
void for_each_broadcast(const Shape& out, const std::array<const Shape*, N>& in, F&& f) {
  for_each_broadcast_row(out, in, [&](int64_t first, const std::array<int64_t, N>& base, int64_t len,
                                      const std::array<int64_t, N>& step) {
    std::array<int64_t, N> off;
    for (int64_t j = 0; j < len; ++j) {
      for (size_t k = 0; k < N; ++k) off[k] = base[k] + j * step[k];
      f(first + j, off);
    }
  });
}

// double -> integer without undefined behaviour: truncates, saturates, NaN -> 0.
template <typename T>
T saturate_to_int(double v) {
  static_assert(std::is_integral_v<T>);
  if (std::isnan(v)) return 0;
  v = std::trunc(v);
  constexpr double lo = static_cast<double>(std::numeric_limits<T>::lowest());
  // max as double may round up (int64, uint64); compare with >= so the cast stays in range.
  constexpr double hi = static_cast<double>(std::numeric_limits<T>::max());
  if (v <= lo) return std::numeric_limits<T>::lowest();
  if (v >= hi) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

// Converts a computed double to element type T: floats round, integers saturate.
template <typename T>
T from_double(double v) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(v);
  } else {
    return saturate_to_int<T>(v);
  }
}

// Bools are stored one byte each; read them as bytes so that a byte other than 0/1 in a
// tensor is not undefined behaviour.
inline bool bool_at(const Tensor& t, int64_t i) { return t.data<uint8_t>()[i] != 0; }

enum class Accept { kFloat, kSigned, kNumeric };

inline bool accepts(Accept a, DType t) {
  if (is_math_float(t)) return true;
  if (a == Accept::kFloat) return false;
  if (t == DType::kInt8 || t == DType::kInt16 || t == DType::kInt32 || t == DType::kInt64)
    return true;
  if (a == Accept::kSigned) return false;
  return t == DType::kUInt8 || t == DType::kUInt16 || t == DType::kUInt32 || t == DType::kUInt64;
}

// Runs body(begin, end) over [0, n), in parallel when the tensor is large.
template <typename B>
void run_range(KernelContext& ctx, int64_t n, B&& body) {
  constexpr int64_t kGrain = 1 << 15;
  if (ctx.pool != nullptr && n >= 4 * kGrain) {
    ctx.pool->parallel_for(n, kGrain, [&](int64_t b, int64_t e) { body(b, e); });
  } else {
    body(0, n);
  }
}

// y = f(x) elementwise with y of x's type. f is a generic lambda called with float, double or
// (when `accept` allows) an integer type; float16/bfloat16 are computed in float.
template <typename F>
Status map_unary(KernelContext& ctx, Accept accept, F f, size_t max_inputs = 1) {
  KILN_RETURN_IF_ERROR(check_inputs(ctx, 1, max_inputs));
  const Tensor& x = ctx.input(0);
  if (!accepts(accept, x.dtype()))
    return ctx.error(std::string("unsupported input type ") + dtype_name(x.dtype()));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x.dtype(), x.shape()));
  const int64_t n = x.numel();
  if (is_half_float(x.dtype())) {
    const DType t = x.dtype();
    run_range(ctx, n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        float v = static_cast<float>(load_as_double(t, x.raw_data(), i));
        store_from_double(t, y->raw_data(), i, static_cast<double>(f(v)));
      }
    });
    return Status::ok();
  }
  return visit_numeric(x.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* out = y->data<T>();
    run_range(ctx, n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[i] = static_cast<T>(f(in[i]));
    });
    return Status::ok();
  });
}

// y = f(x) for a float32 x on 8 lanes (f maps __m256 -> __m256, a few ulp from the double
// reference at most), the tail masked, large tensors split over the pool. Returns false, having
// done nothing, for any other type: the caller then runs its reference map. Inputs after the
// first (up to max_inputs, e.g. Clip's bounds) are the caller's to read.
template <typename F>
Result<bool> map_unary_f32_lanes(KernelContext& ctx, F f, size_t max_inputs = 1) {
  KILN_RETURN_IF_ERROR(check_inputs(ctx, 1, max_inputs));
  const Tensor& x = ctx.input(0);
  if (x.dtype() != DType::kFloat32) return false;
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, x.shape()));
  const float* in = x.data<float>();
  float* out = y->data<float>();
  run_range(ctx, x.numel(), [&](int64_t b, int64_t e) {
    int64_t i = b;
    for (; i + 8 <= e; i += 8) _mm256_storeu_ps(out + i, f(_mm256_loadu_ps(in + i)));
    if (i < e) {
      const __m256i m = vec::tail_mask_avx2(static_cast<int>(e - i));
      _mm256_maskstore_ps(out + i, m, f(_mm256_maskload_ps(in + i, m)));
    }
  });
  return true;
}

}  // namespace kiln::ew
