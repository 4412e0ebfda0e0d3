// The 8-bit conv's tile on AVX-512 VNNI (qconv.h): 6 output pixels x up to 4 blocks of 16
// filters, 24 zmm accumulators. Each quad of input channels of each tap is one 4-byte broadcast a
// pixel and one 64-byte load a block, then vpdpbusd adds the 4 u8 x s8 products of every lane
// into its int32 sum, exactly. The store requantizes (qconv.h, Requantize). A group's weights
// (at most taps x quads x 256 bytes: 288 KiB for a 3x3 conv of 512 channels) stay in L2 while
// its pixels stream by (qconv_driver.h). This file alone is compiled with -mavx512vnni; it is
// reached only when best_tile() is kAvx512Vnni.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <type_traits>

// GCC 12 warns of the masked loads' undefined pass-through lanes (maskz zeroes them), and of the
// unmasked intrinsics' undefined pass-through operands (the activations' too).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/qconv/qconv_activation.h"
#include "kernels/cpu/qconv/qconv_driver.h"

namespace kiln::qconv {
namespace {

// Requantize::add on 16 lanes, as qconv_tile_ymm.h's ResidualAdd does on 8: the conv's float
// values f (scaled) and the residual's codes b give c - cz, clamped in float to one step past
// C's codes where it could pass int32, which the packs finish. Its constants are broadcast once a
// store (the stores through char pointers would make the compiler reload them for every vector),
// each way's alone in its struct (a store takes one way).
//
// FusedAdd (QLinearBinaryMethod::by_fma): the conv's codes a in float (f rounded as cvtps rounds,
// its zero point, its clamp), then the two multiply-adds.
struct FusedAdd {
  __m512 zero_point, lo, hi, ra, rb, k;

  explicit FusedAdd(const Requantize& rq) {
    const QLinearBinaryMethod& m = rq.add->method;
    zero_point = _mm512_set1_ps(static_cast<float>(rq.zero_point));
    lo = _mm512_set1_ps(static_cast<float>(rq.lo)), hi = _mm512_set1_ps(static_cast<float>(rq.hi));
    ra = _mm512_set1_ps(m.ra), rb = _mm512_set1_ps(m.rb), k = _mm512_set1_ps(m.k);
  }

  __m512i operator()(__m512 f, __m512i b) const {
    const __m512 rounded = _mm512_roundscale_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 a = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(rounded, zero_point), lo), hi);
    return _mm512_cvtps_epi32(_mm512_fmadd_ps(a, ra, _mm512_fmadd_ps(_mm512_cvtepi32_ps(b), rb, k)));
  }
};

// StepsAdd: QLinearAdd's steps from the conv's codes less its zero point, q (cvtps of f clamped
// above).
struct StepsAdd {
  __m512 q_hi;
  __m512i a_lo, a_shift, a_hi, bz;
  __m512 as, bs, c_reciprocal, cs, v_lo, v_hi;
  bool shift, clamp_v;
  bool reciprocal_exact;

  explicit StepsAdd(const Requantize& rq) {
    const QLinearBinaryParams& p = rq.add->p;
    q_hi = _mm512_set1_ps(static_cast<float>(rq.hi - rq.zero_point));
    // a - az in int32 (a = q + zero point, clamped to the codes), then as a float: exact, as
    // float(a) - az is for integer codes; likewise b - bz.
    const int32_t az = static_cast<int32_t>(p.az);
    a_lo = _mm512_set1_epi32(rq.lo - rq.zero_point), a_shift = _mm512_set1_epi32(rq.zero_point - az);
    a_hi = _mm512_set1_epi32(rq.hi - az), bz = _mm512_set1_epi32(static_cast<int32_t>(p.bz));
    shift = rq.zero_point != az;
    as = _mm512_set1_ps(p.as), bs = _mm512_set1_ps(p.bs);
    c_reciprocal = _mm512_set1_ps(1.0f / p.cs), cs = _mm512_set1_ps(p.cs);
    v_lo = _mm512_set1_ps(p.lo - p.cz - 1), v_hi = _mm512_set1_ps(p.hi - p.cz + 1);
    // The clamp of v matters only where cvtps could overflow; below 2^30 the store's saturating
    // packs clamp it the same (QLinearAdd's rows take the same bound).
    clamp_v = !qlinear_binary_fits_int32(p);
    reciprocal_exact = rq.add->method.reciprocal;
  }

  __m512i operator()(__m512 f, __m512i b) const {
    const __m512i q = _mm512_cvtps_epi32(_mm512_min_ps(f, q_hi));
    __m512i a = _mm512_max_epi32(q, a_lo);
    if (shift) a = _mm512_add_epi32(a, a_shift);
    const __m512 fa = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_min_epi32(a, a_hi)), as);
    const __m512 fb = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(b, bz)), bs);
    const __m512 sum = _mm512_add_ps(fa, fb);
    __m512 v = _mm512_mul_ps(sum, c_reciprocal);
    if (!reciprocal_exact) {  // the division where the product may round the other way
      const __m512 off = _mm512_sub_ps(v, _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      if (_mm512_cmp_ps_mask(_mm512_abs_ps(off), _mm512_set1_ps(0.5f - 0x1p-11f), _CMP_GE_OQ))
        v = _mm512_div_ps(sum, cs);
    }
    return _mm512_cvtps_epi32(clamp_v ? _mm512_min_ps(_mm512_max_ps(v, v_lo), v_hi) : v);
  }
};

// What both stores (and the tile's bias) take of B blocks from filter m0: each block's real
// filters (lanes_of) and their scales.
template <int B>
struct BlockScales {
  __mmask16 lanes_of[B];
  __m512 scale[B];

  BlockScales(const TilePlan& plan, int64_t m0) {
    for (int b = 0; b < B; ++b) {
      lanes_of[b] = static_cast<__mmask16>((1u << std::clamp<int64_t>(plan.g.filters - m0 - b * 16, 0, 16)) - 1);
      scale[b] = _mm512_maskz_loadu_ps(lanes_of[b], plan.rq.scale.data() + m0 + b * 16);
    }
  }
};

// A code store's residual add (CodeStore's kAdd): none, FusedAdd, StepsAdd.
enum class Residual { kNone, kByFma, kBySteps };

// A tile's store: its sums (the bias in them) to 8-bit codes (CodeStore) or floats (FloatStore),
// a pixel's B blocks at a time. Each holds the constants of a run of tiles, and the tiles are
// instantiated for each store (VnniTiles::run picks it once a run), so that the sums stay in
// registers: a store that might add a residual or activate, decided tile by tile, kept every
// tile's 24 sums in memory (half of a 16 -> 64 1x1 conv's time went to that and to reloading
// the constants).
//
// 8-bit codes of up to four blocks (64 filters) a pixel leave as one store: the saturating packs
// narrow them (blocks past B packed as zeros, bytes past the filters masked off) and do the lower
// clamp (a sum too negative for cvtps' int32 gives INT_MIN, which saturates to the lowest code
// too); the zero point is added to the 16-bit values, saturating, which clamps the same as adding
// it to the int32 ones first. The upper clamp stays in float, where a huge positive sum would
// otherwise wrap: only where a scale reaches 0.5 or an activation ran (kClampHigh:
// Requantize::needs_float_clamp; the min where not needed cost a 16 -> 96 1x1 conv 8 %).
// With a residual (kAdd, rq.add), the codes stored are the residual add's (FusedAdd or StepsAdd);
// with kActivated (rq.activation), the float values go through it first.
template <int B, bool kActivated, Residual kAdd, bool kClampHigh>
struct CodeStore : BlockScales<B> {
  using BlockScales<B>::lanes_of, BlockScales<B>::scale;
  static constexpr bool kResidual = kAdd != Residual::kNone;
  static constexpr bool kShort = kAdd != Residual::kBySteps || B <= 2;
  const Requantize& rq;
  int8_t* y;
  const char* residual;
  using Add = std::conditional_t<kAdd == Residual::kByFma, FusedAdd, StepsAdd>;
  std::optional<Add> add;
  __m512 hi;
  __m512i zp;
  __mmask64 mask;
  bool s8;

  CodeStore(const TilePlan& plan, int64_t m0)
      : BlockScales<B>(plan, m0),
        rq(plan.rq),
        y(static_cast<int8_t*>(plan.y) + m0),
        residual(kResidual ? static_cast<const char*>(plan.residual) + m0 : nullptr) {
    const int64_t count = std::min<int64_t>(B * 16, plan.g.filters - m0);
    if constexpr (kResidual) add.emplace(rq);
    hi = _mm512_set1_ps(static_cast<float>(rq.hi - rq.zero_point));
    zp = _mm512_set1_epi16(static_cast<int16_t>(kResidual ? static_cast<int32_t>(rq.add->p.cz) : rq.zero_point));
    mask = count >= 64 ? ~__mmask64{0} : (__mmask64{1} << count) - 1;
    s8 = rq.output == Output::kS8;
  }

  // One pixel's sums, to Y at `at` (its first filter's offset less m0).
  [[gnu::always_inline]] void operator()(const __m512i (&sums)[B], int64_t at) const {
    __m512 f[B];
    for (int b = 0; b < B; ++b) f[b] = _mm512_mul_ps(_mm512_cvtepi32_ps(sums[b]), scale[b]);
    if constexpr (kActivated) activate<B>(rq, f);
    __m512i q[4];
    for (int b = 0; b < 4; ++b) {
      if (b >= B) {
        q[b] = _mm512_setzero_si512();
        continue;
      }
      if constexpr (kResidual) {
        const __m128i r = _mm_maskz_loadu_epi8(lanes_of[b], residual + at + b * 16);
        const __m512i rb = s8 ? _mm512_cvtepi8_epi32(r) : _mm512_cvtepu8_epi32(r);
        q[b] = (*add)(f[b], rb);
      } else {
        q[b] = _mm512_cvtps_epi32(kClampHigh ? _mm512_min_ps(f[b], hi) : f[b]);
      }
    }
    const __m512i w01 = _mm512_adds_epi16(_mm512_packs_epi32(q[0], q[1]), zp);
    const __m512i w23 = _mm512_adds_epi16(_mm512_packs_epi32(q[2], q[3]), zp);
    const __m512i bytes = s8 ? _mm512_packs_epi16(w01, w23) : _mm512_packus_epi16(w01, w23);
    // Dword d of the packed vector holds block d % 4's channels 4 (d / 4) .. 4 (d / 4) + 3.
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_mask_storeu_epi8(y + at, mask, _mm512_permutexvar_epi32(order, bytes));
  }

  // The residual codes of the pixel at `at`, on their way while its sums run.
  void prefetch(int64_t at) const {
    if constexpr (kResidual) _mm_prefetch(residual + at, _MM_HINT_T0);
  }
};

template <int B>
struct FloatStore : BlockScales<B> {
  using BlockScales<B>::lanes_of, BlockScales<B>::scale;
  static constexpr bool kShort = true;
  float* y;

  FloatStore(const TilePlan& plan, int64_t m0) : BlockScales<B>(plan, m0), y(static_cast<float*>(plan.y) + m0) {}

  [[gnu::always_inline]] void operator()(const __m512i (&sums)[B], int64_t at) const {
    for (int b = 0; b < B; ++b)
      _mm512_mask_storeu_ps(y + at + b * 16, lanes_of[b], _mm512_mul_ps(_mm512_cvtepi32_ps(sums[b]), scale[b]));
  }

  void prefetch(int64_t) const {}
};

struct VnniTiles {
  static constexpr int kPixels = 6, kMaxBlocks = 4;

  // Pixels [p_begin, p_end), 6 a tile, x blocks [b0, b0 + B), stored by Store; with kPrefetch,
  // fetching `next` on the way (Prefetch).
  template <int B, class Store, bool kPrefetch = false>
  static void tiles(const TilePlan& plan, int64_t p_begin, int64_t p_end, int64_t b0, Prefetch next = {}) {
    const Store store(plan, b0 * 16);
    const int64_t filters = plan.g.filters, quads = plan.w.steps(), wstride = plan.w.block_bytes();
    const __mmask16 (&lanes_of)[B] = store.lanes_of;
    for (int64_t p0 = p_begin; p0 < p_end; p0 += kPixels) {
      const int rows = static_cast<int>(std::min<int64_t>(kPixels, p_end - p0));
      const char* px[kPixels];
      windows(plan, p0, rows, px, kPixels);
      // The sums start from the bias (lanes past the filters: 0).
      __m512i acc[kPixels][B];
      for (int b = 0; b < B; ++b) {
        const __m512i bias = _mm512_maskz_loadu_epi32(lanes_of[b], plan.rq.bias.data() + (b0 + b) * 16);
        for (auto& row : acc) row[b] = bias;
      }
      for (int i = 0; i < rows; ++i) store.prefetch((p0 + i) * filters);
      const int8_t* w = plan.w.block(b0);
      // A tap's steps from the pixels' windows at p; a one-tap conv's (a 1x1 conv) from px itself,
      // so that the pointers live are 6, not 12 (fewer general registers spilled into vector ones).
      auto tap = [&](const char* const (&p)[kPixels]) __attribute__((always_inline)) {
        for (int64_t q = 0; q < quads; ++q, w += 64) {
          if constexpr (kPrefetch) next.step();
          __m512i wv[B];
          for (int b = 0; b < B; ++b) wv[b] = _mm512_loadu_si512(w + b * wstride);
#pragma GCC unroll 6
          for (int i = 0; i < kPixels; ++i) {
            const __m512i a = _mm512_set1_epi32(load_u32(p[i] + q * 4));
            for (int b = 0; b < B; ++b) acc[i][b] = _mm512_dpbusd_epi32(acc[i][b], a, wv[b]);
          }
        }
      };
      if (plan.one_tap) {
        tap(px);
      } else {
        for (const int64_t off : plan.tap_offsets) {
          const char* p[kPixels];
          for (int i = 0; i < kPixels; ++i) p[i] = px[i] + off;
          tap(p);
        }
      }
      if (plan.x.window_sums)  // weights packed less a part per filter (Requantize::window_weight)
#pragma GCC unroll 4
        for (int b = 0; b < B; ++b) {
          const __m512i c = _mm512_maskz_loadu_epi32(lanes_of[b], plan.rq.window_weight.data() + (b0 + b) * 16);
#pragma GCC unroll 6
          for (int i = 0; i < kPixels; ++i)
            if (i < rows)
              acc[i][b] =
                  _mm512_add_epi32(acc[i][b], _mm512_mullo_epi32(c, _mm512_set1_epi32(plan.x.window_sums[p0 + i])));
        }
      // Short stores (Store::kShort) to kPixels, unrolled, so that acc's indices are constants and
      // the sums stay in registers (a loop to `rows` kept them in memory). A store that adds a
      // residual by its steps to more than two blocks is long: six of it inline ran a residual
      // 1x1 conv of resnet50 20 % slower (two blocks inline: mobilenet_v2's 3 % faster; a SiLU's
      // six inline: efficientnet's 16 -> 96 at 112x112 163 -> 142 us); the fused add is short
      // (64 -> 256 at 56x56: 88-92 us inline, 94-100 as a loop).
      if constexpr (Store::kShort) {
#pragma GCC unroll 6
        for (int i = 0; i < kPixels; ++i)
          if (i < rows) store(acc[i], (p0 + i) * filters);
      } else {
        for (int i = 0; i < rows; ++i) store(acc[i], (p0 + i) * filters);
      }
    }
  }

  // The tiles of B blocks with the store rq asks for. Only four blocks fetch ahead, the groups of
  // the big layers whose weights come from memory: the tile's registers are few, and on two
  // blocks the prefetch's pointers alone made GCC 12 keep the weights on the stack in the
  // inner loop, a residual store's constants taking the rest (mobilenet_v2 3-7 % slower).
  template <int B, bool kPrefetch>
  static void tiles_storing(const TilePlan& plan, int64_t p_begin, int64_t p_end, int64_t b0, Prefetch next) {
    auto tiles_to = [&]<class Store>() {
      if constexpr (kPrefetch)
        tiles<B, Store, true>(plan, p_begin, p_end, b0, next);
      else
        tiles<B, Store>(plan, p_begin, p_end, b0);
    };
    const Requantize& rq = plan.rq;
    if (rq.output == Output::kFloat) return tiles_to.template operator()<FloatStore<B>>();
    constexpr Residual kNone = Residual::kNone, kByFma = Residual::kByFma, kBySteps = Residual::kBySteps;
    // The add's multiply-adds (resnet50's 64 -> 256 at 56x56 with its residual: 102-105 -> 88-93
    // us), on two blocks only for a one-tap conv: with a window's tap pointers too, GCC 12 kept
    // the tile's weights on the stack in its inner loop, its general registers spilled into
    // vector ones (mobilenet_v2's 144 -> 24 at 56x56: 22 -> 36 us; one tap: 20.7 -> 19.3); on
    // one block the steps (not measured).
    const bool by_fma = plan.residual && rq.add->method.by_fma && (B > 2 || (B == 2 && plan.one_tap));
    if (rq.activated()) {  // (its values clamped: needs_float_clamp)
      if (!plan.residual) return tiles_to.template operator()<CodeStore<B, true, kNone, true>>();
      return by_fma ? tiles_to.template operator()<CodeStore<B, true, kByFma, true>>()
                    : tiles_to.template operator()<CodeStore<B, true, kBySteps, true>>();
    }
    if (plan.residual)  // (its clamp changes nothing: the add clamps the conv's codes again)
      return by_fma ? tiles_to.template operator()<CodeStore<B, false, kByFma, true>>()
                    : tiles_to.template operator()<CodeStore<B, false, kBySteps, true>>();
    return plan.clamp_high ? tiles_to.template operator()<CodeStore<B, false, kNone, true>>()
                           : tiles_to.template operator()<CodeStore<B, false, kNone, false>>();
  }

  static void run(const TilePlan& plan, int64_t p_begin, int64_t p_end, int64_t b0, int blocks, Prefetch next) {
    switch (blocks) {
      case 4:
        return next.at < next.end ? tiles_storing<4, true>(plan, p_begin, p_end, b0, next)
                                  : tiles_storing<4, false>(plan, p_begin, p_end, b0, next);
      case 3: return tiles_storing<3, false>(plan, p_begin, p_end, b0, next);
      case 2: return tiles_storing<2, false>(plan, p_begin, p_end, b0, next);
      default: return tiles_storing<1, false>(plan, p_begin, p_end, b0, next);
    }
  }
};

}  // namespace

void window_sums_avx512vnni(const Geometry& g, const Staged& x, std::vector<int32_t>& sums, ThreadPool* pool) {
  thread_local std::vector<int32_t> pixel_sums;  // per staged pixel, over its real channels
  const int64_t staged = g.batch * x.padded_h * x.padded_w, channels = g.channels, cp = x.cp;
  const bool one_tap = g.kernel_h == 1 && g.kernel_w == 1;
  sums.resize(static_cast<size_t>(g.batch * g.out_h * g.out_w));
  pixel_sums.resize(static_cast<size_t>(one_tap ? 0 : staged));
  const uint8_t* xp = static_cast<const uint8_t*>(x.xp);
  int32_t* ps = one_tap ? nullptr : pixel_sums.data();
  int32_t* out = sums.data();
  // A pixel's channels, 64 bytes a step, summed by vpsadbw.
  auto channel_sum = [=](int64_t p) {
    __m512i acc = _mm512_setzero_si512();
    for (int64_t c = 0; c < channels; c += 64) {
      const __mmask64 m = channels - c >= 64 ? ~__mmask64{0} : (__mmask64{1} << (channels - c)) - 1;
      acc = _mm512_add_epi64(acc, _mm512_sad_epu8(_mm512_maskz_loadu_epi8(m, xp + p * cp + c), _mm512_setzero_si512()));
    }
    return static_cast<int32_t>(_mm512_reduce_add_epi64(acc));
  };
  auto sum_pixels = [=](int64_t p0, int64_t p1) {
    if (cp == 4) {  // an image's 1 to 4 channels: 16 pixels a vector, vpdpbusd against ones
      const __m512i ones = _mm512_set1_epi32(static_cast<int32_t>(0x01010101u >> (8 * (4 - channels))));
      for (int64_t p = p0; p < p1; p += 16) {
        const __mmask16 m = p1 - p >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (p1 - p)) - 1);
        const __m512i v = _mm512_maskz_loadu_epi32(m, xp + p * 4);
        _mm512_mask_storeu_epi32(ps + p, m, _mm512_dpbusd_epi32(_mm512_setzero_si512(), v, ones));
      }
      return;
    }
    for (int64_t p = p0; p < p1; ++p) ps[p] = channel_sum(p);
  };
  auto sum_rows = [=](int64_t r0, int64_t r1) {  // output rows, each from its staged corner on
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / g.out_h, oy = r % g.out_h;
      int64_t at = (n * x.padded_h + oy * g.stride_h) * x.padded_w;
      int32_t* o = out + r * g.out_w;
      for (int64_t ox = 0; ox < g.out_w; ++ox, at += g.stride_w) {
        if (one_tap) {
          o[ox] = channel_sum(at);
          continue;
        }
        int32_t t = 0;
        for (int64_t ky = 0; ky < g.kernel_h; ++ky)
          for (int64_t kx = 0; kx < g.kernel_w; ++kx) t += ps[at + ky * g.dilation_h * x.padded_w + kx * g.dilation_w];
        o[ox] = t;
      }
    }
  };
  const int64_t rows = g.batch * g.out_h;
  if (pool) {
    if (!one_tap) pool->parallel_for(staged, 1024, sum_pixels);
    pool->parallel_for(rows, 1, sum_rows);
  } else {
    if (!one_tap) sum_pixels(0, staged);
    sum_rows(0, rows);
  }
}

void conv_staged_avx512vnni(const Geometry& g, const Staged& x, const PackedWeights& w, const Requantize& rq,
                            void* y, const void* residual, ThreadPool* pool) {
  drive<VnniTiles>(g, x, w, rq, y, residual, 1, pool);
}

}  // namespace kiln::qconv
