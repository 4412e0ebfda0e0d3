// Post-training quantization (`kiln quantize`, kiln.quantize in Python): a float model and
// calibration samples in; the same model out with its convolutions, matrix products and the ops
// between them (residual Adds, pooling, Concat) stated in 8 bits as standard QDQ ONNX
// (QuantizeLinear / DequantizeLinear around float ops: what ONNX Runtime's quantize_static
// writes, and ONNX Runtime, TensorRT and OpenVINO run in 8 bits). kiln's optimizer then fuses
// each such op into its 8-bit kernel; saved without optimizing, the model is portable.
//
//   auto model = kiln::Model::load("model.onnx");
//   auto report = model->quantize(reader, {});   // reader: the calibration samples
//   model->save("model.int8.onnx");
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln {

// How a tensor's calibrated values become its 8-bit range.
enum class CalibrationMethod {
  kAuto,        // each of the four below, keeping the one whose quantized model's outputs are
                // nearest the float model's on the held-out samples (the guard's)
  kMinMax,      // the whole range seen
  kPercentile,  // |x| up to the given percentile of the values seen (outliers clip)
  kEntropy,     // the clipping threshold whose 8-bit histogram keeps most information (KL
                // divergence, TensorRT's calibrator)
  kMse,         // the threshold with the least mean squared quantization error
};

// What quantize() lowers the model to.
enum class QuantizePrecision {
  kInt8,      // 8-bit integer convolutions and matrix products (calibrated, or `dynamic`)
  kFloat16,   // float weights stored as float16 and widened back to float32 at load: half the
              // model's size on any CPU, float32 compute (values beyond float16's range stay)
  kBFloat16,  // the same with bfloat16 (float32's range, 8 bits of mantissa)
};

struct QuantizeOptions {
  QuantizePrecision precision = QuantizePrecision::kInt8;
  CalibrationMethod method = CalibrationMethod::kAuto;
  double percentile = 99.999;  // kPercentile
  // Weights: one scale per output channel (filter, column), else one for the whole tensor.
  bool per_channel = true;
  // 7-bit weights (|w| <= 63): a u8 x s8 pair sum then stays within 16 bits, so CPUs without VNNI
  // run the convs and MatMuls (static or dynamic) on vpmaddubsw (kernels/cpu/qconv's kAvx2Bytes
  // tile, gemm_u8s8's AVX2 tile: ~1.3x their exact 16-bit routes) at a little accuracy (ONNX
  // Runtime's reduce_range). The CLI and Python turn it on where the CPU in use lacks VNNI
  // unless told otherwise.
  bool reduce_range = false;
  // With reduce_range (static quantization): where the 7-bit model misses the accuracy budget
  // even after the guard's fallbacks, 8-bit weights (those CPUs' exact 16-bit tiles), the
  // calibration method (kAuto) picked again and the fallbacks started again: reduce_range
  // false's model, but for the speed check's choices (timed with 7-bit weights). The CLI's and
  // Python's --weight-bits auto set it (the zoo's yolov8n on AVX2: 7-bit weights missed the
  // default budget after 16 fallbacks; 8-bit ones hold it).
  bool widen_weights_if_missed = false;
  // Activations: uint8 with a zero point (asymmetric), or int8 with zero point 0 (symmetric).
  bool signed_activations = false;
  // Dynamic quantization instead: MatMul and Gemm nodes with constant 2-D weights get int8 weights
  // (per column, or per tensor) and quantize their activation per tensor at each run
  // (DynamicQuantizeLinear -> MatMulInteger, as ONNX Runtime's quantize_dynamic writes them). No
  // calibration samples; the accuracy guard does not apply (held-out samples, if given, measure
  // the outputs).
  bool dynamic = false;
  // kiln's DynamicQuantMatMul (dynamic, not portable) with 7-bit rows (codes 0-127: row_bits 7,
  // docs/ops.md): a u8 x s8 pair sum then stays within 16 bits with 8-bit weights, so CPUs without
  // VNNI multiply on vpmaddubsw (~1.4x their exact 16-bit route) at a half step's precision more
  // noise on each row (MiniLM's sentence embeddings: cosine min 0.9962 against 0.9989). The CLI
  // and Python pick 7 where the CPU in use lacks VNNI unless told otherwise; else 8.
  int dynamic_row_bits = 8;
  // Weight-only quantization instead (4 or 8; 0: off): each MatMul with a constant float 2-D weight
  // keeps float activations and gets its weight in 8 bits (int8 per column behind a
  // DequantizeLinear, standard QDQ) or 4 bits (ONNX Runtime's MatMulNBits, a scale per
  // `block_size` values along K): the model's size, not its compute, goes down.
  int weight_only_bits = 0;
  int64_t block_size = 32;
  // Standard ONNX only. It changes what --dynamic writes: ONNX Runtime's chain, its activations
  // quantized per tensor, instead of kiln's DynamicQuantMatMul, which quantizes them per row.
  bool portable = false;
  // Nodes (by name, or by the name of their first output) left in float.
  std::vector<std::string> keep_float;
  // The accuracy guard: every float output of the quantized model must keep at least this cosine
  // similarity to the float model's on each held-out sample (`held_out`, else the calibration
  // samples), and so must its mean feature cosine (TensorError::feature_cosine: a detector's
  // class scores count beside its box coordinates, which outweigh them in the output's cosine);
  // activations go back to float, with the Conv/MatMul/Gemm producing them, the one
  // that alone in float brings the outputs nearest the budgets first, until it does. 0 turns the
  // guard off.
  double min_cosine = 0.99;
  // Further budgets the guard holds the same way (each 0 / empty: not checked): the fraction of
  // held-out rows (every output's last axis: a classifier's classes) whose argmax is the float
  // model's; and a metric of the user's over the outputs of both models on every held-out sample
  // (float_outputs[sample][output], quantized likewise), at least min_metric.
  double min_top1 = 0;
  std::function<Result<double>(const std::vector<std::vector<Tensor>>& float_outputs,
                               const std::vector<std::vector<Tensor>>& quantized_outputs)>
      metric;
  double min_metric = 0;
  // At most this many fallbacks before the guard gives up (an error naming the budget).
  int max_fallbacks = 16;
  // Without `held_out` samples, static quantization holds every `hold_out_every`-th calibration
  // sample back from calibrating for the guard to measure on (data the ranges never saw, as the
  // budget means), when there are at least 2 * hold_out_every samples; 0: the guard measures on
  // the calibration samples.
  int hold_out_every = 4;
  // The speed check: each 8-bit Conv/MatMul/Gemm is timed on its own against the float node, on
  // the values it sees in the first held-out sample, and goes back to float where float wins with
  // its conversions to and from 8 bits paid (kept_float says so, with the times); the model with
  // those nodes in float is then timed against the one without, and kept only if faster. With
  // `dynamic`, each MatMul/Gemm the same way (on generated inputs where no samples are given). Not
  // with `portable` (its runtime is another engine's). Timings decide, so another machine may keep
  // other nodes in float; false gives the same model everywhere.
  bool check_speed = true;
};

// `kiln quantize --weight-bits` / kiln.quantize's weight_bits ("auto", "7" or "8"; "4" is
// weight-only's) on the CPU in use, into o's reduce_range, widen_weights_if_missed and
// dynamic_row_bits: auto takes vpmaddubsw's exact route where the CPU lacks VNNI (7-bit weights,
// or for dynamic quantization 7-bit rows). Set o's dynamic, portable and weight_only_bits first.
void apply_weight_bits(QuantizeOptions& o, const std::string& weight_bits);

// One calibration sample: a tensor per model input, in the order of the model's inputs; nullopt
// once there are no more. An error stops the quantization with it.
using CalibrationReader = std::function<Result<std::optional<std::vector<Tensor>>>()>;

// How far a quantized tensor is from the float model's: signal-to-quantization-noise ratio
// 10 log10(sum x^2 / sum (x - q)^2) in dB and cosine similarity, over the held-out samples (the
// worst sample's cosine).
struct TensorError {
  std::string tensor;
  double sqnr_db = 0, cosine = 1;
  // Outputs of rank 3 or more: the mean over their features (the smallest axis of more than one
  // element after the batch: a detector's box coordinates and class scores, a transformer's
  // tokens) of each feature's cosine over the samples, so that small features count as much as
  // large ones; else the cosine. What calibration method auto compares.
  double feature_cosine = 1;
};

// One candidate node timed on its own by the speed check (QuantizeOptions::check_speed), in us:
// its 8-bit kernel (`int8_ops`: the ops it became), the QuantizeLinear, DequantizeLinear and layout
// conversions at its edges, and the float node with its reorders.
struct NodeSpeed {
  std::string node;  // its name, else its first output's
  std::string int8_ops;
  double int8_us = 0, conversion_us = 0, float_us = 0;
};

// What quantize() did.
struct QuantizeReport {
  int64_t samples = 0;            // calibration samples read
  int64_t quantized_nodes = 0;    // Conv, MatMul, Gemm nodes whose inputs and weights went 8-bit
  int64_t quantized_tensors = 0;  // activations given a QuantizeLinear/DequantizeLinear pair (16-bit
                                  // precisions: weights stored in 16 bits)
  int64_t removed_clamps = 0;     // Relus and Clips whose QuantizeLinear saturates at their bounds, dropped
  int64_t weight_bytes_before = 0, weight_bytes_after = 0;  // 16-bit and weight-only: the weights' bytes
  int opset_before = 0, opset_after = 0;  // the default domain's: raised to 13 for per-channel scales
  std::vector<std::string> kept_float;    // quantizable nodes left in float, with why: "name: reason"
  // Static quantization, kiln's form: the MatMul/Gemm nodes whose output goes on in float (a
  // classifier's logits), quantized dynamically instead (int8 weights, rows at run time).
  std::vector<std::string> dynamic_nodes;
  // kiln's form: the LSTM/GRU/RNN nodes whose W and R went to int8 with a scale per row (their
  // products then round h and x to 16 bits at run time).
  std::vector<std::string> recurrent_nodes;
  // Static quantization, kiln's form: the convs whose activation (SiLU, Sigmoid, Tanh, HardSwish,
  // HardSigmoid, LeakyRelu) runs in float on their sums before the 8-bit output, and those whose
  // activation a table of the conv's 8-bit codes gives nearly as well, as fast as it runs.
  int64_t activations_in_float = 0, activations_in_tables = 0;
  // The per-layer report: each quantized activation as its DequantizeLinear gives it, against the
  // float model's value, and each output; measured on held-out samples when `held_out` was given.
  std::vector<TensorError> layers, outputs;
  bool measured_on_held_out = false;
  int64_t held_out_of_calibration = 0;  // calibration samples held back for the guard (hold_out_every)
  // The calibration method used ("minmax", ...) and, with kAuto, each method tried with its score
  // before any fallback: the metric where one is given, else top-1 where asked for, else the
  // outputs' least feature_cosine.
  std::string calibration_method;
  std::vector<std::pair<std::string, double>> calibration_trials;
  std::optional<double> top1, metric;  // the budgets' measures, where asked for
  // With guard fallbacks: the median latency in ms (kiln's optimized run, the first held-out
  // sample) of the model with every candidate in 8 bits and of the model written: what the
  // fallbacks cost.
  double latency_all_8bit_ms = 0, latency_ms = 0;
  // QuantizeOptions::widen_weights_if_missed: the budget the 7-bit weights missed after their
  // fallbacks ("" where they held it, or were not asked for); the weights written are 8-bit then.
  std::string seven_bit_weights_missed;
  // The speed check's timings, each candidate node's (check_speed).
  std::vector<NodeSpeed> speeds;
};

}  // namespace kiln
