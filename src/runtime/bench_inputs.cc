// The benchmark rule's inputs (../shared/bench/README.md), shared by `kiln bench`, the tuner's
// callers and the Python package, so that every figure kiln prints runs on the same values.
#include "kiln/bench_inputs.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>

#include "core/float_convert.h"

namespace kiln {
namespace {

bool name_has(const std::string& name, const char* word) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower.find(word) != std::string::npos;
}

// "NAME=D0,D1,..." into the name and the dims.
Result<std::pair<std::string, Shape>> parse_shape(const std::string& item) {
  const size_t eq = item.rfind('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
    return Status::invalid_argument("--shape expects NAME=D0,D1,..., got '" + item + "'");
  Shape dims;
  const std::string list = item.substr(eq + 1);
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string d = list.substr(start, comma - start);
    int64_t v = -1;
    const char* end = d.data() + d.size();
    if (d.empty() || std::from_chars(d.data(), end, v).ptr != end || v < 0 || v > (int64_t{1} << 40))
      return Status::invalid_argument("--shape " + item + ": '" + d + "' is not a dimension size");
    dims.push_back(v);
    start = comma + 1;
  }
  return std::make_pair(item.substr(0, eq), dims);
}

// The shape of input `io`: its --shape, checked against the model's rank and fixed dims, or its
// own dims with the dynamic ones from batch and seq.
Result<Shape> input_shape(const IoInfo& io, const std::map<std::string, Shape>& named, const InputShapes& o) {
  auto it = named.find(io.name);
  if (it == named.end()) {
    Shape shape;
    for (size_t i = 0; i < io.dims.size(); ++i) shape.push_back(io.dims[i] >= 0 ? io.dims[i] : (i == 0 ? o.batch : o.seq));
    return shape;
  }
  const Shape& s = it->second;
  std::string model_dims = "[";
  for (size_t i = 0; i < io.dims.size(); ++i) model_dims += (i ? "," : "") + (io.dims[i] >= 0 ? std::to_string(io.dims[i]) : "?");
  model_dims += "]";
  if (s.size() != io.dims.size())
    return Status::invalid_argument("--shape " + io.name + "=" + shape_str(s) + ": the input has rank " +
                         std::to_string(io.dims.size()) + " " + model_dims);
  for (size_t i = 0; i < s.size(); ++i)
    if (io.dims[i] >= 0 && io.dims[i] != s[i])
      return Status::invalid_argument("--shape " + io.name + "=" + shape_str(s) + ": dim " + std::to_string(i) +
                           " of the input is fixed at " + std::to_string(io.dims[i]) + " " + model_dims);
  return s;
}

Result<Tensor> bench_tensor(const IoInfo& io, const Shape& shape) {
  const DType t = io.dtype;
  KILN_ASSIGN_OR_RETURN(Tensor x, Tensor::make(t, shape));
  if (dtype_is_integer(t) || t == DType::kBool) {
    const bool mask = name_has(io.name, "mask"), type = name_has(io.name, "type");
    for (int64_t i = 0; i < x.numel(); ++i)
      store_from_double(t, x.raw_data(), i, mask ? 1.0 : type ? 0.0 : static_cast<double>((i * 7919) % 1000));
  } else if (dtype_is_float(t)) {
    int64_t s = 12345;
    for (int64_t i = 0; i < x.numel(); ++i) {
      s = (s * 1103515245 + 12345) & 0x7fffffff;
      const float v = static_cast<float>(static_cast<double>(s) / 2147483647.0 - 0.5);
      store_from_double(t, x.raw_data(), i, v);
    }
  } else {
    return Status::not_implemented("input '" + io.name + "' of type " + dtype_name(t) + " cannot be generated; pass it with -i");
  }
  return x;
}

}  // namespace

Result<std::vector<Value>> make_bench_inputs(const std::vector<IoInfo>& ios, const InputShapes& o) {
  std::map<std::string, Shape> named;
  for (const std::string& item : o.shapes) {
    KILN_ASSIGN_OR_RETURN(auto name_dims, parse_shape(item));
    if (std::none_of(ios.begin(), ios.end(), [&](const IoInfo& io) { return io.name == name_dims.first; })) {
      std::string names;
      for (const IoInfo& io : ios) names += (names.empty() ? "" : ", ") + io.name;
      return Status::invalid_argument("--shape " + item + ": the model has no input '" + name_dims.first + "' (inputs: " + names + ")");
    }
    named[name_dims.first] = name_dims.second;
  }
  std::vector<Value> values;
  for (const IoInfo& io : ios) {
    if (io.kind != Value::Kind::kTensor)
      return Status::not_implemented("input '" + io.name + "' is not a tensor and cannot be generated; pass it with -i");
    KILN_ASSIGN_OR_RETURN(Shape shape, input_shape(io, named, o));
    auto t = bench_tensor(io, shape);
    if (!t) return t.status();
    values.push_back(Value::of(std::move(t).value()));
  }
  return values;
}

}  // namespace kiln
