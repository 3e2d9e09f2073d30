"""Sources: where a value the translator sees came from, as an expression over the frame.

`name()` is the expression guards evaluate (`L['x']`, `G['w']`, `L['self'].fc.weight`,
`L['xs'][2]`); `reconstruct()` emits the bytecode that loads the value in generated code.
"""
from __future__ import annotations

import collections
import types
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Optional

if TYPE_CHECKING:
    from .pycodegen import PyCodegen


# Objects named in source expressions that have no literal form (a class as a dict key): the
# expression indexes this table, which keeps them alive.
_NAMED_OBJECTS: list = []
_NAMED_INDEX: Dict[int, int] = {}
_LITERAL_TYPES = (int, str, bytes, bool, type(None))


def literal(value: Any) -> str:
    """An expression for `value` that evaluates to it again: its repr where that is a literal."""
    if type(value) in _LITERAL_TYPES or (type(value) is float and value == value and abs(value) != float("inf")):
        return repr(value)
    if type(value) is tuple:
        return f"({''.join(literal(v) + ', ' for v in value)})"
    index = _NAMED_INDEX.get(id(value))
    if index is None:
        index = _NAMED_INDEX[id(value)] = len(_NAMED_OBJECTS)
        _NAMED_OBJECTS.append(value)
    return f"__import__('minidynamo.source').source._NAMED_OBJECTS[{index}]"


class Source:
    _name: Optional[str] = None  # name(), once made (not a dataclass field: this class is not one)

    def name(self) -> str:
        """The expression, made once: sources are immutable, and guards and graph inputs ask often."""
        text = self._name
        if text is None:
            text = self.__dict__["_name"] = self.expression()  # beside the dataclass fields: not compared
        return text

    def expression(self) -> str:
        raise NotImplementedError

    def reconstruct(self, codegen: "PyCodegen") -> None:
        raise NotImplementedError

    def is_global(self) -> bool:
        return False

    def depth(self) -> int:
        return 0


@dataclass(frozen=True)
class LocalSource(Source):
    local_name: str

    def expression(self) -> str:
        return f"L[{self.local_name!r}]"

    def reconstruct(self, codegen: "PyCodegen") -> None:
        codegen.load_local(self.local_name)


@dataclass(frozen=True)
class GlobalSource(Source):
    global_name: str

    def expression(self) -> str:
        return f"G[{self.global_name!r}]"

    def reconstruct(self, codegen: "PyCodegen") -> None:
        codegen.load_global(self.global_name)

    def is_global(self) -> bool:
        return True


@dataclass(frozen=True)
class GlobalsDictSource(Source):
    """The frame's globals dict itself (where a builtin read must stay absent)."""

    def expression(self) -> str:
        return "G"

    def is_global(self) -> bool:
        return True


@dataclass(frozen=True)
class ModuleGlobalsSource(Source):
    """The globals dict of another module (a function inlined from there reads its globals)."""

    scope_name: str
    namespace: Dict[str, Any] = field(compare=False, hash=False, repr=False)

    def expression(self) -> str:
        return self.scope_name

    def reconstruct(self, codegen: "PyCodegen") -> None:
        codegen.load_const(self.namespace)

    def is_global(self) -> bool:
        return True


@dataclass(frozen=True)
class ChainedSource(Source):
    base: Source

    def is_global(self) -> bool:
        return self.base.is_global()

    def depth(self) -> int:
        steps, source = 1, self.base
        while isinstance(source, ChainedSource):
            steps, source = steps + 1, source.base
        return steps + source.depth()


@dataclass(frozen=True)
class AttrSource(ChainedSource):
    member: str

    def expression(self) -> str:
        if self.member.isidentifier():
            return f"{self.base.name()}.{self.member}"
        return f"getattr({self.base.name()}, {self.member!r})"

    def reconstruct(self, codegen: "PyCodegen") -> None:
        codegen.load_source(self.base)
        codegen.load_attr(self.member)


@dataclass(frozen=True)
class GetItemSource(ChainedSource):
    index: Any

    def expression(self) -> str:
        return f"{self.base.name()}[{literal(self.index)}]"

    def reconstruct(self, codegen: "PyCodegen") -> None:
        codegen.load_source(self.base)
        codegen.load_const(self.index)
        codegen.subscript()


@dataclass(frozen=True)
class KeyedBySourceItemSource(ChainedSource):
    """`base[key]` where the key is an object another source names (a parameter keying an
    optimizer's state); guards keep that object's identity."""

    key: Source

    def expression(self) -> str:
        return f"{self.base.name()}[{self.key.name()}]"

    def reconstruct(self, codegen: "PyCodegen") -> None:
        codegen.load_source(self.base)
        codegen.load_source(self.key)
        codegen.subscript()


@dataclass(frozen=True)
class CellContentsSource(ChainedSource):
    """The contents of a closure cell: `base` names the cell object."""

    def expression(self) -> str:
        return f"{self.base.name()}.cell_contents"

    def reconstruct(self, codegen: "PyCodegen") -> None:
        codegen.load_source(self.base)
        codegen.load_attr("cell_contents")


@dataclass(frozen=True)
class DefaultsSource(ChainedSource):
    """A positional default (`fn.__defaults__[i]`) or keyword-only default of a function."""

    index: Any
    kwonly: bool = False

    def expression(self) -> str:
        attr = "__kwdefaults__" if self.kwonly else "__defaults__"
        return f"{self.base.name()}.{attr}[{literal(self.index)}]"

    def reconstruct(self, codegen: "PyCodegen") -> None:
        codegen.load_source(self.base)
        codegen.load_attr("__kwdefaults__" if self.kwonly else "__defaults__")
        codegen.load_const(self.index)
        codegen.subscript()


# Owners of MethodCallSource methods that are not builtins: named through a module guards can read.
_QUALIFIED_OWNERS = {types.MappingProxyType: "types.MappingProxyType", collections.OrderedDict: "collections.OrderedDict"}


@dataclass(frozen=True)
class MethodCallSource(ChainedSource):
    """The result of a read-only builtin method called on `base`, e.g. `dict.get(L['d'], 'k')`."""

    owner: type  # a builtin type
    method: str
    args: tuple

    def expression(self) -> str:
        owner = _QUALIFIED_OWNERS.get(self.owner, self.owner.__name__)
        call = f"{owner}.{self.method}({self.base.name()}{''.join(f', {literal(a)}' for a in self.args)})"
        return f"list({call})" if self.method in ("keys", "values", "items") else call

    def reconstruct(self, codegen: "PyCodegen") -> None:
        if self.method in ("keys", "values", "items"):
            codegen.load_function(list)
        codegen.load_function(getattr(self.owner, self.method))
        codegen.load_source(self.base)
        for arg in self.args:
            codegen.load_const(arg)
        codegen.call(len(self.args) + 1)
        if self.method in ("keys", "values", "items"):
            codegen.call(1)


@dataclass(frozen=True)
class ContainsSource(ChainedSource):
    """Whether `key in base`, asked of a mapping whose membership test cannot be traced."""

    key: Any

    def expression(self) -> str:
        return f"({literal(self.key)} in {self.base.name()})"

    def reconstruct(self, codegen: "PyCodegen") -> None:
        codegen.load_const(self.key)
        codegen.load_source(self.base)
        codegen.append("CONTAINS_OP", 0)


@dataclass(frozen=True)
class IterationOrderSource(ChainedSource):
    """`tuple(base)`: the order a set iterates in, which equal sets need not share (it follows the
    hash table's history)."""

    def expression(self) -> str:
        return f"tuple({self.base.name()})"

    def reconstruct(self, codegen: "PyCodegen") -> None:
        codegen.load_function(tuple)
        codegen.load_source(self.base)
        codegen.call(1)


@dataclass(frozen=True)
class CallSource(ChainedSource):
    """What calling `base` with no arguments returns (a weak reference's referent)."""

    def expression(self) -> str:
        return f"{self.base.name()}()"

    def reconstruct(self, codegen: "PyCodegen") -> None:
        with codegen.callable():
            codegen.load_source(self.base)
        codegen.call(0)


def read_value(source: Source, scope: Dict[str, Any], known: Optional[Dict[str, Any]] = None) -> Any:
    """The value `source` names in `scope` (L, G and module namespaces by name): what
    `eval(source.name(), scope)` gives, without compiling the expression. Locals, globals,
    attributes and items are read directly, each base once when `known` (values read so far, by
    name) is given; other sources are evaluated."""
    name = source.name()
    if known is not None and name in known:
        return known[name]
    kind = type(source)
    if kind is LocalSource:
        value = scope["L"][source.local_name]
    elif kind is GlobalSource:
        value = scope["G"][source.global_name]
    elif kind is AttrSource:
        value = getattr(read_value(source.base, scope, known), source.member)
    elif kind is GetItemSource:
        value = read_value(source.base, scope, known)[source.index]
    else:
        value = eval(name, scope)
    if known is not None:
        known[name] = value
    return value
