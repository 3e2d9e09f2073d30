"""nn.Module instances: attributes read in Python's lookup order with a guard on each fact the
lookup relied on; parameters and buffers become graph attributes; forward is inlined."""
from __future__ import annotations

import types
from typing import Any, Dict, List, Tuple

import torch
from torch.nn.modules import module as module_impl

from ..exc import unimplemented
from ..guards import Guard, GuardKind
from ..module_lookup import MISSING, MODULE_TABLES, class_attribute, is_data_descriptor, module_attribute_home
from ..source import AttrSource, GetItemSource
from .base import VariableTracker
from .constant import ConstantVariable
from .functions import NestedUserFunctionVariable, UserFunctionVariable, UserMethodVariable
from .lists import ListIteratorVariable, TupleVariable
from .user_defined import UserDefinedClassVariable, iterate_object, lookup_class_attribute

# The __call__ torch.fx gives each GraphModule class: nn.Module.__call__ with fx's traceback reporting.
_GRAPH_MODULE_CALL = next(c for c in torch.fx.GraphModule.recompile.__code__.co_consts
                          if isinstance(c, types.CodeType) and c.co_name == "call_wrapped")
_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_GLOBAL_HOOK_DICTS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                      "_global_backward_pre_hooks")
_CONTAINERS = (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ModuleDict)
_LIST_CONTAINERS = (torch.nn.ModuleList, torch.nn.Sequential)


def _is_torch_method(module: torch.nn.Module, name: str, owners: Tuple[type, ...]) -> bool:
    """Whether `module.name` is the method `name` of one of `owners` (not overridden, not shadowed)."""
    found = class_attribute(type(module), name)
    return name not in module.__dict__ and any(found is owner.__dict__.get(name) for owner in owners)


class NNModuleVariable(VariableTracker):
    """A module. `by_structure`: the module is a new object on each call (made by the frame before a
    graph break): guarded by type and by what is read of it, its parameters and buffers passed to the
    graph as inputs, and so its submodules too."""

    def __init__(self, module: torch.nn.Module, source=None, by_structure: bool = False) -> None:
        super().__init__(source)
        self.module = module
        self.by_structure = by_structure

    def python_type(self) -> type:
        return type(self.module)

    def real_object(self) -> Any:
        return self.module

    def describe(self) -> str:
        return f"module {type(self.module).__name__}"

    # ---- guards on the module's own dicts ----

    def _guard(self, tx, member: str, kind: GuardKind, value: Any) -> None:
        if self.source is not None:
            tx.output.add_guard(Guard(AttrSource(self.source, member), kind, value))

    def _guard_absent(self, tx, table: str, name: str) -> None:
        """Guard that `name` stays out of the instance dict `table` (`__dict__` or a Module table)."""
        self._guard(tx, table, GuardKind.DICT_CONTAINS, (name, False))

    def _guard_class_lacks(self, tx, name: str) -> None:
        """Guard that the class still has no attribute `name`: one added later (a property, a method)
        would come before the instance's own attributes or Module.__getattr__."""
        if self.source is not None:
            present = hasattr(type(self.module), name)  # a metaclass attribute shadows nothing; kept as found
            tx.output.add_guard(Guard(AttrSource(self.source, "__class__"), GuardKind.HASATTR, (name, present)))

    def _guard_keys(self, tx, table: str) -> None:
        entries = getattr(self.module, table)
        if type(entries) is dict:
            self._guard(tx, table, GuardKind.DICT_KEYS, entries)
            return
        # An OrderedDict (Sequential.__delitem__ makes one), which the keys guard does not take:
        # its length and each key. Only a reorder in place (move_to_end) goes unseen.
        self._guard(tx, table, GuardKind.LIST_LENGTH, entries)
        for key in entries:
            self._guard(tx, table, GuardKind.DICT_CONTAINS, (key, True))

    def _child(self, tx, value: Any, source) -> VariableTracker:
        return tx.wrap(value, source, by_structure=self.by_structure)

    # ---- attributes ----

    def store_attr(self, tx, name: str, value: VariableTracker) -> None:
        if self.source is None or name in self.module._parameters or name in self.module._modules:
            super().store_attr(tx, name, value)
        tx.output.side_effects.store_attr(self, self.module, name, value)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        """`module.name` as Python finds it: a class data descriptor, the instance __dict__, another
        class attribute, then Module.__getattr__ (_parameters, _buffers, _modules)."""
        pending = tx.output.side_effects.pending_attr(self.module, name)
        if pending is not None:
            return pending
        module, cls = self.module, type(self.module)
        source = self.source and AttrSource(self.source, name)
        if name == "__class__":
            return UserDefinedClassVariable(cls)
        static = class_attribute(cls, name)
        if static is not MISSING and is_data_descriptor(static):
            return self._class_attribute(tx, name, source)
        if static is MISSING:
            self._guard_class_lacks(tx, name)
        if name in module.__dict__:  # its guards read this __dict__ entry (see module_attribute_home)
            return self._child(tx, module.__dict__[name], source)
        self._guard_absent(tx, "__dict__", name)
        if static is not MISSING:
            return self._class_attribute(tx, name, source)
        table = module_attribute_home(module, name)
        if table is None:
            unimplemented(f"{cls.__name__} has no attribute '{name}' (or a __getattr__ of its own)")
        return self._table_entry(tx, table, name)

    def has_attribute(self, tx, name: str) -> bool:
        """`hasattr(module, name)`, answered in var_getattr's order with a guard on each fact used."""
        module = self.module
        if class_attribute(type(module), name) is not MISSING:
            return True
        self._guard_class_lacks(tx, name)
        present = name in module.__dict__
        self._guard(tx, "__dict__", GuardKind.DICT_CONTAINS, (name, present))
        if present:
            return True
        if class_attribute(type(module), "__getattr__") is not torch.nn.Module.__getattr__:
            unimplemented(f"hasattr on a {type(module).__name__} with a __getattr__ of its own")
        for table in MODULE_TABLES:
            present = name in getattr(module, table)
            self._guard(tx, table, GuardKind.DICT_CONTAINS, (name, present))
            if present:
                return True
        return False

    def _class_attribute(self, tx, name: str, source) -> VariableTracker:
        self._guard_class_attribute(tx, name)
        return lookup_class_attribute(tx, self, type(self.module), name, source)

    def _guard_class_attribute(self, tx, name: str) -> None:
        """Guard that the descriptor (method, property) found on the class stays the same object:
        a class patched later (`Mod.forward = ...`) is seen. Plain class values are guarded
        through the instance by the value's own guards."""
        cls = type(self.module)
        static = class_attribute(cls, name)
        if self.source is None or not hasattr(type(static), "__get__"):
            return
        source = AttrSource(AttrSource(self.source, "__class__"), name)
        value = getattr(cls, name)
        if isinstance(static, classmethod):  # each read binds anew: the function is what stays
            source, value = AttrSource(source, "__func__"), value.__func__
        tx.output.add_guard(Guard(source, GuardKind.ID_MATCH, value))

    def _table_entry(self, tx, table: str, name: str) -> VariableTracker:
        """`getattr(module, table)[name]`, known to be what `module.name` reads."""
        for earlier in MODULE_TABLES[:MODULE_TABLES.index(table)]:
            self._guard_absent(tx, earlier, name)
        value = getattr(self.module, table)[name]
        if table == "_modules" or value is None or self.by_structure:
            return self._child(tx, value, self.source and AttrSource(self.source, name))
        return tx.output.register_module_tensor(tx, self.module, name, value, self.source)

    # ---- calls ----

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        """`module(*args)`: the class's __call__; nn.Module's runs `self.forward` when there are no hooks."""
        call = class_attribute(type(self.module), "__call__")
        self._guard_class_attribute(tx, "__call__")
        if call is not torch.nn.Module.__call__ and getattr(call, "__code__", None) is not _GRAPH_MODULE_CALL:
            if not isinstance(call, types.FunctionType):
                unimplemented(f"{type(self.module).__name__}.__call__ is not a Python function")
            return UserMethodVariable(call, self).call_function(tx, args, kwargs)
        self._guard_no_hooks(tx)
        return self.var_getattr(tx, "forward").call_function(tx, args, kwargs)

    def _guard_no_hooks(self, tx) -> None:
        module = self.module
        hooks = [getattr(module, name) for name in _HOOK_DICTS] + [vars(module_impl)[name] for name in _GLOBAL_HOOK_DICTS]
        if any(hooks) or getattr(module, "_compiled_call_impl", None) is not None:
            unimplemented(f"calling {type(module).__name__} with hooks registered")
        if self.source is not None:  # read from the instance dict the other module guards read too
            instance_dict = AttrSource(self.source, "__dict__")
            for name in _HOOK_DICTS:
                tx.output.add_guard(Guard(GetItemSource(instance_dict, name), GuardKind.LIST_LENGTH, module.__dict__[name]))
        namespace = tx.output_globals_source(vars(module_impl), None)
        for name in _GLOBAL_HOOK_DICTS:
            tx.output.add_guard(Guard(GetItemSource(namespace, name), GuardKind.LIST_LENGTH, vars(module_impl)[name]))

    # ---- containers ----

    def has_unpack_var_sequence(self, tx) -> bool:
        return _is_torch_method(self.module, "__iter__", _CONTAINERS)

    def unpack_var_sequence(self, tx) -> List[VariableTracker]:
        if not self.has_unpack_var_sequence(tx):
            return iterate_object(tx, self, type(self.module))
        self._guard_keys(tx, "_modules")
        if isinstance(self.module, torch.nn.ModuleDict):
            return [ConstantVariable(k) for k in self.module._modules]
        return [self.getitem(tx, i) for i in range(len(self.module))]

    def getitem(self, tx, index: Any) -> VariableTracker:
        if isinstance(index, slice):
            if not isinstance(self.module, _LIST_CONTAINERS):
                unimplemented(f"slicing a {type(self.module).__name__}")
            items = self.unpack_var_sequence(tx)
            return SlicedContainerVariable(self, index, items[index])
        if isinstance(self.module, _LIST_CONTAINERS):  # an index names the entry at that position
            self._guard_keys(tx, "_modules")
        value = self.module[index]
        return self._child(tx, value, self.source and GetItemSource(self.source, index))

    def call_method(self, tx, name: str, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]):
        module = self.module
        if name == "__getitem__" and len(args) == 1 and _is_torch_method(module, name, _CONTAINERS):
            return self.getitem(tx, args[0].as_python_constant())
        if name == "__len__" and not args and _is_torch_method(module, name, _CONTAINERS):
            self._guard_keys(tx, "_modules")
            return ConstantVariable(len(module))
        if name in ("keys", "values", "items") and not args and _is_torch_method(module, name, (torch.nn.ModuleDict,)):
            self._guard_absent(tx, "__dict__", name)
            return self._dict_view(tx, name)
        if name in _TREE_METHODS and not args and not kwargs and _is_torch_method(module, name, (torch.nn.Module,)):
            self._guard_absent(tx, "__dict__", name)
            return ListIteratorVariable(_TREE_METHODS[name](self, tx))
        return super().call_method(tx, name, args, kwargs)

    def _dict_view(self, tx, name: str) -> VariableTracker:
        self._guard_keys(tx, "_modules")
        keys = list(self.module._modules)
        if name == "keys":
            return ListIteratorVariable([ConstantVariable(k) for k in keys])
        values = [self.getitem(tx, k) for k in keys]
        if name == "values":
            return ListIteratorVariable(values)
        return ListIteratorVariable([TupleVariable([ConstantVariable(k), v]) for k, v in zip(keys, values)])

    # ---- the module tree (children, modules, parameters, buffers) ----

    def _children(self, tx) -> List[Tuple[str, VariableTracker]]:
        """Every entry of `_modules` (None included), each read with its guards."""
        self._guard_keys(tx, "_modules")
        return [(name, self._entry_of(tx, "_modules", name)) for name in self.module._modules]

    def _unique_children(self, tx) -> List[Tuple[str, "NNModuleVariable"]]:
        """`named_children()`: each submodule once, under its first name."""
        unique: Dict[int, Tuple[str, NNModuleVariable]] = {}
        for name, child in self._children(tx):
            if isinstance(child, NNModuleVariable):
                unique.setdefault(id(child.module), (name, child))
        return list(unique.values())

    def _entry_of(self, tx, table: str, name: str) -> VariableTracker:
        if module_attribute_home(self.module, name) != table:
            unimplemented(f"{type(self.module).__name__}.{name} is shadowed by another attribute")
        self._guard_absent(tx, "__dict__", name)
        return self._table_entry(tx, table, name)

    def _named_modules(self, tx) -> List[Tuple[str, "NNModuleVariable"]]:
        """`named_modules()`: each module once, in torch's order; every path to it is read (and
        guarded), so a module shared today and not tomorrow is seen."""
        found: List[Tuple[str, NNModuleVariable]] = []
        seen = set()

        def visit(prefix: str, vt: NNModuleVariable) -> None:
            if id(vt.module) in seen:
                return
            seen.add(id(vt.module))
            found.append((prefix, vt))
            for name, child in vt._children(tx):
                if isinstance(child, NNModuleVariable):
                    visit(f"{prefix}.{name}" if prefix else name, child)

        visit("", self)
        return found

    def _named_tensors(self, tx, table: str) -> List[Tuple[str, VariableTracker]]:
        """`named_parameters()` / `named_buffers()`: each tensor once, every entry read and guarded."""
        found, seen = [], set()
        for prefix, vt in self._named_modules(tx):
            vt._guard_keys(tx, table)
            for name, value in getattr(vt.module, table).items():
                entry = vt._entry_of(tx, table, name)
                if value is None or id(value) in seen:
                    continue
                seen.add(id(value))
                found.append((f"{prefix}.{name}" if prefix else name, entry))
        return found


def _pairs(items: List[Tuple[str, VariableTracker]]) -> List[VariableTracker]:
    return [TupleVariable([ConstantVariable(name), vt]) for name, vt in items]


_TREE_METHODS = {
    "parameters": lambda vt, tx: [v for _, v in vt._named_tensors(tx, "_parameters")],
    "named_parameters": lambda vt, tx: _pairs(vt._named_tensors(tx, "_parameters")),
    "buffers": lambda vt, tx: [v for _, v in vt._named_tensors(tx, "_buffers")],
    "named_buffers": lambda vt, tx: _pairs(vt._named_tensors(tx, "_buffers")),
    "children": lambda vt, tx: [v for _, v in vt._unique_children(tx)],
    "named_children": lambda vt, tx: _pairs(vt._unique_children(tx)),
    "modules": lambda vt, tx: [v for _, v in vt._named_modules(tx)],
    "named_modules": lambda vt, tx: _pairs(vt._named_modules(tx)),
}


def is_new_each_call(vt: VariableTracker) -> bool:
    """Whether `vt` is a module or function that is another object on each call of the frame: made by
    generated code (a slice, a module constructed or a function defined in the frame) or known to be so."""
    if isinstance(vt, (NNModuleVariable, UserFunctionVariable)) and vt.by_structure:
        return True
    if isinstance(vt, NestedUserFunctionVariable):
        return True
    return isinstance(vt, NNModuleVariable) and vt.source is None and vt.has_identity


class SlicedContainerVariable(NNModuleVariable):
    """`container[a:b]` of a ModuleList or Sequential: a new container of the same entries. Its
    entries are the container's, read (and guarded) there; generated code slices again."""

    has_identity = True

    def __init__(self, container: NNModuleVariable, index: slice, items: List[VariableTracker]) -> None:
        super().__init__(container.module[index])
        self.container = container
        self.index = index
        self.items = items

    def subvalues(self) -> List[VariableTracker]:
        return [self.container, *self.items]

    def reconstruct(self, codegen) -> None:
        codegen.reconstruct(self.container)
        codegen.load_const(self.index)
        codegen.append("BINARY_SUBSCR")

    def var_getattr(self, tx, name: str) -> VariableTracker:
        value = self.module.__dict__.get(name)
        if value is not None and not isinstance(value, (bool, int, str)):  # its tables hold unguarded entries
            unimplemented(f"reading '{name}' of a sliced {type(self.module).__name__}")
        return super().var_getattr(tx, name)

    def unpack_var_sequence(self, tx) -> List[VariableTracker]:
        if not self.has_unpack_var_sequence(tx):
            return iterate_object(tx, self, type(self.module))
        return list(self.items)

    def getitem(self, tx, index: Any) -> VariableTracker:
        if isinstance(index, slice):
            return SlicedContainerVariable(self, index, self.items[index])
        return self.items[index]

    def _guard_keys(self, tx, table: str) -> None:
        pass  # its entries were read, with their guards, from the container it slices

    def _children(self, tx) -> List[Tuple[str, VariableTracker]]:
        return list(zip(self.module._modules, self.items))


class ConstructedModuleVariable(NNModuleVariable):
    """A torch.nn module made in the frame (`nn.ReLU()`), with no parameters or buffers of its own:
    made now to be traced through, and made again by generated code where the frame needs it."""

    has_identity = True

    def __init__(self, module: torch.nn.Module, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> None:
        super().__init__(module)
        self.args = args
        self.kwargs = kwargs

    def subvalues(self) -> List[VariableTracker]:
        return [*self.args, *self.kwargs.values()]

    def reconstruct(self, codegen) -> None:
        codegen.load_function(type(self.module))
        for arg in [*self.args, *self.kwargs.values()]:
            codegen.reconstruct(arg)
        codegen.call(len(self.args) + len(self.kwargs), tuple(self.kwargs))


def construct_module(tx, cls: type, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
    """`cls(*args, **kwargs)` for a torch.nn module class, on constants and modules."""
    if not cls.__module__.startswith("torch.nn.modules."):
        unimplemented(f"constructing {cls.__qualname__} inside a compiled region")
    values = [_construction_argument(cls, a) for a in args]
    named = {k: _construction_argument(cls, v) for k, v in kwargs.items()}
    before = {id(t) for v in [*values, *named.values()] if isinstance(v, torch.nn.Module)
              for t in [*v.parameters(), *v.buffers()]}
    try:
        module = cls(*values, **named)
    except Exception as e:
        unimplemented(f"{cls.__qualname__}() raised {type(e).__name__}: {e}")
    if any(id(t) not in before for t in [*module.parameters(), *module.buffers()]):
        unimplemented(f"constructing {cls.__qualname__} inside a compiled region (it makes parameters or buffers)")
    return ConstructedModuleVariable(module, args, kwargs)


def _construction_argument(cls: type, vt: VariableTracker) -> Any:
    if isinstance(vt, NNModuleVariable):
        return vt.module
    if vt.is_python_constant():
        return vt.as_python_constant()
    unimplemented(f"constructing {cls.__qualname__} from {vt.describe()} inside a compiled region")
