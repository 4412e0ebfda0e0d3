// The subcommands of the `kiln` tool; each lives in its own file and adds itself to the app.
#pragma once

#include <CLI/CLI.hpp>

namespace kiln::cli {

// Each adds a subcommand whose callback stores the process exit code in *exit_code.
void add_info_command(CLI::App& app, int* exit_code);
void add_run_command(CLI::App& app, int* exit_code);
void add_bench_command(CLI::App& app, int* exit_code);
void add_optimize_command(CLI::App& app, int* exit_code);
void add_compare_command(CLI::App& app, int* exit_code);
void add_profile_command(CLI::App& app, int* exit_code);

}  // namespace kiln::cli
