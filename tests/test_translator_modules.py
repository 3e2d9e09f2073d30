"""Translator: nn.Module forward (Linear, MLP, Conv2d+ReLU, LayerNorm, Embedding, attention),
submodules, parameters and buffers, module attributes, recompiles on attribute changes, cache hits.

Modules are compiled through ``compile_module`` (translator_harness), the one place that decides
between ``optimize(cnt)(module)``, ``optimize(cnt)(module.forward)`` and a wrapper function."""
import torch
import torch.nn.functional as F
from torch import nn

from translator_harness import (  # noqa: F401
    MODULE_GUARD_KINDS,
    CompileCounter,
    assert_equal,
    assert_guard,
    compile_module,
    explain,
    fresh_dynamo,
    rand,
)


def check_module(mod, *inputs, graphs=1, repeat=2):
    """Compile ``mod`` with a CompileCounter, compare with eager on every input (tuple or tensor),
    and check the graph count.  Returns the counter."""
    cnt = CompileCounter()
    cm = compile_module(mod, cnt, nopython=True)
    for inp in inputs:
        args = inp if isinstance(inp, tuple) else (inp,)
        for _ in range(repeat):
            assert_equal(cm(*args), mod(*args))
    assert cnt.frame_count == graphs, f"compiled {cnt.frame_count} graphs, expected {graphs}"
    return cnt


# ---------------------------------------------------------------------------------------------
# modules
# ---------------------------------------------------------------------------------------------
class MLP(nn.Module):
    def __init__(self, d=4, h=8):
        super().__init__()
        self.fc1 = nn.Linear(d, h)
        self.fc2 = nn.Linear(h, d)
        self.act = nn.GELU()

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x))) + x


class ConvBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.conv(x))


class Attention(nn.Module):
    def __init__(self, d=8, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)
        self.scale = (d // heads) ** -0.5

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * self.scale
        att = att.softmax(dim=-1)
        out = (att @ v).transpose(1, 2).reshape(b, t, d)
        return x + self.proj(out)


class WithBuffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4))
        self.register_buffer("running", torch.zeros(4))
        self.momentum = 0.1

    def forward(self, x):
        self.running.mul_(1 - self.momentum).add_(x.mean(0) * self.momentum)
        return x * self.weight + self.running


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = 2
        self.use_bias = True
        self.eps = 1e-3

    def forward(self, x):
        y = self.lin(x) * self.scale
        if self.use_bias:
            y = y + 1
        if self.training:
            y = y * 0.5
        return y + self.eps


class Tower(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([MLP() for _ in range(2)])
        self.heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Linear(4, 3)})
        self.seq = nn.Sequential(nn.Linear(4, 4), nn.Tanh())

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        x = self.seq(x)
        return {name: head(x) for name, head in self.heads.items()}


class UsesParamsDirectly(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 3))
        self.b = nn.Parameter(torch.randn(3))

    def forward(self, x):
        return F.linear(x, self.w.t(), self.b) + sum(p.sum() for p in self.parameters())


class Helpers(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def _pre(self, x):
        return x - x.mean(-1, keepdim=True)

    def forward(self, x, residual=None):
        y = self.lin(self._pre(x))
        if residual is not None:
            y = y + residual
        return y


class Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.norm = nn.LayerNorm(4)

    def forward(self, idx):
        return self.norm(self.emb(idx)).sum(1)


class Functional(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        h = F.layer_norm(x, (4,))
        h = F.dropout(self.lin(h), p=0.3, training=self.training)
        return F.softmax(self.drop(h), dim=-1), F.gelu(h), F.relu(h)


def test_linear():
    check_module(nn.Linear(4, 3), rand(2, 4), rand(5, 4), graphs=2)


def test_mlp():
    check_module(MLP(), rand(2, 4), graphs=1)


def test_conv_relu():
    check_module(ConvBlock(), rand(1, 2, 5, 5), graphs=1)


def test_layer_norm():
    check_module(nn.LayerNorm(4), rand(3, 4), graphs=1)


def test_embedding():
    check_module(Embed(), torch.randint(0, 10, (2, 3)), graphs=1)


def test_attention_block():
    check_module(Attention().eval(), rand(2, 3, 8), graphs=1)


def test_parameters_and_buffers():
    # the buffer is updated in place on every call: run eager and compiled on twins
    torch.manual_seed(0)
    eager = WithBuffer()
    comp = WithBuffer()
    comp.load_state_dict(eager.state_dict())
    cnt = CompileCounter()
    cm = compile_module(comp, cnt, nopython=True)
    for _ in range(3):
        x = rand(2, 4)
        assert_equal(cm(x), eager(x))
        assert_equal(comp.running, eager.running)
    assert cnt.frame_count == 1


def test_submodule_containers():
    check_module(Tower(), rand(2, 4), graphs=1)


def test_params_used_directly():
    check_module(UsesParamsDirectly(), rand(2, 4), graphs=1)


def test_module_helper_method_and_kwargs():
    mod = Helpers()
    check_module(mod, rand(2, 4), (rand(2, 4), rand(2, 4)), graphs=2)


def test_functional_eval_mode():
    check_module(Functional().eval(), rand(3, 4), graphs=1)


def test_gradients_flow_to_parameters():
    torch.manual_seed(0)
    a, b = MLP(), MLP()
    b.load_state_dict(a.state_dict())
    cm = compile_module(b, CompileCounter(), nopython=True)
    x = rand(3, 4)
    a(x).pow(2).sum().backward()
    cm(x).pow(2).sum().backward()
    for (na, pa), (nb, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert_equal(pb.grad, pa.grad, na)


# ---------------------------------------------------------------------------------------------
# module attributes, recompiles and cache hits
# ---------------------------------------------------------------------------------------------
def test_same_module_twice_hits_cache():
    mod = Scaled()
    cnt = check_module(mod, rand(2, 4), rand(2, 4), graphs=1, repeat=3)
    assert cnt.frame_count == 1


def test_changed_int_attribute_recompiles():
    mod = Scaled()
    cnt = CompileCounter()
    cm = compile_module(mod, cnt, nopython=True)
    x = rand(2, 4)
    assert_equal(cm(x), mod(x))
    mod.scale = 3
    assert_equal(cm(x), mod(x))
    assert cnt.frame_count == 2
    mod.scale = 2  # back to the first value: the first entry serves it
    assert_equal(cm(x), mod(x))
    assert cnt.frame_count == 2


def test_changed_bool_attribute_recompiles():
    mod = Scaled()
    cnt = CompileCounter()
    cm = compile_module(mod, cnt, nopython=True)
    x = rand(2, 4)
    assert_equal(cm(x), mod(x))
    mod.use_bias = False
    assert_equal(cm(x), mod(x))
    assert cnt.frame_count == 2


def test_changed_float_attribute_recompiles():
    mod = Scaled()
    cnt = CompileCounter()
    cm = compile_module(mod, cnt, nopython=True)
    x = rand(2, 4)
    assert_equal(cm(x), mod(x))
    mod.eps = 0.5
    assert_equal(cm(x), mod(x))
    assert cnt.frame_count == 2


def test_train_eval_switch_recompiles():
    mod = Scaled().train()
    cnt = CompileCounter()
    cm = compile_module(mod, cnt, nopython=True)
    x = rand(2, 4)
    assert_equal(cm(x), mod(x))
    mod.eval()
    assert_equal(cm(x), mod(x))
    assert cnt.frame_count == 2
    mod.train()
    assert_equal(cm(x), mod(x))
    assert cnt.frame_count == 2


def test_replaced_parameter_value_is_seen():
    mod = nn.Linear(4, 2)
    cnt = CompileCounter()
    cm = compile_module(mod, cnt, nopython=True)
    x = rand(3, 4)
    assert_equal(cm(x), mod(x))
    with torch.no_grad():
        mod.weight.mul_(-2)
    assert_equal(cm(x), mod(x))  # in-place updates of parameters are visible without recompiling
    assert cnt.frame_count == 1


def test_two_instances_same_class():
    m1, m2 = MLP(), MLP()
    cnt = CompileCounter()
    c1 = compile_module(m1, cnt, nopython=True)
    c2 = compile_module(m2, cnt, nopython=True)
    x = rand(2, 4)
    assert_equal(c1(x), m1(x))
    assert_equal(c2(x), m2(x))
    assert_equal(c1(x), m1(x))
    assert_equal(c2(x), m2(x))
    assert cnt.frame_count in (1, 2)  # one graph per instance, or one shared graph with params as inputs


def test_module_called_inside_function():
    mod = MLP()

    def f(x):
        return mod(x).sum(-1)

    from translator_harness import assert_same

    assert_same(f, rand(2, 4), rand(3, 4), graphs=2)


def test_module_passed_as_argument():
    mod = MLP()

    def f(m, x):
        return m(x) * 2

    from translator_harness import assert_same

    assert_same(f, (mod, rand(2, 4)), (mod, rand(2, 4)), graphs=1)


def test_module_guards():
    mod = MLP()

    def f(m, x):
        return m(x)

    out = explain(f, mod, rand(2, 4))
    assert out.graph_count == 1
    assert_guard(out, "m", MODULE_GUARD_KINDS)
    assert_guard(out, "x", "TENSOR_MATCH")


def test_module_attribute_guard():
    mod = Scaled()

    def f(m, x):
        return m(x)

    out = explain(f, mod, rand(2, 4))
    assert_guard(out, "scale", "EQUALS_MATCH")
