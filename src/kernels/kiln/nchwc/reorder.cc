// Kernels of ai.kiln.ReorderToBlocked (NCHW -> [N, C/8, H, W, 8], padding lanes zero) and
// ai.kiln.ReorderFromBlocked (back, dropping the padding lanes): 8x8 register transposes of
// eight channels by eight pixels, scalar at the row ends. With `channels_last` the plain side is
// NHWC, whose pixels already hold their channels side by side: each block is one 8-float copy a
// pixel. Semantics: docs/ops.md.
#include <immintrin.h>

#include "kernels/cpu/vec_math_avx2.h"
#include "kernels/kernel_util.h"
#include "kernels/kiln/nchwc/blocked_layout.h"

namespace kiln::nchwc {
namespace {

// One channel block: `lanes` real channels of x (planes `hw` apart) into y [hw, 8].
void to_blocked(const float* x, int64_t lanes, int64_t hw, float* y) {
  int64_t p = 0;
  for (; p + 8 <= hw; p += 8) {
    __m256 r[8];
    for (int c = 0; c < 8; ++c)
      r[c] = c < lanes ? _mm256_loadu_ps(x + c * hw + p) : _mm256_setzero_ps();
    vec::transpose_8x8_avx2(r);
    for (int i = 0; i < 8; ++i) _mm256_storeu_ps(y + (p + i) * kBlock, r[i]);
  }
  for (; p < hw; ++p)
    for (int64_t c = 0; c < kBlock; ++c) y[p * kBlock + c] = c < lanes ? x[c * hw + p] : 0.0f;
}

// The inverse of to_blocked.
void from_blocked(const float* x, int64_t lanes, int64_t hw, float* y) {
  int64_t p = 0;
  for (; p + 8 <= hw; p += 8) {
    __m256 r[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(x + (p + i) * kBlock);
    vec::transpose_8x8_avx2(r);
    for (int c = 0; c < lanes; ++c) _mm256_storeu_ps(y + c * hw + p, r[c]);
  }
  for (; p < hw; ++p)
    for (int64_t c = 0; c < lanes; ++c) y[c * hw + p] = x[p * kBlock + c];
}

// Rows [r0, r1) (of w pixels, h rows an image) of NHWC images x, c channels a pixel, into the
// blocks of y [N, cb, h, w, 8] (kToBlocked), or rows of blocked x into NHWC y. Pixel by pixel,
// so the NHWC side is read or written in order: block by block over a row (the blocked side in
// order, NHWC read with a stride of c floats) took 1.5x as long on ConvNeXt's reorders, and
// eight pixels a block at a time no less.
template <bool kToBlocked>
void channels_last_rows(const float* x, float* y, int64_t c, int64_t h, int64_t w, int64_t r0,
                        int64_t r1) {
  const int64_t cb = blocks_of(c), tail = c - (cb - 1) * kBlock, plane = h * w * kBlock;
  const __m256i tail_mask = vec::tail_mask_avx2(static_cast<int>(tail));
  const int64_t whole_blocks = tail == kBlock ? cb : cb - 1;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t image = r / h;
    for (int64_t px = 0; px < w; ++px) {
      const int64_t plain = (r * w + px) * c;
      const int64_t blocked = image * cb * plane + ((r % h) * w + px) * kBlock;
      for (int64_t b = 0; b < whole_blocks; ++b) {
        if (kToBlocked)
          _mm256_storeu_ps(y + blocked + b * plane, _mm256_loadu_ps(x + plain + b * kBlock));
        else
          _mm256_storeu_ps(y + plain + b * kBlock, _mm256_loadu_ps(x + blocked + b * plane));
      }
      if (whole_blocks == cb) continue;
      const int64_t b = whole_blocks;
      if (kToBlocked)  // the part block: padding lanes zero
        _mm256_storeu_ps(y + blocked + b * plane,
                         _mm256_maskload_ps(x + plain + b * kBlock, tail_mask));
      else
        _mm256_maskstore_ps(y + plain + b * kBlock, tail_mask,
                            _mm256_loadu_ps(x + blocked + b * plane));
    }
  }
}

Status reorder_to_blocked_channels_last(KernelContext& ctx, const Tensor& x) {
  if (x.dtype() != DType::kFloat32 || x.rank() != 4)
    return ctx.error("X must be a float32 NHWC tensor, got " + shape_str(x.shape()));
  const int64_t n = x.dim(0), h = x.dim(1), w = x.dim(2), c = x.dim(3);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(
                                        0, DType::kFloat32, {n, blocks_of(c), h, w, kBlock}));
  const float* xd = x.data<float>();
  float* yd = y->data<float>();
  parallel_range(ctx.pool, n * h, y->numel(), [&](int64_t r0, int64_t r1) {
    channels_last_rows<true>(xd, yd, c, h, w, r0, r1);
  });
  return Status::ok();
}

Status reorder_to_blocked(KernelContext& ctx) {
  if (ctx.num_inputs() < 1 || !ctx.has_input(0)) return ctx.error("ReorderToBlocked needs X");
  const Tensor& x = ctx.input(0);
  if (ctx.node.attr_int("channels_last", 0)) return reorder_to_blocked_channels_last(ctx, x);
  if (x.dtype() != DType::kFloat32 || x.rank() != 4)
    return ctx.error("X must be a float32 NCHW tensor, got " + shape_str(x.shape()));
  const int64_t n = x.dim(0), c = x.dim(1), hw = x.dim(2) * x.dim(3), cb = blocks_of(c);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(
                                        0, DType::kFloat32, {n, cb, x.dim(2), x.dim(3), kBlock}));
  const float* xd = x.data<float>();
  float* yd = y->data<float>();
  parallel_range(ctx.pool, n * cb, n * cb * hw * kBlock, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t ni = b / cb, blk = b % cb;
      to_blocked(xd + (ni * c + blk * kBlock) * hw, std::min(kBlock, c - blk * kBlock), hw,
                 yd + b * hw * kBlock);
    }
  });
  return Status::ok();
}

Status reorder_from_blocked(KernelContext& ctx) {
  if (ctx.num_inputs() < 1 || !ctx.has_input(0)) return ctx.error("ReorderFromBlocked needs X");
  auto d = blocked_dims(ctx.input(0), "X");
  if (!d) return ctx.error(d.status().message());
  const int64_t c = ctx.node.attr_int("channels", -1);
  if (c <= (d->cb - 1) * kBlock || c > d->cb * kBlock)
    return ctx.error("channels " + std::to_string(c) + " does not fit X's " +
                     std::to_string(d->cb) + " channel blocks");
  const int64_t hw = d->h * d->w;
  if (ctx.node.attr_int("channels_last", 0)) {
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32,
                                                                    {d->n, d->h, d->w, c}));
    const float* xd = ctx.input(0).data<float>();
    float* yd = y->data<float>();
    parallel_range(ctx.pool, d->n * d->h, y->numel(), [&](int64_t r0, int64_t r1) {
      channels_last_rows<false>(xd, yd, c, d->h, d->w, r0, r1);
    });
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y,
                        ctx.make_output_for_overwrite(0, DType::kFloat32, {d->n, c, d->h, d->w}));
  const float* xd = ctx.input(0).data<float>();
  float* yd = y->data<float>();
  parallel_range(ctx.pool, d->n * d->cb, d->n * d->cb * hw * kBlock, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t ni = b / d->cb, blk = b % d->cb;
      from_blocked(xd + b * hw * kBlock, std::min(kBlock, c - blk * kBlock), hw,
                   yd + (ni * c + blk * kBlock) * hw);
    }
  });
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("ai.kiln", "ReorderToBlocked", reorder_to_blocked);
KILN_REGISTER_KERNEL("ai.kiln", "ReorderFromBlocked", reorder_from_blocked);

}  // namespace kiln::nchwc
