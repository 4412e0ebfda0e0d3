"""kiln's exceptions: one class per status code of the C++ core, all subclasses of KilnError.

Each also derives from the built-in exception Python code would catch for that kind of failure
(InvalidArgument is a ValueError, NotFound a FileNotFoundError, ...), so that code written
against other libraries keeps working.
"""


class KilnError(Exception):
    """Any failure kiln reports."""


class Fail(KilnError, RuntimeError):
    """A failure the core did not classify further (ONNX Runtime's FAIL / RUNTIME_EXCEPTION)."""


class InvalidArgument(KilnError, ValueError):
    """The caller's input: a wrong dtype, rank, shape or name, or a bad option."""


class InvalidModel(KilnError, ValueError):
    """The model: unparsable, inconsistent, or failing its checks."""


class NotFound(KilnError, FileNotFoundError):
    """A file that does not exist."""


class NotImplemented(KilnError, NotImplementedError):  # noqa: A001 - the status code's name
    """Valid, but kiln has no support for it."""


class OutOfRange(KilnError, IndexError):
    """An index or size beyond what the data or the format allows."""


class ResourceExhausted(KilnError, MemoryError):
    """Memory or another limit."""


class Internal(KilnError, RuntimeError):
    """A bug in kiln: please report it."""


_BY_CODE = {
    "Failed": Fail,
    "InvalidArgument": InvalidArgument,
    "InvalidModel": InvalidModel,
    "NotFound": NotFound,
    "NotImplemented": NotImplemented,
    "OutOfRange": OutOfRange,
    "ResourceExhausted": ResourceExhausted,
    "Internal": Internal,
}


def error_class(code_name):
    """The class the C++ core raises for a status code name (kiln::status_code_name)."""
    return _BY_CODE.get(code_name, Fail)
