// What gemm_u8s8's driver (gemm_u8s8.cc: A's rows, threads, panels) hands its ISA's kernels
// (gemm_u8s8_avx512vnni.cc: zmm tiles; gemm_u8s8_ymm.h: ymm tiles for AVX-VNNI and for AVX2 on
// 7-bit B), and the kernels themselves.
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm/gemm_u8s8.h"

namespace kiln::gemm::u8s8 {

// One product's state: A's rows as u8 of whole quads, their compensation terms, B, the output.
struct Call {
  const uint8_t* a;  // u8 rows of `quads` int32 words
  int64_t quads;
  const int32_t* alpha;     // per row
  const int32_t* row_term;  // sum_k au - k alpha, per row (mod 2^32)
  const PackedU8S8* b;
  int32_t* c;  // int32 sums, or
  float* y;    // floats, with dq
  int64_t ldc;
  const Dequantize* dq;
};

// A part of the next B panel for a tile to bring into L2 while it computes: `lines` cache lines
// from `at`, `step` of them a k quad.
struct Prefetch {
  const int8_t* at = nullptr;
  int64_t lines = 0, step = 1;
};

// The tiles' row count: a tile always runs kRows rows (A has zero rows past m).
inline constexpr int64_t kRows = 6;

struct Kernels {
  // Rows [i0, i0 + rows) of panel p (cols of its 64 columns), finished: compensated, and stored
  // as int32 sums or dequantized floats (with dq's epilogue).
  void (*tile)(const Call& call, int64_t i0, int64_t rows, int64_t p, int64_t cols, Prefetch next);
};

Kernels avx512vnni_kernels();  // gemm_u8s8_avx512vnni.cc
Kernels avxvnni_kernels();     // gemm_u8s8_avxvnni.cc
Kernels avx2_bytes_kernels();  // gemm_u8s8.cc (B of 7-bit values only)

}  // namespace kiln::gemm::u8s8
