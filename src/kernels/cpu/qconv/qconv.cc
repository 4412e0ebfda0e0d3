// The 8-bit conv (qconv.h): weight packing, the staging of the input into a padded channels-last
// u8 buffer, and the ISA's tile driver.
#include "kernels/cpu/qconv/qconv.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/ref/quantize.h"

namespace kiln::qconv {
namespace {

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// `count` channels-last pixels of `channels` u8 values (xor `flip`) to `cp` values of T each,
// the rest `fill`. Every parameter is a local: stores through a char type may alias anything
// the loop would otherwise reload. Pixels of 1 to 3 channels (an RGB input) padded to a quad
// go four at a time through one byte shuffle, a byte loop costing more than the conv's taps.
template <typename T>
void stage_pixels(T* to, const uint8_t* from, int64_t count, int64_t channels, int64_t cp, uint8_t flip, T fill) {
  int64_t i = 0;
  if (sizeof(T) == 1 && cp == 4 && channels < 4) {
    alignas(16) int8_t order[16];  // output byte 4 p + c <- input byte channels p + c, or none
    for (int b = 0; b < 16; ++b) order[b] = b % 4 < channels ? static_cast<int8_t>(channels * (b / 4) + b % 4) : -1;
    const __m128i shuffle = _mm_load_si128(reinterpret_cast<const __m128i*>(order));
    const __m128i pad = _mm_andnot_si128(_mm_cmpgt_epi8(shuffle, _mm_set1_epi8(-1)), _mm_set1_epi8(static_cast<char>(fill)));
    const __m128i flips = _mm_and_si128(_mm_cmpgt_epi8(shuffle, _mm_set1_epi8(-1)), _mm_set1_epi8(static_cast<char>(flip)));
    for (; (count - i) * channels >= 16; i += 4) {  // the 16-byte load stays inside the row
      const __m128i in = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i * channels));
      const __m128i out = _mm_or_si128(_mm_xor_si128(_mm_shuffle_epi8(in, shuffle), flips), pad);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(to + i * 4), out);
    }
  }
  for (; i < count; ++i)
    for (int64_t c = 0; c < cp; ++c) to[i * cp + c] = c < channels ? static_cast<T>(from[i * channels + c] ^ flip) : fill;
}

// A row of float NCHW X (channel planes `plane` floats apart) staged: each channel's row
// quantized by QuantizeLinear's rule (scale, zx; s8 codes where x_signed, then xor flip), then
// interleaved into `cp` values a pixel, `fill` past the channels. An image's 1 to 4 channels go
// 16 pixels a step into u8 quads; other layouts a value at a time.
template <typename T>
void stage_quantized_row(T* pixels, const float* x, int64_t plane, int64_t in_w, int64_t channels, int64_t cp,
                         float scale, int32_t zx, bool x_signed, uint8_t flip, T fill) {
  thread_local std::vector<uint8_t> codes;
  codes.resize(static_cast<size_t>(channels * in_w));
  for (int64_t c = 0; c < channels; ++c) quantize_row_8bit(x + c * plane, in_w, scale, zx, x_signed, &codes[c * in_w]);
  int64_t ix = 0;
  if (sizeof(T) == 1 && cp == 4) {
    const __m128i pad = _mm_set1_epi8(static_cast<char>(fill)), flips = _mm_set1_epi8(static_cast<char>(flip));
    for (; ix + 16 <= in_w; ix += 16) {
      __m128i v[4];
      for (int64_t c = 0; c < 4; ++c) {
        const __m128i* row = reinterpret_cast<const __m128i*>(&codes[c * in_w + ix]);
        v[c] = c < channels ? _mm_xor_si128(_mm_loadu_si128(row), flips) : pad;
      }
      const __m128i ab_lo = _mm_unpacklo_epi8(v[0], v[1]), ab_hi = _mm_unpackhi_epi8(v[0], v[1]);
      const __m128i cd_lo = _mm_unpacklo_epi8(v[2], v[3]), cd_hi = _mm_unpackhi_epi8(v[2], v[3]);
      __m128i* out = reinterpret_cast<__m128i*>(pixels + ix * 4);
      _mm_storeu_si128(out, _mm_unpacklo_epi16(ab_lo, cd_lo));
      _mm_storeu_si128(out + 1, _mm_unpackhi_epi16(ab_lo, cd_lo));
      _mm_storeu_si128(out + 2, _mm_unpacklo_epi16(ab_hi, cd_hi));
      _mm_storeu_si128(out + 3, _mm_unpackhi_epi16(ab_hi, cd_hi));
    }
  }
  for (; ix < in_w; ++ix)
    for (int64_t c = 0; c < cp; ++c)
      pixels[ix * cp + c] = c < channels ? static_cast<T>(codes[c * in_w + ix] ^ flip) : fill;
}

// Stages X into a padded channels-last buffer of T (u8 for VNNI, int16 for AVX2) with whole
// steps of `step` channels (qconv.h): zx everywhere the input is not. With quantize_scale, X is
// float32 NCHW, quantized while staged. Rows of the buffer go to the threads, each written once.
template <typename T>
void stage(const Geometry& g, const void* x, bool x_signed, bool x_nhwc, int32_t zx, int64_t step,
           std::vector<char>& buf, Staged& s, ThreadPool* pool, const float* quantize_scale = nullptr) {
  s.cp = round_up(g.channels, step);
  s.padded_h = std::max(g.in_h + g.pad_top, (g.out_h - 1) * g.stride_h + (g.kernel_h - 1) * g.dilation_h + 1);
  s.padded_w = staged_columns(g);
  const uint8_t flip = x_signed ? 0x80 : 0;  // s8 + 128 as u8
  const T fill = static_cast<T>(static_cast<uint8_t>(zx) ^ flip);
  const int64_t row_values = s.padded_w * s.cp;
  buf.resize(static_cast<size_t>(g.batch * s.padded_h * row_values) * sizeof(T));
  T* data = reinterpret_cast<T*>(buf.data());
  const uint8_t* in = static_cast<const uint8_t*>(x);
  const int64_t channels = g.channels, cp = s.cp, padded_h = s.padded_h, in_h = g.in_h, in_w = g.in_w;
  const int64_t pad_top = g.pad_top, pad_left = g.pad_left;
  auto stage_rows = [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / padded_h, iy = r % padded_h - pad_top;
      T* row = data + r * row_values;
      if (iy < 0 || iy >= in_h) {
        std::fill(row, row + row_values, fill);
        continue;
      }
      std::fill(row, row + pad_left * cp, fill);
      std::fill(row + (pad_left + in_w) * cp, row + row_values, fill);
      T* pixels = row + pad_left * cp;
      if (quantize_scale) {
        stage_quantized_row(pixels, static_cast<const float*>(x) + (n * channels * in_h + iy) * in_w, in_h * in_w, in_w,
                            channels, cp, *quantize_scale, zx, x_signed, flip, fill);
      } else if (x_nhwc && sizeof(T) == 1 && !flip && cp == channels) {
        std::memcpy(pixels, in + (n * in_h + iy) * in_w * channels, static_cast<size_t>(in_w * channels));
      } else if (x_nhwc) {
        stage_pixels(pixels, in + (n * in_h + iy) * in_w * channels, in_w, channels, cp, flip, fill);
      } else {
        for (int64_t ix = 0; ix < in_w; ++ix)
          for (int64_t c = channels; c < cp; ++c) pixels[ix * cp + c] = fill;
        for (int64_t c = 0; c < channels; ++c) {
          const uint8_t* src = in + ((n * channels + c) * in_h + iy) * in_w;
          for (int64_t ix = 0; ix < in_w; ++ix) pixels[ix * cp + c] = static_cast<T>(src[ix] ^ flip);
        }
      }
    }
  };
  const int64_t rows = g.batch * s.padded_h;
  if (pool && rows > 1 && rows * row_values > (1 << 14))
    pool->parallel_for(rows, 1, stage_rows);
  else
    stage_rows(0, rows);
  s.xp = buf.data();
}

// Whether X can be read where it is: channels-last u8 in whole quads, and no window leaves it.
bool readable_in_place(const Geometry& g, bool x_signed, bool x_nhwc) {
  return x_nhwc && !x_signed && g.channels % 4 == 0 && g.pad_top == 0 && g.pad_left == 0 &&
         (g.out_h - 1) * g.stride_h + (g.kernel_h - 1) * g.dilation_h < g.in_h &&
         (g.out_w - 1) * g.stride_w + (g.kernel_w - 1) * g.dilation_w < g.in_w;
}

// Y channels-last [pixels x filters] to NCHW, per image.
void to_nchw(const Geometry& g, const void* from, size_t elem, void* to) {
  const int64_t hw = g.out_h * g.out_w;
  const char* src = static_cast<const char*>(from);
  char* dst = static_cast<char*>(to);
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t p = 0; p < hw; ++p)
      for (int64_t m = 0; m < g.filters; ++m)
        std::memcpy(dst + ((n * g.filters + m) * hw + p) * elem, src + ((n * hw + p) * g.filters + m) * elem, elem);
}

bool seven_bit(const int8_t* w, int64_t count) {
  return std::all_of(w, w + count, [](int8_t v) { return v >= -64 && v <= 64; });
}

}  // namespace

int64_t staged_columns(const Geometry& g) {
  return std::max(g.in_w + g.pad_left, (g.out_w - 1) * g.stride_w + (g.kernel_w - 1) * g.dilation_w + 1);
}

Tile best_tile(const int8_t* w, int64_t count, const Geometry& g) {
  if (cpu_features().has_avx512_vnni() || cpu_features().has_avx_vnni()) return best_direct_tile(w, count);
  const char* off = std::getenv("KILN_DISABLE_WINOGRAD");
  if ((off == nullptr || *off == '\0' || std::string_view(off) == "0") && tile_fits(Tile::kWinogradAvx2, g))
    return Tile::kWinogradAvx2;
  return best_direct_tile(w, count);
}

Tile best_direct_tile(const int8_t* w, int64_t count) {
  if (cpu_features().has_avx512_vnni()) return Tile::kAvx512Vnni;
  if (cpu_features().has_avx_vnni()) return Tile::kAvxVnni;
  return seven_bit(w, count) ? Tile::kAvx2Bytes : Tile::kAvx2;
}

int64_t winograd_u_bytes(const Geometry& g) { return 16 * round_up(g.channels, 16) * round_up(g.filters, 16) * 2; }

bool winograd_pays(const Geometry& g) {
  const int64_t u = winograd_u_bytes(g), tiles = g.batch * ((g.out_h + 1) / 2) * ((g.out_w + 1) / 2);
  return u <= kWinogradCachedBytes || u <= tiles * kWinogradBytesPerTile;
}

bool tile_fits(Tile tile, const Geometry& g) {
  if (tile == Tile::kDepthwiseVnniPixels)  // a pixel's channels are a zmm's 16 or 32 bytes, X's too
    return (g.channels == 16 || g.channels == 32) && g.stride_w == 1 && g.dilation_w == 1;
  if (tile != Tile::kWinogradAvx2) return true;
  // Channels go in 16s: below 16 the padding costs more than Winograd saves.
  return g.kernel_h == 3 && g.kernel_w == 3 && g.stride_h == 1 && g.stride_w == 1 && g.dilation_h == 1 &&
         g.dilation_w == 1 && g.channels >= 16 && g.channels <= kWinogradMaxChannels;
}

Tile best_depthwise_tile(const int8_t* w, int64_t count, const Geometry& g, bool activated) {
  // 32 channels or fewer fill half a zmm block at most: a ymm block of 32 runs them in less time
  // (mobilenet_v2's and efficientnet_b0's 32 at 112x112: 45.6 against 52.5 us, Zen 5, 2 threads),
  // as two pixels a zmm do (kDepthwiseVnniPixels, without the ymm tile's pairs: 48.8 against
  // 43.5), but for an activation, which the ymm tile runs 8 lanes at a time (efficientnet_b0's
  // SiLU: 123 -> 82 us).
  const bool ymm = g.channels <= 32 && cpu_features().has_avx_vnni();
  if (cpu_features().has_avx512_vnni() && tile_fits(Tile::kDepthwiseVnniPixels, g) && (activated || !ymm))
    return Tile::kDepthwiseVnniPixels;
  if (cpu_features().has_avx512_vnni() && !ymm)
    return Tile::kDepthwiseVnni;
  if (cpu_features().has_avx_vnni()) return Tile::kDepthwiseAvxVnni;
  return seven_bit(w, count) ? Tile::kDepthwiseAvx2Bytes : Tile::kDepthwise;
}

std::vector<Tile> available_tiles(bool depthwise) {
  std::vector<Tile> tiles;
  if (cpu_features().has_avx512_vnni()) tiles.push_back(depthwise ? Tile::kDepthwiseVnni : Tile::kAvx512Vnni);
  if (cpu_features().has_avx512_vnni() && depthwise) tiles.push_back(Tile::kDepthwiseVnniPixels);
  if (cpu_features().has_avx_vnni()) tiles.push_back(depthwise ? Tile::kDepthwiseAvxVnni : Tile::kAvxVnni);
  if (depthwise)
    tiles.insert(tiles.end(), {Tile::kDepthwiseAvx2Bytes, Tile::kDepthwise});
  else
    tiles.insert(tiles.end(), {Tile::kWinogradAvx2, Tile::kAvx2Bytes, Tile::kAvx2});
  return tiles;
}

const std::vector<uint8_t>& zero_point_row(const Geometry& g, int64_t stride, int32_t zx, int64_t slack) {
  thread_local std::vector<uint8_t> row;
  row.assign(static_cast<size_t>(g.in_w * stride + slack), static_cast<uint8_t>(zx));
  return row;
}

bool needs_seven_bit_weights(Tile tile) { return tile == Tile::kAvx2Bytes || tile == Tile::kDepthwiseAvx2Bytes; }

const char* tile_name(Tile tile) {
  switch (tile) {
    case Tile::kAvx512Vnni: return "avx512_vnni";
    case Tile::kAvxVnni: return "avx_vnni";
    case Tile::kAvx2: return "avx2";
    case Tile::kAvx2Bytes: return "avx2_bytes";
    case Tile::kWinogradAvx2: return "winograd_avx2";
    case Tile::kDepthwise: return "depthwise_avx2";
    case Tile::kDepthwiseVnni: return "depthwise_avx512_vnni";
    case Tile::kDepthwiseAvxVnni: return "depthwise_avx_vnni";
    case Tile::kDepthwiseAvx2Bytes: return "depthwise_avx2_bytes";
    case Tile::kDepthwiseVnniPixels: return "depthwise_avx512_vnni_pixels";
  }
  return "?";
}

PackedWeights PackedWeights::pack(const int8_t* w, const Geometry& g, Tile tile) {
  PackedWeights r;
  if (folds_window_rows(g, tile)) {
    const std::vector<int8_t> rows = window_rows_weights(w, g);
    r = pack_values(rows.data(), window_rows_geometry(g), tile);
    r.window_rows_ = true;
  } else {
    r = pack_values(w, g, tile);
  }
  r.pair_steps();
  return r;
}

PackedWeights PackedWeights::pack_wide(const int16_t* w, const Geometry& g, Tile tile) {
  return pack_values(w, g, tile);  // (kAvx2 or kDepthwise: the quads' bytes would truncate)
}

template <typename T>
PackedWeights PackedWeights::pack_values(const T* w, const Geometry& g, Tile tile) {
  if (tile == Tile::kDepthwiseVnniPixels) {  // kDepthwiseVnni's of 64 channels, lane v channel v % C
    const int64_t taps = g.kernel_h * g.kernel_w;
    std::vector<T> lanes(static_cast<size_t>(64 * taps));
    for (int64_t i = 0; i < 64 * taps; ++i)
      lanes[static_cast<size_t>(i)] = w[(i / taps) % g.channels * taps + i % taps];
    Geometry wide = g;
    wide.channels = wide.filters = 64;
    PackedWeights r = pack_values(lanes.data(), wide, Tile::kDepthwiseVnni);
    r.tile_ = tile;
    r.sums_.resize(static_cast<size_t>(g.channels));
    r.pair_data_.clear(), r.pair_block_bytes_ = 0;
    return r;
  }
  PackedWeights r;
  r.tile_ = tile;
  if (tile == Tile::kDepthwiseVnni || tile == Tile::kDepthwiseAvxVnni || tile == Tile::kDepthwiseAvx2Bytes) {
    const int64_t width = tile == Tile::kDepthwiseVnni ? 64 : 32;  // channels a block: a zmm or a ymm of bytes
    r.taps_ = g.kernel_h * g.kernel_w, r.blocks_ = (g.channels + width - 1) / width;
    r.sums_.assign(static_cast<size_t>(g.channels), 0);
    for (int64_t i = 0; i < g.channels * r.taps_; ++i) r.sums_[static_cast<size_t>(i / r.taps_)] += w[i];
    // `pixels` (1 or 2) pixels a row of quads of columns: pixel p's tap kx at column kx + p.
    auto pack_quads = [&](int pixels, std::vector<int8_t>& data) {
      const int64_t quads = (g.kernel_w + pixels - 1 + 3) / 4, block_bytes = g.kernel_h * quads * pixels * 4 * width;
      data.assign(static_cast<size_t>(r.blocks_ * block_bytes), 0);
      for (int64_t c = 0; c < g.channels; ++c)
        for (int64_t ky = 0; ky < g.kernel_h; ++ky)
          for (int p = 0; p < pixels; ++p)
            for (int64_t kx = 0; kx < g.kernel_w; ++kx) {
              const int64_t i = c % width, l = i / 16, k = (i % 16) / 4, j = i % 4;  // vector k, lane 4 l + j
              const int64_t column = kx + p, step = ky * quads + column / 4;
              const int64_t at = (c / width) * block_bytes + ((step * pixels + p) * 4 + k) * width + (4 * l + j) * 4;
              data[static_cast<size_t>(at + column % 4)] = static_cast<int8_t>(w[(c * g.kernel_h + ky) * g.kernel_w + kx]);
            }
      return block_bytes;
    };
    r.block_bytes_ = pack_quads(1, r.data_);
    r.steps_ = r.block_bytes_ / (4 * width);
    // Pairs where they take no more quads a row than one pixel (kernel widths but 4 and 8).
    if (g.kernel_w % 4 != 0) r.pair_block_bytes_ = pack_quads(2, r.pair_data_);
    return r;
  }
  if (tile == Tile::kDepthwise) {
    // Per block of 16 channels, per pair of taps, 16 int16 pairs (w_t, w_t+1) in vpunpck{l,h}wd's
    // lane order: the low vector holds channels 0-3 then 8-11, the high one 4-7 then 12-15.
    r.taps_ = g.kernel_h * g.kernel_w, r.steps_ = (r.taps_ + 1) / 2, r.blocks_ = (g.channels + 15) / 16;
    r.block_bytes_ = r.steps_ * 64;
    r.data_.assign(static_cast<size_t>(r.blocks_ * r.block_bytes()), 0);
    r.sums_.assign(static_cast<size_t>(g.channels), 0);
    for (int64_t c = 0; c < g.channels; ++c)
      for (int64_t t = 0; t < r.taps_; ++t) {
        const int16_t v = w[c * r.taps_ + t];
        const int64_t i = c % 16, lane = (i / 8) * 4 + i % 4, half = (i % 8) / 4;
        const int64_t at = ((c / 16) * r.steps_ + t / 2) * 64 + ((half * 8 + lane) * 2 + t % 2) * 2;
        std::memcpy(&r.data_[static_cast<size_t>(at)], &v, 2);
        r.sums_[static_cast<size_t>(c)] += v;
      }
    return r;
  }
  if constexpr (sizeof(T) == 1) {
    if (tile == Tile::kWinogradAvx2) return pack_winograd(w, g);
  }
  const int64_t per = r.channels_a_step();
  r.steps_ = (g.channels + per - 1) / per;
  r.taps_ = g.kernel_h * g.kernel_w;
  r.blocks_ = (g.filters + 15) / 16;
  r.block_bytes_ = r.taps_ * r.steps_ * 64;
  r.data_.assign(static_cast<size_t>(r.blocks_ * r.block_bytes()), 0);
  r.sums_.assign(static_cast<size_t>(g.filters), 0);
  // The ymm tiles take a block's filters 0-3, 8-11 | 4-7, 12-15 (qconv_tile_ymm.h): groups 1
  // and 2 of four swap places.
  const bool ymm = tile != Tile::kAvx512Vnni;
  for (int64_t m = 0; m < g.filters; ++m) {
    const int64_t f = m % 16, slot = ymm && (f / 4 == 1 || f / 4 == 2) ? f ^ 12 : f;
    for (int64_t c = 0; c < g.channels; ++c)
      for (int64_t t = 0; t < r.taps_; ++t) {
        const T v = w[(m * g.channels + c) * r.taps_ + t];
        // Step (block, tap, c / per): 16 filters x `per` channels, one value each (s8 or int16).
        const int64_t at = (((m / 16) * r.taps_ + t) * r.steps_ + c / per) * 64;
        if (tile != Tile::kAvx2) {  // quads of s8
          r.data_[static_cast<size_t>(at + slot * 4 + c % 4)] = static_cast<int8_t>(v);
        } else {
          const int16_t wide = v;
          std::memcpy(&r.data_[static_cast<size_t>(at + (slot * 2 + c % 2) * 2)], &wide, 2);
        }
        r.sums_[static_cast<size_t>(m)] += v;
      }
  }
  return r;
}

PackedWeights PackedWeights::pack_winograd(const int8_t* w, const Geometry& g) {
  PackedWeights r;
  r.tile_ = Tile::kWinogradAvx2;
  const int64_t cp = round_up(g.channels, 16), pairs = cp / 2;
  r.taps_ = 9, r.steps_ = pairs, r.blocks_ = (g.filters + 15) / 16;
  r.block_bytes_ = 16 * pairs * 64;
  r.data_.assign(static_cast<size_t>(r.blocks_ * r.block_bytes_), 0);
  r.sums_.assign(static_cast<size_t>(g.filters), 0);
  static constexpr int kG[4][3] = {{2, 0, 0}, {1, 1, 1}, {1, -1, 1}, {0, 0, 2}};  // 2G
  for (int64_t m = 0; m < g.filters; ++m) {
    const int64_t f = m % 16, slot = f / 4 == 1 || f / 4 == 2 ? f ^ 12 : f;  // the ymm order
    for (int64_t c = 0; c < g.channels; ++c) {
      const int8_t* k = w + (m * g.channels + c) * 9;
      for (int i = 0; i < 9; ++i) r.sums_[static_cast<size_t>(m)] += k[i];
      for (int a = 0; a < 4; ++a)
        for (int b = 0; b < 4; ++b) {
          int32_t u = 0;  // (G' k G'^T)[a][b], |u| <= 9 * 128
          for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 3; ++j) u += kG[a][i] * k[i * 3 + j] * kG[b][j];
          const int16_t v = static_cast<int16_t>(u);
          const int64_t at = (((m / 16) * 16 + (4 * a + b)) * pairs + c / 2) * 64 + (slot * 2 + c % 2) * 2;
          std::memcpy(&r.data_[static_cast<size_t>(at)], &v, 2);
        }
    }
  }
  return r;
}

void conv(const Geometry& g, const void* x, bool x_signed, bool x_nhwc, int32_t zx, const PackedWeights& w,
          const Requantize& rq, void* y, bool y_nhwc, ThreadPool* pool, const void* residual,
          const float* quantize_scale) {
  if (quantize_scale) x_nhwc = false;
  if (!rq.add) residual = nullptr;
  thread_local std::vector<char> staged, nhwc_out;
  thread_local std::vector<int32_t> sums;
  const size_t elem = rq.output == Output::kFloat ? 4 : 1;
  void* out = y;
  if (!y_nhwc) {
    nhwc_out.resize(static_cast<size_t>(g.batch * g.out_h * g.out_w * g.filters) * elem);
    out = nhwc_out.data();
  }
  Staged s{x, g.in_h, g.in_w, g.channels};
  if (w.depthwise()) {
    const auto depthwise = w.tile() == Tile::kDepthwiseVnni || w.tile() == Tile::kDepthwiseVnniPixels
                               ? conv_depthwise_avx512vnni
                           : w.tile() == Tile::kDepthwiseAvxVnni ? conv_depthwise_avxvnni
                           : w.tile() == Tile::kDepthwiseAvx2Bytes ? conv_depthwise_avx2_bytes
                                                                   : conv_depthwise;
    if (x_nhwc) {
      depthwise(g, x, x_signed, zx, g.channels, w, rq, out, pool);
    } else {  // channels-last first: a padded copy, read as unpadded (its borders hold zx)
      stage<uint8_t>(g, x, x_signed, false, zx, 16, staged, s, pool, quantize_scale);
      Geometry padded = g;
      padded.in_h = s.padded_h, padded.in_w = s.padded_w, padded.pad_top = padded.pad_left = 0;
      depthwise(padded, s.xp, false, static_cast<uint8_t>(zx) ^ (x_signed ? 0x80 : 0), s.cp, w, rq, out, pool);
    }
  } else if (w.tile() == Tile::kWinogradAvx2) {
    Geometry whole = g;  // staged to whole 2x2 tiles
    whole.out_h = round_up(g.out_h, 2), whole.out_w = round_up(g.out_w, 2);
    stage<uint8_t>(whole, x, x_signed, x_nhwc, zx, 16, staged, s, pool, quantize_scale);
    conv_winograd_avx2(g, s, w, rq, out, residual, pool);
  } else if (w.tile() != Tile::kAvx2) {  // quads of u8 channels
    Geometry tiled = g;  // the conv the tiles run
    if (w.window_rows()) {
      stage_window_rows(g, x, x_signed, x_nhwc, zx, staged, s, pool, quantize_scale);
      tiled = window_rows_geometry(g);
    } else if (quantize_scale || !readable_in_place(g, x_signed, x_nhwc)) {
      stage<uint8_t>(g, x, x_signed, x_nhwc, zx, 4, staged, s, pool, quantize_scale);
    }
    const auto tiles = w.tile() == Tile::kAvx512Vnni ? conv_staged_avx512vnni
                       : w.tile() == Tile::kAvxVnni  ? conv_staged_avxvnni
                                                     : conv_staged_avx2_bytes;
    if (!rq.window_weight.empty()) {  // (kAvx512Vnni's alone)
      window_sums_avx512vnni(tiled, s, sums, pool);
      s.window_sums = sums.data();
    }
    tiles(tiled, s, w, rq, out, residual, pool);
  } else {
    stage<int16_t>(g, x, x_signed, x_nhwc, zx, 2, staged, s, pool, quantize_scale);
    conv_staged_avx2(g, s, w, rq, out, residual, pool);
  }
  if (!y_nhwc) to_nchw(g, out, elem, y);
}

}  // namespace kiln::qconv
