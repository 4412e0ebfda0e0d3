// ai.kiln.MultiHeadAttention's fast kernel (GEMM projection + flash attention) and
// ai.kiln.ScaledDotProductAttention's (the attention of Q, K and V given) against the plain loops
// the op's reference kernel used to be, in double: seq 1, odd and 512, head_dim 64 and odd, every
// mask form, batch 2, sequence-first, 1 and 2 threads; and the attention core alone with small key
// blocks (many online-softmax steps) on every micro-kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "core/cpu_features.h"
#include "kernels/cpu/attention/attention.h"
#include "kernels/cpu/attention/softmax_step.h"
#include "kernels/cpu/gemm/microkernel.h"
#include "kiln/session.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> random_vec(int64_t n, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// Row-major strides of `shape` broadcast (numpy rules) to `out`: 0 where it repeats.
std::vector<int64_t> strides_into(const Shape& shape, const Shape& out) {
  std::vector<int64_t> st(out.size(), 0);
  int64_t s = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    const size_t in = shape.size() - 1 - i, o = out.size() - 1 - i;
    st[o] = shape[in] == 1 ? 0 : s;
    s *= shape[in];
  }
  return st;
}

// Scaled-dot-product attention of one head in double, the way the old reference kernel did it:
// q(i, c), k(j, c), v(j, c) and mask(i, j) give the operands; out(i, c) receives the result.
template <typename Q, typename K, typename V, typename M, typename Out>
void reference_head(int64_t seq, int64_t d, double scale, Q q, K k, V v, M mask, Out out) {
  std::vector<double> s(static_cast<size_t>(seq));
  for (int64_t i = 0; i < seq; ++i) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < seq; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < d; ++c) dot += double(q(i, c)) * k(j, c);
      s[j] = dot * scale + mask(i, j);
      mx = std::max(mx, s[j]);
    }
    double sum = 0;
    for (int64_t j = 0; j < seq; ++j) sum += (s[j] = std::exp(s[j] - mx));
    for (int64_t c = 0; c < d; ++c) {
      double acc = 0;
      for (int64_t j = 0; j < seq; ++j) acc += s[j] / sum * v(j, c);
      out(i, c, acc);
    }
  }
}

// got ~ want within tol relative (absolute below 1); NaN only where want is NaN.
void expect_close(const float* got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < want.size() && bad < 5; ++i) {
    const bool ok = std::isnan(want[i])
                        ? std::isnan(got[i])
                        : std::fabs(got[i] - want[i]) <= tol * std::max(1.0, std::fabs(want[i]));
    if (!ok)
      ++bad, ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << want[i];
  }
}

// ---- the attention core on its own ----

struct CoreCase {
  int64_t batch, heads, seq, d;
  Shape mask;  // empty: no mask
  int64_t key_block = 0;
};

void check_core(const CoreCase& t, const gemm::MicroKernel& mk, int threads) {
  const int64_t e = t.heads * t.d, ld = 3 * e + 5;  // Q|K|V per token, padded row
  const auto p = random_vec(t.batch * t.seq * ld, 11, -2, 2);
  const Shape scores = {t.batch, t.heads, t.seq, t.seq};
  int64_t mask_n = 1;
  for (int64_t x : t.mask) mask_n *= x;
  auto mask = random_vec(mask_n, 12, -3, 3);
  if (mask_n > 1) mask[mask_n / 2] = kNegInf;  // a masked-out key (or a whole row)
  const auto ms = t.mask.empty() ? std::vector<int64_t>(4, 0) : strides_into(t.mask, scores);
  std::vector<float> y(static_cast<size_t>(t.batch * t.seq * e), 123.0f);
  attention::AttentionArgs a;
  a.batch = t.batch, a.heads = t.heads, a.seq = t.seq, a.head_dim = t.d;
  a.q = {p.data(), t.seq * ld, ld}, a.k = {p.data() + e, t.seq * ld, ld};
  a.v = {p.data() + 2 * e, t.seq * ld, ld};
  a.y = y.data(), a.y_batch_stride = t.seq * e, a.y_token_stride = e;
  a.scale = 0.3f;
  if (!t.mask.empty()) a.mask = mask.data(), std::copy(ms.begin(), ms.end(), a.mask_strides);
  static ThreadPool pool(2);  // one for the whole test: threads start once
  attention::attention_f32(a, threads > 1 ? &pool : nullptr, {&mk, t.key_block});

  std::vector<double> want(y.size());
  for (int64_t b = 0; b < t.batch; ++b)
    for (int64_t h = 0; h < t.heads; ++h) {
      auto at = [&](int64_t part, int64_t tok, int64_t c) {
        return p[(b * t.seq + tok) * ld + part * e + h * t.d + c];
      };
      reference_head(
          t.seq, t.d, 0.3f, [&](int64_t i, int64_t c) { return at(0, i, c); },
          [&](int64_t j, int64_t c) { return at(1, j, c); },
          [&](int64_t j, int64_t c) { return at(2, j, c); },
          [&](int64_t i, int64_t j) -> double {
            return t.mask.empty() ? 0.0 : mask[b * ms[0] + h * ms[1] + i * ms[2] + j * ms[3]];
          },
          [&](int64_t i, int64_t c, double v) { want[(b * t.seq + i) * e + h * t.d + c] = v; });
    }
  expect_close(y.data(), want, 2e-5,
               std::string(mk.name) + " seq " + std::to_string(t.seq) + " d " +
                   std::to_string(t.d) + " key block " + std::to_string(t.key_block) + " threads " +
                   std::to_string(threads));
}

TEST(AttentionCore, MatchesReferenceOnEveryMicroKernel) {
  const std::vector<CoreCase> cases = {
      {1, 1, 1, 64, {}},
      {1, 2, 7, 5, {}},
      {2, 3, 33, 64, {2, 1, 1, 33}},
      {1, 2, 100, 17, {2, 100, 100}, 16},  // many query and key blocks, ragged last ones
      {2, 2, 65, 64, {2, 2, 65, 65}, 1},   // key blocks of one tile
      {1, 4, 130, 1, {130, 1}, 32},
      {2, 1, 50, 31, {1}, 48},
      {1, 12, 128, 64, {1, 1, 1, 128}},
      {1, 2, 300, 64, {1, 1, 300, 300}},  // several key blocks at the default sizes
      {1, 1, 97, 64, {1, 1, 97, 1}},      // a mask per query only
  };
  for (const auto& mk : gemm::available_f32_kernels())
    for (const auto& t : cases)
      for (int threads : {1, 2}) check_core(t, mk, threads);
}

// The AVX-512 online-softmax step gives the AVX2 one's values bit for bit (the same operations
// on twice the lanes): scores with -inf (masked), huge and tiny values, over two steps so that
// the running max moves (rescale factors below 1) and stays (factors of 1).
TEST(AttentionCore, SoftmaxStepIsTheSameOnEveryIsa) {
  if (!cpu_features().has_avx512()) GTEST_SKIP() << "no AVX-512";
  const int64_t nr = 32, cols = 24;
  std::vector<float> scores = random_vec(2 * cols * nr, 9, -30, 30);
  for (size_t i = 0; i < scores.size(); i += 7) scores[i] = kNegInf;
  for (int64_t j = 0; j < 2 * cols; ++j) scores[static_cast<size_t>(j * nr + 5)] = kNegInf;  // a masked query
  scores[3] = 95.0f, scores[40] = -120.0f;                                                   // past exp's range
  alignas(64) float st[2][cols * nr], stat[2][3 * nr];
  bool rescaled[2][2];
  for (int isa = 0; isa < 2; ++isa) {
    std::fill(stat[isa], stat[isa] + nr, kNegInf);
    std::fill(stat[isa] + nr, stat[isa] + 3 * nr, 0.0f);
    for (int step = 0; step < 2; ++step) {
      std::copy_n(scores.data() + step * cols * nr, cols * nr, st[isa]);
      auto fn = isa == 0 ? attention::softmax_step_avx2 : attention::softmax_step_avx512;
      rescaled[isa][step] = fn(st[isa], cols, nr, stat[isa], stat[isa] + nr, stat[isa] + 2 * nr);
    }
  }
  EXPECT_EQ(rescaled[0][0], rescaled[1][0]);
  EXPECT_EQ(rescaled[0][1], rescaled[1][1]);
  for (int64_t i = 0; i < cols * nr; ++i) ASSERT_EQ(std::memcmp(&st[0][i], &st[1][i], 4), 0) << "score " << i;
  for (int64_t i = 0; i < 3 * nr; ++i) ASSERT_EQ(std::memcmp(&stat[0][i], &stat[1][i], 4), 0) << "statistic " << i;
}

TEST(AttentionCore, FullyMaskedRowIsNanOrZerosOthersUnaffected) {
  // Row 3 of every head sees only -inf; row 5 has -inf in its first key block only, so the
  // online softmax must restart from 0 rather than produce NaN.
  const int64_t seq = 40, d = 8, e = d;
  const auto p = random_vec(seq * 3 * e, 5);
  std::vector<float> mask(static_cast<size_t>(seq * seq), 0.0f);
  for (int64_t j = 0; j < seq; ++j) mask[3 * seq + j] = kNegInf;
  for (int64_t j = 0; j < 16; ++j) mask[5 * seq + j] = kNegInf;
  std::vector<float> y(static_cast<size_t>(seq * e));
  attention::AttentionArgs a;
  a.batch = 1, a.heads = 1, a.seq = seq, a.head_dim = d;
  a.q = {p.data(), 0, 3 * e}, a.k = {p.data() + e, 0, 3 * e}, a.v = {p.data() + 2 * e, 0, 3 * e};
  a.y = y.data(), a.y_token_stride = e, a.mask = mask.data();
  a.mask_strides[2] = seq, a.mask_strides[3] = 1;
  for (const auto& mk : gemm::available_f32_kernels()) {
    attention::attention_f32(a, nullptr, {&mk, 8});
    std::vector<double> want(y.size());
    reference_head(
        seq, d, 1.0, [&](int64_t i, int64_t c) { return p[i * 3 * e + c]; },
        [&](int64_t j, int64_t c) { return p[j * 3 * e + e + c]; },
        [&](int64_t j, int64_t c) { return p[j * 3 * e + 2 * e + c]; },
        [&](int64_t i, int64_t j) -> double { return mask[i * seq + j]; },
        [&](int64_t i, int64_t c, double v) { want[i * e + c] = v; });
    EXPECT_TRUE(std::isnan(want[3 * e]));
    expect_close(y.data(), want, 2e-5, mk.name);
    // With zero_nan_rows the fully masked row is zeros and the others are unchanged.
    attention::AttentionArgs zeroed = a;
    zeroed.zero_nan_rows = true;
    attention::attention_f32(zeroed, nullptr, {&mk, 8});
    for (int64_t c = 0; c < e; ++c) {
      EXPECT_EQ(y[3 * e + c], 0.0f) << mk.name;
      want[3 * e + c] = 0.0;
    }
    expect_close(y.data(), want, 2e-5, mk.name);
  }
}

// ---- the op, through a session ----

struct OpCase {
  int64_t batch, seq, ein, heads, d;
  Shape mask;  // empty: no mask input
  bool seq_first = false, bias = true;
};

// With `given_qkv`, ScaledDotProductAttention on Q, K and V inputs ([batch, seq, E] each, ein
// unused; with `packed`, one input [batch, seq, 3E] holding them side by side); else
// MultiHeadAttention projecting X.
void check_op(const OpCase& t, int threads, bool given_qkv = false, bool packed = false) {
  const int64_t e = t.heads * t.d;
  test::Builder b;
  b.m.opsets["ai.kiln"] = 1;
  const Shape x_shape = t.seq_first ? Shape{t.seq, t.batch, t.ein} : Shape{t.batch, t.seq, t.ein};
  const Shape qkv_shape = t.seq_first ? Shape{t.seq, t.batch, e} : Shape{t.batch, t.seq, e};
  std::vector<std::string> inputs = {"x", "w", t.bias ? "b" : ""};
  Shape packed_shape = qkv_shape;
  packed_shape[2] = 3 * e;
  if (packed) {
    inputs = {"qkv", "", ""};
    b.input("qkv", packed_shape);
  } else if (given_qkv) {
    inputs = {"q", "k", "v"};
    for (const std::string& in : inputs) b.input(in, qkv_shape);
  } else {
    b.input("x", x_shape);
    b.m.graph.initializers["w"] = b.random({t.ein, 3 * e}, -0.3f, 0.3f);
    if (t.bias) b.weight("b", {3 * e});
  }
  if (!t.mask.empty()) {
    b.input("mask", t.mask);
    inputs.push_back("mask");
  }
  ir::Node& n = b.add(given_qkv ? "ScaledDotProductAttention" : "MultiHeadAttention", inputs, {"y"},
                      {test::attr_i("num_heads", t.heads), test::attr_f("scale", 0.125f),
                       test::attr_i("seq_first", t.seq_first)});
  n.domain = "ai.kiln";
  b.output("y");
  const Tensor x = b.random(x_shape);
  const std::vector<Tensor> qkv = {b.random(qkv_shape), b.random(qkv_shape), b.random(qkv_shape)};
  const Tensor qkv_packed = b.random(packed_shape);
  Tensor mask = b.random(t.mask.empty() ? Shape{1} : t.mask, -5, 0);
  // BERT's padding value on one key. (Not on a whole row: softmax is shift-invariant, but float
  // scores near -10000 keep only ~1e-3 of their fraction, which the double reference does not.)
  if (!t.mask.empty() && t.mask.back() > 1) mask.data<float>()[1] = -10000.0f;
  std::vector<Value> feeds = {Value::of(x)};
  if (given_qkv) feeds = {Value::of(qkv[0]), Value::of(qkv[1]), Value::of(qkv[2])};
  if (packed) feeds = {Value::of(qkv_packed)};
  if (!t.mask.empty()) feeds.push_back(Value::of(mask));
  SessionOptions opts;
  opts.threads = threads;
  auto s = Session::create(std::make_shared<const ir::Model>(b.m), opts);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  auto out = (*s)->run(feeds);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  const Tensor& y = (*out)[0].tensor;
  ASSERT_EQ(y.shape(), (Shape{x_shape[0], x_shape[1], e}));

  // The projection P = X·W + B in double (or Q, K, V side by side), then each head.
  const int64_t rows = t.batch * t.seq;
  std::vector<double> p(static_cast<size_t>(rows * 3 * e));
  if (packed) {
    for (int64_t i = 0; i < rows * 3 * e; ++i) p[i] = qkv_packed.data<float>()[i];
  } else if (given_qkv) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < 3 * e; ++c) p[r * 3 * e + c] = qkv[c / e].data<float>()[r * e + c % e];
  } else {
    const float* xd = x.data<float>();
    const float* w = b.m.graph.initializers["w"].data<float>();
    const float* bias = t.bias ? b.m.graph.initializers["b"].data<float>() : nullptr;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < 3 * e; ++c) {
        double acc = bias ? bias[c] : 0.0;
        for (int64_t i = 0; i < t.ein; ++i) acc += double(xd[r * t.ein + i]) * w[i * 3 * e + c];
        p[r * 3 * e + c] = acc;
      }
  }
  const Shape scores = {t.batch, t.heads, t.seq, t.seq};
  const auto ms = t.mask.empty() ? std::vector<int64_t>(4, 0) : strides_into(t.mask, scores);
  auto row = [&](int64_t bi, int64_t tok) {
    return t.seq_first ? tok * t.batch + bi : bi * t.seq + tok;
  };
  std::vector<double> want(static_cast<size_t>(y.numel()));
  for (int64_t bi = 0; bi < t.batch; ++bi)
    for (int64_t h = 0; h < t.heads; ++h) {
      auto at = [&](int64_t part, int64_t tok, int64_t c) {
        return p[row(bi, tok) * 3 * e + part * e + h * t.d + c];
      };
      reference_head(
          t.seq, t.d, 0.125, [&](int64_t i, int64_t c) { return at(0, i, c); },
          [&](int64_t j, int64_t c) { return at(1, j, c); },
          [&](int64_t j, int64_t c) { return at(2, j, c); },
          [&](int64_t i, int64_t j) -> double {
            return t.mask.empty()
                       ? 0.0
                       : mask.data<float>()[bi * ms[0] + h * ms[1] + i * ms[2] + j * ms[3]];
          },
          [&](int64_t i, int64_t c, double v) { want[row(bi, i) * e + h * t.d + c] = v; });
    }
  expect_close(y.data<float>(), want, 3e-5,
               "batch " + std::to_string(t.batch) + " seq " + std::to_string(t.seq) + " heads " +
                   std::to_string(t.heads) + " d " + std::to_string(t.d) + " mask " +
                   shape_str(t.mask) + (t.seq_first ? " seq_first" : "") + " threads " +
                   std::to_string(threads));
}

TEST(MultiHeadAttentionKernel, MatchesPlainLoops) {
  const std::vector<OpCase> cases = {
      {1, 1, 16, 2, 8, {}},
      {1, 7, 12, 3, 5, {}, false, false},  // odd head_dim, no bias
      {2, 33, 24, 2, 64, {2, 1, 1, 33}},   // BERT's padding mask
      {2, 19, 20, 4, 3, {2, 4, 19, 19}},   // a full mask
      {2, 21, 16, 2, 8, {21, 21}},         // [seq, seq]: the same for every batch and head
      {1, 9, 16, 2, 8, {1}},               // a scalar
      {2, 10, 16, 2, 8, {1, 2, 1, 10}},    // per head, per key
      {2, 10, 16, 2, 8, {2, 1, 10, 1}},    // per query row
      {3, 13, 18, 3, 6, {}, true},         // torchvision's sequence-first layout
      {2, 11, 16, 2, 8, {11, 11}, true},
      {1, 128, 64, 1, 64, {1, 1, 1, 128}},
      {1, 512, 32, 2, 64, {1, 1, 1, 512}},
  };
  for (const auto& t : cases)
    for (int threads : {1, 2}) check_op(t, threads);
}

TEST(ScaledDotProductAttentionKernel, MatchesPlainLoops) {
  const std::vector<OpCase> cases = {
      {1, 1, 0, 2, 8, {}},
      {1, 7, 0, 3, 5, {}},                // odd head_dim
      {2, 33, 0, 2, 64, {2, 1, 1, 33}},   // BERT's padding mask
      {2, 19, 0, 4, 3, {2, 4, 19, 19}},   // a full mask
      {3, 13, 0, 3, 6, {}, true},         // sequence first
      {2, 11, 0, 2, 8, {11, 11}, true},
      {1, 128, 0, 12, 64, {1, 1, 1, 128}},  // bert_base's
  };
  for (const auto& t : cases)
    for (int threads : {1, 2}) {
      check_op(t, threads, true);
      check_op(t, threads, true, true);  // Q, K and V packed in one input
    }
}

TEST(ScaledDotProductAttentionKernel, RejectsMismatchedOperands) {
  test::Builder b;
  b.m.opsets["ai.kiln"] = 1;
  b.input("q", {1, 4, 8});
  b.input("k", {1, 5, 8});
  b.input("v", {1, 5, 8});
  ir::Node& n = b.add("ScaledDotProductAttention", {"q", "k", "v"}, {"y"}, {test::attr_i("num_heads", 2)});
  n.domain = "ai.kiln";
  b.output("y");
  auto s = Session::create(std::make_shared<const ir::Model>(b.m));
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  auto out = (*s)->run({Value::of(b.random({1, 4, 8})), Value::of(b.random({1, 5, 8})), Value::of(b.random({1, 5, 8}))});
  ASSERT_FALSE(out.is_ok());
  EXPECT_NE(out.status().message().find("one shape"), std::string::npos) << out.status().message();
}

TEST(MultiHeadAttentionKernel, RejectsABadMask) {
  test::Builder b;
  b.m.opsets["ai.kiln"] = 1;
  b.input("x", {1, 4, 8});
  b.input("mask", {1, 1, 4, 5});
  b.weight("w", {8, 24});
  ir::Node& n =
      b.add("MultiHeadAttention", {"x", "w", "", "mask"}, {"y"}, {test::attr_i("num_heads", 2)});
  n.domain = "ai.kiln";
  b.output("y");
  auto s = Session::create(std::make_shared<const ir::Model>(b.m));
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  auto out = (*s)->run({Value::of(b.random({1, 4, 8})), Value::of(b.random({1, 1, 4, 5}))});
  ASSERT_FALSE(out.is_ok());
  EXPECT_NE(out.status().message().find("mask"), std::string::npos) << out.status().message();
}

}  // namespace
}  // namespace kiln
