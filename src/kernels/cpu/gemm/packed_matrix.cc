// Packs B slice by slice with the same loops the GEMM uses per call (pack.h), so a prepacked
// panel is bit-for-bit the panel the GEMM would have packed itself at that slice depth.
#include "kernels/cpu/gemm/packed_matrix.h"

#include <algorithm>

#include "kernels/cpu/gemm/pack.h"

namespace kiln::gemm {

PackedMatrix PackedMatrix::pack_b(const float* b, int64_t ldb, bool trans, int64_t k, int64_t n,
                                  const MicroKernel* kernel) {
  PackedMatrix m;
  m.kernel_ = kernel ? *kernel : *best_f32_kernel();
  m.k_ = std::max<int64_t>(k, 0);
  m.n_ = std::max<int64_t>(n, 0);
  const int64_t nr = m.kernel_.nr;
  m.n_padded_ = (m.n_ + nr - 1) / nr * nr;
  // The fewest slices of at most kc_packed, evened out (K 3072 at 1024: three of 1024).
  const int64_t kc_max = std::max<int64_t>(m.kernel_.kc_packed, 1);
  const int64_t slices = std::max<int64_t>((m.k_ + kc_max - 1) / kc_max, 1);
  m.kc_ = std::max<int64_t>((m.k_ + slices - 1) / slices, 1);
  const int64_t bytes = std::max<int64_t>(m.bytes(), 64);
  m.data_.reset(static_cast<float*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
  if (m.empty()) return m;
  for (int64_t p0 = 0; p0 < m.k_; p0 += m.kc_) {
    const int64_t depth = std::min(m.kc_, m.k_ - p0);
    kiln::gemm::pack_b(b, ldb, trans, p0, depth, 0, m.n_, nr, m.data_.get() + p0 * m.n_padded_);
  }
  return m;
}

}  // namespace kiln::gemm
