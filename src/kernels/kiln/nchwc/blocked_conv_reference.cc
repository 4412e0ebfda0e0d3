// The scalar reference of ai.kiln.BlockedConv: every output element summed in double straight
// from the definition, so the AVX2 paths have an obviously correct oracle (tests/unit).
#include "kernels/kiln/nchwc/blocked_conv.h"
#include "kernels/kiln/nchwc/blocked_layout.h"

namespace kiln::nchwc {

void blocked_conv_reference(const BlockedConvShape& s, const float* x, const float* w,
                            const BlockedEpilogue& e, float* y) {
  const int64_t in_plane = s.h * s.w * kBlock, out_plane = s.oh * s.ow * kBlock;
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t mb = 0; mb < s.mb; ++mb)
      for (int64_t oh = 0; oh < s.oh; ++oh)
        for (int64_t ow = 0; ow < s.ow; ++ow)
          for (int64_t lane = 0; lane < kBlock; ++lane) {
            double acc = e.bias ? e.bias[mb * kBlock + lane] : 0.0;
            for (int64_t kh = 0; kh < s.kh; ++kh) {
              const int64_t ih = oh * s.sh - s.pt + kh * s.dh;
              if (ih < 0 || ih >= s.h) continue;
              for (int64_t kw = 0; kw < s.kw; ++kw) {
                const int64_t iw = ow * s.sw - s.pl + kw * s.dw;
                if (iw < 0 || iw >= s.w) continue;
                const int64_t pixel = (ih * s.w + iw) * kBlock;
                if (s.depthwise) {
                  const float xv = x[(n * s.cb + mb) * in_plane + pixel + lane];
                  acc += double{xv} * w[((mb * s.kh + kh) * s.kw + kw) * kBlock + lane];
                  continue;
                }
                for (int64_t cb = 0; cb < s.cb; ++cb)
                  for (int64_t ci = 0; ci < kBlock; ++ci) {
                    const int64_t c = s.plain_channels;  // plain NCHW input: c channels
                    if (c > 0 && ci >= c) continue;
                    const float xv = c > 0 ? x[((n * c + ci) * s.h + ih) * s.w + iw]
                                           : x[(n * s.cb + cb) * in_plane + pixel + ci];
                    const float wv =
                        w[((((mb * s.cb + cb) * s.kh + kh) * s.kw + kw) * kBlock + ci) * kBlock +
                          lane];
                    acc += double{xv} * wv;
                  }
              }
            }
            const int64_t at = (n * s.mb + mb) * out_plane + (oh * s.ow + ow) * kBlock + lane;
            float r = static_cast<float>(acc);
            if (e.z && e.residual_first) r += e.z[at];
            r = static_cast<float>(e.act(r));
            if (e.z && !e.residual_first) r += e.z[at];
            y[at] = mb * kBlock + lane < s.channels ? r : 0.0f;
          }
}

}  // namespace kiln::nchwc
