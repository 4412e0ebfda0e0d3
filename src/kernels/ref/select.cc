// Reference kernels for ops that select or rank elements: Compress, NonZero, Unique, TopK,
// ArgMax and ArgMin. NaN orders above every number (ArgMin: below), so sorts stay well defined.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>

#include "kernels/ref/movement_util.h"

namespace kiln {
namespace {

using namespace movement;

// a < b with NaN greater than everything else and equal to itself.
template <typename T>
bool less(const T& a, const T& b) {
  if constexpr (std::is_floating_point_v<T>) {
    return !std::isnan(a) && (std::isnan(b) || a < b);
  } else {
    return a < b;
  }
}

// a < b with NaN smaller than everything else.
template <typename T>
bool less_nan_low(const T& a, const T& b) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::isnan(a) ? !std::isnan(b) : (!std::isnan(b) && a < b);
  } else {
    return a < b;
  }
}

bool is_numeric(DType t) {
  return visit_numeric(t, [](auto) { return Status::ok(); }).is_ok();
}

// Calls f(const T* values) over x's elements in a type that orders like them: the native type
// for numeric types and strings, float for float16/bfloat16/float8/bool/int4.
template <typename F>
Status visit_ordered(const Tensor& x, F&& f) {
  if (x.dtype() == DType::kString) return f(x.data<std::string>());
  if (is_numeric(x.dtype())) {
    return visit_numeric(x.dtype(), [&](auto tag) -> Status {
      using T = typename decltype(tag)::type;
      return f(x.data<T>());
    });
  }
  if (x.dtype() == DType::kUndefined || x.dtype() == DType::kComplex64 ||
      x.dtype() == DType::kComplex128)
    return Status::error(std::string("unsupported element type ") + dtype_name(x.dtype()));
  KILN_ASSIGN_OR_RETURN(Tensor f32, to_float32(x));
  return f(static_cast<const float*>(f32.data<float>()));
}

// Whether element i of x counts as true (non-zero, or a non-empty string).
bool truthy(const Tensor& x, int64_t i) {
  if (x.dtype() == DType::kString) return !x.data<std::string>()[i].empty();
  return load_as_double(x.dtype(), x.raw_data(), i) != 0.0;
}

Status compress(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 2));
  const Tensor& x = ctx.input(0);
  const Tensor& cond = ctx.input(1);
  if (cond.rank() != 1)
    return ctx.error("condition must be 1-D, got shape " + shape_str(cond.shape()));
  if (cond.dtype() == DType::kString) return ctx.error("condition must be bool");
  const bool has_axis = ctx.node.has_attr("axis");
  int64_t axis = 0;
  Shape view = x.shape();  // x seen as [outer, n, inner]
  if (has_axis) {
    KILN_ASSIGN_OR_RETURN(axis, axis_of(ctx, ctx.node.attr_int("axis", 0), x.rank()));
  } else {
    view = {x.numel()};
  }
  const int64_t n = view[axis];
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < cond.numel(); ++i) {
    if (!truthy(cond, i)) continue;
    if (i >= n)
      return ctx.error("condition has a true entry at " + std::to_string(i) + " beyond axis size " +
                       std::to_string(n));
    kept.push_back(i);
  }
  Shape out = view;
  out[axis] = static_cast<int64_t>(kept.size());
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x.dtype(), out));
  const Shape strides = strides_of(view);
  return gather_by_index(x, y, [&](const Shape& idx) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      off += (d == static_cast<size_t>(axis) ? kept[idx[d]] : idx[d]) * strides[d];
    return off;
  });
}

Status non_zero(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 1));
  const Tensor& x = ctx.input(0);
  const Shape shape = x.rank() == 0 ? Shape{1} : x.shape();
  const int64_t r = static_cast<int64_t>(shape.size());
  int64_t nnz = 0;
  for (int64_t i = 0; i < x.numel(); ++i) nnz += truthy(x, i);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, DType::kInt64, {r, nnz}));
  if (x.numel() == 0) return Status::ok();
  int64_t* out = y->data<int64_t>();
  std::vector<int64_t> idx(r, 0);
  int64_t j = 0, i = 0;
  do {
    if (truthy(x, i++)) {
      for (int64_t d = 0; d < r; ++d) out[d * nnz + j] = idx[d];
      ++j;
    }
  } while (next_index(idx, shape));
  return Status::ok();
}

Status unique(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 1));
  const Tensor& x = ctx.input(0);
  const bool sorted = ctx.node.attr_int("sorted", 1) != 0;
  const bool has_axis = ctx.node.has_attr("axis");
  Shape view = {x.numel()};
  int64_t axis = 0;
  if (has_axis) {
    KILN_ASSIGN_OR_RETURN(axis, axis_of(ctx, ctx.node.attr_int("axis", 0), x.rank()));
    view = x.shape();
  }
  const int64_t n = view[axis];
  const int64_t outer = product(view, 0, axis), inner = product(view, axis + 1, view.size());
  // Slices along the axis, ordered; `order` is stable so each group starts at its first occurrence.
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::vector<int64_t> group_of(n, 0);
  int64_t groups = 0;
  Status st = visit_ordered(x, [&](const auto* v) -> Status {
    // -1, 0, 1 for slice a before, equal to, after slice b.
    auto cmp = [&](int64_t a, int64_t b) {
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          const auto& va = v[(o * n + a) * inner + i];
          const auto& vb = v[(o * n + b) * inner + i];
          if (less(va, vb)) return -1;
          if (less(vb, va)) return 1;
        }
      return 0;
    };
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return cmp(a, b) < 0; });
    for (int64_t k = 0; k < n; ++k) {
      if (k > 0 && cmp(order[k - 1], order[k]) != 0) ++groups;
      group_of[order[k]] = groups;
    }
    if (n > 0) ++groups;
    return Status::ok();
  });
  if (!st) return ctx.error(st.message());
  // Per group: first occurrence and count, in sorted order.
  std::vector<int64_t> first(groups, -1), count(groups, 0);
  for (int64_t k = 0; k < n; ++k) {
    const int64_t g = group_of[k];
    if (first[g] < 0) first[g] = k;
    ++count[g];
  }
  std::vector<int64_t> rank(groups);  // output position of each group
  std::vector<int64_t> by_pos(groups);
  std::iota(by_pos.begin(), by_pos.end(), 0);
  if (!sorted)
    std::sort(by_pos.begin(), by_pos.end(),
              [&](int64_t a, int64_t b) { return first[a] < first[b]; });
  for (int64_t p = 0; p < groups; ++p) rank[by_pos[p]] = p;

  Shape out = view;
  out[axis] = groups;
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x.dtype(), out));
  const Shape strides = strides_of(view);
  KILN_RETURN_IF_ERROR(gather_by_index(x, y, [&](const Shape& idx) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      off += (d == static_cast<size_t>(axis) ? first[by_pos[idx[d]]] : idx[d]) * strides[d];
    return off;
  }));
  if (ctx.wants_output(1)) {
    KILN_ASSIGN_OR_RETURN(Tensor * t, ctx.make_output(1, DType::kInt64, {groups}));
    for (int64_t p = 0; p < groups; ++p) t->data<int64_t>()[p] = first[by_pos[p]];
  }
  if (ctx.wants_output(2)) {
    KILN_ASSIGN_OR_RETURN(Tensor * t, ctx.make_output(2, DType::kInt64, {n}));
    for (int64_t k = 0; k < n; ++k) t->data<int64_t>()[k] = rank[group_of[k]];
  }
  if (ctx.wants_output(3)) {
    KILN_ASSIGN_OR_RETURN(Tensor * t, ctx.make_output(3, DType::kInt64, {groups}));
    for (int64_t p = 0; p < groups; ++p) t->data<int64_t>()[p] = count[by_pos[p]];
  }
  return Status::ok();
}

Status top_k(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, ctx.opset < 10 ? 1 : 2));
  const Tensor& x = ctx.input(0);
  if (x.dtype() == DType::kString) return ctx.error("strings are not supported");
  if (x.rank() == 0) return ctx.error("input must have rank >= 1");
  KILN_ASSIGN_OR_RETURN(int64_t axis, axis_of(ctx, ctx.node.attr_int("axis", -1), x.rank()));
  int64_t k = 0;
  if (ctx.opset < 10) {
    if (!ctx.node.has_attr("k")) return ctx.error("attribute 'k' is missing");
    k = ctx.node.attr_int("k", 0);
  } else {
    KILN_ASSIGN_OR_RETURN(k, read_int(ctx, 1, "K"));
  }
  const int64_t n = x.dim(axis);
  if (k < 0 || k > n)
    return ctx.error("k " + std::to_string(k) + " is out of range for axis size " +
                     std::to_string(n));
  const bool largest = ctx.opset < 11 || ctx.node.attr_int("largest", 1) != 0;
  Shape out = x.shape();
  out[axis] = k;
  KILN_ASSIGN_OR_RETURN(Tensor * values, ctx.make_output(0, x.dtype(), out));
  KILN_ASSIGN_OR_RETURN(Tensor * indices, ctx.make_output(1, DType::kInt64, out));
  const int64_t outer = product(x.shape(), 0, axis), inner = product(x.shape(), axis + 1, x.rank());
  if (values->numel() == 0) return Status::ok();
  int64_t* ind = indices->data<int64_t>();
  Status st = visit_ordered(x, [&](const auto* v) -> Status {
    std::vector<int64_t> line(n);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        auto at = [&](int64_t j) -> const auto& { return v[(o * n + j) * inner + i]; };
        std::iota(line.begin(), line.end(), 0);
        // Ties keep the lower index first.
        std::partial_sort(line.begin(), line.begin() + k, line.end(), [&](int64_t a, int64_t b) {
          if (largest ? less(at(b), at(a)) : less(at(a), at(b))) return true;
          if (less(at(a), at(b)) || less(at(b), at(a))) return false;
          return a < b;
        });
        for (int64_t j = 0; j < k; ++j) ind[(o * k + j) * inner + i] = line[j];
      }
    return Status::ok();
  });
  if (!st) return ctx.error(st.message());
  return gather_by_index(x, values, [&](const Shape& idx) {
    int64_t lin = 0;  // row-major position in the output
    for (int64_t d = 0; d < values->rank(); ++d) lin = lin * out[d] + idx[d];
    const int64_t o = lin / (k * inner), i = lin % inner;
    return (o * n + ind[lin]) * inner + i;
  });
}

Status arg_extreme(KernelContext& ctx, bool is_max) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 1));
  const Tensor& x = ctx.input(0);
  if (x.dtype() == DType::kString) return ctx.error("strings are not supported");
  const int64_t r = std::max<int64_t>(x.rank(), 1);
  KILN_ASSIGN_OR_RETURN(int64_t axis, axis_of(ctx, ctx.node.attr_int("axis", 0), r));
  const bool keepdims = ctx.node.attr_int("keepdims", 1) != 0;
  const bool last = ctx.opset >= 12 && ctx.node.attr_int("select_last_index", 0) != 0;
  const Shape shape = x.rank() == 0 ? Shape{1} : x.shape();
  Shape out = shape;
  if (keepdims)
    out[axis] = 1;
  else
    out.erase(out.begin() + axis);
  const int64_t n = shape[axis];
  const int64_t outer = product(shape, 0, axis), inner = product(shape, axis + 1, shape.size());
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, DType::kInt64, out));
  if (y->numel() == 0) return Status::ok();
  if (n == 0) return ctx.error("cannot take the arg of an empty axis");
  int64_t* res = y->data<int64_t>();
  Status st = visit_ordered(x, [&](const auto* v) -> Status {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t best = 0;
        for (int64_t j = 1; j < n; ++j) {
          const auto& a = v[(o * n + j) * inner + i];
          const auto& b = v[(o * n + best) * inner + i];
          const bool better = is_max ? less(b, a) : less_nan_low(a, b);
          const bool worse = is_max ? less(a, b) : less_nan_low(b, a);
          if (better || (last && !worse)) best = j;
        }
        res[o * inner + i] = best;
      }
    return Status::ok();
  });
  if (!st) return ctx.error(st.message());
  return Status::ok();
}

Status arg_max(KernelContext& ctx) { return arg_extreme(ctx, true); }
Status arg_min(KernelContext& ctx) { return arg_extreme(ctx, false); }

}  // namespace

KILN_REGISTER_KERNEL("", "Compress", compress);
KILN_REGISTER_KERNEL("", "NonZero", non_zero);
KILN_REGISTER_KERNEL("", "Unique", unique);
KILN_REGISTER_KERNEL("", "TopK", top_k);
KILN_REGISTER_KERNEL("", "ArgMax", arg_max);
KILN_REGISTER_KERNEL("", "ArgMin", arg_min);

}  // namespace kiln
