"""What the Python API adds to a run: kiln.InferenceSession.run against `kiln bench` (C++) on one
model, and against ONNX Runtime's Python run on a tiny model (one Add), alternated in rounds.

    python bench/python_overhead.py [MODEL.onnx] [--rounds 5] [--kiln build/kiln]

Run it in the venv that has kiln and onnxruntime (.venv after scripts/bootstrap.sh and the tests).
"""

import argparse
import json
import os
import subprocess
import tempfile
import time

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper

import kiln


def p50_of_runs(sess, feeds, iters, warmup=20):
    for _ in range(warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t) * 1e3)
    return float(np.median(times))


def tiny_model(path):
    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["c"])], "tiny",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("c", TensorProto.FLOAT, [1])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def main():
    p = argparse.ArgumentParser()
    home = os.environ.get("KILN_BENCH_HOME", os.path.expanduser("~/.cache/kiln-bench"))
    p.add_argument("model", nargs="?", default=os.path.join(home, "models", "bert_tiny.onnx"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--iters", type=int, default=300)
    p.add_argument("--kiln", default="build/kiln")
    a = p.parse_args()
    so = kiln.SessionOptions()
    so.intra_op_num_threads = os.cpu_count()
    sess = kiln.InferenceSession(a.model, so)
    feeds = kiln.bench_inputs(a.model)
    ratios = []
    for r in range(a.rounds):
        out = subprocess.run([a.kiln, "bench", a.model, "--json", "--iters", str(a.iters)],
                             capture_output=True, text=True, check=True).stdout
        cli = json.loads(out.strip().splitlines()[-1])["p50_ms"]
        py = p50_of_runs(sess, feeds, a.iters)
        ratios.append(py / cli)
        print(f"round {r + 1}: kiln bench p50 {cli:.4f} ms, InferenceSession.run p50 {py:.4f} ms "
              f"(+{(py - cli) * 1e3:.1f} us)")
    print(f"{os.path.basename(a.model)}: Python/CLI p50 = {np.median(ratios):.3f} (median of rounds)")

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tiny.onnx")
        tiny_model(path)
        feeds = {"a": np.ones(1, np.float32), "b": np.ones(1, np.float32)}
        k = kiln.InferenceSession(path)
        o = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        ks, os_ = [], []
        for _ in range(a.rounds):
            ks.append(p50_of_runs(k, feeds, 5000) * 1e3)
            os_.append(p50_of_runs(o, feeds, 5000) * 1e3)
        print(f"tiny Add: kiln run p50 {np.median(ks):.1f} us, onnxruntime run p50 "
              f"{np.median(os_):.1f} us (medians of {a.rounds} alternated rounds)")


if __name__ == "__main__":
    main()
