// A decision forest compiled for evaluation: the trees of an ai.onnx.ml TreeEnsembleClassifier or
// TreeEnsembleRegressor (nodes named by (tree id, node id), children by node id, leaves' weights
// in separate lists) laid out once, at compile time, as flat arrays of 16-byte nodes in
// depth-first order, so that a branch's true child is the next node and a walk touches few cache
// lines. Evaluation adds each tree's leaf weights into per-row, per-target sums; the kernels
// (tree_ensemble.cc) aggregate and post-transform them the way the ONNX operators say.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/status.h"

namespace kiln {

class ThreadPool;

// How a branch compares its feature value v with its threshold t (ONNX's nodes_modes).
enum class TreeBranch : uint8_t { kLeq, kLt, kGte, kGt, kEq, kNeq };

// The attributes of the trees, in ONNX's parallel-array form (one entry per node, one per leaf
// weight). Thresholds are doubles: a forest whose thresholds are all floats stores floats.
struct TreeForestSpec {
  std::vector<int64_t> node_tree, node_id, node_feature, node_true, node_false, node_missing_true;
  std::vector<std::string> node_mode;  // "BRANCH_LEQ", ..., "LEAF"
  std::vector<double> node_threshold;
  std::vector<int64_t> weight_tree, weight_node, weight_target;
  std::vector<double> weight_value;
  int64_t targets = 0;  // classes or regression targets; weight_target is within [0, targets)
};

// Per row of a batch, per target: the sum (or min / max) of the leaf weights reached, and
// whether any leaf reached had a weight for the target.
struct ForestScores {
  std::vector<double> score;    // [rows, targets]
  std::vector<uint8_t> has;     // [rows, targets]
};

enum class ForestAggregate : uint8_t { kSum, kMin, kMax };

class TreeForest {
 public:
  // Checks the spec (lengths agree, every child and weight names a node of its own tree, every
  // tree is a tree: one root, no node reached twice) and lays it out.
  static Result<TreeForest> compile(const TreeForestSpec& spec);

  int64_t trees() const { return static_cast<int64_t>(roots_.size()); }
  int64_t targets() const { return targets_; }
  // Every feature index is below this: X needs at least that many columns.
  int64_t features_needed() const { return features_needed_; }

  // Scores of `rows` rows of `features` values each (float or double, by `x_is_double`),
  // trees and rows spread over the pool. Initializes `out` for `rows`.
  void evaluate(const void* x, bool x_is_double, int64_t rows, int64_t features, ForestAggregate agg,
                ThreadPool* pool, ForestScores& out) const;

 private:
  // A branch: its true child is the next node, its false child `next`; a leaf: its weights are
  // leaves_[next, next + count).
  struct Node {
    float threshold;  // thresholds_d_[i] instead when the forest has double thresholds
    uint32_t bits;    // feature index, and the flags below
    int32_t next;
    int32_t count;
  };
  static constexpr uint32_t kFeatureMask = (1u << 24) - 1;
  static constexpr uint32_t kLeafBit = 1u << 31, kMissingTrueBit = 1u << 30;
  static constexpr int kModeShift = 24;  // TreeBranch in bits 24..26
  struct Leaf {
    int32_t target;
    double weight;
  };
  template <typename T, typename X, bool kAllLeq>
  void walk_trees(const X* x, int64_t row_begin, int64_t row_end, int64_t features, int64_t tree_begin,
                  int64_t tree_end, ForestAggregate agg, double* score, uint8_t* has) const;

  std::vector<Node> nodes_;
  std::vector<int32_t> roots_;   // per tree, its first node
  std::vector<Leaf> leaves_;     // each leaf's weights, a run per leaf node
  std::vector<double> thresholds_d_;  // per node, when a threshold is not a float; else empty
  int64_t targets_ = 0;
  int64_t features_needed_ = 0;
  bool all_leq_ = true;  // every branch is BRANCH_LEQ: the walk needs no mode switch
};

}  // namespace kiln
