// Static post-training quantization (kiln/quantize.h), in five steps:
//  1. simplify: the portable -O1 pipeline (BatchNormalization folded into the convs, constants
//     folded), so that each conv's weights are the ones it runs; opset raised to 13 by ONNX's
//     converter where per-channel scales need DequantizeLinear's axis;
//  2. choose (quantization_points.cc): the Conv, MatMul and Gemm nodes with constant weights and
//     the activations to put in 8 bits: their inputs, and the inputs and outputs of the ops that
//     carry 8-bit data between them (Add, pooling, Concat);
//  3. calibrate: run the samples through the model with every chosen activation an output, once
//     for the ranges and, for the clipping methods, once more for the histograms;
//  4. write QDQ (qdq_writer.cc): QuantizeLinear/DequantizeLinear pairs on the activations,
//     weights in int8 per output channel, biases in int32 at the accumulator's scale; then the
//     accuracy guard (accuracy.cc): the QDQ model and the float one on held-out samples, each
//     quantized activation and output compared (the per-layer report), and while an output's
//     cosine misses the budget, activations go back to float, the one that helps most alone
//     first (fallback_ranking.cc); before it, the speed check (speed_check.cc) puts back in
//     float the nodes whose float kernel is faster.
// The samples are kept in memory between the passes (calibration sets are small).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "ir/topological_order.h"
#include "kiln/bench_inputs.h"
#include "kiln/model.h"
#include "kiln/session.h"
#include "onnx/model_io.h"
#include "passes/pass_context.h"
#include "quantize/calibration.h"
#include "quantize/quantize_internal.h"
#include "runtime/io_info.h"

namespace kiln::quantize {
namespace {

// A calibration method's parameters of every calibrated point, and the convs whose activation
// then takes a table of 8-bit codes (activation_choice.cc).
struct Calibration {
  CalibrationMethod method;
  std::map<std::string, QuantParams> params;
  std::set<std::string> tabled;
};

// Runs every sample with `points` as the outputs; calls use(point index, data, count) for each.
Status run_samples(const ir::Model& model, const std::vector<std::string>& points,
                   const std::vector<std::vector<Tensor>>& samples,
                   const std::function<void(size_t, const float*, int64_t)>& use) {
  KILN_ASSIGN_OR_RETURN(auto session, probe(model, points));
  for (size_t s = 0; s < samples.size(); ++s) {
    std::vector<Value> feeds;
    for (const Tensor& t : samples[s]) feeds.push_back(Value::of(t));
    auto out = session->run(feeds);
    if (!out) return out.status().with_context("calibration sample " + std::to_string(s));
    for (size_t i = 0; i < points.size(); ++i) {
      const Value& v = (*out)[i];
      if (!v.is_tensor() || v.tensor.dtype() != DType::kFloat32)
        return Status::error("calibration: " + points[i] + " is not a float32 tensor");
      use(i, v.tensor.data<float>(), v.tensor.numel());
    }
  }
  return Status::ok();
}

// Every sample `next` gives, each checked to hold one tensor per model input (`inputs`, their
// names) and no NaN in a float one: the calibrated ranges skip NaN, so a sample of NaN (a failed
// decode, an uninitialized buffer) quantized nothing and ended as a missed budget at cosine 0.
Result<std::vector<std::vector<Tensor>>> read_samples(const CalibrationReader& next,
                                                      const std::vector<std::string>& inputs, const char* what) {
  std::vector<std::vector<Tensor>> samples;
  for (;;) {
    KILN_ASSIGN_OR_RETURN(std::optional<std::vector<Tensor>> sample, next());
    if (!sample) break;
    const std::string which = std::string(what) + " sample " + std::to_string(samples.size());
    if (sample->size() != inputs.size())
      return Status::invalid_argument(which + " has " + std::to_string(sample->size()) + " tensors; the model has " +
                                      std::to_string(inputs.size()) + " inputs");
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor& t = (*sample)[i];
      if (t.dtype() != DType::kFloat32) continue;
      const float* x = t.data<float>();
      const float* nan = std::find_if(x, x + t.numel(), [](float v) { return std::isnan(v); });
      if (nan != x + t.numel())
        return Status::invalid_argument(which + ": input '" + inputs[i] + "' holds NaN (element " +
                                        std::to_string(nan - x) + ")");
    }
    samples.push_back(std::move(*sample));
  }
  return samples;
}

// Whether the budgets need both models' outputs themselves (top-1, a metric), not only their errors.
bool needs_outputs(const QuantizeOptions& o) { return o.min_top1 > 0 || static_cast<bool>(o.metric); }

// The budgets against the quantized model's outputs (`kept`, filled where needs_outputs): their
// measures into `r`, and what misses ("" when every budget holds).
Result<std::string> check_budgets(const QuantizeOptions& o, const std::vector<TensorError>& outputs,
                                  const OutputsBySample& kept, QuantizeReport* r) {
  std::string missed;
  auto miss = [&](const std::string& what, double got, double want) {
    missed += (missed.empty() ? "" : ", ") + what + " " + std::to_string(got) + " < " + std::to_string(want);
  };
  double worst = 1, features = 1;
  for (const TensorError& e : outputs) {
    worst = std::min(worst, e.cosine);
    features = std::min(features, e.feature_cosine);
  }
  if (o.min_cosine > 0 && worst < o.min_cosine) miss("outputs' cosine", worst, o.min_cosine);
  if (o.min_cosine > 0 && features < o.min_cosine) miss("outputs' mean feature cosine", features, o.min_cosine);
  if (o.min_top1 > 0) {
    r->top1 = top1_agreement(kept);
    if (*r->top1 < o.min_top1) miss("top-1 agreement", *r->top1, o.min_top1);
  }
  if (o.metric) {
    KILN_ASSIGN_OR_RETURN(double v, o.metric(kept.float_outputs, kept.quantized));
    r->metric = v;
    if (!(v >= o.min_metric)) miss("metric", v, o.min_metric);
  }
  return missed;
}

// The median of 11 runs of each model as kiln runs it (optimized) on `sample`, in ms, the models
// run in turn so that the machine's drift falls on each alike.
Result<std::vector<double>> latencies_ms(const std::vector<const ir::Model*>& models,
                                         const std::vector<Tensor>& sample) {
  std::vector<std::unique_ptr<Session>> sessions;
  for (const ir::Model* model : models) {
    KILN_ASSIGN_OR_RETURN(auto session, optimized_session(*model));
    sessions.push_back(std::move(session));
  }
  std::vector<Value> feeds;
  for (const Tensor& t : sample) feeds.push_back(Value::of(t));
  std::vector<std::vector<double>> ms(models.size());
  for (int i = 0; i < 13; ++i)
    for (size_t m = 0; m < sessions.size(); ++m) {
      const auto start = std::chrono::steady_clock::now();
      KILN_RETURN_IF_ERROR(sessions[m]->run(feeds).status());
      const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      if (i >= 2) ms[m].push_back(t);
    }
  std::vector<double> medians;
  for (std::vector<double>& v : ms) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    medians.push_back(v[v.size() / 2]);
  }
  return medians;
}

// The nodes of `speeds` faster in float, added to `o`'s keep_float; kept_float's lines for them.
std::vector<std::string> faster_in_float_lines(const std::vector<NodeSpeed>& speeds, QuantizeOptions* o) {
  std::vector<std::string> lines;
  for (const NodeSpeed& n : speeds)
    if (faster_in_float(n)) {
      o->keep_float.push_back(n.node);
      auto us = [](double t) { return std::to_string(std::lround(t)) + " us"; };
      std::string line = n.node + ": faster in float (8-bit kernel " + us(n.int8_us) + "; float " + us(n.float_us);
      if (n.conversion_us > 0) line += " with " + us(n.conversion_us) + " converting to and from 8 bits";
      lines.push_back(line + ")");
    }
  return lines;
}

// `kept` with the lines of the nodes `reasons` name ("node: why") in place of choose()'s and
// write_dynamic's "asked to (keep_float)".
std::vector<std::string> with_reasons(std::vector<std::string> kept, const std::vector<std::string>& reasons) {
  std::erase_if(kept, [&](const std::string& k) {
    return std::any_of(reasons.begin(), reasons.end(), [&](const std::string& f) {
      return k.substr(0, k.find(':')) == f.substr(0, f.find(':'));
    });
  });
  kept.insert(kept.end(), reasons.begin(), reasons.end());
  return kept;
}

const char* method_name(CalibrationMethod m) {
  switch (m) {
    case CalibrationMethod::kMinMax: return "minmax";
    case CalibrationMethod::kPercentile: return "percentile";
    case CalibrationMethod::kEntropy: return "entropy";
    case CalibrationMethod::kMse: return "mse";
    case CalibrationMethod::kAuto: break;
  }
  return "auto";
}

}  // namespace

Result<QuantizeReport> quantize_model(ir::Model& model, const CalibrationReader& next, const QuantizeOptions& options,
                                      const CalibrationReader& held_out) {
  QuantizeReport report;
  report.opset_before = static_cast<int>(model.opset(""));
  // 1. Simplify, then raise the opset where per-channel scales need it.
  OptimizeOptions simplify;
  simplify.level = 1;
  simplify.portable = true;
  KILN_RETURN_IF_ERROR(optimize(model, simplify).status().with_context("simplifying before quantization"));
  // That simplification is a step of quantizing, not the optimization a saved model records:
  // loading the QDQ model must still fuse it into the 8-bit kernels.
  std::erase_if(model.metadata, [](const auto& kv) {
    return kv.first == "kiln.optimization_level" || kv.first == "kiln.passes";
  });
  // DequantizeLinear needs opset 10, and 13 for its axis (per-channel scales); the dynamic form's
  // ops (DynamicQuantizeLinear, MatMulInteger with per-column zero points) 11.
  // A Cast from bfloat16, 13; from float16, any.
  const bool float16 = options.precision != QuantizePrecision::kInt8;
  const bool weight_only = options.weight_only_bits != 0;
  // Recurrent weights (kiln's form) take a scale per row: 13.
  const bool recurrent = !float16 && !weight_only && !options.portable && has_recurrent_weights(model);
  const int64_t needed = float16 ? (options.precision == QuantizePrecision::kBFloat16 ? 13 : 1)
                         : weight_only ? (options.weight_only_bits == 8 ? 13 : 1)
                         : options.dynamic ? (recurrent ? 13 : 11)
                         : options.per_channel || recurrent ? 13 : 10;
  if (model.opset("") < needed) {
    KILN_ASSIGN_OR_RETURN(model, onnx_io::convert_opset(model, needed));
  }
  report.opset_after = static_cast<int>(model.opset(""));

  // 2. What to quantize.
  OptimizeOptions none;
  passes::PassContext ctx(model, none);
  if (!ctx.types().inferred) return Status::error("quantize: shape inference failed on the model");
  const passes::ValueTypes& types = ctx.types();
  std::vector<std::string> inputs;
  for (const ir::ValueInfo& in : model.graph.inputs)
    if (!model.graph.initializers.count(in.name)) inputs.push_back(in.name);
  // Static quantization's plan, its kept_float lines in `chosen`.
  const bool static_int8 = !options.dynamic && !float16 && !weight_only;
  QuantizeReport chosen = report;
  const Plan full = static_int8 ? choose(model, types, options, {}, &chosen) : Plan{};
  // Static quantization of a model with nothing to put in 8 bits statically, its Conv, MatMul and
  // Gemm outputs all going on in float (magika's dense layers; a wake-word model's LSTM head): its
  // MatMul, Gemm, LSTM, GRU and RNN weights as --dynamic writes them, rather than an error.
  auto nothing_static = [&]() {
    if (chosen.kept_float.empty())
      return Status::error("quantize: the model has no Conv, MatMul or Gemm with constant weights to quantize");
    // Candidates, none worth 8 bits: say why, for the first few.
    std::string why;
    for (size_t i = 0; i < chosen.kept_float.size() && i < 3; ++i) why += (i ? "; " : "") + chosen.kept_float[i];
    if (chosen.kept_float.size() > 3) why += "; and " + std::to_string(chosen.kept_float.size() - 3) + " more";
    return Status::error("quantize: none of the model's " + std::to_string(chosen.kept_float.size()) +
                         " Conv/MatMul/Gemm nodes would run in 8 bits (" + why +
                         "), statically or with activations quantized at run time");
  };
  const bool dynamic_instead = static_int8 && full.points.empty();
  if (dynamic_instead && model.opset("") < 11) return nothing_static();  // DynamicQuantizeLinear's
  if (!static_int8 || dynamic_instead) {
    // The outputs against the float model's, on the held-out samples, else the calibration ones
    // where given; nothing to fall back on per tensor, so a missed budget is an error.
    std::vector<std::vector<Tensor>> eval;
    if (held_out) {
      KILN_ASSIGN_OR_RETURN(eval, read_samples(held_out, inputs, "held-out"));
      report.measured_on_held_out = !eval.empty();
    } else if (next) {
      KILN_ASSIGN_OR_RETURN(eval, read_samples(next, inputs, "calibration"));
    }
    ir::Model quantized = model;
    ir::deep_copy_subgraphs(quantized.graph);  // the writers edit them; the float model measured against keeps its own
    if (weight_only) {
      KILN_RETURN_IF_ERROR(write_weight_only(quantized, options, &report));
      if (report.quantized_nodes == 0)
        return Status::error("quantize --weight-only: the model has no MatMul with a constant float 2-D weight");
    } else if (float16) {
      const DType to = options.precision == QuantizePrecision::kFloat16 ? DType::kFloat16 : DType::kBFloat16;
      KILN_RETURN_IF_ERROR(write_16bit_weights(quantized, to, options, &report));
      if (report.quantized_tensors == 0)
        return Status::error("quantize --precision " + std::string(to == DType::kFloat16 ? "fp16" : "bf16") +
                             ": the model has no float32 weights to store in 16 bits");
    } else {
      KILN_RETURN_IF_ERROR(write_dynamic(quantized, types, options, &report));
      if (!options.portable) KILN_RETURN_IF_ERROR(write_recurrent_weights(quantized, options, &report));
      if (report.quantized_nodes == 0 && report.recurrent_nodes.empty())
        return dynamic_instead ? nothing_static()
                               : Status::error("quantize --dynamic: the model has no MatMul, Gemm, LSTM, GRU or RNN with constant weights");
      // The speed check, as for static quantization (no samples given: the benchmark's inputs).
      if (options.check_speed && !options.portable) {
        std::vector<Tensor> sample;
        if (!eval.empty()) {
          sample = eval[0];
        } else {
          KILN_ASSIGN_OR_RETURN(const std::vector<Value> made,
                                make_bench_inputs(runtime::user_inputs(model.graph), {}));
          for (const Value& v : made) sample.push_back(v.tensor);
        }
        KILN_ASSIGN_OR_RETURN(std::vector<NodeSpeed> speeds, time_dynamic_nodes(model, options, sample));
        QuantizeOptions trial = options;
        const std::vector<std::string> lines = faster_in_float_lines(speeds, &trial);
        if (!lines.empty()) {
          ir::Model with = model;
          ir::deep_copy_subgraphs(with.graph);
          QuantizeReport r = report;
          r.quantized_nodes = 0, r.kept_float.clear();
          KILN_RETURN_IF_ERROR(write_dynamic(with, types, trial, &r));
          KILN_ASSIGN_OR_RETURN(const std::vector<double> ms, latencies_ms({&quantized, &with}, sample));
          if (ms[1] < ms[0]) {
            quantized = std::move(with), report.quantized_nodes = r.quantized_nodes;
            report.kept_float = with_reasons(r.kept_float, lines);
          }
        }
        report.speeds = std::move(speeds);
      }
    }
    if (!eval.empty()) {
      OutputsBySample kept;
      KILN_RETURN_IF_ERROR(measure(model, quantized, {}, {}, eval, &report.layers, &report.outputs,
                                   needs_outputs(options) ? &kept : nullptr));
      KILN_ASSIGN_OR_RETURN(const std::string missed, check_budgets(options, report.outputs, kept, &report));
      if (!missed.empty()) return Status::error("quantize: the budget is missed: " + missed);
    }
    model = std::move(quantized);
    return report;
  }
  // 3. Calibrate.
  KILN_ASSIGN_OR_RETURN(std::vector<std::vector<Tensor>> samples, read_samples(next, inputs, "calibration"));
  if (samples.empty()) return Status::invalid_argument("quantize: no calibration samples");
  std::vector<std::vector<Tensor>> eval;
  if (held_out) {
    KILN_ASSIGN_OR_RETURN(eval, read_samples(held_out, inputs, "held-out"));
  }
  // No held-out samples given: every hold_out_every-th calibration sample becomes one.
  const size_t every = static_cast<size_t>(std::max(0, options.hold_out_every));
  if (eval.empty() && every > 0 && samples.size() >= 2 * every) {
    std::vector<std::vector<Tensor>> calibrate;
    for (size_t i = 0; i < samples.size(); ++i) (i % every == every - 1 ? eval : calibrate).push_back(std::move(samples[i]));
    samples = std::move(calibrate);
    report.held_out_of_calibration = static_cast<int64_t>(eval.size());
  }
  const bool on_held_out = !eval.empty();
  if (!on_held_out) eval = samples;
  // Calibration methods to try: the one asked for, or (kAuto) each of them.
  std::vector<CalibrationMethod> methods = {options.method};
  if (options.method == CalibrationMethod::kAuto)
    methods = {CalibrationMethod::kMinMax, CalibrationMethod::kPercentile, CalibrationMethod::kEntropy,
               CalibrationMethod::kMse};
  // The points calibrated: the plan's, and where it applies activations in float, those of the
  // same plan with every such activation on 8-bit codes (the convs' outputs, x * Sigmoid(x)'s
  // Sigmoid), which the choice between the two measures (activation_choice.cc).
  std::vector<std::string> calibrated = full.points;
  if (!full.float_activations.empty()) {
    std::set<std::string> all;
    for (const FloatActivation& a : full.float_activations) all.insert(a.conv_output);
    QuantizeReport scratch = report;
    for (const std::string& p : choose(model, types, options, {}, &scratch, all).points)
      if (std::find(calibrated.begin(), calibrated.end(), p) == calibrated.end()) calibrated.push_back(p);
  }
  std::vector<TensorStats> stats(calibrated.size());
  KILN_RETURN_IF_ERROR(run_samples(model, calibrated, samples, [&](size_t i, const float* x, int64_t n) {
    stats[i].add_range(x, n);
  }));
  if (methods.size() > 1 || methods[0] != CalibrationMethod::kMinMax)
    KILN_RETURN_IF_ERROR(run_samples(model, calibrated, samples, [&](size_t i, const float* x, int64_t n) {
      stats[i].add_histogram(x, n);
    }));
  // A MaxPool's output keeps its input's parameters: it picks among the input's values (its range
  // is within the input's), and the 8-bit MaxPool runs on the codes only where the two are the
  // same (a clipping method can give them apart: resnet50's stem pool then ran in float, 4 ms).
  // So do a Split's and a Slice's outputs, parts of the input: the codes move as they are, where
  // each part's own range made a table pass over it (a YOLO C2f block's halves).
  std::map<std::string, std::string> shares;  // point -> the point whose parameters it takes
  const std::set<std::string> point_set(calibrated.begin(), calibrated.end());
  for (const ir::Node& n : model.graph.nodes) {
    const bool picks = n.op_type == "MaxPool" ? n.outputs.size() == 1 : takes_parts(n);
    if (!n.domain.empty() || !picks || n.inputs.empty() || !point_set.count(n.inputs[0])) continue;
    for (const std::string& o : n.outputs)
      if (point_set.count(o)) shares[o] = n.inputs[0];
  }
  auto params_of = [&](CalibrationMethod m) {
    QuantizeOptions o = options;
    o.method = m;
    std::map<std::string, QuantParams> params;
    for (size_t i = 0; i < calibrated.size(); ++i) {
      float lo = 0, hi = 0;
      stats[i].range(o, &lo, &hi);
      params[calibrated[i]] = activation_params(lo, hi, options.signed_activations);
    }
    for (const std::string& p : calibrated)  // graph order: a chain of pools takes the first's
      if (auto it = shares.find(p); it != shares.end()) params[p] = params[it->second];
    return params;
  };
  // Each method's parameters, and the convs whose activation then takes a table.
  std::vector<Calibration> calibrations;
  for (CalibrationMethod m : methods) calibrations.push_back({m, params_of(m), {}});
  if (!full.float_activations.empty()) {
    std::vector<std::map<std::string, QuantParams>> sets;
    for (const Calibration& c : calibrations) sets.push_back(c.params);
    KILN_ASSIGN_OR_RETURN(const std::vector<std::set<std::string>> tabled,
                          tabled_activations(full.float_activations, sets, options.signed_activations,
                                             [&](const std::vector<std::string>& points, const auto& use) {
                                               return run_samples(model, points, samples, use);
                                             }));
    for (size_t i = 0; i < calibrations.size(); ++i) calibrations[i].tabled = tabled[i];
  }

  // One quantized model: the plan less `float_tensors`, written with a calibration, and how far its
  // tensors and outputs are from the float model's on the held-out samples.
  struct Attempt {
    QuantizeReport r;
    ir::Model qdq;
    Plan plan;
    std::string missed;  // the budgets missed, "" when all hold
    double score = 1;    // what the calibration methods compete on: the metric, else top-1, else the outputs'
                         // least feature cosine
  };
  // The model of the plan less `float_tensors`, written with calibration `c` into `qdq`.
  auto write = [&](const QuantizeOptions& o, const std::set<std::string>& float_tensors, const Calibration& c,
                   ir::Model* qdq, Plan* plan, QuantizeReport* r,
                   std::map<std::string, std::string>* dequantized) -> Status {
    *qdq = model;
    ir::deep_copy_subgraphs(qdq->graph);  // the writer renames what they read; the float model's stay
    *plan = choose(model, types, o, float_tensors, r, c.tabled);
    r->activations_in_float = static_cast<int64_t>(plan->float_activations.size());
    r->activations_in_tables = std::count_if(plan->nodes.begin(), plan->nodes.end(), [&](const QuantizedNode& q) {
      return c.tabled.count(model.graph.nodes[q.node].outputs[0]) > 0;
    });
    KILN_RETURN_IF_ERROR(write_qdq(*qdq, *plan, c.params, o, r, dequantized));
    if (!o.portable) {
      KILN_RETURN_IF_ERROR(quantize_float_outputs_dynamically(*qdq, types, o, r));
      KILN_RETURN_IF_ERROR(write_recurrent_weights(*qdq, o, r));
    }
    return ir::sort_topologically(qdq->graph).with_context("the quantized graph");
  };
  auto attempt = [&](const QuantizeOptions& o, const std::set<std::string>& float_tensors,
                     const Calibration& c) -> Result<Attempt> {
    Attempt a{report, model};
    std::map<std::string, std::string> dequantized;
    KILN_RETURN_IF_ERROR(write(o, float_tensors, c, &a.qdq, &a.plan, &a.r, &dequantized));
    const Plan& plan = a.plan;
    OutputsBySample kept;
    KILN_RETURN_IF_ERROR(measure(model, a.qdq, plan.points, dequantized, eval, &a.r.layers, &a.r.outputs,
                                 needs_outputs(o) ? &kept : nullptr));
    a.r.samples = static_cast<int64_t>(samples.size());
    a.r.measured_on_held_out = on_held_out;
    KILN_ASSIGN_OR_RETURN(a.missed, check_budgets(o, a.r.outputs, kept, &a.r));
    a.score = 1;
    for (const TensorError& e : a.r.outputs) a.score = std::min(a.score, e.feature_cosine);
    if (a.r.metric) a.score = *a.r.metric;
    else if (a.r.top1) a.score = *a.r.top1;
    return a;
  };

  // 4. The calibration: with kAuto, the method whose model (written with options o) is nearest
  //    the float one, that model kept in `first`.
  Calibration calibration = calibrations[0];
  std::optional<Attempt> first;
  auto pick_calibration = [&](const QuantizeOptions& o) -> Status {
    report.calibration_trials.clear();
    first.reset();
    for (const Calibration& c : calibrations) {
      if (calibrations.size() == 1) break;
      KILN_ASSIGN_OR_RETURN(Attempt a, attempt(o, {}, c));
      report.calibration_trials.emplace_back(method_name(c.method), a.score);
      if (!first || a.score > first->score) {
        calibration = c;
        first = std::move(a);
      }
    }
    report.calibration_method = method_name(calibration.method);
    if (first) {
      first->r.calibration_method = report.calibration_method;
      first->r.calibration_trials = report.calibration_trials;
    }
    return Status::ok();
  };
  KILN_RETURN_IF_ERROR(pick_calibration(options));
  const std::map<std::string, QuantParams>& params = calibration.params;

  // 5. The speed check: the nodes that run faster in float, conversions paid, go back to float,
  //    where the model so written is faster as a whole (speed_check.cc).
  QuantizeOptions current = options;
  std::vector<std::string> faster_float;  // kept_float's lines for them
  std::vector<NodeSpeed> speeds;
  if (options.check_speed && !options.portable) {
    KILN_ASSIGN_OR_RETURN(speeds, time_plan_nodes(model, full, params, options, eval[0]));
    // The MatMul/Gemm nodes the plan leaves in float go dynamic (quantize_float_outputs_dynamically):
    // those too.
    std::set<std::string> planned;
    for (const QuantizedNode& q : full.nodes) planned.insert(node_label(model.graph.nodes[q.node]));
    KILN_ASSIGN_OR_RETURN(std::vector<NodeSpeed> dynamic, time_dynamic_nodes(model, options, eval[0], planned));
    speeds.insert(speeds.end(), dynamic.begin(), dynamic.end());
    QuantizeOptions trial = options;
    std::vector<std::string> lines = faster_in_float_lines(speeds, &trial);
    if (!lines.empty()) {
      if (!first) {
        KILN_ASSIGN_OR_RETURN(Attempt all, attempt(options, {}, calibration));
        first = std::move(all);
      }
      KILN_ASSIGN_OR_RETURN(Attempt with, attempt(trial, {}, calibration));
      KILN_ASSIGN_OR_RETURN(const std::vector<double> ms, latencies_ms({&first->qdq, &with.qdq}, eval[0]));
      if (ms[1] < ms[0]) {
        current = trial;
        faster_float = std::move(lines);
        first = std::move(with);
      }
    }
  }

  // 6. While an output misses the budget, activations go back to float (with the nodes writing
  //    them), in the order of what each alone does to the budgets (fallback_ranking.cc), ranked
  //    at the first miss (the calibrated ranges stay: fewer points, the same values).
  std::set<std::string> float_tensors;
  std::vector<std::string> fallbacks;
  std::optional<ir::Model> all_8bit;  // the model before any fallback, to time against
  std::optional<std::vector<Fallback>> ranked;
  size_t next_fallback = 0;  // in ranked
  // Where auto's 7-bit weights miss the budget even after the fallbacks: 8-bit ones (the exact
  // 16-bit tiles of a CPU without VNNI), the calibration method picked again on them (the one
  // nearest the float model with 7-bit weights needs not be with 8: yolov8n's mse took 8 fallbacks
  // after widening where percentile, 8-bit from the start, took 4), the fallbacks started again
  // (widen_weights_if_missed).
  const QuantizeOptions before_fallbacks = current;
  auto widened = [&](const std::string& missed) -> Result<bool> {
    if (!current.reduce_range || !options.widen_weights_if_missed) return false;
    report.seven_bit_weights_missed = missed;
    current = before_fallbacks;
    current.reduce_range = false;
    float_tensors.clear(), fallbacks.clear(), ranked.reset(), next_fallback = 0;
    KILN_RETURN_IF_ERROR(pick_calibration(current));
    return true;
  };
  for (;;) {
    Attempt a;
    if (first) {
      a = std::move(*first);
      first.reset();
    } else {
      KILN_ASSIGN_OR_RETURN(a, attempt(current, float_tensors, calibration));
    }
    if (fallbacks.empty()) all_8bit = a.qdq;
    QuantizeReport& r = a.r;  // (an attempt after widened() copied its seven_bit_weights_missed)
    if (a.missed.empty() || a.plan.points.empty()) {
      if (!a.missed.empty()) {
        KILN_ASSIGN_OR_RETURN(const bool again, widened(a.missed));
        if (again) continue;
        return Status::error("quantize: nothing left in 8 bits, and the budget is still missed: " + a.missed);
      }
      // The speed check's and the guard's fallbacks with their reasons, not choose()'s "asked to".
      std::vector<std::string> reasons = faster_float;
      reasons.insert(reasons.end(), fallbacks.begin(), fallbacks.end());
      r.kept_float = with_reasons(r.kept_float, reasons);
      r.speeds = std::move(speeds);
      if (!fallbacks.empty()) {  // what they cost in speed
        KILN_ASSIGN_OR_RETURN(const std::vector<double> ms, latencies_ms({&*all_8bit, &a.qdq}, eval[0]));
        r.latency_all_8bit_ms = ms[0], r.latency_ms = ms[1];
      }
      model = std::move(a.qdq);
      return std::move(r);
    }
    if (static_cast<int>(fallbacks.size()) >= options.max_fallbacks) {
      KILN_ASSIGN_OR_RETURN(const bool again, widened(a.missed));
      if (again) continue;
      return Status::error("quantize: the budget is missed after " + std::to_string(fallbacks.size()) +
                           " fallbacks to float: " + a.missed +
                           " (lower it, allow more fallbacks, or calibrate on more data)");
    }
    if (!ranked) {
      std::map<std::string, std::string> writer;  // the plan's nodes by their 8-bit output
      for (const QuantizedNode& q : a.plan.nodes) writer[q.output] = node_label(model.graph.nodes[q.node]);
      std::vector<Fallback> candidates;
      for (const std::string& t : a.plan.points) candidates.push_back({t, writer.count(t) ? writer[t] : ""});
      auto without = [&](const Fallback& f) -> Result<ir::Model> {
        QuantizeOptions o = current;
        if (!f.node.empty()) o.keep_float.push_back(f.node);
        std::set<std::string> fts = float_tensors;
        fts.insert(f.tensor);
        ir::Model qdq;
        Plan plan;
        QuantizeReport scratch = report;
        std::map<std::string, std::string> dequantized;
        KILN_RETURN_IF_ERROR(write(o, fts, calibration, &qdq, &plan, &scratch, &dequantized));
        return qdq;
      };
      KILN_ASSIGN_OR_RETURN(ranked, rank_fallbacks(model, a.qdq, candidates, without, current, eval));
    }
    while (next_fallback < ranked->size() &&
           !std::count(a.plan.points.begin(), a.plan.points.end(), (*ranked)[next_fallback].tensor))
      ++next_fallback;  // gone with an earlier fallback's node
    if (next_fallback == ranked->size()) {
      KILN_ASSIGN_OR_RETURN(const bool again, widened(a.missed));
      if (again) continue;
      return Status::error("quantize: the budget is missed with every activation tried in float: " + a.missed);
    }
    const Fallback& f = (*ranked)[next_fallback++];
    const std::string why = ": accuracy guard (" + a.missed + "; " + std::to_string(next_fallback) + " of " +
                            std::to_string(ranked->size()) + " by what it alone in float does to the budget)";
    float_tensors.insert(f.tensor);
    if (!f.node.empty()) {
      current.keep_float.push_back(f.node);
      fallbacks.push_back(f.node + why);
    } else {
      fallbacks.push_back(f.tensor + " (activation)" + why);
    }
  }
}

}  // namespace kiln::quantize
