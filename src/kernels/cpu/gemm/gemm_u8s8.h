// The 8-bit GEMM of MatMulInteger and the dynamically quantized MatMuls, on u8 x s8 quads: on
// AVX-512 VNNI and AVX-VNNI CPUs vpdpbusd multiplies 4 pairs of u8 x s8 values and adds them into
// one int32 lane, exactly (the non-saturating form), 64 (zmm) or 32 (ymm) products an
// instruction; on AVX2 alone, for B of 7-bit values (|bs| <= 64, what `kiln quantize` writes
// for such CPUs) or A of 7-bit ones (au <= 127: DynamicQuantMatMul's 7-bit rows), vpmaddubsw's
// u8 x s8 pair sums stay within 16 bits (2 x 255 x 64 or 2 x 127 x 128 at most) and vpmaddwd
// against ones adds the pairs into the int32 lane, exactly (3 instructions for 32 products, where
// gemm_s16's vpmaddwd on widened values takes 4, on B twice the bytes). The zero points and the
// other signs become exact compensation terms: with A's values moved to u8 (au = a, or a + 128 when
// signed) and B's to s8 (bs = b, or b - 128 when unsigned),
//   sum_k (a - za)(b - zb) = sum_k au bs + beta_j sum_k au - alpha_i sum_k bs - K alpha_i beta_j
// where alpha_i = za_i (+ 128 for a signed A) and beta_j = -zb_j (+ 128 for an unsigned B).
#pragma once

#include <cstdint>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/gemm/epilogue.h"

namespace kiln {
class ThreadPool;
}

namespace kiln::gemm {

// Whether this CPU runs gemm_u8s8 on a B of any s8 values and any u8 A (AVX-512 VNNI or
// AVX-VNNI), or where one side holds 7-bit values (b_seven_bit, a_seven_bit: AVX2 too).
inline bool u8s8_available(bool b_seven_bit = false, bool a_seven_bit = false) {
  return cpu_features().has_avx512_vnni() || cpu_features().has_avx_vnni() || b_seven_bit || a_seven_bit;
}

// Sums of up to this many products: sum_k au bs stays well inside int32, and so does the
// result; deeper ones take gemm_s16.
inline constexpr int64_t kMaxU8S8Depth = 8192;

// B [k x n] (int8 when b_signed, else uint8), row-major with leading dimension ldb, minus its
// zero points zb (one, or one per column), packed once (Kernel::prepare).
class PackedU8S8 {
 public:
  static PackedU8S8 pack(const void* b, bool b_signed, int64_t ldb, int64_t k, int64_t n,
                         const std::vector<int32_t>& zb);
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  bool empty() const { return data_.empty(); }
  // Panel p: kPanelColumns columns as strips of kStripColumns, each strip ceil(k / 4) quads x
  // kStripColumns columns x 4 bytes (64 bytes a quad), so that a tile's pass over 16 columns
  // reads one contiguous stream (rows of all 64 columns, a pass reading 64 bytes of every 256,
  // ran 4-9 % slower on a Zen 3: DESIGN.md).
  static constexpr int64_t kPanelColumns = 64, kStripColumns = 16;
  const int8_t* panel(int64_t p) const { return data_.data() + p * quads() * kPanelColumns * 4; }
  int64_t strip_bytes() const { return quads() * kStripColumns * 4; }
  int64_t quads() const { return (k_ + 3) / 4; }
  const std::vector<int32_t>& column_sums() const { return column_sums_; }  // sum_k bs, per column
  const std::vector<int32_t>& beta() const { return beta_; }                // per column
  bool seven_bit() const { return seven_bit_; }  // every bs within [-64, 64]

 private:
  bool seven_bit_ = true;
  int64_t k_ = 0, n_ = 0;
  std::vector<int8_t> data_;
  std::vector<int32_t> column_sums_, beta_;
};

// The dequantization of an 8-bit product's int32 sums c into floats, for dynamically quantized
// MatMuls: y[i, j] = float(c[i, j]) * (a_scale[i] * b_scale[j]) + bias[j], a_scale one value (or
// one per row when a_per_row), b_scale one (or one per column), bias null or one per column.
// Then `epilogue` (activation, residual), if given, on each dequantized tile.
struct Dequantize {
  const float* a_scale = nullptr;
  bool a_per_row = false;
  const float* b_scale = nullptr;
  bool b_per_column = false;
  const float* bias = nullptr;
  const Epilogue* epilogue = nullptr;
};

// C[m x n] = (A - za)(B - zb): A [m x k] (int8 when a_signed, else uint8) with leading
// dimension lda, za one zero point or one per row (za.size() == m), C int32 with ldc.
// u8s8_available(b.seven_bit()) must hold. `pool` may be null.
void gemm_u8s8(int64_t m, const void* a, bool a_signed, int64_t lda, const std::vector<int32_t>& za,
               const PackedU8S8& b, int32_t* c, int64_t ldc, ThreadPool* pool);
// The same, each tile dequantized as it leaves the registers: y [m x n] float with leading
// dimension ldy, no int32 C written or read again.
void gemm_u8s8(int64_t m, const void* a, bool a_signed, int64_t lda, const std::vector<int32_t>& za,
               const PackedU8S8& b, const Dequantize& dq, float* y, int64_t ldy, ThreadPool* pool);
// DynamicQuantMatMul's product: float A [m x k] (leading dimension lda) quantized row by row
// (dynamic_quantize_row_u8's rule, kernels/ref/quantize.h, codes up to row_top: 255, or 127 for
// its 7-bit rows) straight into the tiles' rows, then the above with those rows' scales
// (dq.a_scale is set here). u8s8_available(b.seven_bit(), row_top <= 127) must hold.
void gemm_u8s8_dynamic(int64_t m, const float* a, int64_t lda, const PackedU8S8& b, Dequantize dq, float* y,
                       int64_t ldy, ThreadPool* pool, int row_top = 255);

}  // namespace kiln::gemm
