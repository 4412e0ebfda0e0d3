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
// Weights must be s8 with zero point 0 (symmetric, what ONNX Runtime's and kiln's quantizers
// write); the callers run other convs on the reference.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln {
class ThreadPool;
}

namespace kiln::qconv {

// A 2-D conv (1-D convs are 2-D with one row), group 1.
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
};

// W [filters, channels, kernel_h, kernel_w] (s8) packed for the tiles: blocks of 16 filters,
// each tap by tap, each tap's channels in quads, a quad 16 filters x 4 bytes (one zmm); filters
// and channels past the real ones are zero.
class PackedWeights {
 public:
  static PackedWeights pack(const int8_t* w, const Geometry& g);
  int64_t quads() const { return quads_; }  // channel quads a tap
  int64_t taps() const { return taps_; }
  const int8_t* block(int64_t b) const { return data_.data() + b * taps_ * quads_ * 64; }
  int64_t blocks() const { return blocks_; }
  // sum of W over a filter's window, per filter (the zero point's term).
  const std::vector<int32_t>& filter_sums() const { return sums_; }

 private:
  int64_t quads_ = 0, taps_ = 0, blocks_ = 0;
  std::vector<int8_t> data_;
  std::vector<int32_t> sums_;
};

// Whether this CPU has a tile for the 8-bit conv (AVX-512 VNNI).
bool available();

// Y = conv(X, W) requantized. X is u8 (x_signed: s8) with zero point zx (X's type), NCHW or channels-last
// (x_nhwc); Y is written NCHW or channels-last (y_nhwc) as `rq` says (u8, s8 or float).
// available() must hold. `pool` may be null.
void conv(const Geometry& g, const void* x, bool x_signed, bool x_nhwc, int32_t zx, const PackedWeights& w,
          const Requantize& rq, void* y, bool y_nhwc, ThreadPool* pool);

// The VNNI tiles' driver over a staged input (qconv_avx512vnni.cc): `xp` padded NHWC u8 of
// `padded_h` x `padded_w` pixels of `cp` channels (whole quads), Y channels-last.
struct Staged {
  const uint8_t* xp;
  int64_t padded_h, padded_w, cp;
};
void conv_staged_avx512vnni(const Geometry& g, const Staged& x, const PackedWeights& w, const Requantize& rq,
                            void* y, ThreadPool* pool);

}  // namespace kiln::qconv
