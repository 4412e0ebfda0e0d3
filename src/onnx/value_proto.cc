// TypeProto <-> TypeInfo, and run-time values as TensorProto / SequenceProto / OptionalProto.
#include <cstring>
#include <fstream>
#include <sstream>

#include "onnx/model_io.h"
#include "onnx/proto_convert.h"

namespace kiln::onnx_io {

Result<ir::TypeInfo> type_from_proto(const onnx::TypeProto& p, int depth) {
  if (depth > kMaxGraphNesting) return Status::error("type nested too deeply");
  ir::TypeInfo t;
  // 0 (undefined) is allowed: a type may leave its element type to inference.
  auto elem_type = [](int32_t e) -> Result<DType> {
    if (e != 0 && !dtype_is_valid(e)) return Status::error("unsupported element type " + std::to_string(e));
    return static_cast<DType>(e);
  };
  auto read_shape = [&](const onnx::TensorShapeProto& s) {
    t.has_shape = true;
    for (const auto& d : s.dim()) {
      ir::Dim dim;
      if (d.has_dim_value()) dim.value = d.dim_value();
      else if (d.has_dim_param()) dim.symbol = d.dim_param();
      t.shape.push_back(dim);
    }
  };
  if (p.has_tensor_type()) {
    t.kind = ir::TypeInfo::Kind::kTensor;
    KILN_ASSIGN_OR_RETURN(t.dtype, elem_type(p.tensor_type().elem_type()));
    if (p.tensor_type().has_shape()) read_shape(p.tensor_type().shape());
  } else if (p.has_sparse_tensor_type()) {
    t.kind = ir::TypeInfo::Kind::kSparseTensor;
    KILN_ASSIGN_OR_RETURN(t.dtype, elem_type(p.sparse_tensor_type().elem_type()));
    if (p.sparse_tensor_type().has_shape()) read_shape(p.sparse_tensor_type().shape());
  } else if (p.has_sequence_type() || p.has_optional_type() || p.has_map_type()) {
    const onnx::TypeProto& inner = p.has_sequence_type()   ? p.sequence_type().elem_type()
                                   : p.has_optional_type() ? p.optional_type().elem_type()
                                                           : p.map_type().value_type();
    t.kind = p.has_sequence_type()   ? ir::TypeInfo::Kind::kSequence
             : p.has_optional_type() ? ir::TypeInfo::Kind::kOptional
                                     : ir::TypeInfo::Kind::kMap;
    if (p.has_map_type()) {
      KILN_ASSIGN_OR_RETURN(t.dtype, elem_type(p.map_type().key_type()));
    }
    KILN_ASSIGN_OR_RETURN(ir::TypeInfo e, type_from_proto(inner, depth + 1));
    t.elem = std::make_shared<ir::TypeInfo>(std::move(e));
  }
  return t;
}

void type_to_proto(const ir::TypeInfo& t, onnx::TypeProto* p) {
  auto write_shape = [&](onnx::TensorShapeProto* s) {
    for (const ir::Dim& d : t.shape) {
      auto* dim = s->add_dim();
      if (d.known()) dim->set_dim_value(d.value);
      else if (!d.symbol.empty()) dim->set_dim_param(d.symbol);
    }
  };
  switch (t.kind) {
    case ir::TypeInfo::Kind::kTensor:
      p->mutable_tensor_type()->set_elem_type(static_cast<int32_t>(t.dtype));
      if (t.has_shape) write_shape(p->mutable_tensor_type()->mutable_shape());
      break;
    case ir::TypeInfo::Kind::kSparseTensor:
      p->mutable_sparse_tensor_type()->set_elem_type(static_cast<int32_t>(t.dtype));
      if (t.has_shape) write_shape(p->mutable_sparse_tensor_type()->mutable_shape());
      break;
    case ir::TypeInfo::Kind::kSequence:
      if (t.elem) type_to_proto(*t.elem, p->mutable_sequence_type()->mutable_elem_type());
      else p->mutable_sequence_type();
      break;
    case ir::TypeInfo::Kind::kOptional:
      if (t.elem) type_to_proto(*t.elem, p->mutable_optional_type()->mutable_elem_type());
      else p->mutable_optional_type();
      break;
    case ir::TypeInfo::Kind::kMap:
      p->mutable_map_type()->set_key_type(static_cast<int32_t>(t.dtype));
      if (t.elem) type_to_proto(*t.elem, p->mutable_map_type()->mutable_value_type());
      break;
    case ir::TypeInfo::Kind::kUnknown: break;
  }
}

// A sequence of maps: each MapProto's keys as a 1-D tensor and its values (a sequence of scalar
// tensors) as one 1-D tensor.
Result<Value> value_from_map_sequence_proto(const onnx::SequenceProto& p) {
  std::vector<Tensor> keys, values;
  DType dtype = DType::kUndefined;
  for (const onnx::MapProto& m : p.map_values()) {
    const bool strings = m.key_type() == static_cast<int32_t>(DType::kString);
    const int64_t n = strings ? m.string_keys_size() : m.keys_size();
    if (m.values().tensor_values_size() != n)
      return Status::error("sequence '" + p.name() + "': a map has " + std::to_string(n) + " keys and " +
                           std::to_string(m.values().tensor_values_size()) + " values");
    KILN_ASSIGN_OR_RETURN(Tensor k, Tensor::make(strings ? DType::kString : DType::kInt64, {n}));
    for (int64_t i = 0; i < n; ++i) {
      if (strings) k.data<std::string>()[i] = m.string_keys(static_cast<int>(i));
      else k.data<int64_t>()[i] = m.keys(static_cast<int>(i));
    }
    std::vector<Tensor> items;
    for (const auto& tp : m.values().tensor_values()) {
      KILN_ASSIGN_OR_RETURN(Tensor t, tensor_from_proto(tp, ""));
      if (t.numel() != 1 || t.dtype() == DType::kString || (!items.empty() && t.dtype() != items[0].dtype()))
        return Status::error("sequence '" + p.name() + "': a map value is not a numeric scalar of the map's type");
      items.push_back(std::move(t));
    }
    if (!items.empty()) dtype = items[0].dtype();
    KILN_ASSIGN_OR_RETURN(Tensor v, Tensor::make(dtype == DType::kUndefined ? DType::kFloat32 : dtype, {n}));
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(static_cast<char*>(v.raw_data()) + i * dtype_size(v.dtype()), items[i].raw_data(), dtype_size(v.dtype()));
    keys.push_back(std::move(k));
    values.push_back(std::move(v));
  }
  return Value::of_map_sequence(std::move(keys), std::move(values), dtype);
}

Result<Value> value_from_sequence_proto(const onnx::SequenceProto& p) {
  if (p.elem_type() == onnx::SequenceProto::MAP) return value_from_map_sequence_proto(p);
  if (p.elem_type() != onnx::SequenceProto::TENSOR && p.elem_type() != onnx::SequenceProto::UNDEFINED)
    return Status::error("sequence '" + p.name() + "': only sequences of tensors or maps are supported");
  std::vector<Tensor> items;
  DType dtype = DType::kUndefined;
  for (const auto& tp : p.tensor_values()) {
    KILN_ASSIGN_OR_RETURN(Tensor t, tensor_from_proto(tp, ""));
    dtype = t.dtype();
    items.push_back(std::move(t));
  }
  return Value::of_sequence(std::move(items), dtype);
}

Result<Value> value_from_optional_proto(const onnx::OptionalProto& p) {
  if (p.elem_type() == onnx::OptionalProto::TENSOR) {
    if (!p.has_tensor_value()) return Value::empty_optional(Value::Kind::kTensor, DType::kUndefined);
    KILN_ASSIGN_OR_RETURN(Tensor t, tensor_from_proto(p.tensor_value(), ""));
    return Value::optional_of(Value::of(std::move(t)));
  }
  if (p.elem_type() == onnx::OptionalProto::SEQUENCE) {
    if (!p.has_sequence_value()) return Value::empty_optional(Value::Kind::kSequence, DType::kUndefined);
    KILN_ASSIGN_OR_RETURN(Value s, value_from_sequence_proto(p.sequence_value()));
    return Value::optional_of(std::move(s));
  }
  if (p.elem_type() == onnx::OptionalProto::UNDEFINED)
    return Value::empty_optional(Value::Kind::kTensor, DType::kUndefined);
  return Status::error("optional '" + p.name() + "': unsupported element kind");
}

void value_to_sequence_proto(const Value& v, const std::string& name, onnx::SequenceProto* p) {
  p->set_name(name);
  if (v.is_map_sequence()) {
    p->set_elem_type(onnx::SequenceProto::MAP);
    for (size_t i = 0; i < v.sequence.size() && i < v.sequence_keys.size(); ++i) {
      const Tensor& k = v.sequence_keys[i];
      onnx::MapProto* m = p->add_map_values();
      m->set_key_type(static_cast<int32_t>(k.dtype()));
      for (int64_t j = 0; j < k.numel(); ++j) {
        if (k.dtype() == DType::kString) m->add_string_keys(k.data<std::string>()[j]);
        else m->add_keys(k.data<int64_t>()[j]);
      }
      onnx::SequenceProto* vals = m->mutable_values();
      vals->set_elem_type(onnx::SequenceProto::TENSOR);
      const Tensor& vs = v.sequence[i];
      for (int64_t j = 0; j < vs.numel(); ++j) {
        Tensor one = Tensor::make(vs.dtype(), {}).value();
        std::memcpy(one.raw_data(), static_cast<const char*>(vs.raw_data()) + j * dtype_size(vs.dtype()), dtype_size(vs.dtype()));
        tensor_to_proto(one, "", vals->add_tensor_values());
      }
    }
    return;
  }
  p->set_elem_type(onnx::SequenceProto::TENSOR);
  for (const Tensor& t : v.sequence) tensor_to_proto(t, "", p->add_tensor_values());
}

void value_to_optional_proto(const Value& v, const std::string& name, onnx::OptionalProto* p) {
  p->set_name(name);
  const bool seq = v.element_kind == Value::Kind::kSequence;
  p->set_elem_type(seq ? onnx::OptionalProto::SEQUENCE : onnx::OptionalProto::TENSOR);
  if (!v.has_element) return;
  if (seq) value_to_sequence_proto(v, "", p->mutable_sequence_value());
  else tensor_to_proto(v.tensor, "", p->mutable_tensor_value());
}

Result<Value> parse_value(const std::string& bytes, const ir::TypeInfo& type) {
  switch (type.kind) {
    case ir::TypeInfo::Kind::kSequence: {
      onnx::SequenceProto p;
      if (!p.ParseFromString(bytes)) return Status::error("not a valid SequenceProto");
      return value_from_sequence_proto(p);
    }
    case ir::TypeInfo::Kind::kOptional: {
      onnx::OptionalProto p;
      if (!p.ParseFromString(bytes)) return Status::error("not a valid OptionalProto");
      return value_from_optional_proto(p);
    }
    default: {
      onnx::TensorProto p;
      if (!p.ParseFromString(bytes)) return Status::error("not a valid TensorProto");
      KILN_ASSIGN_OR_RETURN(Tensor t, tensor_from_proto(p, ""));
      return Value::of(std::move(t));
    }
  }
}

Result<std::string> serialize_value(const Value& value, const std::string& name) {
  std::string out;
  bool ok = false;
  if (value.is_sequence()) {
    onnx::SequenceProto p;
    value_to_sequence_proto(value, name, &p);
    ok = p.SerializeToString(&out);
  } else if (value.is_optional()) {
    onnx::OptionalProto p;
    value_to_optional_proto(value, name, &p);
    ok = p.SerializeToString(&out);
  } else {
    onnx::TensorProto p;
    tensor_to_proto(value.tensor, name, &p);
    ok = p.SerializeToString(&out);
  }
  if (!ok) return Status::error("cannot serialise value '" + name + "' (over 2 GiB?)");
  return out;
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::error("cannot open '" + path + "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return Status::error("error reading '" + path + "'");
  return ss.str();
}

Status write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return Status::error("cannot create '" + path + "'");
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) return Status::error("error writing '" + path + "'");
  return Status::ok();
}

}  // namespace kiln::onnx_io
