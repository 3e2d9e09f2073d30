"""OutputGraph: the fx.Graph being recorded for one frame, its inputs, guards and compilation."""
from __future__ import annotations

import enum
import keyword
import operator
import re
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, Union

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic

from . import _C
from .dynamic_shapes import (
    ShapeEnvSource,
    SizeSource,
    SymbolicInput,
    dynamic_dims,
    dynamic_scalar,
    guard_scope,
    has_compiled,
    is_marked,
    new_shape_env,
    remember_scalars,
    remember_sizes,
    shape_guards,
    symbolic_context,
)
from .backends.registry import backend_name
from .backends.ddp_split import compile_for_ddp
from .side_effects import SideEffects
from .exc import BackendCompilerFailed, unimplemented
from .guards import Guard, GuardKind, capture_global_state
from .module_lookup import direct_source
from .source import AttrSource, ModuleGlobalsSource, Source, read_value
from .variables.base import VariableTracker
from .variables.constant import ConstantVariable, is_constant_value
from .variables.dicts import ConstDictVariable
from .variables.lists import BaseListVariable, ListVariable, TupleVariable
from .variables.named_tuple import NamedTupleVariable
from .variables.sym import SYM_TYPES, SliceVariable, SymNodeVariable, specialized_value
from .variables.tensor import TensorVariable, may_write_in_place

_CALL_OPS = ("call_function", "call_method", "call_module")


def keywords_caller(fn: Callable) -> Callable:
    """`fn` as a graph op taking its keywords as a dict: for names that are no Python identifiers
    (`from`), which the graph's code could not spell as keywords."""
    def call(args: tuple, kwargs: Dict[str, Any]) -> Any:
        return fn(*args, **kwargs)
    call.__name__ = call.__qualname__ = f"{getattr(fn, '__name__', 'op')}_with_keywords"
    return call


def _is_argument_name(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


class _TraceFakeMode(FakeTensorMode):
    """The fake mode of a trace, noting whether an op run under it draws random numbers: any aten op
    tagged `nondeterministic_seeded` (`rand`, `uniform_`, dropout's `bernoulli_`), however reached."""

    drew_random = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if torch.Tag.nondeterministic_seeded in func.tags:
            self.drew_random = True
        return super().__torch_dispatch__(func, types, args, kwargs or {})


def _share_fake_rules(mode_type: type) -> None:
    """Higher order ops (torch.cond's, while_loop's) find their rule by the exact type of the mode:
    the trace's mode takes FakeTensorMode's."""
    import torch._higher_order_ops  # noqa: F401 - registers them

    for op in torch._ops._higher_order_ops.values():
        rule = op.python_key_table.get(FakeTensorMode)
        if rule is not None and mode_type not in op.python_key_table:
            op.py_impl(mode_type)(rule)


_share_fake_rules(_TraceFakeMode)


@dataclass
class GraphArg:
    source: Source
    example: Union[torch.Tensor, int]  # an int: a symbolic size of an input tensor
    node: torch.fx.Node
    load: Optional[Source] = None  # how generated code reads it, where that is not `source`

    def load_source(self) -> Source:
        return self.load or self.source


@dataclass
class CompiledGraph:
    graph_module: torch.fx.GraphModule
    compile_seconds: float


@dataclass
class OutputGraph:
    code: types.CodeType
    f_globals: Dict[str, Any]
    compiler_fn: Callable
    f_locals: Dict[str, Any] = field(default_factory=dict)  # the frame's, as it was entered
    graph: torch.fx.Graph = field(default_factory=torch.fx.Graph)
    guards: Dict[Tuple[str, GuardKind], Guard] = field(default_factory=dict)
    graphargs: List[GraphArg] = field(default_factory=list)
    compiled: List[CompiledGraph] = field(default_factory=list)
    # names of ModuleGlobalsSource scopes -> the globals dicts they stand for
    namespaces: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    break_reasons: List[Any] = field(default_factory=list)
    dynamic: Optional[bool] = None  # see optimize(dynamic=...)
    frame_state: Dict[str, Any] = field(default_factory=dict)  # shared by the compiles of one code object
    static_scalars: bool = False  # int and float locals stay constants even where they vary between calls

    def __post_init__(self) -> None:
        self.root = torch.nn.Module()
        self._fake_mode: Optional[_TraceFakeMode] = None  # made on first use, see fake_mode()
        self._input_sizes: Dict[str, Tuple[int, ...]] = {}
        self._input_scalars: Dict[str, Union[int, float]] = {}
        self._symbolic_inputs: List[SymbolicInput] = []
        self._size_inputs: Dict[Any, SymNodeVariable] = {}  # sympy symbol -> its graph input
        self._inputs_by_source: Dict[str, Union[TensorVariable, SymNodeVariable]] = {}
        self._direct_sources: Dict[str, Source] = {}  # see module_lookup.direct_source
        # id(globals dict of a module functions are inlined from) -> its source (see namespaces)
        self.module_globals_sources: Dict[int, Source] = {}
        self._inputs_by_id: Dict[int, TensorVariable] = {}
        self._module_keys: Dict[int, str] = {}
        self.side_effects = SideEffects()
        # module tensors standing for others while a module runs under torch.func.functional_call:
        # id of the module's own tensor -> the tracker of the tensor given for it
        self.substitutions: Dict[int, TensorVariable] = {}
        # mutable containers already wrapped, by identity: the same object gets the same tracker
        self.tracked_containers: Dict[int, Tuple[Any, VariableTracker]] = {}
        # real closure cells reached (the frame's free variables, those of functions it calls), by identity:
        # every function closing over one shares its tracker, so what one writes the others read
        self.real_cells: Dict[int, Tuple[Any, VariableTracker]] = {}
        # values wrapped into trackers that hold no state of their own (see VariableBuilder.__call__):
        # (source name, id, builder options) -> (the value, its tracker)
        self.wrapped: Dict[Tuple[Any, ...], Tuple[Any, VariableTracker]] = {}
        # id() of values with no real object: tracker identity -> (tracker, the id given)
        self.fake_ids: Dict[int, Tuple[VariableTracker, VariableTracker]] = {}
        self.initial_grad_mode = torch.is_grad_enabled()
        self.translators = 0  # translators started on this graph (the frame's and each inlined call's)
        self.running: List[Any] = []  # the translators whose run() is on the Python stack, innermost last
        self.generators: List[Any] = []  # generator objects made while tracing (GeneratorVariable)
        self.outputs: List[Union[TensorVariable, SymNodeVariable]] = []  # set by finish()
        self.graph_module: Optional[torch.fx.GraphModule] = None  # the finished graph, if the frame has one
        self.draws_random = False  # whether the graph has an op drawing random numbers
        # tensors the graph reads that it may change in place: (fake, its version when made, where
        # the real one is: a graph argument's index, or the module tensor itself)
        self._tensor_homes: List[Tuple[torch.Tensor, int, Union[int, torch.Tensor]]] = []
        # what the frame was entered with: every entry depends on it (the trace may change it)
        self.add_guard(Guard(None, GuardKind.GLOBAL_STATE, capture_global_state()))

    # ---- guards and inputs ----

    def add_guard(self, guard: Guard) -> None:
        self.guards.setdefault(guard.dedupe_key, guard)

    def namespace_source(self, prefix: str, namespace: Dict[str, Any]) -> Source:
        """How guards and generated code reach a namespace dict other than the frame's globals (another
        module's globals, prefix "G"; a builtins dict, "B"): one scope each, kept alive by `namespaces`."""
        known = self.module_globals_sources.get(id(namespace))
        if known is not None:
            return known
        module_name = str(namespace.get("__name__", "module"))
        scope_name = f"{prefix}_" + "".join(c if c.isalnum() else "_" for c in module_name) + f"_{id(namespace):x}"
        self.namespaces[scope_name] = namespace
        source = self.module_globals_sources[id(namespace)] = ModuleGlobalsSource(scope_name, namespace)
        return source

    def fake_mode(self, tx, symbolic: bool = False) -> _TraceFakeMode:
        """The fake mode of this trace, made on first use: with a shape env when some input may get
        symbolic sizes (`symbolic`: the input at hand wants some), else without one (static shapes,
        the fast path of first compiles)."""
        if self._fake_mode is None:
            dynamic_possible = self.dynamic is True or (self.dynamic is None and (
                symbolic or has_compiled(self.frame_state) or any(map(is_marked, _frame_values(tx)))))
            self._fake_mode = _TraceFakeMode(shape_env=new_shape_env(self.running) if dynamic_possible else None)
        return self._fake_mode

    def to_fake(self, tx, tensor: torch.Tensor) -> torch.Tensor:
        return self.fake_mode(tx).from_tensor(tensor, static_shapes=True)

    def add_graph_input(self, tx, source: Source, value: torch.Tensor) -> TensorVariable:
        if id(value) in self.substitutions:
            unimplemented(f"{source.name()}, a module tensor functional_call replaces, read other than as the module's attribute")
        known = self._inputs_by_source.get(source.name())
        if known is not None:
            return known
        alias = self._inputs_by_id.get(id(value))
        if alias is not None:  # the same tensor reached twice: one input, and a guard that it stays so
            self.add_guard(Guard(source, GuardKind.ALIAS_OF, alias.source))
            self._inputs_by_source[source.name()] = alias
            return alias
        self._input_sizes[source.name()] = tuple(value.size())
        dims = dynamic_dims(value, source.name(), self.dynamic, self.frame_state)
        fake_mode = self.fake_mode(tx, symbolic=bool(dims))
        if fake_mode.shape_env is None:  # a mark seen after the trace had started without a shape env
            dims = ()
        self.add_guard(Guard(source, GuardKind.TENSOR_MATCH, value, dynamic_dims=dims))
        node = self._add_placeholder(source, value)
        arg_index = len(self.graphargs) - 1
        if dims:
            fake = fake_mode.from_tensor(value, source=ShapeEnvSource(source.name()),
                                         symbolic_context=symbolic_context(value, dims))
            self._symbolic_inputs.append(SymbolicInput(source, value, fake, dims))
            self._lift_sizes(source, value, fake, dims)
        else:
            fake = fake_mode.from_tensor(value, static_shapes=True)
        self._tensor_homes.append((fake, fake._version, arg_index))
        variable = TensorVariable(node, fake, source, type(value))
        self._inputs_by_source[source.name()] = variable
        self._inputs_by_id[id(value)] = variable
        return variable

    def add_scalar_input(self, tx, source: Source, value: Union[int, float]) -> Optional[SymNodeVariable]:
        """The int or float local at `source` as a symbolic graph input when it varies between
        calls (see dynamic_scalar); None where it stays a constant of the trace."""
        known = self._inputs_by_source.get(source.name())
        if known is not None:
            return known
        self._input_scalars[source.name()] = value
        if self.static_scalars or not dynamic_scalar(value, source.name(), self.dynamic, self.frame_state):
            return None
        shape_env = self.fake_mode(tx, symbolic=True).shape_env
        if shape_env is None:
            return None
        where = ShapeEnvSource(source.name())
        expr = shape_env.create_unspecified_symbol(value, where, DimDynamic.DYNAMIC)
        make = shape_env.create_symintnode if type(value) is int else shape_env.create_symfloatnode
        symbol = make(expr, hint=value, source=where)
        self.add_guard(Guard(source, GuardKind.TYPE_MATCH, type(value)))
        variable = SymNodeVariable(self._add_placeholder(source, value), symbol, source)
        self._symbolic_inputs.append(SymbolicInput(source, value, symbol, ()))
        self._size_inputs[symbol.node.expr] = self._inputs_by_source[source.name()] = variable
        return variable

    def has_symbolic_scalars(self) -> bool:
        return any(not isinstance(i.value, torch.Tensor) for i in self._symbolic_inputs)

    def _add_placeholder(self, source: Source, example: Union[torch.Tensor, int],
                         load: Optional[Source] = None) -> torch.fx.Node:
        """A graph input after the existing ones (graph inputs come in the order of `graphargs`)."""
        first_op = next((n for n in self.graph.nodes if n.op != "placeholder"), None)
        name = self._argument_name(source)
        if first_op is None:  # inserting_before(None) would insert at the front
            node = self.graph.placeholder(name)
        else:
            with self.graph.inserting_before(first_op):
                node = self.graph.placeholder(name)
        self.graphargs.append(GraphArg(source, example, node, load))
        return node

    def _argument_name(self, source: Source) -> str:
        """The graph function's parameter name for `source`: sources whose names differ only in
        punctuation (`a.b_c`, `a.b.c`) get distinct parameters."""
        taken = {arg.node.target for arg in self.graphargs}
        name = base = _node_name(source.name())
        suffix = 1
        while name in taken:
            name, suffix = f"{base}_{suffix}", suffix + 1
        return name

    def _lift_sizes(self, source: Source, value: torch.Tensor, fake: torch.Tensor, dims: Tuple[int, ...]) -> None:
        """Each new symbol among `fake`'s sizes becomes a graph input, passed `value.shape[dim]`."""
        for dim in dims:
            size = specialized_value(fake.size(dim))
            if isinstance(size, int) or size.node.expr in self._size_inputs:
                continue
            size_source = SizeSource(source, dim)
            node = self._add_placeholder(size_source, value.size(dim))
            self._size_inputs[size.node.expr] = SymNodeVariable(node, size, size_source)

    def size_input(self, size: torch.SymInt) -> Optional[SymNodeVariable]:
        """The graph input holding the symbolic size `size`, if it is one."""
        return self._size_inputs.get(size.node.expr)

    def finalize_shape_guards(self) -> None:
        """At the end of tracing: remember this compile's input sizes (automatic dynamic shapes),
        and guard on what the trace assumed about symbolic sizes."""
        remember_sizes(self.frame_state, self._input_sizes)
        remember_scalars(self.frame_state, self._input_scalars)
        if not self._symbolic_inputs:
            return
        exprs = shape_guards(self._fake_mode.shape_env, self._symbolic_inputs)
        if exprs:
            self.namespaces.update(guard_scope(exprs))
            self.guards[("", GuardKind.SHAPE_ENV)] = Guard(None, GuardKind.SHAPE_ENV, exprs)

    def register_module_tensor(
        self, tx, module: torch.nn.Module, attr: str, tensor: torch.Tensor, module_source: Optional[Source]
    ) -> TensorVariable:
        """A parameter or buffer of a module. With a source it is a graph input, read by generated code
        from the dict the module keeps it in on each call (so a replaced tensor, or another
        instance's, is what the graph gets), and guarded by its properties (`.data =` and
        `requires_grad_` change them in place) and, with the other tensor inputs, by being another
        tensor than each of them (tied ones: the same). Without one (a module made in the frame) the
        graph holds the tensor itself."""
        source = module_source and AttrSource(module_source, attr)
        if id(tensor) in self.substitutions:
            if source is not None:  # what the call's names resolved to stays the module's tensor
                self.add_guard(Guard(source, GuardKind.ID_MATCH, tensor))
            return self.substitutions[id(tensor)]
        known = self._inputs_by_id.get(id(tensor))
        if known is not None and (source is None or known.source is not None):
            if source is not None and known.source != source:  # tied weights, or a tensor also passed in
                self.add_guard(Guard(source, GuardKind.ALIAS_OF, known.source))
            return known
        fake = self.to_fake(tx, tensor)
        if source is not None:
            self.add_guard(Guard(source, GuardKind.TENSOR_MATCH, tensor))
            node = self._add_placeholder(source, tensor, load=direct_source(source, self.source_value, self._direct_sources))
            self._tensor_homes.append((fake, fake._version, len(self.graphargs) - 1))
            self._inputs_by_source[source.name()] = variable = TensorVariable(node, fake, source, type(tensor))
        else:
            key = self._module_keys.get(id(module))
            if key is None:
                key = f"m{len(self._module_keys)}_{_node_name(type(module).__name__)}"
                self._module_keys[id(module)] = key
                self.root.add_module(key, module)
            self._tensor_homes.append((fake, fake._version, tensor))
            variable = TensorVariable(self.graph.get_attr(f"{key}.{attr}"), fake, None, type(tensor))
        self._inputs_by_id[id(tensor)] = variable
        return variable

    def graph_input_of(self, tensor: torch.Tensor) -> Optional[TensorVariable]:
        """The tracker of `tensor` if the graph already takes it as an input."""
        return self._inputs_by_id.get(id(tensor))

    def _real_inputs(self) -> List[Any]:
        return [self.source_value(arg.load_source()) for arg in self.graphargs]

    def source_value(self, source: Source) -> Any:
        """The value `source` names in the frame as it was entered."""
        return read_value(source, {**self.namespaces, "L": self.f_locals, "G": self.f_globals})

    # ---- recording ops ----

    def create_node(self, op: str, target: Any, args: tuple, kwargs: dict) -> torch.fx.Node:
        return self.graph.create_node(op, target, args, kwargs)

    def call_graph_op(
        self, tx, op: str, target: Any, args: List[VariableTracker], kwargs: Dict[str, VariableTracker],
        fake_target: Optional[Callable[..., Any]] = None,
    ) -> VariableTracker:
        """Record `target(*args, **kwargs)` (op "call_function") or `args[0].target(...)` ("call_method");
        `fake_target`, where given, computes the same on fake tensors where `target` cannot."""
        node_args, node_kwargs = _as_node_arg(tuple(args)), _as_node_arg(kwargs)
        _check_representable((node_args, node_kwargs))
        fake_args, fake_kwargs = _as_example(tuple(args)), _as_example(kwargs)
        name = target if isinstance(target, str) else getattr(target, "__name__", repr(target))
        fake_mode = self.fake_mode(tx)
        fake_mode.drew_random = False
        try:
            with fake_mode:
                if op == "call_method":
                    example = getattr(fake_args[0], target)(*fake_args[1:], **fake_kwargs)
                else:
                    example = (fake_target or target)(*fake_args, **fake_kwargs)
        except Exception as e:  # what eager would raise is raised again when the frame runs eagerly
            unimplemented(f"{name}() cannot be traced: {type(e).__name__}: {e}")
        self.draws_random |= fake_mode.drew_random
        example = specialized_value(example)
        if is_constant_value(example) and example is not None:
            return ConstantVariable(example)
        if all(_is_argument_name(k) for k in node_kwargs):
            node = self.create_node(op, target, node_args, node_kwargs)
        else:  # `t.random_(**{"from": 0})`: the graph's code could not spell the call
            fn = getattr(torch.Tensor, target) if op == "call_method" else target
            node = self.create_node("call_function", keywords_caller(fn), (node_args, node_kwargs), {})
        return self._wrap_result(node, example, _tensor_trackers([*args, *kwargs.values()]))

    def speculate(self, trace: Callable[[], Any]) -> None:
        """Run `trace` (tracing code whose real run the graph will call as one op) and drop the ops it
        recorded, refusing code that changes anything but its own new values: side effects, new
        graph inputs."""
        nodes, effects = set(self.graph.nodes), dict(self.side_effects.effects)
        trace()
        added = [n for n in self.graph.nodes if n not in nodes]
        if any(n.op not in _CALL_OPS or may_write_in_place(n) for n in added) or (
                list(self.side_effects.effects.items()) != list(effects.items())):
            unimplemented("code run inside one graph op reads new tensors, changes tensors in place or has side effects")
        for node in reversed(added):
            self.graph.erase_node(node)

    def _wrap_result(self, node: torch.fx.Node, example: Any,
                     inputs: Optional[Dict[int, TensorVariable]] = None) -> VariableTracker:
        """A tracker for the op's result; a tensor the op returns that is one of its inputs (in-place
        ops, `out=`) is that input's tracker, so identity (`x.add_(1) is x`) holds as in eager."""
        inputs = inputs or {}
        if isinstance(example, torch.Tensor) and id(example) in inputs:
            return inputs[id(example)]
        if isinstance(example, torch.Tensor):
            return TensorVariable(node, example)
        if isinstance(example, SYM_TYPES):
            node.meta["symbolic"] = True
            return SymNodeVariable(node, example)
        if example is None:
            return ConstantVariable(None)
        if isinstance(example, (tuple, list)):
            items: List[VariableTracker] = []
            for i, item in enumerate(example):
                item = specialized_value(item)
                if isinstance(item, (torch.Tensor, *SYM_TYPES, tuple, list)):
                    items.append(self._wrap_result(self.create_node("call_function", operator.getitem, (node, i), {}), item,
                                                       inputs))
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

    def progress(self) -> Tuple[Any, ...]:
        """What the trace has recorded so far but guards, compared before and after one instruction
        (see InstructionTranslator.mark_call): equal only if the instruction recorded nothing else."""
        nodes = self.graph.nodes
        return (len(nodes), next(reversed(nodes), None), len(self.graphargs),
                len(self._input_scalars), len(self._input_sizes), len(self.tracked_containers),
                len(self.substitutions), len(self.break_reasons), self.translators, self.draws_random,
                tuple(map(id, self.side_effects.effects.values())))

    def drop_guards_after(self, count: int) -> None:
        """Forget the guards added after the first `count` (those of an instruction traced again as
        a graph break)."""
        for key in list(self.guards)[count:]:
            del self.guards[key]

    def has_ops(self) -> bool:
        return any(n.op in _CALL_OPS for n in self.graph.nodes)

    def finish(self, live_values: List[VariableTracker]) -> None:
        """End of tracing: the graph's outputs are the tensors and sizes `live_values` and the side
        effects need; the guards about sizes and container identity are settled."""
        self.finalize_shape_guards()
        self.guard_mutated_containers_distinct()
        self.outputs = _graph_outputs([*live_values, *self.side_effects.values()])
        self._remove_unused_size_ops({v.node for v in self.outputs})
        if self.has_symbolic_scalars() and not any(
                n.op in _CALL_OPS and not n.meta.get("symbolic") for n in self.graph.nodes):
            # scalar arithmetic alone is no work for a graph: the frame is traced again with the scalars constant
            unimplemented("a graph of symbolic int arithmetic only")
        if self.outputs or self.has_ops():
            self.graph.output(tuple(t.node for t in self.outputs))
            self.graph_module = torch.fx.GraphModule(self.root, self.graph, class_name="GraphModule")

    def graph_output_index(self) -> Dict[torch.fx.Node, int]:
        return {t.node: i for i, t in enumerate(self.outputs)}

    def _rerunnable(self, compiled: Callable) -> Callable:
        """What generated code calls to run the graph. The graph runs first in the generated code: if
        it raises, its frame re-runs eagerly instead, doing what eager does before the error (side
        effects, except clauses), once what the graph changed is put back: random draws, and the
        tensors it reads that it writes in place (copied before each call: a kernel that raises may
        have written part of its output, `index_add_` with one bad index, and not said so in the
        tensor's version)."""
        written = [home for fake, version, home in self._tensor_homes if fake._version != version]
        if not self.draws_random and not written:
            return _C.CallbackWrapper(compiled, None, rerun=True)
        if self.side_effects or self.code.co_exceptiontable:  # only then is re-running worth its cost
            compiled = _rerun_after_undoing(compiled, written, self.draws_random)
        return _C.CallbackWrapper(compiled, None)

    def guard_mutated_containers_distinct(self) -> None:
        """Each container (or module) the trace mutates was another object than every other container
        (module) of its type it read: the trace relies on that (the same list passed twice sees both
        appends; an attribute set on one module is read back from another that is now the same)."""
        read = [(type(value), var) for value, var in self.tracked_containers.values() if var.source is not None]
        kinds = {id(var): kind for kind, var in read}
        for mutated in [*self.side_effects.mutated_containers(), *self.side_effects.attribute_owners()]:
            for kind, other in read:
                if other is not mutated and kind is kinds.get(id(mutated)):
                    self.add_guard(Guard(mutated.source, GuardKind.DISTINCT_FROM, other.source))

    def _remove_unused_size_ops(self, outputs: Set[torch.fx.Node]) -> None:
        """Drop computations of symbolic sizes whose results nothing uses (the comparisons of
        branches, sizes only compared); they are pure."""
        for node in reversed(list(self.graph.nodes)):
            if node.meta.get("symbolic") and not node.users and node not in outputs:
                self.graph.erase_node(node)

    def compile(self) -> Optional[Callable]:
        """The finished graph compiled by the backend (timed, recorded in `compiled`), wrapped as
        generated code calls it; None when the frame has no graph."""
        if self.graph_module is None:
            return None
        start = time.perf_counter()
        name = backend_name(self.compiler_fn)
        examples = [arg.example for arg in self.graphargs]
        try:
            compiled = compile_for_ddp(self.compiler_fn, self.graph_module, examples, self._real_inputs)
            if compiled is None:
                compiled = self.compiler_fn(self.graph_module, examples)
        except Exception as e:
            raise BackendCompilerFailed(name, e) from e
        if not callable(compiled):
            message = (f"backend {name!r} returned {type(compiled).__name__}, not a callable: a backend "
                       f"must return a function that runs the graph (e.g. gm.forward)")
            raise BackendCompilerFailed(name, TypeError(message), message)
        self.compiled.append(CompiledGraph(self.graph_module, time.perf_counter() - start))
        if any(n.target is torch._C._set_grad_enabled for n in self.graph.nodes):
            compiled = _restoring_grad_mode(compiled)
        return self._rerunnable(compiled)


# Tensors written in place are copied before each call up to this many bytes in all (measured: the
# copy's cost is lost in the call's up to 32 KiB; beyond 64 KiB each copy faults in fresh pages);
# a frame writing more is not re-run, its graph's error is raised as it is
_MAX_SNAPSHOT_BYTES = 1 << 15


def _rerun_after_undoing(compiled: Callable, homes: List[Union[int, torch.Tensor]], draws_random: bool) -> Callable:
    """`compiled`, asking for its frame to be re-run eagerly when it raises, after putting back the
    tensors it writes in place (arguments by index, module tensors themselves: data and version)
    and the random generators as they were before it ran."""

    def call(*args: Any) -> Any:
        written = [args[home] if isinstance(home, int) else home for home in homes]
        if sum(t.nbytes for t in written) > _MAX_SNAPSHOT_BYTES:
            return compiled(*args)
        saved = [(t.detach().clone(), t._version) for t in written]
        rng = _rng_states() if draws_random else None
        try:
            return compiled(*args)
        except Exception as error:
            _restore_tensors(written, saved)
            if rng is not None:
                _set_rng_states(rng)
            raise _C.RerunFrame(error) from None

    return call


def _restore_tensors(tensors: List[torch.Tensor], saved: List[Tuple[torch.Tensor, int]]) -> None:
    with torch.inference_mode(any(t.is_inference() for t in tensors)):  # where inference tensors are writable
        for tensor, (copy, version) in zip(tensors, saved):
            tensor.detach().copy_(copy)
    normal = [(t, version) for t, (_, version) in zip(tensors, saved) if not t.is_inference()]
    if normal:  # the write eager does again is then the only one its version counter sees
        torch._C._autograd._unsafe_set_version_counter(*zip(*normal))


def _rng_states() -> Tuple[torch.Tensor, Optional[List[torch.Tensor]]]:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    return torch.random.get_rng_state(), cuda


def _set_rng_states(states: Tuple[torch.Tensor, Optional[List[torch.Tensor]]]) -> None:
    torch.random.set_rng_state(states[0])
    if states[1] is not None:
        torch.cuda.set_rng_state_all(states[1])


def _restoring_grad_mode(compiled: Callable) -> Callable:
    """`compiled`, putting back the grad mode when it raises between the grad-mode switches of its
    graph (eager leaves a `with no_grad()` block on an exception)."""

    def call(*args: Any) -> Any:
        mode = torch.is_grad_enabled()
        try:
            return compiled(*args)
        except BaseException:
            torch._C._set_grad_enabled(mode)
            raise

    return call


def _node_name(text: str) -> str:
    name = re.sub(r"[^0-9a-zA-Z_]+", "_", text).strip("_")
    name = name.lower()
    return name if name and not name[0].isdigit() else f"_{name}"


def _frame_values(tx) -> List[Any]:
    """The values of the frame being converted (the root of `tx`'s inlining chain), and the items
    of its list, tuple and dict locals."""
    while getattr(tx, "parent", None) is not None:
        tx = tx.parent
    values: List[Any] = []
    for value in getattr(tx, "f_locals", {}).values():
        values.append(value)
        if type(value) in (list, tuple):
            values.extend(value)
        elif type(value) is dict:
            values.extend(value.values())
    return values


def _map_trackers(value: Any, leaf: Callable[[Any], Any]) -> Any:
    """`value` (trackers, possibly inside tuples, lists, dicts and slices) with each tensor or
    symbolic size replaced by `leaf(tracker)` and every other tracker by its constant."""
    if isinstance(value, (TensorVariable, SymNodeVariable)):
        return leaf(value)
    if isinstance(value, BaseListVariable):
        items = [_map_trackers(v, leaf) for v in value.items]
        return items if value.python_cls is list else tuple(items)
    if isinstance(value, ConstDictVariable):
        return {k: _map_trackers(v, leaf) for k, v in value.items.items()}
    if isinstance(value, SliceVariable):
        return slice(*[_map_trackers(p, leaf) for p in value.parts])
    if isinstance(value, VariableTracker):
        if not value.is_python_constant():
            unimplemented(f"passing {value.describe()} to a tensor operation")
        return value.as_python_constant()
    if isinstance(value, tuple):
        return tuple(_map_trackers(v, leaf) for v in value)
    if isinstance(value, dict):
        return {k: _map_trackers(v, leaf) for k, v in value.items()}
    return value


def _tensor_trackers(values: List[Any]) -> Dict[int, TensorVariable]:
    """id(example) -> tracker, for the tensors among (nested) op arguments."""
    found: Dict[int, TensorVariable] = {}

    def leaf(tensor: Union[TensorVariable, SymNodeVariable]) -> None:
        if isinstance(tensor, TensorVariable):
            found.setdefault(id(tensor.example), tensor)

    for value in values:
        _map_trackers(value, leaf)
    return found


# Constants the graph's generated Python code can spell (its namespace has torch, inf and nan; enums
# and nodes it names itself).
_LITERAL_TYPES = {type(None), bool, int, float, complex, str, bytes, type(Ellipsis), torch.dtype, torch.device,
                  torch.layout, torch.memory_format}


def _check_representable(value: Any) -> None:
    """Graph code writes a constant argument as its repr: anything else (a typing object, a numpy
    value, a class) would be a NameError or a syntax error when the graph runs, so it is not recorded."""
    if isinstance(value, (list, tuple, slice)):
        for item in (value.start, value.stop, value.step) if isinstance(value, slice) else value:
            _check_representable(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_representable(key)
            _check_representable(item)
    elif type(value) not in _LITERAL_TYPES and not isinstance(value, (torch.fx.Node, enum.Enum)):
        unimplemented(f"a {type(value).__module__}.{type(value).__qualname__} constant as an argument of a graph op")


def _as_node_arg(value: Any) -> Any:
    return _map_trackers(value, lambda t: t.node)


def _as_example(value: Any) -> Any:
    return _map_trackers(value, lambda t: t.example)


def _graph_outputs(values: List[VariableTracker]) -> List[Union[TensorVariable, SymNodeVariable]]:
    """Tensors and symbolic sizes in returned or stored values that the graph must produce
    (inputs and parameters are reloaded from their sources)."""
    found: Dict[torch.fx.Node, Union[TensorVariable, SymNodeVariable]] = {}
    seen: set = set()

    def visit(v: VariableTracker) -> None:
        if id(v) in seen:
            return
        seen.add(id(v))
        if isinstance(v, (TensorVariable, SymNodeVariable)):
            if not (v.source is not None and v.node.op in ("placeholder", "get_attr")):
                found.setdefault(v.node, v)
        elif v.source is None:  # a value with a source is reloaded, not rebuilt
            for item in v.subvalues():
                visit(item)

    for value in values:
        visit(value)
    return list(found.values())
