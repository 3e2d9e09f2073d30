"""The fuzz families: program pieces (setup, body blocks) and the mutations between calls that go with them.

Templates are `str.format_map`ped: {i} the instance number, {T} a fresh tensor of the case's shape, {T1} a
fresh (1,) tensor, {T1d} a float64 one, {TK} a fresh (k, k) tensor and {k} the last dimension."""
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, Sequence, Tuple, Union

if TYPE_CHECKING:
    from .generator import Args, Gen

Family = Callable[["Gen"], None]
Body = Union[str, Tuple[str, Tuple[str, ...]]]

S_VALUES = ["0", "1", "2", "-1", "0.0", "-0.0", "1.0", "2.0", "2.5", "True", "False", "None", "(2,)", "(2.0,)",
            "(True,)", "(1,)", "(1, 2)", "T(5, ())", "T(6, (1,), 'int64')", "'ab'"]
LIST_VALUES = ["[1.0, 2.0]", "[]", "[T(7, (1,))]", "[1, 2.0, True]", "None", "(1.0,)", "[2]"]
RETURNS = ["y", "y, out", "{'y': y, 'out': out}", "[y] + out", "(y, a)", "out", "y, b, s, lst", "(y,)"]

PROG_CLASS = '''class Prog(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(T(11, (1,)))
        self.register_buffer("buf", T(12, (1,)))
        self.sub = torch.nn.Tanh()
        self.flag = True

    def helper(self, t):
        return t * 2

    def forward(self, a, b, s, lst):'''


@dataclass
class Block:
    """A piece of program text and the family feature it exercises (for triage)."""

    tag: str
    code: str
    global_writes: Tuple[str, ...] = ()


class _Fill(dict):
    """Template values made on demand, fresh for each use."""

    def __init__(self, gen: "Gen", i: str) -> None:
        super().__init__(i=i, k=gen.shape[-1] if gen.shape else 1)
        self.gen = gen

    def __missing__(self, key: str) -> str:
        k = self["k"]
        shapes = {"T": (None, "float32"), "T1": ((1,), "float32"), "T1d": ((1,), "float64"), "TK": ((k, k), "float32")}
        shape, dtype = shapes[key]
        return self.gen.tensor(shape, dtype)


def _add(gen: "Gen", family: str, i: str, setup: str = "", body: Sequence[Body] = (), mutations: Sequence[str] = (),
         states: Sequence[str] = ()) -> None:
    """Registers one family instance: its setup text, body templates (a template, or a template and the
    globals it assigns) and mutation templates."""
    if setup:
        gen.setup.append(Block(family, setup.format_map(_Fill(gen, i))))
    for entry in body:
        template, writes = (entry, ()) if isinstance(entry, str) else entry
        if gen.excluded(f"{family}: {template}"):
            continue
        gen.body_makers.setdefault(family, []).append(
            lambda t=template, w=writes: Block(f"{family}: {t.splitlines()[0]}", t.format_map(_Fill(gen, i)),
                                               tuple(name.format(i=i) for name in w)))
    for template in mutations:
        if gen.excluded(f"{family}: {template}"):
            continue
        gen.mutators.append(lambda t=template: ("mutate", t.format_map(_Fill(gen, i)), f"{family}: {t.splitlines()[0]}"))
    for code in states:
        if gen.excluded(f"{family}: {code}"):
            continue
        gen.mutators.append(lambda c=code: ("state", c, f"{family}: {c}"))


# ------------------------------------------------------------------------------------------------
# program shapes
# ------------------------------------------------------------------------------------------------
def tensor_ops(gen: "Gen") -> None:
    _add(gen, "tensor_ops", "", body=[
        "y = y + 1", "y = y * 2", "y = y - 0.5", "y = torch.sin(y)", "y = y.relu()", "y = torch.clamp(y, -1, 1)",
        "y = torch.where(y > 0, y, -y)", "y = y.abs() + 1", "y = torch.tanh(y)", "y = y * y", "y = -y",
        "y = y.float()", "y = y.to(torch.float64)", "y = y + b", "y = torch.maximum(y, b)", "y = y * b.sum()",
        "y = y / 3", "y = y.sigmoid()", "y = y + y.sum()", "y = y - y.mean(-1, keepdim=True)", "y = y + y.amax(0)",
        "y = torch.softmax(y, -1)", "y = y.cumsum(0)", "y = y * y.norm()", "y = y.sum(-1, keepdim=True) + y",
        "y = y.t()", "y = y.transpose(0, -1)", "y = y.reshape(-1)", "y = y.unsqueeze(0)", "y = y[..., ::2]",
        "y = y[:2]", "y = y.view(-1)", "y = y.permute(*reversed(range(y.dim())))", "y = y.squeeze()",
        "y = y.expand(2, *y.shape)", "y = y.contiguous()",
        "y = y @ y.transpose(-1, -2) if y.dim() >= 2 else y * y.sum()",
        "y = (y.reshape(-1, 1) @ y.reshape(1, -1)).sum(0)", "y = torch.mm(y, y.t()) if y.dim() == 2 else y",
        "y = torch.cat([y, y], 0) if y.dim() else y", "y = torch.stack([y, b]).sum(0)",
    ])


def control(gen: "Gen") -> None:
    _add(gen, "control", "", body=[
        "if y.dim() > 1:\n    y = y.sum(-1)\nelse:\n    y = y * 2",
        "for i in range(3):\n    y = y * 0.5 + i",
        "if y.dim() and y.shape[0] > 2:\n    y = y[:2]",
        "n = y.numel()\ny = y / n if n else y",
        "if y.dtype == torch.float64:\n    y = y.float()",
        "if y.is_contiguous():\n    y = y + 1\nelse:\n    y = y - 1",
        "if y.storage_offset() > 0:\n    y = y * 3",
        "if y.requires_grad:\n    y = y * 2",
        "if y.is_floating_point():\n    y = y.sin()\nelse:\n    y = y + 1",
        "out.append(y.stride())", "out.append(y.storage_offset())",
        "out.append((y.dim(), y.numel(), y.dtype, y.is_contiguous()))",
        "y = [y * i for i in range(3)][-1]",
        "z = y\nfor _ in range(2):\n    z = z + y\ny = z",
        "def inner(t):\n    return t * 2 + 1\ny = inner(y)",
        "y = (lambda t: t - 1)(y)", "y = sum([y, y, y])",
        "c = 2\ndef scaled(t):\n    return t * c\nc = 3\ny = scaled(y)",
        "n = 0\ndef bump():\n    nonlocal n\n    n += 1\nbump()\nbump()\ny = y + n",
    ])


def breaks(gen: "Gen") -> None:
    _add(gen, "breaks", "", body=[
        "if y.sum() > 0:\n    y = y + 1\nelse:\n    y = y - 1",
        "print('dbg', tuple(y.shape), y.dtype)",
        "k = int(y.sum() > 0)\ny = y * (k + 1)",
        "if y.numel() and y.max().item() > 0.5:\n    y = y * 0.5",
        "for i in range(2):\n    if y.sum() > i:\n        y = y - 1",
        "with torch.no_grad():\n    print('no_grad', torch.is_grad_enabled())\n    y = y * 2",
        "g = lambda t: t + 1\nprint('break')\ng = lambda t: t * 2\ny = g(y)",
        "try:\n    print('try')\n    y = y + 1\nexcept ValueError:\n    y = y - 1",
        "c = 1\ndef g2(t):\n    return t + c\nprint('b')\nc = 2\ny = g2(y)",
        "n = 0\ndef bump():\n    nonlocal n\n    n += 1\nbump()\nprint('x')\nbump()\ny = y + n",
        "y = y.nonzero().float().sum() + y",
        "y = y + (1 if y.sum().item() > 0 else 2)",
    ])


def containers_ret(gen: "Gen") -> None:
    _add(gen, "containers_ret", "", body=[
        "out.append(y.sum())", "out.append(y.shape)", "out.append(len(out))", "out.extend([y, y])",
        "out.append(a)", "out.append({{'k': y, 'n': y.dim()}})", "out.append({{j: j * 2 for j in range(3)}})",
        "out.append(y.dtype)", "out.append((y, [y.dim()]))", "out.append(out[-1] if out else None)",
        "out = out + [y]", "out.append(set(range(y.dim())))", "d = dict(a=y)\nd['b'] = y + 1\nout.append(d)",
        "out.append(list(y.shape))", "out.append(y.T if y.dim() == 2 else y)", "out.append(y[0] if y.dim() else y)",
        "out.append(a[:1] if a.dim() else a)", "out.append(a.t() if a.dim() == 2 else a)",
    ])


def inplace(gen: "Gen") -> None:
    _add(gen, "inplace", "", body=[
        "y.add_(1)", "y.mul_(2)", "if y.dim():\n    y[0] = 0", "y.clamp_(min=0)", "a.add_(1)", "b.zero_()",
        "y.copy_(b)", "out.append(y.add_(0) is y)", "if a.dim() == 2:\n    a.t_()", "y = y.clone()\ny.add_(1)",
        "y.sub_(b)", "y += 1", "y *= b", "a[...] = a * 2", "v = y.view(-1)\nv.add_(1)",
        "lst.append(y.sum())", "b.copy_(a)",
    ])


def rng(gen: "Gen") -> None:
    _add(gen, "rng", "", body=[
        "y = y + torch.rand_like(y)", "y = torch.nn.functional.dropout(y, 0.5, training=True)",
        "y = y * torch.randn(y.shape)", "out.append(torch.randint(0, 10, (2,)))",
        "torch.manual_seed(3)\ny = y + torch.rand(1)",
    ])


# ------------------------------------------------------------------------------------------------
# state read by the program and changed between calls
# ------------------------------------------------------------------------------------------------
def globals_(gen: "Gen") -> None:
    i = gen.name("")
    _add(gen, "globals", i,
         setup="GT{i} = {T}\nGF{i} = True\nGN{i} = 2\nGS{i} = 1.5",
         body=["y = y + GT{i}", "if GF{i}:\n    y = y * 2", "for _ in range(GN{i}):\n    y = y + 1", "y = y * GS{i}",
               ("GW{i} = y.sum()", ("GW{i}",)), ("GN{i} = GN{i} + 1", ("GN{i}",)), "out.append(GF{i})"],
         mutations=["GT{i} = {T}", "GT{i}.add_(1)", "GT{i} = GT{i}.double()", "GT{i} = 3", "GF{i} = not GF{i}",
                    "GF{i} = 0", "GF{i} = None", "GN{i} = 3", "GN{i} = 0", "GS{i} = -0.0", "GS{i} = 2",
                    "GS{i} = True", "GS{i} = 2.5", "GT{i} = GT{i}.t() if GT{i}.dim() == 2 else GT{i}[None]"])
    gen.arg_changers.append(lambda args: _pass_global(args, gen.rng.choice((f"GT{i}", f"GT{i}[:1]", f"GT{i}.view(-1)"))))


def _pass_global(args: "Args", expr: str) -> str:
    args.a = dict(args.a, expr=expr)
    return f"globals: a = {expr}"


def closures(gen: "Gen") -> None:
    i = gen.name("")
    _add(gen, "closures", i,
         setup=("def _make_k{i}():\n    c = 2.0\n\n    def k(t):\n        return t * c\n\n"
                "    def set_c(v):\n        nonlocal c\n        c = v\n\n    return k, set_c\n\n\nK{i}, SETK{i} = _make_k{i}()"),
         body=["y = K{i}(y)", "out.append(K{i}.__closure__[0].cell_contents)"],
         mutations=["SETK{i}(3.0)", "SETK{i}(-0.0)", "SETK{i}(2)", "SETK{i}(True)",
                    "K{i}.__closure__[0].cell_contents = 0.5", "K{i} = lambda t: t + 1", "K{i} = _make_k{i}()[0]"])


def cells(gen: "Gen") -> None:
    """Closure cells shared across inlined frames: existing closures and methods over one cell, cells of the
    target written by its closures, closures escaping into a global and called on later calls, graph breaks
    between a write and a read; the cells changed from outside between calls."""
    i = gen.name("")
    _add(gen, "cells", i, setup=_CELLS_SETUP, body=[
        "PUT{i}(y.sum())\ny = y + GET{i}()", "BUMP{i}()\ny = y * COUNT{i}()", "y = y + GET{i}()",
        "ACC{i}.add(y.mean())\ny = y + ACC{i}.read()", "out.append(COUNT{i}())", "PUT{i}(GET{i}() * 2)",
        "ACC{i}.add(1.0)\nout.append(GET{i}())", "y = y * GET{i}.__closure__[0].cell_contents",
        "GET{i}.__closure__[0].cell_contents = y.mean()\ny = y + ACC{i}.read()",
        "PUT{i}(y.sum())\nprint('cells', {i})\ny = y + GET{i}()",
        "c{i} = 0\ndef inc{i}():\n    nonlocal c{i}\n    c{i} += 1\ndef rd{i}():\n    return c{i}\n"
        "inc{i}()\ny = y + rd{i}()\ninc{i}()\nout.append(rd{i}())",
        "k{i} = y.sum()\ndef kget{i}():\n    return k{i}\nKEPT{i}['get'] = kget{i}\nk{i} = k{i} + 1",
        "if 'get' in KEPT{i}:\n    y = y + KEPT{i}['get']()",
        "p{i}, g{i} = MAKE_PAIR{i}(y.sum())\np{i}(y.mean())\nKEPT{i}['pair'] = (p{i}, g{i})\ny = y + g{i}()",
        "if 'pair' in KEPT{i}:\n    KEPT{i}['pair'][0](y.sum())\n    y = y + KEPT{i}['pair'][1]()",
        "inc{i} = COUNTER{i}()\ninc{i}()\nKEPT{i}['inc'] = inc{i}\ny = y * inc{i}()",
        "if 'inc' in KEPT{i}:\n    y = y + KEPT{i}['inc']()",
        "w{i} = 1\ndef wrd{i}():\n    return w{i}\nKEPT{i}['wrd'] = wrd{i}\nprint('brk', {i})\nw{i} = w{i} + 2\n"
        "y = y * wrd{i}()",
        "d{i} = y\ndef dget{i}():\n    return d{i}\ny = dget{i}() + 1\ndel d{i}",
        "def bset{i}():\n    nonlocal b\n    b = b + 1\nbset{i}()\ny = y + b",
        "def sget{i}():\n    return s\nout.append(sget{i}())",
        "v{i} = y.sum()\nfs{i} = [lambda: v{i} for _ in range(2)]\nv{i} = v{i} * 2\ny = y + sum(fn() for fn in fs{i})",
        "q{i} = 2\ng{i} = lambda t, q=q{i}: t * q + q{i}\nq{i} = 3\ny = g{i}(y)",
        "n{i} = 0\ndef a{i}():\n    def inner():\n        nonlocal n{i}\n        n{i} += 1\n        return n{i}\n"
        "    return inner()\na{i}()\ny = y + a{i}()",
        "def rec{i}(k, t):\n    return t if k == 0 else rec{i}(k - 1, t + 1)\ny = rec{i}(2, y)",
        "l{i} = []\ndef ladd{i}(t):\n    l{i}.append(t)\nladd{i}(y.sum())\nladd{i}(1)\nout.append(len(l{i}))",
        "y = SUB{i}.val(y)",
    ], mutations=[
        "PUT{i}({T1})", "PUT{i}(2.0)", "PUT{i}(3)", "PUT{i}(-0.0)", "BUMP{i}()", "ACC{i}.add(1.0)",
        "GET{i}.__closure__[0].cell_contents = {T1}", "KEPT{i}.clear()", "KEPT{i}.pop('get', None)",
        "if 'pair' in KEPT{i}:\n    KEPT{i}['pair'][0](5.0)", "if 'inc' in KEPT{i}:\n    KEPT{i}['inc']()",
        "PUT{i}, GET{i}, BUMP{i}, COUNT{i}, ACC{i} = _cells{i}()", "CellBase{i}.val = lambda self, t: t * 3",
    ])


_CELLS_SETUP = """def _cells{i}():
    v = {T1}
    n = 0

    def put(t):
        nonlocal v
        v = t

    def get():
        return v

    def bump():
        nonlocal n
        n += 1
        return n

    def count():
        return n

    class Acc:
        def add(self, t):
            nonlocal v
            v = v + t

        def read(self):
            return v

    return put, get, bump, count, Acc()


PUT{i}, GET{i}, BUMP{i}, COUNT{i}, ACC{i} = _cells{i}()
KEPT{i} = {{}}


def MAKE_PAIR{i}(start):
    c = start

    def put(t):
        nonlocal c
        c = t

    def get():
        return c

    return put, get


def COUNTER{i}():
    c = 0

    def inc():
        nonlocal c
        c += 1
        return c

    return inc


class CellBase{i}:
    def val(self, t):
        return t + 1


class CellSub{i}(CellBase{i}):
    def val(self, t):
        return super().val(t) * 2


SUB{i} = CellSub{i}()"""


def descriptors(gen: "Gen") -> None:
    """Attribute lookup through descriptors: properties (getter, setter), data and non-data descriptors and
    instance dicts shadowing them, classmethods, staticmethods, cached_property, __getattr__, __slots__;
    the descriptors, the classes and the instances changed between calls."""
    i = gen.name("")
    _add(gen, "descriptors", i, setup=_DESCRIPTORS_SETUP, body=[
        "y = y * DO{i}.w", "DO{i}.w = y.sum()\ny = y + DO{i}.w", "y = y + DO{i}.ro", "y = y * DO{i}.d",
        "DO{i}.d = 2.0\ny = y + DO{i}.d", "y = y + DO{i}.nd", "y = DO{i}.cm(y)", "y = DObj{i}.sm(y)",
        "y = DO{i}.sm(y)", "y = y + DO{i}.cached", "y = y + DO{i}.dyn", "out.append(hasattr(DO{i}, 'missing'))",
        "out.append(getattr(DO{i}, 'dyn2', None))", "y = y * DS{i}.a", "out.append(hasattr(DS{i}, 'b'))",
        "DS{i}.b = y.sum()\ny = y + DS{i}.b", "out.append(type(DObj{i}.__dict__['d']).__name__)",
        "out.append(isinstance(DObj{i}.nd, NonData{i}))", "o{i} = DObj{i}()\no{i}.w = 3.0\ny = y + o{i}.w + o{i}.d",
        "out.append(DO{i}.kind)", "y = y + len(DObj{i}.kind)",
    ], mutations=[
        "DO{i}.w = 5.0", "DO{i}.__dict__['nd'] = 4.0", "DO{i}.__dict__.pop('nd', None)", "DO{i}.__dict__['d'] = 9.0",
        "DObj{i}.d = Desc{i}(-1.0, '_d')", "DObj{i}.__dict__['d'].scale = 4.0",
        "DBase{i}.w = property(lambda self: 11.0)",
        "DObj{i}.nd = 6.0", "DO{i}.__dict__.pop('cached', None)", "DO{i}._w = -0.5", "DObj{i}.kind = 'derived'",
        "DObj{i}.sm = staticmethod(lambda t: t * 3)", "DObj{i}.cm = classmethod(lambda cls, t: t + 1)",
        "DO{i} = DObj{i}()", "DS{i}.a = 2.5", "DObj{i}.ro = 3.0", "DO{i}.dyn = 1.5",
        "DObj{i}.__getattr__ = lambda self, name: 8.0",
    ])


_DESCRIPTORS_SETUP = """class Desc{i}:
    def __init__(self, scale, name):
        self.scale = scale
        self.name = name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return getattr(obj, self.name, 1.0) * self.scale

    def __set__(self, obj, value):
        setattr(obj, self.name, value)


class NonData{i}:
    def __get__(self, obj, objtype=None):
        return self if obj is None else 2.0


class DBase{i}:
    kind = 'base'

    def __init__(self):
        self._w = 1.0

    @property
    def w(self):
        return self._w * 2

    @w.setter
    def w(self, value):
        self._w = value

    @property
    def ro(self):
        return self._w + 1


class DObj{i}(DBase{i}):
    d = Desc{i}(3.0, '_d')
    nd = NonData{i}()

    @classmethod
    def cm(cls, t):
        return t * len(cls.kind)

    @staticmethod
    def sm(t):
        return t - 1

    @functools.cached_property
    def cached(self):
        return self._w * 5

    def __getattr__(self, name):
        if name == 'dyn':
            return 7.0
        raise AttributeError(name)


class DSlots{i}:
    __slots__ = ('a', 'b')

    def __init__(self):
        self.a = 1.0


DO{i} = DObj{i}()
DS{i} = DSlots{i}()"""


def modules(gen: "Gen") -> None:
    i = gen.name("")
    kind = gen.rng.choice(("mod", "seq", "linear"))
    if kind == "mod":
        _add(gen, "modules", i, setup=_MOD_CLASS, body=[
            "y = MOD{i}(y)", "out.append(MOD{i}.w.requires_grad)", "for p in MOD{i}.parameters():\n    y = y + p.sum()",
            "y = MOD{i}.helper(y)", "for name, bf in MOD{i}.named_buffers():\n    y = y + bf",
            "y = y * len(list(MOD{i}.children()))", "if MOD{i}.training:\n    y = y + 1", "out.append(MOD{i}.scale)",
            "MOD{i}.calls = getattr(MOD{i}, 'calls', 0) + 1"],
            mutations=["MOD{i}.w = torch.nn.Parameter({T1})", "MOD{i}.w = torch.nn.Parameter({T1d})", "MOD{i}.buf = None",
                       "MOD{i}.register_buffer('buf', {T1})", "MOD{i}.sub = torch.nn.Tanh()", "MOD{i}.sub = torch.nn.Identity()",
                       "MOD{i}.train()", "MOD{i}.eval()", "MOD{i}.scale = 3.0", "MOD{i}.requires_grad_(False)",
                       "MOD{i}.w.data.mul_(2)", "MOD{i}.forward = types.MethodType(lambda self, t: t - 1, MOD{i})",
                       "Mod{i}.forward = lambda self, t: t + self.w", "MOD{i} = Mod{i}()", "MOD{i}.to(torch.float64)",
                       "MOD{i}.helper = lambda t: t * 0", "Mod{i}.helper = lambda self, t: t * 5",
                       "MOD{i}.sub = torch.nn.Sequential(torch.nn.Tanh(), torch.nn.ReLU())", "MOD{i}.w.requires_grad_(False)",
                       "MOD{i}.load_state_dict({{'w': {T1}, 'buf': {T1}}})"])
    elif kind == "seq":
        _add(gen, "modules", i,
             setup="SEQ{i} = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Identity())\nML{i} = torch.nn.ModuleList([torch.nn.ReLU()])",
             body=["y = SEQ{i}(y)", "for m in SEQ{i}:\n    y = m(y)", "y = y * len(SEQ{i})", "y = SEQ{i}[0](y)",
                   "for m in ML{i}:\n    y = m(y)", "y = y + len(ML{i})"],
             mutations=["SEQ{i}.append(torch.nn.Tanh())", "SEQ{i}[0] = torch.nn.Sigmoid()", "del SEQ{i}[0]",
                        "ML{i}.append(torch.nn.Tanh())", "ML{i}[0] = torch.nn.Identity()", "ML{i}.extend([torch.nn.Softsign()])"])
    else:
        _add(gen, "modules", i, setup="LIN{i} = torch.nn.Linear({k}, {k})",
             body=["y = LIN{i}(y)", "out.append(LIN{i}.weight.requires_grad)", "y = y + LIN{i}.bias.sum()"],
             mutations=["LIN{i}.weight = torch.nn.Parameter({TK})", "LIN{i}.bias = None", "LIN{i}.weight.data.mul_(2)",
                        "LIN{i}.requires_grad_(False)", "with torch.no_grad():\n    LIN{i}.bias.add_(1)",
                        "LIN{i}.load_state_dict(torch.nn.Linear({k}, {k}).state_dict())", "LIN{i}.double()"])


_MOD_CLASS = '''class Mod{i}(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter({T1})
        self.register_buffer("buf", {T1})
        self.sub = torch.nn.ReLU()
        self.scale = 2.0

    def helper(self, t):
        return t + self.scale

    def forward(self, t):
        t = t * self.w
        if self.buf is not None:
            t = t + self.buf
        t = self.sub(t)
        if self.training:
            t = t * self.scale
        return self.helper(t)


MOD{i} = Mod{i}()'''


def module_target(gen: "Gen") -> None:
    _add(gen, "module_target", "", body=[
        "y = y * self.w", "y = y + self.buf", "y = self.sub(y)", "if self.flag:\n    y = y + 1",
        "if self.training:\n    y = y * 0.5", "y = self.helper(y)", "out.append(self.w.requires_grad)",
        "self.count = getattr(self, 'count', 0) + 1"],
        mutations=["PROG.w = torch.nn.Parameter({T1})", "PROG.buf = None", "PROG.register_buffer('buf', {T1d})",
                   "PROG.sub = torch.nn.ReLU()", "PROG.flag = False", "PROG.flag = True", "PROG.train()", "PROG.eval()",
                   "PROG.requires_grad_(False)", "PROG.helper = lambda t: t - 1", "Prog.helper = lambda self, t: t * 3",
                   "PROG.w.data.mul_(2)", "PROG.forward = types.MethodType(lambda self, a, b, s, lst: a * 2, PROG)"])


def objects(gen: "Gen") -> None:
    i = gen.name("")
    _add(gen, "objects", i, setup=_OBJ_CLASS, body=[
        "y = O{i}.m(y)", "y = y * O{i}.p", "y = y + O{i}.k", "if hasattr(O{i}, 'extra'):\n    y = y + O{i}.extra",
        "y = y + getattr(O{i}, 'extra', 0)", "y = y * len(O{i}.items)", "O{i}.last = y.dim()", "O{i}.items.append(1)",
        "y = H{i}(y)", "y = P{i}(y, 1)", "out.append(hasattr(P{i}, 'func'))", "out.append(O{i}.cached is O{i}.cached)"],
        mutations=["O{i}.scale = 3.0", "O{i}.scale = -0.0", "O{i}.extra = 1.5", "O{i}.__dict__.pop('extra', None)",
                   "Obj{i}.m = lambda self, t: t - self.scale", "O{i}.m = types.MethodType(lambda self, t: t * 0.5, O{i})",
                   "O{i}.m = lambda t: t + 3", "Obj{i}.k = 2.0", "O{i}.k = 5.0", "O{i}.items.append(3)", "O{i} = Obj{i}()",
                   "H{i}.__code__ = (lambda t: t * 3).__code__", "H{i} = lambda t: t - 2",
                   "P{i} = functools.partial(torch.mul)", "Obj{i}.p = property(lambda self: 7)"])


_OBJ_CLASS = '''class Obj{i}:
    k = 1.0

    def __init__(self):
        self.scale = 2.0
        self.items = [1, 2]

    def m(self, t):
        return t * self.scale + self.k

    @property
    def p(self):
        return self.scale * 2

    @functools.cached_property
    def cached(self):
        return [self.scale]


O{i} = Obj{i}()


def H{i}(t):
    return t + 1


P{i} = functools.partial(torch.add, alpha=2)'''


def containers(gen: "Gen") -> None:
    i = gen.name("")
    _add(gen, "containers", i,
         setup="GL{i} = [1.0, 2.0]\nGD{i} = {{'a': 1.0, 'b': 2}}\nGSET{i} = {{1, 2}}\nGV{i} = GD{i}.values()",
         body=["for v in GL{i}:\n    y = y + v", "y = y * len(GL{i})", "y = y + GD{i}.get('a', 0)",
               "if 'c' in GD{i}:\n    y = y - GD{i}['c']", "for key, v in GD{i}.items():\n    y = y + v",
               "y = y * len(GSET{i})", "if 3 in GSET{i}:\n    y = y + 3", "y = y + len(GV{i})", "y = y + sum(GV{i})",
               "GL{i}.append(1.0)", "GD{i}['w'] = y.dim()", "GSET{i}.add(7)", "out.append(GL{i})"],
         mutations=["GL{i}.append(3)", "GL{i}[0] = -0.0", "GL{i}.clear()", "GL{i} = [2, 2.0]", "GD{i}['c'] = 1",
                    "GD{i}.pop('a', None)", "GD{i}['a'] = True", "GSET{i}.add(3)", "GSET{i}.discard(1)",
                    "GSET{i} = frozenset({{1}})", "GD{i}['b'] = 2.0"])


def identity(gen: "Gen") -> None:
    i = gen.name("")
    _add(gen, "identity", i,
         setup="class Color{i}(enum.Enum):\n    R = 1\n    G = 2\n\n\nSENT{i} = object()\nCUR{i} = Color{i}.R",
         body=["if CUR{i} is Color{i}.R:\n    y = y + 1", "if CUR{i} == Color{i}.G:\n    y = y * 2", "y = y + CUR{i}.value",
               "if CUR{i} in [Color{i}.R]:\n    y = y - 1", "if CUR{i} is SENT{i}:\n    y = y * 0",
               "if s is Color{i}.R:\n    y = y + 1\nelif s == Color{i}.G:\n    y = y - 1",
               "if isinstance(s, Color{i}):\n    print('enum')\n    y = y * s.value", "if s is SENT{i}:\n    y = y + 5"],
         mutations=["CUR{i} = Color{i}.G", "CUR{i} = Color{i}.R", "CUR{i} = SENT{i}", "CUR{i} = None"])
    gen.arg_changers.append(lambda args: _set_s(args, gen.rng.choice([f"Color{i}.R", f"Color{i}.G", f"SENT{i}"])))


def ids(gen: "Gen") -> None:
    """id() and `is` on arguments, globals and values made in the frame, against ids the program keeps
    (in a slots object: the fuzzer's snapshot does not compare raw ids, which differ between the two runs)."""
    i = gen.name("")
    _add(gen, "ids", i, setup=_IDS_SETUP, body=[
        "if id(a) in IDS{i}.seen:\n    y = y + 1", "y = y + IDS{i}.by_id.get(id(a), 0)",
        "if id(a) == IDS{i}.n:\n    y = y * 2", "out.append(id(a) == id(b))", "out.append(a is b)",
        "out.append(a is GT{i})", "if b is GT{i}:\n    y = y - 1", "out.append(lst is GL{i})",
        "out.append(id(lst) in IDS{i}.seen)", "z = [a]\nout.append(z[0] is a)\nout.append(id(z[0]) == id(a))",
        "out.append(len({{id(a), id(b), id(y)}}))", "d = {{id(a): a}}\ny = y + d.get(id(b), y)",
        "i0 = id(a)\nprint('ids')\nout.append(i0 == id(a))\nout.append(i0 in IDS{i}.seen)",
        "t = (a, b)\nout.append(t[0] is a)\nout.append(t[1] is b)", "out.append(id(y) == IDS{i}.n)",
        "y = y + (1 if id(GT{i}) == IDS{i}.n else 0)", "out.append(id(s) == id(s))",
        "out.append(IDS{i}.by_id.get(id(lst), -1))", "out.append((a, lst))",
    ], mutations=[
        "IDS{i}.seen.add(id(GT{i}))", "IDS{i}.seen.clear()", "IDS{i}.n = id(GT{i})", "IDS{i}.n = 0",
        "IDS{i}.kept.append(GT{i})\nGT{i} = {T}", "IDS{i}.by_id[id(GT{i})] = 2.5", "IDS{i}.by_id.clear()",
        "IDS{i}.seen.add(id(GL{i}))", "IDS{i}.by_id[id(GL{i})] = 7", "IDS{i}.kept.append(GL{i})\nGL{i} = [1.0]",
    ])
    gen.arg_changers += [
        lambda args: _pass_global(args, gen.rng.choice((f"GT{i}", f"GT{i}.view(-1)"))).replace("globals", "ids"),
        lambda args: _set(args, "lst", gen.rng.choice((f"GL{i}", "[1.0]")), "ids: lst"),
    ]


_IDS_SETUP = '''class Ids{i}:
    __slots__ = ("seen", "by_id", "n", "kept")


GT{i} = {T}
GL{i} = [1.0, 2.0]
IDS{i} = Ids{i}()
IDS{i}.seen = {{id(GT{i})}}
IDS{i}.by_id = {{id(GT{i}): 1.5}}
IDS{i}.n = id(GT{i})
IDS{i}.kept = []'''


def torch_state(gen: "Gen") -> None:
    _add(gen, "torch_state", "", body=[
        "if torch.is_grad_enabled():\n    y = y * 2", "out.append(torch.are_deterministic_algorithms_enabled())",
        "y = y + torch.ones(1)", "y = y.to(torch.get_default_dtype())", "out.append(torch.is_autocast_enabled('cpu'))",
        "out.append(torch.autograd._profiler_enabled())", "with torch.no_grad():\n    y = y * 2",
        "with torch.enable_grad():\n    y = y + 1",
        "with torch.autocast('cpu'):\n    z = y.float() @ y.float().transpose(-1, -2) if y.dim() >= 2 else y\nout.append(z)",
        "with torch.set_grad_enabled(False):\n    y = y - 1",
        "prev = torch.is_grad_enabled()\ntorch.set_grad_enabled(False)\ny = y * 2\ntorch.set_grad_enabled(prev)",
        "y = y @ y.mT if y.dim() >= 2 else y", "out.append(torch.get_default_dtype())",
        "if torch.are_deterministic_algorithms_enabled():\n    y = y + 1"],
        states=["torch.set_grad_enabled(False)", "torch.set_grad_enabled(True)", "torch.set_default_dtype(torch.float64)",
                "torch.set_default_dtype(torch.float32)", "torch.use_deterministic_algorithms(True)",
                "torch.use_deterministic_algorithms(False)", "torch.set_autocast_enabled('cpu', True)",
                "torch.set_autocast_enabled('cpu', False)"])


def crash(gen: "Gen") -> None:
    """Shapes that once made generated code crash the interpreter: breaks in helpers of helpers (resume
    chains), deep inlining, `__getattr__`/`__getattribute__` delegating through try/except, try/except
    around a break inside loops (resume functions entered inside a try block, run eagerly)."""
    i = gen.name("")
    _add(gen, "crash", i, setup=_CRASH_SETUP, body=[
        "y = top{i}(y, 2)", "y = chain{i}_4(y)", "y = y + W{i}.scale",
        "y, r = guarded{i}(y, P{i}, NAMES{i})\nout.append(r)",
        "y, r = guarded{i}(y, W{i}, ['scale', 'bias', 'nope'])\nout.append(r)",
        "if hasattr(W{i}, 'scale'):\n    y = y * W{i}.scale", "y = y + S{i}.hidden", "y = y + P{i}.dyn_x",
        "for n in NAMES{i}:\n    try:\n        y = y + getattr(P{i}, n)\n    except AttributeError:\n        out.append(n)",
        "for n in NAMES{i}:\n    try:\n        P{i}.missing\n    except AttributeError:\n        out.append(n)",
        "w = 0\nwhile w < 3:\n    try:\n        print('w', w)\n        y = y + [1, 2][w]\n    except IndexError:\n"
        "        y = y - 1\n    w += 1",
        "y = nested_try{i}(y)", "y = raising{i}(y, 'z')",
        "it = iter([1, 2])\nfor _ in range(3):\n    try:\n        y = y + next(it)\n        print('n')\n"
        "    except StopIteration:\n        y = y * 2",
        "with torch.no_grad():\n    for n in NAMES{i}:\n        try:\n            print(n)\n"
        "            y = y + getattr(P{i}, n)\n        except AttributeError:\n            pass",
        "try:\n    y = mid{i}(y)\nexcept AttributeError:\n    y = y - 1\nelse:\n    y = y + 1\nfinally:\n    out.append(1)",
        "for j in range(2):\n    for n in ('a', 'zz'):\n        try:\n            y = y + getattr(P{i}, n)\n"
        "        except AttributeError:\n            print('miss', j)",
        "for n in NAMES{i}:\n    try:\n        with torch.enable_grad():\n            print(n)\n"
        "            y = y + getattr(P{i}, n)\n    except AttributeError:\n        y = y * 2\n    finally:\n"
        "        out.append(n)"],
        mutations=["P{i}.b = 2.0", "P{i}.__dict__.pop('b', None)", "NAMES{i}.append('b')", "NAMES{i}.reverse()",
                   "W{i}.base.scale = 3.0", "W{i}.bias = -1.0", "Base{i}.nope = 1.0", "S{i}.v = 1.5",
                   "Plain{i}.a = -0.5"])


_CRASH_SETUP = '''class Base{i}(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 2.0


class Wrap{i}(torch.nn.Module):
    def __init__(self, base):
        super().__init__()
        self.base = base
        self.bias = 1.0

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "base":
                raise
            return getattr(self.base, name)


class Plain{i}:
    a = 1.0

    def __getattr__(self, name):
        if name.startswith("dyn"):
            print("getattr", name)
            return 0.5
        raise AttributeError(name)


class Spy{i}:
    def __init__(self):
        self.v = 3.0

    def __getattribute__(self, name):
        if name == "hidden":
            return object.__getattribute__(self, "v") * 2
        return object.__getattribute__(self, name)


W{i} = Wrap{i}(Base{i}())
P{i} = Plain{i}()
S{i} = Spy{i}()
NAMES{i} = ["a", "b", "dyn_c"]


def leaf{i}(t):
    print("leaf", tuple(t.shape))
    return t + 1


def mid{i}(t):
    t = leaf{i}(t) * 2
    return leaf{i}(t)


def top{i}(t, n):
    for _ in range(n):
        t = mid{i}(t)
    return t


def chain{i}_1(t):
    print("deep")
    return t * 2


def chain{i}_2(t):
    return chain{i}_1(t) + 1


def chain{i}_3(t):
    for _ in range(2):
        t = chain{i}_2(t) - 1
    return t


def chain{i}_4(t):
    try:
        return chain{i}_3(t)
    except AttributeError:
        return t


def guarded{i}(t, o, names):
    got = []
    for n in names:
        try:
            v = getattr(o, n)
        except AttributeError:
            got.append(n)
        else:
            got.append(v)
            t = t + 1
    return t, got


def nested_try{i}(t):
    try:
        try:
            print("inner")
            t = t + 1
        finally:
            t = t * 2
    except KeyError:
        t = t - 1
    return t


def raising{i}(t, k):
    d = {{"x": 1}}
    for key in ("x", k):
        try:
            t = t + d[key]
            print("got", key)
        except KeyError:
            t = t * 0.5
    return t'''


# ------------------------------------------------------------------------------------------------
# arguments changed between calls
# ------------------------------------------------------------------------------------------------
def arg_types(gen: "Gen") -> None:
    _add(gen, "arg_types", "", body=[
        "if s is None:\n    y = y + 1\nelif isinstance(s, tuple):\n    y = y * len(s) + s[0]\n"
        "elif isinstance(s, torch.Tensor):\n    y = y + s.sum()\nelse:\n    y = y * s",
        "y = y + (s if isinstance(s, (int, float)) else 0)", "if s:\n    y = y + 1",
        "if type(s) is float:\n    y = y * math.copysign(1.0, s)", "out.append(s)", "if s == 2:\n    y = y * 2",
        "if s is True:\n    y = y - 1", "y = y * torch.tensor(s)", "y = y + torch.full((), s) if isinstance(s, (int, float)) else y",
        "out.append(repr(s) if isinstance(s, (int, float, tuple, str, type(None))) else type(s).__name__)", "if isinstance(s, bool):\n    y = y + 10", "y = y * (s[0] if isinstance(s, tuple) else 1)",
        "for v in lst:\n    y = y + v", "y = y * len(lst)", "if lst:\n    y = y + lst[0]", "out.append(lst)",
        "lst.append(y.dim())"])
    gen.arg_changers += [
        lambda args: _set_s(args, gen.rng.choice([v for v in S_VALUES if not gen.excluded(f"arg_types: s = {v}")])),
        lambda args: _set(args, "lst", gen.rng.choice(LIST_VALUES), "arg_types: lst"),
        lambda args: _set(args, "s_keyword", not args.s_keyword, "arg_types: s as keyword"),
    ]


def _set_s(args: "Args", value: str) -> str:
    return _set(args, "s", value, f"arg_types: s = {value}")


def _set(args: "Args", attr: str, value, tag: str) -> str:
    setattr(args, attr, value)
    return tag


def arg_tensors(gen: "Gen") -> None:
    rng = gen.rng

    def change(args: "Args") -> str:
        which = "b" if args.b is not None and rng.random() < 0.3 else "a"
        spec = getattr(args, which)
        spec.pop("expr", None)
        aspect = rng.choice([x for x in ("dtype", "layout", "offset", "rg", "shape", "alias")
                             if not gen.excluded(f"arg_tensors: {x}")] or ["rg"])
        if aspect == "alias":
            args.b = None if args.b is not None else dict(args.a, seed=gen.seed())
            return "arg_tensors: alias b is a" if args.b is None else "arg_tensors: b separate"
        spec[aspect] = {
            "dtype": lambda: rng.choice(("float32", "float64", "int64", "bool", "bfloat16")),
            "layout": lambda: rng.choice(("c", "t", "s") + (("cl",) if len(spec["shape"]) == 4 else ())),
            "offset": lambda: rng.choice((0, 1, 3)),
            "rg": lambda: not spec.get("rg", False),
            "shape": lambda: _new_shape(rng, spec["shape"]),
        }[aspect]()
        return f"arg_tensors: {which}.{aspect} = {spec[aspect]!r}"

    gen.arg_changers.append(change)


def _new_shape(rng, shape: Sequence[int]) -> Tuple[int, ...]:
    if shape and rng.random() < 0.7:
        return tuple(rng.randint(1, 5) if rng.random() < 0.5 else d for d in shape)
    return tuple(rng.randint(1, 4) for _ in range(rng.choice((0, 1, 2, 3))))


def backward(gen: "Gen") -> None:
    gen.arg_changers.append(lambda args: _set_rg(args))


def _set_rg(args: "Args") -> str:
    args.a["rg"] = True
    return "backward: a.rg = True"


def gen_reads(gen: "Gen") -> None:
    """Generators, comprehensions and lazy iterators that read a list, dict or deque the frame (or the
    consumer) changes while they run: CPython's order of reads and writes decides what they see."""
    i = gen.name("")
    _add(gen, "gen_reads", i,
         setup="import collections\nimport itertools\nGL{i} = [1, 2, 3]\nGD{i} = {{'a': 1, 'b': 2}}",
         body=["L{i} = list(GL{i})\nL{i}.extend(v * 2 for v in L{i} if len(L{i}) < 9)\nout.append(L{i})",
               "L{i} = list(GL{i})\nL{i} += (v + 1 for v in L{i} if len(L{i}) < 7)\ny = y + len(L{i})",
               "L{i} = list(GL{i})\nL{i}.extend(map(lambda v: v + len(L{i}), itertools.islice(L{i}, 4)))\n"
               "out.append(L{i})",
               ("if len(GL{i}) < 12:\n    GL{i}.extend(v - 1 for v in GL{i} if len(GL{i}) < 12)", ("GL{i}",)),
               "g{i} = (v * 2 for v in GL{i})\nGL{i}.append(len(GL{i}))\nout.append(next(g{i}, None))\n"
               "GL{i}.pop()\nout.append(list(g{i}))",
               "def gen{i}(xs):\n    for v in xs:\n        print('gen', v)\n        yield v\n    return len(xs)\n"
               "for v in gen{i}(GL{i}):\n    print('use', v)\n    y = y + v",
               "def outer{i}(xs):\n    n = yield from (v + 1 for v in xs)\n    yield n\nout.append(list(outer{i}(GL{i})))",
               "L{i} = list(GL{i})\nfor v in (w + 1 for w in L{i} if len(L{i}) < 8):\n    L{i}.append(v)\n"
               "y = y * len(L{i})",
               "L{i} = list(GL{i})\nfor k, v in enumerate(L{i}):\n    if k < 3:\n        L{i}.append(v * k)\n"
               "out.append(L{i})",
               "L{i} = list(GL{i})\nout.append([L{i}.append(v) or len(L{i}) for v in L{i} if len(L{i}) < 7])",
               "L{i} = list(GL{i})\nL{i}[:] = (v * 3 for v in L{i} if len(L{i}) < 10)\nout.append(L{i})",
               "L{i} = list(GL{i})\nout.append(sorted(v for v in L{i}))\nout.append(tuple(zip(L{i}, L{i}[1:])))",
               "L{i} = list(GL{i})\nL{i}.extend(L{i})\nL{i} += L{i}\ny = y + len(L{i})",
               "Q{i} = collections.deque(GL{i})\nQ{i}.extend(Q{i})\nQ{i}.extendleft(v for v in [7, 8])\n"
               "out.append(list(Q{i}))",
               "Q{i} = collections.deque(GL{i})\ntry:\n    Q{i}.extendleft(v * 2 for v in Q{i})\n"
               "except RuntimeError as e:\n    out.append(str(e))\nout.append(len(Q{i}))",
               "D{i} = dict(GD{i})\ntry:\n    D{i}.update((k + 'x', v) for k, v in D{i}.items())\n"
               "except RuntimeError as e:\n    out.append(str(e))\nout.append(D{i})",
               "D{i} = dict(GD{i})\nfor k in list(D{i}):\n    D{i}[k + '2'] = D{i}[k]\nout.append(sorted(D{i}))",
               "it{i} = iter(GL{i})\nout.append(next(it{i}, None))\nout.append(list(map(abs, it{i})))",
               "r{i} = reversed(GL{i})\nout.append(next(r{i}, None))\nout.append(list(filter(None, r{i})))",
               "y = y + sum(v for v in GL{i} if v > 1)",
               "y = y + max((v for v in GL{i}), default=0)"],
         mutations=["GL{i}.append(4)", "GL{i}.clear()", "GL{i}[:] = [5, 6]", "GL{i} = [0]", "GL{i} = [1, 2, 3]",
                    "GD{i}['c'] = 3", "GD{i}.pop('a', None)", "GD{i} = {{'z': 0}}"])


FAMILIES: Dict[str, Family] = {
    "tensor_ops": tensor_ops, "control": control, "breaks": breaks, "containers_ret": containers_ret,
    "inplace": inplace, "rng": rng, "globals": globals_, "closures": closures, "modules": modules,
    "module_target": module_target, "objects": objects, "containers": containers, "identity": identity, "ids": ids,
    "torch_state": torch_state, "crash": crash, "arg_types": arg_types, "arg_tensors": arg_tensors,
    "backward": backward, "cells": cells, "descriptors": descriptors, "gen_reads": gen_reads,
}
