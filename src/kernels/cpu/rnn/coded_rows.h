// Products against weights dequantized from 8 bits (ONNX Runtime's DynamicQuantizeLSTM, which
// contrib-lstm lowers): the recurrent kernels' h R^T of every step and x W^T of a whole sequence,
// out[rows, n] = a[rows, k] B^T, B [n, k] with each row j = codes (int8) x scale_j.
//
// B is kept as its codes, a quarter of float's bytes (a bidirectional LSTM of hidden 512
// rereads 1 MiB a direction and step instead of 4), and each row of a is rounded to 16-bit
// integers with a scale of its own (largest |a| -> 32767) just before the product, which then
// runs on integer pairs: vpdpwssd (AVX-512 VNNI) or vpmaddwd (AVX2) multiplies two 16-bit
// values by two codes widened to 16 bits and adds both into an int32 lane, 32 or 16 products an
// instruction, where widening each code to float for an FMA took three instructions for 8.
// Sums of 512 products of at most 32767 x 128 stay inside int32 exactly; longer rows go in chunks
// of 512 added in float. The rounding of a to 16 bits (|error| <= max|a| / 65534 an element) is
// what this costs against float32 a: ONNX Runtime rounds a to 8 bits there.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln {
class ThreadPool;
}

namespace kiln::rnn {

struct CodedRows {
  static constexpr int64_t kTile = 64;  // outputs a tile
  // [tiles, pairs, kTile, 2]: for each tile of 64 outputs and each pair of k, the codes of output
  // lane l at k = 2p and 2p + 1 side by side (one int32 lane of the pair product); zero past n
  // and past k.
  std::vector<int8_t> codes;
  std::vector<float> scale;  // [tiles * kTile], zero past n
  int64_t n = 0, k = 0, pairs = 0;
  bool empty() const { return codes.empty(); }
};

// The codes of B [n, k] (row j: output j), or empty when B is not 8-bit. A row's scale is its
// largest |value| over q for the q <= 127 that makes every value a whole multiple (an 8-bit row
// of per-tensor scale s and largest code Q takes q = Q, or a multiple of it).
CodedRows code_rows(const float* b, int64_t n, int64_t k);

// out[:rows, :n] = a[:rows, :k] B^T (+ bias[:n] when given), rows of a lda apart and of out ldo
// apart. Over `pool`'s threads by tiles of 64 outputs when given.
void coded_product(const CodedRows& b, const float* a, int64_t rows, int64_t lda, const float* bias, float* out,
                   int64_t ldo, ThreadPool* pool = nullptr);

// What an ISA's tiles get: a's rows as 16-bit pairs (one int32 a pair, `lda` pairs apart) with
// their scales, and the pair range [p0, p1) of this chunk; out is set (bias, or 0) plus the
// chunk's products when !accumulate, else the products are added to it.
struct CodedArgs {
  const CodedRows* b;
  const int32_t* a;
  int64_t lda, rows;
  const float* row_scale;
  const float* bias;
  float* out;
  int64_t ldo;
  int64_t p0, p1;
  bool accumulate;
};
// Every row of `args` against the 64 outputs of tile t.
void coded_tile_avx2(const CodedArgs& args, int64_t t);         // coded_rows.cc
void coded_tile_avx512vnni(const CodedArgs& args, int64_t t);  // coded_rows_avx512vnni.cc

}  // namespace kiln::rnn
