"""A compiled model inside DistributedDataParallel (2 gloo processes on 127.0.0.1): its graph is
compiled in parts, one per DDP gradient bucket, and training matches an eager DDP run."""
import pytest

from benchmarks import ddp_worker

# Multi-process runs of about 30 s: `make test-slow`, kept out of `make test`'s 10 minutes.
pytestmark = pytest.mark.slow

SMALL = dict(width=64, layers=6, bucket_cap_mb=0.02, batch=8, steps=4)  # two layers fill a bucket
# DDP's default caps: a 1 MiB first bucket (the last layer alone), then 25 MiB (all the rest).
DEFAULT_CAPS = dict(width=512, layers=4, bucket_cap_mb=None, batch=8, steps=3)
CASES = {
    "cpp, compile(DDP(model))": (dict(SMALL, backend="cpp", wrap="compile_outside"), 3),
    "eager, DDP(compile(model))": (dict(SMALL, backend="eager", wrap="compile_inside"), 3),
    "cpp, DDP(compile(model))": (dict(SMALL, backend="cpp", wrap="compile_inside"), 3),
    "cpp, default caps (uneven first bucket)": (dict(DEFAULT_CAPS, backend="cpp", wrap="compile_outside"), 2),
    "cpp, optimize_ddp off": (dict(SMALL, backend="cpp", wrap="compile_outside", optimize_ddp=False), 1),
}


@pytest.fixture(scope="module")
def results():
    return ddp_worker.run([spec for spec, _ in CASES.values()], timeout=300)


@pytest.mark.parametrize("case", list(CASES))
def test_compiled_ddp_trains_like_eager_ddp_in_one_part_per_bucket(results, case):
    spec, parts = CASES[case]
    result = results[list(CASES).index(case)]
    assert result["spec"] == spec
    assert result["equal"], "parameters differ from the eager DDP run's"
    for eager_loss, compiled_loss in result["losses"]:
        assert compiled_loss == pytest.approx(eager_loss, rel=1e-5, abs=1e-7)
    assert len(result["parts"]) == parts
    assert sum(result["parts"]) == 2 * spec["layers"]  # every op in exactly one part
    assert result["compiled"] == 1 and result["fallbacks"] == 0
