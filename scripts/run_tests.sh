#!/usr/bin/env bash
# Every test kiln has, on an already built ./build: unit tests, ONNX conformance (against the
# checked-in list of known failures), exported models checked by onnx.checker, unit tests again
# under ASan+UBSan, and the model-loader fuzzer for 60 s.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
step() { echo; echo "== $*"; }

step "unit tests"
./build/tests/kiln_unit_tests --gtest_brief=1 || status=1

step "ONNX conformance"
./build/tests/kiln_conformance --known-failures tests/conformance/known_failures.txt || status=1

if [ -f tests/check_export.py ]; then
  step "exported models pass onnx.checker"
  /usr/bin/python3 tests/check_export.py build || status=1
fi

step "unit tests and conformance under ASan+UBSan"
# -O1 with line tables only: sanitizer reports keep file:line, and the build stays quick.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DKILN_SANITIZE=ON >/dev/null
ninja -C build-asan kiln_unit_tests kiln_conformance
ASAN_OPTIONS=detect_leaks=1 ./build-asan/tests/kiln_unit_tests --gtest_brief=1 || status=1
./build-asan/tests/kiln_conformance --known-failures tests/conformance/known_failures.txt >/tmp/kiln-asan-conformance.txt 2>&1 || {
  status=1; tail -30 /tmp/kiln-asan-conformance.txt; }
tail -1 /tmp/kiln-asan-conformance.txt

if [ -x tests/fuzz/run_fuzz.sh ]; then
  step "fuzzing the model loader"
  tests/fuzz/run_fuzz.sh 60 || status=1
fi

step "summary"
[ $status -eq 0 ] && echo "all test stages passed" || echo "some test stage FAILED"
exit $status
