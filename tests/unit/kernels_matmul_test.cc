// The MatMul-like kernels on their prepacked path (MatMul, Gemm, ai.kiln FusedMatMul / FusedGemm
// / FusedMLP with a constant weight, packed once in Kernel::prepare) and on their plain path (the
// weight a graph input), against double loops written here from the ONNX / docs/ops.md
// definitions. Sessions load from a file so that they own the model and drop the weights their
// kernels absorbed: a run that still read one would find no data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "onnx/model_io.h"
#include "gemm_test_case.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

using test::attr_f;
using test::attr_i;
using test::attr_s;

const float* f32(const Tensor& t) { return t.data<float>(); }

double gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

// y[r, j] = sum_p x[r, p] * w[p, j] for a row-major x [rows, k] and w [k, n] (or w [n, k] when
// trans_w), in double.
std::vector<double> product(const float* x, int64_t rows, int64_t k, const float* w, int64_t n,
                            bool trans_w = false) {
  std::vector<double> y(rows * n, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p)
        acc += double(x[r * k + p]) * (trans_w ? w[j * k + p] : w[p * n + j]);
      y[r * n + j] = acc;
    }
  return y;
}

struct Loaded {
  std::vector<Value> outputs;
  MemoryInfo memory;
};

// Saves the model and loads it back at -O0 (so the session owns it), then runs it twice.
Loaded load_and_run(const ir::Model& m, const std::vector<Tensor>& feeds, int threads) {
  Loaded out;
  const std::string path = ::testing::TempDir() + "kiln_matmul_kernels_" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".onnx";
  Status saved = onnx_io::save_model(m, path);
  EXPECT_TRUE(saved.is_ok()) << saved.message();
  SessionOptions options;
  options.threads = threads;
  options.optimize_level = 0;
  auto s = Session::load(path, options);
  std::remove(path.c_str());
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  if (!s.is_ok()) return out;
  std::vector<Value> in;
  for (const Tensor& t : feeds) in.push_back(Value::of(t));
  for (int rep = 0; rep < 2; ++rep) {  // a second run reuses the packed weights and the arena
    auto y = (*s)->run(in);
    EXPECT_TRUE(y.is_ok()) << y.status().message();
    if (y.is_ok()) out.outputs = std::move(y).value();
  }
  out.memory = (*s)->memory_info();
  return out;
}

void expect_near(const Tensor& got, const std::vector<double>& want, const Shape& shape,
                 double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), shape) << what;
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_NEAR(f32(got)[i], want[i], tol * std::max(1.0, std::fabs(want[i])))
        << what << " element " << i;
}

// MatMul [2, M, K] x [K, N], B a weight or an input; 1 and 2 threads; M from 1 (small-M path)
// up to rows that take the micro-kernel with edge tiles.
TEST(MatMulKernels, PrepackedMatMulMatchesLoops) {
  for (int64_t m : {1, 5, 37})
    for (bool constant_b : {true, false})
      for (int threads : {1, 2}) {
        const int64_t k = 70, n = 45;
        test::Builder b;
        b.input("a", {2, m, k});
        if (constant_b) b.weight("w", {k, n}); else b.input("w", {k, n});
        b.add("MatMul", {"a", "w"}, {"y"});
        b.output("y");
        const Tensor a = b.random({2, m, k});
        std::vector<Tensor> feeds{a};
        const Tensor w = constant_b ? b.m.graph.initializers.at("w") : b.random({k, n});
        if (!constant_b) feeds.push_back(w);
        const Loaded r = load_and_run(b.m, feeds, threads);
        ASSERT_EQ(r.outputs.size(), 1u);
        const std::string what = "m=" + std::to_string(m) + " constant=" +
                                 std::to_string(constant_b) + " threads=" + std::to_string(threads);
        expect_near(r.outputs[0].tensor, product(f32(a), 2 * m, k, f32(w), n), {2, m, n}, 1e-5,
                    what);
        EXPECT_EQ(r.memory.released_weight_bytes, constant_b ? k * n * 4 : 0) << what;
      }
}

// Gemm with transA / transB, alpha, beta and each broadcast of C.
TEST(MatMulKernels, PrepackedGemmMatchesLoops) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const Shape& c_shape : test::GemmCase::c_shapes()) {
        const test::GemmCase g(ta, tb, c_shape);
        const Loaded r = load_and_run(g.b.m, {g.a}, 2);
        ASSERT_EQ(r.outputs.size(), 1u);
        expect_near(r.outputs[0].tensor, g.expected(), {g.kM, g.kN}, 1e-5, g.describe());
        EXPECT_EQ(r.memory.released_weight_bytes, g.kK * g.kN * 4);  // W absorbed; C read each run
      }
}

// FusedMatMul: batched A, bias, Gelu, a residual before or after it; the same with W an input.
TEST(MatMulKernels, FusedMatMulPrepackedAndPlain) {
  for (bool constant_w : {true, false})
    for (int residual_first : {0, 1})
      for (int64_t m : {3, 16}) {
        const int64_t k = 50, n = 72;
        test::Builder b;
        b.m.opsets["ai.kiln"] = 1;
        b.input("a", {2, m, k});
        if (constant_w) b.weight("w", {k, n}); else b.input("w", {k, n});
        b.weight("bias", {1, n});
        b.input("z", {2, m, n});
        ir::Node& node = b.add("FusedMatMul", {"a", "w", "bias", "z"}, {"y"},
                               {attr_s("activation", "Gelu"),
                                attr_i("residual_before_activation", residual_first)});
        node.domain = "ai.kiln";
        b.output("y");
        const Tensor a = b.random({2, m, k}), z = b.random({2, m, n});
        const Tensor w = constant_w ? b.m.graph.initializers.at("w") : b.random({k, n});
        std::vector<Tensor> feeds{a};
        if (!constant_w) feeds.push_back(w);
        feeds.push_back(z);
        const Loaded r = load_and_run(b.m, feeds, 2);
        ASSERT_EQ(r.outputs.size(), 1u);
        std::vector<double> want = product(f32(a), 2 * m, k, f32(w), n);
        const float* bias = f32(b.m.graph.initializers.at("bias"));
        for (int64_t i = 0; i < 2 * m * n; ++i) {
          const double y = double(float(want[i])) + bias[i % n];
          want[i] = residual_first ? gelu(y + f32(z)[i]) : gelu(y) + f32(z)[i];
        }
        expect_near(r.outputs[0].tensor, want, {2, m, n}, 2e-5,
                    "constant=" + std::to_string(constant_w) +
                        " residual_first=" + std::to_string(residual_first));
        EXPECT_EQ(r.memory.released_weight_bytes, constant_w ? k * n * 4 : 0);
      }
}

// FusedGemm with transB, a per-column C and Relu, and with a full C and Sigmoid.
TEST(MatMulKernels, FusedGemmPrepacked) {
  for (bool full_c : {false, true}) {
    const int64_t m = 11, k = 24, n = 36;
    test::Builder b;
    b.m.opsets["ai.kiln"] = 1;
    b.input("a", {m, k});
    b.weight("w", {n, k});
    b.weight("c", full_c ? Shape{m, n} : Shape{n});
    ir::Node& node = b.add("FusedGemm", {"a", "w", "c"}, {"y"},
                           {attr_i("transB", 1), attr_f("alpha", 1.5f), attr_f("beta", 0.5f),
                            attr_s("activation", full_c ? "Sigmoid" : "Relu")});
    node.domain = "ai.kiln";
    b.output("y");
    const Tensor a = b.random({m, k});
    const Loaded r = load_and_run(b.m, {a}, 1);
    ASSERT_EQ(r.outputs.size(), 1u);
    std::vector<double> want = product(f32(a), m, k, f32(b.m.graph.initializers.at("w")), n, true);
    const float* c = f32(b.m.graph.initializers.at("c"));
    for (int64_t i = 0; i < m * n; ++i) {
      const double y = 1.5 * want[i] + 0.5 * c[full_c ? i : i % n];
      want[i] = full_c ? 1.0 / (1.0 + std::exp(-y)) : std::max(y, 0.0);
    }
    expect_near(r.outputs[0].tensor, want, {m, n}, 1e-5, full_c ? "full C" : "bias C");
    EXPECT_EQ(r.memory.released_weight_bytes, n * k * 4);
  }
}

// FusedMLP at row counts that take its per-thread blocks and its one-block path, both weights
// prepacked; and with the weights as inputs.
TEST(MatMulKernels, FusedMlpPrepackedAndPlain) {
  for (bool constant_w : {true, false})
    for (int64_t rows : {1, 10, 150, 197, 300})  // 300: several blocks a thread
      for (int threads : {1, 2}) {
        const int64_t k = 40, h = 96, n = 24;
        test::Builder b;
        b.m.opsets["ai.kiln"] = 1;
        b.input("x", {rows, k});
        if (constant_w) b.weight("w1", {k, h}), b.weight("w2", {h, n});
        else b.input("w1", {k, h}), b.input("w2", {h, n});
        b.weight("b1", {h});
        b.weight("b2", {n});
        ir::Node& node = b.add("FusedMLP", {"x", "w1", "b1", "w2", "b2"}, {"y"},
                               {attr_s("activation", "Gelu")});
        node.domain = "ai.kiln";
        b.output("y");
        const Tensor x = b.random({rows, k});
        const Tensor w1 = constant_w ? b.m.graph.initializers.at("w1") : b.random({k, h});
        const Tensor w2 = constant_w ? b.m.graph.initializers.at("w2") : b.random({h, n});
        std::vector<Tensor> feeds{x};
        if (!constant_w) feeds.push_back(w1), feeds.push_back(w2);
        const Loaded r = load_and_run(b.m, feeds, threads);
        ASSERT_EQ(r.outputs.size(), 1u);
        const std::vector<double> h1 = product(f32(x), rows, k, f32(w1), h);
        std::vector<float> act(rows * h);
        const float* b1 = f32(b.m.graph.initializers.at("b1"));
        for (int64_t i = 0; i < rows * h; ++i) act[i] = static_cast<float>(gelu(h1[i] + b1[i % h]));
        std::vector<double> want = product(act.data(), rows, h, f32(w2), n);
        const float* b2 = f32(b.m.graph.initializers.at("b2"));
        for (int64_t i = 0; i < rows * n; ++i) want[i] += b2[i % n];
        expect_near(r.outputs[0].tensor, want, {rows, n}, 3e-5,
                    "rows=" + std::to_string(rows) + " threads=" + std::to_string(threads) +
                        " constant=" + std::to_string(constant_w));
        EXPECT_EQ(r.memory.released_weight_bytes, constant_w ? (k * h + h * n) * 4 : 0);
      }
}

// A weight read by a prepacking MatMul and by an op that reads it as it is stays in memory, and
// both nodes compute right.
TEST(MatMulKernels, SharedWeightKeptForOtherReaders) {
  test::Builder b;
  b.input("a", {8, 8});
  b.weight("w", {8, 8});
  b.add("MatMul", {"a", "w"}, {"y"});
  b.add("Add", {"y", "w"}, {"s"});
  b.output("s");
  const Tensor a = b.random({8, 8});
  const Loaded r = load_and_run(b.m, {a}, 1);
  ASSERT_EQ(r.outputs.size(), 1u);
  const float* w = f32(b.m.graph.initializers.at("w"));
  std::vector<double> want = product(f32(a), 8, 8, w, 8);
  for (int64_t i = 0; i < 64; ++i) want[i] = double(float(want[i])) + w[i];
  expect_near(r.outputs[0].tensor, want, {8, 8}, 1e-5, "shared weight");
  EXPECT_EQ(r.memory.released_weight_bytes, 0);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// MatMulInteger's column-blocked int32 loop against a plain triple loop: int8 and uint8 operands,
// scalar and per-column B zero points, N across several 256-column blocks, batched A.
TEST(MatMulInteger, ColumnBlocksMatchPlainLoop) {
  // B a constant (packed once for gemm_s16) or a graph input (packed every run).
  for (DType at : {DType::kUInt8, DType::kInt8})
    for (bool per_column : {false, true})
      for (bool w_constant : {true, false}) {
      const int64_t batch = 2, m = 3, k = 37, n = 600;
      test::Builder b(17);
      Tensor a = Tensor::make(at, {batch, m, k}).value(), w = Tensor::make(DType::kInt8, {k, n}).value();
      for (int64_t i = 0; i < a.numel(); ++i) a.data<uint8_t>()[i] = static_cast<uint8_t>((i * 97 + 13) % 256);
      for (int64_t i = 0; i < w.numel(); ++i) w.data<int8_t>()[i] = static_cast<int8_t>((i * 31 + 7) % 255 - 127);
      Tensor az = Tensor::make(at, {}).value(), wz = Tensor::make(DType::kInt8, {per_column ? n : 1}).value();
      az.data<uint8_t>()[0] = 5;
      for (int64_t j = 0; j < wz.numel(); ++j) wz.data<int8_t>()[j] = static_cast<int8_t>(j % 7 - 3);
      b.m.graph.inputs.push_back(ir::ValueInfo{"a", ir::TypeInfo::tensor(at, a.shape()), ""});
      if (w_constant) b.m.graph.initializers["w"] = w;
      else b.m.graph.inputs.push_back(ir::ValueInfo{"w", ir::TypeInfo::tensor(DType::kInt8, w.shape()), ""});
      b.m.graph.initializers["az"] = az;
      b.m.graph.initializers["wz"] = wz;
      b.add("MatMulInteger", {"a", "w", "az", "wz"}, {"y"});
      b.m.graph.outputs.push_back(ir::ValueInfo{"y", ir::TypeInfo::tensor(DType::kInt32), ""});
      const std::vector<Value> out = w_constant ? test::run_model(b.m, {a}) : test::run_model(b.m, {a, w});
      ASSERT_EQ(out.size(), 1u);
      const int32_t* y = out[0].tensor.data<int32_t>();
      auto av = [&](int64_t i) { return at == DType::kInt8 ? a.data<int8_t>()[i] : a.data<uint8_t>()[i]; };
      const int32_t za = at == DType::kInt8 ? az.data<int8_t>()[0] : az.data<uint8_t>()[0];
      for (int64_t bi = 0; bi < batch; ++bi)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            int32_t acc = 0;
            for (int64_t q = 0; q < k; ++q)
              acc += (av((bi * m + i) * k + q) - za) * (w.data<int8_t>()[q * n + j] - wz.data<int8_t>()[per_column ? j : 0]);
            ASSERT_EQ(y[(bi * m + i) * n + j], acc)
                << dtype_name(at) << " per_column " << per_column << " w_constant " << w_constant;
          }
      }
}

}  // namespace
}  // namespace kiln
