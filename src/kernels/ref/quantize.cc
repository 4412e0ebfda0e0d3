// Reference quantization: QuantizeLinear / DequantizeLinear (per-tensor, per-axis, blocked;
// 8/16-bit and 4-bit integers, float8 with saturate), DynamicQuantizeLinear and QLinearMatMul.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/cpu/qlinear_quantize.h"
#include "kernels/fast_path.h"
#include "kernels/kernel_util.h"
#include "kernels/ref/elementwise_util.h"
#include "kernels/ref/gemm_f32.h"
#include "kernels/ref/quantize.h"

namespace kiln {
namespace {

bool is_float8(DType t) {
  return t == DType::kFloat8E4M3FN || t == DType::kFloat8E4M3FNUZ || t == DType::kFloat8E5M2 ||
         t == DType::kFloat8E5M2FNUZ;
}

bool integer_range(DType t, double* lo, double* hi) {
  switch (t) {
    case DType::kUInt8:
      *lo = 0, *hi = 255;
      return true;
    case DType::kInt8:
      *lo = -128, *hi = 127;
      return true;
    case DType::kUInt16:
      *lo = 0, *hi = 65535;
      return true;
    case DType::kInt16:
      *lo = -32768, *hi = 32767;
      return true;
    case DType::kUInt4:
      *lo = 0, *hi = 15;
      return true;
    case DType::kInt4:
      *lo = -8, *hi = 7;
      return true;
    case DType::kInt32:
      *lo = -2147483648.0, *hi = 2147483647.0;
      return true;
    default:
      return false;
  }
}

// Element value as float (float8 decoded from its bits).
float load_f(const Tensor& t, int64_t i) {
  if (is_float8(t.dtype())) return float8_to_float(t.dtype(), t.data<uint8_t>()[i]);
  return static_cast<float>(load_as_double(t.dtype(), t.raw_data(), i));
}

// For each element of x, the index of its scale / zero point: per tensor, per `axis`, or blocked
// along `axis` with `block` elements per scale.
Result<std::vector<int64_t>> param_index(const Shape& x, const Shape& s, int64_t axis_attr,
                                         int64_t block) {
  int64_t numel = 1;
  for (int64_t d : x) numel *= d;
  std::vector<int64_t> idx(numel, 0);
  int64_t sn = 1;
  for (int64_t d : s) sn *= d;
  if (sn == 1 && s.size() <= 1 && block <= 0) return idx;
  if (x.empty()) return Status::error("a per-axis scale needs a non-scalar input");
  KILN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(axis_attr, static_cast<int64_t>(x.size())));
  int64_t inner = 1;
  for (size_t d = axis + 1; d < x.size(); ++d) inner *= x[d];
  const int64_t dim = x[axis];
  if (block <= 0) {
    if (s.size() != 1 || s[0] != dim)
      return Status::error("scale of shape " + shape_str(s) + " must be a scalar or 1-D of size " +
                           std::to_string(dim));
    for (int64_t i = 0; i < numel; ++i) idx[i] = (i / inner) % dim;
    return idx;
  }
  if (s.size() != x.size()) return Status::error("blocked scale must have the input's rank");
  for (size_t d = 0; d < x.size(); ++d) {
    const int64_t want = static_cast<int64_t>(d) == axis ? (dim + block - 1) / block : x[d];
    if (s[d] != want)
      return Status::error("blocked scale shape " + shape_str(s) + " does not match input " +
                           shape_str(x) + " with block_size " + std::to_string(block));
  }
  const int64_t sdim = s[axis];
  for (int64_t i = 0; i < numel; ++i) {
    const int64_t o = i / (inner * dim), a = (i / inner) % dim, in = i % inner;
    idx[i] = (o * sdim + a / block) * inner + in;
  }
  return idx;
}

const Tensor* opt(const KernelContext& ctx, size_t i) {
  return ctx.has_input(i) && ctx.input(i).defined() ? &ctx.input(i) : nullptr;
}

// max(0, x...) and min(0, x...), NaN skipped as std::max/std::min skip it: 8 lanes (four running
// vectors, so that the loop is not bound by one min's latency), then the lanes. max_ps/min_ps
// return their second operand when either is NaN, so the running value goes second.
void range_with_zero(const float* x, int64_t n, float* mn, float* mx) {
  if (cpu_features().has_avx512()) return qlinear::range_with_zero_avx512(x, n, mn, mx);
  __m256 lo[4], hi[4];
  for (int k = 0; k < 4; ++k) lo[k] = hi[k] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) {
      const __m256 v = _mm256_loadu_ps(x + i + 8 * k);
      lo[k] = _mm256_min_ps(v, lo[k]);
      hi[k] = _mm256_max_ps(v, hi[k]);
    }
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    lo[0] = _mm256_min_ps(v, lo[0]);
    hi[0] = _mm256_max_ps(v, hi[0]);
  }
  for (int k = 1; k < 4; ++k) lo[0] = _mm256_min_ps(lo[k], lo[0]), hi[0] = _mm256_max_ps(hi[k], hi[0]);
  alignas(32) float l[8], h[8];
  _mm256_store_ps(l, lo[0]);
  _mm256_store_ps(h, hi[0]);
  *mn = 0.0f, *mx = 0.0f;
  for (int k = 0; k < 8; ++k) *mn = std::min(*mn, l[k]), *mx = std::max(*mx, h[k]);
  for (; i < n; ++i) *mn = std::min(*mn, x[i]), *mx = std::max(*mx, x[i]);
}

// An 8-bit type's largest code.
constexpr float top_code(bool is_signed) { return is_signed ? 127.0f : 255.0f; }

// y = saturate(round_half_even(x / scale) + zp) into [lo, top] (lo 0, or -128 when Signed; top the
// type's largest code, top_code), 32 at a time: the same results as the scalar tail's float
// operations (division, nearbyint in the default rounding mode, NaN to lo). With Reciprocal,
// `scale` is 1 / scale and x is multiplied by it (DynamicQuantMatMul's rule, whose 7-bit rows take
// top 127; without it the AVX-512 loops below take the type's range).
//
// Without it the vectors multiply by inv = 1 / scale too, where that gives the quotient's code, and
// divide (~10x a multiply's time) only where it might not. The product is within 2^-22 |x / scale|
// of the quotient (each rounding within 2^-24), so it can round to another integer only near a
// half: within 2^-13 of one where |x / scale| <= 512. Larger values saturate either way (|zp| <=
// 255 and the codes span 256). So 32 products that all lie further than 2^-11 from a half are
// the quotients' codes.
template <bool Signed, bool Reciprocal = false>
void quantize_8bit(const float* x, int64_t n, float scale, float zp, float top, void* out) {
  if (!Reciprocal && cpu_features().has_avx512()) return qlinear::quantize_avx512(x, n, scale, zp, Signed, out);
  using T = std::conditional_t<Signed, int8_t, uint8_t>;
  T* y = static_cast<T*>(out);
  const float lo_f = Signed ? -128.0f : 0.0f, hi_f = top;
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  // The bound above needs a normal scale and reciprocal (a subnormal one carries fewer bits).
  const bool by_inverse = Reciprocal || (std::isnormal(scale) && std::isnormal(1.0f / scale));
  const __m256 s = _mm256_set1_ps(scale), inv = _mm256_set1_ps(Reciprocal ? scale : 1.0f / scale);
  const __m256 z = _mm256_set1_ps(zp), lo = _mm256_set1_ps(lo_f), hi = _mm256_set1_ps(hi_f);
  const __m256 sign = _mm256_set1_ps(-0.0f), near_half = _mm256_set1_ps(0.5f - 0x1p-11f);
  auto code = [&](__m256 r) { return _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_add_ps(r, z), lo), hi)); };
  // The rounded quotients of p[0, 32): r[k] holds lanes 8k..8k+7.
  auto quotients = [&](const float* p, __m256* r) {
    __m256 risky = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(p + 8 * k), inv);
      r[k] = _mm256_round_ps(v, kNearest);
      // NaN and infinite lanes compare false: their product is the quotient.
      risky = _mm256_or_ps(risky, _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(v, r[k])), near_half, _CMP_GE_OQ));
    }
    if (Reciprocal || (by_inverse && _mm256_testz_ps(risky, risky))) return;
    for (int k = 0; k < 4; ++k) r[k] = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(p + 8 * k), s), kNearest);
  };
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    // The values are in range already, so the saturating packs only narrow them. They work per
    // 128-bit lane: the bytes come out as dwords 0 4 1 5 2 6 3 7.
    __m256 r[4];
    quotients(x + i, r);
    __m256i bytes;
    if constexpr (Signed)
      bytes = _mm256_packs_epi16(_mm256_packs_epi32(code(r[0]), code(r[1])), _mm256_packs_epi32(code(r[2]), code(r[3])));
    else
      bytes = _mm256_packus_epi16(_mm256_packus_epi32(code(r[0]), code(r[1])), _mm256_packus_epi32(code(r[2]), code(r[3])));
    bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), bytes);
  }
  for (; i < n; ++i) {
    const float v = Reciprocal ? x[i] * scale : x[i] / scale;
    y[i] = static_cast<T>(std::min(hi_f, std::max(lo_f, std::nearbyint(v) + zp)));
  }
}



// y = (x - zp) * scale for 8-bit x, 8 at a time (the reference's float operations).
template <bool Signed>
void dequantize_8bit(const void* in, int64_t n, float scale, int32_t zp, float* y) {
  using T = std::conditional_t<Signed, int8_t, uint8_t>;
  const T* x = static_cast<const T*>(in);
  const __m256 s = _mm256_set1_ps(scale), z = _mm256_set1_ps(static_cast<float>(zp));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x + i));
    const __m256i w = Signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(w), z), s));
  }
  for (; i < n; ++i) y[i] = (static_cast<float>(x[i]) - static_cast<float>(zp)) * scale;
}

// One scale and zero point for a whole float32 tensor and an 8-bit one: the vector loops above.
// Returns false when the node is not of that kind (per-axis, blocked, other types).
struct PerTensor {
  float scale = 0;
  int32_t zero_point = 0;
  bool is_signed = false;
};
bool per_tensor_8bit(const KernelContext& ctx, DType quantized, PerTensor* p) {
  const Tensor& scale = ctx.input(1);
  const Tensor* zp = opt(ctx, 2);
  if (scale.dtype() != DType::kFloat32 || scale.numel() != 1 || (zp && zp->numel() != 1)) return false;
  if (ctx.opset >= 21 && ctx.node.attr_int("block_size", 0) != 0) return false;
  const DType t = zp ? zp->dtype() : quantized;
  if (t != DType::kUInt8 && t != DType::kInt8) return false;
  p->scale = scale.data<float>()[0];
  p->is_signed = t == DType::kInt8;
  p->zero_point = zp ? (p->is_signed ? zp->data<int8_t>()[0] : zp->data<uint8_t>()[0]) : 0;
  return true;
}

Status quantize_linear(KernelContext& ctx) {
  if (!opt(ctx, 0) || !opt(ctx, 1)) return ctx.error("QuantizeLinear needs x and y_scale");
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  const Tensor* zp = opt(ctx, 2);
  if (!dtype_is_float(x.dtype()) && x.dtype() != DType::kInt32)
    return ctx.error(std::string("QuantizeLinear x must be float or int32, got ") +
                     dtype_name(x.dtype()));
  if (!dtype_is_float(scale.dtype())) return ctx.error("y_scale must be a float tensor");
  DType out_t = DType::kUInt8;
  const int64_t od = ctx.node.attr_int("output_dtype", 0);
  if (od != 0) {
    if (!dtype_is_valid(static_cast<int32_t>(od))) return ctx.error("invalid output_dtype");
    out_t = static_cast<DType>(od);
  }
  if (zp) {
    if (od != 0 && zp->dtype() != out_t)
      return ctx.error("output_dtype differs from the zero point's type");
    out_t = zp->dtype();
  }
  double lo = 0, hi = 0;
  const bool integer = integer_range(out_t, &lo, &hi) && out_t != DType::kInt32;
  if (!integer && !is_float8(out_t))
    return ctx.error(std::string("cannot quantize to ") + dtype_name(out_t));
  const int64_t block = ctx.opset >= 21 ? ctx.node.attr_int("block_size", 0) : 0;
  const int64_t axis = ctx.node.attr_int("axis", 1);
  if (zp && zp->shape() != scale.shape() && !(zp->numel() == 1 && scale.numel() == 1))
    return ctx.error("zero point shape " + shape_str(zp->shape()) + " differs from scale " +
                     shape_str(scale.shape()));
  PerTensor pt;
  if (x.dtype() == DType::kFloat32 && (out_t == DType::kUInt8 || out_t == DType::kInt8) && scale.rank() == 0 &&
      per_tensor_8bit(ctx, out_t, &pt)) {
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, out_t, x.shape()));
    const float* xd = x.data<float>();
    char* yd = static_cast<char*>(y->raw_data());
    ew::run_range(ctx, x.numel(), [&](int64_t b, int64_t e) {
      (pt.is_signed ? quantize_8bit<true> : quantize_8bit<false>)(
          xd + b, e - b, pt.scale, static_cast<float>(pt.zero_point), top_code(pt.is_signed), yd + b);
    });
    return Status::ok();
  }
  auto idx = param_index(x.shape(), scale.shape(), axis, block);
  if (!idx) return ctx.error(idx.status().message());
  const bool saturate = ctx.node.attr_int("saturate", 1) != 0;
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, out_t, x.shape()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t p = (*idx)[i];
    float q = load_f(x, i) / load_f(scale, p);
    if (x.dtype() == DType::kFloat16 && scale.dtype() == DType::kFloat16)
      q = half_to_float(float_to_half(q));
    if (integer) {
      double v = std::nearbyint(static_cast<double>(q)) + (zp ? load_f(*zp, p) : 0.0);
      v = std::min(hi, std::max(lo, v));
      store_from_double(out_t, y->raw_data(), i, v);
    } else {
      y->data<uint8_t>()[i] = float_to_float8(out_t, q, saturate);
    }
  }
  return Status::ok();
}

Status dequantize_linear(KernelContext& ctx) {
  if (!opt(ctx, 0) || !opt(ctx, 1)) return ctx.error("DequantizeLinear needs x and x_scale");
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  const Tensor* zp = opt(ctx, 2);
  double lo, hi;
  if (!integer_range(x.dtype(), &lo, &hi) && !is_float8(x.dtype()))
    return ctx.error(std::string("DequantizeLinear cannot read ") + dtype_name(x.dtype()));
  if (!dtype_is_float(scale.dtype())) return ctx.error("x_scale must be a float tensor");
  if (zp && zp->dtype() != x.dtype()) return ctx.error("x_zero_point type differs from x");
  if (zp && zp->shape() != scale.shape() && !(zp->numel() == 1 && scale.numel() == 1))
    return ctx.error("zero point shape " + shape_str(zp->shape()) + " differs from scale " +
                     shape_str(scale.shape()));
  const int64_t block = ctx.opset >= 21 ? ctx.node.attr_int("block_size", 0) : 0;
  DType out_t = ctx.opset >= 19 ? scale.dtype() : DType::kFloat32;
  const int64_t od = ctx.node.attr_int("output_dtype", 0);
  if (od != 0 && dtype_is_valid(static_cast<int32_t>(od))) out_t = static_cast<DType>(od);
  PerTensor pt;
  if (out_t == DType::kFloat32 && (x.dtype() == DType::kUInt8 || x.dtype() == DType::kInt8) && scale.rank() == 0 &&
      per_tensor_8bit(ctx, x.dtype(), &pt)) {
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, x.shape()));
    const char* xd = static_cast<const char*>(x.raw_data());
    float* yd = y->data<float>();
    ew::run_range(ctx, x.numel(), [&](int64_t b, int64_t e) {
      (pt.is_signed ? dequantize_8bit<true> : dequantize_8bit<false>)(xd + b, e - b, pt.scale, pt.zero_point, yd + b);
    });
    return Status::ok();
  }
  auto idx = param_index(x.shape(), scale.shape(), ctx.node.attr_int("axis", 1), block);
  if (!idx) return ctx.error(idx.status().message());
  KILN_ASSIGN_OR_RETURN(Tensor yf, Tensor::make(DType::kFloat32, x.shape()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t p = (*idx)[i];
    yf.data<float>()[i] = (load_f(x, i) - (zp ? load_f(*zp, p) : 0.0f)) * load_f(scale, p);
  }
  KILN_ASSIGN_OR_RETURN(Tensor y, cast_float_to(yf, out_t));
  ctx.set_output(0, std::move(y));
  return Status::ok();
}

Status dynamic_quantize_linear(KernelContext& ctx) {
  if (!opt(ctx, 0)) return ctx.error("DynamicQuantizeLinear needs x");
  const Tensor& x = ctx.input(0);
  if (x.dtype() != DType::kFloat32) return ctx.error("DynamicQuantizeLinear needs float32 x");
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kUInt8, x.shape()));
  // The u8 scale and zero point of x's range with 0 included (NaN skipped), and the codes
  // saturate(round_half_even(x / scale) + zero_point), over the threads: each chunk's range (a
  // fixed chunk a slot), then the codes. Chunks of 32 KB: a transformer's [128, 768] activations
  // (the size ONNX Runtime's quantize_dynamic quantizes before each MatMul) make 12.
  const float* xd = x.data<float>();
  constexpr int64_t kChunk = 1 << 13;
  const int64_t n = x.numel(), chunks = (n + kChunk - 1) / kChunk;
  std::vector<float> lows(static_cast<size_t>(chunks)), highs(static_cast<size_t>(chunks));
  auto ranges = [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      range_with_zero(xd + c * kChunk, std::min(kChunk, n - c * kChunk), &lows[static_cast<size_t>(c)],
                      &highs[static_cast<size_t>(c)]);
  };
  if (ctx.pool && chunks > 1) ctx.pool->parallel_for(chunks, 1, ranges);
  else ranges(0, chunks);
  float mn = 0, mx = 0, scale = 0, zpf = 0;
  for (int64_t c = 0; c < chunks; ++c) mn = std::min(mn, lows[static_cast<size_t>(c)]), mx = std::max(mx, highs[static_cast<size_t>(c)]);
  dynamic_u8_params(mn, mx, &scale, &zpf);
  auto codes = [&](int64_t b, int64_t e) {
    quantize_8bit<false>(xd + b, e - b, scale, zpf, 255.0f, y->data<uint8_t>() + b);
  };
  if (ctx.pool && chunks > 1) ctx.pool->parallel_for(n, kChunk, codes);
  else codes(0, n);
  if (ctx.wants_output(1)) {
    KILN_ASSIGN_OR_RETURN(Tensor * s, ctx.make_output(1, DType::kFloat32, {}));
    *s->data<float>() = scale;
  }
  if (ctx.wants_output(2)) {
    KILN_ASSIGN_OR_RETURN(Tensor * z, ctx.make_output(2, DType::kUInt8, {}));
    *z->data<uint8_t>() = static_cast<uint8_t>(zpf);
  }
  return Status::ok();
}

// A quantization parameter of QLinearMatMul: a scalar, or one value per row (A) / column (B).
Result<std::vector<float>> read_param(const Tensor& t, int64_t per, const char* what) {
  if (t.numel() != 1 && t.numel() != per)
    return Status::error(std::string(what) + " must be a scalar or have " + std::to_string(per) +
                         " values");
  std::vector<float> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = load_f(t, i);
  return v;
}

Status qlinear_matmul(KernelContext& ctx) {
  for (size_t i : {0, 1, 3, 4, 6})
    if (!opt(ctx, i)) return ctx.error("QLinearMatMul input " + std::to_string(i) + " is missing");
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(3);
  double lo, hi;
  if ((a.dtype() != DType::kInt8 && a.dtype() != DType::kUInt8) ||
      (b.dtype() != DType::kInt8 && b.dtype() != DType::kUInt8))
    return ctx.error("QLinearMatMul needs int8/uint8 a and b");
  auto plan_r = plan_matmul(a.shape(), b.shape());
  if (!plan_r) return ctx.error(plan_r.status().message());
  const MatMulPlan& p = *plan_r;
  const Tensor* yzp = opt(ctx, 7);
  const DType out_t = yzp ? yzp->dtype() : a.dtype();
  if (!integer_range(out_t, &lo, &hi) || (out_t != DType::kInt8 && out_t != DType::kUInt8))
    return ctx.error("y_zero_point must be int8 or uint8");
  const Tensor* azp_t = opt(ctx, 2);
  const Tensor* bzp_t = opt(ctx, 5);
  if ((azp_t && azp_t->dtype() != a.dtype()) || (bzp_t && bzp_t->dtype() != b.dtype()))
    return ctx.error("zero point types must match their inputs");
  std::vector<float> as, bs, ys, az{0}, bz{0}, yz{0};
  {
    auto r1 = read_param(ctx.input(1), p.m, "a_scale");
    auto r2 = read_param(ctx.input(4), p.n, "b_scale");
    auto r3 = read_param(ctx.input(6), 1, "y_scale");
    if (!r1 || !r2 || !r3)
      return ctx.error(!r1   ? r1.status().message()
                       : !r2 ? r2.status().message()
                             : r3.status().message());
    as = *r1, bs = *r2, ys = *r3;
    if (azp_t) {
      auto r = read_param(*azp_t, p.m, "a_zero_point");
      if (!r) return ctx.error(r.status().message());
      az = *r;
    }
    if (bzp_t) {
      auto r = read_param(*bzp_t, p.n, "b_zero_point");
      if (!r) return ctx.error(r.status().message());
      bz = *r;
    }
    if (yzp) {
      auto r = read_param(*yzp, 1, "y_zero_point");
      if (!r) return ctx.error(r.status().message());
      yz = *r;
    }
  }
  // The reference multiplies the scales in their own type, so float16 scales round as float16.
  const bool half = ctx.input(1).dtype() == DType::kFloat16;
  auto factor = [&](int64_t i, int64_t j) {
    float f = as[as.size() == 1 ? 0 : i] * bs[bs.size() == 1 ? 0 : j];
    if (half) f = half_to_float(float_to_half(f));
    f /= ys[0];
    if (half) f = half_to_float(float_to_half(f));
    return f;
  };
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, out_t, p.out_shape));
  std::vector<int32_t> arow(p.k);
  for (size_t bi = 0; bi < p.a_offsets.size(); ++bi)
    for (int64_t i = 0; i < p.m; ++i) {
      const int32_t za = static_cast<int32_t>(az[az.size() == 1 ? 0 : i]);
      for (int64_t q = 0; q < p.k; ++q)
        arow[q] = static_cast<int32_t>(
                      load_as_double(a.dtype(), a.raw_data(), p.a_offsets[bi] + i * p.k + q)) -
                  za;
      for (int64_t j = 0; j < p.n; ++j) {
        const int32_t zb = static_cast<int32_t>(bz[bz.size() == 1 ? 0 : j]);
        int64_t acc = 0;
        for (int64_t q = 0; q < p.k; ++q)
          acc += arow[q] * (static_cast<int32_t>(load_as_double(b.dtype(), b.raw_data(),
                                                                p.b_offsets[bi] + q * p.n + j)) -
                            zb);
        const double v = std::nearbyint(static_cast<double>(acc) * factor(i, j) + yz[0]);
        store_from_double(out_t, y->raw_data(), (bi * p.m + i) * p.n + j,
                          std::min(hi, std::max(lo, v)));
      }
    }
  return Status::ok();
}

}  // namespace

Result<float> per_tensor_parameter(const Tensor* t, size_t i, bool scale, DType type) {
  if (!t) {
    if (scale) return Status::error("scale input " + std::to_string(i) + " is missing");
    return 0.0f;
  }
  if (t->numel() != 1) return Status::error("input " + std::to_string(i) + " must hold one value (per-tensor quantization)");
  if (scale ? t->dtype() != DType::kFloat32 : t->dtype() != type)
    return Status::error("input " + std::to_string(i) + " must be " + (scale ? "float32" : dtype_name(type)) + ", got " +
                         dtype_name(t->dtype()));
  return static_cast<float>(load_as_double(t->dtype(), t->raw_data(), 0));
}

void quantize_row_8bit(const float* x, int64_t n, float scale, int32_t zero_point, bool to_int8, void* y) {
  const float zp = static_cast<float>(zero_point);
  (to_int8 ? quantize_8bit<true> : quantize_8bit<false>)(x, n, scale, zp, top_code(to_int8), y);
}

void dynamic_quantize_row_u8(const float* x, int64_t n, uint8_t* y, float* scale, int32_t* zero_point, int top) {
  float mn = 0.0f, mx = 0.0f, zp = 0.0f;
  range_with_zero(x, n, &mn, &mx);
  dynamic_u8_params(mn, mx, scale, &zp, static_cast<float>(top));
  *zero_point = static_cast<int32_t>(zp);
  quantize_8bit<false, true>(x, n, 1.0f / *scale, zp, static_cast<float>(top), y);
}

KILN_REGISTER_KERNEL("", "QuantizeLinear", quantize_linear);
KILN_REGISTER_KERNEL("", "DequantizeLinear", dequantize_linear);
KILN_REGISTER_TYPED_KERNEL("", "DynamicQuantizeLinear", dynamic_quantize_linear, {{0, {DType::kFloat32}}});
KILN_REGISTER_FAST_PATH("", "DynamicQuantizeLinear", float32_input);  // 8 lanes
KILN_REGISTER_TYPED_KERNEL("", "QLinearMatMul", qlinear_matmul, {{0, {DType::kUInt8, DType::kInt8}}, {3, {DType::kUInt8, DType::kInt8}}});

// One float32 scale (and one zero point) for the whole tensor, 8-bit on the integer side: the
// vector loops of quantize_8bit and dequantize_8bit.
static bool per_tensor_fast(const FastPathQuery& q, bool quantize) {
  const Tensor* s = q.constants.size() > 1 ? q.constants[1] : nullptr;
  const Tensor* z = q.constants.size() > 2 ? q.constants[2] : nullptr;
  const bool float_side = quantize ? q.input_is(0, DType::kFloat32) : true;
  const bool int_side = quantize ? (!z || z->dtype() == DType::kUInt8 || z->dtype() == DType::kInt8)
                                 : q.input_is(0, DType::kUInt8) || q.input_is(0, DType::kInt8);
  return s && s->dtype() == DType::kFloat32 && s->numel() == 1 && (!z || z->numel() == 1) && float_side && int_side;
}
KILN_REGISTER_FAST_PATH("", "QuantizeLinear", [](const FastPathQuery& q) { return per_tensor_fast(q, true); });
KILN_REGISTER_FAST_PATH("", "DequantizeLinear", [](const FastPathQuery& q) { return per_tensor_fast(q, false); });

}  // namespace kiln
