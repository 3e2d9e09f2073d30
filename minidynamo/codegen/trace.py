"""Re-trace a captured graph for the code generators: functional, decomposed to core ATen, on
stand-ins for module tensors, after checking that eager accepts the example inputs."""
from __future__ import annotations

import contextlib
import copy
import functools
import operator
import struct
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx
from torch._decomp import core_aten_decompositions, get_decompositions
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import optimization_hint
from torch.utils._pytree import tree_flatten

from .errors import CannotCompile, EagerRejects
from .fx_functional import NotFunctional, functional_graph
from .sizes import has_symbolic_sizes
from .graph_lowering import fetch_attr, is_dense

aten = torch.ops.aten


@functools.lru_cache(maxsize=None)
def decompositions() -> Dict:
    """Core ATen, plus composite ops we prefer as their parts so they fuse with their neighbours
    (softmax, layer_norm, batch_norm, group_norm, norms, gelu, variance) and linear layers whose bias becomes an epilogue."""
    table = dict(core_aten_decompositions())
    table.update(get_decompositions([
        aten._softmax, aten._log_softmax, aten.native_layer_norm, aten.gelu, aten.mean, aten.var,
        aten.var_mean, aten.std, aten.std_mean, aten.addmm, aten.hardtanh, aten.leaky_relu,
        aten.elu, aten.softplus, aten.logsumexp, aten.silu, aten.hardsigmoid, aten.hardswish,
        aten.mish, aten.addcmul, aten.addcdiv, aten.lerp, aten.native_batch_norm,
        aten._native_batch_norm_legit_no_training, aten._native_batch_norm_legit_functional,
        aten._native_batch_norm_legit, aten.native_group_norm, aten.linalg_vector_norm,
    ]))
    table.update(_foreach_decompositions())
    table[aten.slice_scatter.default] = _slice_scatter_as_cat
    table.update(_number_weighted_decompositions(table))
    # torch's decomposition of CPU flash attention returns the attention weights where the op
    # returns the logsumexp, which the backward reads; it is also ~10x slower than the kernel.
    del table[aten._scaled_dot_product_flash_attention_for_cpu.default]
    return table


def _slice_scatter_as_cat(base: torch.Tensor, src: torch.Tensor, dim: int = 0, start: Optional[int] = None,
                          end: Optional[int] = None, step: int = 1) -> Any:
    """`base` with `src` in the slice [start:end] of `dim` (a slice's backward, rotary embeddings'
    halves) as the concatenation of base's part before the slice, src and base's part after it: a
    copy step of the generated code, not a torch call. Strided or symbolic slices stay the op."""
    n = base.shape[dim]
    if step != 1 or src.dtype != base.dtype or src.dim() != base.dim() \
            or any(isinstance(v, torch.SymInt) for v in (n, start, end, *base.shape, *src.shape)):
        return NotImplemented
    begin = slice(start, end).indices(n)[0]
    stop = begin + src.shape[dim]
    parts = [base.narrow(dim, 0, begin), src, base.narrow(dim, stop, n - stop)]
    return torch.cat([p for p in parts if p.shape[dim] > 0] or [src], dim)


_FLOATS = (torch.float32, torch.float64)


def _as_dtype(value: float, dtype: torch.dtype) -> float:
    """`value` rounded to `dtype` (float32 or float64), as eager's kernels hold a number argument."""
    return struct.unpack("f", struct.pack("f", value))[0] if dtype == torch.float32 else float(value)


def _number_weighted_decompositions(table: Dict) -> Dict:
    """lerp, addcmul and addcdiv of same-dtype float tensors with a number weight, spelled as
    eager's CPU kernels compute them. torch's decompositions make a tensor of the number and pass
    through type-promotion wrappers, which costs most of an optimizer graph's re-trace (one call
    per parameter); other dtypes keep torch's."""
    table = {op: table[op] for op in (aten.lerp.Scalar, aten.addcmul.default, aten.addcdiv.default)}

    def lerp(start, end, weight):
        if start.dtype not in _FLOATS or end.dtype != start.dtype or not isinstance(weight, (int, float)):
            return table[aten.lerp.Scalar](start, end, weight)
        diff = aten.sub.Tensor(end, start)
        w = _as_dtype(weight, start.dtype)
        if abs(w) < 0.5:  # eager: from start for small weights, back from end for the others
            return aten.add.Tensor(start, aten.mul.Tensor(diff, w))
        return aten.sub.Tensor(end, aten.mul.Tensor(diff, _as_dtype(1 - w, start.dtype)))

    def pointwise(op, combine):
        def decomposition(self, tensor1, tensor2, *, value=1):
            if self.dtype not in _FLOATS or {tensor1.dtype, tensor2.dtype} != {self.dtype} \
                    or not isinstance(value, (int, float)) or isinstance(value, bool):
                return table[op](self, tensor1, tensor2, value=value)
            return aten.add.Tensor(self, combine(aten.mul.Tensor(tensor1, value), tensor2))
        return decomposition

    return {aten.lerp.Scalar: lerp,
            aten.addcmul.default: pointwise(aten.addcmul.default, aten.mul.Tensor),
            aten.addcdiv.default: pointwise(aten.addcdiv.default, aten.div.Tensor)}


# foreach ops that are not their op applied to each tensor (a norm, copies, reductions)
_FOREACH_KEPT = {"norm", "copy", "zero", "max", "mm"}


def _foreach_decompositions() -> Dict:
    """Each functional aten._foreach_<op> overload as <op> applied tensor by tensor, so an optimizer's
    foreach step lowers to the same per-parameter loops as its single-tensor step (and shares them
    as multi-tensor code). Overloads with a tensor of per-tensor scalars are kept."""
    table = {}
    for schema in torch._C._jit_get_all_schemas():
        name = schema.name.split("::")[-1]
        if not schema.name.startswith("aten::_foreach_") or name.endswith("_"):
            continue
        op_name = name[len("_foreach_"):]
        if op_name in _FOREACH_KEPT or not hasattr(aten, op_name) \
                or any(a.name == "scalars" and str(a.type) == "Tensor" for a in schema.arguments):
            continue
        overload = getattr(getattr(aten, name), schema.overload_name or "default", None)
        if overload is not None:
            op = getattr(aten, op_name)
            keyword_only = {a.name for o in op.overloads() for a in getattr(op, o)._schema.arguments if a.kwarg_only}
            # positional in the foreach op, keyword-only in the op (addcmul's value)
            as_keywords = [(k, a.name) for k, a in enumerate(schema.arguments) if a.name in keyword_only and not a.kwarg_only]
            table[overload] = functools.partial(_per_tensor, op, as_keywords)
    return table


def _per_tensor(op: Any, as_keywords: List[Tuple[int, str]], *args: Any, **kwargs: Any) -> List[torch.Tensor]:
    kwargs = dict(kwargs, **{name: args[k] for k, name in as_keywords if k < len(args)})
    args = [a for k, a in enumerate(args) if all(k != j for j, _ in as_keywords)]
    n = len(next(a for a in args if isinstance(a, (list, tuple))))
    pick = lambda a, i: a[i] if isinstance(a, (list, tuple)) else a  # noqa: E731
    return [op(*(pick(a, i) for a in args), **{k: pick(v, i) for k, v in kwargs.items()}) for i in range(n)]


def _hint(v: Any) -> Any:
    return optimization_hint(v) if isinstance(v, torch.SymInt) else v


def trace(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], input_writes: bool = False):
    """Re-trace `gm` functional and decomposed (see _traced); returns (graph, fresh inputs like the examples).
    Examples with symbolic sizes (fake tensors, SymInts) are traced as they are, in their shape env.
    With `input_writes`, a graph that changes its inputs in place is taken: the traced graph
    returns (outputs, (new value of each changed input, ...)) and `meta["input_writes"]` lists those
    inputs' positions (the caller copies the new values into them)."""
    symbolic = any(map(has_symbolic_sizes, example_inputs))
    if any(torch.is_autocast_enabled(device) for device in ("cpu", "cuda")):
        # make_fx runs autocast's cast of a module tensor (a stand-in, see _with_stand_ins) eagerly
        # and keeps the result as a constant: the kernels would read the stand-in's garbage
        raise CannotCompile("autocast is enabled")
    with unset_fake_temporarily():
        inputs = list(example_inputs) if symbolic else [
            torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device) for t in example_inputs]
        stand_ins: Dict[int, Tuple[torch.Tensor, torch.Tensor]] = {}
        traceable = _with_stand_ins(gm, stand_ins)
    try:
        traced, writes = _traced(traceable, inputs, symbolic, input_writes)
    except Exception:
        check_eager_accepts_copies(gm, example_inputs)  # often eager's own refusal, met in a decomposition
        raise
    if writes is None:
        target = _mutating_op(traced, input_writes and not symbolic)
        if target is not None:
            raise CannotCompile(f"graph mutates its inputs ({target})")
        writes = _take_input_writes(traced) if input_writes else {}
    _refuse_shared_writes(writes, example_inputs)
    _restore_originals(traced, stand_ins)
    if writes:
        _match_eager_outputs(traced, check_eager_accepts_copies(gm, example_inputs))
        _return_input_writes(traced, writes)
    else:
        _match_eager_outputs(traced, check_eager_accepts(gm, example_inputs))
    return traced, inputs


def _traced(traceable: torch.fx.GraphModule, inputs: List[Any], symbolic: bool, input_writes: bool
            ) -> Tuple[torch.fx.GraphModule, Optional[Dict[int, torch.fx.Node]]]:
    """The re-trace, and where the graph's in-place ops were rewritten at FX level (fx_functional),
    the new value of each input it writes by position (else None: functionalization's copies into
    the inputs, if any, are in the graph)."""
    if symbolic or writes_nothing(traceable):
        # torch.func.functionalize specialises the sizes composite ops (linear) read, and adds
        # about a third to the trace's cost: decompose, then functionalise only a graph that still writes
        decomposed = _decomposed_trace(traceable, inputs, symbolic)
        if _mutating_op(decomposed) is None:
            return decomposed, None
        return _functional_trace(_alias_prims_as_aten(decomposed), inputs, symbolic), None
    if input_writes:
        rewritten = _fx_functional_trace(traceable, inputs)
        if rewritten is not None:
            return rewritten
    traced = _functional_trace(traceable, inputs)
    if _mutating_op(traced, input_writes) is None:
        return traced, None
    # Decompositions run below functionalization, so an in-place op inside one (GRU's
    # decomposition adds in place) survives; decomposing first and then functionalising
    # the decomposed graph removes those, leaving only genuine input mutations.
    return _functional_trace(_alias_prims_as_aten(_decomposed_trace(traceable, inputs)), inputs), None


def writes_nothing(gm: torch.fx.GraphModule) -> bool:
    """Whether every op of `gm` is an ATen op whose schema writes no argument, or a getitem of a
    result (aot_autograd's forward and backward graphs)."""
    return all(n.op in ("placeholder", "output", "get_attr") or (n.op == "call_function" and (
        n.target is operator.getitem or (isinstance(n.target, torch._ops.OpOverload) and not n.target._schema.is_mutable)))
        for n in gm.graph.nodes)


def _fx_functional_trace(traceable: torch.fx.GraphModule, inputs: List[Any]
                         ) -> Optional[Tuple[torch.fx.GraphModule, Dict[int, torch.fx.Node]]]:
    """The decomposed trace of `traceable` with its in-place ops rewritten out of place, and the new
    value of each input it writes; None where the rewrite is not exact or something still writes."""
    rewritten = functional_graph(traceable)
    if rewritten is None:
        return None
    gm, positions = rewritten
    try:
        traced = _decomposed_trace(gm, inputs)
    except NotFunctional:
        return None
    if _mutating_op(traced) is not None:  # an op writing that the rewrite did not know (`inplace=True`)
        return None
    output = next(n for n in traced.graph.nodes if n.op == "output")
    outputs, new_values = output.args[0]
    output.args = (outputs,)
    traced.recompile()
    return traced, dict(zip(positions, new_values))


def _take_input_writes(traced: torch.fx.GraphModule) -> Dict[int, torch.fx.Node]:
    """Remove functionalization's copies of new values into inputs: input position -> new value."""
    placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
    writes: Dict[int, torch.fx.Node] = {}
    for node in list(traced.graph.nodes):
        if node.target is aten.copy_.default and node.args[0] in placeholders and not node.users:
            writes[placeholders.index(node.args[0])] = node.args[1]
            traced.graph.erase_node(node)
    return writes


def _refuse_shared_writes(writes: Dict[int, torch.fx.Node], example_inputs: Sequence[Any]) -> None:
    """Refuse a graph changing an input that shares memory with another input (the order of the
    copies of new values would matter, and reads of the other would see the change)."""
    storages = [t.untyped_storage()._cdata if isinstance(t, torch.Tensor) else None for t in example_inputs]
    for i in writes:
        if storages.count(storages[i]) > 1:
            raise CannotCompile("an input changed in place shares memory with another input")


def _return_input_writes(traced: torch.fx.GraphModule, writes: Dict[int, torch.fx.Node]) -> None:
    output = next(n for n in traced.graph.nodes if n.op == "output")
    # in the order the graph computes them: an update reading another's new value (a parameter's
    # from its moment estimates) is then laid out after it, in the same loop
    place = {n: k for k, n in enumerate(traced.graph.nodes)}
    order = sorted(writes, key=lambda i: place[writes[i]])
    output.args = ((output.args[0], tuple(writes[i] for i in order)),)
    traced.meta["input_writes"] = order
    traced.recompile()


def _match_eager_outputs(traced: torch.fx.GraphModule, layouts: Sequence[Optional[Tuple[Tuple[int, ...], torch.dtype]]]) -> None:
    """Refuse a graph whose outputs eager's kernels make in another dtype than the meta kernels say
    (CPU batch norm keeps float statistics of bf16 inputs: autograd would hand the backward the
    wrong dtype). Mark the outputs whose eager strides differ from the traced ones only in dimensions
    of size 0 or 1, where the stride is each kernel's choice (meta kernels may choose another): the
    lowering lays them out as eager does (meta "eager_stride"), since `y.stride()` shows the difference."""
    output = next(n for n in traced.graph.nodes if n.op == "output")
    nodes = tree_flatten(output.args[0])[0]
    if len(nodes) != len(layouts):
        return
    for node, layout in zip(nodes, layouts):
        val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        if layout is None or not isinstance(val, torch.Tensor):
            continue
        if has_symbolic_sizes(val):  # sizes vary: only the dtype is the same for every call
            if layout[1] != val.dtype:
                raise CannotCompile(f"eager makes {node.name} in {layout[1]}, the meta kernels in {val.dtype}")
            continue
        stride, dtype = layout
        if dtype != val.dtype:
            raise CannotCompile(f"eager makes {node.name} in {dtype}, the meta kernels in {val.dtype}")
        if val.dim() != len(stride):
            continue
        traced_stride = tuple(val.stride())
        if traced_stride != stride and all(a == b or size <= 1 for size, a, b in zip(val.shape, traced_stride, stride)):
            node.meta["eager_stride"] = stride


def _with_stand_ins(gm: torch.fx.GraphModule, stand_ins: Dict, copy_values: bool = False) -> torch.fx.GraphModule:
    """`gm` reading stand-ins for the tensors of its modules, without touching those modules: make_fx
    applies in-place ops to the real tensors it meets, so tracing a BatchNorm in training would
    count `num_batches_tracked` up once per trace. Values are copied with `copy_values`, else only
    where make_fx may read them (one-element tensors, which it propagates as constants);
    `stand_ins` maps each stand-in back to its original."""
    def stand_in(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        twin = _copy(value) if copy_values or value.numel() <= 1 else torch.empty_strided(
            value.shape, value.stride(), dtype=value.dtype, device=value.device)
        stand_ins[id(twin)] = (twin, value)
        return twin

    def stand_in_module(module: torch.nn.Module) -> torch.nn.Module:
        twin = copy.copy(module)
        twin._parameters = {k: stand_in(v) for k, v in module._parameters.items()}
        twin._buffers = {k: stand_in(v) for k, v in module._buffers.items()}
        twin._modules = {k: v if v is None else stand_in_module(v) for k, v in module._modules.items()}
        for k, v in vars(module).items():
            if isinstance(v, torch.Tensor):
                object.__setattr__(twin, k, stand_in(v))
        return twin

    root: Dict[str, Any] = {}
    for node in gm.graph.nodes:
        if node.op in ("get_attr", "call_module"):
            value = fetch_attr(gm, node.target)
            root[node.target] = stand_in_module(value) if isinstance(value, torch.nn.Module) else stand_in(value)
    if not root:  # nothing to stand in for (aot_autograd's graphs take every tensor as an input)
        return gm
    return torch.fx.GraphModule(root, copy.deepcopy(gm.graph))


def _copy(t: torch.Tensor) -> torch.Tensor:
    """A copy of `t` with its strides (a fake tensor stays fake: check_eager_accepts fills it)."""
    if isinstance(t, FakeTensor) or not isinstance(t, torch.Tensor):
        return t
    if not is_dense(t.shape, t.stride()):  # overlapping (expanded): a copy cannot keep its strides
        return t.detach().clone()
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device).copy_(t.detach())


def _restore_originals(traced: torch.fx.GraphModule, stand_ins: Dict) -> None:
    """Point the traced graph's constants back at the tensors the stand-ins stood for."""
    for node in traced.graph.nodes:
        if node.op != "get_attr":
            continue
        hit = stand_ins.get(id(fetch_attr(traced, node.target)))
        if hit is not None:
            parent, _, name = node.target.rpartition(".")
            owner = fetch_attr(traced, parent) if parent else traced
            if name in owner._parameters:
                owner._parameters[name] = hit[1]
            elif name in owner._buffers:
                owner._buffers[name] = hit[1]
            else:
                object.__setattr__(owner, name, hit[1])


def check_eager_accepts_copies(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]
                               ) -> List[Optional[Tuple[Tuple[int, ...], torch.dtype]]]:
    """check_eager_accepts on copies of the inputs and module tensors, for a graph that may mutate them."""
    with unset_fake_temporarily():
        return check_eager_accepts(_with_stand_ins(gm, {}, copy_values=True), [_copy(t) for t in example_inputs])


def check_eager_accepts(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]
                        ) -> List[Optional[Tuple[Tuple[int, ...], torch.dtype]]]:
    """Run `gm` eagerly once on the example inputs (zeros for fake ones) and raise EagerRejects if
    eager raises. Decompositions and lowerings accept what eager's kernels refuse (softmax of
    uint8, max over an empty dim); with sizes and dtypes fixed by the guards, eager's answer for
    these inputs is its answer for every call. The graph mutates nothing (checked by the trace);
    random ops draw from a saved and restored generator state. Returns the strides and dtypes of
    eager's outputs (flattened; None for what is not a tensor)."""
    with unset_fake_temporarily():
        # fake inputs become zeros; symbolic sizes take their values at the example
        inputs = [torch.empty_strided([_hint(s) for s in t.shape], [_hint(s) for s in t.stride()],
                                      dtype=t.dtype, device=t.device).zero_()
                  if isinstance(t, FakeTensor) else _hint(t) for t in example_inputs]
        devices = sorted({t.device.index or 0 for t in inputs if isinstance(t, torch.Tensor) and t.device.type == "cuda"})
        try:
            with torch.no_grad(), torch.random.fork_rng(devices), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                outputs = gm.forward(*inputs)  # not gm(): on an error that prints the graph code to stderr
        except Exception as e:
            raise EagerRejects(f"{type(e).__name__}: {e}") from e
    return [(tuple(t.stride()), t.dtype) if isinstance(t, torch.Tensor) else None for t in tree_flatten(outputs)[0]]


def _functional_trace(fn, inputs, symbolic: bool = False) -> torch.fx.GraphModule:
    return _make_fx(torch.func.functionalize(fn, remove="mutations"), inputs, symbolic)


def _decomposed_trace(fn, inputs, symbolic: bool = False) -> torch.fx.GraphModule:
    return _make_fx(fn, inputs, symbolic)


def _make_fx(fn, inputs, symbolic: bool) -> torch.fx.GraphModule:
    """make_fx decomposing `fn`. Static sizes are traced outside torch.compile's tracing context:
    make_fx would take that context's fake mode, whose shape env gives fresh tensors (the copies
    traced here) symbolic sizes."""
    context = contextlib.nullcontext() if symbolic else torch._guards.tracing(None)
    with torch.no_grad(), context:
        return make_fx(fn, decomposition_table=decompositions(), tracing_mode="symbolic" if symbolic else "fake",
                       _allow_non_fake_inputs=True)(*inputs)


def _broadcast_in_dim(a: torch.Tensor, shape: Sequence[int], broadcast_dimensions: Sequence[int]) -> torch.Tensor:
    for dim in range(len(shape)):
        if dim not in broadcast_dimensions:
            a = a.unsqueeze(dim)
    return a.expand(shape)


def _alias_prims_as_aten(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Functionalization refuses prims ops whose output aliases an input, which decompositions
    (var_mean, batch norm) leave in a graph: spell them with the ATen views they stand for."""
    for node in gm.graph.nodes:
        target = node.target
        if target is torch.ops.prims.broadcast_in_dim.default:
            node.target = _broadcast_in_dim
        elif (isinstance(target, torch._ops.OpOverload) and target.namespace == "prims"
              and any(r.alias_info is not None for r in target._schema.returns)):
            raise CannotCompile(f"{target} (a view op of prims) in a graph that mutates inside a decomposition")
    gm.recompile()
    return gm


def _mutating_op(gm: torch.fx.GraphModule, except_input_writes: bool = False):
    """The first op changing a tensor in place (`except_input_writes`: other than functionalization's
    final copy of a new value into an input)."""
    placeholders = {n for n in gm.graph.nodes if n.op == "placeholder"}
    for node in gm.graph.nodes:
        target = node.target
        if except_input_writes and target is aten.copy_.default and node.args[0] in placeholders:
            continue
        if isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable:
            return target
    return None
