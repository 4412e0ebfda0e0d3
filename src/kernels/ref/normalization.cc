// Reference normalization kernels: BatchNormalization (inference and training, old opsets'
// spatial attribute), InstanceNormalization, LayerNormalization, GroupNormalization, LRN and
// MeanVarianceNormalization. Statistics are accumulated in double.
#include <cmath>

#include "kernels/fast_path.h"
#include "kernels/kernel_util.h"
#include "kernels/kiln/normalize_row.h"

namespace kiln {
namespace {

// Float32 copy of half types, the tensor itself for float32/float64.
Result<Tensor> compute_copy(const Tensor& t) {
  if (t.dtype() == DType::kFloat64) return t;
  return to_float32(t);
}

// Calls f with T = double for float64 tensors, float otherwise.
template <typename F>
Status with_compute_type(DType t, F&& f) {
  if (t == DType::kFloat64) return f(TypeTag<double>{});
  return f(TypeTag<float>{});
}

const Tensor* opt(const KernelContext& ctx, size_t i) {
  return ctx.has_input(i) && ctx.input(i).defined() ? &ctx.input(i) : nullptr;
}

Status check_inputs(const KernelContext& ctx, size_t n, const char* op) {
  if (ctx.num_inputs() < n)
    return ctx.error(std::string(op) + " needs " + std::to_string(n) + " inputs");
  for (size_t i = 0; i < n; ++i)
    if (!opt(ctx, i))
      return ctx.error(std::string(op) + " input " + std::to_string(i) + " is missing");
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (opt(ctx, i) && !dtype_is_compute_float(ctx.input(i).dtype()))
      return ctx.error(std::string(op) + " input " + std::to_string(i) +
                       " must be a float tensor, got " + dtype_name(ctx.input(i).dtype()));
  return Status::ok();
}

// Sets output i from a compute-type tensor, converting to `dt`.
Status emit(KernelContext& ctx, size_t i, const Tensor& t, DType dt) {
  if (!ctx.wants_output(i)) return Status::ok();
  KILN_ASSIGN_OR_RETURN(Tensor out, cast_float_to(t, dt));
  ctx.set_output(i, std::move(out));
  return Status::ok();
}

Status batch_norm(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(check_inputs(ctx, 5, "BatchNormalization"));
  const Tensor& x = ctx.input(0);
  if (x.rank() < 2)
    return ctx.error("BatchNormalization needs X of rank >= 2, got " + shape_str(x.shape()));
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  const double momentum = ctx.node.attr_float("momentum", 0.9f);
  const bool spatial = ctx.opset >= 9 || ctx.node.attr_int("spatial", 1) != 0;
  const bool training = ctx.opset >= 14 ? ctx.node.attr_int("training_mode", 0) != 0
                                        : (ctx.opset >= 7 && ctx.wants_output(1));
  const int64_t n = x.dim(0), c = x.dim(1);
  const int64_t inner = c == 0 || n == 0 ? 0 : x.numel() / (n * c);
  // Per-channel statistics, or (spatial == 0) one per element of a sample.
  const int64_t stats = spatial ? c : c * inner;
  for (size_t i = 1; i < 5; ++i)
    if (ctx.input(i).numel() != stats)
      return ctx.error("BatchNormalization input " + std::to_string(i) + " has " +
                       std::to_string(ctx.input(i).numel()) + " values, expected " +
                       std::to_string(stats));
  const int64_t per_stat = spatial ? inner : 1;  // contiguous run sharing one statistic
  return with_compute_type(x.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    std::vector<Tensor> in(5);
    for (size_t i = 0; i < 5; ++i) {
      KILN_ASSIGN_OR_RETURN(in[i], compute_copy(ctx.input(i)));
    }
    const T* xd = in[0].data<T>();
    const T* sc = in[1].data<T>();
    const T* bi = in[2].data<T>();
    std::vector<double> mean(stats), var(stats);
    for (int64_t s = 0; s < stats; ++s) {
      mean[s] = in[3].data<T>()[s];
      var[s] = in[4].data<T>()[s];
    }
    const DType ct = in[0].dtype();
    Tensor run_mean, run_var;
    if (training) {
      std::vector<double> sum(stats, 0.0), sq(stats, 0.0);
      for (int64_t ni = 0; ni < n; ++ni)
        for (int64_t ci = 0; ci < c; ++ci)
          for (int64_t i = 0; i < inner; ++i) {
            const int64_t s = spatial ? ci : ci * inner + i;
            const double v = xd[(ni * c + ci) * inner + i];
            sum[s] += v;
          }
      const double count = static_cast<double>(n * per_stat);
      for (int64_t s = 0; s < stats; ++s) sum[s] /= count;
      for (int64_t ni = 0; ni < n; ++ni)
        for (int64_t ci = 0; ci < c; ++ci)
          for (int64_t i = 0; i < inner; ++i) {
            const int64_t s = spatial ? ci : ci * inner + i;
            const double d = xd[(ni * c + ci) * inner + i] - sum[s];
            sq[s] += d * d;
          }
      KILN_ASSIGN_OR_RETURN(run_mean, Tensor::make(ct, ctx.input(3).shape()));
      KILN_ASSIGN_OR_RETURN(run_var, Tensor::make(ct, ctx.input(4).shape()));
      for (int64_t s = 0; s < stats; ++s) {
        sq[s] /= count;
        run_mean.data<T>()[s] = static_cast<T>(mean[s] * momentum + sum[s] * (1 - momentum));
        run_var.data<T>()[s] = static_cast<T>(var[s] * momentum + sq[s] * (1 - momentum));
        mean[s] = sum[s];
        var[s] = sq[s];
      }
    }
    KILN_ASSIGN_OR_RETURN(Tensor y, Tensor::make(ct, x.shape()));
    T* yd = y.data<T>();
    std::vector<double> mul(stats), add(stats);
    for (int64_t s = 0; s < stats; ++s) {
      mul[s] = sc[s] / std::sqrt(var[s] + eps);
      add[s] = bi[s] - mean[s] * mul[s];
    }
    for (int64_t ni = 0; ni < n; ++ni)
      for (int64_t ci = 0; ci < c; ++ci) {
        const int64_t base = (ni * c + ci) * inner;
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t s = spatial ? ci : ci * inner + i;
          yd[base + i] = static_cast<T>(xd[base + i] * mul[s] + add[s]);
        }
      }
    KILN_RETURN_IF_ERROR(emit(ctx, 0, y, x.dtype()));
    if (training) {
      KILN_RETURN_IF_ERROR(emit(ctx, 1, run_mean, ctx.input(3).dtype()));
      KILN_RETURN_IF_ERROR(emit(ctx, 2, run_var, ctx.input(4).dtype()));
      if (ctx.opset < 14) {  // opset 7-13 also output the batch's saved mean and variance
        KILN_ASSIGN_OR_RETURN(Tensor sm, Tensor::make(ct, ctx.input(3).shape()));
        KILN_ASSIGN_OR_RETURN(Tensor sv, Tensor::make(ct, ctx.input(4).shape()));
        for (int64_t s = 0; s < stats; ++s) {
          sm.data<T>()[s] = static_cast<T>(mean[s]);
          sv.data<T>()[s] = static_cast<T>(var[s]);
        }
        KILN_RETURN_IF_ERROR(emit(ctx, 3, sm, ctx.input(3).dtype()));
        KILN_RETURN_IF_ERROR(emit(ctx, 4, sv, ctx.input(4).dtype()));
      }
    }
    return Status::ok();
  });
}

// Normalises each of `groups` contiguous runs of `len` values of x in place into y, then applies
// y = y * scale[ch] + bias[ch] where ch = (run index % channels_per) per `ch_len` values.
template <typename T>
void normalize_runs(const T* x, T* y, int64_t groups, int64_t len, double eps, double* means,
                    double* inv_std) {
  for (int64_t g = 0; g < groups; ++g) {
    const T* xr = x + g * len;
    double sum = 0;
    for (int64_t i = 0; i < len; ++i) sum += xr[i];
    const double mean = len ? sum / len : 0.0;
    double sq = 0;
    for (int64_t i = 0; i < len; ++i) sq += (xr[i] - mean) * (xr[i] - mean);
    const double inv = 1.0 / std::sqrt((len ? sq / len : 0.0) + eps);
    for (int64_t i = 0; i < len; ++i) y[g * len + i] = static_cast<T>((xr[i] - mean) * inv);
    if (means) means[g] = mean;
    if (inv_std) inv_std[g] = inv;
  }
}

Status instance_norm(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(check_inputs(ctx, 3, "InstanceNormalization"));
  const Tensor& x = ctx.input(0);
  if (x.rank() < 3)
    return ctx.error("InstanceNormalization needs X of rank >= 3, got " + shape_str(x.shape()));
  const int64_t n = x.dim(0), c = x.dim(1), inner = c * n == 0 ? 0 : x.numel() / (n * c);
  if (ctx.input(1).numel() != c || ctx.input(2).numel() != c)
    return ctx.error("InstanceNormalization scale and B need " + std::to_string(c) + " values");
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  return with_compute_type(x.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    KILN_ASSIGN_OR_RETURN(Tensor xc, compute_copy(x));
    KILN_ASSIGN_OR_RETURN(Tensor sc, compute_copy(ctx.input(1)));
    KILN_ASSIGN_OR_RETURN(Tensor bc, compute_copy(ctx.input(2)));
    KILN_ASSIGN_OR_RETURN(Tensor y, Tensor::make(xc.dtype(), x.shape()));
    normalize_runs<T>(xc.data<T>(), y.data<T>(), n * c, inner, eps, nullptr, nullptr);
    for (int64_t g = 0; g < n * c; ++g)
      for (int64_t i = 0; i < inner; ++i) {
        T& v = y.data<T>()[g * inner + i];
        v = static_cast<T>(v * sc.data<T>()[g % c] + bc.data<T>()[g % c]);
      }
    return emit(ctx, 0, y, x.dtype());
  });
}

Status layer_norm(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(check_inputs(ctx, 2, "LayerNormalization"));
  const Tensor& x = ctx.input(0);
  if (x.dtype() == DType::kFloat32 && !ctx.wants_output(1) && !ctx.wants_output(2)) return layer_norm_y(ctx);
  KILN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.node.attr_int("axis", -1), x.rank()));
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  const Shape norm_shape(x.shape().begin() + axis, x.shape().end());
  int64_t len = 1;
  for (int64_t d : norm_shape) len *= d;
  const int64_t outer = len == 0 ? 0 : x.numel() / len;
  std::vector<int64_t> off[2];
  const Tensor* sb[2] = {&ctx.input(1), opt(ctx, 2)};
  for (int i = 0; i < 2; ++i) {
    if (!sb[i]) continue;
    auto bs = broadcast_shapes(sb[i]->shape(), norm_shape);
    if (!bs || *bs != norm_shape)
      return ctx.error("LayerNormalization " + std::string(i ? "B" : "Scale") + " of shape " +
                       shape_str(sb[i]->shape()) + " does not broadcast to " +
                       shape_str(norm_shape));
    off[i] = broadcast_offsets(sb[i]->shape(), norm_shape);
  }
  Shape stat_shape(x.shape().begin(), x.shape().begin() + axis);
  stat_shape.resize(x.rank(), 1);
  const DType stash = ctx.node.attr_int("stash_type", 1) == 11 ? DType::kFloat64 : DType::kFloat32;
  return with_compute_type(x.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    KILN_ASSIGN_OR_RETURN(Tensor xc, compute_copy(x));
    KILN_ASSIGN_OR_RETURN(Tensor sc, compute_copy(*sb[0]));
    Tensor bc;
    if (sb[1]) {
      KILN_ASSIGN_OR_RETURN(bc, compute_copy(*sb[1]));
    }
    KILN_ASSIGN_OR_RETURN(Tensor y, Tensor::make(xc.dtype(), x.shape()));
    KILN_ASSIGN_OR_RETURN(Tensor mean, Tensor::make(DType::kFloat64, stat_shape));
    KILN_ASSIGN_OR_RETURN(Tensor inv, Tensor::make(DType::kFloat64, stat_shape));
    normalize_runs<T>(xc.data<T>(), y.data<T>(), outer, len, eps, mean.data<double>(),
                      inv.data<double>());
    for (int64_t g = 0; g < outer; ++g)
      for (int64_t i = 0; i < len; ++i) {
        T& v = y.data<T>()[g * len + i];
        v = static_cast<T>(v * sc.data<T>()[off[0][i]] + (sb[1] ? bc.data<T>()[off[1][i]] : T(0)));
      }
    KILN_RETURN_IF_ERROR(emit(ctx, 0, y, x.dtype()));
    KILN_RETURN_IF_ERROR(emit(ctx, 1, mean, stash));
    return emit(ctx, 2, inv, stash);
  });
}

Status group_norm(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(check_inputs(ctx, 3, "GroupNormalization"));
  const Tensor& x = ctx.input(0);
  if (x.rank() < 2) return ctx.error("GroupNormalization needs X of rank >= 2");
  const int64_t groups = ctx.node.attr_int("num_groups", 0);
  const int64_t n = x.dim(0), c = x.dim(1);
  if (groups <= 0 || c % groups != 0)
    return ctx.error("num_groups " + std::to_string(groups) +
                     " must be positive and divide channels " + std::to_string(c));
  const int64_t cs = ctx.input(1).numel();
  // Opset 18 took one scale/bias per group; opset 21 takes one per channel.
  const bool per_group = cs != c;
  if ((per_group && (cs != groups || ctx.opset >= 21)) || ctx.input(2).numel() != cs)
    return ctx.error("GroupNormalization scale and bias need " + std::to_string(c) + " values");
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  const int64_t inner = n * c == 0 ? 0 : x.numel() / (n * c);
  const int64_t cpg = c / groups;
  return with_compute_type(x.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    KILN_ASSIGN_OR_RETURN(Tensor xc, compute_copy(x));
    KILN_ASSIGN_OR_RETURN(Tensor sc, compute_copy(ctx.input(1)));
    KILN_ASSIGN_OR_RETURN(Tensor bc, compute_copy(ctx.input(2)));
    KILN_ASSIGN_OR_RETURN(Tensor y, Tensor::make(xc.dtype(), x.shape()));
    normalize_runs<T>(xc.data<T>(), y.data<T>(), n * groups, cpg * inner, eps, nullptr, nullptr);
    for (int64_t ni = 0; ni < n; ++ni)
      for (int64_t ci = 0; ci < c; ++ci) {
        const int64_t k = per_group ? ci / cpg : ci;
        T* row = y.data<T>() + (ni * c + ci) * inner;
        for (int64_t i = 0; i < inner; ++i)
          row[i] = static_cast<T>(row[i] * sc.data<T>()[k] + bc.data<T>()[k]);
      }
    return emit(ctx, 0, y, x.dtype());
  });
}

Status lrn(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(check_inputs(ctx, 1, "LRN"));
  const Tensor& x = ctx.input(0);
  if (x.rank() < 2) return ctx.error("LRN needs X of rank >= 2");
  const int64_t size = ctx.node.attr_int("size", 0);
  if (size <= 0) return ctx.error("LRN size must be positive");
  const double alpha = ctx.node.attr_float("alpha", 1e-4f),
               beta = ctx.node.attr_float("beta", 0.75f), bias = ctx.node.attr_float("bias", 1.0f);
  const int64_t n = x.dim(0), c = x.dim(1), inner = n * c == 0 ? 0 : x.numel() / (n * c);
  const int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  return with_compute_type(x.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    KILN_ASSIGN_OR_RETURN(Tensor xc, compute_copy(x));
    KILN_ASSIGN_OR_RETURN(Tensor y, Tensor::make(xc.dtype(), x.shape()));
    const T* xd = xc.data<T>();
    std::vector<double> sq(inner);
    for (int64_t ni = 0; ni < n; ++ni)
      for (int64_t ci = 0; ci < c; ++ci) {
        std::fill(sq.begin(), sq.end(), 0.0);
        for (int64_t cj = std::max<int64_t>(0, ci - lo); cj <= std::min(c - 1, ci + hi); ++cj) {
          const T* row = xd + (ni * c + cj) * inner;
          for (int64_t i = 0; i < inner; ++i) sq[i] += static_cast<double>(row[i]) * row[i];
        }
        const int64_t base = (ni * c + ci) * inner;
        for (int64_t i = 0; i < inner; ++i)
          y.data<T>()[base + i] =
              static_cast<T>(xd[base + i] / std::pow(bias + alpha / size * sq[i], beta));
      }
    return emit(ctx, 0, y, x.dtype());
  });
}

Status mvn(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(check_inputs(ctx, 1, "MeanVarianceNormalization"));
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> axes =
      ctx.node.has_attr("axes") ? ctx.node.attr_ints("axes") : std::vector<int64_t>{0, 2, 3};
  Shape stat_shape = x.shape();
  for (int64_t& a : axes) {
    KILN_ASSIGN_OR_RETURN(a, normalize_axis(a, x.rank()));
    stat_shape[a] = 1;
  }
  KILN_ASSIGN_OR_RETURN(int64_t stats, shape_numel(stat_shape));
  const std::vector<int64_t> off = broadcast_offsets(stat_shape, x.shape());
  return with_compute_type(x.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    KILN_ASSIGN_OR_RETURN(Tensor xc, compute_copy(x));
    const T* xd = xc.data<T>();
    std::vector<double> sum(stats, 0.0), sq(stats, 0.0), cnt(stats, 0.0);
    for (int64_t i = 0; i < x.numel(); ++i) {
      sum[off[i]] += xd[i];
      sq[off[i]] += static_cast<double>(xd[i]) * xd[i];
      cnt[off[i]] += 1;
    }
    KILN_ASSIGN_OR_RETURN(Tensor y, Tensor::make(xc.dtype(), x.shape()));
    for (int64_t s = 0; s < stats; ++s) {
      sum[s] /= cnt[s];
      sq[s] = std::sqrt(std::max(0.0, sq[s] / cnt[s] - sum[s] * sum[s])) + 1e-9;
    }
    for (int64_t i = 0; i < x.numel(); ++i)
      y.data<T>()[i] = static_cast<T>((xd[i] - sum[off[i]]) / sq[off[i]]);
    return emit(ctx, 0, y, x.dtype());
  });
}

}  // namespace

KILN_REGISTER_KERNEL("", "BatchNormalization", batch_norm);
KILN_REGISTER_KERNEL("", "InstanceNormalization", instance_norm);
KILN_REGISTER_KERNEL("", "LayerNormalization", layer_norm);
KILN_REGISTER_KERNEL("", "GroupNormalization", group_norm);
KILN_REGISTER_KERNEL("", "LRN", lrn);
KILN_REGISTER_KERNEL("", "MeanVarianceNormalization", mvn);

KILN_REGISTER_FAST_PATH("", "LayerNormalization", [](const FastPathQuery& q) {
  return q.input_is(0, DType::kFloat32) && !q.wants_output(1) && !q.wants_output(2);
});

}  // namespace kiln
