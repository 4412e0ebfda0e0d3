// Reference Conv (1-3 spatial dims, groups, dilations, strides, pads, auto_pad) via im2col + the
// shared GEMM, and the integer variants ConvInteger and QLinearConv (int32 accumulation, by
// gemm_s16 on 16-bit values minus zero points). Float32 grouped convs with few channels a group
// (depthwise too) run kernels/cpu/conv's direct kernel; group-1 convs with fewer output
// positions than filters a transposed product against W^T packed once.
#include <cmath>
#include <type_traits>

#include "core/thread_pool.h"
#include "kernels/fast_path.h"
#include "kernels/cpu/conv/conv_gemm.h"
#include "kernels/cpu/conv/grouped_conv.h"
#include "kernels/cpu/gemm/gemm_s16.h"
#include "kernels/kernel_util.h"
#include "kernels/ref/conv.h"
#include "kernels/ref/conv_util.h"
#include "kernels/ref/gemm_f32.h"

namespace kiln {
namespace {

using conv_util::Geo3;
using conv_util::Geometry;

// Shapes and geometry of a Conv-like node, checked.
struct ConvSetup {
  int64_t n = 0, c = 0, m = 0, group = 1, cg = 0, mg = 0, ksz = 0, in_sz = 0, out_sz = 0;
  Geometry geo;
  Geo3 g3;
  Shape y_shape;
};

Result<ConvSetup> setup_conv(const KernelContext& ctx, const Shape& x, const Shape& w) {
  ConvSetup s;
  if (x.size() < 3 || x.size() > 5)
    return Status::error("X must have rank 3 to 5 (N, C, 1-3 spatial dims), got " + shape_str(x));
  if (w.size() != x.size())
    return Status::error("W rank differs from X rank: " + shape_str(w) + " vs " + shape_str(x));
  s.group = ctx.node.attr_int("group", 1);
  if (s.group <= 0) return Status::error("group must be positive");
  s.n = x[0];
  s.c = x[1];
  s.m = w[0];
  if (s.c != w[1] * s.group)
    return Status::error("X channels " + std::to_string(s.c) + " != W.shape[1] * group = " +
                         std::to_string(w[1]) + " * " + std::to_string(s.group));
  if (s.m % s.group != 0) return Status::error("output channels not divisible by group");
  s.cg = w[1];
  s.mg = s.m / s.group;
  const Shape in(x.begin() + 2, x.end()), kernel(w.begin() + 2, w.end());
  KILN_ASSIGN_OR_RETURN(s.geo, conv_util::read_geometry(ctx.node, in, kernel));
  if (s.geo.kernel != kernel)
    return Status::error("kernel_shape " + shape_str(s.geo.kernel) + " differs from W " +
                         shape_str(w));
  KILN_RETURN_IF_ERROR(
      conv_util::compute_output(s.geo, ctx.node.attr_string("auto_pad", "NOTSET"), false));
  s.g3 = conv_util::to_geo3(s.geo);
  s.ksz = s.g3.k[0] * s.g3.k[1] * s.g3.k[2];
  s.in_sz = s.g3.in[0] * s.g3.in[1] * s.g3.in[2];
  s.out_sz = s.g3.out[0] * s.g3.out[1] * s.g3.out[2];
  s.y_shape = {s.n, s.m};
  s.y_shape.insert(s.y_shape.end(), s.geo.out.begin(), s.geo.out.end());
  return s;
}

// True when im2col would copy X unchanged (1x1 kernel, stride 1, no padding).
bool is_pointwise(const ConvSetup& s) {
  for (int i = 0; i < 3; ++i)
    if (s.g3.k[i] != 1 || s.g3.s[i] != 1 || s.g3.pb[i] != 0 || s.g3.out[i] != s.g3.in[i])
      return false;
  return true;
}

// c = a · b: float by the float GEMM, 8-bit values widened to int16 by gemm_s16 (exact int32
// sums), int32 and double by plain loops.
template <typename T, typename Y>
void gemm_any(int64_t m, int64_t n, int64_t k, const T* a, const T* b, Y* c, ThreadPool* pool) {
  if constexpr (std::is_same_v<T, float>) {
    gemm_f32(false, false, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n, pool);
  } else if constexpr (std::is_same_v<T, int16_t>) {
    gemm::gemm_s16(m, n, k, a, k, b, n, c, n, pool);
  } else if (pool != nullptr && m > 1 && m * n * k > (1 << 16)) {  // int32 rows
    pool->parallel_for(m, 1, [&](int64_t i0, int64_t i1) {
      gemm_generic<T>(false, false, i1 - i0, n, k, T(1), a + i0 * k, k, b, n, T(0), c + i0 * n, n);
    });
  } else {
    gemm_generic<T>(false, false, m, n, k, T(1), a, k, b, n, T(0), c, n);
  }
}

// y = conv(x, w) without bias; T is float, double, int32, or int16 (with int32 y).
template <typename T, typename Y = T>
Status conv_core(KernelContext& ctx, const ConvSetup& s, const T* x, const T* w, Y* y, DType dt) {
  const bool direct = is_pointwise(s);
  Tensor col;
  if (!direct) {
    KILN_ASSIGN_OR_RETURN(col, Tensor::make(dt, {s.cg * s.ksz, s.out_sz}));
  }
  for (int64_t ni = 0; ni < s.n; ++ni) {
    for (int64_t gi = 0; gi < s.group; ++gi) {
      const T* xg = x + (ni * s.c + gi * s.cg) * s.in_sz;
      const T* b = xg;
      if (!direct) {
        T* cd = col.data<T>();
        if (ctx.pool != nullptr && s.cg > 1 && s.cg * s.ksz * s.out_sz > (1 << 16)) {
          ctx.pool->parallel_for(
              s.cg, 1, [&](int64_t c0, int64_t c1) { conv_util::im2col(xg, c0, c1, s.g3, cd); });
        } else {
          conv_util::im2col(xg, 0, s.cg, s.g3, cd);
        }
        b = cd;
      }
      gemm_any<T, Y>(s.mg, s.out_sz, s.cg * s.ksz, w + gi * s.mg * s.cg * s.ksz, b,
                     y + (ni * s.m + gi * s.mg) * s.out_sz, ctx.pool);
    }
  }
  return Status::ok();
}

template <typename T>
Status conv_typed(KernelContext& ctx, const ConvSetup& s, const Tensor& x, const Tensor& w,
                  const Tensor* bias, Tensor& y) {
  if constexpr (std::is_same_v<T, float>) {
    const ConvGemmShape cs{s.n, s.c, s.m, s.group, s.g3};
    const float* b = bias ? bias->data<float>() : nullptr;
    if (!is_pointwise(s) && plane_shift_fits(cs)) {
      conv_f32_plane_shift(cs, x.data<float>(), w.data<float>(), b, y.data<float>(), ctx.pool);
      return Status::ok();
    }
    if (!is_pointwise(s) && row_chunks_pay(cs)) {
      conv_f32_by_row_chunks(cs, x.data<float>(), w.data<float>(), b, y.data<float>(), ctx.pool);
      return Status::ok();
    }
  }
  KILN_RETURN_IF_ERROR(conv_core<T>(ctx, s, x.data<T>(), w.data<T>(), y.data<T>(), x.dtype()));
  if (bias != nullptr) {
    T* yd = y.data<T>();
    const T* bd = bias->data<T>();
    for (int64_t ni = 0; ni < s.n; ++ni)
      for (int64_t mi = 0; mi < s.m; ++mi) {
        T* row = yd + (ni * s.m + mi) * s.out_sz;
        for (int64_t i = 0; i < s.out_sz; ++i) row[i] += bd[mi];
      }
  }
  return Status::ok();
}

// What ConvKernel keeps for the few-positions product below: W^T [K x M], packed the first time a
// run takes it when W is a float32 constant of group 1, and the buffers the path reuses.
struct FewPositions {
  bool w_constant = false;
  gemm::PackedMatrix packed;
  std::vector<float> col, ct;
};

// True when the im2col matrix's transpose is X read with overlapping rows: one input channel,
// one real spatial dim, no dilation or padding and every window inside X (an STFT's frames).
bool is_window_rows(const ConvSetup& s) {
  for (int i = 0; i < 2; ++i)
    if (s.g3.in[i] != 1 || s.g3.k[i] != 1 || s.g3.pb[i] != 0 || s.g3.out[i] != 1) return false;
  return s.c == 1 && s.g3.d[2] == 1 && s.g3.pb[2] == 0 &&
         (s.g3.out[2] - 1) * s.g3.s[2] + s.g3.k[2] <= s.g3.in[2];
}

// Few output positions against many channels (an STFT's 257 filters over 97 frames): C^T =
// col^T · W^T with W^T packed once, so the GEMM's columns are the channels (whole register
// tiles, no per-call packing of W), then C^T is transposed into Y.
Status conv_few_positions(KernelContext& ctx, const ConvSetup& s, const Tensor& x, const gemm::PackedMatrix& packed,
                          const Tensor* bias, Tensor& y, std::vector<float>& col, std::vector<float>& ct) {
  const int64_t k = s.c * s.ksz;
  const bool direct = is_pointwise(s), windows = is_window_rows(s);
  if (!direct && !windows) col.resize(static_cast<size_t>(k * s.out_sz));  // grow once
  ct.resize(static_cast<size_t>(s.out_sz * s.m));
  const float* bd = bias ? bias->data<float>() : nullptr;
  for (int64_t ni = 0; ni < s.n; ++ni) {
    const float* xn = x.data<float>() + ni * s.c * s.in_sz;
    if (windows) {  // row p of col^T is x[p * stride, + K): X itself with lda = stride
      gemm_f32_prepacked(false, s.out_sz, 1.0f, xn, s.g3.s[2], packed, 0.0f, ct.data(), s.m, bd,
                         nullptr, ctx.pool);
    } else {
      const float* a = xn;
      if (!direct) {
        conv_util::im2col(xn, 0, s.c, s.g3, col.data());
        a = col.data();
      }
      gemm_f32_prepacked(true, s.out_sz, 1.0f, a, s.out_sz, packed, 0.0f, ct.data(), s.m, bd,
                         nullptr, ctx.pool);
    }
    float* yn = y.data<float>() + ni * s.m * s.out_sz;
    for (int64_t p0 = 0; p0 < s.out_sz; p0 += 8)  // in 8 x 8 blocks, so both sides stay in cache
      for (int64_t c0 = 0; c0 < s.m; c0 += 8)
        for (int64_t c = c0; c < std::min(s.m, c0 + 8); ++c)
          for (int64_t p = p0; p < std::min(s.out_sz, p0 + 8); ++p) yn[c * s.out_sz + p] = ct[p * s.m + c];
  }
  return Status::ok();
}

Status conv(KernelContext& ctx, FewPositions* few) {
  if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1))
    return ctx.error("Conv needs X and W");
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  if (w.dtype() != x.dtype()) return ctx.error("Conv W type differs from X");
  const DType dt = x.dtype();
  if (dt != DType::kFloat32 && dt != DType::kFloat64 && dt != DType::kFloat16 &&
      dt != DType::kBFloat16)
    return ctx.error(std::string("Conv does not support ") + dtype_name(dt));
  auto sr = setup_conv(ctx, x.shape(), w.shape());
  if (!sr) return ctx.error(sr.status().message());
  const ConvSetup& s = *sr;
  const Tensor* bias = nullptr;
  if (ctx.has_input(2) && ctx.input(2).defined()) {
    bias = &ctx.input(2);
    if (bias->dtype() != dt || bias->numel() != s.m || bias->rank() != 1)
      return ctx.error("Conv bias must be 1-D with " + std::to_string(s.m) +
                       " elements of X's type, got " + shape_str(bias->shape()));
  }
  if (dt == DType::kFloat64) {
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, dt, s.y_shape));
    return conv_typed<double>(ctx, s, x, w, bias, *y);
  }
  if (dt == DType::kFloat32 && few && few->w_constant && s.group == 1 && s.out_sz < s.m) {
    if (few->packed.empty()) {
      KILN_ASSIGN_OR_RETURN(few->packed, pack_weight(w.reshaped({s.m, w.numel() / s.m}), true));
    }
    if (few->packed.k() == s.c * s.ksz && few->packed.n() == s.m) {
      KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, dt, s.y_shape));
      return conv_few_positions(ctx, s, x, few->packed, bias, *y, few->col, few->ct);
    }
  }
  if (dt == DType::kFloat32 && grouped_conv_direct_fits(s.group, s.cg, s.m, s.g3)) {
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, dt, s.y_shape));
    grouped_conv_f32(x.data<float>(), w.data<float>(), bias ? bias->data<float>() : nullptr, y->data<float>(), s.n,
                     s.c, s.m, s.group, s.g3, ctx.pool);
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(Tensor xf, to_float32(x));
  KILN_ASSIGN_OR_RETURN(Tensor wf, to_float32(w));
  Tensor bf;
  if (bias != nullptr) {
    KILN_ASSIGN_OR_RETURN(bf, to_float32(*bias));
  }
  KILN_ASSIGN_OR_RETURN(Tensor yf, Tensor::make(DType::kFloat32, s.y_shape));
  KILN_RETURN_IF_ERROR(conv_typed<float>(ctx, s, xf, wf, bias ? &bf : nullptr, yf));
  KILN_ASSIGN_OR_RETURN(Tensor y, cast_float_to(yf, dt));
  ctx.set_output(0, std::move(y));
  return Status::ok();
}


// int32 (or, with `to` kInt16, int16: |v| <= 255 fits) copy of an 8-bit tensor minus a zero
// point (scalar, or one per slice of `per_dim0`).
Result<Tensor> widen_minus_zp(const Tensor& t, const Tensor* zp, const char* what, DType to = DType::kInt32) {
  if (!dtype_is_8bit_integer(t.dtype())) return Status::error(std::string(what) + " must be int8 or uint8");
  std::vector<int32_t> z{0};
  if (zp != nullptr) {
    if (zp->dtype() != t.dtype())
      return Status::error(std::string(what) + " zero point type differs from its input");
    z.resize(zp->numel());
    for (int64_t i = 0; i < zp->numel(); ++i)
      z[i] = static_cast<int32_t>(load_as_double(zp->dtype(), zp->raw_data(), i));
    if (z.size() != 1 && (t.rank() == 0 || static_cast<int64_t>(z.size()) != t.dim(0)))
      return Status::error(std::string(what) +
                           " zero point must be a scalar or have one value per output channel");
  }
  KILN_ASSIGN_OR_RETURN(Tensor out, Tensor::make_for_overwrite(to, t.shape()));
  const int64_t per = (t.rank() == 0 || t.dim(0) == 0) ? 1 : t.numel() / t.dim(0);
  auto widen = [&](const auto* in, auto* o) {
    using O = std::remove_pointer_t<decltype(o)>;
    for (int64_t i = 0; i < t.numel(); ++i)
      o[i] = static_cast<O>(static_cast<int32_t>(in[i]) - (z.size() == 1 ? z[0] : z[i / per]));
  };
  auto into = [&](auto* o) {
    if (t.dtype() == DType::kInt8) widen(t.data<int8_t>(), o);
    else widen(t.data<uint8_t>(), o);
  };
  if (to == DType::kInt16) into(out.data<int16_t>());
  else into(out.data<int32_t>());
  return out;
}

const Tensor* optional_input(const KernelContext& ctx, size_t i) {
  return ctx.has_input(i) && ctx.input(i).defined() ? &ctx.input(i) : nullptr;
}

// y (int32) = conv(x - x_zp, w - w_zp) of 8-bit x and w: widened to int16 for gemm_s16, or to
// int32 for the plain loops when one output sums more products than int32 holds at 16 bits.
Status integer_conv(KernelContext& ctx, const ConvSetup& s, const Tensor& x, const Tensor* xzp,
                    const Tensor& w, const Tensor* wzp, int32_t* y) {
  const bool s16 = s.cg * s.ksz <= gemm::kMaxS16Depth;
  const DType wide = s16 ? DType::kInt16 : DType::kInt32;
  auto xr = widen_minus_zp(x, xzp, "x", wide);
  if (!xr) return ctx.error(xr.status().message());
  auto wr = widen_minus_zp(w, wzp, "w", wide);
  if (!wr) return ctx.error(wr.status().message());
  if (s16)
    return conv_core<int16_t, int32_t>(ctx, s, xr->data<int16_t>(), wr->data<int16_t>(), y, DType::kInt16);
  return conv_core<int32_t>(ctx, s, xr->data<int32_t>(), wr->data<int32_t>(), y, DType::kInt32);
}

Status conv_integer(KernelContext& ctx) {
  if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1))
    return ctx.error("ConvInteger needs X and W");
  auto sr = setup_conv(ctx, ctx.input(0).shape(), ctx.input(1).shape());
  if (!sr) return ctx.error(sr.status().message());
  const Tensor* xzp = optional_input(ctx, 2);
  if (xzp != nullptr && xzp->numel() != 1) return ctx.error("x_zero_point must be a scalar");
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, DType::kInt32, sr->y_shape));
  return integer_conv(ctx, *sr, ctx.input(0), xzp, ctx.input(1), optional_input(ctx, 3), y->data<int32_t>());
}

Result<std::vector<float>> read_floats(const Tensor& t) {
  if (!dtype_is_float(t.dtype())) return Status::error("scale must be a float tensor");
  std::vector<float> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i)
    v[i] = static_cast<float>(load_as_double(t.dtype(), t.raw_data(), i));
  return v;
}

}  // namespace

Status qlinear_conv_reference(KernelContext& ctx) {
  if (ctx.num_inputs() < 8) return ctx.error("QLinearConv needs 8 or 9 inputs");
  for (size_t i = 0; i < 8; ++i)
    if (i != 2 && i != 5 && i != 7 && !optional_input(ctx, i))
      return ctx.error("QLinearConv input " + std::to_string(i) + " missing");
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(3);
  auto sr = setup_conv(ctx, x.shape(), w.shape());
  if (!sr) return ctx.error(sr.status().message());
  const ConvSetup& s = *sr;
  const Tensor* xzp = optional_input(ctx, 2);
  if (xzp != nullptr && xzp->numel() != 1) return ctx.error("x_zero_point must be a scalar");
  auto xs = read_floats(ctx.input(1));
  auto ws = read_floats(ctx.input(4));
  auto ys = read_floats(ctx.input(6));
  if (!xs || !ws || !ys) return ctx.error("QLinearConv scales must be float tensors");
  if (xs->size() != 1 || ys->size() != 1) return ctx.error("x_scale and y_scale must be scalars");
  if (ws->size() != 1 && static_cast<int64_t>(ws->size()) != s.m)
    return ctx.error("w_scale must be a scalar or have one value per output channel");
  const Tensor* yzp = optional_input(ctx, 7);
  const DType out_t = yzp ? yzp->dtype() : x.dtype();
  if (!dtype_is_8bit_integer(out_t) || (yzp && yzp->numel() != 1))
    return ctx.error("y_zero_point must be an int8/uint8 scalar");
  const double yz = yzp ? load_as_double(yzp->dtype(), yzp->raw_data(), 0) : 0.0;
  const Tensor* bias = optional_input(ctx, 8);
  if (bias && (bias->dtype() != DType::kInt32 || bias->numel() != s.m))
    return ctx.error("QLinearConv bias must be int32 with one value per output channel");
  KILN_ASSIGN_OR_RETURN(Tensor acc, Tensor::make(DType::kInt32, s.y_shape));
  KILN_RETURN_IF_ERROR(integer_conv(ctx, s, x, xzp, w, optional_input(ctx, 5), acc.data<int32_t>()));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, out_t, s.y_shape));
  // Requantized in float as MLAS does (and kiln's 8-bit conv, qconv.h): the sum times the scale
  // is clamped to the output's range less the zero point, rounded half to even, then shifted.
  const float lo = out_t == DType::kInt8 ? -128.0f : 0.0f, hi = out_t == DType::kInt8 ? 127.0f : 255.0f;
  const float z = static_cast<float>(yz);
  for (int64_t ni = 0; ni < s.n; ++ni)
    for (int64_t mi = 0; mi < s.m; ++mi) {
      const float factor = (*xs)[0] * (ws->size() == 1 ? (*ws)[0] : (*ws)[mi]) / (*ys)[0];
      const int64_t base = (ni * s.m + mi) * s.out_sz;
      for (int64_t i = 0; i < s.out_sz; ++i) {
        const int32_t a = acc.data<int32_t>()[base + i] + (bias ? bias->data<int32_t>()[mi] : 0);
        const float v = std::min(hi - z, std::max(lo - z, static_cast<float>(a) * factor));
        store_from_double(out_t, y->raw_data(), base + i, std::nearbyint(v) + z);
      }
    }
  return Status::ok();
}

// Conv, with what the few-positions product keeps across runs.
class ConvKernel : public Kernel {
 public:
  explicit ConvKernel(const ir::Node& node) : group_(node.attr_int("group", 1)) {}
  Status prepare(const std::vector<const Tensor*>& constants, std::vector<bool>&) override {
    const Tensor* w = constants.size() > 1 ? constants[1] : nullptr;
    few_.w_constant = w && w->dtype() == DType::kFloat32 && w->rank() >= 3 && group_ == 1 && w->dim(0) > 0;
    return Status::ok();  // W stays: the other paths read it as it is
  }
  Status run(KernelContext& ctx) override { return conv(ctx, &few_); }

 private:
  int64_t group_;
  FewPositions few_;
};

const KernelRegistrar kConv("", "Conv", "ref", [](const ir::Node& node, int64_t) {
  return Result<std::unique_ptr<Kernel>>(std::unique_ptr<Kernel>(std::make_unique<ConvKernel>(node)));
});
KILN_REGISTER_TYPED_KERNEL("", "ConvInteger", conv_integer, {{0, {DType::kUInt8, DType::kInt8}}, {1, {DType::kUInt8, DType::kInt8}}});

// float32 Conv: group 1 by im2col and the GEMM, grouped with few channels a group (1-D or 2-D) by
// the direct kernel; wider groups and 3-D grouped convs run a GEMM per group, the slow path.
// ai.kiln.FusedConv runs this kernel and then its epilogue, so it shares the rule.
static bool conv_fast(const FastPathQuery& q) {
  if (!q.input_is(0, DType::kFloat32)) return false;
  const int64_t group = q.node.attr_int("group", 1);
  if (group == 1) return true;
  const ir::TypeInfo* w = q.types.size() > 1 ? q.types[1] : nullptr;
  return w && w->has_shape && w->shape.size() >= 3 && w->shape.size() <= 4 && w->shape[1].known() &&
         w->shape[1].value <= kDirectConvMaxGroupChannels;
}
KILN_REGISTER_FAST_PATH("", "Conv", conv_fast);
KILN_REGISTER_FAST_PATH("", "ConvInteger", always_fast);  // int16 im2col and gemm_s16 over the pool
KILN_REGISTER_FAST_PATH("ai.kiln", "FusedConv", conv_fast);

}  // namespace kiln
