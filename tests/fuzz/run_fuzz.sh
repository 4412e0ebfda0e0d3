#!/usr/bin/env bash
# Builds the model-loader fuzzer with clang (ASan + UBSan + libFuzzer) in build-fuzz and runs it
# for N seconds (default 60), seeded with a few small conformance models copied at run time.
#   tests/fuzz/run_fuzz.sh [SECONDS] [JOBS]
# Exits non-zero when the fuzzer finds a crash, leak, timeout or out-of-memory; the reproducer is
# left in build-fuzz/fuzz-artifacts/.
set -euo pipefail

seconds="${1:-60}"
jobs="${2:-2}"
src="$(cd "$(dirname "$0")/../.." && pwd)"
build="${KILN_FUZZ_BUILD:-$src/build-fuzz}"
data="${KILN_CONFORMANCE:-$src/../shared/onnx-conformance}"

cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
  -DKILN_FUZZ=ON -DKILN_SANITIZE=ON >/dev/null
ninja -C "$build" -j"$jobs" fuzz_model_loader

corpus="$build/fuzz-corpus"
artifacts="$build/fuzz-artifacts"
mkdir -p "$corpus" "$artifacts"
# Seeds: small models covering tensors, attributes, subgraphs and sequences (never committed).
for t in node/test_relu node/test_add_bcast node/test_conv_with_strides_padding node/test_if \
         node/test_loop11 node/test_constantofshape_int_zeros node/test_expand_dim_changed \
         node/test_reshape_extended_dims node/test_gather_0 node/test_sequence_insert_at_back \
         simple/test_sign_model pytorch-operator/test_operator_add_broadcast; do
  [ -f "$data/$t/model.onnx" ] && cp "$data/$t/model.onnx" "$corpus/seed_$(basename "$t").onnx"
done
if [ -z "$(ls -A "$corpus")" ]; then
  echo "warning: no seed models found under $data; fuzzing from scratch" >&2
fi

log="$build/fuzz.log"
set +e
KILN_MAX_TENSOR_BYTES=268435456 \
ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1" \
UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
  "$build/tests/fuzz_model_loader" "$corpus" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
  -max_len=65536 -print_final_stats=1 -artifact_prefix="$artifacts/" 2>&1 | tee "$log" | grep -avE '^(#[0-9]+.*(NEW|REDUCE|pulse)|[[:space:]]+NEW_FUNC)'
rc=${PIPESTATUS[0]}
set -e
execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
echo "fuzz_model_loader: ${execs:-?} executions in ${seconds} s, exit code $rc"
if [ "$rc" -ne 0 ]; then
  echo "fuzz_model_loader found a problem; reproducer(s):" >&2
  ls -1 "$artifacts" >&2
fi
exit "$rc"
