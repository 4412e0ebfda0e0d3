// Running a model with one backend forced, as the backend tests do: saved, loaded back at -O0
// (or `level`) with SessionOptions::backend, and run twice (the second run reuses what the first
// set up).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "kiln/session.h"
#include "onnx/model_io.h"

namespace kiln::test {

struct Ran {
  std::vector<Value> outputs;                                 // of the second run
  std::vector<std::pair<std::string, std::string>> backends;  // Session::node_backends()
};

// The model saved and loaded back at -O`level` with `backend` forced, on `threads` threads.
inline Result<std::unique_ptr<Session>> load_with(const ir::Model& m, const std::string& backend,
                                                  int threads = 2, int level = 0) {
  const std::string path = ::testing::TempDir() + "kiln_backend_" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
                           backend + "_O" + std::to_string(level) + ".onnx";
  KILN_RETURN_IF_ERROR(onnx_io::save_model(m, path));
  SessionOptions options;
  options.threads = threads;
  options.optimize_level = level;
  options.backend = backend;
  auto s = Session::load(path, options);
  std::remove(path.c_str());
  return s;
}

inline Result<Ran> run_with(const ir::Model& m, const std::vector<Tensor>& feeds,
                            const std::string& backend, int threads = 2, int level = 0) {
  auto s = load_with(m, backend, threads, level);
  if (!s) return s.status();
  std::vector<Value> in;
  for (const Tensor& t : feeds) in.push_back(Value::of(t));
  Ran r;
  for (int rep = 0; rep < 2; ++rep) {
    KILN_ASSIGN_OR_RETURN(r.outputs, (*s)->run(in));
  }
  r.backends = (*s)->node_backends();
  return r;
}

}  // namespace kiln::test
