// Reference kernels for Cast and CastLike: every pair of element types, including float8,
// int4/uint4 (held one per byte), bool and string <-> number, with Cast's `saturate` rules.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>

#include "core/float_convert.h"
#include "kernels/fast_path.h"
#include "kernels/ref/elementwise_util.h"

namespace kiln {
namespace {

bool castable(DType t) {
  return t != DType::kUndefined && t != DType::kComplex64 && t != DType::kComplex128 &&
         dtype_is_valid(static_cast<int32_t>(t));
}

// One element on its way between types: floats travel as double, integers exactly.
struct Num {
  enum class Kind { kFloat, kSigned, kUnsigned } kind = Kind::kFloat;
  double d = 0;
  int64_t i = 0;
  uint64_t u = 0;

  double as_double() const {
    switch (kind) {
      case Kind::kSigned:
        return static_cast<double>(i);
      case Kind::kUnsigned:
        return static_cast<double>(u);
      default:
        return d;
    }
  }
  float as_float() const {
    switch (kind) {
      case Kind::kSigned:
        return static_cast<float>(i);
      case Kind::kUnsigned:
        return static_cast<float>(u);
      default:
        return static_cast<float>(d);
    }
  }
  bool nonzero() const {
    switch (kind) {
      case Kind::kSigned:
        return i != 0;
      case Kind::kUnsigned:
        return u != 0;
      default:
        return d != 0;  // NaN is true
    }
  }
  // Integer target T: floats truncate and saturate, integers keep their low bits.
  template <typename T>
  T to_int() const {
    switch (kind) {
      case Kind::kSigned:
        return static_cast<T>(i);
      case Kind::kUnsigned:
        return static_cast<T>(u);
      default:
        return ew::saturate_to_int<T>(d);
    }
  }
};

Num float_num(double d) { return Num{Num::Kind::kFloat, d, 0, 0}; }
Num signed_num(int64_t i) { return Num{Num::Kind::kSigned, 0, i, 0}; }
Num unsigned_num(uint64_t u) { return Num{Num::Kind::kUnsigned, 0, 0, u}; }

Num load(DType t, const void* data, int64_t k) {
  switch (t) {
    case DType::kInt8:
      return signed_num(static_cast<const int8_t*>(data)[k]);
    case DType::kInt16:
      return signed_num(static_cast<const int16_t*>(data)[k]);
    case DType::kInt32:
      return signed_num(static_cast<const int32_t*>(data)[k]);
    case DType::kInt64:
      return signed_num(static_cast<const int64_t*>(data)[k]);
    case DType::kInt4:
      return signed_num(static_cast<const int8_t*>(data)[k]);
    case DType::kUInt8:
      return unsigned_num(static_cast<const uint8_t*>(data)[k]);
    case DType::kUInt16:
      return unsigned_num(static_cast<const uint16_t*>(data)[k]);
    case DType::kUInt32:
      return unsigned_num(static_cast<const uint32_t*>(data)[k]);
    case DType::kUInt64:
      return unsigned_num(static_cast<const uint64_t*>(data)[k]);
    case DType::kUInt4:
      return unsigned_num(static_cast<const uint8_t*>(data)[k]);
    case DType::kBool:
      return unsigned_num(static_cast<const uint8_t*>(data)[k] != 0 ? 1 : 0);
    default:
      return float_num(load_as_double(t, data, k));
  }
}

template <typename T>
void put(void* data, int64_t k, T v) {
  static_cast<T*>(data)[k] = v;
}

// 4-bit targets: floats round to nearest even and clamp to the range; integers keep the low
// four bits (two's complement for int4), as for other fixed-point narrowing.
int8_t to_int4(const Num& v) {
  if (v.kind == Num::Kind::kFloat) {
    if (std::isnan(v.d)) return 0;
    return static_cast<int8_t>(std::clamp(std::nearbyint(v.d), -8.0, 7.0));
  }
  const int low = static_cast<int>(v.to_int<uint8_t>() & 0xf);
  return static_cast<int8_t>(low >= 8 ? low - 16 : low);
}

uint8_t to_uint4(const Num& v) {
  if (v.kind == Num::Kind::kFloat) {
    if (std::isnan(v.d)) return 0;
    return static_cast<uint8_t>(std::clamp(std::nearbyint(v.d), 0.0, 15.0));
  }
  return static_cast<uint8_t>(v.to_int<uint8_t>() & 0xf);
}

// float_to_float8 (src/core) drops the sign of every FNUZ value, not only of zero; put it back
// for nonzero, non-NaN results. Harmless once the shared conversion keeps the sign itself.
uint8_t to_float8(DType t, float f, bool saturate) {
  uint8_t code = float_to_float8(t, f, saturate);
  const bool fnuz = t == DType::kFloat8E4M3FNUZ || t == DType::kFloat8E5M2FNUZ;
  if (fnuz && std::signbit(f) && !std::isnan(f) && code != 0 && code != 0x80) code |= 0x80;
  return code;
}

void store(DType t, void* data, int64_t k, const Num& v, bool saturate) {
  switch (t) {
    case DType::kFloat32:
      put<float>(data, k, v.as_float());
      break;
    case DType::kFloat64:
      put<double>(data, k, v.as_double());
      break;
    case DType::kFloat16:
      put<uint16_t>(data, k, float_to_half(v.as_float()));
      break;
    case DType::kBFloat16:
      put<uint16_t>(data, k, float_to_bfloat16(v.as_float()));
      break;
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2:
    case DType::kFloat8E5M2FNUZ:
      put<uint8_t>(data, k, to_float8(t, v.as_float(), saturate));
      break;
    case DType::kBool:
      put<uint8_t>(data, k, v.nonzero() ? 1 : 0);
      break;
    case DType::kInt8:
      put<int8_t>(data, k, v.to_int<int8_t>());
      break;
    case DType::kInt16:
      put<int16_t>(data, k, v.to_int<int16_t>());
      break;
    case DType::kInt32:
      put<int32_t>(data, k, v.to_int<int32_t>());
      break;
    case DType::kInt64:
      put<int64_t>(data, k, v.to_int<int64_t>());
      break;
    case DType::kUInt8:
      put<uint8_t>(data, k, v.to_int<uint8_t>());
      break;
    case DType::kUInt16:
      put<uint16_t>(data, k, v.to_int<uint16_t>());
      break;
    case DType::kUInt32:
      put<uint32_t>(data, k, v.to_int<uint32_t>());
      break;
    case DType::kUInt64:
      put<uint64_t>(data, k, v.to_int<uint64_t>());
      break;
    case DType::kInt4:
      put<int8_t>(data, k, to_int4(v));
      break;
    case DType::kUInt4:
      put<uint8_t>(data, k, to_uint4(v));
      break;
    default:
      break;
  }
}

// ---- string -> number ----

std::string trimmed(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// Parses decimal/scientific numbers and (case-insensitively) "NaN", "INF", "+INF", "-INF".
// Integer targets read integer literals exactly and fall back to truncating a float literal.
Result<Num> parse_number(const std::string& raw, DType to) {
  const std::string s = trimmed(raw);
  const char* p = s.c_str();
  char* end = nullptr;
  if (!s.empty() && (dtype_is_integer(to) || to == DType::kBool)) {
    errno = 0;
    if (s[0] == '-') {
      long long v = std::strtoll(p, &end, 10);
      if (errno == 0 && end == p + s.size()) return signed_num(v);
    } else {
      unsigned long long v = std::strtoull(p, &end, 10);
      if (errno == 0 && end == p + s.size()) return unsigned_num(v);
    }
  }
  if (to == DType::kBool) {
    std::string lower;
    for (char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "true") return unsigned_num(1);
    if (lower == "false") return unsigned_num(0);
  }
  if (!s.empty()) {
    double d = std::strtod(p, &end);
    if (end == p + s.size()) return float_num(d);
  }
  return Status::error("cannot parse '" + raw + "' as a number");
}

// ---- number -> string ----

// numpy's str() of a float: the fewest digits that read back to the same value, positional
// ("1.0", "0.25") for 1e-4 <= |x| < `upper` and for 0, scientific ("1e-05", "1.5e+16") otherwise.
// numpy's `upper` is 1e16 for double, 1e6 for float and 1e3 for float16.
template <typename F>
std::string format_float(F v, double upper) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const double a = std::fabs(static_cast<double>(v));
  const bool positional = a == 0 || (a >= 1e-4 && a < upper);
  auto r = std::to_chars(buf, buf + sizeof(buf), v,
                         positional ? std::chars_format::fixed : std::chars_format::scientific);
  std::string s(buf, r.ptr);
  if (positional && s.find('.') == std::string::npos) s += ".0";
  return s;
}

// Shortest decimal form of a narrow float (float16, bfloat16, float8) that converts back to the
// same bits, then formatted as numpy would.
std::string format_narrow(DType t, const void* data, int64_t k) {
  const double v = load_as_double(t, data, k);
  const double upper = t == DType::kFloat16 ? 1e3 : 1e2;
  if (!std::isfinite(v)) return format_float(v, upper);
  uint16_t want = 0, got = 0;
  for (int digits = 1; digits <= 17; ++digits) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.*e", digits - 1, v);
    const double parsed = std::strtod(buf, nullptr);
    // Compare the encodings: store both into a two-element scratch buffer of type t.
    uint16_t scratch[2] = {0, 0};
    store(t, scratch, 0, float_num(v), true);
    store(t, scratch, 1, float_num(parsed), true);
    want = scratch[0];
    got = scratch[1];
    if (dtype_size(t) == 1) {
      const uint8_t* b = reinterpret_cast<const uint8_t*>(scratch);
      want = b[0];
      got = b[1];
    }
    if (want == got) return format_float(parsed, upper);
  }
  return format_float(v, upper);
}

std::string to_text(DType t, const void* data, int64_t k) {
  switch (t) {
    case DType::kFloat32:
      return format_float(static_cast<const float*>(data)[k], 1e6);
    case DType::kFloat64:
      return format_float(static_cast<const double*>(data)[k], 1e16);
    case DType::kBool:
      return static_cast<const uint8_t*>(data)[k] != 0 ? "True" : "False";
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2:
    case DType::kFloat8E5M2FNUZ:
      return format_narrow(t, data, k);
    default: {
      const Num n = load(t, data, k);
      return n.kind == Num::Kind::kSigned ? std::to_string(n.i) : std::to_string(n.u);
    }
  }
}

// ---- the kernels ----

// Bool, integer and double to float32 (one-hot masks, ids, indices), in a typed loop rather than
// through the per-element dtype switch: the same values, rounded through double as `load`
// reads them. False for other source types.
bool to_float32_typed(KernelContext& ctx, const Tensor& x, Tensor* y) {
  float* out = y->data<float>();
  auto convert = [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    ew::run_range(ctx, x.numel(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[i] = static_cast<float>(static_cast<double>(in[i]));
    });
    return true;
  };
  switch (x.dtype()) {
    case DType::kBool: {
      const uint8_t* in = x.data<uint8_t>();
      ew::run_range(ctx, x.numel(), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) out[i] = in[i] != 0 ? 1.0f : 0.0f;
      });
      return true;
    }
    case DType::kFloat16:
    case DType::kBFloat16: {
      const uint16_t* in = x.data<uint16_t>();
      const bool half = x.dtype() == DType::kFloat16;
      ew::run_range(ctx, x.numel(), [&](int64_t b, int64_t e) {
        half ? halves_to_floats(in + b, out + b, e - b) : bfloat16s_to_floats(in + b, out + b, e - b);
      });
      return true;
    }
    case DType::kInt8: return convert(TypeTag<int8_t>{});
    case DType::kUInt8: return convert(TypeTag<uint8_t>{});
    case DType::kInt32: return convert(TypeTag<int32_t>{});
    case DType::kInt64: return convert(TypeTag<int64_t>{});
    case DType::kFloat64: return convert(TypeTag<double>{});
    default: return false;
  }
}

Status cast_into(KernelContext& ctx, const Tensor& x, DType to, bool saturate) {
  const DType from = x.dtype();
  if (!castable(from)) return ctx.error(std::string("cannot cast from ") + dtype_name(from));
  if (!castable(to))
    return ctx.error("cannot cast to type " + std::to_string(static_cast<int>(to)));
  if (from == to) {
    ctx.set_output(0, x);
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, to, x.shape()));
  const int64_t n = x.numel();
  if (from == DType::kString) {
    const std::string* in = x.data<std::string>();
    for (int64_t i = 0; i < n; ++i) {
      auto v = parse_number(in[i], to);
      if (!v) return ctx.error(v.status().message());
      store(to, y->raw_data(), i, *v, saturate);
    }
    return Status::ok();
  }
  if (to == DType::kString) {
    std::string* out = y->data<std::string>();
    for (int64_t i = 0; i < n; ++i) out[i] = to_text(from, x.raw_data(), i);
    return Status::ok();
  }
  if (to == DType::kFloat32 && to_float32_typed(ctx, x, y)) return Status::ok();
  if (from == DType::kFloat32 && (to == DType::kFloat16 || to == DType::kBFloat16)) {
    const float* in = x.data<float>();
    uint16_t* out = y->data<uint16_t>();
    ew::run_range(ctx, n, [&](int64_t b, int64_t e) {
      to == DType::kFloat16 ? floats_to_halves(in + b, out + b, e - b) : floats_to_bfloat16s(in + b, out + b, e - b);
    });
    return Status::ok();
  }
  ew::run_range(ctx, n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      store(to, y->raw_data(), i, load(from, x.raw_data(), i), saturate);
  });
  return Status::ok();
}

// Before opset 6 `to` was a type name string ("FLOAT", "INT64", ...).
Result<DType> dtype_from_name(const std::string& name) {
  static const char* const kNames[] = {"UNDEFINED",  "FLOAT",   "UINT8",  "INT8",   "UINT16",
                                       "INT16",      "INT32",   "INT64",  "STRING", "BOOL",
                                       "FLOAT16",    "DOUBLE",  "UINT32", "UINT64", "COMPLEX64",
                                       "COMPLEX128", "BFLOAT16"};
  std::string upper;
  for (char c : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (int i = 1; i < static_cast<int>(std::size(kNames)); ++i)
    if (upper == kNames[i]) return static_cast<DType>(i);
  return Status::error("unknown type name '" + name + "'");
}

Status cast_op(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(ew::check_inputs(ctx, 1, 1));
  const ir::Attribute* to_attr = ctx.node.attr("to");
  if (to_attr == nullptr) return ctx.error("Cast needs a 'to' attribute");
  DType to;
  if (to_attr->type == ir::Attribute::Type::kString) {
    auto t = dtype_from_name(to_attr->s);
    if (!t) return ctx.error(t.status().message());
    to = *t;
  } else {
    if (to_attr->i < 0 || to_attr->i > std::numeric_limits<int32_t>::max() ||
        !dtype_is_valid(static_cast<int32_t>(to_attr->i)))
      return ctx.error("unknown target type " + std::to_string(to_attr->i));
    to = static_cast<DType>(to_attr->i);
  }
  const bool saturate = ctx.node.attr_int("saturate", 1) != 0;
  return cast_into(ctx, ctx.input(0), to, saturate);
}

Status cast_like_op(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(ew::check_inputs(ctx, 2, 2));
  const bool saturate = ctx.node.attr_int("saturate", 1) != 0;
  return cast_into(ctx, ctx.input(0), ctx.input(1).dtype(), saturate);
}

}  // namespace

KILN_REGISTER_KERNEL("", "Cast", cast_op);
KILN_REGISTER_KERNEL("", "CastLike", cast_like_op);

// Casts to float32 from bool, 8/32/64-bit integers, double, float16 and bfloat16 run a typed
// loop, and float32 to float16 and bfloat16 a vector one.
KILN_REGISTER_FAST_PATH("", "Cast", [](const FastPathQuery& q) {
  if (q.types.empty() || !q.types[0]) return false;
  const DType from = q.types[0]->dtype;
  const int64_t to = q.node.attr_int("to", 0);
  if (from == DType::kFloat32 && (to == static_cast<int64_t>(DType::kFloat16) || to == static_cast<int64_t>(DType::kBFloat16)))
    return true;
  if (to != static_cast<int64_t>(DType::kFloat32)) return false;
  return from == DType::kBool || from == DType::kInt8 || from == DType::kUInt8 || from == DType::kInt32 ||
         from == DType::kInt64 || from == DType::kFloat64 || from == DType::kFloat32 || from == DType::kFloat16 ||
         from == DType::kBFloat16;
});

}  // namespace kiln
