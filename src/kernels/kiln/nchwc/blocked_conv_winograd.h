// Winograd F(4x4, 3x3) and F(2x2, 3x3) for ai.kiln.BlockedConv (group 1, 3x3, stride 1, any
// dilation): each m x m output tile is A^T [ (G g G^T) . (B^T d B) ] A over an (m+2)^2 input
// patch d, so the 9 m^2 multiplies per tile and channel pair of the direct convolution become
// (m+2)^2 (36 for m = 4: 4x fewer; 16 for m = 2: 2.25x), done as that many independent GEMMs
//   M[xi] (tiles x Cout) = V[xi] (tiles x Cin) * U[xi] (Cin x Cout).
// U = G g G^T is computed once per weight (prepare); V = B^T d B and the output transform (with
// the bias / residual / activation epilogue) run per call on chunks of tiles sized for L2.
// F(4x4) needs (6/3)^2 = 4x the weights' bytes in U, F(2x2) 16/9 (see tile_for).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/kernel.h"
#include "kernels/kiln/nchwc/blocked_conv.h"

namespace kiln::nchwc {

// One GEMM call of the micro-kernel layer: for `tiles` rows and one panel of nr output channels,
//   m[t][j] (+)= sum over c < 8 * k_blocks of v[c/8][t][c%8] * u[c][j].
// v: the transformed input of one point, blocks of 8 input channels, `v_block` floats apart
// (tiles x 8 each); u: the point's packed weight panel, k rows of nr floats, 64-byte aligned;
// m: row-major with leading dimension ldm. accumulate false overwrites m.
struct WinogradGemmArgs {
  int64_t tiles = 0, k_blocks = 0;
  const float* v = nullptr;
  int64_t v_block = 0;
  const float* u = nullptr;
  float* m = nullptr;
  int64_t ldm = 0;
  bool accumulate = false;
};

struct WinogradGemmKernel {
  const char* name;   // "winograd_gemm_6x16_avx2", "winograd_gemm_8x32_avx512"
  int64_t rows;       // tiles per register tile (the chunk sizes are rounded to it)
  int64_t nr;         // output channels per panel
  int64_t kc_blocks;  // input-channel blocks per pass, so one panel slice stays in L1
  void (*fn)(const WinogradGemmArgs&);
};

// Every kernel this CPU can run, best first; find one by name (null when unavailable).
const std::vector<WinogradGemmKernel>& winograd_gemm_kernels();
const WinogradGemmKernel* find_winograd_gemm_kernel(const char* name);
WinogradGemmKernel winograd_gemm_avx2_kernel();    // blocked_conv_winograd_avx2.cc
WinogradGemmKernel winograd_gemm_avx512_kernel();  // blocked_conv_winograd_avx512.cc

// The transformed weights U of one BlockedConv for F(tile x tile, 3x3), packed for one
// micro-kernel: [points][panels][cb * 8 input channels][nr output channels], output channels
// past mb * 8 zero.
class WinogradWeights {
 public:
  // w: BlockedConv's dense 3x3 weights [mb, cb, 3, 3, 8, 8]; tile: 4 or 2.
  WinogradWeights(const float* w, int64_t mb, int64_t cb, int64_t tile,
                  const WinogradGemmKernel& kernel);

  int64_t tile() const { return tile_; }
  int64_t points() const { return (tile_ + 2) * (tile_ + 2); }  // GEMMs per call
  const WinogradGemmKernel& kernel() const { return kernel_; }
  int64_t mb() const { return mb_; }
  int64_t cb() const { return cb_; }
  int64_t panels() const { return panels_; }
  // The panel of point xi, starting at input channel 0.
  const float* panel(int64_t xi, int64_t p) const {
    return data_.get() + (xi * panels_ + p) * cb_ * 8 * kernel_.nr;
  }

 private:
  struct Free {
    void operator()(float* p) const;
  };
  int64_t tile_;
  WinogradGemmKernel kernel_;
  int64_t mb_, cb_, panels_;
  std::unique_ptr<float[], Free> data_;
};

// How a call is split; zero fields are chosen from the shape (tests and benchmarks force them).
struct WinogradTuning {
  int64_t chunk_tiles = 0;  // tiles per task
  int64_t m_splits = 0;     // tasks per chunk, each with a range of output panels
  int64_t l2_bytes = 0;     // budget of one task's transformed input + products
  int64_t point_major_group = 0;  // > 0: the point-major order, this many chunks per group
};

// s must satisfy winograd_fits and match w's blocks. Same result as blocked_conv_dense_avx2 up
// to rounding (the transforms scale values by up to ~100, see the tests for the measured error).
void blocked_conv_winograd(const BlockedConvShape& s, const float* x, const WinogradWeights& w,
                           const BlockedEpilogue& e, float* y, ThreadPool* pool,
                           const WinogradTuning& tuning = {});

// A blocked (not plain), dense, 3x3, stride-1 convolution (any dilation).
bool winograd_fits(const BlockedConvShape& s);

// How a call splits into tasks: `chunks` chunks of `chunk` tiles, each cut into `splits` tasks
// of `per_split` output panels.
struct WinogradSplit {
  int64_t splits = 1, per_split = 0, chunk = 0, chunks = 0;
};
WinogradSplit winograd_split(const BlockedConvShape& s, const WinogradWeights& w, int64_t threads,
                             const WinogradTuning& tuning = {});

// Whether Winograd beats the direct kernel on this call: its fewer flops against U streamed
// from memory once per chunk of tiles when U is too big to stay cached (a wide 3x3 on a large
// image: the chunks are many, U tens of MB).
bool winograd_pays(const BlockedConvShape& s, const WinogradWeights& w, int64_t threads);
// U past this many bytes is not kept by the caches between chunks (2 cores' L2 and a share of
// L3). In the chunk-major order such a U streams from memory once per chunk: FCN's 3x3 2048 ->
// 512 head at 64x64 streamed its 67 MB U 128 times, 784 ms against the direct kernel's 384 (Xeon
// family 6 model 207, 2 threads); the point-major order streams it once per group of chunks.
inline constexpr double kWinogradCachedWeightBytes = 8 << 20;
// Whether U is too big to stay cached between chunks (then winograd_pays weighs its streaming).
bool winograd_weights_stream(const WinogradWeights& w);

// BlockedConv's Winograd path: decided from the node's attributes and its constant weights at
// compile time (prepare), when it is measured to beat the direct kernel. Its U is then built and
// the original weights absorbed, unless U is too big to stay cached: then the dense weights stay
// too and each run takes Winograd only where winograd_pays (a wide 3x3 on a large image runs
// direct). KILN_DISABLE_WINOGRAD=1 in the environment turns it off, and so does `allowed` false
// (the direct variant the tuner times against it).
class BlockedConvWinograd {
 public:
  BlockedConvWinograd(const ir::Node& node, bool allowed = true);
  // Whether the node's attributes allow Winograd (and the environment does not turn it off).
  static bool fits_node(const ir::Node& node);
  Status prepare(const std::vector<const Tensor*>& constants, std::vector<bool>& absorbed);
  bool ready() const { return weights_ != nullptr; }
  // U too big to stay cached, a dilated conv, or a narrow one: the dense weights are kept too
  // (not absorbed), and each run takes Winograd only where it pays.
  bool keeps_dense() const { return keeps_dense_; }
  // Whether this run of s goes to Winograd.
  bool takes(const BlockedConvShape& s, ThreadPool* pool) const;
  int64_t tile() const { return weights_ ? weights_->tile() : 0; }  // 4, 2, or 0 when not ready
  Status run(const BlockedConvShape& s, const float* x, const BlockedEpilogue& e, float* y,
             ThreadPool* pool) const;

 private:
  bool candidate_ = false;  // the attributes allow it
  bool dilated_ = false;
  bool narrow_ = false;  // fewer than 32 output channels (AVX2 only): small images run direct
  bool keeps_dense_ = false;
  std::unique_ptr<const WinogradWeights> weights_;
};

}  // namespace kiln::nchwc
