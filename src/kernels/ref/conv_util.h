// Geometry shared by the reference Conv, ConvTranspose, DeformConv and pooling kernels: reading
// kernel/stride/dilation/pad attributes, auto_pad, output sizes, and im2col over 1-3 spatial dims.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln {
namespace conv_util {

struct Geometry {
  int64_t dims = 0;                              // spatial rank
  Shape in, kernel, strides, dilations, pads, out;  // pads: begins then ends
};

inline std::string vec_str(const Shape& v) { return shape_str(v); }

// `node`'s ints attribute `name` into `to`, or `fallback` when it is absent. Reads the attribute in
// place (no copy of it), so that kernels re-reading their geometry every run allocate nothing.
inline void read_ints_or(const ir::Node& node, const char* name, const Shape& fallback, Shape& to) {
  const ir::Attribute* a = node.attr(name);
  if (a) {
    to.assign(a->ints.begin(), a->ints.end());
  } else {
    to = fallback;
  }
}

// Reads kernel_shape (or `kernel` when the attribute is absent), strides, dilations and pads,
// checking lengths and signs. Does not compute `out`.
inline Result<Geometry> read_geometry(const ir::Node& node, const Shape& in, const Shape& kernel) {
  Geometry g;
  g.dims = static_cast<int64_t>(in.size());
  g.in = in;
  read_ints_or(node, "kernel_shape", kernel, g.kernel);
  read_ints_or(node, "strides", Shape(g.dims, 1), g.strides);
  read_ints_or(node, "dilations", Shape(g.dims, 1), g.dilations);
  read_ints_or(node, "pads", Shape(2 * g.dims, 0), g.pads);
  if (static_cast<int64_t>(g.kernel.size()) != g.dims)
    return Status::error("kernel_shape " + vec_str(g.kernel) + " does not match " +
                         std::to_string(g.dims) + " spatial dims");
  if (static_cast<int64_t>(g.strides.size()) != g.dims)
    return Status::error("strides " + vec_str(g.strides) + " does not match " +
                         std::to_string(g.dims) + " spatial dims");
  if (static_cast<int64_t>(g.dilations.size()) != g.dims)
    return Status::error("dilations " + vec_str(g.dilations) + " does not match " +
                         std::to_string(g.dims) + " spatial dims");
  if (static_cast<int64_t>(g.pads.size()) != 2 * g.dims)
    return Status::error("pads " + vec_str(g.pads) + " should have " + std::to_string(2 * g.dims) +
                         " values");
  for (int64_t i = 0; i < g.dims; ++i) {
    if (g.kernel[i] <= 0 || g.strides[i] <= 0 || g.dilations[i] <= 0)
      return Status::error("kernel_shape, strides and dilations must be positive");
    if (g.pads[i] < 0 || g.pads[i + g.dims] < 0) return Status::error("pads must be non-negative");
    if (g.kernel[i] > (int64_t{1} << 32) || g.dilations[i] > (int64_t{1} << 32) ||
        g.pads[i] > (int64_t{1} << 40) || g.pads[i + g.dims] > (int64_t{1} << 40))
      return Status::error("kernel, dilation or pad value too large");
  }
  return g;
}

// Indices i in [lo, hi) of [0, count) whose position shift + i * step lies in [0, limit): the
// kernel taps of an output that land inside the input, the input columns of a tap that land
// inside the output (step > 0).
inline void indices_inside(int64_t count, int64_t limit, int64_t step, int64_t shift, int64_t* lo, int64_t* hi) {
  *lo = shift >= 0 ? 0 : (-shift + step - 1) / step;
  *hi = limit - 1 - shift < 0 ? 0 : (limit - 1 - shift) / step + 1;
  *lo = std::min(*lo, count);
  *hi = std::min(std::max(*hi, *lo), count);
}

inline int64_t effective_kernel(const Geometry& g, int64_t i) {
  return (g.kernel[i] - 1) * g.dilations[i] + 1;
}

// Output sizes and actual pads for Conv-style (ceil_mode false) or pooling (ceil_mode) windows.
inline Status compute_output(Geometry& g, const std::string& auto_pad, bool ceil_mode) {
  g.out.assign(g.dims, 0);
  for (int64_t i = 0; i < g.dims; ++i) {
    const int64_t ek = effective_kernel(g, i), s = g.strides[i];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      g.out[i] = (g.in[i] + s - 1) / s;
      const int64_t total = std::max<int64_t>(0, (g.out[i] - 1) * s + ek - g.in[i]);
      const int64_t small = total / 2, big = total - small;
      g.pads[i] = auto_pad == "SAME_UPPER" ? small : big;
      g.pads[i + g.dims] = auto_pad == "SAME_UPPER" ? big : small;
    } else if (auto_pad == "VALID") {
      g.pads[i] = g.pads[i + g.dims] = 0;
      g.out[i] = g.in[i] >= ek ? (g.in[i] - ek) / s + 1 : 0;
    } else if (auto_pad == "NOTSET" || auto_pad.empty()) {
      const int64_t span = g.in[i] + g.pads[i] + g.pads[i + g.dims] - ek;
      if (span < 0) {
        g.out[i] = 0;
      } else if (ceil_mode) {
        g.out[i] = (span + s - 1) / s + 1;
        // The last window must start inside the input or its left padding.
        if ((g.out[i] - 1) * s >= g.in[i] + g.pads[i]) --g.out[i];
      } else {
        g.out[i] = span / s + 1;
      }
    } else {
      return Status::error("unknown auto_pad '" + auto_pad + "'");
    }
  }
  return Status::ok();
}

// Pads the spatial description to exactly 3 dims (leading 1s) so kernels need one loop nest.
struct Geo3 {
  int64_t in[3], k[3], s[3], d[3], pb[3], out[3];
};
inline Geo3 to_geo3(const Geometry& g) {
  Geo3 r;
  const int64_t off = 3 - g.dims;
  for (int64_t i = 0; i < 3; ++i) {
    const bool real = i >= off;
    const int64_t j = i - off;
    r.in[i] = real ? g.in[j] : 1;
    r.k[i] = real ? g.kernel[j] : 1;
    r.s[i] = real ? g.strides[j] : 1;
    r.d[i] = real ? g.dilations[j] : 1;
    r.pb[i] = real ? g.pads[j] : 0;
    r.out[i] = real ? g.out[j] : 1;
  }
  return r;
}

// col[(c*K + kpos) * cols + (row - r0) * out[2] + ow] = x[c][input position] or 0 in padding, for
// channels [c0, c1) and output rows [r0, r1) (row = od * out[1] + oh; cols = (r1 - r0) * out[2]).
template <typename T>
void im2col_rows(const T* x, int64_t c0, int64_t c1, const Geo3& g, int64_t r0, int64_t r1, T* col) {
  const int64_t in_sz = g.in[0] * g.in[1] * g.in[2];
  const int64_t ksz = g.k[0] * g.k[1] * g.k[2];
  const int64_t cols = (r1 - r0) * g.out[2];
  for (int64_t c = c0; c < c1; ++c) {
    const T* xc = x + c * in_sz;
    for (int64_t kd = 0; kd < g.k[0]; ++kd)
      for (int64_t kh = 0; kh < g.k[1]; ++kh)
        for (int64_t kw = 0; kw < g.k[2]; ++kw) {
          T* dst = col + (c * ksz + (kd * g.k[1] + kh) * g.k[2] + kw) * cols;
          for (int64_t row = r0; row < r1; ++row) {
            const int64_t id = row / g.out[1] * g.s[0] - g.pb[0] + kd * g.d[0];
            const int64_t ih = row % g.out[1] * g.s[1] - g.pb[1] + kh * g.d[1];
            T* drow = dst + (row - r0) * g.out[2];
            if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1]) {
              std::fill(drow, drow + g.out[2], T(0));
              continue;
            }
            const T* xrow = xc + (id * g.in[1] + ih) * g.in[2];
            for (int64_t ow = 0; ow < g.out[2]; ++ow) {
              const int64_t iw = ow * g.s[2] - g.pb[2] + kw * g.d[2];
              drow[ow] = (iw >= 0 && iw < g.in[2]) ? xrow[iw] : T(0);
            }
          }
        }
  }
}

// The same for every output position: col[(c*K + kpos) * OUT + opos].
template <typename T>
void im2col(const T* x, int64_t c0, int64_t c1, const Geo3& g, T* col) {
  im2col_rows(x, c0, c1, g, 0, g.out[0] * g.out[1], col);
}

}  // namespace conv_util
}  // namespace kiln
