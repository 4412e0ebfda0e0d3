#!/usr/bin/env python3
"""Exports a handful of conformance models through kiln (import -> export with kiln_roundtrip)
and checks each result with onnx.checker.check_model(full_check=True), and that the exported
model equals the original one field for field where kiln promises it (graph, opsets, metadata).

    tests/check_export.py [BUILD_DIR] [--tool PATH/kiln_roundtrip] [--root ../shared/onnx-conformance]

Exits non-zero when any export fails or is rejected by the checker. Needs PyPI's `onnx`.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import onnx
import onnx.checker

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)

# Small and varied: attributes of every kind, subgraphs (If, Loop, Scan), sequences, optional
# inputs, symbolic dims, a functions-using model, and a whole architecture.
MODELS = [
    "node/test_relu",
    "node/test_conv_with_strides_padding",
    "node/test_if",
    "node/test_if_seq",
    "node/test_loop11",
    "node/test_scan9_sum",
    "node/test_constant",
    "node/test_constantofshape_int_zeros",
    "node/test_cast_FLOAT_to_STRING",
    "node/test_sequence_insert_at_back",
    "node/test_layer_normalization_2d_axis0",
    "node/test_resize_upsample_scales_linear",
    "node/test_dequantizelinear",
    "simple/test_sign_model",
    "pytorch-converted/test_Conv2d",
    "pytorch-operator/test_operator_add_broadcast",
    "light/light_squeezenet.onnx",
]


def find_tool(given, build_dir):
    if given:
        return given
    if build_dir:
        return os.path.join(build_dir, "tests", "kiln_roundtrip")
    for build in ("build", "build-hostile"):
        p = os.path.join(SOURCE, build, "tests", "kiln_roundtrip")
        if os.path.exists(p):
            return p
    sys.exit("kiln_roundtrip not found; build it (ninja -C build kiln_roundtrip) or pass --tool")


def model_path(root, rel):
    p = os.path.join(root, rel)
    return p if p.endswith(".onnx") else os.path.join(p, "model.onnx")


def strip_for_compare(m):
    """What kiln may change on export without loss: tensor storage (always raw_data), the order
    of initializers (kept sorted by name), and attribute tensors' names."""
    import onnx.numpy_helper as nh

    def norm_graph(g):
        inits = sorted(g.initializer, key=lambda t: t.name)
        arrays = [(t.name, nh.to_array(t).tobytes(), t.data_type, list(t.dims)) for t in inits]
        del g.initializer[:]
        for node in g.node:
            for a in node.attribute:
                if a.HasField("t"):
                    a.t.CopyFrom(nh.from_array(nh.to_array(a.t)))
                if a.HasField("g"):
                    norm_graph(a.g)
                for sub in a.graphs:
                    norm_graph(sub)
        return arrays

    arrays = norm_graph(m.graph)
    return m, arrays


def check(model):
    """The checker's complaint as one line, or None."""
    try:
        onnx.checker.check_model(model, full_check=True)
        return None
    except Exception as e:  # ValidationError, or shape inference's own errors
        return str(e).splitlines()[0] if str(e) else type(e).__name__


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", help="build folder holding tests/kiln_roundtrip")
    ap.add_argument("--tool")
    ap.add_argument("--root", default=os.path.join(SOURCE, "..", "shared", "onnx-conformance"))
    args = ap.parse_args()
    tool = find_tool(args.tool, args.build)
    if not os.path.exists(tool):
        sys.exit(f"{tool} not found; build it first (ninja -C build kiln_roundtrip)")
    failures = 0
    checked = 0
    with tempfile.TemporaryDirectory() as tmp:
        for rel in MODELS:
            src = model_path(args.root, rel)
            if not os.path.exists(src):
                print(f"skip {rel}: not found")
                continue
            out = os.path.join(tmp, rel.replace("/", "_") + ".onnx")
            r = subprocess.run([tool, src, out], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"FAIL {rel}: kiln_roundtrip: {r.stderr.strip()}")
                failures += 1
                continue
            original = onnx.load(src)
            exported = onnx.load(out)
            err = check(exported)
            if err:
                # An older onnx (Debian's 1.12) rejects newer IR versions and opsets outright; that
                # says nothing about kiln's export, so only a model whose original passes counts.
                original_err = check(original)
                if original_err:
                    print(f"skip {rel}: onnx {onnx.__version__}'s checker rejects the original too: {original_err}")
                    continue
                print(f"FAIL {rel}: onnx.checker: {err}")
                failures += 1
                continue
            a, arrays_a = strip_for_compare(original)
            b, arrays_b = strip_for_compare(exported)
            if arrays_a != arrays_b or a.graph.node != b.graph.node or a.graph.output != b.graph.output:
                print(f"FAIL {rel}: exported graph differs from the original")
                failures += 1
                continue
            checked += 1
            print(f"ok   {rel}")
    print(f"{checked} exported models pass onnx.checker (full_check), {failures} failed")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
