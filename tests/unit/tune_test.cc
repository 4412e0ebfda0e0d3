// kiln::tune against backends whose behaviour the test sets: for a test op, kiln's own kernel is
// correct but slow, one test backend fast but wrong, another fast and right. Tuning must pick
// the fast right one, reject the wrong one, record the choice so that a saved and reloaded model
// runs it, and with a tuning cache re-time nothing the second time.
#include "kiln/tune.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "backends/backend.h"
#include "kiln/session.h"
#include "onnx/model_io.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

constexpr const char* kDomain = "test.tune";

// y = factor * x, after sleeping `delay_us` (the stand-in for a slow kernel).
template <int factor, int delay_us>
Status scale(KernelContext& ctx) {
  if (delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
  const Tensor& x = ctx.input(0);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, DType::kFloat32, x.shape()));
  for (int64_t i = 0; i < x.numel(); ++i) y->data<float>()[i] = factor * x.data<float>()[i];
  return Status::ok();
}

KernelFactory factory(KernelFn fn) {
  return [fn](const ir::Node&, int64_t) -> Result<std::unique_ptr<Kernel>> {
    return kernel_from_fn(fn);
  };
}
bool takes_all(const ir::Node&, const std::vector<const ir::TypeInfo*>&) { return true; }

const KernelRegistrar kOwn(kDomain, "Twice", "ref", factory(scale<2, 3000>));
const KernelRegistrar kWrong(kDomain, "Twice", "wrong", factory(scale<3, 0>), "test_wrong",
                             takes_all);
const KernelRegistrar kRight(kDomain, "Twice", "right", factory(scale<2, 0>), "test_right",
                             takes_all);
const backends::VersionRegistrar kWrongVersion("test_wrong", [] { return std::string("w1"); });
const backends::VersionRegistrar kRightVersion("test_right", [] { return std::string("r1"); });

// x -> Twice -> Relu -> Twice -> y: two tuned nodes of the same signature around one that only
// kiln runs.
ir::Model twice_model() {
  test::Builder b;
  b.m.opsets[kDomain] = 1;
  b.input("x", {4, 8});
  b.add("Twice", {"x"}, {"t1"}).domain = kDomain;
  b.add("Relu", {"t1"}, {"r"});
  b.add("Twice", {"r"}, {"y"}).domain = kDomain;
  b.output("y");
  return b.m;
}

std::vector<Value> inputs() {
  Tensor x = Tensor::make(DType::kFloat32, {4, 8}).value();
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.25f * static_cast<float>(i - 9);
  return {Value::of(x)};
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "kiln_tune_" + name;
}

TEST(Tune, PicksTheFastestCorrectBackendAndRejectsTheWrongOne) {
  const ir::Model m = twice_model();
  TuneOptions o;
  o.threads = 1;
  auto r = tune(m, inputs(), o);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->nodes.size(), 2u);  // Relu has kiln's kernel only
  const NodeTuning& first = r->nodes[0];
  EXPECT_EQ(first.key, "t1");
  EXPECT_EQ(first.winner, "test_right");
  ASSERT_EQ(first.candidates.size(), 3u);
  for (const CandidateTiming& c : first.candidates) {
    if (c.backend == "test_wrong") {
      EXPECT_NE(c.rejected.find("disagrees with kiln's own kernel"), std::string::npos)
          << c.rejected;
    } else {
      EXPECT_EQ(c.rejected, "") << c.backend;
      EXPECT_GT(c.median_us, 0) << c.backend;
    }
  }
  // The second node has the first's key: decided without timing again.
  EXPECT_TRUE(r->nodes[1].cached);
  EXPECT_EQ(r->nodes[1].winner, "test_right");
  EXPECT_EQ(r->timed, 1);
  EXPECT_EQ(r->choices,
            (std::map<std::string, std::string>{{"t1", "test_right"}, {"y", "test_right"}}));
  // The whole-model check compares each configuration with kiln's kernels run for run.
  ASSERT_FALSE(r->model_timings.empty());
  EXPECT_EQ(r->model_timings[0].config, "kiln");
  for (const ModelTiming& t : r->model_timings) {
    EXPECT_GE(t.rounds, o.model_rounds) << t.config;
    EXPECT_LE(t.faster_rounds, t.rounds) << t.config;
    EXPECT_GT(t.vs_kiln, 0) << t.config;
  }
  EXPECT_EQ(r->model_timings[0].vs_kiln, 1.0);  // kiln's own runs against themselves
  EXPECT_EQ(r->model_timings[0].faster_rounds, 0);
}

TEST(Tune, RecordedChoicesSurviveSaveAndLoad) {
  ir::Model m = twice_model();
  TuneOptions o;
  o.threads = 1;
  auto r = tune(m, inputs(), o);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  record_backend_choices(m, r->choices);
  const std::string path = temp_path("saved.onnx");
  ASSERT_TRUE(onnx_io::save_model(m, path).is_ok());
  SessionOptions so;
  so.threads = 1;
  auto s = Session::load(path, so);
  std::remove(path.c_str());
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  std::map<std::string, std::string> ran;
  for (const auto& [node, backend] : (*s)->node_backends()) ran[node] = backend;
  EXPECT_EQ(ran, (std::map<std::string, std::string>{
                     {"t1", "test_right"}, {"r", "kiln"}, {"y", "test_right"}}));
  const std::vector<Value> in = inputs();
  auto out = (*s)->run(in);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  const Tensor& x = in[0].tensor;
  for (int64_t i = 0; i < x.numel(); ++i)
    EXPECT_EQ((*out)[0].tensor.data<float>()[i], 4 * std::max(0.0f, x.data<float>()[i]));
  // Forcing a backend overrides what the model records.
  so.backend = "kiln";
  so.optimize_level = 0;
  auto forced = Session::create(std::make_shared<const ir::Model>(m), so);
  ASSERT_TRUE(forced.is_ok());
  EXPECT_EQ((*forced)->node_backends()[0].second, "test_right");  // "kiln" is not a forcing
}

TEST(Tune, CacheIsReusedAndKeyedByThreads) {
  const std::string cache = temp_path("cache.json");
  std::remove(cache.c_str());
  const ir::Model m = twice_model();
  TuneOptions o;
  o.threads = 1;
  o.cache_path = cache;
  auto first = tune(m, inputs(), o);
  ASSERT_TRUE(first.is_ok()) << first.status().message();
  EXPECT_EQ(first->timed, 1);
  auto second = tune(m, inputs(), o);
  ASSERT_TRUE(second.is_ok()) << second.status().message();
  EXPECT_EQ(second->timed, 0);
  EXPECT_EQ(second->cache_hits, 2);  // both nodes
  EXPECT_TRUE(second->kept_from_cache);
  EXPECT_TRUE(second->model_timings.empty());
  EXPECT_EQ(second->kept, "mix");
  EXPECT_EQ(second->choices, first->choices);
  // Another thread count is another key: timed again.
  o.threads = 2;
  auto other = tune(m, inputs(), o);
  ASSERT_TRUE(other.is_ok()) << other.status().message();
  EXPECT_EQ(other->timed, 1);
  std::remove(cache.c_str());
}

TEST(Tune, MalformedCacheIsAnErrorNamingTheFile) {
  const std::string cache = temp_path("bad.json");
  std::ofstream(cache) << "{\"format\": \"something else\"}";
  TuneOptions o;
  o.cache_path = cache;
  auto r = tune(twice_model(), inputs(), o);
  std::remove(cache.c_str());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find(cache), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("not a kiln tuning cache"), std::string::npos);
}

TEST(Tune, SpentBudgetLeavesKilnsOwnKernels) {
  TuneOptions o;
  o.threads = 1;
  o.total_budget_s = 0;
  auto r = tune(twice_model(), inputs(), o);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->nodes.size(), 2u);
  for (const NodeTuning& n : r->nodes) {
    EXPECT_TRUE(n.over_budget);
    EXPECT_EQ(n.winner, "kiln");
  }
  EXPECT_TRUE(r->choices.empty());
}

}  // namespace
}  // namespace kiln
