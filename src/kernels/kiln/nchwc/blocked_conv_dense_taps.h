// Which taps the AVX2 dense BlockedConv kernel's tiles read, as the step lists its tiles run (plain
// C++, no ISA flags). dense_input pads X so that every tap of every tile is inside, and a tap
// that reads only its zero border adds nothing: the kernel rows an output row reads X with are
// one range, and the columns the pixels of a tile read X with are one range, so each (rows,
// columns) pair has a step list of its own and the tiles skip the rest. DeepLabV3's ASPP conv at
// rate 24 on a 33x33 map reads X with half its kernel rows, and in the middle tiles with only the
// middle column; the top and bottom rows of a padded 3x3 conv skip a third of their FMAs. A conv
// without padding has one pair: every tap.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kiln/nchwc/blocked_conv.h"

namespace kiln::nchwc {

// The reduction of a tile as one flat list of steps, one per (input block, tap) of a chunk (per
// (input channel, tap) for a plain input): step k reads its input lanes at the tile's first
// pixel + x[k] and its weights at the chunk's weights + w[k]. One loop over a list, instead of
// nested loops over blocks, kernel rows and columns, keeps GCC from spilling the accumulators at
// every tap: 1.3x on 1x1 convs on Zen 2. The list is the same for every tile of a chunk that reads
// the same taps (the shorter last chunk reads a prefix).
struct Steps {
  std::vector<int64_t> x, w;
  int64_t per_block = 0;  // steps per input block
};

// A range [first, end) of kernel rows or columns.
struct Taps {
  int64_t first, end;
  bool operator==(const Taps& o) const { return first == o.first && end == o.end; }
};

// Tiles of one width from column ow on, all reading kernel columns `cols` (an index of
// TapPlan::cols).
struct Run {
  int64_t ow, count;
  int width, cols;
};

struct TapPlan {
  std::vector<Taps> rows, cols;  // the distinct ranges; [0] is every tap
  // Output rows [0, top) read rows[top_rows[oh]], rows [bottom, oh) rows[bottom_rows[oh -
  // bottom]], the rows between every kernel row (found from the edges in, as a plan is made at
  // every call: a row list had cost the small RGB stems 2-4 %).
  std::vector<int> top_rows, bottom_rows;
  int64_t bottom = 0;
  std::vector<std::vector<Run>> runs;  // per blocks per tile B: the tiles of a row, left to right
  std::vector<Steps> steps;            // [row index * cols.size() + column index]

  const Steps& of(int64_t oh, int cols_index) const {
    const int64_t top = static_cast<int64_t>(top_rows.size());
    const int r = oh < top ? top_rows[oh] : oh >= bottom ? bottom_rows[oh - bottom] : 0;
    return steps[r * cols.size() + cols_index];
  }
};

// Pixels [0, n) of a row in the fewest tiles of at most max_r pixels, whose widths differ by one
// at most: 7 pixels are 4 + 3, 49 are 4 x 6 + 5 x 5 and 56 are 6 x 6 + 4 x 5, not 6 + 1, 8 x 6 + 1
// and 9 x 6 + 2. A 1- or 2-pixel tile has 2 or 4 accumulators, each FMA waiting on the last: such
// tiles took 4-5 % of resnext50's time (Zen 3). `wide` tiles of narrow + 1 pixels come first.
struct RowCut {
  int64_t count, narrow, wide;
};
inline RowCut cut_row(int64_t n, int max_r) {
  const int64_t count = (n + max_r - 1) / max_r;
  return {count, n / count, n % count};
}

// The plan of conv `in` (the geometry over dense_input's X) for `shape` (X's own): the tap ranges
// of its rows (when `padded`: X was copied into a zero border) and, with by_rows, of its tiles
// when each row of B blocks is cut by cut_row into tiles of at most max_r[B] pixels, for every B
// in [1, max_b].
void plan_taps(const BlockedConvShape& shape, const BlockedConvShape& in, bool by_rows, bool padded,
               const int* max_r, int max_b, TapPlan& plan);

// The share of the kernel's taps the tiles of B blocks read, on average over the output.
double taps_read(const TapPlan& plan, int b, const BlockedConvShape& in);

// The plan's step lists over `blocks` input blocks (in_plane: floats per input block).
void fill_plan_steps(const BlockedConvShape& in, int64_t in_plane, int64_t blocks, TapPlan& plan);

}  // namespace kiln::nchwc
