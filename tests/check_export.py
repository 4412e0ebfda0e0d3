#!/usr/bin/env python3
"""Exports a handful of conformance models through kiln (import -> export with kiln_roundtrip)
and checks each result with onnx.checker.check_model(full_check=True), and that the exported
model equals the original one field for field where kiln promises it (graph, opsets, metadata).
One model is also saved with external data (kiln_roundtrip --external-data): the checker must
accept it by path, and onnx.load must read the same weights as from kiln's inline save.

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


# Saved with external data; its 256-byte biases go to the data file at this threshold while its
# 8- and 32-byte shape tensors stay inline, so both kinds are checked.
EXTERNAL_MODEL = "light/light_squeezenet.onnx"
EXTERNAL_THRESHOLD = 64
ALIGNMENT = 4096  # SaveOptions::alignment's default


def weights(model):
    import onnx.numpy_helper as nh
    return {t.name: (t.data_type, list(t.dims), nh.to_array(t).tobytes()) for t in model.graph.initializer}


def check_external_data(tool, root, tmp):
    """None when kiln's external-data save of EXTERNAL_MODEL is right, else what is wrong; the
    string "skip: ..." when the model is missing or this onnx rejects the original."""
    src = model_path(root, EXTERNAL_MODEL)
    if not os.path.exists(src):
        return f"skip: {EXTERNAL_MODEL} not found"
    inline = os.path.join(tmp, "external_inline.onnx")
    folder = os.path.join(tmp, "external")
    os.mkdir(folder)
    out = os.path.join(folder, "model.onnx")
    for cmd in ([tool, src, inline],
                [tool, "--external-data", f"--size-threshold={EXTERNAL_THRESHOLD}", src, out]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            return f"kiln_roundtrip: {r.stderr.strip()}"
    if sorted(os.listdir(folder)) != ["model.onnx", "model.onnx.data"]:
        return f"expected model.onnx and model.onnx.data, found {sorted(os.listdir(folder))}"
    bare = onnx.load(out, load_external_data=False)
    external = [t for t in bare.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    if not external or len(external) == len(bare.graph.initializer):
        return f"{len(external)} of {len(bare.graph.initializer)} initializers external, expected some but not all"
    end = 0
    for t in external:
        info = {kv.key: kv.value for kv in t.external_data}
        if info.get("location") != "model.onnx.data" or int(info.get("offset", -1)) % ALIGNMENT:
            return f"tensor {t.name}: bad external data entry {info}"
        end = max(end, int(info["offset"]) + int(info["length"]))
    if os.path.getsize(os.path.join(folder, "model.onnx.data")) != end:
        return "data file size differs from the last tensor's end"
    err = check(out)  # by path: the checker resolves the external data beside the model
    if err:
        if check(onnx.load(src)):
            return f"skip: onnx {onnx.__version__}'s checker rejects the original too"
        return f"onnx.checker: {err}"
    if weights(onnx.load(out)) != weights(onnx.load(inline)):
        return "weights read through external data differ from kiln's inline save"
    return None


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
        err = check_external_data(tool, args.root, tmp)
        if err and err.startswith("skip"):
            print(f"{err} ({EXTERNAL_MODEL} with external data)")
        elif err:
            print(f"FAIL {EXTERNAL_MODEL} with external data: {err}")
            failures += 1
        else:
            checked += 1
            print(f"ok   {EXTERNAL_MODEL} with external data")
    print(f"{checked} exported models pass onnx.checker (full_check), {failures} failed")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
