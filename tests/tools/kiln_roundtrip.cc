// Test-only tool: imports a model into kiln's IR and exports it again, unchanged.
//   kiln_roundtrip IN.onnx OUT.onnx
// tests/check_export.py runs onnx.checker on what this writes.
#include <iostream>

#include "onnx/model_io.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: kiln_roundtrip IN.onnx OUT.onnx\n";
    return 2;
  }
  auto model = kiln::onnx_io::load_model(argv[1]);
  if (!model) {
    std::cerr << "error: " << model.status().message() << "\n";
    return 1;
  }
  kiln::Status st = kiln::onnx_io::save_model(*model, argv[2]);
  if (!st.is_ok()) {
    std::cerr << "error: " << st.message() << "\n";
    return 1;
  }
  return 0;
}
