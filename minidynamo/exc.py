"""Errors raised while translating a frame."""
from typing import List, NoReturn, Optional

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


class AttributeMissing(Unsupported):
    """Traced code reached an attribute lookup that Python answers with AttributeError. hasattr and
    getattr with a default catch it (their lookup ran user code, a Python __getattribute__); left
    uncaught, it is an ordinary graph break."""


def attribute_missing(msg: str) -> NoReturn:
    raise AttributeMissing(msg)
