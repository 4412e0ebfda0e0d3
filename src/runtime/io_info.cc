#include "runtime/io_info.h"

namespace kiln::runtime {

IoInfo io_info(const ir::ValueInfo& v) {
  IoInfo io;
  io.name = v.name;
  io.dtype = v.type.dtype;
  switch (v.type.kind) {
    case ir::TypeInfo::Kind::kSequence: io.kind = Value::Kind::kSequence; break;
    case ir::TypeInfo::Kind::kOptional: io.kind = Value::Kind::kOptional; break;
    default: io.kind = Value::Kind::kTensor; break;
  }
  io.has_shape = v.type.has_shape;
  for (const auto& d : v.type.shape) {
    io.dims.push_back(d.known() ? d.value : -1);
    io.dim_names.push_back(d.symbol);
  }
  return io;
}

std::vector<IoInfo> user_inputs(const ir::Graph& g) {
  std::vector<IoInfo> out;
  for (const ir::ValueInfo& v : g.inputs)
    if (!g.initializers.count(v.name)) out.push_back(io_info(v));
  return out;
}

std::vector<IoInfo> graph_outputs(const ir::Graph& g) {
  std::vector<IoInfo> out;
  for (const ir::ValueInfo& v : g.outputs) out.push_back(io_info(v));
  return out;
}

}  // namespace kiln::runtime
