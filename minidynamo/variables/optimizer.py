"""torch.optim optimizers: the state an optimizer makes lazily is made while tracing, the update is traced."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch

from ..exc import unimplemented
from ..guards import Guard, GuardKind
from ..source import AttrSource, GetItemSource, KeyedBySourceItemSource, Source
from .base import VariableTracker
from .constant import ConstantVariable
from .dicts import ConstDictVariable
from .lists import ListVariable
from .user_defined import UserDefinedObjectVariable


class OptimizerVariable(UserDefinedObjectVariable):
    """A torch.optim.Optimizer reached from the frame. Its `_init_group` (which reads the parameters'
    gradients and creates missing state) runs for real while tracing, like torch's; what it read and
    what it made are then guarded, so that the traced update holds for every call the entry runs."""

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if self.source is not None and name == "_init_group" and hasattr(self.obj, "_init_group"):
            return InitGroupVariable(self)
        if self.source is not None and name == "state" and "state" not in type(self.obj).__dict__:
            return OptimizerStateVariable(self)
        return super().var_getattr(tx, name)

    def param_source(self, group_index: int, param_index: int) -> Source:
        group = GetItemSource(AttrSource(self.source, "param_groups"), group_index)
        return GetItemSource(GetItemSource(group, "params"), param_index)

    def find_param(self, tx, tensor: VariableTracker) -> Optional[Source]:
        """The source of the parameter `tensor` stands for, found among the groups' parameters."""
        for i, group in enumerate(self.obj.param_groups):
            for j, param in enumerate(group["params"]):
                if tx.output.graph_input_of(param) is tensor:
                    return self.param_source(i, j)
        return None


class OptimizerStateVariable(VariableTracker):
    """`optimizer.state`: a defaultdict keyed by parameters; `state[p]` for a parameter of a group."""

    def __init__(self, optimizer: OptimizerVariable) -> None:
        super().__init__(AttrSource(optimizer.source, "state"))
        self.optimizer = optimizer

    keyed_by_tensors = True

    def describe(self) -> str:
        return "optimizer state"

    def python_type(self) -> type:
        return type(self.optimizer.obj.state)

    def call_method(self, tx, name: str, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]):
        if name == "__getitem__" and len(args) == 1 and not kwargs:
            param_source = self.optimizer.find_param(tx, args[0])
            if param_source is not None:
                return param_state(tx, self.optimizer, param_source)
        unimplemented(f"optimizer.state.{name} on {', '.join(a.describe() for a in args)}")


def param_state(tx, optimizer: OptimizerVariable, param_source: Source) -> VariableTracker:
    """`optimizer.state[p]`, made if missing (it is a defaultdict), guarded by its keys; `p` by identity."""
    param = tx.output.source_value(param_source)
    tx.output.add_guard(Guard(param_source, GuardKind.ID_MATCH, param))
    state = optimizer.obj.state[param]
    if type(state) is not dict:
        unimplemented(f"optimizer state of type {type(state).__name__}")
    return tx.wrap(state, KeyedBySourceItemSource(AttrSource(optimizer.source, "state"), param_source))


class InitGroupVariable(VariableTracker):
    """`optimizer._init_group(group, *lists)`, called on the real optimizer while tracing; the lists
    the frame passed (empty, made in the frame) are filled with trackers of what it put in them."""

    def __init__(self, optimizer: OptimizerVariable) -> None:
        super().__init__()
        self.optimizer = optimizer

    def describe(self) -> str:
        return "optimizer._init_group"

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        opt = self.optimizer
        if kwargs or not args or not isinstance(args[0], ConstDictVariable):
            unimplemented("optimizer._init_group called with unusual arguments")
        index = next((i for i, g in enumerate(opt.obj.param_groups)
                      if tx.output.tracked_containers.get(id(g), (None, None))[1] is args[0]), None)
        lists = args[1:]
        if index is None or not all(isinstance(a, ListVariable) and a.source is None and not a.items for a in lists):
            unimplemented("optimizer._init_group called with unusual arguments")
        group = _group_as_traced(opt.obj.param_groups[index], args[0])
        sources = _guard_group(tx, opt, index, group)
        real_lists: List[list] = [[] for _ in lists]
        result = opt.obj._init_group(group, *real_lists)
        sources.update(_state_sources(tx, opt, index, group))
        for tracker, values in zip(lists, real_lists):
            tracker.items.extend(_wrap_made(tx, value, sources) for value in values)
        return tx.wrap_constant(result)


def _group_as_traced(group: Dict[str, Any], traced: ConstDictVariable) -> Dict[str, Any]:
    """The group as the trace sees it: constants the traced code has changed (a learning-rate
    schedule stepped earlier in the frame) read with their new values."""
    changed = {k: v.as_python_constant() for k, v in traced.items.items()
               if k != "params" and k in group and v.is_python_constant() and v.as_python_constant() != group[k]}
    return {**group, **changed} if changed else group


def _guard_group(tx, opt: OptimizerVariable, index: int, group: Dict[str, Any]) -> Dict[int, Source]:
    """Guards on what `_init_group` reads of a group: its settings, each parameter (by identity) and
    whether it has a gradient. The sources of the parameters and gradients, by id."""
    group_source = GetItemSource(AttrSource(opt.source, "param_groups"), index)
    for key, value in group.items():
        if key != "params":
            tx.wrap(value, GetItemSource(group_source, key))
    sources: Dict[int, Source] = {}
    for j, param in enumerate(group["params"]):
        param_source = opt.param_source(index, j)
        tx.output.add_guard(Guard(param_source, GuardKind.ID_MATCH, param))
        tx.wrap(param, param_source)
        sources[id(param)] = param_source
        grad_source = AttrSource(param_source, "grad")
        if param.grad is None:
            tx.output.add_guard(Guard(grad_source, GuardKind.EQUALS_MATCH, None))
        else:
            tx.wrap(param.grad, grad_source)
            sources[id(param.grad)] = grad_source
    return sources


def _state_sources(tx, opt: OptimizerVariable, index: int, group: Dict[str, Any]) -> Dict[int, Source]:
    """The sources of the state `_init_group` found or made for the group's parameters (guarded by
    the keys of each parameter's state), by id."""
    sources: Dict[int, Source] = {}
    for j, param in enumerate(group["params"]):
        if param not in opt.obj.state:
            continue
        param_source = opt.param_source(index, j)
        state_source = KeyedBySourceItemSource(AttrSource(opt.source, "state"), param_source)
        param_state(tx, opt, param_source)
        for key, value in opt.obj.state[param].items():
            sources.setdefault(id(value), GetItemSource(state_source, key))
    return sources


def _wrap_made(tx, value: Any, sources: Dict[int, Source]) -> VariableTracker:
    if value is None:
        return ConstantVariable(None)
    source = sources.get(id(value))
    if source is None:
        unimplemented(f"optimizer._init_group returned a {type(value).__name__} not found in the optimizer")
    return tx.wrap(value, source)


def is_optimizer(value: Any) -> bool:
    return isinstance(value, torch.optim.Optimizer)
