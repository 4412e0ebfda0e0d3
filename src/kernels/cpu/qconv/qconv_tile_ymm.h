// The 8-bit conv's ymm tile (qconv.h), which qconv_avx2.cc and qconv_avxvnni.cc instantiate,
// each compiled for its ISA, with a step of ymm_dot_steps.h multiplying one broadcast step of a
// pixel's input channels by one weight vector of 8 filters into their int32 sums.
// 6 output pixels x one block of 16 filters (two ymm), 12 accumulators. The store requantizes.
// The same code serves kAvx2 (pairs of 16-bit channels), kAvx2Bytes and kAvxVnni (quads of u8);
// its store (store_ymm_sums, which kWinogradAvx2 shares) uses AVX2 alone.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "kernels/cpu/qconv/qconv_activation.h"
#include "kernels/cpu/qconv/qconv_driver.h"
#include "kernels/cpu/ymm_dot_steps.h"

namespace kiln::qconv {

// A block's 16 filters lie in the ymm tiles' weight vectors as PackedWeights packs them:
// filters 0-3 and 8-11 in the first, 4-7 and 12-15 in the second, so that one vpackssdw of the
// two sums gives the 16 filters in order (per 128-bit lane: 0-7 | 8-15). load_in_tile_order
// reads 16 int32 (or float bits) values, past `count` 0, into that order.
inline void load_in_tile_order(const int32_t* p, int64_t count, __m256i (&v)[2]) {
  const __m256i a = _mm256_maskload_epi32(p, first_lanes(count)), b = _mm256_maskload_epi32(p + 8, first_lanes(count - 8));
  v[0] = _mm256_permute2x128_si256(a, b, 0x20), v[1] = _mm256_permute2x128_si256(a, b, 0x31);
}

// The first `count` (at most 16) bytes at p, the rest 0; no read past them.
inline __m128i load_first_bytes(const char* p, int64_t count) {
  if (count == 16) return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (count == 8) return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  alignas(16) char tmp[16] = {};
  std::memcpy(tmp, p, static_cast<size_t>(count));
  return _mm_load_si128(reinterpret_cast<const __m128i*>(tmp));
}

// Requantize::add on 8 lanes: the conv's float values f (scaled) and the residual's codes b give
// c - cz, which the store's packs finish as they finish a code (cz added, saturating; C's range
// clamped). Where v could pass int32 (clamp_v), it is clamped in float first, to one step past
// C's codes either way, so that cvtps rounds it as nearbyint does and never overflows. Its
// constants are broadcast once a store (the stores through char pointers would make the compiler
// reload them for every vector).
struct ResidualAdd {
  // by_fma (QLinearBinaryMethod's): the conv's codes a in float (f rounded as cvtps rounds, its
  // zero point, its clamp), then the two multiply-adds.
  bool by_fma;
  __m256 zero_point, lo, hi, ra, rb, k;
  // Else the steps, from the conv's codes less its zero point, q (cvtps of f clamped above).
  __m256 q_hi;
  __m256i a_lo, a_shift, a_hi, bz;
  __m256 as, bs, c_reciprocal, cs, v_lo, v_hi;
  bool shift, clamp_v;
  int32_t cz;
  bool reciprocal_exact, s8;

  explicit ResidualAdd(const Requantize& rq) {
    const QLinearBinaryParams& p = rq.add->p;
    const QLinearBinaryMethod& m = rq.add->method;
    by_fma = m.by_fma;
    zero_point = _mm256_set1_ps(static_cast<float>(rq.zero_point));
    lo = _mm256_set1_ps(static_cast<float>(rq.lo)), hi = _mm256_set1_ps(static_cast<float>(rq.hi));
    ra = _mm256_set1_ps(m.ra), rb = _mm256_set1_ps(m.rb), k = _mm256_set1_ps(m.k);
    q_hi = _mm256_set1_ps(static_cast<float>(rq.hi - rq.zero_point));
    // a - az in int32 (a = q + zero point, clamped to the codes), then as a float: exact, as
    // float(a) - az is for integer codes; likewise b - bz.
    const int32_t az = static_cast<int32_t>(p.az);
    a_lo = _mm256_set1_epi32(rq.lo - rq.zero_point), a_shift = _mm256_set1_epi32(rq.zero_point - az);
    a_hi = _mm256_set1_epi32(rq.hi - az), bz = _mm256_set1_epi32(static_cast<int32_t>(p.bz));
    shift = rq.zero_point != az;
    as = _mm256_set1_ps(p.as), bs = _mm256_set1_ps(p.bs);
    c_reciprocal = _mm256_set1_ps(1.0f / p.cs), cs = _mm256_set1_ps(p.cs);
    v_lo = _mm256_set1_ps(p.lo - p.cz - 1), v_hi = _mm256_set1_ps(p.hi - p.cz + 1);
    // The clamp of v matters only where cvtps could overflow; below 2^30 the store's saturating
    // packs clamp it the same (QLinearAdd's rows take the same bound).
    clamp_v = !qlinear_binary_fits_int32(p);
    cz = static_cast<int32_t>(p.cz);
    reciprocal_exact = m.reciprocal, s8 = rq.output == Output::kS8;
  }

  __m256i operator()(__m256 f, __m256i b) const {
    if (by_fma) {
      const __m256 rounded = _mm256_round_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m256 a = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(rounded, zero_point), lo), hi);
      return _mm256_cvtps_epi32(_mm256_fmadd_ps(a, ra, _mm256_fmadd_ps(_mm256_cvtepi32_ps(b), rb, k)));
    }
    const __m256i q = _mm256_cvtps_epi32(_mm256_min_ps(f, q_hi));
    __m256i a = _mm256_max_epi32(q, a_lo);
    if (shift) a = _mm256_add_epi32(a, a_shift);
    const __m256 fa = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_min_epi32(a, a_hi)), as);
    const __m256 fb = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(b, bz)), bs);
    const __m256 sum = _mm256_add_ps(fa, fb);
    __m256 v = _mm256_mul_ps(sum, c_reciprocal);
    if (!reciprocal_exact) {  // the division where the product may round the other way
      const __m256 off = _mm256_sub_ps(v, _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      const __m256 near_half =
          _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), off), _mm256_set1_ps(0.5f - 0x1p-11f), _CMP_GE_OQ);
      if (_mm256_movemask_ps(near_half)) v = _mm256_div_ps(sum, cs);
    }
    return _mm256_cvtps_epi32(clamp_v ? _mm256_min_ps(_mm256_max_ps(v, v_lo), v_hi) : v);
  }

  // The 16 codes at `residual` (`count` of them) widened, in the ymm tiles' order.
  void load(const char* residual, int64_t count, __m256i (&b)[2]) const {
    const __m128i bytes = load_first_bytes(residual, count), high = _mm_srli_si128(bytes, 8);
    const __m256i b_0_7 = s8 ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes);
    const __m256i b_8_15 = s8 ? _mm256_cvtepi8_epi32(high) : _mm256_cvtepu8_epi32(high);
    b[0] = _mm256_permute2x128_si256(b_0_7, b_8_15, 0x20), b[1] = _mm256_permute2x128_si256(b_0_7, b_8_15, 0x31);
  }
};

// One pixel's float values of `count` filters in the tiles' order, f0 and f1 (the sums scaled,
// activated where rq has an activation), to `out` (the pixel's first filter in Y). 8-bit codes as
// the VNNI tiles store them: the saturating packs narrow and clamp below (a sum too negative for
// cvtps' int32 gives INT_MIN, which saturates to the lowest code too), the zero point is added to
// the 16-bit values, saturating; the upper clamp stays in float, where a huge positive sum would
// otherwise wrap, only where a scale reaches 0.5 (kClampHigh: Requantize::needs_float_clamp).
// With `add` (rq.add's), `residual` is the pixel's first filter in R, and the codes stored are
// the add's.
template <bool kClampHigh>
[[gnu::always_inline]] inline void store_ymm_floats(const Requantize& rq, __m256 f0, __m256 f1, char* out,
                                                    int64_t count, const ResidualAdd* add, const char* residual) {
  if (rq.output == Output::kFloat) {
    float* o = reinterpret_cast<float*>(out);
    _mm256_maskstore_ps(o, first_lanes(count), _mm256_permute2f128_ps(f0, f1, 0x20));
    _mm256_maskstore_ps(o + 8, first_lanes(count - 8), _mm256_permute2f128_ps(f0, f1, 0x31));
    return;
  }
  __m256i q0, q1;
  if (add) {
    __m256i b[2];
    add->load(residual, count, b);
    q0 = (*add)(f0, b[0]), q1 = (*add)(f1, b[1]);
  } else {
    const __m256 hi = _mm256_set1_ps(static_cast<float>(rq.hi - rq.zero_point));
    q0 = _mm256_cvtps_epi32(kClampHigh ? _mm256_min_ps(f0, hi) : f0);
    q1 = _mm256_cvtps_epi32(kClampHigh ? _mm256_min_ps(f1, hi) : f1);
  }
  const int16_t zero_point = static_cast<int16_t>(add ? add->cz : rq.zero_point);
  const __m256i words = _mm256_adds_epi16(_mm256_packs_epi32(q0, q1), _mm256_set1_epi16(zero_point));
  const __m256i bytes = rq.output == Output::kS8 ? _mm256_packs_epi16(words, words) : _mm256_packus_epi16(words, words);
  store_first_bytes(out, _mm256_castsi256_si128(_mm256_permute4x64_epi64(bytes, _MM_SHUFFLE(3, 1, 2, 0))), count, 16);
}

// store_ymm_floats of one pixel's sums s0, s1 (the bias in them): scaled, and with rq.activation
// activated first (kActivated, rq.activated(), a template parameter: a store that might activate
// cost AVX2's int8 mobilenet_v2 12 % and resnet50 3 % where it never did; store_ymm_sums picks it).
template <bool kActivated, bool kClampHigh>
[[gnu::always_inline]] inline void store_ymm_sums_as(const Requantize& rq, const __m256 (&scale)[2], __m256i s0,
                                                     __m256i s1, char* out, int64_t count, const ResidualAdd* add,
                                                     const char* residual) {
  __m256 f[2] = {_mm256_mul_ps(_mm256_cvtepi32_ps(s0), scale[0]), _mm256_mul_ps(_mm256_cvtepi32_ps(s1), scale[1])};
  if constexpr (kActivated) activate<2>(rq, f);
  store_ymm_floats<kClampHigh>(rq, f[0], f[1], out, count, add, residual);
}

// rq.activation over `count` vectors of float values, in a loop of its own (a tile's activated
// store runs it over all its pixels at once, between scaling them and storing their codes: the
// vectors independent and the activation's constants in registers; inside each pixel's store,
// with the tile's 12 sums live in AVX2's 16 registers, efficientnet's SiLU ran 16 cycles a
// vector of 8). Static: each file that includes it compiles its own.
[[gnu::noinline]] static void activate_floats(const Requantize& rq, __m256* f, int count) {
  activate_vectors(rq, f, count);
}

inline void store_ymm_sums(const Requantize& rq, bool clamp_high, const __m256 (&scale)[2], __m256i s0, __m256i s1,
                           char* out, int64_t count, const ResidualAdd* add = nullptr, const char* residual = nullptr) {
  if (rq.activated())
    store_ymm_sums_as<true, true>(rq, scale, s0, s1, out, count, add, residual);
  else if (clamp_high)
    store_ymm_sums_as<false, true>(rq, scale, s0, s1, out, count, add, residual);
  else
    store_ymm_sums_as<false, false>(rq, scale, s0, s1, out, count, add, residual);
}

// The tiles' inner loop: `steps` steps, each one 4-byte broadcast of every row's input (p[i] + 4
// a step) against two weight vectors of 16 filters (64 bytes from w, which it advances), the
// products added into acc by Step. Inlined, so that acc stays in registers.
template <class Step, int kRows>
__attribute__((always_inline)) inline void add_steps(const char* const (&p)[kRows], int64_t steps, const int8_t*& w,
                                                     __m256i (&acc)[kRows][2]) {
  for (int64_t q = 0; q < steps; ++q, w += 64) {
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32));
#pragma GCC unroll 6
    for (int i = 0; i < kRows; ++i) {
      const __m256i a = _mm256_set1_epi32(load_u32(p[i] + q * 4));
      acc[i][0] = Step::add(acc[i][0], a, w0);
      acc[i][1] = Step::add(acc[i][1], a, w1);
    }
  }
}

// add_steps on kAvx2Bytes' paired steps (PackedWeights::paired_steps): a step two quads of
// every row's input, at the step's two offsets (`off`, which it advances), against their weight
// vectors (128 bytes from w); the two vpmaddubsw results added in 16 bits, which the packing
// keeps exact, then one vpmaddwd against ones. Row by row, the weights loaded again for each
// row: with all four held in registers, or each row's inputs broadcast once for both halves,
// GCC 12 kept most accumulators on the stack.
template <int kRows>
__attribute__((always_inline)) inline void add_step_pairs(const char* const (&p)[kRows], int64_t steps,
                                                          const int8_t*& w, const int32_t*& off,
                                                          __m256i (&acc)[kRows][2]) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t q = 0; q < steps; ++q, w += 128, off += 2) {
    const int64_t a = off[0], b = off[1];
#pragma GCC unroll 6
    for (int i = 0; i < kRows; ++i) {
      const __m256i xa = _mm256_set1_epi32(load_u32(p[i] + a)), xb = _mm256_set1_epi32(load_u32(p[i] + b));
      const int8_t* wi = w;
      __asm__("" : "+r"(wi));  // (keeps the weights' loads in this row)
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i wa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wi + 32 * h));
        const __m256i wb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wi + 64 + 32 * h));
        const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(xa, wa), _mm256_maddubs_epi16(xb, wb));
        acc[i][h] = _mm256_add_epi32(acc[i][h], _mm256_madd_epi16(pairs, ones));
      }
    }
  }
}

// The ymm tiles' stores, as the VNNI tile's (qconv_avx512vnni.cc): each holds the constants of
// a run of tiles, and the tiles are instantiated for each, picked once a run, so that the sums
// stay in registers where the store is short. YmmCodeStore is store_ymm_sums_as with its
// choices fixed; YmmFloatStore the floats.
// What both stores take of the block from filter m0: its real filters (count) and their scales,
// in the tiles' order, and the sums scaled by them.
struct YmmScales {
  int64_t count;
  __m256 scale[2];

  YmmScales(const TilePlan& plan, int64_t m0) : count(std::min<int64_t>(16, plan.g.filters - m0)) {
    __m256i bits[2];
    load_in_tile_order(reinterpret_cast<const int32_t*>(plan.rq.scale.data() + m0), count, bits);
    scale[0] = _mm256_castsi256_ps(bits[0]), scale[1] = _mm256_castsi256_ps(bits[1]);
  }

  [[gnu::always_inline]] void scaled(__m256i s0, __m256i s1, __m256* f) const {
    f[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(s0), scale[0]), f[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(s1), scale[1]);
  }
};

template <bool kActivated, bool kResidual, bool kClampHigh>
struct YmmCodeStore : YmmScales {
  static constexpr bool kShort = !kResidual, kTwoPass = kActivated;
  const Requantize& rq;
  char* y;
  const char* residual;
  std::optional<ResidualAdd> add;

  YmmCodeStore(const TilePlan& plan, int64_t m0)
      : YmmScales(plan, m0), rq(plan.rq), y(static_cast<char*>(plan.y) + m0),
        residual(kResidual ? static_cast<const char*>(plan.residual) + m0 : nullptr) {
    if constexpr (kResidual) add.emplace(rq);
  }

  [[gnu::always_inline]] void operator()(__m256i s0, __m256i s1, int64_t at) const {
    store_ymm_sums_as<kActivated, kClampHigh>(rq, scale, s0, s1, y + at, count, kResidual ? &*add : nullptr,
                                              kResidual ? residual + at : nullptr);
  }

  // The activated store in two passes (YmmTiles::tiles): the sums' float values (scaled), then,
  // once the tile's are all activated (activate_floats), their codes.
  [[gnu::always_inline]] void activated(__m256 f0, __m256 f1, int64_t at) const {
    store_ymm_floats<kClampHigh>(rq, f0, f1, y + at, count, kResidual ? &*add : nullptr,
                                 kResidual ? residual + at : nullptr);
  }

  void prefetch(int64_t at) const {
    if constexpr (kResidual) _mm_prefetch(residual + at, _MM_HINT_T0);
  }
};

struct YmmFloatStore : YmmScales {
  static constexpr bool kShort = true, kTwoPass = false;
  float* y;

  YmmFloatStore(const TilePlan& plan, int64_t m0) : YmmScales(plan, m0), y(static_cast<float*>(plan.y) + m0) {}

  [[gnu::always_inline]] void operator()(__m256i s0, __m256i s1, int64_t at) const {
    __m256 f[2];
    scaled(s0, s1, f);
    _mm256_maskstore_ps(y + at, first_lanes(count), _mm256_permute2f128_ps(f[0], f[1], 0x20));
    _mm256_maskstore_ps(y + at + 8, first_lanes(count - 8), _mm256_permute2f128_ps(f[0], f[1], 0x31));
  }

  void prefetch(int64_t) const {}
};

// kPairs: on kAvx2Bytes' paired steps (add_step_pairs), 5 pixels a tile (10 accumulators: the
// pairs' inputs and products take more registers).
template <class Step, bool kPairs = false>
struct YmmTiles {
  static constexpr int kPixels = kPairs ? 5 : 6, kMaxBlocks = 1;

  // Pixels [p_begin, p_end), kPixels a tile, x block b0, stored by Store. The sums start from the bias.
  template <class Store>
  static void tiles(const TilePlan& plan, int64_t p_begin, int64_t p_end, int64_t b0) {
    const Store store(plan, b0 * 16);
    const int64_t filters = plan.g.filters, steps = kPairs ? plan.w.block_paired_steps(b0) : plan.w.steps();
    const int64_t skipped = kPairs ? plan.w.paired_steps() - steps : 0;  // a tap's zero steps past the block's
    __m256i bias[2];
    load_in_tile_order(plan.rq.bias.data() + b0 * 16, std::min<int64_t>(16, filters - b0 * 16), bias);
    for (int64_t p0 = p_begin; p0 < p_end; p0 += kPixels) {
      const int rows = static_cast<int>(std::min<int64_t>(kPixels, p_end - p0));
      const char* px[kPixels];
      windows(plan, p0, rows, px, kPixels);
      __m256i acc[kPixels][2];
      for (auto& row : acc) row[0] = bias[0], row[1] = bias[1];
      for (int i = 0; i < rows; ++i) store.prefetch((p0 + i) * filters);
      const int8_t* w = plan.w.block(b0);
      const int32_t* step_offsets = kPairs ? plan.w.step_offsets(b0) : nullptr;
      for (const int64_t off : plan.tap_offsets) {
        const char* p[kPixels];
        for (int i = 0; i < kPixels; ++i) p[i] = px[i] + off;
        if constexpr (kPairs) {
          add_step_pairs(p, steps, w, step_offsets, acc);
          w += skipped * 128, step_offsets += skipped * 2;
        } else {
          add_steps<Step>(p, steps, w, acc);
        }
      }
      // As the VNNI tile's: short stores to kPixels, unrolled, so that acc's indices are constants.
      if constexpr (Store::kTwoPass) {
        __m256 f[kPixels][2];
        for (int i = 0; i < rows; ++i) store.scaled(acc[i][0], acc[i][1], f[i]);
        activate_floats(plan.rq, &f[0][0], 2 * rows);
        for (int i = 0; i < rows; ++i) store.activated(f[i][0], f[i][1], (p0 + i) * filters);
      } else if constexpr (Store::kShort) {
#pragma GCC unroll 6
        for (int i = 0; i < kPixels; ++i)
          if (i < rows) store(acc[i][0], acc[i][1], (p0 + i) * filters);
      } else {
        for (int i = 0; i < rows; ++i) store(acc[i][0], acc[i][1], (p0 + i) * filters);
      }
    }
  }

  // (The driver's Prefetch is not taken: fetching the next group's weights on the ymm tiles ran
  // resnet50 and efficientnet_b0 1-2 % slower at AVX2, their compute slower than the fetch.)
  static void run(const TilePlan& plan, int64_t p_begin, int64_t p_end, int64_t b0, int, Prefetch) {
    const Requantize& rq = plan.rq;
    if (rq.output == Output::kFloat && !rq.activated()) return tiles<YmmFloatStore>(plan, p_begin, p_end, b0);
    if (rq.activated())  // (its values clamped: needs_float_clamp; floats stored as floats)
      return plan.residual ? tiles<YmmCodeStore<true, true, true>>(plan, p_begin, p_end, b0)
                           : tiles<YmmCodeStore<true, false, true>>(plan, p_begin, p_end, b0);
    if (plan.residual)  // (its clamp changes nothing: the add clamps the conv's codes again)
      return tiles<YmmCodeStore<false, true, true>>(plan, p_begin, p_end, b0);
    return plan.clamp_high ? tiles<YmmCodeStore<false, false, true>>(plan, p_begin, p_end, b0)
                           : tiles<YmmCodeStore<false, false, false>>(plan, p_begin, p_end, b0);
  }
};

}  // namespace kiln::qconv
