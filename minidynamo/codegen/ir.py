"""Loop-level IR shared by the C++ and Triton renderers.

A kernel body is a DAG of `Expr` nodes computed per element of an iteration space. Indexing is
affine in the loop variables (`Index`): views are folded into strides and offsets, never into
division or modulo, so every load is `base[const + sum(coeff * var)]`, which both C++ (as a pointer
offset) and Triton (as a block of offsets) express directly.

Expressions are immutable and hash-consed by value (the hash is cached), so structurally equal
subtrees compare equal and common-subexpression elimination is a dictionary lookup.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import math

import torch

from .sizes import SizeExpr, at_least_1, is_symbolic, norm

Scalar = Union[bool, int, float]


@dataclass(frozen=True)
class Index:
    """const + sum(coeff * var) over named loop variables; terms sorted by name, no zero coeffs."""

    terms: Tuple[Tuple[str, SizeExpr], ...] = ()
    const: SizeExpr = 0

    @staticmethod
    def var(name: str) -> "Index":
        return Index(((name, 1),), 0)

    @staticmethod
    def make(coeffs: Dict[str, int], const: int = 0) -> "Index":
        return Index(tuple(sorted((k, v) for k, v in coeffs.items() if v != 0)), const)

    def coeffs(self) -> Dict[str, int]:
        return dict(self.terms)

    def __add__(self, other: Union["Index", SizeExpr]) -> "Index":
        if not isinstance(other, Index):
            return Index(self.terms, norm(self.const + other))
        c = self.coeffs()
        for k, v in other.terms:
            c[k] = norm(c.get(k, 0) + v)
        return Index.make(c, norm(self.const + other.const))

    def __mul__(self, k: SizeExpr) -> "Index":
        return Index.make({n: norm(v * k) for n, v in self.terms}, norm(self.const * k))

    def subst(self, env: Dict[str, "Index"]) -> "Index":
        out = Index((), self.const)
        for n, v in self.terms:
            out = out + (env[n] * v if n in env else Index(((n, v),)))
        return out

    def vars(self) -> Tuple[str, ...]:
        return tuple(n for n, _ in self.terms)


class Expr:
    """Base of the element-wise expression DAG. Subclasses are frozen dataclasses."""

    dtype: torch.dtype

    def children(self) -> Tuple["Expr", ...]:
        return ()

    def rebuild(self, children: Tuple["Expr", ...], index_fn: Callable[[Index], Index]) -> "Expr":
        return self

    def map(self, index_fn: Callable[[Index], Index],
            leaf_fn: Optional[Callable[["Expr"], Optional["Expr"]]] = None,
            memo: Optional[Dict["Expr", "Expr"]] = None) -> "Expr":
        """Rewrite the DAG bottom-up: `index_fn` on every Index, `leaf_fn` may replace a node."""
        memo = {} if memo is None else memo
        hit = memo.get(self)
        if hit is not None:
            return hit
        new = leaf_fn(self) if leaf_fn is not None else None
        if new is None:
            new = self.rebuild(tuple(c.map(index_fn, leaf_fn, memo) for c in self.children()), index_fn)
        memo[self] = new
        return new

    def walk(self) -> Iterator["Expr"]:
        """Every distinct node of the DAG, children before parents."""
        seen = set()
        stack: List[Tuple[Expr, bool]] = [(self, False)]
        while stack:
            e, done = stack.pop()
            if done:
                yield e
                continue
            if e in seen:
                continue
            seen.add(e)
            stack.append((e, True))
            stack.extend((c, False) for c in reversed(e.children()) if c not in seen)


def _cache_hash(obj, fields) -> None:
    object.__setattr__(obj, "_hash", hash((type(obj).__name__,) + fields))


@dataclass(frozen=True, eq=True)
class Const(Expr):
    value: Scalar
    dtype: torch.dtype
    _hash: int = field(default=0, compare=False, repr=False)

    def __post_init__(self):
        _cache_hash(self, (repr(self.value), self.dtype))

    def __hash__(self):
        return self._hash


@dataclass(frozen=True, eq=True)
class Load(Expr):
    buffer: str
    index: Index
    dtype: torch.dtype
    _hash: int = field(default=0, compare=False, repr=False)

    def __post_init__(self):
        _cache_hash(self, (self.buffer, self.index, self.dtype))

    def __hash__(self):
        return self._hash

    def rebuild(self, children, index_fn):
        return Load(self.buffer, index_fn(self.index), self.dtype)


@dataclass(frozen=True, eq=True)
class IndexValue(Expr):
    """The integer value of an index expression (iota, argmax positions)."""

    index: Index
    dtype: torch.dtype
    _hash: int = field(default=0, compare=False, repr=False)

    def __post_init__(self):
        _cache_hash(self, (self.index, self.dtype))

    def __hash__(self):
        return self._hash

    def rebuild(self, children, index_fn):
        return IndexValue(index_fn(self.index), self.dtype)


@dataclass(frozen=True, eq=True)
class Op(Expr):
    """An element-wise operation; `name` is from OP_NAMES. `dtype` is the result type; arguments
    already have the dtype the operation computes in (lowering inserts explicit casts)."""

    name: str
    args: Tuple[Expr, ...]
    dtype: torch.dtype
    _hash: int = field(default=0, compare=False, repr=False)

    def __post_init__(self):
        assert self.name in OP_NAMES, self.name
        _cache_hash(self, (self.name, self.args, self.dtype))

    def __hash__(self):
        return self._hash

    def children(self):
        return self.args

    def rebuild(self, children, index_fn):
        return Op(self.name, children, self.dtype)


UNARY_MATH = (
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan",
    "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc",
    "lgamma", "sigmoid", "reciprocal", "floor", "ceil", "trunc", "round", "frac",
)
UNARY_OPS = UNARY_MATH + ("cast", "neg", "abs", "sign", "isnan", "isinf", "not", "bitnot")
BINARY_OPS = (
    "add", "sub", "mul", "truediv", "floordiv", "truncdiv", "remainder", "fmod", "pow", "atan2",
    "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge", "and", "or", "xor",
    "bitand", "bitor", "bitxor", "lshift", "rshift",
)
OP_NAMES = frozenset(UNARY_OPS + BINARY_OPS + ("where",))


def op_arity(name: str) -> int:
    return 1 if name in UNARY_OPS else 2 if name in BINARY_OPS else 3

REDUCTIONS = ("sum", "prod", "max", "min", "argmax", "argmin", "any", "all")


@dataclass
class Buffer:
    """A tensor in memory: graph inputs, constants, extern results and stored kernel outputs."""

    name: str
    size: Tuple[SizeExpr, ...]
    stride: Tuple[SizeExpr, ...]
    dtype: torch.dtype

    def span_bytes(self) -> int:
        """Bytes from the first to one past the last element its strides reach."""
        span = 1 + sum((s - 1) * st for s, st in zip(self.size, self.stride) if is_symbolic(s) or s > 0)
        return span * self.dtype.itemsize


@dataclass
class PointwiseNode:
    """out[store] = body for every point of `ranges` (loop variables p0, p1, ...)."""

    name: str
    ranges: Tuple[SizeExpr, ...]
    body: Expr
    store: Index
    dtype: torch.dtype


@dataclass
class ReductionNode:
    """out[contiguous over outer] = reduce(body) over `inner` (loop vars p0.. then r0..)."""

    name: str
    kind: str
    outer: Tuple[SizeExpr, ...]
    inner: Tuple[SizeExpr, ...]
    body: Expr
    dtype: torch.dtype  # accumulator and result dtype (int64 for arg reductions)


@dataclass
class ExternNode:
    """A call into torch: `fn(*args, **kwargs)` where Buffer-name placeholders become tensors."""

    names: Tuple[str, ...]  # one buffer per tensor result (None entries for ignored results)
    fn: Callable
    args: tuple
    kwargs: dict
    reads: Tuple[str, ...]


Node = Union[PointwiseNode, ReductionNode, ExternNode]


def outer_var(i: int) -> str:
    return f"p{i}"


def inner_var(i: int) -> str:
    return f"r{i}"


def loads(e: Expr) -> List[Load]:
    return [n for n in e.walk() if isinstance(n, Load)]


def node_reads(node: Node) -> Tuple[str, ...]:
    if isinstance(node, ExternNode):
        return node.reads
    return tuple(sorted({ld.buffer for ld in loads(node.body)}))


def node_outputs(node: Node) -> Tuple[str, ...]:
    if isinstance(node, ExternNode):
        return tuple(n for n in node.names if n is not None)
    return (node.name,)


def contiguous_strides(size: Tuple[SizeExpr, ...]) -> Tuple[SizeExpr, ...]:
    out, acc = [], 1
    for s in reversed(size):
        out.append(acc)
        acc *= at_least_1(s)
    return tuple(reversed(out))


def numel(sizes: Sequence[int]) -> int:
    return math.prod(sizes)
