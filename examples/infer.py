"""A deployment script written against ONNX Runtime's API: load a model, 100 warm-up runs, 1000
timed runs, mean and p99 latency. Change the import to `import kiln as ort` to run it on kiln.

    python examples/infer.py model.onnx            # ONNX Runtime
    KILN=1 python examples/infer.py model.opt.onnx # kiln (or edit the import below)
"""

import os
import sys
import time

import numpy as np

if os.environ.get("KILN"):
    import kiln as ort
else:
    import onnxruntime as ort


def make_input(arg, batch=1, seq=128):
    dims = [d if isinstance(d, int) and d > 0 else (batch if i == 0 else seq)
            for i, d in enumerate(arg.shape)]
    if arg.type in ("tensor(int64)", "tensor(int32)"):
        dtype = np.int64 if arg.type == "tensor(int64)" else np.int32
        if "mask" in arg.name.lower():
            return np.ones(dims, dtype=dtype)
        return (np.arange(int(np.prod(dims))) % 1000).astype(dtype).reshape(dims)
    return np.random.default_rng(0).standard_normal(dims).astype(np.float32)


def main(path):
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {arg.name: make_input(arg) for arg in sess.get_inputs()}
    for _ in range(100):
        sess.run(None, feeds)
    times = []
    for _ in range(1000):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    print(f"{ort.__name__}: mean {sum(times) / len(times):.3f} ms, "
          f"p99 {times[int(0.99 * len(times))]:.3f} ms")


if __name__ == "__main__":
    main(sys.argv[1])
