// Heap allocations of steady-state runs (the same input shapes again, into the same outputs),
// counted by malloc_count.cc, which this binary links in place of the C library's malloc: none
// from the runtime, none from the kernels of ResNet- and BERT-like models (shapes are inline
// Shapes, attributes read in place, scratch kept by the kernels or sized on every pool thread
// before the loop, parallel loops passed by reference), and every tensor from the arena. The
// models run on two threads: which thread takes which chunk changes from run to run, and none
// may meet a buffer it has not sized yet (run with --gtest_repeat to look for that).
#include <gtest/gtest.h>

#include <cstdio>

#include "kiln/model.h"
#include "memory_test_models.h"
#include "quantize_test_util.h"

extern "C" long long kiln_malloc_calls();
extern "C" long long kiln_malloc_bytes();

namespace kiln {
namespace {

struct Counts {
  long long calls, bytes;
};

// Heap allocations of the 2nd and 3rd runs into the same outputs (the 1st records the memory plan
// and makes the arena); every tensor of those runs must come from the arena.
Counts steady_state(const ir::Model& model, int level, const std::vector<Value>& inputs,
                    int threads = 2) {
  ir::Model m = model;
  OptimizeOptions oo;
  oo.level = level;
  EXPECT_TRUE(optimize(m, oo).is_ok());
  SessionOptions so;
  so.threads = threads;
  auto s = Session::create(std::make_shared<const ir::Model>(std::move(m)), so);
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  if (!s.is_ok()) return {-1, -1};
  std::vector<Value> outputs;
  EXPECT_TRUE((*s)->run_into(inputs, outputs).is_ok());
  const long long calls = kiln_malloc_calls(), bytes = kiln_malloc_bytes();
  for (int i = 0; i < 2; ++i) EXPECT_TRUE((*s)->run_into(inputs, outputs).is_ok());
  const Counts c{kiln_malloc_calls() - calls, kiln_malloc_bytes() - bytes};
  const MemoryInfo info = (*s)->memory_info();
  EXPECT_EQ(info.arena_runs, 2);
  EXPECT_EQ(info.stray_runs, 0);
  EXPECT_EQ(info.output_bytes, 0) << "no tensor of the run is planned on the heap";
  EXPECT_GT(info.arena_bytes, 0);
  std::printf(
      "  -O%d, %d threads: %lld allocations, %lld bytes in two runs (tensors: %lld in a %lld-byte "
      "arena)\n",
      level, threads, c.calls, c.bytes, static_cast<long long>(info.activations),
      static_cast<long long>(info.arena_bytes));
  return c;
}

// Kernels that allocate nothing of their own (elementwise ops on rank-0 tensors, whose shapes are
// empty vectors), in a graph with a branch, a constant and outputs aliasing an input and a
// constant: whatever a run allocates is the runtime's.
TEST(SteadyState, TheRuntimeAllocatesNothing) {
  test::Builder b;
  b.input("x", {});
  b.scalar("c", 0.25f);
  b.add("Relu", {"x"}, {"r"});
  b.add("Mul", {"r", "c"}, {"m"});
  b.add("Sigmoid", {"x"}, {"s"});
  b.add("Add", {"m", "s"}, {"a"});
  b.add("Neg", {"a"}, {"y"});
  b.add("Identity", {"x"}, {"x_out"});
  b.add("Identity", {"c"}, {"c_out"});
  for (const char* o : {"y", "a", "x_out", "c_out"}) b.output(o);
  const std::vector<Value> in{Value::of(Tensor::scalar<float>(DType::kFloat32, 0.5f))};
  // As written, and at -O2, where the ops become one ai.kiln.FusedElementwise (which decodes its
  // attributes once, not every run).
  for (int level : {0, 2}) {
    const Counts c = steady_state(b.m, level, in);
    EXPECT_EQ(c.calls, 0) << "-O" << level;
    EXPECT_EQ(c.bytes, 0) << "-O" << level;
  }
}

// The runtime's share is nothing (above), and so is the kernels': the benchmark models' kernels
// (NCHWc convolutions, pooling, GEMM, attention, MLP, norms, shape ops) allocate nothing of their
// own in a steady-state run.
TEST(SteadyState, ResnetLikeAllocatesNothing) {
  test::Builder b;
  test::resnet_like(b);
  const std::vector<Value> in{Value::of(b.random({2, 8, 12, 12}))};
  for (int level : {2, 3}) {
    const Counts c = steady_state(b.m, level, in);
    EXPECT_EQ(c.calls, 0) << "-O" << level;
    EXPECT_EQ(c.bytes, 0) << "-O" << level;
  }
}

// The same model quantized by kiln (every conv, untimed: its 8-bit tiles, however this CPU's speed
// check would choose) allocates nothing either: the 8-bit convs' tap offsets and staged inputs
// are kept from run to run too.
TEST(SteadyState, Int8ResnetLikeAllocatesNothing) {
  test::Builder b;
  test::resnet_like(b);
  std::vector<Tensor> calib = test::random_samples(b, 4, {1, 8, 12, 12});
  Model model(std::make_shared<ir::Model>(b.m));
  auto report = model.quantize(test::samples_of(calib), test::untimed());
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  ASSERT_GE(report->quantized_nodes, 5);
  const std::vector<Value> in{Value::of(b.random({2, 8, 12, 12}))};
  for (int level : {2, 3}) {
    const Counts c = steady_state(model.ir(), level, in);
    EXPECT_EQ(c.calls, 0) << "-O" << level;
    EXPECT_EQ(c.bytes, 0) << "-O" << level;
  }
}

TEST(SteadyState, BertLikeAllocatesNothing) {
  test::Builder b;
  test::bert_like(b);
  for (int level : {2, 3}) {
    const Counts c = steady_state(b.m, level, test::bert_feeds(b, 2, 7));
    EXPECT_EQ(c.calls, 0) << "-O" << level;
    EXPECT_EQ(c.bytes, 0) << "-O" << level;
  }
}

}  // namespace
}  // namespace kiln
