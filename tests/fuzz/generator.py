"""Random fuzz cases: a tensor program plus a sequence of calls and mutations, all derived from one seed."""
import random
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from . import families
from .families import Block

# Features whose bugs are known and still open on main: the in-suite test leaves them out, `make fuzz` keeps
# them. Each names a bug class and the template prefixes ("family: template") that run into it.
KNOWN_OPEN: Dict[str, Tuple[str, ...]] = {}
ALL_FAMILIES: Tuple[str, ...] = tuple(families.FAMILIES)
CPP_FRACTION = 0.1


@dataclass
class Case:
    """One fuzz case: everything needed to render the program and run its steps."""

    seed: int
    backend: str
    families: Tuple[str, ...]
    setup: List[Block]
    body: List[Block]
    ret: str
    target: str
    steps: List[Tuple[str, ...]]  # (kind, code, tag[, "backward"])

    @property
    def exact(self) -> bool:
        return self.backend == "eager"

    def program(self) -> str:
        """The program's source: imports, setup blocks, then the target function (or module)."""
        lines = ["import enum", "import functools", "import math", "import types", "", "import torch", ""]
        for block in self.setup:
            lines += [f"# {block.tag}", block.code, ""]
        written = sorted({name for block in self.body for name in block.global_writes})
        body = ([f"global {', '.join(written)}"] if written else []) + ["out = []", "y = a"]
        for block in self.body:
            body += [f"# {block.tag}", block.code]
        body.append(f"return {self.ret}")
        if self.target == "f":
            lines.append("def f(a, b, s, lst):")
            lines += _indent("\n".join(body), 4)
        else:
            lines += families.PROG_CLASS.splitlines()
            lines += _indent("\n".join(body), 8)
            lines += ["", "", "PROG = Prog()"]
        return "\n".join(lines) + "\n"

    def known_open(self) -> List[str]:
        """The KNOWN_OPEN bug classes whose features this case uses."""
        tags = [block.tag for block in self.body] + [step[2] for step in self.steps] + [f"backend: {self.backend}"]
        return [name for name, prefixes in KNOWN_OPEN.items() if any(tag.startswith(prefixes) for tag in tags)]

    def run_steps(self) -> List[Tuple[str, ...]]:
        """Steps as runtime.run_case takes them (tags dropped)."""
        return [(kind, code, *flags) for kind, code, _tag, *flags in self.steps]


def _indent(text: str, n: int) -> List[str]:
    return [(" " * n + line) if line else "" for line in text.splitlines()]


@dataclass
class Gen:
    """What families add to while a case is generated."""

    rng: random.Random
    shape: Tuple[int, ...]
    module_target: bool
    skipped: Tuple[str, ...] = ()  # template prefixes left out
    setup: List[Block] = field(default_factory=list)
    body_makers: Dict[str, List[Callable[[], Block]]] = field(default_factory=dict)
    mutators: List[Callable[[], Tuple[str, str, str]]] = field(default_factory=list)
    arg_changers: List[Callable[["Args"], str]] = field(default_factory=list)
    counter: int = 0

    def name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def excluded(self, tag: str) -> bool:
        return tag.startswith(self.skipped) if self.skipped else False

    def seed(self) -> int:
        return self.rng.randrange(1, 10_000)

    def tensor(self, shape: Optional[Sequence[int]] = None, dtype: str = "float32") -> str:
        shape = tuple(self.shape if shape is None else shape)
        return f"T({self.seed()}, {shape}" + (f", {dtype!r})" if dtype != "float32" else ")")


@dataclass
class Args:
    """The argument state between calls; rendered to `((a, b), {"s": ..., "lst": ...})`."""

    a: Dict
    b: Optional[Dict]  # None: b is a
    s: str
    lst: str
    s_keyword: bool = False

    def render(self) -> str:
        a = _tensor_expr(self.a)
        if self.b is None:
            pos = f"(_a := {a}), _a"
        else:
            pos = f"{a}, {_tensor_expr(self.b)}"
        if self.s_keyword:
            return f"(({pos}), {{'s': {self.s}, 'lst': {self.lst}}})"
        return f"(({pos}, {self.s}, {self.lst}), {{}})"


def _tensor_expr(spec: Dict) -> str:
    if "expr" in spec:  # a program value passed in (a global tensor, a view of one)
        return spec["expr"]
    extra = "".join(f", {k}={spec[k]!r}" for k in ("layout", "offset", "rg") if spec.get(k) not in (None, "c", 0, False))
    dtype = f", {spec['dtype']!r}" if spec["dtype"] != "float32" else ""
    return f"T({spec['seed']}, {tuple(spec['shape'])}{dtype}{extra})"


def generate(seed: int, allowed: Sequence[str] = ALL_FAMILIES, backend: Optional[str] = None,
             skip: Sequence[str] = ()) -> Case:
    """The case for `seed`: the same seed (and arguments) always gives the same case. `skip` names KNOWN_OPEN
    classes whose features are left out."""
    rng = random.Random(seed)
    skipped = tuple(p for name in skip for p in KNOWN_OPEN[name])
    drawn = "cpp" if rng.random() < CPP_FRACTION else "eager"  # drawn even when given: the rest stays the same
    if backend is None:
        backend = "eager" if drawn == "cpp" and skipped and "backend: cpp".startswith(skipped) else drawn
    chosen = [f for f in allowed if f == "tensor_ops" or rng.random() < 0.4]
    if backend != "eager":  # generated kernels draw random numbers their own way
        chosen = [f for f in chosen if f != "rng"]
    if not chosen:  # `allowed` without tensor_ops: a body needs a family
        chosen = [rng.choice([f for f in allowed if backend == "eager" or f != "rng"] or ["tensor_ops"])]
    shape = tuple(rng.randint(1, 5) for _ in range(rng.choice((1, 2, 2, 2, 3, 4))))
    gen = Gen(rng, shape, module_target="module_target" in chosen, skipped=skipped)
    for name in chosen:
        families.FAMILIES[name](gen)
    body = [_pick_body(gen) for _ in range(rng.randint(2, 7))]
    args = Args(a={"seed": gen.seed(), "shape": gen.shape, "dtype": "float32"},
                b={"seed": gen.seed(), "shape": gen.shape, "dtype": "float32"},
                s=rng.choice(families.S_VALUES), lst=rng.choice(families.LIST_VALUES))
    steps = _steps(gen, args, backward="backward" in chosen)
    return Case(seed, backend, tuple(chosen), gen.setup, body, rng.choice(families.RETURNS),
                "PROG" if gen.module_target else "f", steps)


def _pick_body(gen: Gen) -> Block:
    family = gen.rng.choice(sorted(gen.body_makers))
    return gen.rng.choice(gen.body_makers[family])()


def _steps(gen: Gen, args: Args, backward: bool) -> List[Tuple[str, ...]]:
    rng = gen.rng
    flags = ("backward",) if backward else ()
    steps: List[Tuple[str, ...]] = [("call", args.render(), "call", *flags)]
    for _ in range(rng.randint(2, 5)):
        for _ in range(rng.choice((0, 1, 1, 2, 3))):
            if gen.mutators:
                steps.append(rng.choice(gen.mutators)())
        tag = "call"
        if rng.random() < 0.5:
            args.a["seed"] = gen.seed()
            if args.b is not None:
                args.b["seed"] = gen.seed()
        if gen.arg_changers and rng.random() < 0.7:
            tag = rng.choice(gen.arg_changers)(args)
        steps.append(("call", args.render(), tag, *flags))
    return steps
