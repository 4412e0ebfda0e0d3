// com.microsoft.NhwcMaxPool: MaxPool over channels-last 8-bit X [N, H, W, C] (ONNX Runtime's
// contrib op, which qlinear-nhwc writes between 8-bit convs): each output pixel is the lane-wise
// max of the window's input pixels that lie inside X (padding never wins a max), every pixel a
// contiguous run of C bytes, 32 a step held in a register across the window's taps. 2-D windows
// with MaxPool's attributes (strides, pads, dilations, ceil_mode, auto_pad).
#include <immintrin.h>

#include <algorithm>
#include <limits>
#include <type_traits>

#include "core/thread_pool.h"
#include "kernels/fast_path.h"
#include "kernels/kernel_util.h"
#include "kernels/ref/conv_util.h"

namespace kiln {
namespace {

template <typename T>
__m256i max_bytes(__m256i a, __m256i b) {
  return std::is_signed_v<T> ? _mm256_max_epi8(a, b) : _mm256_max_epu8(a, b);
}

// out[0, c) = the lane-wise max of the rows x cols input pixels from `first`, `row_step` values
// apart down and `col_step` across, 32 bytes a step in a register and stored once (s8 codes
// compare as signed bytes, u8 as unsigned).
template <typename T>
void max_of(const T* first, int64_t rows, int64_t cols, int64_t row_step, int64_t col_step, int64_t c, T* out) {
  int64_t i = 0;
  for (; i + 32 <= c; i += 32) {
    __m256i m = _mm256_set1_epi8(static_cast<char>(std::numeric_limits<T>::lowest()));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k)
        m = max_bytes<T>(m, _mm256_loadu_si256(
                                reinterpret_cast<const __m256i*>(first + r * row_step + k * col_step + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), m);
  }
  for (; i < c; ++i) {
    T m = std::numeric_limits<T>::lowest();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k) m = std::max(m, first[r * row_step + k * col_step + i]);
    out[i] = m;
  }
}

// Output rows [r0, r1) (image by image). A window's taps inside X are a rectangle, rows x cols
// pixels at fixed steps from its first: no list of taps, and the geometry in locals (the stores
// through byte pointers would make the compiler reload it from g at every pixel).
template <typename T>
void pool_rows(const T* x, T* y, const conv_util::Geometry& g, int64_t channels, int64_t r0, int64_t r1) {
  const int64_t ih = g.in[0], iw = g.in[1], oh = g.out[0], ow = g.out[1];
  const int64_t kh = g.kernel[0], kw = g.kernel[1], sh = g.strides[0], sw = g.strides[1];
  const int64_t dh = g.dilations[0], dw = g.dilations[1], ph = g.pads[0], pw = g.pads[1];
  const int64_t row_step = dh * iw * channels, col_step = dw * channels;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t n = r / oh, oy = r % oh;
    int64_t ky0, ky1;
    conv_util::indices_inside(kh, ih, dh, oy * sh - ph, &ky0, &ky1);
    const T* row = ky1 > ky0 ? x + (n * ih + oy * sh - ph + ky0 * dh) * iw * channels : x;
    T* out = y + (n * oh + oy) * ow * channels;
    for (int64_t ox = 0; ox < ow; ++ox, out += channels) {
      int64_t kx0, kx1;
      conv_util::indices_inside(kw, iw, dw, ox * sw - pw, &kx0, &kx1);
      if (ky1 == ky0 || kx1 == kx0)  // a window wholly in the padding: the lowest code, as MaxPool's reference
        std::fill(out, out + channels, std::numeric_limits<T>::lowest());
      else
        max_of(row + (ox * sw - pw + kx0 * dw) * channels, ky1 - ky0, kx1 - kx0, row_step, col_step, channels, out);
    }
  }
}

Status nhwc_max_pool(KernelContext& ctx) {
  if (ctx.num_inputs() < 1 || !ctx.has_input(0)) return ctx.error("NhwcMaxPool needs input X");
  const Tensor& x = ctx.input(0);
  if (x.dtype() != DType::kUInt8 && x.dtype() != DType::kInt8)
    return ctx.error(std::string("NhwcMaxPool takes uint8 or int8 X, got ") + dtype_name(x.dtype()));
  if (x.rank() != 4) return ctx.error("NhwcMaxPool needs X [N, H, W, C], got " + shape_str(x.shape()));
  if (!ctx.node.has_attr("kernel_shape")) return ctx.error("kernel_shape attribute is required");
  auto geo = conv_util::read_geometry(ctx.node, {x.dim(1), x.dim(2)}, {});
  if (!geo) return ctx.error(geo.status().message());
  const Status st = conv_util::compute_output(*geo, ctx.node.attr_string("auto_pad", "NOTSET"),
                                              ctx.node.attr_int("ceil_mode", 0) != 0);
  if (!st.ok()) return ctx.error(st.message());
  const int64_t n = x.dim(0), c = x.dim(3);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, x.dtype(), {n, geo->out[0], geo->out[1], c}));
  const int64_t rows = n * geo->out[0];
  auto run = [&](int64_t r0, int64_t r1) {
    if (x.dtype() == DType::kUInt8)
      pool_rows(x.data<uint8_t>(), y->data<uint8_t>(), *geo, c, r0, r1);
    else
      pool_rows(x.data<int8_t>(), y->data<int8_t>(), *geo, c, r0, r1);
  };
  if (ctx.pool && rows > 1 && y->numel() > (1 << 14))
    ctx.pool->parallel_for(rows, 1, run);
  else
    run(0, rows);
  return Status::ok();
}

}  // namespace

KILN_REGISTER_TYPED_KERNEL("com.microsoft", "NhwcMaxPool", nhwc_max_pool, {{0, {DType::kUInt8, DType::kInt8}}});
KILN_REGISTER_FAST_PATH("com.microsoft", "NhwcMaxPool", always_fast);  // C bytes a step, over the pool

}  // namespace kiln
