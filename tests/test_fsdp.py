"""FSDP2 (`fully_shard`, CPU, 2 gloo processes on 127.0.0.1) with compiled layers or a compiled root:
FSDP's hooks run, losses and parameters equal an eager FSDP2 run, at most one graph per layer plus two."""
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

# Multi-process runs of about 30 s: `make test-slow`, kept out of `make test`'s 10 minutes.
pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("fsdp_worker.py")
CASES = [("per_layer", "eager"), ("per_layer", "cpp"), ("whole", "eager"), ("whole", "cpp")]
LAYERS = 4


@pytest.fixture(scope="module")
def results():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = subprocess.run([sys.executable, str(WORKER), str(port), json.dumps(CASES)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return {tuple(r["case"]): r for r in map(json.loads, done.stdout.splitlines()) if r}


@pytest.mark.parametrize("case", CASES, ids=["-".join(c) for c in CASES])
def test_compiled_fsdp2_trains_like_eager_fsdp2(results, case):
    result = results[case]
    for eager_loss, compiled_loss in result["losses"]:
        assert compiled_loss == pytest.approx(eager_loss, rel=1e-5, abs=1e-7)
    assert result["equal"]
    assert 1 <= result["graphs"] <= LAYERS + 2
    counts = result["compiled_after_step"]
    assert counts[-1] == counts[-2] == counts[-3], "later identical steps compiled again"
    assert result["fallbacks"] == 0
