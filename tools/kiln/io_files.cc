// Input generation and value files for `kiln run`, `bench` and `compare`.
#include "io_files.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <filesystem>

#include <CLI/CLI.hpp>

#include "npy.h"
#include "kiln/value_io.h"

namespace kiln::cli {

void add_shape_options(CLI::App* cmd, InputShapes* s, const std::string& when) {
  cmd->add_option("--batch", s->batch, when + "size of a dynamic first dimension")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--seq", s->seq, when + "size of other dynamic dimensions")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--shape", s->shapes, when + "an input's whole shape, NAME=D0,D1,... (repeatable)")
      ->allow_extra_args(false);
}

void add_input_options(CLI::App* cmd, InputOptions* o) {
  cmd->add_option("-i,--input", o->files, "Input files (.pb or .npy), in the order of the model's inputs");
  cmd->add_flag("--random", o->random, "Generate inputs by the benchmark rule instead of reading files");
  add_shape_options(cmd, &o->shape, "With --random: ");
}

Result<std::vector<Value>> make_inputs(const std::vector<IoInfo>& ios, const InputOptions& o) {
  if (o.random) {
    if (!o.files.empty()) return Status::invalid_argument("give either -i files or --random, not both");
    return make_bench_inputs(ios, o.shape);
  }
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
  KILN_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  if (std::filesystem::path(path).extension() == ".npy") {
    auto t = parse_npy(bytes);
    if (!t) return t.status().with_context(path);
    return Value::of(std::move(t).value());
  }
  auto v = parse_value(bytes, io);
  if (!v) return v.status().with_context(path);
  return v;
}

Status write_output_file(const std::string& dir, size_t k, const Value& v, const std::string& name, bool npy) {
  const std::string base = (std::filesystem::path(dir) / ("output_" + std::to_string(k))).string();
  if (npy && v.is_tensor()) {
    KILN_ASSIGN_OR_RETURN(std::string bytes, serialize_npy(v.tensor));
    return write_file(base + ".npy", bytes);
  }
  KILN_ASSIGN_OR_RETURN(std::string bytes, serialize_value(v, name));
  return write_file(base + ".pb", bytes);
}

}  // namespace kiln::cli
