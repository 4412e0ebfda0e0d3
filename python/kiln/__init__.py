"""kiln: ONNX models in, faster models out.

    import kiln
    kiln.optimize("model.onnx", tune=True).save("model.opt.onnx")   # the one-line optimize.py
    kiln.quantize("model.onnx", samples).save("model.int8.onnx")      # 8 bits, calibrated

    import kiln as ort                                                # a deployment script
    sess = ort.InferenceSession("model.opt.onnx")                     # written for ONNX Runtime
    outputs = sess.run(None, {"input": x})
"""

from kiln._kiln import __version__
from kiln.api import Model, bench, bench_inputs, compare, optimize, profile, quantize
from kiln.errors import (Fail, Internal, InvalidArgument, InvalidModel, KilnError, NotFound,
                         NotImplemented, OutOfRange, ResourceExhausted)
from kiln.session import (ExecutionMode, GraphOptimizationLevel, InferenceSession, ModelMetadata,
                          NodeArg, RunOptions, SessionOptions)


def get_available_providers():
    """As onnxruntime.get_available_providers(): kiln runs on the CPU."""
    return ["KilnExecutionProvider", "CPUExecutionProvider"]


def get_device():
    return "CPU"


__all__ = [
    "__version__", "Model", "bench", "bench_inputs", "compare", "optimize", "profile", "quantize", "KilnError",
    "Fail",
    "Internal", "InvalidArgument", "InvalidModel", "NotFound", "NotImplemented", "OutOfRange",
    "ResourceExhausted", "ExecutionMode", "GraphOptimizationLevel", "InferenceSession",
    "ModelMetadata", "NodeArg", "RunOptions", "SessionOptions", "get_available_providers",
    "get_device",
]
