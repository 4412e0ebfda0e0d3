// The AVX2 dense kernel's tap plan (blocked_conv_dense_taps.h).
#include "kernels/kiln/nchwc/blocked_conv_dense_taps.h"

#include <algorithm>

#include "kernels/kiln/nchwc/blocked_layout.h"

namespace kiln::nchwc {
namespace {

// The steps of `blocks` input blocks from block 0 (see Steps) over kernel rows `rows` and columns
// `cols`, on the padded geometry s, into st (whose vectors keep their capacity from call to call).
void fill_steps(const BlockedConvShape& s, int64_t in_plane, int64_t blocks, Taps rows, Taps cols,
                Steps& st) {
  const bool plain = s.plain_channels > 0;
  const int64_t planes = plain ? s.plain_channels : 1;  // steps per block and tap
  st.x.clear();
  st.w.clear();
  st.per_block = planes * (rows.end - rows.first) * (cols.end - cols.first);
  for (int64_t cb = 0; cb < blocks; ++cb)
    for (int64_t c = 0; c < planes; ++c)
      for (int64_t kh = rows.first; kh < rows.end; ++kh)
        for (int64_t kw = cols.first; kw < cols.end; ++kw) {
          const int64_t tap = kh * s.dh * s.w + kw * s.dw;
          st.x.push_back(plain ? c * s.h * s.w + tap : cb * in_plane + tap * kBlock);
          st.w.push_back(((cb * s.kh + kh) * s.kw + kw) * kBlock * kBlock + c * kBlock);
        }
}

int index_of(std::vector<Taps>& list, Taps taps) {
  const auto it = std::find(list.begin(), list.end(), taps);
  if (it != list.end()) return static_cast<int>(it - list.begin());
  list.push_back(taps);
  return static_cast<int>(list.size()) - 1;
}

}  // namespace

void plan_taps(const BlockedConvShape& shape, const BlockedConvShape& in, bool by_rows, bool padded,
               const int* max_r, int max_b, TapPlan& plan) {
  plan.rows.assign(1, {0, in.kh});
  plan.cols.assign(1, {0, in.kw});
  plan.top_rows.clear();
  plan.bottom_rows.clear();
  plan.runs.resize(max_b + 1);
  for (auto& runs : plan.runs) runs.clear();
  auto rows_of = [&](int64_t oh) {
    const auto [k0, k1] = valid_taps(oh * shape.sh - shape.pt, shape.dh, shape.kh, shape.h);
    return index_of(plan.rows, {k0, k1});
  };
  int64_t top = 0, bottom = in.oh;
  if (padded) {
    for (int r; top < in.oh && (r = rows_of(top)) != 0; ++top) plan.top_rows.push_back(r);
    while (bottom > top && rows_of(bottom - 1) != 0) --bottom;
    for (int64_t oh = bottom; oh < in.oh; ++oh) plan.bottom_rows.push_back(rows_of(oh));
  }
  plan.bottom = bottom;
  for (int b = 1; b <= max_b && by_rows; ++b) {
    std::vector<Run>& runs = plan.runs[b];
    const RowCut cut = cut_row(in.ow, max_r[b]);
    for (int64_t i = 0, ow = 0; i < cut.count; ++i) {
      const int width = static_cast<int>(cut.narrow + (i < cut.wide ? 1 : 0));
      int cols = 0;
      if (padded) {  // the columns some pixel of the tile reads X with
        const int64_t first = ow * shape.sw - shape.pl;
        const auto [k0, k1] = tile_taps(first, first + (width - 1) * shape.sw, shape.dw, shape.kw, shape.w);
        cols = index_of(plan.cols, {k0, k1});
      }
      if (!runs.empty() && runs.back().width == width && runs.back().cols == cols)
        ++runs.back().count;
      else
        runs.push_back({ow, 1, width, cols});
      ow += width;
    }
  }
}

double taps_read(const TapPlan& plan, int b, const BlockedConvShape& in) {
  if (plan.rows.size() == 1 && plan.cols.size() == 1) return 1.0;
  // Rows and columns are independent: the share is the product of their shares.
  auto len = [](Taps t) { return static_cast<double>(t.end - t.first); };
  const int64_t top = static_cast<int64_t>(plan.top_rows.size());
  double rows = static_cast<double>(plan.bottom - top) * len(plan.rows[0]), cols = 0;
  for (const int r : plan.top_rows) rows += len(plan.rows[r]);
  for (const int r : plan.bottom_rows) rows += len(plan.rows[r]);
  for (const Run& run : plan.runs[b])
    cols += static_cast<double>(run.count * run.width) * len(plan.cols[run.cols]);
  return rows / static_cast<double>(in.oh * in.kh) * cols / static_cast<double>(in.ow * in.kw);
}

void fill_plan_steps(const BlockedConvShape& in, int64_t in_plane, int64_t blocks, TapPlan& plan) {
  // Grown, never shrunk: a model's convs take different counts, and a slot dropped by a smaller
  // plan would allocate its lists again in the next run (SteadyState.ResnetLikeAllocatesNothing).
  const size_t lists = plan.rows.size() * plan.cols.size();
  if (plan.steps.size() < lists) plan.steps.resize(lists);
  for (size_t r = 0; r < plan.rows.size(); ++r)
    for (size_t c = 0; c < plan.cols.size(); ++c)
      fill_steps(in, in_plane, blocks, plan.rows[r], plan.cols[c], plan.steps[r * plan.cols.size() + c]);
}

}  // namespace kiln::nchwc
