// Bit-exact conversions for float16, bfloat16 and the four float8 formats.
#include "core/float_convert.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <complex>
#include <cstring>
#include <limits>

namespace kiln {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Layout of one float8 format: exponent bits, bias, and its special values.
struct F8Format {
  int exp_bits;
  int bias;
  bool fnuz;      // no negative zero, 0x80 is the only NaN, no infinity
  bool has_inf;   // E5M2 only
};

F8Format format_of(DType t) {
  switch (t) {
    case DType::kFloat8E4M3FN: return {4, 7, false, false};
    case DType::kFloat8E4M3FNUZ: return {4, 8, true, false};
    case DType::kFloat8E5M2: return {5, 15, false, true};
    default: return {5, 16, true, false};  // kFloat8E5M2FNUZ
  }
}

float decode_f8(const F8Format& f, uint8_t b) {
  const int mant_bits = 7 - f.exp_bits;
  const bool neg = b & 0x80;
  const int e = (b >> mant_bits) & ((1 << f.exp_bits) - 1);
  const int m = b & ((1 << mant_bits) - 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (f.fnuz) {
    if (b == 0x80) return nan;
  } else if (f.has_inf) {
    if (e == 31) return m == 0 ? (neg ? -INFINITY : INFINITY) : nan;
  } else if ((b & 0x7f) == 0x7f) {
    return nan;  // E4M3FN: S.1111.111 is NaN, there is no infinity
  }
  float v = e == 0 ? std::ldexp(static_cast<float>(m), 1 - f.bias - mant_bits)
                   : std::ldexp(static_cast<float>(m + (1 << mant_bits)), e - f.bias - mant_bits);
  return neg ? -v : v;
}

// All finite non-negative values of a format, ascending, with their codes.
struct F8Table {
  std::array<float, 128> value{};
  std::array<uint8_t, 128> code{};
  int count = 0;
};

const F8Table& table_for(DType t) {
  static const auto tables = [] {
    std::array<F8Table, 4> all;
    for (int k = 0; k < 4; ++k) {
      F8Format f = format_of(static_cast<DType>(17 + k));
      F8Table& tab = all[k];
      for (int b = 0; b < 128; ++b) {
        float v = decode_f8(f, static_cast<uint8_t>(b));
        if (std::isfinite(v)) {
          tab.value[tab.count] = v;
          tab.code[tab.count] = static_cast<uint8_t>(b);
          ++tab.count;
        }
      }
    }
    return all;
  }();
  return tables[static_cast<int>(t) - 17];
}

}  // namespace

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return float_of(sign | 0x7f800000u | (mant << 13));
  return float_of(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t float_to_half(float f) {
  uint32_t u = bits_of(f);
  const uint16_t sign = (u >> 16) & 0x8000;
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return sign | 0x7e00;  // NaN
  if (u >= 0x477ff000u) return sign | 0x7c00;  // rounds to infinity
  if (u < 0x38800000u) {                      // subnormal or zero in half
    float a = float_of(u);
    // Adding 0.5 (2^-1) puts the half subnormal's bits in the low mantissa, rounded to even.
    float r = a + 0.5f;
    return sign | static_cast<uint16_t>(bits_of(r) - bits_of(0.5f));
  }
  const uint32_t mant_odd = (u >> 13) & 1;
  u += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return sign | static_cast<uint16_t>(u >> 13);
}

float bfloat16_to_float(uint16_t b) { return float_of(static_cast<uint32_t>(b) << 16); }

uint16_t float_to_bfloat16(float f) {
  uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

void halves_to_floats(const uint16_t* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  for (; i < n; ++i) out[i] = half_to_float(in[i]);
}

void floats_to_halves(const float* in, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) out[i] = float_to_half(in[i]);
}

void bfloat16s_to_floats(const uint16_t* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i b = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_slli_epi32(b, 16));
  }
  for (; i < n; ++i) out[i] = bfloat16_to_float(in[i]);
}

void floats_to_bfloat16s(const float* in, uint16_t* out, int64_t n) {
  int64_t i = 0;
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i half_ulp = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1), quiet = _mm256_set1_epi32(0x400000);
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    // Round to nearest even; a NaN keeps its top bits, made quiet, as float_to_bfloat16 does.
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
    const __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(half_ulp, odd));
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    const __m256i v = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, _mm256_or_si256(u, quiet), nan), 16);
    // 8 x 32-bit -> 8 x 16-bit, in order (packus works within 128-bit lanes).
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_castsi256_si128(packed));
  }
  for (; i < n; ++i) out[i] = float_to_bfloat16(in[i]);
}

float float8_to_float(DType type, uint8_t bits) { return decode_f8(format_of(type), bits); }

uint8_t float_to_float8(DType type, float x, bool saturate) {
  const F8Format f = format_of(type);
  const F8Table& tab = table_for(type);
  const uint8_t nan = f.fnuz ? 0x80 : 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return f.has_inf ? 0x7f : nan;
  const float a = std::fabs(x);
  const float max = tab.value[tab.count - 1];
  const uint8_t max_code = tab.code[tab.count - 1];
  auto overflow = [&]() -> uint8_t {
    if (saturate) return sign | max_code;
    return f.has_inf ? (sign | 0x7c) : nan;
  };
  if (std::isinf(a)) return overflow();
  // Half a step above max still rounds to max; at or past it the value overflows.
  const float step = max - tab.value[tab.count - 2];
  if (a >= max + step / 2) return overflow();
  if (a >= max) return sign | max_code;
  auto it = std::upper_bound(tab.value.begin(), tab.value.begin() + tab.count, a);
  const int hi = static_cast<int>(it - tab.value.begin());
  const int lo = hi - 1;
  const float dlo = a - tab.value[lo], dhi = tab.value[hi] - a;
  int pick = dlo < dhi ? lo : (dhi < dlo ? hi : ((tab.code[lo] & 1) ? hi : lo));
  uint8_t code = tab.code[pick];
  if (code == 0) return f.fnuz ? 0 : sign;  // zero keeps its sign except in fnuz formats
  return sign | code;
}

double load_as_double(DType t, const void* data, int64_t i) {
  switch (t) {
    case DType::kFloat32: return static_cast<const float*>(data)[i];
    case DType::kFloat64: return static_cast<const double*>(data)[i];
    case DType::kFloat16: return half_to_float(static_cast<const uint16_t*>(data)[i]);
    case DType::kBFloat16: return bfloat16_to_float(static_cast<const uint16_t*>(data)[i]);
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2:
    case DType::kFloat8E5M2FNUZ: return float8_to_float(t, static_cast<const uint8_t*>(data)[i]);
    case DType::kUInt8:
    case DType::kUInt4: return static_cast<const uint8_t*>(data)[i];
    case DType::kInt8:
    case DType::kInt4: return static_cast<const int8_t*>(data)[i];
    case DType::kUInt16: return static_cast<const uint16_t*>(data)[i];
    case DType::kInt16: return static_cast<const int16_t*>(data)[i];
    case DType::kInt32: return static_cast<const int32_t*>(data)[i];
    case DType::kInt64: return static_cast<double>(static_cast<const int64_t*>(data)[i]);
    case DType::kUInt32: return static_cast<const uint32_t*>(data)[i];
    case DType::kUInt64: return static_cast<double>(static_cast<const uint64_t*>(data)[i]);
    case DType::kBool: return static_cast<const uint8_t*>(data)[i] ? 1.0 : 0.0;
    case DType::kComplex64: return static_cast<const float*>(data)[2 * i];
    case DType::kComplex128: return static_cast<const double*>(data)[2 * i];
    default: return 0.0;
  }
}

double clamp_to_dtype_range(DType t, double v) {
  double lo, hi;
  switch (t) {
    case DType::kInt4: lo = -8, hi = 7; break;
    case DType::kUInt4: lo = 0, hi = 15; break;
    case DType::kInt8: lo = -128, hi = 127; break;
    case DType::kUInt8: lo = 0, hi = 255; break;
    case DType::kInt16: lo = -32768, hi = 32767; break;
    case DType::kUInt16: lo = 0, hi = 65535; break;
    case DType::kInt32: lo = -2147483648.0, hi = 2147483647.0; break;
    case DType::kUInt32: lo = 0, hi = 4294967295.0; break;
    // The largest doubles below 2^63 and 2^64: casting 2^63 itself to int64 is undefined.
    case DType::kInt64: lo = -9223372036854775808.0, hi = 9223372036854774784.0; break;
    case DType::kUInt64: lo = 0, hi = 18446744073709549568.0; break;
    default: return v;
  }
  return std::isnan(v) ? 0 : std::clamp(v, lo, hi);
}

void store_from_double(DType t, void* data, int64_t i, double v) {
  switch (t) {
    case DType::kFloat32: static_cast<float*>(data)[i] = static_cast<float>(v); break;
    case DType::kFloat64: static_cast<double*>(data)[i] = v; break;
    case DType::kFloat16: static_cast<uint16_t*>(data)[i] = float_to_half(static_cast<float>(v)); break;
    case DType::kBFloat16:
      static_cast<uint16_t*>(data)[i] = float_to_bfloat16(static_cast<float>(v));
      break;
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2:
    case DType::kFloat8E5M2FNUZ:
      static_cast<uint8_t*>(data)[i] = float_to_float8(t, static_cast<float>(v));
      break;
    case DType::kUInt8: static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(v); break;
    case DType::kUInt4: static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(v) & 0xf; break;
    case DType::kInt8: static_cast<int8_t*>(data)[i] = static_cast<int8_t>(v); break;
    case DType::kInt4: static_cast<int8_t*>(data)[i] = static_cast<int8_t>(v); break;
    case DType::kUInt16: static_cast<uint16_t*>(data)[i] = static_cast<uint16_t>(v); break;
    case DType::kInt16: static_cast<int16_t*>(data)[i] = static_cast<int16_t>(v); break;
    case DType::kInt32: static_cast<int32_t*>(data)[i] = static_cast<int32_t>(v); break;
    case DType::kInt64: static_cast<int64_t*>(data)[i] = static_cast<int64_t>(v); break;
    case DType::kUInt32: static_cast<uint32_t*>(data)[i] = static_cast<uint32_t>(v); break;
    case DType::kUInt64: static_cast<uint64_t*>(data)[i] = static_cast<uint64_t>(v); break;
    case DType::kBool: static_cast<uint8_t*>(data)[i] = v != 0.0; break;
    case DType::kComplex64:
      static_cast<float*>(data)[2 * i] = static_cast<float>(v);
      static_cast<float*>(data)[2 * i + 1] = 0;
      break;
    case DType::kComplex128:
      static_cast<double*>(data)[2 * i] = v;
      static_cast<double*>(data)[2 * i + 1] = 0;
      break;
    default: break;
  }
}

}  // namespace kiln
