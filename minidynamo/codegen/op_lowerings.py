"""ATen/prims op -> IR value. Each lowering gets (lowering, fx node, *args, **kwargs) with fx inputs
replaced by `Value`s, and uses `node.meta['val']` (the fake result) for the output dtype and size,
so type promotion and broadcasting follow torch exactly. Raising `CannotLower` makes the op an
extern call."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.fx

from .errors import CannotLower
from .graph_lowering import Lazy, Strided, Value, cast, const, is_dense
from .sizes import any_symbolic, hint, norm
from .ir import Expr, Index, IndexValue, Op, UNARY_MATH, numel

aten = torch.ops.aten
prims = torch.ops.prims

LOWERINGS: Dict[Any, Callable] = {}


def register(*ops):
    def deco(fn):
        for op in ops:
            LOWERINGS[op] = fn
        return fn
    return deco


def meta(node: torch.fx.Node) -> torch.Tensor:
    return node.meta["val"]


def out_size(node: torch.fx.Node) -> Any:
    """The sizes of the node's result (a tuple of them for several results), as the lowering
    reads them: ints, or expressions over the size symbols."""
    return node.meta["sizes"]


def meta_of(x) -> Any:
    """The fake tensor for an fx argument, or the Python scalar itself (for type promotion)."""
    return x.meta["val"] if isinstance(x, torch.fx.Node) else x


def broadcast_load(v: Value, idx: Tuple[Index, ...]) -> Expr:
    """Load `v` at the index of a (right-aligned) broadcast result."""
    lead = len(idx) - len(v.size)
    return v.load(tuple(Index() if s == 1 else idx[lead + d] for d, s in enumerate(v.size)))


def pointwise(node: torch.fx.Node, inputs: Sequence[Any], compute: Callable[..., Expr],
              dtypes: Union[torch.dtype, Sequence[torch.dtype], None] = None) -> Lazy:
    """Element-wise op over broadcast `inputs` (Values or scalars), each cast to its compute dtype."""
    out = meta(node)
    size, out_dtype = out_size(node), out.dtype
    if dtypes is None or isinstance(dtypes, torch.dtype):
        dtypes = [dtypes or out_dtype] * len(inputs)

    def fn(idx):
        args = [cast(broadcast_load(a, idx), dt) if isinstance(a, Value) else const(a, dt)
                for a, dt in zip(inputs, dtypes)]
        return cast(compute(*args), out_dtype)

    return Lazy(size, out_dtype, fn)


def promoted(node: torch.fx.Node) -> torch.dtype:
    tensors = [meta_of(a) for a in node.args[:2]]
    return torch.result_type(*tensors)


def op(name: str, *args: Expr, dtype: Optional[torch.dtype] = None) -> Expr:
    return Op(name, tuple(args), dtype or args[0].dtype)


def is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


# -- element-wise -------------------------------------------------------------------------------

def _unary_math(name: str):
    def lower(L, node, x, *rest, **kw):
        if rest or kw:
            raise CannotLower(f"{name} with extra arguments")
        if not is_float(meta(node).dtype):
            if name in ("floor", "ceil", "trunc", "round"):
                return pointwise(node, [x], lambda a: a)
            raise CannotLower(f"{name} on integers")
        return pointwise(node, [x], lambda a: op(name, a))
    return lower


for _name in UNARY_MATH:
    _target = getattr(aten, _name, None)
    if _target is not None:
        register(_target)(_unary_math(_name))


@register(aten.neg)
def _neg(L, node, x):
    return pointwise(node, [x], lambda a: op("neg", a))


@register(aten.abs)
def _abs(L, node, x):
    return pointwise(node, [x], lambda a: op("abs", a))


@register(aten.sign)
def _sign(L, node, x):
    if meta(node).dtype == torch.bool:
        return x
    return pointwise(node, [x], lambda a: op("sign", a))


@register(aten.relu)
def _relu(L, node, x):
    return pointwise(node, [x, 0], lambda a, z: _past_bound("lt", a, z))


def _past_bound(compare: str, x: Expr, bound: Expr) -> Expr:
    """`bound` where x is past it ("lt": below, "gt": above), x itself otherwise: eager's clamp by a
    number, which keeps x where it equals the bound (clamp(-0.0, min=0.0) and relu(-0.0) are -0.0,
    where maximum(-0.0, 0.0) is 0.0) and where x is NaN."""
    return op("where", op(compare, x, bound, dtype=torch.bool), bound, x, dtype=x.dtype)


@register(aten.isnan, aten.isinf)
def _isnan(L, node, x):
    name = node.target.overloadpacket.__name__
    dt = x.dtype
    if not is_float(dt):
        return pointwise(node, [False], lambda f: f, torch.bool)
    return pointwise(node, [x], lambda a: op(name, a, dtype=torch.bool), dt)


@register(aten.logical_not)
def _logical_not(L, node, x):
    return pointwise(node, [x], lambda a: op("not", a), torch.bool)


@register(aten.bitwise_not)
def _bitwise_not(L, node, x):
    name = "not" if meta(node).dtype == torch.bool else "bitnot"
    return pointwise(node, [x], lambda a: op(name, a))


def _alpha(b, alpha):
    return b if alpha == 1 else (lambda y: op("mul", y, const(alpha, y.dtype)))


@register(aten.add, aten.sub)
def _add(L, node, a, b, alpha=1):
    name = node.target.overloadpacket.__name__
    if alpha == 1:
        return pointwise(node, [a, b], lambda x, y: op(name, x, y))
    return pointwise(node, [a, b, alpha], lambda x, y, k: op(name, x, op("mul", y, k)))


@register(aten.rsub)
def _rsub(L, node, a, b, alpha=1):
    return pointwise(node, [a, b, alpha], lambda x, y, k: op("sub", y, op("mul", x, k)))


@register(aten.mul)
def _mul(L, node, a, b):
    return pointwise(node, [a, b], lambda x, y: op("mul", x, y))


def _nonzero_int_divisor(b) -> bool:
    return not isinstance(b, Value) and b != 0


@register(aten.div, prims.div)
def _div(L, node, a, b, rounding_mode=None):
    out = meta(node).dtype
    if node.target is prims.div.default and not is_float(out):
        rounding_mode = "trunc"
    if is_float(out):
        if rounding_mode is None:
            return pointwise(node, [a, b], lambda x, y: op("truediv", x, y))
        if rounding_mode == "trunc":
            return pointwise(node, [a, b], lambda x, y: op("trunc", op("truediv", x, y)))
        return pointwise(node, [a, b], lambda x, y: op("floordiv", x, y))
    # Integer division by a tensor may divide by zero, which torch reports as an error.
    if not _nonzero_int_divisor(b):
        raise CannotLower("integer division by a tensor")
    name = "truncdiv" if rounding_mode == "trunc" else "floordiv"
    return pointwise(node, [a, b], lambda x, y: op(name, x, y))


@register(aten.remainder, aten.fmod)
def _remainder(L, node, a, b):
    name = node.target.overloadpacket.__name__
    if not is_float(meta(node).dtype) and not _nonzero_int_divisor(b):
        raise CannotLower("integer remainder by a tensor")
    return pointwise(node, [a, b], lambda x, y: op(name, x, y))


def _int_power(x: Expr, n: int) -> Expr:
    result, base = None, x
    while n:
        if n & 1:
            result = base if result is None else op("mul", result, base)
        n >>= 1
        if n:
            base = op("mul", base, base)
    return result if result is not None else const(1, x.dtype)


@register(aten.pow)
def _pow(L, node, a, b):
    out = meta(node).dtype
    if not isinstance(b, Value) and isinstance(a, Value):
        if b == 0:
            return pointwise(node, [a], lambda x: const(1, out))
        if float(b).is_integer() and 1 <= b <= 3 or (not is_float(out) and b > 0 and int(b) == b):
            return pointwise(node, [a], lambda x: _int_power(x, int(b)))
        if not is_float(out):
            raise CannotLower("integer pow")
        special = {0.5: "sqrt", -0.5: "rsqrt", -1: "reciprocal"}
        if b in special:
            return pointwise(node, [a], lambda x: op(special[b], x))
        if b == -2:
            return pointwise(node, [a], lambda x: op("reciprocal", op("mul", x, x)))
    if not is_float(out):
        raise CannotLower("integer pow")
    return pointwise(node, [a, b], lambda x, y: op("pow", x, y))


@register(aten.atan2)
def _atan2(L, node, a, b):
    return pointwise(node, [a, b], lambda x, y: op("atan2", x, y))


@register(aten.maximum, aten.minimum)
def _maximum(L, node, a, b):
    name = node.target.overloadpacket.__name__
    return pointwise(node, [a, b], lambda x, y: op(name, x, y))


@register(aten.clamp, aten.clamp_min, aten.clamp_max)
def _clamp(L, node, x, lo=None, hi=None):
    if node.target.overloadpacket is aten.clamp_max:
        lo, hi = None, lo
    inputs, names = [x], []
    for bound, name, past in ((lo, "maximum", "lt"), (hi, "minimum", "gt")):
        if bound is not None:
            inputs.append(bound)
            # a tensor bound is eager's maximum/minimum; a NaN number bound makes NaN, as maximum does
            names.append(past if isinstance(bound, (int, float)) and bound == bound else name)

    def compute(v, *bounds):
        for b, name in zip(bounds, names):
            v = op(name, v, b) if name in ("maximum", "minimum") else _past_bound(name, v, b)
        return v
    return pointwise(node, inputs, compute)


def _comparison(name: str):
    def lower(L, node, a, b):
        return pointwise(node, [a, b], lambda x, y: op(name, x, y, dtype=torch.bool), promoted(node))
    return lower


for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    register(getattr(aten, _name))(_comparison(_name))


def _logical(name: str):
    def lower(L, node, a, b):
        return pointwise(node, [a, b], lambda x, y: op(name, x, y), torch.bool)
    return lower


for _name in ("and", "or", "xor"):
    register(getattr(aten, f"logical_{_name}"))(_logical(_name))


def _bitwise(name: str):
    def lower(L, node, a, b):
        if is_float(meta(node).dtype):
            raise CannotLower("bitwise op on floats")
        kind = name if meta(node).dtype == torch.bool else "bit" + name
        return pointwise(node, [a, b], lambda x, y: op(kind, x, y))
    return lower


for _name in ("and", "or", "xor"):
    register(getattr(aten, f"bitwise_{_name}"))(_bitwise(_name))


@register(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(L, node, c, a, b):
    out = meta(node).dtype
    return pointwise(node, [c, a, b], lambda p, x, y: op("where", p, x, y, dtype=out),
                     [torch.bool, out, out])


@register(aten._to_copy, prims.convert_element_type)
def _to_copy(L, node, x, dtype=None, **kw):
    device = kw.get("device")
    if device is not None and torch.device(device).type != L.device_type:
        raise CannotLower("device copy")
    return pointwise(node, [x], lambda a: a, x.dtype)


@register(aten.clone, aten.alias, aten.detach, aten.lift_fresh_copy)
def _identity(L, node, x, **kw):
    return x


@register(aten.copy)
def _copy(L, node, dst, src, non_blocking=False):
    return pointwise(node, [src], lambda a: a, src.dtype if isinstance(src, Value) else None)


# -- constructors -------------------------------------------------------------------------------

def _constant(node, value) -> Lazy:
    out = meta(node)
    c = const(value, out.dtype)
    return Lazy(out_size(node), out.dtype, lambda idx: c)


@register(aten.full, aten.scalar_tensor)
def _full(L, node, *args, **kw):
    value = args[1] if node.target.overloadpacket is aten.full else args[0]
    return _constant(node, value)


@register(aten.fill.Scalar, aten.full_like)
def _fill(L, node, x, value, **kw):
    return _constant(node, value)


@register(aten.empty.memory_format, aten.empty_strided, aten.empty_permuted, aten.new_empty)
def _empty(L, node, *args, **kw):
    return _constant(node, 0)  # contents of empty are unspecified; zeros are one valid choice


@register(aten.arange.start_step, aten.arange.default, aten.arange.start)
def _arange(L, node, *args, **kw):
    out = meta(node)
    nums = list(args) + [1] * (3 - len(args))
    start, end, step = (0, nums[0], 1) if len(args) == 1 else nums
    if is_float(out.dtype) or not all(isinstance(v, int) for v in (start, step)):
        raise CannotLower("floating arange")
    return Lazy(out_size(node), out.dtype,
                lambda idx: IndexValue(idx[0] * step + start, out.dtype))


@register(prims.iota)
def _iota(L, node, length, *, start, step, dtype, device, requires_grad):
    out = meta(node)
    return Lazy(out_size(node), out.dtype, lambda idx: IndexValue(idx[0] * step + start, dtype))


# -- views --------------------------------------------------------------------------------------

def _meta_view(L, x: Strided, node: torch.fx.Node, args, kwargs) -> Optional[Strided]:
    """Apply the view op to a meta tensor laid out like `x`; None if torch cannot make a view."""
    if L.size_vars is not None:
        return _traced_view(L, x, node)
    extent = x.offset + sum((s - 1) * st for s, st in zip(x.size, x.stride) if s > 0) + 1
    base = torch.empty((max(extent, 1),), dtype=x.dtype, device="meta")
    t = base.as_strided(x.size, x.stride, x.offset)
    try:
        r = node.target(t, *args, **kwargs)
    except (RuntimeError, ValueError):  # the meta kernels raise either when no view exists
        return None
    return Strided(tuple(r.shape), x.dtype, x.buffer, tuple(r.stride()), r.storage_offset())


def _traced_view(L, x: Strided, node: torch.fx.Node) -> Strided:
    """With symbolic sizes: the view as traced (a meta tensor needs numbers), over `x` laid out
    as the traced input (realized so where it is not)."""
    src, out = meta(node.args[0]), meta(node)
    want = L.strides_of(src)
    if any(have != need and size != 1 for have, need, size in zip(x.stride, want, x.size)):
        if not is_dense(x.size, want):
            raise CannotLower("a view of an overlapping layout with symbolic sizes")
        x = L.realize(Lazy(x.size, x.dtype, x.load), want)
    return Strided(out_size(node), x.dtype, x.buffer, L.strides_of(out),
                   norm(x.offset + L.offset_of(out) - L.offset_of(src)))


def _remap(x: Value, size, fn: Callable[[Tuple[Index, ...]], Tuple[Index, ...]]) -> Lazy:
    return Lazy(tuple(size), x.dtype, lambda idx: x.load(fn(idx)))


def _nonone_remap(x: Value, size) -> Optional[Lazy]:
    """Views that only add or drop size-1 dims."""
    src = [d for d, s in enumerate(x.size) if s != 1]
    dst = [d for d, s in enumerate(size) if s != 1]
    if [x.size[d] for d in src] != [size[d] for d in dst]:
        return None

    def fn(idx):
        out = [Index()] * len(x.size)
        for s, d in zip(src, dst):
            out[s] = idx[d]
        return tuple(out)
    return _remap(x, size, fn)


def _split_remap(x: Value, size) -> Optional[Lazy]:
    """Views where each source dim splits into consecutive target dims (affine, no div/mod)."""
    groups: List[List[int]] = []
    j = 0
    for s in x.size:
        group, prod = [], 1
        while j < len(size) and hint(prod) < hint(s):
            group.append(j)
            prod *= size[j]
            j += 1
        if norm(prod - s) != 0:
            return None
        groups.append(group)
    if any(size[k] != 1 for k in range(j, len(size))):
        return None

    def fn(idx):
        out = []
        for g in groups:
            acc = Index()
            for k in g:
                acc = acc * size[k] + idx[k]
            out.append(acc)
        return tuple(out)
    return _remap(x, size, fn)


def _view_with(lazy_fn):
    """Views on buffers become strided views (exact torch semantics via a meta tensor); views on
    lazy values become index remappings from `lazy_fn`, or realize the value first."""
    def lower(L, node, x, *args, **kwargs):
        size = out_size(node)
        if not isinstance(x, Strided):
            r = lazy_fn(x, size, *args, **kwargs)
            if r is not None:
                return r
            x = L.realize(x)
        v = _meta_view(L, x, node, args, kwargs)
        if v is None:
            v = _meta_view(L, L.realize(Lazy(x.size, x.dtype, x.load)), node, args, kwargs)
        return v
    return lower


def _lazy_reshape(x, size, *args, **kw):
    return _nonone_remap(x, size) or _split_remap(x, size)


def _lazy_permute(x, size, dims):
    dims = [d % len(x.size) for d in dims]

    def fn(idx):
        out = [Index()] * len(dims)
        for j, d in enumerate(dims):
            out[d] = idx[j]
        return tuple(out)
    return _remap(x, size, fn)


def _lazy_expand(x, size, *args, **kw):
    lead = len(size) - len(x.size)
    return _remap(x, size, lambda idx: tuple(
        Index() if s == 1 else idx[lead + d] for d, s in enumerate(x.size)))


def _lazy_slice(x, size, dim=0, start=None, end=None, step=1):
    dim %= len(x.size)
    n = x.size[dim]
    start = 0 if start is None else start
    if any_symbolic((n, start)):
        if start != 0:
            return None  # where it starts depends on the size: a traced view of the realized value
        n = start = 0
    start = min(max(start + n if start < 0 else start, 0), n)

    def fn(idx):
        out = list(idx)
        out[dim] = idx[dim] * step + start
        return tuple(out)
    return _remap(x, size, fn)


def _lazy_select(x, size, dim, index):
    dim %= len(x.size)
    index = index + x.size[dim] if index < 0 else index

    def fn(idx):
        out = list(idx)
        out.insert(dim, Index((), index))
        return tuple(out)
    return _remap(x, size, fn)


def _lazy_broadcast_in_dim(x, size, shape, bdims):
    return _remap(x, size, lambda idx: tuple(
        Index() if s == 1 else idx[bdims[k]] for k, s in enumerate(x.size)))


def _lazy_other(x, size, *args, **kwargs):
    return _nonone_remap(x, size)


register(aten.view, aten._unsafe_view, aten.reshape)(_view_with(_lazy_reshape))
register(aten.permute)(_view_with(_lazy_permute))
register(aten.expand)(_view_with(_lazy_expand))
register(aten.slice.Tensor)(_view_with(_lazy_slice))
register(aten.select.int)(_view_with(_lazy_select))
register(prims.broadcast_in_dim)(_view_with(_lazy_broadcast_in_dim))
register(aten.unsqueeze, aten.squeeze)(_view_with(_lazy_other))


@register(aten.as_strided)
def _as_strided(L, node, x, size, stride, storage_offset=None):
    """as_strided of a computed value whose traced tensor is its whole storage (group norm's
    decomposition reshapes its statistics so): index math where it only adds or drops size-1
    dims, else a strided view of the value stored with its traced layout. Others address memory
    as traced: a torch call."""
    src = meta(node.args[0])
    if isinstance(x, Strided) or L.size_vars is not None or not L._covers_storage(src):
        raise CannotLower("as_strided of a value in memory or of part of a storage")
    traced = tuple(src.stride())
    offset = 0 if storage_offset is None else storage_offset
    if offset == 0 and [(n, st) for n, st in zip(src.shape, traced) if n != 1] == \
            [(n, st) for n, st in zip(size, stride) if n != 1]:
        return _nonone_remap(x, out_size(node))
    stored = L.realize(x, traced)
    if stored.offset or any(a != b and n != 1 for a, b, n in zip(stored.stride, traced, stored.size)):
        raise CannotLower("as_strided of a value stored in another layout")
    return _meta_view(L, stored, node, (size, stride, storage_offset), {})


@register(aten.split_with_sizes.default, aten.split.Tensor)
def _split(L, node, x, sizes, dim=0):
    """Chunks along `dim` as views of `x` in memory, not an extern call. (Remapped lazy chunks
    would be laid out anew where they are outputs, not with eager's strides, which a backward
    graph compiled for the saved chunks expects.)"""
    if any_symbolic(x.size):
        raise CannotLower("split of symbolic sizes")
    x = L.realize(x)
    dim %= len(x.size)
    n = x.size[dim]
    if isinstance(sizes, int):
        sizes = [min(sizes, n - start) for start in range(0, n, sizes)] if sizes else [n]
    out, start = [], 0
    for k in sizes:
        size = x.size[:dim] + (k,) + x.size[dim + 1:]
        out.append(Strided(size, x.dtype, x.buffer, x.stride, x.offset + start * x.stride[dim]))
        start += k
    return out


@register(aten.cat.default)
def _cat(L, node, tensors, dim=0):
    """A concatenation in which one input holds everything (the others are empty, as a key/value
    cache starts) is that input; others stay extern calls."""
    out = meta(node)
    if any(isinstance(t, Value) and any_symbolic(t.size) for t in tensors):
        raise CannotLower("cat of symbolic sizes")
    full = [t for t in tensors if isinstance(t, Value) and numel(t.size) > 0]
    if len(full) != 1 or full[0].size != tuple(out.shape) or full[0].dtype != out.dtype:
        raise CannotLower("cat of several inputs")
    return full[0]


@register(aten.t, aten.transpose.int)
def _transpose(L, node, x, d0=0, d1=1):
    nd = len(x.size)
    dims = list(range(nd))
    if nd >= 2:
        dims[d0 % nd], dims[d1 % nd] = dims[d1 % nd], dims[d0 % nd]
    if isinstance(x, Strided):
        return _meta_view(L, x, node, (d0, d1) if node.target is aten.transpose.int else (), {})
    return _lazy_permute(x, out_size(node), dims)


# -- reductions ---------------------------------------------------------------------------------

def _dims(x: Value, dims) -> List[int]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(len(x.size)))
    return list(dims) if isinstance(dims, (list, tuple)) else [dims]


def _reduction(kind: str):
    def lower(L, node, x, dims=None, keepdim=False, *, dtype=None, output_dtype=None):
        return L.reduce(x, _dims(x, dims), kind, meta(node).dtype, keepdim)
    return lower


register(aten.sum.dim_IntList, aten.sum.default, prims.sum)(_reduction("sum"))
register(aten.amax, prims.amax)(_reduction("max"))
register(aten.amin, prims.amin)(_reduction("min"))
register(aten.any.dim, aten.any.dims, aten.any.default)(_reduction("any"))
register(aten.all.dim, aten.all.dims, aten.all.default)(_reduction("all"))


@register(aten.prod.default, aten.prod.dim_int)
def _prod(L, node, x, *args, dtype=None):
    dim, keepdim = (args + (False,))[:2] if args and not isinstance(args[0], torch.dtype) else (None, False)
    return L.reduce(x, _dims(x, dim), "prod", meta(node).dtype, keepdim)


@register(aten.argmax, aten.argmin)
def _argmax(L, node, x, dim=None, keepdim=False):
    kind = node.target.overloadpacket.__name__
    if dim is None and keepdim:
        v = L.reduce(x, _dims(x, None), kind, torch.int64, False)
        return _remap(v, out_size(node), lambda idx: ())
    return L.reduce(x, _dims(x, dim), kind, torch.int64, keepdim)


@register(aten.max.dim, aten.min.dim)
def _max_dim(L, node, x, dim, keepdim=False):
    name = node.target.overloadpacket.__name__
    return (L.reduce(x, [dim], name, x.dtype, keepdim),
            L.reduce(x, [dim], "arg" + name, torch.int64, keepdim))


@register(aten.max.default, aten.min.default)
def _max_all(L, node, x):
    return L.reduce(x, _dims(x, None), node.target.overloadpacket.__name__, x.dtype, False)


@register(prims.var)
def _var(L, node, x, dims, correction=0, *, output_dtype=None):
    """Two passes: the mean, then the sum of squared deviations (fused into one kernel later)."""
    out = meta(node).dtype
    dims = _dims(x, dims)
    if correction != int(correction):
        raise CannotLower("a fractional correction")
    correction = int(correction)
    n = 1
    for d in dims:
        n *= x.size[d % len(x.size)]
    total = L.reduce(x, dims, "sum", out, True)
    c_n = const(n, out)

    def deviation_sq(idx):
        d = op("sub", cast(x.load(idx), out), op("truediv", total.load(_keep_index(idx, total)), c_n))
        return op("mul", d, d)

    sq = L.reduce(Lazy(x.size, out, deviation_sq), dims, "sum", out, False)
    if any_symbolic((n,)):
        low = L.size_vars.lower_bound(norm(n))
        if low is None or not 0 <= correction <= low:  # else eager's max(n - correction, 0) may be 0
            raise CannotLower("variance over symbolic sizes with this correction")
        denom = const(norm(n - correction), out)
    else:
        denom = const(max(n - correction, 0), out)
    return Lazy(sq.size, out, lambda idx: op("truediv", sq.load(idx), denom))


def _keep_index(idx: Tuple[Index, ...], keep: Value) -> Tuple[Index, ...]:
    return tuple(Index() if s == 1 else i for i, s in zip(idx, keep.size))


# -- pooling ------------------------------------------------------------------------------------

def _pair(v) -> Tuple[int, int]:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return (v[0], v[-1]) if v else (0, 0)


@register(aten.max_pool2d_with_indices)
def _max_pool2d(L, node, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """Each output is the max over its window, unrolled: loads at affine positions, no reduction
    loop. As in eager's kernel a larger value or a NaN takes the lead: for values that is
    `maximum` (NaN-propagating); indices keep the position (flat in the input plane). The input
    is read from memory: gcc (12) vectorises selects over strided loads of a buffer but not over
    strided loads feeding arithmetic, so fusing the producer (batch norm, relu) here made the
    loop scalar and 30x slower."""
    kh, kw = _pair(kernel_size)
    sh, sw = _pair(stride) if stride else (kh, kw)
    dh, dw = _pair(dilation)
    size = out_size(node)[0]
    height, width = x.size[-2:]
    if _pair(padding) != (0, 0) or kh * kw > 16 \
            or (size[-2] - 1) * sh + (kh - 1) * dh >= height \
            or (size[-1] - 1) * sw + (kw - 1) * dw >= width:
        raise CannotLower("max_pool2d with padding, a large window or ceil_mode windows")
    floating = is_float(x.dtype)
    x = L.realize(x)
    # Positions are selected as float32 where that is exact: gcc vectorises selects of
    # floats over these strided loads, not selects of integers.
    at_dtype = torch.float32 if height * width <= 1 << 24 else torch.int64

    def window(idx):
        lead, oh, ow = idx[:-2], idx[-2], idx[-1]
        best = best_at = None
        for i in range(kh):
            for j in range(kw):
                h, w = oh * sh + i * dh, ow * sw + j * dw
                v, at = x.load(lead + (h, w)), IndexValue(h * width + w, at_dtype)
                if best is None:
                    best, best_at = v, at
                    continue
                take = op("gt", v, best, dtype=torch.bool)
                if floating:
                    take = op("or", take, op("isnan", v, dtype=torch.bool))
                best_at = op("where", take, at, best_at, dtype=at_dtype)
                best = op("maximum", v, best)
        return best, cast(best_at, torch.int64)

    return (Lazy(size, x.dtype, lambda idx: window(idx)[0]),
            Lazy(size, torch.int64, lambda idx: window(idx)[1]))
