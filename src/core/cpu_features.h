// What the CPU we run on can execute, read once (cpuid + xgetbv) at first use, and the one place
// that decides which instruction-set level kiln's kernels use. Kernels compiled for wider ISAs
// than the x86-64 AVX2 baseline are only called when cpu_features() says so.
#pragma once

#include <string>

#include "kiln/cpu.h"  // IsaLevel, isa_name, parse_isa, set_max_isa

namespace kiln {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_bf16 = false, avx512_vnni = false, avx512_vbmi = false;
  bool avx_vnni = false;  // VEX-encoded vpdpbusd / vpdpwssd on xmm and ymm
  std::string model;  // the brand string, e.g. "AMD EPYC 9R14 96-Core Processor"; "" if none

  // AVX-512 F/BW/VL/DQ with the OS saving the zmm state: what kiln's AVX-512 kernels need.
  bool has_avx512() const { return avx512f && avx512bw && avx512vl && avx512dq; }
  bool has_avx512_vnni() const { return has_avx512() && avx512_vnni; }
  // AVX-512 VBMI (vpermi2b: 128-byte table lookups), at the avx512 level and above.
  bool has_avx512_vbmi() const { return has_avx512() && avx512_vbmi; }
  // AVX-VNNI (the AVX2 level's 8-bit tiles then take vpdpbusd on ymm).
  bool has_avx_vnni() const { return avx2 && avx_vnni; }
  bool has_level(IsaLevel level) const;  // whether these features include the level's own
  IsaLevel level() const;                // the highest level these features have
  std::string to_string() const;  // e.g. "avx2 fma f16c avx512f ..."
};

// What cpuid reports, whatever the level in use.
const CpuFeatures& detected_cpu_features();

// What kernels may use: the detected features without those above the level in use, which is
// the CPU's own unless KILN_ISA (or set_max_isa, e.g. the CLI's --isa) caps it, so that a lower
// ISA's kernels run and are tested on a wider CPU. Fixed at the first call; thread-safe.
const CpuFeatures& cpu_features();

// "" when KILN_ISA is unset or names a level this CPU has, else the error to report. Session
// creation and the optimizer return it as their error, so a bad KILN_ISA never passes silently.
std::string isa_env_error();

}  // namespace kiln
