#!/usr/bin/env bash
# One command from a fresh Debian machine: install dependencies, build kiln, and run its main job
# on the built-in default model. With --test, also run every test (what CI runs).
#   scripts/bootstrap.sh [--test]
set -euo pipefail
cd "$(dirname "$0")/.."
"$PWD/scripts/install_deps.sh"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build
mkdir -p build/models
/usr/bin/python3 scripts/make_default_model.py build/models/default_cnn.onnx
./build/kiln info build/models/default_cnn.onnx
./build/kiln optimize build/models/default_cnn.onnx -o build/models/default_cnn.opt.onnx -v --check
./build/kiln run build/models/default_cnn.opt.onnx --random --batch 2 -o build/default_out
./build/kiln bench build/models/default_cnn.onnx --batch 4 --iters 20 -O 0
./build/kiln bench build/models/default_cnn.opt.onnx --batch 4 --iters 20
if [ "${1:-}" = "--test" ]; then
  exec scripts/run_tests.sh
fi
