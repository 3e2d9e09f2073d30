"""What the "cpp" and "triton" backends share: eager fallbacks, gradients through aot_autograd.

Graphs that need gradients go through aot_autograd, with forward and backward both compiled by the
code generator. Symbolic sizes compile too (the kernels take them as arguments; see
codegen/sizes). Anything it cannot take (non-tensor inputs other than sizes, input mutation,
tensors of a torch.func transform, subgraphs run under checkpoint or a transform, inputs eager
rejects, an internal error) runs eagerly instead: results are never approximated by dropping work,
and errors are eager's own.
"""
from __future__ import annotations

import contextlib
import copy
import logging
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
from torch.utils._pytree import tree_flatten

from .. import config
from ..counters import record_fallback
from ..frame_hook import disabled
from ..codegen.fx_functional import may_write_in_place
from .mask_writes import rewrite_mask_writes

log = logging.getLogger(__name__)

# Their decompositions call mkldnn's RNN kernel in inference mode, which returns no workspace,
# yet the backward graph aot_autograd derives from them reads it: with gradients they run eagerly.
_RECURRENT = {torch.lstm, torch.gru, torch.rnn_tanh, torch.rnn_relu}


def has_recurrent_ops(gm: torch.fx.GraphModule) -> bool:
    return any(n.op == "call_function" and n.target in _RECURRENT for n in gm.graph.nodes)


def sets_grad_mode(gm: torch.fx.GraphModule) -> bool:
    """Grad-mode switches are nodes without outputs, which tracing for the kernels drops: such
    graphs run eagerly so the mode the caller sees afterwards is eager's."""
    return any(n.op == "call_function" and n.target is torch._C._set_grad_enabled for n in gm.graph.nodes)


def calls_traced_body(gm: torch.fx.GraphModule) -> bool:
    """A node runs a subgraph under a torch rule (checkpoint, a torch.func transform): the rule must
    see the subgraph's ops at run time (recomputation in backward, transformed tensors), so the graph
    runs eagerly."""
    return any(n.op == "call_function" and hasattr(n.target, "traced_body") for n in gm.graph.nodes)


def traceable_examples(gm: torch.fx.GraphModule, example_inputs: Sequence) -> Optional[List]:
    """The example inputs the code generators trace: the tensors given when their sizes are static;
    with symbolic sizes, fake inputs whose sizes are the symbols: aot_autograd passes those, while
    minidynamo (one call's tensors, the sizes as ints) and torch.compile (one call's tensors, the
    sizes as SymInts) leave them in the placeholders' metadata. None when some input is neither a
    tensor nor a size."""
    from ..codegen.sizes import has_symbolic_sizes  # sympy: loaded once a graph compiles

    symbolic = any(map(has_symbolic_sizes, example_inputs))
    if symbolic and all(isinstance(t, (FakeTensor, torch.SymInt)) for t in example_inputs):
        return list(example_inputs)
    metas = [n.meta.get("example_value", n.meta.get("val")) for n in gm.graph.nodes if n.op == "placeholder"]
    if len(metas) == len(example_inputs) and any(map(has_symbolic_sizes, metas)):
        return metas if all(isinstance(m, (torch.Tensor, torch.SymInt)) for m in metas) else None
    if not symbolic and all(isinstance(t, torch.Tensor) for t in example_inputs):
        return list(example_inputs)
    return None


def no_grad_body(gm: torch.fx.GraphModule) -> Optional[torch.fx.GraphModule]:
    """A graph whose ops all run with grad mode off, switched by its own nodes and left as the
    caller had it (an optimizer step or gradient clipping under no_grad): a copy without the
    switches, else None."""
    entry = mode = torch.is_grad_enabled()
    switches = []
    for n in gm.graph.nodes:
        if n.op not in ("call_function", "call_method", "call_module"):
            continue
        if n.target is torch._C._set_grad_enabled:
            if len(n.args) != 1 or not isinstance(n.args[0], bool) or n.kwargs:
                return None
            mode = n.args[0]
            switches.append(n.name)
        elif mode:
            return None
    if not switches or mode != entry:
        return None
    body = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    for node in [n for n in body.graph.nodes if n.name in switches]:
        body.graph.erase_node(node)
    body.recompile()
    return body


def under_functorch(gm: torch.fx.GraphModule, example_inputs: Sequence) -> bool:
    """Compiled inside a torch.func transform (grad, vjp, jacrev, vmap): its wrapped tensors have
    no storage the kernels could read, and the transform must see every op, so such graphs run
    eagerly."""
    from torch._C._functorch import is_functorch_wrapped_tensor, peek_interpreter_stack

    from ..codegen.graph_lowering import fetch_attr

    if peek_interpreter_stack() is not None:
        return True
    attrs = [fetch_attr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"]
    return any(isinstance(t, torch.Tensor) and is_functorch_wrapped_tensor(t)
               for t in (*example_inputs, *attrs))


def has_unused_ops(gm: torch.fx.GraphModule) -> bool:
    return any(n.op in ("call_function", "call_method", "call_module") and not n.users for n in gm.graph.nodes)


def dynamic_floats(gm: torch.fx.GraphModule) -> List[str]:
    """The float symbols (torch's `zf0`...) of the graph's inputs where torch.compile made a Python
    float dynamic: it passes such a float as a 0-d tensor whose `.item()` the graph reads. The
    kernels take no float arguments, so these are handed back to torch to specialize."""
    if torch._guards.TracingContext.try_get() is None:  # not compiled by torch.compile
        return []
    names = []
    for node in gm.graph.nodes:
        memo = getattr(node.meta.get("example_value"), "item_memo", None) if node.op == "placeholder" else None
        if isinstance(memo, torch.SymFloat) and memo.node._expr.is_Symbol:
            names.append(str(memo.node._expr))
    return names


def specialize_floats(names: List[str]) -> None:
    """Have torch.compile trace the frame again with these dynamic floats as constants (guarded),
    as inductor does with the floats it cannot turn into tensors. Returns (without restarting)
    where torch was asked already and kept them dynamic."""
    from torch._dynamo.exc import TensorifyScalarRestartAnalysis
    from torch._dynamo.symbolic_convert import TensorifyState

    if all(map(TensorifyState.should_specialize, names)):
        return
    for name in names:
        TensorifyState.specialize(name)
    raise TensorifyScalarRestartAnalysis


def eager_reason(gm: torch.fx.GraphModule, example_inputs: Sequence) -> Optional[str]:
    """Why the code generators leave this graph to eager torch, or None."""
    if traceable_examples(gm, example_inputs) is None:
        return "inputs that are neither tensors nor symbolic ints (a symbolic float, say)"
    if under_functorch(gm, example_inputs):
        return "traced inside a torch.func transform"
    if sets_grad_mode(gm):
        return "the graph switches grad mode"
    if calls_traced_body(gm):
        return "a subgraph run under checkpoint or a torch.func transform"
    return None


def output_strides(gm: torch.fx.GraphModule, compiled: Any) -> Dict[str, tuple]:
    """The strides of a compiled graph's tensor outputs, by output node name (static sizes only)."""
    specs = getattr(compiled, "outputs", None)
    nodes = tree_flatten(next(n for n in gm.graph.nodes if n.op == "output").args[0])[0]
    if specs is None or len(specs) != len(nodes):
        return {}
    return {n.name: tuple(o.stride) for n, o in zip(nodes, specs) if isinstance(n, torch.fx.Node)
            and o.kind == "buffer" and all(isinstance(st, int) for st in o.stride)}


def as_saved(gm: torch.fx.GraphModule, inputs: List[Any], strides: Dict[str, tuple]) -> List[Any]:
    """A backward's example inputs with the saved tensors laid out as the compiled forward returns
    them (aot_autograd names each after the forward output it is). aot_autograd's trace lays them
    out as the meta functions do, which eager's kernels, and so the compiled forward, may not (t5's
    attention scores: the transpose of a view the kernel made contiguous): a saved tensor laid out
    otherwise than its backward was compiled for is copied on every call."""
    from ..codegen.sizes import has_symbolic_sizes

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out = list(inputs)
    for i, (node, t) in enumerate(zip(placeholders, inputs)):
        stride = strides.get(node.name)
        if stride is None or not isinstance(t, torch.Tensor) or has_symbolic_sizes(t) \
                or len(stride) != t.dim() or tuple(t.stride()) == stride:
            continue
        with (t.fake_mode if isinstance(t, FakeTensor) else contextlib.nullcontext()):
            out[i] = torch.empty_strided(t.shape, stride, dtype=t.dtype, device=t.device, requires_grad=t.requires_grad)
    return out


def needs_grad(gm: torch.nn.Module, inputs: Sequence) -> bool:
    if not torch.is_grad_enabled():
        return False
    return any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs) \
        or any(p.requires_grad for p in gm.parameters())



def partition_for(gm: torch.fx.GraphModule) -> Callable:
    """How aot_autograd splits `gm`'s forward and backward. The min-cut partitioner recomputes cheap
    values in the backward from what it saves, the graph's inputs among them; but an input the graph
    changes in place is saved as the changed object, so a backward recomputing from it sees the new
    value, or autograd's version check fails where eager, which saved the value computed before
    the change, succeeds. There, the default partition saves the values the forward computed, as
    eager's nodes do."""
    from torch._functorch.partitioners import default_partition, min_cut_rematerialization_partition

    return default_partition if writes_an_input(gm) else min_cut_rematerialization_partition


def writes_an_input(gm: torch.fx.GraphModule) -> bool:
    """Whether an in-place op of `gm` may change one of its inputs: the tensor it writes is an input,
    or made from one (followed through first arguments, views among them, so more than views)."""
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method") and may_write_in_place(node) and node.args:
            target = node.args[0]
            while isinstance(target, torch.fx.Node) and target.op != "placeholder" and target.args:
                target = target.args[0]
            if isinstance(target, torch.fx.Node) and target.op == "placeholder":
                return True
    return False

class CodegenBackend:
    """A torch.compile-style backend over one of our code generators (`compile_graph`).

    It takes the options torch.compile's modes stand for and needs none of them: Triton kernels
    always time their candidate launch configs, the C++ renderer tunes each kernel as it writes it,
    and graphs are not captured as CUDA graphs."""

    known_options = frozenset({"max_autotune", "coordinate_descent_tuning", "triton.cudagraphs"})

    def __init__(self, name: str, compile_graph: Callable[[torch.fx.GraphModule, List[torch.Tensor]], Callable],
                 compile_writing: Optional[Callable[[torch.fx.GraphModule, List[torch.Tensor]], Callable]] = None):
        self.__name__ = name
        self.compile_graph = compile_graph
        # for graphs that change their inputs in place (None: they run eagerly)
        self.compile_writing = compile_writing

    def _eager(self, gm: torch.fx.GraphModule, reason: str) -> Callable:
        record_fallback(self.__name__, reason)
        return gm.forward

    def _fallback(self, gm: torch.fx.GraphModule, error: Exception) -> Callable:
        """The graph run eagerly after `error` stopped its compilation (re-raised in strict mode
        unless it says eager rejects the inputs: then eager raises its own error on each call)."""
        from ..codegen.errors import CannotCompile, EagerRejects

        if isinstance(error, EagerRejects):
            return self._eager(gm, f"eager raises on this graph's inputs: {error}")
        if config.strict:
            raise error
        if not isinstance(error, CannotCompile):
            log.warning("%s backend: falling back to eager", self.__name__, exc_info=error)
        return self._eager(gm, f"{type(error).__name__}: {error}")

    def compile_inference(self, gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor]) -> Callable:
        """Compile a graph whose outputs need no autograd history; eager fallback on any failure."""
        try:
            # aot_autograd compiles inside its fake mode: buffers and constants made now must be real
            with unset_fake_temporarily():
                return self.compile_graph(gm, example_inputs)
        except Exception as e:
            return self._fallback(gm, e)

    def compile_autograd(self, gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor]) -> Callable:
        from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func

        from ..codegen.trace import check_eager_accepts_copies

        if has_unused_ops(gm):  # aot_autograd drops them: eager's error in one would be lost
            check_eager_accepts_copies(gm, example_inputs)
        gm = rewrite_mask_writes(gm)

        output = next(n for n in gm.graph.nodes if n.op == "output")
        single = not isinstance(output.args[0], (tuple, list))
        if single:
            # aot_autograd wants tuple outputs; wrap a copy and unwrap the result.
            gm = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
            out = next(n for n in gm.graph.nodes if n.op == "output")
            out.args = ((out.args[0],),)
            gm.recompile()

        saved: Dict[str, tuple] = {}  # forward output -> the strides its compiled graph gives it

        def boxed(role: str) -> Callable:
            # Never under the frame hook, which would convert the graph's own code again: where
            # aot_autograd compiles a backward lazily, in the first backward(), that runs inside
            # a compiled frame (a whole train step) with the hook on.
            @disabled
            def compile_part(g: torch.fx.GraphModule, inputs: List[torch.Tensor]) -> Callable:
                if role == "backward":
                    inputs = as_saved(g, inputs, saved)
                compiled = self.compile_inference(g, inputs)
                if hasattr(compiled, "times"):  # named in profiles
                    compiled.times.role = role
                if role == "forward":
                    saved.update(output_strides(g, compiled))
                return make_boxed_func(compiled)
            return compile_part

        # The backward compiles with the forward, not in the first backward(), so that the two
        # libraries build in parallel (codegen.cpp_build.load_library_later). The forward saves
        # for the backward what torch's min-cut partitioner chooses (as inductor's does): views,
        # transposes and cheap pointwise values are recomputed in the backward's kernels instead
        # of returned, each a tensor the forward's wrapper makes and aot_autograd's runtime and
        # the autograd engine handle (llama fwd+bwd: 62 saved values instead of 81, 13% faster).
        # Without its CSE pass, which imports inductor's pattern matcher (about 1 s, once).
        with torch._functorch.config.patch(force_non_lazy_backward_lowering=True, cse=False):
            compiled = aot_module_simplified(gm, example_inputs, fw_compiler=boxed("forward"), bw_compiler=boxed("backward"),
                                             partition_fn=partition_for(gm))
        return (lambda *args: compiled(*args)[0]) if single else compiled

    def compile_no_grad(self, gm: torch.fx.GraphModule, body: torch.fx.GraphModule,
                        example_inputs: List[torch.Tensor]) -> Callable:
        """`gm`, whose `body` runs under no_grad and may change its inputs in place (an optimizer
        step), compiled as `body` called with grad mode off."""
        reason = eager_reason(body, example_inputs)
        if reason is not None:
            return self._eager(gm, reason)
        example_inputs = traceable_examples(body, example_inputs)
        try:
            with unset_fake_temporarily(), torch.no_grad():
                compiled = self.compile_writing(body, example_inputs)
        except Exception as e:
            return self._fallback(gm, e)
        call, set_grad = compiled.run, torch._C._set_grad_enabled

        def run(*args):
            mode = torch.is_grad_enabled()
            set_grad(False)
            try:
                return call(*args)
            finally:
                set_grad(mode)
        run.compiled = compiled  # type: ignore[attr-defined]
        return run

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor],
                 options: Optional[Dict[str, Any]] = None) -> Callable:
        floats = dynamic_floats(gm)
        if floats:
            specialize_floats(floats)
            return self._eager(gm, f"dynamic floats {floats} that torch.compile keeps dynamic")
        body = no_grad_body(gm) if self.compile_writing is not None else None
        if body is not None:
            return self.compile_no_grad(gm, body, example_inputs)
        reason = eager_reason(gm, example_inputs)
        if reason is not None:
            return self._eager(gm, reason)
        example_inputs = traceable_examples(gm, example_inputs)
        if needs_grad(gm, example_inputs):
            if has_recurrent_ops(gm):
                return self._eager(gm, "recurrent ops (lstm, gru, rnn) with gradients")
            try:
                return self.compile_autograd(gm, example_inputs)
            except Exception as e:
                return self._fallback(gm, e)
        compiled = self.compile_inference(gm, example_inputs)
        if compiled == gm.forward:
            return compiled

        params = list(gm.parameters())
        call = getattr(compiled, "run", compiled)  # skip a frame where the graph has a plain function

        name = self.__name__

        def run(*args):
            # Compiled without autograd: if the caller now wants gradients, keep them correct.
            if torch.is_grad_enabled() and (any(isinstance(t, torch.Tensor) and t.requires_grad for t in args)
                                            or any(p.requires_grad for p in params)):
                record_fallback(name, "a graph compiled without gradients called with inputs that need them")
                return gm.forward(*args)
            return call(*args)

        run.compiled = compiled  # type: ignore[attr-defined]
        return run
