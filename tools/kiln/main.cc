// `kiln`: inspect, run and benchmark ONNX models.
#include <iostream>

#include "cli.h"
#include "core/cpu_features.h"

int main(int argc, char** argv) {
  CLI::App app{"kiln: ONNX models in, faster models out"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kiln 0.1.0");
  // --isa is the whole tool's, given before or after the subcommand: subcommands inherit
  // fallthrough and pass it up. It caps the level as it is parsed, before any model loads.
  app.fallthrough();
  std::string isa;
  app.add_option("--isa", isa,
                 "Cap the instruction set of kiln's kernels and oneDNN's: avx2, avx512, avx512_vnni "
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
  kiln::cli::add_compare_command(app, &exit_code);
  kiln::cli::add_profile_command(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
