// Reference ConvTranspose (1-3 spatial dims, groups, dilations, output_padding, output_shape,
// auto_pad): GEMM of W^T with X into columns, then col2im gathers each output row from them (bias
// included), output channels over the pool. Also ai.kiln.FusedConvTranspose: each gathered row
// then takes the activation and residual while it is in L1, where a Relu after a decoder's
// upsampling had been a pass of its own over the largest tensor of the model.
#include <algorithm>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/conv/patch_conv_transpose.h"
#include "kernels/fast_path.h"
#include "kernels/kernel_util.h"
#include "kernels/kiln/epilogue_activation.h"
#include "kernels/ref/conv_util.h"
#include "kernels/ref/gemm_f32.h"

namespace kiln {
namespace {

using conv_util::Geo3;
using conv_util::Geometry;

// Where tap k of one dimension lands: output index o = i * s - pb + k * d, so the outputs of one
// residue q = o mod s read consecutive inputs i = j + shift, j = (o - q) / s. The tap feeds
// residue q (or none when s does not divide, which cannot happen: every k has one residue).
struct TapRun {
  int64_t q, shift;
};
inline TapRun tap_run(int64_t k, int64_t s, int64_t d, int64_t pb) {
  const int64_t off = k * d - pb;           // o = i * s + off
  const int64_t q = ((off % s) + s) % s;    // o mod s
  return {q, (q - off) / s};                // i = (o - off) / s = j + (q - off) / s
}

// y[q + sw * j] = b + phases[q * per_phase + j] for the n outputs of one row. Stride 2 (every
// upsampling decoder) is spelled out so that GCC vectorizes it.
template <typename T>
void interleave(const T* phases, int64_t per_phase, int64_t sw, int64_t n, T b, T* __restrict y) {
  const int64_t full = n / sw;  // j with every residue inside the row
  if (sw == 2) {
    const T* __restrict p0 = phases;
    const T* __restrict p1 = phases + per_phase;
    for (int64_t j = 0; j < full; ++j) {
      y[2 * j] = b + p0[j];
      y[2 * j + 1] = b + p1[j];
    }
  } else {
    for (int64_t j = 0; j < full; ++j)
      for (int64_t q = 0; q < sw; ++q) y[j * sw + q] = b + phases[q * per_phase + j];
  }
  for (int64_t o = full * sw; o < n; ++o) y[o] = b + phases[(o - full * sw) * per_phase + full];
}

// Output rows [r0, r1) of the group's channels (row r: channel r / (out_d * out_h), then depth
// and height), gathered row by row: y = bias + the columns that land on each output pixel; then
// the fused tail `e` (float only; its residual starts at the group's first output).
// Within a row the outputs of one residue mod sw read consecutive columns of every tap, so each
// tap adds one contiguous run into that residue's row of `phases` (vectorizable, unlike a scatter
// with stride sw), and the residues interleave into y at the end. phases: sw * ceil(out_w / sw)
// floats of scratch.
template <typename T>
void col2im(const T* col, const T* bias, int64_t r0, int64_t r1, const Geo3& g, T* y, T* phases,
            const gemm::Epilogue* e) {
  const int64_t in_sz = g.in[0] * g.in[1] * g.in[2];
  const int64_t ksz = g.k[0] * g.k[1] * g.k[2];
  const int64_t sw = g.s[2], ow_n = g.out[2], per_phase = (ow_n + sw - 1) / sw;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t c = r / (g.out[0] * g.out[1]), od = r / g.out[1] % g.out[0], oh = r % g.out[1];
    std::fill(phases, phases + sw * per_phase, T(0));
    for (int64_t kd = 0; kd < g.k[0]; ++kd) {
      const TapRun rd = tap_run(kd, g.s[0], g.d[0], g.pb[0]);
      const int64_t id = (od - rd.q) / g.s[0] + rd.shift;
      if ((od - rd.q) % g.s[0] != 0 || id < 0 || id >= g.in[0]) continue;
      for (int64_t kh = 0; kh < g.k[1]; ++kh) {
        const TapRun rh = tap_run(kh, g.s[1], g.d[1], g.pb[1]);
        const int64_t ih = (oh - rh.q) / g.s[1] + rh.shift;
        if ((oh - rh.q) % g.s[1] != 0 || ih < 0 || ih >= g.in[1]) continue;
        for (int64_t kw = 0; kw < g.k[2]; ++kw) {
          const TapRun rw = tap_run(kw, sw, g.d[2], g.pb[2]);
          // Outputs q + sw * j for j in [j0, j1): inside the row, reading inputs inside.
          const int64_t j0 = std::max<int64_t>(0, -rw.shift);
          const int64_t j1 = std::min((ow_n - rw.q + sw - 1) / sw, g.in[2] - rw.shift);
          const T* __restrict src = col + (c * ksz + (kd * g.k[1] + kh) * g.k[2] + kw) * in_sz +
                                    (id * g.in[1] + ih) * g.in[2] + rw.shift;
          T* __restrict dst = phases + rw.q * per_phase;
          for (int64_t j = j0; j < j1; ++j) dst[j] += src[j];
        }
      }
    }
    T* __restrict yrow = y + r * ow_n;
    const T b = bias ? bias[c] : T(0);
    interleave(phases, per_phase, sw, ow_n, b, yrow);
    if constexpr (std::is_same_v<T, float>)
      if (e) gemm::apply_epilogue(*e, yrow, ow_n, 0, r * ow_n, 1, ow_n);
  }
}

template <typename T>
void run_typed(KernelContext& ctx, const T* x, const T* w, const T* bias, T* y, T* col, int64_t n,
               int64_t c, int64_t m, int64_t group, const Geo3& g3, const gemm::Epilogue* e) {
  const int64_t cg = c / group, mg = m / group;
  const int64_t in_sz = g3.in[0] * g3.in[1] * g3.in[2], out_sz = g3.out[0] * g3.out[1] * g3.out[2];
  const int64_t ksz = g3.k[0] * g3.k[1] * g3.k[2];
  for (int64_t ni = 0; ni < n; ++ni)
    for (int64_t gi = 0; gi < group; ++gi) {
      const T* xg = x + (ni * c + gi * cg) * in_sz;
      const T* wg = w + gi * cg * mg * ksz;
      // col (mg*ksz x in_sz) = W_g^T (mg*ksz x cg) * X_g (cg x in_sz)
      if constexpr (std::is_same_v<T, float>)
        gemm_f32(true, false, mg * ksz, in_sz, cg, 1.0f, wg, mg * ksz, xg, in_sz, 0.0f, col, in_sz,
                 ctx.pool);
      else
        gemm_generic<T>(true, false, mg * ksz, in_sz, cg, T(1), wg, mg * ksz, xg, in_sz, T(0), col,
                        in_sz);
      T* yg = y + (ni * m + gi * mg) * out_sz;
      const T* bg = bias ? bias + gi * mg : nullptr;
      const int64_t phase_len = g3.s[2] * ((g3.out[2] + g3.s[2] - 1) / g3.s[2]);
      gemm::Epilogue eg;
      if (e) {
        eg = *e;
        if (eg.residual) eg.residual += (ni * m + gi * mg) * out_sz;
      }
      auto gather = [&](int64_t r0, int64_t r1) {
        std::vector<T> phases(phase_len);
        col2im(col, bg, r0, r1, g3, yg, phases.data(), e ? &eg : nullptr);
      };
      // Over the output rows of every channel, so that one channel (a 1-channel upsampling
      // head) shares out too: 16 rows a chunk at least.
      const int64_t rows = mg * g3.out[0] * g3.out[1];
      if (ctx.pool != nullptr && mg * ksz * in_sz > (1 << 15))
        ctx.pool->parallel_for(rows, 16, gather);
      else
        gather(0, rows);
    }
}

Status conv_transpose(KernelContext& ctx) {
  if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1))
    return ctx.error("ConvTranspose needs X and W");
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const DType dt = x.dtype();
  if (w.dtype() != dt) return ctx.error("ConvTranspose W type differs from X");
  if (dt != DType::kFloat32 && dt != DType::kFloat64 && dt != DType::kFloat16 &&
      dt != DType::kBFloat16)
    return ctx.error(std::string("ConvTranspose does not support ") + dtype_name(dt));
  if (x.rank() < 3 || x.rank() > 5 || w.rank() != x.rank())
    return ctx.error("ConvTranspose needs X and W of equal rank 3-5, got " + shape_str(x.shape()) +
                     " and " + shape_str(w.shape()));
  const int64_t group = ctx.node.attr_int("group", 1);
  if (group <= 0) return ctx.error("group must be positive");
  const int64_t n = x.dim(0), c = x.dim(1), m = w.dim(1) * group;
  if (w.dim(0) != c || c % group != 0)
    return ctx.error("W.shape[0] " + std::to_string(w.dim(0)) + " must equal X channels " +
                     std::to_string(c) + " and be divisible by group");
  const std::vector<int64_t> in(x.shape().begin() + 2, x.shape().end());
  const std::vector<int64_t> kernel(w.shape().begin() + 2, w.shape().end());
  auto gr = conv_util::read_geometry(ctx.node, in, kernel);
  if (!gr) return ctx.error(gr.status().message());
  Geometry geo = *gr;
  if (geo.kernel != kernel) return ctx.error("kernel_shape differs from W's spatial dims");
  const int64_t dims = geo.dims;
  std::vector<int64_t> out_pad = ctx.node.attr_ints("output_padding");
  if (out_pad.empty()) out_pad.assign(dims, 0);
  if (static_cast<int64_t>(out_pad.size()) != dims)
    return ctx.error("output_padding length differs from spatial rank");
  std::vector<int64_t> out_shape = ctx.node.attr_ints("output_shape");
  if (static_cast<int64_t>(out_shape.size()) > dims)
    out_shape.erase(out_shape.begin(), out_shape.end() - dims);
  if (!out_shape.empty() && static_cast<int64_t>(out_shape.size()) != dims)
    return ctx.error("output_shape length differs from spatial rank");
  const std::string auto_pad = ctx.node.attr_string("auto_pad", "NOTSET");
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  if (!same && auto_pad != "NOTSET" && auto_pad != "VALID" && !auto_pad.empty())
    return ctx.error("unknown auto_pad '" + auto_pad + "'");
  if (auto_pad == "VALID") geo.pads.assign(2 * dims, 0);
  geo.out.assign(dims, 0);
  for (int64_t i = 0; i < dims; ++i) {
    if (out_pad[i] < 0) return ctx.error("output_padding must be non-negative");
    const int64_t natural =
        geo.strides[i] * (in[i] - 1) + out_pad[i] + conv_util::effective_kernel(geo, i);
    const bool pads_given = ctx.node.has_attr("pads") && auto_pad != "VALID";
    if ((same || !out_shape.empty()) && !pads_given) {
      const int64_t target = out_shape.empty() ? in[i] * geo.strides[i] : out_shape[i];
      const int64_t total = natural - target;
      if (total >= 0) {
        const int64_t small = total / 2, big = total - small;
        geo.pads[i] = auto_pad == "SAME_UPPER" ? small : big;
        geo.pads[i + dims] = auto_pad == "SAME_UPPER" ? big : small;
      }
      geo.out[i] = target;
    } else {
      geo.out[i] = out_shape.empty() ? natural - geo.pads[i] - geo.pads[i + dims] : out_shape[i];
    }
    if (geo.out[i] < 0) return ctx.error("ConvTranspose output size is negative");
  }
  Shape y_shape{n, m};
  y_shape.insert(y_shape.end(), geo.out.begin(), geo.out.end());
  const Geo3 g3 = conv_util::to_geo3(geo);
  const int64_t ksz = g3.k[0] * g3.k[1] * g3.k[2], in_sz = g3.in[0] * g3.in[1] * g3.in[2];
  const Tensor* bias = ctx.has_input(2) && ctx.input(2).defined() ? &ctx.input(2) : nullptr;
  if (bias && (bias->dtype() != dt || bias->numel() != m))
    return ctx.error("ConvTranspose bias must have " + std::to_string(m) + " values of X's type");
  const DType ct = dt == DType::kFloat64 ? dt : DType::kFloat32;
  gemm::Epilogue tail;  // FusedConvTranspose's; e points at it when it does anything
  const gemm::Epilogue* e = nullptr;
  if (ctx.node.op_type == "FusedConvTranspose") {
    if (dt != DType::kFloat32) return ctx.error("FusedConvTranspose supports float32 only");
    KILN_ASSIGN_OR_RETURN(tail, kiln_ops::read_epilogue(ctx, y_shape, 3));
    if (!tail.empty()) e = &tail;
  }
  if (dt == DType::kFloat32 && patch_conv_transpose_fits(g3, c / group, m / group)) {
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, dt, y_shape));
    patch_conv_transpose_f32(x.data<float>(), w.data<float>(), bias ? bias->data<float>() : nullptr,
                             y->data<float>(), n, c, m, group, g3, e, ctx.pool);
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(Tensor col, Tensor::make_for_overwrite(ct, {m / group * ksz, in_sz}));  // GEMM output
  KILN_ASSIGN_OR_RETURN(Tensor yc, Tensor::make_for_overwrite(ct, y_shape));  // col2im writes all
  if (ct == DType::kFloat64) {
    run_typed<double>(ctx, x.data<double>(), w.data<double>(),
                      bias ? bias->data<double>() : nullptr, yc.data<double>(), col.data<double>(),
                      n, c, m, group, g3, nullptr);
  } else {
    KILN_ASSIGN_OR_RETURN(Tensor xf, to_float32(x));
    KILN_ASSIGN_OR_RETURN(Tensor wf, to_float32(w));
    Tensor bf;
    if (bias) {
      KILN_ASSIGN_OR_RETURN(bf, to_float32(*bias));
    }
    run_typed<float>(ctx, xf.data<float>(), wf.data<float>(), bias ? bf.data<float>() : nullptr,
                     yc.data<float>(), col.data<float>(), n, c, m, group, g3, e);
  }
  KILN_ASSIGN_OR_RETURN(Tensor y, cast_float_to(yc, dt));
  ctx.set_output(0, std::move(y));
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("", "ConvTranspose", conv_transpose);
KILN_REGISTER_KERNEL("ai.kiln", "FusedConvTranspose", conv_transpose);

// float32: the GEMM and the run-wise col2im over the pool.
KILN_REGISTER_FAST_PATH("", "ConvTranspose", float32_input);
KILN_REGISTER_FAST_PATH("ai.kiln", "FusedConvTranspose", float32_input);

}  // namespace kiln
