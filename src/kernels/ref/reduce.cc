// Reference kernels for the Reduce* family (Sum, Mean, Max, Min, Prod, L1, L2, LogSum,
// LogSumExp, SumSquare): axes from the attribute (older opsets) or the input (newer ones); a
// vectorizable float32 path for Sum, Mean, Max, Min and SumSquare over consecutive axes.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>

#include "core/thread_pool.h"
#include "kernels/fast_path.h"
#include "kernels/kernel_util.h"
#include "kernels/ref/reduce_rows.h"

namespace kiln {
namespace {

enum class Op { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare };

// The opset from which `axes` is an input rather than an attribute.
int64_t axes_input_since(Op op) { return op == Op::kSum ? 13 : 18; }

// Offsets for a reduction: out[o] combines in[kept[o] + reduced[r]] over all r.
struct ReducePlan {
  Shape out_shape;
  std::vector<int64_t> kept;
  std::vector<int64_t> reduced;
  bool empty_input = false;
};

// All offsets spanned by `dims` (each with its input stride), row-major.
std::vector<int64_t> offsets_over(const std::vector<int64_t>& dims,
                                  const std::vector<int64_t>& strides) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<int64_t> out(static_cast<size_t>(n));
  std::vector<int64_t> idx(dims.size(), 0);
  int64_t cur = 0;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = cur;
    for (size_t d = dims.size(); d-- > 0;) {
      if (++idx[d] < dims[d]) {
        cur += strides[d];
        break;
      }
      cur -= strides[d] * (dims[d] - 1);
      idx[d] = 0;
    }
  }
  return out;
}

// With `offsets` false only the output shape and empty_input: the float32 run path needs no
// offset lists.
Result<ReducePlan> make_plan(const Shape& in_shape, const std::vector<bool>& is_reduced,
                             bool keepdims, bool offsets) {
  ReducePlan p;
  const Shape strides = strides_of(in_shape);
  std::vector<int64_t> kd, ks, rd, rs;
  for (size_t i = 0; i < in_shape.size(); ++i) {
    if (is_reduced[i]) {
      rd.push_back(in_shape[i]);
      rs.push_back(strides[i]);
      if (keepdims) p.out_shape.push_back(1);
    } else {
      kd.push_back(in_shape[i]);
      ks.push_back(strides[i]);
      p.out_shape.push_back(in_shape[i]);
    }
  }
  // An empty input needs no offsets: every output is the reduction of nothing. Listing them could
  // take far more memory than the (empty) input, since the dims' products may be huge.
  int64_t numel = 1;
  for (int64_t d : in_shape) numel *= d;
  p.empty_input = numel == 0;
  if (p.empty_input || !offsets) return p;
  p.kept = offsets_over(kd, ks);
  p.reduced = offsets_over(rd, rs);
  return p;
}

// Combines the values v(0..n-1) as `op` does, in double (floats, and the transcendental ops).
template <typename Get>
double reduce_double(Op op, int64_t n, Get v) {
  switch (op) {
    case Op::kSum:
    case Op::kMean: {
      double s = 0;
      for (int64_t r = 0; r < n; ++r) s += v(r);
      return op == Op::kMean ? s / static_cast<double>(n) : s;
    }
    case Op::kMax: {
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t r = 0; r < n; ++r) {
        double x = v(r);
        if (std::isnan(x)) return x;
        m = std::max(m, x);
      }
      return m;
    }
    case Op::kMin: {
      double m = std::numeric_limits<double>::infinity();
      for (int64_t r = 0; r < n; ++r) {
        double x = v(r);
        if (std::isnan(x)) return x;
        m = std::min(m, x);
      }
      return m;
    }
    case Op::kProd: {
      double p = 1;
      for (int64_t r = 0; r < n; ++r) p *= v(r);
      return p;
    }
    case Op::kL1: {
      double s = 0;
      for (int64_t r = 0; r < n; ++r) s += std::fabs(v(r));
      return s;
    }
    case Op::kL2:
    case Op::kSumSquare: {
      double s = 0;
      for (int64_t r = 0; r < n; ++r) s += v(r) * v(r);
      return op == Op::kL2 ? std::sqrt(s) : s;
    }
    case Op::kLogSum: {
      double s = 0;
      for (int64_t r = 0; r < n; ++r) s += v(r);
      return std::log(s);
    }
    case Op::kLogSumExp: {
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t r = 0; r < n; ++r) m = std::max(m, v(r));
      if (std::isinf(m)) {
        double s = 0;
        for (int64_t r = 0; r < n; ++r) s += std::exp(v(r));
        return std::log(s);
      }
      double s = 0;
      for (int64_t r = 0; r < n; ++r) s += std::exp(v(r) - m);
      return m + std::log(s);
    }
  }
  return 0;
}

// Exact integer reductions (wrapping like fixed-width arithmetic); others go through double.
template <typename T>
T reduce_integer(Op op, int64_t n, const T* x, const int64_t* offs) {
  using U = uint64_t;
  using Wide = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
  switch (op) {
    case Op::kSum:
    case Op::kL1:
    case Op::kSumSquare:
    case Op::kProd: {
      U acc = op == Op::kProd ? 1 : 0;
      for (int64_t r = 0; r < n; ++r) {
        const T v = x[offs[r]];
        U u = static_cast<U>(static_cast<Wide>(v));
        if (op == Op::kL1 && v < T{0}) u = U{0} - u;
        if (op == Op::kProd) {
          acc *= u;
        } else if (op == Op::kSumSquare) {
          acc += u * u;
        } else {
          acc += u;
        }
      }
      return static_cast<T>(acc);
    }
    case Op::kMax: {
      T m = std::numeric_limits<T>::lowest();
      for (int64_t r = 0; r < n; ++r) m = std::max(m, x[offs[r]]);
      return m;
    }
    case Op::kMin: {
      T m = std::numeric_limits<T>::max();
      for (int64_t r = 0; r < n; ++r) m = std::min(m, x[offs[r]]);
      return m;
    }
    default: {
      double d = reduce_double(op, n, [&](int64_t r) { return static_cast<double>(x[offs[r]]); });
      if (std::isnan(d)) return 0;
      d = std::trunc(d);
      if (d <= static_cast<double>(std::numeric_limits<T>::lowest()))
        return std::numeric_limits<T>::lowest();
      if (d >= static_cast<double>(std::numeric_limits<T>::max()))
        return std::numeric_limits<T>::max();
      return static_cast<T>(d);
    }
  }
}

// The float32 path: Sum, Mean, Max, Min and SumSquare over one run of consecutive axes.
std::optional<RowReduce> fast_f32_op(Op op) {
  switch (op) {
    case Op::kSum: return RowReduce::kSum;
    case Op::kMean: return RowReduce::kMean;
    case Op::kMax: return RowReduce::kMax;
    case Op::kMin: return RowReduce::kMin;
    case Op::kSumSquare: return RowReduce::kSumSquare;
    default: return std::nullopt;
  }
}

// [outer, red, inner] when the reduced axes are one consecutive run (or none is reduced).
std::optional<std::array<int64_t, 3>> as_run(const Shape& shape, const std::vector<bool>& is_reduced) {
  int64_t first = -1, last = -1;
  for (size_t i = 0; i < shape.size(); ++i)
    if (is_reduced[i]) {
      if (first < 0) first = static_cast<int64_t>(i);
      else if (last != static_cast<int64_t>(i) - 1) return std::nullopt;
      last = static_cast<int64_t>(i);
    }
  if (first < 0) return std::nullopt;
  std::array<int64_t, 3> d{1, 1, 1};
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) d[i < first ? 0 : i <= last ? 1 : 2] *= shape[i];
  return d;
}

// Runs fn(o) for every output element, in parallel when the work is large.
template <typename F>
void for_outputs(KernelContext& ctx, int64_t n_out, int64_t n_red, F fn) {
  if (ctx.pool && n_out > 1 && n_out * n_red > (int64_t{1} << 16)) {
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(1, n_red));
    ctx.pool->parallel_for(n_out, grain, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) fn(o);
    });
  } else {
    for (int64_t o = 0; o < n_out; ++o) fn(o);
  }
}

// Fills the output with the reduction of an empty set (0 for sums, 1 for products, -inf/+inf or the
// type's lowest/highest for max/min, NaN for the mean, -inf for the log reductions).
Status reduce_empty(KernelContext& ctx, Op op, DType dt, const Shape& out_shape) {
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, dt, out_shape));
  if (y->numel() == 0) return Status::ok();
  if (dt == DType::kBool) {
    if (op != Op::kMax && op != Op::kMin)
      return ctx.error("bool input is only supported by ReduceMax and ReduceMin");
    std::fill(y->data<bool>(), y->data<bool>() + y->numel(), op == Op::kMin);
    return Status::ok();
  }
  if (dtype_is_float(dt)) {
    const double v = reduce_double(op, 0, [](int64_t) { return 0.0; });
    for (int64_t i = 0; i < y->numel(); ++i) store_from_double(dt, y->raw_data(), i, v);
    return Status::ok();
  }
  Status st = visit_numeric(dt, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T v = reduce_integer<T>(op, 0, nullptr, nullptr);
    std::fill(y->data<T>(), y->data<T>() + y->numel(), v);
    return Status::ok();
  });
  if (!st.is_ok()) return ctx.error(st.message());
  return Status::ok();
}

Status reduce(KernelContext& ctx, Op op) {
  if (ctx.num_inputs() < 1 || !ctx.has_input(0)) return ctx.error("expected input 'data'");
  if (!ctx.value(0).is_tensor()) return ctx.error("input 'data' must be a tensor");
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();

  std::vector<int64_t> axes;
  if (ctx.opset >= axes_input_since(op)) {
    if (ctx.has_input(1)) {
      const Tensor& a = ctx.input(1);
      if (a.rank() > 1)
        return ctx.error("input 'axes' must be 1-D, got shape " + shape_str(a.shape()));
      auto r = read_int64s(a);
      if (!r.is_ok()) return ctx.error("input 'axes': " + r.status().message());
      axes = *r;
    }
  } else if (ctx.node.has_attr("axes")) {
    axes = ctx.node.attr_ints("axes");
  }
  const bool keepdims = ctx.node.attr_int("keepdims", 1) != 0;
  const bool noop = ctx.node.attr_int("noop_with_empty_axes", 0) != 0;

  if (axes.empty() && noop && ctx.opset >= axes_input_since(op)) {
    ctx.set_output(0, x);
    return Status::ok();
  }

  std::vector<bool> is_reduced(static_cast<size_t>(rank), axes.empty());
  for (int64_t a : axes) {
    auto n = normalize_axis(a, rank);
    if (!n.is_ok()) return ctx.error("axes: " + n.status().message());
    if (is_reduced[*n]) return ctx.error("axes: axis " + std::to_string(a) + " is repeated");
    is_reduced[*n] = true;
  }
  const DType dt = x.dtype();
  const std::optional<RowReduce> row_op = dt == DType::kFloat32 ? fast_f32_op(op) : std::nullopt;
  const std::optional<std::array<int64_t, 3>> run = row_op ? as_run(x.shape(), is_reduced) : std::nullopt;
  auto plan_or = make_plan(x.shape(), is_reduced, keepdims, !run);
  if (!plan_or.is_ok()) return ctx.error(plan_or.status().message());
  const ReducePlan& plan = *plan_or;
  const int64_t n_red = static_cast<int64_t>(plan.reduced.size());
  const int64_t n_out = static_cast<int64_t>(plan.kept.size());

  if (plan.empty_input) return reduce_empty(ctx, op, x.dtype(), plan.out_shape);
  if (run) {
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, dt, plan.out_shape));
    reduce_rows_f32(*row_op, x.data<float>(), y->data<float>(), (*run)[0], (*run)[1], (*run)[2], ctx.pool);
    return Status::ok();
  }

  if (dt == DType::kBool) {
    if (op != Op::kMax && op != Op::kMin)
      return ctx.error("bool input is only supported by ReduceMax and ReduceMin");
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, dt, plan.out_shape));
    const bool* xs = x.data<bool>();
    bool* ys = y->data<bool>();
    for (int64_t o = 0; o < n_out; ++o) {
      bool acc = op == Op::kMin;  // all() for min, any() for max
      for (int64_t r = 0; r < n_red; ++r) {
        bool v = xs[plan.kept[o] + plan.reduced[r]];
        acc = op == Op::kMin ? (acc && v) : (acc || v);
      }
      ys[o] = acc;
    }
    return Status::ok();
  }

  if (dt == DType::kFloat32 || dt == DType::kFloat64 || dt == DType::kFloat16 ||
      dt == DType::kBFloat16) {
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, dt, plan.out_shape));
    const void* xs = x.raw_data();
    void* ys = y->raw_data();
    for_outputs(ctx, n_out, n_red, [&](int64_t o) {
      const int64_t base = plan.kept[o];
      double v = reduce_double(
          op, n_red, [&](int64_t r) { return load_as_double(dt, xs, base + plan.reduced[r]); });
      store_from_double(dt, ys, o, v);
    });
    return Status::ok();
  }

  Status st = visit_numeric(dt, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, dt, plan.out_shape));
    const T* xs = x.data<T>();
    T* ys = y->data<T>();
    for_outputs(ctx, n_out, n_red, [&](int64_t o) {
      ys[o] = reduce_integer<T>(op, n_red, xs + plan.kept[o], plan.reduced.data());
    });
    return Status::ok();
  });
  if (!st.is_ok()) return ctx.error(st.message());
  return Status::ok();
}

Status reduce_sum(KernelContext& ctx) { return reduce(ctx, Op::kSum); }
Status reduce_mean(KernelContext& ctx) { return reduce(ctx, Op::kMean); }
Status reduce_max(KernelContext& ctx) { return reduce(ctx, Op::kMax); }
Status reduce_min(KernelContext& ctx) { return reduce(ctx, Op::kMin); }
Status reduce_prod(KernelContext& ctx) { return reduce(ctx, Op::kProd); }
Status reduce_l1(KernelContext& ctx) { return reduce(ctx, Op::kL1); }
Status reduce_l2(KernelContext& ctx) { return reduce(ctx, Op::kL2); }
Status reduce_log_sum(KernelContext& ctx) { return reduce(ctx, Op::kLogSum); }
Status reduce_log_sum_exp(KernelContext& ctx) { return reduce(ctx, Op::kLogSumExp); }
Status reduce_sum_square(KernelContext& ctx) { return reduce(ctx, Op::kSumSquare); }

}  // namespace

namespace {

// One op, known at compile time, so that each loop vectorizes (a blend for Max/Min).
template <RowReduce kOp>
void reduce_rows(const float* x, float* y, int64_t outer, int64_t red, int64_t inner, ThreadPool* pool) {
  constexpr bool kMax = kOp == RowReduce::kMax, kMin = kOp == RowReduce::kMin;
  constexpr float kInit = kMax ? -INFINITY : kMin ? INFINITY : 0.0f;
  auto combine = [](float a, float v) {
    if constexpr (kMax) return v > a || v != v ? v : a;  // NaN wins
    else if constexpr (kMin) return v < a || v != v ? v : a;
    else if constexpr (kOp == RowReduce::kSumSquare) return a + v * v;
    else return a + v;
  };
  const float scale = kOp == RowReduce::kMean ? 1.0f / static_cast<float>(red) : 1.0f;
  auto rows = [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      if (inner == 1) {
        const float* r = x + o * red;
        float acc[8] = {kInit, kInit, kInit, kInit, kInit, kInit, kInit, kInit};
        int nan[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // Max/Min: NaN seen, kept apart so the compare stays a maxps
        int64_t i = 0;
        for (; i + 8 <= red; i += 8)
          for (int k = 0; k < 8; ++k) {
            const float v = r[i + k];
            if constexpr (kMax) acc[k] = v > acc[k] ? v : acc[k];
            else if constexpr (kMin) acc[k] = v < acc[k] ? v : acc[k];
            else acc[k] = combine(acc[k], v);
            if constexpr (kMax || kMin) nan[k] |= v != v;
          }
        float a = kInit;
        bool any_nan = false;
        for (int k = 0; k < 8; ++k) {
          a = kMax || kMin ? combine(a, acc[k]) : a + acc[k];
          any_nan |= nan[k] != 0;
        }
        if (any_nan) a = NAN;
        for (; i < red; ++i) a = combine(a, r[i]);
        y[o] = a * scale;
        continue;
      }
      float* out = y + o * inner;
      std::fill(out, out + inner, kInit);
      for (int64_t r = 0; r < red; ++r) {
        const float* row = x + (o * red + r) * inner;
        for (int64_t i = 0; i < inner; ++i) out[i] = combine(out[i], row[i]);
      }
      if (scale != 1.0f)
        for (int64_t i = 0; i < inner; ++i) out[i] *= scale;
    }
  };
  if (pool && outer > 1 && outer * red * inner > (int64_t{1} << 15)) pool->parallel_for(outer, 1, rows);
  else rows(0, outer);
}

}  // namespace

void reduce_rows_f32(RowReduce op, const float* x, float* y, int64_t outer, int64_t red, int64_t inner,
                     ThreadPool* pool) {
  switch (op) {
    case RowReduce::kSum: return reduce_rows<RowReduce::kSum>(x, y, outer, red, inner, pool);
    case RowReduce::kMean: return reduce_rows<RowReduce::kMean>(x, y, outer, red, inner, pool);
    case RowReduce::kMax: return reduce_rows<RowReduce::kMax>(x, y, outer, red, inner, pool);
    case RowReduce::kMin: return reduce_rows<RowReduce::kMin>(x, y, outer, red, inner, pool);
    case RowReduce::kSumSquare: return reduce_rows<RowReduce::kSumSquare>(x, y, outer, red, inner, pool);
  }
}

KILN_REGISTER_KERNEL("", "ReduceSum", reduce_sum);
KILN_REGISTER_KERNEL("", "ReduceMean", reduce_mean);
KILN_REGISTER_KERNEL("", "ReduceMax", reduce_max);
KILN_REGISTER_KERNEL("", "ReduceMin", reduce_min);
KILN_REGISTER_KERNEL("", "ReduceProd", reduce_prod);
KILN_REGISTER_KERNEL("", "ReduceL1", reduce_l1);
KILN_REGISTER_KERNEL("", "ReduceL2", reduce_l2);
KILN_REGISTER_KERNEL("", "ReduceLogSum", reduce_log_sum);
KILN_REGISTER_KERNEL("", "ReduceLogSumExp", reduce_log_sum_exp);
KILN_REGISTER_KERNEL("", "ReduceSumSquare", reduce_sum_square);

namespace {
// float32 over consecutive axes known at compile time (attribute or constant input).
bool consecutive_axes(const FastPathQuery& q, Op op) {
  const int64_t rank = q.rank(0);
  if (!q.input_is(0, DType::kFloat32) || rank < 0) return false;
  std::vector<int64_t> axes;
  if (q.opset >= axes_input_since(op)) {
    if (q.node.has_input(1)) {
      const Tensor* a = q.constants.size() > 1 ? q.constants[1] : nullptr;
      auto r = a ? read_int64s(*a) : Result<std::vector<int64_t>>(Status::error("not constant"));
      if (!r.is_ok()) return false;
      axes = *r;
    }
  } else {
    axes = q.node.attr_ints("axes");
  }
  for (int64_t& a : axes) {
    if (a < -rank || a >= rank) return false;
    if (a < 0) a += rank;
  }
  std::sort(axes.begin(), axes.end());
  for (size_t i = 1; i < axes.size(); ++i)
    if (axes[i] != axes[i - 1] + 1) return false;
  return true;
}
}  // namespace

KILN_REGISTER_FAST_PATH("", "ReduceSum", [](const FastPathQuery& q) { return consecutive_axes(q, Op::kSum); });
KILN_REGISTER_FAST_PATH("", "ReduceMean", [](const FastPathQuery& q) { return consecutive_axes(q, Op::kMean); });
KILN_REGISTER_FAST_PATH("", "ReduceMax", [](const FastPathQuery& q) { return consecutive_axes(q, Op::kMax); });
KILN_REGISTER_FAST_PATH("", "ReduceMin", [](const FastPathQuery& q) { return consecutive_axes(q, Op::kMin); });
KILN_REGISTER_FAST_PATH("", "ReduceSumSquare", [](const FastPathQuery& q) { return consecutive_axes(q, Op::kSumSquare); });

}  // namespace kiln
