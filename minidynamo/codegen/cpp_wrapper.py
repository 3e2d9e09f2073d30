"""The call of a compiled C++ graph: one generated straight-line Python function per graph, so a
call costs little more than its ctypes calls and allocations (what dominates small models), with
large buffers pooled (see _Pooled)."""
from __future__ import annotations

import collections
import ctypes
import os
import sys
import threading
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import torch
from torch.utils._pytree import tree_map, tree_unflatten

from .. import perf
from .cpp_attention import Attention
from .cpp_conv import Conv
from .cpp_conv_backward import ConvBackward
from .cpp_gemm import Gemm, prepackable
from .cpp_copy import Copy, Gather
from .cpp_indexed import IndexedStep
from .cpp_render import GENERATED, CppKernel, KernelGroup
from .cpp_tuning import runs_serially
from .errors import CannotCompile
from .graph_lowering import ExternArg, GraphLowering
from .ir import Buffer, ExternNode, numel
from .runtime import CompiledGraph, materialize, relayout, run_eagerly_after, same_layout
from .scheduler import Kernel, Step
from .sizes import any_symbolic, is_symbolic, size_code, tuple_code

_HERE = os.path.dirname(os.path.abspath(__file__))
_POOL_MIN_BYTES = 16 << 20  # glibc serves smaller blocks from its heap, without fresh page faults
_MADV_HUGEPAGE = 14


class _Pooled:
    """One large buffer slot of a graph. glibc hands every block over 32 MiB straight to mmap,
    so a fresh 64 MiB output costs 16k page faults and 64 MiB of kernel zeroing on each call,
    more than the kernel that fills it. A slot keeps the storage of its last result and hands it
    out again once nothing else refers to it (no tensor, view or storage object: the storage's use
    count is back to our own reference), so results the caller keeps are never overwritten. New
    storages are mmap'ed with MADV_HUGEPAGE (2 MiB pages: 512x fewer faults)."""

    __slots__ = ("size", "stride", "dtype", "nbytes", "storage", "lock")

    def __init__(self, buf: Buffer):
        self.size, self.stride, self.dtype = tuple(buf.size), tuple(buf.stride), buf.dtype
        self.nbytes = buf.span_bytes()
        self.storage = None
        self.lock = threading.Lock()  # two threads must never both take the free storage

    def __call__(self) -> torch.Tensor:
        with self.lock:
            return self._take()

    def _take(self) -> torch.Tensor:
        st = self.storage
        # References: the slot, `st` and getrefcount's argument. A caller's `t.untyped_storage()`
        # is this same Python object (one per storage), so it shows in the refcount, not the use count.
        # The argument is loaded from the slot: 3.14 passes a local like `st` borrowed, uncounted.
        if st is None or _use_count(st._cdata) != 1 or _refcount(self.storage) != 3:
            st = self.storage = _huge_storage(self.nbytes)
        return torch.empty(0, dtype=self.dtype).set_(st, 0, self.size, self.stride)


_use_count = torch._C._storage_Use_Count
_refcount = sys.getrefcount


def _huge_storage(nbytes: int) -> torch.UntypedStorage:
    import mmap
    try:
        m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        try:
            m.madvise(getattr(mmap, "MADV_HUGEPAGE", _MADV_HUGEPAGE))
        except (OSError, ValueError, AttributeError):
            pass
        # frombuffer keeps `m` alive for as long as the storage lives.
        return torch.frombuffer(m, dtype=torch.uint8).untyped_storage()
    except (OSError, ValueError, TypeError):
        return torch.UntypedStorage(nbytes)


try:  # torch's own CPU allocation without the dispatcher (what inductor's wrappers call): ~4x quicker
    from torch._C._dynamo.guards import _empty_strided_cpu as _empty_strided
except ImportError:  # pragma: no cover - older or other torch builds
    def _empty_strided(size, stride, dtype):
        return torch.empty_strided(size, stride, dtype=dtype)


_OMP = ctypes.CDLL("libgomp.so.1")  # torch's OpenMP runtime, already loaded (the kernels' too)


def _enter_serial() -> int:
    """Run this thread's parallel regions (ours, oneDNN's, torch's) on it alone, until _restore:
    OpenMP's thread count is a per-thread setting. Returns the count to restore."""
    before = _OMP.omp_get_max_threads()
    if before != 1:
        _OMP.omp_set_num_threads(1)
    return before


class _Transposed:
    """A parameter's transpose kept contiguous for one matmul: BLAS runs (M,K)x(K,N) about 25%
    faster with the (K,N) operand in rows than as the transposed view of an nn.Linear weight.
    One copy per parameter the graph is called with (an entry serves every instance of a module
    class, each with its own weights), freed with the parameter; made again when its version moved
    (an in-place update: optimizer steps, load_state_dict, any op under no_grad); `.data` writes
    bypass the version counter, as they bypass autograd's checks."""

    __slots__ = ("copies",)

    def __init__(self) -> None:
        self.copies: Dict[int, Tuple[weakref.ref, int, torch.Tensor]] = {}  # id(w) -> (w, its version, copy)

    def __call__(self, w: torch.Tensor) -> torch.Tensor:
        known = self.copies.get(id(w))
        if known is None or known[0]() is not w or known[1] != w._version:
            known = self.copies[id(w)] = (weakref.ref(w, self._forget(id(w))), w._version, w.detach().t().contiguous())
        return known[2]

    def _forget(self, key: int) -> Callable[[weakref.ref], None]:
        copies = self.copies

        def forget(ref: weakref.ref) -> None:
            if key in copies and copies[key][0] is ref:  # not a newer tensor at the same address
                del copies[key]

        return forget


_PACKED_OPERAND = {torch.ops.aten.mm.default: 1}  # op -> the argument read as (K,N) rows


def _fix_result(r: torch.Tensor, buf: Buffer, fn) -> torch.Tensor:
    out = relayout(r, buf)
    if out is None:
        raise RuntimeError(f"{fn} returned an unexpected layout")
    return out


def _spec_code(spec, leaves: List[str]) -> Optional[str]:
    """Python source rebuilding `spec` from leaf expressions, or None for container types other
    than tuple, list and dict (those go through tree_unflatten)."""
    it = iter(leaves)

    def build(s) -> Optional[str]:
        if s.is_leaf():
            return next(it)
        kids = [build(c) for c in (s.children() if hasattr(s, "children") else s.children_specs)]
        if any(k is None for k in kids):
            return None
        if s.type is tuple:
            return "(" + "".join(k + ", " for k in kids) + ")"
        if s.type is list:
            return "[" + ", ".join(kids) + "]"
        if s.type is dict and all(isinstance(k, (str, int)) for k in s.context):
            return "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(s.context, kids)) + "}"
        return None
    return build(spec)


class _Names:
    """The generated function's globals and names: buffers are locals `vN`; values that have no
    literal spelling are globals `_kN`; `exact` says whether a buffer's tensor has exactly the
    buffer's strides."""

    def __init__(self, globals_: Dict[str, Any]):
        self.globals = globals_
        self.exact: Dict[str, bool] = {}
        self._locals: Dict[str, str] = {}
        self._count = 0

    def const(self, value) -> str:
        if is_symbolic(value):  # a size: arithmetic on the call's size symbols (locals)
            return size_code(value)
        if value is None or isinstance(value, (bool, int)) or (
                isinstance(value, float) and value == value and abs(value) != float("inf")):
            return repr(value)
        self._count += 1
        name = f"_k{self._count}"
        self.globals[name] = value
        return name

    def v(self, buffer: str) -> str:
        if buffer not in self._locals:
            self._locals[buffer] = f"v{len(self._locals)}"
        return self._locals[buffer]

    def buffer(self, buf: Buffer) -> str:
        """A Buffer with this call's sizes."""
        if not any_symbolic(buf.size + buf.stride):
            return self.const(buf)
        return f"_Buffer({buf.name!r}, {tuple_code(buf.size)}, {tuple_code(buf.stride)}, {self.const(buf.dtype)})"


class _GroupBinding:
    """A kernel group's entry in a graph's call until its library is loaded: the first call waits
    for the library (a failed build raises here, and the graph runs eagerly, see
    run_eagerly_after), binds the group's function and puts it in its own place."""

    def __init__(self, library: Callable[[], ctypes.CDLL], group: KernelGroup, argtypes: list,
                 globals_: Dict[str, Any]):
        self.library, self.group, self.argtypes, self.globals = library, group, argtypes, globals_

    def __call__(self, *args: Any) -> Any:
        fn = getattr(self.library(), self.group.name)
        fn.argtypes = self.argtypes
        fn.restype = ctypes.c_int if self.group.can_fail else None
        self.globals[f"_{self.group.name}"] = fn
        return fn(*args)


class CppGraph(CompiledGraph):
    """A compiled graph whose call is one generated straight-line Python function: locals instead
    of an environment dict, one prebound ctypes call per kernel group, layouts decided at compile
    time; only a stride comparison per input stays on the per-call path."""

    def __init__(self, lowering: GraphLowering, steps: List[Step], library: Optional[Callable[[], ctypes.CDLL]],
                 rendered: Sequence[CppKernel], groups: Sequence[KernelGroup], source: str,
                 fallback: Callable, written: Set[str] = frozenset(), parameters: Set[str] = frozenset()):
        """`library`: waits for the kernels' library (being built, see cpp_build.load_library_later)."""
        self._library = library  # keeps the library loaded as long as this graph lives
        self.groups = list(groups)
        super().__init__(lowering, steps, rendered, source, fallback)
        # inputs a kernel group writes: one laid out otherwise runs eagerly (a copy would take the write)
        self.aliased |= set(written)
        self.parameters = parameters  # buffers holding parameters: their layout may be prepacked
        self.packed = {s.b.buffer for s in steps if isinstance(s, Gemm) and s.packed_b}
        self.pycode, self.run = self._generate()
        perf.register(self)

    def _build_plan(self, rendered: Sequence[Any]) -> list:
        return []  # the generated function (`run`) replaces the interpreted plan

    def _generate(self):
        names = _Names({"torch": torch, "_empty": _empty_strided,
                        "_nthreads": torch.get_num_threads, "_fix_input": relayout,
                        "_fix_result": _fix_result, "_fallback": self.fallback, "_eager": self.eager,
                        "_unflatten": tree_unflatten, "_spec": self.out_spec,
                        "_run_eagerly_after": run_eagerly_after, "_Buffer": Buffer})
        inputs = self._input_lines(names)
        self.serial = self.size_vars is None and runs_serially(self.steps, self.buffers)
        if self.serial:
            names.globals.update(_serial=_enter_serial, _restore=_OMP.omp_set_num_threads)
            inputs += ["    _prev = _serial()", "    nt = 1"]
        elif any(isinstance(s, GENERATED) for s in self.steps):
            inputs.append("    nt = _nthreads()")
        segments = [("wrapper", "inputs", inputs)]
        group_of = {k: grp for grp in self.groups for k in grp.kernels}
        for step in self.steps:
            if not isinstance(step, GENERATED):
                segments.append(("extern", _op_name(step.fn), self._extern_lines(step, names)))
            elif step.name == group_of[step.name].kernels[0]:
                group = group_of[step.name]
                allocs, call = self._group_lines(group, names)
                if allocs:
                    segments.append(("alloc", f"{group.name} outputs", allocs))
                segments.append(("kernel", self._describe(group), call))
        self._segments = segments
        self._globals = names.globals
        self._result = self._outputs_code(names)
        self.times = perf.GraphTimes(perf.new_number(), "inference", [s[:2] for s in segments])
        names.globals["_prof"] = self.times
        run = self._compile(False)
        return self._source, run

    def _compile(self, profiled: bool):
        """The call as a function: plain, or reading the clock after each segment (`profiled`)."""
        lines = ["    _t = _t0 = _prof.now()"] if profiled else []
        for i, (_, _, body) in enumerate(self._segments):
            lines += body
            if profiled:
                lines.append(f"    _t = _prof.tick({i}, _t)")
        restore = ["    _restore(_prev)"] if self.serial else []
        if profiled:
            lines += restore + [f"    _r = {self._result}", "    _prof.call(_t0)", "    return _r"]
        else:
            lines += restore + [f"    return {self._result}"]
        # The body in a try block (free in CPython 3.11 until something raises).
        lines = ["def run(*args):", "  try:"] + ["  " + line for line in lines] + [
            "  except Exception as e:"] + (["    if '_prev' in locals(): _restore(_prev)"] if self.serial else []) + [
            "    return _run_eagerly_after(e, _eager, args, 'cpp')"]
        src = "\n".join(lines) + "\n"
        if not profiled:
            self._source = src
        # named inside the package, so the frame hook never tries to trace the call (a graph calling
        # another, as an optimizer step's does, runs it while the hook is on)
        exec(compile(src, os.path.join(_HERE, f"<cpp wrapper {id(self):x}>"), "exec"), self._globals)
        return self._globals["run"]

    def instrument(self, on: bool) -> None:
        """Swap the call's code (callers hold the function itself) for the profiled one or back."""
        if on and not hasattr(self, "_profiled_code"):
            self._plain_code = self.run.__code__
            self._profiled_code = self._compile(True).__code__
        if hasattr(self, "_profiled_code"):
            self.run.__code__ = self._profiled_code if on else self._plain_code

    def _describe(self, group: KernelGroup) -> str:
        """A kernel group as its kernels' iteration spaces and what each computes."""
        by_name = {s.name: s for s in self.steps if isinstance(s, GENERATED)}
        parts = []
        for name in group.kernels:
            k = by_name[name]
            if isinstance(k, (IndexedStep, ConvBackward, Attention)):
                parts.append(k.describe(self.buffers))
                continue
            if isinstance(k, Gemm):
                parts.append(f"[{'x'.join(map(str, self.buffers[k.out].size))}: gemm k={k.a.size[-1]}]")
                continue
            if isinstance(k, Conv):
                parts.append(f"[{'x'.join(map(str, self.buffers[k.out].size))}: conv k={numel(k.w_size[1:])}]")
                continue
            if isinstance(k, (Copy, Gather)):
                what = f"cat of {len(k.sources)}" if isinstance(k, Copy) else "gather"
                parts.append(f"[{'x'.join(map(str, self.buffers[k.out].size))}: {what}]")
                continue
            kinds = collections.Counter(kn.node.kind if kn.is_reduction else "pw" for kn in k.knodes())
            inner = {"x".join(map(str, st.inner)) for st in k.stages if st.inner}
            shape = "x".join(map(str, k.outer)) or "1"
            if inner:
                shape += " * " + ",".join(sorted(inner))  # as text: symbolic sizes do not compare
            parts.append(f"[{shape}: {' '.join(f'{n} {c}' for c, n in sorted(kinds.items()))}]")
        return f"{group.name} " + " ".join(parts)

    def _input_lines(self, names: "_Names") -> List[str]:
        """Unpack the inputs, relaying out those with other strides than compiled for."""
        lines = []
        local = [names.v(b.name) if b is not None else "_" for b in self.inputs]
        if local:
            lines.append(f"    {', '.join(local)}{',' if len(local) == 1 else ''} = args")
        if self.size_vars is not None:
            for sym in self.size_vars.symbols:
                code = self.size_vars.value_code(sym, lambda i: local[i] if local[i] != "_" else f"args[{i}]")
                lines.append(f"    {sym} = {code}")
        for buf, name in zip(self.inputs, local):
            if buf is None:
                continue
            b = names.buffer(buf)
            lines.append(f"    if {name}.stride() != {tuple_code(buf.stride)}:")
            if buf.name in self.aliased:
                lines.append(f"        if _fix_input({name}, {b}) is not {name}: return _fallback(*args)")
            else:
                lines.append(f"        {name} = _fix_input({name}, {b})")
                lines.append(f"        if {name} is None: return _fallback(*args)")
            names.exact[buf.name] = False
        for cname, value in self.constants.items():
            names.globals[names.v(cname)] = value
            names.exact[cname] = False
        return lines

    def _group_lines(self, group: KernelGroup, names: "_Names") -> Tuple[List[str], List[str]]:
        """Allocating what the kernel group writes, and calling it."""
        symbols = self.size_vars.symbols if self.size_vars is not None else []
        argtypes = ([ctypes.c_void_p] * (len(group.args) + bool(group.scratch)) + [ctypes.c_int64] * len(symbols)
                    + [ctypes.c_int])
        names.globals[f"_{group.name}"] = _GroupBinding(self._library, group, argtypes, names.globals)
        lines: List[str] = []
        if group.scratch:
            lines.append(f"    scratch = _empty(({group.scratch_bytes},), (1,), {names.const(torch.uint8)})")
        for bname in group.stored:
            buf, v = self.buffers[bname], names.v(bname)
            if not any_symbolic(buf.size) and buf.dtype.itemsize * max(1, numel(buf.size)) >= _POOL_MIN_BYTES:
                names.globals[f"_alloc_{v}"] = _Pooled(buf)
                lines.append(f"    {v} = _alloc_{v}()")
            else:
                lines.append(f"    {v} = _empty({tuple_code(buf.size)}, "
                             f"{tuple_code(buf.stride)}, {names.const(buf.dtype)})")
            names.exact[bname] = True
        ptrs = "".join(f"{names.const(_Transposed())}({names.v(a)}).data_ptr(), " if a in self.packed
                       else f"{names.v(a)}.data_ptr(), " for a in group.args)
        ptrs += "scratch.data_ptr(), " if group.scratch else ""
        sizes = "".join(f"{s}, " for s in symbols)
        call = f"_{group.name}({ptrs}{sizes}nt)"
        if group.can_fail:  # an index out of range: eager runs the graph and raises its error
            names.globals["_IndexError"] = IndexError
            return lines, [f"    if {call}: raise _IndexError('index out of range in a cpp kernel group')"]
        return lines, [f"    {call}"]

    def _outputs_code(self, names: "_Names") -> str:
        # an extern op may return None for an output nothing reads (an RNN's reserve space when
        # not training); aot_autograd may still list it among the saved values: passed on as None
        maybe_none = {n for s in self.steps if isinstance(s, ExternNode) for n in s.names if n}
        leaves = []
        for spec in self.outputs:
            if spec.kind == "constant":
                leaves.append(names.const(spec.constant))
                continue
            buf = self.buffers[spec.buffer]
            t = names.v(spec.buffer)
            view = _view_code(t, spec.size, spec.stride, spec.offset)
            same = (tuple(buf.size) == tuple(spec.size) and tuple(buf.stride) == tuple(spec.stride)
                    and not spec.fresh)
            if same and not spec.offset and names.exact.get(spec.buffer):
                leaf = t
            elif same and not spec.offset:
                leaf = f"({t} if {t}.stride() == {tuple_code(spec.stride)} else {view})"
            else:
                leaf = view
            leaves.append(f"(None if {t} is None else {leaf})" if spec.buffer in maybe_none else leaf)
        code = _spec_code(self.out_spec, leaves)
        return code if code is not None else f"_unflatten([{', '.join(leaves)}], _spec)"

    def _extern_lines(self, node: ExternNode, names: "_Names") -> List[str]:
        v, const = names.v, names.const
        def arg(a) -> Optional[str]:
            if isinstance(a, ExternArg):
                buf = self.buffers[a.buffer]
                t = v(a.buffer)
                if (tuple(buf.size) == tuple(a.size) and a.offset == 0
                        and same_layout(buf.size, buf.stride, a.stride)):
                    return t
                return _view_code(t, a.size, a.stride, a.offset)
            if isinstance(a, (tuple, list)):
                parts = [arg(x) for x in a]
                if any(p is None for p in parts):
                    return None
                if type(a) is tuple:
                    return "(" + "".join(p + ", " for p in parts) + ")"
                if isinstance(a, list):  # fx hands over its immutable_list
                    return "[" + ", ".join(parts) + "]"
                return None
            if isinstance(a, dict):
                return None if _contains_arg(a) else const(a)
            return const(a)

        fn = const(node.fn)
        pos = [arg(a) for a in node.args]
        packed = _PACKED_OPERAND.get(node.fn)
        if packed is not None and prepackable(node.args[packed], self.buffers, self.parameters):
            pos[packed] = f"{const(_Transposed())}({v(node.args[packed].buffer)})"
        kw = {k: arg(x) for k, x in node.kwargs.items()}
        if any(p is None for p in pos) or any(p is None for p in kw.values()) \
                or not all(k.isidentifier() for k in kw):
            # Unusual containers: the generic path, through the environment-free helper.
            if self.size_vars is not None:
                raise CannotCompile(f"{node.fn} with arguments in containers, under symbolic sizes")
            call_name = const(self._generic_extern(node))
            refs = sorted({r for r in node.reads})
            env = "{" + ", ".join(f"{r!r}: {v(r)}" for r in refs) + "}"
            call = f"{call_name}({env})"
        else:
            call = f"{fn}({', '.join(pos + [f'{k}={x}' for k, x in kw.items()])})"
        lines = [f"    r = {call}"]
        live = [(i, n) for i, n in enumerate(node.names) if n is not None]
        if len(node.names) > 1:
            lines.append("    r = r if isinstance(r, (tuple, list)) else (r,)")
        else:
            lines.append("    r = r[0] if isinstance(r, (tuple, list)) else r")
        for i, n in live:
            buf = self.buffers[n]
            item = f"r[{i}]" if len(node.names) > 1 else "r"
            lines.append(f"    {v(n)} = {item}")
            lines.append(f"    if {v(n)} is not None and {v(n)}.stride() != {tuple_code(buf.stride)}: "
                         f"{v(n)} = _fix_result({v(n)}, {names.buffer(buf)}, {fn})")
            names.exact[n] = False
        return lines

    def _generic_extern(self, node: ExternNode):
        def call(env):
            args, kwargs = tree_map(lambda a: materialize(env, a), (node.args, node.kwargs))
            return node.fn(*args, **kwargs)
        return call

    def __call__(self, *args: torch.Tensor) -> Any:
        return self.run(*args)


def _view_code(t: str, size, stride, offset) -> str:
    """A view of local `t` at `offset` elements past its own start (as_strided keeps the tensor's
    offset when given none: one call fewer)."""
    if not is_symbolic(offset) and offset == 0:
        return f"{t}.as_strided({tuple_code(size)}, {tuple_code(stride)})"
    return f"{t}.as_strided({tuple_code(size)}, {tuple_code(stride)}, {t}.storage_offset() + {size_code(offset)})"


def _op_name(fn) -> str:
    return str(fn) if isinstance(fn, torch._ops.OpOverload) else getattr(fn, "__qualname__", repr(fn))


def _contains_arg(obj) -> bool:
    found = []
    tree_map(lambda a: found.append(a) if isinstance(a, ExternArg) else None, obj)
    return bool(found)
