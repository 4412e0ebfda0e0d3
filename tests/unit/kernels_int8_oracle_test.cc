// The 8-bit kernels and their oracles. Every kernel that declares an 8-bit input type
// (KernelDef::dtypes) must name the test that checks it against plain integer loops or the
// unfused reference ops, bit for bit (a float epilogue to the rounding of one fused multiply-add),
// or for the plain reference loops themselves ONNX's conformance data: a new 8-bit kernel without
// one fails here. QLinearAdd and QLinearMul are checked here,
// against their formula in scalar float, on the 8-lane rows and the broadcast ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>

#include "core/float_convert.h"
#include "kernels/cpu/lookup_table.h"
#include "kernels/cpu/qlinear_binary.h"
#include "kernels/kernel.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

bool takes_8bit(const KernelDef& d) {
  for (const DtypeConstraint& c : d.dtypes)
    for (DType t : c.types)
      if (dtype_is_8bit_integer(t)) return true;
  return false;
}

// (domain.op) -> the unit test that checks it, or "conformance" for a kernel that is the plain
// reference loop, checked against ONNX's backend test data (tests/conformance).
const std::map<std::string, std::string> kOracles = {
    {"QLinearConv", "QConv.QLinearConvNodeMatchesAPlainLoop"},
    {"com.microsoft.QLinearConv", "QConv.QLinearConvNodeMatchesAPlainLoop"},
    // = QLinearConv + its table; its residual add form: QConv.ConvWithResidualNodeMatchesConvThenQLinearAdd
    {"ai.kiln.QLinearConv", "QdqFusion.SqueezeExcitationStaysChannelsLast"},
    {"com.microsoft.QLinearAdd", "Int8Oracle.QLinearAddAndMulMatchTheirFormula"},
    {"com.microsoft.QLinearMul", "Int8Oracle.QLinearAddAndMulMatchTheirFormula"},
    {"com.microsoft.QLinearSigmoid", "Int8Oracle.QLinearSigmoidMatchesItsFormula"},
    {"com.microsoft.QLinearGlobalAveragePool", "Int8Oracle.QLinearGlobalAveragePoolMatchesItsFormula"},
    {"ai.kiln.QLinearLookup", "QdqFusion.SiluAndBroadcastMulBecomeEightBit"},
    {"com.microsoft.NhwcMaxPool", "Int8Oracle.NhwcMaxPoolMatchesAPlainLoop"},
    {"MatMulInteger", "MatMulInteger.ColumnBlocksMatchPlainLoop"},
    {"com.microsoft.MatMulIntegerToFloat", "DynamicQuantMatMul.ChainBecomesMatMulIntegerToFloat"},
    {"ai.kiln.MatMulIntegerToFloat", "Quantize.MatMulIntegerToFloatTakesTheEpilogue"},  // = the op above + its epilogue
    {"ai.kiln.DynamicQuantMatMul", "Quantize.DynamicQuantMatMulPerRow"},
    {"ai.kiln.MultiHeadAttention", "AttentionFusion.DynamicQuantProjectionsMergeIntoInt8Attention"},
    {"com.microsoft.MatMulNBits", "Quantize.WeightOnlyMatMul"},
    {"QLinearMatMul", "conformance"},
    {"ConvInteger", "conformance"},
};

TEST(Int8Oracle, EveryEightBitKernelHasOne) {
  std::set<std::string> tests;
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  for (int i = 0; i < unit.total_test_suite_count(); ++i) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(i);
    for (int j = 0; j < suite.total_test_count(); ++j)
      tests.insert(std::string(suite.name()) + "." + suite.GetTestInfo(j)->name());
  }
  int eight_bit = 0;
  for (const KernelDef* d : KernelRegistry::global().all()) {
    if (!takes_8bit(*d)) continue;
    ++eight_bit;
    const std::string op = (d->domain.empty() ? "" : d->domain + ".") + d->op_type;
    auto it = kOracles.find(op);
    ASSERT_NE(it, kOracles.end()) << op << " declares 8-bit inputs but names no oracle test here";
    if (it->second != "conformance") {
      EXPECT_TRUE(tests.count(it->second)) << op << ": no test " << it->second;
    }
  }
  EXPECT_GE(eight_bit, static_cast<int>(kOracles.size()));
}

// c = saturate(round_half_even(((a - az) * as  op  (b - bz) * bs) / cs) + cz), in float.
template <typename T>
T formula(bool multiply, float a, float as, float az, float b, float bs, float bz, float cs, float cz) {
  const float fa = (a - az) * as, fb = (b - bz) * bs;
  const float v = std::nearbyint((multiply ? fa * fb : fa + fb) / cs) + cz;
  return static_cast<T>(std::clamp(v, std::is_signed_v<T> ? -128.0f : 0.0f, std::is_signed_v<T> ? 127.0f : 255.0f));
}

// The zero points of the every-pair check.
template <typename T>
constexpr T kPairAz = 3;
template <typename T>
constexpr T kPairBz = std::is_signed_v<T> ? -6 : 250;

// Element i of `out` read from x of `shape`, numpy-broadcast to `out` (aligned right).
int64_t broadcast_index(int64_t i, const Shape& out, const Shape& shape) {
  int64_t j = 0, stride = 1;
  for (size_t d = out.size(); d-- > 0;) {
    const int64_t pos = i % out[d];
    i /= out[d];
    const size_t from_end = out.size() - 1 - d;
    if (from_end >= shape.size()) continue;
    const int64_t size = shape[shape.size() - 1 - from_end];
    if (size != 1) j += pos * stride;
    stride *= size;
  }
  return j;
}

template <typename T>
void check_binary(bool multiply, const Shape& b_shape, float cs_given = 0, bool every_pair = false,
                  Shape a_shape = {3, 37}) {
  const DType t = std::is_signed_v<T> ? DType::kInt8 : DType::kUInt8;
  SCOPED_TRACE(::testing::Message() << (multiply ? "QLinearMul " : "QLinearAdd ") << dtype_name(t) << " B "
                                    << shape_str(b_shape));
  std::mt19937 rng(multiply * 7 + b_shape.size());
  std::uniform_int_distribution<int> byte(std::is_signed_v<T> ? -128 : 0, std::is_signed_v<T> ? 127 : 255);
  if (every_pair) a_shape = {256, 256};
  Tensor a = Tensor::make(t, a_shape).value(), b = Tensor::make(t, b_shape).value();
  for (int64_t i = 0; i < a.numel(); ++i) a.data<T>()[i] = static_cast<T>(every_pair ? i >> 8 : byte(rng));
  for (int64_t i = 0; i < b.numel(); ++i) b.data<T>()[i] = static_cast<T>(every_pair ? i & 255 : byte(rng));
  const float as = 0.037f, bs = 0.021f, cs = cs_given ? cs_given : multiply ? 0.09f : 0.05f;
  T az = static_cast<T>(byte(rng)), bz = static_cast<T>(byte(rng)), cz = static_cast<T>(byte(rng));
  if (every_pair) az = kPairAz<T>, bz = kPairBz<T>, cz = 7;
  test::Builder g(13);
  g.m.opsets["com.microsoft"] = 1;
  g.m.graph.inputs.push_back(ir::ValueInfo{"a", ir::TypeInfo::tensor(t, a_shape), ""});
  g.m.graph.inputs.push_back(ir::ValueInfo{"b", ir::TypeInfo::tensor(t, b_shape), ""});
  auto scalar = [](DType type, double v) {
    Tensor s = Tensor::make(type, {}).value();
    store_from_double(type, s.raw_data(), 0, v);
    return s;
  };
  auto& init = g.m.graph.initializers;
  init["as"] = scalar(DType::kFloat32, as), init["bs"] = scalar(DType::kFloat32, bs), init["cs"] = scalar(DType::kFloat32, cs);
  init["az"] = scalar(t, az), init["bz"] = scalar(t, bz), init["cz"] = scalar(t, cz);
  g.add(multiply ? "QLinearMul" : "QLinearAdd", {"a", "as", "az", "b", "bs", "bz", "cs", "cz"}, {"c"}).domain =
      "com.microsoft";
  g.m.graph.outputs.push_back(ir::ValueInfo{"c", ir::TypeInfo::tensor(t), ""});
  SessionOptions plain;
  plain.optimize_level = 0;
  const Tensor c = test::run_model(g.m, {a, b}, plain)[0].tensor;
  Shape c_shape(std::max(a_shape.size(), b_shape.size()), 1);  // numpy's broadcast, aligned right
  for (size_t k = 0; k < c_shape.size(); ++k) {
    const size_t from_end = c_shape.size() - 1 - k;
    for (const Shape* x : {static_cast<const Shape*>(&a_shape), &b_shape})
      if (from_end < x->size()) c_shape[k] = std::max(c_shape[k], (*x)[x->size() - 1 - from_end]);
  }
  ASSERT_EQ(c.shape(), c_shape);
  for (int64_t i = 0; i < c.numel(); ++i) {
    const int64_t ja = broadcast_index(i, c_shape, a_shape), jb = broadcast_index(i, c_shape, b_shape);
    const T want = formula<T>(multiply, a.data<T>()[ja], as, az, b.data<T>()[jb], bs, bz, cs, cz);
    ASSERT_EQ(c.data<T>()[i], want) << "element " << i;
  }
}

TEST(Int8Oracle, QLinearAddAndMulMatchTheirFormula) {
  for (bool multiply : {false, true}) {
    for (const Shape& b_shape : {Shape{3, 37}, Shape{37}, Shape{3, 1}}) {
      check_binary<uint8_t>(multiply, b_shape);
      check_binary<int8_t>(multiply, b_shape);
    }
    // One value per channel of channels-last A (a squeeze-excitation's scale), per image or one
    // for all: rows of whole pixels with B repeated along them, dequantized once; and the same
    // with A the per-channel operand. Output scales that put c past 16 bits (the narrowing
    // saturates) and past 2^30 (the rows clamp in float).
    for (const float cs : {0.0f, 1e-4f, 1e-9f})
      for (const Shape& b_shape : {Shape{2, 1, 1, 37}, Shape{1, 1, 1, 37}, Shape{2, 1, 1, 3}}) {
        const Shape a_shape = {2, 5, 7, b_shape.back()};
        check_binary<uint8_t>(multiply, b_shape, cs, false, a_shape);
        check_binary<int8_t>(multiply, b_shape, cs, false, a_shape);
        check_binary<uint8_t>(multiply, a_shape, cs, false, b_shape);
        check_binary<int8_t>(multiply, a_shape, cs, false, b_shape);
      }
  }
}

// Whether some pair of codes of T rounds differently when (a op b) is multiplied by 1 / cs
// instead of divided by cs (the kernel checks the same before it multiplies).
template <typename T>
bool reciprocal_misses(bool multiply, float cs) {
  const float as = 0.037f, bs = 0.021f, az = kPairAz<T>, bz = kPairBz<T>, r = 1.0f / cs;
  for (int a = 0; a < 256; ++a)
    for (int b = 0; b < 256; ++b) {
      const float fa = (static_cast<float>(static_cast<T>(a)) - az) * as;
      const float fb = (static_cast<float>(static_cast<T>(b)) - bz) * bs;
      const float v = multiply ? fa * fb : fa + fb;
      if (std::nearbyint(v / cs) != std::nearbyint(v * r)) return true;
    }
  return false;
}

template <typename T>
void every_pair(bool multiply) {
  float exact = 0, inexact = 0, by_fma = 0, not_by_fma = 0;
  auto found = [&] { return exact && inexact && (multiply || (by_fma && not_by_fma)); };
  for (int k = 0; k < 2000 && !found(); ++k) {
    const float cs = (multiply ? 0.09f : 0.05f) * (1.0f + 0.000137f * static_cast<float>(k));
    (reciprocal_misses<T>(multiply, cs) ? inexact : exact) = cs;
    // The kernel's own choice of an add's multiply-adds (QLinearBinaryMethod), to have both.
    const bool s8 = std::is_signed_v<T>;
    const QLinearBinaryParams p{0.037f, 0.021f, cs, kPairAz<T>, kPairBz<T>, 7, s8 ? -128.0f : 0, s8 ? 127.0f : 255, multiply};
    if (!multiply) (qlinear_binary_method(p, s8).by_fma ? by_fma : not_by_fma) = cs;
  }
  ASSERT_TRUE(found()) << "no output scale of each kind found";
  for (const float cs : {exact, inexact, by_fma, not_by_fma}) {
    if (cs == 0) continue;
    SCOPED_TRACE(::testing::Message() << "cs " << cs);
    check_binary<T>(multiply, Shape{256, 256}, cs, true);
  }
}

// All 65536 pairs of codes, with an output scale where multiplying by its reciprocal gives every
// pair the division's code and with one where it does not (so that the kernel divides); for the
// add, with one where its two multiply-adds give every pair the code and one where they do not.
TEST(Int8Oracle, QLinearAddAndMulMatchTheirFormulaOnEveryPairOfCodes) {
  for (bool multiply : {false, true}) {
    every_pair<uint8_t>(multiply);
    every_pair<int8_t>(multiply);
  }
}

// Every code of u8 and s8 X through QLinearSigmoid's table against its formula, with constant
// parameters (the table built in prepare) and with parameters fed at run time; 300 values, so
// that the vector lookup (AVX-512 VBMI) has a partial last step.
TEST(Int8Oracle, QLinearSigmoidMatchesItsFormula) {
  for (DType t : {DType::kUInt8, DType::kInt8})
    for (bool constant : {true, false}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << (constant ? " constant" : " fed") << " parameters");
      const bool is_signed = t == DType::kInt8;
      const float xs = 0.07f, ys = 1.0f / 250, xz = is_signed ? -3 : 131, yz = is_signed ? -120 : 4;
      Tensor x = Tensor::make(t, {300}).value();
      for (int c = 0; c < 300; ++c) static_cast<uint8_t*>(x.raw_data())[c] = static_cast<uint8_t>(c % 256);
      test::Builder g(13);
      g.m.opsets["com.microsoft"] = 1;
      g.m.graph.inputs.push_back(ir::ValueInfo{"x", ir::TypeInfo::tensor(t, {300}), ""});
      auto scalar = [](DType type, double v) {
        Tensor s = Tensor::make(type, {}).value();
        store_from_double(type, s.raw_data(), 0, v);
        return s;
      };
      std::vector<Tensor> feeds = {x};
      const std::vector<std::pair<std::string, Tensor>> params = {
          {"xs", scalar(DType::kFloat32, xs)}, {"xz", scalar(t, xz)}, {"ys", scalar(DType::kFloat32, ys)}, {"yz", scalar(t, yz)}};
      for (const auto& [name, value] : params) {
        if (constant) {
          g.m.graph.initializers[name] = value;
        } else {
          g.m.graph.inputs.push_back(ir::ValueInfo{name, ir::TypeInfo::tensor(value.dtype(), {}), ""});
          feeds.push_back(value);
        }
      }
      g.add("QLinearSigmoid", {"x", "xs", "xz", "ys", "yz"}, {"y"}).domain = "com.microsoft";
      g.m.graph.outputs.push_back(ir::ValueInfo{"y", ir::TypeInfo::tensor(t), ""});
      SessionOptions plain;
      plain.optimize_level = 0;
      const Tensor y = test::run_model(g.m, feeds, plain)[0].tensor;
      for (int i = 0; i < 300; ++i) {
        const double code = is_signed ? static_cast<int8_t>(i % 256) : i % 256;
        const float v = (static_cast<float>(code) - xz) * xs;
        const float s = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(v))));
        const float want = std::clamp(std::nearbyint(s / ys) + yz, is_signed ? -128.0f : 0.0f, is_signed ? 127.0f : 255.0f);
        const double got = load_as_double(t, y.raw_data(), i);
        ASSERT_EQ(got, want) << "code " << code;
      }
    }
}

// The byte lookup every 8-bit table goes through (QLinearSigmoid, QLinearLookup, the conv's
// table): a random table, every code in a random order, runs of every length up to 100 and a
// long one, at offsets off the vector size, in place and not, against table[x] (the CPU's path:
// VBMI natively where it has it, vpshufb at KILN_ISA=avx2).
TEST(Int8Oracle, LookUpBytesMatchesTheTable) {
  std::mt19937 rng(11);
  std::vector<uint8_t> table(256), x(5000 + 64), y(x.size()), want(x.size());
  for (auto& v : table) v = static_cast<uint8_t>(rng());
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>(i % 256);
  std::shuffle(x.begin(), x.end(), rng);
  for (size_t i = 0; i < x.size(); ++i) want[i] = table[x[i]];
  std::vector<int64_t> lengths(101);
  for (int64_t n = 0; n <= 100; ++n) lengths[static_cast<size_t>(n)] = n;
  lengths.push_back(5000);
  for (const int64_t n : lengths)
    for (const int64_t offset : {0, 7, 33}) {
      std::fill(y.begin(), y.end(), 0xAB);
      look_up_bytes(table.data(), x.data() + offset, y.data() + offset, n);
      for (int64_t i = 0; i < static_cast<int64_t>(y.size()); ++i) {
        const bool in = i >= offset && i < offset + n;
        ASSERT_EQ(y[static_cast<size_t>(i)], in ? want[static_cast<size_t>(i)] : 0xAB) << "n " << n << " offset " << offset << " i " << i;
      }
      std::vector<uint8_t> same(x.begin(), x.end());
      look_up_bytes(table.data(), same.data() + offset, same.data() + offset, n);
      for (int64_t i = offset; i < offset + n; ++i) ASSERT_EQ(same[static_cast<size_t>(i)], want[static_cast<size_t>(i)]);
    }
}

// Both layouts, u8 and s8, two images of 37 channels (rows of whole pixels and the ones short of
// a row) and one of 672 channels x 3136 pixels (more rows than 16-bit lanes may add, in each of a
// thread's bands): each
// channel's codes summed in integers, then
// saturate(round_half_even(float(sum - n * xz) * (xs / (ys * n))) + yz) (the kernel's comment).
TEST(Int8Oracle, QLinearGlobalAveragePoolMatchesItsFormula) {
  struct Case {
    int64_t batch, channels, h, w;
  };
  for (const Case& shape : {Case{2, 37, 5, 7}, Case{1, 672, 56, 56}})
  for (DType t : {DType::kUInt8, DType::kInt8})
    for (bool last : {false, true}) {
      const int64_t batch = shape.batch, channels = shape.channels, h = shape.h, w = shape.w, n = h * w;
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << (last ? " channels-last " : " NCHW ") << channels);
      const bool is_signed = t == DType::kInt8;
      const float xs = 0.05f, ys = 0.03f, xz = is_signed ? -7 : 120, yz = is_signed ? 3 : 90;
      const Shape shape = last ? Shape{batch, h, w, channels} : Shape{batch, channels, h, w};
      Tensor x = Tensor::make(t, shape).value();
      std::mt19937 rng(11);
      for (int64_t i = 0; i < x.numel(); ++i) static_cast<uint8_t*>(x.raw_data())[i] = static_cast<uint8_t>(rng());
      if (n > 256)  // codes of 240 or more (as u8): 274 of them overflow 16 bits
        for (int64_t i = 0; i < x.numel(); ++i) {
          uint8_t& v = static_cast<uint8_t*>(x.raw_data())[i];
          v = is_signed ? static_cast<uint8_t>((v & 0x0f) | 0x70) : static_cast<uint8_t>(v | 0xf0);
        }
      test::Builder g(13);
      g.m.opsets["com.microsoft"] = 1;
      g.m.graph.inputs.push_back(ir::ValueInfo{"x", ir::TypeInfo::tensor(t, shape), ""});
      auto scalar = [](DType type, double v) {
        Tensor s = Tensor::make(type, {}).value();
        store_from_double(type, s.raw_data(), 0, v);
        return s;
      };
      g.m.graph.initializers["xs"] = scalar(DType::kFloat32, xs), g.m.graph.initializers["xz"] = scalar(t, xz);
      g.m.graph.initializers["ys"] = scalar(DType::kFloat32, ys), g.m.graph.initializers["yz"] = scalar(t, yz);
      g.add("QLinearGlobalAveragePool", {"x", "xs", "xz", "ys", "yz"}, {"y"}, {test::attr_i("channels_last", last)})
          .domain = "com.microsoft";
      g.m.graph.outputs.push_back(ir::ValueInfo{"y", ir::TypeInfo::tensor(t), ""});
      const Tensor y = test::run_model(g.m, {x})[0].tensor;
      ASSERT_EQ(y.shape(), last ? (Shape{batch, 1, 1, channels}) : (Shape{batch, channels, 1, 1}));
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t c = 0; c < channels; ++c) {
          int64_t sum = 0;
          for (int64_t p = 0; p < n; ++p)
            sum += static_cast<int64_t>(load_as_double(t, x.raw_data(), last ? (b * n + p) * channels + c : (b * channels + c) * n + p));
          const float v = static_cast<float>(static_cast<double>(sum) - static_cast<double>(n) * xz) * (xs / (ys * static_cast<float>(n)));
          const float want = std::clamp(std::nearbyint(v) + yz, is_signed ? -128.0f : 0.0f, is_signed ? 127.0f : 255.0f);
          ASSERT_EQ(load_as_double(t, y.raw_data(), b * channels + c), want) << "image " << b << " channel " << c;
        }
    }
}

// NhwcMaxPool against the window's max in a plain loop: u8 and s8 codes over the whole range,
// channels in whole 32-byte steps and past them (37, 64, 3), 3x3 stride 2 with pads (resnet's),
// 2x2 dilated, and ceil_mode's last windows partly past X.
TEST(Int8Oracle, NhwcMaxPoolMatchesAPlainLoop) {
  struct Case {
    int64_t c, h, w, k, stride, pad, dilation, ceil;
  };
  for (const Case& k : {Case{37, 9, 11, 3, 2, 1, 1, 0}, Case{64, 8, 8, 3, 2, 1, 1, 1}, Case{3, 7, 6, 2, 1, 0, 2, 0},
                        Case{37, 4, 5, 2, 3, 1, 1, 1}})
    for (DType t : {DType::kUInt8, DType::kInt8}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " C " << k.c << " " << k.h << "x" << k.w << " k " << k.k
                                        << " s " << k.stride << " pad " << k.pad << " d " << k.dilation << " ceil "
                                        << k.ceil);
      const Shape shape = {2, k.h, k.w, k.c};
      Tensor x = Tensor::make(t, shape).value();
      std::mt19937 rng(static_cast<uint32_t>(k.c * 7 + k.h));
      for (int64_t i = 0; i < x.numel(); ++i) static_cast<uint8_t*>(x.raw_data())[i] = static_cast<uint8_t>(rng());
      test::Builder g(13);
      g.m.opsets["com.microsoft"] = 1;
      g.m.graph.inputs.push_back(ir::ValueInfo{"x", ir::TypeInfo::tensor(t, shape), ""});
      g.add("NhwcMaxPool", {"x"}, {"y"},
            {test::attr_ints("kernel_shape", {k.k, k.k}), test::attr_ints("strides", {k.stride, k.stride}),
             test::attr_ints("pads", {k.pad, k.pad, k.pad, k.pad}), test::attr_ints("dilations", {k.dilation, k.dilation}),
             test::attr_i("ceil_mode", k.ceil)})
          .domain = "com.microsoft";
      g.m.graph.outputs.push_back(ir::ValueInfo{"y", ir::TypeInfo::tensor(t), ""});
      const Tensor y = test::run_model(g.m, {x})[0].tensor;
      const int64_t span = (k.k - 1) * k.dilation + 1;
      auto out_dim = [&](int64_t in) {
        const int64_t room = in + 2 * k.pad - span;
        int64_t o = (k.ceil ? (room + k.stride - 1) / k.stride : room / k.stride) + 1;
        if (k.ceil && (o - 1) * k.stride >= in + k.pad) --o;  // a last window starting in the end padding
        return o;
      };
      const int64_t oh = out_dim(k.h), ow = out_dim(k.w);
      ASSERT_EQ(y.shape(), (Shape{2, oh, ow, k.c}));
      for (int64_t n = 0; n < 2; ++n)
        for (int64_t oy = 0; oy < oh; ++oy)
          for (int64_t ox = 0; ox < ow; ++ox)
            for (int64_t c = 0; c < k.c; ++c) {
              double want = t == DType::kInt8 ? -128 : 0;
              for (int64_t ky = 0; ky < k.k; ++ky)
                for (int64_t kx = 0; kx < k.k; ++kx) {
                  const int64_t iy = oy * k.stride - k.pad + ky * k.dilation, ix = ox * k.stride - k.pad + kx * k.dilation;
                  if (iy >= 0 && iy < k.h && ix >= 0 && ix < k.w)
                    want = std::max(want, load_as_double(t, x.raw_data(), ((n * k.h + iy) * k.w + ix) * k.c + c));
                }
              ASSERT_EQ(load_as_double(t, y.raw_data(), ((n * oh + oy) * ow + ox) * k.c + c), want)
                  << "image " << n << " pixel " << oy << "," << ox << " channel " << c;
            }
    }
}

}  // namespace
}  // namespace kiln
