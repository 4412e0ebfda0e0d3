// The 8-bit conv's store epilogues (kernels/cpu/qconv, Requantize::add, ::activation): a residual
// block's QLinearAdd and an activation of its float sums, on every tile, against the plain loop's
// codes then QLinearAdd's division, or its float sums then the activation and QuantizeLinear
// (qconv_test_util.h); and the
// ai.kiln.QLinearConv node that carries the add against QLinearConv then QLinearAdd.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/qconv/qconv.h"
#include "kernels/cpu/qlinear_binary.h"
#include "kiln/session.h"
#include "pass_test_util.h"
#include "qconv_test_util.h"

namespace kiln {
namespace {

using namespace qconv_test;

// A residual add in the store (Requantize::add), on every group-1 tile, u8 and s8, the two
// operands' scales far apart and close (the add's sums past C's range either way), zero points
// off the middle, C scales whose reciprocal gives the division's codes and one whose does not
// (0.3: the store divides the lanes near a half), and one so small (2^-24) that the sums divided
// pass int32 (the store clamps them in float); scales as calibration gives them, where the store
// takes the add's two multiply-adds (QLinearBinaryMethod::by_fma), each also by the steps; A's
// zero point the conv's and not; tiles of pixels, blocks and groups of blocks in part.
TEST(QConv, ResidualAddInTheStoreMatchesConvThenQLinearAdd) {
  std::vector<qconv::Tile> tiles = qconv::available_tiles(false);
  if (std::find(tiles.begin(), tiles.end(), qconv::Tile::kWinogradAvx2) == tiles.end())
    tiles.push_back(qconv::Tile::kWinogradAvx2);  // AVX2 alone: every x86-64 CPU kiln runs on
  const std::vector<QLinearBinaryParams> adds = {
      {0.35f, 0.02f, 0.3f, 100, 7, 90, 0, 0, false},
      {0.35f, 0.6f, 0.5f, 3, 200, 0, 0, 0, false},
      {0.35f, 0.35f, 0.125f, 128, 128, 128, 0, 0, false},
      {0.35f, 0.6f, 0x1p-24f, 100, 7, 90, 0, 0, false},
      {0.0371f, 0.0213f, 0.0497f, 121, 117, 119, 0, 0, false},
      {0.0287f, 0.0413f, 0.0533f, 0, 0, 3, 0, 0, false},
      {0.0123f, 0.0456f, 0.0389f, 140, 97, 130, 0, 0, false},
  };
  auto conv_zero_point_100 = [](Data& d) { d.zy = 100; };  // the first add's az
  for (const qconv::Tile tile : tiles)
    for (const Case& k : {cases()[1], cases()[2], Case{1, 32, 9, 7, 100, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}})
      for (const QLinearBinaryParams& add : adds)
        for (const auto out : {qconv::Output::kU8, qconv::Output::kS8}) {
          const bool s8 = out == qconv::Output::kS8;
          QLinearBinaryParams p = add;
          p.lo = s8 ? -128.0f : 0.0f, p.hi = s8 ? 127.0f : 255.0f;
          if (s8) p.az -= 128, p.bz -= 128, p.cz -= 128;
          qconv::Requantize::ResidualAdd residual{p, qlinear_binary_method(p, s8)};
          EXPECT_EQ(residual.method.reciprocal, p.cs != 0.3f);
          // Scales as calibration gives them (the last three) find the two multiply-adds; sums
          // divided past int32 never take them.
          if (add.as < 0.1f) {
            EXPECT_TRUE(residual.method.by_fma);
          }
          if (add.cs < 1e-6f) {
            EXPECT_FALSE(residual.method.by_fma);
          }
          // By the method found, and by the steps where it found the multiply-adds.
          const bool found = residual.method.by_fma;
          for (const bool by_fma : {true, false}) {
            if (by_fma && !found) continue;
            residual.method.by_fma = by_fma;
            check_direct(k, tile, false, true, out, true, 2, 0.35f, nullptr, &residual);
            if (add.az == 100) check_direct(k, tile, false, true, out, true, 2, 0.35f, conv_zero_point_100, &residual);
          }
        }
}

// An activation in the store (Requantize::activation: ai.kiln.QLinearConv's), on every tile,
// depthwise ones and Winograd too, u8 and s8, each activation the fusion writes and a clamp after
// one, outputs across the codes and past them (two Y scales).
TEST(QConv, ActivationInTheStoreMatchesFloatSumsThenQuantize) {
  std::vector<qconv::Tile> tiles = qconv::available_tiles(false), depthwise = qconv::available_tiles(true);
  if (std::find(tiles.begin(), tiles.end(), qconv::Tile::kWinogradAvx2) == tiles.end())
    tiles.push_back(qconv::Tile::kWinogradAvx2);
  tiles.insert(tiles.end(), depthwise.begin(), depthwise.end());
  using K = kiln_ops::Activation::Kind;
  std::vector<kiln_ops::Activation> activations;
  for (const K kind : {K::kSilu, K::kSigmoid, K::kTanh, K::kHardSwish, K::kHardSigmoid, K::kLeakyRelu}) {
    kiln_ops::Activation a;
    a.kind = kind;
    if (kind == K::kHardSigmoid) a.p0 = 0.2, a.p1 = 0.5;
    if (kind == K::kLeakyRelu) a.p0 = 0.1;
    activations.push_back(a);
  }
  activations.push_back(activations.back());
  activations.back().lo = -0.5, activations.back().hi = 4;  // a Clip after the LeakyRelu
  for (const qconv::Tile tile : tiles) {
    const bool dw = std::find(depthwise.begin(), depthwise.end(), tile) != depthwise.end();
    const std::vector<Case> shapes =
        dw ? std::vector<Case>{{1, 40, 10, 10, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true},
                               {1, 32, 6, 9, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true}}
           : std::vector<Case>{cases()[1], Case{1, 32, 9, 7, 100, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}};
    for (const kiln_ops::Activation& act : activations) {
      SCOPED_TRACE(::testing::Message() << "activation " << static_cast<int>(act.kind) << (act.clamped() ? " clamped" : ""));
      for (const auto out : {qconv::Output::kU8, qconv::Output::kS8})
        for (const Case& k : shapes)
          for (const float y_scale : {0.02f, 0.3f})
            check_direct(k, tile, false, true, out, true, 2, y_scale, nullptr, nullptr, &act);
    }
  }
}

// ai.kiln.QLinearConv with QLinearAdd's inputs (qlinear-conv-residual) gives the codes of the
// conv and the add apart, u8 and s8: with the add in the tile's store (a channels-last conv of
// group 1, a C scale whose reciprocal gives the division's codes), and with the add's rows after
// the conv (a C scale whose reciprocal does not, an NCHW conv, a depthwise one). The conv's
// output is the add's A or its B.
TEST(QConv, ConvWithResidualNodeMatchesConvThenQLinearAdd) {
  float inexact = 0;  // a C scale whose reciprocal misses the division's code for some pair
  for (int i = 0; i < 1000 && inexact == 0; ++i) {
    const QLinearBinaryParams p{0.35f, 0.2f, 0.3f + 0.00123f * static_cast<float>(i), 100, 7, 90, 0, 255, false};
    if (!qlinear_binary_method(p, false).reciprocal) inexact = p.cs;
  }
  ASSERT_NE(inexact, 0.0f);
  for (const bool x_signed : {false, true})
    for (const float cs : {0.25f, inexact})
      for (const bool last : {true, false})
        for (const int64_t group : {1, 24})
          for (const bool conv_is_a : {true, false}) {
            SCOPED_TRACE(::testing::Message() << (x_signed ? "s8" : "u8") << " cs " << cs << (last ? " nhwc" : " nchw")
                                              << " group " << group << (conv_is_a ? " conv A" : " conv B"));
            const Case k{2, 24, 7, 9, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
            const DType t = x_signed ? DType::kInt8 : DType::kUInt8;
            const double shift = x_signed ? -128 : 0;
            test::Builder b(13);
            const Shape xs = last ? Shape{k.n, k.h, k.w, k.c} : Shape{k.n, k.c, k.h, k.w};
            const Shape ys = last ? Shape{k.n, k.h, k.w, k.m} : Shape{k.n, k.m, k.h, k.w};
            b.m.graph.inputs.push_back(ir::ValueInfo{"x", ir::TypeInfo::tensor(t, xs), ""});
            b.m.graph.inputs.push_back(ir::ValueInfo{"r", ir::TypeInfo::tensor(t, ys), ""});
            Tensor w = Tensor::make(DType::kInt8, {k.m, k.c / group, k.kh, k.kw}).value();
            std::mt19937 rng(11);
            for (int64_t i = 0; i < w.numel(); ++i) w.data<int8_t>()[i] = static_cast<int8_t>(rng() % 256);
            auto& init = b.m.graph.initializers;
            init["w"] = w, init["ws"] = test::scalar_of(DType::kFloat32, 0.004);
            init["xs"] = test::scalar_of(DType::kFloat32, 0.02), init["xz"] = test::scalar_of(t, 120 + shift);
            init["ys"] = test::scalar_of(DType::kFloat32, 0.35), init["yz"] = test::scalar_of(t, 100 + shift);
            init["rs"] = test::scalar_of(DType::kFloat32, 0.2), init["rz"] = test::scalar_of(t, 7 + shift);
            init["cs"] = test::scalar_of(DType::kFloat32, cs), init["cz"] = test::scalar_of(t, 90 + shift);
            const std::vector<ir::Attribute> attrs = {test::attr_i("group", group), test::attr_i("channels_last", last),
                                                      test::attr_ints("pads", {1, 1, 1, 1})};
            const std::vector<std::string> conv_in = {"x", "xs", "xz", "w", "ws", "", "ys", "yz", ""};
            test::Builder apart = b, fused = b;
            apart.add("QLinearConv", conv_in, {"y"}, attrs).domain = "com.microsoft";
            std::vector<std::string> add_in = {"y", "ys", "yz", "r", "rs", "rz", "cs", "cz"};
            if (!conv_is_a) std::rotate(add_in.begin(), add_in.begin() + 3, add_in.begin() + 6);  // r, y
            apart.add("QLinearAdd", add_in, {"c"}).domain = "com.microsoft";
            std::vector<std::string> fused_in = conv_in;
            for (const char* v : {"", "ys", "yz", "r", "rs", "rz", "cs", "cz"}) fused_in.push_back(v);
            fused.add("QLinearConv", fused_in, {"c"}, attrs).domain = "ai.kiln";
            for (ir::Model* m : {&apart.m, &fused.m}) {
              m->opsets["com.microsoft"] = 1, m->opsets["ai.kiln"] = 1;
              m->graph.outputs.push_back(ir::ValueInfo{"c", ir::TypeInfo::tensor(t), ""});
            }
            Tensor x = Tensor::make(t, xs).value(), r = Tensor::make(t, ys).value();
            for (int64_t i = 0; i < x.numel(); ++i) x.data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 256);
            for (int64_t i = 0; i < r.numel(); ++i) r.data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 256);
            SessionOptions plain;
            plain.optimize_level = 0;
            const std::vector<Value> want = test::run_model(apart.m, {x, r}, plain);
            const std::vector<Value> got = test::run_model(fused.m, {x, r}, plain);
            ASSERT_EQ(want.size(), 1u);
            ASSERT_EQ(got.size(), 1u);
            ASSERT_EQ(got[0].tensor.shape(), want[0].tensor.shape());
            for (int64_t i = 0; i < want[0].tensor.numel(); ++i)
              ASSERT_EQ(got[0].tensor.data<uint8_t>()[i], want[0].tensor.data<uint8_t>()[i]) << "at " << i;
          }
}

}  // namespace
}  // namespace kiln
