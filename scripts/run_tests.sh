#!/usr/bin/env bash
# Every test kiln has, on an already built ./build: unit tests, heap allocations of steady-state
# runs, ONNX conformance (against the checked-in list of known failures), both again at every ISA
# level below the CPU's (KILN_ISA=avx2 on an AVX-512 machine), exported models checked
# by onnx.checker, the ai.onnx.ml kernels against ONNX Runtime (from PyPI), the Python package
# (installed in .venv by bootstrap.sh) against ONNX Runtime, the model-loader
# fuzzer for 60 s, and unit tests and conformance again under ASan+UBSan. Ends with a line "test stages: N passed, N failed" and a non-zero exit when any stage
# failed.
set -uo pipefail
cd "$(dirname "$0")/.."
passed=0 failed=0
# Outputs that kernels promise to overwrite start as NaN, not stale bytes (Tensor::make_for_overwrite):
# an element a kernel misses then fails its test.
export KILN_POISON_UNWRITTEN=1

# stage NAME COMMAND...: runs one stage and counts it.
stage() {
  local name=$1
  shift
  echo
  echo "== $name"
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "== FAILED: $name"; fi
}

conformance() {  # conformance BUILD_DIR [ARGS...]: quiet run, the failures and the totals printed
  local log build=$1
  shift
  log=$(mktemp)
  "$build/tests/kiln_conformance" --known-failures tests/conformance/known_failures.txt "$@" >"$log" 2>&1
  local rc=$?
  grep -vE '^known ' "$log" | tail -40
  rm -f "$log"
  return $rc
}

ml_ops_vs_onnxruntime() {  # ONNX Runtime from PyPI, in a venv kept in build/ between runs
  local venv=build/ort-venv
  [ -x $venv/bin/python ] && $venv/bin/python -c "import onnxruntime" 2>/dev/null ||
    { /usr/bin/python3 -m venv --system-site-packages $venv && $venv/bin/pip install -q onnxruntime; } &&
    $venv/bin/python tests/check_ml_ops.py build
}

lower_isa_levels() {  # the ISA levels this CPU has below its highest (core/cpu_features.h), lowest first
  local flags levels=(avx2)
  flags=$(grep -m1 '^flags' /proc/cpuinfo)
  has() { [[ " $flags " == *" $1 "* ]]; }
  has avx_vnni && levels+=(avx_vnni)
  if has avx512f && has avx512bw && has avx512vl && has avx512dq; then
    levels+=(avx512)
    has avx512_vnni && levels+=(avx512_vnni)
  fi
  unset 'levels[${#levels[@]}-1]'
  echo "${levels[@]}"
}

at_lower_isa_levels() {  # unit tests and -O3 conformance again with KILN_ISA at each lower level
  local level levels rc=0
  levels=$(lower_isa_levels)
  [ -n "$levels" ] || { echo "no ISA level below this CPU's: nothing to run"; return 0; }
  for level in $levels; do
    echo "-- KILN_ISA=$level"
    KILN_ISA=$level ./build/tests/kiln_unit_tests --gtest_brief=1 || rc=1
    KILN_ISA=$level conformance build --optimize 3 || rc=1
  done
  return $rc
}

bench_models() {  # the six benchmark models, exported by Debian's PyTorch into build/bench-models
  local out=build/bench-models exporter=../shared/models/export_models.py
  [ -f $out/bert_tiny.onnx ] && return 0
  [ -f $exporter ] || { echo "no $exporter: the six-model test will skip"; return 0; }
  /usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null || {
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
        python3-torch python3-torchvision >/dev/null || return 1
  }
  /usr/bin/python3 $exporter $out 2>&1 | grep -v -i warn
  [ -f $out/bert_tiny.onnx ]
}

python_package() {  # the package as installed by bootstrap.sh, against ONNX Runtime from PyPI
  local venv=.venv
  $venv/bin/python -c "import onnxruntime, pytest" 2>/dev/null ||
    $venv/bin/python -m pip install -q onnxruntime pytest || return 1
  bench_models || return 1
  KILN_TEST_MODELS=build/bench-models $venv/bin/python -m pytest -q tests/python
}

sanitized_tests() {  # the clang ASan+UBSan build made by run_fuzz.sh serves these too
  ninja -C build-fuzz kiln_unit_tests kiln_conformance &&
    ASAN_OPTIONS=detect_leaks=1 ./build-fuzz/tests/kiln_unit_tests --gtest_brief=1 &&
    conformance build-fuzz
}

stage "unit tests" ./build/tests/kiln_unit_tests --gtest_brief=1
stage "steady-state runs allocate no tensor (malloc counted)" ./build/tests/kiln_alloc_tests --gtest_brief=1
stage "ONNX conformance" conformance build
stage "ONNX conformance, every model optimized at -O3 (the default) first" conformance build --optimize 3
stage "unit tests and conformance at every lower ISA level (KILN_ISA)" at_lower_isa_levels
stage "exported models pass onnx.checker" /usr/bin/python3 tests/check_export.py build
stage "ai.onnx.ml kernels agree with ONNX Runtime" ml_ops_vs_onnxruntime
stage "Python package: the ONNX Runtime API against ONNX Runtime (pytest)" python_package
stage "fuzzing the model loader (clang libFuzzer + ASan + UBSan, 60 s)" tests/fuzz/run_fuzz.sh 60
stage "unit tests and conformance under ASan+UBSan" sanitized_tests

echo
echo "test stages: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
