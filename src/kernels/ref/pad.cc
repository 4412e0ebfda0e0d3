// Reference kernel for Pad in all its forms: constant/reflect/edge/wrap modes, pads as an
// attribute (opsets 1-10) or input (11 on), optional axes (18 on). Negative pads crop first.
#include <algorithm>
#include <cstring>

#include "kernels/fast_path.h"
#include "kernels/ref/movement_util.h"

namespace kiln {
namespace {

using namespace movement;

enum class Mode { kConstant, kReflect, kEdge, kWrap };

// Constant mode's kept part: y's box [lead, lead + inner) = x's [crop, crop + inner), a
// contiguous run of the last dim at a time (y already holds the fill value elsewhere).
void copy_interior(const Tensor& x, const std::vector<int64_t>& crop, const std::vector<int64_t>& inner,
                   const std::vector<int64_t>& lead, Tensor* y) {
  const int64_t r = x.rank();
  for (int64_t d = 0; d < r; ++d)
    if (inner[d] == 0) return;
  const Shape xs = strides_of(x.shape()), ys = strides_of(y->shape());
  const size_t elem = dtype_size(x.dtype());
  const size_t run = static_cast<size_t>(r == 0 ? 1 : inner[r - 1]) * elem;
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(y->raw_data());
  int64_t xo = 0, yo = 0;
  for (int64_t d = 0; d < r; ++d) xo += crop[d] * xs[d], yo += lead[d] * ys[d];
  std::vector<int64_t> idx(static_cast<size_t>(std::max<int64_t>(r - 1, 0)), 0);
  for (;;) {
    std::memcpy(dst + yo * elem, src + xo * elem, run);
    int64_t d = r - 2;  // odometer over the outer dims
    for (; d >= 0; --d) {
      xo += xs[d], yo += ys[d];
      if (++idx[d] < inner[d]) break;
      xo -= inner[d] * xs[d], yo -= inner[d] * ys[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

Status pad(KernelContext& ctx) {
  const bool attrs = ctx.opset < 11;
  KILN_RETURN_IF_ERROR(require_inputs(ctx, attrs ? 1 : 2));
  const Tensor& x = ctx.input(0);
  const int64_t r = x.rank();

  const std::string mode_name = ctx.node.attr_string("mode", "constant");
  Mode mode;
  if (mode_name == "constant")
    mode = Mode::kConstant;
  else if (mode_name == "reflect")
    mode = Mode::kReflect;
  else if (mode_name == "edge")
    mode = Mode::kEdge;
  else if (mode_name == "wrap" && ctx.opset >= 19)
    mode = Mode::kWrap;
  else
    return ctx.error("unsupported mode '" + mode_name + "'");

  std::vector<int64_t> pads, axes;
  KILN_ASSIGN_OR_RETURN(Tensor fill, Tensor::make(x.dtype(), {}));
  bool has_axes = false;
  if (attrs) {
    const char* name = ctx.opset < 2 ? "paddings" : "pads";
    if (!ctx.node.has_attr(name))
      return ctx.error(std::string("attribute '") + name + "' is missing");
    pads = ctx.node.attr_ints(name);
    const float value = ctx.node.attr_float("value", 0.0f);
    if (value != 0.0f) {
      if (x.dtype() == DType::kString)
        return ctx.error("a non-zero pad value needs a numeric input");
      store_from_double(x.dtype(), fill.raw_data(), 0, value);
    }
  } else {
    KILN_ASSIGN_OR_RETURN(pads, read_ints(ctx, 1, "pads"));
    KILN_ASSIGN_OR_RETURN(bool has_value, optional_input(ctx, 2));
    if (has_value && ctx.input(2).numel() > 0) {
      const Tensor& v = ctx.input(2);
      if (v.dtype() != x.dtype())
        return ctx.error(std::string("constant_value type ") + dtype_name(v.dtype()) +
                         " differs from data type " + dtype_name(x.dtype()));
      if (v.numel() != 1)
        return ctx.error("constant_value must hold one value, got shape " + shape_str(v.shape()));
      fill = v;
    }
    if (ctx.opset >= 18) {
      KILN_ASSIGN_OR_RETURN(has_axes, optional_input(ctx, 3));
      if (has_axes) {
        KILN_ASSIGN_OR_RETURN(std::vector<int64_t> raw, read_ints(ctx, 3, "axes"));
        KILN_ASSIGN_OR_RETURN(axes, axes_of(ctx, raw, r));
      }
    }
  }
  if (!has_axes)
    for (int64_t d = 0; d < r; ++d) axes.push_back(d);
  const size_t n = axes.size();
  if (pads.size() != 2 * n)
    return ctx.error("pads " + shape_str(pads) + " must have " + std::to_string(2 * n) + " values");

  // Per axis: elements cropped at the start, size after cropping, padding added at the start.
  std::vector<int64_t> crop(r, 0), inner(x.shape()), lead(r, 0);
  Shape out = x.shape();
  for (size_t i = 0; i < n; ++i) {
    const int64_t a = axes[i], b = pads[i], e = pads[n + i];
    if (std::abs(b) > kMaxTensorBytes || std::abs(e) > kMaxTensorBytes)
      return ctx.error("pads " + shape_str(pads) + " are too large");
    crop[a] = std::max<int64_t>(-b, 0);
    inner[a] = x.dim(a) - crop[a] - std::max<int64_t>(-e, 0);
    lead[a] = std::max<int64_t>(b, 0);
    out[a] = x.dim(a) + b + e;
    if (inner[a] < 0 || out[a] < 0)
      return ctx.error("pads " + shape_str(pads) + " crop more than the input " +
                       shape_str(x.shape()) + " holds");
    if (mode != Mode::kConstant && inner[a] == 0 && out[a] > 0)
      return ctx.error("cannot " + mode_name + "-pad an empty axis " + std::to_string(a));
  }

  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x.dtype(), out));
  if (mode == Mode::kConstant && y->numel() > 0) KILN_RETURN_IF_ERROR(fill_from(fill, 0, y));
  const Shape strides = strides_of(x.shape());
  if (mode == Mode::kConstant && x.dtype() != DType::kString) {
    copy_interior(x, crop, inner, lead, y);
    return Status::ok();
  }
  return gather_by_index(x, y, [&](const Shape& idx) -> int64_t {
    int64_t off = 0;
    for (int64_t d = 0; d < r; ++d) {
      int64_t i = idx[d] - lead[d];
      const int64_t m = inner[d];
      if (i < 0 || i >= m) {
        switch (mode) {
          case Mode::kConstant:
            return -1;
          case Mode::kEdge:
            i = i < 0 ? 0 : m - 1;
            break;
          case Mode::kWrap:
            i = ((i % m) + m) % m;
            break;
          case Mode::kReflect:
            if (m == 1) {
              i = 0;
            } else {
              const int64_t p = 2 * (m - 1);
              i = ((i % p) + p) % p;
              if (i >= m) i = p - i;
            }
            break;
        }
      }
      off += (crop[d] + i) * strides[d];
    }
    return off;
  });
}

}  // namespace

KILN_REGISTER_KERNEL("", "Pad", pad);
// Constant mode: a fill and a memcpy per kept row. The other modes gather element by element.
KILN_REGISTER_FAST_PATH("", "Pad", [](const FastPathQuery& q) {
  return q.node.attr_string("mode", "constant") == "constant" && !q.input_is(0, DType::kString);
});

}  // namespace kiln
