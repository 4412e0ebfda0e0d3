// `kiln run MODEL (-i IN ... | --random) -o OUTDIR`: one inference, outputs written as files.
#include <filesystem>
#include <iostream>

#include "cli.h"
#include "io_files.h"
#include "kiln/session.h"
#include "tuning.h"

namespace kiln::cli {

void add_run_command(CLI::App& app, int* exit_code) {
  struct Options {
    std::string model, out_dir, backend = "kiln";
    InputOptions inputs;
    bool npy = false;
    int threads = 0, level = 3;
    TuneFlags tune;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("run", "Run a model once and write its outputs");
  cmd->add_option("model", opt->model, "ONNX model")->required();
  add_input_options(cmd, &opt->inputs);
  cmd->add_option("-o,--output", opt->out_dir, "Folder for output_K.pb files")->required();
  cmd->add_flag("--npy", opt->npy, "Write tensor outputs as output_K.npy");
  cmd->add_option("--backend", opt->backend, "Kernels from this backend where it takes a node, kiln's own elsewhere (default kiln; e.g. openblas)");
  cmd->add_option("--threads", opt->threads, "Threads (default: one per core)")->check(CLI::Range(0, 1024));
  add_tune_options(cmd, &opt->tune, /*with_flag=*/true);
  cmd->add_option("-O,--optimize", opt->level, "Optimization at load, 0-3 (default 3; a model saved by `kiln optimize` is run as saved)")
      ->check(CLI::Range(0, 3));
  cmd->callback([opt, exit_code] {
    auto fail = [&](const Status& st) {
      *exit_code = report_failure("run", st);
    };
    SessionOptions so;
    so.threads = opt->threads;
    so.optimize_level = opt->level;
    so.backend = opt->backend;
    Result<std::unique_ptr<Session>> session = Status::error("");
    Result<std::vector<Value>> inputs = Status::error("");
    if (opt->tune.tune) {
      // The tuner replays nodes on their weights: the model stays here, shared with the session.
      auto model = load_for_tuning(opt->model, opt->level);
      if (!model) return fail(model.status());
      inputs = make_inputs(model->inputs(), opt->inputs);
      if (!inputs) return fail(inputs.status());
      auto report = tune_and_record(*model, *inputs, opt->tune, opt->threads);
      if (!report) return fail(report.status());
      print_tune_summary(*report);
      session = Session::create(*model, so);
    } else {
      session = Session::load(opt->model, so);
      if (session) inputs = make_inputs((*session)->inputs(), opt->inputs);
    }
    if (!session) return fail(session.status());
    if (!inputs) return fail(inputs.status());
    auto outs = (*session)->run(*inputs);
    if (!outs) return fail(outs.status());
    std::error_code ec;
    std::filesystem::create_directories(opt->out_dir, ec);
    if (ec) return fail(Status::error("cannot create '" + opt->out_dir + "': " + ec.message()));
    for (size_t k = 0; k < outs->size(); ++k) {
      Status st = write_output_file(opt->out_dir, k, (*outs)[k], (*session)->outputs()[k].name, opt->npy);
      if (!st.is_ok()) return fail(st);
    }
    std::cout << "wrote " << outs->size() << " outputs to " << opt->out_dir << "\n";
  });
}

}  // namespace kiln::cli
