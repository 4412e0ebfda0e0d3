// Kernel of ai.kiln.FusedMLP: Y = act(X·W1 + B1)·W2 + B2 (+ R), a block of rows at a time so the
// block's intermediate [rows, H] is still in the core's L2 when the second product reads it. Both
// products are the fast float GEMM (kernels/cpu/gemm) with the bias, activation and residual in
// its write-out, and constant weights packed once in prepare. Semantics: docs/ops.md.
#include <algorithm>
#include <array>
#include <vector>

#include "core/thread_pool.h"
#include "core/thread_scratch.h"
#include "kernels/cpu/gemm/gemm.h"
#include "kernels/kernel_util.h"
#include "kernels/kiln/epilogue_activation.h"
#include "kernels/ref/gemm_f32.h"

namespace kiln {
namespace {

// Why blocks of up to 128 rows, not the 16-32 that would keep the intermediate in 256 KiB: every
// block streams both weights (2 x 9.4 MB for BERT) from L3 or memory, so small blocks read them
// too often. Measured on a 2-core EPYC (1 MiB L2): BERT's MLP at 128 rows, weights packed per
// call, 20-row blocks took 1.6-1.8x the unfused time and 64-row blocks 0.9-0.95x; ViT-B/16's 197
// rows, prepacked, one 104-row block per thread took 107-112 ms over the 12 layers where four
// 52-row blocks took 124-127 ms. The intermediate of 128 rows is 1.5 MB for H = 3072: it spills
// from L2 to L3, which costs far less than another pass over the weights. Blocks are whole
// micro-kernel tiles (8 rows at AVX-512, 6 at AVX2), evened out over the blocks, so that only
// the last block has a partial tile and no thread runs a tile more than it must (ViT's 197 rows
// at AVX2: 102 + 95 rows, 17 and 16 tiles, where blocks of 8-row multiples made 104 + 93, 18
// and 16).
constexpr int64_t kBlockRows = 128;
constexpr int64_t kIntermediateBytes = 2 * 1024 * 1024;
constexpr int64_t kMinThreadRows = 32;  // fewer rows a thread: split the columns instead

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

struct Operands {
  const float *x, *w1, *b1, *w2, *b2, *r;  // b1, b2, r may be null; w1, w2 unused when packed
  const gemm::PackedMatrix *w1_packed, *w2_packed;  // the weights packed in prepare, or null
  int64_t k, h, n;
};

// out[m x n] = x[m x k] * w (+ bias) then `epilogue`: one fast GEMM against the packed weight,
// or against w as it is.
void product(int64_t m, int64_t k, int64_t n, const float* x, const float* w,
             const gemm::PackedMatrix* packed, const float* bias, const gemm::Epilogue* epilogue,
             float* out, ThreadPool* pool) {
  if (packed) return gemm_f32_prepacked(false, m, 1.0f, x, k, *packed, 0.0f, out, n, bias, epilogue, pool);
  gemm::GemmF32Args g;
  g.m = m, g.n = n, g.k = k;
  g.a = x, g.lda = k, g.b = w, g.ldb = n, g.c = out, g.ldc = n;
  g.bias = bias, g.epilogue = epilogue;
  gemm::gemm_f32_blocked(g, pool);
}

// A block's intermediate (rows x H), one per thread.
std::vector<float>& block_hidden() {
  thread_local std::vector<float> h;
  return h;
}

class FusedMlp : public Kernel {
 public:
  explicit FusedMlp(kiln_ops::Activation act) : act_(kiln_ops::gemm_epilogue(act)) {}

  Status prepare(const std::vector<const Tensor*>& constants, std::vector<bool>& absorbed) override {
    // Both weights or neither: the blocks run fc1 and fc2 alike.
    auto packable = [&](size_t i) {
      return constants.size() > i && constants[i] && constants[i]->rank() == 2 &&
             constants[i]->dtype() == DType::kFloat32;
    };
    if (!packable(1) || !packable(3) || constants[1]->dim(1) != constants[3]->dim(0))
      return Status::ok();
    KILN_ASSIGN_OR_RETURN(w1_, pack_weight(*constants[1], false));
    KILN_ASSIGN_OR_RETURN(w2_, pack_weight(*constants[3], false));
    absorbed[1] = absorbed[3] = true;
    return Status::ok();
  }

  Status run(KernelContext& ctx) override {
    if (ctx.num_inputs() < 4 || !ctx.has_input(0) || !ctx.has_input(1) || !ctx.has_input(3))
      return ctx.error("needs inputs X, W1 and W2");
    const Tensor& x = ctx.input(0);
    const Tensor& w1 = ctx.input(1);
    const Tensor& w2 = ctx.input(3);
    const Tensor* b1 = optional_input(ctx, 2);
    const Tensor* b2 = optional_input(ctx, 4);
    const Tensor* r = optional_input(ctx, 5);
    for (const Tensor* t : {&x, &w1, &w2, b1, b2, r})
      if (t && t->dtype() != DType::kFloat32) return ctx.error("supports float32 only");
    if (x.rank() < 1 || w1.rank() != 2 || w2.rank() != 2)
      return ctx.error("needs X of rank 1 or more and 2-D W1, W2; got X " + shape_str(x.shape()) +
                       ", W1 " + shape_str(w1.shape()) + ", W2 " + shape_str(w2.shape()));
    const bool packed = !w1_.empty();
    const Operands op{x.data<float>(),
                      packed ? nullptr : w1.data<float>(),
                      b1 ? b1->data<float>() : nullptr,
                      packed ? nullptr : w2.data<float>(),
                      b2 ? b2->data<float>() : nullptr,
                      r ? r->data<float>() : nullptr,
                      packed ? &w1_ : nullptr,
                      packed ? &w2_ : nullptr,
                      w1.dim(0),
                      w1.dim(1),
                      w2.dim(1)};
    if (x.dim(x.rank() - 1) != op.k || w2.dim(0) != op.h)
      return ctx.error("inner dimensions differ: X " + shape_str(x.shape()) + ", W1 " +
                       shape_str(w1.shape()) + ", W2 " + shape_str(w2.shape()));
    if ((b1 && b1->numel() != op.h) || (b2 && b2->numel() != op.n))
      return ctx.error("B1 must hold " + std::to_string(op.h) + " values and B2 " +
                       std::to_string(op.n));
    Shape out(x.shape().begin(), x.shape().end() - 1);
    out.push_back(op.n);
    if (r && r->shape() != out)
      return ctx.error("R must have Y's shape " + shape_str(out) + ", got " +
                       shape_str(r->shape()));
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < x.shape().size(); ++i) rows *= x.shape()[i];
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, out));
    float* yd = y->data<float>();
    if (rows == 0) return Status::ok();

    const int64_t threads = ctx.pool ? ctx.pool->threads() : 1;
    const int64_t row_tile = (packed ? w1_.kernel() : *gemm::best_f32_kernel()).mr;
    const int64_t target =
        std::max(std::min(kIntermediateBytes / (4 * std::max<int64_t>(op.h, 1)), kBlockRows) /
                     row_tile * row_tile,
                 row_tile);
    if (threads > 1 && rows < threads * kMinThreadRows) {
      // Too few rows to share out: each thread would stream all of both weights for a few rows,
      // so run all rows as one block and let gemm_f32 split the columns over the threads.
      hidden_.resize(static_cast<size_t>(rows * op.h));  // grows once: runs allocate nothing
      block(op, 0, rows, hidden_.data(), yd, ctx.pool);
      return Status::ok();
    }
    // Blocks evened out so every thread gets the same number (no short last block holding one
    // thread back).
    const int64_t blocks = round_up((rows + target - 1) / target, threads);
    const int64_t tiles = (rows + row_tile - 1) / row_tile;
    const int64_t rb = std::min(target, (tiles + blocks - 1) / blocks * row_tile);
    // Every thread that may take a block has its intermediate and GEMM buffers sized first, so
    // that runs after the first allocate nothing whichever threads take the blocks.
    for (const bool fc2 : {false, true}) {
      gemm::GemmF32Args g;
      g.m = rb, g.k = fc2 ? op.h : op.k, g.n = fc2 ? op.n : op.h;
      g.packed_b = fc2 ? op.w2_packed : op.w1_packed;
      gemm::reserve_single_thread_scratch(g, ctx.pool);
    }
    thread_local ScratchReservation<1> reservation;
    reservation.ensure(ctx.pool, {rb * op.h}, [](const std::array<int64_t, 1>& n) {
      block_hidden().resize(static_cast<size_t>(n[0]));
    });
    auto task = [&](int64_t b0, int64_t b1_) {
      std::vector<float>& h = block_hidden();
      h.resize(static_cast<size_t>(rb * op.h));
      for (int64_t b = b0; b < b1_; ++b) {
        const int64_t r0 = b * rb;
        if (r0 < rows) block(op, r0, std::min(rows, r0 + rb) - r0, h.data(), yd, nullptr);
      }
    };
    if (ctx.pool && blocks > 1)
      ctx.pool->parallel_for(blocks, 1, task);
    else
      task(0, blocks);
    return Status::ok();
  }

 private:
  static const Tensor* optional_input(const KernelContext& ctx, size_t i) {
    return ctx.has_input(i) && ctx.input(i).defined() ? &ctx.input(i) : nullptr;
  }

  // Rows [r0, r0 + m) of Y, with `h` (m x H) for the intermediate: fc1 with B1 and the
  // activation in its write-out, then fc2 with B2 and R in its.
  void block(const Operands& op, int64_t r0, int64_t m, float* h, float* y,
             ThreadPool* pool) const {
    product(m, op.k, op.h, op.x + r0 * op.k, op.w1, op.w1_packed, op.b1, &act_, h, pool);
    gemm::Epilogue residual;
    residual.residual = op.r ? op.r + r0 * op.n : nullptr;
    residual.ld_residual = op.n;
    product(m, op.h, op.n, h, op.w2, op.w2_packed, op.b2, op.r ? &residual : nullptr,
            y + r0 * op.n, pool);
  }

  gemm::Epilogue act_;
  gemm::PackedMatrix w1_, w2_;
  std::vector<float> hidden_;  // the one-block path's intermediate, kept across runs
};

Result<std::unique_ptr<Kernel>> create(const ir::Node& node, int64_t) {
  auto act = kiln_ops::read_activation(node, "activation", "activation_params");
  if (!act) return Status::error(node.describe() + ": " + act.status().message());
  return std::unique_ptr<Kernel>(std::make_unique<FusedMlp>(*act));
}

const KernelRegistrar kFusedMlp("ai.kiln", "FusedMLP", "ref", create);

}  // namespace
}  // namespace kiln
