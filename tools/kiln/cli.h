// The subcommands of the `kiln` tool; each lives in its own file and adds itself to the app.
#pragma once

#include <CLI/CLI.hpp>

#include "kiln/status.h"

namespace kiln::cli {

// Prints "kiln COMMAND: message" to stderr and returns the exit code for the failure's kind:
// 1 unclassified (and a comparison beyond tolerance), 2 InvalidArgument, 3 InvalidModel,
// 4 NotFound, 5 NotImplemented, 6 OutOfRange, 7 ResourceExhausted, 8 Internal.
int report_failure(const std::string& command, const Status& st);

// Each adds a subcommand whose callback stores the process exit code in *exit_code.
void add_info_command(CLI::App& app, int* exit_code);
void add_run_command(CLI::App& app, int* exit_code);
void add_bench_command(CLI::App& app, int* exit_code);
void add_optimize_command(CLI::App& app, int* exit_code);
void add_compare_command(CLI::App& app, int* exit_code);
void add_profile_command(CLI::App& app, int* exit_code);
void add_quantize_command(CLI::App& app, int* exit_code);

}  // namespace kiln::cli
