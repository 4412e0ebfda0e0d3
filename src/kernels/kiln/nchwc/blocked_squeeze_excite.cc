// Kernel of ai.kiln.BlockedSqueezeExcite: ai.kiln.SqueezeExcite (channel means, two small dense
// layers, X scaled per channel) on a blocked X, so EfficientNet's blocks stay in one region.
// The weights keep SqueezeExcite's plain layout in the graph; prepare() packs them once so that
// both dense layers run eight outputs per FMA with no horizontal sums. Three passes over the
// pool: the means (X read once), the first dense layer (its weights, up to 1152 x 48, come from
// memory and cost more than its FMAs), then Y = X * gates with each channel block's gates
// computed where its rows start (X read again, mostly from cache; Y written once).
// Semantics: docs/ops.md.
#include <immintrin.h>

#include <algorithm>

#include "kernels/kernel_util.h"
#include "kernels/kiln/epilogue_activation.h"
#include "kernels/kiln/nchwc/activation_avx2.h"
#include "kernels/kiln/nchwc/blocked_layout.h"

namespace kiln::nchwc {
namespace {

bool is_pointwise_weight(const Tensor& w, int64_t rows, int64_t cols) {
  return w.dtype() == DType::kFloat32 && w.rank() == 4 && w.dim(0) == rows && w.dim(1) == cols &&
         w.dim(2) == 1 && w.dim(3) == 1;
}

Status check_bias(const Tensor* b, size_t i, int64_t n) {
  if (b && (b->dtype() != DType::kFloat32 || b->numel() != n))
    return Status::error("input " + std::to_string(i) + " must be float32 with " +
                         std::to_string(n) + " values, got " + shape_str(b->shape()));
  return Status::ok();
}

// The dense layers, packed so that eight outputs are one register and each block of eight
// outputs reads one contiguous run of weights: w1 [Rb][C][8] (W1 transposed), w2 [Cb][R][8]
// (W2 transposed); biases [Rb * 8] and [Cb * 8]; padding zero.
struct PackedLayers {
  int64_t r = 0, c = 0, rb = 0, cb = 0;
  std::vector<float> w1, b1, w2, b2;

  static PackedLayers pack(const Tensor& w1, const Tensor* b1, const Tensor& w2, const Tensor* b2) {
    PackedLayers p;
    p.r = w1.dim(0);
    p.c = w1.dim(1);
    p.rb = blocks_of(p.r);
    p.cb = blocks_of(p.c);
    p.w1.assign(p.rb * p.c * kBlock, 0.0f);
    p.w2.assign(p.cb * p.r * kBlock, 0.0f);
    p.b1.assign(p.rb * kBlock, 0.0f);
    p.b2.assign(p.cb * kBlock, 0.0f);
    const float* a = w1.data<float>();
    const float* b = w2.data<float>();
    for (int64_t ri = 0; ri < p.r; ++ri)
      for (int64_t ci = 0; ci < p.c; ++ci) {
        p.w1[((ri / kBlock) * p.c + ci) * kBlock + ri % kBlock] = a[ri * p.c + ci];
        p.w2[((ci / kBlock) * p.r + ri) * kBlock + ci % kBlock] = b[ci * p.r + ri];
      }
    if (b1) std::copy_n(b1->data<float>(), p.r, p.b1.begin());
    if (b2) std::copy_n(b2->data<float>(), p.c, p.b2.begin());
    return p;
  }
};

// act(bias + sum_i in[i] * w[i]) for one block of eight outputs, w [inputs][8]; four partial sums
// so that the FMAs do not wait on each other.
__m256 dense_block(const float* in, int64_t inputs, const float* w, const float* bias,
                   const kiln_ops::Activation& act) {
  __m256 acc[4] = {_mm256_loadu_ps(bias), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 4 <= inputs; i += 4)
    for (int k = 0; k < 4; ++k)
      acc[k] = _mm256_fmadd_ps(_mm256_broadcast_ss(in + i + k),
                               _mm256_loadu_ps(w + (i + k) * kBlock), acc[k]);
  for (; i < inputs; ++i)
    acc[0] = _mm256_fmadd_ps(_mm256_broadcast_ss(in + i), _mm256_loadu_ps(w + i * kBlock), acc[0]);
  __m256 v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
  apply_activation(act, &v, 1);
  return v;
}

class BlockedSqueezeExcite : public Kernel {
 public:
  BlockedSqueezeExcite(const ir::Node& node, kiln_ops::Activation act, kiln_ops::Activation gate)
      : act_(act), gate_(gate) {
    bias_given_[0] = node.inputs.size() > 2 && !node.inputs[2].empty();
    bias_given_[1] = node.inputs.size() > 4 && !node.inputs[4].empty();
  }

  Status prepare(const std::vector<const Tensor*>& constants,
                 std::vector<bool>& absorbed) override {
    auto at = [&](size_t i) { return i < constants.size() ? constants[i] : nullptr; };
    const Tensor *w1 = at(1), *b1 = at(2), *w2 = at(3), *b2 = at(4);
    // Packed only when every given weight is fixed; anything odd is left for run() to report.
    if (!w1 || !w2 || (bias_given_[0] && !b1) || (bias_given_[1] && !b2)) return Status::ok();
    if (w1->rank() != 4 || !is_pointwise_weight(*w1, w1->dim(0), w1->dim(1)) ||
        !is_pointwise_weight(*w2, w1->dim(1), w1->dim(0)) || !check_bias(b1, 2, w1->dim(0)) ||
        !check_bias(b2, 4, w1->dim(1)))
      return Status::ok();
    packed_ = PackedLayers::pack(*w1, b1, *w2, b2);
    prepared_ = true;
    for (size_t i : {1, 2, 3, 4})
      if (at(i)) absorbed[i] = true;
    return Status::ok();
  }

  Status run(KernelContext& ctx) override {
    if (ctx.num_inputs() < 4 || !ctx.has_input(0) || !ctx.has_input(1) || !ctx.has_input(3))
      return ctx.error("BlockedSqueezeExcite needs X, W1 and W2");
    auto d = blocked_dims(ctx.input(0), "X");
    if (!d) return ctx.error(d.status().message());
    const Tensor& w1 = ctx.input(1);
    const Tensor& w2 = ctx.input(3);
    const int64_t r = w1.rank() > 0 ? w1.dim(0) : 0, c = w1.rank() > 1 ? w1.dim(1) : 0;
    if (!is_pointwise_weight(w1, r, c) || !is_pointwise_weight(w2, c, r) || blocks_of(c) != d->cb)
      return ctx.error("W1 must be [R, C, 1, 1] and W2 [C, R, 1, 1] float32 with C filling X's " +
                       std::to_string(d->cb) + " channel blocks, got " + shape_str(w1.shape()) +
                       " and " + shape_str(w2.shape()));
    const Tensor* b1 = ctx.has_input(2) && ctx.input(2).defined() ? &ctx.input(2) : nullptr;
    const Tensor* b2 = ctx.has_input(4) && ctx.input(4).defined() ? &ctx.input(4) : nullptr;
    Status st = check_bias(b1, 2, r);
    if (st.is_ok()) st = check_bias(b2, 4, c);
    if (!st.is_ok()) return ctx.error(st.message());
    PackedLayers local;
    if (!prepared_) local = PackedLayers::pack(w1, b1, w2, b2);
    const PackedLayers& p = prepared_ ? packed_ : local;
    KILN_ASSIGN_OR_RETURN(Tensor * y,
                          ctx.make_output_for_overwrite(0, DType::kFloat32, ctx.input(0).shape()));
    squeeze_excite(*d, p, ctx.input(0).data<float>(), y->data<float>(), ctx.pool);
    return Status::ok();
  }

 private:
  void squeeze_excite(const BlockedDims& d, const PackedLayers& p, const float* x, float* y,
                      ThreadPool* pool);

  kiln_ops::Activation act_, gate_;
  bool bias_given_[2] = {false, false};  // B1, B2 named by the node
  bool prepared_ = false;
  PackedLayers packed_;
  // Per-run scratch, kept so that runs after the first allocate nothing (a session runs one
  // request at a time): band sums, channel means, hidden units.
  std::vector<float> partial_, mean_, hidden_;
};

void BlockedSqueezeExcite::squeeze_excite(const BlockedDims& d, const PackedLayers& p,
                                          const float* x, float* y, ThreadPool* pool) {
  const int64_t hw = d.h * d.w, planes = d.n * d.cb;
  // Means: each plane summed in `splits` row bands, so that a few wide planes still spread over
  // the pool; the band sums are added in order afterwards.
  const int64_t threads = pool ? pool->threads() : 1;
  const int64_t splits = std::clamp<int64_t>((4 * threads + planes - 1) / planes, 1, d.h);
  partial_.resize(static_cast<size_t>(planes * splits * kBlock));  // every value is written
  float* const partial = partial_.data();
  parallel_range(pool, planes * splits, planes * d.plane(), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t plane = t / splits, s = t % splits;
      const int64_t p0 = d.h * s / splits * d.w, p1 = d.h * (s + 1) / splits * d.w;
      const float* xp = x + plane * d.plane();
      __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                       _mm256_setzero_ps()};
      int64_t i = p0;
      for (; i + 4 <= p1; i += 4)
        for (int k = 0; k < 4; ++k)
          acc[k] = _mm256_add_ps(acc[k], _mm256_loadu_ps(xp + (i + k) * kBlock));
      for (; i < p1; ++i) acc[0] = _mm256_add_ps(acc[0], _mm256_loadu_ps(xp + i * kBlock));
      _mm256_storeu_ps(partial + t * kBlock,
                       _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    }
  });
  mean_.resize(static_cast<size_t>(d.n * p.cb * kBlock));
  float* const mean = mean_.data();
  const __m256 inv_hw = _mm256_set1_ps(1.0f / static_cast<float>(hw));
  for (int64_t plane = 0; plane < planes; ++plane) {
    __m256 s = _mm256_setzero_ps();
    for (int64_t k = 0; k < splits; ++k)
      s = _mm256_add_ps(s, _mm256_loadu_ps(partial + (plane * splits + k) * kBlock));
    _mm256_storeu_ps(mean + plane * kBlock, _mm256_mul_ps(s, inv_hw));
  }
  // The first dense layer, by (image, block of 8 hidden units). Its weights are mostly read from
  // memory (each SE's are used once per run), which is what takes the time at large C * R.
  hidden_.resize(static_cast<size_t>(d.n * p.rb * kBlock));
  float* const hidden = hidden_.data();
  parallel_range(pool, d.n * p.rb, d.n * p.rb * p.c * kBlock, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n = t / p.rb, b = t % p.rb;
      _mm256_storeu_ps(hidden + t * kBlock,
                       dense_block(mean + n * p.cb * kBlock, p.c,
                                   p.w1.data() + b * p.c * kBlock, p.b1.data() + b * kBlock, act_));
    }
  });
  // Y = X * scale by rows of (image, block), each block's gates computed where its rows start
  // (the second dense layer, one block of outputs at a time); padding lanes stay zero.
  const int64_t rows = planes * d.h, row = d.w * kBlock, rem = p.c % kBlock;
  const __m256 tail_keep = _mm256_castsi256_ps(
      _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(rem ? rem : kBlock)),
                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
  parallel_range(pool, rows, rows * row + planes * p.r * kBlock, [&](int64_t r0, int64_t r1) {
    for (int64_t rr = r0; rr < r1;) {
      const int64_t plane = rr / d.h, n = plane / d.cb, b = plane % d.cb;
      __m256 sv = dense_block(hidden + n * p.rb * kBlock, p.r,
                              p.w2.data() + b * p.r * kBlock, p.b2.data() + b * kBlock, gate_);
      if (b + 1 == d.cb) sv = _mm256_and_ps(sv, tail_keep);
      for (const int64_t end = std::min(r1, (plane + 1) * d.h); rr < end; ++rr) {
        const float* xr = x + rr * row;
        float* yr = y + rr * row;
        for (int64_t i = 0; i < row; i += kBlock)
          _mm256_storeu_ps(yr + i, _mm256_mul_ps(_mm256_loadu_ps(xr + i), sv));
      }
    }
  });
}

Result<std::unique_ptr<Kernel>> create(const ir::Node& node, int64_t) {
  auto act = kiln_ops::read_activation(node, "activation", "activation_params");
  if (!act) return Status::error(node.describe() + ": " + act.status().message());
  auto gate = kiln_ops::read_activation(node, "gate", "gate_params");
  if (!gate) return Status::error(node.describe() + ": " + gate.status().message());
  return std::unique_ptr<Kernel>(std::make_unique<BlockedSqueezeExcite>(node, *act, *gate));
}

const KernelRegistrar kRegistrar("ai.kiln", "BlockedSqueezeExcite", "blocked", create);

}  // namespace
}  // namespace kiln::nchwc
