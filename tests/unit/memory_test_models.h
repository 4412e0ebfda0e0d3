// Small ResNet-like and BERT-like models built in code, with dynamic batch (and sequence), for the
// memory plan's tests: branches (residuals), reshapes that alias their input, kernels with scratch.
#pragma once

#include <string>
#include <vector>

#include "pass_test_util.h"

namespace kiln::test {

// x [batch, 8, 12, 12] -> stem conv -> two residual blocks (the second changes channels with a
// strided 1x1 shortcut) -> max pool -> global average pool -> flatten -> Gemm -> y [batch, 10].
inline void resnet_like(Builder& b) {
  b.input_dims("x", {sym("batch"), num(8), num(12), num(12)});
  b.conv("x", "stem", 8, 16);
  b.add("Relu", {"stem"}, {"s0"});
  // Block 1: Relu(Conv(Relu(Conv(s0))) + s0).
  b.conv("s0", "b1a", 16, 16);
  b.add("Relu", {"b1a"}, {"b1ar"});
  b.conv("b1ar", "b1b", 16, 16);
  b.add("Add", {"b1b", "s0"}, {"b1s"});
  b.add("Relu", {"b1s"}, {"s1"});
  // Block 2: 16 -> 24 channels, stride 2, with a 1x1 strided conv on the shortcut.
  b.weight("b2a_w", {24, 16, 3, 3});
  b.weight("b2a_b", {24});
  b.add("Conv", {"s1", "b2a_w", "b2a_b"}, {"b2a"},
        {attr_ints("pads", {1, 1, 1, 1}), attr_ints("strides", {2, 2})});
  b.add("Relu", {"b2a"}, {"b2ar"});
  b.conv("b2ar", "b2b", 24, 24);
  b.weight("sc_w", {24, 16, 1, 1});
  b.weight("sc_b", {24});
  b.add("Conv", {"s1", "sc_w", "sc_b"}, {"sc"}, {attr_ints("strides", {2, 2})});
  b.add("Add", {"b2b", "sc"}, {"b2s"});
  b.add("Relu", {"b2s"}, {"s2"});
  b.add("MaxPool", {"s2"}, {"mp"},
        {attr_ints("kernel_shape", {3, 3}), attr_ints("strides", {2, 2}),
         attr_ints("pads", {1, 1, 1, 1})});
  b.add("GlobalAveragePool", {"mp"}, {"gap"});
  b.add("Flatten", {"gap"}, {"flat"}, {attr_i("axis", 1)});
  b.weight("fc_w", {10, 24});
  b.weight("fc_b", {10});
  b.add("Gemm", {"flat", "fc_w", "fc_b"}, {"y"}, {attr_i("transB", 1)});
  b.output("y");
}

// One BERT encoder layer on x [batch, seq, 16] with a 0/1 mask [batch, seq]: self-attention with 2
// heads (Q/K/V projections, scaled scores, additive mask, softmax), residual + LayerNormalization,
// a GELU feed-forward of width 64, residual + LayerNormalization -> y [batch, seq, 16].
inline void bert_like(Builder& b) {
  constexpr int64_t E = 16, H = 2, D = 8, F = 64;
  b.input_dims("x", {sym("batch"), sym("seq"), num(E)});
  b.input_dims("mask", {sym("batch"), sym("seq")});
  for (const std::string p : {"q", "k", "v", "o"}) {
    b.weight("w" + p, {E, E});
    b.weight("b" + p, {E});
  }
  b.weight("w1", {E, F});
  b.weight("b1", {F});
  b.weight("w2", {F, E});
  b.weight("b2", {E});
  for (const std::string n : {"ln1", "ln2"}) {
    b.weight(n + "_g", {E});
    b.weight(n + "_b", {E});
  }
  b.ints("heads", {0, 0, H, D});
  b.ints("merge", {0, 0, E});
  b.ints("axes12", {1, 2});
  b.scalar("sqrt_d", 2.8284271f);
  b.scalar("one", 1.0f);
  b.scalar("big", -10000.0f);
  for (const std::string p : {"q", "k", "v"}) {
    b.add("MatMul", {"x", "w" + p}, {p + "_mm"});
    b.add("Add", {p + "_mm", "b" + p}, {p + "_p"});
    b.add("Reshape", {p + "_p", "heads"}, {p + "_r"});
  }
  b.add("Transpose", {"q_r"}, {"q_t"}, {attr_ints("perm", {0, 2, 1, 3})});
  b.add("Transpose", {"k_r"}, {"k_t"}, {attr_ints("perm", {0, 2, 3, 1})});
  b.add("Transpose", {"v_r"}, {"v_t"}, {attr_ints("perm", {0, 2, 1, 3})});
  b.add("MatMul", {"q_t", "k_t"}, {"qk"});
  b.add("Div", {"qk", "sqrt_d"}, {"scores"});
  b.add("Unsqueeze", {"mask", "axes12"}, {"mask4"});
  b.add("Sub", {"one", "mask4"}, {"inv"});
  b.add("Mul", {"inv", "big"}, {"mask_add"});
  b.add("Add", {"scores", "mask_add"}, {"masked"});
  b.add("Softmax", {"masked"}, {"probs"}, {attr_i("axis", -1)});
  b.add("MatMul", {"probs", "v_t"}, {"ctx"});
  b.add("Transpose", {"ctx"}, {"ctx_t"}, {attr_ints("perm", {0, 2, 1, 3})});
  b.add("Reshape", {"ctx_t", "merge"}, {"merged"});
  b.add("MatMul", {"merged", "wo"}, {"o_mm"});
  b.add("Add", {"o_mm", "bo"}, {"attn"});
  b.add("Add", {"attn", "x"}, {"res1"});
  b.add("LayerNormalization", {"res1", "ln1_g", "ln1_b"}, {"h1"}, {attr_i("axis", -1)});
  b.add("MatMul", {"h1", "w1"}, {"f1"});
  b.add("Add", {"f1", "b1"}, {"f1b"});
  b.add("Gelu", {"f1b"}, {"g"});
  b.add("MatMul", {"g", "w2"}, {"f2"});
  b.add("Add", {"f2", "b2"}, {"f2b"});
  b.add("Add", {"f2b", "h1"}, {"res2"});
  b.add("LayerNormalization", {"res2", "ln2_g", "ln2_b"}, {"y"}, {attr_i("axis", -1)});
  b.output("y");
}

// Feeds for bert_like: random x, and a mask hiding every third position.
inline std::vector<Value> bert_feeds(Builder& b, int64_t batch, int64_t seq) {
  Tensor mask = Tensor::make(DType::kFloat32, {batch, seq}).value();
  for (int64_t j = 0; j < mask.numel(); ++j) mask.data<float>()[j] = j % 3 == 2 ? 0.0f : 1.0f;
  return {Value::of(b.random({batch, seq, 16})), Value::of(mask)};
}

}  // namespace kiln::test
