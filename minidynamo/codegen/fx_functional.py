"""A captured graph's in-place ops (an optimizer step's) rewritten out of place at FX level, where that is exact."""
from __future__ import annotations

import functools
import operator
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.fx

aten = torch.ops.aten

# augmented operators on a tensor write it (Tensor.__iadd__ is add_)
_AUGMENTED = {operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
              operator.itruediv: operator.truediv, operator.ifloordiv: operator.floordiv,
              operator.imod: operator.mod, operator.ipow: operator.pow, operator.iand: operator.and_,
              operator.ior: operator.or_, operator.ixor: operator.xor, operator.ilshift: operator.lshift,
              operator.irshift: operator.rshift}
# in-place ops whose generated functional twin means something else (set_ makes self an alias,
# the resizes change sizes)
_NOT_VARIANTS = {"set_", "resize_", "resize_as_", "resize_as_sparse_", "sparse_resize_", "sparse_resize_and_clear_"}


class NotFunctional(Exception):
    """An out-of-place result differs from its in-place op's tensor in size, strides, dtype or device."""


def may_write_in_place(node: torch.fx.Node) -> bool:
    """Whether an op may change a tensor it is given: an in-place method or function (`add_`,
    `relu_`), an augmented operator, item assignment, or an `out=` argument."""
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    return ((name.endswith("_") and not name.endswith("__")) or "out" in node.kwargs
            or node.target is operator.setitem or (name.startswith("i") and getattr(operator, name, None) is node.target))


def _tensor_overloads(packet: Any) -> List[Any]:
    overloads = [getattr(packet, name) for name in packet.overloads()]
    return [o for o in overloads if o._schema.arguments and str(o._schema.arguments[0].type) in ("Tensor", "List[Tensor]")]


def _writes(argument: Any) -> bool:
    return argument.alias_info is not None and argument.alias_info.is_write


@functools.lru_cache(maxsize=None)
def is_in_place_variant(name: str) -> bool:
    """Whether aten's `name` ("add_", "_foreach_mul_") writes only its first argument and is the
    in-place form of aten's name[:-1], an op that writes, aliases and draws nothing."""
    if not name.endswith("_") or name.endswith("__") or name in _NOT_VARIANTS or (
            name.startswith("_") and not name.startswith("_foreach_")):  # private ops (_coalesced_, _philox_normal_)
        return False
    in_place, functional = getattr(aten, name, None), getattr(aten, name[:-1], None)
    if in_place is None or functional is None:
        return False
    written = _tensor_overloads(in_place)
    if not written or not all(_writes(o._schema.arguments[0]) and not any(map(_writes, o._schema.arguments[1:]))
                              for o in written):
        return False
    pure = [o for o in _tensor_overloads(functional) if not any(map(_writes, o._schema.arguments))]
    return bool(pure) and all(all(r.alias_info is None for r in o._schema.returns) and all(
        a.alias_info is None for a in o._schema.arguments) and torch.Tag.nondeterministic_seeded not in o.tags
        for o in pure)


def _out_of_place(spelling: str, name: str) -> Optional[Callable[..., Any]]:
    """The out-of-place twin of in-place `name` as `spelling` ("method", "torch", "operator") calls
    it; "out": torch's `name` called without its `out=` tensor."""
    if spelling == "out":
        return getattr(torch, name)
    if spelling == "operator":
        return _AUGMENTED.get(getattr(operator, name, None))
    if not is_in_place_variant(name):
        return None
    if spelling == "method":
        return getattr(torch.Tensor, name[:-1], None) or getattr(aten, name[:-1])  # copy_, zero_, fill_: aten's
    return getattr(torch, name[:-1], None)


def _same_layout(new: Any, old: torch.Tensor) -> None:
    if not isinstance(new, torch.Tensor) or (new.shape, new.stride(), new.dtype, new.device) != (
            old.shape, old.stride(), old.dtype, old.device):
        raise NotFunctional(f"an out-of-place result unlike its tensor ({getattr(new, 'dtype', type(new))}, {old.dtype})")


def computed_out_of_place(spelling: str, name: str, written: List[torch.Tensor], *args: Any, **kwargs: Any) -> Any:
    """In-place op `name` applied out of place; raises NotFunctional where a new tensor would not be
    laid out as the one it replaces in `written` (a promoting dtype, a broadcast), so that the new
    value can stand for it."""
    new = _out_of_place(spelling, name)(*args, **kwargs)
    news = list(new) if isinstance(new, (list, tuple)) else [new]
    if len(news) != len(written):
        raise NotFunctional(f"{name} gave {len(news)} tensors for {len(written)}")
    for n, o in zip(news, written):
        _same_layout(n, o)
    return new


def _in_place(node: torch.fx.Node) -> Optional[Tuple[str, str, List[torch.fx.Node]]]:
    """(spelling, name, the nodes it writes) for an in-place op the rewrite knows, else None."""
    target = node.target
    if node.op == "call_method" and isinstance(target, str):
        spelling, name = "method", target
    elif node.op == "call_function" and target in _AUGMENTED and node.args and isinstance(
            getattr(node.args[0], "meta", {}).get("example_value"), torch.Tensor):  # not a size's `+=`
        spelling, name = "operator", target.__name__
    elif node.op == "call_function" and getattr(torch, getattr(target, "__name__", ""), None) is target:
        spelling, name = "torch", target.__name__
    elif node.op == "call_function" and getattr(torch.Tensor, getattr(target, "__name__", ""), None) is target:
        spelling, name = "method", target.__name__
    else:
        return None
    if spelling == "torch" and isinstance(node.kwargs.get("out"), torch.fx.Node):
        spelling = "out"
    elif "out" in node.kwargs or not node.args or _out_of_place(spelling, name) is None:
        return None
    written = node.kwargs["out"] if spelling == "out" else node.args[0]
    written = list(written) if isinstance(written, (list, tuple)) else [written]
    return (spelling, name, written) if all(isinstance(w, torch.fx.Node) for w in written) else None


def _storage(node: torch.fx.Node) -> Optional[int]:
    value = node.meta.get("example_value")
    return value.untyped_storage()._cdata if isinstance(value, torch.Tensor) else None


def _unaliased(graph: torch.fx.Graph, written: List[torch.fx.Node]) -> bool:
    """Whether each written tensor is an input or an op's result whose memory no other value of the
    graph shares (by the capture's fake tensors, which alias as eager's tensors do)."""
    storages = [s for s in map(_storage, graph.nodes) if s is not None]
    return all(w.op in ("placeholder", "call_function", "call_method") and _storage(w) is not None
               and storages.count(_storage(w)) == 1 for w in written)


def functional_graph(gm: torch.fx.GraphModule) -> Optional[Tuple[torch.fx.GraphModule, List[int]]]:
    """`gm` with each in-place op computed out of place (method, augmented operator, torch.<op>_ and
    foreach functions) and the later reads of the tensor it wrote taking the new value; it returns
    (outputs, (new value of each written input, ...)), the second item being those inputs' positions.
    None where that could differ from eager: a written tensor another value of the graph aliases
    (a view of it) or a module's tensor, an in-place op the rewrite does not know. Ops that write
    without being recognised here (`inplace=True`) show in the re-trace, which the caller checks."""
    graph = torch.fx.Graph()
    env: Dict[torch.fx.Node, torch.fx.Node] = {}
    root: Dict[torch.fx.Node, torch.fx.Node] = {}  # an in-place op's result -> the tensor it wrote
    lists: Dict[torch.fx.Node, List[torch.fx.Node]] = {}  # a foreach in-place op -> the tensors it wrote
    written: List[torch.fx.Node] = []
    current = lambda n: env[root.get(n, n)]  # noqa: E731
    for node in gm.graph.nodes:
        if node.op == "output":
            inputs = [n for n in gm.graph.nodes if n.op == "placeholder"]
            writes = [w for w in dict.fromkeys(written) if w.op == "placeholder"]
            graph.output((torch.fx.map_arg(node.args[0], current), tuple(env[w] for w in writes)))
            break
        if node.target is operator.getitem and node.args[0] in lists:  # a foreach op's written tensor
            root[node] = lists[node.args[0]][node.args[1]]
            continue
        step = _in_place(node)
        if step is None:
            env[node] = graph.node_copy(node, current)
            continue
        spelling, name, targets = step
        targets = [root.get(t, t) for t in targets]
        if len(set(targets)) != len(targets):  # the same tensor twice in one foreach op
            return None
        written += targets
        args, kwargs = torch.fx.map_arg((node.args, node.kwargs), current)
        kwargs = {k: v for k, v in kwargs.items() if k != "out"}
        new = graph.call_function(computed_out_of_place, (spelling, name, [env[t] for t in targets], *args), kwargs)
        if spelling != "out" and isinstance(node.args[0], (list, tuple)):
            for i, t in enumerate(targets):
                env[t] = graph.call_function(operator.getitem, (new, i))
            lists[node] = targets
        else:
            env[targets[0]] = new
            root[node] = targets[0]
    if not _unaliased(gm.graph, written):
        return None
    return torch.fx.GraphModule(gm, graph), [inputs.index(w) for w in writes]
