// The 8-bit conv's tiles on AVX-VNNI (qconv.h): kAvxVnni is qconv_tile_ymm.h's, each quad of u8
// input channels against a quad of s8 weights of 8 filters in one vpdpbusd, which adds the four
// products into the filter's int32 sum exactly (no 16-bit step to saturate, so any s8 weights),
// on the same staged u8 input and quad-packed weights as kAvx512Vnni and kAvx2Bytes.
// kDepthwiseAvxVnni is qconv_depthwise_quads.h's, a channel's four taps in one vpdpbusd. This
// file alone is compiled with -mavxvnni; it is reached only when best_tile() or
// best_depthwise_tile() says so.
#include "kernels/cpu/qconv/qconv_depthwise_quads.h"
#include "kernels/cpu/qconv/qconv_tile_ymm.h"
#include "kernels/cpu/ymm_dot_steps.h"

namespace kiln::qconv {

void conv_staged_avxvnni(const Geometry& g, const Staged& x, const PackedWeights& w, const Requantize& rq,
                         void* y, const void* residual, ThreadPool* pool) {
  drive<YmmTiles<ymm::VnniQuads>>(g, x, w, rq, y, residual, 1, pool);
}

void conv_depthwise_avxvnni(const Geometry& g, const void* x, bool x_signed, int32_t zx, int64_t stride,
                            const PackedWeights& w, const Requantize& rq, void* y, ThreadPool* pool) {
  DepthwiseQuads<YmmQuads<ymm::VnniQuads>>::conv(g, x, x_signed, zx, stride, w, rq, y, pool);
}

}  // namespace kiln::qconv
