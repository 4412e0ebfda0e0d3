// What the CPU we run on can execute, read once (cpuid + xgetbv) at first use. Kernels compiled
// for wider ISAs than the x86-64 AVX2 baseline are only called when these flags say so.
#pragma once

#include <string>

namespace kiln {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_bf16 = false, avx512_vnni = false;
  std::string model;  // the brand string, e.g. "AMD EPYC 9R14 96-Core Processor"; "" if none

  // AVX-512 F/BW/VL/DQ with the OS saving the zmm state: what kiln's AVX-512 kernels need.
  bool has_avx512() const { return avx512f && avx512bw && avx512vl && avx512dq; }
  std::string to_string() const;  // e.g. "avx2 fma f16c avx512f ..."
};

// Detected once; thread-safe.
const CpuFeatures& cpu_features();

}  // namespace kiln
