// The float Conv's GEMM paths (kernels/cpu/conv/conv_gemm.h) against a plain gather loop in
// double: convs that only shift planes (R(2+1)D's temporal (3,1,1), strided too, and a (3,1) 2-D
// conv) with a GEMM a tap, and convs whose im2col matrix is large, a chunk of output rows at a
// time (R(2+1)D's (1,3,3), 3x3x3 dilated and grouped, a 1-D and a 2-D conv): groups, batch 2,
// with and without bias, at -O0 (the Conv kernel) and -O3 (FusedConv with its Relu), at 1 and 2
// threads; chunks end inside an output plane and the last one is short.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kiln/session.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

struct Case {
  int64_t dims, n, c, m, group;
  int64_t in[3], k[3], s[3], d[3], pb[3], pe[3];
  bool bias;
};

void check(const Case& t, int level, int threads) {
  test::Builder b(17);
  Shape xs{t.n, t.c}, ws{t.m, t.c / t.group}, out{t.n, t.m};
  std::vector<int64_t> strides, dilations, pads(2 * t.dims);
  int64_t in3[3] = {1, 1, 1}, k3[3] = {1, 1, 1}, s3[3] = {1, 1, 1}, d3[3] = {1, 1, 1}, p3[3] = {0, 0, 0},
          o3[3] = {1, 1, 1};
  for (int64_t i = 0; i < t.dims; ++i) {
    const int64_t o = (t.in[i] + t.pb[i] + t.pe[i] - t.d[i] * (t.k[i] - 1) - 1) / t.s[i] + 1;
    xs.push_back(t.in[i]);
    ws.push_back(t.k[i]);
    out.push_back(o);
    strides.push_back(t.s[i]);
    dilations.push_back(t.d[i]);
    pads[i] = t.pb[i];
    pads[i + t.dims] = t.pe[i];
    const int64_t j = 3 - t.dims + i;
    in3[j] = t.in[i], k3[j] = t.k[i], s3[j] = t.s[i], d3[j] = t.d[i], p3[j] = t.pb[i], o3[j] = o;
  }
  b.input("x", xs);
  b.weight("w", ws);
  if (t.bias) b.weight("b", {t.m});
  b.add("Conv", t.bias ? std::vector<std::string>{"x", "w", "b"} : std::vector<std::string>{"x", "w"}, {"c"},
        {test::attr_i("group", t.group), test::attr_ints("strides", strides),
         test::attr_ints("dilations", dilations), test::attr_ints("pads", pads)});
  b.add("Relu", {"c"}, {"y"});
  b.output("y");
  const Tensor x = b.random(xs);
  SessionOptions opts;
  opts.threads = threads;
  opts.optimize_level = level;
  const std::vector<Value> got = test::run_model(b.m, {x}, opts);
  ASSERT_EQ(got.size(), 1u);
  const Tensor& y = got[0].tensor;
  ASSERT_EQ(y.shape(), out);

  // The definition: each output, the sum over its group's channels and the taps inside X.
  const int64_t in_sz = in3[0] * in3[1] * in3[2], out_sz = o3[0] * o3[1] * o3[2];
  const int64_t ksz = k3[0] * k3[1] * k3[2], cg = t.c / t.group, mg = t.m / t.group;
  const float* xv = x.data<float>();
  const float* wv = b.m.graph.initializers["w"].data<float>();
  const float* bv = t.bias ? b.m.graph.initializers["b"].data<float>() : nullptr;
  for (int64_t ni = 0; ni < t.n; ++ni)
    for (int64_t mi = 0; mi < t.m; ++mi)
      for (int64_t p = 0; p < out_sz; ++p) {
        const int64_t op[3] = {p / (o3[1] * o3[2]), p / o3[2] % o3[1], p % o3[2]};
        double sum = bv ? bv[mi] : 0.0, mag = std::fabs(sum);
        for (int64_t c = 0; c < cg; ++c)
          for (int64_t tap = 0; tap < ksz; ++tap) {
            const int64_t kp[3] = {tap / (k3[1] * k3[2]), tap / k3[2] % k3[1], tap % k3[2]};
            int64_t ip[3];
            bool inside = true;
            for (int a = 0; a < 3; ++a) {
              ip[a] = op[a] * s3[a] - p3[a] + kp[a] * d3[a];
              inside = inside && ip[a] >= 0 && ip[a] < in3[a];
            }
            if (!inside) continue;
            const int64_t ci = mi / mg * cg + c;
            const double v = static_cast<double>(xv[(ni * t.c + ci) * in_sz + (ip[0] * in3[1] + ip[1]) * in3[2] + ip[2]]) *
                             wv[(mi * cg + c) * ksz + tap];
            sum += v;
            mag += std::fabs(v);
          }
        const double want = std::max(sum, 0.0);
        const int64_t i = (ni * t.m + mi) * out_sz + p;
        ASSERT_NEAR(y.data<float>()[i], want, 1e-5 * std::max(1.0, mag))
            << "element " << i << " dims " << t.dims << " k" << t.k[0] << "x" << t.k[1] << "x" << t.k[2]
            << " level " << level << " threads " << threads;
      }
}

TEST(ConvAsGemms, AgreesWithGatherLoop) {
  // Each im2col matrix is over 2 MB: the convs that do not shift planes run in chunks of rows.
  const Case cases[] = {
      // R(2+1)D's spatial (1,3,3) and temporal (3,1,1) convs, and its strided ones.
      {3, 1, 16, 24, 1, {6, 30, 29}, {1, 3, 3}, {1, 1, 1}, {1, 1, 1}, {0, 1, 1}, {0, 1, 1}, true},
      {3, 1, 40, 16, 1, {7, 30, 29}, {3, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 0, 0}, {1, 0, 0}, true},
      {3, 1, 40, 20, 1, {6, 33, 31}, {1, 3, 3}, {1, 2, 2}, {1, 1, 1}, {0, 1, 1}, {0, 1, 1}, false},
      {3, 2, 48, 8, 1, {9, 30, 29}, {3, 1, 1}, {2, 1, 1}, {1, 1, 1}, {1, 0, 0}, {1, 0, 0}, true},
      // 3x3x3 with uneven pads and a dilation; grouped.
      {3, 1, 12, 12, 1, {8, 19, 18}, {3, 3, 3}, {1, 1, 1}, {1, 2, 1}, {1, 2, 0}, {0, 1, 2}, true},
      {3, 1, 16, 12, 2, {5, 26, 24}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, true},
      // 1-D and 2-D (at -O3 the 2-D ones run the blocked conv instead); a (3,1) 2-D conv shifts rows.
      {2, 1, 16, 8, 1, {40, 30}, {3, 1}, {2, 1}, {1, 1}, {1, 0}, {1, 0}, true},
      {1, 1, 64, 8, 1, {1500}, {7}, {1}, {1}, {3}, {3}, true},
      {2, 1, 24, 8, 1, {61, 59}, {5, 5}, {1, 1}, {1, 1}, {2, 2}, {2, 2}, false},
  };
  for (const Case& t : cases)
    for (int level : {0, 3})
      for (int threads : {1, 2}) check(t, level, threads);
}

}  // namespace
}  // namespace kiln
