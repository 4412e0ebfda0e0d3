// cpuid leaf 1 / 7 for the instruction sets, xgetbv for whether the OS saves the ymm / zmm state
// (a CPU may support AVX-512 while the kernel or hypervisor leaves it disabled).
#include "core/cpu_features.h"

#include <cpuid.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace kiln {
namespace {

uint64_t read_xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}

// cpuid leaves 0x80000002..4: 48 bytes of brand string, padded with spaces and NULs.
std::string brand_string() {
  if (__get_cpuid_max(0x80000000, nullptr) < 0x80000004) return "";
  char brand[49] = {};
  for (unsigned leaf = 0; leaf < 3; ++leaf) {
    unsigned r[4] = {};
    __cpuid(0x80000002 + leaf, r[0], r[1], r[2], r[3]);
    std::memcpy(brand + 16 * leaf, r, sizeof(r));
  }
  std::string s(brand);
  const size_t first = s.find_first_not_of(' '), last = s.find_last_not_of(' ');
  return first == std::string::npos ? "" : s.substr(first, last - first + 1);
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1;
  const bool avx = (c >> 28) & 1;
  const bool fma = (c >> 12) & 1;
  const bool f16c = (c >> 29) & 1;
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = read_xcr0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;      // SSE + AVX state
  const bool zmm_state = (xcr0 & 0xe6) == 0xe6;    // + opmask, ZMM_Hi256, Hi16_ZMM
  if (!ymm_state) return f;
  f.fma = fma;
  f.f16c = f16c;
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = (b >> 5) & 1;
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  if (a >= 1) __cpuid_count(7, 1, a1, b1, c1, d1);  // leaf 7's subleaves: a
  f.avx_vnni = (a1 >> 4) & 1;
  if (zmm_state) {
    f.avx512f = (b >> 16) & 1;
    f.avx512dq = (b >> 17) & 1;
    f.avx512bw = (b >> 30) & 1;
    f.avx512vl = (b >> 31) & 1;
    f.avx512_vnni = (c >> 11) & 1;
    f.avx512_vbmi = (c >> 1) & 1;
    f.avx512_bf16 = (a1 >> 5) & 1;
  }
  f.model = brand_string();
  return f;
}

}  // namespace

std::string CpuFeatures::to_string() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512dq, "avx512dq");
  add(avx512_bf16, "avx512_bf16");
  add(avx512_vnni, "avx512_vnni");
  add(avx512_vbmi, "avx512_vbmi");
  add(avx_vnni, "avx_vnni");
  return s;
}

bool CpuFeatures::has_level(IsaLevel level) const {
  switch (level) {
    case IsaLevel::kAvx2: return avx2 && fma && f16c;
    case IsaLevel::kAvxVnni: return has_avx_vnni();
    case IsaLevel::kAvx512: return has_avx512();
    case IsaLevel::kAvx512Vnni: return has_avx512_vnni();
  }
  return false;
}

IsaLevel CpuFeatures::level() const {
  IsaLevel highest = IsaLevel::kAvx2;
  for (IsaLevel l : kIsaLevels)
    if (has_level(l)) highest = l;
  return highest;
}

const char* isa_name(IsaLevel level) {
  switch (level) {
    case IsaLevel::kAvx2: return "avx2";
    case IsaLevel::kAvxVnni: return "avx_vnni";
    case IsaLevel::kAvx512: return "avx512";
    case IsaLevel::kAvx512Vnni: return "avx512_vnni";
  }
  return "?";
}

std::optional<IsaLevel> parse_isa(std::string_view name) {
  for (IsaLevel l : kIsaLevels)
    if (name == isa_name(l)) return l;
  return std::nullopt;
}

std::string not_an_isa_level(std::string_view name) {
  std::string s = "'";
  s.append(name).append("' is not an ISA level (");
  for (IsaLevel l : kIsaLevels) s.append(l == kIsaLevels[0] ? "" : ", ").append(isa_name(l));
  return s.append(")");
}

const CpuFeatures& detected_cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

namespace {

// The cap set_max_isa asked for (-1: none), and whether cpu_features() has fixed the level.
std::atomic<int> g_max_isa{-1};
std::atomic<bool> g_level_fixed{false};

// The detected features without those above `cap`.
CpuFeatures capped(CpuFeatures f, IsaLevel cap) {
  if (cap < IsaLevel::kAvx512Vnni) f.avx512_vnni = false;
  if (cap < IsaLevel::kAvx512)
    f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.avx512_bf16 = f.avx512_vbmi = false;
  if (cap < IsaLevel::kAvxVnni) f.avx_vnni = false;
  return f;
}

std::string unavailable(IsaLevel level) {
  const CpuFeatures& f = detected_cpu_features();
  return std::string("ISA level '") + isa_name(level) + "' is not available on this CPU (" +
         (f.model.empty() ? "" : f.model + ", ") + "highest: " + isa_name(f.level()) + "; has: " + f.to_string() + ")";
}

// KILN_ISA as set: null when unset or empty.
const char* isa_env() {
  const char* env = std::getenv("KILN_ISA");
  return env != nullptr && *env != '\0' ? env : nullptr;
}

}  // namespace

std::string isa_env_error() {
  const char* env = isa_env();
  if (env == nullptr) return "";
  const auto level = parse_isa(env);
  if (!level) return "KILN_ISA=" + not_an_isa_level(env);
  return detected_cpu_features().has_level(*level) ? "" : "KILN_ISA: " + unavailable(*level);
}

std::string set_max_isa(IsaLevel level) {
  if (!detected_cpu_features().has_level(level)) return unavailable(level);
  if (g_level_fixed.load()) {
    if (cpu_features().level() == level) return "";
    return std::string("the ISA level cannot change to '") + isa_name(level) + "' after kernels were chosen at '" +
           isa_name(cpu_features().level()) + "'";
  }
  g_max_isa.store(static_cast<int>(level));
  return "";
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    IsaLevel cap = detected_cpu_features().level();
    if (const char* env = isa_env()) {
      // An unknown or unavailable KILN_ISA is reported by isa_env_error(); here it caps nothing.
      if (const auto l = parse_isa(env); l && *l < cap && detected_cpu_features().has_level(*l)) cap = *l;
    }
    if (const int m = g_max_isa.load(); m >= 0 && static_cast<IsaLevel>(m) < cap) cap = static_cast<IsaLevel>(m);
    g_level_fixed.store(true);
    return capped(detected_cpu_features(), cap);
  }();
  return features;
}

IsaLevel active_isa() { return cpu_features().level(); }

bool has_vnni() { return cpu_features().has_avx_vnni() || cpu_features().has_avx512_vnni(); }

}  // namespace kiln
