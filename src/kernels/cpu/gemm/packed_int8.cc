// PackedInt8 and dequantize_rows (packed_int8.h).
#include "kernels/cpu/gemm/packed_int8.h"

#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"

namespace kiln::gemm {
namespace {

int32_t value(const void* p, bool is_signed, int64_t i) {
  return is_signed ? static_cast<const int8_t*>(p)[i] : static_cast<const uint8_t*>(p)[i];
}

}  // namespace

PackedInt8 PackedInt8::pack(const void* b, bool b_signed, int64_t ldb, int64_t k, int64_t n,
                            const std::vector<int32_t>& zb, bool a_seven_bit) {
  PackedInt8 r;
  if (k <= kMaxU8S8Depth) {
    r.u8s8_ = PackedU8S8::pack(b, b_signed, ldb, k, n, zb);
    if (u8s8_available(r.u8s8_.seven_bit(), a_seven_bit)) return r;
    r.u8s8_ = PackedU8S8();  // 8-bit B and A on AVX2: gemm_s16's exact vpmaddwd
  }
  std::vector<int16_t> wide(static_cast<size_t>(k * n));
  for (int64_t q = 0; q < k; ++q)
    for (int64_t j = 0; j < n; ++j)
      wide[static_cast<size_t>(q * n + j)] =
          static_cast<int16_t>(value(b, b_signed, q * ldb + j) - zb[zb.size() == 1 ? 0 : static_cast<size_t>(j)]);
  r.s16_ = PackedS16::pack(wide.data(), n, k, n);
  return r;
}

void PackedInt8::multiply(int64_t rows, const void* a, bool a_signed, int64_t lda, const std::vector<int32_t>& za,
                          int32_t* c, ThreadPool* pool) const {
  if (!u8s8_.empty()) {
    gemm_u8s8(rows, a, a_signed, lda, za, u8s8_, c, n(), pool);
    return;
  }
  // A minus its zero points, widened: the copy grows once per thread, later runs allocate nothing.
  const int64_t depth = k();
  thread_local std::vector<int16_t> wide;
  wide.resize(static_cast<size_t>(rows * depth));
  auto widen = [&](const auto* in) {
    for (int64_t i = 0; i < rows; ++i) {
      const int32_t z = za[za.size() == 1 ? 0 : static_cast<size_t>(i)];
      int16_t* out = wide.data() + i * depth;
      for (int64_t q = 0; q < depth; ++q) out[q] = static_cast<int16_t>(static_cast<int32_t>(in[i * lda + q]) - z);
    }
  };
  if (a_signed)
    widen(static_cast<const int8_t*>(a));
  else
    widen(static_cast<const uint8_t*>(a));
  gemm_s16(rows, wide.data(), depth, s16_, c, n(), pool);
}

void PackedInt8::multiply(int64_t rows, const void* a, bool a_signed, int64_t lda, const std::vector<int32_t>& za,
                          const Dequantize& dq, float* y, ThreadPool* pool) const {
  if (!u8s8_.empty()) {
    gemm_u8s8(rows, a, a_signed, lda, za, u8s8_, dq, y, n(), pool);
    return;
  }
  thread_local std::vector<int32_t> product;
  product.resize(static_cast<size_t>(rows * n()));
  multiply(rows, a, a_signed, lda, za, product.data(), pool);
  dequantize_rows(product.data(), rows, n(), dq, y, pool);
}

void dequantize_rows(const int32_t* c, int64_t rows, int64_t n, const Dequantize& dq, float* y, ThreadPool* pool) {
  auto run = [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      const float as = dq.a_scale[dq.a_per_row ? i : 0];
      const int32_t* ci = c + i * n;
      float* yi = y + i * n;
      // fma, as gemm_u8s8's tiles compute it, so that both routes give the same floats.
      for (int64_t j = 0; j < n; ++j)
        yi[j] = std::fma(static_cast<float>(ci[j]), as * dq.b_scale[dq.b_per_column ? j : 0], dq.bias ? dq.bias[j] : 0.0f);
      if (dq.epilogue) apply_epilogue(*dq.epilogue, yi, n, i, 0, 1, n);
    }
  };
  if (pool && rows > 1 && rows * n > (1 << 14))
    pool->parallel_for(rows, 1, run);
  else
    run(0, rows);
}

}  // namespace kiln::gemm
