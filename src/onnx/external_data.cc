// External tensor data: files beside the model. A location must be a relative path that stays
// inside the model's folder — no "..", no absolute path, no symlink — so a model cannot make kiln
// read arbitrary files. Writing puts every large initializer in one data file, page-aligned so
// ONNX Runtime can mmap it.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "onnx/proto_convert.h"

namespace kiln::onnx_io {
namespace {

// Initializers of a graph and of the subgraphs in its nodes' attributes, as onnx's
// external-data helper collects them.
void collect_initializers(onnx::GraphProto* g, std::vector<onnx::TensorProto*>* out) {
  for (auto& t : *g->mutable_initializer()) out->push_back(&t);
  for (auto& n : *g->mutable_node())
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) collect_initializers(a.mutable_g(), out);
      for (auto& sub : *a.mutable_graphs()) collect_initializers(&sub, out);
    }
}

void set_entry(onnx::TensorProto* t, const std::string& key, const std::string& value) {
  auto* kv = t->add_external_data();
  kv->set_key(key);
  kv->set_value(value);
}

// Closes the file on every path; the temporary file is removed unless it was kept.
struct TempFile {
  std::string path;
  std::FILE* f = nullptr;
  bool kept = false;
  ~TempFile() {
    if (f) std::fclose(f);
    if (!kept) std::remove(path.c_str());
  }
};

}  // namespace

Result<SaveReport> write_external_data(onnx::ModelProto* model, const std::string& data_path,
                                       const std::string& location, size_t size_threshold,
                                       size_t alignment) {
  std::vector<onnx::TensorProto*> all, moving;
  collect_initializers(model->mutable_graph(), &all);
  for (onnx::TensorProto* t : all)
    if (t->has_raw_data() && t->raw_data().size() >= size_threshold && t->raw_data().size() > 0 &&
        t->data_location() != onnx::TensorProto::EXTERNAL)
      moving.push_back(t);
  SaveReport report;
  if (moving.empty()) return report;

  const std::string what = "external data file '" + data_path + "'";
  TempFile tmp{data_path + ".tmp"};
  tmp.f = std::fopen(tmp.path.c_str(), "wb");
  if (!tmp.f) return Status::error(what + ": cannot create '" + tmp.path + "'");
  const uint64_t align = alignment > 0 ? alignment : 1;
  static const char kZeros[4096] = {};
  uint64_t end = 0;  // bytes written so far
  for (onnx::TensorProto* t : moving) {
    const uint64_t offset = (end + align - 1) / align * align;
    for (uint64_t pad = offset - end; pad > 0;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(pad, sizeof(kZeros)));
      if (std::fwrite(kZeros, 1, n, tmp.f) != n) return Status::error(what + ": write failed");
      pad -= n;
    }
    // Taking the bytes out of the proto frees them as they are written: peak memory stays at one
    // copy of the weights beyond the IR.
    std::unique_ptr<std::string> bytes(t->release_raw_data());
    if (std::fwrite(bytes->data(), 1, bytes->size(), tmp.f) != bytes->size())
      return Status::error(what + ": write failed (disk full?)");
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    t->clear_external_data();
    set_entry(t, "location", location);
    set_entry(t, "offset", std::to_string(offset));
    set_entry(t, "length", std::to_string(bytes->size()));
    end = offset + bytes->size();
    ++report.external_tensors;
  }
  // On disk before it is renamed into place, and before the model that points at it is written.
  bool flushed = std::fflush(tmp.f) == 0 && fsync(fileno(tmp.f)) == 0;
  flushed &= std::fclose(tmp.f) == 0;
  tmp.f = nullptr;
  if (!flushed) return Status::error(what + ": write failed (disk full?)");
  std::error_code ec;
  std::filesystem::rename(tmp.path, data_path, ec);
  if (ec) return Status::error(what + ": cannot move '" + tmp.path + "' into place: " + ec.message());
  tmp.kept = true;
  report.data_path = data_path;
  report.data_file_bytes = end;
  return report;
}

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
