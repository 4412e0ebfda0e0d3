// The 8-bit conv's tiles on AVX2 (qconv_tile_ymm.h's, with AVX2 steps). kAvx2: the staged input
// holds 16-bit values, so each pair of input channels of each tap is one 4-byte broadcast a
// pixel; vpmaddwd multiplies it with the pair's 16-bit weights of 8 filters and adds each two
// products into an int32 lane, exactly (a u8 x s8 vpmaddubsw would saturate its 16-bit pair
// sums, 255 * 127 * 2 > 32767). kAvx2Bytes, on 7-bit weights (|w| <= 64): quads of u8 channels
// against quads of s8 weights, vpmaddubsw's pair sums (at most 255 * 64 * 2 = 32640) exact in
// 16 bits, vpmaddwd against ones adding the two pairs into each filter's int32 lane (or two quads'
// pair sums added first where the weights allow: qconv_step_pairs.cc, 5-pixel tiles). The same
// step on 7-bit weights makes the depthwise tile kDepthwiseAvx2Bytes (qconv_depthwise_quads.h):
// four taps of a channel a lane, fewer shuffles a product than the 16-bit kDepthwise.
#include "kernels/cpu/qconv/qconv_depthwise_quads.h"
#include "kernels/cpu/qconv/qconv_tile_ymm.h"
#include "kernels/cpu/ymm_dot_steps.h"

namespace kiln::qconv {

void conv_staged_avx2_bytes(const Geometry& g, const Staged& x, const PackedWeights& w, const Requantize& rq,
                            void* y, const void* residual, ThreadPool* pool) {
  if (w.paired_steps())
    drive<YmmTiles<ymm::QuadsOf7BitValues, true>>(g, x, w, rq, y, residual, 1, pool);
  else
    drive<YmmTiles<ymm::QuadsOf7BitValues>>(g, x, w, rq, y, residual, 1, pool);
}

void conv_staged_avx2(const Geometry& g, const Staged& x, const PackedWeights& w, const Requantize& rq,
                      void* y, const void* residual, ThreadPool* pool) {
  drive<YmmTiles<ymm::PairsOf16Bits>>(g, x, w, rq, y, residual, 2, pool);
}

void conv_depthwise_avx2_bytes(const Geometry& g, const void* x, bool x_signed, int32_t zx, int64_t stride,
                               const PackedWeights& w, const Requantize& rq, void* y, ThreadPool* pool) {
  DepthwiseQuads<YmmQuads<ymm::QuadsOf7BitValues>>::conv(g, x, x_signed, zx, stride, w, rq, y, pool);
}

}  // namespace kiln::qconv
