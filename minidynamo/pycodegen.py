"""PyCodegen: builds the instructions of generated code (graph calls and value reconstruction)."""
from __future__ import annotations

import contextlib
import types
from typing import Any, Dict, Iterator, List, Optional, Protocol, Sequence, Set, Tuple

from . import pyversion
from .bytecode_transformation import Element, Instr, closure_var
from .exc import unimplemented

_NO_ARG = object()


class Reconstructible(Protocol):
    """What PyCodegen rebuilds (the translator's trackers): a value that emits the code pushing it.
    One with `has_identity` and no `source` is built once and reused; one whose `node` the graph
    computed is read from the graph's outputs."""

    source: Any
    has_identity: bool

    def reconstruct(self, codegen: "PyCodegen") -> None:
        ...

    def subvalues(self) -> List["Reconstructible"]:
        ...


class PyCodegen:
    def __init__(self, code: types.CodeType) -> None:
        self.code = code
        self.instructions: List[Element] = []
        # Tensors already computed by the graph: node -> (local holding the outputs, index)
        self.graph_outputs: Dict[Any, int] = {}
        self.graph_output_var: Optional[str] = None
        # objects with identity built so far: id(tracker) -> (local holding it, tracker)
        self.built: Dict[int, Tuple[str, Reconstructible]] = {}
        self.building: Set[int] = set()  # ids of those whose building code is being emitted
        # values read from their sources ahead of the side effects: id(tracker) -> (local, tracker)
        self.read_early: Dict[int, Tuple[str, Reconstructible]] = {}
        # sources read once into a local for a stretch of code (see hold_shared_bases): name -> local
        self.held_sources: Dict[str, str] = {}
        self.n_held = 0

    def append(self, opname: str, arg: Any = _NO_ARG) -> None:
        self.instructions.append(Instr(opname) if arg is _NO_ARG else Instr(opname, arg))

    def load_const(self, value: Any) -> None:
        self.append("LOAD_CONST", value)

    def load_local(self, name: str) -> None:
        cell = closure_var(self.code, name)
        self.append("LOAD_DEREF", cell) if cell is not None else self.append("LOAD_FAST", name)

    def store_local(self, name: str) -> None:
        cell = closure_var(self.code, name)
        self.append("STORE_DEREF", cell) if cell is not None else self.append("STORE_FAST", name)

    def load_closure(self, name: str) -> None:
        """The cell object of the frame's cell or free variable `name`."""
        self.instructions.append(pyversion.load_closure(closure_var(self.code, name)))

    def make_function(self, flags: int) -> None:
        """A function of the code object on top, with what `flags` says lies below it (MAKE_FUNCTION's
        flags of CPython 3.11: 0x01 defaults, 0x02 keyword defaults, 0x04 annotations, 0x08 closure)."""
        self.instructions.extend(pyversion.make_function(flags))

    def subscript(self) -> None:
        """`container[index]` of the two values on top."""
        self.instructions.extend(pyversion.subscript())

    def load_global(self, name: str) -> None:
        self.instructions.append(pyversion.load_global(name))

    def load_attr(self, name: str) -> None:
        self.instructions.append(pyversion.load_attr(name))

    def push_null(self) -> None:
        """What a call expects beside a callable that is not a bound method."""
        self.instructions.append(pyversion.push_null())

    @contextlib.contextmanager
    def callable(self) -> Iterator[None]:
        """Within: the code pushing a callable that is not a bound method, ready for `call` (with the
        NULL a call expects on the side where this CPython wants it)."""
        if pyversion.NULL_BEFORE_CALLABLE:
            self.push_null()
        yield
        if not pyversion.NULL_BEFORE_CALLABLE:
            self.push_null()

    def load_function(self, fn: Any) -> None:
        """A callable known now, ready for `call`."""
        with self.callable():
            self.load_const(fn)

    def call(self, nargs: int, kw_names: Tuple[str, ...] = ()) -> None:
        """Call what lies below `nargs` arguments, the last `len(kw_names)` of them by keyword."""
        self.instructions.extend(pyversion.call(nargs, kw_names))

    def load_source(self, source: Any) -> None:
        """Push the value at `source`, from the local holding it where one does."""
        held = self.held_sources.get(source.name())
        if held is not None:
            self.append("LOAD_FAST", held)
        else:
            source.reconstruct(self)

    @contextlib.contextmanager
    def hold_shared_bases(self, sources: Sequence[Any]) -> Iterator[None]:
        """Within: each base that two or more of `sources` are read through (the module holding
        several parameters) is read once, now, into a local, instead of once per source. For reads
        done together, with nothing run between them that could change what the bases hold."""
        branches: Dict[str, Set[str]] = {}  # base name -> names of what is read through it or at it
        bases: Dict[str, Any] = {}
        for source in sources:
            below, base = source, getattr(source, "base", None)
            while base is not None and getattr(base, "base", None) is not None:  # a local is read as fast
                branches.setdefault(base.name(), set()).add(below.name())
                bases[base.name()] = base
                below, base = base, base.base
        for name in set(branches) & {s.name() for s in sources}:
            branches[name].add(name)
        shared = sorted((b for n, b in bases.items() if len(branches[n]) > 1), key=lambda b: b.depth())
        for base in shared:
            self.load_source(base)
            local = f"___base{self.n_held}"
            self.n_held += 1
            self.append("STORE_FAST", local)
            self.held_sources[base.name()] = local
        try:
            yield
        finally:
            self.held_sources.clear()

    def read_now(self, value: Reconstructible) -> None:
        """Read `value` into a local now; later reconstructions load that local."""
        if id(value) not in self.read_early:
            self.reconstruct(value)
            name = f"___read{len(self.read_early)}"
            self.append("STORE_FAST", name)
            self.read_early[id(value)] = (name, value)

    def reconstruct(self, value: Reconstructible) -> None:
        if id(value) in self.read_early:
            self.append("LOAD_FAST", self.read_early[id(value)][0])
            return
        node = getattr(value, "node", None)
        if node is not None and node in self.graph_outputs:
            self.append("LOAD_FAST", self.graph_output_var)
            self.load_const(self.graph_outputs[node])
            self.subscript()
            return
        if value.has_identity and value.source is None:  # build once, then reuse the same object
            if id(value) in self.built:
                if id(value) in self.building:  # its local is not set yet
                    unimplemented(f"{value!r} made in the frame holds itself (a cycle generated code cannot build)")
                self.append("LOAD_FAST", self.built[id(value)][0])
                return
            name = f"___built{len(self.built)}"
            self.built[id(value)] = (name, value)
            if hasattr(value, "reconstruct_filling") and _holds_itself(value):
                value.reconstruct_empty(self)  # stored first, then filled: its items may refer to it
                self.instructions.append(pyversion.dup_top())
                self.append("STORE_FAST", name)
                value.reconstruct_filling(self, name)
                return
            self.building.add(id(value))
            value.reconstruct(self)
            self.building.discard(id(value))
            self.instructions.append(pyversion.dup_top())
            self.append("STORE_FAST", name)
            return
        value.reconstruct(self)


def _holds_itself(value: Reconstructible) -> bool:
    """Whether `value` is reached again through the values it holds (a list that contains itself)."""
    seen: Set[int] = set()
    pending = list(value.subvalues())
    while pending:
        held = pending.pop()
        if held is value:
            return True
        if id(held) not in seen:
            seen.add(id(held))
            pending.extend(held.subvalues())
    return False
