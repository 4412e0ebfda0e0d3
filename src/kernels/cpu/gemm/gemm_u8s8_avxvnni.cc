// gemm_u8s8's AVX-VNNI kernels: gemm_u8s8_ymm.h's tile with one vpdpbusd a quad and 8 columns
// (any s8 B), the AVX2 row kernels of gemm_u8s8.cc. This file alone is compiled with -mavxvnni
// (CMakeLists.txt); it is reached only on CPUs with AVX-VNNI and no AVX-512 VNNI.
#include "kernels/cpu/gemm/gemm_u8s8_ymm.h"
#include "kernels/cpu/ymm_dot_steps.h"

namespace kiln::gemm::u8s8 {

Kernels avxvnni_kernels() {
  Kernels k = avx2_bytes_kernels();  // A's rows as on AVX2
  k.tile = YmmTile<ymm::VnniQuads>::tile;
  return k;
}

}  // namespace kiln::gemm::u8s8
