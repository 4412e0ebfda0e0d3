// `kiln optimize MODEL -o OUT`: the pass pipeline, a saved model, and with --check a comparison
// of the original and the optimized model on the same inputs.
#include "kiln/optimize.h"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "cli.h"
#include "compare_print.h"
#include "io_files.h"
#include "kiln/model.h"
#include "tuning.h"

namespace kiln::cli {
namespace {

Result<std::map<std::string, int64_t>> parse_dims(const std::string& text) {
  std::map<std::string, int64_t> dims;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      return Status::invalid_argument("--fix-dims expects NAME=SIZE[,NAME=SIZE], got '" + item + "'");
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str() + eq + 1, &end, 10);
    if (*end != '\0' || v <= 0 || v > (1 << 24))
      return Status::invalid_argument("--fix-dims: bad size in '" + item + "'");
    dims[item.substr(0, eq)] = v;
  }
  return dims;
}

}  // namespace

void add_optimize_command(CLI::App& app, int* exit_code) {
  struct Options {
    std::string model, out, disable, fix_dims, data_file;
    int level = 3, threads = 0;
    bool portable = false, verbose = false, check = false, per_layer = false,
         no_external_data = false;
    double rtol = 1e-3, atol = 1e-4;
    TuneFlags tune;
    InputShapes shape;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("optimize", "Simplify and fuse a model, and save it");
  cmd->add_option("model", opt->model, "ONNX model")->required();
  cmd->add_option("-o,--output", opt->out, "Optimized model to write")->required();
  cmd->add_option("-O,--level", opt->level,
                  "0 none, 1 exact and portable, 2 fusion, 3 blocked layout (default)")
      ->check(CLI::Range(0, 3));
  cmd->add_option("--disable", opt->disable, "Passes to skip, comma-separated");
  cmd->add_flag("--portable", opt->portable, "Keep to standard ONNX operators");
  cmd->add_option("--fix-dims", opt->fix_dims, "Fix symbolic dims, e.g. batch=1,seq=128");
  // A flag, not an option, so that `--external-data MODEL` never takes the model as the file name.
  CLI::Option* external = cmd->add_flag("--external-data{}", opt->data_file,
                                        "Save weights in an external data file beside the model, "
                                        "--external-data=FILE to name it (default OUT.data)");
  cmd->add_flag("--no-external-data", opt->no_external_data,
                "Save weights inline (default: external when the input had external data or the "
                "model is over 2 GiB)")
      ->excludes(external);
  cmd->add_flag("-v,--verbose", opt->verbose, "Print what each pass did");
  cmd->add_flag("--check", opt->check, "Run both models on the same random inputs and compare");
  cmd->add_flag("--per-layer", opt->per_layer,
                "With --check: also name the first intermediate tensor that diverges");
  cmd->add_option("--rtol", opt->rtol, "With --check: relative tolerance");
  cmd->add_option("--atol", opt->atol, "With --check: absolute tolerance");
  cmd->add_option("--threads", opt->threads, "Threads for --check and --tune")
      ->check(CLI::Range(0, 1024));
  add_tune_options(cmd, &opt->tune, /*with_flag=*/true);
  add_shape_options(cmd, &opt->shape, "With --tune or --check: ");
  cmd->callback([opt, exit_code, external] {
    auto fail = [&](const Status& st) {
      *exit_code = report_failure("optimize", st);
    };
    auto model = Model::load(opt->model);
    if (!model) return fail(model.status());
    OptimizeOptions oo;
    oo.level = opt->level;
    oo.portable = opt->portable;
    std::stringstream ss(opt->disable);
    for (std::string name; std::getline(ss, name, ',');)
      if (!name.empty()) oo.disabled.insert(name);
    if (!opt->fix_dims.empty()) {
      auto dims = parse_dims(opt->fix_dims);
      if (!dims) return fail(dims.status());
      oo.fixed_dims = *dims;
    }
    Model optimized = *model;
    auto report = optimized.optimize(oo);
    if (!report) return fail(report.status());
    if (opt->verbose) {
      std::printf("%-36s %9s %8s %8s %9s\n", "pass", "rewrites", "before", "after", "ms");
      for (const PassReport& p : report->passes)
        std::printf("%-36s %9lld %8lld %8lld %9.1f\n", p.name.c_str(),
                    static_cast<long long>(p.rewrites), static_cast<long long>(p.nodes_before),
                    static_cast<long long>(p.nodes_after), p.ms);
      std::printf("shared type analysis: shape inference ran %lld times\n",
                  static_cast<long long>(report->type_inferences));
    }
    std::printf("nodes %lld -> %lld\n", static_cast<long long>(report->nodes_before),
                static_cast<long long>(report->nodes_after));
    if (opt->tune.tune) {
      auto inputs = make_bench_inputs(optimized.inputs(), opt->shape);
      if (!inputs) return fail(inputs.status());
      auto tuned = tune_and_record(optimized, *inputs, opt->tune, opt->threads);
      if (!tuned) return fail(tuned.status());
      if (!opt->verbose) print_tune_summary(*tuned);
      if (opt->verbose) print_tune_report(*tuned);
    }
    SaveOptions save;
    if (external->count() > 0) save.external_data = SaveOptions::ExternalData::kAlways;
    if (opt->no_external_data) save.external_data = SaveOptions::ExternalData::kNever;
    save.location = opt->data_file;
    SaveReport written;
    Status saved = optimized.save(opt->out, save, &written);
    if (!saved.is_ok()) return fail(saved);
    std::printf("wrote %s\n", opt->out.c_str());
    if (!written.data_path.empty())
      std::printf("wrote %s (%lld tensors, %llu bytes)\n", written.data_path.c_str(),
                  static_cast<long long>(written.external_tensors),
                  static_cast<unsigned long long>(written.data_file_bytes));
    if (!opt->check) return;
    // The saved file is what gets compared, so the save/load round trip is checked too.
    auto reloaded = Model::load(opt->out);
    if (!reloaded) return fail(reloaded.status().with_context("optimized model"));
    auto inputs = make_bench_inputs(model->inputs(), opt->shape);
    if (!inputs) return fail(inputs.status());
    CompareOptions co;
    co.rtol = opt->rtol;
    co.atol = opt->atol;
    co.per_layer = opt->per_layer;
    auto cmp = compare_models(model->ir(), reloaded->ir(), *inputs, co, opt->threads);
    if (!cmp) return fail(cmp.status());
    std::printf("check:\n");
    if (print_compare_report(*cmp, co, false) > 0) {
      std::cerr << "kiln optimize: the optimized model's outputs differ beyond tolerance\n";
      *exit_code = 1;
    }
  });
}

}  // namespace kiln::cli
