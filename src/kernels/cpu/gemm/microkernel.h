// The register-tiled inner kernels of the float GEMM and the table that picks one at run time.
// Each ISA's kernels live in a translation unit of their own, compiled with that ISA's flags;
// only this header's plain-C++ interface crosses between them.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace kiln::gemm {

// One mr x nr tile of C from packed panels:
//   C = alpha * (Ap * Bp) + beta * C (+ bias[j] when bias is set); beta == 0 never reads C.
// Ap is kc x mr (column i of A's panel contiguous per k step), Bp is kc x nr, both packed by
// pack.h; c is row-major with leading dimension ldc and must hold a full mr x nr tile. A kernel
// with a strided-A entry (fn_strided_a) also reads A unpacked: row i of the tile at a + i * lda.
struct TileArgs {
  int64_t kc;
  const float* a;
  const float* b;
  float* c;
  int64_t ldc;
  float alpha, beta;
  const float* bias;  // nr floats or null
  int64_t lda = 0;    // fn_strided_a only
  // fn_prefetch only: a kc x nr packed panel to ask L2 for, a 64-byte line a k step.
  const float* prefetch_b = nullptr;
};
using MicroKernelFn = void (*)(const TileArgs&);

struct MicroKernel {
  const char* name;  // e.g. "f32_gemm_6x16_avx2"
  int64_t mr, nr;
  int64_t mc, kc, nc;  // cache blocks tuned for this tile: A block mc x kc, B panel kc x nc
  // Prepacked B (packed_matrix.h) is cut into slices this deep at most: a K up to it is one
  // slice, so C is written once instead of read and rewritten once per kc slice.
  int64_t kc_packed;
  MicroKernelFn fn;
  // The same tile reading A unpacked (TileArgs::lda), or null. Where B has few columns, each
  // element of a packed A is used only n times, and packing it cost 17 % of convnext's
  // K = 384, N = 96 products.
  MicroKernelFn fn_strided_a = nullptr;
  // fn_short[r], 0 < r < mr: the tile for the last r rows of a packed A (the partial row tile),
  // computing and writing only those rows of C; null where the kernel has none, and the whole
  // tile then runs into a scratch tile. 20 rows (an LSTM's projection over 20 steps, a CRNN's
  // classifier) cost 24 that way at mr 6.
  std::array<MicroKernelFn, 8> fn_short{};
  // fn that also prefetches TileArgs::prefetch_b into L2 (a panel row a k step: one line at
  // nr = 16, two at nr = 32), or null. The first row tile of a prepacked panel streams the next panel with it, so that a B
  // read from memory arrives while the other row tiles read this panel from L2: crnn's
  // 20 x 8210 x 1024 classifier (34 MB of B, 4 row tiles) in 0.86-0.91x the time on Zen 3.
  MicroKernelFn fn_prefetch = nullptr;
};

// Every kernel this CPU can run, best first.
const std::vector<MicroKernel>& available_f32_kernels();
// The best of them (what gemm_f32_blocked uses unless told otherwise); null only on a CPU
// without AVX2 + FMA, which kiln's baseline does not support anyway.
const MicroKernel* best_f32_kernel();
// The kernel called `name` if this CPU can run it, else null.
const MicroKernel* find_f32_kernel(const char* name);

// Per-ISA kernel descriptors (defined in microkernel_<isa>.cc).
MicroKernel f32_gemm_6x16_avx2_kernel();
MicroKernel f32_gemm_avx512_kernel();

}  // namespace kiln::gemm
