// Reference Softmax, LogSoftmax and Hardmax. Opset < 13 coerces the input to 2-D at `axis`
// (default 1) and normalises over everything after it; opset >= 13 works along one axis (default
// -1). float32 runs on 8 lanes in float, along contiguous rows (the axis is the last, or legacy's
// coerced 2-D) or over 8 columns at once (another axis); Hardmax and other types run the double
// loop.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/thread_pool.h"
#include "kernels/fast_path.h"
#include "kernels/cpu/vec_math_avx2.h"
#include "kernels/kernel_util.h"

namespace kiln {
namespace {

enum class Kind { kSoftmax, kLogSoftmax, kHardmax };

// Applies the op to `len` values spaced `stride` apart.
template <typename T>
void apply(const T* x, T* y, int64_t len, int64_t stride, Kind kind) {
  T mx = -std::numeric_limits<T>::infinity();
  int64_t arg = 0;
  for (int64_t i = 0; i < len; ++i)
    if (i == 0 || x[i * stride] > mx) {
      mx = x[i * stride];
      arg = i;
    }
  if (kind == Kind::kHardmax) {
    for (int64_t i = 0; i < len; ++i) y[i * stride] = i == arg ? T(1) : T(0);
    return;
  }
  double sum = 0;
  for (int64_t i = 0; i < len; ++i) sum += std::exp(static_cast<double>(x[i * stride] - mx));
  if (kind == Kind::kSoftmax) {
    for (int64_t i = 0; i < len; ++i)
      y[i * stride] = static_cast<T>(std::exp(static_cast<double>(x[i * stride] - mx)) / sum);
  } else {
    const double lse = std::log(sum);
    for (int64_t i = 0; i < len; ++i)
      y[i * stride] = static_cast<T>(static_cast<double>(x[i * stride] - mx) - lse);
  }
}

// Softmax or LogSoftmax of one contiguous float32 row on 8 lanes: max, exp(x - max) summed in
// float (vec::exp_avx2, a few ulp), then one scaling pass. Whole vectors load and store plainly
// and only the tail is masked: vmaskmovps stores are slow on AMD (every access masked, Swin's
// 49-wide rows ran at 1.5 G elements/s).
void apply_row_f32(const float* x, float* y, int64_t len, Kind kind) {
  const int64_t full = len / 8 * 8;
  const __m256i tail = vec::tail_mask_avx2(static_cast<int>(len - full));
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 mx = ninf;
  for (int64_t i = 0; i < full; i += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(x + i));
  if (full < len)  // masked-off lanes read as -inf
    mx = _mm256_max_ps(mx, _mm256_blendv_ps(ninf, _mm256_maskload_ps(x + full, tail), _mm256_castsi256_ps(tail)));
  const __m256 m = _mm256_set1_ps(vec::hmax_avx2(mx));
  __m256 sum = _mm256_setzero_ps();
  for (int64_t i = 0; i < full; i += 8) {
    const __m256 e = vec::exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
    sum = _mm256_add_ps(sum, e);
    if (kind == Kind::kSoftmax) _mm256_storeu_ps(y + i, e);
  }
  if (full < len) {
    const __m256 e = _mm256_and_ps(vec::exp_avx2(_mm256_sub_ps(_mm256_maskload_ps(x + full, tail), m)),
                                   _mm256_castsi256_ps(tail));
    sum = _mm256_add_ps(sum, e);
    if (kind == Kind::kSoftmax) _mm256_maskstore_ps(y + full, tail, e);
  }
  const float total = vec::hsum_avx2(sum);
  if (kind == Kind::kSoftmax) {
    const __m256 inv = _mm256_set1_ps(1.0f / total);
    for (int64_t i = 0; i < full; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), inv));
    if (full < len)
      _mm256_maskstore_ps(y + full, tail, _mm256_mul_ps(_mm256_maskload_ps(y + full, tail), inv));
  } else {
    const __m256 shift = _mm256_add_ps(m, _mm256_set1_ps(std::log(total)));
    for (int64_t i = 0; i < full; i += 8) _mm256_storeu_ps(y + i, _mm256_sub_ps(_mm256_loadu_ps(x + i), shift));
    if (full < len)
      _mm256_maskstore_ps(y + full, tail, _mm256_sub_ps(_mm256_maskload_ps(x + full, tail), shift));
  }
}

// Softmax or LogSoftmax down 8 columns of a [len, inner] block from x (masked by k when
// kMasked).
template <bool kMasked>
void columns8_f32(const float* x, float* y, int64_t len, int64_t inner, Kind kind, __m256i k) {
  auto load = [&](const float* p) { return kMasked ? _mm256_maskload_ps(p, k) : _mm256_loadu_ps(p); };
  auto store = [&](float* p, __m256 v) {
    if constexpr (kMasked) _mm256_maskstore_ps(p, k, v);
    else _mm256_storeu_ps(p, v);
  };
  __m256 mx = load(x);
  for (int64_t r = 1; r < len; ++r) mx = _mm256_max_ps(mx, load(x + r * inner));
  __m256 sum = _mm256_setzero_ps();
  for (int64_t r = 0; r < len; ++r) {
    const __m256 e = vec::exp_avx2(_mm256_sub_ps(load(x + r * inner), mx));
    sum = _mm256_add_ps(sum, e);
    if (kind == Kind::kSoftmax) store(y + r * inner, e);
  }
  if (kind == Kind::kSoftmax) {
    const __m256 inv = _mm256_div_ps(_mm256_set1_ps(1.0f), sum);
    for (int64_t r = 0; r < len; ++r) store(y + r * inner, _mm256_mul_ps(load(y + r * inner), inv));
  } else {
    alignas(32) float s[8], l[8];
    _mm256_store_ps(s, sum);
    for (int q = 0; q < 8; ++q) l[q] = std::log(s[q]);
    const __m256 shift = _mm256_add_ps(mx, _mm256_load_ps(l));
    for (int64_t r = 0; r < len; ++r) store(y + r * inner, _mm256_sub_ps(load(x + r * inner), shift));
  }
}

// The same over 8 columns at once of a [len, inner] block (the axis not the last: YOLOv8's DFL
// softmax over 16 bins of [1, 4, 16, 2100]): column i's values are x[k * inner + i]. Only the
// last, partial group of columns is masked (as in apply_row_f32).
void apply_columns_f32(const float* x, float* y, int64_t len, int64_t inner, Kind kind) {
  const int64_t full = inner / 8 * 8;
  for (int64_t i = 0; i < full; i += 8) columns8_f32<false>(x + i, y + i, len, inner, kind, __m256i{});
  if (full < inner)
    columns8_f32<true>(x + full, y + full, len, inner, kind, vec::tail_mask_avx2(static_cast<int>(inner - full)));
}

template <typename T>
void run(KernelContext& ctx, const T* x, T* y, int64_t outer, int64_t len, int64_t inner,
         Kind kind) {
  if constexpr (std::is_same_v<T, float>) {
    if (inner > 1 && kind != Kind::kHardmax) {
      auto blocks = [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) apply_columns_f32(x + o * len * inner, y + o * len * inner, len, inner, kind);
      };
      if (ctx.pool != nullptr && outer > 1 && outer * len * inner > (1 << 16)) ctx.pool->parallel_for(outer, 1, blocks);
      else blocks(0, outer);
      return;
    }
  }
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t o = r / inner, i = r % inner;
      if constexpr (std::is_same_v<T, float>) {
        if (inner == 1 && kind != Kind::kHardmax) {
          apply_row_f32(x + o * len, y + o * len, len, kind);
          continue;
        }
      }
      apply<T>(x + o * len * inner + i, y + o * len * inner + i, len, inner, kind);
    }
  };
  if (ctx.pool != nullptr && outer * inner > 1 && outer * len * inner > (1 << 16))
    ctx.pool->parallel_for(outer * inner, 16, body);
  else
    body(0, outer * inner);
}

Status softmax_common(KernelContext& ctx, Kind kind) {
  if (ctx.num_inputs() < 1 || !ctx.has_input(0)) return ctx.error("missing input");
  const Tensor& x = ctx.input(0);
  const DType dt = x.dtype();
  if (dt != DType::kFloat32 && dt != DType::kFloat64 && dt != DType::kFloat16 &&
      dt != DType::kBFloat16)
    return ctx.error(std::string("unsupported element type ") + dtype_name(dt));
  const bool legacy = ctx.opset < 13;
  const int64_t rank = x.rank();
  int64_t axis = 0;
  if (rank == 0) {
    if (!legacy) return ctx.error("input must have rank >= 1");
  } else {
    auto ar = normalize_axis(ctx.node.attr_int("axis", legacy ? 1 : -1), rank);
    if (!ar) return ctx.error(ar.status().message());
    axis = *ar;
  }
  int64_t outer = 1, len = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (d < axis)
      outer *= x.dim(d);
    else if (d == axis || legacy)
      len *= x.dim(d);
    else
      inner *= x.dim(d);
  }
  if (x.numel() == 0) {
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, dt, x.shape()));
    (void)y;
    return Status::ok();
  }
  if (dt == DType::kFloat64) {
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, dt, x.shape()));
    run<double>(ctx, x.data<double>(), y->data<double>(), outer, len, inner, kind);
    return Status::ok();
  }
  if (dt == DType::kFloat32) {
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, dt, x.shape()));
    run<float>(ctx, x.data<float>(), y->data<float>(), outer, len, inner, kind);
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(Tensor xf, to_float32(x));
  KILN_ASSIGN_OR_RETURN(Tensor yf, Tensor::make(DType::kFloat32, x.shape()));
  run<float>(ctx, xf.data<float>(), yf.data<float>(), outer, len, inner, kind);
  KILN_ASSIGN_OR_RETURN(Tensor y, cast_float_to(yf, dt));
  ctx.set_output(0, std::move(y));
  return Status::ok();
}

Status softmax(KernelContext& ctx) { return softmax_common(ctx, Kind::kSoftmax); }
Status log_softmax(KernelContext& ctx) { return softmax_common(ctx, Kind::kLogSoftmax); }
Status hardmax(KernelContext& ctx) { return softmax_common(ctx, Kind::kHardmax); }

}  // namespace

KILN_REGISTER_KERNEL("", "Softmax", softmax);
KILN_REGISTER_KERNEL("", "LogSoftmax", log_softmax);
KILN_REGISTER_KERNEL("", "Hardmax", hardmax);

// float32, along any axis.
static bool softmax_fast(const FastPathQuery& q) { return q.input_is(0, DType::kFloat32); }
KILN_REGISTER_FAST_PATH("", "Softmax", softmax_fast);
KILN_REGISTER_FAST_PATH("", "LogSoftmax", softmax_fast);

}  // namespace kiln
