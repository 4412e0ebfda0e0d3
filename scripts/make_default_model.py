#!/usr/bin/env python3
"""Writes kiln's built-in default model: a small CNN image classifier with fixed random weights.

    make_default_model.py OUT.onnx

Conv-BatchNorm-Relu blocks, a residual Add, max pooling, global average pooling, a Gemm
classifier and Softmax: the patterns real CNN exports contain, small enough to run anywhere.
Needs only Debian's python3-onnx and python3-numpy.
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(0)
nodes, inits = [], []


def weight(name, *shape, scale=0.1):
    inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
    return name


def conv_bn_relu(x, name, cin, cout, stride=1):
    nodes.append(helper.make_node("Conv", [x, weight(name + ".w", cout, cin, 3, 3), weight(name + ".b", cout)],
                                  [name + ".conv"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[stride, stride]))
    inits.append(numpy_helper.from_array(np.abs(rng.standard_normal(cout)).astype(np.float32) + 0.5, name + ".bn_scale"))
    inits.append(numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32) * 0.1, name + ".bn_bias"))
    inits.append(numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32) * 0.1, name + ".bn_mean"))
    inits.append(numpy_helper.from_array(np.abs(rng.standard_normal(cout)).astype(np.float32) + 0.5, name + ".bn_var"))
    nodes.append(helper.make_node("BatchNormalization", [name + ".conv", name + ".bn_scale", name + ".bn_bias",
                                                         name + ".bn_mean", name + ".bn_var"], [name + ".bn"]))
    nodes.append(helper.make_node("Relu", [name + ".bn"], [name]))
    return name


def main():
    x = conv_bn_relu("input", "stem", 3, 16, stride=2)
    y = conv_bn_relu(x, "block1a", 16, 16)
    y = conv_bn_relu(y, "block1b", 16, 16)
    nodes.append(helper.make_node("Add", [x, y], ["res1"]))
    nodes.append(helper.make_node("MaxPool", ["res1"], ["pool1"], kernel_shape=[2, 2], strides=[2, 2]))
    z = conv_bn_relu("pool1", "block2", 16, 32)
    nodes.append(helper.make_node("GlobalAveragePool", [z], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], axis=1))
    nodes.append(helper.make_node("Gemm", ["flat", weight("fc.w", 10, 32), weight("fc.b", 10)], ["logits"], transB=1))
    nodes.append(helper.make_node("Softmax", ["logits"], ["probs"], axis=-1))
    graph = helper.make_graph(
        nodes, "kiln_default_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 64, 64])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="kiln")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, sys.argv[1])


if __name__ == "__main__":
    main()
