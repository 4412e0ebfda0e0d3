#!/usr/bin/env bash
# Heap allocations per steady-state run of `kiln bench` on a model: malloc_count.so (built from
# tests/alloc/malloc_count.cc) is preloaded into two benches that differ only in their number of
# timed runs; everything else (load, optimize, warm-up) is the same in both, so the difference
# divided by the extra runs is what one run allocates.
# Usage: scripts/count_allocs.sh BUILD_DIR MODEL.onnx [kiln bench options...]
set -euo pipefail
build=$1 model=$2
shift 2
lib="$build/tests/libkiln_malloc_count.so"
[ -f "$lib" ] || ninja -C "$build" kiln_malloc_count >/dev/null
count() {  # count ITERS [OPTIONS...]: "calls bytes" of a whole `kiln bench` process
  local iters=$1
  shift
  env KILN_MALLOC_COUNT_REPORT=1 LD_PRELOAD="$lib" "$build/kiln" bench "$model" --warmup 2 --iters "$iters" "$@" \
    2>&1 >/dev/null | sed -n 's/^malloc_count: \([0-9]*\) calls, \([0-9]*\) bytes$/\1 \2/p'
}
extra=10
read -r c1 b1 < <(count 1 "$@")
read -r c2 b2 < <(count $((1 + extra)) "$@")
# Bytes are not divided out: kiln bench's own list of timings (and its sorted copy) is allocated
# once but grows with --iters, 16 bytes a timed run, so only the count of calls is per run.
echo "$(basename "$model"): per steady-state run $(((c2 - c1) / extra)) allocations" \
  "(whole process with 3 runs: $c1 allocations, $b1 bytes)"
