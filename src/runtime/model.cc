// kiln::Model (kiln/model.h): the IR behind a shared pointer, copied before a change while a
// Session shares it, so that sessions never see a graph change under them.
#include "kiln/model.h"

#include <filesystem>

#include "ir/graph.h"
#include "ir/shape_inference.h"
#include "onnx/model_io.h"
#include "quantize/quantize_internal.h"
#include "runtime/io_info.h"

namespace kiln {

Result<Model> Model::load(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return Status::error(StatusCode::kNotFound, path + ": cannot open: no such file");
  auto m = onnx_io::load_model(path);
  if (!m) return m.status().with_default_code(StatusCode::kInvalidModel);
  return Model(std::make_shared<ir::Model>(std::move(m).value()));
}

Result<Model> Model::load_bytes(std::string_view bytes, const std::string& base_dir) {
  auto m = onnx_io::parse_model(std::string(bytes), base_dir);
  if (!m) return m.status().with_default_code(StatusCode::kInvalidModel);
  return Model(std::make_shared<ir::Model>(std::move(m).value()));
}

Status Model::save(const std::string& path, const SaveOptions& options, SaveReport* report) const {
  return onnx_io::save_model(*ir_, path, options, report);
}

Result<std::string> Model::to_bytes() const { return onnx_io::serialize_model(*ir_); }

ir::Model& Model::mutable_ir() {
  if (ir_.use_count() > 1) ir_ = std::make_shared<ir::Model>(*ir_);
  return *ir_;
}

Result<OptimizeReport> Model::optimize(const OptimizeOptions& options) {
  // On a copy, so that a failing pass leaves the model as it was.
  ir::Model copy = *ir_;
  auto report = kiln::optimize(copy, options);
  if (!report) return report.status().with_default_code(StatusCode::kInvalidModel);
  ir_ = std::make_shared<ir::Model>(std::move(copy));
  return report;
}

Result<QuantizeReport> Model::quantize(const CalibrationReader& next, const QuantizeOptions& options,
                                       const CalibrationReader& held_out) {
  ir::Model copy = *ir_;  // as optimize(): a failure leaves the model as it was
  auto report = quantize::quantize_model(copy, next, options, held_out);
  if (!report) return report.status().with_default_code(StatusCode::kInvalidArgument);
  ir_ = std::make_shared<ir::Model>(std::move(copy));
  return report;
}

void Model::clear_backend_choices() { record_backend_choices(mutable_ir(), {}); }

Result<bool> Model::optimize_unless_saved(int level) {
  ir::Model copy = *ir_;  // as optimize(): a failing pass leaves the model as it was
  auto optimized = kiln::optimize_unless_saved(copy, level);
  if (!optimized) return optimized.status().with_default_code(StatusCode::kInvalidModel);
  if (*optimized) ir_ = std::make_shared<ir::Model>(std::move(copy));
  return optimized;
}

Result<TuneReport> Model::tune(const std::vector<Value>& inputs, const TuneOptions& options) {
  // Backends take nodes by their inputs' types, as Session::load infers them.
  ir::Model& m = mutable_ir();
  (void)ir::infer_shapes(m);
  KILN_ASSIGN_OR_RETURN(TuneReport report, kiln::tune(m, inputs, options));
  record_backend_choices(m, report.choices);
  return report;
}

std::vector<IoInfo> Model::inputs() const { return runtime::user_inputs(ir_->graph); }
std::vector<IoInfo> Model::outputs() const { return runtime::graph_outputs(ir_->graph); }
const std::vector<std::pair<std::string, std::string>>& Model::metadata() const {
  return ir_->metadata;
}
std::string Model::producer_name() const { return ir_->producer_name; }
std::string Model::producer_version() const { return ir_->producer_version; }
std::string Model::graph_name() const { return ir_->graph.name; }
std::string Model::domain() const { return ir_->domain; }
std::string Model::description() const { return ir_->doc; }
int64_t Model::model_version() const { return ir_->model_version; }
std::map<std::string, int64_t> Model::opsets() const { return ir_->opsets; }
bool Model::optimized() const { return is_optimized(*ir_); }
int64_t Model::ir_version() const { return ir_->ir_version; }

namespace {

void count_ops(const ir::Graph& g, std::map<std::string, int64_t>& ops) {
  for (const ir::Node& n : g.nodes) {
    ++ops[(n.domain.empty() ? "" : n.domain + ".") + n.op_type];
    for (const ir::Attribute& a : n.attrs) {
      if (a.g) count_ops(*a.g, ops);
      for (const auto& sg : a.graphs) count_ops(*sg, ops);
    }
  }
}

}  // namespace

ModelSummary Model::summary(int64_t batch, int64_t seq) const {
  ModelSummary s;
  const ir::Graph& g = ir_->graph;
  s.nodes = static_cast<int64_t>(g.nodes.size());
  count_ops(g, s.ops);
  for (const auto& [name, t] : g.initializers) {
    s.parameters += t.numel();
    s.parameter_bytes += static_cast<int64_t>(t.nbytes());
  }
  // On a copy (weights shared) that shape inference may annotate. It may fail on a model that
  // still runs (a declared shape the data contradicts): then there is no estimate.
  ir::Model m = *ir_;
  if (Status inferred = ir::infer_shapes(m); !inferred.is_ok()) {
    s.shape_error = inferred.message();
    return s;
  }
  std::map<std::string, int64_t> bindings;  // the bench rule's
  for (const ir::ValueInfo& v : g.inputs)
    for (size_t i = 0; i < v.type.shape.size(); ++i)
      if (!v.type.shape[i].symbol.empty()) bindings.emplace(v.type.shape[i].symbol, i == 0 ? batch : seq);
  if (auto cost = ir::estimate_cost(m, bindings)) {
    s.flops = static_cast<double>(cost->flops);
    s.nodes_without_cost = cost->unknown_nodes;
  } else {
    s.shape_error = cost.status().message();
  }
  return s;
}

}  // namespace kiln
