// KILN_BENCH_COLD=1 makes a micro-benchmark evict the caches before every timed call, as a
// model's other layers do: the weights then come from memory, not from the L3 the previous
// iteration left them in.
#pragma once

namespace kiln::bench {

// Whether KILN_BENCH_COLD=1 is set.
bool cold_from_env();
// Writes 64 MiB, more than the L3, so that the next call finds nothing of its data in cache.
void evict_caches();

}  // namespace kiln::bench
