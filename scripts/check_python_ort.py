#!/usr/bin/env python3
"""One deployment script, two runtimes: runs each benchmark model with `ort` bound to ONNX Runtime
and then to kiln (`import kiln as ort`), on the same inputs, through the same calls
(InferenceSession, get_inputs, run), and checks that the outputs agree (rtol 1e-4 by default,
atol that fraction of the output's largest magnitude, so that values near zero are judged on the
output's scale).

    .venv/bin/python scripts/check_python_ort.py [MODEL.onnx ...] [--rtol 1e-4] [--batch N] [--seq N]

Without models it takes the six benchmark models from ~/.cache/kiln-bench/models
(../shared/bench/setup.sh exports them). Exits 1 when any output differs.
"""
import argparse
import os
import sys

import numpy as np
import onnxruntime

import kiln

SIX = ["resnet50", "mobilenet_v2", "efficientnet_b0", "vit_b_16", "bert_base", "bert_tiny"]


def infer(ort, path, batch, seq):
    """What a deployment script does with either module."""
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = kiln.bench_inputs(path, batch, seq)  # the bench rule, the same arrays for both
    names = [o.name for o in sess.get_outputs()]
    return names, sess.run(names, feeds)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("models", nargs="*")
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=128)
    a = p.parse_args()
    home = os.environ.get("KILN_BENCH_HOME", os.path.expanduser("~/.cache/kiln-bench"))
    models = a.models or [os.path.join(home, "models", m + ".onnx") for m in SIX]
    failed = 0
    for path in models:
        names_o, want = infer(onnxruntime, path, a.batch, a.seq)
        names_k, got = infer(kiln, path, a.batch, a.seq)
        assert names_o == names_k, (names_o, names_k)
        for name, w, g in zip(names_o, want, got):
            scale = float(np.max(np.abs(w))) if w.size else 0.0
            atol = a.rtol * scale
            ok = g.dtype == w.dtype and g.shape == w.shape and np.allclose(g, w, rtol=a.rtol, atol=atol)
            err = float(np.max(np.abs(g.astype(np.float64) - w))) if g.shape == w.shape and w.size else float("nan")
            print(f"{'ok  ' if ok else 'FAIL'} {os.path.basename(path)} {name} {list(w.shape)} "
                  f"max |kiln - ort| {err:.3g} (output's max {scale:.3g}, rtol {a.rtol:g})")
            failed += 0 if ok else 1
    print(f"{len(models)} models, {failed} outputs differ")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
