// `kiln info MODEL [--json]`: inputs and outputs, opsets, operator histogram, parameters.
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "ir/graph.h"
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

}  // namespace

void add_info_command(CLI::App& app, int* exit_code) {
  auto model_path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("info", "Describe a model");
  cmd->add_option("model", *model_path, "ONNX model")->required();
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->callback([model_path, json, exit_code] {
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
    std::cout << "operators:\n";
    for (const auto& [op, n] : hist) std::cout << "  " << op << " " << n << "\n";
  });
}

}  // namespace kiln::cli
