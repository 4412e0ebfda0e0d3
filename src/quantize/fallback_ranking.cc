// The accuracy guard's order of fallbacks (quantize_internal.h): each quantized activation put
// back in float on its own (with the node writing it, where the plan has one), the quantized
// model's outputs run on the held-out samples, and the candidates ranked by how near the budgets
// each leaves them. The per-layer SQNR alone chose badly: errors made early grow along the
// network, and a tensor near zero everywhere (yolox's objectness sigmoid, 0.3 dB) loses the most
// relative noise while mattering least. On yolox the first SiLU's output in float alone moved the
// output cosine from 0.987 to 0.990; 60 fallbacks by SQNR had not done as much.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/session.h"
#include "quantize/quantize_internal.h"

namespace kiln::quantize {
namespace {

// The float32 outputs of `session` on every sample: [sample][output].
Result<std::vector<std::vector<Tensor>>> outputs_on(Session& session, const std::vector<std::vector<Tensor>>& samples) {
  std::vector<std::vector<Tensor>> all;
  for (const std::vector<Tensor>& sample : samples) {
    std::vector<Value> feeds;
    for (const Tensor& t : sample) feeds.push_back(Value::of(t));
    KILN_ASSIGN_OR_RETURN(std::vector<Value> out, session.run(feeds));
    all.emplace_back();
    for (const Value& v : out) all.back().push_back(v.is_tensor() ? v.tensor : Tensor());
  }
  return all;
}

}  // namespace

Result<double> budget_margin(const QuantizeOptions& o, const OutputsBySample& kept, bool features) {
  double margin = std::numeric_limits<double>::infinity();
  if (o.min_cosine > 0) {
    double worst = 1;
    for (size_t s = 0; s < kept.float_outputs.size(); ++s)
      worst = std::min(worst, worst_cosine(kept.float_outputs[s], kept.quantized[s]));
    margin = std::min(margin, worst - o.min_cosine);
    if (features) margin = std::min(margin, least_feature_cosine(kept) - o.min_cosine);
  }
  if (o.min_top1 > 0) margin = std::min(margin, top1_agreement(kept) - o.min_top1);
  if (o.metric) {
    KILN_ASSIGN_OR_RETURN(const double v, o.metric(kept.float_outputs, kept.quantized));
    margin = std::min(margin, std::isnan(v) ? -std::numeric_limits<double>::infinity() : v - o.min_metric);
  }
  return margin;
}

Result<std::vector<Fallback>> rank_fallbacks(const ir::Model& fp32, const ir::Model& quantized,
                                             const std::vector<Fallback>& candidates,
                                             const std::function<Result<ir::Model>(const Fallback&)>& without,
                                             const QuantizeOptions& o, std::vector<std::vector<Tensor>> samples) {
  const std::vector<std::string> outputs = float_outputs(fp32);
  KILN_ASSIGN_OR_RETURN(auto reference, probe(fp32, outputs));
  OutputsBySample kept;
  KILN_ASSIGN_OR_RETURN(kept.float_outputs, outputs_on(*reference, samples));
  // A cosine budget alone is the worst sample's: the candidates run on the kWorstSamples whose
  // outputs the quantized model misses most (yolox: 14 held-out photos, 160 candidates).
  // Not where the outputs' features miss it: those are measured over every sample.
  constexpr size_t kWorstSamples = 3;
  if (o.min_top1 <= 0 && !o.metric && samples.size() > kWorstSamples) {
    KILN_ASSIGN_OR_RETURN(auto session, probe(quantized, outputs));
    KILN_ASSIGN_OR_RETURN(kept.quantized, outputs_on(*session, samples));
  }
  const bool reduced = !kept.quantized.empty() && least_feature_cosine(kept) >= o.min_cosine;
  if (reduced) {
    std::vector<std::pair<double, size_t>> worst;
    for (size_t s = 0; s < samples.size(); ++s) worst.emplace_back(worst_cosine(kept.float_outputs[s], kept.quantized[s]), s);
    std::sort(worst.begin(), worst.end());
    std::vector<std::vector<Tensor>> chosen_samples, chosen_outputs;
    for (size_t k = 0; k < kWorstSamples; ++k) {
      chosen_samples.push_back(std::move(samples[worst[k].second]));
      chosen_outputs.push_back(std::move(kept.float_outputs[worst[k].second]));
    }
    samples = std::move(chosen_samples), kept.float_outputs = std::move(chosen_outputs);
  }
  std::vector<Fallback> ranked;
  for (const Fallback& c : candidates) {
    KILN_ASSIGN_OR_RETURN(const ir::Model qdq, without(c));
    KILN_ASSIGN_OR_RETURN(auto session, probe(qdq, outputs));
    KILN_ASSIGN_OR_RETURN(kept.quantized, outputs_on(*session, samples));
    ranked.push_back(c);
    KILN_ASSIGN_OR_RETURN(ranked.back().margin, budget_margin(o, kept, !reduced));
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const Fallback& a, const Fallback& b) { return a.margin > b.margin; });
  return ranked;
}

}  // namespace kiln::quantize
