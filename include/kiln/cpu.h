// The CPU as kiln uses it: the instruction-set level of its kernels (capped with KILN_ISA or
// set_max_isa, as the CLI's --isa does) and the FP32 peak that "% of peak" divides by.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kiln {

// The instruction-set levels kiln has kernels for, lowest first: avx2 is AVX2 + FMA + F16C (the
// baseline), avx_vnni adds AVX-VNNI (vpdpbusd on ymm: Alder Lake, Sierra Forest, Zen 5),
// avx512 adds AVX-512 F/BW/VL/DQ (and BF16 where the CPU has it), avx512_vnni adds AVX512-VNNI.
// A CPU need not have every level below its highest (Ice Lake and Zen 4 have AVX512-VNNI but
// not AVX-VNNI); capping at a level takes away the features of the levels above it.
enum class IsaLevel { kAvx2, kAvxVnni, kAvx512, kAvx512Vnni };
inline constexpr IsaLevel kIsaLevels[] = {IsaLevel::kAvx2, IsaLevel::kAvxVnni, IsaLevel::kAvx512,
                                          IsaLevel::kAvx512Vnni};

const char* isa_name(IsaLevel level);                      // "avx2", "avx_vnni", "avx512", "avx512_vnni"
std::optional<IsaLevel> parse_isa(std::string_view name);  // the inverse; nullopt if unknown
// "'NAME' is not an ISA level (avx2, avx512, avx512_vnni)": what a bad --isa or KILN_ISA says.
std::string not_an_isa_level(std::string_view name);

// Caps the level before kiln's kernels are first chosen (as oneDNN's set_max_cpu_isa does): ""
// on success, else why not (a level the CPU lacks, or a cap after kernels were chosen).
std::string set_max_isa(IsaLevel level);
// The level kiln's kernels use: the CPU's highest, or the cap.
IsaLevel active_isa();
// Whether the level in use multiplies u8 by s8 in one exact instruction (AVX-VNNI or
// AVX512-VNNI). Without, kiln's AVX2 8-bit kernels are fastest on 7-bit weights (vpmaddubsw's
// 16-bit pair sums cannot saturate then), which the quantizer's `--weight-bits auto` writes.
bool has_vnni();

// Single-precision GFLOP/s (a fused multiply-add counts 2) that `threads` threads sustain
// together, all running register-resident FMA chains at once, at the active ISA level; measured
// over about `ms` milliseconds (the best of short batches, so other processes only lower it).
double fma_peak_gflops(int threads, double ms = 30);

}  // namespace kiln
