// Test-only tool: imports a model into kiln's IR and exports it again, unchanged.
//   kiln_roundtrip [--external-data[=FILE]] [--size-threshold=N] IN.onnx OUT.onnx
// --external-data saves initializers of at least N bytes (default 1024) in an external data file
// beside OUT (default OUT.data). tests/check_export.py runs onnx.checker on what this writes.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "onnx/model_io.h"

int main(int argc, char** argv) {
  kiln::onnx_io::SaveOptions options;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--external-data" || arg.rfind("--external-data=", 0) == 0) {
      options.external_data = kiln::onnx_io::SaveOptions::ExternalData::kAlways;
      if (arg.size() > 16) options.location = arg.substr(16);
    } else if (arg.rfind("--size-threshold=", 0) == 0) {
      char* end = nullptr;
      const long long n = std::strtoll(arg.c_str() + 17, &end, 10);
      if (*end != '\0' || n < 0) {
        std::cerr << "error: bad " << arg << "\n";
        return 2;
      }
      options.size_threshold = static_cast<size_t>(n);
    } else {
      files.push_back(arg);
    }
  }
  if (files.size() != 2) {
    std::cerr << "usage: kiln_roundtrip [--external-data[=FILE]] [--size-threshold=N] IN.onnx OUT.onnx\n";
    return 2;
  }
  auto model = kiln::onnx_io::load_model(files[0]);
  if (!model) {
    std::cerr << "error: " << model.status().message() << "\n";
    return 1;
  }
  kiln::Status st = kiln::onnx_io::save_model(*model, files[1], options);
  if (!st.is_ok()) {
    std::cerr << "error: " << st.message() << "\n";
    return 1;
  }
  return 0;
}
