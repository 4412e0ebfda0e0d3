// One harness for the dense linear ops (the plan of ggml's test-backend-ops and ncnn's testutil):
// every case runs at -O0 and -O3 (which takes the blocked, Winograd, depthwise and fused paths)
// on every registered backend and kernel variant, and is checked against an oracle of plain loops
// in double that shares no code with kiln's GEMMs. run_tests.sh runs it again at every lower ISA
// level (KILN_ISA), so each ISA's kernels meet the same oracle. Shapes reach for the edges: sizes
// 1 and odd, strides (asymmetric too), dilations, groups, uneven padding, broadcast batch dims.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backend_run.h"
#include "backends/backend.h"
#include "core/cpu_features.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

using test::attr_f;
using test::attr_i;
using test::attr_ints;
using test::Builder;

// What a float result may be off by: a few units in the last place of the sum of |products|
// (the float error of any order of summation; Winograd's transforms take a larger share), far
// below what a wrong index or a lost tap costs.
constexpr double kRelToMagnitude = 2e-5;

// The oracle's answer and, per element, the sum of |terms| the tolerance scales with.
struct Expected {
  std::vector<double> value, magnitude;
};

const float* f32(const Tensor& t) { return t.data<float>(); }

// Checks one run's output against the oracle; returns "" or what went wrong, first bad element.
std::string compare(const Expected& want, const Value& got, const Shape& shape) {
  if (!got.is_tensor() || got.tensor.dtype() != DType::kFloat32) return "not a float tensor";
  if (got.tensor.shape() != shape) return "shape " + shape_str(got.tensor.shape()) + ", want " + shape_str(shape);
  const float* g = f32(got.tensor);
  for (size_t i = 0; i < want.value.size(); ++i) {
    const double err = std::fabs(g[i] - want.value[i]);
    if (!(err <= kRelToMagnitude * want.magnitude[i] + 1e-6)) {
      std::ostringstream o;
      o << "element " << i << ": " << g[i] << ", oracle " << want.value[i] << " (|terms| " << want.magnitude[i] << ")";
      return o.str();
    }
  }
  return "";
}

// Every backend and every variant of kiln's kernels, each forced in turn.
std::set<std::string> every_kernel_choice() {
  std::set<std::string> all = backends::registered();
  for (const std::string& v : backends::variants()) all.insert(v);
  return all;
}

// Runs `m` on every backend and kernel variant at -O0 and -O3 and compares with the oracle;
// counts, per backend or variant, the nodes that ran on it, so that a test can require that one
// was reached at all.
void run_everywhere(const ir::Model& m, const std::vector<Tensor>& feeds, const Expected& want, const Shape& shape,
                    const std::string& what, std::map<std::string, int>* ran_on) {
  for (const std::string& backend : every_kernel_choice()) {
    for (int level : {0, 3}) {
      auto r = test::run_with(m, feeds, backend, 2, level);
      ASSERT_TRUE(r.is_ok()) << what << ", backend " << backend << ", -O" << level << ": " << r.status().message();
      const std::string bad = compare(want, r->outputs.at(0), shape);
      std::string kernels;
      for (const auto& [node, b] : r->backends) kernels += " " + node + ":" + b, ++(*ran_on)[b];
      EXPECT_EQ(bad, "") << what << ", backend " << backend << ", -O" << level << ", kernels" << kernels;
    }
  }
}

// Each kernel family a test's cases are there for, where this build has it, ran some node (a
// harness that silently ran everything on one kernel would prove little).
void expect_reached(std::map<std::string, int>& ran_on, std::initializer_list<const char*> wanted) {
  for (const char* backend : wanted) {
    if (every_kernel_choice().count(backend)) {
      EXPECT_GT(ran_on[backend], 0) << backend;
    }
  }
}

struct ConvCase {
  int64_t n, c, h, w, m, groups, kh, kw;
  int64_t sh = 1, sw = 1, dh = 1, dw = 1;
  int64_t pt = 0, pl = 0, pb = 0, pr = 0;
  bool relu = false;
  // After a 1x1 conv of c channels: a lone depthwise conv stays plain (nchwc.cc's pays_alone), a
  // pair takes the blocked one.
  bool after_pointwise = false;
};

std::string describe(const ConvCase& k) {
  std::ostringstream o;
  o << "Conv x[" << k.n << "," << k.c << "," << k.h << "," << k.w << "] -> " << k.m << ", group " << k.groups << ", "
    << k.kh << "x" << k.kw << ", stride " << k.sh << "x" << k.sw << ", dilation " << k.dh << "x" << k.dw << ", pads "
    << k.pt << "," << k.pl << "," << k.pb << "," << k.pr << (k.relu ? ", Relu" : "")
    << (k.after_pointwise ? ", after a 1x1" : "");
  return o.str();
}

// y[n, m, oh, ow] = b[m] + sum over the group's channels and taps, in double.
Expected conv_oracle(const ConvCase& k, const Tensor& x, const Tensor& w, const Tensor& b, Shape* shape) {
  const int64_t oh = (k.h + k.pt + k.pb - k.dh * (k.kh - 1) - 1) / k.sh + 1;
  const int64_t ow = (k.w + k.pl + k.pr - k.dw * (k.kw - 1) - 1) / k.sw + 1;
  const int64_t cg = k.c / k.groups, mg = k.m / k.groups;
  *shape = {k.n, k.m, oh, ow};
  Expected e;
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t m = 0; m < k.m; ++m)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t z = 0; z < ow; ++z) {
          double s = f32(b)[m], mag = std::fabs(f32(b)[m]);
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t i = 0; i < k.kh; ++i)
              for (int64_t j = 0; j < k.kw; ++j) {
                const int64_t iy = y * k.sh - k.pt + i * k.dh, ix = z * k.sw - k.pl + j * k.dw;
                if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                const int64_t ci = (m / mg) * cg + c;
                const double p = static_cast<double>(f32(x)[((n * k.c + ci) * k.h + iy) * k.w + ix]) *
                                 f32(w)[((m * cg + c) * k.kh + i) * k.kw + j];
                s += p;
                mag += std::fabs(p);
              }
          e.value.push_back(k.relu ? std::max(s, 0.0) : s);
          e.magnitude.push_back(mag);
        }
  return e;
}

TEST(OracleHarness, ConvOnEveryBackendAndPath) {
  std::vector<ConvCase> cases = {
      {1, 16, 7, 7, 32, 1, 1, 1},                                  // pointwise
      {2, 3, 5, 9, 5, 1, 1, 1},                                    // odd channels, batch 2
      {1, 24, 9, 9, 40, 1, 1, 1, 2, 2},                            // strided pointwise
      {1, 32, 20, 20, 32, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true},  // Winograd-sized 3x3
      {1, 64, 7, 7, 64, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},          // resnet's last stage
      {1, 5, 13, 11, 7, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},          // odd everything
      {2, 8, 6, 6, 16, 1, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, true},     // strided, batch 2
      {1, 16, 17, 17, 16, 1, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2},        // dilated
      {1, 16, 12, 10, 24, 1, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1},        // stride (2,1)
      {1, 12, 9, 8, 12, 1, 3, 3, 1, 1, 1, 1, 0, 1, 1, 0},          // uneven pads
      {1, 3, 23, 23, 16, 1, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, true},   // RGB stem
      {1, 8, 9, 9, 8, 1, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2},            // 5x5
      {1, 24, 8, 16, 24, 1, 1, 3, 1, 1, 1, 1, 0, 1, 0, 1},         // 1x3
      {1, 24, 16, 8, 24, 1, 3, 1, 1, 1, 1, 1, 1, 0, 1, 0},         // 3x1
      {1, 16, 1, 1, 16, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},          // 1x1 image, 3x3 all padding
      {1, 32, 14, 14, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true}, // depthwise
      {1, 32, 15, 15, 32, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},       // depthwise, stride 2, odd
      {1, 24, 11, 11, 24, 24, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2},       // depthwise 5x5
      {1, 16, 14, 14, 16, 16, 7, 7, 1, 1, 1, 1, 3, 3, 3, 3},       // depthwise 7x7 (convnext)
      {1, 16, 13, 12, 16, 16, 3, 3, 2, 1, 2, 2, 2, 2, 2, 2},       // depthwise, (2,1), dilated
      {1, 8, 9, 9, 16, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},           // depthwise, multiplier 2
      {1, 32, 9, 9, 64, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},          // grouped
      {1, 32, 14, 14, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true, true},  // blocked depthwise
      {1, 20, 19, 17, 20, 20, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, false, true}, // blocked, stride 2
      {1, 24, 11, 13, 24, 24, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, false, true}, // blocked 5x5
      {1, 12, 8, 8, 12, 3, 1, 1},                                  // grouped pointwise
      {1, 6, 7, 7, 10, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},           // odd channels per group
      {2, 64, 8, 8, 64, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},         // resnext-like, 2 a group
  };
  std::map<std::string, int> ran_on;
  for (const ConvCase& k : cases) {
    Builder b(17);
    b.input("x", {k.n, k.c, k.h, k.w});
    b.weight("w", {k.m, k.c / k.groups, k.kh, k.kw});
    b.weight("b", {k.m});
    if (k.after_pointwise) {
      b.weight("w0", {k.c, k.c, 1, 1});
      b.weight("b0", {k.c});
      b.add("Conv", {"x", "w0", "b0"}, {"t"});
    }
    b.add("Conv", {k.after_pointwise ? "t" : "x", "w", "b"}, {k.relu ? "c" : "y"},
          {attr_ints("kernel_shape", {k.kh, k.kw}), attr_ints("strides", {k.sh, k.sw}),
           attr_ints("dilations", {k.dh, k.dw}), attr_ints("pads", {k.pt, k.pl, k.pb, k.pr}),
           attr_i("group", k.groups)});
    if (k.relu) b.add("Relu", {"c"}, {"y"});
    b.output("y");
    const Tensor x = b.random({k.n, k.c, k.h, k.w});
    Shape shape;
    Tensor conv_in = x;  // the oracle's input of the conv under test
    if (k.after_pointwise) {
      const ConvCase pointwise{k.n, k.c, k.h, k.w, k.c, 1, 1, 1};
      const Expected t = conv_oracle(pointwise, x, b.m.graph.initializers.at("w0"), b.m.graph.initializers.at("b0"), &shape);
      conv_in = Tensor::make(DType::kFloat32, shape).value();
      std::copy(t.value.begin(), t.value.end(), conv_in.data<float>());
    }
    const Expected want = conv_oracle(k, conv_in, b.m.graph.initializers.at("w"), b.m.graph.initializers.at("b"), &shape);
    run_everywhere(b.m, {x}, want, shape, describe(k), &ran_on);
  }
  expect_reached(ran_on, {"kiln", "kiln.direct", "onednn", "xnnpack"});
  if (cpu_features().has_avx512()) expect_reached(ran_on, {"kiln.avx2"});  // the AVX2 depthwise kernel
}

struct MatMulCase {
  Shape a, b;
  bool b_constant;
};

// numpy matmul: 1-D operands promoted and the added dim dropped, batch dims broadcast.
Expected matmul_oracle(const Tensor& a, const Tensor& b, Shape* shape) {
  Shape sa = a.shape(), sb = b.shape();
  const bool a1 = sa.size() == 1, b1 = sb.size() == 1;
  if (a1) sa.insert(sa.begin(), 1);
  if (b1) sb.push_back(1);
  const int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  const size_t rank = std::max(sa.size(), sb.size());
  Shape batch(rank - 2, 1);
  auto dim = [&](const Shape& s, size_t i) {  // batch dim i of s, right-aligned, 1 if absent
    const size_t off = rank - s.size();
    return i < off ? int64_t{1} : s[i - off];
  };
  for (size_t i = 0; i + 2 < rank; ++i) batch[i] = std::max(dim(sa, i), dim(sb, i));
  Expected e;
  int64_t batches = 1;
  for (int64_t d : batch) batches *= d;
  for (int64_t t = 0; t < batches; ++t) {
    int64_t rest = t, oa = 0, ob = 0, sa_stride = 1, sb_stride = 1;
    for (size_t i = rank - 2; i-- > 0;) {  // the batch index, digit by digit from the last
      const int64_t idx = rest % batch[i];
      rest /= batch[i];
      oa += (dim(sa, i) == 1 ? 0 : idx) * sa_stride;
      ob += (dim(sb, i) == 1 ? 0 : idx) * sb_stride;
      sa_stride *= dim(sa, i);
      sb_stride *= dim(sb, i);
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, mag = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double v = static_cast<double>(f32(a)[(oa * m + i) * k + p]) * f32(b)[(ob * k + p) * n + j];
          s += v;
          mag += std::fabs(v);
        }
        e.value.push_back(s);
        e.magnitude.push_back(mag);
      }
  }
  *shape = batch;
  if (!a1) shape->push_back(m);
  if (!b1) shape->push_back(n);
  return e;
}

TEST(OracleHarness, MatMulOnEveryBackendAndPath) {
  const std::vector<MatMulCase> cases = {
      {{128, 64}, {64, 96}, true},        // a projection
      {{1, 300}, {300, 17}, true},        // one row, odd N
      {{5, 1}, {1, 7}, true},             // K = 1
      {{33, 257}, {257, 65}, true},       // odd everything
      {{2, 3, 9, 16}, {16, 24}, true},    // batched A, shared weights
      {{16}, {16, 40}, true},             // 1-D A
      {{7, 12}, {12}, false},             // 1-D B
      {{2, 1, 6, 8}, {3, 8, 5}, false},   // broadcast batch dims
      {{4, 20, 30}, {4, 30, 11}, false},  // batched, both dynamic
      {{64, 768}, {768, 129}, true},      // past one cache block of K
  };
  std::map<std::string, int> ran_on;
  for (const MatMulCase& k : cases) {
    Builder b(17);
    b.input("a", k.a);
    if (k.b_constant) b.weight("b", k.b);
    else b.input("b", k.b);
    b.add("MatMul", {"a", "b"}, {"y"});
    b.output("y");
    const Tensor a = b.random(k.a);
    const Tensor bt = k.b_constant ? b.m.graph.initializers.at("b") : b.random(k.b);
    std::vector<Tensor> feeds = {a};
    if (!k.b_constant) feeds.push_back(bt);
    Shape shape;
    const Expected want = matmul_oracle(a, bt, &shape);
    run_everywhere(b.m, feeds, want, shape, "MatMul " + shape_str(k.a) + " x " + shape_str(k.b), &ran_on);
  }
  expect_reached(ran_on, {"kiln", "onednn", "xnnpack", "openblas"});
  // The narrow tile is a variant only where a wider one is the default.
  if (cpu_features().has_avx512()) {
    EXPECT_GT(ran_on["kiln.tile6x16"], 0);
  }
}

struct GemmCase {
  int64_t m, k, n;
  bool trans_a, trans_b;
  float alpha, beta;
  Shape c;  // empty: no C
};

TEST(OracleHarness, GemmOnEveryBackendAndPath) {
  const std::vector<GemmCase> cases = {
      {1, 512, 1000, false, true, 1, 1, {1000}},    // a classifier (torch's Linear)
      {7, 33, 19, false, false, 1, 1, {7, 19}},     // full C
      {6, 16, 24, true, false, 0.5f, 2, {6, 1}},    // per-row C, transposed A
      {9, 40, 3, true, true, 1, 0.25f, {}},         // no C, both transposed
      {64, 130, 65, false, true, 2, 1, {}},         // scalar-free alpha
      {16, 8, 16, false, false, 1, -1, {1}},        // one-element C
  };
  std::map<std::string, int> ran_on;
  for (const GemmCase& k : cases) {
    Builder b(17);
    const Shape sa = k.trans_a ? Shape{k.k, k.m} : Shape{k.m, k.k};
    const Shape sb = k.trans_b ? Shape{k.n, k.k} : Shape{k.k, k.n};
    b.input("a", sa);
    b.weight("b", sb);
    std::vector<std::string> in = {"a", "b"};
    if (!k.c.empty()) {
      b.weight("c", k.c);
      in.push_back("c");
    }
    b.add("Gemm", in, {"y"},
          {attr_i("transA", k.trans_a), attr_i("transB", k.trans_b), attr_f("alpha", k.alpha), attr_f("beta", k.beta)});
    b.output("y");
    const Tensor a = b.random(sa);
    const Tensor& bw = b.m.graph.initializers.at("b");
    Expected want;
    for (int64_t i = 0; i < k.m; ++i)
      for (int64_t j = 0; j < k.n; ++j) {
        double s = 0, mag = 0;
        for (int64_t p = 0; p < k.k; ++p) {
          const double v = static_cast<double>(f32(a)[k.trans_a ? p * k.m + i : i * k.k + p]) *
                           f32(bw)[k.trans_b ? j * k.k + p : p * k.n + j];
          s += v;
          mag += std::fabs(v);
        }
        s *= k.alpha;
        mag *= std::fabs(k.alpha);
        if (!k.c.empty()) {
          const Tensor& c = b.m.graph.initializers.at("c");
          const int64_t ci = k.c.size() == 2 ? (k.c[0] == 1 ? 0 : i) * k.c[1] + (k.c[1] == 1 ? 0 : j)
                                             : (k.c[0] == 1 ? 0 : j);
          s += static_cast<double>(k.beta) * f32(c)[ci];
          mag += std::fabs(k.beta * f32(c)[ci]);
        }
        want.value.push_back(s);
        want.magnitude.push_back(mag);
      }
    std::ostringstream what;
    what << "Gemm " << k.m << "x" << k.k << "x" << k.n << " transA " << k.trans_a << " transB " << k.trans_b
         << " alpha " << k.alpha << " beta " << k.beta << " C " << shape_str(k.c);
    run_everywhere(b.m, {a}, want, {k.m, k.n}, what.str(), &ran_on);
  }
  expect_reached(ran_on, {"kiln", "onednn", "xnnpack", "openblas"});
}

}  // namespace
}  // namespace kiln
