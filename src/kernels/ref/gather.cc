// Reference kernels for Gather, GatherElements and GatherND: indexing with int32/int64 index
// tensors (negative indices count from the end), every index bounds-checked.
#include "kernels/ref/movement_util.h"

namespace kiln {
namespace {

using namespace movement;

// Index tensor values as int64, each wrapped from [-dim, dim) to [0, dim) or an error.
Result<std::vector<int64_t>> read_indices(const KernelContext& ctx, size_t input, int64_t dim) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> v, read_ints(ctx, input, "indices"));
  for (int64_t& i : v) {
    if (i < -dim || i >= dim)
      return ctx.error("index " + std::to_string(i) + " is out of range [" + std::to_string(-dim) +
                       ", " + std::to_string(dim) + ")");
    if (i < 0) i += dim;
  }
  return v;
}

// Copies runs of `len` elements: run j goes from src[src_off[j]..] to dst[j * len..].
Status copy_runs(const Tensor& src, const std::vector<int64_t>& src_off, int64_t len, Tensor* dst) {
  if (len == 0 || src_off.empty()) return Status::ok();
  return visit_any(src.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* in = src.data<T>();
    T* out = dst->data<T>();
    for (size_t j = 0; j < src_off.size(); ++j)
      for (int64_t i = 0; i < len; ++i) out[j * len + i] = in[src_off[j] + i];
    return Status::ok();
  });
}

Status gather(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 2));
  const Tensor& data = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  if (data.rank() == 0) return ctx.error("data must have rank >= 1");
  KILN_ASSIGN_OR_RETURN(int64_t axis, axis_of(ctx, ctx.node.attr_int("axis", 0), data.rank()));
  const int64_t dim = data.dim(axis);
  // The indices are read in place (checked first, wrapped as they are used), so that a run
  // allocates nothing for them.
  if (indices.dtype() != DType::kInt64 && indices.dtype() != DType::kInt32)
    return ctx.error(std::string("input 'indices': expected an int32 or int64 tensor, got ") +
                     dtype_name(indices.dtype()));
  const bool wide = indices.dtype() == DType::kInt64;
  auto index_at = [&](int64_t k) {
    const int64_t i = wide ? indices.data<int64_t>()[k] : indices.data<int32_t>()[k];
    return i < 0 ? i + dim : i;
  };
  for (int64_t k = 0; k < indices.numel(); ++k) {
    const int64_t i = wide ? indices.data<int64_t>()[k] : indices.data<int32_t>()[k];
    if (i < -dim || i >= dim)
      return ctx.error("index " + std::to_string(i) + " is out of range [" + std::to_string(-dim) +
                       ", " + std::to_string(dim) + ")");
  }
  Shape out(data.shape().begin(), data.shape().begin() + axis);
  out.insert(out.end(), indices.shape().begin(), indices.shape().end());
  out.insert(out.end(), data.shape().begin() + axis + 1, data.shape().end());
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, data.dtype(), out));
  const int64_t outer = product(data.shape(), 0, axis),
                inner = product(data.shape(), axis + 1, data.rank());
  if (y->numel() == 0 || inner == 0) return Status::ok();
  return visit_any(data.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* in = data.data<T>();
    T* o = y->data<T>();
    for (int64_t b = 0; b < outer; ++b)
      for (int64_t k = 0; k < indices.numel(); ++k) {
        const T* src = in + (b * dim + index_at(k)) * inner;
        for (int64_t i = 0; i < inner; ++i) *o++ = src[i];
      }
    return Status::ok();
  });
}

Status gather_elements(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 2));
  const Tensor& data = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  if (data.rank() == 0) return ctx.error("data must have rank >= 1");
  if (indices.rank() != data.rank())
    return ctx.error("indices " + shape_str(indices.shape()) + " and data " +
                     shape_str(data.shape()) + " must have the same rank");
  KILN_ASSIGN_OR_RETURN(int64_t axis, axis_of(ctx, ctx.node.attr_int("axis", 0), data.rank()));
  for (int64_t d = 0; d < data.rank(); ++d)
    if (d != axis && indices.dim(d) > data.dim(d))
      return ctx.error("indices " + shape_str(indices.shape()) + " exceed data " +
                       shape_str(data.shape()) + " on axis " + std::to_string(d));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> idx, read_indices(ctx, 1, data.dim(axis)));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, data.dtype(), indices.shape()));
  const Shape strides = strides_of(data.shape());
  int64_t i = 0;
  return gather_by_index(data, y, [&](const Shape& pos) {
    int64_t off = 0;
    for (int64_t d = 0; d < data.rank(); ++d) off += (d == axis ? idx[i] : pos[d]) * strides[d];
    ++i;
    return off;
  });
}

Status gather_nd(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 2));
  const Tensor& data = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  const int64_t r = data.rank(), q = indices.rank();
  const int64_t b = ctx.opset >= 12 ? ctx.node.attr_int("batch_dims", 0) : 0;
  if (r < 1 || q < 1) return ctx.error("data and indices must have rank >= 1");
  if (b < 0 || b >= std::min(r, q))
    return ctx.error("batch_dims " + std::to_string(b) +
                     " must be in [0, min(rank(data), rank(indices)))");
  for (int64_t d = 0; d < b; ++d)
    if (data.dim(d) != indices.dim(d))
      return ctx.error("batch dims of data " + shape_str(data.shape()) + " and indices " +
                       shape_str(indices.shape()) + " differ");
  const int64_t k = indices.dim(q - 1);
  if (k < 1 || k > r - b)
    return ctx.error("last dim of indices " + shape_str(indices.shape()) + " must be in [1, " +
                     std::to_string(r - b) + "]");
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> idx, read_ints(ctx, 1, "indices"));
  Shape out(indices.shape().begin(), indices.shape().end() - 1);
  out.insert(out.end(), data.shape().begin() + b + k, data.shape().end());
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, data.dtype(), out));
  const int64_t batches = product(data.shape(), 0, b);
  const int64_t batch_stride = product(data.shape(), b, r);
  const int64_t tuples = product(indices.shape(), b, q - 1);
  const int64_t slice = product(data.shape(), b + k, r);
  const Shape strides = strides_of(data.shape());
  if (y->numel() == 0) return Status::ok();  // also keeps `runs` no larger than the output
  std::vector<int64_t> runs;
  runs.reserve(batches * tuples);
  for (int64_t bi = 0; bi < batches; ++bi) {
    for (int64_t t = 0; t < tuples; ++t) {
      const int64_t* tuple = idx.data() + (bi * tuples + t) * k;
      int64_t off = bi * batch_stride;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t dim = data.dim(b + j);
        int64_t v = tuple[j];
        if (v < -dim || v >= dim)
          return ctx.error("index " + std::to_string(v) + " is out of range for axis " +
                           std::to_string(b + j) + " of size " + std::to_string(dim));
        if (v < 0) v += dim;
        off += v * strides[b + j];
      }
      runs.push_back(off);
    }
  }
  return copy_runs(data, runs, slice, y);
}

}  // namespace

KILN_REGISTER_KERNEL("", "Gather", gather);
KILN_REGISTER_KERNEL("", "GatherElements", gather_elements);
KILN_REGISTER_KERNEL("", "GatherND", gather_nd);

}  // namespace kiln
