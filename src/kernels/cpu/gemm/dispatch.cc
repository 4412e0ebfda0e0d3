// The run-time choice of micro-kernel: built once from cpu_features(), best first.
#include <cstring>

#include "core/cpu_features.h"
#include "kernels/cpu/gemm/microkernel.h"

namespace kiln::gemm {

const std::vector<MicroKernel>& available_f32_kernels() {
  static const std::vector<MicroKernel> kernels = [] {
    std::vector<MicroKernel> k;
    const CpuFeatures& f = cpu_features();
    if (f.has_avx512()) k.push_back(f32_gemm_avx512_kernel());
    if (f.avx2 && f.fma) k.push_back(f32_gemm_6x16_avx2_kernel());
    return k;
  }();
  return kernels;
}

const MicroKernel* best_f32_kernel() {
  const auto& k = available_f32_kernels();
  return k.empty() ? nullptr : &k.front();
}

const MicroKernel* find_f32_kernel(const char* name) {
  for (const MicroKernel& k : available_f32_kernels())
    if (std::strcmp(k.name, name) == 0) return &k;
  return nullptr;
}

}  // namespace kiln::gemm
