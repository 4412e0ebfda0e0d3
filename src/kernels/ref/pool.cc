// Reference pooling: AveragePool, MaxPool (with Indices), LpPool over 1-3 spatial dims with
// pads/auto_pad/dilations/ceil_mode; GlobalAveragePool, GlobalMaxPool, GlobalLpPool; MaxUnpool.
#include <cmath>
#include <cstring>
#include <limits>

#include "core/thread_pool.h"
#include "kernels/fast_path.h"
#include "kernels/kernel_util.h"
#include "kernels/ref/conv_util.h"
#include "kernels/ref/reduce_rows.h"

namespace kiln {
namespace {

using conv_util::Geo3;
using conv_util::Geometry;

enum class Mode { kMax, kAvg, kLp };

struct PoolArgs {
  Geo3 g;
  int64_t dims = 0;
  Mode mode = Mode::kMax;
  bool count_pad = false;
  bool col_major = false;  // MaxPool storage_order 1: Indices in column-major spatial order
  double p = 2.0;
};

template <typename T>
void pool_planes(const T* x, T* y, int64_t* indices, int64_t plane0, int64_t plane1,
                 const PoolArgs& a) {
  const Geo3& g = a.g;
  const int64_t in_sz = g.in[0] * g.in[1] * g.in[2], out_sz = g.out[0] * g.out[1] * g.out[2];
  // Column-major spatial strides for storage_order 1 (of the real dims, innermost first).
  int64_t cm[3] = {0, 0, 0};
  {
    int64_t acc = 1;
    for (int i = 3 - static_cast<int>(a.dims); i < 3; ++i) {
      cm[i] = acc;
      acc *= g.in[i];
    }
  }
  for (int64_t pl = plane0; pl < plane1; ++pl) {
    const T* xp = x + pl * in_sz;
    T* yp = y + pl * out_sz;
    int64_t o = 0;
    for (int64_t od = 0; od < g.out[0]; ++od)
      for (int64_t oh = 0; oh < g.out[1]; ++oh)
        for (int64_t ow = 0; ow < g.out[2]; ++ow, ++o) {
          const int64_t s0 = od * g.s[0] - g.pb[0], s1 = oh * g.s[1] - g.pb[1],
                        s2 = ow * g.s[2] - g.pb[2];
          double acc = 0.0;
          int64_t real = 0, padded = 1;
          T best = std::numeric_limits<T>::lowest();
          int64_t best_idx = -1;
          for (int64_t k0 = 0; k0 < g.k[0]; ++k0) {
            const int64_t i0 = s0 + k0 * g.d[0];
            if (i0 < 0 || i0 >= g.in[0]) continue;
            for (int64_t k1 = 0; k1 < g.k[1]; ++k1) {
              const int64_t i1 = s1 + k1 * g.d[1];
              if (i1 < 0 || i1 >= g.in[1]) continue;
              for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
                const int64_t i2 = s2 + k2 * g.d[2];
                if (i2 < 0 || i2 >= g.in[2]) continue;
                const T v = xp[(i0 * g.in[1] + i1) * g.in[2] + i2];
                ++real;
                if (a.mode == Mode::kMax) {
                  // NaN never wins a comparison, so a NaN input is skipped like numpy's nan-aware
                  // max.
                  if (best_idx < 0 || v > best) {
                    best = v;
                    best_idx = a.col_major ? i0 * cm[0] + i1 * cm[1] + i2 * cm[2]
                                           : (i0 * g.in[1] + i1) * g.in[2] + i2;
                  }
                } else if (a.mode == Mode::kAvg) {
                  acc += static_cast<double>(v);
                } else {
                  acc += std::pow(std::fabs(static_cast<double>(v)), a.p);
                }
              }
            }
          }
          if (a.mode == Mode::kMax) {
            yp[o] = best;
            if (indices != nullptr)
              indices[pl * out_sz + o] = pl * in_sz + std::max<int64_t>(best_idx, 0);
          } else if (a.mode == Mode::kAvg) {
            // count_include_pad divides by the whole window, ceil_mode overhang included, as the
            // ONNX test data (opset 19+) does.
            if (a.count_pad) padded = g.k[0] * g.k[1] * g.k[2];
            const double div = static_cast<double>(a.count_pad ? padded : real);
            yp[o] = static_cast<T>(acc / div);
          } else {
            yp[o] = static_cast<T>(std::pow(acc, 1.0 / a.p));
          }
        }
  }
}

template <typename T>
void run_pool(KernelContext& ctx, const T* x, T* y, int64_t* indices, int64_t planes,
              const PoolArgs& a) {
  const int64_t work =
      planes * a.g.out[0] * a.g.out[1] * a.g.out[2] * a.g.k[0] * a.g.k[1] * a.g.k[2];
  if (ctx.pool != nullptr && planes > 1 && work > (1 << 16))
    ctx.pool->parallel_for(
        planes, 1, [&](int64_t p0, int64_t p1) { pool_planes<T>(x, y, indices, p0, p1, a); });
  else
    pool_planes<T>(x, y, indices, 0, planes, a);
}

Status pool_common(KernelContext& ctx, Mode mode, bool global) {
  if (ctx.num_inputs() < 1 || !ctx.has_input(0)) return ctx.error("pooling needs input X");
  const Tensor& x = ctx.input(0);
  const DType dt = x.dtype();
  const bool int8 = dt == DType::kInt8 || dt == DType::kUInt8;
  if (!dtype_is_float(dt) && !(mode == Mode::kMax && int8))
    return ctx.error(std::string("pooling does not support ") + dtype_name(dt));
  if (x.rank() < 3 || x.rank() > 5) {
    if (!(global && x.rank() >= 2))
      return ctx.error("pooling needs X of rank 3 to 5, got " + shape_str(x.shape()));
  }
  if (x.rank() > 5) return ctx.error("pooling supports at most 3 spatial dims");
  const Shape in(x.shape().begin() + 2, x.shape().end());
  PoolArgs a;
  a.mode = mode;
  a.dims = static_cast<int64_t>(in.size());
  Geometry geo;
  if (global) {
    geo.dims = a.dims;
    geo.in = geo.kernel = geo.out = in;
    for (int64_t& o : geo.out) o = 1;
    geo.strides.assign(a.dims, 1);
    geo.dilations.assign(a.dims, 1);
    geo.pads.assign(2 * a.dims, 0);
    if (mode == Mode::kLp) a.p = static_cast<double>(ctx.node.attr_float("p", 2.0f));
  } else {
    if (!ctx.node.has_attr("kernel_shape")) return ctx.error("kernel_shape attribute is required");
    auto gr = conv_util::read_geometry(ctx.node, in, {});
    if (!gr) return ctx.error(gr.status().message());
    geo = *gr;
    const bool ceil_mode = ctx.node.attr_int("ceil_mode", 0) != 0;
    Status st =
        conv_util::compute_output(geo, ctx.node.attr_string("auto_pad", "NOTSET"), ceil_mode);
    if (!st) return ctx.error(st.message());
    a.count_pad = ctx.node.attr_int("count_include_pad", 0) != 0;
    a.col_major = ctx.node.attr_int("storage_order", 0) != 0;
    if (mode == Mode::kLp) {
      const ir::Attribute* pa = ctx.node.attr("p");
      // opset 1 declared p as a float; later opsets as an int.
      a.p = pa == nullptr
                ? 2.0
                : (pa->type == ir::Attribute::Type::kFloat ? pa->f : static_cast<double>(pa->i));
    }
  }
  if (mode == Mode::kLp && !(a.p > 0)) return ctx.error("LpPool p must be positive");
  a.g = conv_util::to_geo3(geo);
  Shape y_shape{x.dim(0), x.dim(1)};
  y_shape.insert(y_shape.end(), geo.out.begin(), geo.out.end());
  const int64_t planes = x.dim(0) * x.dim(1);
  int64_t* indices = nullptr;
  if (mode == Mode::kMax && ctx.wants_output(1)) {
    KILN_ASSIGN_OR_RETURN(Tensor * it, ctx.make_output(1, DType::kInt64, y_shape));
    indices = it->data<int64_t>();
  }
  if (dt == DType::kFloat64) {
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, dt, y_shape));
    run_pool<double>(ctx, x.data<double>(), y->data<double>(), indices, planes, a);
  } else if (dt == DType::kInt8) {
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, dt, y_shape));
    run_pool<int8_t>(ctx, x.data<int8_t>(), y->data<int8_t>(), indices, planes, a);
  } else if (dt == DType::kUInt8) {
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, dt, y_shape));
    run_pool<uint8_t>(ctx, x.data<uint8_t>(), y->data<uint8_t>(), indices, planes, a);
  } else {
    KILN_ASSIGN_OR_RETURN(Tensor xf, to_float32(x));
    KILN_ASSIGN_OR_RETURN(Tensor yf, Tensor::make(DType::kFloat32, y_shape));
    run_pool<float>(ctx, xf.data<float>(), yf.data<float>(), indices, planes, a);
    KILN_ASSIGN_OR_RETURN(Tensor y, cast_float_to(yf, dt));
    ctx.set_output(0, std::move(y));
  }
  return Status::ok();
}

Status average_pool(KernelContext& ctx) { return pool_common(ctx, Mode::kAvg, false); }
Status max_pool(KernelContext& ctx) { return pool_common(ctx, Mode::kMax, false); }
Status lp_pool(KernelContext& ctx) { return pool_common(ctx, Mode::kLp, false); }
// float32 global average and max pools as row reductions over each plane (kernels/ref/reduce_rows.h).
Status global_pool_f32(KernelContext& ctx, Mode mode) {
  const Tensor& x = ctx.input(0);
  Shape out = {x.dim(0), x.dim(1)};
  int64_t plane = 1;
  for (int64_t d = 2; d < x.rank(); ++d) {
    plane *= x.dim(d);
    out.push_back(1);
  }
  if (plane == 0) return pool_common(ctx, mode, true);  // empty planes: the reference's answer
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, out));
  reduce_rows_f32(mode == Mode::kMax ? RowReduce::kMax : RowReduce::kMean, x.data<float>(), y->data<float>(),
                  x.dim(0) * x.dim(1), plane, 1, ctx.pool);
  return Status::ok();
}

bool float32_global(const KernelContext& ctx) {
  return ctx.num_inputs() >= 1 && ctx.has_input(0) && ctx.input(0).dtype() == DType::kFloat32 &&
         ctx.input(0).rank() >= 3 && ctx.input(0).rank() <= 5;
}

Status global_average_pool(KernelContext& ctx) {
  return float32_global(ctx) ? global_pool_f32(ctx, Mode::kAvg) : pool_common(ctx, Mode::kAvg, true);
}
Status global_max_pool(KernelContext& ctx) {
  return float32_global(ctx) ? global_pool_f32(ctx, Mode::kMax) : pool_common(ctx, Mode::kMax, true);
}
Status global_lp_pool(KernelContext& ctx) { return pool_common(ctx, Mode::kLp, true); }

Status max_unpool(KernelContext& ctx) {
  if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1))
    return ctx.error("MaxUnpool needs X and I");
  const Tensor& x = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  if (ind.dtype() != DType::kInt64 || ind.shape() != x.shape())
    return ctx.error("MaxUnpool I must be int64 with X's shape " + shape_str(x.shape()) + ", got " +
                     shape_str(ind.shape()));
  if (x.rank() < 3) return ctx.error("MaxUnpool needs X of rank >= 3");
  const Shape in(x.shape().begin() + 2, x.shape().end());
  if (!ctx.node.has_attr("kernel_shape")) return ctx.error("kernel_shape attribute is required");
  auto gr = conv_util::read_geometry(ctx.node, in, {});
  if (!gr) return ctx.error(gr.status().message());
  const Geometry& g = *gr;
  // Indices address the natural (inferred) output; an explicit larger output_shape holds it in
  // its leading corner.
  Shape natural{x.dim(0), x.dim(1)};
  for (int64_t i = 0; i < g.dims; ++i) {
    natural.push_back((in[i] - 1) * g.strides[i] - g.pads[i] - g.pads[i + g.dims] + g.kernel[i]);
    if (natural.back() < 0) return ctx.error("MaxUnpool output size is negative");
  }
  Shape out = natural;
  if (ctx.has_input(2) && ctx.input(2).defined()) {
    auto os = read_int64s(ctx.input(2));
    if (!os) return ctx.error(os.status().message());
    out = *os;
    if (out.size() != natural.size())
      return ctx.error("output_shape must have rank " + std::to_string(natural.size()));
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i] < natural[i])
        return ctx.error("output_shape " + shape_str(out) + " is smaller than " +
                         shape_str(natural));
  }
  KILN_ASSIGN_OR_RETURN(int64_t nat_n, shape_numel(natural));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x.dtype(), out));
  const Shape nat_strides = strides_of(natural), out_strides = strides_of(out);
  const int64_t esz = static_cast<int64_t>(dtype_size(x.dtype()));
  if (esz == 0) return ctx.error("MaxUnpool: unsupported type");
  const int64_t* id = ind.data<int64_t>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t flat = id[i];
    if (flat < 0 || flat >= nat_n)
      return ctx.error("MaxUnpool index " + std::to_string(flat) + " out of range");
    int64_t dst = 0;
    for (size_t d = 0; d < natural.size(); ++d) {
      dst += (flat / nat_strides[d]) * out_strides[d];
      flat %= nat_strides[d];
    }
    std::memcpy(static_cast<char*>(y->raw_data()) + dst * esz,
                static_cast<const char*>(x.raw_data()) + i * esz, esz);
  }
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("", "AveragePool", average_pool);
KILN_REGISTER_KERNEL("", "MaxPool", max_pool);
KILN_REGISTER_KERNEL("", "LpPool", lp_pool);
KILN_REGISTER_KERNEL("", "GlobalAveragePool", global_average_pool);
KILN_REGISTER_KERNEL("", "GlobalMaxPool", global_max_pool);
KILN_REGISTER_KERNEL("", "GlobalLpPool", global_lp_pool);
KILN_REGISTER_FAST_PATH("", "GlobalAveragePool", float32_input);
KILN_REGISTER_FAST_PATH("", "GlobalMaxPool", float32_input);
KILN_REGISTER_KERNEL("", "MaxUnpool", max_unpool);

}  // namespace kiln
