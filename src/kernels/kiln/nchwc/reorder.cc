// Kernels of ai.kiln.ReorderToBlocked (NCHW -> [N, C/8, H, W, 8], padding lanes zero) and
// ai.kiln.ReorderFromBlocked (back, dropping the padding lanes): 8x8 register transposes of
// eight channels by eight pixels, scalar at the row ends. Semantics: docs/ops.md.
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

Status reorder_to_blocked(KernelContext& ctx) {
  if (ctx.num_inputs() < 1 || !ctx.has_input(0)) return ctx.error("ReorderToBlocked needs X");
  const Tensor& x = ctx.input(0);
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
