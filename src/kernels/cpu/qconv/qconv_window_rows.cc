// Window rows: the staging of a conv of an image's few channels (qconv.h, folds_window_rows).
// A tap's C channels take a whole quad of the tiles' steps, of which only C bytes are real: an
// RGB stem spends a quarter of its vpdpbusd on padding. Staged as window rows, staged pixel
// (oy, ix) holds the kernel's column under it instead, P = kernel_h x C bytes (byte dy C + c:
// channel c of input row oy stride_h + dy dilation_h, pads at zx), so that output pixel (oy, ox)'s
// window is the kernel_w x P contiguous bytes from staged pixel ox stride_w on: a 1x1 conv of
// kernel_w x P channels in whole quads, which straddle pixels (resnet50's 7x7 stem: 37 quads a
// window against 49; a 3x3 one, mobilenet_v2's: 7 against 9). W is packed in that order
// (window_rows_weights), zero past the window, so that a last quad's bytes of the next pixel add
// nothing.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/qconv/qconv.h"
#include "kernels/ref/quantize.h"

namespace kiln::qconv {
namespace {

// A staged pixel's bytes at most: two 16-byte blocks of the transpose below.
constexpr int64_t kMaxPixelBytes = 32;

int64_t pixel_bytes(const Geometry& g) { return g.kernel_h * g.channels; }

// The 16 planes v[0, 16) of 32 pixels (a plane's byte p: pixel p; 128-bit lane 0 pixels 0-15,
// lane 1 pixels 16-31) transposed: v[q] holds pixel q's 16 planes in lane 0 and pixel 16 + q's
// in lane 1. Bytes to 16-bit pairs of planes, to quads, to eights, to sixteen.
void transpose_planes(__m256i (&v)[16]) {
  __m256i a[16], b[16];
  for (int k = 0; k < 8; ++k) {  // a[k]: pixels 0-7 (of the lane), planes 2k and 2k + 1; a[8 + k]: pixels 8-15
    a[k] = _mm256_unpacklo_epi8(v[2 * k], v[2 * k + 1]);
    a[8 + k] = _mm256_unpackhi_epi8(v[2 * k], v[2 * k + 1]);
  }
  for (int h = 0; h < 2; ++h)  // b[4Q + k]: pixels 4Q..4Q+3, planes 4k..4k+3
    for (int k = 0; k < 4; ++k) {
      b[8 * h + k] = _mm256_unpacklo_epi16(a[8 * h + 2 * k], a[8 * h + 2 * k + 1]);
      b[8 * h + 4 + k] = _mm256_unpackhi_epi16(a[8 * h + 2 * k], a[8 * h + 2 * k + 1]);
    }
  for (int q = 0; q < 4; ++q) {
    const __m256i lo01 = _mm256_unpacklo_epi32(b[4 * q], b[4 * q + 1]);      // pixels 4q, 4q+1: planes 0-7
    const __m256i hi01 = _mm256_unpackhi_epi32(b[4 * q], b[4 * q + 1]);      // pixels 4q+2, 4q+3
    const __m256i lo23 = _mm256_unpacklo_epi32(b[4 * q + 2], b[4 * q + 3]);  // the same pixels' planes 8-15
    const __m256i hi23 = _mm256_unpackhi_epi32(b[4 * q + 2], b[4 * q + 3]);
    v[4 * q] = _mm256_unpacklo_epi64(lo01, lo23), v[4 * q + 1] = _mm256_unpackhi_epi64(lo01, lo23);
    v[4 * q + 2] = _mm256_unpacklo_epi64(hi01, hi23), v[4 * q + 3] = _mm256_unpackhi_epi64(hi01, hi23);
  }
}

// out[i p + j] = planes[j][i] ^ flip, for n pixels of p bytes (p <= kMaxPixelBytes): 32 pixels a
// step through transpose_planes, each pixel's 16-byte block(s) stored in pixel order, so that the
// bytes a store writes past its pixel are the next pixel's, rewritten by its own store. `room`
// pixels may be written (the row's padding after the n, filled after this); the steps stop
// where a store would pass them, or a load the planes (the rest one byte at a time).
void interleave_planes(const uint8_t* const* planes, int64_t p, int64_t n, int64_t room, uint8_t flip, uint8_t* out) {
  const int64_t blocks = (p + 15) / 16;
  const __m256i flips = _mm256_set1_epi8(static_cast<char>(flip));
  int64_t i = 0;
  for (; i + 32 <= n && p * (i + 31) + 16 * blocks <= p * room; i += 32) {
    __m256i v[2][16];
    for (int64_t b = 0; b < blocks; ++b) {
      for (int64_t j = 0; j < 16; ++j) {
        const uint8_t* plane = 16 * b + j < p ? planes[16 * b + j] + i : nullptr;
        v[b][j] = plane ? _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(plane)), flips)
                        : _mm256_setzero_si256();
      }
      transpose_planes(v[b]);
    }
    for (int half = 0; half < 2; ++half)
      for (int64_t q = 0; q < 16; ++q)
        for (int64_t b = 0; b < blocks; ++b) {
          const __m128i bytes = half ? _mm256_extracti128_si256(v[b][q], 1) : _mm256_castsi256_si128(v[b][q]);
          _mm_storeu_si128(reinterpret_cast<__m128i*>(out + p * (i + 16 * half + q) + 16 * b), bytes);
        }
  }
  for (; i < n; ++i)
    for (int64_t j = 0; j < p; ++j) out[i * p + j] = planes[j][i] ^ flip;
}

// A row of n channels-last pixels of C (1 to 3) bytes taken apart into C planes, `plane` bytes
// apart: 16 pixels a step, each plane's 16 bytes gathered from the step's C input vectors by
// byte shuffles.
void channels_apart(const uint8_t* from, int64_t channels, int64_t n, uint8_t* to, int64_t plane) {
  alignas(16) int8_t order[3][3][16];  // [plane][input vector][byte]: the input byte, or none
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t v = 0; v < channels; ++v)
      for (int64_t k = 0; k < 16; ++k) {
        const int64_t at = k * channels + c - 16 * v;
        order[c][v][k] = at >= 0 && at < 16 ? static_cast<int8_t>(at) : -1;
      }
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m128i in[3];
    for (int64_t v = 0; v < channels; ++v)
      in[v] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + (i * channels + 16 * v)));
    for (int64_t c = 0; c < channels; ++c) {
      __m128i bytes = _mm_setzero_si128();
      for (int64_t v = 0; v < channels; ++v) {
        const __m128i pick = _mm_load_si128(reinterpret_cast<const __m128i*>(order[c][v]));
        bytes = _mm_or_si128(bytes, _mm_shuffle_epi8(in[v], pick));
      }
      _mm_storeu_si128(reinterpret_cast<__m128i*>(to + c * plane + i), bytes);
    }
  }
  for (; i < n; ++i)
    for (int64_t c = 0; c < channels; ++c) to[c * plane + i] = from[i * channels + c];
}

}  // namespace

// Where the quads it saves outweigh its staging: per output pixel, the tiles' steps saved (a
// quad a window for each block of 16 filters) against some 4 of the staging's shuffles and
// stores a block of 16 bytes of a staged pixel, stride_w staged pixels an output one. resnet50's
// stem (64 filters, 12 quads of 49 saved) ran 9-10 % faster from float on AVX-512 VNNI, 19-21 % on
// AVX-VNNI and AVX2 (Zen 5, 2 threads, kiln_bench_qconv); mobilenet_v2's (32 filters, 2 of 9)
// ran 5-20 % slower, its staging two fifths of its time.
bool folds_window_rows(const Geometry& g, Tile tile) {
  if (tile != Tile::kAvx512Vnni && tile != Tile::kAvxVnni && tile != Tile::kAvx2Bytes) return false;
  const int64_t p = pixel_bytes(g);
  if (g.channels >= 4 || g.dilation_w != 1 || p > kMaxPixelBytes) return false;
  const int64_t saved = g.kernel_h * g.kernel_w - (g.kernel_w * p + 3) / 4, blocks = (g.filters + 15) / 16;
  return saved > 0 && blocks * saved >= 4 * g.stride_w * ((p + 15) / 16);
}

Geometry window_rows_geometry(const Geometry& g) {
  Geometry r = g;
  r.channels = g.kernel_w * pixel_bytes(g);
  r.kernel_h = r.kernel_w = 1, r.stride_h = 1, r.dilation_h = r.dilation_w = 1, r.pad_top = r.pad_left = 0;
  r.in_h = g.out_h, r.in_w = staged_columns(g);
  return r;
}

std::vector<int8_t> window_rows_weights(const int8_t* w, const Geometry& g) {
  const int64_t p = pixel_bytes(g), window = g.kernel_w * p;
  std::vector<int8_t> r(static_cast<size_t>(g.filters * window));
  for (int64_t m = 0; m < g.filters; ++m)
    for (int64_t c = 0; c < g.channels; ++c)
      for (int64_t ky = 0; ky < g.kernel_h; ++ky)
        for (int64_t kx = 0; kx < g.kernel_w; ++kx)
          r[static_cast<size_t>(m * window + kx * p + ky * g.channels + c)] =
              w[((m * g.channels + c) * g.kernel_h + ky) * g.kernel_w + kx];
  return r;
}

void stage_window_rows(const Geometry& g, const void* x, bool x_signed, bool x_nhwc, int32_t zx, std::vector<char>& buf,
                       Staged& s, ThreadPool* pool, const float* quantize_scale) {
  const int64_t channels = g.channels, in_h = g.in_h, in_w = g.in_w, p = pixel_bytes(g);
  const int64_t width = staged_columns(g);  // (dilation_w 1: folds_window_rows)
  const uint8_t flip = x_signed ? 0x80 : 0, code_zx = static_cast<uint8_t>(zx);  // zx as X holds it
  // X as planes of codes of X's type ([N, C, H, W]): NCHW codes where they are; a float image
  // quantized (QuantizeLinear's rule) and channels-last codes taken apart, each row once.
  thread_local std::vector<uint8_t> planes, pad;
  const uint8_t* codes = static_cast<const uint8_t*>(x);
  if (quantize_scale || x_nhwc) {
    planes.resize(static_cast<size_t>(g.batch * channels * in_h * in_w));
    uint8_t* to = planes.data();
    const int64_t rows = g.batch * (quantize_scale ? channels : 1) * in_h;  // plane rows, or image rows
    auto plane_rows = [=](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        if (quantize_scale) {
          const float* from = static_cast<const float*>(x) + r * in_w;
          quantize_row_8bit(from, in_w, *quantize_scale, zx, x_signed, to + r * in_w);
        } else {
          const int64_t n = r / in_h, iy = r % in_h;
          channels_apart(static_cast<const uint8_t*>(x) + r * in_w * channels, channels, in_w,
                         to + (n * channels * in_h + iy) * in_w, in_h * in_w);
        }
      }
    };
    if (pool && rows * in_w * channels > (1 << 14))
      pool->parallel_for(rows, 1, plane_rows);
    else
      plane_rows(0, rows);
    codes = planes.data();
  }
  pad.assign(static_cast<size_t>(in_w), code_zx);  // a kernel row above or below X
  // Every staged row, and 4 bytes past the last (its last window's last quad reads them).
  const int64_t rows = g.batch * g.out_h, row_bytes = width * p;
  buf.resize(static_cast<size_t>(rows * row_bytes + 4));
  uint8_t* data = reinterpret_cast<uint8_t*>(buf.data());
  const uint8_t fill = code_zx ^ flip;
  std::fill(data + rows * row_bytes, data + rows * row_bytes + 4, fill);
  const uint8_t* pad_row = pad.data();
  auto stage_rows = [=, &g](int64_t r0, int64_t r1) {
    const uint8_t* from[kMaxPixelBytes];
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / g.out_h, oy = r % g.out_h;
      for (int64_t dy = 0; dy < g.kernel_h; ++dy) {
        const int64_t iy = oy * g.stride_h + dy * g.dilation_h - g.pad_top;
        for (int64_t c = 0; c < channels; ++c)
          from[dy * channels + c] = iy >= 0 && iy < in_h ? codes + ((n * channels + c) * in_h + iy) * in_w : pad_row;
      }
      uint8_t* row = data + r * row_bytes;
      std::fill(row, row + g.pad_left * p, fill);
      interleave_planes(from, p, in_w, width - g.pad_left, flip, row + g.pad_left * p);
      std::fill(row + (g.pad_left + in_w) * p, row + row_bytes, fill);
    }
  };
  if (pool && rows > 1 && rows * row_bytes > (1 << 14))
    pool->parallel_for(rows, 1, stage_rows);
  else
    stage_rows(0, rows);
  s.xp = buf.data(), s.padded_h = g.out_h, s.padded_w = width, s.cp = p;
}

}  // namespace kiln::qconv
