// The compiled decision forest (kernels/cpu/ml/tree_forest.h) against a plain recursive walk of
// the ONNX attributes: random trees with shuffled node ids and every branch mode, NaN inputs
// with and without missing-value tracking, sum / min / max, at 1 and 2 threads with one row (the
// trees split over the threads) and many (the rows split); and malformed ensembles rejected with
// an error naming the problem.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/ml/tree_forest.h"

namespace kiln {
namespace {

const char* const kModes[] = {"BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"};

// Random trees in ONNX's attribute form; node ids within a tree are a random permutation.
TreeForestSpec random_forest(std::mt19937& rng, int trees, int features, int targets) {
  TreeForestSpec s;
  s.targets = targets;
  std::uniform_real_distribution<double> u(0, 1);
  for (int t = 0; t < trees; ++t) {
    struct N { bool leaf; int f, mode, tc, fc, miss; double thr; };
    std::vector<N> nodes;
    std::function<int(int)> grow = [&](int depth) {
      const int i = static_cast<int>(nodes.size());
      nodes.push_back({});
      if (depth == 0 || u(rng) < 0.2) {
        nodes[i].leaf = true;
        return i;
      }
      const int tc = grow(depth - 1), fc = grow(depth - 1);
      nodes[i] = {false, static_cast<int>(rng() % features), static_cast<int>(rng() % 6), tc, fc,
                  static_cast<int>(rng() % 2), u(rng) < 0.3 ? 0.0 : static_cast<double>(static_cast<float>(u(rng) * 2 - 1))};
      return i;
    };
    grow(static_cast<int>(rng() % 6));
    std::vector<int64_t> id(nodes.size());
    for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<int64_t>(i) * 3 + 7;
    std::shuffle(id.begin(), id.end(), rng);
    for (size_t i = 0; i < nodes.size(); ++i) {
      const N& n = nodes[i];
      s.node_tree.push_back(100 - t);
      s.node_id.push_back(id[i]);
      s.node_mode.push_back(n.leaf ? "LEAF" : kModes[n.mode]);
      s.node_feature.push_back(n.leaf ? 0 : n.f);
      s.node_threshold.push_back(n.leaf ? 0 : n.thr);
      s.node_true.push_back(n.leaf ? 0 : id[n.tc]);
      s.node_false.push_back(n.leaf ? 0 : id[n.fc]);
      s.node_missing_true.push_back(n.leaf ? 0 : n.miss);
      if (!n.leaf) continue;
      for (int k = 0, count = 1 + static_cast<int>(rng() % 2); k < count; ++k) {
        s.weight_tree.push_back(100 - t);
        s.weight_node.push_back(id[i]);
        s.weight_target.push_back(static_cast<int64_t>(rng() % targets));
        s.weight_value.push_back(u(rng) * 2 - 1);
      }
    }
  }
  return s;
}

// The reference: each tree walked from its root by looking nodes up by (tree, id).
ForestScores reference(const TreeForestSpec& s, const std::vector<float>& x, int64_t rows, int64_t features,
                       ForestAggregate agg) {
  std::map<std::pair<int64_t, int64_t>, size_t> at;
  std::map<int64_t, std::vector<size_t>> children_named;
  for (size_t i = 0; i < s.node_id.size(); ++i) at[{s.node_tree[i], s.node_id[i]}] = i;
  std::map<int64_t, size_t> root;  // the node of each tree that no branch names
  std::map<std::pair<int64_t, int64_t>, bool> named;
  for (size_t i = 0; i < s.node_id.size(); ++i)
    if (s.node_mode[i] != "LEAF") named[{s.node_tree[i], s.node_true[i]}] = named[{s.node_tree[i], s.node_false[i]}] = true;
  for (size_t i = 0; i < s.node_id.size(); ++i)
    if (!named.count({s.node_tree[i], s.node_id[i]})) root[s.node_tree[i]] = i;
  ForestScores out;
  out.score.assign(rows * s.targets, 0.0);
  out.has.assign(rows * s.targets, 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (const auto& [tree, first] : root) {
      size_t i = first;
      while (s.node_mode[i] != "LEAF") {
        const float v = x[r * features + s.node_feature[i]];
        const float t = static_cast<float>(s.node_threshold[i]);
        const std::string& m = s.node_mode[i];
        bool go = m == "BRANCH_LEQ" ? v <= t : m == "BRANCH_LT" ? v < t : m == "BRANCH_GTE" ? v >= t
                  : m == "BRANCH_GT" ? v > t : m == "BRANCH_EQ" ? v == t : v != t;
        if (std::isnan(v) && s.node_missing_true[i]) go = true;
        i = at.at({tree, go ? s.node_true[i] : s.node_false[i]});
      }
      for (size_t w = 0; w < s.weight_value.size(); ++w) {
        if (s.weight_tree[w] != tree || s.weight_node[w] != s.node_id[i]) continue;
        const size_t c = r * s.targets + s.weight_target[w];
        const double v = s.weight_value[w];
        if (agg == ForestAggregate::kSum) out.score[c] += v;
        else if (!out.has[c]) out.score[c] = v;
        else out.score[c] = agg == ForestAggregate::kMin ? std::min(out.score[c], v) : std::max(out.score[c], v);
        out.has[c] = 1;
      }
    }
  }
  return out;
}

TEST(TreeForest, MatchesTheReferenceWalk) {
  std::mt19937 rng(11);
  ThreadPool one(1), two(2);
  for (int trial = 0; trial < 40; ++trial) {
    const int features = 1 + static_cast<int>(rng() % 5), targets = 1 + static_cast<int>(rng() % 4);
    const TreeForestSpec spec = random_forest(rng, 1 + static_cast<int>(rng() % 30), features, targets);
    Result<TreeForest> forest = TreeForest::compile(spec);
    ASSERT_TRUE(forest.is_ok()) << forest.status().message();
    for (int64_t rows : {1, 3, 100}) {
      std::vector<float> x(rows * features);
      std::uniform_real_distribution<float> u(-1, 1);
      for (float& v : x) v = rng() % 10 == 0 ? NAN : rng() % 10 == 1 ? 0.0f : u(rng);
      for (ForestAggregate agg : {ForestAggregate::kSum, ForestAggregate::kMin, ForestAggregate::kMax}) {
        const ForestScores want = reference(spec, x, rows, features, agg);
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &one, &two}) {
          ForestScores got;
          forest->evaluate(x.data(), false, rows, features, agg, pool, got);
          ASSERT_EQ(got.has, want.has) << "trial " << trial << " rows " << rows;
          for (size_t c = 0; c < want.score.size(); ++c)
            ASSERT_NEAR(got.score[c], want.score[c], 1e-9) << "trial " << trial << " rows " << rows << " cell " << c;
        }
      }
    }
  }
}

TreeForestSpec stump() {  // one branch, two leaves with a weight each
  TreeForestSpec s;
  s.targets = 2;
  s.node_tree = {0, 0, 0};
  s.node_id = {0, 1, 2};
  s.node_mode = {"BRANCH_LEQ", "LEAF", "LEAF"};
  s.node_feature = {0, 0, 0};
  s.node_threshold = {0.5, 0, 0};
  s.node_true = {1, 0, 0};
  s.node_false = {2, 0, 0};
  s.weight_tree = {0, 0};
  s.weight_node = {1, 2};
  s.weight_target = {0, 1};
  s.weight_value = {1.0, 2.0};
  return s;
}

TEST(TreeForest, RejectsMalformedEnsembles) {
  ASSERT_TRUE(TreeForest::compile(stump()).is_ok());
  auto fails_with = [](TreeForestSpec s, const std::string& phrase) {
    Result<TreeForest> f = TreeForest::compile(s);
    ASSERT_FALSE(f.is_ok()) << "accepted; expected: " << phrase;
    EXPECT_NE(f.status().message().find(phrase), std::string::npos) << f.status().message();
  };
  TreeForestSpec s = stump();
  s.node_feature.pop_back();
  fails_with(s, "differ in length");
  s = stump();
  s.node_id[2] = 1;
  fails_with(s, "defined twice");
  s = stump();
  s.node_false[0] = 9;
  fails_with(s, "does not have");
  s = stump();
  s.node_true[0] = 2;  // node 1 is named by nobody: a second root
  fails_with(s, "more than one root");
  s = stump();  // 0 -> 1 -> 0: every node is named, no root
  s.node_mode[1] = "BRANCH_LEQ";
  s.node_true[1] = s.node_false[1] = 0;
  s.weight_node = {2, 2};
  fails_with(s, "no root");
  s = stump();  // 0 -> {1, 2}, 1 -> {2, 2}: node 2 reached twice
  s.node_mode[1] = "BRANCH_LT";
  s.node_true[1] = 2;
  s.node_false[1] = 2;
  s.node_true[0] = 1;
  s.node_false[0] = 2;
  s.weight_node = {2, 2};
  fails_with(s, "reached twice");
  s = stump();
  s.weight_node[0] = 0;
  fails_with(s, "not a LEAF");
  s = stump();
  s.weight_target[1] = 2;
  fails_with(s, "outside [0, 2)");
  s = stump();
  s.node_mode[0] = "BRANCH_MEMBER";
  fails_with(s, "is not one of");
  s = stump();
  s.node_feature[0] = -1;
  fails_with(s, "reads feature -1");
  s = stump();
  s.weight_tree[0] = 5;
  fails_with(s, "does not exist");
}

}  // namespace
}  // namespace kiln
