// `kiln quantize MODEL -o OUT`: static post-training quantization (kiln/quantize.h) calibrated on
// the user's samples: --calib FILE.npy (samples stacked along axis 0, for a one-input model),
// --calib DIR (one .npy or .pb file or image a sample, for a one-input model, in name order;
// images decoded, resized to the input and normalized with --mean/--std, laid out by --layout), or
// --calib-random N (generated, with a warning: the ranges are then not those of real data).
// The accuracy guard (--budget cosine=X, on --eval held-out samples, else every 4th --calib sample
// held back from calibrating)
// puts the most sensitive nodes back in float until every output keeps that cosine to the float
// model's, and says which; --report prints every quantized tensor's SQNR and cosine. Saves kiln's
// fused 8-bit form (the model optimized) or, with --portable, the QDQ model that ONNX Runtime and
// other runtimes load.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <random>
#include <cstring>
#include <sstream>

#include "cli.h"
#include "io_files.h"
#include "kiln/bench_inputs.h"
#include "kiln/image_input.h"
#include "kiln/model.h"
#include "kiln/quantize.h"
#include "kiln/value_io.h"
#include "npy.h"

namespace kiln::cli {
namespace {

struct Options {
  std::string model, out, calib, eval, method = "auto", keep_float, budget = "cosine=0.99";
  int64_t calib_random = 0, max_samples = 0;
  int max_fallbacks = 16;
  bool no_speed_check = false;
  int hold_out_every = 4;
  double percentile = 99.999;
  bool per_tensor = false, signed_activations = false, portable = false, report = false, dynamic = false;
  std::string weight_bits = "auto", precision = "int8";
  std::vector<float> mean = {0.0f}, std = {1.0f};  // calibration images
  std::string layout = "auto";
  bool weight_only = false;
  int64_t block_size = 32;
  InputShapes shape;
};

// --budget cosine=X[,top1=Y] (each in [0, 1]; cosine=0 without top1 turns the guard off): into
// `o`'s min_cosine and min_top1.
Status parse_budget(const std::string& text, QuantizeOptions* o) {
  o->min_cosine = 0, o->min_top1 = 0;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) {
    const size_t eq = part.find('=');
    const std::string key = part.substr(0, eq == std::string::npos ? part.size() : eq);
    char* end = nullptr;
    const double v = eq == std::string::npos ? -1 : std::strtod(part.c_str() + eq + 1, &end);
    if ((key != "cosine" && key != "top1") || eq == std::string::npos || *end != '\0' || !(v >= 0 && v <= 1))
      return Status::invalid_argument("--budget expects cosine=X and/or top1=Y, each in [0, 1], comma-separated; got '" +
                                      text + "'");
    (key == "cosine" ? o->min_cosine : o->min_top1) = v;
  }
  return Status::ok();
}

Result<CalibrationMethod> parse_method(const std::string& m) {
  if (m == "auto") return CalibrationMethod::kAuto;
  if (m == "minmax") return CalibrationMethod::kMinMax;
  if (m == "percentile") return CalibrationMethod::kPercentile;
  if (m == "entropy") return CalibrationMethod::kEntropy;
  if (m == "mse") return CalibrationMethod::kMse;
  return Status::invalid_argument("--method must be auto, minmax, percentile, entropy or mse, got '" + m + "'");
}

// Samples from --calib: a stacked .npy, or a folder of one file per sample.
// How calibration images become the model's one input: its shape (static dims, or --shape) gives
// the size and, with --layout auto, the layout: [N, C, H, W] or [N, H, W, C] with C 1 or 3.
Result<ImageInput> image_input(const std::vector<IoInfo>& inputs, const Options& o) {
  KILN_ASSIGN_OR_RETURN(std::vector<Value> like, make_bench_inputs(inputs, o.shape));
  const Shape& s = like[0].tensor.shape();
  if (like[0].tensor.dtype() != DType::kFloat32 || s.size() != 4)
    return Status::invalid_argument("--calib images need a float32 input of rank 4; " + inputs[0].name + " is " +
                                    dtype_name(like[0].tensor.dtype()) + " " + shape_str(s));
  ImageInput how;
  const bool chw = s[1] == 1 || s[1] == 3, hwc = s[3] == 1 || s[3] == 3;
  if (o.layout == "nchw" || (o.layout == "auto" && chw)) how.channels_last = false;
  else if (o.layout == "nhwc" || (o.layout == "auto" && hwc)) how.channels_last = true;
  else return Status::invalid_argument("--layout auto: " + inputs[0].name + " " + shape_str(s) +
                                       " has no 1- or 3-channel axis at 1 or 3 (give --layout nchw or nhwc)");
  how.channels = how.channels_last ? s[3] : s[1];
  how.height = how.channels_last ? s[1] : s[2];
  how.width = how.channels_last ? s[2] : s[3];
  how.mean = o.mean, how.std = o.std;
  return how;
}

Result<std::vector<std::vector<Tensor>>> read_calibration(const std::string& path, const std::vector<IoInfo>& inputs,
                                                         const Options& o) {
  if (inputs.size() != 1)
    return Status::invalid_argument("--calib reads samples for a one-input model; this one has " +
                                    std::to_string(inputs.size()) + " inputs (use kiln.quantize in Python)");
  const int64_t max_samples = o.max_samples;
  std::vector<std::vector<Tensor>> samples;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(path, ec)) {
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file() && (ext == ".npy" || ext == ".pb" || is_image_file(e.path().string())))
        files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) return Status::invalid_argument("--calib " + path + ": no .npy, .pb or image files in it");
    std::optional<ImageInput> how;
    for (const fs::path& f : files) {
      if (max_samples > 0 && static_cast<int64_t>(samples.size()) >= max_samples) break;
      if (is_image_file(f.string())) {
        if (!how) {
          KILN_ASSIGN_OR_RETURN(ImageInput h, image_input(inputs, o));
          how = h;
        }
        KILN_ASSIGN_OR_RETURN(Tensor t, read_image_input(f.string(), *how));
        samples.push_back({std::move(t)});
        continue;
      }
      KILN_ASSIGN_OR_RETURN(Value v, read_input_file(f.string(), inputs[0]));
      if (!v.is_tensor()) return Status::invalid_argument(f.string() + " is not a tensor");
      samples.push_back({v.tensor});
    }
    return samples;
  }
  KILN_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  KILN_ASSIGN_OR_RETURN(Tensor all, parse_npy(bytes));
  if (all.rank() < 1 || all.dim(0) < 1) return Status::invalid_argument("--calib " + path + ": no samples along axis 0");
  // Each sample keeps axis 0 as a batch of one.
  Shape one = all.shape();
  one[0] = 1;
  const int64_t n = max_samples > 0 ? std::min(max_samples, all.dim(0)) : all.dim(0);
  const size_t bytes_each = all.nbytes() / static_cast<size_t>(all.dim(0));
  for (int64_t i = 0; i < n; ++i) {
    KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::make(all.dtype(), one));
    std::memcpy(t.raw_data(), static_cast<const char*>(all.raw_data()) + static_cast<size_t>(i) * bytes_each, bytes_each);
    samples.push_back({t});
  }
  return samples;
}

// --calib-random: the bench rule's shapes and types, float inputs drawn from N(0, 1) per sample.
Result<std::vector<std::vector<Tensor>>> random_calibration(const std::vector<IoInfo>& inputs, const InputShapes& shape,
                                                           int64_t n) {
  KILN_ASSIGN_OR_RETURN(std::vector<Value> base, make_bench_inputs(inputs, shape));
  std::vector<std::vector<Tensor>> samples;
  std::mt19937 rng(12345);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t s = 0; s < n; ++s) {
    std::vector<Tensor> sample;
    for (const Value& v : base) {
      if (!v.is_tensor()) return Status::invalid_argument("--calib-random: an input is not a tensor");
      KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::make(v.tensor.dtype(), v.tensor.shape()));
      std::memcpy(t.raw_data(), v.tensor.raw_data(), v.tensor.nbytes());
      if (t.dtype() == DType::kFloat32)
        for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng);
      sample.push_back(t);
    }
    samples.push_back(std::move(sample));
  }
  return samples;
}

}  // namespace

void add_quantize_command(CLI::App& app, int* exit_code) {
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("quantize", "Quantize a model to 8 bits (static, calibrated), and save it");
  cmd->add_option("model", opt->model, "ONNX model (float)")->required();
  cmd->add_option("-o,--output", opt->out, "Quantized model to write")->required();
  CLI::Option* calib = cmd->add_option(
      "--calib", opt->calib,
      "Calibration samples: FILE.npy stacked along axis 0, or a folder of .npy/.pb files or images (JPEG, PNG, WebP, "
      "BMP, PNM, TIFF: see --mean, --std, --layout)");
  CLI::Option* random = cmd->add_option("--calib-random", opt->calib_random,
                                        "Calibrate on N generated samples (ranges not those of real data)")
                            ->check(CLI::Range(int64_t{1}, int64_t{100000}));
  calib->excludes(random);
  cmd->add_option("--precision", opt->precision,
                  "int8 (default), or fp16/bf16: float weights stored in 16 bits (half the size, float compute; "
                  "no calibration, --calib/--eval samples measure the outputs)")
      ->check(CLI::IsMember({"int8", "fp16", "bf16"}));
  cmd->add_flag("--dynamic", opt->dynamic,
                "Dynamic quantization of MatMul/Gemm weights (activations quantized at each run; no calibration)");
  cmd->add_option("--max-samples", opt->max_samples, "Read at most this many samples from --calib")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--method", opt->method,
                  "Calibration: minmax, percentile, entropy, mse, or auto (default: each, the one whose outputs are "
                  "nearest the float model's on the held-out samples)");
  cmd->add_option("--percentile", opt->percentile, "With --method percentile: the percentile of |x| kept (99.999)")
      ->check(CLI::Range(50.0, 100.0));
  cmd->add_option("--weight-bits", opt->weight_bits,
                  "8, or 7 (7-bit weights: the AVX2 kernels' faster vpmaddubsw route); auto (default): 7 where this "
                  "CPU lacks VNNI, for static quantization (its accuracy guard measures the cost; 8 where 7 miss the "
                  "budget), else 8; with --dynamic, 8-bit weights and, where this CPU lacks VNNI, 7-bit activation rows")
      ->check(CLI::IsMember({"auto", "4", "7", "8"}));
  cmd->add_flag("--weight-only", opt->weight_only,
                "Only MatMul weights: 8 bits (int8 per column, standard QDQ) or, with --weight-bits 4, ONNX Runtime's "
                "MatMulNBits; activations stay float (no calibration)");
  cmd->add_option("--block-size", opt->block_size, "With --weight-only --weight-bits 4: values along K a scale (32)")
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 20));
  cmd->add_flag("--per-tensor", opt->per_tensor, "One weight scale per tensor (default: per output channel)");
  cmd->add_flag("--signed-activations", opt->signed_activations,
                "int8 activations, symmetric (default: uint8 with a zero point)");
  cmd->add_option("--keep-float", opt->keep_float, "Nodes to leave in float, comma-separated (names or first outputs)");
  cmd->add_option("--mean", opt->mean,
                  "Calibration images: per-channel means subtracted from pixels scaled to [0, 1], comma-separated (default 0)")
      ->delimiter(',');
  cmd->add_option("--std", opt->std, "Calibration images: per-channel divisors after --mean, comma-separated (default 1)")
      ->delimiter(',');
  cmd->add_option("--layout", opt->layout,
                  "Calibration images: nchw, nhwc or auto (from the input's shape; default); the size is the input's "
                  "(--shape where it is dynamic), the image resized bilinearly to it")
      ->check(CLI::IsMember({"auto", "nchw", "nhwc"}));
  cmd->add_option("--eval", opt->eval,
                  "Held-out samples for the accuracy guard and --report (as --calib; default: every --hold-out-every-th "
                  "calibration sample, held back from calibrating)");
  cmd->add_option("--hold-out-every", opt->hold_out_every,
                  "Without --eval, every N-th calibration sample is held out for the guard when there are 2N or more "
                  "(default 4; 0: the guard measures on the calibration samples)")
      ->check(CLI::Range(0, 1000000));
  cmd->add_option("--budget", opt->budget,
                  "Accuracy guard: cosine=X, the least cosine of each output to the float model's, and of its mean "
                  "feature cosine (outputs of rank 3 or more: each feature along their smallest axis, a detector's "
                  "boxes and classes, weighs alike) (default cosine=0.99; cosine=0 turns it off), and/or top1=Y, "
                  "the fraction of rows (each output's last axis) whose argmax stays the float model's; nodes "
                  "fall back to float, most sensitive first, until it holds");
  cmd->add_option("--max-fallbacks", opt->max_fallbacks, "Nodes the guard may put back in float (default 16)")
      ->check(CLI::Range(0, 100000));
  cmd->add_flag("--no-speed-check", opt->no_speed_check,
                "Keep every candidate node in 8 bits; by default each is timed on its own against float and stays "
                "float where that is faster with its conversions to and from 8 bits (where the model is then faster)");
  cmd->add_flag("--report", opt->report,
                "Print each quantized tensor's SQNR and cosine against the float model, and the speed check's times");
  cmd->add_flag("--portable", opt->portable,
                "Save the standard QDQ model (ONNX Runtime, TensorRT, OpenVINO load it) instead of kiln's fused form");
  add_shape_options(cmd, &opt->shape, "With --calib-random: ");
  cmd->callback([opt, exit_code] {
    auto fail = [&](const Status& st) { *exit_code = report_failure("quantize", st); };
    auto method = parse_method(opt->method);
    if (!method) return fail(method.status());
    const bool weights16 = opt->precision != "int8" || opt->weight_only;
    if (opt->weight_only && (opt->dynamic || opt->precision != "int8"))
      return fail(Status::invalid_argument("--weight-only is a mode of its own: not with --dynamic or --precision"));
    if (opt->weight_bits == "4" && !opt->weight_only)
      return fail(Status::invalid_argument("--weight-bits 4 is for --weight-only"));
    if (weights16 && opt->dynamic) return fail(Status::invalid_argument("--dynamic is an int8 mode; not with --precision"));
    if (opt->calib.empty() && opt->calib_random == 0 && !opt->dynamic && !weights16)
      return fail(Status::invalid_argument("give calibration samples: --calib FILE.npy|DIR, or --calib-random N"));
    auto model = Model::load(opt->model);
    if (!model) return fail(model.status());
    Result<std::vector<std::vector<Tensor>>> samples = std::vector<std::vector<Tensor>>{};
    if (!opt->calib.empty())
      samples = read_calibration(opt->calib, model->inputs(), *opt);
    else if (opt->calib_random > 0)
      samples = random_calibration(model->inputs(), opt->shape, opt->calib_random);
    if (!samples) return fail(samples.status());
    if (!opt->calib.empty() && samples->empty())
      return fail(Status::invalid_argument("--calib " + opt->calib + " holds no samples"));
    if (opt->calib.empty() && opt->calib_random > 0 && !opt->dynamic && !weights16)
      std::cerr << "kiln quantize: warning: calibrating on generated samples; the ranges are not those of real "
                   "data, so accuracy on real inputs may suffer (give --calib)\n";
    QuantizeOptions qo;
    if (Status st = parse_budget(opt->budget, &qo); !st.is_ok()) return fail(st);
    std::vector<std::vector<Tensor>> held_out;
    if (!opt->eval.empty()) {
      auto e = read_calibration(opt->eval, model->inputs(), *opt);
      if (!e) return fail(e.status().with_context("--eval"));
      held_out = std::move(e).value();
    }
    qo.weight_only_bits = opt->weight_only ? (opt->weight_bits == "4" ? 4 : 8) : 0;
    qo.block_size = opt->block_size;
    qo.precision = opt->precision == "fp16"   ? QuantizePrecision::kFloat16
                   : opt->precision == "bf16" ? QuantizePrecision::kBFloat16
                                              : QuantizePrecision::kInt8;
    qo.dynamic = opt->dynamic;
    qo.portable = opt->portable;
    qo.max_fallbacks = opt->max_fallbacks;
    qo.check_speed = !opt->no_speed_check;
    qo.hold_out_every = opt->hold_out_every;
    qo.method = *method;
    apply_weight_bits(qo, opt->weight_bits);
    qo.percentile = opt->percentile;
    qo.per_channel = !opt->per_tensor;
    qo.signed_activations = opt->signed_activations;
    std::stringstream ss(opt->keep_float);
    for (std::string name; std::getline(ss, name, ',');)
      if (!name.empty()) qo.keep_float.push_back(name);
    auto reader_of = [](const std::vector<std::vector<Tensor>>& all) {
      auto next = std::make_shared<size_t>(0);
      return CalibrationReader([&all, next]() -> Result<std::optional<std::vector<Tensor>>> {
        if (*next >= all.size()) return std::optional<std::vector<Tensor>>();
        return std::optional<std::vector<Tensor>>(all[(*next)++]);
      });
    };
    auto report = model->quantize(reader_of(*samples), qo, held_out.empty() ? CalibrationReader() : reader_of(held_out));
    if (!report) return fail(report.status());
    if (opt->weight_only)
      std::printf("%lld MatMul weights in %d bits: %.1f MB -> %.1f MB\n", static_cast<long long>(report->quantized_nodes),
                  qo.weight_only_bits, report->weight_bytes_before / 1e6, report->weight_bytes_after / 1e6);
    else if (weights16)
      std::printf("%lld weights stored in %s: %.1f MB -> %.1f MB\n", static_cast<long long>(report->quantized_tensors),
                  opt->precision.c_str(), report->weight_bytes_before / 1e6, report->weight_bytes_after / 1e6);
    else if (opt->dynamic)
      std::printf("dynamic: activations quantized at each run, no calibration\n");
    else
      std::printf("calibrated on %lld samples (%s)\n", static_cast<long long>(report->samples),
                  report->calibration_method.c_str());
    if (!report->calibration_trials.empty()) {
      std::printf("calibration methods tried (score: the metric, top-1, or the outputs' mean feature cosine):");
      for (const auto& [method, cosine] : report->calibration_trials) std::printf(" %s %.5f", method.c_str(), cosine);
      std::printf("\n");
    }
    if (report->held_out_of_calibration > 0)
      std::printf("held out %lld of the --calib samples for the accuracy guard (one in %d; --eval gives others)\n",
                  static_cast<long long>(report->held_out_of_calibration), opt->hold_out_every);
    if (!weights16)
      std::printf("quantized %lld nodes, %lld activations; %lld Relu/Clip absorbed by their QuantizeLinear\n",
                static_cast<long long>(report->quantized_nodes), static_cast<long long>(report->quantized_tensors),
                static_cast<long long>(report->removed_clamps));
    if (report->activations_in_float + report->activations_in_tables > 0)
      std::printf("conv activations: %lld in float on the sums, %lld through tables of 8-bit codes (as accurate there)\n",
                  static_cast<long long>(report->activations_in_float),
                  static_cast<long long>(report->activations_in_tables));
    if (!report->seven_bit_weights_missed.empty())
      std::printf("7-bit weights missed the budget after their fallbacks (%s): 8-bit weights instead, this CPU's "
                  "exact 16-bit tiles\n",
                  report->seven_bit_weights_missed.c_str());
    else if (qo.reduce_range && !weights16)
      std::printf("7-bit weights (--weight-bits %s): this CPU's 8-bit convs and MatMuls take vpmaddubsw\n",
                  opt->weight_bits.c_str());
    if (qo.dynamic_row_bits == 7)
      std::printf("7-bit activation rows (--weight-bits auto, no VNNI here): this CPU's MatMuls take vpmaddubsw; "
                  "--weight-bits 8 keeps 8-bit rows\n");
    if (report->opset_after != report->opset_before)
      std::printf("opset %d -> %d (ONNX's version converter)\n", report->opset_before, report->opset_after);
    for (const std::string& k : report->kept_float) std::printf("kept in float: %s\n", k.c_str());
    if (report->latency_ms > 0)
      std::printf("the fallbacks' cost: %.3f ms a run against %.3f with every candidate in 8 bits (kiln, median of 11)\n",
                  report->latency_ms, report->latency_all_8bit_ms);
    if (!weights16 && !opt->dynamic && report->quantized_nodes == 0)
      std::cerr << "kiln quantize: warning: nothing stayed in 8 bits (the speed check or the accuracy guard put every "
                   "candidate back in float; kept in float says why): the model written computes in float\n";
    for (const std::string& k : report->dynamic_nodes)
      std::printf("quantized dynamically: %s (its output goes on in float; rows quantized at run time)\n", k.c_str());
    for (const std::string& k : report->recurrent_nodes)
      std::printf("weights in 8 bits: %s (W and R, a scale per row; h and x rounded to 16 bits at run time)\n", k.c_str());
    const char* where = report->measured_on_held_out ? "held-out samples" : "the calibration samples";
    if (weights16 && report->outputs.empty())
      std::printf("accuracy not measured (give --eval or --calib samples to compare the outputs)\n");
    if (opt->report) {
      std::printf("\nper layer, against the float model on %s (worst sample's cosine):\n", where);
      std::printf("  %-56s %9s %9s\n", "tensor", "SQNR dB", "cosine");
      for (const TensorError& e : report->layers)
        std::printf("  %-56s %9.2f %9.5f\n", e.tensor.c_str(), e.sqnr_db, e.cosine);
      if (!report->speeds.empty()) {
        std::printf("\nspeed check, each node on its own (us, least of 9 runs; float wins with its conversions "
                    "paid):\n");
        std::printf("  %-56s %9s %11s %9s\n", "node", "8-bit", "converting", "float");
        for (const NodeSpeed& n : report->speeds)
          std::printf("  %-56s %9.1f %11.1f %9.1f\n", n.node.c_str(), n.int8_us, n.conversion_us, n.float_us);
      }
    }
    for (const TensorError& e : report->outputs)
      std::printf("output %s: SQNR %.2f dB, cosine %.5f to the float model (%s; budget %s)\n", e.tensor.c_str(),
                  e.sqnr_db, e.cosine, where, opt->budget.c_str());
    if (report->top1) std::printf("top-1 agreement with the float model: %.4f (%s)\n", *report->top1, where);
    // 16-bit weights are saved as they are: optimizing would widen them in the file.
    if (!opt->portable && !weights16) {
      auto optimized = model->optimize({});
      if (!optimized) return fail(optimized.status());
    }
    Status saved = model->save(opt->out);
    if (!saved.is_ok()) return fail(saved);
    std::printf("wrote %s (%s)\n", opt->out.c_str(),
                opt->weight_only ? "weight-only, portable"
                : weights16      ? "16-bit weights, portable"
                : opt->portable  ? "QDQ, portable"
                                 : "kiln's fused form");
  });
}

}  // namespace kiln::cli
