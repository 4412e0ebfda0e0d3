#!/usr/bin/env python3
"""Runs each benchmark model through `kiln run --random` and ONNX Runtime on the same inputs
(the bench rule, ../shared/bench/ort_bench.py) and checks the outputs agree. With --portable,
ONNX Runtime runs the model `kiln optimize --portable` wrote instead of kiln running it. With
--engine openvino, OpenVINO runs the model as ../shared/bench/ov_bench.py compiles it (f32 hint,
the same threads), so a peer's ratio can be read together with its accuracy.

    ~/.cache/kiln-bench/venv/bin/python scripts/check_bench_models.py [MODEL.onnx ...]
        [--kiln build/kiln] [--batch N] [--seq N] [--rtol 1e-3] [--atol 1e-4] [--portable]
        [--decision argmax] [--engine kiln|openvino] [--threads N]
With --decision argmax, a float output passes when its argmax along the last axis (the label
per row: a class, a character per time step) equals ONNX Runtime's, for models whose raw values
are not expected to match (ONNX Runtime's dynamic quantization rounds activations kiln does not).
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime as ort

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "shared", "bench"))
from ort_bench import make_input  # noqa: E402  the bench rule, shared with ort_bench.py


def run_kiln(a, model, out, maps):
    """kiln's outputs, or an error message."""
    r = subprocess.run([a.kiln, "run", model, "--random", "--batch", str(a.batch), "--seq", str(a.seq),
                        "-o", out], capture_output=True, text=True)
    if r.returncode != 0:
        return "kiln run failed: " + r.stderr.strip()
    got = []
    for k in range(len(glob.glob(os.path.join(out, "output_*.pb")))):
        with open(os.path.join(out, f"output_{k}.pb"), "rb") as f:
            data = f.read()
        if k not in maps:
            t = onnx.TensorProto()
            t.ParseFromString(data)
            got.append(onnx.numpy_helper.to_array(t))
            continue
        s = onnx.SequenceProto()
        s.ParseFromString(data)
        got.append(maps_to_array([{(m.string_keys or m.keys)[i]: float(onnx.numpy_helper.to_array(v))
                                   for i, v in enumerate(m.values.tensor_values)} for m in s.map_values]))
    return got


def maps_to_array(maps):
    """A sequence of maps (ZipMap's output) as [N, keys] values, keys in sorted order."""
    if isinstance(maps, np.ndarray):
        return maps
    return np.array([[m[k] for k in sorted(m)] for m in maps], dtype=np.float32)


def run_portable(a, model, feeds, out):
    """ONNX Runtime's outputs on the model `kiln optimize --portable` wrote, or an error message."""
    path = os.path.join(out, "portable.onnx")
    r = subprocess.run([a.kiln, "optimize", model, "-o", path, "--portable"], capture_output=True, text=True)
    if r.returncode != 0:
        return "kiln optimize --portable failed: " + r.stderr.strip()
    try:
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)
    except Exception as e:  # noqa: BLE001  any ORT refusal is the failure being reported
        return f"ONNX Runtime cannot run the portable model: {e}"


def run_openvino(a, model, feeds):
    """OpenVINO's outputs, compiled with ov_bench.py's settings, or an error message."""
    import openvino as ov  # only this mode needs the wheel
    try:
        compiled = ov.Core().compile_model(model, "CPU", {
            "INFERENCE_NUM_THREADS": a.threads, "PERFORMANCE_HINT": "LATENCY",
            "NUM_STREAMS": 1, "INFERENCE_PRECISION_HINT": "f32"})
        res = compiled.create_infer_request().infer(feeds)
        return [np.asarray(res[o]) for o in compiled.outputs]
    except Exception as e:  # noqa: BLE001  any OpenVINO refusal is the failure being reported
        return f"OpenVINO cannot run the model: {str(e).strip().splitlines()[0][:120]}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("models", nargs="*")
    p.add_argument("--kiln", default="build/kiln")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--rtol", type=float, default=1e-3)
    p.add_argument("--atol", type=float, default=1e-4)
    p.add_argument("--portable", action="store_true")
    p.add_argument("--decision", choices=["argmax"])
    p.add_argument("--engine", default="kiln", choices=["kiln", "openvino"])
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    models = a.models or sorted(glob.glob(os.path.expanduser("~/.cache/kiln-bench/models/*.onnx")))
    failed = 0
    for model in models:
        sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        feeds = {m.name: make_input(m, a.batch, a.seq) for m in sess.get_inputs()}
        maps = {k for k, o in enumerate(sess.get_outputs()) if o.type.startswith("seq(map")}
        want = [maps_to_array(w) if isinstance(w, list) else w for w in sess.run(None, feeds)]
        with tempfile.TemporaryDirectory() as out:
            if a.engine == "openvino":
                got_all = run_openvino(a, model, feeds)
            elif a.portable:
                got_all = run_portable(a, model, feeds, out)
            else:
                got_all = run_kiln(a, model, out, maps)
            if isinstance(got_all, str):
                print(f"FAIL {os.path.basename(model)}: {got_all}")
                failed += 1
                continue
            worst = 0.0
            ok = True
            for k, w in enumerate(want):
                got = got_all[k]
                if got.shape != w.shape:
                    print(f"FAIL {os.path.basename(model)} output {k}: shape {got.shape} vs {w.shape}")
                    ok = False
                    continue
                if a.decision == "argmax" and w.dtype.kind == "f" and w.ndim > 0:
                    same = got.argmax(-1) == w.argmax(-1)
                    worst = max(worst, 1.0 - float(np.mean(same)))
                    if not np.all(same):
                        print(f"FAIL {os.path.basename(model)} output {k}: {int(np.sum(~same))} labels differ")
                        ok = False
                    continue
                err = np.abs(got.astype(np.float64) - w.astype(np.float64))
                bound = a.atol + a.rtol * np.abs(w.astype(np.float64))
                worst = max(worst, float(np.max(err / bound)) if err.size else 0.0)
                if not np.all(err <= bound):
                    print(f"FAIL {os.path.basename(model)} output {k}: max abs err {err.max():.3g}")
                    ok = False
        what = "share of labels that differ" if a.decision else "worst error / tolerance"
        print(f"{'ok  ' if ok else 'FAIL'} {os.path.basename(model)}: {len(want)} outputs, {what} = {worst:.3f}")
        failed += not ok
    print(f"{len(models) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
