// `kiln`: inspect, run and benchmark ONNX models.
#include <iostream>

#include "cli.h"
#include "kiln/cpu.h"

namespace kiln::cli {

int report_failure(const std::string& command, const Status& st) {
  std::cerr << "kiln " << command << ": " << st.message() << "\n";
  switch (st.code()) {
    case StatusCode::kOk: return 0;
    case StatusCode::kFailed: return 1;
    case StatusCode::kInvalidArgument: return 2;
    case StatusCode::kInvalidModel: return 3;
    case StatusCode::kNotFound: return 4;
    case StatusCode::kNotImplemented: return 5;
    case StatusCode::kOutOfRange: return 6;
    case StatusCode::kResourceExhausted: return 7;
    case StatusCode::kInternal: return 8;
  }
  return 1;
}

}  // namespace kiln::cli

int main(int argc, char** argv) {
  CLI::App app{"kiln: ONNX models in, faster models out"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", "kiln 0.1.0");
  // --isa is the whole tool's, given before or after the subcommand: subcommands inherit
  // fallthrough and pass it up. It caps the level as it is parsed, before any model loads.
  app.fallthrough();
  std::string isa;
  app.add_option("--isa", isa,
                 "Cap the instruction set of kiln's kernels and oneDNN's: avx2, avx_vnni, avx512, avx512_vnni "
                 "(default: the CPU's highest; KILN_ISA in the environment does the same)")
      ->trigger_on_parse()
      ->each([](const std::string& name) {
        const auto level = kiln::parse_isa(name);
        if (!level) throw CLI::ValidationError(kiln::not_an_isa_level(name));
        if (const std::string e = kiln::set_max_isa(*level); !e.empty()) throw CLI::ValidationError(e);
      });
  int exit_code = 0;
  kiln::cli::add_info_command(app, &exit_code);
  kiln::cli::add_run_command(app, &exit_code);
  kiln::cli::add_bench_command(app, &exit_code);
  kiln::cli::add_optimize_command(app, &exit_code);
  kiln::cli::add_quantize_command(app, &exit_code);
  kiln::cli::add_compare_command(app, &exit_code);
  kiln::cli::add_profile_command(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // `kiln` alone: what it can do, as --help prints it.
  if (app.get_subcommands().empty()) {
    std::cout << app.help();
    return 0;
  }
  return exit_code;
}
