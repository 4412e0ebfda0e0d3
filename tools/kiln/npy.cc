// The .npy header is a Python dict literal; only the three keys NumPy writes are read.
#include "npy.h"

#include <cstring>
#include <regex>

namespace kiln::cli {
namespace {

struct NpyType {
  const char* descr;
  DType dtype;
};
constexpr NpyType kTypes[] = {
    {"f4", DType::kFloat32}, {"f8", DType::kFloat64}, {"f2", DType::kFloat16}, {"i1", DType::kInt8},
    {"i2", DType::kInt16},   {"i4", DType::kInt32},   {"i8", DType::kInt64},   {"u1", DType::kUInt8},
    {"u2", DType::kUInt16},  {"u4", DType::kUInt32},  {"u8", DType::kUInt64},  {"b1", DType::kBool},
};

}  // namespace

Result<Tensor> parse_npy(const std::string& b) {
  if (b.size() < 10 || b.compare(0, 6, "\x93NUMPY") != 0) return Status::error("not a .npy file (bad magic)");
  const int major = static_cast<uint8_t>(b[6]);
  size_t header_len, header_at;
  if (major == 1) {
    header_len = static_cast<uint8_t>(b[8]) | (static_cast<uint8_t>(b[9]) << 8);
    header_at = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) return Status::error("truncated .npy header");
    uint32_t n;
    std::memcpy(&n, b.data() + 8, 4);
    header_len = n;
    header_at = 12;
  } else {
    return Status::error(".npy format version " + std::to_string(major) + " is not supported");
  }
  if (header_at + header_len > b.size()) return Status::error("truncated .npy header");
  const std::string header = b.substr(header_at, header_len);
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'descr':\\s*'([<>|=])([a-z]\\d+)'")))
    return Status::error(".npy header has no readable 'descr'");
  if (m[1] == ">") return Status::error(".npy big-endian data is not supported");
  DType dtype = DType::kUndefined;
  for (const auto& t : kTypes)
    if (m[2] == t.descr) dtype = t.dtype;
  if (dtype == DType::kUndefined) return Status::error(".npy element type '" + m[2].str() + "' is not supported");
  if (std::regex_search(header, std::regex("'fortran_order':\\s*True")))
    return Status::error(".npy files in Fortran order are not supported; save with np.ascontiguousarray");
  if (!std::regex_search(header, m, std::regex("'shape':\\s*\\(([^)]*)\\)")))
    return Status::error(".npy header has no readable 'shape'");
  Shape shape;
  const std::string dims = m[1];
  const std::regex number("\\d+");
  for (std::sregex_iterator it(dims.begin(), dims.end(), number), end; it != end; ++it) {
    if (it->str().size() > 15) return Status::error(".npy dimension is too large");
    shape.push_back(std::stoll(it->str()));
  }
  KILN_ASSIGN_OR_RETURN(int64_t n, shape_numel(shape));
  const size_t data_at = header_at + header_len;
  if (n > kMaxTensorBytes || static_cast<uint64_t>(b.size() - data_at) != static_cast<uint64_t>(n) * dtype_size(dtype))
    return Status::error(".npy data is " + std::to_string(b.size() - data_at) + " bytes, shape " + shape_str(shape) +
                         " needs " + std::to_string(n * dtype_size(dtype)));
  KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::make(dtype, shape));
  if (n) std::memcpy(t.raw_data(), b.data() + data_at, t.nbytes());
  return t;
}

Result<std::string> serialize_npy(const Tensor& t) {
  const char* descr = nullptr;
  for (const auto& k : kTypes)
    if (k.dtype == t.dtype()) descr = k.descr;
  if (!descr) return Status::error(std::string(".npy cannot hold ") + dtype_name(t.dtype()) + " tensors");
  std::string shape = "(";
  for (size_t i = 0; i < t.shape().size(); ++i) shape += std::to_string(t.shape()[i]) + (t.rank() == 1 || i + 1 < t.shape().size() ? "," : "");
  shape += ")";
  std::string header = std::string("{'descr': '") + (std::string(descr) == "b1" || descr[1] == '1' ? "|" : "<") + descr +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad with spaces so the data starts on a 64-byte boundary, ending the header with '\n'.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(1);
  out += static_cast<char>(0);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(static_cast<const char*>(t.raw_data()), t.nbytes());
  return out;
}

}  // namespace kiln::cli
