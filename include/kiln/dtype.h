// Element types, numbered as ONNX's TensorProto.DataType so that conversion is the identity.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

enum class DType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kComplex64 = 14,
  kComplex128 = 15,
  kBFloat16 = 16,
  kFloat8E4M3FN = 17,
  kFloat8E4M3FNUZ = 18,
  kFloat8E5M2 = 19,
  kFloat8E5M2FNUZ = 20,
  kUInt4 = 21,  // held unpacked in memory, one value per byte; packed only in files
  kInt4 = 22,
};

// Bytes per element in memory (int4/uint4: 1, since kiln keeps them unpacked). 0 for
// kUndefined; sizeof(std::string) is not meaningful, so kString reports 0 as well.
size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "float32", "int64", ...
bool dtype_is_valid(int32_t onnx_type);
bool dtype_is_float(DType t);  // any floating type, float8 included
// float32, float64, float16 or bfloat16: the float types kernels compute in (float8 is storage only).
bool dtype_is_compute_float(DType t);
bool dtype_is_integer(DType t);  // signed or unsigned, int4 included; bool excluded
bool dtype_is_signed(DType t);
bool dtype_is_8bit_integer(DType t);  // int8 or uint8: the codes of the 8-bit quantized ops

// Lower-precision floats stored as their bit patterns.
struct Float16 {
  uint16_t bits = 0;
};
struct BFloat16 {
  uint16_t bits = 0;
};
struct Float8E4M3FN {
  uint8_t bits = 0;
};
struct Float8E4M3FNUZ {
  uint8_t bits = 0;
};
struct Float8E5M2 {
  uint8_t bits = 0;
};
struct Float8E5M2FNUZ {
  uint8_t bits = 0;
};
struct UInt4 {
  uint8_t value = 0;
};
struct Int4 {
  int8_t value = 0;
};

}  // namespace kiln
