// `kiln run MODEL (-i IN ... | --random) -o OUTDIR`: one inference, outputs written as files.
#include <filesystem>
#include <iostream>

#include "cli.h"
#include "io_files.h"

namespace kiln::cli {

void add_run_command(CLI::App& app, int* exit_code) {
  struct Options {
    std::string model, out_dir;
    std::vector<std::string> inputs;
    bool random = false, npy = false;
    int64_t batch = 1, seq = 128;
    int threads = 0, level = 2;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("run", "Run a model once and write its outputs");
  cmd->add_option("model", opt->model, "ONNX model")->required();
  cmd->add_option("-i,--input", opt->inputs, "Input files (.pb or .npy), in the order of the model's inputs");
  cmd->add_flag("--random", opt->random, "Generate inputs by the benchmark rule instead of reading files");
  cmd->add_option("--batch", opt->batch, "With --random: size of a dynamic first dimension")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--seq", opt->seq, "With --random: size of other dynamic dimensions")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("-o,--output", opt->out_dir, "Folder for output_K.pb files")->required();
  cmd->add_flag("--npy", opt->npy, "Write tensor outputs as output_K.npy");
  cmd->add_option("--threads", opt->threads, "Threads (default: one per core)")->check(CLI::Range(0, 1024));
  cmd->add_option("-O,--optimize", opt->level, "Optimization at load, 0-3 (default 2; a model saved by `kiln optimize` is run as saved)")
      ->check(CLI::Range(0, 3));
  cmd->callback([opt, exit_code] {
    auto fail = [&](const Status& st) {
      std::cerr << "kiln run: " << st.message() << "\n";
      *exit_code = 1;
    };
    SessionOptions so;
    so.threads = opt->threads;
    so.optimize_level = opt->level;
    auto session = Session::load(opt->model, so);
    if (!session) return fail(session.status());
    const auto& ios = (*session)->inputs();
    std::vector<Value> inputs;
    if (opt->random) {
      if (!opt->inputs.empty()) return fail(Status::error("give either -i files or --random, not both"));
      auto gen = make_bench_inputs(**session, opt->batch, opt->seq);
      if (!gen) return fail(gen.status());
      inputs = std::move(gen).value();
    } else {
      if (opt->inputs.size() != ios.size())
        return fail(Status::error("the model takes " + std::to_string(ios.size()) + " inputs, " +
                                  std::to_string(opt->inputs.size()) + " files were given (or use --random)"));
      for (size_t k = 0; k < ios.size(); ++k) {
        auto v = read_input_file(opt->inputs[k], ios[k]);
        if (!v) return fail(v.status());
        inputs.push_back(std::move(v).value());
      }
    }
    auto outs = (*session)->run(inputs);
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
