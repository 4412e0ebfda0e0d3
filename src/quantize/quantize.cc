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
//     weights in int8 per output channel, biases in int32 at the accumulator's scale.
// The samples are kept in memory between the passes (calibration sets are small).
#include <map>
#include <set>

#include "ir/topological_order.h"
#include "kiln/model.h"
#include "kiln/session.h"
#include "onnx/model_io.h"
#include "passes/pass_context.h"
#include "quantize/calibration.h"
#include "quantize/quantize_internal.h"

namespace kiln::quantize {
namespace {

// Runs every sample with `points` as the outputs; calls use(point index, data, count) for each.
Status run_samples(const ir::Model& model, const std::vector<std::string>& points,
                   const std::vector<std::vector<Tensor>>& samples,
                   const std::function<void(size_t, const float*, int64_t)>& use) {
  auto probe = std::make_shared<ir::Model>(model);
  probe->graph.outputs.clear();
  for (const std::string& p : points) probe->graph.outputs.push_back(ir::ValueInfo{p, ir::TypeInfo::tensor(DType::kFloat32), ""});
  SessionOptions options;
  options.optimize_level = 0;  // every point must be computed as it is
  KILN_ASSIGN_OR_RETURN(auto session, Session::create(probe, options));
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

}  // namespace

Result<QuantizeReport> quantize_model(ir::Model& model, const CalibrationReader& next, const QuantizeOptions& options) {
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
  // DequantizeLinear needs opset 10, and 13 for its axis (per-channel scales).
  const int64_t needed = options.per_channel ? 13 : 10;
  if (model.opset("") < needed) {
    KILN_ASSIGN_OR_RETURN(model, onnx_io::convert_opset(model, needed));
  }
  report.opset_after = static_cast<int>(model.opset(""));

  // 2. What to quantize.
  Plan plan;
  {
    OptimizeOptions none;
    passes::PassContext ctx(model, none);
    if (!ctx.types().inferred) return Status::error("quantize: shape inference failed on the model");
    plan = choose(model, ctx.types(), options, &report);
  }
  if (plan.points.empty()) return Status::error("quantize: the model has no Conv, MatMul or Gemm with constant weights to quantize");

  // 3. Calibrate.
  std::vector<std::vector<Tensor>> samples;
  const size_t inputs = [&] {
    size_t n = 0;
    for (const ir::ValueInfo& in : model.graph.inputs) n += !model.graph.initializers.count(in.name);
    return n;
  }();
  for (;;) {
    KILN_ASSIGN_OR_RETURN(std::optional<std::vector<Tensor>> sample, next());
    if (!sample) break;
    if (sample->size() != inputs)
      return Status::error("calibration sample " + std::to_string(samples.size()) + " has " +
                           std::to_string(sample->size()) + " tensors; the model has " + std::to_string(inputs) +
                           " inputs");
    samples.push_back(std::move(*sample));
  }
  if (samples.empty()) return Status::error("quantize: no calibration samples");
  report.samples = static_cast<int64_t>(samples.size());
  std::vector<TensorStats> stats(plan.points.size());
  KILN_RETURN_IF_ERROR(run_samples(model, plan.points, samples, [&](size_t i, const float* x, int64_t n) {
    stats[i].add_range(x, n);
  }));
  if (options.method != CalibrationMethod::kMinMax)
    KILN_RETURN_IF_ERROR(run_samples(model, plan.points, samples, [&](size_t i, const float* x, int64_t n) {
      stats[i].add_histogram(x, n);
    }));
  std::map<std::string, QuantParams> params;
  for (size_t i = 0; i < plan.points.size(); ++i) {
    float lo = 0, hi = 0;
    stats[i].range(options, &lo, &hi);
    params[plan.points[i]] = activation_params(lo, hi, options.signed_activations);
  }

  // 4. Write the QDQ model.
  KILN_RETURN_IF_ERROR(write_qdq(model, plan, params, options, &report));
  KILN_RETURN_IF_ERROR(ir::sort_topologically(model.graph).with_context("the quantized graph"));
  return report;
}

}  // namespace kiln::quantize
