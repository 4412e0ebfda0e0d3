// The direct grouped convolution of grouped_conv.h. One task is a band of output rows of one
// image's group (the whole plane when the groups are many enough to share out): the input rows
// the band reads are first copied into zero-padded buffers split into `stride` phases (phase q of
// a row holds the padded columns t * stride + q), so that every output and every tap reads
// contiguous memory (output o's tap j is element o + j * dilation / stride of phase j * dilation
// % stride), and every output channel of the group is then made from them. Each output row
// accumulates up to 64 outputs in eight registers over all the group's channels and taps (eight
// independent FMA chains), with no border cases: the padding is in the buffer.
#include "kernels/cpu/conv/grouped_conv.h"

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/vec_math_avx2.h"

namespace kiln {
namespace {

// A band's input buffer, at most (a band is one output row at least): well inside L2.
constexpr int64_t kBandBytes = 256 * 1024;

struct Geometry {
  int64_t ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw;
  int64_t cg;                       // input channels a group
  int64_t phase_len;                // floats in one phase of a padded row
  int64_t plane_len;                // floats of one channel's buffer: a band's input rows x sw phases
  std::vector<int64_t> tap_offset;  // per kernel column: its phase's start plus its shift in it
};

// Floats in one phase of a padded row: the outputs rounded up to whole vectors, plus the
// furthest tap's shift.
int64_t phase_len_of(const conv_util::Geo3& g) {
  return (g.out[2] + 7) / 8 * 8 + (g.k[2] - 1) * g.d[2] / g.s[2] + 1;
}

// The geometry of tasks of `band` output rows.
Geometry geometry(const conv_util::Geo3& g, int64_t cg, int64_t band) {
  Geometry s{g.in[1], g.in[2], g.out[1], g.out[2], g.k[1], g.k[2], g.s[1], g.s[2], g.d[1], g.d[2],
             g.pb[1], g.pb[2], cg, phase_len_of(g), 0, {}};
  const int64_t band_rows = std::min(s.ih, (band - 1) * s.sh + (s.kh - 1) * s.dh + 1);  // input rows
  s.plane_len = band_rows * s.sw * s.phase_len;
  for (int64_t j = 0; j < s.kw; ++j) s.tap_offset.push_back((j * s.dw % s.sw) * s.phase_len + j * s.dw / s.sw);
  return s;
}

// The input rows output rows [r0, r1) read, clipped to the input: [*lo, *hi).
void input_rows(const Geometry& s, int64_t r0, int64_t r1, int64_t* lo, int64_t* hi) {
  *lo = std::clamp<int64_t>(r0 * s.sh - s.ph, 0, s.ih);
  *hi = std::clamp<int64_t>((r1 - 1) * s.sh - s.ph + (s.kh - 1) * s.dh + 1, *lo, s.ih);
}

// The padded, phase-split copy of input rows [row0, row1) of one plane:
// buf[((row - row0) * sw + q) * phase_len + t] holds input column t * sw + q - pw of the row, or 0
// outside it.
void fill_phases(const float* x, const Geometry& s, int64_t row0, int64_t row1, float* buf) {
  for (int64_t q = 0; q < s.sw; ++q) {
    int64_t lo, hi;  // columns t of phase q that hold input: 0 <= t * sw + q - pw < iw
    conv_util::indices_inside(s.phase_len, s.iw, s.sw, q - s.pw, &lo, &hi);
    for (int64_t row = row0; row < row1; ++row) {
      float* dst = buf + ((row - row0) * s.sw + q) * s.phase_len;
      const float* src = x + row * s.iw + q - s.pw;
      std::fill(dst, dst + lo, 0.0f);
      if (s.sw == 1) std::copy(src + lo, src + hi, dst + lo);
      else
        for (int64_t t = lo; t < hi; ++t) dst[t] = src[t * s.sw];
      std::fill(dst + hi, dst + s.phase_len, 0.0f);
    }
  }
}

// Outputs [o, o + 8 * B) of output row r of one output channel, whose weights are w [cg, kh, kw]
// (the last vector masked to `tail` lanes when tail < 8), from buffers that start at input row
// row0.
template <int B>
inline void row_block(const float* buf, const float* w, float bias, const Geometry& s, int64_t r, int64_t row0,
                      int64_t i0, int64_t i1, int64_t o, int tail, float* yr) {
  __m256 acc[B];
  for (int b = 0; b < B; ++b) acc[b] = _mm256_set1_ps(bias);
  for (int64_t ci = 0; ci < s.cg; ++ci)
    for (int64_t i = i0; i < i1; ++i) {
      const float* row = buf + ci * s.plane_len + (r * s.sh - s.ph + i * s.dh - row0) * s.sw * s.phase_len + o;
      const float* wr = w + (ci * s.kh + i) * s.kw;
      for (int64_t j = 0; j < s.kw; ++j) {
        const float* src = row + s.tap_offset[j];
        const __m256 wv = _mm256_set1_ps(wr[j]);
        for (int b = 0; b < B; ++b) acc[b] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src + 8 * b), acc[b]);
      }
    }
  for (int b = 0; b + 1 < B; ++b) _mm256_storeu_ps(yr + o + 8 * b, acc[b]);
  if (tail == 8) _mm256_storeu_ps(yr + o + 8 * (B - 1), acc[B - 1]);
  else _mm256_maskstore_ps(yr + o + 8 * (B - 1), vec::tail_mask_avx2(tail), acc[B - 1]);
}

// Output rows [r0, r1) of one output plane from the group's buffers, which start at input row
// row0.
void output_rows(const float* buf, const float* w, float bias, float* y, const Geometry& s, int64_t r0, int64_t r1,
                 int64_t row0) {
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i0, i1;  // kernel rows inside the input (the others read only padding)
    conv_util::indices_inside(s.kh, s.ih, s.dh, r * s.sh - s.ph, &i0, &i1);
    float* yr = y + r * s.ow;
    // Up to eight vectors at a time: as many independent chains as the row has, so that a short
    // row (56 outputs: 7 vectors) is still one block, not seven FMA-latency-bound ones.
    for (int64_t o = 0; o < s.ow; o += 64) {
      const int64_t left = s.ow - o, vectors = std::min<int64_t>(8, (left + 7) / 8);
      const int tail = static_cast<int>(std::min<int64_t>(8, left - 8 * (vectors - 1)));
      switch (vectors) {
        case 8: row_block<8>(buf, w, bias, s, r, row0, i0, i1, o, tail, yr); break;
        case 7: row_block<7>(buf, w, bias, s, r, row0, i0, i1, o, tail, yr); break;
        case 6: row_block<6>(buf, w, bias, s, r, row0, i0, i1, o, tail, yr); break;
        case 5: row_block<5>(buf, w, bias, s, r, row0, i0, i1, o, tail, yr); break;
        case 4: row_block<4>(buf, w, bias, s, r, row0, i0, i1, o, tail, yr); break;
        case 3: row_block<3>(buf, w, bias, s, r, row0, i0, i1, o, tail, yr); break;
        case 2: row_block<2>(buf, w, bias, s, r, row0, i0, i1, o, tail, yr); break;
        default: row_block<1>(buf, w, bias, s, r, row0, i0, i1, o, tail, yr); break;
      }
    }
  }
}

}  // namespace

bool grouped_conv_direct_fits(int64_t group, int64_t channels_per_group, int64_t outputs, const conv_util::Geo3& g) {
  const bool few_outputs = group == 1 && outputs < kDirectConvMinGemmOutputs;
  // A row's buffer is `stride` phases of the outputs' width: a stride past the kernel's extent
  // (and past 8) copies columns no tap reads, and a hostile one (2^27) asked for gigabytes.
  const bool stride_fits = g.s[2] <= std::max<int64_t>((g.k[2] - 1) * g.d[2] + 1, 8);
  return (few_outputs || (group > 1 && channels_per_group <= kDirectConvMaxGroupChannels)) && g.k[0] == 1 &&
         g.in[0] == 1 && g.out[0] == 1 && stride_fits;
}

void grouped_conv_f32(const float* x, const float* w, const float* bias, float* y, int64_t n, int64_t c, int64_t m,
                      int64_t group, const conv_util::Geo3& g, ThreadPool* pool) {
  const int64_t cg = c / group, mg = m / group, oh = g.out[1];
  if (n == 0 || m == 0 || oh == 0 || g.out[2] == 0) return;  // no output
  // Groups too few to share out over the threads (one: a group-1 conv) are cut into bands of
  // rows, and so are planes whose buffers would not stay in L2 (a 1-channel 3x3 head on 16
  // channels at 640 x 640, Zen 3: 3.4 MB bands of 80 rows, 7.6 ms for the node; L2-sized bands,
  // 6.0).
  const int64_t threads = pool ? pool->threads() : 1;
  const int64_t row_bytes = std::max<int64_t>(1, cg * g.s[2] * phase_len_of(g) * 4);  // an input row
  const int64_t halo = (g.k[1] - 1) * g.d[1];  // input rows a band reads past its strides
  const int64_t fit = std::max<int64_t>(1, (kBandBytes / row_bytes - halo) / g.s[1]);  // output rows
  const int64_t for_threads = (4 * threads + n * group - 1) / (n * group);
  const int64_t bands = std::clamp<int64_t>(std::max(for_threads, (oh + fit - 1) / fit), 1, oh);
  const int64_t band = (oh + bands - 1) / bands;
  const Geometry s = geometry(g, cg, band);
  const int64_t in_plane = s.ih * s.iw, out_plane = s.oh * s.ow, taps = cg * s.kh * s.kw;
  const size_t buf_len = static_cast<size_t>(cg * s.plane_len);
  auto body = [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> buf;
    if (buf.size() < buf_len) buf.resize(buf_len);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t ni = t / (group * bands), gi = t / bands % group, r0 = t % bands * band;
      const int64_t r1 = std::min(oh, r0 + band);
      if (r0 >= r1) continue;
      int64_t row0, row1;
      input_rows(s, r0, r1, &row0, &row1);
      for (int64_t ci = 0; ci < cg; ++ci)
        fill_phases(x + (ni * c + gi * cg + ci) * in_plane, s, row0, row1, buf.data() + ci * s.plane_len);
      for (int64_t mo = 0; mo < mg; ++mo) {
        const int64_t oc = gi * mg + mo;
        output_rows(buf.data(), w + oc * taps, bias ? bias[oc] : 0.0f, y + (ni * m + oc) * out_plane, s, r0, r1,
                    row0);
      }
    }
  };
  const int64_t tasks = n * group * bands;
  if (pool == nullptr || tasks < 2) body(0, tasks);
  else pool->parallel_for(tasks, 1, body);
}

}  // namespace kiln
