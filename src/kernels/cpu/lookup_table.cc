// look_up_bytes (lookup_table.h): AVX-512 VBMI's where the CPU has it, else a byte at a time.
#include "kernels/cpu/lookup_table.h"

#include "core/cpu_features.h"

namespace kiln {

void look_up_bytes(const uint8_t* table, const uint8_t* x, uint8_t* y, int64_t n) {
  static const bool vbmi = cpu_features().has_avx512_vbmi();  // the level is fixed once kernels run
  if (vbmi) return look_up_bytes_avx512vbmi(table, x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = table[x[i]];
}

}  // namespace kiln
