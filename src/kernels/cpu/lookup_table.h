// y[i] = table[x[i]] over bytes: the 256-entry lookups of the 8-bit unary ops (QLinearLookup,
// QLinearSigmoid), on AVX-512 VBMI where the CPU has it, else by AVX2 vpshufb.
#pragma once

#include <cstdint>

namespace kiln {

void look_up_bytes(const uint8_t* table, const uint8_t* x, uint8_t* y, int64_t n);
void look_up_bytes_avx512vbmi(const uint8_t* table, const uint8_t* x, uint8_t* y, int64_t n);  // its own TU

}  // namespace kiln
