// The recurrent layers RNN, GRU and LSTM: their attributes and input shapes checked once into a
// RecurrentSpec, and the reference computation in double (the oracle of the fast float32 kernel
// in kernels/cpu/rnn/, which registers the ops and falls back to the reference for what it
// does not cover).
#pragma once

#include <string>
#include <vector>

#include "kernels/kernel.h"

namespace kiln {

enum class RecurrentCell { kRnn, kGru, kLstm };

// Gates a cell's W and R stack: RNN 1, GRU 3 (z, r, h), LSTM 4 (i, o, f, c).
inline int recurrent_gates(RecurrentCell c) { return c == RecurrentCell::kRnn ? 1 : c == RecurrentCell::kGru ? 3 : 4; }

struct RecurrentActivation {
  std::string name;  // lower case
  double alpha = 0;
  double beta = 0;
  double operator()(double x) const;
};

// Everything a recurrent node's kernel needs besides the tensors' data. Gate orders are ONNX's:
// GRU z, r, h; LSTM i, o, f, c (peepholes i, o, f).
struct RecurrentSpec {
  RecurrentCell cell = RecurrentCell::kLstm;
  int gates = 4;             // 1, 3 or 4
  int dirs = 1;              // 2 when bidirectional
  bool reverse_only = false;  // direction "reverse"
  int64_t layout = 0;        // 0: X [seq, batch, input]; 1: X [batch, seq, input]
  int64_t seq = 0, batch = 0, input_size = 0, hidden = 0;
  std::vector<RecurrentActivation> acts;  // acts_per_dir() per direction, direction 0 first
  bool has_clip = false;
  double clip = 0;
  bool linear_before_reset = false;  // GRU
  bool input_forget = false;         // LSTM
  std::vector<int64_t> lens;         // per batch row, each in [0, seq]

  int acts_per_dir() const { return cell == RecurrentCell::kRnn ? 1 : cell == RecurrentCell::kGru ? 2 : 3; }
  // Whether direction d runs from the last step to the first.
  bool backward(int d) const { return reverse_only || d == 1; }
  Shape y_shape() const {
    return layout == 0 ? Shape{seq, dirs, batch, hidden} : Shape{batch, seq, dirs, hidden};
  }
  Shape state_shape() const { return layout == 0 ? Shape{dirs, batch, hidden} : Shape{batch, dirs, hidden}; }
  // Element offsets of Y[t, d, b, 0], of a state's [d, b, 0], and of X[t, b, 0].
  int64_t y_offset(int64_t t, int64_t d, int64_t b) const {
    return (layout == 0 ? (t * dirs + d) * batch + b : (b * seq + t) * dirs + d) * hidden;
  }
  int64_t state_offset(int64_t d, int64_t b) const {
    return (layout == 0 ? d * batch + b : b * dirs + d) * hidden;
  }
  int64_t x_row(int64_t t, int64_t b) const { return layout == 0 ? t * batch + b : b * seq + t; }
};

// Checks the node's attributes and every given input's type and shape (inputs X, W, R, B,
// sequence_lens, initial_h, initial_c, P), reading sequence_lens.
Result<RecurrentSpec> parse_recurrent(KernelContext& ctx, RecurrentCell cell);

// The reference: computes in double whatever the float type, one batch row and one step at a time.
Status reference_recurrent(KernelContext& ctx, const RecurrentSpec& spec);

}  // namespace kiln
