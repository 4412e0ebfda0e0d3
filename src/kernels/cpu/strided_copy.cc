// The strided copy of strided_copy.h, for every element type (std::copy_n / std::fill_n, which
// are memmove and memset-like loops for plain types and assignments for strings).
#include "kernels/cpu/strided_copy.h"

#include <immintrin.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/vec_math_avx2.h"
#include "kernels/kernel_util.h"

namespace kiln {
namespace {

struct Dim {
  int64_t size, src, dst;  // extent, and the step of one index in src and dst, in elements
};

// The view's dims outermost first, size-1 dims dropped and each dim merged into the next where
// stepping it is stepping over the whole next dim in src (dst is row-major, so there always),
// into `dims`.
void collapse(const Shape& shape, const Shape& strides, std::vector<Dim>& dims) {
  dims.clear();
  const Shape dst = strides_of(shape);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!dims.empty() && dims.back().src == strides[d] * shape[d]) {
      dims.back().size *= shape[d];
      dims.back().src = strides[d];
      dims.back().dst = dst[d];
    } else {
      dims.push_back({shape[d], strides[d], dst[d]});
    }
  }
}

constexpr int64_t kTile = 16;              // a transposed block: 16 x 16 elements
constexpr int64_t kParallelBytes = 1 << 18;  // below this one thread copies it all
constexpr int64_t kTaskBytes = 1 << 16;

// One transposed block: o[a * o_step + b] = s[a + b * s_step] for a < na, b < nb. 4-byte
// elements go 8x8 at a time through the register transpose; the scalar loop this replaces read
// one element from each of 16 rows 12 KiB apart per store (convnext's NCHW->NHWC transposes at
// 56x56: 2.3 ns an element, 9 % of the model).
// Bytes of nb (2 to 4) planes, 16 from each, interleaved into nb x 16 bytes: an image's 3 (or
// 4) channel planes into channels-last pixels. Output chunk k takes byte 16 k + i from plane
// (16 k + i) % nb at (16 k + i) / nb: one pshufb per plane and chunk, the rest zeroed and ORed.
struct Interleave {
  __m128i mask[4][4];  // [plane][chunk]
  explicit Interleave(int nb) {
    for (int j = 0; j < nb; ++j)
      for (int k = 0; k < nb; ++k) {
        alignas(16) int8_t m[16];
        for (int i = 0; i < 16; ++i) m[i] = (16 * k + i) % nb == j ? static_cast<int8_t>((16 * k + i) / nb) : -1;
        mask[j][k] = _mm_load_si128(reinterpret_cast<const __m128i*>(m));
      }
  }
};

// o[a * nb + b] = s[a + b * s_step] for 16 values of a from each of nb planes (1-byte elements).
void interleave_16(const uint8_t* s, int64_t s_step, uint8_t* o, int nb) {
  static const Interleave tables[3] = {Interleave(2), Interleave(3), Interleave(4)};
  const Interleave& t = tables[nb - 2];
  __m128i plane[4];
  for (int j = 0; j < nb; ++j) plane[j] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + j * s_step));
  for (int k = 0; k < nb; ++k) {
    __m128i chunk = _mm_shuffle_epi8(plane[0], t.mask[0][k]);
    for (int j = 1; j < nb; ++j) chunk = _mm_or_si128(chunk, _mm_shuffle_epi8(plane[j], t.mask[j][k]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 16 * k), chunk);
  }
}

template <typename T>
void transpose_block(const T* s, int64_t s_step, T* o, int64_t o_step, int64_t na, int64_t nb) {
  int64_t a8 = 0, b8 = 0;
  if constexpr (sizeof(T) == 1 && std::is_trivially_copyable_v<T>) {
    if (nb >= 2 && nb <= 4 && o_step == nb) {  // a few planes into contiguous pixels
      int64_t a = 0;
      for (; a + 16 <= na; a += 16)
        interleave_16(reinterpret_cast<const uint8_t*>(s + a), s_step, reinterpret_cast<uint8_t*>(o + a * nb),
                      static_cast<int>(nb));
      for (; a < na; ++a)
        for (int64_t b = 0; b < nb; ++b) o[a * o_step + b] = s[a + b * s_step];
      return;
    }
  }
  if constexpr (sizeof(T) == 4 && std::is_trivially_copyable_v<T>) {
    a8 = na / 8 * 8, b8 = nb / 8 * 8;
    for (int64_t a = 0; a < a8; a += 8)
      for (int64_t b = 0; b < b8; b += 8)
        vec::transpose_8x8_avx2(reinterpret_cast<const float*>(s + a + b * s_step), s_step,
                                reinterpret_cast<float*>(o + a * o_step + b), o_step);
  }
  for (int64_t a = 0; a < na; ++a)  // what the 8x8 blocks left: the right and bottom edges
    for (int64_t b = a < a8 ? b8 : 0; b < nb; ++b) o[a * o_step + b] = s[a + b * s_step];
}

// Copies part [p0, p1) of the view. A part is one row: the innermost dim, or, when `tile` is
// set, a run of up to `tile_run` indices of the dim whose src step is 1 (a transpose) by the
// whole innermost dim, copied in blocks so that both sides stay in cache. `outer` are the
// remaining dims.
template <typename T>
void copy_parts(const T* in, T* out, const std::vector<Dim>& outer, const Dim& inner,
                const Dim* tile, int64_t tile_run, int64_t p0, int64_t p1) {
  const int64_t runs = tile ? (tile->size + tile_run - 1) / tile_run : 1;
  for (int64_t p = p0; p < p1; ++p) {
    int64_t so = 0, dofs = 0, rest = p / runs;
    for (size_t d = outer.size(); d-- > 0;) {
      const int64_t i = rest % outer[d].size;
      rest /= outer[d].size;
      so += i * outer[d].src;
      dofs += i * outer[d].dst;
    }
    const T* s = in + so;
    T* o = out + dofs;
    if (tile) {
      const int64_t a_begin = p % runs * tile_run, a_end = std::min(tile->size, a_begin + tile_run);
      for (int64_t a0 = a_begin; a0 < a_end; a0 += 2 * kTile)
        for (int64_t b0 = 0; b0 < inner.size; b0 += kTile)
          transpose_block(s + a0 + b0 * inner.src, inner.src, o + a0 * tile->dst + b0, tile->dst,
                          std::min(2 * kTile, a_end - a0), std::min(kTile, inner.size - b0));
    } else if (inner.src == 1) {
      std::copy_n(s, inner.size, o);
    } else if (inner.src == 0) {
      std::fill_n(o, inner.size, *s);
    } else {
      for (int64_t b = 0; b < inner.size; ++b) o[b] = s[b * inner.src];
    }
  }
}

}  // namespace

Status copy_strided(const Tensor& src, int64_t offset, const Shape& strides, Tensor* dst, ThreadPool* pool) {
  if (dst->numel() == 0) return Status::ok();
  // The calling thread's list, kept from copy to copy. (Named through a reference: a lambda
  // naming a thread_local itself would read the list of whichever thread runs it.)
  thread_local std::vector<Dim> kept;
  std::vector<Dim>& outer = kept;
  collapse(dst->shape(), strides, outer);
  if (outer.empty()) outer.push_back({1, 0, 0});  // one element
  const Dim inner = outer.back();
  outer.pop_back();
  // A transpose: some outer dim reads contiguous src while the innermost does not. Blocks pay
  // even for a short innermost dim (an image's 3 channels): row by row, each row of 3 elements
  // costs its index arithmetic (a 224 x 224 x 3 uint8 image took 0.35 ms).
  const Dim* tile = nullptr;
  Dim tile_dim{};
  if (inner.src != 1 && inner.src != 0) {
    for (size_t d = 0; d < outer.size(); ++d)
      if (outer[d].src == 1 && outer[d].size >= 4 && inner.size >= 2) {
        tile_dim = outer[d];
        outer.erase(outer.begin() + static_cast<std::ptrdiff_t>(d));
        tile = &tile_dim;
        break;
      }
  }
  int64_t rows = 1;
  for (const Dim& d : outer) rows *= d.size;
  const int64_t elem = static_cast<int64_t>(dtype_size(src.dtype()));
  const int64_t bytes = rows * inner.size * (tile ? tile->size : 1) * elem;
  // A transpose is split along its contiguous-source dim as well, so that one big 2-D transpose
  // (rows == 1) is shared out too; a run is a multiple of the block, about one task's bytes.
  const int64_t tile_run =
      tile ? std::clamp<int64_t>(kTaskBytes / std::max<int64_t>(1, inner.size * elem) / (2 * kTile) *
                                     (2 * kTile),
                                 2 * kTile, std::max<int64_t>(2 * kTile, tile->size))
           : 1;
  const int64_t parts = rows * (tile ? (tile->size + tile_run - 1) / tile_run : 1);
  return visit_any(src.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* in = src.data<T>() + offset;
    T* out = dst->data<T>();
    if (pool == nullptr || parts < 2 || bytes < kParallelBytes) {
      copy_parts(in, out, outer, inner, tile, tile_run, 0, parts);
    } else {
      const int64_t grain = std::max<int64_t>(1, kTaskBytes / std::max<int64_t>(1, bytes / parts));
      pool->parallel_for(parts, grain, [&](int64_t p0, int64_t p1) {
        copy_parts(in, out, outer, inner, tile, tile_run, p0, p1);
      });
    }
    return Status::ok();
  });
}

}  // namespace kiln
