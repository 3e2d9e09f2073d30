"""OutputGraph: the fx.Graph being recorded for one frame, its inputs, guards and compilation."""
from __future__ import annotations

import operator
import re
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode

from . import eval_frame
from .bytecode_transformation import assemble, frame_prologue
from .pycodegen import PyCodegen
from .side_effects import SideEffects
from .exc import BackendCompilerFailed, unimplemented
from .guards import Guard, GuardKind
from .source import AttrSource, Source
from .variables.base import VariableTracker
from .variables.constant import ConstantVariable, is_constant_value
from .variables.dicts import ConstDictVariable
from .variables.lists import BaseListVariable, ListVariable, NamedTupleVariable, TupleVariable
from .variables.tensor import TensorVariable

_CALL_OPS = ("call_function", "call_method", "call_module")


@dataclass
class GraphArg:
    source: Source
    example: torch.Tensor
    node: torch.fx.Node


@dataclass
class CompiledGraph:
    graph_module: torch.fx.GraphModule
    compile_seconds: float


@dataclass
class OutputGraph:
    code: types.CodeType
    f_globals: Dict[str, Any]
    compiler_fn: Callable
    graph: torch.fx.Graph = field(default_factory=torch.fx.Graph)
    guards: Dict[Tuple[str, GuardKind], Guard] = field(default_factory=dict)
    graphargs: List[GraphArg] = field(default_factory=list)
    compiled: List[CompiledGraph] = field(default_factory=list)
    # names of ModuleGlobalsSource scopes -> the globals dicts they stand for
    namespaces: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    break_reasons: List[Any] = field(default_factory=list)
    dynamic: Optional[bool] = None  # see optimize(dynamic=...)
    frame_state: Dict[str, Any] = field(default_factory=dict)  # shared by the compiles of one code object

    def __post_init__(self) -> None:
        self.root = torch.nn.Module()
        self.fake_mode = FakeTensorMode()
        self._inputs_by_source: Dict[str, TensorVariable] = {}
        self._inputs_by_id: Dict[int, TensorVariable] = {}
        self._module_keys: Dict[int, str] = {}
        self.side_effects = SideEffects()
        self.initial_grad_mode = torch.is_grad_enabled()

    # ---- guards and inputs ----

    def add_guard(self, guard: Guard) -> None:
        self.guards.setdefault((guard.name, guard.kind), guard)

    def to_fake(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.fake_mode.from_tensor(tensor, static_shapes=True)

    def add_graph_input(self, tx, source: Source, value: torch.Tensor) -> TensorVariable:
        known = self._inputs_by_source.get(source.name())
        if known is not None:
            return known
        alias = self._inputs_by_id.get(id(value))
        if alias is not None:  # the same tensor reached twice: one input, and a guard that it stays so
            self.add_guard(Guard(source, GuardKind.ALIAS_OF, alias.source))
            self._inputs_by_source[source.name()] = alias
            return alias
        self.add_guard(Guard(source, GuardKind.TENSOR_MATCH, value))
        first_op = next((n for n in self.graph.nodes if n.op != "placeholder"), None)
        if first_op is None:  # inserting_before(None) would insert at the front
            node = self.graph.placeholder(_node_name(source.name()))
        else:
            with self.graph.inserting_before(first_op):
                node = self.graph.placeholder(_node_name(source.name()))
        self.graphargs.append(GraphArg(source, value, node))
        variable = TensorVariable(node, self.to_fake(value), source)
        self._inputs_by_source[source.name()] = variable
        self._inputs_by_id[id(value)] = variable
        return variable

    def register_module_tensor(
        self, tx, module: torch.nn.Module, attr: str, tensor: torch.Tensor, module_source: Optional[Source]
    ) -> TensorVariable:
        """A parameter or buffer, read in the graph through the module that owns it."""
        key = self._module_keys.get(id(module))
        if key is None:
            key = f"m{len(self._module_keys)}_{_node_name(type(module).__name__)}"
            self._module_keys[id(module)] = key
            self.root.add_module(key, module)
        node = self.graph.get_attr(f"{key}.{attr}")
        return TensorVariable(node, self.to_fake(tensor), module_source and AttrSource(module_source, attr))

    # ---- recording ops ----

    def create_node(self, op: str, target: Any, args: tuple, kwargs: dict) -> torch.fx.Node:
        return self.graph.create_node(op, target, args, kwargs)

    def call_graph_op(
        self, tx, op: str, target: Any, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]
    ) -> VariableTracker:
        """Record `target(*args, **kwargs)` (op "call_function") or `args[0].target(...)` ("call_method")."""
        node_args, node_kwargs = _as_node_arg(tuple(args)), _as_node_arg(kwargs)
        fake_args, fake_kwargs = _as_example(tuple(args)), _as_example(kwargs)
        try:
            with self.fake_mode:
                if op == "call_method":
                    example = getattr(fake_args[0], target)(*fake_args[1:], **fake_kwargs)
                else:
                    example = target(*fake_args, **fake_kwargs)
        except Exception as e:  # what eager would raise is raised again when the frame runs eagerly
            name = target if isinstance(target, str) else getattr(target, "__name__", repr(target))
            unimplemented(f"{name}() cannot be traced: {type(e).__name__}: {e}")
        if is_constant_value(example) and example is not None:
            return ConstantVariable(example)
        node = self.create_node(op, target, node_args, node_kwargs)
        return self._wrap_result(node, example)

    def _wrap_result(self, node: torch.fx.Node, example: Any) -> VariableTracker:
        if isinstance(example, torch.Tensor):
            return TensorVariable(node, example)
        if example is None:
            return ConstantVariable(None)
        if isinstance(example, (tuple, list)):
            items: List[VariableTracker] = []
            for i, item in enumerate(example):
                if isinstance(item, torch.Tensor):
                    items.append(TensorVariable(self.create_node("call_function", operator.getitem, (node, i), {}), item))
                elif is_constant_value(item):
                    items.append(ConstantVariable(item))
                else:
                    unimplemented(f"an op returning a {type(item).__name__} inside a sequence")
            if type(example) is list:
                return ListVariable(items)
            if type(example) is tuple:
                return TupleVariable(items)
            return NamedTupleVariable(items, type(example))
        unimplemented(f"an op returning {type(example).__name__}")

    # ---- compilation ----

    def has_ops(self) -> bool:
        return any(n.op in _CALL_OPS for n in self.graph.nodes)

    def compile_and_return(self, tx, value: VariableTracker) -> types.CodeType:
        """Generated code: call the compiled graph, then build `value` from its outputs and return it."""
        codegen = self.codegen_graph_and_side_effects([value])
        codegen.reconstruct(value)
        codegen.append("RETURN_VALUE")
        return assemble(frame_prologue(self.code) + codegen.instructions, like=self.code)

    def codegen_graph_and_side_effects(self, live_values: List[VariableTracker]) -> PyCodegen:
        """Code that runs the compiled graph (keeping the outputs `live_values` need) and then
        replays the recorded side effects."""
        codegen = PyCodegen(self.code)
        outputs = _graph_outputs([*live_values, *self.side_effects.values()])
        if outputs or self.has_ops():
            self.add_guard(Guard(None, GuardKind.GRAD_MODE, self.initial_grad_mode))
            self.call_compiled_graph(codegen, outputs)
        self.side_effects.codegen(codegen)
        return codegen

    def call_compiled_graph(self, codegen: PyCodegen, outputs: List[TensorVariable]) -> None:
        self.graph.output(tuple(t.node for t in outputs))
        graph_module = torch.fx.GraphModule(self.root, self.graph, class_name="GraphModule")
        start = time.perf_counter()
        try:
            compiled = self.compiler_fn(graph_module, [arg.example for arg in self.graphargs])
        except Exception as e:
            raise BackendCompilerFailed(getattr(self.compiler_fn, "__name__", repr(self.compiler_fn)), e) from e
        self.compiled.append(CompiledGraph(graph_module, time.perf_counter() - start))
        codegen.load_function(eval_frame.disable(compiled))
        for arg in self.graphargs:
            arg.source.reconstruct(codegen)
        codegen.call(len(self.graphargs))
        codegen.graph_output_var = "___graph_out"
        codegen.append("STORE_FAST", codegen.graph_output_var)
        codegen.graph_outputs = {t.node: i for i, t in enumerate(outputs)}


def _node_name(text: str) -> str:
    name = re.sub(r"[^0-9a-zA-Z_]+", "_", text).strip("_")
    name = name.lower()
    return name if name and not name[0].isdigit() else f"_{name}"


def _as_node_arg(value: Any) -> Any:
    if isinstance(value, TensorVariable):
        return value.node
    if isinstance(value, VariableTracker):
        if isinstance(value, BaseListVariable):
            items = [_as_node_arg(v) for v in value.items]
            return items if value.python_cls is list else tuple(items)
        if isinstance(value, ConstDictVariable):
            return {k: _as_node_arg(v) for k, v in value.items.items()}
        if value.is_python_constant():
            return value.as_python_constant()
        unimplemented(f"passing {value.describe()} to a tensor operation")
    if isinstance(value, tuple):
        return tuple(_as_node_arg(v) for v in value)
    if isinstance(value, dict):
        return {k: _as_node_arg(v) for k, v in value.items()}
    return value


def _as_example(value: Any) -> Any:
    if isinstance(value, TensorVariable):
        return value.example
    if isinstance(value, BaseListVariable):
        items = [_as_example(v) for v in value.items]
        return items if value.python_cls is list else tuple(items)
    if isinstance(value, ConstDictVariable):
        return {k: _as_example(v) for k, v in value.items.items()}
    if isinstance(value, VariableTracker):
        return value.as_python_constant()
    if isinstance(value, tuple):
        return tuple(_as_example(v) for v in value)
    if isinstance(value, dict):
        return {k: _as_example(v) for k, v in value.items()}
    return value


def _graph_outputs(values: List[VariableTracker]) -> List[TensorVariable]:
    """Tensors in returned or stored values that the graph must produce (inputs and parameters
    are reloaded from their sources)."""
    found: Dict[torch.fx.Node, TensorVariable] = {}

    def visit(v: VariableTracker) -> None:
        if isinstance(v, TensorVariable):
            if not (v.source is not None and v.node.op in ("placeholder", "get_attr")):
                found.setdefault(v.node, v)
        elif isinstance(v, BaseListVariable):
            for item in v.items:
                visit(item)
        elif isinstance(v, ConstDictVariable):
            for item in v.items.values():
                visit(item)
        else:
            for item in getattr(v, "attrs", {}).values():
                visit(item)

    for value in values:
        visit(value)
    return list(found.values())
