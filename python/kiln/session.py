"""kiln.InferenceSession: ONNX Runtime's session API, run by kiln.

A deployment script written against ``onnxruntime`` runs unchanged with ``import kiln as ort``:
the same constructor, ``run(output_names, input_feed)``, ``get_inputs()`` / ``get_outputs()``,
``get_modelmeta()``, ``SessionOptions`` and ``GraphOptimizationLevel``. Where ONNX Runtime has an
option kiln has no use for (execution providers, inter-op threads, memory patterns), it is
accepted and has no effect.
"""

import enum
import json
import os
import threading
import time

import numpy as np

from kiln import _kiln
from kiln.errors import InvalidArgument


class GraphOptimizationLevel(enum.IntEnum):
    """ONNX Runtime's levels; kiln's -O level for each is in ``kiln_level``."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99

    @property
    def kiln_level(self):
        # BASIC keeps standard ONNX ops (kiln -O1), EXTENDED fuses into kiln's (-O2), LAYOUT and
        # ALL also change layouts (-O3).
        return min(int(self), 3)


class ExecutionMode(enum.IntEnum):
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class SessionOptions:
    """ONNX Runtime's SessionOptions. kiln uses intra_op_num_threads, graph_optimization_level,
    optimized_model_filepath, enable_profiling, profile_file_prefix and enable_cpu_mem_arena;
    the others are kept but change nothing."""

    def __init__(self):
        self.intra_op_num_threads = 0  # 0: one thread a core
        self.inter_op_num_threads = 0
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.optimized_model_filepath = ""
        self.enable_profiling = False
        self.profile_file_prefix = "kiln_profile"
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.use_deterministic_compute = False
        self._config = {}

    def add_session_config_entry(self, key, value):
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key):
        return self._config[key]

    def add_free_dimension_override_by_name(self, name, value):
        self._config.setdefault("kiln.fix_dims", {})[name] = int(value)


class RunOptions:
    """ONNX Runtime's RunOptions: accepted, no effect."""

    def __init__(self):
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.run_tag = ""
        self.terminate = False


class NodeArg:
    """A graph input or output: ``name``, ``type`` ('tensor(float)') and ``shape`` (ints, with
    dynamic dims as their symbolic name, or None when unnamed)."""

    def __init__(self, name, type_, shape, dtype):
        self.name = name
        self.type = type_
        self.shape = shape if shape is not None else []
        self._dtype = dtype

    def __repr__(self):
        return f"NodeArg(name='{self.name}', type='{self.type}', shape={self.shape})"


class ModelMetadata:
    def __init__(self, model):
        self.producer_name = model.producer_name
        self.graph_name = model.graph_name
        self.domain = model.domain
        self.description = model.description
        self.graph_description = ""
        self.version = model.model_version
        self.custom_metadata_map = dict(model.metadata)


_PROVIDER = "KilnExecutionProvider"


def _load_model(path_or_bytes):
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return _kiln.Model.load_bytes(bytes(path_or_bytes))
    if isinstance(path_or_bytes, (str, os.PathLike)):
        return _kiln.Model.load(os.fspath(path_or_bytes))
    if hasattr(path_or_bytes, "SerializeToString"):  # an onnx.ModelProto
        return _kiln.Model.load_bytes(path_or_bytes.SerializeToString())
    raise InvalidArgument(
        f"a model is a path, bytes or an onnx.ModelProto, got {type(path_or_bytes).__name__}")


class InferenceSession:
    """Loads a model, optimizes it (``sess_options.graph_optimization_level``) and runs it.

    ``run`` may be called from several threads at once: each call is correct, and they take
    turns on the session's threads (the GIL is released while a model runs)."""

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None,
                 **kwargs):
        self._options = sess_options or SessionOptions()
        o = self._options
        # A model handed in is the caller's: optimized here on a copy (which shares its weights).
        if isinstance(path_or_bytes, _kiln.Model):
            model = path_or_bytes.copy()
        else:
            model = _load_model(path_or_bytes)
        level = GraphOptimizationLevel(int(o.graph_optimization_level)).kiln_level
        fix = o._config.get("kiln.fix_dims", {})
        if not model.optimized and (level > 0 or fix):
            model.optimize(level=level, fixed_dims=fix)
        if o.optimized_model_filepath:
            model.save(os.fspath(o.optimized_model_filepath))
        self._model = model
        self._session = _kiln.Session.create(model, threads=int(o.intra_op_num_threads or 0),
                                             level=0, arena=bool(o.enable_cpu_mem_arena))
        self._inputs = [NodeArg(*t) for t in self._session.inputs]
        self._outputs = [NodeArg(*t) for t in self._session.outputs]
        self._input_index = {a.name: i for i, a in enumerate(self._inputs)}
        self._output_index = {a.name: i for i, a in enumerate(self._outputs)}
        self._profiling = bool(o.enable_profiling)
        self._trace = []  # Chrome trace events of the profiled runs
        self._trace_lock = threading.Lock()
        self._t0 = time.perf_counter()

    # -- what the model takes and gives
    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)

    def get_overridable_initializers(self):
        return []

    def get_modelmeta(self):
        return ModelMetadata(self._model)

    def get_providers(self):
        return [_PROVIDER]

    def get_provider_options(self):
        return {_PROVIDER: {}}

    def get_session_options(self):
        return self._options

    def set_providers(self, providers=None, provider_options=None):
        pass

    def disable_fallback(self):
        pass

    def enable_fallback(self):
        pass

    # -- running
    def _feeds(self, input_feed):
        if not isinstance(input_feed, dict):
            raise InvalidArgument("input_feed must be a dict of input name -> array")
        arrays = [None] * len(self._inputs)
        for name, value in input_feed.items():
            i = self._input_index.get(name)
            if i is None:
                known = ", ".join(a.name for a in self._inputs)
                raise InvalidArgument(f"the model has no input '{name}' (inputs: {known})")
            arrays[i] = value
        missing = [self._inputs[i].name for i, a in enumerate(arrays) if a is None]
        if missing:
            raise InvalidArgument("missing input(s): " + ", ".join(missing))
        for i, a in enumerate(arrays):
            if not isinstance(a, (np.ndarray, list)):
                arrays[i] = np.asarray(a)
        return arrays

    def _select(self, outputs, output_names):
        if output_names is None or len(output_names) == 0:
            return outputs
        picked = []
        for name in output_names:
            i = self._output_index.get(name)
            if i is None:
                known = ", ".join(a.name for a in self._outputs)
                raise InvalidArgument(f"the model has no output '{name}' (outputs: {known})")
            picked.append(outputs[i])
        return picked

    def run(self, output_names, input_feed, run_options=None):
        """Outputs named by ``output_names`` (all when None), as NumPy arrays."""
        if output_names is not None:
            self._select([None] * len(self._outputs), output_names)  # names checked first
        arrays = self._feeds(input_feed)
        if not self._profiling:
            return self._select(self._session.run(arrays), output_names)
        start_us = (time.perf_counter() - self._t0) * 1e6
        outputs, nodes, wall_us = self._session.run_profiled(arrays)
        self._record(start_us, nodes, wall_us)
        return self._select(outputs, output_names)

    # -- profiling: a Chrome trace, as ONNX Runtime writes it
    def _record(self, start_us, nodes, wall_us):
        events = [{"cat": "Session", "name": "model_run", "ph": "X", "pid": os.getpid(),
                   "tid": threading.get_ident() % 1000000, "ts": start_us, "dur": wall_us}]
        for n in nodes:
            events.append({"cat": "Node", "name": n["node"], "ph": "X", "pid": os.getpid(),
                           "tid": threading.get_ident() % 1000000,
                           "ts": start_us + n["start_us"], "dur": n["dur_us"],
                           "args": {"op_name": n["op_type"], "input_shapes": n["input_shapes"],
                                    "flops": n["flops"]}})
        with self._trace_lock:
            self._trace.extend(events)

    def end_profiling(self):
        """Writes the trace of the profiled runs and returns its path ("" when not profiling)."""
        if not self._profiling:
            return ""
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
        path = f"{self._options.profile_file_prefix}_{stamp}.json"
        with self._trace_lock:
            events, self._trace = self._trace, []
        with open(path, "w") as f:
            json.dump(events, f)
        self._profiling = False
        return path

    def run_with_iobinding(self, *args, **kwargs):
        raise NotImplementedError("kiln.InferenceSession has no IO binding yet")

    def io_binding(self):
        raise NotImplementedError("kiln.InferenceSession has no IO binding yet")
