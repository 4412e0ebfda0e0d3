"""kiln.optimize, kiln.quantize, kiln.Model, kiln.compare, kiln.profile and kiln.bench."""

import json
import os
import tempfile
import time
import warnings

import numpy as np

from kiln import _kiln
from kiln.errors import InvalidArgument
from kiln.session import _load_model


class Model:
    """A model kiln optimized (or loaded): ``save(path)``, ``to_onnx()``, ``inputs``, ``outputs``,
    ``metadata`` and ``report`` (what optimize, tune and quantize did)."""

    def __init__(self, core, report=None):
        self._core = core
        self.report = report or {}

    @classmethod
    def load(cls, path_or_bytes):
        return cls(_load_model(path_or_bytes))

    def save(self, path, external_data="auto", location=""):
        """Writes the model; weights go to an external data file beside it when the original
        had one or the model passes 2 GiB (``external_data='always'|'never'`` to choose).
        Returns ``path``."""
        self._core.save(os.fspath(path), external_data=external_data, location=location)
        return path

    def to_bytes(self):
        return self._core.to_bytes()

    def to_onnx(self):
        """The model as an ``onnx.ModelProto``."""
        import onnx

        return onnx.load_from_string(self._core.to_bytes())

    @property
    def inputs(self):
        return [_io_dict(t) for t in self._core.inputs]

    @property
    def outputs(self):
        return [_io_dict(t) for t in self._core.outputs]

    @property
    def metadata(self):
        return dict(self._core.metadata)

    def summary(self, batch=1, seq=128):
        """What ``kiln info`` prints: nodes, operator counts, parameters, and the FLOPs of a run
        with dynamic dims bound as the bench rule binds them (None when shapes do not infer)."""
        return self._core.summary(batch=batch, seq=seq)

    def session(self, sess_options=None):
        """An InferenceSession running this model as it is."""
        from kiln.session import InferenceSession

        return InferenceSession(self._core, sess_options)

    def __repr__(self):
        ins = ", ".join(f"{i['name']}: {i['type']}{i['shape']}" for i in self.inputs)
        return f"kiln.Model({ins})"


def _io_dict(t):
    name, type_, shape, _ = t
    return {"name": name, "type": type_, "shape": shape}


def _export_torch(module, example_inputs, dynamic_batch, opset):
    """torch.onnx.export to a temporary file (the graph-capture step), batch dims dynamic."""
    import torch

    if example_inputs is None:
        raise InvalidArgument("a torch.nn.Module needs example_inputs= (a tensor or a tuple)")
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    names = [f"input_{i}" for i in range(len(args))]
    with torch.no_grad():
        outs = module(*args)
    n_out = len(outs) if isinstance(outs, (tuple, list)) else 1
    out_names = [f"output_{i}" for i in range(n_out)]
    axes = {n: {0: "batch"} for n in names + out_names} if dynamic_batch else None
    path = tempfile.NamedTemporaryFile(suffix=".onnx", delete=False).name
    try:
        module.eval()
        torch.onnx.export(module, args, path, input_names=names, output_names=out_names,
                          dynamic_axes=axes, opset_version=opset, do_constant_folding=True)
        return _kiln.Model.load(path)
    finally:
        os.unlink(path)


def _as_core_model(model, example_inputs=None, dynamic_batch=True, opset=17):
    if isinstance(model, Model):
        return model._core
    if isinstance(model, _kiln.Model):
        return model
    if type(model).__module__.startswith("torch") or hasattr(model, "state_dict"):
        return _export_torch(model, example_inputs, dynamic_batch, opset)
    return _load_model(model)


def _shapes_list(input_shapes):
    if not input_shapes:
        return []
    return [f"{name}={','.join(str(int(d)) for d in dims)}" for name, dims in input_shapes.items()]


def _input_list(core, inputs, batch=1, seq=128, input_shapes=None):
    """One array per model input: ``inputs`` as a dict (by name) or list, or the bench rule."""
    if inputs is None:
        return _kiln.bench_inputs(core, batch=batch, seq=seq, shapes=_shapes_list(input_shapes))
    names = [t[0] for t in core.inputs]
    if isinstance(inputs, dict):
        missing = [n for n in names if n not in inputs]
        if missing:
            raise InvalidArgument("missing input(s): " + ", ".join(missing))
        return [inputs[n] for n in names]
    return list(inputs)


def bench_inputs(model, batch=1, seq=128, input_shapes=None):
    """The benchmark rule's inputs (what ``kiln bench`` and ../shared/bench's scripts feed) for
    ``model`` (a path, bytes, ModelProto or kiln.Model): {input name: array}. Dynamic dims take
    ``batch`` (first) and ``seq`` (others) unless ``input_shapes`` ({name: shape}) gives them."""
    core = _as_core_model(model)
    arrays = _input_list(core, None, batch, seq, input_shapes)
    return {t[0]: a for t, a in zip(core.inputs, arrays)}


def optimize(model, *, level=3, portable=False, tune=False, threads=None, input_shapes=None,
             disable=(), fix_dims=None, example_inputs=None, dynamic_batch=True,
             tuning_cache=None):
    """Optimizes a model as ``kiln optimize`` does and returns a kiln.Model.

    ``model``: a path, bytes, an onnx.ModelProto, or a torch.nn.Module with ``example_inputs``
    (exported with torch.onnx.export, the first dim of every input and output dynamic unless
    ``dynamic_batch=False``). ``level`` 0-3 as ``-O``; ``portable`` keeps to standard ONNX ops;
    ``disable`` names passes to skip; ``fix_dims`` ({'batch': 1}) fixes symbolic dims. With
    ``tune``, every backend that can run a node is timed on inputs of ``input_shapes``
    ({name: shape}; dynamic dims else batch 1, seq 128) and the fastest is recorded in the model.
    """
    core = _as_core_model(model, example_inputs, dynamic_batch)
    report = {"nodes_before": None, "nodes_after": None, "passes": [], "tuning": None}
    if level > 0 or fix_dims:
        r = core.optimize(level=level, portable=portable, disable=list(disable),
                          fixed_dims=dict(fix_dims or {}))
        report.update(r)
    if tune:
        inputs = _input_list(core, None, input_shapes=input_shapes)
        report["tuning"] = core.tune(inputs, threads=int(threads or 0),
                                     cache_path=os.fspath(tuning_cache or ""))
    report["kernels"] = _kernels_by_backend(core, threads)
    # kiln's own operators in the result are what the fusion and layout passes made.
    report["fusions"] = {op: n for op, n in core.summary()["ops"].items() if op.startswith("ai.kiln.")}
    return Model(core, report)


def _calibration_next(core, data, input_shapes):
    """A function returning the next sample (arrays in input order) or None, from ``data``: an
    iterable of feed dicts or lists, an object with get_next() (ONNX Runtime's
    CalibrationDataReader), or an int N (N generated samples, with a warning)."""
    names = [t[0] for t in core.inputs]

    def as_list(sample):
        if sample is None:
            return None
        if isinstance(sample, dict):
            missing = [n for n in names if n not in sample]
            if missing:
                raise InvalidArgument("a calibration sample lacks input(s): " + ", ".join(missing))
            return [sample[n] for n in names]
        return list(sample) if isinstance(sample, (list, tuple)) else [sample]

    if isinstance(data, int):
        warnings.warn("kiln.quantize: calibrating on generated samples; the ranges are not those of real data",
                      stacklevel=3)
        rng = np.random.default_rng(12345)
        base = _input_list(core, None, input_shapes=input_shapes)
        samples = iter([[rng.standard_normal(a.shape).astype(a.dtype) if a.dtype.kind == "f" else a for a in base]
                        for _ in range(data)])
        return lambda: next(samples, None)
    if hasattr(data, "get_next"):
        return lambda: as_list(data.get_next())
    it = iter(data)
    return lambda: as_list(next(it, None))


def quantize(model, calibration_data=None, *, held_out=None, dynamic=False, precision="int8", weight_only=False,
             block_size=32, method="auto",
             percentile=99.999,
             per_channel=True, signed_activations=False, keep_float=(), min_cosine=0.99, max_fallbacks=16,
             weight_bits="auto", portable=False, input_shapes=None, example_inputs=None, dynamic_batch=True,
             hold_out_every=4, min_top1=0.0, metric=None, min_metric=0.0, check_speed=True):
    """Static post-training quantization, as ``kiln quantize``: returns a kiln.Model whose convs,
    matrix products and the ops between them run in 8 bits.

    ``model``: a path, bytes, ModelProto, kiln.Model or torch.nn.Module (with ``example_inputs``).
    ``calibration_data``: an iterable of feed dicts ({input name: array}) or lists in input order,
    an ONNX Runtime CalibrationDataReader (anything with get_next()), or an int N to calibrate on
    N generated samples (a warning: the ranges are then not those of real data); none with
    ``dynamic``, which quantizes MatMul/Gemm weights and their activations at each run instead
    (ONNX Runtime's quantize_dynamic form). ``method``:
    "minmax", "percentile", "entropy", "mse" or "auto" (each, keeping the one whose outputs are
    nearest the float model's on the held-out samples); ``per_channel`` weight scales; int8 symmetric
    activations with ``signed_activations`` (else uint8 with a zero point); ``keep_float`` names
    nodes left in float. ``weight_bits`` 8, 7 (a u8 x s8 pair sum then fits 16 bits: the AVX2
    kernels' faster vpmaddubsw route) or "auto" (7 where this CPU lacks VNNI, static quantization
    only: its accuracy guard measures the cost, and where 7 bits miss the budget even after its
    fallbacks the weights take 8, report["quantization"]["seven_bit_weights_missed"] saying which
    budget; dynamic keeps 8-bit weights and, where this CPU
    lacks VNNI, quantizes the activations' rows to 7 bits, which the same route multiplies).
    The accuracy guard: each output must keep a cosine of at least
    ``min_cosine`` to the float model's, and so must the mean of its features' (outputs of rank 3
    or more: each feature along their smallest axis alike, a detector's boxes and class scores), on
    ``held_out`` (samples as ``calibration_data``; default
    every ``hold_out_every``-th calibration sample, held back from calibrating, when there are at
    least twice that many; else the calibration samples), nodes going back to float, first the one
    that alone in float brings the outputs nearest the budget, up to
    ``max_fallbacks``; ``min_cosine=0`` turns it off. ``min_top1``: also the fraction of rows
    (each output's last axis) whose argmax stays the float model's; ``metric(float_outputs,
    quantized_outputs)`` (lists over the held-out samples of lists of output arrays) returning a
    number that must reach ``min_metric``: the guard holds those budgets the same way. Before the
    guard, ``check_speed`` times each 8-bit node on its own against float and keeps in float those
    faster there, conversions paid (where the model is then faster as a whole).
    ``report["quantization"]`` has each quantized tensor's SQNR and cosine ("layers"), the
    outputs', what stayed float and why, the speed check's times ("speeds"), the LSTM, GRU
    and RNN nodes whose weights went to 8 bits ("recurrent_nodes"), and how many convs apply
    their activation in float before the 8-bit output and how many through a table of their
    8-bit codes, as accurate there ("activations_in_float", "activations_in_tables"). The result is
    optimized into kiln's fused 8-bit form unless ``portable``, which keeps the standard QDQ model
    ONNX Runtime, TensorRT and OpenVINO load.

    ``precision="fp16"`` or ``"bf16"`` stores the float weights in 16 bits instead (half the
    size, float compute, no calibration; samples given measure the outputs against the budget);
    the model stays portable. ``weight_only=True`` quantizes only the MatMuls' weights, to
    ``weight_bits`` 8 (int8 per column, standard QDQ) or 4 (ONNX Runtime's MatMulNBits, a scale
    per ``block_size`` values), activations float, likewise portable.
    """
    core = _as_core_model(model, example_inputs, dynamic_batch)
    core = core.copy() if isinstance(model, (Model, _kiln.Model)) else core
    held = None if held_out is None else _calibration_next(core, held_out, input_shapes)
    weights16 = precision in ("fp16", "bf16") or bool(weight_only)
    if weight_only and str(weight_bits) not in ("4", "8", "auto"):
        raise InvalidArgument("weight_only takes weight_bits 4 or 8")
    if calibration_data is None and not dynamic and not weights16:
        raise InvalidArgument("kiln.quantize needs calibration_data (or dynamic=True, or precision='fp16')")
    samples = _calibration_next(core, calibration_data if calibration_data is not None else [], input_shapes)
    if weight_bits not in ("auto", 4, 7, 8, "4", "7", "8") or (str(weight_bits) == "4" and not weight_only):
        raise InvalidArgument("weight_bits must be 8, 7 or 'auto' (4 with weight_only)")
    weight_only_bits = (4 if str(weight_bits) == "4" else 8) if weight_only else 0
    report = core.quantize(samples, held_out=held, dynamic=bool(dynamic), portable=bool(portable),
                           weight_bits=str(weight_bits), method=method,
                           percentile=float(percentile), per_channel=bool(per_channel),
                           signed_activations=bool(signed_activations), keep_float=list(keep_float),
                           min_cosine=float(min_cosine), max_fallbacks=int(max_fallbacks),
                           precision=str(precision), weight_only_bits=weight_only_bits, block_size=int(block_size),
                           hold_out_every=int(hold_out_every), min_top1=float(min_top1), metric=metric,
                           min_metric=float(min_metric), check_speed=bool(check_speed))
    if not portable and not weights16:
        core.optimize()
    return Model(core, {"quantization": report})


def _kernels_by_backend(core, threads):
    s = _kiln.Session.create(core, threads=int(threads or 0), level=0)
    counts = {}
    for _, backend in s.node_backends():
        counts[backend] = counts.get(backend, 0) + 1
    return counts


def compare(a, b, inputs=None, per_layer=False, rtol=1e-3, atol=1e-4, threads=None):
    """Runs models ``a`` and ``b`` (paths, bytes, ModelProtos or kiln.Models) as they are on the
    same inputs (a dict or list; None: the bench rule) and returns per-output errors, and with
    ``per_layer`` the first intermediate tensor that diverges."""
    ca, cb = _as_core_model(a), _as_core_model(b)
    return _kiln.compare(ca, cb, _input_list(ca, inputs), rtol=rtol, atol=atol,
                         per_layer=per_layer, threads=int(threads or 0))


def _percentile(sorted_ms, q):
    return sorted_ms[min(len(sorted_ms) - 1, int(q / 100 * len(sorted_ms)))]


def bench(model, *, iters=50, warmup=5, threads=None, batch=1, seq=128, input_shapes=None,
          level=3, inputs=None):
    """Latency as ``kiln bench`` measures it: the bench rule's inputs, ``warmup`` runs, then
    ``iters`` timed runs. Returns p50/mean/p99/min in milliseconds and the load time."""
    t0 = time.perf_counter()
    core = _as_core_model(model)
    s = _kiln.Session.create(core, threads=int(threads or 0), level=level)
    load_ms = (time.perf_counter() - t0) * 1e3
    arrays = _input_list(core, inputs, batch, seq, input_shapes)
    for _ in range(warmup):
        s.run(arrays)
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        s.run(arrays)
        times.append((time.perf_counter() - t) * 1e3)
    ordered = sorted(times)
    return {"engine": "kiln", "threads": s.threads, "batch": batch, "seq": seq,
            "load_ms": round(load_ms, 1), "p50_ms": round(_percentile(ordered, 50), 3),
            "mean_ms": round(sum(times) / len(times), 3), "p99_ms": round(_percentile(ordered, 99), 3),
            "min_ms": round(ordered[0], 3), "iters": iters}


def profile(model, *, iters=10, warmup=3, threads=None, batch=1, seq=128, input_shapes=None,
            level=3, inputs=None, trace=None):
    """Time per node, as ``kiln profile`` measures it: rows of node, op, mean ms and GFLOP/s
    (sorted by time), the mean wall time, and with ``trace`` a Chrome trace of the last run."""
    core = _as_core_model(model)
    s = _kiln.Session.create(core, threads=int(threads or 0), level=level)
    arrays = _input_list(core, inputs, batch, seq, input_shapes)
    for _ in range(warmup):
        s.run(arrays)
    totals, walls, last = {}, [], None
    for _ in range(iters):
        _, nodes, wall_us = s.run_profiled(arrays)
        walls.append(wall_us)
        last = nodes
        for n in nodes:
            row = totals.setdefault(n["node"], {"node": n["node"], "op_type": n["op_type"],
                                                "us": 0.0, "flops": n["flops"]})
            row["us"] += n["dur_us"]
    rows = []
    for row in totals.values():
        ms = row["us"] / iters / 1e3
        gflops = row["flops"] / (ms * 1e6) if row["flops"] > 0 and ms > 0 else None
        rows.append({"node": row["node"], "op_type": row["op_type"], "ms": ms, "gflops": gflops})
    rows.sort(key=lambda r: -r["ms"])
    by_op = {}
    for r in rows:
        op = by_op.setdefault(r["op_type"], {"op_type": r["op_type"], "count": 0, "ms": 0.0})
        op["count"] += 1
        op["ms"] += r["ms"]
    result = {"nodes": rows, "by_op": sorted(by_op.values(), key=lambda r: -r["ms"]),
              "wall_ms": sum(walls) / len(walls) / 1e3, "threads": s.threads}
    if trace:
        events = [{"cat": "Node", "name": n["node"], "ph": "X", "pid": os.getpid(), "tid": 0,
                   "ts": n["start_us"], "dur": n["dur_us"], "args": {"op_name": n["op_type"]}}
                  for n in last]
        with open(trace, "w") as f:
            json.dump(events, f)
        result["trace"] = os.fspath(trace)
    return result
