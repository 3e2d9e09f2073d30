"""Errors raised while translating a frame."""
from typing import Any, Callable, Dict, List, NoReturn, Optional

from torch.fx.experimental.symbolic_shapes import ConstraintViolationError


class Unsupported(Exception):
    """The translator met something it cannot put in a graph. `msg` is written for users."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self.msg = msg
        self.user_stack: List["UserFrame"] = []
        # index of the frame's own instruction that was running (where a graph break would go)
        self.break_index: Optional[int] = None
        # no graph break can help: the whole frame runs as written
        self.whole_frame = False
        # raised in a trace that had made varying int or float locals symbolic (see ConvertFrame.trace_with_break)
        self.symbolic_scalars = False


class UserFrame:
    """One line of the user's code, for reports: file:line, function, source text."""

    __slots__ = ("filename", "lineno", "name", "line")

    def __init__(self, filename: str, lineno: Optional[int], name: str, line: str) -> None:
        self.filename, self.lineno, self.name, self.line = filename, lineno, name, line

    def __str__(self) -> str:
        text = f'  File "{self.filename}", line {self.lineno}, in {self.name}'
        return text + (f"\n    {self.line}" if self.line else "")


class BackendCompilerFailed(Exception):
    """A backend raised, or returned something other than a callable, while compiling a graph."""

    def __init__(self, backend_name: str, inner: BaseException, message: Optional[str] = None) -> None:
        super().__init__(message or f"backend {backend_name!r} raised {type(inner).__name__}: {inner}")
        self.backend_name = backend_name
        self.inner = inner


class ForbiddenCallable(AssertionError):
    """Traced code called a function torch.compile refuses to trace (`mark_dynamic`): torch raises
    an AssertionError saying so."""

    def __init__(self, fn: object, user_stack: List[UserFrame]) -> None:
        super().__init__(f"Attempt to trace forbidden callable {fn!r}\n\nfrom user code:\n"
                         + "\n".join(map(str, user_stack)))


# What stops a call, fullgraph or not, as torch.compile's refusals do (never a fallback to eager)
REFUSALS = (BackendCompilerFailed, ForbiddenCallable, ConstraintViolationError)


class CacheSizeLimitWarning(RuntimeWarning):
    """A function reached the cache size limit and now runs without compiling (issued once per code
    object; filter it with `warnings.filterwarnings("ignore", category=CacheSizeLimitWarning)`)."""


def unimplemented(msg: str) -> NoReturn:
    raise Unsupported(msg)


def unimplemented_frame(msg: str) -> NoReturn:
    """Unsupported anywhere in the frame: it is not converted (no graph break)."""
    error = Unsupported(msg)
    error.whole_frame = True
    raise error


class TracedException(Unsupported):
    """A Python exception raised inside the traced code: by the user's `raise`, or by an operation that
    Python answers with one (a missing attribute or dict key, an exhausted iterator). The user's
    handlers in the trace catch it (see InstructionTranslatorBase.catch); one that no handler of the
    frame catches is a graph break before what raised it, which then raises it in plain Python.
    `exc_type` is its class; `value` its tracker, or None where the translator raised it: made from
    the constants `exc_args` (and the C-level `fields`) when a handler takes it."""

    def __init__(self, exc_type: type, exc_args: tuple = (), value: Any = None,
                 fields: Optional[Dict[str, Any]] = None) -> None:
        shown = ", ".join(map(repr, exc_args))
        super().__init__(f"{exc_type.__name__}({shown}) raised and not caught in the traced code")
        self.exc_type = exc_type
        self.exc_args = exc_args
        self.value = value
        self.fields = fields or {}
        # CPython chains the exception being handled where one is raised: done where a frame first sees it
        self.context_pending = True


def python_error(exc_type: type, *args: Any) -> NoReturn:
    """Raise, in the traced code, the exception `exc_type(*args)` that Python raises at this point."""
    raise TracedException(exc_type, args)


def raise_folded(error: Exception, what: str) -> NoReturn:
    """`what`, evaluated on constants while tracing, raised `error`: eager raises the same there, and so
    does the traced code (an AttributeError, whose fields name the object, stays a graph break)."""
    if isinstance(error, AttributeError):
        unimplemented(f"{what} raises {type(error).__name__} here")
    raise TracedException(type(error), error.args)


def ends_in_attribute_error(lookup: Callable[[], Any]) -> bool:
    """Whether `lookup()`, an attribute read traced, ends in AttributeError (what hasattr asks);
    any other exception it raises goes on."""
    try:
        lookup()
    except TracedException as error:
        if not issubclass(error.exc_type, AttributeError):
            raise
        return True
    return False


class AttributeMissing(TracedException):
    """Traced code reached an attribute lookup that Python answers with AttributeError."""

    def __init__(self, msg: str, name: Optional[str] = None) -> None:
        super().__init__(AttributeError, (msg,), fields={"name": name})


def no_attribute(cls: type, name: str) -> NoReturn:
    """Python's AttributeError for an instance of `cls` that has no attribute `name`."""
    raise AttributeMissing(f"'{cls.__name__}' object has no attribute '{name}'", name)


def no_class_attribute(cls: type, name: str) -> NoReturn:
    """Python's AttributeError for the class `cls`, which has no attribute `name`."""
    raise AttributeMissing(f"type object '{cls.__name__}' has no attribute '{name}'", name)


def no_getter(cls: type, name: str) -> NoReturn:
    """Python's AttributeError for reading a property without a getter."""
    raise AttributeMissing(f"property '{name}' of '{cls.__qualname__}' object has no getter", name)
