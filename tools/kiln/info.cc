// `kiln info MODEL [--json]`: inputs and outputs, opsets, operator histogram, parameters.
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "ir/graph.h"
#include "ir/shape_inference.h"
#include "onnx/model_io.h"

namespace kiln::cli {
namespace {

std::string dims_str(const ir::TypeInfo& t) {
  if (t.kind == ir::TypeInfo::Kind::kSequence) return "sequence";
  if (t.kind == ir::TypeInfo::Kind::kOptional) return "optional";
  if (!t.has_shape) return "?";
  std::string s = "[";
  for (size_t i = 0; i < t.shape.size(); ++i) {
    const ir::Dim& d = t.shape[i];
    s += (i ? "," : "") + (d.known() ? std::to_string(d.value) : d.symbol.empty() ? "?" : d.symbol);
  }
  return s + "]";
}

void count_ops(const ir::Graph& g, std::map<std::string, int64_t>& hist) {
  for (const auto& n : g.nodes) {
    ++hist[(n.domain.empty() ? "" : n.domain + ".") + n.op_type];
    for (const auto& a : n.attrs) {
      if (a.g) count_ops(*a.g, hist);
      for (const auto& sg : a.graphs) count_ops(*sg, hist);
    }
  }
}

nlohmann::ordered_json io_json(const std::vector<ir::ValueInfo>& list, const ir::Graph& g) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& v : list) {
    if (g.initializers.count(v.name)) continue;
    out.push_back({{"name", v.name}, {"type", dtype_name(v.type.dtype)}, {"shape", dims_str(v.type)}});
  }
  return out;
}

// Dynamic dims bound as the bench rule does: the first dim of an input is the batch, others seq.
std::map<std::string, int64_t> bench_bindings(const ir::Graph& g, int64_t batch, int64_t seq) {
  std::map<std::string, int64_t> b;
  for (const auto& v : g.inputs)
    for (size_t i = 0; i < v.type.shape.size(); ++i)
      if (!v.type.shape[i].symbol.empty()) b.emplace(v.type.shape[i].symbol, i == 0 ? batch : seq);
  return b;
}

}  // namespace

void add_info_command(CLI::App& app, int* exit_code) {
  auto model_path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto batch = std::make_shared<int64_t>(1), seq = std::make_shared<int64_t>(128);
  CLI::App* cmd = app.add_subcommand("info", "Describe a model");
  cmd->add_option("model", *model_path, "ONNX model")->required();
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->add_option("--batch", *batch, "Dynamic first dimension for the FLOPs estimate")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--seq", *seq, "Other dynamic dimensions for the FLOPs estimate")->check(CLI::Range(1, 1 << 20));
  cmd->callback([model_path, json, batch, seq, exit_code] {
    auto model = onnx_io::load_model(*model_path);
    if (!model) {
      std::cerr << "kiln info: " << model.status().message() << "\n";
      *exit_code = 1;
      return;
    }
    const ir::Graph& g = model->graph;
    std::map<std::string, int64_t> hist;
    count_ops(g, hist);
    int64_t params = 0, bytes = 0;
    for (const auto& [name, t] : g.initializers) {
      params += t.numel();
      bytes += static_cast<int64_t>(t.nbytes());
    }
    nlohmann::ordered_json j;
    j["model"] = *model_path;
    j["producer"] = model->producer_name + " " + model->producer_version;
    j["ir_version"] = model->ir_version;
    for (const auto& [domain, version] : model->opsets) j["opsets"][domain.empty() ? "ai.onnx" : domain] = version;
    j["inputs"] = io_json(g.inputs, g);
    j["outputs"] = io_json(g.outputs, g);
    j["nodes"] = g.nodes.size();
    j["parameters"] = params;
    j["parameter_bytes"] = bytes;
    j["ops"] = hist;
    // Shape inference may fail on a model that still runs (e.g. a declared shape the data
    // contradicts); the estimate is then left out rather than failing the whole command.
    Status inferred = ir::infer_shapes(*model);
    if (inferred.is_ok()) {
      auto cost = ir::estimate_cost(*model, bench_bindings(g, *batch, *seq));
      if (cost) {
        j["gflops"] = cost->flops / 1e9;
        j["gflops_bound_dims"] = {{"batch", *batch}, {"seq", *seq}};
        j["nodes_without_cost"] = cost->unknown_nodes;
      }
    } else {
      j["shape_inference_error"] = inferred.message();
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
    std::cout << "nodes       " << g.nodes.size() << "\nparameters  " << params << " (" << bytes / 1e6 << " MB)\n";
    if (j.contains("gflops"))
      std::cout << "GFLOPs      " << j["gflops"].get<double>() << " (batch " << *batch << ", seq " << *seq << "; "
                << j["nodes_without_cost"].get<int64_t>() << " nodes without a known cost)\n";
    if (j.contains("shape_inference_error"))
      std::cout << "shape inference failed: " << j["shape_inference_error"].get<std::string>() << "\n";
    std::cout << "operators:\n";
    for (const auto& [op, n] : hist) std::cout << "  " << op << " " << n << "\n";
  });
}

}  // namespace kiln::cli
