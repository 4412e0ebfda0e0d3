// Kernel of ai.kiln.FusedElementwise (and ConcatElementwise, whose X0 it reads from the parts of
// a Concat): a chain of elementwise steps run over the output in blocks held in a stack buffer,
// one tight (vectorizable) loop per step, so the inputs are read once and the output written
// once. Each step computes exactly what kiln's kernel of its op computes (Relu, Sigmoid, Tanh,
// Exp and Erf on 8 lanes, as those kernels do for float32), so the result is bit-identical to
// running the ops one by one.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/thread_pool.h"
#include "kernels/cpu/vec_math_avx2.h"
#include "ir/schemas/kiln_elementwise.h"
#include "kernels/kernel_util.h"

namespace kiln {
namespace {

using ir::EltwiseOp;
using ir::EltwiseStep;

constexpr int64_t kBlock = 256;            // elements per block: 1 KiB, stays in L1 across steps
// Below this many element-steps (elements x steps), threads cost more than they save: a
// 4-step chain over 53K elements took 90 us on one thread (Zen 2).
constexpr int64_t kParallelMin = 1 << 16;
constexpr int64_t kGrainBlocks = 32;       // 8K elements per task at least

// How an input is read for a block of the output: one value, the same row-major layout as the
// output, or a numpy broadcast (dims of the output collapsed where the input's strides allow).
// A broadcast whose innermost dim repeats over the next one (a [C/8, 1, 1, 8] operand of a
// blocked [N, C/8, H, W, 8] value) reads as one periodic dim: `period` > 0, element i of that
// dim at data[i % period].
// kConcat (ConcatElementwise's X0, of the output's shape): the output in row-major order is, for
// each index of the dims before the Concat's axis, piece[0] elements of parts[0], then piece[1]
// of parts[1], ...
struct Operand {
  enum class Kind { kScalar, kFull, kBroadcast, kConcat } kind = Kind::kScalar;
  const float* data = nullptr;
  Shape dims, strides;  // kBroadcast: collapsed output dims, input strides (0: broadcast)
  int64_t period = 0;
  std::vector<const float*> parts;  // kConcat
  std::vector<int64_t> piece;       // kConcat: each part's elements per index before the axis
  int64_t row = 0;                  // kConcat: the sum of piece
};

Operand make_operand(const Tensor& t, const Shape& out, int64_t out_numel) {
  const float* p = t.data<float>();
  Operand o;
  o.data = p;
  o.kind = Operand::Kind::kScalar;
  if (t.numel() == 1) return o;
  // Shapes that broadcast with equal sizes differ only by 1-dims: the layouts are the same.
  o.kind = Operand::Kind::kFull;
  if (t.numel() == out_numel) return o;
  o.kind = Operand::Kind::kBroadcast;
  const Shape st = broadcast_strides(t.shape(), out);
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;
    // An outer dim merges into the inner one when stepping it equals stepping past the whole inner
    // dim: both broadcast (0 == 0), or both contiguous.
    if (!o.dims.empty() && o.strides.back() == st[d] * out[d]) {
      o.dims.back() *= out[d];
      o.strides.back() = st[d];
    } else {
      o.dims.push_back(out[d]);
      o.strides.push_back(st[d]);
    }
  }
  const size_t r = o.dims.size();
  if (r >= 2 && o.strides[r - 2] == 0 && o.strides[r - 1] == 1) {
    o.period = o.dims[r - 1];
    o.dims[r - 2] *= o.dims[r - 1];
    o.strides[r - 2] = 1;
    o.dims.pop_back();
    o.strides.pop_back();
  }
  return o;
}

// out[k] = src[(phase + k) % period] for k < n: the first partial period, then copies of what
// is already written, doubling. A period of whole 8-lane vectors from a vector's start (the
// per-channel operand of a blocked value: period 8) goes a vector at a time, with no memcpy
// calls (they were most of a 4-step BN-LeakyRelu chain's time).
void periodic_copy(const float* src, int64_t period, int64_t phase, int64_t n, float* out) {
  if (period % 8 == 0 && phase % 8 == 0) {
    int64_t k = 0;
    for (int64_t j = phase; k + 8 <= n; k += 8) {
      _mm256_storeu_ps(out + k, _mm256_loadu_ps(src + j));
      j += 8;
      if (j == period) j = 0;
    }
    for (; k < n; ++k) out[k] = src[(phase + k) % period];
    return;
  }
  const int64_t head = std::min(n, period - phase);
  std::memcpy(out, src + phase, static_cast<size_t>(head) * sizeof(float));
  int64_t k = head;
  if (k < n) {
    const int64_t m = std::min(n - k, period);
    std::memcpy(out + k, src, static_cast<size_t>(m) * sizeof(float));
    k += m;
  }
  while (k < n) {  // [head, k) is whole periods from a period's start
    const int64_t m = std::min(n - k, k - head);
    std::memcpy(out + k, out + head, static_cast<size_t>(m) * sizeof(float));
    k += m;
  }
}

// Writes elements [start, start + n) of `o` broadcast to the output into dst, a run of the
// innermost collapsed dim at a time (a fill, a copy, a periodic copy, or a strided read).
void gather(const Operand& o, int64_t start, int64_t n, float* dst) {
  if (o.kind == Operand::Kind::kConcat) {
    int64_t outer = start / o.row, w = start % o.row;
    size_t j = 0;
    while (w >= o.piece[j]) w -= o.piece[j++];
    for (int64_t done = 0; done < n;) {
      const int64_t run = std::min(o.piece[j] - w, n - done);
      std::memcpy(dst + done, o.parts[j] + outer * o.piece[j] + w, static_cast<size_t>(run) * sizeof(float));
      done += run;
      w += run;
      if (w < o.piece[j]) continue;
      w = 0;
      if (++j == o.parts.size()) j = 0, ++outer;
    }
    return;
  }
  if (o.kind == Operand::Kind::kScalar) {
    std::fill(dst, dst + n, o.data[0]);
    return;
  }
  if (o.kind == Operand::Kind::kFull) {
    std::memcpy(dst, o.data + start, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const size_t r = o.dims.size();
  Shape index(r, 0);  // inline up to rank 8: no allocation per block
  int64_t* idx = index.data();
  int64_t off = 0;  // of the outer dims' position; the innermost index is idx[r - 1]
  for (size_t d = r, rem = static_cast<size_t>(start); d-- > 0;) {
    idx[d] = static_cast<int64_t>(rem % static_cast<size_t>(o.dims[d]));
    rem /= static_cast<size_t>(o.dims[d]);
    if (d + 1 < r) off += idx[d] * o.strides[d];
  }
  const int64_t inner = o.dims[r - 1], st = o.strides[r - 1];
  for (int64_t done = 0; done < n;) {
    const int64_t i0 = idx[r - 1];
    const int64_t run = std::min(inner - i0, n - done);
    const float* src = o.data + off;
    if (o.period > 0) {
      periodic_copy(src, o.period, i0 % o.period, run, dst + done);
    } else if (st == 0) {
      std::fill(dst + done, dst + done + run, *src);
    } else if (st == 1) {
      std::memcpy(dst + done, src + i0, static_cast<size_t>(run) * sizeof(float));
    } else {
      for (int64_t k = 0; k < run; ++k) dst[done + k] = src[(i0 + k) * st];
    }
    done += run;
    idx[r - 1] += run;
    if (idx[r - 1] < inner) continue;
    idx[r - 1] = 0;
    for (size_t d = r - 1; d-- > 0;) {  // odometer over the outer dims
      off += o.strides[d];
      if (++idx[d] < o.dims[d]) break;
      off -= o.dims[d] * o.strides[d];
      idx[d] = 0;
    }
  }
}

// ---- the ops, as the reference kernels compute them (double where they use double) ----

double softplus_d(double x) {
  return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

// Max and Min propagate NaN (numpy.maximum); otherwise the later input wins only when strictly
// greater (smaller), which fixes the sign of a zero result as the variadic reference does.
float max_f(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) ? a : b;
  return b > a ? b : a;
}
float min_f(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) ? a : b;
  return b < a ? b : a;
}
// x^2 as one multiply, exactly as the reference rounds pow(x, 2) (binary.cc).
float pow_f(float a, float b) {
  if (b == 2.0f) return a * a;
  return static_cast<float>(std::pow(static_cast<double>(a), static_cast<double>(b)));
}

template <typename F>
void map1(float* __restrict v, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) v[i] = f(v[i]);
}

// v = f(v, o) elementwise, or f(o, v) when swapped; `o` is a block of the operand.
template <typename F>
void map2(float* __restrict v, const float* __restrict o, int64_t n, bool swapped, F f) {
  if (swapped) {
    for (int64_t i = 0; i < n; ++i) v[i] = f(o[i], v[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) v[i] = f(v[i], o[i]);
  }
}

template <typename F>
void map2_scalar(float* __restrict v, float s, int64_t n, bool swapped, F f) {
  if (swapped) {
    for (int64_t i = 0; i < n; ++i) v[i] = f(s, v[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) v[i] = f(v[i], s);
  }
}

// Calls apply(f) with the binary function of op.
template <typename A>
void with_binary(EltwiseOp op, A apply) {
  switch (op) {
    case EltwiseOp::kAdd:
      return apply([](float a, float b) { return a + b; });
    case EltwiseOp::kSub:
      return apply([](float a, float b) { return a - b; });
    case EltwiseOp::kMul:
      return apply([](float a, float b) { return a * b; });
    case EltwiseOp::kDiv:
      return apply([](float a, float b) { return a / b; });
    case EltwiseOp::kPow:
      return apply(pow_f);
    case EltwiseOp::kMax:
      return apply(max_f);
    case EltwiseOp::kMin:
      return apply(min_f);
    default:
      return;
  }
}

// A binary step; `o` is the operand's block (nullptr: the scalar `s`; the step reads the running
// value twice when its operand is -1).
void binary_step(const EltwiseStep& s, float* v, const float* o, float scalar, int64_t n) {
  with_binary(s.op, [&](auto f) {
    if (s.operand < 0) {
      map1(v, n, [f](float x) { return f(x, x); });
    } else if (o == nullptr) {
      map2_scalar(v, scalar, n, s.swapped, f);
    } else {
      map2(v, o, n, s.swapped, f);
    }
  });
}

// v = f(v) on 8 lanes, the tail masked: the same functions (vec_math_avx2.h) as the float32 map
// of the op's own kernel (elementwise_util.h's map_unary_f32_lanes), so fused and unfused agree.
template <typename F>
void map1_lanes(float* v, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(v + i, f(_mm256_loadu_ps(v + i)));
  if (i < n) {
    const __m256i m = vec::tail_mask_avx2(static_cast<int>(n - i));
    _mm256_maskstore_ps(v + i, m, f(_mm256_maskload_ps(v + i, m)));
  }
}

void unary_step(const EltwiseStep& s, float* v, int64_t n) {
  switch (s.op) {
    case EltwiseOp::kRelu:
      return map1_lanes(v, n, [](__m256 x) { return _mm256_max_ps(_mm256_setzero_ps(), x); });
    case EltwiseOp::kSigmoid:
      return map1_lanes(v, n, [](__m256 x) { return vec::sigmoid_avx2(x); });
    case EltwiseOp::kTanh:
      return map1_lanes(v, n, [](__m256 x) { return vec::tanh_avx2(x); });
    case EltwiseOp::kExp:
      return map1_lanes(v, n, [](__m256 x) { return vec::exp_avx2(x); });
    case EltwiseOp::kLog:
      return map1(v, n, [](float x) { return std::log(x); });
    case EltwiseOp::kSqrt:
      return map1(v, n, [](float x) { return std::sqrt(x); });
    case EltwiseOp::kNeg:
      return map1(v, n, [](float x) { return -x; });
    case EltwiseOp::kAbs:
      return map1(v, n, [](float x) { return std::fabs(x); });
    case EltwiseOp::kReciprocal:
      return map1(v, n, [](float x) { return 1.0f / x; });
    case EltwiseOp::kErf:
      return map1_lanes(v, n, [](__m256 x) { return vec::erf_avx2(x); });
    case EltwiseOp::kSoftplus:
      return map1(v, n, [](float x) { return static_cast<float>(softplus_d(x)); });
    case EltwiseOp::kClip: {
      // max then min, as the reference: NaN passes through, min > max gives max.
      const float lo = s.p0, hi = s.p1;
      return map1(v, n, [lo, hi](float x) { return std::min(std::max(x, lo), hi); });
    }
    case EltwiseOp::kLeakyRelu: {
      // As LeakyRelu's kernel: in float, which rounds the product as the double formula would.
      const __m256 alpha = _mm256_set1_ps(s.p0);
      return map1_lanes(v, n, [alpha](__m256 x) {
        const __m256 keep = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ);
        return _mm256_blendv_ps(_mm256_mul_ps(x, alpha), x, keep);
      });
    }
    case EltwiseOp::kHardSigmoid: {
      const double alpha = s.p0, beta = s.p1;
      return map1(v, n, [alpha, beta](float x) {
        return static_cast<float>(std::max(0.0, std::min(1.0, alpha * x + beta)));
      });
    }
    case EltwiseOp::kHardSwish:
      return map1(v, n, [](float x) {
        const double d = x;
        return static_cast<float>(d * std::max(0.0, std::min(1.0, d / 6.0 + 0.5)));
      });
    case EltwiseOp::kElu: {
      const double alpha = s.p0;
      return map1(v, n, [alpha](float x) {
        const double d = x;
        return static_cast<float>(d >= 0 ? d : alpha * std::expm1(d));
      });
    }
    default:
      return;
  }
}

struct Chain {
  std::vector<EltwiseStep> steps;
  std::vector<Operand> inputs;
};

// Output elements [start, start + n), n <= kBlock.
void run_block(const Chain& c, int64_t start, int64_t n, float* out) {
  alignas(64) float v[kBlock];
  alignas(64) float tmp[kBlock];
  gather(c.inputs[0], start, n, v);
  for (const EltwiseStep& s : c.steps) {
    if (!s.binary) {
      unary_step(s, v, n);
      continue;
    }
    const float* o = nullptr;
    float scalar = 0;
    if (s.operand >= 0) {
      const Operand& in = c.inputs[static_cast<size_t>(s.operand)];
      if (in.kind == Operand::Kind::kScalar) {
        scalar = in.data[0];
      } else if (in.kind == Operand::Kind::kFull) {
        o = in.data + start;
      } else {
        gather(in, start, n, tmp);
        o = tmp;
      }
    }
    binary_step(s, v, o, scalar, n);
  }
  std::memcpy(out + start, v, static_cast<size_t>(n) * sizeof(float));
}

// The chain is decoded from the node's attributes once, and its operand list reused, so that a
// run allocates nothing. `concat`: ai.kiln.ConcatElementwise, whose X0 is the Concat of its first
// x0_parts inputs.
class FusedElementwise : public Kernel {
 public:
  explicit FusedElementwise(bool concat) : concat_(concat) {}

  Status run(KernelContext& ctx) override {
    if (ctx.num_inputs() == 0) return ctx.error("FusedElementwise needs at least one input");
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      if (!ctx.has_input(i) || !ctx.value(i).is_tensor() || !ctx.input(i).defined())
        return ctx.error("input " + std::to_string(i) + " is missing or not a tensor");
      if (ctx.input(i).dtype() != DType::kFloat32)
        return ctx.error("input " + std::to_string(i) + " must be float32, got " +
                         dtype_name(ctx.input(i).dtype()));
    }
    ir::ConcatParts parts;
    Shape x0 = ctx.input(0).shape();
    if (concat_) {
      auto p = ir::decode_concat_parts(ctx.node, ctx.num_inputs(), static_cast<int64_t>(x0.size()));
      if (!p) return ctx.error(p.status().message());
      parts = *p;
      for (int64_t i = 1; i < parts.parts; ++i) {
        const Shape& t = ctx.input(static_cast<size_t>(i)).shape();
        if (t.size() != x0.size()) return ctx.error("the parts of X0 differ in rank");
        for (size_t d = 0; d < x0.size(); ++d)
          if (static_cast<int64_t>(d) != parts.axis && t[d] != x0[d])
            return ctx.error("the parts of X0 differ in dim " + std::to_string(d) + ": " +
                             shape_str(x0) + " and " + shape_str(t));
        x0[static_cast<size_t>(parts.axis)] += t[static_cast<size_t>(parts.axis)];
      }
    }
    // Chain input i is node input i + first - 1 (i >= 1).
    const size_t first = static_cast<size_t>(parts.parts), chain = parts.chain_inputs(ctx.num_inputs());
    Shape shape = x0;
    for (size_t i = first; i < ctx.num_inputs(); ++i) {
      auto b = broadcast_shapes(shape, ctx.input(i).shape());
      if (!b) return ctx.error(b.status().message());
      shape = std::move(b).value();
    }
    if (concat_ && shape != x0)
      return ctx.error("X0, the Concat of the first inputs, " + shape_str(x0) +
                       ", must have the output's shape " + shape_str(shape));
    if (decoded_inputs_ != chain) {
      auto steps = ir::decode_fused_elementwise(ctx.node, chain);
      if (!steps) return ctx.error(steps.status().message());
      chain_.steps = std::move(steps).value();
      decoded_inputs_ = chain;
    }
    // A block's operands are read before its result is stored (run_block): Y may take the storage
    // of a chain input of its shape (not a Concat part's: parts are read at other offsets).
    size_t over = ctx.num_inputs();
    for (size_t i = 0; i < ctx.num_inputs() && !concat_; ++i)
      if (ctx.input_donated(i, DType::kFloat32, shape)) {
        over = i;
        break;
      }
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_over_input(0, {over}, DType::kFloat32, shape));
    const int64_t total = y->numel();
    if (total == 0) return Status::ok();
    chain_.inputs.resize(chain);
    if (concat_) {
      Operand& o = chain_.inputs[0];
      o.kind = Operand::Kind::kConcat;
      o.parts.clear();
      o.piece.clear();
      int64_t inner = 1;  // elements per index of the axis
      for (size_t d = static_cast<size_t>(parts.axis) + 1; d < x0.size(); ++d) inner *= x0[d];
      for (size_t i = 0; i < first; ++i) {
        o.parts.push_back(ctx.input(i).data<float>());
        o.piece.push_back(ctx.input(i).shape()[static_cast<size_t>(parts.axis)] * inner);
      }
      o.row = x0[static_cast<size_t>(parts.axis)] * inner;
    } else {
      chain_.inputs[0] = make_operand(ctx.input(0), shape, total);
    }
    for (size_t i = 1; i < chain; ++i) chain_.inputs[i] = make_operand(ctx.input(i + first - 1), shape, total);
    const Chain& c = chain_;
    float* out = y->data<float>();
    const int64_t blocks = (total + kBlock - 1) / kBlock;
    auto body = [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t start = b * kBlock;
        run_block(c, start, std::min(kBlock, total - start), out);
      }
    };
    const int64_t work = total * static_cast<int64_t>(c.steps.size() + 1);
    if (ctx.pool != nullptr && work >= kParallelMin) {
      ctx.pool->parallel_for(blocks, kGrainBlocks, body);
    } else {
      body(0, blocks);
    }
    return Status::ok();
  }

 private:
  bool concat_;
  Chain chain_;
  size_t decoded_inputs_ = 0;  // 0: not decoded yet
};

template <bool kConcat>
Result<std::unique_ptr<Kernel>> create(const ir::Node&, int64_t) {
  return std::unique_ptr<Kernel>(std::make_unique<FusedElementwise>(kConcat));
}

const KernelRegistrar kRegistrar("ai.kiln", "FusedElementwise", "ref", create<false>);
const KernelRegistrar kConcatRegistrar("ai.kiln", "ConcatElementwise", "ref", create<true>);

}  // namespace

}  // namespace kiln
