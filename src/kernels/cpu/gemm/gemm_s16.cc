// gemm_s16: the GotoBLAS loop nest of gemm.cc on 16-bit operands, K taken two at a time. A is
// packed into tiles of 6 rows, each k pair of a row one int32 word (broadcast to all lanes); B
// into panels of nr columns, each k pair of a column one int32 word, so that one vpmaddwd of a
// broadcast A word and 8 B words gives 8 columns' two products summed. The AVX2 tile is 6 x 16
// (12 ymm accumulators); the AVX-512 VNNI one (gemm_s16_avx512vnni.cc) 6 x 32 with vpdpwssd. Threads
// take column (or, for narrow C, row) ranges of C with their own packing buffers.
#include "kernels/cpu/gemm/gemm_s16.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "core/thread_scratch.h"

namespace kiln::gemm {
namespace {

constexpr int64_t kMr = kS16Mr;
constexpr int64_t kKc = 512;   // K per slice (256 pairs): a B panel slice is 16 KiB, in L1
constexpr int64_t kMc = 72;    // A rows per block: 12 tiles, 72 KiB at kKc, in L2
constexpr int64_t kNc = 1024;  // B columns per block (a multiple of every nr): 1 MiB at kKc

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A rows [i0, i0 + mc) x depth [p0, p0 + kc) into tiles of kMr rows: word (p, i) of a tile holds
// a[i][2p] (low half) and a[i][2p + 1]; rows and the odd depth's last half past the end zero.
void pack_a(const int16_t* a, int64_t lda, int64_t i0, int64_t mc, int64_t p0, int64_t kc, int32_t* out) {
  const int64_t pairs = ceil_div(kc, 2);
  for (int64_t t = 0; t < ceil_div(mc, kMr); ++t)
    for (int64_t i = 0; i < kMr; ++i) {
      const int64_t r = t * kMr + i;
      int32_t* o = out + t * pairs * kMr + i;
      if (r >= mc) {
        for (int64_t p = 0; p < pairs; ++p) o[p * kMr] = 0;
        continue;
      }
      const int16_t* row = a + (i0 + r) * lda + p0;
      for (int64_t p = 0; p < kc / 2; ++p) std::memcpy(o + p * kMr, row + 2 * p, sizeof(int32_t));
      if (kc % 2) o[(pairs - 1) * kMr] = static_cast<uint16_t>(row[kc - 1]);
    }
}

// B depth [p0, p0 + kc) x columns [j0, j0 + nc) into panels of nr columns: word (p, j) of a
// panel holds b[2p][j] (low half) and b[2p + 1][j]; past the end zero.
void pack_b(const int16_t* b, int64_t ldb, int64_t p0, int64_t kc, int64_t j0, int64_t nc, int64_t nr,
            int16_t* out) {
  const int64_t pairs = ceil_div(kc, 2);
  for (int64_t q = 0; q < ceil_div(nc, nr); ++q) {
    int16_t* panel = out + q * pairs * nr * 2;
    const int64_t c0 = j0 + q * nr, cols = std::min(nr, j0 + nc - c0);
    for (int64_t p = 0; p < pairs; ++p) {
      const int16_t* r0 = b + (p0 + 2 * p) * ldb + c0;
      const bool second = 2 * p + 1 < kc;
      int16_t* o = panel + p * nr * 2;
      for (int64_t j0c = 0; j0c < nr; j0c += 16, o += 32) {
        if (j0c + 16 <= cols && second) {  // interleave two rows of 16: unpack, then fix the lane order
          const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + j0c));
          const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + ldb + j0c));
          const __m256i lo = _mm256_unpacklo_epi16(x0, x1), hi = _mm256_unpackhi_epi16(x0, x1);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), _mm256_permute2x128_si256(lo, hi, 0x20));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 16), _mm256_permute2x128_si256(lo, hi, 0x31));
          continue;
        }
        for (int64_t j = 0; j < 16; ++j) {
          const bool in = j0c + j < cols;
          o[2 * j] = in ? r0[j0c + j] : int16_t{0};
          o[2 * j + 1] = in && second ? r0[ldb + j0c + j] : int16_t{0};
        }
      }
    }
  }
}

constexpr int64_t kNr = 16;  // the AVX2 tile's columns

// One k pair of the AVX2 tile: broadcast row i's A word, vpmaddwd it with both B vectors
// (ymm12, ymm13) into ymm15 and add each product into that row's two accumulators.
#define KILN_S16_ROW(i, acc0, acc1)                  \
  "vpbroadcastd " #i "*4(%[a]), %%ymm14\n\t"        \
  "vpmaddwd %%ymm12, %%ymm14, %%ymm15\n\t"          \
  "vpaddd %%ymm15, %[" #acc0 "], %[" #acc0 "]\n\t"  \
  "vpmaddwd %%ymm13, %%ymm14, %%ymm15\n\t"          \
  "vpaddd %%ymm15, %[" #acc1 "], %[" #acc1 "]\n\t"

// The AVX2 tile (S16TileFn): 6 x 16, vpmaddwd then vpaddd. Its 12 accumulators, two B vectors,
// the broadcast and the product take all 16 ymm registers, which GCC 12 does not manage from
// intrinsics: it kept 7 accumulators on the stack, and the tile ran at 91 GOP/s a core on Zen 3
// (the FP32 FMA peak's rate). Written out in assembly, nothing spills: 140 GOP/s, where the two
// vpmaddwd a cycle Zen 3 issues allow 2x the FP32 peak.
// A tile of one row (a batch-1 classifier's, a decoder step's) multiplies that row alone: the six
// rows' loop took 6x its products (ORT's QDQ mobilenet_v2's 1 x 1000 x 1280 classifier: 200 us).
void tile_avx2(int64_t pairs, const int32_t* ap, const int16_t* bp, int32_t* c, int64_t ldc, bool accumulate,
               int64_t rows, int64_t cols) {
  __m256i acc[kMr][2];
  for (auto& r : acc) r[0] = r[1] = _mm256_setzero_si256();
  if (rows == 1) {
    for (int64_t p = 0; p < pairs; ++p, bp += 2 * kNr) {
      const __m256i a = _mm256_set1_epi32(ap[p * kMr]);
      const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bp));
      const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bp + 16));
      acc[0][0] = _mm256_add_epi32(acc[0][0], _mm256_madd_epi16(a, b0));
      acc[0][1] = _mm256_add_epi32(acc[0][1], _mm256_madd_epi16(a, b1));
    }
  } else if (pairs > 0) {
    __asm__ volatile(
        "1:\n\t"
        "vmovdqu (%[b]), %%ymm12\n\t"
        "vmovdqu 32(%[b]), %%ymm13\n\t"
        KILN_S16_ROW(0, c00, c01) KILN_S16_ROW(1, c10, c11) KILN_S16_ROW(2, c20, c21)
        KILN_S16_ROW(3, c30, c31) KILN_S16_ROW(4, c40, c41) KILN_S16_ROW(5, c50, c51)
        "add $24, %[a]\n\t"
        "add $64, %[b]\n\t"
        "dec %[n]\n\t"
        "jnz 1b\n\t"
        : [a] "+r"(ap), [b] "+r"(bp), [n] "+r"(pairs), [c00] "+x"(acc[0][0]), [c01] "+x"(acc[0][1]),
          [c10] "+x"(acc[1][0]), [c11] "+x"(acc[1][1]), [c20] "+x"(acc[2][0]), [c21] "+x"(acc[2][1]),
          [c30] "+x"(acc[3][0]), [c31] "+x"(acc[3][1]), [c40] "+x"(acc[4][0]), [c41] "+x"(acc[4][1]),
          [c50] "+x"(acc[5][0]), [c51] "+x"(acc[5][1])
        :
        : "xmm12", "xmm13", "xmm14", "xmm15", "cc", "memory");
  }
  if (rows == kMr && cols == kNr) {
#pragma GCC unroll 6
    for (int i = 0; i < kMr; ++i) {
      __m256i* out = reinterpret_cast<__m256i*>(c + i * ldc);
      __m256i v0 = acc[i][0], v1 = acc[i][1];
      if (accumulate) {
        v0 = _mm256_add_epi32(v0, _mm256_loadu_si256(out));
        v1 = _mm256_add_epi32(v1, _mm256_loadu_si256(out + 1));
      }
      _mm256_storeu_si256(out, v0);
      _mm256_storeu_si256(out + 1, v1);
    }
    return;
  }
  alignas(32) int32_t t[kMr * kNr];
  for (int i = 0; i < kMr; ++i) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(t + i * kNr), acc[i][0]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(t + i * kNr + 8), acc[i][1]);
  }
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) c[i * ldc + j] = (accumulate ? c[i * ldc + j] : 0) + t[i * kNr + j];
}

struct Scratch {
  std::vector<int32_t> a;
  std::vector<int16_t> b;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}
constexpr int64_t kAWords = kMc * kKc / 2, kBHalves = kNc * kKc;

const S16Kernel& best_kernel() { return s16_kernels().front(); }

// B as the GEMM reads it: packed per block from a row-major matrix, or packed beforehand.
struct BSource {
  const int16_t* b = nullptr;
  int64_t ldb = 0;
  const PackedS16* packed = nullptr;
};

// Rows [i0, i1) x columns [j0, j1) of C.
void run_block(int64_t k, const int16_t* a, int64_t lda, const BSource& src, const S16Kernel& kernel,
               int32_t* c, int64_t ldc, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  Scratch& s = scratch();
  s.a.resize(kAWords);
  if (!src.packed) s.b.resize(kBHalves);
  const int64_t nr = kernel.nr;
  for (int64_t jc = j0; jc < j1; jc += kNc) {
    const int64_t nc = std::min(kNc, j1 - jc);
    for (int64_t pc = 0; pc < k; pc += kKc) {
      const int64_t kc = std::min(kKc, k - pc), pairs = ceil_div(kc, 2);
      if (!src.packed) pack_b(src.b, src.ldb, pc, kc, jc, nc, nr, s.b.data());
      for (int64_t ic = i0; ic < i1; ic += kMc) {
        const int64_t mc = std::min(kMc, i1 - ic);
        pack_a(a, lda, ic, mc, pc, kc, s.a.data());
        for (int64_t jr = 0; jr < nc; jr += nr) {
          const int16_t* bp = src.packed ? src.packed->panel(pc, jc + jr) : s.b.data() + (jr / nr) * pairs * nr * 2;
          for (int64_t ir = 0; ir < mc; ir += kMr)
            kernel.tile(pairs, s.a.data() + (ir / kMr) * pairs * kMr, bp, c + (ic + ir) * ldc + jc + jr, ldc,
                        pc > 0, std::min(kMr, mc - ir), std::min(nr, nc - jr));
        }
      }
    }
  }
}

void run(int64_t m, int64_t n, int64_t k, const int16_t* a, int64_t lda, const BSource& src,
         const S16Kernel& kernel, int32_t* c, int64_t ldc, ThreadPool* pool) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0);
    return;
  }
  int64_t threads = pool ? pool->threads() : 1;
  if (m * n * k < (int64_t{1} << 18)) threads = 1;  // too little work to wake a thread
  const int64_t nr = kernel.nr, col_tiles = ceil_div(n, nr), row_tiles = ceil_div(m, kMr);
  // Columns when there are enough (each thread packs only its own B), else rows.
  const bool by_cols = col_tiles >= threads || col_tiles >= row_tiles;
  const int64_t parts = std::max<int64_t>(1, std::min(threads, by_cols ? col_tiles : row_tiles));
  if (parts == 1) return run_block(k, a, lda, src, kernel, c, ldc, 0, m, 0, n);
  const int64_t step = (by_cols ? nr : kMr) * ceil_div(by_cols ? col_tiles : row_tiles, parts);
  thread_local ScratchReservation<2> reservation;
  reservation.ensure(pool, {kAWords, kBHalves}, [](const std::array<int64_t, 2>& sizes) {
    scratch().a.resize(static_cast<size_t>(sizes[0]));
    scratch().b.resize(static_cast<size_t>(sizes[1]));
  });
  pool->parallel_for(parts, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t lo = t * step, hi = std::min(by_cols ? n : m, lo + step);
      if (lo >= hi) continue;
      if (by_cols) run_block(k, a, lda, src, kernel, c, ldc, 0, m, lo, hi);
      else run_block(k, a, lda, src, kernel, c, ldc, lo, hi, 0, n);
    }
  });
}

}  // namespace

S16Kernel s16_avx2_kernel() { return {"s16_6x16_avx2", kNr, tile_avx2}; }

const std::vector<S16Kernel>& s16_kernels() {
  static const std::vector<S16Kernel> kernels = [] {
    std::vector<S16Kernel> k;
    const CpuFeatures& f = cpu_features();
    if (f.has_avx512_vnni()) k.push_back(s16_avx512_vnni_kernel());
    k.push_back(s16_avx2_kernel());
    return k;
  }();
  return kernels;
}

PackedS16 PackedS16::pack(const int16_t* b, int64_t ldb, int64_t k, int64_t n, const S16Kernel* kernel) {
  PackedS16 p;
  p.k_ = k, p.n_ = n;
  p.kernel_ = kernel ? *kernel : best_kernel();
  const int64_t nr = p.kernel_.nr, n_pad = ceil_div(n, nr) * nr;
  p.data_.resize(static_cast<size_t>(ceil_div(k, 2) * 2 * n_pad));
  // Slice by slice, the layout pack_b gives a whole-width block, one after the other.
  for (int64_t pc = 0; pc < k; pc += kKc)
    pack_b(b, ldb, pc, std::min(kKc, k - pc), 0, n, nr, p.data_.data() + (pc / 2) * 2 * n_pad);
  return p;
}

const int16_t* PackedS16::panel(int64_t p0, int64_t j0) const {
  const int64_t nr = kernel_.nr, n_pad = ceil_div(n_, nr) * nr, pairs = ceil_div(std::min(kKc, k_ - p0), 2);
  return data_.data() + (p0 / 2) * 2 * n_pad + (j0 / nr) * pairs * nr * 2;
}

void gemm_s16(int64_t m, int64_t n, int64_t k, const int16_t* a, int64_t lda, const int16_t* b,
              int64_t ldb, int32_t* c, int64_t ldc, ThreadPool* pool, const S16Kernel* kernel) {
  run(m, n, k, a, lda, BSource{b, ldb, nullptr}, kernel ? *kernel : best_kernel(), c, ldc, pool);
}

void gemm_s16(int64_t m, const int16_t* a, int64_t lda, const PackedS16& b, int32_t* c, int64_t ldc,
              ThreadPool* pool) {
  run(m, b.n(), b.k(), a, lda, BSource{nullptr, 0, &b}, b.kernel(), c, ldc, pool);
}

}  // namespace kiln::gemm
