// Kernel of ai.kiln.EmbedLayerNorm (docs/ops.md): for token (b, s),
// Y[b,s] = LayerNorm(word[ids[b,s]] + position[s] + segment[segment_ids[b,s]]) * gamma + beta,
// tokens split over the thread pool, each row vectorised (normalize_row.h).
#include <array>
#include <vector>

#include "core/thread_scratch.h"
#include "kernels/kernel_util.h"
#include "kernels/kiln/normalize_row.h"

namespace kiln {
namespace {

// One token's sum of embeddings, one per thread.
std::vector<float>& token_sum() {
  thread_local std::vector<float> sum;
  return sum;
}

bool present(const KernelContext& ctx, size_t i) {
  return ctx.has_input(i) && ctx.input(i).defined();
}

// Checks token ids against the table's row count (negative ids count from the end, as Gather's
// do). The ids are read again where they are used (row_of) rather than copied, so that a run
// allocates nothing.
Status check_rows(const KernelContext& ctx, const Tensor& ids, int64_t rows, const char* what) {
  if (ids.dtype() != DType::kInt64 && ids.dtype() != DType::kInt32)
    return ctx.error(std::string(what) + " must be int32 or int64, got " + dtype_name(ids.dtype()));
  for (int64_t i = 0; i < ids.numel(); ++i) {
    const int64_t v = ids.dtype() == DType::kInt64 ? ids.data<int64_t>()[i] : ids.data<int32_t>()[i];
    if (v < -rows || v >= rows)
      return ctx.error(std::string(what) + " value " + std::to_string(v) + " is outside [" +
                       std::to_string(-rows) + ", " + std::to_string(rows) + ")");
  }
  return Status::ok();
}

// The table row of token i of checked `ids`.
int64_t row_of(const Tensor& ids, int64_t i, int64_t rows) {
  const int64_t v = ids.dtype() == DType::kInt64 ? ids.data<int64_t>()[i] : ids.data<int32_t>()[i];
  return v < 0 ? v + rows : v;
}

Status embed_layer_norm(KernelContext& ctx) {
  if (ctx.num_inputs() < 6 || !present(ctx, 0) || !present(ctx, 2) || !present(ctx, 3) ||
      !present(ctx, 5))
    return ctx.error("EmbedLayerNorm needs input_ids, word and position embeddings, and gamma");
  const Tensor& ids = ctx.input(0);
  if (ids.rank() != 2)
    return ctx.error("input_ids must be [batch, seq], got " + shape_str(ids.shape()));
  const int64_t batch = ids.dim(0), seq = ids.dim(1);
  const Tensor& word = ctx.input(2);
  const Tensor& pos = ctx.input(3);
  if (word.dtype() != DType::kFloat32 || word.rank() != 2)
    return ctx.error("word embedding must be float32 [vocab, E], got " + shape_str(word.shape()));
  const int64_t e = word.dim(1);
  auto table_ok = [&](size_t i) {
    const Tensor& t = ctx.input(i);
    return t.dtype() == DType::kFloat32 && t.rank() == 2 && t.dim(1) == e;
  };
  if (!table_ok(3))
    return ctx.error("position embedding must be float32 [positions, " + std::to_string(e) + "]");
  if (seq > pos.dim(0))
    return ctx.error("sequence length " + std::to_string(seq) + " exceeds the " +
                     std::to_string(pos.dim(0)) + " positions of the position embedding");
  const bool has_segment = present(ctx, 1) || present(ctx, 4);
  if (has_segment && (!present(ctx, 1) || !present(ctx, 4)))
    return ctx.error("segment_ids and the segment embedding come together");
  if (has_segment && (!table_ok(4) || ctx.input(1).shape() != ids.shape()))
    return ctx.error(
        "segment embedding must be float32 [segments, E] and segment_ids shaped like input_ids");
  for (size_t i : {size_t{5}, size_t{6}})
    if (present(ctx, i) && (ctx.input(i).dtype() != DType::kFloat32 || ctx.input(i).numel() != e))
      return ctx.error(std::string(i == 5 ? "gamma" : "beta") + " must be float32 with " +
                       std::to_string(e) + " values");
  KILN_RETURN_IF_ERROR(check_rows(ctx, ids, word.dim(0), "input_ids"));
  if (has_segment) {
    KILN_RETURN_IF_ERROR(check_rows(ctx, ctx.input(1), ctx.input(4).dim(0), "segment_ids"));
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y,
                        ctx.make_output_for_overwrite(0, DType::kFloat32, {batch, seq, e}));
  const double eps = ctx.node.attr_float("epsilon", 1e-12f);
  const float* gamma = ctx.input(5).data<float>();
  const float* beta = present(ctx, 6) ? ctx.input(6).data<float>() : nullptr;
  const float* seg_table = has_segment ? ctx.input(4).data<float>() : nullptr;
  float* yd = y->data<float>();
  // Every thread that may take tokens has its row sized first (core/thread_scratch.h).
  thread_local ScratchReservation<1> reservation;
  reservation.ensure(ctx.pool, {e}, [](const std::array<int64_t, 1>& n) {
    token_sum().resize(static_cast<size_t>(n[0]));
  });
  for_rows(ctx.pool, batch * seq, e, [&](int64_t t0, int64_t t1) {
    std::vector<float>& sum = token_sum();
    sum.resize(static_cast<size_t>(e));
    for (int64_t t = t0; t < t1; ++t) {
      const float* w = word.data<float>() + row_of(ids, t, word.dim(0)) * e;
      const float* p = pos.data<float>() + (t % seq) * e;
      for (int64_t i = 0; i < e; ++i) sum[static_cast<size_t>(i)] = w[i] + p[i];
      if (has_segment) {
        const float* s = seg_table + row_of(ctx.input(1), t, ctx.input(4).dim(0)) * e;
        for (int64_t i = 0; i < e; ++i) sum[static_cast<size_t>(i)] += s[i];
      }
      normalize_row_f32(sum.data(), e, layer_norm_stats(sum.data(), e, eps), gamma, beta,
                        yd + t * e);
    }
  });
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("ai.kiln", "EmbedLayerNorm", embed_layer_norm);

}  // namespace kiln
