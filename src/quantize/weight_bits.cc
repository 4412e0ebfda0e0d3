// apply_weight_bits (kiln/quantize.h): what `kiln quantize --weight-bits` and kiln.quantize's
// weight_bits mean on the CPU in use, one rule for the CLI and Python.
#include "kiln/cpu.h"
#include "kiln/quantize.h"

namespace kiln {

void apply_weight_bits(QuantizeOptions& o, const std::string& weight_bits) {
  const bool seven_bit_route = weight_bits == "auto" && !has_vnni();  // vpmaddubsw's exact route
  const bool weights_only = o.weight_only_bits != 0;
  // auto: 7-bit weights where no VNNI, for static quantization alone, whose accuracy guard
  // measures the cost (and widens them to 8 where they miss the budget after its fallbacks);
  // dynamic has no samples to measure with (MiniLM's sentence embeddings: cosine min 0.9989 at
  // 8 bits, 0.9949 at 7), so it keeps 8-bit weights and takes 7-bit rows of the activations
  // instead (0.9962), which vpmaddubsw multiplies exactly as well.
  o.reduce_range = !weights_only && (weight_bits == "7" || (seven_bit_route && !o.dynamic));
  o.widen_weights_if_missed = o.reduce_range && weight_bits == "auto";
  o.dynamic_row_bits = o.dynamic && !o.portable && seven_bit_route ? 7 : 8;
}

}  // namespace kiln
