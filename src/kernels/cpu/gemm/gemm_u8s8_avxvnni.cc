// gemm_u8s8's AVX-VNNI kernels: gemm_u8s8_ymm.h's tile with one vpdpbusd a quad and 8 columns
// (any s8 B), the AVX2 row kernels of gemm_u8s8.cc. This file alone is compiled with -mavxvnni
// (CMakeLists.txt); it is reached only on CPUs with AVX-VNNI and no AVX-512 VNNI.
#include "kernels/cpu/gemm/gemm_u8s8_ymm.h"

namespace kiln::gemm::u8s8 {
namespace {

struct VnniQuads {
  static __m256i add(__m256i acc, __m256i a, __m256i b) { return _mm256_dpbusd_avx_epi32(acc, a, b); }
};

}  // namespace

Kernels avxvnni_kernels() {
  Kernels k = avx2_bytes_kernels();  // A's rows as on AVX2
  k.tile = YmmTile<VnniQuads>::tile;
  return k;
}

}  // namespace kiln::gemm::u8s8
