// Kernels of ai.kiln.MultiHeadAttention and ai.kiln.ScaledDotProductAttention (docs/ops.md). The
// first runs the merged Q/K/V projection as one GEMM with the bias in its write-out (W packed once
// in prepare when it is a constant; an int8 W with its W_scale runs gemm::DynamicQuantGemm, X
// quantized per row as DynamicQuantMatMul does, to row_bits); both then run
// softmax(scale * Q·K^T + mask)·V per batch element and head by the flash-attention kernel
// (kernels/cpu/attention), written straight into the merged output.
#include "core/thread_pool.h"
#include "kernels/cpu/attention/attention.h"
#include "kernels/cpu/gemm/dynamic_quant_gemm.h"
#include "kernels/cpu/gemm/gemm.h"
#include "kernels/kernel_util.h"
#include "kernels/ref/gemm_f32.h"

namespace kiln {
namespace {

// The optional additive mask (input `at`) into args, checked to broadcast to the scores
// [batch, heads, seq, seq] without growing them.
Status read_mask(KernelContext& ctx, size_t at, int64_t batch, int64_t heads, int64_t seq,
                 attention::AttentionArgs& args) {
  if (ctx.num_inputs() <= at || !ctx.has_input(at) || !ctx.input(at).defined()) return Status::ok();
  const Tensor& mt = ctx.input(at);
  if (mt.dtype() != DType::kFloat32) return ctx.error("mask must be float32");
  const Shape scores_shape = {batch, heads, seq, seq};
  auto bs = broadcast_shapes(mt.shape(), scores_shape);
  if (!bs || *bs != scores_shape)
    return ctx.error("mask of shape " + shape_str(mt.shape()) +
                     " must broadcast to [batch, num_heads, seq, seq] = " + shape_str(scores_shape));
  args.mask = mt.data<float>();
  const Shape st = broadcast_strides(mt.shape(), scores_shape);
  std::copy(st.begin(), st.end(), args.mask_strides);
  return Status::ok();
}

class MultiHeadAttention : public Kernel {
 public:
  explicit MultiHeadAttention(int row_bits) : row_bits_(row_bits) {}

  Status prepare(const std::vector<const Tensor*>& constants,
                 std::vector<bool>& absorbed) override {
    if (constants.size() < 2 || !constants[1]) return Status::ok();
    const Tensor& w = *constants[1];
    if (w.rank() != 2) return Status::ok();
    if (w.dtype() == DType::kInt8 && w.dim(0) <= gemm::kMaxS16Depth) {
      w_int8_ = gemm::DynamicQuantGemm::pack(w.data<int8_t>(), w.dim(0), w.dim(1), row_bits_);
      absorbed[1] = true;
      return Status::ok();
    }
    if (w.dtype() != DType::kFloat32) return Status::ok();
    KILN_ASSIGN_OR_RETURN(w_packed_, pack_weight(w, false));
    absorbed[1] = true;  // run() reads only W's shape from here on
    return Status::ok();
  }
  Status run(KernelContext& ctx) override;

 private:
  int row_bits_;
  gemm::PackedMatrix w_packed_;
  gemm::DynamicQuantGemm w_int8_;
};

Status MultiHeadAttention::run(KernelContext& ctx) {
  if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1))
    return ctx.error("expects inputs X, W and optional B, mask");
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const bool int8 = w.dtype() == DType::kInt8;
  if (x.dtype() != DType::kFloat32 || (w.dtype() != DType::kFloat32 && !int8))
    return ctx.error("X must be float32 and W float32 (or a constant int8 with W_scale)");
  if (int8 && w_int8_.empty()) return ctx.error("an int8 W must be a constant with at most 32768 rows");
  if (x.rank() != 3 || w.rank() != 2 || w.dim(0) != x.dim(2) || w.dim(1) % 3 != 0)
    return ctx.error("X must be [batch, seq, E_in] and W [E_in, 3*E]; got X " +
                     shape_str(x.shape()) + ", W " + shape_str(w.shape()));
  const int64_t heads = ctx.node.attr_int("num_heads", 0);
  const float scale = ctx.node.attr_float("scale", 1.0f);
  const bool seq_first = ctx.node.attr_int("seq_first", 0) != 0;
  const int64_t hidden = w.dim(1) / 3;
  if (heads <= 0 || hidden % heads != 0)
    return ctx.error("num_heads must divide E = W.shape[1] / 3");
  const int64_t batch = seq_first ? x.dim(1) : x.dim(0);
  const int64_t seq = seq_first ? x.dim(0) : x.dim(1);
  const int64_t rows = batch * seq, cols = 3 * hidden;

  const float* bias = nullptr;
  if (ctx.has_input(2) && ctx.input(2).defined()) {
    const Tensor& b = ctx.input(2);
    if (b.dtype() != DType::kFloat32 || b.numel() != cols)
      return ctx.error("B must be float32 [3*E]");
    bias = b.data<float>();
  }
  attention::AttentionArgs args;
  KILN_RETURN_IF_ERROR(read_mask(ctx, 3, batch, heads, seq, args));

  KILN_ASSIGN_OR_RETURN(Tensor * out, ctx.make_output_for_overwrite(
                                          0, DType::kFloat32, Shape{x.dim(0), x.dim(1), hidden}));
  if (rows == 0 || hidden == 0) return Status::ok();
  KILN_ASSIGN_OR_RETURN(Tensor qkv, Tensor::make_for_overwrite(DType::kFloat32, {rows, cols}));
  if (int8) {
    if (ctx.num_inputs() < 5 || !ctx.has_input(4)) return ctx.error("an int8 W needs W_scale (input 4)");
    const Tensor& ws = ctx.input(4);
    if (ws.dtype() != DType::kFloat32 || (ws.numel() != 1 && ws.numel() != cols))
      return ctx.error("W_scale must be float32, one value or one per column of W");
    w_int8_.run(x.data<float>(), rows, ws.data<float>(), ws.numel() != 1, bias, nullptr, qkv.data<float>(), ctx.pool);
  } else if (!w_packed_.empty()) {
    gemm_f32_prepacked(false, rows, 1.0f, x.data<float>(), w.dim(0), w_packed_, 0.0f,
                       qkv.data<float>(), cols, bias, nullptr, ctx.pool);
  } else {
    gemm::GemmF32Args g;
    g.m = rows, g.n = cols, g.k = w.dim(0);
    g.a = x.data<float>(), g.lda = g.k;
    g.b = w.data<float>(), g.ldb = cols;
    g.c = qkv.data<float>(), g.ldc = cols;
    g.bias = bias;
    gemm::gemm_f32_blocked(g, ctx.pool);
  }

  // Token t of batch element b is row b*seq + t of X, or row t*batch + b when sequence first.
  const int64_t batch_rows = seq_first ? 1 : seq, token_rows = seq_first ? batch : 1;
  const float* p = qkv.data<float>();
  args.batch = batch, args.heads = heads, args.seq = seq, args.head_dim = hidden / heads;
  args.q = {p, batch_rows * cols, token_rows * cols};
  args.k = {p + hidden, batch_rows * cols, token_rows * cols};
  args.v = {p + 2 * hidden, batch_rows * cols, token_rows * cols};
  args.y = out->data<float>();
  args.y_batch_stride = batch_rows * hidden, args.y_token_stride = token_rows * hidden;
  args.scale = scale;
  args.zero_nan_rows = ctx.node.attr_int("zero_nan_rows", 0) != 0;
  attention::attention_f32(args, ctx.pool);
  return Status::ok();
}

// Q, K and V already projected, [batch, seq, E] each (or [seq, batch, E]), or packed in Q alone
// as [batch, seq, 3E] (K and V omitted): only the attention.
Status scaled_dot_product_attention(KernelContext& ctx) {
  const bool packed = ctx.num_inputs() >= 1 && ctx.has_input(0) && !ctx.has_input(1) && !ctx.has_input(2);
  if (!packed && (ctx.num_inputs() < 3 || !ctx.has_input(0) || !ctx.has_input(1) || !ctx.has_input(2)))
    return ctx.error("expects inputs Q, K, V (or Q packed with K and V) and an optional mask");
  const Tensor& q = ctx.input(0);
  const Tensor& k = packed ? q : ctx.input(1);
  const Tensor& v = packed ? q : ctx.input(2);
  for (const Tensor* t : {&q, &k, &v})
    if (t->dtype() != DType::kFloat32 || t->shape() != q.shape() || t->rank() != 3)
      return ctx.error("Q, K and V must be float32 of one shape [batch, seq, E]; got Q " +
                       shape_str(q.shape()) + ", K " + shape_str(k.shape()) + ", V " + shape_str(v.shape()));
  if (packed && q.dim(2) % 3 != 0) return ctx.error("packed Q, K, V needs a last dim of 3E, got " + shape_str(q.shape()));
  const int64_t heads = ctx.node.attr_int("num_heads", 0);
  const bool seq_first = ctx.node.attr_int("seq_first", 0) != 0;
  const int64_t cols = q.dim(2), hidden = packed ? cols / 3 : cols;
  if (heads <= 0 || hidden % heads != 0) return ctx.error("num_heads must divide E = Q.shape[2]");
  const int64_t batch = seq_first ? q.dim(1) : q.dim(0);
  const int64_t seq = seq_first ? q.dim(0) : q.dim(1);
  attention::AttentionArgs args;
  KILN_RETURN_IF_ERROR(read_mask(ctx, 3, batch, heads, seq, args));
  Shape y_shape = q.shape();
  y_shape[2] = hidden;
  KILN_ASSIGN_OR_RETURN(Tensor * out, ctx.make_output_for_overwrite(0, DType::kFloat32, y_shape));
  if (q.numel() == 0) return Status::ok();
  // Token t of batch element b is row b*seq + t, or row t*batch + b when sequence first; a row of
  // the packed form holds Q, K and V one after the other.
  const int64_t batch_rows = seq_first ? 1 : seq, token_rows = seq_first ? batch : 1;
  const int64_t batch_stride = batch_rows * cols, token_stride = token_rows * cols;
  args.batch = batch, args.heads = heads, args.seq = seq, args.head_dim = hidden / heads;
  args.q = {q.data<float>(), batch_stride, token_stride};
  args.k = {packed ? q.data<float>() + hidden : k.data<float>(), batch_stride, token_stride};
  args.v = {packed ? q.data<float>() + 2 * hidden : v.data<float>(), batch_stride, token_stride};
  args.y = out->data<float>();
  args.y_batch_stride = batch_rows * hidden, args.y_token_stride = token_rows * hidden;
  args.scale = ctx.node.attr_float("scale", 1.0f);
  args.zero_nan_rows = ctx.node.attr_int("zero_nan_rows", 0) != 0;
  attention::attention_f32(args, ctx.pool);
  return Status::ok();
}

Result<std::unique_ptr<Kernel>> create(const ir::Node& node, int64_t) {
  KILN_ASSIGN_OR_RETURN(const int row_bits, gemm::checked_row_bits(node.attr_int("row_bits", 8)));
  return std::unique_ptr<Kernel>(std::make_unique<MultiHeadAttention>(row_bits));
}

const KernelRegistrar kMultiHeadAttention(
    "ai.kiln", "MultiHeadAttention", "ref", create,
    {{0, {DType::kFloat32}}, {1, {DType::kFloat32, DType::kInt8}}, {2, {DType::kFloat32}}, {3, {DType::kFloat32}}, {4, {DType::kFloat32}}});

KILN_REGISTER_TYPED_KERNEL("ai.kiln", "ScaledDotProductAttention", scaled_dot_product_attention,
                           {{0, {DType::kFloat32}}, {1, {DType::kFloat32}}, {2, {DType::kFloat32}}, {3, {DType::kFloat32}}});

}  // namespace
}  // namespace kiln
