// The tail of a fused GEMM (FusedMatMul, FusedGemm, FusedMLP): an activation and a residual add
// applied to each finished tile of C right after the micro-kernel stored it, while it is still in
// L1, so the fused ops need no second pass over their output.
#pragma once

#include <cstdint>

namespace kiln::gemm {

struct Epilogue {
  // The activations of the ai.kiln ops (docs/ops.md), computed in float on 8 lanes: the
  // piecewise-linear ones exactly, the others to a few ulp (exp and erf of vec_math_avx2.h).
  enum class Activation {
    kNone,
    kRelu,
    kClip,         // min(max(x, p0), p1)
    kLeakyRelu,    // x >= 0 ? x : p0 * x
    kSigmoid,
    kHardSigmoid,  // max(0, min(1, p0 * x + p1))
    kHardSwish,    // x * max(0, min(1, x / 6 + 1/2))
    kSilu,         // x * sigmoid(x)
    kGelu,         // 0.5 x (1 + erf(x / sqrt 2))
    kGeluTanh,     // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    kTanh
  };
  Activation activation = Activation::kNone;
  float p0 = 0.0f, p1 = 0.0f;
  // A clamp of the activation's result, [-inf, inf] when there is none.
  float lo = -__builtin_inff(), hi = __builtin_inff();
  // z, read at the same (row, col) as C with its own leading dimension, or null. The result is
  // act(y) + z, or act(y + z) when residual_first.
  const float* residual = nullptr;
  int64_t ld_residual = 0;
  bool residual_first = false;

  bool clamped() const { return lo > -__builtin_inff() || hi < __builtin_inff(); }
  bool empty() const { return activation == Activation::kNone && !clamped() && residual == nullptr; }
};

// Applies `e` to the rows x cols block of C at c (row i0, column j0 of the whole C, which is
// where the residual is read).
void apply_epilogue(const Epilogue& e, float* c, int64_t ldc, int64_t i0, int64_t j0,
                    int64_t rows, int64_t cols);

}  // namespace kiln::gemm
