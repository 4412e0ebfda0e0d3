// External tensor data: files beside the model. A location must be a relative path that stays
// inside the model's folder — no "..", no absolute path, no symlink — so a model cannot make kiln
// read arbitrary files.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "onnx/proto_convert.h"

namespace kiln::onnx_io {

Result<std::string> read_external_data(const std::string& base_dir, const std::string& location,
                                       int64_t offset, int64_t length) {
  namespace fs = std::filesystem;
  const std::string what = "external data '" + location + "'";
  if (base_dir.empty()) return Status::error(what + ": external data is not allowed here");
  const fs::path rel(location);
  if (rel.is_absolute() || location.find('\0') != std::string::npos)
    return Status::error(what + ": the path must be relative to the model's folder");
  for (const auto& part : rel)
    if (part == "..") return Status::error(what + ": the path must not leave the model's folder");
  // Walk each component so a symlinked folder or file is refused too.
  fs::path p(base_dir);
  for (const auto& part : rel) {
    p /= part;
    struct stat st;
    if (lstat(p.c_str(), &st) != 0) return Status::error(what + ": file not found");
    if (S_ISLNK(st.st_mode)) return Status::error(what + ": symbolic links are not followed");
  }
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return Status::error(what + ": not a regular file");
  const auto size = static_cast<int64_t>(fs::file_size(p, ec));
  if (ec) return Status::error(what + ": cannot read its size");
  if (offset < 0 || offset > size) return Status::error(what + ": offset " + std::to_string(offset) + " is outside the file");
  if (length < 0) length = size - offset;
  if (length > size - offset)
    return Status::error(what + ": needs " + std::to_string(length) + " bytes at offset " +
                         std::to_string(offset) + " but the file has " + std::to_string(size));
  std::ifstream f(p, std::ios::binary);
  if (!f) return Status::error(what + ": cannot open");
  std::string bytes(static_cast<size_t>(length), '\0');
  f.seekg(offset);
  f.read(bytes.data(), length);
  if (!f) return Status::error(what + ": read failed");
  return bytes;
}

}  // namespace kiln::onnx_io
