// The op schema registry and the helpers InferFns and CostFns share (broadcasting, dim algebra).
#include "ir/op_schema.h"

#include <cmath>

namespace kiln::ir {

namespace {
const TypeInfo& unknown_type() {
  static const TypeInfo t;
  return t;
}
}  // namespace

const TypeInfo& InferContext::input(size_t i) const {
  return i < inputs.size() ? inputs[i] : unknown_type();
}

std::optional<Dims> InferContext::dims_value(size_t i) const {
  if (i < values.size() && values[i]) return values[i];
  const Tensor* t = constant(i);
  if (!t || t->rank() > 1 || t->numel() > 4096) return std::nullopt;
  Dims d;
  for (int64_t k = 0; k < t->numel(); ++k) {
    if (t->dtype() == DType::kInt64) d.push_back(Dim{t->data<int64_t>()[k], ""});
    else if (t->dtype() == DType::kInt32) d.push_back(Dim{t->data<int32_t>()[k], ""});
    else return std::nullopt;
  }
  return d;
}

std::optional<std::vector<int64_t>> InferContext::int_values(size_t i) const {
  if (!has_input(i)) return std::nullopt;
  const Tensor* t = constant(i);
  if (t && (t->dtype() == DType::kInt64 || t->dtype() == DType::kInt32)) {
    std::vector<int64_t> v(t->numel());
    for (int64_t k = 0; k < t->numel(); ++k)
      v[k] = t->dtype() == DType::kInt64 ? t->data<int64_t>()[k] : t->data<int32_t>()[k];
    return v;
  }
  if (i < values.size() && values[i]) {
    std::vector<int64_t> v;
    for (const Dim& d : *values[i]) {
      if (!d.known()) return std::nullopt;
      v.push_back(d.value);
    }
    return v;
  }
  return std::nullopt;
}

std::optional<double> InferContext::scalar_value(size_t i) const {
  const Tensor* t = constant(i);
  if (!t || t->numel() != 1) {
    if (i < values.size() && values[i] && values[i]->size() == 1 && (*values[i])[0].known())
      return static_cast<double>((*values[i])[0].value);
    return std::nullopt;
  }
  switch (t->dtype()) {
    case DType::kFloat32: return t->data<float>()[0];
    case DType::kFloat64: return t->data<double>()[0];
    case DType::kInt64: return static_cast<double>(t->data<int64_t>()[0]);
    case DType::kInt32: return t->data<int32_t>()[0];
    case DType::kInt16: return t->data<int16_t>()[0];
    case DType::kInt8: return t->data<int8_t>()[0];
    case DType::kUInt8: return t->data<uint8_t>()[0];
    default: return std::nullopt;
  }
}

void InferContext::set_output_value(size_t i, Dims v) {
  if (output_values.size() <= i) output_values.resize(i + 1);
  output_values[i] = std::move(v);
}

Status InferContext::error(const std::string& message) const {
  return Status::error(node.describe() + ": " + message);
}

void OpSchemaRegistry::add(OpSchema schema) {
  auto key = std::make_pair(schema.domain, schema.op_type);
  schemas_[key] = std::make_unique<OpSchema>(std::move(schema));
}

const OpSchema* OpSchemaRegistry::find(const std::string& domain, const std::string& op_type) const {
  auto it = schemas_.find({normalize_domain(domain), op_type});
  return it == schemas_.end() ? nullptr : it->second.get();
}

std::vector<const OpSchema*> OpSchemaRegistry::all() const {
  std::vector<const OpSchema*> out;
  for (const auto& [k, s] : schemas_) out.push_back(s.get());
  return out;
}

OpSchemaRegistrar::OpSchemaRegistrar(const char* domain, std::initializer_list<const char*> op_types,
                                     OpSchema schema) {
  for (const char* op : op_types) {
    OpSchema s = schema;
    s.domain = normalize_domain(domain);
    s.op_type = op;
    OpSchemaRegistry::global().add(std::move(s));
  }
}

TypeInfo tensor_type(DType dtype, Dims shape) {
  TypeInfo t = TypeInfo::tensor(dtype);
  t.has_shape = true;
  t.shape = std::move(shape);
  return t;
}

TypeInfo tensor_type_unranked(DType dtype) { return TypeInfo::tensor(dtype); }

TypeInfo sequence_type(TypeInfo elem) {
  TypeInfo t;
  t.kind = TypeInfo::Kind::kSequence;
  t.elem = std::make_shared<TypeInfo>(std::move(elem));
  return t;
}

TypeInfo optional_type(TypeInfo elem) {
  TypeInfo t;
  t.kind = TypeInfo::Kind::kOptional;
  t.elem = std::make_shared<TypeInfo>(std::move(elem));
  return t;
}

Dim known_dim(int64_t v) { return Dim{v, ""}; }
Dim unknown_dim() { return Dim{}; }

bool same_dim(const Dim& a, const Dim& b) {
  if (a.known() || b.known()) return a.known() && b.known() && a.value == b.value;
  return !a.symbol.empty() && a.symbol == b.symbol;
}

Dim dim_mul(const Dim& a, const Dim& b) {
  if (a.known() && b.known()) return known_dim(a.value * b.value);
  if (a.known() && a.value == 1) return b;
  if (b.known() && b.value == 1) return a;
  if ((a.known() && a.value == 0) || (b.known() && b.value == 0)) return known_dim(0);
  return unknown_dim();
}

Dim dim_add(const Dim& a, const Dim& b) {
  if (a.known() && b.known()) return known_dim(a.value + b.value);
  if (a.known() && a.value == 0) return b;
  if (b.known() && b.value == 0) return a;
  return unknown_dim();
}

Dim dim_merge(const Dim& a, const Dim& b) {
  if (a.known()) return a;
  if (b.known()) return b;
  if (!a.symbol.empty()) return a;
  return b;
}

TypeInfo type_union(const TypeInfo& a, const TypeInfo& b) {
  if (a.kind != b.kind) return TypeInfo{};
  TypeInfo t;
  t.kind = a.kind;
  t.dtype = a.dtype == b.dtype ? a.dtype : DType::kUndefined;
  if (a.elem && b.elem) t.elem = std::make_shared<TypeInfo>(type_union(*a.elem, *b.elem));
  if (a.has_shape && b.has_shape && a.shape.size() == b.shape.size()) {
    t.has_shape = true;
    for (size_t i = 0; i < a.shape.size(); ++i)
      t.shape.push_back(same_dim(a.shape[i], b.shape[i]) ? a.shape[i] : unknown_dim());
  }
  return t;
}

Result<std::optional<Dims>> broadcast_shapes(const std::vector<const TypeInfo*>& types) {
  size_t rank = 0;
  for (const TypeInfo* t : types) {
    if (!t->has_shape) return std::optional<Dims>();
    rank = std::max(rank, t->shape.size());
  }
  Dims out(rank);
  for (size_t k = 0; k < rank; ++k) {
    // Dims aligned from the right; missing ones are 1.
    std::optional<int64_t> big;  // a known dim other than 1
    bool all_one = true;
    std::vector<Dim> open;  // dims not known
    for (const TypeInfo* t : types) {
      const size_t r = t->shape.size();
      if (k + r < rank) continue;
      const Dim& d = t->shape[k + r - rank];
      if (d.known()) {
        if (d.value != 1) {
          if (big && *big != d.value)
            return Status::error("cannot broadcast dims " + std::to_string(*big) + " and " +
                                 std::to_string(d.value));
          big = d.value;
          all_one = false;
        }
      } else {
        open.push_back(d);
        all_one = false;
      }
    }
    if (big) out[k] = known_dim(*big);
    else if (all_one) out[k] = known_dim(1);
    else {
      Dim d = open.front();
      for (const Dim& o : open)
        if (!same_dim(o, d)) d = unknown_dim();
      out[k] = d;
    }
  }
  return std::optional<Dims>(std::move(out));
}

Result<int64_t> normalize_axis(int64_t axis, int64_t rank, const Node& node) {
  if (axis < -rank || axis >= rank)
    return Status::error(node.describe() + ": axis " + std::to_string(axis) + " is out of range for rank " +
                         std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

std::optional<int64_t> type_numel(const TypeInfo& t) {
  auto s = t.static_shape();
  if (!s) return std::nullopt;
  int64_t n = 1;
  for (int64_t d : *s) n *= d;
  return n;
}

double type_bytes(const TypeInfo& t) {
  auto n = type_numel(t);
  return n ? static_cast<double>(*n) * static_cast<double>(dtype_size(t.dtype)) : 0.0;
}

double io_bytes(const InferContext& ctx, const std::vector<TypeInfo>& outputs) {
  double b = 0;
  for (size_t i = 0; i < ctx.inputs.size(); ++i)
    if (ctx.has_input(i)) b += type_bytes(ctx.inputs[i]);
  for (const TypeInfo& t : outputs) b += type_bytes(t);
  return b;
}

int64_t rank_of(const TypeInfo& t) { return t.has_shape ? static_cast<int64_t>(t.shape.size()) : -1; }

std::string dims_str(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) s += ",";
    s += d[i].known() ? std::to_string(d[i].value) : (d[i].symbol.empty() ? "?" : d[i].symbol);
  }
  return s + "]";
}

Cost default_cost(const OpSchema& schema, const InferContext& ctx, const std::vector<TypeInfo>& outputs) {
  Cost c;
  c.bytes = io_bytes(ctx, outputs);
  if (schema.elementwise && !outputs.empty()) {
    auto n = type_numel(outputs[0]);
    if (n) c.flops = schema.flops_per_element * static_cast<double>(*n);
  }
  return c;
}

}  // namespace kiln::ir
