// DynamicQuantGemm (dynamic_quant_gemm.h).
#include "kernels/cpu/gemm/dynamic_quant_gemm.h"

#include <vector>

#include "core/thread_pool.h"
#include "kernels/ref/quantize.h"

namespace kiln::gemm {

DynamicQuantGemm DynamicQuantGemm::pack(const int8_t* b, int64_t k, int64_t n, int row_bits) {
  DynamicQuantGemm g;
  g.row_top_ = row_bits == 7 ? 127 : 255;
  g.packed_ = PackedInt8::pack(b, true, n, k, n, {0}, row_bits == 7);
  return g;
}

void DynamicQuantGemm::run(const float* a, int64_t rows, const float* b_scale, bool b_per_column, const float* bias,
                           const Epilogue* epilogue, float* y, ThreadPool* pool) const {
  const int64_t depth = k();
  if (rows <= 0 || n() <= 0) return;
  Dequantize dq;
  dq.b_scale = b_scale, dq.b_per_column = b_per_column;
  dq.bias = bias;
  dq.epilogue = epilogue;
  if (const PackedU8S8* b = packed_.u8s8()) {  // the rows quantized into the tiles' layout
    gemm_u8s8_dynamic(rows, a, depth, *b, dq, y, n(), pool, row_top_);
    return;
  }
  // Each row's codes, scale and zero point: buffers that grow once per calling thread. Workers
  // get pointers (a thread_local named in the lambda would be the worker's own).
  thread_local std::vector<uint8_t> codes_buffer;
  thread_local std::vector<float> scales_buffer;
  thread_local std::vector<int32_t> zero_points;
  codes_buffer.resize(static_cast<size_t>(rows * depth));
  scales_buffer.resize(static_cast<size_t>(rows));
  zero_points.resize(static_cast<size_t>(rows));
  uint8_t* codes = codes_buffer.data();
  float* scales = scales_buffer.data();
  int32_t* zps = zero_points.data();
  auto quantize_rows = [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i)
      dynamic_quantize_row_u8(a + i * depth, depth, codes + i * depth, &scales[i], &zps[i], row_top_);
  };
  if (pool && rows > 1 && rows * depth > (1 << 14))
    pool->parallel_for(rows, 1, quantize_rows);
  else
    quantize_rows(0, rows);
  dq.a_scale = scales, dq.a_per_row = true;
  packed_.multiply(rows, codes, false, depth, zero_points, dq, y, pool);
}

}  // namespace kiln::gemm
