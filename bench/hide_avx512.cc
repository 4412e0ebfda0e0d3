// An AVX-512 machine posing as an AVX2-only one, for every library of a process: the peers too.
//   LD_PRELOAD=build/bench/libkiln_hide_avx512.so ../shared/bench/compare.sh MODEL
// KILN_ISA=avx2 lowers kiln alone; ONNX Runtime's MLAS and OpenVINO's oneDNN pick their kernels
// from cpuid, and only OpenVINO has a switch of its own (ONEDNN_MAX_CPU_ISA). Here the process
// asks the kernel to fault on the cpuid instruction (arch_prctl ARCH_SET_CPUID, Linux 4.12 on a
// CPU with cpuid faulting: lscpu's `cpuid_fault`), and answers each cpuid from its SIGSEGV
// handler: the real answer with the AVX-512 feature bits cleared, and those of the VEX-encoded
// extensions that AVX2-only CPUs such as Zen 3 lack (AVX-VNNI, AVX-IFMA, AVX-VNNI-INT8,
// AVX-NE-CONVERT), unless KILN_KEEP_AVX_VNNI=1 keeps AVX-VNNI (an Alder Lake-like CPU). The
// setting is per thread and inherited by new threads; an exec'd program loads the library
// again through LD_PRELOAD. glibc picks its string functions before this runs: they may still
// use AVX-512, which the peers' kernels do not depend on. A program that installs a SIGSEGV
// handler of its own and then runs cpuid dies of it (perf does): run such tools outside.
#include <asm/prctl.h>
#include <cpuid.h>
#include <signal.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

long set_cpuid_allowed(int allowed) { return syscall(SYS_arch_prctl, ARCH_SET_CPUID, allowed); }

// Leaf 7 subleaf 0: EBX AVX512 F, DQ, IFMA, PF, ER, CD, BW, VL; ECX VBMI, VBMI2, VNNI, BITALG,
// VPOPCNTDQ; EDX 4VNNIW, 4FMAPS, VP2INTERSECT, FP16. Subleaf 1: EAX AVX-VNNI (bit 4),
// AVX512-BF16, AVX-IFMA; EDX AVX-VNNI-INT8, AVX-NE-CONVERT.
constexpr uint32_t kLeaf7Ebx = (1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) |
                               (1u << 28) | (1u << 30) | (1u << 31);
constexpr uint32_t kLeaf7Ecx = (1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14);
constexpr uint32_t kLeaf7Edx = (1u << 2) | (1u << 3) | (1u << 8) | (1u << 23);
constexpr uint32_t kAvxVnni = 1u << 4;
constexpr uint32_t kLeaf7Sub1Eax = kAvxVnni | (1u << 5) | (1u << 23);
constexpr uint32_t kLeaf7Sub1Edx = (1u << 4) | (1u << 5);
uint32_t g_leaf7_sub1_eax_hidden = kLeaf7Sub1Eax;

void on_fault(int, siginfo_t*, void* context) {
  greg_t* r = static_cast<ucontext_t*>(context)->uc_mcontext.gregs;
  const auto* ip = reinterpret_cast<const unsigned char*>(r[REG_RIP]);
  if (ip[0] != 0x0F || ip[1] != 0xA2) {  // not cpuid: a real fault, which re-runs and kills
    signal(SIGSEGV, SIG_DFL);
    return;
  }
  const auto leaf = static_cast<uint32_t>(r[REG_RAX]), sub = static_cast<uint32_t>(r[REG_RCX]);
  unsigned a, b, c, d;
  set_cpuid_allowed(1);
  __cpuid_count(leaf, sub, a, b, c, d);
  set_cpuid_allowed(0);
  if (leaf == 7 && sub == 0) b &= ~kLeaf7Ebx, c &= ~kLeaf7Ecx, d &= ~kLeaf7Edx;
  if (leaf == 7 && sub == 1) a &= ~g_leaf7_sub1_eax_hidden, d &= ~kLeaf7Sub1Edx;
  r[REG_RAX] = a, r[REG_RBX] = b, r[REG_RCX] = c, r[REG_RDX] = d;
  r[REG_RIP] += 2;
}

[[gnu::constructor]] void hide_avx512() {
  if (const char* keep = std::getenv("KILN_KEEP_AVX_VNNI"); keep != nullptr && keep[0] == '1')
    g_leaf7_sub1_eax_hidden &= ~kAvxVnni;
  struct sigaction sa = {};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigaction(SIGSEGV, &sa, nullptr);
  if (set_cpuid_allowed(0) != 0) {
    std::perror("libkiln_hide_avx512: arch_prctl(ARCH_SET_CPUID) (no cpuid faulting here?)");
    std::exit(2);
  }
}

}  // namespace
