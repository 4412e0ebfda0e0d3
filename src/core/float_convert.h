// Conversions between float and the 16- and 8-bit float formats ONNX defines.
// Float-to-narrow conversions round to nearest even; `saturate` follows ONNX Cast semantics.
#pragma once

#include <cstdint>

#include "kiln/dtype.h"

namespace kiln {

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bfloat16_to_float(uint16_t b);
uint16_t float_to_bfloat16(float f);

// The same conversions over arrays: F16C for float16 (kiln's baseline ISA has it), integer
// shifts and rounding on 8 lanes for bfloat16. Equal to the scalar ones but for NaN payloads.
void halves_to_floats(const uint16_t* in, float* out, int64_t n);
void floats_to_halves(const float* in, uint16_t* out, int64_t n);
void bfloat16s_to_floats(const uint16_t* in, float* out, int64_t n);
void floats_to_bfloat16s(const float* in, uint16_t* out, int64_t n);

float float8_to_float(DType type, uint8_t bits);
uint8_t float_to_float8(DType type, float f, bool saturate = true);

// Float value of any arithmetic element at index i of raw storage of type t (bool -> 0/1).
// Not for strings. Used by generic reference kernels that compute in float/double.
double load_as_double(DType t, const void* data, int64_t i);
void store_from_double(DType t, void* data, int64_t i, double v);
// v clamped into the range of integer type t (NaN gives 0), so that store_from_double's cast is
// defined; other types pass v through.
double clamp_to_dtype_range(DType t, double v);

}  // namespace kiln
