// com.microsoft.QLinearAdd and QLinearMul (ONNX Runtime's contrib ops, which its QOperator
// quantizer writes and qdq-fusion makes of Q(Add(DQ(a), DQ(b)))): 8-bit A and B, each with its
// scale and zero point, numpy-broadcast, to 8-bit C of A's type:
//   c = saturate(round_half_even(((a - az) * as  op  (b - bz) * bs) / cs) + cz)
// in float, the very operations of DequantizeLinear, Add or Mul and QuantizeLinear one after the
// other, so the fused op gives their results bit for bit. Rows run 8 lanes at a time (16 on
// AVX-512, qlinear_binary_avx512.cc) over the pool, a broadcast operand's value repeated along
// its row. The division is the slowest step: the rows multiply by 1 / cs instead and divide only
// a vector with a product within 2^-11 of a half, where the two may round apart (the bound of
// kernels/ref/quantize.cc's quantize_8bit: the product is within 2^-22 |v| of the quotient, and
// |v| > 512 saturates either way). c depends on the codes (a, b) alone, so where multiplying gives
// the division's code for all 65536 pairs (checked once per set of parameters) the rows skip
// even that check; and where two multiply-adds on the codes give them all (QLinearBinaryMethod's
// by_fma, found the same way), an add takes those alone.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/cpu/qlinear_binary.h"
#include "kernels/fast_path.h"
#include "kernels/kernel_util.h"
#include "kernels/ref/elementwise_util.h"
#include "kernels/ref/quantize.h"

namespace kiln {
namespace {

using Params = QLinearBinaryParams;
using Method = QLinearBinaryMethod;

// The ways a row computes c (QLinearBinaryMethod): the steps with the division, with the
// reciprocal, or by_fma.
enum class Way { kDivision, kReciprocal, kFma };

// The scalar tail's c of code a and b: B's code (kFma) or its dequantized value (b - bz) * bs.
template <typename T, Way kWay>
float apply(const Params& p, const Method& m, T a, float b) {
  float v;
  if constexpr (kWay == Way::kFma) {
    v = std::fmaf(static_cast<float>(a), m.ra, std::fmaf(b, m.rb, m.k));
  } else {
    const float fa = (static_cast<float>(a) - p.az) * p.as;
    const float sum = p.multiply ? fa * b : fa + b;
    v = kWay == Way::kReciprocal ? sum * (1.0f / p.cs) : sum / p.cs;
  }
  return std::min(p.hi, std::max(p.lo, std::nearbyint(v) + p.cz));
}

template <typename T>
__m256 load8(const T* x) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x));
  return _mm256_cvtepi32_ps(std::is_signed_v<T> ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b));
}

// c[0, n) of a and b, each read at step 1 (a row) or 0 (one value repeated: a broadcast
// operand), 8 at a time. kBFloats: b is B already dequantized, (b - bz) * bs as floats at step
// 1 (a squeeze-excitation's per-channel scale along a row of pixels, dequantized once).
template <typename T, Way kWay, bool kBFloats>
void row(const Params& p, const Method& m, const T* a, int64_t sa, const void* b, int64_t sb, T* c, int64_t n) {
  static_assert(!(kBFloats && kWay == Way::kFma), "by_fma takes B's codes");
  const __m256 as = _mm256_set1_ps(p.as), bs = _mm256_set1_ps(p.bs), cs = _mm256_set1_ps(p.cs);
  const __m256 rcs = _mm256_set1_ps(1.0f / p.cs);
  const __m256 az = _mm256_set1_ps(p.az), bz = _mm256_set1_ps(p.bz), cz = _mm256_set1_ps(p.cz);
  const __m256 ra = _mm256_set1_ps(m.ra), rb = _mm256_set1_ps(m.rb), k = _mm256_set1_ps(m.k);
  const __m256 lo = _mm256_set1_ps(p.lo), hi = _mm256_set1_ps(p.hi);
  const __m256i cz_int = _mm256_set1_epi32(static_cast<int32_t>(p.cz));
  const __m256 near_half = _mm256_set1_ps(0.5f - 0x1p-11f);
  const bool in_int32 = qlinear_binary_fits_int32(p);
  const T* b_codes = static_cast<const T*>(b);
  const float* b_floats = static_cast<const float*>(b);
  auto codes = [](const T* x, int64_t step, int64_t i) {
    return step ? load8(x + i) : _mm256_set1_ps(static_cast<float>(x[0]));
  };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v;
    if constexpr (kWay == Way::kFma) {
      v = _mm256_fmadd_ps(codes(a, sa, i), ra, _mm256_fmadd_ps(codes(b_codes, sb, i), rb, k));
    } else {
      const __m256 fa = _mm256_mul_ps(_mm256_sub_ps(codes(a, sa, i), az), as);
      const __m256 fb = kBFloats ? _mm256_loadu_ps(b_floats + i)
                                 : _mm256_mul_ps(_mm256_sub_ps(codes(b_codes, sb, i), bz), bs);
      const __m256 sum = p.multiply ? _mm256_mul_ps(fa, fb) : _mm256_add_ps(fa, fb);
      // The division only where the multiply might round the other way (the comment above).
      v = _mm256_mul_ps(sum, rcs);
      if (kWay == Way::kDivision) {
        const __m256 r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m256 off = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(v, r));
        if (_mm256_movemask_ps(_mm256_cmp_ps(off, near_half, _CMP_GE_OQ))) v = _mm256_div_ps(sum, cs);
      }
    }
    // cvtps rounds half to even, as nearbyint. Where v fits int32 the packs' saturation clamps
    // it (after cz, added in int32); else it is clamped in float first.
    __m256i q;
    if (in_int32) {
      q = _mm256_add_epi32(_mm256_cvtps_epi32(v), cz_int);
    } else {
      const __m256 r = _mm256_add_ps(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), cz);
      q = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
    }
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    const __m128i bytes = std::is_signed_v<T> ? _mm_packs_epi16(w, w) : _mm_packus_epi16(w, w);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(c + i), bytes);
  }
  for (; i < n; ++i) {
    const float bv = kBFloats                ? b_floats[i]
                     : kWay == Way::kFma    ? static_cast<float>(b_codes[sb * i])
                                            : (static_cast<float>(b_codes[sb * i]) - p.bz) * p.bs;
    c[i] = static_cast<T>(apply<T, kWay>(p, m, a[sa * i], bv));
  }
}

// The shorter ways that give every pair of codes the division's c (QLinearBinaryMethod): each
// way's row over all 65536 pairs, against the division's.
template <typename T>
Method find_method(const Params& p) {
  std::vector<T> a(65536), b(65536), by_division(65536), by_other(65536);
  for (int i = 0; i < 65536; ++i) a[i] = static_cast<T>(i >> 8), b[i] = static_cast<T>(i & 255);
  Method m;
  row<T, Way::kDivision, false>(p, m, a.data(), 1, b.data(), 1, by_division.data(), 65536);
  row<T, Way::kReciprocal, false>(p, m, a.data(), 1, b.data(), 1, by_other.data(), 65536);
  m.reciprocal = by_other == by_division;
  if (p.multiply || !qlinear_binary_fits_int32(p)) return m;
  // The ratios and the offset rounded to float, then their neighbours, nearest first: v is a few
  // roundings from the steps' value, and a pair lands apart only where a half lies between them.
  const float ra = static_cast<float>(double{p.as} / p.cs), rb = static_cast<float>(double{p.bs} / p.cs);
  const float k = static_cast<float>(-(double{p.az} * p.as + double{p.bz} * p.bs) / p.cs);
  auto moved = [](float x, int steps) {
    for (; steps > 0; --steps) x = std::nextafter(x, HUGE_VALF);
    for (; steps < 0; ++steps) x = std::nextafter(x, -HUGE_VALF);
    return x;
  };
  for (int distance = 0; distance <= 6; ++distance)
    for (int i = -2; i <= 2; ++i)
      for (int j = -2; j <= 2; ++j)
        for (int l = -2; l <= 2; ++l) {
          if (std::abs(i) + std::abs(j) + std::abs(l) != distance) continue;
          m.ra = moved(ra, i), m.rb = moved(rb, j), m.k = moved(k, l);
          row<T, Way::kFma, false>(p, m, a.data(), 1, b.data(), 1, by_other.data(), 65536);
          if (by_other == by_division) {
            m.by_fma = true;
            return m;
          }
        }
  m.ra = m.rb = m.k = 0;
  return m;
}

// find_method, remembered per parameter set (a model has a few dozen).
template <typename T>
Method method_cached(const Params& p) {
  struct Entry {
    Params p;
    Method m;
  };
  static std::mutex mu;
  static std::vector<Entry> seen;
  auto same = [&](const Params& q) {
    return q.as == p.as && q.bs == p.bs && q.cs == p.cs && q.az == p.az && q.bz == p.bz && q.cz == p.cz &&
           q.lo == p.lo && q.hi == p.hi && q.multiply == p.multiply;
  };
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const Entry& e : seen)
      if (same(e.p)) return e.m;
  }
  const Method m = find_method<T>(p);
  std::lock_guard<std::mutex> lock(mu);
  if (seen.size() >= 4096) seen.clear();  // bounded, whatever a process runs
  seen.push_back({p, m});
  return m;
}

// A row of either type (b as codes, or as floats: row's kBFloats) by `m`.
template <typename T>
void typed_row(const Params& p, const Method& m, bool b_floats, const void* a, int64_t sa, const void* b, int64_t sb,
               void* c, int64_t n) {
  const T* x = static_cast<const T*>(a);
  T* z = static_cast<T*>(c);
  if (b_floats)
    (m.reciprocal ? row<T, Way::kReciprocal, true> : row<T, Way::kDivision, true>)(p, m, x, sa, b, sb, z, n);
  else if (m.by_fma)
    row<T, Way::kFma, false>(p, m, x, sa, b, sb, z, n);
  else
    (m.reciprocal ? row<T, Way::kReciprocal, false> : row<T, Way::kDivision, false>)(p, m, x, sa, b, sb, z, n);
}
void any_row(const Params& p, bool is_signed, const Method& m, const void* a, int64_t sa, const void* b, int64_t sb,
             void* c, int64_t n, bool b_floats = false) {
  static const bool avx512 = cpu_features().has_avx512();  // the level is fixed once kernels run
  if (avx512) return qlinear_binary_row_avx512(p, is_signed, m, b_floats, a, sa, b, sb, c, n);
  (is_signed ? typed_row<int8_t> : typed_row<uint8_t>)(p, m, b_floats, a, sa, b, sb, c, n);
}

// Whether `x` holds one value per channel of channels-last c ([1 or N, 1, ..., 1, C] against
// c's [N, ..., C]): a squeeze-excitation's scale of an NHWC activation.
bool per_channel_of(const Shape& x, const Shape& c) {
  if (x.size() != c.size() || c.size() < 3 || x.back() != c.back() || (x[0] != 1 && x[0] != c[0])) return false;
  for (size_t i = 1; i + 1 < x.size(); ++i)
    if (x[i] != 1) return false;
  return true;
}

template <typename T>
void run_typed(KernelContext& ctx, const Params& p, const Tensor& a, const Tensor& b, Tensor& c) {
  const T *ad = a.data<T>(), *bd = b.data<T>();
  T* cd = c.data<T>();
  // Rows of at most kChunk: those of equal shapes cut from the whole, broadcast ones as the
  // shapes make them (a row's operand steps are 0 or 1).
  constexpr int64_t kChunk = 1 << 14;
  struct Row {
    int64_t first;
    const T* a;
    int64_t sa;
    const void* b;  // codes, or floats where b_floats
    int64_t sb, len;
  };
  thread_local std::vector<Row> row_buffer;  // grows once per calling thread
  thread_local std::vector<float> repeated;  // a per-channel operand, dequantized, along a row of pixels
  std::vector<Row>& rows = row_buffer;
  rows.clear();
  const bool a_per_channel = per_channel_of(a.shape(), c.shape()) && b.shape() == c.shape();
  const bool b_per_channel = per_channel_of(b.shape(), c.shape()) && a.shape() == c.shape();
  Params q = p;
  bool b_floats = false;
  if (a.shape() == b.shape()) {
    for (int64_t i = 0; i < c.numel(); i += kChunk) rows.push_back({i, ad + i, 1, bd + i, 1, std::min(kChunk, c.numel() - i)});
  } else if ((a_per_channel || b_per_channel) && c.numel() > 0) {
    // The per-channel operand as B (the float add and multiply commute), dequantized once and
    // repeated over a row of whole pixels (>= 256 values), once per image it differs in: the
    // rows are long, where one row a pixel made 12544 rows of 32 channels at 112x112
    // (efficientnet_b0's first squeeze-excitation).
    const Tensor& pc = a_per_channel ? a : b;
    const T* full = a_per_channel ? bd : ad;
    if (a_per_channel) std::swap(q.as, q.bs), std::swap(q.az, q.bz);
    const int64_t channels = c.shape().back(), images = c.dim(0), plane = c.numel() / images;
    const int64_t len = channels * std::min(plane / channels, (255 + channels) / channels);
    const int64_t copies = pc.dim(0);
    repeated.resize(static_cast<size_t>(copies * len));
    for (int64_t n = 0; n < copies; ++n)
      for (int64_t i = 0; i < len; ++i)
        repeated[static_cast<size_t>(n * len + i)] =
            (static_cast<float>(pc.data<T>()[n * channels + i % channels]) - q.bz) * q.bs;
    for (int64_t n = 0; n < images; ++n)
      for (int64_t off = 0; off < plane; off += len) {
        const int64_t first = n * plane + off;
        const float* rep = repeated.data() + (copies > 1 ? n * len : 0);
        rows.push_back(Row{first, full + first, 1, rep, 1, std::min(len, plane - off)});
      }
    b_floats = true;
  } else {
    ew::for_each_broadcast_row<2>(c.shape(), {&a.shape(), &b.shape()},
                                  [&](int64_t first, const std::array<int64_t, 2>& base, int64_t len,
                                      const std::array<int64_t, 2>& step) {
                                    rows.push_back({first, ad + base[0], step[0], bd + base[1], step[1], len});
                                  });
  }
  const Method m = method_cached<T>(q);
  auto run = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const Row& w = rows[static_cast<size_t>(r)];
      any_row(q, std::is_signed_v<T>, m, w.a, w.sa, w.b, w.sb, cd + w.first, w.len, b_floats);
    }
  };
  const int64_t n = static_cast<int64_t>(rows.size());
  if (ctx.pool && n > 1 && c.numel() > kChunk)
    ctx.pool->parallel_for(n, 1, run);
  else
    run(0, n);
}

Status qlinear_binary(KernelContext& ctx, bool multiply) {
  if (ctx.num_inputs() < 7 || !ctx.has_input(0) || !ctx.has_input(3))
    return ctx.error("needs A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale[, C_zero_point]");
  const Tensor &a = ctx.input(0), &b = ctx.input(3);
  if ((a.dtype() != DType::kUInt8 && a.dtype() != DType::kInt8) || b.dtype() != a.dtype())
    return ctx.error(std::string("A and B must both be uint8 or both int8, got ") + dtype_name(a.dtype()) + " and " +
                     dtype_name(b.dtype()));
  const DType t = a.dtype();
  Params p{};
  p.multiply = multiply;
  const size_t scale_inputs[] = {1, 4, 6}, zero_inputs[] = {2, 5, 7};
  float* scales[] = {&p.as, &p.bs, &p.cs};
  float* zeros[] = {&p.az, &p.bz, &p.cz};
  auto input = [&](size_t i) { return ctx.has_input(i) ? &ctx.input(i) : nullptr; };
  for (int k = 0; k < 3; ++k) {
    auto s = per_tensor_parameter(input(scale_inputs[k]), scale_inputs[k], true, t);
    auto z = per_tensor_parameter(input(zero_inputs[k]), zero_inputs[k], false, t);
    if (!s) return ctx.error(s.status().message());
    if (!z) return ctx.error(z.status().message());
    *scales[k] = *s, *zeros[k] = *z;
  }
  p.lo = t == DType::kInt8 ? -128.0f : 0.0f, p.hi = t == DType::kInt8 ? 127.0f : 255.0f;
  auto shape = broadcast_shapes(a.shape(), b.shape());
  if (!shape) return ctx.error(shape.status().message());
  // Each row reads a full-shaped operand where it writes C: C may take A's or B's storage.
  KILN_ASSIGN_OR_RETURN(Tensor * c, ctx.make_output_over_input(0, {0, 3}, t, *shape));
  if (t == DType::kUInt8)
    run_typed<uint8_t>(ctx, p, a, b, *c);
  else
    run_typed<int8_t>(ctx, p, a, b, *c);
  return Status::ok();
}

Status qlinear_add(KernelContext& ctx) { return qlinear_binary(ctx, false); }
Status qlinear_mul(KernelContext& ctx) { return qlinear_binary(ctx, true); }

}  // namespace

QLinearBinaryMethod qlinear_binary_method(const QLinearBinaryParams& p, bool is_signed) {
  return is_signed ? method_cached<int8_t>(p) : method_cached<uint8_t>(p);
}

void qlinear_binary_same_shape(const QLinearBinaryParams& p, bool is_signed, const void* a, const void* b, void* c,
                               int64_t n, ThreadPool* pool) {
  constexpr int64_t kChunk = 1 << 14;
  const QLinearBinaryMethod m = qlinear_binary_method(p, is_signed);
  auto run = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t first = r * kChunk;
      any_row(p, is_signed, m, static_cast<const char*>(a) + first, 1, static_cast<const char*>(b) + first, 1,
              static_cast<char*>(c) + first, std::min(kChunk, n - first));
    }
  };
  const int64_t rows = (n + kChunk - 1) / kChunk;
  if (pool && rows > 1)
    pool->parallel_for(rows, 1, run);
  else
    run(0, rows);
}

// A, A's scale, B, B's scale, C's scale.
const std::vector<DtypeConstraint> kQLinearBinaryTypes = {
    {0, {DType::kUInt8, DType::kInt8}}, {1, {DType::kFloat32}}, {3, {DType::kUInt8, DType::kInt8}}, {4, {DType::kFloat32}}, {6, {DType::kFloat32}}};
KILN_REGISTER_TYPED_KERNEL("com.microsoft", "QLinearAdd", qlinear_add, kQLinearBinaryTypes);
KILN_REGISTER_TYPED_KERNEL("com.microsoft", "QLinearMul", qlinear_mul, kQLinearBinaryTypes);

// A and B of one known shape, or broadcast with C's last axis 8 values or more (a transformer's
// bias row or mask, a channels-last image's per-channel scale): the 8-lane rows, an operand's
// step 0 or 1 along each.
static bool lane_rows(const FastPathQuery& q) {
  const ir::TypeInfo* a = q.types.size() > 3 ? q.types[0] : nullptr;
  const ir::TypeInfo* b = q.types.size() > 3 ? q.types[3] : nullptr;
  if (!a || !b || q.numel(0) < 0 || q.numel(3) < 0) return false;
  if (a->shape.size() == b->shape.size()) {
    bool same = true;
    for (size_t i = 0; i < a->shape.size(); ++i) same = same && a->shape[i].value == b->shape[i].value;
    if (same) return true;
  }
  return std::max(q.last_dim(0), q.last_dim(3)) >= 8;  // C's last dim (the other's is it or 1)
}
KILN_REGISTER_FAST_PATH("com.microsoft", "QLinearAdd", lane_rows);
KILN_REGISTER_FAST_PATH("com.microsoft", "QLinearMul", lane_rows);

}  // namespace kiln
