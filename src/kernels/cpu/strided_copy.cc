// The strided copy of strided_copy.h, for every element type (std::copy_n / std::fill_n, which
// are memmove and memset-like loops for plain types and assignments for strings).
#include "kernels/cpu/strided_copy.h"

#include <algorithm>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/kernel_util.h"

namespace kiln {
namespace {

struct Dim {
  int64_t size, src, dst;  // extent, and the step of one index in src and dst, in elements
};

// The view's dims outermost first, size-1 dims dropped and each dim merged into the next where
// stepping it is stepping over the whole next dim in src (dst is row-major, so there always).
std::vector<Dim> collapse(const Shape& shape, const Shape& strides) {
  std::vector<Dim> dims;
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
  return dims;
}

constexpr int64_t kTile = 16;              // a transposed block: 16 x 16 elements
constexpr int64_t kParallelBytes = 1 << 18;  // below this one thread copies it all
constexpr int64_t kTaskBytes = 1 << 16;

// Copies rows [r0, r1) of the view. A row is the innermost dim, or, when `tile` is set, the
// block of the innermost dim by the dim whose src step is 1 (a transpose), copied in tiles so
// that both sides stay in cache. `outer` are the remaining dims.
template <typename T>
void copy_rows(const T* in, T* out, const std::vector<Dim>& outer, const Dim& inner, const Dim* tile,
               int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    int64_t so = 0, dofs = 0, rest = r;
    for (size_t d = outer.size(); d-- > 0;) {
      const int64_t i = rest % outer[d].size;
      rest /= outer[d].size;
      so += i * outer[d].src;
      dofs += i * outer[d].dst;
    }
    const T* s = in + so;
    T* o = out + dofs;
    if (tile) {
      for (int64_t a0 = 0; a0 < tile->size; a0 += kTile)
        for (int64_t b0 = 0; b0 < inner.size; b0 += kTile) {
          const int64_t a1 = std::min(tile->size, a0 + kTile), b1 = std::min(inner.size, b0 + kTile);
          for (int64_t a = a0; a < a1; ++a)
            for (int64_t b = b0; b < b1; ++b) o[a * tile->dst + b] = s[a + b * inner.src];
        }
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
  std::vector<Dim> outer = collapse(dst->shape(), strides);
  if (outer.empty()) outer.push_back({1, 0, 0});  // one element
  const Dim inner = outer.back();
  outer.pop_back();
  // A transpose: some outer dim reads contiguous src while the innermost does not.
  const Dim* tile = nullptr;
  Dim tile_dim{};
  if (inner.src != 1 && inner.src != 0) {
    for (size_t d = 0; d < outer.size(); ++d)
      if (outer[d].src == 1 && outer[d].size >= 4 && inner.size >= 4) {
        tile_dim = outer[d];
        outer.erase(outer.begin() + static_cast<std::ptrdiff_t>(d));
        tile = &tile_dim;
        break;
      }
  }
  int64_t rows = 1;
  for (const Dim& d : outer) rows *= d.size;
  const int64_t row_bytes = inner.size * (tile ? tile->size : 1) * static_cast<int64_t>(dtype_size(src.dtype()));
  return visit_any(src.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* in = src.data<T>() + offset;
    T* out = dst->data<T>();
    if (pool == nullptr || rows < 2 || rows * row_bytes < kParallelBytes) {
      copy_rows(in, out, outer, inner, tile, 0, rows);
    } else {
      const int64_t grain = std::max<int64_t>(1, kTaskBytes / std::max<int64_t>(1, row_bytes));
      pool->parallel_for(rows, grain, [&](int64_t r0, int64_t r1) { copy_rows(in, out, outer, inner, tile, r0, r1); });
    }
    return Status::ok();
  });
}

}  // namespace kiln
