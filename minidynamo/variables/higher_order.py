"""Calls that run a traced function under a torch rule. Activation checkpointing and torch.func
transforms: the function becomes a subgraph, and the call one graph node applying the rule to it;
torch.func.functional_call: the module's call traced in place with the given tensors for its own."""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Tuple

import torch
import torch.func
import torch.fx
import torch.utils.checkpoint

from ..exc import Unsupported, unimplemented
from ..frame_hook import disabled
from .base import VariableTracker
from .constant import ConstantVariable
from .dicts import ConstDictVariable
from .lists import BaseListVariable, ListVariable, TupleVariable
from .misc import DisabledFunctionVariable
from .nn_module import NNModuleVariable
from .sym import SymNodeVariable
from .tensor import TensorVariable, may_write_in_place

_CALL_OPS = ("call_function", "call_method", "call_module")


def _body_input(index: int) -> None:
    """Target of the stand-in nodes for a body's own inputs while it is traced (never run)."""


@dataclass
class Body:
    """A function traced on its own: `module(*inputs, *lifted)` computes what it returned."""

    module: torch.fx.GraphModule
    inputs: List[TensorVariable]  # the caller's tensors given to the function
    lifted: List[VariableTracker]  # tensors and sizes of the enclosing graph the function reads


def trace_body(tx, fn: VariableTracker, args: List[VariableTracker], kwargs: Dict[str, VariableTracker],
               inner_example: Callable[[int, torch.Tensor], torch.Tensor] = lambda position, tensor: tensor) -> Body:
    """Trace `fn(*args, **kwargs)` into a subgraph. Its tensor arguments become the subgraph's inputs
    (seen inside as `inner_example(position, fake)`), constants are fixed; the ops it records in the
    enclosing graph move to the subgraph. Code that changes anything outside its own values is refused."""
    output = tx.output
    graph = output.graph
    before, effects = set(graph.nodes), list(output.side_effects.effects.items())
    inputs: List[TensorVariable] = []
    markers: List[torch.fx.Node] = []

    def as_input(value: VariableTracker) -> VariableTracker:
        if isinstance(value, TensorVariable):
            markers.append(graph.create_node("call_function", _body_input, (len(inputs),), {}))
            inputs.append(value)
            return TensorVariable(markers[-1], inner_example(len(inputs) - 1, value.example))
        if value.is_python_constant():
            return value
        unimplemented(f"a function run under a torch rule given {value.describe()} (tensors and constants only)")

    body_args = [as_input(a) for a in args]
    body_kwargs = {k: as_input(v) for k, v in kwargs.items()}
    result = _result_nodes(fn.call_function(tx, body_args, body_kwargs))
    added = [n for n in graph.nodes if n not in before and n.op in _CALL_OPS and n.target is not _body_input]
    if any(map(may_write_in_place, added)) or list(output.side_effects.effects.items()) != effects:
        unimplemented("a function run under a torch rule changes tensors in place or has side effects")
    module, lifted = _subgraph(output.root, markers, added, result)
    for node in reversed([*markers, *added]):
        graph.erase_node(node)
    return Body(module, inputs, [_tracker(node) for node in lifted])


def _result_nodes(result: VariableTracker) -> Any:
    """The body's result as a structure of graph nodes (tensors and sizes in tuples and lists)."""
    if isinstance(result, (TensorVariable, SymNodeVariable)):
        return result.node
    if isinstance(result, BaseListVariable) and result.python_type() in (tuple, list):
        return result.python_type()(_result_nodes(item) for item in result.items)
    unimplemented(f"a function run under a torch rule returning {result.describe()} (tensors only)")


def _subgraph(root: torch.nn.Module, markers: List[torch.fx.Node], body: List[torch.fx.Node],
              result: Any) -> Tuple[torch.fx.GraphModule, List[torch.fx.Node]]:
    """A GraphModule of the `body` nodes taking the `markers`' inputs, then the nodes of the
    enclosing graph they read (returned too: the lifted nodes, in order)."""
    inside = set(body) | set(markers)
    lifted: List[torch.fx.Node] = []

    def lift(node: torch.fx.Node) -> torch.fx.Node:
        if node not in inside and node not in lifted:
            lifted.append(node)
        return node

    for node in body:
        torch.fx.node.map_arg((node.args, node.kwargs), lift)
    torch.fx.node.map_arg(result, lift)
    sub = torch.fx.Graph()
    env = {m: sub.placeholder(f"input_{i}") for i, m in enumerate(markers)}
    env.update({n: sub.placeholder(f"lifted_{i}") for i, n in enumerate(lifted)})
    for node in body:
        env[node] = sub.node_copy(node, env.__getitem__)
    sub.output(torch.fx.node.map_arg(result, env.__getitem__))
    return torch.fx.GraphModule(root, sub, class_name="Body"), lifted


def _tracker(node: torch.fx.Node) -> VariableTracker:
    """The tracker of a value of the enclosing graph a body reads (from the example its tracker left)."""
    example = node.meta.get("example_value")
    if isinstance(example, torch.Tensor):
        return TensorVariable(node, example)
    if example is None:
        unimplemented(f"a function run under a torch rule reads {node.name}, whose value is not known")
    return SymNodeVariable(node, example)


def _call_body(tx, name: str, body: Body, run: Callable[[Callable, tuple], Any]) -> VariableTracker:
    """One graph node: `run(f, inputs)`, where `f(*inputs)` runs the body (unconverted, with the
    lifted values of this call)."""
    module, count = disabled(body.module), len(body.inputs)

    def call(*values: Any) -> Any:
        lifted = values[count:]
        return run(lambda *inputs: module(*inputs, *lifted), values[:count])

    call.__name__ = call.__qualname__ = name
    call.traced_body = body.module  # type: ignore[attr-defined]
    with warnings.catch_warnings():  # eager's warnings come when the graph runs
        warnings.simplefilter("ignore")
        return tx.output.call_graph_op(tx, "call_function", call, [*body.inputs, *body.lifted], {})


def _constants(kwargs: Dict[str, VariableTracker], what: str) -> Dict[str, Any]:
    if not all(v.is_python_constant() for v in kwargs.values()):
        unimplemented(f"{what} with options that are not constants")
    return {k: v.as_python_constant() for k, v in kwargs.items()}


def _traced(tx, what: str, trace: Callable[[], Body]) -> Body:
    """`trace()`, or the graph break the call would have had without it, saying why."""
    try:
        return trace()
    except Unsupported as e:
        if e.whole_frame:
            raise
        unimplemented(f"{what}: its function cannot be traced into a subgraph ({e.msg})")


# ---- torch.utils.checkpoint.checkpoint ----

_CHECKPOINT_OPTIONS = frozenset({"use_reentrant", "preserve_rng_state", "determinism_check", "debug", "early_stop"})


class CheckpointVariable(DisabledFunctionVariable):
    """`torch.utils.checkpoint.checkpoint(fn, *args, ...)`: one node calling checkpoint on `fn`'s
    subgraph, so backward recomputes it as eager does (with the random state preserved). Where `fn`
    cannot be traced, a call run in plain Python (the disabled wrapper this extends)."""

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        if not args or "context_fn" in kwargs:
            return super().call_function(tx, args, kwargs)
        options = _constants({k: v for k, v in kwargs.items() if k in _CHECKPOINT_OPTIONS}, "checkpoint")
        fn_kwargs = {k: v for k, v in kwargs.items() if k not in _CHECKPOINT_OPTIONS}
        body = _traced(tx, "checkpoint", lambda: trace_body(tx, args[0], list(args[1:]), fn_kwargs))
        return _call_body(tx, "checkpoint", body,
                          lambda f, inputs: torch.utils.checkpoint.checkpoint(f, *inputs, **options))


# ---- torch.func transforms: transform(f, **options)(*tensors) ----

def _vmap_example(options: Dict[str, Any]) -> Callable[[int, torch.Tensor], torch.Tensor]:
    """What `vmap(f, in_dims)` hands `f` for its argument at `position`: one slice of the batch."""
    in_dims = options.get("in_dims", 0)

    def example(position: int, tensor: torch.Tensor) -> torch.Tensor:
        dim = in_dims[position] if isinstance(in_dims, (tuple, list)) else in_dims
        if dim is None:
            return _leaf(tensor, False)
        if not isinstance(dim, int):
            unimplemented("vmap with nested in_dims")
        return _leaf(tensor.select(dim, 0), False)

    return example


def _leaf(tensor: torch.Tensor, requires_grad: bool) -> torch.Tensor:
    """A tensor as a transform's function sees it: a leaf, requiring gradients as eager shows
    inside the transform (facts the function may read and branch on)."""
    return tensor.detach().requires_grad_(requires_grad)


def _reverse_mode_example(options: Dict[str, Any]) -> Callable[[int, torch.Tensor], torch.Tensor]:
    """grad, jacrev and hessian hand `f` leaves of the arguments' shapes that require gradients
    exactly at the positions `argnums` names."""
    argnums = options.get("argnums", 0)
    wanted = set(argnums) if isinstance(argnums, (tuple, list)) else {argnums}
    if any(not isinstance(n, int) or n < 0 for n in wanted):
        unimplemented("a torch.func transform with negative or non-integer argnums")
    return lambda position, tensor: _leaf(tensor, position in wanted)


def _forward_mode_example(options: Dict[str, Any]) -> Callable[[int, torch.Tensor], torch.Tensor]:
    """jacfwd hands `f` leaves of the arguments' shapes that do not require gradients."""
    return lambda position, tensor: _leaf(tensor, False)


# transform -> what its function sees of each argument (given the transform's options)
_TRANSFORMS: Dict[Any, Callable[[Dict[str, Any]], Callable[[int, torch.Tensor], torch.Tensor]]] = {
    torch.func.grad: _reverse_mode_example, torch.func.grad_and_value: _reverse_mode_example,
    torch.func.jacrev: _reverse_mode_example, torch.func.hessian: _reverse_mode_example,
    torch.func.jacfwd: _forward_mode_example, torch.func.vmap: _vmap_example,
}


def is_function_transform(value: Any) -> bool:
    return any(value is t for t in _TRANSFORMS)


class FunctionTransformVariable(VariableTracker):
    """A torch.func transform (grad, grad_and_value, vmap, jacrev, jacfwd, hessian) itself."""

    def __init__(self, transform: Any, source=None) -> None:
        super().__init__(source)
        self.transform = transform

    def describe(self) -> str:
        return f"torch.func.{self.transform.__name__}"

    def python_type(self) -> type:
        return type(self.transform)

    def real_object(self) -> Any:
        return self.transform

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        if len(args) != 1:
            unimplemented(f"{self.describe()} with options given by position")
        return TransformedFunctionVariable(self, args[0], _constants(kwargs, self.describe()))


class TransformedFunctionVariable(VariableTracker):
    """`transform(f, **options)` made in the frame: calling it with tensors is one graph node applying
    the transform to `f`'s subgraph."""

    def __init__(self, transform: FunctionTransformVariable, fn: VariableTracker, options: Dict[str, Any]) -> None:
        super().__init__()
        self.transform, self.fn, self.options = transform, fn, options

    def describe(self) -> str:
        return f"function made by {self.transform.describe()}"

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        transform, options, what = self.transform.transform, self.options, f"a call of a {self.describe()}"
        if kwargs or not all(isinstance(a, TensorVariable) for a in args):
            unimplemented(f"{what} with arguments other than tensors by position")
        example = _TRANSFORMS[transform](options)
        body = _traced(tx, what, lambda: trace_body(tx, self.fn, list(args), {}, example))
        return _call_body(tx, transform.__name__, body, lambda f, inputs: transform(f, **options)(*inputs))


# ---- torch.cond and torch.while_loop ----

class ControlFlowOpVariable(VariableTracker):
    """torch.cond / torch.while_loop: each function traced into a subgraph and the op one graph node
    running torch's own op on the subgraphs (a Python-constant predicate picks cond's branch now)."""

    def __init__(self, op: Callable, source=None) -> None:
        super().__init__(source)
        self.op = op

    def describe(self) -> str:
        return f"torch.{self.op.__name__}"

    def real_object(self) -> Any:
        return self.op

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        names = ("pred", "true_fn", "false_fn", "operands") if self.op is torch.cond else \
            ("cond_fn", "body_fn", "carried_inputs")
        given = dict(zip(names, args), **kwargs)
        if len(args) > len(names) or set(given) - set(names):
            unimplemented(f"{self.describe()} with arguments it does not take")
        operands = given.get("operands", given.get("carried_inputs", TupleVariable([])))
        if not isinstance(operands, BaseListVariable) or not all(isinstance(o, TensorVariable) for o in operands.items):
            unimplemented(f"{self.describe()} with operands other than a tuple of tensors")
        if self.op is torch.cond and given["pred"].is_python_constant():
            branch = given["true_fn" if given["pred"].as_python_constant() else "false_fn"]
            return branch.call_function(tx, list(operands.items), {})
        functions = [given[n] for n in names[1:3]] if self.op is torch.cond else [given["cond_fn"], given["body_fn"]]
        what = f"a call of {self.describe()}"
        bodies = [_traced(tx, what, lambda fn=fn: trace_body(tx, fn, list(operands.items), {})) for fn in functions]
        leading = [given["pred"]] if self.op is torch.cond else []
        return _call_bodies(tx, self.op, leading, list(operands.items), bodies)


def _cond(traced: bool, pred: torch.Tensor, functions: List[Callable], operands: tuple, lifted: tuple) -> Any:
    from torch._higher_order_ops.cond import cond_op
    if traced:
        return cond_op(pred, *functions, (*operands, *lifted))
    return functions[0 if pred else 1](*operands, *lifted)


def _while_loop(traced: bool, functions: List[Callable], carried: tuple, lifted: tuple) -> Any:
    from torch._higher_order_ops.while_loop import while_loop_op
    if traced:
        return while_loop_op(*functions, carried, lifted)
    while functions[0](*carried, *lifted):
        carried = tuple(functions[1](*carried, *lifted))
    return carried


def _traced_by_torch(values: tuple) -> bool:
    """Whether torch traces the op now (fake tensors, aot_autograd's trace): then torch's own higher
    order op runs, which traces its functions. On real tensors what it would do is done directly
    (torch.cond would compile its functions with torch.compile on every call)."""
    from torch._subclasses.fake_tensor import is_fake
    from torch.fx.experimental.proxy_tensor import get_proxy_mode

    return get_proxy_mode() is not None or any(isinstance(v, torch.Tensor) and is_fake(v) for v in values)


def _call_bodies(tx, op: Callable, leading: List[VariableTracker], operands: List[VariableTracker],
                 bodies: List[Body]) -> VariableTracker:
    """One graph node running `op` (torch.cond: the predicate leads) on functions that run the
    bodies. Each function takes the operands and the values every body lifted from the enclosing
    graph, and keeps its own; each returns a tuple, as torch's higher order ops want."""
    modules, count, n_lead = [disabled(body.module) for body in bodies], len(operands), len(leading)
    single = not isinstance(next(iter(reversed(bodies[-1].module.graph.nodes))).args[0], (tuple, list))
    spans, start = [], count
    for body in bodies:
        spans.append((start, start + len(body.lifted)))
        start += len(body.lifted)

    def function(module: Callable, span: Tuple[int, int]) -> Callable:
        def run(*values: Any) -> Any:
            result = module(*values[:count], *values[span[0]:span[1]])
            return tuple(result) if isinstance(result, (tuple, list)) else (result,)
        return run

    def call(*values: Any) -> Any:
        head, rest = values[:n_lead], values[n_lead:]
        functions = [function(m, span) for m, span in zip(modules, spans)]
        traced = _traced_by_torch(values)
        result = (_cond(traced, *head, functions, rest[:count], rest[count:]) if op is torch.cond else
                  _while_loop(traced, functions, rest[:count], rest[count:]))
        return result[0] if single and op is torch.cond else tuple(result)

    call.__name__ = call.__qualname__ = op.__name__
    lifted = [value for body in bodies for value in body.lifted]
    with warnings.catch_warnings():  # eager's warnings come when the graph runs
        warnings.simplefilter("ignore")
        return tx.output.call_graph_op(tx, "call_function", call, [*leading, *operands, *lifted], {})


# ---- torch.func.functional_call(module, tensors, args, kwargs) ----

_FUNCTIONAL_CALL_UNCONVERTED = disabled(torch.func.functional_call)


class FunctionalCallVariable(DisabledFunctionVariable):
    """`torch.func.functional_call`: the module's call traced in place, each of its tensors named in
    the given dicts read as the tensor given for it (a read of one by any other way is refused).
    Where that fails, a call run in plain Python with nothing inside converted: the module's frames
    would otherwise be compiled for each new tensor given."""

    def __init__(self) -> None:
        super().__init__(_FUNCTIONAL_CALL_UNCONVERTED)

    def describe(self) -> str:
        return "torch.func.functional_call"

    def call_function(self, tx, args: List[VariableTracker], kwargs: Dict[str, VariableTracker]) -> VariableTracker:
        names = ("module", "parameter_and_buffer_dicts", "args", "kwargs", "tie_weights", "strict")
        given = dict(zip(names, args)) | kwargs
        options = _constants({k: v for k, v in given.items() if k in ("tie_weights", "strict")}, self.describe())
        module = given.get("module")
        if len(args) > 4 or not {"module", "parameter_and_buffer_dicts"} <= given.keys() or not set(given) <= set(names) \
                or options.get("tie_weights", True) is not True or not isinstance(module, NNModuleVariable):
            unimplemented(f"{self.describe()} other than (module, dict of tensors, args[, kwargs]) with tied weights")
        substitutions = _substitutions(module.module, given["parameter_and_buffer_dicts"], options.get("strict", False))
        call_args = _positional(given.get("args", ConstantVariable(None)))
        call_kwargs = given.get("kwargs", ConstantVariable(None))
        if not (isinstance(call_kwargs, ConstDictVariable) or call_kwargs.is_python_constant()):
            unimplemented(f"{self.describe()} with kwargs that are not a dict")
        call_kwargs = dict(call_kwargs.items) if isinstance(call_kwargs, ConstDictVariable) else {}
        table = tx.output.substitutions
        if set(substitutions) & set(table):
            unimplemented(f"{self.describe()} inside another one replacing the same tensors")
        table.update(substitutions)
        try:
            return module.call_function(tx, call_args, call_kwargs)
        except Unsupported as e:
            if e.whole_frame:
                raise
            unimplemented(f"{self.describe()}: the module's call cannot be traced ({e.msg})")
        finally:
            for key in substitutions:
                del table[key]


def _positional(args: VariableTracker) -> List[VariableTracker]:
    """functional_call's `args`: a tuple is the arguments, None none, anything else the only one."""
    if isinstance(args, TupleVariable):
        return list(args.items)
    if args.is_python_constant() and isinstance(args.as_python_constant(), (tuple, type(None))):
        return [ConstantVariable(v) for v in args.as_python_constant() or ()]
    return [args]


def _substitutions(module: torch.nn.Module, dicts: VariableTracker, strict: bool) -> Dict[int, TensorVariable]:
    """id of each module tensor the dicts name -> the tracker of the tensor given for it."""
    parts = dicts.items if isinstance(dicts, (TupleVariable, ListVariable)) else [dicts]
    if strict or not all(isinstance(p, ConstDictVariable) for p in parts):
        unimplemented("torch.func.functional_call with strict=True or tensors not given as dicts")
    named = {**dict(module.named_parameters(remove_duplicate=False)), **dict(module.named_buffers(remove_duplicate=False))}
    found: Dict[int, TensorVariable] = {}
    keys = [k for p in parts for k in p.items]
    if len(set(keys)) != len(keys):
        unimplemented("torch.func.functional_call given one name twice")
    for part in parts:
        for name, value in part.items.items():
            if name not in named or not isinstance(value, TensorVariable) or found.get(id(named[name]), value) is not value:
                unimplemented(f"torch.func.functional_call given {name!r}, not one tensor of the module's own")
            found[id(named[name])] = value
    return found
