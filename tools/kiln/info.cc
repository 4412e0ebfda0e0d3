// `kiln info MODEL [--json] [--memory]`: inputs and outputs, opsets, operator histogram, parameters;
// with --memory, where a session's memory goes (weights, prepacked weights, activation arena).
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "io_files.h"
#include "kiln/session.h"
#include "kiln/model.h"

namespace kiln::cli {
namespace {

std::string dims_str(const IoInfo& io) {
  if (io.kind == Value::Kind::kSequence) return "sequence";
  if (io.kind == Value::Kind::kOptional) return "optional";
  if (!io.has_shape) return "?";
  std::string s = "[";
  for (size_t i = 0; i < io.dims.size(); ++i)
    s += (i ? "," : "") + (io.dims[i] >= 0 ? std::to_string(io.dims[i]) : io.dim_names[i].empty() ? "?" : io.dim_names[i]);
  return s + "]";
}

nlohmann::ordered_json io_json(const std::vector<IoInfo>& list) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const IoInfo& io : list) out.push_back({{"name", io.name}, {"type", dtype_name(io.dtype)}, {"shape", dims_str(io)}});
  return out;
}

// Loads the model as `kiln bench` does, runs it twice on bench inputs (the first run records the
// memory plan, the second runs from the arena) and reports the session's memory.
Result<nlohmann::ordered_json> memory_json(const std::string& path, int level, int64_t batch, int64_t seq) {
  SessionOptions so;
  so.optimize_level = level;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, Session::load(path, so));
  KILN_ASSIGN_OR_RETURN(std::vector<Value> inputs, make_bench_inputs(session->inputs(), InputShapes{batch, seq, {}}));
  std::vector<Value> outputs;
  for (int i = 0; i < 2; ++i) KILN_RETURN_IF_ERROR(session->run_into(inputs, outputs));
  const MemoryInfo m = session->memory_info();
  return nlohmann::ordered_json{{"batch", batch},
                                {"seq", seq},
                                {"optimize_level", level},
                                {"weight_bytes", m.weight_bytes},
                                {"released_weight_bytes", m.released_weight_bytes},
                                {"plan_bytes", m.plan_bytes},
                                {"arena_bytes", m.arena_bytes},
                                {"peak_live_bytes", m.peak_live_bytes},
                                {"activation_bytes", m.activation_bytes},
                                {"activations", m.activations},
                                {"output_bytes", m.output_bytes},
                                {"second_run_from_arena", m.arena_runs == 1 && m.stray_runs == 0}};
}

std::string mb(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MB", bytes / 1e6);
  return buf;
}

void print_memory(const nlohmann::ordered_json& m) {
  auto i = [&](const char* key) { return m[key].get<int64_t>(); };
  std::cout << "memory      (batch " << i("batch") << ", seq " << i("seq") << ", -O" << i("optimize_level") << ")\n"
            << "  weights       " << mb(i("weight_bytes")) << ", of which released after prepacking "
            << mb(i("released_weight_bytes")) << "\n"
            << "  plan          " << mb(i("plan_bytes")) << " (prepacked weights, kernels and plan, allocated by compiling)\n"
            << "  activations   peak " << mb(i("arena_bytes")) << " (the arena; at best " << mb(i("peak_live_bytes"))
            << "), " << mb(i("activation_bytes")) << " in " << i("activations")
            << " tensors without reuse, outputs " << mb(i("output_bytes")) << "\n"
            << "  steady state  "
            << (m["second_run_from_arena"].get<bool>() ? "the second run came from the arena"
                                                       : "the second run strayed from the plan (data-dependent shapes)")
            << "\n";
}

}  // namespace

void add_info_command(CLI::App& app, int* exit_code) {
  auto model_path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto batch = std::make_shared<int64_t>(1), seq = std::make_shared<int64_t>(128);
  auto memory = std::make_shared<bool>(false);
  auto kernels = std::make_shared<bool>(false);
  auto level = std::make_shared<int>(SessionOptions{}.optimize_level);  // what `kiln bench` loads with
  CLI::App* cmd = app.add_subcommand("info", "Describe a model");
  cmd->add_option("model", *model_path, "ONNX model")->required();
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->add_option("--batch", *batch, "Dynamic first dimension for the FLOPs estimate (and --memory)")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--seq", *seq, "Other dynamic dimensions for the FLOPs estimate (and --memory)")->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--memory", *memory,
                "Run the model twice as `kiln bench` would and report weights, prepacked weights and peak activation memory");
  cmd->add_flag("--kernels", *kernels,
                "Load the model as `kiln bench` would and list the nodes that run on plain reference loops (no fast "
                "kernel for their op, types or attributes)");
  cmd->add_option("-O,--optimize", *level, "With --memory or --kernels: optimization at load, 0-3 (default: as kiln bench)")->check(CLI::Range(0, 3));
  cmd->callback([model_path, json, batch, seq, memory, kernels, level, exit_code] {
    auto model = Model::load(*model_path);
    if (!model) {
      *exit_code = report_failure("info", model.status());
      return;
    }
    const ModelSummary sum = model->summary(*batch, *seq);
    nlohmann::ordered_json j;
    j["model"] = *model_path;
    j["producer"] = model->producer_name() + " " + model->producer_version();
    j["ir_version"] = model->ir_version();
    for (const auto& [domain, version] : model->opsets()) j["opsets"][domain.empty() ? "ai.onnx" : domain] = version;
    j["inputs"] = io_json(model->inputs());
    j["outputs"] = io_json(model->outputs());
    j["nodes"] = sum.nodes;
    j["parameters"] = sum.parameters;
    j["parameter_bytes"] = sum.parameter_bytes;
    j["ops"] = sum.ops;
    if (sum.flops >= 0) {
      j["gflops"] = sum.flops / 1e9;
      j["gflops_bound_dims"] = {{"batch", *batch}, {"seq", *seq}};
      j["nodes_without_cost"] = sum.nodes_without_cost;
    } else {
      j["shape_inference_error"] = sum.shape_error;
    }
    if (*memory) {
      auto m = memory_json(*model_path, *level, *batch, *seq);
      if (!m) {
        *exit_code = report_failure("info", m.status().with_context("--memory"));
        return;
      }
      j["memory"] = std::move(m).value();
    }
    std::vector<ReferenceNode> slow;
    if (*kernels) {
      SessionOptions so;
      so.optimize_level = *level;
      auto session = Session::load(*model_path, so);
      if (!session) {
        *exit_code = report_failure("info", session.status().with_context("--kernels"));
        return;
      }
      slow = (*session)->reference_nodes();
      j["reference_kernels"] = nlohmann::ordered_json::array();
      for (const ReferenceNode& r : slow)
        j["reference_kernels"].push_back({{"node", r.node},
                                          {"op", (r.domain.empty() ? "" : r.domain + ".") + r.op_type},
                                          {"inputs", r.input_types},
                                          {"attributes", r.attributes}});
    }
    if (*json) {
      std::cout << j.dump(2) << "\n";
      return;
    }
    std::cout << "model       " << *model_path << "\nproducer    " << j["producer"].get<std::string>()
              << "\nopsets     ";
    for (const auto& [domain, version] : j["opsets"].items()) std::cout << " " << domain << "=" << version;
    std::cout << "\n";
    for (const char* side : {"inputs", "outputs"}) {
      std::cout << side << ":\n";
      for (const auto& io : j[side])
        std::cout << "  " << io["name"].get<std::string>() << "  " << io["type"].get<std::string>() << " "
                  << io["shape"].get<std::string>() << "\n";
    }
    std::cout << "nodes       " << sum.nodes << "\nparameters  " << sum.parameters << " (" << sum.parameter_bytes / 1e6
              << " MB)\n";
    if (j.contains("gflops"))
      std::cout << "GFLOPs      " << j["gflops"].get<double>() << " (batch " << *batch << ", seq " << *seq << "; "
                << j["nodes_without_cost"].get<int64_t>() << " nodes without a known cost)\n";
    if (j.contains("shape_inference_error"))
      std::cout << "shape inference failed: " << j["shape_inference_error"].get<std::string>() << "\n";
    std::cout << "operators:\n";
    for (const auto& [op, n] : sum.ops) std::cout << "  " << op << " " << n << "\n";
    if (j.contains("memory")) print_memory(j["memory"]);
    if (*kernels) {
      std::cout << "reference kernels (-O" << *level << "): " << slow.size() << " nodes run plain reference loops"
                << (slow.empty() ? "" : ":") << "\n";
      for (const ReferenceNode& r : slow)
        std::cout << "  " << (r.domain.empty() ? "" : r.domain + ".") << r.op_type << "  " << r.node << "  "
                  << r.input_types << (r.attributes.empty() ? "" : "  " + r.attributes) << "\n";
    }
  });
}

}  // namespace kiln::cli
