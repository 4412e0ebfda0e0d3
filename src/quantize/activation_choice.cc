// Per conv, the activation in float or on 8-bit codes (quantize_internal.h, tabled_activations).
// kiln's form applies a conv's SiLU (Sigmoid, Tanh, ...) to its float sums and quantizes after
// it; the other way, the conv's output is quantized and the activation becomes a table of its
// 256 codes (the portable form's QDQ, which the 8-bit conv finishes with a lookup). The table is
// faster (int8 efficientnet_b0 1.24-1.29 ms against 1.60-1.72 with every activation in float,
// Zen 5) and as accurate where the conv's outputs crowd near zero under a long tail (most of
// efficientnet's: the noise of x's codes through the activation about that of the output's
// own), but where a wide range goes into a SiLU flat below zero (a YOLO's convs, -17 to 20) 8
// bits before it lose what the float sums keep: yolov8n's class scores had cosine 0.54 to the
// float model's through tables, 0.96 in float. The choice measures both on the calibration
// samples, for each method's parameters: the output's squared error to the float activation
// through the table (x's codes, the activation of each code, and for x * Sigmoid(x) the
// Sigmoid's own 8-bit output, quantized to the output's codes), against that of the output's
// codes of the float activation. The bound, 1.2x: at 1.5, one of the ddddocr CRNN's 11 convs
// took a table and its exact lines went from 11 to 10 of 14; at 1.2 efficientnet_b0 has 61 of
// its 65 in tables (60 at 1.1), yolov8n none of 43, yolox 1 of 76, the CRNN none.
#include <algorithm>
#include <cmath>
#include <optional>

#include "kernels/kiln/epilogue_activation.h"
#include "quantize/quantize_internal.h"

namespace kiln::quantize {
namespace {

struct Codes {
  double scale, zero_point, lo, hi;
  Codes(const QuantParams& p, bool is_signed)
      : scale(p.scale), zero_point(p.zero_point), lo(is_signed ? -128 : 0), hi(is_signed ? 127 : 255) {}
  double code(double v) const { return std::clamp(std::nearbyint(v / scale) + zero_point, lo, hi); }
  double value(double c) const { return (c - zero_point) * scale; }
  double round_trip(double v) const { return value(code(v)); }
};

}  // namespace

Result<std::vector<std::set<std::string>>> tabled_activations(
    const std::vector<FloatActivation>& activations, const std::vector<std::map<std::string, QuantParams>>& params,
    bool is_signed, const SampleRunner& run) {
  const size_t sets = params.size();
  // Those whose points every parameter set has (else they stay in float), each with its
  // evaluator, x's and the output's codes per set, and per set its table: the output's value for
  // each of x's codes.
  struct Candidate {
    const FloatActivation* a;
    kiln_ops::Activation act;
    std::vector<Codes> x, y;
    std::vector<std::vector<double>> table;
    std::vector<double> through_table, output_alone;  // squared errors to the float activation
  };
  std::vector<Candidate> candidates;
  for (const FloatActivation& a : activations) {
    auto has = [&](const std::string& t) {
      return t.empty() || std::all_of(params.begin(), params.end(), [&](const auto& p) { return p.count(t) > 0; });
    };
    if (!has(a.conv_output) || !has(a.output) || !has(a.sigmoid_output)) continue;
    ir::Node spelt;
    passes::epilogue::add_activation_attrs(spelt, a.act);
    KILN_ASSIGN_OR_RETURN(kiln_ops::Activation act,
                          kiln_ops::read_activation(spelt, "activation", "activation_params"));
    Candidate c{&a, act, {}, {}, std::vector<std::vector<double>>(sets), std::vector<double>(sets, 0.0),
                std::vector<double>(sets, 0.0)};
    for (size_t s = 0; s < sets; ++s) {
      c.x.emplace_back(params[s].at(a.conv_output), is_signed);
      c.y.emplace_back(params[s].at(a.output), is_signed);
      const std::optional<Codes> sigmoid =
          a.sigmoid_output.empty() ? std::nullopt : std::optional<Codes>(Codes(params[s].at(a.sigmoid_output), is_signed));
      for (double code = c.x[s].lo; code <= c.x[s].hi; ++code) {
        const double v = c.x[s].value(code);
        // x times the Sigmoid's codes, for x * Sigmoid(x)
        const double out = sigmoid ? v * sigmoid->round_trip(kiln_ops::Activation::sigmoid(v)) : act(v);
        c.table[s].push_back(c.y[s].round_trip(out));
      }
    }
    candidates.push_back(std::move(c));
  }
  std::vector<std::set<std::string>> tabled(sets);
  if (candidates.empty()) return tabled;
  std::vector<std::string> conv_outputs;
  for (const Candidate& c : candidates) conv_outputs.push_back(c.a->conv_output);
  KILN_RETURN_IF_ERROR(run(conv_outputs, [&](size_t i, const float* x, int64_t n) {
    Candidate& c = candidates[i];
    for (int64_t k = 0; k < n; ++k) {
      if (!std::isfinite(x[k])) continue;
      const double exact = c.act(x[k]);
      for (size_t s = 0; s < sets; ++s) {
        const double t = c.table[s][static_cast<size_t>(c.x[s].code(x[k]) - c.x[s].lo)] - exact;
        const double f = c.y[s].round_trip(exact) - exact;
        c.through_table[s] += t * t, c.output_alone[s] += f * f;
      }
    }
  }));
  for (const Candidate& c : candidates)
    for (size_t s = 0; s < sets; ++s)
      if (c.through_table[s] <= kTableNoiseRatio * c.output_alone[s]) tabled[s].insert(c.a->conv_output);
  return tabled;
}

}  // namespace kiln::quantize
