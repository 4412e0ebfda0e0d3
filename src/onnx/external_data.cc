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

}  // namespace

ExternalDataWriter::ExternalDataWriter(std::string data_path, std::string location, size_t alignment)
    : data_path_(std::move(data_path)),
      tmp_path_(data_path_ + ".tmp"),
      location_(std::move(location)),
      alignment_(alignment > 0 ? alignment : 1) {}

ExternalDataWriter::~ExternalDataWriter() {
  if (file_) std::fclose(file_);
  if (opened_ && !finished_) std::remove(tmp_path_.c_str());
}

std::string ExternalDataWriter::what() const { return "external data file '" + data_path_ + "'"; }

Status ExternalDataWriter::append(const void* bytes, uint64_t size, onnx::TensorProto* t) {
  if (!opened_) {
    file_ = std::fopen(tmp_path_.c_str(), "wb");
    if (!file_) return Status::error(what() + ": cannot create '" + tmp_path_ + "'");
    opened_ = true;
  }
  if (!file_) return Status::error(what() + ": already finished");
  static const char kZeros[4096] = {};
  const uint64_t offset = (end_ + alignment_ - 1) / alignment_ * alignment_;
  for (uint64_t pad = offset - end_; pad > 0;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(pad, sizeof(kZeros)));
    if (std::fwrite(kZeros, 1, n, file_) != n) return Status::error(what() + ": write failed");
    pad -= n;
  }
  if (std::fwrite(bytes, 1, size, file_) != size) return Status::error(what() + ": write failed (disk full?)");
  t->clear_raw_data();
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  t->clear_external_data();
  set_entry(t, "location", location_);
  set_entry(t, "offset", std::to_string(offset));
  set_entry(t, "length", std::to_string(size));
  end_ = offset + size;
  ++report_.external_tensors;
  return Status::ok();
}

Status ExternalDataWriter::append_initializers(onnx::GraphProto* g, size_t size_threshold) {
  std::vector<onnx::TensorProto*> all;
  collect_initializers(g, &all);
  for (onnx::TensorProto* t : all) {
    if (!t->has_raw_data() || t->raw_data().size() < size_threshold || t->raw_data().empty() ||
        t->data_location() == onnx::TensorProto::EXTERNAL)
      continue;
    // Taking the bytes out of the proto frees them as they are written.
    std::unique_ptr<std::string> bytes(t->release_raw_data());
    KILN_RETURN_IF_ERROR(append(bytes->data(), bytes->size(), t));
  }
  return Status::ok();
}

Status ExternalDataWriter::finish() {
  if (!opened_) return Status::ok();
  if (!file_) return Status::error(what() + ": already finished");
  // On disk before it is renamed into place, and before the model that points at it is written.
  bool flushed = std::fflush(file_) == 0 && fsync(fileno(file_)) == 0;
  flushed &= std::fclose(file_) == 0;
  file_ = nullptr;
  if (!flushed) return Status::error(what() + ": write failed (disk full?)");
  std::error_code ec;
  std::filesystem::rename(tmp_path_, data_path_, ec);
  if (ec) return Status::error(what() + ": cannot move '" + tmp_path_ + "' into place: " + ec.message());
  finished_ = true;
  report_.data_path = data_path_;
  report_.data_file_bytes = end_;
  return Status::ok();
}

namespace {

// The file behind `location`, checked to stay inside base_dir, with [offset, offset + *length)
// inside it; a negative *length becomes "to the end of the file".
Result<std::filesystem::path> external_data_path(const std::string& base_dir, const std::string& location,
                                                 int64_t offset, int64_t* length) {
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
  if (*length < 0) *length = size - offset;
  if (*length > size - offset)
    return Status::error(what + ": needs " + std::to_string(*length) + " bytes at offset " +
                         std::to_string(offset) + " but the file has " + std::to_string(size));
  return p;
}

Status read_range(const std::filesystem::path& p, const std::string& location, int64_t offset,
                  int64_t length, char* out) {
  const std::string what = "external data '" + location + "'";
  std::ifstream f(p, std::ios::binary);
  if (!f) return Status::error(what + ": cannot open");
  f.seekg(offset);
  f.read(out, length);
  if (!f) return Status::error(what + ": read failed");
  return Status::ok();
}

}  // namespace

Result<std::string> read_external_data(const std::string& base_dir, const std::string& location,
                                       int64_t offset, int64_t length) {
  KILN_ASSIGN_OR_RETURN(std::filesystem::path p, external_data_path(base_dir, location, offset, &length));
  std::string bytes(static_cast<size_t>(length), '\0');
  KILN_RETURN_IF_ERROR(read_range(p, location, offset, length, bytes.data()));
  return bytes;
}

Status check_external_data(const std::string& base_dir, const std::string& location, int64_t offset,
                           int64_t length) {
  return external_data_path(base_dir, location, offset, &length).status();
}

Status read_external_data_into(const std::string& base_dir, const std::string& location,
                               int64_t offset, int64_t length, void* out) {
  KILN_ASSIGN_OR_RETURN(std::filesystem::path p, external_data_path(base_dir, location, offset, &length));
  return read_range(p, location, offset, length, static_cast<char*>(out));
}

}  // namespace kiln::onnx_io
