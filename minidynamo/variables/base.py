"""VariableTracker, the translator's symbolic value of one Python value; known objects; methods looked up to call."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional

from ..exc import unimplemented
from ..guards import Guard, GuardKind
from ..source import Source

if TYPE_CHECKING:
    from ..pycodegen import PyCodegen
    from ..symbolic_convert import InstructionTranslatorBase


def guard_identity(tx, vt: "VariableTracker") -> None:
    """A fact folded from which object `vt` is holds only while its source yields that object."""
    obj = vt.real_object()
    if obj is not None and vt.source is not None and (vt.source.name(), GuardKind.NN_MODULE) not in tx.output.guards:
        tx.output.add_guard(Guard(vt.source, GuardKind.ID_MATCH, obj))


class VariableTracker:
    """Base class. `source`, when set, says how generated code and guards reach the real value.

    Methods take `tx`, the translator running them: trackers reach the graph through `tx.output`,
    and make the tracker of a new real value with `tx.wrap` / `tx.wrap_constant`, so that no module
    of variables/ imports one above it."""

    def __init__(self, source: Optional[Source] = None) -> None:
        self.source = source

    def python_type(self) -> type:
        unimplemented(f"the type of {self.describe()} is not known while tracing")

    def describe(self) -> str:
        return type(self).__name__.replace("Variable", "").lower() or "value"

    def as_python_constant(self) -> Any:
        unimplemented(f"{self.describe()} is not a Python constant")

    def exact_value(self) -> Any:
        """The Python value where code needs the exact one (an index, a key, a range bound): a
        constant's value; a symbolic number is guarded to stay what it is now."""
        return self.as_python_constant()

    def is_python_constant(self) -> bool:
        try:
            self.as_python_constant()
        except Exception:
            return False
        return True

    def truthy(self, tx: "InstructionTranslatorBase") -> bool:
        """The truth value of this value when it can be known while tracing."""
        return bool(self.as_python_constant())

    def var_getattr(self, tx: "InstructionTranslatorBase", name: str) -> "VariableTracker":
        unimplemented(f"reading attribute '{name}' of {self.describe()}")

    def store_attr(self, tx: "InstructionTranslatorBase", name: str, value: "VariableTracker") -> None:
        unimplemented(f"assigning attribute '{name}' of {self.describe()}")

    def generic_setattr(self, tx: "InstructionTranslatorBase", name: str, value: "VariableTracker") -> None:
        """`object.__setattr__(self, name, value)`: the store that bypasses a class's own __setattr__."""
        self.store_attr(tx, name, value)

    def call_function(
        self, tx: "InstructionTranslatorBase", args: List["VariableTracker"], kwargs: Dict[str, "VariableTracker"]
    ) -> "VariableTracker":
        unimplemented(f"calling {self.describe()}")

    def call_method(
        self,
        tx: "InstructionTranslatorBase",
        name: str,
        args: List["VariableTracker"],
        kwargs: Dict[str, "VariableTracker"],
    ) -> "VariableTracker":
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)

    def has_unpack_var_sequence(self, tx: "InstructionTranslatorBase") -> bool:
        return False

    def unpack_var_sequence(self, tx: "InstructionTranslatorBase") -> List["VariableTracker"]:
        unimplemented(f"iterating over {self.describe()}")

    # Objects made while tracing that have identity: generated code builds each one once.
    has_identity = False
    # A mapping whose keys are tensors (by identity): indexing it is not a tensor operation.
    keyed_by_tensors = False

    def subvalues(self) -> List["VariableTracker"]:
        """Trackers this one holds, which generated code may need to rebuild it."""
        return []

    def real_object(self) -> Any:
        """The existing Python object this tracker stands for, or None (values made while tracing,
        tensors and constants have their own rules)."""
        return None

    def real_value(self) -> Any:
        """An equivalent real value, for pure library functions evaluated while tracing, or None."""
        return self.real_object()

    def reconstruct(self, codegen: "PyCodegen") -> None:
        """Emit bytecode that pushes the real value (used to build return values)."""
        if self.source is not None:
            self.source.reconstruct(codegen)
            return
        obj = self.real_object()
        if obj is None:
            unimplemented(f"returning {self.describe()} created while tracing")
        codegen.load_const(obj)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()})"


class KnownObjectVariable(VariableTracker):
    """A real object the trace knows by identity (a library function, a class): its own constant."""

    def __init__(self, value: Any, source: Optional[Source] = None) -> None:
        super().__init__(source)
        self.value = value

    def python_type(self) -> type:
        return type(self.value)

    def as_python_constant(self) -> Any:
        return self.value

    def real_object(self) -> Any:
        return self.value


class BoundMethodCall(VariableTracker):
    """`obj.name` looked up to be called; calling it asks `obj` to run its method."""

    def __init__(self, obj: VariableTracker, name: str) -> None:
        super().__init__()
        self.obj = obj
        self.name = name

    def describe(self) -> str:
        return f"method {self.name} of {self.obj.describe()}"

    def call_function(self, tx, args, kwargs) -> VariableTracker:
        return self.obj.call_method(tx, self.name, args, kwargs)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        method = self.obj.var_getattr(tx, self.name)
        if isinstance(method, BoundMethodCall):  # the object only knows how to call it
            unimplemented(f"attribute {name!r} of method {self.name}")
        return method.var_getattr(tx, name)

    def reconstruct(self, codegen) -> None:
        codegen.reconstruct(self.obj)
        codegen.load_attr(self.name)

    def subvalues(self) -> List[VariableTracker]:
        return [self.obj]


class UnboundMethodCall(VariableTracker):
    """A method of a builtin container class read from the class (`list.copy`, copy's dispatch
    table): called on an instance of exactly that class, the instance runs the method."""

    def __init__(self, cls: type, name: str, source: Optional[Source] = None) -> None:
        super().__init__(source)
        self.cls = cls
        self.name = name

    def describe(self) -> str:
        return f"{self.cls.__name__}.{self.name}"

    def as_python_constant(self) -> Any:
        return getattr(self.cls, self.name)

    def real_object(self) -> Any:
        return getattr(self.cls, self.name)

    def call_function(self, tx, args, kwargs) -> VariableTracker:
        if not args or args[0].python_type() is not self.cls:  # a subclass may override the method
            unimplemented(f"calling {self.describe()} on {args[0].describe() if args else 'nothing'}")
        return args[0].call_method(tx, self.name, list(args[1:]), kwargs)
