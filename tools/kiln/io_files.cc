// Input generation and value files for `kiln run`, `bench` and `compare`.
#include "io_files.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include <CLI/CLI.hpp>

#include "core/float_convert.h"
#include "ir/graph.h"
#include "npy.h"
#include "onnx/model_io.h"

namespace kiln::cli {
namespace {

bool name_has(const std::string& name, const char* word) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower.find(word) != std::string::npos;
}

Result<Tensor> bench_tensor(const IoInfo& io, int64_t batch, int64_t seq) {
  Shape shape;
  for (size_t i = 0; i < io.dims.size(); ++i) shape.push_back(io.dims[i] >= 0 ? io.dims[i] : (i == 0 ? batch : seq));
  const DType t = io.dtype;
  KILN_ASSIGN_OR_RETURN(Tensor x, Tensor::make(t, shape));
  if (dtype_is_integer(t) || t == DType::kBool) {
    const bool mask = name_has(io.name, "mask"), type = name_has(io.name, "type");
    for (int64_t i = 0; i < x.numel(); ++i)
      store_from_double(t, x.raw_data(), i, mask ? 1.0 : type ? 0.0 : static_cast<double>((i * 7919) % 1000));
  } else if (dtype_is_float(t)) {
    int64_t s = 12345;
    for (int64_t i = 0; i < x.numel(); ++i) {
      s = (s * 1103515245 + 12345) & 0x7fffffff;
      const float v = static_cast<float>(static_cast<double>(s) / 2147483647.0 - 0.5);
      store_from_double(t, x.raw_data(), i, v);
    }
  } else {
    return Status::error("input '" + io.name + "' of type " + dtype_name(t) + " cannot be generated; pass it with -i");
  }
  return x;
}

}  // namespace

Result<std::vector<Value>> make_bench_inputs(const Session& session, int64_t batch, int64_t seq) {
  std::vector<Value> values;
  for (const IoInfo& io : session.inputs()) {
    if (io.kind != Value::Kind::kTensor)
      return Status::error("input '" + io.name + "' is not a tensor and cannot be generated; pass it with -i");
    auto t = bench_tensor(io, batch, seq);
    if (!t) return t.status();
    values.push_back(Value::of(std::move(t).value()));
  }
  return values;
}

void add_input_options(CLI::App* cmd, InputOptions* o) {
  cmd->add_option("-i,--input", o->files, "Input files (.pb or .npy), in the order of the model's inputs");
  cmd->add_flag("--random", o->random, "Generate inputs by the benchmark rule instead of reading files");
  cmd->add_option("--batch", o->batch, "With --random: size of a dynamic first dimension")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--seq", o->seq, "With --random: size of other dynamic dimensions")->check(CLI::Range(1, 1 << 20));
}

Result<std::vector<Value>> make_inputs(const Session& session, const InputOptions& o) {
  if (o.random) {
    if (!o.files.empty()) return Status::error("give either -i files or --random, not both");
    return make_bench_inputs(session, o.batch, o.seq);
  }
  const auto& ios = session.inputs();
  if (o.files.size() != ios.size())
    return Status::error("the model takes " + std::to_string(ios.size()) + " inputs, " +
                         std::to_string(o.files.size()) + " files were given (or use --random)");
  std::vector<Value> inputs;
  for (size_t k = 0; k < ios.size(); ++k) {
    KILN_ASSIGN_OR_RETURN(Value v, read_input_file(o.files[k], ios[k]));
    inputs.push_back(std::move(v));
  }
  return inputs;
}

Result<Value> read_input_file(const std::string& path, const IoInfo& io) {
  KILN_ASSIGN_OR_RETURN(std::string bytes, onnx_io::read_file(path));
  if (std::filesystem::path(path).extension() == ".npy") {
    auto t = parse_npy(bytes);
    if (!t) return t.status().with_context(path);
    return Value::of(std::move(t).value());
  }
  ir::TypeInfo type;
  type.kind = io.kind == Value::Kind::kSequence   ? ir::TypeInfo::Kind::kSequence
              : io.kind == Value::Kind::kOptional ? ir::TypeInfo::Kind::kOptional
                                                  : ir::TypeInfo::Kind::kTensor;
  auto v = onnx_io::parse_value(bytes, type);
  if (!v) return v.status().with_context(path);
  return v;
}

Status write_output_file(const std::string& dir, size_t k, const Value& v, const std::string& name, bool npy) {
  const std::string base = (std::filesystem::path(dir) / ("output_" + std::to_string(k))).string();
  if (npy && v.is_tensor()) {
    KILN_ASSIGN_OR_RETURN(std::string bytes, serialize_npy(v.tensor));
    return onnx_io::write_file(base + ".npy", bytes);
  }
  KILN_ASSIGN_OR_RETURN(std::string bytes, onnx_io::serialize_value(v, name));
  return onnx_io::write_file(base + ".pb", bytes);
}

}  // namespace kiln::cli
