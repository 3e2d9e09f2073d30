"""minidynamo's frame hook and torch.compile's in one process: either calling the other, both on one
function, in any order of first use, each returning eager's results and keeping its own cache.
Each case runs in a subprocess with a timeout (the two hooks used to call each other forever)."""
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PRELUDE = textwrap.dedent("""
    import torch, minidynamo
    from torch._dynamo.testing import CompileCounter as TorchCounter

    class MiniCounter:
        def __init__(self):
            self.frame_count = 0
        def __call__(self, gm, example_inputs):
            self.frame_count += 1
            return gm.forward

    def inner(x):
        return x.sin() + 1

    def check(got, want):
        assert torch.equal(got, want), (got, want)

    x = torch.randn(5)
    torch_cnt, mini_cnt = TorchCounter(), MiniCounter()
    tc_inner = torch.compile(inner, backend=torch_cnt)
    md_inner = minidynamo.optimize(mini_cnt)(inner)
    md_calls_tc = minidynamo.optimize(mini_cnt)(lambda x: tc_inner(x) * 2)
    tc_calls_md = torch.compile(lambda x: md_inner(x) * 2, backend=torch_cnt)
""")

# each case: the calls in order, then both caches are checked on their own
CASES = {
    "minidynamo_calls_torch_compiled": "check(md_calls_tc(x), inner(x) * 2)",
    "torch_compiled_used_first_then_called_by_minidynamo":
        "check(tc_inner(x), inner(x)); check(md_calls_tc(x), inner(x) * 2)",
    "torch_compiled_calls_minidynamo": "check(tc_calls_md(x), inner(x) * 2)",
    "minidynamo_used_first_then_called_by_torch_compiled":
        "check(md_inner(x), inner(x)); check(tc_calls_md(x), inner(x) * 2)",
    "both_on_one_function_minidynamo_first": "check(md_inner(x), inner(x)); check(tc_inner(x), inner(x))",
    "both_on_one_function_torch_first": "check(tc_inner(x), inner(x)); check(md_inner(x), inner(x))",
    "each_calling_the_other_in_turn":
        "check(md_calls_tc(x), inner(x) * 2); check(tc_calls_md(x), inner(x) * 2); check(md_calls_tc(x), inner(x) * 2)",
}

CACHES_STILL_WORK = textwrap.dedent("""
    for _ in range(3):
        {calls}
    # each hook alone, on its own function, compiles once and then runs from its cache
    def alone(x):
        return x.cos() * 3
    mini_alone, torch_alone = MiniCounter(), TorchCounter()
    md_alone, tc_alone = minidynamo.optimize(mini_alone)(alone), torch.compile(alone, backend=torch_alone)
    for _ in range(3):
        check(md_alone(x), alone(x))
        check(tc_alone(x), alone(x))
    assert (mini_alone.frame_count, torch_alone.frame_count) == (1, 1), (mini_alone.frame_count, torch_alone.frame_count)
    print("ok")
""")


@pytest.mark.parametrize("case", list(CASES))
def test_both_frame_hooks_in_one_process(case):
    script = PRELUDE + CACHES_STILL_WORK.format(calls=CASES[case])
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case}: did not return in 240 s (the two hooks calling each other)")
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-3000:]
    assert "internal error" not in run.stderr, run.stderr[-3000:]
