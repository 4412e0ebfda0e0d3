// kAvx2Bytes' steps in pairs (qconv.h, PackedWeights::paired_steps). A single step takes
// vpmaddubsw + vpmaddwd against ones for 32 products; a paired step adds two quads' vpmaddubsw
// results in 16 bits first, then one vpmaddwd: 3 multiplies for 64 products, not 4 (Zen 3, a
// register loop: 37 products a cycle against 31). Exact where, for every filter and 16-bit lane,
// the two quads' four weights in it sum to at most 128, positives and negatives apart: with u8
// inputs (at most 255) the lane then stays within int16 (255 x 128 = 32640), and so does each
// vpmaddubsw pair sum. 7-bit weights pass that for most pairs of quads, but a block of 16 filters
// has some filter with a big weight in nearly every quad: of resnet50's natural pairs (quads 2k,
// 2k + 1) 97 % pass, and only 4 % of its blocks pass whole. So each block's quads of a tap are
// matched, the largest (in their biggest lane) with the smallest that fits, then quads left alone
// by swaps into pairs (pair_alone_quads), and read from where they lie through per-step offsets.
// A quad without a partner takes a step of its own, a zero quad beside it.
#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/cpu/qconv/qconv.h"

namespace kiln::qconv {
namespace {

constexpr int kLanes = 32;         // 16-bit lanes of a step's 64 bytes (16 filters x 2)
constexpr int kLaneBound = 128;    // of a lane's positive (or negative) weights: 255 x 128 < 2^15
constexpr int kPartnerTries = 16;  // candidates a quad tries, smallest first
constexpr int64_t kLeastSteps = 8;
constexpr int64_t kSwapTries = 1 << 14;  // pairs a tap's swaps try (pair_alone_quads)

// A quad's weights per 16-bit lane: the sums of its positive and of its negative ones' magnitudes.
struct LaneSums {
  std::array<int16_t, kLanes> positive{}, negative{};
  int16_t largest = 0;

  explicit LaneSums(const int8_t* step) {
    for (int k = 0; k < kLanes; ++k) {
      for (int j = 0; j < 2; ++j) {
        const int v = step[2 * k + j];
        int16_t& sum = v > 0 ? positive[k] : negative[k];
        sum = static_cast<int16_t>(sum + std::abs(v));
      }
      largest = std::max({largest, positive[k], negative[k]});
    }
  }

  bool pairs_with(const LaneSums& o) const {  // (a max, no early exit: GCC vectorizes it)
    int16_t most = 0;
    for (int k = 0; k < kLanes; ++k)
      most = std::max({most, static_cast<int16_t>(positive[k] + o.positive[k]),
                       static_cast<int16_t>(negative[k] + o.negative[k])});
    return most <= kLaneBound;
  }
};

// Two quads the greedy matching left alone, a and b, take the places of a pair {c, d} whose quads
// each fit one of them: {a, c} and {b, d}, a step fewer (an augmenting path of three edges).
// Repeated while one is found, within kSwapTries tries a tap (weights that rarely pair leave
// many quads alone, and the tries grow as their square times the pairs). The greedy matching alone
// left kiln's resnet50's 64 -> 256 convs 8.44 steps a block on average and mobilenet_v2's 64 -> 384
// ones 8.33-8.46 where a maximum matching takes 8; with these swaps 8 and 8.00-8.04.
void pair_alone_quads(const std::vector<LaneSums>& sums, std::vector<std::array<int32_t, 2>>& pairs) {
  int64_t tries = 0;
  for (bool found = true; found && tries < kSwapTries;) {
    found = false;
    std::vector<size_t> alone;
    for (size_t i = 0; i < pairs.size(); ++i)
      if (pairs[i][1] < 0) alone.push_back(i);
    for (size_t i = 0; i < alone.size() && !found; ++i)
      for (size_t j = i + 1; j < alone.size() && !found && tries < kSwapTries; ++j) {
        const int32_t a = pairs[alone[i]][0], b = pairs[alone[j]][0];
        for (auto& pair : pairs) {
          if (pair[1] < 0) continue;
          ++tries;
          for (const int flip : {0, 1}) {
            const int32_t c = pair[flip], d = pair[1 - flip];
            if (!sums[a].pairs_with(sums[c]) || !sums[b].pairs_with(sums[d])) continue;
            pair = {a, c};
            pairs[alone[i]] = {b, d};
            pairs.erase(pairs.begin() + static_cast<std::ptrdiff_t>(alone[j]));
            found = true;
            break;
          }
          if (found) break;
        }
      }
  }
}

// The steps of one block's tap (`steps` quads of 64 bytes) matched into pairs: {a, b}, b -1 alone.
std::vector<std::array<int32_t, 2>> match_quads(const int8_t* tap, int64_t steps) {
  std::vector<LaneSums> sums;
  sums.reserve(static_cast<size_t>(steps));
  for (int64_t s = 0; s < steps; ++s) sums.emplace_back(tap + s * 64);
  std::vector<int32_t> order(static_cast<size_t>(steps));  // largest first
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return sums[a].largest > sums[b].largest; });
  std::vector<bool> taken(static_cast<size_t>(steps), false);
  std::vector<std::array<int32_t, 2>> pairs;
  int64_t smallest = steps - 1;  // the smallest quad not taken is at or before it in `order`
  for (const int32_t a : order) {
    if (taken[a]) continue;
    taken[a] = true;
    while (smallest >= 0 && taken[order[smallest]]) --smallest;
    int32_t partner = -1;
    for (int64_t i = smallest, tries = 0; i >= 0 && tries < kPartnerTries; --i) {
      const int32_t b = order[i];
      if (taken[b]) continue;
      ++tries;
      if (sums[a].pairs_with(sums[b])) {
        partner = b;
        break;
      }
    }
    if (partner >= 0) taken[partner] = true;
    pairs.push_back({a, partner});
  }
  pair_alone_quads(sums, pairs);
  return pairs;
}

}  // namespace

void PackedWeights::pair_steps() {
  // Fewer than 8 steps a tap (32 channels): the 5-pixel tiles' stores cost more than the pairs
  // save (mobilenet_v2's 16 -> 96 at 112x112: 233 -> 248 us; 24 -> 144 at 56x56 even).
  if (tile_ != Tile::kAvx2Bytes || steps_ < kLeastSteps || blocks_ == 0) return;
  std::vector<std::vector<std::array<int32_t, 2>>> units;  // per block and tap
  std::vector<int64_t> block_steps(static_cast<size_t>(blocks_), 0);  // a block's most over its taps
  for (int64_t u = 0; u < blocks_ * taps_; ++u) {
    units.push_back(match_quads(data_.data() + u * steps_ * 64, steps_));
    int64_t& b = block_steps[static_cast<size_t>(u / taps_)];
    b = std::max<int64_t>(b, static_cast<int64_t>(units.back().size()));
  }
  const int64_t most = *std::max_element(block_steps.begin(), block_steps.end());
  const int64_t total = std::accumulate(block_steps.begin(), block_steps.end(), int64_t{0});
  // A paired step takes 5/3 the time of a single one (3 multiplies against 2, in 5-pixel tiles:
  // 64 products at 37 a cycle against 32 at 31): pairs pay below 3/5 of steps_ a tap, counted as
  // the blocks run them (each its most over its taps, the rest of a tap's steps zero steps at
  // offset 0, skipped).
  if (5 * total >= 3 * steps_ * blocks_) return;
  std::vector<int8_t> paired(static_cast<size_t>(blocks_ * taps_ * most * 128), 0);
  std::vector<int32_t> offsets(static_cast<size_t>(blocks_ * taps_ * most * 2), 0);
  for (int64_t u = 0; u < blocks_ * taps_; ++u)
    for (size_t s = 0; s < units[u].size(); ++s) {
      const auto [a, b] = units[u][s];
      int8_t* to = paired.data() + (u * most + static_cast<int64_t>(s)) * 128;
      std::memcpy(to, data_.data() + (u * steps_ + a) * 64, 64);
      if (b >= 0) std::memcpy(to + 64, data_.data() + (u * steps_ + b) * 64, 64);
      int32_t* off = offsets.data() + (u * most + static_cast<int64_t>(s)) * 2;
      off[0] = 4 * a, off[1] = 4 * (b >= 0 ? b : a);  // (a zero quad: any readable bytes)
    }
  data_.swap(paired);
  step_offsets_.swap(offsets);
  paired_steps_ = most;
  block_paired_steps_ = std::move(block_steps);
  block_bytes_ = taps_ * most * 128;
}

}  // namespace kiln::qconv
