// ConvTranspose (kernels/ref/conv_transpose.cc: GEMM into columns, then each output row gathered
// phase by phase; kernels/cpu/conv/patch_conv_transpose.cc when the kernel equals the stride)
// against a plain scatter loop in double: 1-D, 2-D and 3-D, kernel sizes 1-5 (kh != kw too),
// strides 1-3 and asymmetric ones, dilations, asymmetric pads (larger than the
// kernel too, which crop), output_padding, groups, batch 2, with and without bias, at 1 and 2
// threads.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kiln/session.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

struct Deconv {
  int64_t dims, n, c, m, group;
  int64_t in[3], k[3], s[3], d[3], pb[3], pe[3], op[3];
  bool bias;
};

void check(const Deconv& t, int threads) {
  test::Builder b(17);
  Shape xs{t.n, t.c}, ws{t.c, t.m / t.group}, out{t.n, t.m};
  std::vector<int64_t> strides, dilations, pads(2 * t.dims), out_pad;
  for (int64_t i = 0; i < t.dims; ++i) {
    xs.push_back(t.in[i]);
    ws.push_back(t.k[i]);
    out.push_back(t.s[i] * (t.in[i] - 1) + t.op[i] + (t.k[i] - 1) * t.d[i] + 1 - t.pb[i] - t.pe[i]);
    strides.push_back(t.s[i]);
    dilations.push_back(t.d[i]);
    pads[i] = t.pb[i];
    pads[i + t.dims] = t.pe[i];
    out_pad.push_back(t.op[i]);
  }
  b.input("x", xs);
  b.weight("w", ws);
  if (t.bias) b.weight("b", {t.m});
  b.add("ConvTranspose", t.bias ? std::vector<std::string>{"x", "w", "b"} : std::vector<std::string>{"x", "w"},
        {"y"},
        {test::attr_i("group", t.group), test::attr_ints("strides", strides),
         test::attr_ints("dilations", dilations), test::attr_ints("pads", pads),
         test::attr_ints("output_padding", out_pad)});
  b.output("y");
  const Tensor x = b.random(xs);
  SessionOptions opts;
  opts.threads = threads;
  opts.optimize_level = 0;
  const std::vector<Value> got = test::run_model(b.m, {x}, opts);
  ASSERT_EQ(got.size(), 1u);
  const Tensor& y = got[0].tensor;
  ASSERT_EQ(y.shape(), out);

  // The definition: every input pixel, times every tap, added where the tap lands.
  int64_t in3[3] = {1, 1, 1}, k3[3] = {1, 1, 1}, s3[3] = {1, 1, 1}, d3[3] = {1, 1, 1}, p3[3] = {0, 0, 0},
          o3[3] = {1, 1, 1};
  for (int64_t i = 0; i < t.dims; ++i) {
    const int64_t j = 3 - t.dims + i;
    in3[j] = t.in[i], k3[j] = t.k[i], s3[j] = t.s[i], d3[j] = t.d[i], p3[j] = t.pb[i];
    o3[j] = out[2 + i];
  }
  const int64_t in_sz = in3[0] * in3[1] * in3[2], out_sz = o3[0] * o3[1] * o3[2];
  const int64_t ksz = k3[0] * k3[1] * k3[2], cg = t.c / t.group, mg = t.m / t.group;
  std::vector<double> want(t.n * t.m * out_sz, 0.0);
  const float* xv = x.data<float>();
  const float* wv = b.m.graph.initializers["w"].data<float>();
  for (int64_t ni = 0; ni < t.n; ++ni)
    for (int64_t ci = 0; ci < t.c; ++ci)
      for (int64_t mo = 0; mo < mg; ++mo)
        for (int64_t p = 0; p < in_sz; ++p)
          for (int64_t tap = 0; tap < ksz; ++tap) {
            const int64_t ip[3] = {p / (in3[1] * in3[2]), p / in3[2] % in3[1], p % in3[2]};
            const int64_t kp[3] = {tap / (k3[1] * k3[2]), tap / k3[2] % k3[1], tap % k3[2]};
            int64_t o[3];
            bool inside = true;
            for (int a = 0; a < 3; ++a) {
              o[a] = ip[a] * s3[a] - p3[a] + kp[a] * d3[a];
              inside = inside && o[a] >= 0 && o[a] < o3[a];
            }
            if (!inside) continue;
            const int64_t mi = ci / cg * mg + mo;
            want[(ni * t.m + mi) * out_sz + (o[0] * o3[1] + o[1]) * o3[2] + o[2]] +=
                static_cast<double>(xv[(ni * t.c + ci) * in_sz + p]) * wv[(ci * mg + mo) * ksz + tap];
          }
  const float* bv = t.bias ? b.m.graph.initializers["b"].data<float>() : nullptr;
  for (int64_t i = 0; i < y.numel(); ++i) {
    const double ref = want[i] + (bv ? bv[i / out_sz % t.m] : 0.0);
    ASSERT_NEAR(y.data<float>()[i], ref, 1e-5 * std::max(1.0, std::fabs(ref)))
        << "element " << i << " dims " << t.dims << " k" << t.k[0] << "x" << t.k[1] << " s" << t.s[0] << t.s[1]
        << " threads " << threads;
  }
}

TEST(ConvTranspose, AgreesWithScatterLoop) {
  std::mt19937 rng(11);
  auto pick = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % (hi - lo + 1)); };
  for (int trial = 0; trial < 36; ++trial) {
    Deconv t{};
    t.dims = trial % 9 == 4 ? 3 : trial % 5 == 2 ? 1 : 2;
    t.n = trial % 7 == 0 ? 2 : 1;
    t.group = trial % 6 == 1 ? 2 : 1;
    t.c = t.group * pick(1, 9);
    t.m = t.group * pick(1, 6);
    for (int64_t i = 0; i < t.dims; ++i) {
      t.in[i] = t.dims == 3 ? pick(1, 5) : pick(1, 19);
      t.k[i] = pick(1, 5);
      t.s[i] = pick(1, 3);
      t.d[i] = trial % 4 == 1 ? 2 : 1;
      t.op[i] = trial % 3 == 0 ? pick(0, t.s[i] - 1) : 0;  // output_padding < stride
      t.pb[i] = pick(0, 2 + t.k[i]);
      t.pe[i] = pick(0, 2);
      // Keep at least one output.
      const int64_t natural = t.s[i] * (t.in[i] - 1) + t.op[i] + (t.k[i] - 1) * t.d[i] + 1;
      if (natural - t.pb[i] - t.pe[i] < 1) t.pb[i] = t.pe[i] = 0;
    }
    t.bias = trial % 2 == 0;
    for (int threads : {1, 2}) check(t, threads);
  }
}

TEST(ConvTranspose, DecoderLayersAgreeWithScatterLoop) {
  // The U-Net decoder's upsampling layers: 4x4 stride 2 pad 1, and 3x3 stride 2 pad 1 with
  // output_padding 1 (outputs wider than 64, so the gather runs long rows), and a 1-D k5 s3.
  // Then a DB text detector's last layer, 2x2 stride 2 to one channel, batch 2: its rows gathered
  // over the threads.
  const Deconv cases[] = {
      {2, 1, 16, 8, 1, {20, 70}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, true},
      {2, 2, 16, 1, 1, {90, 100}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, {0, 0}, true},
      {2, 1, 8, 4, 1, {33, 40}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, true},
      {1, 2, 6, 5, 1, {50}, {5}, {3}, {1}, {1}, {1}, {0}, false},
      // Kernel = stride (patch_conv_transpose.cc): pads that crop, output_padding past the
      // input's reach, groups, batch 2, widths of 32-column tiles and a tail; 2x3 / (2, 3); 1-D k4.
      {2, 2, 6, 4, 2, {7, 37}, {2, 2}, {2, 2}, {1, 1}, {1, 3}, {0, 2}, {1, 1}, true},
      {2, 1, 5, 3, 1, {9, 70}, {2, 3}, {2, 3}, {1, 1}, {0, 1}, {1, 0}, {0, 2}, false},
      {1, 1, 3, 2, 1, {45}, {4}, {4}, {1}, {2}, {1}, {3}, true},
      {2, 2, 24, 24, 1, {9, 45}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, {0, 0}, true},  // a DB head's 24 -> 24
  };
  for (const Deconv& t : cases)
    for (int threads : {1, 2}) check(t, threads);
}

}  // namespace
}  // namespace kiln
