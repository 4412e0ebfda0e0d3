// Kernels of ai.kiln.BlockedMaxPool, BlockedAveragePool and BlockedGlobalAveragePool: the ONNX
// pools (2-D) on the blocked NCHWc layout, one AVX2 register per pixel (8 channels). Padding
// lanes stay zero: every pool of zeros is zero. Semantics: docs/ops.md.
#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "kernels/kernel_util.h"
#include "kernels/kiln/nchwc/blocked_layout.h"
#include "kernels/ref/conv_util.h"

namespace kiln::nchwc {
namespace {

struct PoolJob {
  BlockedDims in;
  conv_util::Geometry g;
  bool max = true;
  bool count_pad = false;
};

// One window of output pixel ow at the edge (taps clipped to the input). NaN inputs after the
// window's first value are skipped (max_ps(v, acc) keeps acc when v is NaN), as the reference
// MaxPool does.
__m256 edge_window(const PoolJob& p, const float* xb, int64_t oh, int64_t ow, int64_t kh0,
                   int64_t kh1) {
  const auto& g = p.g;
  const int64_t iw0 = ow * g.strides[1] - g.pads[1];
  const auto [kw0, kw1] = valid_taps(iw0, g.dilations[1], g.kernel[1], p.in.w);
  __m256 acc = _mm256_set1_ps(p.max ? std::numeric_limits<float>::lowest() : 0.0f);
  bool seen = false;
  for (int64_t kh = kh0; kh < kh1; ++kh) {
    const float* xr = xb + (oh * g.strides[0] - g.pads[0] + kh * g.dilations[0]) * p.in.w * kBlock;
    for (int64_t kw = kw0; kw < kw1; ++kw) {
      const __m256 v = _mm256_loadu_ps(xr + (iw0 + kw * g.dilations[1]) * kBlock);
      acc = !p.max ? _mm256_add_ps(acc, v) : seen ? _mm256_max_ps(v, acc) : v;
      seen = true;
    }
  }
  if (p.max) return acc;
  const float count = p.count_pad ? static_cast<float>(g.kernel[0] * g.kernel[1])
                                  : static_cast<float>((kh1 - kh0) * (kw1 - kw0));
  return _mm256_div_ps(acc, _mm256_set1_ps(count));
}

// P interior pixels from ow on (every column tap inside the input), rows [kh0, kh1), the taps
// in edge_window's order, P windows at a time so that their chains overlap. A max starts from
// the window's first value (max(v, v) = v, and a first NaN stays, as in edge_window).
template <int P, bool kMax>
void interior_windows(const PoolJob& p, const float* xb, float* yr, int64_t oh, int64_t ow,
                      int64_t kh0, int64_t kh1) {
  const auto& g = p.g;
  const int64_t sw = g.strides[1] * kBlock, dw = g.dilations[1] * kBlock;
  const int64_t row = g.dilations[0] * p.in.w * kBlock;
  const float* x0 = xb + ((oh * g.strides[0] - g.pads[0] + kh0 * g.dilations[0]) * p.in.w +
                          ow * g.strides[1] - g.pads[1]) *
                             kBlock;
  __m256 acc[P];
#pragma GCC unroll 4
  for (int i = 0; i < P; ++i)
    acc[i] = !kMax       ? _mm256_setzero_ps()
             : kh1 > kh0 ? _mm256_loadu_ps(x0 + i * sw)
                         : _mm256_set1_ps(std::numeric_limits<float>::lowest());
  for (int64_t kh = 0; kh < kh1 - kh0; ++kh)
    for (int64_t kw = 0; kw < g.kernel[1]; ++kw) {
      const float* xp = x0 + kh * row + kw * dw;
#pragma GCC unroll 4
      for (int i = 0; i < P; ++i) {
        const __m256 v = _mm256_loadu_ps(xp + i * sw);
        acc[i] = kMax ? _mm256_max_ps(v, acc[i]) : _mm256_add_ps(acc[i], v);
      }
    }
  if (!kMax) {
    const float count = p.count_pad ? static_cast<float>(g.kernel[0] * g.kernel[1])
                                    : static_cast<float>((kh1 - kh0) * g.kernel[1]);
#pragma GCC unroll 4
    for (int i = 0; i < P; ++i) acc[i] = _mm256_div_ps(acc[i], _mm256_set1_ps(count));
  }
#pragma GCC unroll 4
  for (int i = 0; i < P; ++i) _mm256_storeu_ps(yr + (ow + i) * kBlock, acc[i]);
}

// Output row oh of one channel block: xb [H, W, 8] -> yb [OH, OW, 8].
void pool_row(const PoolJob& p, const float* xb, float* yb, int64_t oh) {
  const auto& g = p.g;
  const auto [kh0, kh1] =
      valid_taps(oh * g.strides[0] - g.pads[0], g.dilations[0], g.kernel[0], p.in.h);
  float* yr = yb + oh * g.out[1] * kBlock;
  // Columns [lo, hi) have every tap inside the input.
  const int64_t s = g.strides[1],
                span = p.in.w - 1 + g.pads[1] - (g.kernel[1] - 1) * g.dilations[1];
  const int64_t lo = std::min(g.out[1], (g.pads[1] + s - 1) / s);
  const int64_t hi = std::clamp<int64_t>(span < 0 ? 0 : span / s + 1, lo, g.out[1]);
  for (int64_t ow = 0; ow < lo; ++ow)
    _mm256_storeu_ps(yr + ow * kBlock, edge_window(p, xb, oh, ow, kh0, kh1));
  int64_t ow = lo;
  const auto wide = p.max ? &interior_windows<4, true> : &interior_windows<4, false>;
  const auto one = p.max ? &interior_windows<1, true> : &interior_windows<1, false>;
  for (; ow + 4 <= hi; ow += 4) wide(p, xb, yr, oh, ow, kh0, kh1);
  for (; ow < hi; ++ow) one(p, xb, yr, oh, ow, kh0, kh1);
  for (; ow < g.out[1]; ++ow)
    _mm256_storeu_ps(yr + ow * kBlock, edge_window(p, xb, oh, ow, kh0, kh1));
}

Status pool(KernelContext& ctx, bool max) {
  if (ctx.num_inputs() < 1 || !ctx.has_input(0)) return ctx.error("pooling needs X");
  auto d = blocked_dims(ctx.input(0), "X");
  if (!d) return ctx.error(d.status().message());
  if (ctx.num_outputs() > 1 && ctx.wants_output(1))
    return ctx.error("BlockedMaxPool has no Indices output");
  if (!ctx.node.has_attr("kernel_shape")) return ctx.error("kernel_shape attribute is required");
  PoolJob p;
  p.in = *d;
  p.max = max;
  p.count_pad = ctx.node.attr_int("count_include_pad", 0) != 0;
  auto g = conv_util::read_geometry(ctx.node, {d->h, d->w}, {});
  if (!g) return ctx.error(g.status().message());
  p.g = *g;
  Status st = conv_util::compute_output(p.g, ctx.node.attr_string("auto_pad", "NOTSET"),
                                        ctx.node.attr_int("ceil_mode", 0) != 0);
  if (!st) return ctx.error(st.message());
  const int64_t oh = p.g.out[0], ow = p.g.out[1];
  KILN_ASSIGN_OR_RETURN(
      Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, {d->n, d->cb, oh, ow, kBlock}));
  const float* xd = ctx.input(0).data<float>();
  float* yd = y->data<float>();
  const int64_t rows = d->n * d->cb * oh;
  parallel_range(ctx.pool, rows, rows * ow * p.g.kernel[0] * p.g.kernel[1] * kBlock,
                 [&](int64_t r0, int64_t r1) {
                   for (int64_t r = r0; r < r1; ++r) {
                     const int64_t plane = r / oh;
                     pool_row(p, xd + plane * d->plane(), yd + plane * oh * ow * kBlock, r % oh);
                   }
                 });
  return Status::ok();
}

Status max_pool(KernelContext& ctx) { return pool(ctx, true); }
Status average_pool(KernelContext& ctx) { return pool(ctx, false); }

Status global_average_pool(KernelContext& ctx) {
  if (ctx.num_inputs() < 1 || !ctx.has_input(0)) return ctx.error("pooling needs X");
  auto d = blocked_dims(ctx.input(0), "X");
  if (!d) return ctx.error(d.status().message());
  KILN_ASSIGN_OR_RETURN(
      Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, {d->n, d->cb, 1, 1, kBlock}));
  const float* xd = ctx.input(0).data<float>();
  float* yd = y->data<float>();
  const int64_t hw = d->h * d->w;
  parallel_range(ctx.pool, d->n * d->cb, d->n * d->cb * hw * kBlock, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const float* x = xd + b * d->plane();
      __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                       _mm256_setzero_ps()};
      int64_t p = 0;
      for (; p + 4 <= hw; p += 4)
        for (int i = 0; i < 4; ++i)
          acc[i] = _mm256_add_ps(acc[i], _mm256_loadu_ps(x + (p + i) * kBlock));
      for (; p < hw; ++p) acc[0] = _mm256_add_ps(acc[0], _mm256_loadu_ps(x + p * kBlock));
      const __m256 sum =
          _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
      _mm256_storeu_ps(yd + b * kBlock, _mm256_div_ps(sum, _mm256_set1_ps(static_cast<float>(hw))));
    }
  });
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("ai.kiln", "BlockedMaxPool", max_pool);
KILN_REGISTER_KERNEL("ai.kiln", "BlockedAveragePool", average_pool);
KILN_REGISTER_KERNEL("ai.kiln", "BlockedGlobalAveragePool", global_average_pool);

}  // namespace kiln::nchwc
