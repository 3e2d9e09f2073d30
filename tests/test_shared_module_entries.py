"""One compiled entry serves every instance of a module class (issue 33): a module is guarded by its
class and by each fact the trace reads of it (parameter and buffer properties, attribute values,
submodules, hooks, `training`), and its parameters and buffers are graph inputs read from the
instance on each call, so blocks compiled one by one, or looped over in one model, compile once per
architecture and mode and still give eager's results, state and gradients, each on its own
instance, whatever is changed on one of them.

MINIDYNAMO_TEST_REFERENCE=torch runs the same tests against torch.compile (backend "eager" only);
where torch differs it is said at the test."""
import contextlib
import copy
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from translator_harness import (  # noqa: F401
    REFERENCE,
    CompileCounter,
    assert_equal,
    fresh_dynamo,
    minidynamo_only,
    reference_only_skip,
)

N_BLOCKS = 32
D = 16


class MLPBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, 2 * D)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(2 * D, D)
        self.drop = nn.Dropout(0.0)
        self.scale = 1.0

    def forward(self, x):
        return x + self.scale * self.drop(self.fc2(self.act(self.fc1(self.norm(x)))))


class AttentionBlock(nn.Module):
    def __init__(self, heads=2):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.attn_drop = nn.Dropout(0.0)
        self.ln2 = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Linear(2 * D, D))
        self.heads = heads
        self.scale = 1.0

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = self.attn_drop((q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)).softmax(-1))
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.scale * self.mlp(self.ln2(x))


class ConvBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.act = nn.ReLU()
        self.scale = 1.0

    def forward(self, x):
        return x + self.scale * self.act(self.bn(self.conv(x)))


ARCHS = {
    "mlp": (MLPBlock, lambda: torch.randn(3, D)),
    "attention": (AttentionBlock, lambda: torch.randn(2, 5, D)),
    "conv_bn": (ConvBlock, lambda: torch.randn(2, 4, 6, 6)),
}


class CountingBackend:
    """A backend by name, counting the graphs it compiles (one object: its entries are shared)."""

    def __init__(self, name):
        from minidynamo.backends import lookup_backend

        self.backend = lookup_backend(name)
        self.frame_count = 0

    def __call__(self, gm, example_inputs):
        self.frame_count += 1
        return self.backend(gm, example_inputs)


@pytest.fixture(params=["eager", pytest.param("cpp", marks=reference_only_skip("the cpp backend is minidynamo's"))])
def backend(request):
    return CompileCounter() if request.param == "eager" else CountingBackend(request.param)


def compile_block(block, backend):
    if REFERENCE:
        return torch.compile(block, backend=backend)
    import minidynamo

    return minidynamo.compile(block, backend=backend)


def make_blocks(arch, mode, n=N_BLOCKS):
    torch.manual_seed(0)
    blocks = [ARCHS[arch][0]().train(mode == "train") for _ in range(n)]
    return blocks, copy.deepcopy(blocks)


def call_all(compiled, blocks, twins, x, where, backend, compiles=None):
    """Each compiled block against its eager twin: output, then state (a train-mode BatchNorm
    updates its running statistics, on its own instance). `compiles`: graphs expected after."""
    for i, (fn, twin) in enumerate(zip(compiled, twins)):
        assert_equal(fn(x), twin(x), f"{where}, block {i}: out")
    for i, (block, twin) in enumerate(zip(blocks, twins)):
        assert_equal(dict(block.state_dict()), dict(twin.state_dict()), f"{where}, block {i}: state")
    if compiles is not None:
        assert backend.frame_count == compiles, f"{where}: {backend.frame_count} graphs, expected {compiles}"


# ---------------------------------------------------------------------------------------------
# blocks compiled one by one
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("arch", list(ARCHS))
def test_blocks_compiled_one_by_one_share_one_entry(arch, mode, backend):
    blocks, twins = make_blocks(arch, mode)
    compiled = [compile_block(b, backend) for b in blocks]
    x = ARCHS[arch][1]()
    for round_ in range(3):  # the second and third rounds compile nothing
        call_all(compiled, blocks, twins, x, f"round {round_}", backend, compiles=1)


def _first_weight(block):
    return next(p for name, p in block.named_parameters() if name.endswith("weight") and p.dim() > 1)


def _in_place(block):
    with torch.no_grad():
        _first_weight(block).add_(1.0)


def _replace_parameter(block):
    owner_name = next(name for name, p in block.named_parameters() if p is _first_weight(block)).rpartition(".")[0]
    owner = block.get_submodule(owner_name)
    owner.weight = nn.Parameter(torch.randn_like(owner.weight), requires_grad=owner.weight.requires_grad)


def _hook_on_block(block):
    block.register_forward_hook(lambda module, args, out: out * 2)


def _hook_on_submodule(block):
    next(m for m in block.modules() if isinstance(m, (nn.Linear, nn.Conv2d))).register_forward_hook(
        lambda module, args, out: out - 1)


def _pre_hook_on_submodule(block):
    next(m for m in block.modules() if isinstance(m, (nn.LayerNorm, nn.BatchNorm2d))).register_forward_pre_hook(
        lambda module, args: (args[0] * 0.5,))


def _flip_training(block):
    block.train(not block.training)


def _python_attribute(block):
    block.scale = 2.0


def _swap_submodule_alike(block):
    name, old = next((n, m) for n, m in block.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d)))
    torch.manual_seed(3)
    new = copy.deepcopy(old)
    with torch.no_grad():
        for p in new.parameters():
            p.copy_(torch.randn_like(p))
    parent, _, attr = name.rpartition(".")
    setattr(block.get_submodule(parent) if parent else block, attr, new)


def _swap_submodule_other_class(block):
    name = next(n for n, m in block.named_modules() if isinstance(m, (nn.GELU, nn.ReLU)))
    parent, _, attr = name.rpartition(".")
    setattr(block.get_submodule(parent) if parent else block, attr, nn.Tanh())


# change -> graphs it adds to the one shared entry (None: the count is not the point)
CHANGES = {
    "param_in_place": (_in_place, 0),
    "param_replaced": (_replace_parameter, 0),
    "submodule_swapped_alike": (_swap_submodule_alike, 0),
    "hook_on_block": (_hook_on_block, 1),  # run by Module.__call__ around forward: the hook's own frame
    "hook_on_submodule": (_hook_on_submodule, 1),
    "pre_hook_on_submodule": (_pre_hook_on_submodule, 1),
    "training_flipped": (_flip_training, 1),
    "python_attribute": (_python_attribute, 1),
    "submodule_other_class": (_swap_submodule_other_class, 1),
}


def _skip_where_torch_differs(change):
    if REFERENCE and change in ("hook_on_submodule", "pre_hook_on_submodule"):
        pytest.skip("reference (torch) differs: it does not guard the hooks of inlined modules "
                    "(config.skip_nnmodule_hook_guards), so a hook added later is not run")


def _expected_graphs(change, before):
    added = CHANGES[change][1]
    return None if REFERENCE or added is None else before + added


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.parametrize("arch", list(ARCHS))
def test_a_change_to_one_block_is_seen_on_it_and_not_on_the_others(arch, change, mode):
    _skip_where_torch_differs(change)
    backend = CompileCounter()
    blocks, twins = make_blocks(arch, mode, n=6)
    compiled = [compile_block(b, backend) for b in blocks]
    x = ARCHS[arch][1]()
    call_all(compiled, blocks, twins, x, "before", backend, compiles=1)
    for target in (blocks[2], twins[2]):
        torch.manual_seed(1)
        CHANGES[change][0](target)
    expected = _expected_graphs(change, 1)
    for round_ in range(2):
        call_all(compiled, blocks, twins, x, f"after the change, round {round_}", backend, compiles=expected)


@pytest.mark.parametrize("change", ["param_replaced", "hook_on_submodule", "training_flipped", "python_attribute"])
def test_a_change_to_one_block_with_the_cpp_backend(change):
    if REFERENCE:
        pytest.skip("the cpp backend is minidynamo's")
    backend = CountingBackend("cpp")
    blocks, twins = make_blocks("mlp", "train", n=4)
    compiled = [compile_block(b, backend) for b in blocks]
    x = ARCHS["mlp"][1]()
    call_all(compiled, blocks, twins, x, "before", backend, compiles=1)
    for target in (blocks[1], twins[1]):
        torch.manual_seed(1)
        CHANGES[change][0](target)
    for round_ in range(2):
        call_all(compiled, blocks, twins, x, f"after the change, round {round_}", backend,
                 compiles=_expected_graphs(change, 1))


# ---------------------------------------------------------------------------------------------
# gradients
# ---------------------------------------------------------------------------------------------
def _backward_both(fn, twin, x, where, tolerance=None):
    """Backward through both; gradients compared (`tolerance`: for kernels that sum in another order)."""
    def same(actual, expected, what):
        if tolerance is None:
            assert_equal(actual, expected, what)
        else:
            torch.testing.assert_close(actual, expected, rtol=tolerance, atol=tolerance, msg=lambda m: f"{what}: {m}")

    xc, xe = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    fn(xc).square().sum().backward()
    twin(xe).square().sum().backward()
    same(xc.grad, xe.grad, f"{where}: input grad")
    for (name, p), (_, q) in zip(fn.named_parameters(), twin.named_parameters()):
        assert p.grad is not None, f"{where}: {name} has no grad"
        same(p.grad, q.grad, f"{where}: {name}.grad")


@pytest.mark.parametrize("arch", list(ARCHS))
def test_gradients_land_on_each_instance(arch, backend):
    blocks, twins = make_blocks(arch, "train", n=8)
    compiled = [compile_block(b, backend) for b in blocks]
    x = ARCHS[arch][1]()
    tolerance = 1e-4 if isinstance(backend, CountingBackend) else None  # the cpp backend's own kernels
    for round_ in range(2):  # grads accumulate on the second round, on each block's own parameters
        for i, (fn, twin) in enumerate(zip(compiled, twins)):
            _backward_both(fn, twin, x, f"round {round_}, block {i}", tolerance)
    assert backend.frame_count == 1


def test_parameters_tied_between_blocks(backend):
    """Block 1's fc1 weight is block 0's: both blocks' gradients land on the one tensor."""
    blocks, twins = make_blocks("mlp", "train", n=3)
    for group in (blocks, twins):
        group[1].fc1.weight = group[0].fc1.weight
    compiled = [compile_block(b, backend) for b in blocks]
    x = ARCHS["mlp"][1]()
    for i, (fn, twin) in enumerate(zip(compiled, twins)):
        _backward_both(fn, twin, x, f"block {i}")
    assert blocks[0].fc1.weight.grad is blocks[1].fc1.weight.grad
    assert backend.frame_count == 1


def test_parameters_tied_inside_one_block_and_not_in_another():
    """An entry traced where fc1 and fc2 share their weight relies on it: an untied block recompiles."""
    class Tied(nn.Module):
        def __init__(self, tie):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(D, D), nn.Linear(D, D)
            if tie:
                self.fc2.weight = self.fc1.weight

        def forward(self, x):
            return self.fc2(self.fc1(x).relu())

    backend = CompileCounter()
    torch.manual_seed(0)
    blocks = [Tied(tie) for tie in (True, False, True, False)]
    x = torch.randn(3, D)
    for block in blocks * 2:
        assert_equal(compile_block(block, backend)(x), block(x))
    assert backend.frame_count == 2


# ---------------------------------------------------------------------------------------------
# a whole model looping over identical blocks
# ---------------------------------------------------------------------------------------------
class Stack(nn.Module):
    def __init__(self, arch, n):
        super().__init__()
        self.blocks = nn.ModuleList([ARCHS[arch][0]() for _ in range(n)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


@pytest.mark.parametrize("change", ["param_replaced", "hook_on_submodule", "training_flipped", "python_attribute",
                                    "submodule_swapped_alike"])
@pytest.mark.parametrize("arch", list(ARCHS))
def test_whole_model_loop_over_identical_blocks(arch, change):
    _skip_where_torch_differs(change)
    backend = CompileCounter()
    torch.manual_seed(0)
    model = Stack(arch, 6).eval()
    twin = copy.deepcopy(model)
    compiled = compile_block(model, backend)
    x = ARCHS[arch][1]()
    for _ in range(2):
        assert_equal(compiled(x), twin(x))
    assert backend.frame_count == 1
    for target in (model.blocks[3], twin.blocks[3]):
        torch.manual_seed(1)
        CHANGES[change][0](target)
    for _ in range(2):
        assert_equal(compiled(x), twin(x))
        assert_equal(dict(model.state_dict()), dict(twin.state_dict()))
    if not REFERENCE:
        assert backend.frame_count == 1 + CHANGES[change][1]


def test_whole_model_gradients_and_batch_norm_statistics():
    backend = CompileCounter()
    torch.manual_seed(0)
    model = Stack("conv_bn", 5).train()
    twin = copy.deepcopy(model)
    compiled = compile_block(model, backend)
    x = ARCHS["conv_bn"][1]()
    for round_ in range(2):
        _backward_both(compiled, twin, x, f"round {round_}")
        assert_equal(dict(model.state_dict()), dict(twin.state_dict()), f"round {round_}: state")
    assert backend.frame_count == 1


# ---------------------------------------------------------------------------------------------
# many fresh modules, the cache size limit
# ---------------------------------------------------------------------------------------------
def _rss_mb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS"))


@minidynamo_only
def test_thirty_fresh_linears_share_one_entry(backend, capsys):
    from minidynamo import _C

    x = torch.randn(4, 32)
    before = _rss_mb()
    layers = [nn.Linear(32, 32) for _ in range(30)]
    for layer in layers:
        fn = compile_block(layer, backend)
        assert_equal(fn(x), layer(x))
        assert_equal(fn(x), layer(x))
    assert backend.frame_count == 1
    assert len(_C.get_cache_entries(nn.Linear.forward.__code__)) == 1
    with capsys.disabled():
        print(f"\n30 fresh nn.Linear, {type(backend).__name__}: RSS grew {_rss_mb() - before:.2f} MB")


def test_the_cache_size_limit_counts_graphs_not_instances(monkeypatch):
    if REFERENCE:  # torch's own patch: monkeypatch's undo deletes a torch config entry, limit and all
        import torch._dynamo.config as config

        limit = config.patch(recompile_limit=2)
    else:
        import minidynamo

        monkeypatch.setattr(minidynamo.config, "cache_size_limit", 2)
        limit = contextlib.nullcontext()
    backend = CompileCounter()
    blocks, twins = make_blocks("mlp", "eval", n=12)
    x = ARCHS["mlp"][1]()
    with limit, warnings.catch_warnings():
        warnings.simplefilter("error")  # no cache-size-limit warning
        call_all([compile_block(b, backend) for b in blocks], blocks, twins, x, "12 blocks", backend, compiles=1)


# ---------------------------------------------------------------------------------------------
# facts a module's identity used to stand for
# ---------------------------------------------------------------------------------------------
class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.n = 0

    def forward(self, x):
        return x


class StoreThenRead(nn.Module):
    def __init__(self, a, b):
        super().__init__()
        self.a, self.b = a, b

    def forward(self, x):
        self.a.n = self.a.n + 1
        return x * self.b.n


class CountModules(nn.Module):
    def __init__(self, a, b):
        super().__init__()
        self.a, self.b = a, b

    def forward(self, x):
        return x * len(list(self.modules())) + len(list(self.children()))


@reference_only_skip("torch 2.13 serves the second instance from the first one's entry: wrong answers")
@pytest.mark.parametrize("cls", [StoreThenRead, CountModules])
def test_submodules_distinct_when_compiled_and_the_same_later(cls):
    """An attribute set on one submodule and read from another, or modules counted once each:
    right where another instance holds one submodule under both names."""
    backend = CompileCounter()
    x = torch.ones(2)
    distinct = cls(Counter(), Counter())
    twin = copy.deepcopy(distinct)
    assert_equal(compile_block(distinct, backend)(x), twin(x))
    shared = Counter()
    aliased = cls(shared, shared)
    twin = copy.deepcopy(aliased)
    for _ in range(2):
        assert_equal(compile_block(aliased, backend)(x), twin(x))
    assert aliased.a.n == twin.a.n


class OwnLookup(nn.Linear):
    """A class finding attributes its own way: each instance keeps its identity guarded."""

    def __getattr__(self, name):
        return super().__getattr__(name)


@minidynamo_only
def test_a_class_with_its_own_attribute_lookup_keeps_identity_guards():
    backend = CompileCounter()
    torch.manual_seed(0)
    layers = [OwnLookup(4, 4) for _ in range(3)]
    x = torch.randn(2, 4)
    for layer in layers * 2:
        assert_equal(compile_block(layer, backend)(x), layer(x))
    assert backend.frame_count == 3


@minidynamo_only
def test_identity_guards_when_sharing_is_off(monkeypatch):
    import minidynamo

    monkeypatch.setattr(minidynamo.config, "share_module_entries", False)
    backend = CompileCounter()
    blocks, twins = make_blocks("mlp", "eval", n=3)
    call_all([compile_block(b, backend) for b in blocks], blocks, twins, ARCHS["mlp"][1](), "3 blocks", backend,
             compiles=3)


def test_instance_signature_read_by_the_trace():
    """inspect.signature(module) may find an instance's own __signature__: its identity is guarded."""
    import inspect

    class Arity(nn.Module):
        def forward(self, x):
            return x * len(inspect.signature(self).parameters)

    backend = CompileCounter()
    plain, custom = Arity(), Arity()
    custom.__signature__ = inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in "abc"])
    x = torch.ones(2)
    for module in (plain, custom, plain, custom):
        assert_equal(compile_block(module, backend)(x), module(x))


def test_functional_forms_share_too():
    """F.linear on a module's parameters read through attributes, in a plain function."""
    backend = CompileCounter()
    torch.manual_seed(0)
    layers = [nn.Linear(4, 4) for _ in range(5)]

    def apply(layer, x):
        return F.linear(x, layer.weight, layer.bias).relu()

    from translator_harness import optimize

    fn = optimize(backend)(apply)
    x = torch.randn(2, 4)
    for layer in layers * 2:
        assert_equal(fn(layer, x), apply(layer, x))
    assert backend.frame_count == 1
