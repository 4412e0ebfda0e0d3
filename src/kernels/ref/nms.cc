// Reference kernel for NonMaxSuppression: greedy per (batch, class) selection by score with IoU
// suppression; corner boxes (any diagonal) or center_point_box boxes.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernels/kernel_util.h"

namespace kiln {
namespace {

struct Box {
  double x_min, y_min, x_max, y_max;
};

Box load_box(const Tensor& boxes, int64_t offset, bool center) {
  double v[4];
  for (int k = 0; k < 4; ++k) v[k] = load_as_double(boxes.dtype(), boxes.raw_data(), offset + k);
  if (center) return {v[0] - v[2] / 2, v[1] - v[3] / 2, v[0] + v[2] / 2, v[1] + v[3] / 2};
  return {std::min(v[1], v[3]), std::min(v[0], v[2]), std::max(v[1], v[3]), std::max(v[0], v[2])};
}

bool suppresses(const Box& a, const Box& b, double iou_threshold) {
  const double ix = std::min(a.x_max, b.x_max) - std::max(a.x_min, b.x_min);
  const double iy = std::min(a.y_max, b.y_max) - std::max(a.y_min, b.y_min);
  if (!(ix > 0) || !(iy > 0)) return false;
  const double inter = ix * iy;
  const double area_a = (a.x_max - a.x_min) * (a.y_max - a.y_min);
  const double area_b = (b.x_max - b.x_min) * (b.y_max - b.y_min);
  const double uni = area_a + area_b - inter;
  if (!(area_a > 0) || !(area_b > 0) || !(uni > 0)) return false;
  return inter / uni > iou_threshold;
}

Status non_max_suppression(KernelContext& ctx) {
  if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1))
    return ctx.error("expected inputs 'boxes' and 'scores'");
  const Tensor& boxes = ctx.input(0);
  const Tensor& scores = ctx.input(1);
  if (!dtype_is_compute_float(boxes.dtype()) || !dtype_is_compute_float(scores.dtype()))
    return ctx.error("boxes and scores must be float tensors");
  if (boxes.rank() != 3 || boxes.dim(2) != 4)
    return ctx.error("boxes must have shape [B, N, 4], got " + shape_str(boxes.shape()));
  if (scores.rank() != 3 || scores.dim(0) != boxes.dim(0) || scores.dim(2) != boxes.dim(1))
    return ctx.error("scores shape " + shape_str(scores.shape()) + " does not match boxes " +
                     shape_str(boxes.shape()) + " (expected [B, C, N])");
  int64_t max_per_class = 0;
  double iou_threshold = 0, score_threshold = 0;
  bool use_score_threshold = false;
  if (ctx.has_input(2) && ctx.input(2).numel() > 0) {
    auto v = read_int64s(ctx.input(2));
    if (!v.is_ok()) return ctx.error("max_output_boxes_per_class: " + v.status().message());
    max_per_class = std::max<int64_t>((*v)[0], 0);
  }
  if (ctx.has_input(3) && ctx.input(3).numel() > 0) {
    auto v = read_scalar(ctx.input(3));
    if (!v.is_ok()) return ctx.error("iou_threshold: " + v.status().message());
    iou_threshold = *v;
  }
  if (ctx.has_input(4) && ctx.input(4).numel() > 0) {
    auto v = read_scalar(ctx.input(4));
    if (!v.is_ok()) return ctx.error("score_threshold: " + v.status().message());
    score_threshold = *v;
    use_score_threshold = true;
  }
  const int64_t cpb = ctx.node.attr_int("center_point_box", 0);
  if (cpb != 0 && cpb != 1)
    return ctx.error("center_point_box must be 0 or 1, got " + std::to_string(cpb));

  const int64_t nb = boxes.dim(0), nc = scores.dim(1), nbox = boxes.dim(1);
  std::vector<int64_t> selected;  // triples
  std::vector<int64_t> order;
  std::vector<Box> kept;
  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t c = 0; c < nc; ++c) {
      const int64_t soff = (b * nc + c) * nbox;
      // NaN scores sort last, which keeps the comparison a strict weak order.
      auto score = [&](int64_t i) {
        const double v = load_as_double(scores.dtype(), scores.raw_data(), soff + i);
        return std::isnan(v) ? -std::numeric_limits<double>::infinity() : v;
      };
      order.clear();
      for (int64_t i = 0; i < nbox; ++i)
        if (!use_score_threshold ||
            load_as_double(scores.dtype(), scores.raw_data(), soff + i) > score_threshold)
          order.push_back(i);
      // Highest score first; equal scores keep the lower box index first.
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t i, int64_t j) { return score(i) > score(j); });
      kept.clear();
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) >= max_per_class) break;
        const Box box = load_box(boxes, (b * nbox + i) * 4, cpb == 1);
        bool keep = true;
        for (const Box& k : kept) {
          if (suppresses(box, k, iou_threshold)) {
            keep = false;
            break;
          }
        }
        if (!keep) continue;
        kept.push_back(box);
        selected.insert(selected.end(), {b, c, i});
      }
    }
  }
  const int64_t n = static_cast<int64_t>(selected.size() / 3);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, DType::kInt64, {n, 3}));
  std::copy(selected.begin(), selected.end(), y->data<int64_t>());
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("", "NonMaxSuppression", non_max_suppression);

}  // namespace kiln
