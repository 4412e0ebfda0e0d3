// Reference kernels for Concat and Split: joining tensors along an axis and cutting one apart,
// for any element type. Fixed-size elements go as memcpys over the pool.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/fast_path.h"
#include "kernels/ref/movement_util.h"

namespace kiln {
namespace {

using namespace movement;

// Copies `rows` blocks of `len` elements from src (row stride src_stride) to dst (dst_stride).
Status copy_blocks(const Tensor& src, int64_t src_start, int64_t src_stride, Tensor* dst,
                   int64_t dst_start, int64_t dst_stride, int64_t rows, int64_t len) {
  if (rows == 0 || len == 0) return Status::ok();
  return visit_any(src.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* in = src.data<T>() + src_start;
    T* out = dst->data<T>() + dst_start;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < len; ++i) out[r * dst_stride + i] = in[r * src_stride + i];
    return Status::ok();
  });
}

// Copies of fixed-size elements: pieces of at most kPiece bytes, over the pool where there are
// enough bytes.
constexpr int64_t kPiece = 64 * 1024;
struct Piece {
  const char* src;
  char* dst;
  int64_t bytes;
};
// `len` bytes from src to dst as pieces.
void add_pieces(std::vector<Piece>& pieces, const char* src, char* dst, int64_t len) {
  for (int64_t at = 0; at < len; at += kPiece) pieces.push_back({src + at, dst + at, std::min(kPiece, len - at)});
}
void copy_pieces(KernelContext& ctx, const std::vector<Piece>& pieces, int64_t total_bytes) {
  auto copy = [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      std::memcpy(pieces[static_cast<size_t>(p)].dst, pieces[static_cast<size_t>(p)].src,
                  static_cast<size_t>(pieces[static_cast<size_t>(p)].bytes));
  };
  const int64_t count = static_cast<int64_t>(pieces.size());
  if (ctx.pool && count > 1 && total_bytes > 4 * kPiece)
    ctx.pool->parallel_for(count, 1, copy);
  else
    copy(0, count);
}

Status concat(KernelContext& ctx) {
  const size_t n = ctx.num_inputs();
  KILN_RETURN_IF_ERROR(require_inputs(ctx, n == 0 ? 1 : n));
  if (ctx.opset >= 4 && !ctx.node.has_attr("axis")) return ctx.error("attribute 'axis' is missing");
  const Tensor& first = ctx.input(0);
  const int64_t r = first.rank();
  if (r == 0) return ctx.error("cannot concatenate scalars");
  KILN_ASSIGN_OR_RETURN(int64_t axis, axis_of(ctx, ctx.node.attr_int("axis", 1), r));
  Shape out = first.shape();
  out[axis] = 0;
  for (size_t i = 0; i < n; ++i) {
    const Tensor& t = ctx.input(i);
    if (t.dtype() != first.dtype())
      return ctx.error("input " + std::to_string(i) + " has type " + dtype_name(t.dtype()) +
                       ", expected " + dtype_name(first.dtype()));
    bool ok = t.rank() == r;
    for (int64_t d = 0; ok && d < r; ++d) ok = d == axis || t.dim(d) == first.dim(d);
    if (!ok)
      return ctx.error("input " + std::to_string(i) + " has shape " + shape_str(t.shape()) +
                       ", which does not match " + shape_str(first.shape()) + " outside axis " +
                       std::to_string(axis));
    out[axis] += t.dim(axis);
  }
  const int64_t outer = product(out, 0, axis), inner = product(out, axis + 1, r);
  const int64_t out_row = out[axis] * inner;
  if (const size_t bytes = dtype_size(first.dtype())) {
    // Every element is written once: pieces of at most kPiece bytes, over the pool (a DB text
    // detector's Concat of four 24 x 160 x 160 maps took 1.7 ms zeroing and copying on one thread).
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, first.dtype(), out));
    std::vector<Piece> pieces;
    char* dst = static_cast<char*>(y->raw_data());
    const int64_t row_bytes = out_row * static_cast<int64_t>(bytes);
    int64_t offset = 0;
    for (size_t i = 0; i < n; ++i) {
      const Tensor& t = ctx.input(i);
      const int64_t len = t.dim(axis) * inner * static_cast<int64_t>(bytes);
      const char* src = static_cast<const char*>(t.raw_data());
      for (int64_t row = 0; row < outer; ++row) add_pieces(pieces, src + row * len, dst + row * row_bytes + offset, len);
      offset += len;
    }
    copy_pieces(ctx, pieces, static_cast<int64_t>(y->nbytes()));
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, first.dtype(), out));
  int64_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    const Tensor& t = ctx.input(i);
    const int64_t len = t.dim(axis) * inner;
    KILN_RETURN_IF_ERROR(copy_blocks(t, 0, len, y, offset, out_row, outer, len));
    offset += len;
  }
  return Status::ok();
}

Status split(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 1));
  const Tensor& x = ctx.input(0);
  if (x.rank() == 0) return ctx.error("cannot split a scalar");
  KILN_ASSIGN_OR_RETURN(int64_t axis, axis_of(ctx, ctx.node.attr_int("axis", 0), x.rank()));
  const int64_t n = static_cast<int64_t>(ctx.num_outputs());
  const int64_t dim = x.dim(axis);
  if (n == 0) return ctx.error("Split has no outputs");
  std::vector<int64_t> sizes;
  bool given = false;
  if (ctx.opset < 13 && ctx.node.has_attr("split")) {
    sizes = ctx.node.attr_ints("split");
    given = true;
  } else if (ctx.opset < 2 || ctx.opset >= 13) {
    KILN_ASSIGN_OR_RETURN(bool has, optional_input(ctx, 1));
    if (has) {
      KILN_ASSIGN_OR_RETURN(sizes, read_ints(ctx, 1, "split"));
      given = true;
    }
  }
  if (given) {
    if (static_cast<int64_t>(sizes.size()) != n)
      return ctx.error("split " + shape_str(sizes) + " has " + std::to_string(sizes.size()) +
                       " parts for " + std::to_string(n) + " outputs");
    int64_t total = 0;
    for (int64_t s : sizes) {
      if (s < 0) return ctx.error("split " + shape_str(sizes) + " has a negative size");
      total += s;
    }
    if (total != dim)
      return ctx.error("split " + shape_str(sizes) + " sums to " + std::to_string(total) +
                       ", but axis " + std::to_string(axis) + " has size " + std::to_string(dim));
  } else if (ctx.opset >= 18 && ctx.node.has_attr("num_outputs")) {
    const int64_t parts = ctx.node.attr_int("num_outputs", 0);
    if (parts != n)
      return ctx.error("num_outputs is " + std::to_string(parts) + " but the node has " +
                       std::to_string(n) + " outputs");
    const int64_t chunk = (dim + n - 1) / n;
    if (chunk * (n - 1) > dim)
      return ctx.error("axis size " + std::to_string(dim) + " cannot be split into " +
                       std::to_string(n) + " parts");
    sizes.assign(n, chunk);
    sizes.back() = dim - chunk * (n - 1);
  } else {
    if (dim % n != 0)
      return ctx.error("axis size " + std::to_string(dim) + " does not split evenly into " +
                       std::to_string(n) + " outputs");
    sizes.assign(n, dim / n);
  }
  const int64_t outer = product(x.shape(), 0, axis), inner = product(x.shape(), axis + 1, x.rank());
  if (const int64_t bytes = static_cast<int64_t>(dtype_size(x.dtype()))) {
    // Fixed-size elements as Concat copies them: each output written once, in pieces over the pool
    // (the element loop below ran an 8-bit YOLO C2f block's Split at 1 ns a byte).
    std::vector<Piece> pieces;
    const char* src = static_cast<const char*>(x.raw_data());
    int64_t offset = 0;
    for (int64_t i = 0; i < n; ++i) {
      Shape s = x.shape();
      s[axis] = sizes[i];
      const int64_t len = sizes[i] * inner * bytes;
      if (ctx.wants_output(i)) {
        KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(i, x.dtype(), s));
        char* dst = static_cast<char*>(y->raw_data());
        for (int64_t row = 0; row < outer; ++row) add_pieces(pieces, src + row * dim * inner * bytes + offset, dst + row * len, len);
      }
      offset += len;
    }
    copy_pieces(ctx, pieces, static_cast<int64_t>(x.nbytes()));
    return Status::ok();
  }
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    Shape s = x.shape();
    s[axis] = sizes[i];
    const int64_t len = sizes[i] * inner;
    if (ctx.wants_output(i)) {
      KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(i, x.dtype(), s));
      KILN_RETURN_IF_ERROR(copy_blocks(x, offset, dim * inner, y, 0, len, outer, len));
    }
    offset += len;
  }
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("", "Concat", concat);
KILN_REGISTER_KERNEL("", "Split", split);

// Both copy contiguous blocks.
KILN_REGISTER_FAST_PATH("", "Concat", always_fast);
KILN_REGISTER_FAST_PATH("", "Split", always_fast);

}  // namespace kiln
