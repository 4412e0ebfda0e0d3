// Inputs by the benchmark rule (../shared/bench/README.md, what ONNX Runtime's and OpenVINO's
// bench scripts feed): what `kiln bench`, `kiln optimize --tune` and kiln.bench() run on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/io_info.h"
#include "kiln/status.h"
#include "kiln/value.h"

namespace kiln {

// The shapes of generated inputs: `shapes` ("NAME=D0,D1,...", trtexec's --shapes) gives an
// input its whole shape; in the others a dynamic dim at position 0 takes `batch`, any other `seq`.
struct InputShapes {
  int64_t batch = 1, seq = 128;
  std::vector<std::string> shapes;
};

// One tensor per input in `inputs` (Model::inputs()), shaped by `shapes`. Integers: 1 for names
// containing "mask", 0 for "type", else (i * 7919) % 1000; floats: the LCG of the bench rule. A
// shape that names no input, or whose rank or fixed dims differ from the model's, is an
// InvalidArgument error naming both.
Result<std::vector<Value>> make_bench_inputs(const std::vector<IoInfo>& inputs, const InputShapes& shapes);

}  // namespace kiln
