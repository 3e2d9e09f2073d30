"""Side effects made while tracing (global and attribute writes, input-container and closure
mutations), replayed in order by the generated code after the graph has run."""
from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from .source import Source
from .variables.base import VariableTracker

if TYPE_CHECKING:
    from .pycodegen import PyCodegen


def replace_list_contents(target: list, items: list) -> None:
    target[:] = items


def replace_set_contents(target: set, items: set) -> None:
    target.intersection_update(items)  # elements kept stay where they are in the hash table
    target.update(items)


def replace_dict_contents(target: dict, items: dict) -> None:
    """Through the builtin base's own methods: a subclass's overrides (and OrderedDict's order) are not
    what the trace changed."""
    base = collections.OrderedDict if isinstance(target, collections.OrderedDict) else dict
    base.clear(target)
    for key, value in items.items():
        base.__setitem__(target, key, value)


@dataclass
class StoreGlobal:
    globals_source: Optional[Source]  # None: the frame's own globals
    name: str
    value: VariableTracker

    def values(self) -> List[VariableTracker]:
        return [self.value]

    def codegen(self, codegen: "PyCodegen") -> None:
        codegen.reconstruct(self.value)
        if self.globals_source is None:
            codegen.append("STORE_GLOBAL", self.name)
        else:
            self.globals_source.reconstruct(codegen)
            codegen.load_const(self.name)
            codegen.append("STORE_SUBSCR")


@dataclass
class StoreAttr:
    obj: VariableTracker
    name: str
    value: VariableTracker
    # called instead of `obj.name = value` (object.__setattr__: bypassing the class's own __setattr__)
    setter: Optional[Callable[[Any, str, Any], None]] = None

    def values(self) -> List[VariableTracker]:
        return [self.obj, self.value]  # the object too: a tensor the graph made must be one of its outputs

    def codegen(self, codegen: "PyCodegen") -> None:
        if self.setter is not None:
            codegen.load_function(self.setter)
            codegen.reconstruct(self.obj)
            codegen.load_const(self.name)
            codegen.reconstruct(self.value)
            codegen.call(3)
            codegen.append("POP_TOP")
            return
        codegen.reconstruct(self.value)
        codegen.reconstruct(self.obj)
        codegen.append("STORE_ATTR", self.name)


@dataclass
class StoreCell:
    """A write to a real closure cell: by STORE_DEREF in the frame itself, else through the cell object."""

    frame_name: Optional[str]
    cell_source: Optional[Source]
    cell: Any  # CellVariable; its final contents are written

    def values(self) -> List[VariableTracker]:
        return [self.cell.contents]

    def codegen(self, codegen: "PyCodegen") -> None:
        codegen.reconstruct(self.cell.contents)
        if self.frame_name is not None:
            codegen.store_local(self.frame_name)
        else:
            self.cell_source.reconstruct(codegen)
            codegen.append("STORE_ATTR", "cell_contents")


@dataclass
class MutateContainer:
    """An input list, set or dict changed in place: its final contents are written back."""

    container: Any  # ListVariable, SetVariable or ConstDictVariable with a source

    def values(self) -> List[VariableTracker]:
        items = self.container.items
        return list(items.values()) if isinstance(items, dict) else list(items)

    def codegen(self, codegen: "PyCodegen") -> None:
        kind = dict if isinstance(self.container.items, dict) else self.container.python_type()
        replace, build = {dict: (replace_dict_contents, "BUILD_MAP"), set: (replace_set_contents, "BUILD_SET")}.get(
            kind, (replace_list_contents, "BUILD_LIST"))
        codegen.load_function(replace)
        self.container.source.reconstruct(codegen)
        if kind is dict:
            for key, value in self.container.items.items():
                codegen.load_const(key)
                codegen.reconstruct(value)
        else:
            for item in self.container.items:
                codegen.reconstruct(item)
        codegen.append(build, len(self.container.items))
        codegen.call(2)
        codegen.append("POP_TOP")


class SideEffects:
    def __init__(self) -> None:
        self.effects: Dict[Tuple[Any, ...], Any] = {}  # insertion order is program order

    def __bool__(self) -> bool:
        return bool(self.effects)

    def store_global(self, globals_key: int, globals_source: Optional[Source], name: str, value: VariableTracker) -> None:
        key = ("global", globals_key, name)
        self.effects.pop(key, None)
        self.effects[key] = StoreGlobal(globals_source, name, value)

    def pending_global(self, globals_key: int, name: str) -> Optional[VariableTracker]:
        effect = self.effects.get(("global", globals_key, name))
        return effect.value if effect is not None else None

    def store_attr(self, obj: VariableTracker, identity: Any, name: str, value: VariableTracker,
                   setter: Optional[Callable[[Any, str, Any], None]] = None) -> None:
        key = ("attr", id(identity), name)
        self.effects.pop(key, None)
        self.effects[key] = StoreAttr(obj, name, value, setter)

    def pending_attr(self, identity: Any, name: str) -> Optional[VariableTracker]:
        effect = self.effects.get(("attr", id(identity), name))
        return effect.value if effect is not None else None

    def pending_attrs(self, identity: Any) -> Dict[str, VariableTracker]:
        """The attributes of an existing object that the trace has assigned so far."""
        return {key[2]: effect.value for key, effect in self.effects.items()
                if key[0] == "attr" and key[1] == id(identity)}

    def store_cell(self, cell: Any, frame_name: Optional[str], cell_source: Optional[Source]) -> None:
        self.effects.setdefault(("cell", id(cell)), StoreCell(frame_name, cell_source, cell))

    def mutate_container(self, container: VariableTracker) -> None:
        self.effects.setdefault(("container", id(container)), MutateContainer(container))

    def mutated_containers(self) -> List[VariableTracker]:
        return [effect.container for effect in self.effects.values() if isinstance(effect, MutateContainer)]

    def attribute_owners(self) -> List[VariableTracker]:
        """The existing objects whose attributes the trace assigned."""
        return [effect.obj for effect in self.effects.values() if isinstance(effect, StoreAttr)]

    def values(self) -> List[VariableTracker]:
        return [v for effect in self.effects.values() for v in effect.values()]

    def codegen(self, codegen: "PyCodegen") -> None:
        for effect in self.effects.values():
            effect.codegen(codegen)
