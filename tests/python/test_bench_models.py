"""The six benchmark models through one deployment script, with `ort` bound to ONNX Runtime and
then to kiln (`import kiln as ort`): the same outputs, rtol 1e-4 (scripts/check_python_ort.py).

The models come from KILN_TEST_MODELS (scripts/run_tests.sh exports them there with
../shared/models/export_models.py) or ~/.cache/kiln-bench/models (../shared/bench/setup.sh).
"""

import importlib.util
import os

import numpy as np
import onnxruntime
import pytest

import kiln

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "check_python_ort", os.path.join(HERE, "..", "..", "scripts", "check_python_ort.py"))
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)

MODELS_DIR = os.environ.get("KILN_TEST_MODELS") or os.path.join(
    os.environ.get("KILN_BENCH_HOME", os.path.expanduser("~/.cache/kiln-bench")), "models")


@pytest.mark.parametrize("name", check.SIX)
def test_same_outputs_under_onnxruntime_and_kiln(name):
    path = os.path.join(MODELS_DIR, name + ".onnx")
    if not os.path.exists(path):
        pytest.skip(f"{path} not exported (scripts/run_tests.sh exports the six models)")
    names_o, want = check.infer(onnxruntime, path, batch=1, seq=128)
    names_k, got = check.infer(kiln, path, batch=1, seq=128)
    assert names_o == names_k
    for name_, w, g in zip(names_o, want, got):
        assert g.dtype == w.dtype and g.shape == w.shape, name_
        atol = 1e-4 * float(np.max(np.abs(w))) if w.size else 0.0
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=atol, err_msg=f"{name} {name_}")
