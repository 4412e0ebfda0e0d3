// `kiln`: inspect, run and benchmark ONNX models.
#include <iostream>

#include "cli.h"

int main(int argc, char** argv) {
  CLI::App app{"kiln: ONNX models in, faster models out"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kiln 0.1.0");
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
