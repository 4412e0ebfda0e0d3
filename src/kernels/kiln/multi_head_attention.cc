// Reference kernel of ai.kiln.MultiHeadAttention (docs/ops.md): one GEMM for the merged
// Q/K/V projection, then per batch and head softmax(scale * Q·K^T + mask)·V, merged back.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/kernel_util.h"
#include "kernels/ref/gemm_f32.h"

namespace kiln {
namespace {

Status multi_head_attention(KernelContext& ctx) {
  if (ctx.num_inputs() < 2) return ctx.error("expects inputs X, W and optional B, mask");
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  if (x.dtype() != DType::kFloat32 || w.dtype() != DType::kFloat32)
    return ctx.error("X and W must be float32");
  if (x.rank() != 3 || w.rank() != 2 || w.dim(0) != x.dim(2) || w.dim(1) % 3 != 0)
    return ctx.error("X must be [batch, seq, E_in] and W [E_in, 3*E]");
  const int64_t heads = ctx.node.attr_int("num_heads", 0);
  const float scale = ctx.node.attr_float("scale", 1.0f);
  const bool seq_first = ctx.node.attr_int("seq_first", 0) != 0;
  const int64_t hidden = w.dim(1) / 3;
  if (heads <= 0 || hidden % heads != 0)
    return ctx.error("num_heads must divide E = W.shape[1] / 3");
  const int64_t d = hidden / heads;
  const int64_t batch = seq_first ? x.dim(1) : x.dim(0);
  const int64_t seq = seq_first ? x.dim(0) : x.dim(1);
  const int64_t rows = batch * seq, cols = 3 * hidden;

  const float* bias = nullptr;
  if (ctx.has_input(2)) {
    const Tensor& b = ctx.input(2);
    if (b.dtype() != DType::kFloat32 || b.numel() != cols)
      return ctx.error("B must be float32 [3*E]");
    bias = b.data<float>();
  }
  const float* mask = nullptr;
  std::vector<int64_t> mask_st(4, 0);  // the mask's strides over [batch, heads, seq, seq]
  const Shape scores_shape = {batch, heads, seq, seq};
  if (ctx.has_input(3)) {
    const Tensor& mt = ctx.input(3);
    if (mt.dtype() != DType::kFloat32) return ctx.error("mask must be float32");
    KILN_ASSIGN_OR_RETURN(Shape bs, broadcast_shapes(mt.shape(), scores_shape));
    if (bs != scores_shape) return ctx.error("mask must broadcast to [batch, num_heads, seq, seq]");
    mask = mt.data<float>();
    mask_st = broadcast_strides(mt.shape(), scores_shape);
  }

  KILN_ASSIGN_OR_RETURN(Tensor qkv, Tensor::make(DType::kFloat32, {rows, cols}));
  float* p = qkv.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) p[r * cols + c] = bias ? bias[c] : 0.0f;
  gemm_f32(false, false, rows, cols, w.dim(0), 1.0f, x.data<float>(), w.dim(0), w.data<float>(),
           cols, 1.0f, p, cols, ctx.pool);

  KILN_ASSIGN_OR_RETURN(Tensor * out,
                        ctx.make_output(0, DType::kFloat32, Shape{x.dim(0), x.dim(1), hidden}));
  float* o = out->data<float>();
  // Row of token t of batch element b, in X and in the output.
  auto row = [&](int64_t b, int64_t t) { return seq_first ? t * batch + b : b * seq + t; };
  auto head = [&](int64_t bh0, int64_t bh1) {
    std::vector<float> s(static_cast<size_t>(seq));
    for (int64_t bh = bh0; bh < bh1; ++bh) {
      const int64_t b = bh / heads, h = bh % heads;
      for (int64_t i = 0; i < seq; ++i) {
        const float* q = p + row(b, i) * cols + h * d;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < seq; ++j) {
          const float* k = p + row(b, j) * cols + hidden + h * d;
          float dot = 0;
          for (int64_t e = 0; e < d; ++e) dot += q[e] * k[e];
          float v = dot * scale;
          if (mask) v += mask[b * mask_st[0] + h * mask_st[1] + i * mask_st[2] + j * mask_st[3]];
          s[static_cast<size_t>(j)] = v;
          mx = std::max(mx, v);
        }
        // Subtracting the row maximum keeps exp from overflowing; the result is unchanged.
        double sum = 0;
        for (int64_t j = 0; j < seq; ++j) {
          s[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - mx);
          sum += s[static_cast<size_t>(j)];
        }
        float* y = o + row(b, i) * hidden + h * d;
        for (int64_t e = 0; e < d; ++e) y[e] = 0;
        for (int64_t j = 0; j < seq; ++j) {
          const float pj = static_cast<float>(s[static_cast<size_t>(j)] / sum);
          const float* vv = p + row(b, j) * cols + 2 * hidden + h * d;
          for (int64_t e = 0; e < d; ++e) y[e] += pj * vv[e];
        }
      }
    }
  };
  if (ctx.pool)
    ctx.pool->parallel_for(batch * heads, 1, head);
  else
    head(0, batch * heads);
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("ai.kiln", "MultiHeadAttention", multi_head_attention);

}  // namespace kiln
