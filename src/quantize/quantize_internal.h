// The quantizer's steps (quantize.cc runs them; quantization_points.cc chooses, qdq_writer.cc
// writes).
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/quantize.h"
#include "kiln/session.h"
#include "passes/fusions/epilogue_match.h"
#include "passes/pass_context.h"
#include "quantize/calibration.h"

namespace kiln::quantize {

// A Conv, MatMul or Gemm whose activation input, weights (and bias) go to 8 bits.
struct QuantizedNode {
  size_t node;          // index in the graph's nodes
  size_t weight_input;  // 1 (Conv, MatMul, Gemm's B)
  int64_t weight_axis;  // the output-channel axis of the weights: 0 (Conv, Gemm with transB), 1 (MatMul, Gemm)
  int bias_input;       // 2 (Conv, Gemm's C when 1-D), or -1
  // The tensor its 8-bit output is: its own, or that of the Relu or Clip after it, or (kiln's form)
  // of the activation the 8-bit conv applies in float.
  std::string output = {};
};

// A chosen Conv whose activation (SiLU, Sigmoid, ...) kiln's form applies in float to its sums,
// its own output left float, the point after the activation.
struct FloatActivation {
  std::string conv_output;
  std::string output;          // the activation's
  std::string sigmoid_output;  // x * Sigmoid(x)'s Sigmoid's (a point of the table form), else ""
  passes::epilogue::Activation act;
};

struct Plan {
  std::vector<QuantizedNode> nodes;
  std::vector<std::string> points;  // the activations given a Q/DQ pair, each once, in graph order
  std::vector<FloatActivation> float_activations;
};

// The nodes and activations to quantize in `model` (simplified, its types in `types`), but none
// of the activations in `float_tensors` (the accuracy guard's). The convs whose outputs are in
// `tabled` take their activation on 8-bit codes (a table, as the portable form does), their own
// output quantized, where kiln's form would apply it in float (activation_choice.cc).
Plan choose(const ir::Model& model, const passes::ValueTypes& types, const QuantizeOptions& options,
            const std::set<std::string>& float_tensors, QuantizeReport* report,
            const std::set<std::string>& tabled = {});

// Runs the calibration samples with `points` as the outputs; calls use(point index, data, count)
// for each (quantize.cc).
using SampleRunner = std::function<Status(const std::vector<std::string>& points,
                                          const std::function<void(size_t, const float*, int64_t)>& use)>;

// Of `activations` (a plan's), the conv outputs whose activation a table of 8-bit codes gives
// nearly as well as the float one, for each of `params` (a calibration method's parameters of
// both forms' points; codes s8 where is_signed): the output's squared error through the table
// (the conv's output quantized, the activation of its codes quantized again) at most
// kTableNoiseRatio times that of the output's codes alone, over the samples `run` runs.
inline constexpr double kTableNoiseRatio = 1.2;
Result<std::vector<std::set<std::string>>> tabled_activations(
    const std::vector<FloatActivation>& activations, const std::vector<std::map<std::string, QuantParams>>& params,
    bool is_signed, const SampleRunner& run);

// Rewrites `model` to QDQ form: the plan's activations with the given parameters, its nodes'
// weights and biases quantized; `dequantized` gets each activation's DequantizeLinear output.
// Nodes stay in place (the caller sorts the graph).
Status write_qdq(ir::Model& model, const Plan& plan, const std::map<std::string, QuantParams>& params,
                 const QuantizeOptions& options, QuantizeReport* report,
                 std::map<std::string, std::string>* dequantized);

// Dynamic quantization's rewrite of every MatMul and Gemm with constant 2-D weights (dynamic.cc).
Status write_dynamic(ir::Model& model, const passes::ValueTypes& types, const QuantizeOptions& options,
                     QuantizeReport* report);

// Static quantization in kiln's form: the MatMul/Gemm nodes still in float with constant 2-D
// weights (choose()'s, whose output goes on in float: a classifier's logits) go through
// write_dynamic, int8 weights and rows quantized at run time (a GEMV then streams a quarter of
// the weight bytes). Their kept_float lines move to report->dynamic_nodes (dynamic.cc).
Status quantize_float_outputs_dynamically(ir::Model& model, const passes::ValueTypes& types,
                                          const QuantizeOptions& options, QuantizeReport* report);

// kiln's form, static and dynamic: the constant W and R of every LSTM, GRU and RNN in int8, a
// scale per row, behind DequantizeLinear + Reshape (recurrent_weights.cc); whether a model has one.
Status write_recurrent_weights(ir::Model& model, const QuantizeOptions& options, QuantizeReport* report);
bool has_recurrent_weights(const ir::Model& model);

// Float32 weights of `model` stored as `to` (float16 or bfloat16) behind a Cast to float32
// (float16_weights.cc).
Status write_16bit_weights(ir::Model& model, DType to, const QuantizeOptions& options, QuantizeReport* report);

// Weight-only quantization of the MatMuls' constant weights (weight_only.cc).
Status write_weight_only(ir::Model& model, const QuantizeOptions& options, QuantizeReport* report);

// A weight in int8, symmetric (zero point 0): scale max|w| / levels per channel along `axis` (or
// one for the whole tensor), codes within +-levels (127, or 63 for 7-bit weights).
struct QuantizedWeight {
  Tensor q, scale, zero_point;
};
QuantizedWeight quantize_weight(const Tensor& w, int64_t axis, bool per_channel, float levels);

// The least cosine over a sample's outputs, the float model's `ref` against `got` (1 where both
// are zero, 0 where one is; non-float outputs skipped), and the outputs of `model` that are
// compared: its float32 ones, and those of unknown type (accuracy.cc).
double worst_cosine(const std::vector<Tensor>& ref, const std::vector<Tensor>& got);
std::vector<std::string> float_outputs(const ir::Model& model);

// A session running `model` as written (no optimization) with `outputs` as its outputs: what
// calibration and the accuracy measurements read the intermediate tensors from.
Result<std::unique_ptr<Session>> probe(const ir::Model& model, const std::vector<std::string>& outputs);

// Whether `options` asks for node n (by name, or by its first output's) to stay float.
bool asked_float(const QuantizeOptions& options, const ir::Node& n);
// Whether n's outputs are parts of its first input, its other inputs constants (Split, Slice):
// the quantizer's carriers whose parts keep the input's parameters (quantization_points.cc).
bool takes_parts(const ir::Node& n);

// The name reports and keep_float know node n by: its name, else its first output's.
inline std::string node_label(const ir::Node& n) { return n.name.empty() ? n.outputs[0] : n.name; }

// A session running `model` as kiln runs it (optimized by default), what the speed check and the
// guard's latencies time (speed_check.cc).
Result<std::unique_ptr<Session>> optimized_session(const ir::Model& model);

// The float outputs of both models on each held-out sample: [sample][output].
struct OutputsBySample {
  std::vector<std::vector<Tensor>> float_outputs, quantized;
};

// The errors of `qdq` against `fp32` on `samples` (accuracy.cc): each point as its
// DequantizeLinear (`dequantized`) gives it, and each float output; `kept` (optional) gets the
// outputs themselves.
Status measure(const ir::Model& fp32, const ir::Model& qdq, const std::vector<std::string>& points,
               const std::map<std::string, std::string>& dequantized, const std::vector<std::vector<Tensor>>& samples,
               std::vector<TensorError>* layers, std::vector<TensorError>* outputs, OutputsBySample* kept = nullptr);

// The fraction of rows (each output's last axis, every sample) whose argmax is the same in both.
double top1_agreement(const OutputsBySample& outputs);
// The least, over the outputs of rank 3 or more, of TensorError::feature_cosine (the mean of each
// feature's cosine over the samples); 1 where there are none.
double least_feature_cosine(const OutputsBySample& outputs);

// Times each node of `plan` in `model` in 8 bits (with `params`) and in float, on the values it
// reads when the float model runs `sample`. A node whose output is not one of the plan's points
// (directly or through its clamp), or that fails to run cut out on its own, is left out.
Result<std::vector<NodeSpeed>> time_plan_nodes(const ir::Model& model, const Plan& plan,
                                               const std::map<std::string, QuantParams>& params,
                                               const QuantizeOptions& options, const std::vector<Tensor>& sample);

// The same for dynamic quantization: each MatMul and Gemm write_dynamic takes (with the bias Add
// kiln's form takes in), but those `skip` names, in kiln's dynamic form and in float; no
// conversions (both read and write float).
Result<std::vector<NodeSpeed>> time_dynamic_nodes(const ir::Model& model, const QuantizeOptions& options,
                                                  const std::vector<Tensor>& sample,
                                                  const std::set<std::string>& skip = {});

// Whether `s` runs faster in float, its conversions to and from the 8-bit chain paid, by a margin
// (10 %, and 10 us).
bool faster_in_float(const NodeSpeed& s);

// A fallback the accuracy guard may take: an activation back to float, with the plan's node
// writing it ("" where none does), and how near the budgets that alone leaves the model.
struct Fallback {
  std::string tensor, node;
  double margin = 0;
};

// How near the budgets of `o` the quantized outputs `kept` are: the least of (worst output
// cosine - min_cosine), with `features` (least_feature_cosine - min_cosine) too, (top-1
// agreement - min_top1), (metric - min_metric) over the budgets set; negative where one is
// missed (fallback_ranking.cc).
Result<double> budget_margin(const QuantizeOptions& o, const OutputsBySample& kept, bool features);

// `candidates`, best first: each one's model `without` it (`quantized` with that fallback alone)
// run on `samples` (for a cosine budget alone that the outputs' features meet, the few on which
// `quantized` misses most) against `fp32`, its budget_margin into its margin (fallback_ranking.cc).
Result<std::vector<Fallback>> rank_fallbacks(const ir::Model& fp32, const ir::Model& quantized,
                                             const std::vector<Fallback>& candidates,
                                             const std::function<Result<ir::Model>(const Fallback&)>& without,
                                             const QuantizeOptions& o, std::vector<std::vector<Tensor>> samples);

// What Model::quantize runs on its IR.
Result<QuantizeReport> quantize_model(ir::Model& model, const CalibrationReader& next, const QuantizeOptions& options,
                                      const CalibrationReader& held_out);

}  // namespace kiln::quantize
