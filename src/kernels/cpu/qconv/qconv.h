// The 8-bit convolution of QLinearConv (and of the QDQ convs qdq-fusion turns into it): a direct
// convolution over channels-last (NHWC) u8 activations and s8 weights, int32 sums, and the
// requantization fused into the tile's store.
//
// The input is first staged: copied channels-last into a buffer padded by the conv's pads on
// every side and to whole quads of channels, every padding byte the input's zero point zx. Then
// every output pixel reads a full window, and
//   sum over the window (x - zx) w  =  sum x w  -  zx sum w,
// where sum w is the same for every pixel of an output channel: the zero point becomes one
// int32 per channel, folded into the bias once (Kernel::prepare). Signed activations are moved
// to u8 while staging (x + 128, zx + 128), so the tiles only ever multiply u8 by s8.
//
// The tiles take W less its zero points (qlinear_conv.cc subtracts them while packing): s8 where
// it fits (symmetric s8 weights, what ONNX Runtime's and kiln's quantizers write), else 16-bit
// values (kAvx2, kDepthwise) or, on kAvx512Vnni, s8 weights and a part per filter
// (Requantize::window_weight).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/cpu/qlinear_binary.h"

namespace kiln {
class ThreadPool;
namespace kiln_ops {
struct Activation;  // kernels/kiln/epilogue_activation.h
}
}

namespace kiln::qconv {

// A 2-D conv (1-D convs are 2-D with one row): group 1, or depthwise (group = channels = filters).
struct Geometry {
  int64_t batch = 0, channels = 0, in_h = 0, in_w = 0;  // input, NHWC or NCHW
  int64_t filters = 0, out_h = 0, out_w = 0;           // output
  int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  int64_t pad_top = 0, pad_left = 0;
};

// What the tile's store does with a channel's int32 sum s: q = clamp(round(float(s + bias) *
// scale) + zero_point, lo, hi), the rounding half to even in float (MLAS's requantization,
// which the reference QLinearConv computes the same way), or y = float(s + bias) * scale when
// the output is float.
enum class Output { kU8, kS8, kFloat };
struct Requantize {
  Output output = Output::kU8;
  std::vector<int32_t> bias;  // per output channel, minus zx * sum w (zx + 128 for s8 X)
  std::vector<float> scale;   // per output channel
  int32_t zero_point = 0, lo = 0, hi = 255;
  // A residual add fused into the store (ai.kiln.QLinearConv's inputs 10 to 16): the conv's code
  // a and the code b at the same place of a residual R (Y's type and layout) give QLinearAdd's
  //   c = saturate(round_half_even(((a - az) as + (b - bz) bs) / cs) + cz),
  // by its two multiply-adds where `method` has them (by_fma), else its float steps in its
  // order, the division as its rows do it (qlinear_binary.cc): times 1 / cs, divided only where a
  // lane lands within 2^-11 of a half, and not even checked where the reciprocal gives the
  // division's c for every pair of codes. Only with 8-bit Y, channels-last, and a tile of group
  // 1; the depthwise tiles have none.
  struct ResidualAdd {
    QLinearBinaryParams p;
    QLinearBinaryMethod method;  // qlinear_binary_method(p)
  };
  std::optional<ResidualAdd> add;
  // An activation of the sums' float values before Y's quantization (ai.kiln.QLinearConv's
  // `activation`): `scale` is then x_scale * w_scale, and the store computes
  // q = clamp(round(act(float(s + bias) * scale) * inverse_y_scale) + zero_point, lo, hi), the
  // product by 1 / y_scale standing for QuantizeLinear's division (rarely a code apart). Not with
  // `add`. Null: none.
  const kiln_ops::Activation* activation = nullptr;
  float inverse_y_scale = 1;
  // 8-bit weights whose zero points leave W - wz past s8 (ONNX Runtime's QUInt8 weights), packed
  // for kAvx512Vnni as W - 128 (u8) or W (s8), which fit: per filter, the rest c = 128 - wz (or
  // -wz), which the tile adds times the window's sum of X (its real channels, pads at zx) to
  // each sum. Empty: none.
  std::vector<int32_t> window_weight;

  bool activated() const { return activation != nullptr; }
  // Whether a scaled sum can pass int32 (a scale of 0.5 or more, or an activation's result), so
  // that the VNNI stores must clamp it in float before converting; below, the saturating packs
  // clamp it.
  bool needs_float_clamp() const {
    return activated() || std::any_of(scale.begin(), scale.end(), [](float s) { return !(std::fabs(s) < 0.5f); });
  }
};

// The register tiles. Group 1, best first: kAvx512Vnni (vpdpbusd on zmm: u8 x s8 quads of
// channels), kAvxVnni (vpdpbusd on ymm), kAvx2Bytes on 7-bit weights (|w| <= 64, what `kiln
// quantize` writes for CPUs without VNNI: quads of u8 channels by vpmaddubsw + vpmaddwd, whose
// u8 x s8 pair sums stay within 16 bits then; 3 ops for 32 products, or 5 for 64 where a block's
// quads pair: PackedWeights::paired_steps), kAvx2 on any weights
// (vpmaddwd on pairs of channels widened to 16 bits, exact, where vpmaddubsw's pairs could
// saturate; 4 ops for 32 products). All take blocks of 16 filters. Depthwise, best first:
// kDepthwiseVnni (AVX-512 VNNI: 64 channels a block, four horizontal taps of a channel
// interleaved into each int32 lane, one vpdpbusd per 16 channels x 4 taps), kDepthwiseAvxVnni
// and kDepthwiseAvx2Bytes (the same on 32 channels a ymm block, by vpdpbusd, or on 7-bit weights
// by vpmaddubsw + vpmaddwd), and kDepthwise (AVX2, every CPU: 16 channels a block, the window's
// taps in pairs widened to 16 bits, vpmaddwd). kDepthwiseVnniPixels: kDepthwiseVnni's on 16 or 32
// channels with stride and dilation 1 across, 64 / channels pixels a zmm side by side (a block
// of 64 would idle half its lanes or more, and the ymm one runs the activations 8 lanes at a time).
// Without VNNI, a 3x3 stride-1 conv takes kWinogradAvx2 (qconv_winograd_avx2.cc) on the runs it
// pays on (winograd_pays): Winograd F(2x2, 3x3) in exact integers, 2.25x fewer products on vpmaddwd.
enum class Tile {
  kAvx512Vnni, kAvxVnni, kAvx2, kAvx2Bytes, kWinogradAvx2,
  kDepthwise, kDepthwiseVnni, kDepthwiseAvxVnni, kDepthwiseAvx2Bytes, kDepthwiseVnniPixels
};
// The best tile this CPU (and KILN_ISA) allows for weights w (s8, `count` of them) of a conv
// of group 1 with geometry g (its kernel, strides, dilations and channels: the rest may be
// unknown), and of a depthwise one (its channels, strides and dilations; whether its store activates).
Tile best_tile(const int8_t* w, int64_t count, const Geometry& g);
Tile best_depthwise_tile(const int8_t* w, int64_t count, const Geometry& g, bool activated);
// The best tile of group 1 but Winograd: where kWinogradAvx2 does not pay on a run.
Tile best_direct_tile(const int8_t* w, int64_t count);
// kWinogradAvx2's U (16 points x channels x filters of int16, 3.6x the weights' bytes) stays in
// L2 up to kWinogradCachedBytes. Past that it streams from memory every run, which pays only
// over enough 2x2 tiles: at most kWinogradBytesPerTile of U a tile of the run (batch x output).
// Measured in int8 resnet50 on AVX2 (Intel Xeon model 207 posing as AVX2-only, 1 thread),
// Winograd against the direct kAvx2Bytes tile, all four of its 3x3 layers 0.23 GFLOP: 64 at 56x56
// (U 0.2 KB a tile) 1.12-1.22 ms against 1.47-1.56, 128 at 28x28 (2.7 KB) 1.09-1.17 against
// 1.40-1.50, 256 at 14x14 (43 KB) 1.31-1.33 against 1.43-1.48, 512 at 7x7 (512 KB) 2.35-2.42
// against 1.76-1.80. Where U may stream, the kernel packs the direct tile's weights, and U only
// for the runs where winograd_pays(g) (its batch and output size).
inline constexpr int64_t kWinogradCachedBytes = 1 << 20, kWinogradBytesPerTile = 64 << 10;
int64_t winograd_u_bytes(const Geometry& g);
bool winograd_pays(const Geometry& g);
// Every tile this CPU (and KILN_ISA) can run, group 1 or depthwise ones (tests and benchmarks
// try each), whether a tile needs 7-bit weights, and whether it runs geometry g.
std::vector<Tile> available_tiles(bool depthwise);
bool needs_seven_bit_weights(Tile tile);
bool tile_fits(Tile tile, const Geometry& g);
// kWinogradAvx2's exactness bound: its int32 sums hold 4 x the conv's up to this many channels.
inline constexpr int64_t kWinogradMaxChannels = 1024;
const char* tile_name(Tile tile);  // "avx512_vnni", "avx_vnni", "avx2", "avx2_bytes", "depthwise_..."

// Window rows (qconv_window_rows.cc): a conv of an image's 1 to 3 channels on the quads' tiles
// (kAvx512Vnni, kAvxVnni, kAvx2Bytes), whose taps' quads are mostly padding, runs as a 1x1 conv
// of its windows' bytes (window_rows_geometry) where that takes fewer quads a window: its X
// staged by stage_window_rows, its W packed from window_rows_weights (PackedWeights::pack does
// both, and says so: window_rows()).
bool folds_window_rows(const Geometry& g, Tile tile);
Geometry window_rows_geometry(const Geometry& g);
std::vector<int8_t> window_rows_weights(const int8_t* w, const Geometry& g);

// W [filters, channels, kernel_h, kernel_w] (s8) packed for a tile: blocks of 16 filters, each
// tap by tap, each tap's channels in steps (quads of s8 for VNNI, pairs of s16 for AVX2), a step
// 16 filters x its channels (64 bytes either way; for the ymm tiles, kAvxVnni, kAvx2Bytes and
// kAvx2, filters in the order 0-3, 8-11, 4-7, 12-15, so that one pack of the two sums gives
// them in order); filters and channels past the real ones are zero. kWinogradAvx2: blocks of 16
// filters (in the ymm order), each per point of the 4x4 transform its channel pairs (channels
// padded to 16s), a step 16 filters x 2 int16 of U = G' g G'^T (qconv_winograd_avx2.cc). Depthwise W [channels, 1, kernel_h, kernel_w]: for kDepthwise, blocks of 16 channels,
// each a step per pair of taps (the last one's second tap zero), a step the 16 channels' two
// 16-bit weights interleaved as vpunpck{l,h}wd interleaves two taps' inputs (channels 0-3 and
// 8-11, then 4-7 and 12-15). For kDepthwiseVnni, blocks of 64 channels, each a step per kernel
// row and quad of its taps (kernel_w rounded up to 4s), a step four vectors: vector k's int32
// lane 4 l + j holds channel 16 l + 4 k + j's four taps (the lanes vpunpck{l,h}{bw,wd} make of
// four taps' inputs), taps past the kernel zero. kDepthwiseAvxVnni and kDepthwiseAvx2Bytes: the
// same on blocks of 32 channels, a step four vectors of 32 bytes (lane 4 l + j of vector k:
// channel 16 l + 4 k + j). These three also pack pairs of pixels (pair_block).
// kDepthwiseVnniPixels: kDepthwiseVnni's one block of 64 lanes, lane v holding channel
// v % channels (the weights repeated for each pixel of the zmm); no pairs.
class PackedWeights {
 public:
  static PackedWeights pack(const int8_t* w, const Geometry& g, Tile tile);  // as window rows where they fold
  // 16-bit W (8-bit weights less zero points past s8, |w| <= 255): for kAvx2 and kDepthwise,
  // whose steps multiply 16-bit values.
  static PackedWeights pack_wide(const int16_t* w, const Geometry& g, Tile tile);
  Tile tile() const { return tile_; }
  bool window_rows() const { return window_rows_; }  // packed as window_rows_geometry's 1x1 conv
  int64_t channels_a_step() const { return tile_ == Tile::kAvx2 ? 2 : 4; }
  bool depthwise() const {
    return tile_ == Tile::kDepthwise || tile_ == Tile::kDepthwiseVnni || tile_ == Tile::kDepthwiseAvxVnni ||
           tile_ == Tile::kDepthwiseAvx2Bytes || tile_ == Tile::kDepthwiseVnniPixels;
  }
  int64_t steps() const { return steps_; }  // channel steps a tap; tap pairs or row quads (depthwise)
  int64_t taps() const { return taps_; }
  int64_t blocks() const { return blocks_; }
  int64_t block_bytes() const { return block_bytes_; }
  const int8_t* block(int64_t b) const { return data_.data() + b * block_bytes(); }
  // The depthwise quads tiles' weights for two horizontally adjacent pixels of a stride-1 row
  // (pair_block: null where none): per kernel row and quad of columns, the first pixel's four
  // vectors (tap kx at column kx), then the second's (tap kx at column kx + 1).
  const int8_t* pair_block(int64_t b) const {
    return pair_data_.empty() ? nullptr : pair_data_.data() + b * pair_block_bytes_;
  }
  // sum of W over a filter's window, per filter (the zero point's term).
  const std::vector<int32_t>& filter_sums() const { return sums_; }
  // kAvx2Bytes' quads in pairs where they pair (qconv_step_pairs.cc; 0: none): per block and tap,
  // paired_steps() steps of two quads of channels, 128 bytes each (the first quad's 64, the
  // second's), which read the tap's pixel at the byte offsets step_offsets(b)[2 i] and [2 i + 1],
  // i = tap x paired_steps() + step. Block b's taps take their first block_paired_steps(b) steps
  // (the rest zero: the blocks of a conv pair differently, and a tap's layout takes the most).
  int64_t paired_steps() const { return paired_steps_; }
  int64_t block_paired_steps(int64_t b) const { return block_paired_steps_[static_cast<size_t>(b)]; }
  const int32_t* step_offsets(int64_t b) const { return step_offsets_.data() + b * taps_ * paired_steps_ * 2; }

 private:
  template <typename T>
  static PackedWeights pack_values(const T* w, const Geometry& g, Tile tile);
  static PackedWeights pack_winograd(const int8_t* w, const Geometry& g);
  void pair_steps();  // kAvx2Bytes' data_ repacked in pairs of quads where that pays
  Tile tile_ = Tile::kAvx2;
  bool window_rows_ = false;
  int64_t steps_ = 0, taps_ = 0, blocks_ = 0, block_bytes_ = 0;
  std::vector<int8_t> data_, pair_data_;
  int64_t pair_block_bytes_ = 0;
  std::vector<int32_t> sums_;
  int64_t paired_steps_ = 0;
  std::vector<int32_t> step_offsets_;
  std::vector<int64_t> block_paired_steps_;
};

// Y = conv(X, W) requantized. X is u8 (x_signed: s8) with zero point zx (X's type), NCHW or channels-last
// (x_nhwc); Y is written NCHW or channels-last (y_nhwc) as `rq` says (u8, s8 or float). `w` is
// packed for best_tile(). With rq.add, `residual` is R (channels-last, Y's type; y_nhwc). With
// quantize_scale, X is float32 NCHW, quantized while staged as QuantizeLinear(X, *quantize_scale,
// zx) would (x_nhwc is ignored). `pool` may be null.
void conv(const Geometry& g, const void* x, bool x_signed, bool x_nhwc, int32_t zx, const PackedWeights& w,
          const Requantize& rq, void* y, bool y_nhwc, ThreadPool* pool, const void* residual = nullptr,
          const float* quantize_scale = nullptr);

// The tiles' drivers over a staged input (qconv_avx512vnni.cc, qconv_avxvnni.cc, qconv_avx2.cc):
// `xp` padded NHWC of `padded_h` x `padded_w` pixels of `cp` channels (whole steps), u8 for the
// VNNI tiles and kAvx2Bytes, int16 for kAvx2; Y channels-last, and R with rq.add.
struct Staged {
  const void* xp;
  int64_t padded_h, padded_w, cp;
  const int32_t* window_sums = nullptr;  // per output pixel, with rq.window_weight
};
// The staged input's columns: X's padded ones, or as many as the last window reaches.
int64_t staged_columns(const Geometry& g);
void conv_staged_avx512vnni(const Geometry& g, const Staged& x, const PackedWeights& w, const Requantize& rq,
                            void* y, const void* residual, ThreadPool* pool);
// X (as conv() takes it) staged as window rows for W packed so (qconv_window_rows.cc): into `buf`,
// `s` describing it for the tiles of window_rows_geometry(g).
void stage_window_rows(const Geometry& g, const void* x, bool x_signed, bool x_nhwc, int32_t zx, std::vector<char>& buf,
                       Staged& s, ThreadPool* pool, const float* quantize_scale);
// Per output pixel, the sum of staged X over its window, its real channels only
// (Requantize::window_weight), into `sums` (qconv_avx512vnni.cc).
void window_sums_avx512vnni(const Geometry& g, const Staged& x, std::vector<int32_t>& sums, ThreadPool* pool);
void conv_staged_avxvnni(const Geometry& g, const Staged& x, const PackedWeights& w, const Requantize& rq,
                         void* y, const void* residual, ThreadPool* pool);
void conv_staged_avx2(const Geometry& g, const Staged& x, const PackedWeights& w, const Requantize& rq,
                      void* y, const void* residual, ThreadPool* pool);
void conv_staged_avx2_bytes(const Geometry& g, const Staged& x, const PackedWeights& w, const Requantize& rq,
                            void* y, const void* residual, ThreadPool* pool);
// `x` padded u8 to whole 2x2 tiles of the output (out_h and out_w rounded up to even), channels
// to 16s.
void conv_winograd_avx2(const Geometry& g, const Staged& x, const PackedWeights& w, const Requantize& rq,
                        void* y, const void* residual, ThreadPool* pool);
// Depthwise (qconv_depthwise.cc, qconv_depthwise_avx512vnni.cc, qconv_avxvnni.cc, qconv_avx2.cc)
// reads channels-last u8 X (x_signed: s8) where it is, `stride` bytes a pixel, with zero point
// zx (X's type).
void conv_depthwise(const Geometry& g, const void* x, bool x_signed, int32_t zx, int64_t stride, const PackedWeights& w,
                    const Requantize& rq, void* y, ThreadPool* pool);
void conv_depthwise_avx512vnni(const Geometry& g, const void* x, bool x_signed, int32_t zx, int64_t stride,
                               const PackedWeights& w, const Requantize& rq, void* y, ThreadPool* pool);
void conv_depthwise_avxvnni(const Geometry& g, const void* x, bool x_signed, int32_t zx, int64_t stride,
                            const PackedWeights& w, const Requantize& rq, void* y, ThreadPool* pool);
void conv_depthwise_avx2_bytes(const Geometry& g, const void* x, bool x_signed, int32_t zx, int64_t stride,
                               const PackedWeights& w, const Requantize& rq, void* y, ThreadPool* pool);
// What the depthwise tiles read outside X: its zero point as X holds it (zx), over a row of
// channels-last X (`stride` bytes a pixel) and `slack` bytes more, so that a kernel row above or
// below X reads it at the offsets it would have in X (qconv_driver.h, row_or_pad). thread_local,
// sized on the calling thread, which the pool's threads then read (no allocation in a steady run).
const std::vector<uint8_t>& zero_point_row(const Geometry& g, int64_t stride, int32_t zx, int64_t slack);

}  // namespace kiln::qconv
