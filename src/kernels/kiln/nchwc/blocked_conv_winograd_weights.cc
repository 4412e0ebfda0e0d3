// The compile-time part of Winograd F(4x4, 3x3): which micro-kernel the CPU runs, the weight
// transform U = G g G^T packed into that kernel's panels, and BlockedConv's decision to use it.
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/cpu_features.h"
#include "kernels/kiln/nchwc/blocked_conv_winograd.h"
#include "kernels/kiln/nchwc/blocked_layout.h"

namespace kiln::nchwc {
namespace {

// G of F(4, 3) with interpolation points 0, -1, 1, -2, 2, infinity and of F(2, 3) with 0, 1,
// -1, infinity (Lavin & Gray 2016), matching the B^T and A^T of blocked_conv_winograd.cc.
constexpr double kG4[6][3] = {{1.0 / 4, 0, 0},
                              {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                              {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                              {1.0 / 24, 1.0 / 12, 1.0 / 6},
                              {1.0 / 24, -1.0 / 12, 1.0 / 6},
                              {0, 0, 1}};
constexpr double kG2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};

// Measured per layer with bench/conv_winograd_bench.cc (2 threads, Zen 4): below this many input
// and output channels the transforms cost more than the GEMMs save.
constexpr int64_t kMinChannels = 32;
// Against the AVX2 direct kernel (Zen 3, 2 threads, in a model), 16 to 31 output channels pay
// too, on images of 28 x 28 and more: 96 -> 24 at 160 x 160 6.7 -> 3.4 ms (a DB text detector's
// FPN and head), 64 -> 16 at 112 1.38 -> 0.77, 40 -> 24 at 40 0.18 -> 0.10, 32 -> 24 at 28 0.075
// -> 0.039; at 14 x 14 they tie (48 -> 16) and at 7 x 7 Winograd is 2x slower (256 -> 24), so
// such convs keep their dense weights for the smaller images.
constexpr int64_t kMinOutputsAvx2 = 16;
constexpr int64_t kNarrowMinPixels = 28 * 28;

// F(4x4) when its U (36 x Cin x Cout floats) is small enough to stay in cache between calls;
// F(2x2) when its 16/36 of that stays cached, as U streamed from memory on every call of a small
// image costs more than F(4x4)'s fewer flops save (bench/conv_winograd_bench.cc with
// KILN_BENCH_COLD=1; resnet50: 64 and 128 channels take F(4x4), 256 F(2x2)). A U that streams
// either way (512 -> 512 and wider) takes F(4x4): on large images, in the point-major order, it
// beats F(2x2) by 1.3-1.6x (FCN's 2048 -> 512 at 64x64: 138 ms against 220, direct 484; 512 ->
// 512 at 32x32: 9.7 against 13.0, direct 25.2; Zen 4, 2 threads, cold caches), and on small
// images those runs take the direct kernel (winograd_pays), within 1% of F(2x2) (512 -> 512 at
// 7x7: 1.22 ms direct, 1.22 F(2x2), 1.38 F(4x4)).
constexpr int64_t kMaxF4WeightBytes = 4 << 20;

int64_t tile_for(int64_t cb, int64_t mb) {
  const int64_t pair_bytes = cb * mb * kBlock * kBlock * int64_t{sizeof(float)};
  const bool f2_streams = 16.0 * static_cast<double>(pair_bytes) > kWinogradCachedWeightBytes;
  return 36 * pair_bytes <= kMaxF4WeightBytes || f2_streams ? 4 : 2;
}

bool all_ones(const ir::Node& node, const char* name) {
  for (int64_t v : node.attr_ints(name))
    if (v != 1) return false;
  return true;
}
bool positive(const ir::Node& node, const char* name) {
  for (int64_t v : node.attr_ints(name))
    if (v < 1) return false;
  return true;
}

}  // namespace

const std::vector<WinogradGemmKernel>& winograd_gemm_kernels() {
  static const std::vector<WinogradGemmKernel> kernels = [] {
    std::vector<WinogradGemmKernel> k;
    const CpuFeatures& f = cpu_features();
    if (f.has_avx512()) k.push_back(winograd_gemm_avx512_kernel());
    if (f.avx2 && f.fma) k.push_back(winograd_gemm_avx2_kernel());
    return k;
  }();
  return kernels;
}

const WinogradGemmKernel* find_winograd_gemm_kernel(const char* name) {
  for (const WinogradGemmKernel& k : winograd_gemm_kernels())
    if (std::strcmp(k.name, name) == 0) return &k;
  return nullptr;
}

void WinogradWeights::Free::operator()(float* p) const { std::free(p); }

WinogradWeights::WinogradWeights(const float* w, int64_t mb, int64_t cb, int64_t tile,
                                 const WinogradGemmKernel& kernel)
    : tile_(tile == 2 ? 2 : 4), kernel_(kernel), mb_(mb), cb_(cb),
      panels_((mb * kBlock + kernel.nr - 1) / kernel.nr) {
  const int64_t k = cb * kBlock, nr = kernel.nr;
  const int p = static_cast<int>(tile_) + 2;
  const double* G = tile_ == 4 ? &kG4[0][0] : &kG2[0][0];  // p x 3
  const int64_t bytes = points() * panels_ * k * nr * int64_t{sizeof(float)};
  data_.reset(static_cast<float*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
  std::memset(data_.get(), 0, bytes);  // output channels past mb * 8
  for (int64_t m = 0; m < mb * kBlock; ++m)
    for (int64_t c = 0; c < k; ++c) {
      // g[a][b] = W[m/8, c/8, a, b, c%8, m%8]; u = G g G^T in double.
      const float* g = w + ((m / kBlock) * cb + c / kBlock) * 9 * kBlock * kBlock +
                       (c % kBlock) * kBlock + m % kBlock;
      double gg[6][3];
      for (int i = 0; i < p; ++i)
        for (int b = 0; b < 3; ++b) {
          gg[i][b] = 0;
          for (int a = 0; a < 3; ++a) gg[i][b] += G[i * 3 + a] * g[(a * 3 + b) * kBlock * kBlock];
        }
      float* u = data_.get() + (m / nr * k + c) * nr + m % nr;
      for (int i = 0; i < p; ++i)
        for (int jj = 0; jj < p; ++jj) {
          double v = 0;
          for (int b = 0; b < 3; ++b) v += gg[i][b] * G[jj * 3 + b];
          u[(i * p + jj) * panels_ * k * nr] = static_cast<float>(v);
        }
    }
}

bool BlockedConvWinograd::fits_node(const ir::Node& node) {
  const char* off = std::getenv("KILN_DISABLE_WINOGRAD");
  if (off != nullptr && *off != '\0' && std::string(off) != "0") return false;
  const std::vector<int64_t> kernel = node.attr_ints("kernel_shape");
  return node.attr_int("group", 1) == 1 && all_ones(node, "strides") && positive(node, "dilations") &&
         (kernel.empty() || kernel == std::vector<int64_t>{3, 3});
}

BlockedConvWinograd::BlockedConvWinograd(const ir::Node& node, bool allowed)
    : candidate_(allowed && fits_node(node)), dilated_(!all_ones(node, "dilations")) {}

Status BlockedConvWinograd::prepare(const std::vector<const Tensor*>& constants,
                                    std::vector<bool>& absorbed) {
  if (!candidate_ || constants.size() < 2 || constants[1] == nullptr) return Status::ok();
  const Tensor& w = *constants[1];
  // Dense blocked 3x3 weights [Mb, Cb, 3, 3, 8, 8]; anything else is left to run()'s checks.
  if (w.dtype() != DType::kFloat32 || w.rank() != 6 || w.dim(2) != 3 || w.dim(3) != 3 ||
      w.dim(4) != kBlock || w.dim(5) != kBlock)
    return Status::ok();
  const int64_t min_outputs = cpu_features().has_avx512() ? kMinChannels : kMinOutputsAvx2;
  if (w.dim(0) * kBlock < min_outputs || w.dim(1) * kBlock < kMinChannels) return Status::ok();
  narrow_ = w.dim(0) * kBlock < kMinChannels;
  const auto& kernels = winograd_gemm_kernels();
  if (kernels.empty()) return Status::ok();
  weights_ = std::make_unique<const WinogradWeights>(w.data<float>(), w.dim(0), w.dim(1),
                                                     tile_for(w.dim(1), w.dim(0)), kernels.front());
  // A U too big to stay cached loses to the direct kernel on large images, and a dilated conv's
  // tiles on a small image are mostly padding (winograd_pays): the dense weights stay for those
  // runs. Otherwise run() never falls back to the direct kernel.
  keeps_dense_ = dilated_ || narrow_ || winograd_weights_stream(*weights_);
  if (!keeps_dense_) absorbed[1] = true;
  return Status::ok();
}

bool BlockedConvWinograd::takes(const BlockedConvShape& s, ThreadPool* pool) const {
  if (!ready() || (narrow_ && s.oh * s.ow < kNarrowMinPixels)) return false;
  return !keeps_dense_ || winograd_pays(s, *weights_, pool ? pool->threads() : 1);
}

Status BlockedConvWinograd::run(const BlockedConvShape& s, const float* x, const BlockedEpilogue& e,
                                float* y, ThreadPool* pool) const {
  if (!winograd_fits(s) || s.mb != weights_->mb() || s.cb != weights_->cb())
    return Status::error("Winograd weights prepared for a different convolution");
  blocked_conv_winograd(s, x, *weights_, e, y, pool);
  return Status::ok();
}

}  // namespace kiln::nchwc
