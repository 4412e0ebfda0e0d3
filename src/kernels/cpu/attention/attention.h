// Fast float scaled-dot-product attention over heads already projected:
//   Y[b, i, h] = softmax_j(scale * <Q[b,i,h], K[b,j,h]> + mask[b,h,i,j]) · V[b, :, h]
// Flash-attention style: blocks of queries run against blocks of keys with an online softmax
// (running max and sum per query), so the score block stays in L1; both products use the GEMM
// micro-kernels on packed panels (attention.cc tells how).
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm/microkernel.h"

namespace kiln {
class ThreadPool;
}

namespace kiln::attention {

// One operand of shape [batch, seq, heads, head_dim] as strides: element (b, t, h, c) is at
// data[b * batch_stride + t * token_stride + h * head_dim + c]. Covers [batch, seq, E] rows and
// torchvision's [seq, batch, E] (batch_stride = E, token_stride = batch * E) alike.
struct HeadsView {
  const float* data = nullptr;
  int64_t batch_stride = 0, token_stride = 0;
};

struct AttentionArgs {
  int64_t batch = 0, heads = 0, seq = 0, head_dim = 0;
  HeadsView q, k, v;
  float* y = nullptr;  // output, strides as below
  int64_t y_batch_stride = 0, y_token_stride = 0;
  float scale = 1.0f;
  // Additive mask, or null: element (b, h, i, j) at mask[b*s[0] + h*s[1] + i*s[2] + j*s[3]]
  // (strides 0 where it broadcasts; s[3] is 0 or 1).
  const float* mask = nullptr;
  int64_t mask_strides[4] = {0, 0, 0, 0};
  // Rows whose softmax is NaN (every score -inf, or a NaN or +inf score) give zeros instead:
  // the Where(IsNaN(P), 0, P) guard of torch's scaled_dot_product_attention export.
  bool zero_nan_rows = false;
};

// What tests and benchmarks may override (0 / null: chosen from the micro-kernel and shapes).
// A task is always one head's block of nr queries (the micro-kernel's B panel width).
struct AttentionTuning {
  const gemm::MicroKernel* kernel = nullptr;  // null: gemm::best_f32_kernel()
  int64_t key_block = 0;  // keys per online-softmax step (rounded up to mr); small ones test it
};

// A row whose scores are all -inf gives NaN, as the reference does, unless zero_nan_rows.
// `pool` may be null.
void attention_f32(const AttentionArgs& args, ThreadPool* pool, const AttentionTuning& tuning = {});

}  // namespace kiln::attention
