"""The transformer ops ONNX Runtime's optimizer and quantizer write (com.microsoft
EmbedLayerNormalization, Attention, SkipLayerNormalization, the GELUs, and the 8-bit
QEmbedLayerNormalization and QAttention), each in a small model run by kiln (which lowers them:
passes/contrib_transformer.cc) and by ONNX Runtime's own kernels, on the same inputs, padded rows
included."""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln

B, S, E, HEADS, VOCAB = 2, 7, 16, 2, 50
rng = np.random.default_rng(3)
F32, I32 = TensorProto.FLOAT, TensorProto.INT32


def run_both(nodes, inputs, outputs, inits, feeds, opset=13):
    graph = helper.make_graph(nodes, "t", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)])
    data = model.SerializeToString()
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = kiln.InferenceSession(data).run(None, feeds)
    return want, got


def ms(op, inputs, outputs, **attrs):
    return helper.make_node(op, inputs, outputs, domain="com.microsoft", **attrs)


def f32(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# Two rows, the second padded after 4 tokens: the mask ONNX Runtime reads as token counts.
IDS = rng.integers(0, VOCAB, (B, S)).astype(np.int32)
SEGMENTS = (np.arange(S) >= 3).astype(np.int32)[None].repeat(B, 0)
MASK = np.ones((B, S), np.int32)
MASK[1, 4:] = 0
EMBED_INITS = dict(word=f32(VOCAB, E), pos=f32(S + 3, E), seg=f32(2, E), gamma=f32(E) + 1, beta=f32(E))
EMBED_INPUTS = [helper.make_tensor_value_info(n, I32, [B, S]) for n in ("ids", "segments", "mask")]
EMBED_FEEDS = {"ids": IDS, "segments": SEGMENTS, "mask": MASK}


def close(got, want, atol=2e-5):
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=atol)


@pytest.mark.parametrize("position_ids", [False, True])
def test_embed_layer_norm(position_ids):
    inputs = ["ids", "segments", "word", "pos", "seg", "gamma", "beta", "mask"]
    inits = dict(EMBED_INITS)
    if position_ids:  # positions given: counted from 2
        inits["position_ids"] = (np.arange(S, dtype=np.int32) + 2)[None]
        inputs.append("position_ids")
    node = ms("EmbedLayerNormalization", inputs, ["y", "mask_index"], epsilon=1e-12)
    outs = [helper.make_tensor_value_info("y", F32, [B, S, E]), helper.make_tensor_value_info("mask_index", I32, [B])]
    want, got = run_both([node], EMBED_INPUTS, outs, inits, EMBED_FEEDS)
    close(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def attention_model(quantized, mask_kind):
    """EmbedLayerNormalization, then (Q)Attention with the given mask: 'index' (the embedding's
    token counts), 'raw' (the [batch, keys] 0/1 mask) or 'none'."""
    w = f32(E, 3 * E, scale=0.3)
    inits = dict(EMBED_INITS, w=w, b=f32(3 * E, scale=0.1))
    nodes = [ms("EmbedLayerNormalization", ["ids", "segments", "word", "pos", "seg", "gamma", "beta", "mask"],
                ["x", "mask_index"])]
    mask = {"index": "mask_index", "raw": "mask", "none": ""}[mask_kind]
    if quantized:  # ONNX Runtime's quantize_dynamic form: the input quantized at run time, W int8
        # (7-bit, as reduce_range writes it: ONNX Runtime's AVX2 U8S8 kernel saturates past that)
        scale = np.float32(np.abs(w).max() / 63)
        inits.update(wq=np.round(w / scale).astype(np.int8), ws=scale, wz=np.int8(0))
        nodes.append(helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]))
        nodes.append(ms("QAttention", ["xq", "wq", "b", "xs", "ws", mask, "xz", "wz"], ["y"], num_heads=HEADS))
    else:
        nodes.append(ms("Attention", ["x", "w", "b", mask], ["y"], num_heads=HEADS))
    return nodes, inits


@pytest.mark.parametrize("quantized", [False, True])
@pytest.mark.parametrize("mask_kind", ["index", "raw", "none"])
def test_attention(quantized, mask_kind):
    nodes, inits = attention_model(quantized, mask_kind)
    want, got = run_both(nodes, EMBED_INPUTS, [helper.make_tensor_value_info("y", F32, [B, S, E])], inits, EMBED_FEEDS)
    # The padded keys are masked; the padded queries' rows are compared too.
    close(got[0], want[0], atol=1e-4 if quantized else 2e-5)


def test_qembed_layer_norm():
    inits, inputs = {}, ["ids", "segments"]
    for name in ("word", "pos", "seg", "gamma", "beta"):
        v = EMBED_INITS[name]
        lo, hi = min(v.min(), 0), max(v.max(), 0)
        scale = np.float32((hi - lo) / 255)
        inits[name + "_q"] = np.clip(np.round(v / scale) + np.round(-lo / scale), 0, 255).astype(np.uint8)
        inits[name + "_s"], inits[name + "_z"] = scale, np.uint8(np.round(-lo / scale))
    names = ("word", "pos", "seg", "gamma", "beta")
    node = ms("QEmbedLayerNormalization", inputs + [n + "_q" for n in names] + ["mask"] + [n + "_s" for n in names] +
              [n + "_z" for n in names], ["y", "mask_index"], epsilon=1e-12)
    outs = [helper.make_tensor_value_info("y", F32, [B, S, E]), helper.make_tensor_value_info("mask_index", I32, [B])]
    want, got = run_both([node], EMBED_INPUTS, outs, inits, EMBED_FEEDS)
    close(got[0], want[0], atol=1e-4)
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("bias", [False, True])
def test_skip_layer_norm(bias):
    inits = dict(gamma=f32(E) + 1, beta=f32(E), bias=f32(E))
    inputs = ["x", "skip", "gamma", "beta"] + (["bias"] if bias else [])
    node = ms("SkipLayerNormalization", inputs, ["y", "", "", "sum"], epsilon=1e-12)
    xs = [helper.make_tensor_value_info(n, F32, [B, S, E]) for n in ("x", "skip")]
    outs = [helper.make_tensor_value_info(n, F32, [B, S, E]) for n in ("y", "sum")]
    want, got = run_both([node], xs, outs, inits, {"x": f32(B, S, E), "skip": f32(B, S, E)})
    close(got[0], want[0])
    close(got[1], want[1])


@pytest.mark.parametrize("op, with_bias", [("BiasGelu", True), ("Gelu", False), ("FastGelu", True), ("FastGelu", False),
                                           ("QuickGelu", False)])
def test_gelus(op, with_bias):
    node = ms(op, ["x", "bias"] if with_bias else ["x"], ["y"])
    want, got = run_both([node], [helper.make_tensor_value_info("x", F32, [B, S, E])],
                         [helper.make_tensor_value_info("y", F32, [B, S, E])], dict(bias=f32(E)),
                         {"x": f32(B, S, E, scale=3)})
    close(got[0], want[0], atol=1e-5)
