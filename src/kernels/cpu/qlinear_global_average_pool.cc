// com.microsoft.QLinearGlobalAveragePool (ONNX Runtime's contrib op; qdq-fusion writes it for
// Q(GlobalAveragePool(DQ(x))), qlinear-nhwc its channels-last form): 8-bit X [N, C, spatial...]
// (channels_last: [N, spatial..., C]) to Y of X's type, [N, C, 1...] (or [N, 1..., C]):
//   y = saturate(round_half_even(float(sum(x) - n * xz) * (xs / (ys * n))) + yz)
// over each channel's n pixels: the sum exact in integers, one float multiply and rounding (MLAS's
// requantization of the sum; the DequantizeLinear/GlobalAveragePool/QuantizeLinear it replaces
// rounds each dequantized value, their mean and the quotient, so the two may differ by a code).
#include <cmath>
#include <vector>

#include "kernels/kernel_util.h"
#include "kernels/ref/quantize.h"

namespace kiln {
namespace {

template <typename T>
void pool(const T* x, int64_t batch, int64_t channels, int64_t image, bool channels_last, float xz, float multiplier,
          float yz, float lo, float hi, T* y) {
  // int64 sums: 255 * n fits int32 only up to n of 8.4M pixels.
  std::vector<int64_t> sums(static_cast<size_t>(channels));
  for (int64_t b = 0; b < batch; ++b) {
    const T* xb = x + b * channels * image;
    std::fill(sums.begin(), sums.end(), 0);
    if (channels_last) {
      // A row of int32 sums a pixel at a time (vectorized), drained into int64 every 2^23 pixels.
      std::vector<int32_t> part(static_cast<size_t>(channels));
      for (int64_t p0 = 0; p0 < image; p0 += int64_t{1} << 23) {
        std::fill(part.begin(), part.end(), 0);
        const int64_t p1 = std::min(image, p0 + (int64_t{1} << 23));
        int32_t* __restrict acc = part.data();  // restrict: the bytes of X could alias it, which
        for (int64_t p = p0; p < p1; ++p) {     // keeps the compiler from vectorizing
          const T* __restrict px = xb + p * channels;
          for (int64_t c = 0; c < channels; ++c) acc[c] += px[c];
        }
        for (int64_t c = 0; c < channels; ++c) sums[static_cast<size_t>(c)] += part[static_cast<size_t>(c)];
      }
    } else {
      for (int64_t c = 0; c < channels; ++c) {
        const T* __restrict px = xb + c * image;
        int64_t s = 0;
        for (int64_t p = 0; p < image; ++p) s += px[p];
        sums[static_cast<size_t>(c)] = s;
      }
    }
    for (int64_t c = 0; c < channels; ++c) {
      const float v = static_cast<float>(static_cast<double>(sums[static_cast<size_t>(c)]) - static_cast<double>(image) * xz);
      y[b * channels + c] = static_cast<T>(std::min(hi, std::max(lo, std::nearbyint(v * multiplier) + yz)));
    }
  }
}

Status qlinear_global_average_pool(KernelContext& ctx) {
  if (ctx.num_inputs() < 4 || !ctx.has_input(0))
    return ctx.error("needs X, x_scale, x_zero_point, y_scale, y_zero_point");
  const Tensor& x = ctx.input(0);
  const DType t = x.dtype();
  if (t != DType::kUInt8 && t != DType::kInt8) return ctx.error(std::string("X must be uint8 or int8, got ") + dtype_name(t));
  if (x.rank() < 3) return ctx.error("X must have rank 3 or more (batch, channels, spatial), got " + shape_str(x.shape()));
  auto at = [&](size_t i) { return ctx.has_input(i) && ctx.input(i).defined() ? &ctx.input(i) : nullptr; };
  KILN_ASSIGN_OR_RETURN(float xs, per_tensor_parameter(at(1), 1, true, t));
  KILN_ASSIGN_OR_RETURN(float xz, per_tensor_parameter(at(2), 2, false, t));
  KILN_ASSIGN_OR_RETURN(float ys, per_tensor_parameter(at(3), 3, true, t));
  KILN_ASSIGN_OR_RETURN(float yz, per_tensor_parameter(at(4), 4, false, t));
  const bool channels_last = ctx.node.attr_int("channels_last", 0) != 0;
  const int64_t batch = x.dim(0), channels = channels_last ? x.dim(x.rank() - 1) : x.dim(1);
  Shape out(static_cast<size_t>(x.rank()), 1);
  out[0] = batch;
  out[channels_last ? out.size() - 1 : 1] = channels;
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, t, out));
  if (y->numel() == 0) return Status::ok();
  const int64_t image = x.numel() / (channels * batch);
  if (image == 0) return ctx.error("X " + shape_str(x.shape()) + " has no pixels to average");
  const float multiplier = xs / (ys * static_cast<float>(image));
  if (t == DType::kUInt8)
    pool(x.data<uint8_t>(), batch, channels, image, channels_last, xz, multiplier, yz, 0.0f, 255.0f, y->data<uint8_t>());
  else
    pool(x.data<int8_t>(), batch, channels, image, channels_last, xz, multiplier, yz, -128.0f, 127.0f, y->data<int8_t>());
  return Status::ok();
}

}  // namespace

KILN_REGISTER_TYPED_KERNEL("com.microsoft", "QLinearGlobalAveragePool", qlinear_global_average_pool,
                           {{0, {DType::kUInt8, DType::kInt8}}});

}  // namespace kiln
