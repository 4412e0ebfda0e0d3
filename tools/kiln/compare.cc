// `kiln compare A.onnx B.onnx [--per-layer]`: runs both models as written on the same inputs and
// reports how far B's outputs are from A's; per layer, the first tensor both name that diverges.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "cli.h"
#include "compare_print.h"
#include "io_files.h"
#include "kiln/session.h"
#include "kiln/model.h"

namespace kiln::cli {
namespace {

void print_diff(const TensorDiff& d, int name_width) {
  std::string name = d.name;
  if (!d.name_b.empty()) name += " (B: " + d.name_b + ")";
  std::printf("  %-*s %10.3g %10.3g %10lld/%-10lld %s\n", name_width, name.c_str(), d.max_abs,
              d.max_rel, static_cast<long long>(d.mismatches), static_cast<long long>(d.numel),
              d.ok ? "OK" : "FAIL");
}

void print_table(const char* what, const std::vector<TensorDiff>& diffs) {
  int width = 24;
  for (const TensorDiff& d : diffs)
    width = std::max(
        width, static_cast<int>(d.name.size() + (d.name_b.empty() ? 0 : d.name_b.size() + 6)));
  std::printf("  %-*s %10s %10s %21s\n", width, what, "max abs", "max rel", "beyond tol/elements");
  for (const TensorDiff& d : diffs) print_diff(d, width);
}

}  // namespace

size_t print_compare_report(const CompareReport& report, const CompareOptions& options,
                            bool verbose) {
  std::printf("tolerance: |a-b| <= %g + %g*|a|\n", options.atol, options.rtol);
  print_table("output", report.outputs);
  for (const TensorDiff& d : report.outputs)
    if (d.numel > 0 && d.max_ref > 0 && d.max_ref < options.atol)
      std::printf(
          "note: every |a| of '%s' is at most %.3g, below atol: it passes whatever B computes "
          "(lower --atol)\n",
          d.name.c_str(), d.max_ref);
  if (options.per_layer) {
    std::printf("per layer: %zu tensors named in both models compared", report.layers.size());
    if (!report.layers_skipped.empty())
      std::printf(" (%zu skipped: kind, dtype or shape differ, or not computed)",
                  report.layers_skipped.size());
    std::printf("\n");
    if (verbose) print_table("tensor", report.layers);
    if (const auto& d = report.first_divergence) {
      std::printf(
          "first divergence: '%s'  max abs %.3g  max rel %.3g  (%lld of %lld elements beyond "
          "tolerance)\n",
          d->name.c_str(), d->max_abs, d->max_rel, static_cast<long long>(d->mismatches),
          static_cast<long long>(d->numel));
      std::printf("  produced in A by %s\n  produced in B by %s\n", d->producer_a.c_str(),
                  d->producer_b.c_str());
    } else {
      std::printf("no intermediate diverges\n");
    }
  }
  size_t failed = 0;
  for (const TensorDiff& d : report.outputs) failed += !d.ok;
  return failed;
}

void add_compare_command(CLI::App& app, int* exit_code) {
  struct Options {
    std::string model_a, model_b;
    InputOptions inputs;
    CompareOptions compare;
    bool verbose = false;
    int threads = 0;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "compare",
      "Run two models as written on the same inputs and compare outputs (A is the reference)");
  cmd->add_option("a", opt->model_a, "Reference ONNX model")->required();
  cmd->add_option("b", opt->model_b, "ONNX model to check against A")->required();
  add_input_options(cmd, &opt->inputs);
  cmd->add_option("--rtol", opt->compare.rtol, "Relative tolerance: |a-b| <= atol + rtol*|a|")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--atol", opt->compare.atol, "Absolute tolerance")->check(CLI::NonNegativeNumber);
  cmd->add_flag(
      "--per-layer", opt->compare.per_layer,
      "Also compare every intermediate tensor both models name; report the first that diverges");
  cmd->add_flag("-v,--verbose", opt->verbose, "With --per-layer: print every tensor compared");
  cmd->add_option("--threads", opt->threads, "Threads (default: one per core)")
      ->check(CLI::Range(0, 1024));
  cmd->callback([opt, exit_code] {
    auto fail = [&](const Status& st) {
      *exit_code = report_failure("compare", st);
    };
    auto a = Model::load(opt->model_a);
    if (!a) return fail(a.status());
    auto b = Model::load(opt->model_b);
    if (!b) return fail(b.status());
    // Inputs follow model A's declaration. Without -i the benchmark rule makes them.
    InputOptions in = opt->inputs;
    if (in.files.empty()) in.random = true;
    auto inputs = make_inputs(a->inputs(), in);
    if (!inputs) return fail(inputs.status());

    auto report = compare_models(a->ir(), b->ir(), *inputs, opt->compare, opt->threads);
    if (!report) return fail(report.status());

    std::printf("A %s\nB %s\n", opt->model_a.c_str(), opt->model_b.c_str());
    std::string named;
    for (const std::string& s : in.shape.shapes) named += ", " + s;
    if (in.random)
      std::printf("inputs: benchmark rule (batch %lld, seq %lld%s)\n", static_cast<long long>(in.shape.batch),
                  static_cast<long long>(in.shape.seq), named.c_str());
    else
      std::printf("inputs: %zu files\n", in.files.size());
    const size_t failed = print_compare_report(*report, opt->compare, opt->verbose);
    if (failed == 0) {
      std::printf("OK: all %zu outputs within tolerance\n", report->outputs.size());
    } else {
      std::printf("FAIL: %zu of %zu outputs beyond tolerance\n", failed, report->outputs.size());
      *exit_code = 1;
    }
  });
}

}  // namespace kiln::cli
