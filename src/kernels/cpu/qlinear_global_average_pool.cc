// com.microsoft.QLinearGlobalAveragePool (ONNX Runtime's contrib op; qdq-fusion writes it for
// Q(GlobalAveragePool(DQ(x))), qlinear-nhwc its channels-last form): 8-bit X [N, C, spatial...]
// (channels_last: [N, spatial..., C]) to Y of X's type, [N, C, 1...] (or [N, 1..., C]):
//   y = saturate(round_half_even(float(sum(x) - n * xz) * (xs / (ys * n))) + yz)
// over each channel's n pixels: the sum exact in integers, one float multiply and rounding (MLAS's
// requantization of the sum; the DequantizeLinear/GlobalAveragePool/QuantizeLinear it replaces
// rounds each dequantized value, their mean and the quotient, so the two may differ by a code).
#include <immintrin.h>

#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <vector>

#include "core/thread_pool.h"
#include "core/thread_scratch.h"
#include "kernels/fast_path.h"
#include "kernels/kernel_util.h"
#include "kernels/ref/quantize.h"

namespace kiln {
namespace {

// int32 lanes hold a sum of up to this many codes (255 * 2^23 < 2^31).
constexpr int64_t kInt32Run = int64_t{1} << 23;

// The codes of a row of add_pixels' pixels: k pixels, k a multiple of 32 / gcd(C, 32), so that the
// rows are whole vectors.
int64_t row_codes(int64_t channels) {
  const int64_t whole = 32 / std::gcd<int64_t>(channels, 32);
  return whole * std::max<int64_t>(1, 512 / (whole * channels)) * channels;
}

// add_pixels' int32 lanes, a row's worth a thread, kept from run to run (pool() reserves them on
// every thread first).
std::vector<int32_t>& lane_buffer() {
  thread_local std::vector<int32_t> lanes;
  return lanes;
}

// sums[c] += the codes of pixels [p0, p1) of channels-last image x (C channels). The pixels go in
// rows of k (about 512 codes or more, so that a row is long where C is small), and 32 columns of the
// rows at a time down 256 rows in 16-bit lanes (255 * 257 fits), which then widen into int32
// lanes (a row's worth, per thread); a row's k pixels of each channel fold at the end. (Adding
// each code into int32 lanes in memory cost a store per 8 codes: bound by the stores.) s8 codes
// are moved to u8 (x + 128).
template <typename T>
void add_pixels(const T* x, int64_t channels, int64_t p0, int64_t p1, int64_t* sums) {
  if (p1 - p0 > kInt32Run) {  // an int32 lane holds the codes of kInt32Run pixels
    add_pixels(x, channels, p0, p0 + kInt32Run, sums);
    return add_pixels(x, channels, p0 + kInt32Run, p1, sums);
  }
  const int64_t len = row_codes(channels), k = len / channels, rows = (p1 - p0) / k;
  const __m256i flip = _mm256_set1_epi8(std::is_signed_v<T> ? static_cast<char>(0x80) : 0);
  std::vector<int32_t>& lane_sums = lane_buffer();
  lane_sums.assign(static_cast<size_t>(len), 0);
  int32_t* lanes = lane_sums.data();
  const uint8_t* base = reinterpret_cast<const uint8_t*>(x) + p0 * channels;
  int64_t j = 0;
  for (; j + 32 <= len; j += 32)
    for (int64_t r0 = 0; r0 < rows; r0 += 256) {
      __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
      for (int64_t r = r0; r < std::min(rows, r0 + 256); ++r) {
        const __m256i v = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + r * len + j)), flip);
        lo = _mm256_add_epi16(lo, _mm256_cvtepu8_epi16(_mm256_castsi256_si128(v)));
        hi = _mm256_add_epi16(hi, _mm256_cvtepu8_epi16(_mm256_extracti128_si256(v, 1)));
      }
      const __m256i words[4] = {
          _mm256_cvtepu16_epi32(_mm256_castsi256_si128(lo)), _mm256_cvtepu16_epi32(_mm256_extracti128_si256(lo, 1)),
          _mm256_cvtepu16_epi32(_mm256_castsi256_si128(hi)), _mm256_cvtepu16_epi32(_mm256_extracti128_si256(hi, 1))};
      for (int q = 0; q < 4; ++q) {
        __m256i* at = reinterpret_cast<__m256i*>(lanes + j + 8 * q);
        _mm256_storeu_si256(at, _mm256_add_epi32(_mm256_loadu_si256(at), words[q]));
      }
    }
  for (; j < len; ++j)  // columns short of 32
    for (int64_t r = 0; r < rows; ++r) lanes[j] += base[r * len + j] ^ (std::is_signed_v<T> ? 0x80 : 0);
  for (int64_t p = p0 + rows * k; p < p1; ++p)  // pixels short of a row
    for (int64_t c = 0; c < channels; ++c)
      lanes[c] += static_cast<uint8_t>(base[(p - p0) * channels + c] ^ (std::is_signed_v<T> ? 0x80 : 0));
  const int64_t moved = std::is_signed_v<T> ? 128 * (p1 - p0) : 0;  // back from u8
  for (int64_t c = 0; c < channels; ++c) sums[c] -= moved;
  for (int64_t i = 0; i < k; ++i)
    for (int64_t c = 0; c < channels; ++c) sums[c] += lanes[i * channels + c];
}

// The sum of n codes from x, through int32 runs.
template <typename T>
int64_t add_codes(const T* __restrict x, int64_t n) {
  int64_t total = 0;
  for (int64_t i0 = 0; i0 < n; i0 += kInt32Run) {
    int32_t s = 0;
    for (int64_t i = i0; i < std::min(n, i0 + kInt32Run); ++i) s += x[i];
    total += s;
  }
  return total;
}

template <typename T>
void pool(const T* x, int64_t batch, int64_t channels, int64_t image, bool channels_last, float xz, float multiplier,
          float yz, float lo, float hi, T* y, ThreadPool* threads) {
  // Large images go over the threads: channels-last ones in a band of pixels a thread (each
  // band's sums apart, added after: more bands only add their fixed costs), NCHW ones by channels.
  const bool split = threads && channels * image >= (int64_t{1} << 16);
  const int64_t bands = split && channels_last ? std::min<int64_t>(image, threads->threads()) : 1;
  // The calling thread's sums, kept from run to run (named through a reference, which the
  // threads' lambda reads: a thread_local named there would be each thread's own).
  thread_local std::vector<int64_t> kept;
  std::vector<int64_t>& sums = kept;
  sums.resize(static_cast<size_t>(bands * channels));
  if (channels_last) {
    thread_local ScratchReservation<1> reserved;
    reserved.ensure(threads, {row_codes(channels)},
                    [](const std::array<int64_t, 1>& n) { lane_buffer().reserve(static_cast<size_t>(n[0])); });
  }
  for (int64_t b = 0; b < batch; ++b) {
    const T* xb = x + b * channels * image;
    std::fill(sums.begin(), sums.end(), 0);
    auto work = [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        if (channels_last)
          add_pixels(xb, channels, i * image / bands, (i + 1) * image / bands, sums.data() + i * channels);
        else
          sums[static_cast<size_t>(i)] = add_codes(xb + i * image, image);
      }
    };
    const int64_t items = channels_last ? bands : channels;
    if (split && items > 1)
      threads->parallel_for(items, 1, work);
    else
      work(0, items);
    // The codes, 4 channels a step where every sum fits int32 (the images of fewer than 2^23
    // pixels), the scalar steps' operations in their order; the rest one at a time.
    auto total = [&](int64_t c) {
      int64_t t = 0;
      for (int64_t i = 0; i < bands; ++i) t += sums[static_cast<size_t>(i * channels + c)];
      return t;
    };
    int64_t c = 0;
    if (image < kInt32Run) {
      const __m256d shift = _mm256_set1_pd(static_cast<double>(image) * xz);
      const __m128 m = _mm_set1_ps(multiplier), z = _mm_set1_ps(yz), low = _mm_set1_ps(lo), high = _mm_set1_ps(hi);
      for (; c + 4 <= channels; c += 4) {
        const __m128i t = _mm_setr_epi32(static_cast<int32_t>(total(c)), static_cast<int32_t>(total(c + 1)),
                                         static_cast<int32_t>(total(c + 2)), static_cast<int32_t>(total(c + 3)));
        const __m128 v = _mm256_cvtpd_ps(_mm256_sub_pd(_mm256_cvtepi32_pd(t), shift));
        const __m128 r = _mm_add_ps(_mm_round_ps(_mm_mul_ps(v, m), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), z);
        const __m128i q = _mm_cvtps_epi32(_mm_min_ps(_mm_max_ps(r, low), high));  // in range: the packs narrow
        const __m128i w = _mm_packs_epi32(q, q);
        const __m128i bytes = std::is_signed_v<T> ? _mm_packs_epi16(w, w) : _mm_packus_epi16(w, w);
        const int32_t four = _mm_cvtsi128_si32(bytes);
        std::memcpy(y + b * channels + c, &four, 4);
      }
    }
    for (; c < channels; ++c) {
      const float v = static_cast<float>(static_cast<double>(total(c)) - static_cast<double>(image) * xz);
      y[b * channels + c] = static_cast<T>(std::min(hi, std::max(lo, std::nearbyint(v * multiplier) + yz)));
    }
  }
}

Status qlinear_global_average_pool(KernelContext& ctx) {
  if (ctx.num_inputs() < 4 || !ctx.has_input(0))
    return ctx.error("needs X, x_scale, x_zero_point, y_scale, y_zero_point");
  const Tensor& x = ctx.input(0);
  const DType t = x.dtype();
  if (t != DType::kUInt8 && t != DType::kInt8) return ctx.error(std::string("X must be uint8 or int8, got ") + dtype_name(t));
  if (x.rank() < 3) return ctx.error("X must have rank 3 or more (batch, channels, spatial), got " + shape_str(x.shape()));
  auto at = [&](size_t i) { return ctx.has_input(i) && ctx.input(i).defined() ? &ctx.input(i) : nullptr; };
  KILN_ASSIGN_OR_RETURN(float xs, per_tensor_parameter(at(1), 1, true, t));
  KILN_ASSIGN_OR_RETURN(float xz, per_tensor_parameter(at(2), 2, false, t));
  KILN_ASSIGN_OR_RETURN(float ys, per_tensor_parameter(at(3), 3, true, t));
  KILN_ASSIGN_OR_RETURN(float yz, per_tensor_parameter(at(4), 4, false, t));
  const bool channels_last = ctx.node.attr_int("channels_last", 0) != 0;
  const int64_t batch = x.dim(0), channels = channels_last ? x.dim(x.rank() - 1) : x.dim(1);
  Shape out(static_cast<size_t>(x.rank()), 1);
  out[0] = batch;
  out[channels_last ? out.size() - 1 : 1] = channels;
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, t, out));
  if (y->numel() == 0) return Status::ok();
  const int64_t image = x.numel() / (channels * batch);
  if (image == 0) return ctx.error("X " + shape_str(x.shape()) + " has no pixels to average");
  const float multiplier = xs / (ys * static_cast<float>(image));
  if (t == DType::kUInt8)
    pool(x.data<uint8_t>(), batch, channels, image, channels_last, xz, multiplier, yz, 0.0f, 255.0f, y->data<uint8_t>(),
         ctx.pool);
  else
    pool(x.data<int8_t>(), batch, channels, image, channels_last, xz, multiplier, yz, -128.0f, 127.0f, y->data<int8_t>(),
         ctx.pool);
  return Status::ok();
}

}  // namespace

KILN_REGISTER_TYPED_KERNEL("com.microsoft", "QLinearGlobalAveragePool", qlinear_global_average_pool,
                           {{0, {DType::kUInt8, DType::kInt8}}});
// Integer sums over the threads on every node (no reference loop behind it).
KILN_REGISTER_FAST_PATH("com.microsoft", "QLinearGlobalAveragePool", always_fast);

}  // namespace kiln
