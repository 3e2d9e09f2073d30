"""minidynamo.compile (functions and the nn.Module wrapper), logging channels, the command line."""
import copy
import logging
import os
import subprocess
import sys

import pytest
import torch
from torch import nn

import minidynamo
from minidynamo import convert_frame, logs
from minidynamo.__main__ import main as cli_main
from minidynamo.exc import Unsupported
from minidynamo.explain import log_frame
from minidynamo.testing import CompileCounter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def fresh():
    minidynamo.reset()
    yield
    minidynamo.set_logs()
    minidynamo.reset()


def smooth(x):
    return torch.relu(x) * 2 + 1


def branchy(x):
    if x.sum() > 0:
        return x + 1
    return x - 1


def mlp():
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))


# ---------------------------------------------------------------------------------------------
# compile on functions
# ---------------------------------------------------------------------------------------------
def test_compile_function_with_backend():
    counter = CompileCounter()
    compiled = minidynamo.compile(smooth, backend=counter)
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x), smooth(x))
    assert counter.frame_count == 1 and compiled.__name__ == "smooth"


def test_compile_as_decorator_with_and_without_arguments():
    counter = CompileCounter()

    @minidynamo.compile
    def plain(x):
        return x.sin() + 1

    @minidynamo.compile(backend=counter)
    def configured(x):
        return x.cos() * 2

    x = torch.randn(3)
    torch.testing.assert_close(plain(x), x.sin() + 1)
    torch.testing.assert_close(configured(x), x.cos() * 2)
    assert counter.frame_count == 1


def test_fullgraph_raises_on_a_graph_break():
    with pytest.raises(Unsupported, match="data-dependent"):
        minidynamo.compile(branchy, fullgraph=True)(torch.ones(3))
    torch.testing.assert_close(minidynamo.compile(branchy)(torch.ones(3)), torch.ones(3) + 1)


def test_options_must_be_a_dict_and_reach_backends_that_take_them():
    with pytest.raises(TypeError, match="options"):
        minidynamo.compile(smooth, options=["fast"])
    seen = []

    def backend(gm, example_inputs, options=None):
        seen.append(options)
        return gm.forward

    minidynamo.compile(smooth, backend=backend, options={"level": 3})(torch.randn(2))
    assert seen == [{"level": 3}]
    minidynamo.compile(smooth, backend="eager", options={"ignored": True})(torch.randn(2))


@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"])
def test_torch_compile_modes_are_accepted_and_reach_backends_as_options(mode):
    seen = []

    def backend(gm, example_inputs, options=None):
        seen.append(options)
        return gm.forward

    x = torch.randn(3)
    torch.testing.assert_close(minidynamo.compile(smooth, backend=backend, mode=mode)(x), smooth(x))
    assert seen == [minidynamo.compile_api.MODE_OPTIONS[mode] or None]
    for backend_name in ("eager", "cpp"):
        torch.testing.assert_close(minidynamo.compile(smooth, backend=backend_name, mode=mode)(x), smooth(x))


def test_unknown_modes_and_options_are_rejected_like_torch():
    with pytest.raises(RuntimeError, match="Unrecognized mode=fastest, should be one of: default, reduce-overhead"):
        minidynamo.compile(smooth, mode="fastest")
    with pytest.raises(RuntimeError, match="Either mode or options can be specified"):
        minidynamo.compile(smooth, mode="max-autotune", options={"max_autotune": True})
    with pytest.raises(RuntimeError, match="Unexpected optimization option no_such_option, known options are"):
        minidynamo.compile(smooth, backend="cpp", options={"no_such_option": 1})
    with pytest.raises(RuntimeError, match="Unrecognized mode"):  # as a decorator factory too, before any call
        minidynamo.compile(mode="turbo")
    minidynamo.compile(smooth, backend="cpp", options={"max_autotune": True})(torch.randn(2))


def test_dynamic_is_accepted():
    x = torch.randn(3)
    torch.testing.assert_close(minidynamo.compile(smooth, dynamic=True)(x), smooth(x))
    torch.testing.assert_close(minidynamo.compile(smooth, dynamic=False)(x), smooth(x))


# ---------------------------------------------------------------------------------------------
# compile on modules
# ---------------------------------------------------------------------------------------------
def test_module_wrapper_behaves_like_the_original():
    model = mlp()
    compiled = minidynamo.compile(model)
    assert isinstance(compiled, minidynamo.OptimizedModule) and isinstance(compiled, nn.Module)
    assert compiled._orig_mod is model
    assert list(compiled.state_dict()) == list(model.state_dict())
    assert [id(p) for p in compiled.parameters()] == [id(p) for p in model.parameters()]
    assert [n for n, _ in compiled.named_parameters()] == [n for n, _ in model.named_parameters()]
    assert getattr(compiled, "0") is model[0] and compiled.training is model.training  # attribute access

    compiled.eval()
    assert not model.training and not model[0].training and not compiled.training
    compiled.train()
    assert model.training and model[0].training

    compiled.scale = 3  # attributes set on the wrapper land on the original
    assert model.scale == 3
    del compiled.scale
    assert not hasattr(model, "scale")


def test_load_state_dict_plain_and_torch_compile_prefixed():
    model, other = mlp(), mlp()
    compiled = minidynamo.compile(model)
    compiled.load_state_dict(other.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), other.parameters()))
    fresh = mlp()
    compiled.load_state_dict({f"_orig_mod.{k}": v for k, v in fresh.state_dict().items()})
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh.parameters()))


def test_hooks_on_the_original_and_on_the_wrapper_fire():
    model = mlp()
    counter = CompileCounter()
    compiled = minidynamo.compile(model, backend=counter)
    calls = []
    model.register_forward_hook(lambda mod, args, out: calls.append("original"))
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), model(x))
    assert calls == ["original", "original"]
    handle = compiled.register_forward_pre_hook(lambda mod, args: calls.append("wrapper"))
    compiled(x)
    assert calls[2:] == ["wrapper", "original"]
    handle.remove()
    compiled(x)
    assert calls[4:] == ["original"]
    assert counter.frame_count >= 1


def test_module_training_loop_matches_eager_step_by_step():
    torch.manual_seed(0)
    eager = mlp()
    model = copy.deepcopy(eager)
    counter = CompileCounter()
    compiled = minidynamo.compile(model, backend=counter)
    opt_eager = torch.optim.SGD(eager.parameters(), lr=0.05)
    opt_compiled = torch.optim.SGD(compiled.parameters(), lr=0.05)
    data = [(torch.randn(16, 4), torch.randn(16, 1)) for _ in range(20)]
    for step, (x, y) in enumerate(data):
        losses = []
        for net, opt in ((eager, opt_eager), (compiled, opt_compiled)):
            loss = nn.functional.mse_loss(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[1], losses[0], rtol=0, atol=0, msg=f"step {step}")
    assert counter.frame_count == 1  # compiled once, cached for all 20 steps
    for a, b in zip(eager.parameters(), model.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# logging
# ---------------------------------------------------------------------------------------------
def test_logs_off_by_default_and_cost_nothing(capsys):
    assert log_frame not in convert_frame.compile_listeners
    assert not logging.getLogger("minidynamo.graph").isEnabledFor(logging.DEBUG)
    minidynamo.compile(branchy)(torch.ones(3))
    assert "[minidynamo" not in capsys.readouterr().err


def test_set_logs_channels(capsys):
    minidynamo.set_logs("graph,guards,breaks,bytecode,output_code")
    assert log_frame in convert_frame.compile_listeners
    minidynamo.compile(branchy)(torch.ones(3))
    err = capsys.readouterr().err
    for channel in ("graph", "guards", "breaks", "bytecode", "output_code"):
        assert f"[minidynamo.{channel}]" in err, channel
    assert "data-dependent" in err and "if x.sum() > 0" in err  # break with the user's line
    assert "transformed code of branchy" in err

    minidynamo.set_logs(graph=True)
    minidynamo.reset()
    minidynamo.compile(smooth)(torch.ones(3))
    err = capsys.readouterr().err
    assert "[minidynamo.graph]" in err and "[minidynamo.guards]" not in err

    minidynamo.set_logs()
    assert log_frame not in convert_frame.compile_listeners
    assert logs._handler not in logging.getLogger("minidynamo").handlers


def test_set_logs_rejects_unknown_channels():
    with pytest.raises(ValueError, match="unknown log channel"):
        minidynamo.set_logs("graphs")


# ---------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------
SCRIPT = '''
import sys
import torch
import minidynamo

@minidynamo.optimize("eager")
def step(x):
    y = x * 2
    if y.sum() > 0:
        y = y + 1
    return y

print("result", step(torch.ones(3)).tolist(), sys.argv[1:])
'''


def test_cli_explain_reports_each_converted_frame(tmp_path, capsys):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    html = tmp_path / "report.html"
    assert cli_main(["explain", "--html", str(html), str(script), "--flag", "1"]) == 0
    captured = capsys.readouterr()
    assert "result [3.0, 3.0, 3.0] ['--flag', '1']" in captured.out
    assert "step (" in captured.err and "1 break(s)" in captured.err
    assert "script.py:9: a branch on a tensor's value" in captured.err
    assert "__resume_at_" in captured.err
    assert "total: 2 frame(s) converted" in captured.err
    assert html.exists() and "minidynamo explain report" in html.read_text()


def test_cli_help_and_backends(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_main(["--help"])
    assert exit_.value.code == 0
    assert "explain" in capsys.readouterr().out
    assert cli_main(["backends"]) == 0
    assert "cpp" in capsys.readouterr().out.split()


def test_env_var_turns_logs_on(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    result = subprocess.run([sys.executable, "-m", "minidynamo", "explain", str(script)], capture_output=True,
                            text=True, cwd=ROOT, env={**os.environ, "MINIDYNAMO_LOGS": "breaks"}, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "[minidynamo.breaks] graph break in step" in result.stderr
    assert "[minidynamo.graph]" not in result.stderr
