"""The compiled module wrapper is the module to the user (issue 30): bool, len, iteration, reversed,
`in`, indexing and slicing, item assignment, operators, context managers, dir(), methods the
module's class overrides, each as on the original module, before and after changes made through
the wrapper, on copies and on a wrapper of a wrapper."""
import copy
import io
import pickle

import pytest
import torch
from torch import nn

from translator_harness import REFERENCE, optimize, fresh_dynamo  # noqa: F401

TORCH_DIFFERS = "torch's OptimizedModule defines only __len__ and __dir__ of the original's protocols"


def compiled(module):
    return optimize("eager")(module)


class Bag(nn.Module):
    """A user container module: its own protocol methods and a property."""

    def __init__(self, *mods):
        super().__init__()
        self.mods = nn.ModuleList(mods)
        self.opened = 0

    def __len__(self):
        return len(self.mods)

    def __getitem__(self, i):
        return self.mods[i]

    def __contains__(self, m):
        return any(m is x for x in self.mods)

    def __bool__(self):
        return True

    def __enter__(self):
        self.opened += 1
        return self

    def __exit__(self, *exc):
        self.opened -= 1
        return False

    @property
    def size(self):
        return len(self.mods)

    def forward(self, x):
        for m in self.mods:
            x = m(x)
        return x


def modules():
    return {
        "empty ModuleList": nn.ModuleList(),
        "empty Sequential": nn.Sequential(),
        "empty ModuleDict": nn.ModuleDict(),
        "ModuleList": nn.ModuleList([nn.Linear(2, 2), nn.ReLU()]),
        "Sequential": nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Tanh()),
        "ModuleDict": nn.ModuleDict({"a": nn.ReLU(), "b": nn.Tanh()}),
        "ParameterList": nn.ParameterList([nn.Parameter(torch.ones(1)), nn.Parameter(torch.zeros(2))]),
        "ParameterDict": nn.ParameterDict({"w": nn.Parameter(torch.ones(1))}),
        "Linear": nn.Linear(2, 2),
        "Bag": Bag(nn.ReLU(), nn.Tanh()),
        "empty Bag": Bag(),
    }


def outcome(fn):
    """What `fn()` gives, or the type of what it raises."""
    try:
        return ("value", fn())
    except Exception as e:  # noqa: BLE001 - compared with the original's
        return ("raises", type(e))


def protocol_outcomes(m):
    return {
        "bool": outcome(lambda: bool(m)),
        "len": outcome(lambda: len(m)),
        "iter": outcome(lambda: list(m)),
        "reversed": outcome(lambda: list(reversed(m))),
        "in": outcome(lambda: [probe in m for probe in (*_members(m), nn.ReLU(), "a")]),
        "first": outcome(lambda: m[0]),
        "last": outcome(lambda: m[-1]),
        "key": outcome(lambda: m["a"]),
        "slice": outcome(lambda: (type(m[:1]), list(m[:1]))),
        "hasattr": [hasattr(m, n) for n in ("append", "extend", "keys", "size", "in_features", "weight", "nope")],
    }


def _members(m):
    try:
        return list(m)[:1]
    except TypeError:
        return []


@pytest.mark.skipif(REFERENCE, reason=f"reference (torch) differs: {TORCH_DIFFERS}")
@pytest.mark.parametrize("name", list(modules()))
def test_protocols_are_the_originals(name):
    original = modules()[name]
    wrapper = compiled(original)
    assert protocol_outcomes(wrapper) == protocol_outcomes(original)


@pytest.mark.parametrize("name", ["empty ModuleList", "empty Sequential", "ModuleList", "Sequential", "Bag"])
def test_bool_and_len_are_the_originals(name):
    original = modules()[name]
    wrapper = compiled(original)
    assert bool(wrapper) is bool(original)
    assert len(wrapper) == len(original)


@pytest.mark.skipif(REFERENCE, reason="reference (torch) differs: its __len__ raises for a module without one, so "
                                       "bool() of the wrapper raises")
def test_a_module_without_len_has_no_len_and_is_true():
    wrapper = compiled(nn.Linear(2, 2))
    assert bool(wrapper) is True
    with pytest.raises(TypeError):
        len(wrapper)


@pytest.mark.skipif(REFERENCE, reason=f"reference (torch) differs: {TORCH_DIFFERS}")
def test_changes_through_the_wrapper_are_the_originals_and_the_call_follows():
    original = nn.ModuleList([nn.Linear(2, 2)])
    wrapper = compiled(original)
    same = wrapper
    wrapper += [nn.ReLU()]
    assert wrapper is same, "`+=` rebinds the name to another object"
    wrapper.append(nn.Tanh())
    wrapper.insert(0, nn.Identity())
    wrapper[1] = nn.Linear(2, 2)
    del wrapper[0]
    assert len(original) == len(wrapper) == 3
    assert list(wrapper) == list(original) and wrapper[-1] is original[-1]
    assert [type(m) for m in wrapper] == [nn.Linear, nn.ReLU, nn.Tanh]

    seq = nn.Sequential(nn.Linear(2, 2))
    compiled_seq = compiled(seq)
    x = torch.randn(3, 2)
    torch.testing.assert_close(compiled_seq(x), seq(x))
    compiled_seq.append(nn.ReLU())
    assert len(seq) == 2
    torch.testing.assert_close(compiled_seq(x), seq(x))
    assert (compiled_seq(x) >= 0).all()


@pytest.mark.skipif(REFERENCE, reason=f"reference (torch) differs: {TORCH_DIFFERS}")
def test_operators_and_context_managers_are_the_originals():
    a, b = nn.Sequential(nn.ReLU()), nn.Sequential(nn.Tanh())
    wa = compiled(a)
    assert list(wa + b) == list(a + b) and type(wa + b) is nn.Sequential
    assert len(wa * 2) == len(a * 2)
    bag = Bag(nn.ReLU())
    wbag = compiled(bag)
    with wbag as entered:
        assert bag.opened == 1 and wbag.opened == 1
        assert entered is wbag, "__enter__ returning the module gives the wrapper"
    assert bag.opened == 0
    assert wbag.size == 1 and wbag[0] is bag[0] and bag[0] in wbag


class Tracked(nn.Module):
    """Overrides nn.Module methods: through the wrapper, these run too."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.calls = []

    def train(self, mode=True):
        self.calls.append(("train", mode))
        return super().train(mode)

    def extra_repr(self):
        return "tracked"

    def __eq__(self, other):
        return isinstance(other, Tracked)

    def forward(self, x):
        return self.fc(x)


class OwnChildren(nn.Module):
    """Overrides the tree walk (hides `fc` from it): through the wrapper, `to()` and `train()` walk as
    on the original."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(2))
        self.fc = nn.Linear(2, 2)

    def named_children(self):
        return iter([])

    def forward(self, x):
        return self.w * 2


def test_to_and_train_through_the_wrapper_walk_the_module_as_on_the_original():
    direct, through = OwnChildren(), OwnChildren()
    wrapper = compiled(through)
    direct.to(torch.float64).eval()
    wrapper.to(torch.float64).eval()
    assert [p.dtype for p in through.parameters()] == [p.dtype for p in direct.parameters()]
    assert (through.training, through.fc.training) == (direct.training, direct.fc.training)


@pytest.mark.skipif(REFERENCE, reason=f"reference (torch) differs: {TORCH_DIFFERS}")
def test_methods_the_class_overrides_are_the_originals():
    original = Tracked()
    wrapper = compiled(original)
    assert wrapper.eval() is wrapper and wrapper.train() is wrapper
    assert original.calls == [("train", False), ("train", True)]
    assert original.fc.training and wrapper.training is original.training
    assert wrapper == Tracked(), "the class's __eq__"
    assert len({wrapper, wrapper}) == 1, "the wrapper stays hashable (nn.Module's machinery keeps modules in sets)"
    torch.testing.assert_close(wrapper(torch.ones(2)), original(torch.ones(2)))


def test_dir_lists_submodules_and_attributes_attached_after_compiling():
    original = nn.Sequential(nn.Linear(2, 2))
    wrapper = compiled(original)
    wrapper.attached = 3
    names = dir(wrapper)
    assert set(dir(original)) <= set(names)
    assert "attached" in names and "attached" in dir(original)
    assert "append" in names and original.attached == 3
    bag = compiled(Bag(nn.ReLU()))
    assert {"mods", "size", "opened"} <= set(dir(bag))


@pytest.mark.skipif(REFERENCE, reason=f"reference (torch) differs: {TORCH_DIFFERS}")
def test_copies_pickles_and_wrappers_of_wrappers_keep_the_protocols():
    original = nn.ModuleList([nn.Linear(2, 2), nn.ReLU()])
    wrapper = compiled(original)
    for copied in (copy.deepcopy(wrapper), pickle.loads(pickle.dumps(wrapper))):
        assert len(copied) == 2 and copied._orig_mod is not original
        assert [type(m) for m in copied] == [nn.Linear, nn.ReLU]
    buffer = io.BytesIO()
    torch.save(wrapper, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert len(loaded) == 2 and not bool(compiled(nn.ModuleList()))
    twice = compiled(wrapper)
    assert len(twice) == 2 and list(twice) == list(original) and twice[1] is original[1]
    assert not bool(compiled(compiled(nn.Sequential())))


@pytest.mark.skipif(REFERENCE, reason=f"reference (torch) differs: {TORCH_DIFFERS}")
def test_a_wrapper_used_inside_a_compiled_function_is_the_original():
    seq = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    wrapper, empty = compiled(seq), compiled(nn.ModuleList())

    def use(x, m, e):
        for sub in m:
            x = sub(x)
        return x, len(m), bool(e), bool(m), len(e), m[0] in m, m(x)

    fn = optimize("eager")(use)
    for _ in range(3):
        x = torch.randn(2)
        got, want = fn(x, wrapper, empty), use(x, wrapper, empty)
        assert got[1:6] == want[1:6]
        torch.testing.assert_close(got[0], want[0])
        torch.testing.assert_close(got[6], want[6])


def test_repr_shows_the_wrapper_around_the_original():
    original = nn.Sequential(nn.Linear(2, 2))
    text = repr(compiled(original))
    assert text.startswith("OptimizedModule(") and "(_orig_mod): Sequential(" in text
