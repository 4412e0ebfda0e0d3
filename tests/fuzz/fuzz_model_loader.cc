// libFuzzer target for the model loader and optimizer: bytes -> parse_model -> Session::create,
// and one run when every input is a small, static float tensor; then the same after
// kiln::optimize at a level the input picks. Any crash, sanitizer report, hang or allocation past
// the budget is a bug; errors are the expected outcome for most inputs.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "ir/graph.h"
#include "kiln/optimize.h"
#include "kiln/session.h"
#include "onnx/model_io.h"

namespace {

constexpr int64_t kMaxInputElements = 4096;

// A zero-filled float tensor of the input's static shape, or nothing when the input is not a
// small static float tensor.
bool make_input(const kiln::IoInfo& io, kiln::Value* out) {
  if (io.kind != kiln::Value::Kind::kTensor || io.dtype != kiln::DType::kFloat32 || !io.has_shape) return false;
  int64_t n = 1;
  for (int64_t d : io.dims) {
    if (d < 0 || d > kMaxInputElements) return false;
    n *= d;
    if (n > kMaxInputElements) return false;
  }
  auto t = kiln::Tensor::make(kiln::DType::kFloat32, io.dims);
  if (!t) return false;
  for (int64_t i = 0; i < t->numel(); ++i) t->data<float>()[i] = 0.5f * static_cast<float>(i % 7) - 1.0f;
  *out = kiln::Value::of(std::move(t).value());
  return true;
}

// Loads `model` as given and runs it once when its inputs allow.
void load_and_run(const kiln::ir::Model& model) {
  kiln::SessionOptions options;
  options.threads = 1;
  auto session = kiln::Session::create(std::make_shared<const kiln::ir::Model>(model), options);
  if (!session) return;
  std::vector<kiln::Value> inputs;
  for (const auto& io : (*session)->inputs()) {
    kiln::Value v;
    if (!make_input(io, &v)) return;
    inputs.push_back(std::move(v));
  }
  auto out = (*session)->run(inputs);
  (void)out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  // No base folder: external data is refused, so the fuzzer cannot read files.
  auto model = kiln::onnx_io::parse_model(bytes, "");
  if (!model) return 0;
  load_and_run(*model);
  // The passes see the same hostile graphs: levels 1 to 3, chosen by the input's size.
  kiln::OptimizeOptions options;
  options.level = 1 + static_cast<int>(size % 3);
  if (kiln::optimize(*model, options)) load_and_run(*model);
  return 0;
}
