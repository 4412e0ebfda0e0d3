"""The Python package against ONNX Runtime (the reference), with models built here by onnx.helper.

Run by scripts/run_tests.sh in the project's venv: python -m pytest tests/python
"""

import os
import subprocess
import sys
import threading
import time

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln

RNG = np.random.default_rng(0)


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def conv_net():
    """x [batch, 3, 16, 16] -> Conv 8x3x3 + Relu -> global pool -> Gemm 5 -> Softmax."""
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
    ]
    inits = [
        _init("w", RNG.standard_normal((8, 3, 3, 3)).astype(np.float32)),
        _init("b", RNG.standard_normal(8).astype(np.float32)),
        _init("fw", RNG.standard_normal((5, 8)).astype(np.float32)),
        _init("fb", RNG.standard_normal(5).astype(np.float32)),
    ]
    g = helper.make_graph(
        nodes, "conv_net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 5]),
         helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 5])],
        inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                             producer_name="kiln-tests")


def two_inputs():
    """x float [batch, 4] and idx int64 [batch]: y = x @ W + b, z = idx * 3 (int64)."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["y"]),
        helper.make_node("Mul", ["idx", "three"], ["z"]),
    ]
    inits = [
        _init("w", RNG.standard_normal((4, 6)).astype(np.float32)),
        _init("b", RNG.standard_normal(6).astype(np.float32)),
        _init("three", np.array(3, dtype=np.int64)),
    ]
    g = helper.make_graph(
        nodes, "two_inputs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("idx", TensorProto.INT64, ["batch"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 6]),
         helper.make_tensor_value_info("z", TensorProto.INT64, ["batch"])],
        inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def matmul_chain(n=768, depth=24):
    """A long run: `depth` n x n MatMuls, so a run takes tens of milliseconds."""
    nodes, inits, prev = [], [], "x"
    for i in range(depth):
        inits.append(_init(f"w{i}", (RNG.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"]))
        prev = f"h{i}"
    g = helper.make_graph(nodes, "chain",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [n, n])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    for name, make in [("conv_net", conv_net), ("two_inputs", two_inputs)]:
        onnx.save(make(), str(d / f"{name}.onnx"))
    return d


def feeds_for(name, batch=3):
    if name == "conv_net":
        return {"x": RNG.standard_normal((batch, 3, 16, 16)).astype(np.float32)}
    return {"x": RNG.standard_normal((batch, 4)).astype(np.float32),
            "idx": np.arange(batch, dtype=np.int64) * 7 - 2}


@pytest.mark.parametrize("name", ["conv_net", "two_inputs"])
@pytest.mark.parametrize("level", [kiln.GraphOptimizationLevel.ORT_DISABLE_ALL,
                                   kiln.GraphOptimizationLevel.ORT_ENABLE_ALL])
def test_same_outputs_as_onnxruntime(model_dir, name, level):
    path = str(model_dir / f"{name}.onnx")
    ref = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    so = kiln.SessionOptions()
    so.graph_optimization_level = level
    sess = kiln.InferenceSession(path, so)
    for batch in (1, 3):
        feeds = feeds_for(name, batch)
        want = ref.run(None, feeds)
        got = sess.run(None, feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)


def test_inputs_outputs_and_metadata_as_onnxruntime(model_dir):
    path = str(model_dir / "conv_net.onnx")
    ref = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    sess = kiln.InferenceSession(path)
    for mine, theirs in [(sess.get_inputs(), ref.get_inputs()),
                         (sess.get_outputs(), ref.get_outputs())]:
        assert [(a.name, a.type, a.shape) for a in mine] == \
               [(a.name, a.type, a.shape) for a in theirs]
    assert sess.get_modelmeta().producer_name == "kiln-tests"
    # Selecting outputs by name, in the caller's order.
    feeds = feeds_for("conv_net")
    probs, logits = sess.run(["probs", "logits"], feeds)
    want = ref.run(["probs", "logits"], feeds)
    np.testing.assert_allclose(probs, want[0], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(logits, want[1], rtol=1e-4, atol=1e-6)


def test_bytes_and_model_proto(model_dir):
    proto = two_inputs()
    feeds = feeds_for("two_inputs")
    want = onnxruntime.InferenceSession(proto.SerializeToString()).run(None, feeds)
    for source in (proto.SerializeToString(), proto):
        got = kiln.InferenceSession(source).run(None, feeds)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-6)
        np.testing.assert_array_equal(got[1], want[1])


def test_bad_inputs_raise_and_the_session_stays_usable(model_dir):
    sess = kiln.InferenceSession(str(model_dir / "two_inputs.onnx"))
    good = feeds_for("two_inputs")
    expected = sess.run(None, good)
    bad_feeds = [
        ({"x": good["x"].astype(np.float64), "idx": good["idx"]}, "float32"),       # dtype
        ({"x": good["x"][None], "idx": good["idx"]}, "rank"),                        # rank
        ({"x": good["x"][:, :3].copy(), "idx": good["idx"]}, "dimension 1"),         # fixed dim
        ({"x": good["x"]}, "idx"),                                                   # missing
        ({"x": good["x"], "idx": good["idx"], "nope": good["x"]}, "nope"),           # unknown
        ({"x": np.array([[object()] * 4]), "idx": good["idx"][:1]}, "x"),            # objects
    ]
    for feeds, needle in bad_feeds:
        with pytest.raises(kiln.InvalidArgument) as e:
            sess.run(None, feeds)
        assert needle in str(e.value)
        assert isinstance(e.value, ValueError) and isinstance(e.value, kiln.KilnError)
    with pytest.raises(kiln.InvalidArgument, match="no output 'nope'"):
        sess.run(["nope"], good)
    with pytest.raises(kiln.InvalidArgument):
        sess.run(None, [good["x"], good["idx"]])  # a list, not a dict
    # Still runs, and right.
    again = sess.run(None, good)
    for a, b in zip(again, expected):
        np.testing.assert_array_equal(a, b)


def test_non_contiguous_and_unaligned_inputs_are_copied(model_dir):
    sess = kiln.InferenceSession(str(model_dir / "conv_net.onnx"))
    x = RNG.standard_normal((2, 3, 32, 32)).astype(np.float32)
    strided = x[:, :, ::2, ::2]  # a view, not contiguous
    assert not strided.flags.c_contiguous
    want = sess.run(None, {"x": np.ascontiguousarray(strided)})
    got = sess.run(None, {"x": strided})
    np.testing.assert_array_equal(got[0], want[0])
    raw = np.empty(2 * 3 * 16 * 16 + 1, dtype=np.float32)[1:]  # 4 bytes past alignment
    unaligned = raw.reshape(2, 3, 16, 16)
    unaligned[...] = np.ascontiguousarray(strided)
    np.testing.assert_array_equal(sess.run(None, {"x": unaligned})[0], want[0])


def test_bad_models():
    with pytest.raises(kiln.InvalidModel):
        kiln.InferenceSession(b"this is not a model")
    with pytest.raises(kiln.NotFound):
        kiln.InferenceSession("/no/such/model.onnx")
    # A node of an op nobody implements.
    g = helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.nowhere")],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("com.nowhere", 1)])
    with pytest.raises(kiln.KilnError):
        kiln.InferenceSession(m.SerializeToString())


def test_four_threads_share_one_session(model_dir):
    # Four threads on one session, and two more on a second session sharing the thread pool.
    sess = kiln.InferenceSession(str(model_dir / "conv_net.onnx"))
    other = kiln.InferenceSession(str(model_dir / "two_inputs.onnx"))
    feeds = [feeds_for("conv_net", batch=1 + i % 3) for i in range(8)]
    expected = [sess.run(None, f) for f in feeds]
    other_feeds = [feeds_for("two_inputs", batch=1 + i) for i in range(4)]
    other_expected = [other.run(None, f) for f in other_feeds]
    errors = []

    def worker(k, session, feeds, expected):
        try:
            for i in range(40):
                j = (k + i) % len(feeds)
                got = session.run(None, feeds[j])
                for a, b in zip(got, expected[j]):
                    np.testing.assert_array_equal(a, b)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k, sess, feeds, expected)) for k in range(4)]
    threads += [threading.Thread(target=worker, args=(k, other, other_feeds, other_expected))
                for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_the_gil_is_released_while_a_model_runs(tmp_path):
    path = str(tmp_path / "chain.onnx")
    onnx.save(matmul_chain(), path)
    so = kiln.SessionOptions()
    so.intra_op_num_threads = 1
    sess = kiln.InferenceSession(path, so)
    x = {"x": RNG.standard_normal((768, 768)).astype(np.float32)}
    sess.run(None, x)
    span = {}
    ticks = []

    def long_run():
        span["start"] = time.perf_counter()
        sess.run(None, x)
        span["end"] = time.perf_counter()

    t = threading.Thread(target=long_run)
    t.start()
    while t.is_alive():
        ticks.append(time.perf_counter())
    t.join()
    start, end = span["start"], span["end"]
    inside = [s for s in ticks if start + 0.2 * (end - start) < s < end - 0.2 * (end - start)]
    # While the run holds no GIL, this thread keeps ticking through the middle of it.
    assert end - start > 0.01, "the model ran too fast to tell"
    assert len(inside) > 100, f"{len(inside)} ticks in the middle of a {end - start:.3f} s run"


def test_rss_stays_flat_over_10000_runs(model_dir):
    sess = kiln.InferenceSession(str(model_dir / "two_inputs.onnx"))
    feeds = feeds_for("two_inputs")

    def rss_kib():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024

    for _ in range(1000):
        sess.run(None, feeds)
    before = rss_kib()
    for _ in range(10000):
        sess.run(None, feeds)
    grown = rss_kib() - before
    assert grown < 1024, f"RSS grew by {grown} KiB over 10000 runs"


def test_optimize_save_and_reload(model_dir, tmp_path):
    src = str(model_dir / "conv_net.onnx")
    feeds = feeds_for("conv_net")
    want = onnxruntime.InferenceSession(src).run(None, feeds)
    optimized = kiln.optimize(src)
    assert optimized.report["nodes_after"] <= optimized.report["nodes_before"]
    assert sum(optimized.report["kernels"].values()) > 0
    # Conv + Relu and the rest became kiln's own operators, and the summary counts them.
    assert optimized.report["fusions"] and all(op.startswith("ai.kiln.") for op in optimized.report["fusions"])
    summary = kiln.Model.load(src).summary(batch=2)
    assert summary["parameters"] == 8 * 3 * 3 * 3 + 8 + 5 * 8 + 5
    assert summary["ops"] == {"Conv": 1, "Relu": 1, "GlobalAveragePool": 1, "Flatten": 1,
                              "Gemm": 1, "Softmax": 1}
    assert summary["flops"] >= 2 * 2 * 16 * 16 * 8 * 27  # at least the conv's multiply-adds
    out = str(tmp_path / "conv_net.opt.onnx")
    optimized.save(out)
    got = kiln.InferenceSession(out).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)
    # Portable: standard ONNX, which ONNX Runtime runs and onnx.checker accepts.
    portable = kiln.optimize(src, level=1, portable=True).to_onnx()
    onnx.checker.check_model(portable)
    got = onnxruntime.InferenceSession(portable.SerializeToString()).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)


def test_optimized_model_filepath_and_profiling(model_dir, tmp_path):
    so = kiln.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "saved.onnx")
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "trace")
    sess = kiln.InferenceSession(str(model_dir / "conv_net.onnx"), so)
    sess.run(None, feeds_for("conv_net"))
    assert os.path.getsize(so.optimized_model_filepath) > 0
    trace = sess.end_profiling()
    import json
    with open(trace) as f:
        events = json.load(f)
    assert any(e["cat"] == "Node" and e["dur"] >= 0 for e in events)
    assert any(e["name"] == "model_run" for e in events)


def test_compare_bench_and_profile(model_dir):
    src = str(model_dir / "conv_net.onnx")
    report = kiln.compare(src, kiln.optimize(src), per_layer=True)
    assert report["ok"] and len(report["outputs"]) == 2
    b = kiln.bench(src, iters=5, warmup=1, batch=2)
    assert 0 < b["min_ms"] <= b["p50_ms"] <= b["p99_ms"]
    p = kiln.profile(src, iters=2, warmup=1)
    assert p["nodes"] and p["nodes"][0]["ms"] >= p["nodes"][-1]["ms"]
    assert sum(r["count"] for r in p["by_op"]) == len(p["nodes"])


def test_python_m_kiln_runs_the_cli():
    r = subprocess.run([sys.executable, "-m", "kiln", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and "kiln" in r.stdout
    r = subprocess.run([sys.executable, "-m", "kiln"], capture_output=True, text=True)
    assert r.returncode == 0 and "optimize" in r.stdout and "bench" in r.stdout
    # The `kiln` command the package puts beside the venv's python; its exit code follows the
    # failure's kind (4: a file not found).
    command = os.path.join(os.path.dirname(sys.executable), "kiln")
    r = subprocess.run([command, "info", "/no/such/model.onnx"], capture_output=True, text=True)
    assert r.returncode == 4 and "no such file" in r.stderr


def test_optimize_a_torch_module():
    torch = pytest.importorskip("torch")  # Debian's python3-torch, where installed
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))
    model = kiln.optimize(m, example_inputs=torch.randn(2, 3, 16, 16))
    assert model.inputs[0]["shape"][0] == "batch"  # exported with a dynamic batch
    x = RNG.standard_normal((5, 3, 16, 16)).astype(np.float32)
    got = model.session().run(None, {model.inputs[0]["name"]: x})[0]
    with torch.no_grad():
        want = m(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


class _Reader:
    """ONNX Runtime's CalibrationDataReader protocol: get_next() until None."""

    def __init__(self, samples):
        self._it = iter(samples)

    def get_next(self):
        return next(self._it, None)


def test_quantize_from_dicts_and_a_reader(model_dir, tmp_path):
    """kiln.quantize on conv_net: the same model from feed dicts and from an ORT-style reader; its
    portable QDQ form loads in ONNX Runtime and agrees with kiln's fused form and the float model."""
    path = os.path.join(model_dir, "conv_net.onnx")
    calib = [{"x": RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(8)]
    held_out = [{"x": RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(3)]
    fused = kiln.quantize(path, calib, held_out=held_out)
    q = fused.report["quantization"]
    # The conv, and the Gemm, whose logits go on in float: quantized dynamically (kiln's form).
    assert q["quantized_nodes"] == 2 and len(q["dynamic_nodes"]) == 1 and q["measured_on_held_out"]
    assert q["recurrent_nodes"] == []  # no LSTM, GRU or RNN
    assert q["activations_in_float"] == 0 and q["activations_in_tables"] == 0  # a Relu, no SiLU
    assert len(q["layers"]) >= 2 and all(np.isfinite(e["sqnr_db"]) for e in q["layers"])
    assert {e["tensor"] for e in q["outputs"]} == {"logits", "probs"} and min(e["cosine"] for e in q["outputs"]) >= 0.99
    assert fused.report["quantization"]["removed_clamps"] == 1
    # The speed check timed the conv on its own, as its 8-bit kernel (taking the float image: 3
    # channels) and in float, then the Gemm as kiln's dynamic form.
    names = {n.op_type: n.name or n.output[0] for n in onnx.load(path).graph.node}
    assert [(s["node"], s["int8_ops"]) for s in q["speeds"]] == [
        (names["Conv"], "ai.kiln.QLinearConv"), (names["Gemm"], "ai.kiln.DynamicQuantMatMul")]
    assert all(min(s["int8_us"], s["float_us"]) > 0 for s in q["speeds"])
    portable = kiln.quantize(path, _Reader(calib), portable=True)
    assert portable.report["quantization"]["speeds"] == []  # another engine runs it
    qdq = os.path.join(tmp_path, "conv_net.qdq.onnx")
    portable.save(qdq)
    ops = {n.op_type for n in onnx.load(qdq).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv", "Gemm"} <= ops and "Relu" not in ops
    x = RNG.standard_normal((2, 3, 16, 16)).astype(np.float32)
    want = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(["logits"], {"x": x})[0]
    ort_q = onnxruntime.InferenceSession(qdq, providers=["CPUExecutionProvider"]).run(["logits"], {"x": x})[0]
    kiln_q = fused.session().run(["logits"], {"x": x})[0]
    scale = np.abs(want).max()
    assert np.abs(ort_q - want).max() < 0.1 * scale
    assert np.abs(kiln_q - ort_q).max() < 0.02 * scale


def test_quantize_with_a_metric_and_top1(model_dir):
    """kiln.quantize's accuracy budgets beyond the cosine: top-1 agreement and a metric function
    over both models' held-out outputs, measured, reported and held; a metric that raises or that
    nothing meets is an error naming it."""
    path = os.path.join(model_dir, "conv_net.onnx")
    calib = [{"x": RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(6)]
    held_out = [{"x": RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(4)]
    seen = []

    def max_abs_error(float_outputs, quantized_outputs):
        seen.append((len(float_outputs), [o.shape for o in float_outputs[0]]))
        return -max(float(np.abs(a - b).max()) for fa, qa in zip(float_outputs, quantized_outputs) for a, b in zip(fa, qa))

    q = kiln.quantize(path, calib, held_out=held_out, min_top1=0.5, metric=max_abs_error, min_metric=-1e9)
    r = q.report["quantization"]
    assert seen and seen[0][0] == 4 and r["metric"] <= 0 and 0.5 <= r["top1"] <= 1
    with pytest.raises(kiln.KilnError, match="metric"):
        kiln.quantize(path, calib, held_out=held_out, metric=lambda f, q: 0.0, min_metric=1.0, max_fallbacks=50)
    with pytest.raises(kiln.KilnError, match="metric failed"):
        kiln.quantize(path, calib, held_out=held_out, metric=lambda f, q: 1 / 0, min_metric=0.5)


def test_quantize_bad_calibration_data(model_dir):
    path = os.path.join(model_dir, "conv_net.onnx")
    with pytest.raises(kiln.InvalidArgument, match="lacks input"):
        kiln.quantize(path, [{"y": np.zeros((1, 3, 16, 16), np.float32)}])
    with pytest.raises(kiln.InvalidArgument, match="no calibration samples"):
        kiln.quantize(path, [])
    with pytest.warns(UserWarning, match="generated samples"):
        kiln.quantize(path, 2)


def test_quantize_dynamic_runs_in_onnxruntime(model_dir, tmp_path):
    """kiln.quantize(dynamic=True) needs no samples; its portable form loads in ONNX Runtime and
    both agree with the float model. kiln's form quantizes the rows to 7 bits where the CPU lacks
    VNNI (row_bits 7), unless weight_bits=8."""
    path = os.path.join(model_dir, "two_inputs.onnx")
    feeds = feeds_for("two_inputs")
    want = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(["y"], feeds)[0]
    fused = kiln.quantize(path, dynamic=True)
    assert fused.report["quantization"]["quantized_nodes"] == 1
    portable = kiln.quantize(path, dynamic=True, portable=True)
    out = os.path.join(tmp_path, "dyn.onnx")
    portable.save(out)
    got_ort = onnxruntime.InferenceSession(out, providers=["CPUExecutionProvider"]).run(["y"], feeds)[0]
    got_kiln = fused.session().run(["y"], feeds)[0]
    tol = 0.05 * np.abs(want).max()
    assert np.abs(got_ort - want).max() < tol and np.abs(got_kiln - want).max() < tol

    def row_bits(model):
        saved = os.path.join(tmp_path, "rows.onnx")
        model.save(saved)
        return [a.i for n in onnx.load(saved).graph.node if n.op_type == "DynamicQuantMatMul"
                for a in n.attribute if a.name == "row_bits"]
    assert row_bits(fused) == ([] if kiln._kiln.has_vnni() else [7])
    assert row_bits(kiln.quantize(path, dynamic=True, weight_bits=8)) == []
    with pytest.raises(kiln.InvalidArgument, match="calibration_data"):
        kiln.quantize(path)


def test_quantize_weights_only_and_16bit_run_in_onnxruntime(tmp_path):
    """precision="fp16" and weight_only=True (4 and 8 bits) keep float activations: the saved
    models are smaller, load in ONNX Runtime, and ONNX Runtime and kiln agree with the float
    model on them."""
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 48])],
        [_init("w", RNG.standard_normal((64, 48)).astype(np.float32))])
    path = os.path.join(tmp_path, "mlp.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    x = RNG.standard_normal((3, 64)).astype(np.float32)
    want = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for kwargs, tol, op in [({"precision": "fp16"}, 1e-3, "Cast"), ({"weight_only": True, "weight_bits": 8}, 2e-2, "DequantizeLinear"),
                            ({"weight_only": True, "weight_bits": 4, "block_size": 16}, 0.2, "MatMulNBits")]:
        m = kiln.quantize(path, [{"x": x}], **kwargs)
        q = m.report["quantization"]
        assert q["weight_bytes_after"] < q["weight_bytes_before"], kwargs
        out = os.path.join(tmp_path, "q.onnx")
        m.save(out)
        assert op in {n.op_type for n in onnx.load(out).graph.node}, kwargs
        assert os.path.getsize(out) < os.path.getsize(path), kwargs
        got_ort = onnxruntime.InferenceSession(out, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        got_kiln = kiln.InferenceSession(out).run(None, {"x": x})[0]
        scale = np.abs(want).max()
        assert np.abs(got_ort - want).max() < tol * scale, kwargs
        assert np.abs(got_kiln - want).max() < tol * scale, kwargs
        if op != "DequantizeLinear":  # (ONNX Runtime runs a weight-only DQ -> MatMul on 8-bit activations)
            assert np.abs(got_kiln - got_ort).max() < 1e-4 * scale, kwargs
