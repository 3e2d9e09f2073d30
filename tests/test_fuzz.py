"""The differential fuzzer in the suite: a fixed set of random programs and mutation sequences must match eager
on every call, and the fuzzer itself must catch a wrong result, a leaked flag and a changed global."""
import os
import runpy
import time

import pytest
import torch

from fuzz import generate, repro, run_and_record, runtime
from fuzz.families import FAMILIES
from fuzz.generator import ALL_FAMILIES, KNOWN_OPEN, Gen

# A fixed case set (about half a minute here; `make fuzz` runs many more); the features of known open bugs are left out (generator.KNOWN_OPEN).
SUITE_SEED = 0
SUITE_CASES = int(os.environ.get("MINIDYNAMO_FUZZ_CASES", "150"))

_PROGRAM = """
import torch

SCALE = 2.0


def f(a, b, s, lst):
    global SCALE
    SCALE = SCALE + 1
    return a * 2 + b
"""
_CALL = ("call", "((T(1, (3, 4)), T(2, (3, 4)), 1, []), {})")


def test_fuzz_cases_match_eager(tmp_path):
    started = time.time()
    failures = []
    for seed in range(SUITE_SEED, SUITE_SEED + SUITE_CASES):
        failure = run_and_record(generate(seed, skip=tuple(KNOWN_OPEN)), str(tmp_path))
        if failure is not None and not failure.shared:
            failures.append(f"seed {seed}: {failure.message}\n    repro: {failure.path}")
    assert not failures, f"{len(failures)} of {SUITE_CASES} fuzz cases differ from eager:\n" + "\n".join(failures)
    print(f"{SUITE_CASES} fuzz cases in {time.time() - started:.0f} s")


def _offset_outputs(gm, example_inputs):
    def run(*args):
        return [out + 1 if isinstance(out, torch.Tensor) and out.is_floating_point() else out for out in gm(*args)]
    return run


def _leave_grad_off(gm, example_inputs):
    def run(*args):
        outs = gm(*args)
        torch.set_grad_enabled(False)
        return outs
    return run


@pytest.mark.parametrize("backend, what", [(_offset_outputs, "result"), (_leave_grad_off, "torch state")])
def test_fuzzer_catches_a_wrong_backend(backend, what):
    with pytest.raises(runtime.Mismatch) as caught:
        runtime.run_case(_PROGRAM, [_CALL, _CALL], backend=backend)
    assert caught.value.what == what and caught.value.step == 0
    assert torch.is_grad_enabled(), "run_case restores the global state it found"


def _outcome(result=None, args=(), error=None):
    return runtime.Outcome(args, {}, result, error, "", runtime.torch_state())


@pytest.mark.parametrize("eager, compiled, namespaces, what", [
    (dict(result=-0.0), dict(result=0.0), ({}, {}), "result"),
    (dict(result=(True,)), dict(result=(1,)), ({}, {}), "result"),
    (dict(result=[1, 2]), dict(result=[1, 2]), ({"G": 1}, {"G": 2}), "globals"),
    (dict(args=(torch.ones(2),)), dict(args=(torch.zeros(2),)), ({}, {}), "args"),
    (dict(result=[torch.ones(2), torch.ones(2)]), dict(result=[torch.ones(2)] * 2), ({}, {}), "result"),
    (dict(error=ValueError()), dict(error=TypeError()), ({}, {}), "exception"),
    (dict(result=torch.ones(2, 2)), dict(result=torch.ones(2, 2).t()), ({}, {}), "result"),
])
def test_comparison_sees_each_kind_of_difference(eager, compiled, namespaces, what):
    import types
    spaces = []
    for content in namespaces:
        ns = types.ModuleType("fuzzprog")
        ns.__dict__.update(content)
        spaces.append(ns)
    with pytest.raises(runtime.Mismatch) as caught:
        runtime.compare_call(0, _outcome(**eager), _outcome(**compiled), *spaces, exact=True)
    assert caught.value.what == what
    runtime.compare_call(0, _outcome(**eager), _outcome(**eager), spaces[0], spaces[0], exact=True)


def test_every_template_renders_to_valid_python():
    gen = Gen(__import__("random").Random(0), (2, 3), module_target=True)
    for family in ALL_FAMILIES:
        FAMILIES[family](gen)
    for family, makers in gen.body_makers.items():
        for make in makers:
            block = make()
            compile("def f(a, b, s, lst):\n" + "\n".join("    " + line for line in block.code.splitlines()),
                    block.tag, "exec")
    for mutate in gen.mutators:
        kind, code, tag = mutate()
        compile(code, tag, "exec")
    assert {tag.split(":")[0] for tag in (m()[2] for m in gen.mutators)} >= {"globals", "modules", "objects", "torch_state"}


def test_cases_are_deterministic_per_seed():
    for seed in (1, 17, 123):
        first, again = generate(seed), generate(seed)
        assert (first.program(), first.steps, first.backend) == (again.program(), again.steps, again.backend)
    assert generate(1).program() != generate(2).program()


def test_repro_script_runs_standalone(tmp_path, capsys):
    case = generate(SUITE_SEED, skip=tuple(KNOWN_OPEN))
    path = repro.write(case, str(tmp_path))
    with open(path) as f:
        source = f.read()
    assert "fuzz" not in {line.split()[1].split(".")[0] for line in source.splitlines() if line.startswith(("import ", "from "))}
    runpy.run_path(path, run_name="__main__")
    assert "PASS" in capsys.readouterr().out
