// Reference DeformConv (2-D): each kernel tap samples X bilinearly at its offset position
// (zero outside), optionally scaled by a mask, then the grouped GEMM with W as in Conv.
#include <cmath>

#include "kernels/kernel_util.h"
#include "kernels/ref/conv_util.h"
#include "kernels/ref/gemm_f32.h"

namespace kiln {
namespace {

double bilinear(const float* plane, int64_t h, int64_t w, double y, double x) {
  const double y0 = std::floor(y), x0 = std::floor(x);
  const double ly = y - y0, lx = x - x0;
  double acc = 0.0;
  for (int dy = 0; dy < 2; ++dy)
    for (int dx = 0; dx < 2; ++dx) {
      const int64_t yy = static_cast<int64_t>(y0) + dy, xx = static_cast<int64_t>(x0) + dx;
      if (yy < 0 || yy >= h || xx < 0 || xx >= w) continue;
      acc += (dy ? ly : 1 - ly) * (dx ? lx : 1 - lx) * plane[yy * w + xx];
    }
  return acc;
}

Status deform_conv(KernelContext& ctx) {
  if (ctx.num_inputs() < 3 || !ctx.has_input(0) || !ctx.has_input(1) || !ctx.has_input(2))
    return ctx.error("DeformConv needs X, W and offset");
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const Tensor& off = ctx.input(2);
  const DType dt = x.dtype();
  if (!dtype_is_float(dt) || w.dtype() != dt || off.dtype() != dt)
    return ctx.error("DeformConv inputs must share a float type");
  if (x.rank() != 4 || w.rank() != 4 || off.rank() != 4)
    return ctx.error("DeformConv supports 2-D inputs only: X, W and offset must have rank 4");
  const int64_t group = ctx.node.attr_int("group", 1), og = ctx.node.attr_int("offset_group", 1);
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), wd = x.dim(3), oc = w.dim(0);
  if (group <= 0 || og <= 0 || c != w.dim(1) * group || oc % group != 0 || c % og != 0)
    return ctx.error("DeformConv channels " + std::to_string(c) + " do not match W " +
                     shape_str(w.shape()) + ", group " + std::to_string(group) + ", offset_group " +
                     std::to_string(og));
  auto gr = conv_util::read_geometry(ctx.node, {h, wd}, {w.dim(2), w.dim(3)});
  if (!gr) return ctx.error(gr.status().message());
  conv_util::Geometry g = *gr;
  if (g.kernel[0] != w.dim(2) || g.kernel[1] != w.dim(3))
    return ctx.error("kernel_shape differs from W");
  Status st = conv_util::compute_output(g, "NOTSET", false);
  if (!st) return ctx.error(st.message());
  const int64_t kh = g.kernel[0], kw = g.kernel[1], oh = g.out[0], ow = g.out[1], ksz = kh * kw,
                L = oh * ow;
  if (off.shape() != Shape{n, og * ksz * 2, oh, ow})
    return ctx.error("offset shape " + shape_str(off.shape()) + " expected " +
                     shape_str({n, og * ksz * 2, oh, ow}));
  const Tensor* bias = ctx.has_input(3) && ctx.input(3).defined() ? &ctx.input(3) : nullptr;
  const Tensor* mask = ctx.has_input(4) && ctx.input(4).defined() ? &ctx.input(4) : nullptr;
  if (bias && (bias->numel() != oc || bias->dtype() != dt))
    return ctx.error("DeformConv B needs one value per output channel");
  if (mask && (mask->shape() != Shape{n, og * ksz, oh, ow} || mask->dtype() != dt))
    return ctx.error("mask shape " + shape_str(mask->shape()) + " expected " +
                     shape_str({n, og * ksz, oh, ow}));
  KILN_ASSIGN_OR_RETURN(Tensor xf, to_float32(x));
  KILN_ASSIGN_OR_RETURN(Tensor wf, to_float32(w));
  KILN_ASSIGN_OR_RETURN(Tensor of, to_float32(off));
  Tensor mf, bf;
  if (mask) {
    KILN_ASSIGN_OR_RETURN(mf, to_float32(*mask));
  }
  if (bias) {
    KILN_ASSIGN_OR_RETURN(bf, to_float32(*bias));
  }
  KILN_ASSIGN_OR_RETURN(Tensor col, Tensor::make(DType::kFloat32, {c * ksz, L}));
  KILN_ASSIGN_OR_RETURN(Tensor yf, Tensor::make(DType::kFloat32, {n, oc, oh, ow}));
  const int64_t cpo = c / og, cg = c / group, ocg = oc / group;
  for (int64_t ni = 0; ni < n; ++ni) {
    for (int64_t ci = 0; ci < c; ++ci) {
      const int64_t gi = ci / cpo;
      const float* plane = xf.data<float>() + (ni * c + ci) * h * wd;
      for (int64_t ki = 0; ki < kh; ++ki)
        for (int64_t kj = 0; kj < kw; ++kj) {
          const int64_t tap = ki * kw + kj;
          const float* oy = of.data<float>() + ((ni * og + gi) * ksz * 2 + tap * 2) * L;
          const float* ox = oy + L;
          const float* mk = mask ? mf.data<float>() + ((ni * og + gi) * ksz + tap) * L : nullptr;
          float* dst = col.data<float>() + (ci * ksz + tap) * L;
          for (int64_t i = 0; i < oh; ++i)
            for (int64_t j = 0; j < ow; ++j) {
              const int64_t l = i * ow + j;
              const double y =
                  static_cast<double>(i * g.strides[0] - g.pads[0] + ki * g.dilations[0]) + oy[l];
              const double xx =
                  static_cast<double>(j * g.strides[1] - g.pads[1] + kj * g.dilations[1]) + ox[l];
              double v = bilinear(plane, h, wd, y, xx);
              if (mk) v *= mk[l];
              dst[l] = static_cast<float>(v);
            }
        }
    }
    for (int64_t gi = 0; gi < group; ++gi)
      gemm_f32(false, false, ocg, L, cg * ksz, 1.0f, wf.data<float>() + gi * ocg * cg * ksz,
               cg * ksz, col.data<float>() + gi * cg * ksz * L, L, 0.0f,
               yf.data<float>() + (ni * oc + gi * ocg) * L, L, ctx.pool);
    if (bias)
      for (int64_t o = 0; o < oc; ++o)
        for (int64_t l = 0; l < L; ++l)
          yf.data<float>()[(ni * oc + o) * L + l] += bf.data<float>()[o];
  }
  KILN_ASSIGN_OR_RETURN(Tensor y, cast_float_to(yf, dt));
  ctx.set_output(0, std::move(y));
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("", "DeformConv", deform_conv);

}  // namespace kiln
