// Reference signal-processing ops: DFT (opset 17 attribute axis, opset 20 input axis), STFT,
// the Blackman/Hamming/Hann windows and MelWeightMatrix. Plain O(n^2) transforms in double.
#include <algorithm>
#include <cmath>
#include <complex>
#include <string>
#include <vector>

#include "kernels/kernel_util.h"

namespace kiln {
namespace {

using Complex = std::complex<double>;
constexpr double kPi = 3.14159265358979323846;

// Naive DFT of `in` (length n) evaluated at k = 0..count-1; the sign of the exponent is + for
// the inverse (no 1/n scaling here). Angles are reduced exactly with (k*j) mod n.
void dft_1d(const std::vector<Complex>& in, int64_t count, bool inverse, std::vector<Complex>* out) {
  const int64_t n = static_cast<int64_t>(in.size());
  out->assign(static_cast<size_t>(count), Complex(0, 0));
  if (n == 0) return;
  const double sign = inverse ? 1.0 : -1.0;
  for (int64_t k = 0; k < count; ++k) {
    Complex s(0, 0);
    for (int64_t j = 0; j < n; ++j) {
      const double angle = sign * 2.0 * kPi * static_cast<double>((k * j) % n) / static_cast<double>(n);
      s += in[j] * Complex(std::cos(angle), std::sin(angle));
    }
    (*out)[k] = s;
  }
}

// Reads a scalar int32/int64 input.
Result<int64_t> scalar_int(const KernelContext& ctx, size_t i, const char* what) {
  const Tensor& t = ctx.input(i);
  if (t.numel() != 1 || (t.dtype() != DType::kInt32 && t.dtype() != DType::kInt64))
    return ctx.error(std::string(what) + " must be an int32/int64 scalar, got " + dtype_name(t.dtype()) + " " +
                     shape_str(t.shape()));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> v, read_int64s(t));
  return v[0];
}

Status dft(KernelContext& ctx) {
  if (!ctx.has_input(0)) return ctx.error("input is required");
  const Tensor& x = ctx.input(0);
  if (!dtype_is_compute_float(x.dtype())) return ctx.error(std::string("input must be float, got ") + dtype_name(x.dtype()));
  const int64_t rank = x.rank();
  if (rank < 2 || (x.dim(rank - 1) != 1 && x.dim(rank - 1) != 2))
    return ctx.error("input must have rank >= 2 and a last dim of 1 (real) or 2 (complex), got " + shape_str(x.shape()));
  const bool inverse = ctx.node.attr_int("inverse", 0) != 0;
  const bool onesided = ctx.node.attr_int("onesided", 0) != 0;
  int64_t axis = ctx.opset >= 20 ? -2 : ctx.node.attr_int("axis", 1);
  if (ctx.opset >= 20 && ctx.has_input(2)) {
    KILN_ASSIGN_OR_RETURN(axis, scalar_int(ctx, 2, "axis"));
  }
  if (axis < -rank || axis > rank - 2 || axis == -1)
    return ctx.error("axis " + std::to_string(axis) + " outside [-r, -2] U [0, r-2] for rank " + std::to_string(rank));
  if (axis < 0) axis += rank;
  const int64_t in_len = x.dim(axis);
  int64_t n = (inverse && onesided) ? 2 * (in_len - 1) : in_len;
  if (ctx.has_input(1)) {
    KILN_ASSIGN_OR_RETURN(n, scalar_int(ctx, 1, "dft_length"));
  }
  if (n < 1) return ctx.error("dft_length must be positive, got " + std::to_string(n));
  if (n > (int64_t{1} << 24)) return ctx.error("dft_length too large: " + std::to_string(n));
  const bool complex_in = x.dim(rank - 1) == 2;

  Shape out_shape = x.shape();
  int64_t out_len = n;
  if (onesided && !inverse) out_len = n / 2 + 1;
  out_shape[axis] = out_len;
  out_shape[rank - 1] = (inverse && onesided) ? 1 : 2;
  KILN_ASSIGN_OR_RETURN(Tensor* y, ctx.make_output(0, x.dtype(), out_shape));

  // Iterate over every line along `axis`: outer dims before axis, inner dims after (excl. last).
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int64_t d = axis + 1; d < rank - 1; ++d) inner *= x.dim(d);
  const int64_t in_c = x.dim(rank - 1), out_c = out_shape[rank - 1];
  std::vector<Complex> line, spectrum;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto in_at = [&](int64_t k) -> Complex {
        const int64_t base = ((o * in_len + k) * inner + i) * in_c;
        const double re = load_as_double(x.dtype(), x.raw_data(), base);
        const double im = complex_in ? load_as_double(x.dtype(), x.raw_data(), base + 1) : 0.0;
        return Complex(re, im);
      };
      line.assign(static_cast<size_t>(n), Complex(0, 0));
      if (inverse && onesided) {
        // IRFFT: bins 0..n/2 given, the rest by conjugate symmetry.
        const int64_t given = std::min(in_len, n / 2 + 1);
        for (int64_t k = 0; k < n; ++k) {
          if (k < given) line[k] = in_at(k);
          else if (n - k < given) line[k] = std::conj(in_at(n - k));
        }
      } else {
        for (int64_t k = 0; k < std::min(in_len, n); ++k) line[k] = in_at(k);
      }
      dft_1d(line, out_len, inverse, &spectrum);
      for (int64_t k = 0; k < out_len; ++k) {
        Complex v = spectrum[k];
        if (inverse) v /= static_cast<double>(n);
        const int64_t base = ((o * out_len + k) * inner + i) * out_c;
        store_from_double(y->dtype(), y->raw_data(), base, v.real());
        if (out_c == 2) store_from_double(y->dtype(), y->raw_data(), base + 1, v.imag());
      }
    }
  }
  return Status::ok();
}

Status stft(KernelContext& ctx) {
  if (!ctx.has_input(0) || !ctx.has_input(1)) return ctx.error("signal and frame_step are required");
  const Tensor& x = ctx.input(0);
  if (!dtype_is_compute_float(x.dtype())) return ctx.error(std::string("signal must be float, got ") + dtype_name(x.dtype()));
  if (x.rank() != 3 || (x.dim(2) != 1 && x.dim(2) != 2))
    return ctx.error("signal must have shape [batch, length, 1 or 2], got " + shape_str(x.shape()));
  const int64_t batch = x.dim(0), len = x.dim(1), in_c = x.dim(2);
  KILN_ASSIGN_OR_RETURN(int64_t step, scalar_int(ctx, 1, "frame_step"));
  if (step < 1) return ctx.error("frame_step must be positive, got " + std::to_string(step));
  std::vector<double> window;
  int64_t frame = len;
  if (ctx.has_input(2)) {
    const Tensor& w = ctx.input(2);
    if (w.rank() != 1 || !dtype_is_compute_float(w.dtype())) return ctx.error("window must be a 1-D float tensor, got " + shape_str(w.shape()));
    frame = w.dim(0);
    for (int64_t i = 0; i < w.numel(); ++i) window.push_back(load_as_double(w.dtype(), w.raw_data(), i));
  }
  if (ctx.has_input(3)) {
    KILN_ASSIGN_OR_RETURN(int64_t fl, scalar_int(ctx, 3, "frame_length"));
    if (!window.empty() && fl != frame)
      return ctx.error("frame_length " + std::to_string(fl) + " differs from the window length " + std::to_string(frame));
    frame = fl;
  }
  if (frame < 1 || frame > len)
    return ctx.error("frame_length " + std::to_string(frame) + " outside [1, signal length " + std::to_string(len) + "]");
  if (window.empty()) window.assign(static_cast<size_t>(frame), 1.0);
  const bool onesided = ctx.node.attr_int("onesided", 1) != 0;
  const int64_t frames = (len - frame) / step + 1;
  const int64_t bins = onesided ? frame / 2 + 1 : frame;
  KILN_ASSIGN_OR_RETURN(Tensor* y, ctx.make_output(0, x.dtype(), {batch, frames, bins, 2}));
  std::vector<Complex> line(static_cast<size_t>(frame)), spectrum;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t f = 0; f < frames; ++f) {
      for (int64_t j = 0; j < frame; ++j) {
        const int64_t base = (b * len + f * step + j) * in_c;
        const double re = load_as_double(x.dtype(), x.raw_data(), base);
        const double im = in_c == 2 ? load_as_double(x.dtype(), x.raw_data(), base + 1) : 0.0;
        line[j] = Complex(re, im) * window[j];
      }
      dft_1d(line, bins, false, &spectrum);
      for (int64_t k = 0; k < bins; ++k) {
        const int64_t o = ((b * frames + f) * bins + k) * 2;
        store_from_double(y->dtype(), y->raw_data(), o, spectrum[k].real());
        store_from_double(y->dtype(), y->raw_data(), o + 1, spectrum[k].imag());
      }
    }
  }
  return Status::ok();
}

Result<DType> output_datatype(const KernelContext& ctx) {
  const int64_t t = ctx.node.attr_int("output_datatype", 1);
  if (!dtype_is_valid(static_cast<int32_t>(t))) return ctx.error("invalid output_datatype " + std::to_string(t));
  const DType d = static_cast<DType>(t);
  if (!(dtype_is_float(d) || dtype_is_integer(d)) || d == DType::kInt4 || d == DType::kUInt4)
    return ctx.error(std::string("unsupported output_datatype ") + dtype_name(d));
  return d;
}

enum class Window { kBlackman, kHamming, kHann };

Status make_window(KernelContext& ctx, Window kind) {
  if (!ctx.has_input(0)) return ctx.error("size is required");
  KILN_ASSIGN_OR_RETURN(int64_t size, scalar_int(ctx, 0, "size"));
  if (size < 0) return ctx.error("size must be non-negative, got " + std::to_string(size));
  KILN_ASSIGN_OR_RETURN(DType dt, output_datatype(ctx));
  const bool periodic = ctx.node.attr_int("periodic", 1) != 0;
  KILN_ASSIGN_OR_RETURN(Tensor* y, ctx.make_output(0, dt, {size}));
  const double denom = static_cast<double>(periodic ? size : size - 1);
  for (int64_t i = 0; i < size; ++i) {
    const double a = 2.0 * kPi * static_cast<double>(i) / denom;
    double v = 0;
    switch (kind) {
      case Window::kBlackman: v = 0.42 - 0.5 * std::cos(a) + 0.08 * std::cos(2.0 * a); break;
      case Window::kHamming: v = 25.0 / 46.0 - (21.0 / 46.0) * std::cos(a); break;
      case Window::kHann: v = 0.5 - 0.5 * std::cos(a); break;
    }
    if (denom == 0) v = 1.0;  // a symmetric window of one point
    store_from_double(dt, y->raw_data(), i, v);
  }
  return Status::ok();
}

Status blackman_window(KernelContext& ctx) { return make_window(ctx, Window::kBlackman); }
Status hamming_window(KernelContext& ctx) { return make_window(ctx, Window::kHamming); }
Status hann_window(KernelContext& ctx) { return make_window(ctx, Window::kHann); }

// Triangular filters spaced evenly on the mel scale, mel(f) = 2595 log10(1 + f/700); the
// edges are snapped to spectrogram bins floor((dft_length + 1) * f / sample_rate).
Status mel_weight_matrix(KernelContext& ctx) {
  for (size_t i = 0; i < 5; ++i)
    if (!ctx.has_input(i)) return ctx.error("all five inputs are required");
  KILN_ASSIGN_OR_RETURN(int64_t mels, scalar_int(ctx, 0, "num_mel_bins"));
  KILN_ASSIGN_OR_RETURN(int64_t dft_length, scalar_int(ctx, 1, "dft_length"));
  KILN_ASSIGN_OR_RETURN(int64_t rate, scalar_int(ctx, 2, "sample_rate"));
  KILN_ASSIGN_OR_RETURN(double lower, read_scalar(ctx.input(3)));
  KILN_ASSIGN_OR_RETURN(double upper, read_scalar(ctx.input(4)));
  if (mels < 1 || dft_length < 1 || rate < 1)
    return ctx.error("num_mel_bins, dft_length and sample_rate must be positive");
  if (!(lower >= 0) || !(upper > lower)) return ctx.error("need 0 <= lower_edge_hertz < upper_edge_hertz");
  KILN_ASSIGN_OR_RETURN(DType dt, output_datatype(ctx));
  const int64_t spec_bins = dft_length / 2 + 1;
  KILN_ASSIGN_OR_RETURN(Tensor* y, ctx.make_output(0, dt, {spec_bins, mels}));
  KILN_ASSIGN_OR_RETURN(Tensor w, Tensor::make(DType::kFloat64, {spec_bins, mels}));
  double* out = w.data<double>();
  const double low_mel = 2595.0 * std::log10(1.0 + lower / 700.0);
  const double high_mel = 2595.0 * std::log10(1.0 + upper / 700.0);
  const double mel_step = (high_mel - low_mel) / static_cast<double>(mels + 2);
  std::vector<int64_t> edges(static_cast<size_t>(mels + 2));
  for (int64_t i = 0; i < mels + 2; ++i) {
    const double hz = 700.0 * (std::pow(10.0, (static_cast<double>(i) * mel_step + low_mel) / 2595.0) - 1.0);
    edges[i] = static_cast<int64_t>(std::floor(static_cast<double>(dft_length + 1) * hz / static_cast<double>(rate)));
  }
  auto set = [&](int64_t j, int64_t i, double v) {
    if (j >= 0 && j < spec_bins) out[j * mels + i] = v;
  };
  for (int64_t i = 0; i < mels; ++i) {
    const int64_t left = edges[i], center = edges[i + 1], right = edges[i + 2];
    if (center == left) {
      set(center, i, 1.0);
    } else {
      for (int64_t j = left; j <= center; ++j) set(j, i, static_cast<double>(j - left) / static_cast<double>(center - left));
    }
    if (right > center)
      for (int64_t j = center; j < right; ++j) set(j, i, static_cast<double>(right - j) / static_cast<double>(right - center));
  }
  for (int64_t i = 0; i < w.numel(); ++i) store_from_double(dt, y->raw_data(), i, out[i]);
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("", "DFT", dft);
KILN_REGISTER_KERNEL("", "STFT", stft);
KILN_REGISTER_KERNEL("", "BlackmanWindow", blackman_window);
KILN_REGISTER_KERNEL("", "HammingWindow", hamming_window);
KILN_REGISTER_KERNEL("", "HannWindow", hann_window);
KILN_REGISTER_KERNEL("", "MelWeightMatrix", mel_weight_matrix);

}  // namespace kiln
