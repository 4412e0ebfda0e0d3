// TensorProto <-> Tensor, with every storage field ONNX uses, size checks before copying, and
// int4/uint4 unpacked to one value per byte.
#include <algorithm>
#include <cstring>
#include <optional>

#include "onnx/proto_convert.h"

namespace kiln::onnx_io {
namespace {

bool is_4bit(DType t) { return t == DType::kInt4 || t == DType::kUInt4; }

// Unpacks two 4-bit values per byte (low nibble first), sign-extending for int4.
void unpack_4bit(const uint8_t* packed, int64_t n, bool is_signed, uint8_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    uint8_t nib = (packed[i / 2] >> ((i % 2) * 4)) & 0xf;
    out[i] = (is_signed && (nib & 0x8)) ? static_cast<uint8_t>(nib | 0xf0) : nib;
  }
}

Status data_size_error(const onnx::TensorProto& p, const Shape& shape, int64_t have, int64_t want) {
  return Status::error("tensor '" + p.name() + "' of shape " + shape_str(shape) + " has " +
                       std::to_string(have) + " bytes/elements of data, expected " +
                       std::to_string(want));
}

// Copies elements of a repeated proto field, converting each with `conv`.
template <typename Field, typename Conv>
Status copy_field(const onnx::TensorProto& p, const Field& field, int64_t want, const Shape& shape,
                  Conv conv) {
  if (field.size() != want) return data_size_error(p, shape, field.size(), want);
  for (int64_t i = 0; i < want; ++i) conv(i, field.Get(static_cast<int>(i)));
  return Status::ok();
}

// Bool bytes other than 0 and 1 become 1, so bool arithmetic stays defined.
void normalize_bool(Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = t.data<uint8_t>()[i] != 0;
}

// A decimal offset or length from external_data; nullopt on anything else.
std::optional<int64_t> parse_non_negative(const std::string& s) {
  if (s.empty() || s.size() > 18) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

Result<Tensor> tensor_from_proto(const onnx::TensorProto& p, const std::string& base_dir) {
  if (!dtype_is_valid(p.data_type()))
    return Status::error("tensor '" + p.name() + "' has unsupported data type " +
                         std::to_string(p.data_type()));
  const DType dtype = static_cast<DType>(p.data_type());
  Shape shape(p.dims().begin(), p.dims().end());
  KILN_ASSIGN_OR_RETURN(int64_t n, shape_numel(shape));
  // Check the size against the budget first, so the byte counts below cannot overflow and a
  // hostile dims list is refused before any data is read.
  const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
  KILN_RETURN_IF_ERROR(check_tensor_size(dtype, shape, n).with_context("tensor '" + p.name() + "'"));
  const int64_t raw_want = is_4bit(dtype) ? (n + 1) / 2 : n * elem;
  std::string external;
  const std::string* raw = p.has_raw_data() ? &p.raw_data() : nullptr;
  if (p.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    int64_t offset = 0, length = -1;
    const std::string what = "tensor '" + p.name() + "': external data";
    for (const auto& kv : p.external_data()) {
      if (kv.key() == "location") {
        location = kv.value();
      } else if (kv.key() == "offset" || kv.key() == "length") {
        auto v = parse_non_negative(kv.value());
        if (!v) return Status::error(what + " has " + kv.key() + " '" + kv.value() + "', not a non-negative integer");
        (kv.key() == "offset" ? offset : length) = *v;
      }
    }
    if (location.empty()) return Status::error(what + " has no location");
    if (dtype == DType::kString) return Status::error(what + " cannot hold strings");
    if (length >= 0 && length != raw_want) return data_size_error(p, shape, length, raw_want);
    if (is_4bit(dtype)) {
      KILN_ASSIGN_OR_RETURN(external, read_external_data(base_dir, location, offset, raw_want));
      raw = &external;
    } else {
      // Straight from the file into the tensor, once the file is known to hold it all.
      KILN_RETURN_IF_ERROR(check_external_data(base_dir, location, offset, raw_want));
      KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::make(dtype, shape));
      if (n == 0) return t;
      KILN_RETURN_IF_ERROR(read_external_data_into(base_dir, location, offset, raw_want, t.raw_data()));
      if (dtype == DType::kBool) normalize_bool(t);
      return t;
    }
  }
  // Check the data is all there before allocating: a 1e12-element dims with 4 bytes of data is
  // a corrupt model, not a request for terabytes.
  if (raw && dtype != DType::kString && static_cast<int64_t>(raw->size()) != raw_want)
    return data_size_error(p, shape, static_cast<int64_t>(raw->size()), raw_want);
  if (!raw) {
    const int64_t fields = p.float_data_size() + p.int32_data_size() + p.string_data_size() +
                           p.int64_data_size() + p.double_data_size() + p.uint64_data_size();
    const int64_t want = dtype == DType::kComplex64 || dtype == DType::kComplex128 ? 2 * n
                         : is_4bit(dtype) ? (n + 1) / 2 : n;
    if (fields != want) return data_size_error(p, shape, fields, want);
  }
  KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::make(dtype, shape));
  if (n == 0) return t;
  if (raw) {
    if (dtype == DType::kString) return Status::error("tensor '" + p.name() + "': strings cannot be raw data");
    if (is_4bit(dtype)) {
      unpack_4bit(reinterpret_cast<const uint8_t*>(raw->data()), n, dtype == DType::kInt4, t.data<uint8_t>());
    } else {
      std::memcpy(t.raw_data(), raw->data(), raw->size());
    }
    if (dtype == DType::kBool) normalize_bool(t);
    return t;
  }
  void* d = t.raw_data();
  switch (dtype) {
    case DType::kFloat32:
      KILN_RETURN_IF_ERROR(copy_field(p, p.float_data(), n, shape, [&](int64_t i, float v) { static_cast<float*>(d)[i] = v; }));
      break;
    case DType::kComplex64:
      KILN_RETURN_IF_ERROR(copy_field(p, p.float_data(), 2 * n, shape, [&](int64_t i, float v) { static_cast<float*>(d)[i] = v; }));
      break;
    case DType::kFloat64:
      KILN_RETURN_IF_ERROR(copy_field(p, p.double_data(), n, shape, [&](int64_t i, double v) { static_cast<double*>(d)[i] = v; }));
      break;
    case DType::kComplex128:
      KILN_RETURN_IF_ERROR(copy_field(p, p.double_data(), 2 * n, shape, [&](int64_t i, double v) { static_cast<double*>(d)[i] = v; }));
      break;
    case DType::kInt64:
      KILN_RETURN_IF_ERROR(copy_field(p, p.int64_data(), n, shape, [&](int64_t i, int64_t v) { static_cast<int64_t*>(d)[i] = v; }));
      break;
    case DType::kUInt32:
    case DType::kUInt64:
      KILN_RETURN_IF_ERROR(copy_field(p, p.uint64_data(), n, shape, [&](int64_t i, uint64_t v) {
        if (dtype == DType::kUInt32) static_cast<uint32_t*>(d)[i] = static_cast<uint32_t>(v);
        else static_cast<uint64_t*>(d)[i] = v;
      }));
      break;
    case DType::kString:
      KILN_RETURN_IF_ERROR(copy_field(p, p.string_data(), n, shape, [&](int64_t i, const std::string& v) { static_cast<std::string*>(d)[i] = v; }));
      break;
    case DType::kInt4:
    case DType::kUInt4: {
      const int64_t want = (n + 1) / 2;
      if (p.int32_data_size() != want) return data_size_error(p, shape, p.int32_data_size(), want);
      std::string packed(want, '\0');
      for (int64_t i = 0; i < want; ++i) packed[i] = static_cast<char>(p.int32_data(static_cast<int>(i)));
      unpack_4bit(reinterpret_cast<const uint8_t*>(packed.data()), n, dtype == DType::kInt4, t.data<uint8_t>());
      break;
    }
    default:  // the 8/16/32-bit types all live in int32_data, bit patterns for the float types
      KILN_RETURN_IF_ERROR(copy_field(p, p.int32_data(), n, shape, [&](int64_t i, int32_t v) {
        switch (elem) {
          case 1: static_cast<uint8_t*>(d)[i] = dtype == DType::kBool ? (v != 0) : static_cast<uint8_t>(v); break;
          case 2: static_cast<uint16_t*>(d)[i] = static_cast<uint16_t>(v); break;
          default: static_cast<int32_t*>(d)[i] = v; break;
        }
      }));
      break;
  }
  return t;
}

void tensor_header_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* p) {
  p->Clear();
  if (!name.empty()) p->set_name(name);
  p->set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.shape()) p->add_dims(d);
}

std::string pack_4bit(const Tensor& t) {
  std::string packed((t.numel() + 1) / 2, '\0');
  for (int64_t i = 0; i < t.numel(); ++i)
    packed[i / 2] = static_cast<char>(packed[i / 2] | ((t.data<uint8_t>()[i] & 0xf) << ((i % 2) * 4)));
  return packed;
}

bool tensor_has_raw_data(const Tensor& t) { return t.dtype() != DType::kString; }
bool tensor_is_4bit(const Tensor& t) { return is_4bit(t.dtype()); }

void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* p) {
  tensor_header_to_proto(t, name, p);
  if (t.dtype() == DType::kString) {
    for (int64_t i = 0; i < t.numel(); ++i) p->add_string_data(t.data<std::string>()[i]);
    return;
  }
  if (is_4bit(t.dtype())) {
    p->set_raw_data(pack_4bit(t));
    return;
  }
  p->set_raw_data(std::string(static_cast<const char*>(t.raw_data()), t.nbytes()));
}

Result<Tensor> sparse_to_dense(const onnx::SparseTensorProto& p, const std::string& base_dir) {
  KILN_ASSIGN_OR_RETURN(Tensor values, tensor_from_proto(p.values(), base_dir));
  KILN_ASSIGN_OR_RETURN(Tensor indices, tensor_from_proto(p.indices(), base_dir));
  Shape shape(p.dims().begin(), p.dims().end());
  KILN_ASSIGN_OR_RETURN(Tensor dense, Tensor::make(values.dtype(), shape));
  if (indices.dtype() != DType::kInt64) return Status::error("sparse tensor indices must be int64");
  const int64_t nnz = values.numel();
  const bool linear = indices.rank() == 1;
  if ((linear && indices.numel() != nnz) ||
      (!linear && (indices.rank() != 2 || indices.dim(0) != nnz ||
                   indices.dim(1) != static_cast<int64_t>(shape.size()))))
    return Status::error("sparse tensor indices of shape " + shape_str(indices.shape()) +
                         " do not match " + std::to_string(nnz) + " values of rank " +
                         std::to_string(shape.size()));
  const size_t elem = dtype_size(values.dtype());
  if (elem == 0) return Status::error("sparse tensors of this element type are not supported");
  for (int64_t k = 0; k < nnz; ++k) {
    int64_t off = 0;
    if (linear) {
      off = indices.data<int64_t>()[k];
    } else {
      for (size_t d = 0; d < shape.size(); ++d) {
        int64_t ix = indices.data<int64_t>()[k * shape.size() + d];
        if (ix < 0 || ix >= shape[d]) return Status::error("sparse tensor index out of range");
        off = off * shape[d] + ix;
      }
    }
    if (off < 0 || off >= dense.numel()) return Status::error("sparse tensor index out of range");
    std::memcpy(static_cast<char*>(dense.raw_data()) + off * elem,
                static_cast<const char*>(values.raw_data()) + k * elem, elem);
  }
  return dense;
}

}  // namespace kiln::onnx_io
