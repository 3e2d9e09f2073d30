"""nn.Module instances: attributes read in Python's lookup order with a guard on each fact the
lookup relied on; parameters and buffers become graph attributes; forward is inlined."""
from __future__ import annotations

import inspect
import types
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch.nn.modules import module as module_impl
from torch.nn.modules.lazy import LazyModuleMixin

from .. import config
from ..exc import ends_in_attribute_error, no_attribute, unimplemented
from ..guards import Guard, GuardKind
from ..module_lookup import MISSING, MODULE_TABLES, class_attribute, is_data_descriptor, module_attribute_home
from ..source import AttrSource, GetItemSource
from .base import VariableTracker
from .constant import ConstantVariable, is_none
from .dicts import ConstDictVariable, DictViewVariable
from .functions import NestedUserFunctionVariable, UserFunctionVariable, UserMethodVariable
from .lists import ListIteratorVariable, ListVariable, Rebuild, TupleVariable
from .user_defined import UserDefinedClassVariable, iterate_object, lookup_class_attribute

# The __call__ torch.fx gives each GraphModule class: nn.Module.__call__ with fx's traceback reporting.
_GRAPH_MODULE_CALL = next(c for c in torch.fx.GraphModule.recompile.__code__.co_consts
                          if isinstance(c, types.CodeType) and c.co_name == "call_wrapped")
_BACKWARD_HOOK_DICTS = ("_backward_hooks", "_backward_pre_hooks")
_GLOBAL_BACKWARD_HOOK_DICTS = ("_global_backward_hooks", "_global_backward_pre_hooks")
_CONTAINERS = (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ModuleDict)
_LIST_CONTAINERS = (torch.nn.ModuleList, torch.nn.Sequential)
_DICT_KEY_ITERATOR = type(iter({}))  # ModuleDict.__iter__: iter(self._modules)
_DICT_VALUE_ITERATOR = type(iter({}.values()))  # ModuleList's and Sequential's: iter(self._modules.values())


def _is_torch_method(module: torch.nn.Module, name: str, owners: Tuple[type, ...]) -> bool:
    """Whether `module.name` is the method `name` of one of `owners` (not overridden, not shadowed)."""
    found = class_attribute(type(module), name)
    return name not in module.__dict__ and any(found is owner.__dict__.get(name) for owner in owners)


# How Python finds a module's attributes: a class redefining one of these in Python keeps its identity
# guarded (see shares_entries).
_ATTRIBUTE_PROTOCOL = ("__getattribute__", "__getattr__", "__setattr__", "__delattr__")


def shares_entries(module: torch.nn.Module) -> bool:
    """Whether entries compiled for `module` may serve other instances of its class: the trace then
    guards its type and each fact it reads of it instead of its identity. Not a lazy module that has
    yet to make its parameters (its first call changes its class), nor one whose class finds or
    sets attributes its own way."""
    if not config.share_module_entries:
        return False
    if isinstance(module, LazyModuleMixin) and module.has_uninitialized_params():
        return False
    cls = type(module)
    return all(class_attribute(cls, name) is class_attribute(torch.nn.Module, name) for name in _ATTRIBUTE_PROTOCOL)


class NNModuleVariable(VariableTracker):
    """A module, guarded by its type and by each fact read of it (see shares_entries), or else by
    its identity; its parameters and buffers are graph inputs read from it on each call.
    `by_structure`: the module is a new object on each call (made by the frame before a graph
    break), and so are its submodules: never guarded by identity."""

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

    def truthy(self, tx) -> bool:
        """bool(module), as CPython's object truth: its class's __bool__, else __len__, else True."""
        for name in ("__bool__", "__len__"):
            if class_attribute(type(self.module), name) is not MISSING:
                return self.call_method(tx, name, [], {}).truthy(tx)
        self._guard_class_lacks(tx, "__bool__")
        self._guard_class_lacks(tx, "__len__")
        return True

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
        if class_attribute(type(self.module), "__setattr__") is not torch.nn.Module.__setattr__:
            self._call_own_method(tx, "__setattr__", [ConstantVariable(name), value])
            return
        self.store_table_attr(tx, name, value)

    def store_table_attr(self, tx, name: str, value: VariableTracker) -> None:
        """What Module.__setattr__ does, for the values it keeps in the instance dict."""
        if self.source is None or name in self.module._parameters or name in self.module._modules:
            super().store_attr(tx, name, value)
        own_setattr = class_attribute(type(self.module), "__setattr__") is not torch.nn.Module.__setattr__
        tx.output.side_effects.store_attr(self, self.module, name, value,
                                          torch.nn.Module.__setattr__ if own_setattr else None)

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
        if name == "__dict__":
            return InstanceDictVariable(self)
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
        own_getattr = class_attribute(cls, "__getattr__")
        if own_getattr is not torch.nn.Module.__getattr__:
            return self._call_own_method(tx, "__getattr__", [ConstantVariable(name)])
        return self.table_attribute(tx, name)

    def table_attribute(self, tx, name: str) -> VariableTracker:
        """What Module.__getattr__ answers: the entry of the first of its tables holding `name`."""
        for table in MODULE_TABLES:
            if name in self.module.__dict__.get(table, ()):
                return self._table_entry(tx, table, name)
        for table in MODULE_TABLES:
            self._guard_absent(tx, table, name)
        no_attribute(type(self.module), name)  # Module.__getattr__'s AttributeError, raised in the trace

    def _call_own_method(self, tx, name: str, args: List[VariableTracker]) -> VariableTracker:
        """The class's own `__getattr__` / `__setattr__`, inlined (a call of Module's version in it
        comes back to table_attribute / store_table_attr)."""
        method = class_attribute(type(self.module), name)
        if not isinstance(method, types.FunctionType):
            unimplemented(f"{type(self.module).__name__}.{name} is not a Python function")
        self._guard_class_attribute(tx, name)
        return UserMethodVariable(method, self).call_function(tx, args, {})

    def call_module_method(self, tx, fn: Any, args: List[VariableTracker]) -> Optional[VariableTracker]:
        """`torch.nn.Module.<fn>(this module, *args)` called by a method of its class, answered here."""
        if fn is torch.nn.Module.__getattr__ and len(args) == 1:
            return self.table_attribute(tx, args[0].as_python_constant())
        if fn is torch.nn.Module.__setattr__ and len(args) == 2:
            self.store_table_attr(tx, args[0].as_python_constant(), args[1])
            return ConstantVariable(None)
        return None

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
            return not ends_in_attribute_error(lambda: self._call_own_method(tx, "__getattr__", [ConstantVariable(name)]))
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
        source = self.source and AttrSource(self.source, name)
        if source is not None and module_attribute_home(self.module, name) != table:
            # `module.name` would run the class's own __getattr__: guards and generated code read the entry
            source = GetItemSource(AttrSource(self.source, table), name)
        elif table != "_modules" and value is not None:
            return tx.output.register_module_tensor(tx, self.module, name, value, self.source)
        return self._child(tx, value, source)

    # ---- calls ----

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        """`module(*args)`: the class's __call__; nn.Module's runs `self.forward` when there are no hooks."""
        if isinstance(self.module, LazyModuleMixin) and self.module.has_uninitialized_params():
            self._initialize_lazy(args, kwargs)
        call = class_attribute(type(self.module), "__call__")
        self._guard_class_attribute(tx, "__call__")
        if call is not torch.nn.Module.__call__ and getattr(call, "__code__", None) is not _GRAPH_MODULE_CALL:
            if not isinstance(call, types.FunctionType):
                unimplemented(f"{type(self.module).__name__}.__call__ is not a Python function")
            return UserMethodVariable(call, self).call_function(tx, args, kwargs)
        self._guard_no_backward_hooks(tx)
        pre_hooks = self._hooks_to_run(tx, "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", None)
        hooks = self._hooks_to_run(tx, "_forward_hooks", "_forward_hooks_with_kwargs", "_global_forward_hooks_with_kwargs")
        for hook, with_kwargs in pre_hooks:
            args, kwargs = self._run_pre_hook(tx, hook, with_kwargs, args, kwargs)
        result = self.var_getattr(tx, "forward").call_function(tx, args, kwargs)
        for hook, with_kwargs in hooks:
            extra = [ConstDictVariable(dict(kwargs))] if with_kwargs else []
            hook_result = hook.call_function(tx, [self, TupleVariable(list(args)), *extra, result], {})
            if not is_none(hook_result):
                result = hook_result
        return result

    def _initialize_lazy(self, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> None:
        """A lazy module's first call makes its parameters from the arguments' shapes (and becomes
        its final class), as its pre-hook does in eager: done now, so the call is traced as a module's."""
        def example(vt: VariableTracker) -> Any:
            return vt.example if hasattr(vt, "example") else vt.as_python_constant()

        self.module._infer_parameters(self.module, tuple(map(example, args)), {k: example(v) for k, v in kwargs.items()})

    def _run_pre_hook(self, tx, hook: VariableTracker, with_kwargs: bool, args: List[VariableTracker],
                      kwargs: Dict[str, VariableTracker]) -> Tuple[List[VariableTracker], Dict[str, VariableTracker]]:
        """A forward pre-hook, as Module.__call__ runs it: its result, if not None, replaces the arguments."""
        if with_kwargs:
            result = hook.call_function(tx, [self, TupleVariable(list(args)), ConstDictVariable(dict(kwargs))], {})
            if is_none(result):
                return args, kwargs
            pair = result.unpack_var_sequence(tx) if issubclass(result.python_type(), tuple) else []
            if len(pair) != 2 or not isinstance(pair[1], ConstDictVariable):
                unimplemented("a forward pre-hook returned something other than None or (args, kwargs)")
            return pair[0].unpack_var_sequence(tx), {k: v for k, v in pair[1].items.items()}
        result = hook.call_function(tx, [self, TupleVariable(list(args))], {})
        if is_none(result):
            return args, kwargs
        return (result.unpack_var_sequence(tx) if issubclass(result.python_type(), tuple) else [result]), kwargs

    def _guard_no_backward_hooks(self, tx) -> None:
        module = self.module
        if any(getattr(module, name) for name in _BACKWARD_HOOK_DICTS) or any(
                vars(module_impl)[name] for name in _GLOBAL_BACKWARD_HOOK_DICTS) or getattr(
                module, "_compiled_call_impl", None) is not None:
            unimplemented(f"calling {type(module).__name__} with backward hooks registered")
        if self.source is not None:  # read from the instance dict the other module guards read too
            for name in _BACKWARD_HOOK_DICTS:
                self._guard_hook_table(tx, self._instance_dict_entry(name), module.__dict__[name])
        for name in _GLOBAL_BACKWARD_HOOK_DICTS:
            self._guard_hook_table(tx, self._hooks_namespace_entry(tx, name), vars(module_impl)[name])

    def _instance_dict_entry(self, name: str):
        return self.source and GetItemSource(AttrSource(self.source, "__dict__"), name)

    @staticmethod
    def _hooks_namespace_entry(tx, name: str):
        return GetItemSource(tx.output_globals_source(vars(module_impl), None), name)

    @staticmethod
    def _guard_hook_table(tx, source, table: Dict[int, Any]) -> None:
        """Which hooks a table holds: its length and each key (a hook removed and added again has a new key)."""
        if source is None:
            return
        tx.output.add_guard(Guard(source, GuardKind.LIST_LENGTH, table))
        for key in table:
            tx.output.add_guard(Guard(source, GuardKind.DICT_CONTAINS, (key, True)))

    def _hooks_to_run(self, tx, table: str, with_kwargs: str,
                       global_with_kwargs: Optional[str]) -> List[Tuple[VariableTracker, bool]]:
        """The global then the module's hooks of `table`, in the order Module.__call__ runs them, each
        with whether it takes the keyword arguments; every table read is guarded."""
        global_table = "_global" + table
        sources = [(self._hooks_namespace_entry(tx, global_table), vars(module_impl)[global_table])]
        if self.source is not None or not self.module.__dict__[table]:
            sources.append((self._instance_dict_entry(table), self.module.__dict__[table]))
        else:
            unimplemented(f"calling a {type(self.module).__name__} made while tracing that has hooks")
        kwargs_tables = [(self._instance_dict_entry(with_kwargs), self.module.__dict__[with_kwargs])]
        if global_with_kwargs is not None:
            kwargs_tables.append((self._hooks_namespace_entry(tx, global_with_kwargs), vars(module_impl)[global_with_kwargs]))
        found = []
        for source, hooks in sources:
            self._guard_hook_table(tx, source, hooks)
            for key, hook in hooks.items():
                takes_kwargs = False
                for kw_source, kw_table in kwargs_tables:
                    present = key in kw_table
                    if kw_source is not None:
                        tx.output.add_guard(Guard(kw_source, GuardKind.DICT_CONTAINS, (key, present)))
                    takes_kwargs |= present
                found.append((tx.wrap(hook, source and GetItemSource(source, key)), takes_kwargs))
        return found

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

    def python_iterator(self, tx) -> Optional[ListIteratorVariable]:
        """iter() of a container whose __iter__ is torch's: its entries now (their keys guarded), of
        the type torch's __iter__ gives (an iterator over `_modules`' values, or its keys for a
        ModuleDict), so generated code makes it again as iter(module), moved on. None (a snapshot,
        which cannot leave the trace) where generated code would not get this very module back."""
        if not self.has_unpack_var_sequence(tx) or not self._reads_back():
            return None
        items = self.unpack_var_sequence(tx)
        iter_type = _DICT_KEY_ITERATOR if isinstance(self.module, torch.nn.ModuleDict) else _DICT_VALUE_ITERATOR
        return ListIteratorVariable(items, iter_type=iter_type, rebuild=Rebuild(iter, [self]))

    def _reads_back(self) -> bool:
        """Whether generated code gets this very module back: read from its source, or a slice of one."""
        if isinstance(self, SlicedContainerVariable):
            return self.container._reads_back()
        return self.source is not None

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
            return self.getitem(tx, args[0].exact_value())
        if name == "__len__" and not args and _is_torch_method(module, name, _CONTAINERS):
            self._guard_keys(tx, "_modules")
            return ConstantVariable(len(module))
        if name in ("keys", "values", "items") and not args and _is_torch_method(module, name, (torch.nn.ModuleDict,)):
            self._guard_absent(tx, "__dict__", name)
            return self._dict_view(tx, name)
        if name in _TREE_METHODS and _is_torch_method(module, name, (torch.nn.Module,)):
            arguments = _tree_arguments(name, args, kwargs)
            self._guard_absent(tx, "__dict__", name)
            # a generator over the tree, which generated code makes again (and moves on) if it must
            rebuild = Rebuild(getattr(type(module), name), [self, *args], dict(kwargs))
            return ListIteratorVariable(_TREE_METHODS[name](self, tx, arguments), iter_type=types.GeneratorType,
                                        rebuild=rebuild)
        return super().call_method(tx, name, args, kwargs)

    def _dict_view(self, tx, name: str) -> VariableTracker:
        """`module_dict.keys()` (values, items): a view of its `_modules`, as torch's is (`in`, len,
        iteration); the submodules are read only for values and items."""
        self._guard_keys(tx, "_modules")
        keys = list(self.module._modules)
        entries = {k: ConstantVariable(None) if name == "keys" else self.getitem(tx, k) for k in keys}
        return DictViewVariable(ConstDictVariable(entries), name)

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
        _guard_distinct(tx, [child for _, child in unique.values()])
        return list(unique.values())

    def _entry_of(self, tx, table: str, name: str) -> VariableTracker:
        """`getattr(module, table)[name]`, as torch's tree walks read it (the table's keys are guarded)."""
        if module_attribute_home(self.module, name) != table:  # `module.name` is something else
            value = getattr(self.module, table)[name]
            return self._child(tx, value, self.source and GetItemSource(AttrSource(self.source, table), name))
        self._guard_absent(tx, "__dict__", name)
        return self._table_entry(tx, table, name)

    def _named_modules(self, tx, prefix: str = "", remove_duplicate: bool = True) -> List[Tuple[str, "NNModuleVariable"]]:
        """`named_modules()`: each module once (unless `remove_duplicate` is off), in torch's order;
        every path to it is read (and guarded), so a module shared today and not tomorrow is seen."""
        found: List[Tuple[str, NNModuleVariable]] = []
        seen = set()

        def visit(path: str, vt: NNModuleVariable) -> None:
            if id(vt.module) in seen:
                return
            if remove_duplicate:
                seen.add(id(vt.module))
            found.append((path, vt))
            for name, child in vt._children(tx):
                if isinstance(child, NNModuleVariable):
                    visit(f"{path}.{name}" if path else name, child)

        visit(prefix, self)
        return found

    def _distinct_named_modules(self, tx, prefix: str = "", remove_duplicate: bool = True
                                ) -> List[Tuple[str, "NNModuleVariable"]]:
        """`named_modules()` as the trace answers it, each module guarded to stay another object than
        the others it counted. (The parameters and buffers of modules need not be: their tensors
        are guarded distinct, and a module owning none adds none.)"""
        found = self._named_modules(tx, prefix, remove_duplicate)
        if remove_duplicate:
            _guard_distinct(tx, [vt for _, vt in found])
        return found

    def _named_tensors(self, tx, table: str, prefix: str = "", recurse: bool = True,
                       remove_duplicate: bool = True) -> List[Tuple[str, VariableTracker]]:
        """`named_parameters()` / `named_buffers()`: each tensor once (unless `remove_duplicate` is
        off), every entry read and guarded."""
        found, seen = [], set()
        modules = self._named_modules(tx, prefix, remove_duplicate) if recurse else [(prefix, self)]
        for module_prefix, vt in modules:
            vt._guard_keys(tx, table)
            for name, value in getattr(vt.module, table).items():
                entry = vt._entry_of(tx, table, name)
                if value is None or id(value) in seen:
                    continue
                if remove_duplicate:
                    seen.add(id(value))
                found.append((f"{module_prefix}.{name}" if module_prefix else name, entry))
        return found


def _guard_distinct(tx, modules: List[NNModuleVariable]) -> None:
    """The trace counted these modules once each (the same module reached twice is one tracker, its
    sources guarded to stay aliases): guard that each stays another object than the others of its
    class, which a module guarded by type and not identity need not be."""
    seen: Dict[type, List[NNModuleVariable]] = {}
    for vt in modules:
        if vt.source is None:
            continue
        for other in seen.setdefault(type(vt.module), []):
            tx.output.add_guard(Guard(vt.source, GuardKind.DISTINCT_FROM, other.source))
        seen[type(vt.module)].append(vt)


def _pairs(items: List[Tuple[str, VariableTracker]]) -> List[VariableTracker]:
    return [TupleVariable([ConstantVariable(name), vt]) for name, vt in items]


# Module's tree methods, each given its arguments bound to the method's signature (see _tree_arguments).
_TREE_METHODS = {
    "parameters": lambda vt, tx, a: [v for _, v in vt._named_tensors(tx, "_parameters", "", a["recurse"])],
    "named_parameters": lambda vt, tx, a: _pairs(vt._named_tensors(tx, "_parameters", a["prefix"], a["recurse"],
                                                                    a["remove_duplicate"])),
    "buffers": lambda vt, tx, a: [v for _, v in vt._named_tensors(tx, "_buffers", "", a["recurse"])],
    "named_buffers": lambda vt, tx, a: _pairs(vt._named_tensors(tx, "_buffers", a["prefix"], a["recurse"],
                                                                 a["remove_duplicate"])),
    "children": lambda vt, tx, a: [v for _, v in vt._unique_children(tx)],
    "named_children": lambda vt, tx, a: _pairs(vt._unique_children(tx)),
    "modules": lambda vt, tx, a: [v for _, v in vt._distinct_named_modules(tx)],
    "named_modules": lambda vt, tx, a: _pairs(vt._distinct_named_modules(tx, a["prefix"], a["remove_duplicate"])),
}


def _tree_arguments(name: str, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> Dict[str, Any]:
    """The arguments of a call of Module.`name`, bound to its signature with its defaults (constants only)."""
    try:
        bound = inspect.signature(getattr(torch.nn.Module, name)).bind(
            None, *[a.as_python_constant() for a in args], **{k: v.as_python_constant() for k, v in kwargs.items()})
    except TypeError as e:  # eager raises it
        unimplemented(f"{name}(): {e}")
    bound.apply_defaults()
    if bound.arguments.get("memo") is not None:
        unimplemented(f"{name}() with a memo set")
    return bound.arguments


def is_new_each_call(vt: VariableTracker) -> bool:
    """Whether `vt` is a module or function that is another object on each call of the frame: made by
    generated code (a slice, a module constructed or a function defined in the frame) or known to be so."""
    if isinstance(vt, NNModuleVariable) and vt.by_structure:
        return True
    if isinstance(vt, UserFunctionVariable) and vt.new_each_call:
        return True
    if isinstance(vt, NestedUserFunctionVariable):
        return True
    if type(vt) in (ListVariable, TupleVariable) and vt.source is None:  # built anew, with what it holds
        return any(is_new_each_call(item) for item in vt.items)
    if type(vt) is ConstDictVariable and vt.user_cls is dict and vt.source is None:
        return any(is_new_each_call(item) for item in vt.items.values())
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
        codegen.subscript()

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
        self.passed = {id(vt.module): vt for vt in _module_trackers([*args, *kwargs.values()])}

    def _child(self, tx, value: Any, source) -> VariableTracker:
        """A module it was given is the tracker it was given (its source and guards)."""
        return self.passed.get(id(value)) or super()._child(tx, value, source)

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
    before = {id(t) for m in _modules_in([*values, *named.values()]) for t in [*m.parameters(), *m.buffers()]}
    try:
        with torch.random.fork_rng(devices=[]):  # a constructor that makes parameters draws them (and breaks)
            module = cls(*values, **named)
    except Exception as e:
        unimplemented(f"{cls.__qualname__}() raised {type(e).__name__}: {e}")
    if any(id(t) not in before for t in [*module.parameters(), *module.buffers()]):
        unimplemented(f"constructing {cls.__qualname__} inside a compiled region (it makes parameters or buffers)")
    return ConstructedModuleVariable(module, args, kwargs)


def _module_trackers(values: List[VariableTracker]) -> List[NNModuleVariable]:
    found = []
    for vt in values:
        if isinstance(vt, NNModuleVariable):
            found.append(vt)
        elif type(vt) in (ListVariable, TupleVariable):
            found.extend(_module_trackers(vt.items))
        elif type(vt) is ConstDictVariable:
            found.extend(_module_trackers(list(vt.items.values())))
    return found


def _modules_in(values: List[Any]) -> List[torch.nn.Module]:
    found = []
    for value in values:
        if isinstance(value, torch.nn.Module):
            found.append(value)
        elif type(value) in (list, tuple, dict):
            found.extend(_modules_in(list(value.values() if type(value) is dict else value)))
    return found


def _construction_argument(cls: type, vt: VariableTracker) -> Any:
    if isinstance(vt, NNModuleVariable):
        return vt.module
    if type(vt) in (ListVariable, TupleVariable):  # nn.ModuleList([...]), nn.Sequential(*[...])
        return vt.python_type()(_construction_argument(cls, item) for item in vt.items)
    if type(vt) is ConstDictVariable and vt.user_cls is dict:  # nn.ModuleDict({...})
        return {key: _construction_argument(cls, item) for key, item in vt.items.items()}
    if vt.is_python_constant():
        return vt.as_python_constant()
    unimplemented(f"constructing {cls.__qualname__} from {vt.describe()} inside a compiled region")


class InstanceDictVariable(VariableTracker):
    """`module.__dict__`, read entry by entry (each read guarded) by a class's own __getattr__."""

    def __init__(self, owner: NNModuleVariable) -> None:
        super().__init__(owner.source and AttrSource(owner.source, "__dict__"))
        self.owner = owner

    def python_type(self) -> type:
        return dict

    def _has(self, tx, key: Any) -> bool:
        present = key in self.owner.module.__dict__
        self.owner._guard(tx, "__dict__", GuardKind.DICT_CONTAINS, (key, present))
        return present

    def call_method(self, tx, name: str, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]):
        keys = [a.as_python_constant() for a in args]
        if name == "__contains__" and len(keys) == 1 and not kwargs:
            return ConstantVariable(self._has(tx, keys[0]))
        if name in ("__getitem__", "get") and keys and not kwargs:
            if keys[0] in MODULE_TABLES or keys[0] in _BACKWARD_HOOK_DICTS:
                unimplemented(f"reading the module's table {keys[0]} through its __dict__")
            if self._has(tx, keys[0]):
                value = self.owner.module.__dict__[keys[0]]
                return self.owner._child(tx, value, self.source and GetItemSource(self.source, keys[0]))
            if name == "get":
                return args[1] if len(args) > 1 else ConstantVariable(None)
            unimplemented(f"KeyError: {keys[0]!r} not in the module's __dict__")
        unimplemented(f"{name} of a module's __dict__")
