"""ONNX Runtime's QOperator ops (what its quantize_static writes with QuantFormat.QOperator), each in a
small model run by kiln and by ONNX Runtime's own kernels on the same 8-bit inputs. kiln lowers
them (passes/contrib_qlinear.cc) to MatMulIntegerToFloat or DequantizeLinear -> op ->
QuantizeLinear; ONNX Runtime computes them in one step (tables, int32 bias), so a code may differ
by one where a value lands on a half: the check is within one code, and most codes equal."""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln

U8 = TensorProto.UINT8


def consts(**values):
    """Initializers from numpy values, named by keyword."""
    return [numpy_helper.from_array(np.asarray(v), name) for name, v in values.items()]


def model(node, inputs, output_type, out_shape, inits, opset=13):
    graph = helper.make_graph([node], "q", inputs, [helper.make_tensor_value_info("y", output_type, out_shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)])


def u8_input(name, shape):
    return helper.make_tensor_value_info(name, U8, shape)


def scale_and_zero(prefix, scale, zero, dtype=np.uint8):
    return {prefix + "_s": np.float32(scale), prefix + "_z": dtype(zero)}


def check_same_as_onnxruntime(proto, feeds):
    data = proto.SerializeToString()
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = kiln.InferenceSession(data).run(None, feeds)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    if want.dtype == np.float32:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        return
    diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
    assert diff.max() <= 1, f"codes apart by {diff.max()}"
    assert (diff != 0).mean() <= 0.02, f"{(diff != 0).mean():.1%} of the codes differ"


rng = np.random.default_rng(0)
X = rng.integers(0, 256, (1, 8, 6, 6), dtype=np.uint8)


@pytest.mark.parametrize("quantized_out", [True, False])
def test_qgemm(quantized_out):
    a = rng.integers(0, 256, (4, 40), dtype=np.uint8)
    # B within 7 bits: ONNX Runtime's AVX2 U8S8 kernel (CPUs without VNNI) lets vpmaddubsw's u8 x s8
    # pair sums saturate past them (255 x 127 x 2 > 32767), and its codes then miss by up to 4.
    inits = dict(a_s=np.float32(0.02), a_z=np.uint8(120), b=rng.integers(-64, 65, (16, 40), dtype=np.int8),
                 b_s=np.linspace(0.001, 0.01, 16, dtype=np.float32), b_z=np.zeros(16, np.int8),
                 c=rng.integers(-3000, 3000, 16, dtype=np.int32))
    names = ["a", "a_s", "a_z", "b", "b_s", "b_z", "c"]
    if quantized_out:
        inits.update(scale_and_zero("y", 0.6, 110))
        names += ["y_s", "y_z"]
    node = helper.make_node("QGemm", names, ["y"], domain="com.microsoft", transB=1, alpha=0.75)
    proto = model(node, [u8_input("a", [4, 40])], U8 if quantized_out else TensorProto.FLOAT, [4, 16],
                  consts(**{k: v for k, v in inits.items() if k != "a"}))
    check_same_as_onnxruntime(proto, {"a": a})


def test_qlinear_matmul():
    a = rng.integers(0, 256, (2, 5, 32), dtype=np.uint8)
    inits = dict(a_s=np.float32(0.03), a_z=np.uint8(128), b=rng.integers(0, 256, (32, 12), dtype=np.uint8),
                 b_s=np.float32(0.01), b_z=np.uint8(125), **scale_and_zero("y", 0.4, 100))
    node = helper.make_node("QLinearMatMul", ["a", "a_s", "a_z", "b", "b_s", "b_z", "y_s", "y_z"], ["y"])
    check_same_as_onnxruntime(model(node, [u8_input("a", [2, 5, 32])], U8, [2, 5, 12], consts(**{k: v for k, v in inits.items()})),
                              {"a": a})


def test_qlinear_concat():
    inits = {**scale_and_zero("y", 0.05, 128), **scale_and_zero("x", 0.04, 120), **scale_and_zero("w", 0.07, 90)}
    node = helper.make_node("QLinearConcat", ["y_s", "y_z", "x", "x_s", "x_z", "w", "w_s", "w_z"], ["y"],
                            domain="com.microsoft", axis=1)
    w = rng.integers(0, 256, (1, 3, 6, 6), dtype=np.uint8)
    proto = model(node, [u8_input("x", [1, 8, 6, 6]), u8_input("w", [1, 3, 6, 6])], U8, [1, 11, 6, 6], consts(**inits))
    check_same_as_onnxruntime(proto, {"x": X, "w": w})


@pytest.mark.parametrize(
    "op, attrs, out_shape",
    [("QLinearLeakyRelu", dict(alpha=0.1), [1, 8, 6, 6]),
     ("QLinearAveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), [1, 8, 3, 3]),
     ("QLinearSoftmax", dict(axis=1, opset=13), [1, 8, 6, 6]),
     ("QLinearSoftmax", dict(axis=1, opset=12), [1, 8, 6, 6])])  # softmax over the flattened [1, 288]
def test_unary_qlinear_ops(op, attrs, out_shape):
    out_scale = 1 / 256 if op == "QLinearSoftmax" else 0.05
    inits = {**scale_and_zero("x", 0.06, 128), **scale_and_zero("y", out_scale, 0 if op == "QLinearSoftmax" else 128)}
    node = helper.make_node(op, ["x", "x_s", "x_z", "y_s", "y_z"], ["y"], domain="com.microsoft", **attrs)
    check_same_as_onnxruntime(model(node, [u8_input("x", [1, 8, 6, 6])], U8, out_shape, consts(**inits)), {"x": X})


def test_qlinear_where():
    inits = {**scale_and_zero("x", 0.06, 128), **scale_and_zero("w", 0.03, 100), **scale_and_zero("y", 0.05, 120)}
    node = helper.make_node("QLinearWhere", ["c", "x", "x_s", "x_z", "w", "w_s", "w_z", "y_s", "y_z"], ["y"],
                            domain="com.microsoft")
    c = rng.integers(0, 2, (1, 8, 6, 6)).astype(bool)
    w = rng.integers(0, 256, (1, 8, 6, 6), dtype=np.uint8)
    proto = model(node, [helper.make_tensor_value_info("c", TensorProto.BOOL, [1, 8, 6, 6]), u8_input("x", [1, 8, 6, 6]),
                         u8_input("w", [1, 8, 6, 6])], U8, [1, 8, 6, 6], consts(**inits))
    check_same_as_onnxruntime(proto, {"c": c, "x": X, "w": w})
