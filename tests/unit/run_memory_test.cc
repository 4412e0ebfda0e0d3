// The memory plan at work in sessions: runs served from the arena give the heap's results bit for
// bit (ResNet- and BERT-like models as optimized, If/Loop bodies, two shapes alternating, outputs
// that alias inputs and constants, errors in the middle of a run), outputs never live in the arena,
// the figures of memory_info on a model small enough to work out by hand, and weights dropped once
// every kernel reading them absorbed them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>

#include "kernels/kernel.h"
#include "memory_test_models.h"
#include "onnx/model_io.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

using test::attr_i;
using test::Builder;

std::unique_ptr<Session> session_for(const ir::Model& m, int level, int threads = 2) {
  ir::Model copy = m;
  if (level > 0) {
    OptimizeOptions oo;
    oo.level = level;
    auto r = optimize(copy, oo);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
  }
  SessionOptions so;
  so.threads = threads;
  auto s = Session::create(std::make_shared<const ir::Model>(std::move(copy)), so);
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return s.is_ok() ? std::move(s).value() : nullptr;
}

std::vector<Value> run(Session& s, const std::vector<Value>& in) {
  auto out = s.run(in);
  EXPECT_TRUE(out.is_ok()) << out.status().message();
  return out.is_ok() ? std::move(out).value() : std::vector<Value>{};
}

// Same kinds, types, shapes and bytes.
void expect_identical(const std::vector<Value>& a, const std::vector<Value>& b,
                      const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].kind, b[i].kind) << what << " output " << i;
    const Tensor& x = a[i].tensor;
    const Tensor& y = b[i].tensor;
    ASSERT_EQ(x.dtype(), y.dtype()) << what << " output " << i;
    ASSERT_EQ(x.shape(), y.shape()) << what << " output " << i;
    EXPECT_EQ(std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()), 0) << what << " output " << i;
  }
}

std::vector<Value> deep_copy(const std::vector<Value>& v) {
  std::vector<Value> out = v;
  for (Value& x : out) x.tensor = x.tensor.clone();
  return out;
}

TEST(RunMemory, ResnetLikeFromTheArenaMatchesTheHeap) {
  Builder b;
  test::resnet_like(b);
  for (int level : {0, 2, 3}) {
    auto s = session_for(b.m, level);
    ASSERT_TRUE(s);
    const std::vector<Value> in{Value::of(b.random({2, 8, 12, 12}))};
    const std::vector<Value> heap = run(*s, in);  // recorded: from the heap
    const std::vector<Value> kept = deep_copy(heap);
    const std::vector<Value> arena = run(*s, in);
    expect_identical(heap, arena, "-O" + std::to_string(level) + " second run");
    // The second run's output is the caller's: a third run on other data leaves it alone.
    const std::vector<Value> arena_copy = deep_copy(arena);
    const std::vector<Value> third = run(*s, {Value::of(b.random({2, 8, 12, 12}))});
    expect_identical(arena, arena_copy, "-O" + std::to_string(level) + " output kept over a run");
    expect_identical(heap, kept, "-O" + std::to_string(level) + " first output kept");
    const MemoryInfo m = s->memory_info();
    EXPECT_EQ(m.recorded_runs, 1);
    EXPECT_EQ(m.arena_runs, 2);
    EXPECT_EQ(m.stray_runs, 0);
    EXPECT_GT(m.arena_bytes, 0);
    EXPECT_LE(m.peak_live_bytes, m.arena_bytes);
    EXPECT_LT(m.arena_bytes, m.activation_bytes);  // the residual blocks leave room to reuse
    EXPECT_EQ(m.output_bytes,
              128);  // y [2,10] outlives the run: from the heap (rounded to 64 bytes)
  }
}

TEST(RunMemory, ArenaOffRunsFromTheHeap) {
  Builder b;
  test::resnet_like(b);
  ir::Model m = b.m;
  SessionOptions so;
  so.memory_arena = false;
  auto off = Session::create(std::make_shared<const ir::Model>(m), so);
  auto on = session_for(m, 0);
  ASSERT_TRUE(off.is_ok() && on);
  const std::vector<Value> in{Value::of(b.random({2, 8, 12, 12}))};
  for (int i = 0; i < 3; ++i)
    expect_identical(run(*on, in), run(**off, in), "run " + std::to_string(i));
  const MemoryInfo m_off = (*off)->memory_info();
  EXPECT_EQ(m_off.arena_runs + m_off.recorded_runs + m_off.arena_bytes + m_off.activations, 0);
  EXPECT_EQ(on->memory_info().arena_runs, 2);
}

TEST(RunMemory, BertLikeIntoReusedOutputsMatchesTheHeap) {
  Builder b;
  test::bert_like(b);
  for (int level : {0, 2}) {
    auto s = session_for(b.m, level);
    ASSERT_TRUE(s);
    const std::vector<Value> in = test::bert_feeds(b, 2, 7);
    const std::vector<Value> heap = run(*s, in);
    std::vector<Value> into;
    ASSERT_TRUE(s->run_into(in, into).is_ok());  // its own signature: recorded
    const void* storage = into[0].tensor.raw_data();
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(s->run_into(in, into).is_ok());
      expect_identical(heap, into, "-O" + std::to_string(level) + " run_into");
      EXPECT_EQ(into[0].tensor.raw_data(), storage) << "the output's storage is reused";
    }
    const MemoryInfo m = s->memory_info();
    EXPECT_EQ(m.recorded_runs, 2);
    EXPECT_EQ(m.arena_runs, 3);
    EXPECT_EQ(m.stray_runs, 0);
    EXPECT_EQ(m.output_bytes, 0) << "run_into's outputs are copied out, so they live in the arena";
  }
}

// A planned run_into hands the caller's output tensors (64-byte aligned, whole 64-byte lines) to
// the kernels that make those outputs, so nothing is copied out; an output aliasing another, and
// a caller's tensor that is also the input (which must not be written while the run reads it),
// still come out right.
TEST(RunMemory, RunIntoWritesOutputsInPlace) {
  Builder b;
  b.input("x", {4, 16});
  b.add("Sigmoid", {"x"}, {"s"});
  b.add("Relu", {"x"}, {"r"});
  b.add("Neg", {"r"}, {"y"});
  b.add("Identity", {"r"}, {"r_again"});
  for (const char* o : {"s", "y", "r", "r_again"}) b.output(o);
  for (int level : {0, 2}) {
    const std::string what = "-O" + std::to_string(level);
    auto s = session_for(b.m, level);
    ASSERT_TRUE(s);
    const Tensor x = b.random({4, 16});
    const std::vector<Value> in{Value::of(x)};
    const std::vector<Value> want = run(*s, in);
    std::vector<Value> into;
    ASSERT_TRUE(s->run_into(in, into).is_ok());  // recorded: copied out
    std::vector<const void*> storage;
    for (const Value& v : into) storage.push_back(v.tensor.raw_data());
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(s->run_into(in, into).is_ok());
      expect_identical(want, into, what + " run_into");
      for (size_t k = 0; k < into.size(); ++k) EXPECT_EQ(into[k].tensor.raw_data(), storage[k]) << what;
    }
    MemoryInfo m = s->memory_info();
    EXPECT_EQ(m.stray_runs, 0) << what;
    EXPECT_GE(m.in_place_outputs, 3 * 2) << what << ": s and y at least, in each of the 3 planned runs";

    // The input is also the caller's tensor for s: s is copied in after the run, not written over x.
    const Tensor x2 = x.clone();
    std::vector<Value> aliased = into;
    aliased[0] = Value::of(x2);
    const int64_t before = m.in_place_outputs;
    ASSERT_TRUE(s->run_into({Value::of(x2)}, aliased).is_ok());
    expect_identical(want, aliased, what + " output 0 in the input's storage");
    EXPECT_EQ(aliased[0].tensor.raw_data(), x2.raw_data()) << what;
    m = s->memory_info();
    EXPECT_LT(m.in_place_outputs - before, 3) << what << ": not s";
  }
}

TEST(RunMemory, TwoShapesAlternating) {
  Builder b;
  test::bert_like(b);
  auto s = session_for(b.m, 2);
  ASSERT_TRUE(s);
  const std::vector<Value> small = test::bert_feeds(b, 1, 5), large = test::bert_feeds(b, 2, 9);
  const std::vector<Value> want_small = run(*s, small), want_large = run(*s, large);
  for (int i = 0; i < 3; ++i) {
    expect_identical(want_small, run(*s, small), "small, round " + std::to_string(i));
    expect_identical(want_large, run(*s, large), "large, round " + std::to_string(i));
  }
  const MemoryInfo m = s->memory_info();
  EXPECT_EQ(m.recorded_runs, 2);
  EXPECT_EQ(m.arena_runs, 6);
  EXPECT_EQ(m.stray_runs, 0);
}

ir::ValueInfo value_info(const std::string& name, DType t) {
  return {name, ir::TypeInfo::tensor(t), ""};
}

ir::Node node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out) {
  ir::Node n;
  n.name = op + "_" + out[0];
  n.op_type = op;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

ir::Attribute graph_attr(const std::string& name, ir::Graph g) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::Attribute::Type::kGraph;
  a.g = std::make_shared<ir::Graph>(std::move(g));
  return a;
}

// a = Relu(x); If(cond) gives [a*a, a] concatenated (then) or Sigmoid(a) (else): tensors of other
// sizes on the same input shapes. Loop(trips) adds a (read from the outer graph) to v each
// iteration and stacks every v.
ir::Model control_flow_model() {
  Builder b;
  b.input("x", {2, 8});
  b.m.graph.inputs.push_back(value_info("cond", DType::kBool));
  b.m.graph.inputs.push_back(value_info("trips", DType::kInt64));
  b.add("Relu", {"x"}, {"a"});
  ir::Graph then_g, else_g, body;
  then_g.name = "then";
  then_g.nodes.push_back(node("Mul", {"a", "a"}, {"sq"}));
  ir::Node cat = node("Concat", {"sq", "a"}, {"t_out"});
  cat.attrs.push_back(attr_i("axis", 1));
  then_g.nodes.push_back(cat);
  then_g.outputs.push_back(value_info("t_out", DType::kFloat32));
  else_g.name = "else";
  else_g.nodes.push_back(node("Sigmoid", {"a"}, {"e_out"}));
  else_g.outputs.push_back(value_info("e_out", DType::kFloat32));
  ir::Node& if_node = b.add("If", {"cond"}, {"branch"});
  if_node.attrs.push_back(graph_attr("then_branch", std::move(then_g)));
  if_node.attrs.push_back(graph_attr("else_branch", std::move(else_g)));
  body.name = "body";
  body.inputs = {value_info("i", DType::kInt64), value_info("c_in", DType::kBool),
                 value_info("v", DType::kFloat32)};
  body.nodes.push_back(node("Identity", {"c_in"}, {"c_out"}));
  body.nodes.push_back(node("Add", {"v", "a"}, {"v2"}));
  body.nodes.push_back(node("Relu", {"v2"}, {"v_scan"}));
  body.outputs = {value_info("c_out", DType::kBool), value_info("v2", DType::kFloat32),
                  value_info("v_scan", DType::kFloat32)};
  ir::Node& loop = b.add("Loop", {"trips", "", "a"}, {"v_final", "v_all"});
  loop.attrs.push_back(graph_attr("body", std::move(body)));
  b.output("branch");
  b.output("v_final");
  b.output("v_all");
  return b.m;
}

std::vector<Value> control_feeds(const Tensor& x, bool cond, int64_t trips) {
  return {Value::of(x), Value::of(Tensor::scalar<bool>(DType::kBool, cond)),
          Value::of(Tensor::scalar<int64_t>(DType::kInt64, trips))};
}

TEST(RunMemory, IfAndLoopBodiesStrayingFromThePlanStayCorrect) {
  const ir::Model m = control_flow_model();
  Builder rng;
  const Tensor x = rng.random({2, 8});
  auto s = session_for(m, 0);
  ASSERT_TRUE(s);
  // The same input shapes, other branches and trip counts: each case checked against a session
  // of its own, whose one run is from the heap.
  const std::vector<std::pair<bool, int64_t>> cases = {
      {true, 3}, {true, 3}, {false, 3}, {true, 3}, {true, 5}, {false, 1}, {false, 1}, {true, 3}};
  for (const auto& [cond, trips] : cases) {
    auto fresh = session_for(m, 0);
    const std::vector<Value> want = run(*fresh, control_feeds(x, cond, trips));
    ASSERT_EQ(want[0].tensor.shape(), (Shape{2, cond ? 16 : 8}));
    ASSERT_EQ(want[2].tensor.shape(), (Shape{trips, 2, 8}));
    expect_identical(want, run(*s, control_feeds(x, cond, trips)),
                     std::string(cond ? "then" : "else") + ", " + std::to_string(trips) + " trips");
  }
  const MemoryInfo info = s->memory_info();
  EXPECT_GT(info.stray_runs, 0) << "runs taking another branch stray from the plan";
  EXPECT_GT(info.arena_runs, 0);
}

TEST(RunMemory, OutputsAliasingInputsAndConstants) {
  Builder b;
  b.input("x", {3, 5});
  b.floats("c", {2}, {1.5f, -2.0f});
  b.add("Identity", {"x"}, {"y_in"});
  b.add("Identity", {"c"}, {"y_const"});
  b.add("Relu", {"x"}, {"r"});
  b.add("Identity", {"r"}, {"y_relu"});
  b.add("Neg", {"r"}, {"y_neg"});
  for (const char* o : {"y_in", "y_const", "y_relu", "y_neg", "r"}) b.output(o);
  auto s = session_for(b.m, 0);
  ASSERT_TRUE(s);
  const Tensor x = b.random({3, 5});
  const Tensor x_copy = x.clone();
  const std::vector<Value> first = run(*s, {Value::of(x)});
  for (int i = 0; i < 2; ++i)
    expect_identical(first, run(*s, {Value::of(x)}), "run " + std::to_string(i));
  std::vector<Value> into;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(s->run_into({Value::of(x)}, into).is_ok());
    expect_identical(first, into, "run_into " + std::to_string(i));
  }
  // run_into's outputs are its own: writing to them leaves the input and the constant alone.
  into[0].tensor.data<float>()[0] = 1234.0f;
  into[1].tensor.data<float>()[0] = 1234.0f;
  EXPECT_EQ(std::memcmp(x.raw_data(), x_copy.raw_data(), x.nbytes()), 0);
  const std::vector<Value> again = run(*s, {Value::of(x)});
  EXPECT_EQ(again[1].tensor.data<float>()[0], 1.5f);
  EXPECT_EQ(s->memory_info().stray_runs, 0);
}

// u8 codes [4, 300] of xa and xb, QLinearAdd and QLinearMul between them, whose outputs take the
// storage of an input nothing reads after them (KernelContext::make_output_over_input): a value
// read later (t by v), one a live Reshape shares (r's storage, read through rv), and graph
// outputs keep theirs. The same graph with every value an output (nothing then donated) is the
// reference, bit for bit; the donations show in the allocations.
TEST(RunMemory, ElementwiseOutputsTakeTheStorageOfInputsReadByNoOneAfter) {
  auto build = [](bool every_value_an_output) {
    Builder b;
    b.m.opsets["com.microsoft"] = 1;
    for (const char* x : {"xa", "xb"}) b.input_dims(x, {test::num(4), test::num(300)}, DType::kUInt8);
    b.m.graph.initializers["s"] = test::scalar_of(DType::kFloat32, 0.05);
    b.m.graph.initializers["z"] = test::scalar_of(DType::kUInt8, 128);
    b.m.graph.initializers["cs"] = test::scalar_of(DType::kFloat32, 0.07);
    b.m.graph.initializers["cz"] = test::scalar_of(DType::kUInt8, 120);
    b.ints("shape", {4, -1});
    auto op = [&](const char* type, const std::string& a, const std::string& c, const std::string& y) {
      b.add(type, {a, "s", "z", c, "s", "z", "cs", "cz"}, {y}).domain = "com.microsoft";
    };
    op("QLinearAdd", "xa", "xb", "t");  // t: inputs are the caller's
    op("QLinearAdd", "t", "xb", "u");   // not over t: v reads it later
    op("QLinearMul", "u", "t", "v");    // over u, the first input it may take
    op("QLinearAdd", "xb", "v", "w");   // w over v (B)
    b.add("Reshape", {"w", "shape"}, {"r"});  // a view of w
    op("QLinearAdd", "w", "xa", "y1");  // w's storage is r's too: not taken
    op("QLinearMul", "r", "r", "rv");   // r twice: not taken
    op("QLinearAdd", "y1", "rv", "y2");
    std::vector<std::string> outs{"y2"};
    if (every_value_an_output) outs = {"t", "u", "v", "w", "r", "y1", "rv", "y2"};
    for (const std::string& o : outs) b.m.graph.outputs.push_back(ir::ValueInfo{o, ir::TypeInfo::tensor(DType::kUInt8), ""});
    return b.m;
  };
  std::mt19937 rng(3);
  std::vector<Value> in;
  for (int i = 0; i < 2; ++i) {
    Tensor t = Tensor::make(DType::kUInt8, {4, 300}).value();
    for (int64_t k = 0; k < t.numel(); ++k) t.data<uint8_t>()[k] = static_cast<uint8_t>(rng());
    in.push_back(Value::of(t));
  }
  auto reference = session_for(build(true), 0);
  auto s = session_for(build(false), 0);
  ASSERT_TRUE(reference && s);
  const std::vector<Value> want = run(*reference, in);
  ASSERT_EQ(want.size(), 8u);
  for (int i = 0; i < 3; ++i) {  // recorded, then from the arena
    const std::vector<Value> got = run(*s, in);
    expect_identical({want[7]}, got, "run " + std::to_string(i));
  }
  // Allocations: t, u, y1, rv (v over u, w over v, y2 over y1); the reference makes all seven.
  EXPECT_EQ(s->memory_info().activations, 4);
  EXPECT_EQ(reference->memory_info().activations, 7);
  // Into the caller's tensor: y1's allocation held y2, so it is the caller's now, which y2 then
  // cannot take (the caller holds it too).
  std::vector<Value> into;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(s->run_into(in, into).is_ok());
    expect_identical({want[7]}, into, "run_into " + std::to_string(i));
  }
  for (const Value& v : in) EXPECT_EQ(v.tensor.owner().use_count(), 1) << "the inputs stay the caller's";
}

TEST(RunMemory, ErrorsMidRunLeaveTheArenaUsable) {
  // Relu, then a Reshape to a shape given as data: a bad shape fails after the arena served Relu.
  Builder b;
  b.input("x", {12});
  b.m.graph.inputs.push_back(value_info("shape", DType::kInt64));
  b.add("Relu", {"x"}, {"r"});
  b.add("Reshape", {"r", "shape"}, {"rs"});
  b.add("Sigmoid", {"rs"}, {"y"});
  b.output("y");
  const Tensor x = b.random({12});
  const std::vector<Value> good{Value::of(x), Value::of(test::int64s({3, 4}))};
  const std::vector<Value> bad{Value::of(x), Value::of(test::int64s({5, 5}))};
  for (bool fail_first : {false, true}) {
    auto s = session_for(b.m, 0);
    ASSERT_TRUE(s);
    if (fail_first) {
      EXPECT_FALSE(s->run(bad).is_ok());
    }
    const std::vector<Value> want = run(*s, good);
    EXPECT_FALSE(s->run(bad).is_ok());
    std::vector<Value> into;
    EXPECT_FALSE(s->run_into(bad, into).is_ok());
    EXPECT_TRUE(into.empty()) << "a failed run_into leaves the outputs as they were";
    expect_identical(want, run(*s, good), "after an error");
    EXPECT_FALSE(s->run(bad).is_ok());
    expect_identical(want, run(*s, good), "after another error");
    const MemoryInfo m = s->memory_info();
    EXPECT_EQ(m.stray_runs, 0);
    EXPECT_GE(m.arena_runs, 3);
  }
}

TEST(RunMemory, FiguresOfAChainWorkedOutByHand) {
  // x [1,1024] -> a = Relu(x) -> b = Relu(a) -> c = Relu(b) -> d = Relu(c) -> y = d + a.
  // Tensors of 4096 bytes: a lives to the end, b until c is made, c until d is made. At most
  // three are alive at once (a, b, c; then a, c, d), and d takes b's place: arena 3 x 4096.
  Builder b;
  b.input("x", {1, 1024});
  b.add("Relu", {"x"}, {"a"});
  b.add("Relu", {"a"}, {"b"});
  b.add("Relu", {"b"}, {"c"});
  b.add("Relu", {"c"}, {"d"});
  b.add("Add", {"d", "a"}, {"y"});
  b.output("y");
  auto s = session_for(b.m, 0);
  ASSERT_TRUE(s);
  const std::vector<Value> in{Value::of(b.random({1, 1024}))};
  EXPECT_EQ(s->memory_info().arena_bytes, 0) << "nothing known before a run";
  run(*s, in);
  MemoryInfo m = s->memory_info();
  EXPECT_EQ(m.activations, 5);
  EXPECT_EQ(m.activation_bytes, 5 * 4096);
  EXPECT_EQ(m.output_bytes, 4096);  // y outlives the run: from the heap
  EXPECT_EQ(m.peak_live_bytes, 3 * 4096);
  EXPECT_EQ(m.arena_bytes, 3 * 4096);
  // With run_into, y is copied out and released within the run: born with a and d alive, it
  // takes c's place.
  std::vector<Value> into;
  ASSERT_TRUE(s->run_into(in, into).is_ok());
  m = s->memory_info();
  EXPECT_EQ(m.activation_bytes, 5 * 4096);
  EXPECT_EQ(m.output_bytes, 0);
  EXPECT_EQ(m.arena_bytes, 3 * 4096);
  EXPECT_EQ(m.weight_bytes, 0);
}

// y = x + w with w copied at prepare and never read again: a stand-in for a kernel that prepacks
// its weights.
class AbsorbingAdd : public Kernel {
 public:
  Status prepare(const std::vector<const Tensor*>& constants,
                 std::vector<bool>& absorbed) override {
    if (constants.size() == 2 && constants[1]) {
      packed_ = constants[1]->clone();
      absorbed[1] = true;
    }
    return Status::ok();
  }
  Status run(KernelContext& ctx) override {
    const Tensor& w = packed_.defined() ? packed_ : ctx.input(1);
    if (ctx.input(1).shape() != ctx.input(0).shape()) return ctx.error("shapes differ");
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, DType::kFloat32, ctx.input(0).shape()));
    for (int64_t i = 0; i < y->numel(); ++i)
      y->data<float>()[i] = ctx.input(0).data<float>()[i] + w.data<float>()[i];
    return Status::ok();
  }

 private:
  Tensor packed_;
};

const KernelRegistrar kAbsorbingAdd("test.memory", "AbsorbingAdd", "ref",
                                    [](const ir::Node&,
                                       int64_t) -> Result<std::unique_ptr<Kernel>> {
                                      return std::unique_ptr<Kernel>(new AbsorbingAdd);
                                    });

TEST(RunMemory, WeightsEveryReaderAbsorbedAreDropped) {
  // w: read by absorbing kernels only (dropped). w2: also by a plain Add (kept). w3: also a graph
  // output (kept).
  Builder b;
  b.m.opsets["test.memory"] = 1;
  b.input("x", {4});
  b.floats("w", {4}, {1, 2, 3, 4});
  b.floats("w2", {4}, {10, 20, 30, 40});
  b.floats("w3", {4}, {100, 200, 300, 400});
  b.add("AbsorbingAdd", {"x", "w"}, {"y1"}).domain = "test.memory";
  b.add("AbsorbingAdd", {"y1", "w2"}, {"y2"}).domain = "test.memory";
  b.add("AbsorbingAdd", {"y2", "w"}, {"y3"}).domain = "test.memory";
  b.add("Add", {"y3", "w2"}, {"y4"});
  b.add("AbsorbingAdd", {"y4", "w3"}, {"y"}).domain = "test.memory";
  b.output("y");
  b.output("w3");
  Tensor x = Tensor::make(DType::kFloat32, {4}).value();
  std::fill_n(x.data<float>(), 4, 0.5f);
  const std::vector<Value> in{Value::of(x)};
  const std::vector<float> want = {122.5f, 244.5f, 366.5f, 488.5f};
  auto check = [&](Session& s) {
    for (int i = 0; i < 2; ++i) {
      const std::vector<Value> out = run(s, in);
      ASSERT_EQ(out.size(), 2u);
      for (int j = 0; j < 4; ++j) EXPECT_EQ(out[0].tensor.data<float>()[j], want[j]);
      EXPECT_EQ(out[1].tensor.data<float>()[3], 400.0f);
    }
  };
  // A model the session loads itself is its own: w goes from it too.
  const std::string path =
      (std::filesystem::temp_directory_path() / "kiln_memory_absorb.onnx").string();
  ASSERT_TRUE(onnx_io::save_model(b.m, path).is_ok());
  SessionOptions so;
  so.optimize_level = 0;
  auto loaded = Session::load(path, so);
  std::filesystem::remove(path);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  check(**loaded);
  const auto& inits = (*loaded)->model().graph.initializers;
  EXPECT_EQ(inits.at("w").raw_data(), nullptr);
  EXPECT_EQ(inits.at("w").shape(), (Shape{4}));
  EXPECT_EQ(inits.at("w").dtype(), DType::kFloat32);
  EXPECT_NE(inits.at("w2").raw_data(), nullptr);
  EXPECT_NE(inits.at("w3").raw_data(), nullptr);
  EXPECT_EQ((*loaded)->memory_info().weight_bytes, 48);
  EXPECT_EQ((*loaded)->memory_info().released_weight_bytes, 16);
  // A model shared with the caller stays as it was.
  auto shared = std::make_shared<const ir::Model>(b.m);
  auto created = Session::create(shared);
  ASSERT_TRUE(created.is_ok()) << created.status().message();
  check(**created);
  EXPECT_NE(shared->graph.initializers.at("w").raw_data(), nullptr);
  EXPECT_EQ((*created)->memory_info().released_weight_bytes, 0);
}

}  // namespace
}  // namespace kiln
