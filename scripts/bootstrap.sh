#!/usr/bin/env bash
# One command from a fresh Debian machine: install dependencies, build kiln (the CLI, the tests
# and the Python package, in one CMake build in ./build), install the package into the project's
# venv (./.venv, which sees Debian's numpy and onnx), and run kiln's main job on the built-in
# default model. With --test, also run every test (what CI runs).
#   scripts/bootstrap.sh [--test]
set -euo pipefail
cd "$(dirname "$0")/.."
"$PWD/scripts/install_deps.sh"
venv=.venv
[ -x $venv/bin/python ] || /usr/bin/python3 -m venv --system-site-packages $venv
# The package's build tools, from PyPI: pip builds it without isolation so that it configures
# and builds ./build, the same build the CLI and the tests come from (the core compiles once).
$venv/bin/python -m pip install -q --upgrade "pip>=23" "scikit-build-core>=0.10" "pybind11>=2.12"
$venv/bin/python -m pip install -q --no-build-isolation -C build-dir=build \
  -C cmake.define.KILN_TESTS=ON -C cmake.define.KILN_BENCH=ON .
ninja -C build  # nothing left to build unless the package's build skipped a target
mkdir -p build/models
/usr/bin/python3 scripts/make_default_model.py build/models/default_cnn.onnx
./build/kiln info build/models/default_cnn.onnx
./build/kiln optimize build/models/default_cnn.onnx -o build/models/default_cnn.opt.onnx -v --check
./build/kiln run build/models/default_cnn.opt.onnx --random --batch 2 -o build/default_out
./build/kiln bench build/models/default_cnn.onnx --batch 4 --iters 20 -O 0
./build/kiln bench build/models/default_cnn.opt.onnx --batch 4 --iters 20
# The same job from Python, in the venv the package went into.
$venv/bin/python -c 'import kiln; m = kiln.optimize("build/models/default_cnn.onnx"); print(m.report["nodes_before"], "->", m.report["nodes_after"], "nodes;", kiln.bench("build/models/default_cnn.opt.onnx", batch=4, iters=20))'
if [ "${1:-}" = "--test" ]; then
  exec scripts/run_tests.sh
fi
