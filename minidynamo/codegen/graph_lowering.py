"""FX graph -> loop-level IR.

The graph is first re-traced with `make_fx` and torch's decompositions, so only a small core of
ATen/prims ops remains and every node carries a fake tensor (`meta['val']`) with the dtype, size and
strides torch itself would produce. Each op then maps to a lazily evaluated value:

- `Lazy`: an element function `idx -> Expr`, composed without touching memory (pointwise ops and
  views of lazy values), so chains of pointwise ops become one expression;
- `Strided`: a view of a buffer in memory (inputs, constants, extern results, realized nodes).

Values are "realized" (turned into an IR node writing a buffer) only where memory is needed: graph
outputs, reduction results, extern arguments, and views that cannot be expressed as affine indexing.
Ops without a lowering (op_lowerings), or with dtypes the code generator does not handle, become
extern calls to torch, so an unsupported op costs speed, never correctness.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._pytree import TreeSpec, tree_flatten, tree_map

from .errors import CannotCompile, CannotLower
from .sizes import SizeVars, any_symbolic, hint, is_symbolic, norm
from .ir import (
    Buffer, Const, Expr, ExternNode, Index, IndexValue, Load, Node, Op, PointwiseNode, ReductionNode,
    contiguous_strides, inner_var, loads, numel, outer_var,
)

SUPPORTED_DTYPES = (
    torch.float32, torch.float64, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
    torch.bool,
)


@dataclass
class Value:
    size: Tuple[int, ...]
    dtype: torch.dtype

    def load(self, idx: Sequence[Index]) -> Expr:
        raise NotImplementedError


@dataclass
class Strided(Value):
    buffer: str = ""
    stride: Tuple[int, ...] = ()
    offset: int = 0

    def load(self, idx: Sequence[Index]) -> Expr:
        pos = Index((), self.offset)
        for i, s in zip(idx, self.stride):
            pos = pos + i * s
        return Load(self.buffer, pos, self.dtype)


@dataclass
class Lazy(Value):
    fn: Callable[[Tuple[Index, ...]], Expr] = None  # type: ignore[assignment]
    memo: Dict[Tuple[Index, ...], Expr] = field(default_factory=dict, repr=False)

    def load(self, idx: Sequence[Index]) -> Expr:
        key = tuple(idx)
        hit = self.memo.get(key)
        if hit is None:
            hit = self.memo[key] = self.fn(key)
        return hit


@dataclass
class OutputSpec:
    """How the wrapper produces one graph output."""

    kind: str  # "buffer" (a view of a buffer) or "constant"
    buffer: str = ""
    size: Tuple[int, ...] = ()
    stride: Tuple[int, ...] = ()
    offset: int = 0
    constant: Any = None
    # a new tensor over an input's storage (eager's view ops return new objects): never the input itself
    fresh: bool = False


def is_dense(size: Sequence[int], stride: Sequence[int]) -> bool:
    """Non-overlapping and dense: some permutation of the dims is contiguous."""
    dims = sorted(((st, sz) for sz, st in zip(size, stride) if sz != 1), key=lambda d: (hint(d[0]), hint(d[1])))
    expected = 1
    for st, sz in dims:
        if st != expected:
            return False
        expected *= sz
    return True


def is_non_overlapping(size: Sequence[int], stride: Sequence[int]) -> bool:
    """No two elements share memory: dense, or with gaps (a view into a larger buffer); with
    symbolic sizes only dense layouts are known to be."""
    if any_symbolic(tuple(size) + tuple(stride)):
        return is_dense(size, stride)
    reach = 1
    for st, sz in sorted((st, sz) for sz, st in zip(size, stride) if sz != 1):
        if st < reach:
            return False
        reach = st * sz
    return True


class GraphLowering:
    def __init__(self, gm: torch.fx.GraphModule, inputs: Sequence[torch.Tensor],
                 device_type: str = "cpu", size_vars: Optional[SizeVars] = None,
                 generated_conv: Optional[Callable[..., bool]] = None):
        self.gm = gm
        self.size_vars = size_vars  # None: every size is an int
        self.device_type = device_type  # tensors elsewhere become extern calls
        self.example_inputs = list(inputs)
        self.buffers: Dict[str, Buffer] = {}
        self.nodes: List[Node] = []
        self.input_names: List[Optional[str]] = []  # None for a size passed as an int
        self.constants: Dict[str, torch.Tensor] = {}
        self.outputs: List[OutputSpec] = []
        self.out_spec: Optional[TreeSpec] = None
        self.env: Dict[torch.fx.Node, Any] = {}
        self._cse: Dict[Any, str] = {}
        self._counter = 0
        self.relaid: set = set()  # buffers laid out otherwise than traced (channels-last convolutions)
        self.generated_conv = generated_conv if size_vars is None else None
        self.convs_channels_last = device_type == "cpu" and convolutions_channels_last(gm, self.onednn_conv)

    def onednn_conv(self, node: torch.fx.Node) -> bool:
        """A convolution left to torch's oneDNN: not one the generated code runs (as laid out)."""
        if node.target is not torch.ops.aten.convolution.default:
            return False
        if self.generated_conv is None:
            return True
        x, w = (a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in node.args[:2])
        out = node.meta.get("val")
        return not (all(isinstance(t, torch.Tensor) for t in (x, w, out)) and self.generated_conv(
            tuple(x.shape), tuple(w.shape), tuple(out.shape), out.dtype, node.args[6]))

    # -- buffers and nodes -------------------------------------------------------------------

    def new_name(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}{self._counter}"

    def add_buffer(self, prefix: str, size, stride, dtype) -> str:
        name = self.new_name(prefix)
        self.buffers[name] = Buffer(name, tuple(size), tuple(stride), dtype)
        return name

    def sizes_of(self, t: torch.Tensor) -> Tuple:
        """A traced tensor's sizes (ints, or expressions over the size symbols)."""
        return tuple(t.shape) if self.size_vars is None else self.size_vars.exprs(t.shape)

    def strides_of(self, t: torch.Tensor) -> Tuple:
        return tuple(t.stride()) if self.size_vars is None else self.size_vars.exprs(t.stride())

    def offset_of(self, t: torch.Tensor) -> Any:
        return t.storage_offset() if self.size_vars is None else self.size_vars.expr(t.storage_offset())

    def tensor_value(self, prefix: str, t: torch.Tensor, stride: Optional[Tuple[int, ...]] = None) -> Strided:
        """A buffer like `t`, with `t`'s strides unless the lowering chooses others (`stride`)."""
        size, traced = self.sizes_of(t), self.strides_of(t)
        stride = traced if stride is None else stride
        name = self.add_buffer(prefix, size, stride, t.dtype)
        if stride != traced:
            self.relaid.add(name)
        return Strided(size, t.dtype, name, stride, 0)

    def realize(self, v: Value, stride: Optional[Sequence[int]] = None, fresh: bool = False) -> Strided:
        """Give `v` memory. Lazy values become a PointwiseNode storing with `stride` (`fresh`: in a
        buffer of its own, never one an equal computation already has)."""
        if isinstance(v, Strided):
            return v
        size = v.size
        stride = tuple(stride) if stride is not None else self._layout_read(v) or contiguous_strides(size)
        # Iterate in memory order of the store so writes are sequential.
        order = sorted((d for d in range(len(size)) if size[d] != 1), key=lambda d: -hint(stride[d]))
        idx = [Index()] * len(size)
        for k, d in enumerate(order):
            idx[d] = Index.var(outer_var(k))
        body = v.load(tuple(idx))
        key = ("pw", size, stride, body)
        name = None if fresh else self._cse.get(key)
        if name is None:
            store = Index()
            for d in order:
                store = store + idx[d] * stride[d]
            name = self.add_buffer("buf", size, stride, v.dtype)
            self.nodes.append(
                PointwiseNode(name, tuple(size[d] for d in order), body, store, v.dtype))
            self._cse[key] = name
        return Strided(size, v.dtype, name, stride, 0)

    def _layout_read(self, v: Lazy) -> Optional[Tuple[int, ...]]:
        """The layout of a same-sized relaid buffer `v` reads, so a channels-last convolution's
        epilogue (bias, batch norm, activation) stores channels-last too; None if there is none."""
        if not self.relaid:
            return None
        probe = v.load(tuple(Index.var(outer_var(k)) for k in range(len(v.size))))
        for ld in loads(probe):
            buf = self.buffers[ld.buffer]
            if ld.buffer in self.relaid and buf.size == tuple(v.size):
                return buf.stride
        return None

    def reduce(self, v: Value, dims: Sequence[int], kind: str, dtype: torch.dtype,
               keepdim: bool) -> Value:
        """Reduce `v` over `dims` into a contiguous buffer; result shaped with or without keepdim."""
        nd = len(v.size)
        dims = sorted({d % nd for d in dims}) if nd else []
        kept = [d for d in range(nd) if d not in dims]
        out_size = tuple(1 if d in dims else v.size[d] for d in range(nd)) if keepdim else \
            tuple(v.size[d] for d in kept)
        idx = [Index()] * nd
        outer, inner = [], []
        for d in kept:
            if v.size[d] != 1:
                idx[d] = Index.var(outer_var(len(outer)))
                outer.append(v.size[d])
        for d in dims:
            if v.size[d] != 1:
                idx[d] = Index.var(inner_var(len(inner)))
                inner.append(v.size[d])
        body = v.load(tuple(idx))
        if kind in ("sum", "prod"):
            body = cast(body, dtype)
        elif kind in ("any", "all"):
            body = cast(body, torch.bool)
        if not inner:
            # Nothing to combine: the "reduction" is element-wise.
            if kind in ("argmax", "argmin"):
                return Lazy(out_size, dtype, lambda i: Const(0, dtype))
            src = v
            return Lazy(out_size, dtype, lambda i: cast(src.load(_unreduce(i, nd, dims, keepdim)), dtype))
        if not outer and kind in _SPLITTABLE and not any_symbolic(inner) and numel(inner) >= _SPLIT_MIN_NUMEL:
            split = _split_inner(tuple(inner))
            if split is not None:
                # One long serial reduction becomes rows of partial results (parallel, and each
                # row vectorised) plus a short reduction over the partials.
                new_outer, new_inner, env = split
                partial = self._reduction_node(kind, new_outer, new_inner,
                                               body.map(lambda ix: ix.subst(env)), dtype)
                total = self.reduce(partial, range(len(new_outer)), kind, dtype, False)
                return Lazy(out_size, dtype, lambda i: total.load(()))
        name = self._reduction_node(kind, tuple(outer), tuple(inner), body, dtype).buffer
        return Strided(out_size, dtype, name, contiguous_strides(out_size), 0)

    def _reduction_node(self, kind: str, outer, inner, body: Expr, dtype) -> Strided:
        key = ("red", kind, outer, inner, body, dtype)
        name = self._cse.get(key)
        if name is None:
            name = self.add_buffer("buf", outer, contiguous_strides(outer), dtype)
            self.nodes.append(ReductionNode(name, kind, outer, inner, body, dtype))
            self._cse[key] = name
        return Strided(outer, dtype, name, contiguous_strides(outer), 0)

    def extern(self, node: torch.fx.Node, args, kwargs) -> Any:
        reads: List[str] = []
        # ATen kernels may assume the layout eager hands them without checking it (mkldnn's RNN
        # reads a permuted input as if contiguous), so each tensor argument gets the traced
        # strides whenever those are dense.
        layouts = {}
        for n in node.all_input_nodes:
            v, meta = self.env.get(n), n.meta.get("val")
            if isinstance(v, Value) and isinstance(meta, torch.Tensor) \
                    and is_dense(v.size, self.strides_of(meta)):
                layouts[id(v)] = self.strides_of(meta)
        result_strides = None
        if self.convs_channels_last and self.size_vars is None and _channels_last_conv(node) \
                and self.onednn_conv(node):
            for n in node.args[:2]:
                layouts[id(self.env[n])] = channels_last_strides(self.env[n].size)
            result_strides = channels_last_strides(tuple(node.meta["val"].shape))

        def to_ref(a):
            if isinstance(a, Value):
                want = layouts.get(id(a))
                s = self.realize(a, want)
                if want is not None and any(have != need and size != 1 for have, need, size
                                            in zip(s.stride, want, s.size)):
                    s = self.realize(Lazy(s.size, s.dtype, s.load), want)
                reads.append(s.buffer)
                return ExternArg(s.buffer, s.size, s.stride, s.offset)
            return a

        args, kwargs = tree_map(to_ref, (args, kwargs))
        val = node.meta.get("val")
        vals = list(val) if isinstance(val, (tuple, list)) else [val]
        names, results = [], []
        for t in vals:
            if isinstance(t, torch.Tensor):
                v = self.tensor_value("ext", t, result_strides)
                names.append(v.buffer)
                results.append(v)
            elif t is None:
                names.append(None)
                results.append(None)
            else:
                raise CannotCompile(f"extern {node.target} returns {type(t).__name__}")
        self.nodes.append(ExternNode(tuple(names), node.target, args, kwargs, tuple(reads)))
        return tuple(results) if isinstance(val, (tuple, list)) else results[0]

    # -- graph walk --------------------------------------------------------------------------

    def run(self) -> None:
        from .op_lowerings import LOWERINGS

        placeholders = iter(self.example_inputs)
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                t = next(placeholders)
                if self.size_vars is not None:
                    self.size_vars.bind(len(self.input_names), t)
                if isinstance(t, torch.Tensor):
                    v = self.tensor_value("in", t)
                    self.input_names.append(v.buffer)
                else:
                    v = self.size_vars.expr(t) if self.size_vars is not None else t
                    self.input_names.append(None)
                self.env[node] = v
            elif node.op == "get_attr":
                t = fetch_attr(self.gm, node.target)
                v = self.tensor_value("const", t)
                self.constants[v.buffer] = t
                self.env[node] = v
            elif node.op == "call_function" and self.size_vars is not None and _is_size(node.meta.get("val")):
                self.env[node] = self._size_value(node.meta["val"])  # arithmetic on sizes
            elif node.op == "call_function":
                self.env[node] = self.lower_call(node, LOWERINGS)
            elif node.op == "output":
                self.lower_outputs(node.args[0])
            else:
                raise CannotCompile(f"fx op {node.op}")

    def _size_value(self, val: Any) -> Any:
        if isinstance(val, (tuple, list)):
            return tuple(self._size_value(v) for v in val)
        return self.size_vars.expr(val)

    def lower_call(self, node: torch.fx.Node, table: Dict[Any, Callable]) -> Any:
        count = node.meta["val"].numel() if isinstance(node.meta.get("val"), torch.Tensor) else 1
        many = not isinstance(count, int) or count > 1  # a symbolic count is not compared: no guard
        args, kwargs = torch.fx.node.map_arg(
            (node.args, node.kwargs), lambda n: self.computed_once(self.env[n]) if many else self.env[n])
        if node.target is operator.getitem:
            return args[0][args[1]]
        fn = table.get(node.target) or table.get(getattr(node.target, "overloadpacket", None))
        if fn is not None and _dtypes_supported(node, self.device_type):
            val = node.meta.get("val")  # its sizes, for the lowerings (op_lowerings.out_size)
            node.meta["sizes"] = self.sizes_of(val) if isinstance(val, torch.Tensor) else tuple(
                self.sizes_of(v) if isinstance(v, torch.Tensor) else None for v in val) \
                if isinstance(val, (tuple, list)) else None
            try:
                return fn(self, node, *args, **kwargs)
            except CannotLower:
                pass
            except TypeError:
                # a lowering compared a symbolic size (sympy cannot tell): torch's op decides
                if self.size_vars is None:
                    raise
        return self.extern(node, args, kwargs)

    def computed_once(self, v: Any) -> Any:
        """A one-element value that computes something (an optimizer's bias correction from its
        step count: powers, square roots), in memory when an op spreads it over many elements, so
        the loop reading it does not compute it again for every element."""
        if not isinstance(v, Lazy) or numel(v.size) != 1:
            return v
        if not any(isinstance(e, Op) for e in v.load(tuple(Index() for _ in v.size)).walk()):
            return v
        return self.realize(v)

    def lower_outputs(self, outs) -> None:
        """Outputs share memory with inputs, constants and each other exactly where eager's do:
        outputs on one storage (of the traced fake tensors) that another output or an input also
        has are views, with eager's sizes, strides and offsets, of one buffer holding that whole
        storage. A buffer is handed out again only for the storage that first claimed it: a clone
        of an input, or two equal computations, get copies of their own."""
        out_nodes, self.out_spec = tree_flatten(outs)
        owners = {self.env[n].buffer: _storage_key(n) for n in self.gm.graph.nodes
                  if n.op in ("placeholder", "get_attr") and isinstance(self.env.get(n), Strided)}
        input_buffers = set(owners)
        bases = self._shared_storage_bases(out_nodes)
        for n in out_nodes:
            v = self.env[n] if isinstance(n, torch.fx.Node) else n
            if not isinstance(v, Value):
                self.outputs.append(OutputSpec("constant", constant=v))
                continue
            key = _storage_key(n)
            base = bases.get(key)
            if base is not None:
                spec = self._view_of_base(n, base, key, owners)
            else:
                meta = n.meta.get("val")
                stride = n.meta.get("eager_stride") or (self.strides_of(meta) if isinstance(meta, torch.Tensor) else None)
                if stride is not None and any(st == 0 and (is_symbolic(size) or size > 1)
                                              for size, st in zip(v.size, stride)):
                    spec = self._expanded_output(v, tuple(stride), key, owners)
                else:
                    if stride is not None and not is_non_overlapping(v.size, stride):
                        stride = None
                    if isinstance(v, Strided) and v.buffer in self.relaid:
                        v = Lazy(v.size, v.dtype, v.load)  # eager's layout, not the one chosen
                    s = self._claim(self.realize(v, stride), stride, key, owners)
                    spec = OutputSpec("buffer", s.buffer, s.size, s.stride, s.offset)
            spec.fresh = spec.buffer in input_buffers and n.op not in ("placeholder", "get_attr")
            self.outputs.append(spec)

    def _expanded_output(self, v: Value, stride: Tuple, key: Any, owners: Dict[str, Any]) -> OutputSpec:
        """An output eager returns as an expanded view (stride 0 along broadcast dims): one slice
        along those dims in memory, viewed with stride 0 as eager's is, so a later `.view()` or
        in-place write fails or succeeds as eager's does (a dense copy would not: fuzz seed 121636)."""
        broadcast = tuple(st == 0 for st in stride)
        size = tuple(1 if b else n for n, b in zip(v.size, broadcast))
        slice_ = Lazy(size, v.dtype, lambda idx: v.load(tuple(Index() if b else i for i, b in zip(idx, broadcast))))
        kept = stride if is_non_overlapping(size, stride) else None
        s = self._claim(self.realize(slice_, kept, fresh=True), kept, key, owners)
        out_stride = tuple(0 if b else st for st, b in zip(s.stride, broadcast))
        return OutputSpec("buffer", s.buffer, tuple(v.size), out_stride, s.offset)

    def _claim(self, s: Strided, stride, key: Any, owners: Dict[str, Any]) -> Strided:
        """`s`, or a fresh copy of it when its buffer already belongs to another storage."""
        if owners.setdefault(s.buffer, key) != key:
            s = self.realize(Lazy(s.size, s.dtype, s.load), stride, fresh=True)
            owners[s.buffer] = key
        return s

    def _shared_storage_bases(self, out_nodes: Sequence[Any]) -> Dict[Any, torch.fx.Node]:
        """Storage -> the node whose value is that whole storage (an input or constant, or the
        first node writing it), for the storages outputs must share: those of two outputs or of
        an output and an input."""
        count: Dict[Any, int] = {}
        for n in out_nodes:
            if isinstance(n, torch.fx.Node) and isinstance(n.meta.get("val"), torch.Tensor):
                count[_storage_key(n)] = count.get(_storage_key(n), 0) + 1
        bases: Dict[Any, torch.fx.Node] = {}
        for n in self.gm.graph.nodes:
            key = _storage_key(n)
            if key not in count or key in bases or not isinstance(self.env.get(n), Value):
                continue
            bases[key] = n
            is_input = n.op in ("placeholder", "get_attr")
            if not (is_input and isinstance(self.env[n], Strided)) and (
                    count[key] < 2 or not self._covers_storage(n.meta["val"])):
                bases[key] = None  # the first writer is not the whole storage: no views of it
        return {k: b for k, b in bases.items() if b is not None}

    def _view_of_base(self, n: torch.fx.Node, base: torch.fx.Node, key: Any,
                      owners: Dict[str, Any]) -> OutputSpec:
        meta, base_meta = n.meta["val"], base.meta["val"]
        stride = self.strides_of(base_meta)
        s = self.realize(self.env[base], stride)
        if any(have != want and size != 1 for have, want, size in zip(s.stride, stride, s.size)):
            s = self.realize(Lazy(s.size, s.dtype, s.load), stride, fresh=True)
        s = self._claim(s, stride, key, owners)
        offset = s.offset + self.offset_of(meta) - self.offset_of(base_meta)
        return OutputSpec("buffer", s.buffer, self.sizes_of(meta), self.strides_of(meta), offset)

    def _covers_storage(self, t: torch.Tensor) -> bool:
        """`t` is its storage's every element, each once (so views of the storage are views of `t`)."""
        size, stride = self.sizes_of(t), self.strides_of(t)
        nbytes = t.untyped_storage().nbytes()
        nbytes = nbytes if self.size_vars is None else self.size_vars.expr(nbytes)
        return (self.offset_of(t) == 0 and is_dense(size, stride)
                and norm(numel(size) * t.element_size() - nbytes) == 0)


_SPLITTABLE = ("sum", "prod", "max", "min", "any", "all")
_SPLIT_MIN_NUMEL = 65536
_SPLIT_ROW = 16384


def _split_inner(inner: Tuple[int, ...]):
    """(outer, inner, substitution) turning reduction dims into partial-result rows, or None."""
    for k in range(1, len(inner)):
        if numel(inner[:k]) >= 16 and numel(inner[k:]) >= 256:
            rest = numel(inner[k:])
            if k == 1 and rest < _SPLIT_ROW:
                # Rows of about _SPLIT_ROW elements: part of inner[0] joins each row, so a row
                # is long enough that its setup and combine cost little.
                f = max(d for d in range(1, _SPLIT_ROW // rest + 1)
                        if inner[0] % d == 0 and inner[0] // d >= 16)
                if f > 1:
                    env = {inner_var(0): Index.var(outer_var(0)) * f + Index.var(inner_var(0))}
                    return (inner[0] // f,), (f,) + tuple(inner[1:]), env
            env = {inner_var(j): Index.var(outer_var(j)) for j in range(k)}
            env.update({inner_var(j): Index.var(inner_var(j - k)) for j in range(k, len(inner))})
            return inner[:k], inner[k:], env
    if len(inner) == 1:
        for row in (4096, 2048, 1024, 8192, 512, 16384, 256):
            if inner[0] % row == 0 and inner[0] // row >= 16:
                env = {inner_var(0): Index.var(outer_var(0)) * row + Index.var(inner_var(0))}
                return (inner[0] // row,), (row,), env
    return None


@dataclass(frozen=True)
class ExternArg:
    """Placeholder in an extern call's arguments for a (view of a) buffer."""

    buffer: str
    size: Tuple[int, ...]
    stride: Tuple[int, ...]
    offset: int


def _unreduce(idx: Tuple[Index, ...], nd: int, dims: Sequence[int], keepdim: bool):
    """Index of the reduced input for an output index when every reduced dim has size 1."""
    if keepdim:
        return idx
    it = iter(idx)
    return tuple(Index() if d in dims else next(it) for d in range(nd))


def _storage_key(node: torch.fx.Node) -> Any:
    """What identifies the storage of a traced value (its fake tensor's), or the node itself."""
    meta = node.meta.get("val")
    if isinstance(meta, torch.Tensor):
        return StorageWeakRef(meta.untyped_storage())
    return node


def _is_size(val: Any) -> bool:
    """A symbolic size, a float made of one, or a shape (a sequence of sizes) with one."""
    if isinstance(val, (tuple, list)):
        return all(isinstance(v, (int, torch.SymInt)) for v in val)
    return isinstance(val, (torch.SymInt, torch.SymFloat))


def fetch_attr(gm: torch.nn.Module, target: str) -> Any:
    """The module attribute a dotted `get_attr` target names."""
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _dtypes_supported(node: torch.fx.Node, device_type: str) -> bool:
    def ok(x) -> bool:
        return not isinstance(x, torch.Tensor) or (
            x.dtype in SUPPORTED_DTYPES and x.device.type == device_type)

    vals = [node.meta.get("val")] + [a.meta.get("val") for a in node.all_input_nodes]
    flat = []
    for v in vals:
        flat.extend(v if isinstance(v, (tuple, list)) else [v])
    return all(ok(v) for v in flat)


def cast(e: Expr, dtype: torch.dtype) -> Expr:
    if e.dtype == dtype:
        return e
    if isinstance(e, Const):
        return const(e.value, dtype)
    return Op("cast", (e,), dtype)


def const(value, dtype: torch.dtype) -> Expr:
    if is_symbolic(value):  # a size, known when the kernel runs
        return cast(IndexValue(Index((), value), torch.int64), dtype)
    if dtype == torch.bool:
        value = bool(value)
    elif dtype.is_floating_point:
        value = float(value)
    else:
        value = int(value)
    return Const(value, dtype)


def channels_last_strides(size: Sequence[int]) -> Tuple[int, ...]:
    n, c, h, w = size
    return (h * w * c, 1, w * c, c)


def _channels_last_conv(node: torch.fx.Node) -> bool:
    """A 2-d float convolution: oneDNN runs it on channels-last (NHWC) memory as it is, while
    NCHW memory it reorders to a blocked layout and back on every call (5x the time for a batch
    of 3-channel images). So its input, weight and result are laid out channels-last; the
    kernels around it read and write any layout by index math."""
    if node.target is not torch.ops.aten.convolution.default or node.args[6]:  # transposed
        return False
    x, w = (a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in node.args[:2])
    return all(isinstance(t, torch.Tensor) and t.dim() == 4 and t.dtype == torch.float32 for t in (x, w))


def convolutions_channels_last(gm: torch.fx.GraphModule, onednn_conv: Callable[[torch.fx.Node], bool]) -> bool:
    """Whether a graph's oneDNN convolutions run channels-last: all of them or none, since a change
    of layout between kernels costs a strided pass; none where one feeds a global pooling."""
    return not any(_pooled_over_space(n) for n in gm.graph.nodes if onednn_conv(n))


_SPATIAL_REDUCTIONS = frozenset((torch.ops.aten.sum.dim_IntList, torch.ops.aten.amax.default, torch.ops.aten.amin.default,
                                 torch.ops.prims.sum.default, torch.ops.prims.amax.default, torch.ops.prims.amin.default))


def _pooled_over_space(node: torch.fx.Node, depth: int = 8) -> bool:
    """Whether a reduction over the spatial dims (global pooling) reads `node` within `depth`
    steps: its loop would stride through channels-last memory (10x slower than the gain); the
    reduction reads every channel at each position and goes vector-wide only along space."""
    frontier = [node]
    for _ in range(depth):
        frontier = [u for n in frontier for u in n.users]
        for u in frontier:
            if u.target in _SPATIAL_REDUCTIONS and len(u.args) > 1 and isinstance(u.args[1], (list, tuple)) \
                    and {d % 4 for d in u.args[1]} & {2, 3}:
                return True
    return False
