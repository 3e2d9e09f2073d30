"""Conformance, modules family: slicing ModuleList/Sequential, walking the module tree, forward
(pre-)hooks, modules with their own __getattr__/__setattr__, lazy modules, a static forward, modules
made inside the compiled region, `==` on modules, and caches that settle after a graph break when a
frame hands a new object to the rest of the frame. Each function is compared with eager, its graph
count is torch's (or lower), and its second and third identical calls compile nothing."""
import functools

import pytest
import torch
import torch.nn as nn

from translator_harness import (  # noqa: F401
    REFERENCE,
    CompileCounter,
    assert_equal,
    assert_same,
    fresh_dynamo,
    frames_compiled,
    minidynamo_only,
    optimize,
    rand,
)


def _seeded(build):
    torch.manual_seed(0)
    return build()


# ---------------------------------------------------------------------------------------------
# the modules the functions below use (built once; functions read them as globals)
# ---------------------------------------------------------------------------------------------
ML = _seeded(lambda: nn.ModuleList([nn.Linear(4, 4) for _ in range(4)]))
SEQ = _seeded(lambda: nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.Tanh()))
MD = _seeded(lambda: nn.ModuleDict({"a": nn.Linear(4, 4), "b": nn.ReLU(), "c": nn.Linear(4, 4)}))
N_LAYERS = 3


class Config:
    num_hidden_layers = 2


CONFIG = Config()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.act = nn.GELU()
        self.register_buffer("scale", torch.full((4,), 0.5))

    def forward(self, x):
        return self.act(self.fc(x)) * self.scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(4, 4)
        self.layers = nn.ModuleList([Block() for _ in range(3)])
        self.head = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.register_buffer("offset", torch.ones(4))

    def forward(self, x):
        x = self.embed(x)
        for layer in self.layers[: CONFIG.num_hidden_layers]:
            x = layer(x)
        return self.head(x) + self.offset


NET = _seeded(Net)


class Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = self.a
        self.c = nn.Linear(4, 4)
        self.c.weight = self.a.weight


SHARED = _seeded(Shared)


CASES = {}


def case(*input_sets, graphs=1):
    """Register a function under its name with its input sets (default: one (2, 4) tensor); more
    than one graph means graph breaks, which a whole-graph compile would refuse."""
    def register(fn):
        assert fn.__name__ not in CASES, fn.__name__
        CASES[fn.__name__] = (fn, input_sets or ((rand(2, 4),),), graphs)
        return fn

    return register


# ---------------------------------------------------------------------------------------------
# slicing a ModuleList / Sequential
# ---------------------------------------------------------------------------------------------
@case()
def slice_head(x):
    for layer in ML[:2]:
        x = layer(x)
    return x


@case()
def slice_tail(x):
    for layer in ML[1:]:
        x = layer(x)
    return x


@case()
def slice_step(x):
    for layer in ML[::2]:
        x = layer(x)
    return x


@case()
def slice_negative_start(x):
    for layer in ML[-2:]:
        x = layer(x)
    return x


@case()
def slice_middle(x):
    for layer in ML[1:3]:
        x = layer(x)
    return x


@case()
def slice_reversed_step(x):
    for layer in ML[::-1]:
        x = layer(x)
    return x


@case()
def slice_len(x):
    return x * len(ML[1:])


@case()
def slice_then_index(x):
    return ML[1:][0](x)


@case()
def slice_then_negative_index(x):
    return ML[:3][-1](x)


@case()
def slice_of_slice(x):
    for layer in ML[1:][1:]:
        x = layer(x)
    return x


@case()
def slice_enumerate(x):
    for i, layer in enumerate(ML[:3]):
        x = layer(x) * (i + 1)
    return x


@case()
def slice_zip(x):
    out = x
    for a, b in zip(ML[:2], ML[2:]):
        out = a(out) + b(x)
    return out


@case()
def slice_comprehension(x):
    return torch.stack([layer(x) for layer in ML[:3]])


@case()
def slice_global_bound(x):
    for layer in ML[:N_LAYERS]:
        x = layer(x)
    return x


@case()
def slice_config_bound(x):
    for layer in ML[: CONFIG.num_hidden_layers]:
        x = layer(x)
    return x


@case()
def slice_empty(x):
    for layer in ML[4:]:
        x = layer(x)
    return x + 1


@case()
def slice_past_end(x):
    for layer in ML[2:10]:
        x = layer(x)
    return x


@case()
def slice_isinstance(x):
    part = ML[:2]
    return x * 2 if isinstance(part, nn.ModuleList) else x


@case()
def slice_type_is(x):
    return x + 1 if type(SEQ[:2]) is nn.Sequential else x


@case()
def sequential_slice_call(x):
    return SEQ[:2](x)


@case()
def sequential_slice_tail_call(x):
    return SEQ[2:](x)


@case()
def sequential_slice_iterate(x):
    for module in SEQ[1:]:
        x = module(x)
    return x


@case()
def sequential_slice_len(x):
    return x * len(SEQ[::2])


@case()
def sequential_slice_index(x):
    return SEQ[2:][0](x)


@case()
def sequential_slice_of_slice_call(x):
    return SEQ[1:][:2](x)


@case()
def slice_named_children(x):
    for name, child in SEQ[2:].named_children():
        x = child(x) * len(name)
    return x


@case()
def slice_parameters_sum(x):
    return x + sum(p.sum() for p in ML[:2].parameters())


@case()
def slice_children(x):
    for child in ML[1:3].children():
        x = child(x)
    return x


@case()
def slice_in_method(x):
    return NET(x)


@case()
def slice_reassigned(x):
    layers = ML[:3]
    layers = layers[1:]
    for layer in layers:
        x = layer(x)
    return x


@case()
def slice_kept_in_list(x):
    groups = [ML[:2], ML[2:]]
    for group in groups:
        for layer in group:
            x = layer(x)
    return x


@case()
def slice_returned_length(x):
    part = ML[1:]
    return x.sum() * len(part), len(part)


@case()
def slice_range_indices(x):
    part = ML[:3]
    for i in range(len(part)):
        x = part[i](x)
    return x


@case()
def slice_in_moduledict_values(x):
    for module in list(MD.values())[:2]:
        x = module(x)
    return x


# ---------------------------------------------------------------------------------------------
# walking the module tree
# ---------------------------------------------------------------------------------------------
@case()
def named_children_names(x):
    names = [name for name, _ in NET.named_children()]
    return x * len(names), names


@case()
def named_children_call_linear(x):
    for name, child in NET.named_children():
        if isinstance(child, nn.Linear):
            x = child(x)
    return x


@case()
def children_count(x):
    return x * len(list(NET.children()))


@case()
def children_sequential(x):
    for child in SEQ.children():
        x = child(x)
    return x


@case()
def named_parameters_names(x):
    return x * 2, [name for name, _ in NET.named_parameters()]


@case()
def named_parameters_sum(x):
    total = x
    for name, p in NET.named_parameters():
        if name.endswith("weight"):
            total = total + p.sum()
    return total


@case()
def parameters_sum(x):
    return x + sum(p.sum() for p in NET.parameters())


@case()
def parameters_count(x):
    return x * len(list(NET.parameters()))


@case()
def parameters_numel(x):
    return x * 2, sum(p.numel() for p in NET.parameters())


@case()
def parameters_shapes(x):
    return x * 2, [tuple(p.shape) for p in SEQ.parameters()]


@case()
def parameters_requires_grad(x):
    return x * 2, [p.requires_grad for p in SEQ.parameters()]


@case()
def parameters_dict(x):
    params = dict(NET.named_parameters())
    return x @ params["embed.weight"] + params["embed.bias"]


@case()
def buffers_sum(x):
    return x + sum(b.sum() for b in NET.buffers())


@case()
def named_buffers_names(x):
    return x * 2, [name for name, _ in NET.named_buffers()]


@case()
def named_buffers_use(x):
    for name, b in NET.named_buffers():
        x = x * b if name.endswith("scale") else x + b
    return x


@case()
def named_modules_names(x):
    return x * 2, [name for name, _ in NET.named_modules()]


@case()
def modules_count_linear(x):
    return x * sum(1 for m in NET.modules() if isinstance(m, nn.Linear))


@case()
def modules_first_is_self(x):
    return x + 1 if next(iter(NET.modules())) is NET else x


@case()
def named_modules_apply_linear(x):
    for name, m in SEQ.named_modules():
        if isinstance(m, nn.Linear):
            x = m(x)
    return x


@case()
def shared_named_modules(x):
    return x * 2, [name for name, _ in SHARED.named_modules()]


@case()
def shared_named_parameters(x):
    return x * 2, [name for name, _ in SHARED.named_parameters()]


@case()
def shared_children_count(x):
    return x * len(list(SHARED.children()))


@case()
def shared_parameters_sum(x):
    return x + sum(p.sum() for p in SHARED.parameters())


@case()
def moduledict_items(x):
    for name, m in MD.items():
        x = m(x) if name != "b" else m(x) + 1
    return x


@case()
def moduledict_keys(x):
    return x * 2, list(MD.keys())


@case()
def moduledict_values(x):
    for m in MD.values():
        x = m(x)
    return x


@case()
def moduledict_iterate(x):
    for key in MD:
        x = MD[key](x)
    return x


@case()
def moduledict_len_contains(x):
    return x * len(MD), "a" in MD, "z" in MD


@case()
def modulelist_iterate(x):
    for layer in ML:
        x = layer(x)
    return x


@case()
def modulelist_len(x):
    return x * len(ML)


@case()
def modulelist_index(x):
    return ML[0](x) + ML[-1](x)


@case()
def sequential_index_call(x):
    return SEQ[0](x) + SEQ[-2](x)


@case()
def sequential_call(x):
    return SEQ(x)


@case()
def nested_children_loop(x):
    for block in NET.layers:
        for child in block.children():
            x = child(x)
    return x


@case()
def named_parameters_nested_prefix(x):
    return x * 2, [name for name, _ in NET.layers.named_parameters()]


@case()
def named_modules_of_block(x):
    return x * 2, [type(m).__name__ for _, m in NET.layers[0].named_modules()]


@case()
def parameters_zip_names(x):
    names = [n for n, _ in SEQ.named_parameters()]
    values = list(SEQ.parameters())
    return x * 2, [n for n, p in zip(names, values) if p.dim() == 2]


@case()
def children_types(x):
    return x * 2, [type(c).__name__ for c in SEQ.children()]


@case()
def module_training_flag(x):
    return x * 2 if NET.training else x


@case()
def submodule_attribute_chain(x):
    return NET.layers[1].fc(x) * NET.layers[1].scale


# ---------------------------------------------------------------------------------------------
# forward hooks and forward pre-hooks (traced into the graph, like torch)
# ---------------------------------------------------------------------------------------------
def _with_hooks(*hooks, module=None):
    """A Linear(4, 4) with `hooks` registered: ("fwd"|"pre"|"fwd_kw"|"pre_kw", fn)."""
    torch.manual_seed(0)
    module = module if module is not None else nn.Linear(4, 4)
    for kind, fn in hooks:
        if kind == "fwd":
            module.register_forward_hook(fn)
        elif kind == "fwd_prepend":
            module.register_forward_hook(fn, prepend=True)
        elif kind == "pre":
            module.register_forward_pre_hook(fn)
        elif kind == "fwd_kw":
            module.register_forward_hook(fn, with_kwargs=True)
        else:
            module.register_forward_pre_hook(fn, with_kwargs=True)
    return module


def _double_output(module, args, output):
    return output * 2


def _add_one_output(module, args, output):
    return output + 1


def _observe_only(module, args, output):
    return None


def _shift_input(module, args):
    return (args[0] + 1,)


def _shift_input_bare(module, args):
    return args[0] - 1


def _pre_none(module, args):
    return None


class _Scaler:
    def __init__(self, factor):
        self.factor = factor

    def hook(self, module, args, output):
        return output * self.factor


HOOK_SCALE = 3.0


def _global_scale_hook(module, args, output):
    return output * HOOK_SCALE


def _read_module_attr_hook(module, args, output):
    return output + module.bias


def _input_using_hook(module, args, output):
    return output + args[0]


def _tuple_output_hook(module, args, output):
    return output, output.sum()


def _pre_kwargs(module, args, kwargs):
    return (args[0] * 2,), kwargs


def _pre_kwargs_none(module, args, kwargs):
    return None


def _fwd_kwargs(module, args, kwargs, output):
    return output + len(kwargs)


H_DOUBLE = _with_hooks(("fwd", _double_output))
H_OBSERVE = _with_hooks(("fwd", _observe_only))
H_PRE = _with_hooks(("pre", _shift_input))
H_PRE_BARE = _with_hooks(("pre", _shift_input_bare))
H_PRE_NONE = _with_hooks(("pre", _pre_none))
H_BOTH = _with_hooks(("pre", _shift_input), ("fwd", _double_output))
H_ORDER = _with_hooks(("fwd", _double_output), ("fwd", _add_one_output))
H_PREPEND = _with_hooks(("fwd", _double_output), ("fwd_prepend", _add_one_output))
H_PARTIAL = _with_hooks(("fwd", functools.partial(lambda scale, m, a, o: o * scale, 5.0)))
H_METHOD = _with_hooks(("fwd", _Scaler(0.5).hook))
H_GLOBAL_READ = _with_hooks(("fwd", _global_scale_hook))
H_MODULE_ATTR = _with_hooks(("fwd", _read_module_attr_hook))
H_INPUT = _with_hooks(("fwd", _input_using_hook))
H_TUPLE = _with_hooks(("fwd", _tuple_output_hook))
H_LAMBDA = _with_hooks(("fwd", lambda m, a, o: o.relu()))
H_PRE_KW = _with_hooks(("pre_kw", _pre_kwargs))
H_PRE_KW_NONE = _with_hooks(("pre_kw", _pre_kwargs_none))
H_FWD_KW = _with_hooks(("fwd_kw", _fwd_kwargs))
H_MIXED = _with_hooks(("pre_kw", _pre_kwargs), ("pre", _shift_input), ("fwd_kw", _fwd_kwargs), ("fwd", _double_output))
H_IN_SEQ = nn.Sequential(_with_hooks(("fwd", _double_output)), nn.ReLU(), _with_hooks(("pre", _shift_input)))
H_ON_RELU = _with_hooks(("fwd", _add_one_output), module=nn.ReLU())


class _BlockWithHookedChild(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = _with_hooks(("fwd", _double_output), ("pre", _shift_input))

    def forward(self, x):
        return self.inner(x) + self.inner(x * 2)


H_CHILD = _seeded(_BlockWithHookedChild)


@case()
def hook_forward_double(x):
    return H_DOUBLE(x)


@case()
def hook_forward_observe(x):
    return H_OBSERVE(x)


@case()
def hook_pre_tuple(x):
    return H_PRE(x)


@case()
def hook_pre_bare_value(x):
    return H_PRE_BARE(x)


@case()
def hook_pre_none(x):
    return H_PRE_NONE(x)


@case()
def hook_pre_and_forward(x):
    return H_BOTH(x)


@case()
def hook_order(x):
    return H_ORDER(x)


@case()
def hook_prepended(x):
    return H_PREPEND(x)


@case()
def hook_partial(x):
    return H_PARTIAL(x)


@case()
def hook_bound_method(x):
    return H_METHOD(x)


@case()
def hook_reads_global(x):
    return H_GLOBAL_READ(x)


@case()
def hook_reads_module(x):
    return H_MODULE_ATTR(x)


@case()
def hook_reads_input(x):
    return H_INPUT(x)


@case()
def hook_changes_output_type(x):
    out, total = H_TUPLE(x)
    return out * total


@case()
def hook_lambda(x):
    return H_LAMBDA(x)


@case()
def hook_pre_with_kwargs(x):
    return H_PRE_KW(x)


@case()
def hook_pre_with_kwargs_none(x):
    return H_PRE_KW_NONE(x)


@case()
def hook_forward_with_kwargs(x):
    return H_FWD_KW(x)


@case()
def hook_mixed_kinds(x):
    return H_MIXED(x)


@case()
def hook_in_sequential(x):
    return H_IN_SEQ(x)


@case()
def hook_on_parameterless(x):
    return H_ON_RELU(x)


@case()
def hook_child_called_twice(x):
    return H_CHILD(x)


@case()
def hook_module_called_in_loop(x):
    for _ in range(3):
        x = H_DOUBLE(x)
    return x


# ---------------------------------------------------------------------------------------------
# modules with their own __getattr__ / __setattr__, a static forward, lazy modules
# ---------------------------------------------------------------------------------------------
class WithGetattr(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.extra = {"scale": 3.0, "shift": 1.0}

    def __getattr__(self, name):
        extra = self.__dict__["extra"]
        if name in extra:
            return extra[name]
        return super().__getattr__(name)

    def forward(self, x):
        return self.fc(x) * self.scale + self.shift


class WithGetattrDefault(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def __getattr__(self, name):
        if name.startswith("factor_"):
            return float(name[len("factor_"):])
        return super().__getattr__(name)

    def forward(self, x):
        return self.fc(x) * self.factor_2 + self.factor_5


class WithGetattrGet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.aliases = {"proj": "fc"}

    def __getattr__(self, name):
        aliases = self.__dict__.get("aliases", {})
        if name in aliases:
            return super().__getattr__(aliases[name])
        return super().__getattr__(name)

    def forward(self, x):
        return self.proj(x)


class WithSetattr(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.count = 0

    def __setattr__(self, name, value):
        if name == "count" and isinstance(value, int):
            value = value * 2
        super().__setattr__(name, value)

    def forward(self, x):
        self.count = 5
        return self.fc(x) + self.count


class WithSetattrRecord(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.mode = "a"

    def __setattr__(self, name, value):
        if name == "mode":
            super().__setattr__("previous_mode", self.__dict__.get("mode"))
        super().__setattr__(name, value)

    def forward(self, x):
        self.mode = "b"
        return self.fc(x) * 2 if self.previous_mode == "a" else self.fc(x)


class StaticForward(nn.Module):
    @staticmethod
    def forward(x):
        return x * 2 + 1


class StaticForwardTwoArgs(nn.Module):
    @staticmethod
    def forward(x, y):
        return x * y


class StaticForwardInSeq(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 4), StaticForward())

    def forward(self, x):
        return self.body(x)


M_GETATTR = _seeded(WithGetattr)
M_GETATTR_DEFAULT = _seeded(WithGetattrDefault)
M_GETATTR_GET = _seeded(WithGetattrGet)
M_STATIC = StaticForward()
M_STATIC_TWO = StaticForwardTwoArgs()
M_STATIC_SEQ = _seeded(StaticForwardInSeq)


@case()
def getattr_module_extra(x):
    return M_GETATTR(x)


@case()
def getattr_module_read_outside(x):
    return x * M_GETATTR.scale + M_GETATTR.fc(x)


@case()
def getattr_module_computed(x):
    return M_GETATTR_DEFAULT(x)


@case()
def getattr_module_alias(x):
    return M_GETATTR_GET(x)


@case()
def static_forward(x):
    return M_STATIC(x)


@case()
def static_forward_two(x):
    return M_STATIC_TWO(x, x + 1)


@case()
def static_forward_called_directly(x):
    return M_STATIC.forward(x) + StaticForward.forward(x)


@case()
def static_forward_in_sequential(x):
    return M_STATIC_SEQ(x)


def test_setattr_module_count():
    """__setattr__ runs (doubling) in eager and compiled alike; the module ends in the same state."""
    compiled_module, eager_module = _seeded(WithSetattr), _seeded(WithSetattr)
    x = rand(2, 4)
    compiled = optimize(CompileCounter(), nopython=True)(lambda t: compiled_module(t))
    for _ in range(3):
        assert_equal(compiled(x), eager_module(x))
        assert compiled_module.count == eager_module.count == 10


def test_setattr_module_records_previous():
    compiled_module, eager_module = _seeded(WithSetattrRecord), _seeded(WithSetattrRecord)
    x = rand(2, 4)
    counter = CompileCounter()
    compiled = optimize(counter, nopython=True)(lambda t: compiled_module(t))
    for _ in range(3):
        assert_equal(compiled(x), eager_module(x))
        assert compiled_module.__dict__["previous_mode"] == eager_module.__dict__["previous_mode"]
    assert counter.frame_count <= 2  # the first call sees mode "a", later ones "b"


LAZY_BUILDERS = {
    "lazy_linear": lambda: nn.LazyLinear(3),
    "lazy_linear_no_bias": lambda: nn.LazyLinear(3, bias=False),
    "lazy_in_sequential": lambda: nn.Sequential(nn.LazyLinear(6), nn.ReLU(), nn.LazyLinear(2)),
    "lazy_conv1d": lambda: nn.LazyConv1d(2, 3),
    "lazy_batchnorm": lambda: nn.LazyBatchNorm1d(),
}
LAZY_INPUTS = {"lazy_conv1d": (2, 5, 7), "lazy_batchnorm": (3, 5)}


@pytest.mark.parametrize("name", sorted(LAZY_BUILDERS))
def test_lazy_module_first_call_initializes(name):
    """A lazy module compiled before it ever ran: the compiled first call makes its parameters (same
    values as eager from the same seed) and every call matches eager; later calls compile nothing."""
    build = LAZY_BUILDERS[name]
    torch.manual_seed(0)
    compiled_module = build()
    torch.manual_seed(0)
    eager_module = build()
    x = rand(*LAZY_INPUTS.get(name, (2, 5)))
    counter = CompileCounter()
    compiled = optimize(counter, nopython=True)(lambda t: compiled_module(t))
    for call in range(3):
        before = frames_compiled()
        torch.manual_seed(1)
        actual = compiled(x)
        torch.manual_seed(1)
        expected = eager_module(x)
        assert_equal(actual, expected)
        if call:
            assert frames_compiled() == before
    assert [type(m) for m in compiled_module.modules()] == [type(m) for m in eager_module.modules()]
    for (n1, p1), (n2, p2) in zip(compiled_module.named_parameters(), eager_module.named_parameters()):
        assert n1 == n2
        assert_equal(p1, p2)
    assert counter.frame_count == 1


# ---------------------------------------------------------------------------------------------
# modules made inside the compiled region
# ---------------------------------------------------------------------------------------------
@case()
def build_relu(x):
    return nn.ReLU()(x)


@case()
def build_relu_then_call_twice(x):
    act = nn.ReLU()
    return act(x) + act(-x)


@case()
def build_tanh(x):
    return nn.Tanh()(x)


@case()
def build_sigmoid(x):
    return nn.Sigmoid()(x)


@case()
def build_gelu_tanh(x):
    return nn.GELU(approximate="tanh")(x)


@case()
def build_leaky_relu(x):
    return nn.LeakyReLU(0.2)(x)


@case()
def build_elu(x):
    return nn.ELU(alpha=0.5)(x)


@case()
def build_hardtanh(x):
    return nn.Hardtanh(-0.5, 0.5)(x)


@case()
def build_softmax(x):
    return nn.Softmax(dim=-1)(x)


@case()
def build_log_softmax(x):
    return nn.LogSoftmax(dim=1)(x)


@case()
def build_identity(x):
    return nn.Identity()(x) + 1


@case()
def build_flatten(x):
    return nn.Flatten(0)(x)


@case()
def build_dropout_eval_like(x):
    return nn.Dropout(0.0)(x)


@case()
def build_silu(x):
    return nn.SiLU()(x)


@case()
def build_softplus(x):
    return nn.Softplus(beta=2.0)(x)


@case()
def build_sequential_of_new(x):
    return nn.Sequential(nn.ReLU(), nn.Tanh())(x)


@case()
def build_sequential_with_existing(x):
    return nn.Sequential(ML[0], nn.ReLU())(x)


@case()
def build_modulelist_of_new(x):
    for act in nn.ModuleList([nn.ReLU(), nn.Sigmoid()]):
        x = act(x)
    return x


@case()
def build_activation_by_name(x):
    acts = {"relu": nn.ReLU, "tanh": nn.Tanh}
    return acts["tanh"]()(x)


@case()
def build_module_training_flag(x):
    act = nn.ReLU()
    return x * 2 if act.training else x


@case()
def build_module_attribute(x):
    act = nn.LeakyReLU(0.3)
    return x * act.negative_slope


@case()
def build_module_isinstance(x):
    act = nn.ReLU()
    return act(x) if isinstance(act, nn.Module) else x


@case()
def build_in_loop(x):
    for slope in (0.1, 0.2):
        x = nn.LeakyReLU(slope)(x)
    return x


@case()
def build_pixel_shuffle(x):
    return nn.PixelShuffle(2)(x.reshape(1, 4, 1, 2))


@case()
def build_upsample(x):
    return nn.Upsample(scale_factor=2.0, mode="nearest")(x.reshape(1, 2, 4))


@case()
def build_mse_loss(x):
    return nn.MSELoss()(x, x * 0.5)


@case()
def build_l1_loss_sum(x):
    return nn.L1Loss(reduction="sum")(x, x.flip(0))


@case()
def build_cross_entropy(x):
    return nn.CrossEntropyLoss()(x, torch.tensor([0, 3]))


@case()
def build_cosine_similarity(x):
    return nn.CosineSimilarity(dim=1)(x, x + 1)


@case()
def build_pairwise_distance(x):
    return nn.PairwiseDistance()(x, x * 2)


@case()
def build_unflatten(x):
    return nn.Unflatten(1, (2, 2))(x)


# ---------------------------------------------------------------------------------------------
# `==`, `is`, and containment on modules
# ---------------------------------------------------------------------------------------------
@case()
def module_eq_same(x):
    return x * 2 if ML[0] == ML[0] else x


@case()
def module_eq_other(x):
    return x * 2 if ML[0] == ML[1] else x - 1


@case()
def module_ne(x):
    return x + 1 if SEQ[0] != SEQ[2] else x


@case()
def module_is(x):
    return x + 1 if SHARED.a is SHARED.b else x


@case()
def module_is_not(x):
    return x + 1 if SHARED.a is not SHARED.c else x


@case()
def module_in_list(x):
    return x * 3 if ML[2] in [ML[0], ML[2]] else x


@case()
def module_not_in_list(x):
    return x * 3 if SEQ[0] in [ML[0], ML[2]] else x - 1


@case()
def module_eq_result(x):
    return x * 2, ML[0] == ML[0], ML[0] == ML[1]


@case()
def module_eq_in_loop(x):
    for layer in ML:
        if layer == ML[1]:
            x = layer(x)
    return x


@case()
def module_eq_none(x):
    return x + 1 if ML[0] != None else x  # noqa: E711


@case()
def module_eq_slice_entry(x):
    return x * 2 if ML[1:][0] == ML[1] else x


# ---------------------------------------------------------------------------------------------
# modules as arguments, module state read in the graph
# ---------------------------------------------------------------------------------------------
def call_module_argument(module, x):
    return module(x)


def read_weight_argument(module, x):
    return x @ module.weight.t() + module.bias


def iterate_module_argument(module, x):
    for layer in module:
        x = layer(x)
    return x


def module_argument_children(module, x):
    return x * 2, [type(c).__name__ for c in module.children()]


MODULE_ARGUMENT_CASES = {
    "call_linear_argument": (call_module_argument, (ML[0], rand(2, 4))),
    "call_sequential_argument": (call_module_argument, (SEQ, rand(2, 4))),
    "call_hooked_argument": (call_module_argument, (H_BOTH, rand(2, 4))),
    "read_weight_linear_argument": (read_weight_argument, (ML[1], rand(2, 4))),
    "iterate_list_argument": (iterate_module_argument, (ML, rand(2, 4))),
    "iterate_sequential_argument": (iterate_module_argument, (SEQ, rand(2, 4))),
    "children_sequential_argument": (module_argument_children, (SEQ, rand(2, 4))),
    "children_net_argument": (module_argument_children, (NET, rand(2, 4))),
}


@pytest.mark.parametrize("name", sorted(MODULE_ARGUMENT_CASES))
def test_module_argument(name):
    fn, args = MODULE_ARGUMENT_CASES[name]
    assert_same(fn, args)


# ---------------------------------------------------------------------------------------------
# caches that settle: a frame hands an object it made to the rest of the frame, past a graph break
# ---------------------------------------------------------------------------------------------
def _break():
    print("graph break")  # noqa: T201 - a graph break in minidynamo and in torch


@case(graphs=2)
def break_after_building_relu(x):
    act = nn.ReLU()
    x = x * 2
    _break()
    return act(x)


@case(graphs=2)
def break_after_building_sequential(x):
    body = nn.Sequential(nn.Tanh(), nn.ReLU())
    x = x + 1
    _break()
    return body(x)


@case(graphs=2)
def break_after_slicing(x):
    part = ML[1:3]
    x = part[0](x)
    _break()
    for layer in part:
        x = layer(x)
    return x


@case(graphs=2)
def break_after_sequential_slice(x):
    head = SEQ[:2]
    x = x - 1
    _break()
    return head(x)


@case(graphs=2)
def break_after_nested_function(x):
    y = x + 1

    def scale(t):
        return t * y

    x = x * 3
    _break()
    return scale(x)


@case(graphs=2)
def break_after_lambda(x):
    double = lambda t: t * 2  # noqa: E731
    x = x.sin()
    _break()
    return double(x)


@case(graphs=2)
def break_after_bound_method(x):
    forward = ML[0].forward
    x = x.cos()
    _break()
    return forward(x)


@case(graphs=2)
def break_after_partial(x):
    add = functools.partial(torch.add, alpha=2)
    x = x.exp()
    _break()
    return add(x, x)


@case(graphs=2)
def break_after_list_of_new_modules(x):
    acts = [nn.ReLU(), nn.Sigmoid()]
    x = x * 4
    _break()
    for act in acts:
        x = act(x)
    return x


@case(graphs=2)
def break_after_dict_of_new_modules(x):
    acts = {"first": nn.Tanh(), "second": nn.ReLU()}
    x = x * 5
    _break()
    return acts["second"](acts["first"](x))


@case(graphs=3)
def break_twice_with_new_module(x):
    act = nn.LeakyReLU(0.1)
    x = x * 2
    _break()
    x = act(x)
    _break()
    return act(x) + 1


@case(graphs=2)
def break_after_building_in_loop_body(x):
    acts = nn.ModuleList([nn.ReLU(), nn.Tanh()])
    x = x + 2
    _break()
    return acts[1](acts[0](x))


BROKEN_LINEAR_SEED = 3


def _linear_made_in_frame(x):
    torch.manual_seed(BROKEN_LINEAR_SEED)
    layer = nn.Linear(4, 4)  # makes parameters: the frame breaks here (torch traces the constructor)
    return layer(x)


def test_module_with_parameters_made_in_frame_settles():
    """A module whose constructor makes parameters is built by a graph break; the rest of the frame
    receives it as a new object on each call and must not compile again (guards by type and
    structure, parameters as graph inputs)."""
    compiled = optimize(CompileCounter())(_linear_made_in_frame)
    x = rand(2, 4)
    for call in range(3):
        before = frames_compiled()
        assert_equal(compiled(x), _linear_made_in_frame(x))
        if call:
            assert frames_compiled() == before


# ---------------------------------------------------------------------------------------------
# torch.distributions objects and parameters made inside the compiled region
# ---------------------------------------------------------------------------------------------
D = torch.distributions


@case()
def normal_log_prob(x):
    return D.Normal(torch.zeros(4), torch.ones(4), validate_args=False).log_prob(x)


@case()
def normal_log_prob_from_input(x):
    return D.Normal(x.mean(0), x.std(0) + 1, validate_args=False).log_prob(x)


@case()
def normal_entropy(x):
    return D.Normal(x, x.abs() + 1, validate_args=False).entropy()


@case()
def normal_mean_stddev(x):
    dist = D.Normal(x, x.abs() + 0.5, validate_args=False)
    return dist.mean + dist.stddev + dist.variance


@case()
def normal_scalar_scale(x):
    return D.Normal(x, 2.0, validate_args=False).log_prob(x * 0.5)


@case()
def normal_cdf(x):
    return D.Normal(torch.zeros(4), torch.ones(4), validate_args=False).cdf(x)


@case()
def categorical_log_prob(x):
    return D.Categorical(logits=x, validate_args=False).log_prob(torch.tensor([0, 3]))


@case()
def categorical_entropy(x):
    return D.Categorical(logits=x, validate_args=False).entropy()


@case()
def categorical_probs(x):
    return D.Categorical(logits=x, validate_args=False).probs


@case()
def bernoulli_log_prob(x):
    return D.Bernoulli(logits=x, validate_args=False).log_prob((x > 0).float())


@case()
def bernoulli_entropy(x):
    return D.Bernoulli(logits=x, validate_args=False).entropy()


@case()
def uniform_log_prob(x):
    return D.Uniform(x - 1, x + 1, validate_args=False).log_prob(x)


@case()
def laplace_log_prob(x):
    return D.Laplace(x, x.abs() + 1, validate_args=False).log_prob(x * 2)


@case()
def distribution_batch_shape(x):
    dist = D.Normal(x, x.abs() + 1, validate_args=False)
    return x * len(dist.batch_shape)


@case(graphs=2)
def parameter_from_tensor(x):
    p = nn.Parameter(x * 2)
    return p + 1


@case(graphs=2)
def parameter_frozen(x):
    p = nn.Parameter(torch.ones(4), requires_grad=False)
    return x * p


# ---------------------------------------------------------------------------------------------
# more of the module tree, slices and hooks
# ---------------------------------------------------------------------------------------------
class TiedHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(6, 4)
        self.out = nn.Linear(4, 6, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, ids):
        return self.out(self.embed(ids))


TIED = _seeded(TiedHead)
IDS = torch.tensor([[0, 3, 5], [1, 2, 4]])


@case((IDS,))
def tied_weights_forward(ids):
    return TIED(ids)


@case((IDS,))
def tied_weights_parameter_count(ids):
    return TIED(ids), len(list(TIED.parameters()))


@case()
def apply_layers_from_named_children(x):
    layers = dict(NET.named_children())
    return layers["head"](layers["embed"](x))


@case()
def modules_skip_containers(x):
    for m in SEQ.modules():
        if not isinstance(m, nn.Sequential):
            x = m(x)
    return x


@case()
def parameters_norm(x):
    return x * torch.stack([p.norm() for p in SEQ.parameters()]).sum()


@case()
def named_parameters_filter_bias(x):
    return x + sum(p.sum() for name, p in SEQ.named_parameters() if "bias" in name)


@case()
def slice_with_negative_step_bounds(x):
    for layer in ML[3:0:-1]:
        x = layer(x)
    return x


@case()
def slice_sequential_negative_stop(x):
    return SEQ[:-1](x)


@case()
def slice_twice_same_frame(x):
    return ML[:1][0](x) + ML[:1][0](x * 2)


@case()
def hook_module_in_modulelist(x):
    for layer in nn.ModuleList([H_DOUBLE, H_PRE]):
        x = layer(x)
    return x


@case()
def hook_and_slice(x):
    for layer in H_IN_SEQ[:2]:
        x = layer(x)
    return x


@case()
def static_forward_in_slice(x):
    return M_STATIC_SEQ.body[1:](x)


@case()
def getattr_module_in_sequential(x):
    return nn.Sequential(M_GETATTR, nn.ReLU())(x)


@case()
def build_relu_inplace_flag(x):
    act = nn.ReLU(inplace=False)
    return act(x) * 2 if not act.inplace else x


# ---------------------------------------------------------------------------------------------
# more parameter-free modules made in the region, containers of them, identity of modules
# ---------------------------------------------------------------------------------------------
@case()
def build_hardswish(x):
    return nn.Hardswish()(x)


@case()
def build_mish(x):
    return nn.Mish()(x)


@case()
def build_relu6(x):
    return nn.ReLU6()(x * 4)


@case()
def build_softsign(x):
    return nn.Softsign()(x)


@case()
def build_tanhshrink(x):
    return nn.Tanhshrink()(x)


@case()
def build_threshold(x):
    return nn.Threshold(0.1, -1.0)(x)


@case()
def build_glu(x):
    return nn.GLU(dim=-1)(x)


@case()
def build_softmin(x):
    return nn.Softmin(dim=1)(x)


@case()
def build_celu(x):
    return nn.CELU(alpha=0.7)(x)


@case()
def build_selu(x):
    return nn.SELU()(x)


@case()
def build_hardsigmoid(x):
    return nn.Hardsigmoid()(x)


@case()
def build_logsigmoid(x):
    return nn.LogSigmoid()(x)


@case()
def build_sequential_kwargs_free_call_twice(x):
    body = nn.Sequential(nn.Softsign(), nn.Tanh())
    return body(x) + body(x * 2)


@case()
def build_moduledict_of_new(x):
    acts = nn.ModuleDict({"a": nn.ReLU(), "b": nn.Tanh()})
    return acts["b"](acts["a"](x))


@case()
def build_sequential_len(x):
    return x * len(nn.Sequential(nn.ReLU(), nn.ReLU(), nn.Tanh()))


@case()
def build_sequential_slice(x):
    return nn.Sequential(nn.ReLU(), nn.Tanh(), nn.Sigmoid())[1:](x)


@case()
def module_in_tuple(x):
    return x * 2 if ML[1] in (ML[0], ML[1]) else x - 1


@case()
def hook_output_tuple_then_index(x):
    return H_TUPLE(x)[0] + 1


@case()
def slice_loop_with_break_condition(x):
    for i, layer in enumerate(ML[:3]):
        if i == 2:
            break
        x = layer(x)
    return x


@case()
def slice_sum_outputs(x):
    return sum(layer(x) for layer in ML[1:])


# ---------------------------------------------------------------------------------------------
# the module tree's methods with their arguments
# ---------------------------------------------------------------------------------------------
@case()
def parameters_not_recursive(x):
    return x * len(list(NET.parameters(recurse=False))) + len(list(NET.embed.parameters(False)))


@case()
def named_parameters_prefix(x):
    return x * 2, [name for name, _ in NET.head.named_parameters(prefix="head")]


@case()
def named_parameters_keep_duplicates(x):
    return x * 2, [name for name, _ in SHARED.named_parameters(remove_duplicate=False)]


@case()
def named_buffers_not_recursive(x):
    return x * 2, [name for name, _ in NET.named_buffers(recurse=False)]


@case()
def buffers_recursive_positional(x):
    return x + sum(b.sum() for b in NET.buffers(True))


@case()
def named_modules_prefix(x):
    return x * 2, [name for name, _ in NET.layers.named_modules(prefix="layers")]


@case()
def named_modules_keep_duplicates(x):
    return x * 2, [name for name, _ in SHARED.named_modules(remove_duplicate=False)]


@case()
def named_parameters_prefix_not_recursive(x):
    return x * 2, [name for name, _ in NET.named_parameters("net", False)]


CONV_T1 = _seeded(lambda: nn.ConvTranspose1d(2, 2, 3, stride=2))
CONV_T2 = _seeded(lambda: nn.ConvTranspose2d(2, 2, 3, stride=2))


@case((rand(1, 2, 5),))
def conv_transpose_1d_with_output_size(x):
    return CONV_T1(x, output_size=[12])  # torch.nn.modules.utils._single, traced into


@case((rand(1, 2, 4, 4),))
def conv_transpose_2d_with_output_size(x):
    return CONV_T2(x, output_size=(10, 10))


# ---------------------------------------------------------------------------------------------
# ModuleDict's keys(), values() and items(): views of its _modules (peft's LoRA layers ask
# `adapter in self.lora_A.keys()` on every call)
# ---------------------------------------------------------------------------------------------
@case()
def moduledict_key_in_keys(x):
    keys = MD.keys()
    return MD["a"](x) if "a" in keys and "z" not in keys else x


@case()
def moduledict_len_of_views(x):
    return x * (len(MD.keys()) + len(MD.values()) + len(MD.items()))


@case()
def moduledict_loop_over_items_skipping(x):
    names = MD.keys()
    for name in ["c", "q", "a"]:
        if name not in names:
            continue
        x = MD[name](x)
    return x


@case()
def moduledict_items_unpacked(x):
    return [name for name, _ in MD.items()], sum(m(x) for m in MD.values())


@case()
def moduledict_keys_as_list(x):
    return x * 2, list(MD.keys()), sorted(MD.keys())


# ---------------------------------------------------------------------------------------------
# attributes a module lacks (Module.__getattr__'s AttributeError, raised and caught in the trace),
# through a __getattr__ of the class's own (diffusers' ModelMixin reads its config this way), and
# tree walks over entries that `module.name` would not reach
# ---------------------------------------------------------------------------------------------
class ConfigGetattr(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_in = nn.Linear(4, 4)
        self.block = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self._internal_dict = {"scale": 2.0}

    def __getattr__(self, name):
        in_config = "_internal_dict" in self.__dict__ and name in self.__dict__["_internal_dict"]
        if in_config and name not in self.__dict__:
            return self.__dict__["_internal_dict"][name]
        return super().__getattr__(name)


class ShadowedChild(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)

    fc = property(lambda self: self._modules["head"])  # `m.fc` is not the `fc` entry of _modules


CONFIG_GETATTR = _seeded(ConfigGetattr)
SHADOWED_CHILD = _seeded(ShadowedChild)


@case()
def hasattr_missing_through_own_getattr(x):
    return x * 2 if hasattr(CONFIG_GETATTR, "_hf_hook") else x - 1


@case()
def hasattr_config_entry_through_own_getattr(x):
    return x * CONFIG_GETATTR.scale if hasattr(CONFIG_GETATTR, "scale") else x - 1


@case()
def hasattr_submodule_through_own_getattr(x):
    return CONFIG_GETATTR.conv_in(x) if hasattr(CONFIG_GETATTR, "conv_in") else x


@case()
def getattr_default_through_own_getattr(x):
    hook = getattr(CONFIG_GETATTR, "_diffusers_hook", None)
    return x + 1 if hook is None else x


@case()
def missing_attribute_caught(x):
    try:
        return NET.not_an_attribute(x)
    except AttributeError as e:
        return x + len(str(e))


@case()
def missing_attribute_through_own_getattr_caught(x):
    try:
        CONFIG_GETATTR.not_an_attribute
    except AttributeError:
        return x * 3
    return x


@case()
def hasattr_missing_on_plain_module(x):
    return x * 2 if hasattr(NET, "not_an_attribute") else x + 2


@case()
def named_modules_through_own_getattr(x):
    names = [name for name, _ in CONFIG_GETATTR.named_modules()]
    return x * len(names), names


@case()
def parameters_through_own_getattr(x):
    return x + sum(p.sum() for p in CONFIG_GETATTR.parameters())


@case()
def dtype_walk_through_own_getattr(x):
    for _, sub in CONFIG_GETATTR.named_modules():
        if not hasattr(sub, "_hook"):
            for p in sub.parameters(recurse=False):
                return x.to(p.dtype) * 2
    return x


@case()
def children_past_a_shadowing_property(x):
    return x * 2, [name for name, _ in SHADOWED_CHILD.named_children()]


@case()
def parameters_past_a_shadowing_property(x):
    return x + sum(p.sum() for p in SHADOWED_CHILD.parameters()), SHADOWED_CHILD.fc(x)


def test_hasattr_through_own_getattr_sees_what_changes_later():
    m = _seeded(ConfigGetattr)

    def fn(x):
        return x * 2 if hasattr(m, "hook") else x - 1

    compiled = optimize(CompileCounter())(fn)
    x = rand(2, 4)
    for change in [lambda: None, lambda: setattr(m, "hook", 1), lambda: delattr(m, "hook"),
                   lambda: m._internal_dict.update(hook=0), lambda: m._internal_dict.clear(),
                   lambda: m.register_buffer("hook", torch.ones(1)), lambda: delattr(m, "hook"),
                   lambda: m.add_module("hook", nn.ReLU())]:
        change()
        assert_equal(compiled(x), fn(x))


def test_missing_module_attribute_raises_what_eager_raises():
    def read(x):
        return CONFIG_GETATTR.not_an_attribute + x

    with pytest.raises(AttributeError) as expected:
        read(rand(2, 4))
    with pytest.raises(AttributeError) as got:
        optimize(CompileCounter())(read)(rand(2, 4))
    assert str(got.value) == str(expected.value)


# ---------------------------------------------------------------------------------------------
# the table of functions above
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(CASES))
def test_module_function(name):
    fn, input_sets, graphs = CASES[name]
    assert_same(fn, *input_sets, graphs=graphs, nopython=graphs == 1)
