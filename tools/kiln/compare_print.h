// Printing a CompareReport, shared by `kiln compare` and `kiln optimize --check`.
#pragma once

#include <cstddef>

#include "kiln/compare.h"

namespace kiln::cli {

// The per-output table, a note for each output whose reference values all lie below atol (it
// would pass whatever B computed), and with options.per_layer the per-layer summary (every
// tensor when `verbose`). Returns how many outputs are beyond tolerance.
size_t print_compare_report(const CompareReport& report, const CompareOptions& options,
                            bool verbose);

}  // namespace kiln::cli
