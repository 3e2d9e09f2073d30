"""Symbolic sizes in the loop IR: sizes, strides and offsets are ints or polynomials (sympy) over
size symbols `ks0, ks1, ...` that the compiled graph binds from its inputs' shapes on each call
and passes to its kernels as int64 arguments.

Symbols stand for dims dynamo made dynamic, which are never 0 or 1 (dynamic_shapes), so a
structural comparison `size != 1` is exact for them. A size torch derives from them by floor
division, modulo, max or min (a convolution's output, a view's -1) is a symbol of its own, which
the compiled graph computes from the others: only where torch's bounds say it is at least 1, so
that a product of sizes is never 0 where a symbolic one is taken as positive. Decisions that need
a number (loop order, tuning) read the size at the example inputs (`hint`) only where any answer
is correct; the ones that affect results (divisibility, stack array sizes) take a
size-independent path instead.
"""
from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import sympy
import torch

from .errors import CannotCompile

SizeExpr = Union[int, sympy.Expr]


class SizeVars:
    """The size symbols of one graph: torch's shape-env symbols renamed `ks0..`, their values at
    the example inputs, and where each call finds them (input index, "size"/"stride", dim)."""

    def __init__(self, shape_env: Any = None):
        self.shape_env = shape_env
        self._renamed: Dict[sympy.Symbol, sympy.Symbol] = {}
        self.hints: Dict[sympy.Symbol, int] = {}
        self.lower: Dict[sympy.Symbol, int] = {}  # what the guards say each symbol is at least
        self.sources: Dict[sympy.Symbol, Tuple[int, str, int]] = {}
        self.derived: Dict[sympy.Symbol, str] = {}  # symbol -> Python text computing it from earlier ones
        self._derived_of: Dict[sympy.Expr, sympy.Symbol] = {}  # torch's expression -> its symbol
        self._compute: Dict[sympy.Symbol, Callable[..., int]] = {}

    @property
    def symbols(self) -> List[sympy.Symbol]:
        return list(self.hints)

    def expr(self, value: Any) -> SizeExpr:
        """An int, or the polynomial a SymInt stands for, over our symbols."""
        if isinstance(value, int):
            return value
        if not isinstance(value, (torch.SymInt, torch.SymFloat)):
            raise CannotCompile(f"a size of type {type(value).__name__}")
        e = value.node.expr
        if isinstance(value, torch.SymFloat):  # a size made a float (mean's divisor): its integer value
            e = e.replace(lambda x: x.func.__name__ == "ToFloat", lambda x: x.args[0])
            e = e.xreplace({f: sympy.Integer(int(f)) for f in e.atoms(sympy.Float) if f == int(f)})
            if not all(x.is_integer for x in e.free_symbols):
                raise CannotCompile(f"a symbolic float {e}")
        if self.shape_env is not None:
            e = self._resolve_max_min(self.shape_env.replace(e))
        if e.is_Integer:
            return int(e)
        for s in sorted(e.free_symbols, key=str):
            if s not in self._renamed:
                hint = int(self.shape_env.backed_var_to_val[s]) if self.shape_env is not None else 2
                low = self.shape_env.var_to_range[s].lower if self.shape_env is not None else 2
                self._renamed[s] = self._new_symbol(hint, low)
        e = sympy.expand(self._atomized(e).xreplace(self._renamed))
        _check_polynomial(e)
        return e

    def _new_symbol(self, hint: int, low: sympy.Expr) -> sympy.Symbol:
        new = sympy.Symbol(f"ks{len(self.hints)}", integer=True, positive=True)
        self.hints[new] = hint
        self.lower[new] = int(low) if low.is_Integer else -(1 << 62)  # torch says -int_oo is finite
        return new

    def _atomized(self, e: sympy.Expr) -> sympy.Expr:
        """`e` (over torch's symbols) with each floor division, modulo, max or min of sizes in it
        replaced by its value where the guards fix it, by an exact quotient, else by a derived
        symbol; a sum or product with a part that may be 0 is one derived symbol as a whole."""
        if e.is_Symbol or e.is_Integer:
            return e
        if e.is_Add or e.is_Mul or (e.is_Pow and e.exp.is_Integer and e.exp > 0):
            try:
                return e.func(*map(self._atomized, e.args))
            except _MayBeBelowOne:
                return self._derived(e)
        if e.func.__name__ not in _PYTHON_FUNCTIONS or self.shape_env is None:
            raise CannotCompile(f"size expression {e} (only sums, products, floor divisions, modulos, "
                                "max and min of sizes are supported)")
        try:
            quotient = self._exact_quotient(e)
        except _MayBeBelowOne:  # a part of it may be 0: `e` is one symbol as a whole
            quotient = None
        return quotient if quotient is not None else self._derived(e)

    def _exact_quotient(self, e: sympy.Expr) -> Optional[sympy.Expr]:
        """A floor division by a product of sizes (never 0) that divides the dividend as polynomials."""
        if e.func.__name__ not in ("FloorDiv", "CleanDiv"):
            return None
        dividend, divisor = (sympy.expand(self._atomized(a)) for a in e.args)
        coefficient, factors = divisor.as_coeff_mul()
        if not (coefficient.is_Integer and coefficient > 0 and all(f.is_Symbol for f in factors)):
            return None
        quotient, remainder = sympy.div(dividend, divisor)
        if remainder != 0 or not (quotient.is_Integer or all(
                c.is_Integer for c in sympy.Poly(quotient, *quotient.free_symbols).coeffs())):
            return None
        return quotient

    def _derived(self, e: sympy.Expr) -> sympy.Expr:
        """The symbol computed at run time for torch's `e`, or its value where the guards fix it."""
        if e in self._derived_of:
            return self._derived_of[e]
        hint = int(e.xreplace({s: self.shape_env.backed_var_to_val[s] for s in e.free_symbols}))
        if self.shape_env._maybe_evaluate_static(sympy.Eq(e, hint)):  # a view's -1 that the guards fix
            self._derived_of[e] = sympy.Integer(hint)
            return self._derived_of[e]
        low = self.shape_env.bound_sympy(e).lower
        if not (low.is_Integer and low >= 1):
            if not self.shape_env._maybe_evaluate_static(sympy.Ge(e, 1)):
                raise _MayBeBelowOne(f"size expression {e}, which may be less than 1")
            low = sympy.Integer(1)
        code = _python_code(e.xreplace(self._renamed))
        earlier = ", ".join(str(s) for s in self.hints)
        new = self._derived_of[e] = self._new_symbol(hint, low)
        self.derived[new] = code
        self._compute[new] = eval(f"lambda {earlier}: {code}", {})  # noqa: S307 - our own arithmetic text
        return new

    def _resolve_max_min(self, e: sympy.Expr) -> sympy.Expr:
        """Max and Min (of slice sizes, strides) the shape env's facts decide, replaced by the winner."""
        def resolve(m: sympy.Expr) -> sympy.Expr:
            a, b = m.args[0], m.func(*m.args[1:])
            larger = [x for x, y in ((a, b), (b, a)) if self.shape_env._maybe_evaluate_static(sympy.Ge(x, y))]
            if not larger:
                return m
            return larger[0] if m.func.__name__ == "Max" else (b if larger[0] is a else a)
        return e.replace(lambda x: x.func.__name__ in ("Max", "Min") and len(x.args) >= 2, resolve)

    def lower_bound(self, e: SizeExpr) -> Optional[int]:
        """A lower bound of a product of symbols at least 1 and positive ints; None for others."""
        if isinstance(e, int):
            return e
        bound = 1
        for f in sympy.Mul.make_args(e):
            base, exp = f.as_base_exp()
            if base.is_Integer and exp == 1 and base > 0:
                bound *= int(base)
            elif base.is_Symbol and exp.is_Integer and exp > 0 and self.lower.get(base, 0) >= 1:
                bound *= self.lower[base] ** int(exp)
            else:
                return None
        return bound

    def exprs(self, values: Sequence[Any]) -> Tuple[SizeExpr, ...]:
        return tuple(self.expr(v) for v in values)

    def bind(self, index: int, value: Any) -> None:
        """Note where input `index` (a fake tensor or a SymInt) gives each symbol at run time."""
        if isinstance(value, torch.Tensor):
            found = [("size", d, s) for d, s in enumerate(self.exprs(value.shape))]
            found += [("stride", d, s) for d, s in enumerate(self.exprs(value.stride()))]
        else:
            found = [("int", 0, self.expr(value))]
        for kind, dim, e in found:
            if isinstance(e, sympy.Symbol) and e not in self.sources:
                self.sources[e] = (index, kind, dim)

    def check_bound(self) -> None:
        missing = [str(s) for s in self.hints if s not in self.sources and s not in self.derived]
        if missing:
            raise CannotCompile(f"size symbols {missing} are not sizes of the graph's inputs")

    def values(self, args: Sequence[Any]) -> Tuple[int, ...]:
        """The symbols' values for one call's arguments."""
        out: List[int] = []
        for s in self.hints:
            if s in self.derived:
                out.append(self._compute[s](*out))
                continue
            index, kind, dim = self.sources[s]
            a = args[index]
            out.append(a.shape[dim] if kind == "size" else a.stride(dim) if kind == "stride" else int(a))
        return tuple(out)

    def value_code(self, s: sympy.Symbol, arg: Callable[[int], str]) -> str:
        """Python text reading symbol `s` from the argument `arg(index)` names (a derived symbol:
        computing it from the symbols before it, as locals)."""
        if s in self.derived:
            return self.derived[s]
        index, kind, dim = self.sources[s]
        a = arg(index)
        return f"{a}.shape[{dim}]" if kind == "size" else f"{a}.stride({dim})" if kind == "stride" else a


# torch's integer functions of sizes (torch.utils._sympy.functions) -> their Python spelling
_PYTHON_FUNCTIONS: Dict[str, Callable[[List[str]], str]] = {
    "FloorDiv": lambda a: f"({a[0]} // {a[1]})",
    "CleanDiv": lambda a: f"({a[0]} // {a[1]})",
    "PythonMod": lambda a: f"({a[0]} % {a[1]})",
    "Max": lambda a: f"max({', '.join(a)})",
    "Min": lambda a: f"min({', '.join(a)})",
}


class _MayBeBelowOne(CannotCompile):
    """A derived size torch's bounds do not keep at 1 or more."""


def _python_code(e: sympy.Expr) -> str:
    """`e`, over our symbols and torch's integer functions, as Python text."""
    if e.is_Integer or e.is_Symbol:
        return str(e)
    if e.is_Add:
        return "(" + " + ".join(map(_python_code, e.args)) + ")"
    if e.is_Mul:
        return "*".join(map(_python_code, e.args))
    if e.is_Pow and e.exp.is_Integer and e.exp > 0:
        return "*".join([_python_code(e.base)] * int(e.exp))
    spell = _PYTHON_FUNCTIONS.get(e.func.__name__)
    if spell is None:
        raise CannotCompile(f"size expression {e}")
    return spell([_python_code(a) for a in e.args])


def symbolic_ints(value: Any) -> List[torch.SymInt]:
    """The SymInts among a value's sizes and strides (a fake tensor's), or the value itself."""
    values = (*value.shape, *value.stride()) if isinstance(value, torch.Tensor) else (value,)
    return [v for v in values if isinstance(v, torch.SymInt)]


def has_symbolic_sizes(value: Any) -> bool:
    return bool(symbolic_ints(value))


def _check_polynomial(e: sympy.Expr) -> None:
    for node in sympy.preorder_traversal(e):
        ok = node.is_Symbol or node.is_Integer or node.is_Add or node.is_Mul or (
            node.is_Pow and node.exp.is_Integer and node.exp > 0)
        if not ok:
            raise CannotCompile(f"size expression {e} (only sums and products of sizes are supported)")


_active: List[Dict[sympy.Symbol, int]] = [{}]


@contextlib.contextmanager
def hints_of(size_vars: Optional[SizeVars]) -> Iterator[None]:
    """Make `size_vars`' example values the ones `hint` reads while a graph compiles."""
    _active.append(size_vars.hints if size_vars is not None else {})
    try:
        yield
    finally:
        _active.pop()


def norm(x: SizeExpr) -> SizeExpr:
    """`x` in canonical form: an int, or an expanded polynomial (so equal sizes compare equal)."""
    if isinstance(x, int):
        return x
    x = sympy.expand(x)
    return int(x) if x.is_Integer else x


def is_symbolic(x: Any) -> bool:
    return isinstance(x, sympy.Basic)


def any_symbolic(xs: Sequence[Any]) -> bool:
    return any(isinstance(x, sympy.Basic) for x in xs)


def hint(x: SizeExpr) -> int:
    """The value of `x` at the example inputs (for heuristics only)."""
    if isinstance(x, int):
        return x
    return int(x.xreplace(_active[-1]))


def at_least_1(x: SizeExpr) -> SizeExpr:
    """max(x, 1); a symbolic size is a product of dims that are at least 2."""
    if not isinstance(x, int) and x.is_Integer:
        x = int(x)
    return max(x, 1) if isinstance(x, int) else x


def size_code(x: SizeExpr) -> str:
    """`x` as text valid in C++ and Python (symbols as they are named); parenthesised unless atomic."""
    if isinstance(x, int):
        return str(x)
    text = _code(x)
    return text if x.is_Symbol or x.is_Integer else f"({text})"


def _code(e: sympy.Expr) -> str:
    if e.is_Integer or e.is_Symbol:
        return str(e)
    if e.is_Add:
        out = ""
        for i, term in enumerate(sorted(e.args, key=sympy.default_sort_key)):
            text = _code(term)
            if i and text.startswith("-"):
                out += " - " + text[1:]
            else:
                out += (" + " if i else "") + text
        return f"({out})"
    if e.is_Mul:
        factors = sorted(e.args, key=sympy.default_sort_key)
        if factors[0] == -1:
            return "-" + "*".join(_code(f) for f in factors[1:])
        return "*".join(_code(f) for f in factors)
    if e.is_Pow:
        return "*".join([_code(e.base)] * int(e.exp))
    raise CannotCompile(f"size expression {e}")


def tuple_code(xs: Sequence[SizeExpr]) -> str:
    """A Python tuple literal of sizes."""
    return "(" + "".join(size_code(x) + ", " for x in xs) + ")"


def evaluator(xs: Sequence[SizeExpr], symbols: Sequence[sympy.Symbol]) -> Callable[[Tuple[int, ...]], Tuple[int, ...]]:
    """A function from the symbols' values to the values of `xs` (compiled once)."""
    names = ", ".join(str(s) for s in symbols)
    src = f"lambda {names}{',' if len(symbols) == 1 else ''}: {tuple_code(xs)}" if symbols else f"lambda: {tuple_code(xs)}"
    fn = eval(src, {})  # noqa: S307 - our own arithmetic text over symbol names
    return lambda values: fn(*values)


def numel_of(xs: Sequence[SizeExpr]) -> SizeExpr:
    return math.prod(xs)
