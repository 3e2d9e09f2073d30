"""Exception objects made while tracing: instances of the builtin exception classes whose state is
their args (and of user subclasses of them, whose __init__ is traced), as trackers that the traced
code raises, catches, chains and reads."""
from __future__ import annotations

import types
from typing import Any, Callable, Dict, List, Optional

from ..exc import TracedException, unimplemented
from ..module_lookup import class_attribute
from .base import VariableTracker
from .constant import ConstantVariable, is_constant_value, is_none
from .dicts import ConstDictVariable
from .lists import ListVariable, TupleVariable
from .user_defined import HEAP_TYPE, NewObjectVariable, UserDefinedClassVariable

_NONE = ConstantVariable(None)
# C-level fields of builtin exception classes beyond args: what the constructor's arguments set them to
_EXTRA_FIELDS: Dict[type, Callable[[List[VariableTracker]], Dict[str, VariableTracker]]] = {
    StopIteration: lambda args: {"value": args[0] if args else _NONE},
    AttributeError: lambda args: {"name": _NONE, "obj": _NONE},
}
# the methods of BaseException that traced code may call on an exception made while tracing
_METHODS = frozenset({"__init__", "__str__", "__repr__", "with_traceback", "add_note"})


def _builtin_base(cls: type) -> type:
    return next(base for base in cls.__mro__ if not base.__flags__ & HEAP_TYPE)


def is_traced_exception_class(cls: Any) -> bool:
    """Whether instances of `cls` are traced as ExceptionVariables: a builtin exception class whose
    state is its args (a few known fields more), or a user subclass of one that makes its instances
    with BaseException.__new__."""
    if not (isinstance(cls, type) and issubclass(cls, BaseException)) or type(cls) is not type:
        return False
    base = _builtin_base(cls)
    if base not in _EXTRA_FIELDS and (base.__basicsize__ != BaseException.__basicsize__
                                      or base.__str__ not in (BaseException.__str__, KeyError.__str__)):
        return False
    return not any("__new__" in vars(klass) for klass in cls.__mro__ if klass.__flags__ & HEAP_TYPE)


def is_exception_method(fn: Any) -> bool:
    """Whether `fn` is one of BaseException's methods (or a builtin subclass's) that trace on an ExceptionVariable."""
    owner = getattr(fn, "__objclass__", None)
    return (isinstance(fn, (types.WrapperDescriptorType, types.MethodDescriptorType)) and isinstance(owner, type)
            and issubclass(owner, BaseException) and fn.__name__ in _METHODS)


class ExceptionClassVariable(UserDefinedClassVariable):
    """A class whose instances are traced as ExceptionVariables (see is_traced_exception_class)."""

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        exception = ExceptionVariable(self.cls, args, self.source)
        exception.run_init(tx, args, kwargs, own_new=False)
        return exception


class ExceptionVariable(NewObjectVariable):
    """An exception object made while tracing: its args, the C-level fields (`__cause__`,
    `__context__`, `__suppress_context__`, a StopIteration's `value`, ...) and, as any object made
    while tracing, its instance dict."""

    def __init__(self, cls: type, args: List[VariableTracker], cls_source=None) -> None:
        super().__init__(cls, cls_source)
        self.args = TupleVariable(list(args))
        self.fields: Dict[str, VariableTracker] = {"__cause__": _NONE, "__context__": _NONE,
                                                   "__suppress_context__": ConstantVariable(False)}
        self.fields.update(self._extra_fields(args))

    def _extra_fields(self, args: List[VariableTracker]) -> Dict[str, VariableTracker]:
        extra = _EXTRA_FIELDS.get(_builtin_base(self.cls))
        return extra(args) if extra is not None else {}

    @staticmethod
    def of_error(tx, error: TracedException) -> "ExceptionVariable":
        """The tracker of an exception the translator raised (from constants)."""
        if error.value is None:
            if not (is_traced_exception_class(error.exc_type) and all(map(is_constant_value, error.exc_args))):
                unimplemented(f"catching a {error.exc_type.__name__} whose state the trace does not keep")
            exception = ExceptionVariable(error.exc_type, [tx.wrap_constant(a) for a in error.exc_args])
            exception.fields.update({k: tx.wrap_constant(v) for k, v in error.fields.items() if k in exception.fields})
            error.value = exception
        return error.value

    def describe(self) -> str:
        return f"{self.cls.__name__} object"

    def subvalues(self) -> List[VariableTracker]:
        return [*super().subvalues(), self.args, *self.fields.values()]

    def run_init(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker], own_new: bool) -> None:
        if isinstance(class_attribute(self.cls, "__init__"), types.FunctionType):
            super().run_init(tx, args, kwargs, own_new)
        else:
            self.builtin_init(args, kwargs)

    def builtin_init(self, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> None:
        """BaseException.__init__ (or a builtin subclass's): the args, and the fields they set."""
        if kwargs:
            unimplemented(f"{self.cls.__name__}() with keyword arguments")
        self.args = TupleVariable(list(args))
        self.fields.update(self._extra_fields(args))

    def builtin_method(self, static: Any) -> Optional[VariableTracker]:
        return ExceptionMethodVariable(self, static.__name__) if is_exception_method(static) else None

    def generic_getattr(self, tx, name: str) -> VariableTracker:
        if name == "args":
            return self.args
        if name in self.fields:
            return self.fields[name]
        if name == "__traceback__":
            unimplemented("the traceback of an exception raised while tracing")
        return super().generic_getattr(tx, name)

    def store_attr(self, tx, name: str, value: VariableTracker) -> None:
        if class_attribute(self.cls, "__setattr__") is BaseException.__setattr__:  # the generic one
            self.generic_setattr(tx, name, value)
        else:
            super().store_attr(tx, name, value)

    def generic_setattr(self, tx, name: str, value: VariableTracker) -> None:
        if name == "args":
            self.args = TupleVariable(value.unpack_var_sequence(tx))
        elif name in ("__cause__", "__context__"):
            if not (is_none(value) or isinstance(value, ExceptionVariable)):
                unimplemented(f"setting {name} of an exception to {value.describe()}")
            self.fields[name] = value
            if name == "__cause__":
                self.fields["__suppress_context__"] = ConstantVariable(True)
        elif name in self.fields:
            self.fields[name] = value
        else:
            super().generic_setattr(tx, name, value)

    def chain_context(self, handled: Optional["ExceptionVariable"]) -> None:
        """Raised while `handled` is being handled: its __context__, as CPython's _PyErr_SetObject sets
        it (no cycle: this exception is cut out of `handled`'s own chain)."""
        if handled is None or handled is self:
            return
        link = handled
        while isinstance(link, ExceptionVariable):
            following = link.fields["__context__"]
            if following is self:
                link.fields["__context__"] = _NONE
                break
            link = following
        self.fields["__context__"] = handled

    def text(self, tx, name: str) -> VariableTracker:
        """str() (`name` "__str__") or repr() of the exception, as BaseException's (KeyError's) methods."""
        items = self.args.items
        if name == "__repr__":
            shown = tx.call_operator(repr, items[0] if len(items) == 1 else self.args).as_python_constant()
            return ConstantVariable(f"{self.cls.__name__}({shown})" if len(items) == 1 else self.cls.__name__ + shown)
        if not items:
            return ConstantVariable("")
        if len(items) == 1:
            show = repr if issubclass(self.cls, KeyError) else str
            return tx.call_operator(show, items[0])
        return tx.call_operator(str, self.args)

    def reconstruct_empty(self, codegen) -> None:
        codegen.load_function(BaseException.__new__)
        codegen.load_const(self.cls)
        codegen.call(1)

    def reconstruct_filling(self, codegen, local: str) -> None:
        codegen.load_function(fill_exception)
        codegen.append("LOAD_FAST", local)
        self._reconstruct_state(codegen)
        codegen.call(4)
        codegen.append("POP_TOP")

    def reconstruct(self, codegen) -> None:
        codegen.load_function(fill_exception)
        self.reconstruct_empty(codegen)
        self._reconstruct_state(codegen)
        codegen.call(4)

    def _reconstruct_state(self, codegen) -> None:
        codegen.reconstruct(self.args)
        codegen.reconstruct(ConstDictVariable(self.fields))
        codegen.reconstruct(ConstDictVariable(self.attrs))


def fill_exception(exception: BaseException, args: tuple, fields: Dict[str, Any], attrs: Dict[str, Any]) -> BaseException:
    """Give an exception rebuilt by generated code the state the trace gave it."""
    exception.args = args
    for name, value in fields.items():
        setattr(exception, name, value)
    for name, value in attrs.items():
        object.__setattr__(exception, name, value)
    return exception


class ExceptionMethodVariable(VariableTracker):
    """A method of BaseException bound to an exception made while tracing."""

    def __init__(self, exception: ExceptionVariable, name: str) -> None:
        super().__init__()
        self.exception = exception
        self.name = name

    def describe(self) -> str:
        return f"method {self.name} of {self.exception.describe()}"

    def subvalues(self) -> List[VariableTracker]:
        return [self.exception]

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        exception = self.exception
        if self.name == "__init__":
            exception.builtin_init(args, kwargs)
            return _NONE
        if kwargs:
            unimplemented(f"{self.describe()} with keyword arguments")
        if self.name in ("__str__", "__repr__") and not args:
            return exception.text(tx, self.name)
        if self.name == "with_traceback" and len(args) == 1 and is_none(args[0]):
            return exception
        if self.name == "add_note" and len(args) == 1 and isinstance(args[0].as_python_constant(), str):
            notes = exception.attrs.setdefault("__notes__", ListVariable([]))
            notes.call_method(tx, "append", args, {})
            return _NONE
        unimplemented(f"calling {self.describe()} with these arguments")
