#include "kernels/cpu/ml/tree_forest.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>

#include "core/thread_pool.h"

namespace kiln {
namespace {

Result<TreeBranch> parse_mode(const std::string& m) {
  if (m == "BRANCH_LEQ") return TreeBranch::kLeq;
  if (m == "BRANCH_LT") return TreeBranch::kLt;
  if (m == "BRANCH_GTE") return TreeBranch::kGte;
  if (m == "BRANCH_GT") return TreeBranch::kGt;
  if (m == "BRANCH_EQ") return TreeBranch::kEq;
  if (m == "BRANCH_NEQ") return TreeBranch::kNeq;
  return Status::error("nodes_modes value '" + m + "' is not one of BRANCH_LEQ, BRANCH_LT, BRANCH_GTE, "
                       "BRANCH_GT, BRANCH_EQ, BRANCH_NEQ, LEAF");
}

std::string node_name(const TreeForestSpec& s, size_t i) {
  return "node (tree " + std::to_string(s.node_tree[i]) + ", id " + std::to_string(s.node_id[i]) + ")";
}

// Rows walked together through one tree, so that its nodes stay in cache across them.
constexpr int64_t kRowBlock = 16;

}  // namespace

Result<TreeForest> TreeForest::compile(const TreeForestSpec& s) {
  const size_t n = s.node_id.size();
  for (const auto* v : {&s.node_tree, &s.node_feature, &s.node_true, &s.node_false})
    if (v->size() != n) return Status::error("the nodes_* attributes differ in length");
  if (s.node_mode.size() != n) return Status::error("the nodes_* attributes differ in length");
  if (!s.node_missing_true.empty() && s.node_missing_true.size() != n)
    return Status::error("nodes_missing_value_tracks_true differs in length from the other nodes_* attributes");
  const size_t nw = s.weight_value.size();
  if (s.weight_tree.size() != nw || s.weight_node.size() != nw || s.weight_target.size() != nw)
    return Status::error("the leaf weight attributes (*_treeids, *_nodeids, *_ids, *_weights) differ in length");
  if (n == 0) return Status::error("the ensemble has no nodes");
  if (n >= (size_t{1} << 31) || nw >= (size_t{1} << 31)) return Status::error("the ensemble has too many nodes");
  if (s.targets < 1 || s.targets > (int64_t{1} << 24)) return Status::error("the number of classes or targets must be in [1, 2^24]");

  std::vector<int8_t> leaf(n);
  std::vector<TreeBranch> mode(n, TreeBranch::kLeq);
  for (size_t i = 0; i < n; ++i) {
    leaf[i] = s.node_mode[i] == "LEAF";
    if (leaf[i]) continue;
    KILN_ASSIGN_OR_RETURN(mode[i], parse_mode(s.node_mode[i]));
    if (i >= s.node_threshold.size()) return Status::error("nodes_values has fewer entries than there are branches");
    if (s.node_feature[i] < 0 || s.node_feature[i] > static_cast<int64_t>(kFeatureMask))
      return Status::error(node_name(s, i) + " reads feature " + std::to_string(s.node_feature[i]) + ", outside [0, 2^24)");
  }

  // Nodes sorted by (tree, id): each tree is a run, and a node is found by binary search in it.
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  auto key_less = [&](int32_t a, int32_t b) {
    return s.node_tree[a] != s.node_tree[b] ? s.node_tree[a] < s.node_tree[b] : s.node_id[a] < s.node_id[b];
  };
  std::sort(order.begin(), order.end(), key_less);
  for (size_t k = 1; k < n; ++k)
    if (!key_less(order[k - 1], order[k])) return Status::error(node_name(s, order[k]) + " is defined twice");
  auto find = [&](size_t b, size_t e, int64_t id) -> int32_t {
    auto it = std::lower_bound(order.begin() + b, order.begin() + e, id,
                               [&](int32_t a, int64_t v) { return s.node_id[a] < v; });
    return it != order.begin() + e && s.node_id[*it] == id ? *it : -1;
  };

  // Children as node indices; a tree's root is its one node no branch names.
  std::vector<int32_t> child_true(n, -1), child_false(n, -1);
  std::vector<uint8_t> named(n);
  std::vector<std::pair<size_t, size_t>> runs;  // [begin, end) of each tree in `order`
  for (size_t b = 0; b < n;) {
    size_t e = b;
    while (e < n && s.node_tree[order[e]] == s.node_tree[order[b]]) ++e;
    runs.push_back({b, e});
    for (size_t k = b; k < e; ++k) {
      const int32_t i = order[k];
      if (leaf[i]) continue;
      child_true[i] = find(b, e, s.node_true[i]);
      child_false[i] = find(b, e, s.node_false[i]);
      if (child_true[i] < 0 || child_false[i] < 0)
        return Status::error(node_name(s, i) + " branches to a node id its tree does not have");
      named[child_true[i]] = named[child_false[i]] = 1;
    }
    b = e;
  }

  // Leaf weights grouped by node.
  std::vector<int32_t> weight_node(nw);
  for (size_t w = 0; w < nw; ++w) {
    auto run = std::lower_bound(runs.begin(), runs.end(), s.weight_tree[w],
                                [&](const std::pair<size_t, size_t>& r, int64_t t) { return s.node_tree[order[r.first]] < t; });
    const int32_t i = run == runs.end() ? -1 : find(run->first, run->second, s.weight_node[w]);
    if (i < 0) return Status::error("a leaf weight names tree " + std::to_string(s.weight_tree[w]) + ", node " + std::to_string(s.weight_node[w]) + ", which does not exist");
    if (!leaf[i]) return Status::error("a leaf weight names " + node_name(s, i) + ", which is not a LEAF");
    if (s.weight_target[w] < 0 || s.weight_target[w] >= s.targets)
      return Status::error("a leaf weight's class or target id " + std::to_string(s.weight_target[w]) + " is outside [0, " + std::to_string(s.targets) + ")");
    weight_node[w] = i;
  }
  std::vector<int32_t> by_node(nw);
  std::iota(by_node.begin(), by_node.end(), 0);
  std::stable_sort(by_node.begin(), by_node.end(), [&](int32_t a, int32_t b) { return weight_node[a] < weight_node[b]; });
  std::vector<int32_t> first_weight(n + 1, 0);
  for (size_t w = 0; w < nw; ++w) ++first_weight[weight_node[w] + 1];
  for (size_t i = 0; i < n; ++i) first_weight[i + 1] += first_weight[i];

  TreeForest f;
  f.targets_ = s.targets;
  bool float_thresholds = true;
  for (size_t i = 0; i < n; ++i)
    if (!leaf[i] && static_cast<double>(static_cast<float>(s.node_threshold[i])) != s.node_threshold[i] &&
        !std::isnan(s.node_threshold[i]))
      float_thresholds = false;
  f.nodes_.reserve(n);
  f.leaves_.reserve(nw);
  std::vector<int32_t> placed(n, -1);
  std::vector<int32_t> stack;
  for (const auto& [b, e] : runs) {
    int32_t root = -1;
    for (size_t k = b; k < e; ++k) {
      if (named[order[k]]) continue;
      if (root >= 0) return Status::error("tree " + std::to_string(s.node_tree[order[b]]) + " has more than one root");
      root = order[k];
    }
    if (root < 0) return Status::error("tree " + std::to_string(s.node_tree[order[b]]) + " has no root (its nodes form a cycle)");
    f.roots_.push_back(static_cast<int32_t>(f.nodes_.size()));
    // Depth-first, true child first: it lands right after its parent.
    std::vector<std::pair<int32_t, int32_t>> fixups;  // (placed branch, false child node)
    stack.assign(1, root);
    while (!stack.empty()) {
      const int32_t i = stack.back();
      stack.pop_back();
      if (placed[i] >= 0) return Status::error(node_name(s, i) + " is reached twice: the tree is not a tree");
      placed[i] = static_cast<int32_t>(f.nodes_.size());
      Node node{};
      if (leaf[i]) {
        node.bits = kLeafBit;
        node.next = static_cast<int32_t>(f.leaves_.size());
        for (int32_t k = first_weight[i]; k < first_weight[i + 1]; ++k) {
          const int32_t w = by_node[k];
          f.leaves_.push_back({static_cast<int32_t>(s.weight_target[w]), s.weight_value[w]});
        }
        node.count = static_cast<int32_t>(f.leaves_.size()) - node.next;
      } else {
        const uint32_t feature = static_cast<uint32_t>(s.node_feature[i]);
        const bool missing = !s.node_missing_true.empty() && s.node_missing_true[i] != 0;
        node.bits = feature | (static_cast<uint32_t>(mode[i]) << kModeShift) | (missing ? kMissingTrueBit : 0u);
        node.threshold = static_cast<float>(s.node_threshold[i]);
        f.features_needed_ = std::max<int64_t>(f.features_needed_, feature + 1);
        f.all_leq_ = f.all_leq_ && mode[i] == TreeBranch::kLeq;
        if (child_true[i] == child_false[i]) {
          // Both ways lead to the same subtree: lay it out once.
          stack.push_back(child_true[i]);
          node.next = static_cast<int32_t>(f.nodes_.size()) + 1;
        } else {
          fixups.push_back({static_cast<int32_t>(f.nodes_.size()), child_false[i]});
          stack.push_back(child_false[i]);
          stack.push_back(child_true[i]);
        }
      }
      f.nodes_.push_back(node);
      if (!float_thresholds) f.thresholds_d_.push_back(leaf[i] ? 0.0 : s.node_threshold[i]);
    }
    for (const auto& [at, child] : fixups) f.nodes_[at].next = placed[child];
  }
  return f;
}

template <typename T, typename X, bool kAllLeq>
void TreeForest::walk_trees(const X* x, int64_t row_begin, int64_t row_end, int64_t features, int64_t tree_begin,
                            int64_t tree_end, ForestAggregate agg, double* score, uint8_t* has) const {
  // Compared in double when the input or the thresholds are double, as ONNX Runtime does.
  using C = std::conditional_t<std::is_same_v<T, double> || std::is_same_v<X, double>, double, float>;
  const Node* nodes = nodes_.data();
  for (int64_t rb = row_begin; rb < row_end; rb += kRowBlock) {
    const int64_t re = std::min(row_end, rb + kRowBlock);
    for (int64_t t = tree_begin; t < tree_end; ++t) {
      for (int64_t r = rb; r < re; ++r) {
        const X* xr = x + r * features;
        int32_t i = roots_[t];
        while (!(nodes[i].bits & kLeafBit)) {
          const Node& nd = nodes[i];
          const C v = static_cast<C>(xr[nd.bits & kFeatureMask]);
          C th;
          if constexpr (std::is_same_v<T, double>) th = static_cast<C>(thresholds_d_[i]);
          else th = static_cast<C>(nd.threshold);
          bool go;
          if constexpr (kAllLeq) {
            go = v <= th;
          } else {
            switch (static_cast<TreeBranch>((nd.bits >> kModeShift) & 7)) {
              case TreeBranch::kLeq: go = v <= th; break;
              case TreeBranch::kLt: go = v < th; break;
              case TreeBranch::kGte: go = v >= th; break;
              case TreeBranch::kGt: go = v > th; break;
              case TreeBranch::kEq: go = v == th; break;
              default: go = v != th; break;
            }
          }
          go = go || ((nd.bits & kMissingTrueBit) && std::isnan(v));
          i = go ? i + 1 : nd.next;
        }
        double* sr = score + r * targets_;
        uint8_t* hr = has + r * targets_;
        for (int32_t k = nodes[i].next, e = k + nodes[i].count; k < e; ++k) {
          const Leaf& l = leaves_[k];
          double& slot = sr[l.target];
          if (agg == ForestAggregate::kSum) slot += l.weight;
          else if (!hr[l.target]) slot = l.weight;
          else slot = agg == ForestAggregate::kMin ? std::min(slot, l.weight) : std::max(slot, l.weight);
          hr[l.target] = 1;
        }
      }
    }
  }
}

void TreeForest::evaluate(const void* x, bool x_is_double, int64_t rows, int64_t features, ForestAggregate agg,
                          ThreadPool* pool, ForestScores& out) const {
  const size_t cells = static_cast<size_t>(rows * targets_);
  out.score.assign(cells, 0.0);
  out.has.assign(cells, 0);
  auto walk = [&](int64_t r0, int64_t r1, int64_t t0, int64_t t1, double* score, uint8_t* has) {
    auto go = [&](auto tag_t, auto tag_x) {
      using T = typename decltype(tag_t)::type;
      using X = typename decltype(tag_x)::type;
      if (all_leq_) walk_trees<T, X, true>(static_cast<const X*>(x), r0, r1, features, t0, t1, agg, score, has);
      else walk_trees<T, X, false>(static_cast<const X*>(x), r0, r1, features, t0, t1, agg, score, has);
    };
    const bool dt = !thresholds_d_.empty();
    if (x_is_double) dt ? go(std::type_identity<double>{}, std::type_identity<double>{}) : go(std::type_identity<float>{}, std::type_identity<double>{});
    else dt ? go(std::type_identity<double>{}, std::type_identity<float>{}) : go(std::type_identity<float>{}, std::type_identity<float>{});
  };
  const int threads = pool ? pool->threads() : 1;
  const int64_t n_trees = trees();
  if (threads == 1 || rows >= 2 * threads * kRowBlock || n_trees < 2 * threads) {
    // Enough rows: each chunk of rows walks every tree, writing only its own rows.
    if (pool == nullptr || rows < 2) return walk(0, rows, 0, n_trees, out.score.data(), out.has.data());
    pool->parallel_for(rows, 1, [&](int64_t r0, int64_t r1) { walk(r0, r1, 0, n_trees, out.score.data(), out.has.data()); });
    return;
  }
  // Few rows: the trees are split into a fixed number of parts, each summed apart, then merged in
  // part order, so that the result does not depend on which thread ran which part.
  const int64_t parts = std::min<int64_t>(2 * threads, n_trees);
  std::vector<double> score(parts * cells, 0.0);
  std::vector<uint8_t> has(parts * cells, 0);
  pool->parallel_for(parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      walk(0, rows, p * n_trees / parts, (p + 1) * n_trees / parts, score.data() + p * cells, has.data() + p * cells);
  });
  for (int64_t p = 0; p < parts; ++p) {
    for (size_t c = 0; c < cells; ++c) {
      if (!has[p * cells + c]) continue;
      const double v = score[p * cells + c];
      double& slot = out.score[c];
      if (agg == ForestAggregate::kSum) slot += v;
      else if (!out.has[c]) slot = v;
      else slot = agg == ForestAggregate::kMin ? std::min(slot, v) : std::max(slot, v);
      out.has[c] = 1;
    }
  }
}

}  // namespace kiln
